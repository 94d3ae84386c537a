//! Limits of a scenario file: its size, the scenario's name, the ranges of the numbers a real system
//! can use, and the files it names in the results directory (a log task's file). Each complaint names
//! the range or the rule, so that the fix is obvious.

use std::collections::BTreeMap;

use crate::file::{RawScenario, RawTask, RawWork};

use super::Validator;

/// Largest scenario file read (bytes).
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// Longest scenario name (it names the results directory and the shared memory).
pub const MAX_SCENARIO_NAME: usize = 48;
/// Longest run: 30 days.
pub const MAX_DURATION_S: f64 = 30.0 * 24.0 * 3600.0;
/// Shortest run: 1 ms.
pub const MIN_DURATION_S: f64 = 1e-3;
/// Longest period, watchdog time or frame timeout: 1 hour, in microseconds.
pub const MAX_PERIOD_US: u64 = 3_600_000_000;
/// Largest count of cycles (an injection's start and length) and watchdog sensitivity.
pub const MAX_CYCLES: u64 = 1_000_000_000_000;
/// Largest angle of a trajectory, in degrees (100 turns).
pub const MAX_DEG: f64 = 36_000.0;
/// Longest scenario description (bytes): it is copied into results.json, report.html and the history.
pub const MAX_DESCRIPTION: usize = 4096;

/// A number as a person reads it: exponent notation when it is huge or tiny.
fn short(v: f64) -> String {
    if v != 0.0 && !(1e-6..1e9).contains(&v.abs()) { format!("{v:e}") } else { format!("{v}") }
}

/// Why `name` cannot name a scenario (`None`: it can): like a task name, letters, digits, '_' and '-'.
pub fn scenario_name_problem(name: &str) -> Option<String> {
    if name.is_empty()
        || name.len() > MAX_SCENARIO_NAME
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        let shown: String = name.chars().take(40).collect();
        let more = if name.chars().count() > 40 {
            format!("... ({} characters)", name.chars().count())
        } else {
            String::new()
        };
        return Some(format!(
            "scenario name {shown:?}{more} must be 1 to {MAX_SCENARIO_NAME} letters, digits, '_' or '-'"
        ));
    }
    None
}

/// A scenario name made from a file's stem: the characters a name may hold, cut to the longest name.
pub fn name_from_stem(stem: &str) -> String {
    let n: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .take(MAX_SCENARIO_NAME)
        .collect();
    if n.is_empty() { "scenario".into() } else { n }
}

impl Validator<'_> {
    /// `v` must lie in `lo..=hi` (integers).
    fn int_range(&mut self, path: &str, v: u64, lo: u64, hi: u64, unit: &str, example: &str) {
        if v < lo || v > hi {
            self.err(path, format!("{v}{unit} is out of range: it must be {lo}..={hi}{unit}"), example.to_string());
        }
    }

    /// `v` must be finite and lie in `lo..=hi` (above `lo` when `open_lo`).
    fn float_range(&mut self, path: &str, v: f64, (lo, open_lo): (f64, bool), hi: f64, unit: &str, example: &str) {
        let low_ok = if open_lo { v > lo } else { v >= lo };
        if v.is_finite() && low_ok && v <= hi {
            return;
        }
        let range =
            if open_lo { format!("above {lo}{unit} and at most {hi}{unit}") } else { format!("{lo}..={hi}{unit}") };
        self.err(path, format!("{}{unit} is out of range: it must be {range}", short(v)), example.to_string());
    }

    /// Ranges of every number in the file that the rest of the validation does not bound already.
    pub(super) fn check_ranges(&mut self, raw: &RawScenario) {
        if let Some(d) = &raw.description {
            if d.len() > MAX_DESCRIPTION {
                self.err(
                    "description",
                    format!("{} bytes long: at most {MAX_DESCRIPTION}", d.len()),
                    "shorten it (a line or a paragraph)",
                );
            }
            // C0 and C1 controls (ESC, the 8-bit CSI) would reach terminals and documents; lines and tabs may stay.
            if let Some(c) = d.chars().find(|c| c.is_control() && !matches!(c, '\n' | '\t')) {
                self.err(
                    "description",
                    format!("holds the control character U+{:04X}", u32::from(c)),
                    "remove it: a description is plain text",
                );
            }
        }
        // A duration of 0 or less has its own complaint.
        if raw.duration_s > 0.0 {
            self.float_range(
                "duration_s",
                raw.duration_s,
                (MIN_DURATION_S, false),
                MAX_DURATION_S,
                " s",
                "duration_s = 10 (1 ms to 30 days)",
            );
        }
        for (tname, t) in &raw.tasks {
            self.task_ranges(tname, t);
        }
        if let Some(e) = &raw.ethercat {
            if let Some(t) = e.timeout_us {
                self.int_range("ethercat.timeout_us", t, 1, MAX_PERIOD_US, " us", "timeout_us = 900");
            }
            if let Some(n) = e.simulated {
                self.int_range("ethercat.simulated", u64::from(n), 1, 1024, " devices", "simulated = 3");
            }
            if let Some(d) = e.drop_after {
                self.int_range("ethercat.drop_after", d, 1, MAX_CYCLES, " frames", "drop_after = 1000");
            }
        }
        for (n, s) in &raw.signals {
            for (f, v) in [("min", s.min), ("max", s.max)] {
                if let Some(v) = v
                    && !v.is_finite()
                {
                    self.err(&format!("signals.{n}.{f}"), format!("{v} is not a finite number"), "give a number");
                }
            }
        }
    }

    /// Ranges of a task's numbers: period, watchdog, budget, and its workload's.
    fn task_ranges(&mut self, tname: &str, t: &RawTask) {
        let p = format!("tasks.{tname}");
        if t.period_us > 0 {
            self.int_range(
                &format!("{p}.period_us"),
                t.period_us,
                1,
                MAX_PERIOD_US,
                " us",
                "period_us = 1000 (1 us to 1 h)",
            );
        }
        if let Some(w) = &t.watchdog
            && w.time_us > 0
        {
            self.int_range(
                &format!("{p}.watchdog.time_us"),
                w.time_us,
                1,
                MAX_PERIOD_US,
                " us",
                "time_us = the period, e.g. 1000",
            );
            self.int_range(
                &format!("{p}.watchdog.sensitivity"),
                u64::from(w.sensitivity),
                1,
                1_000_000,
                "",
                "sensitivity = 3",
            );
        }
        if let Some(b) = t.budget_us {
            self.float_range(&format!("{p}.budget_us"), b, (0.0, false), MAX_PERIOD_US as f64, " us", "budget_us = 50");
        }
        self.workload_ranges(&p, &t.workload);
    }

    /// Ranges of a workload's numbers (at `p`, the task's path).
    fn workload_ranges(&mut self, p: &str, work: &RawWork) {
        let hour = MAX_PERIOD_US as f64;
        match work {
            RawWork::Spin { us, inject } => {
                self.float_range(&format!("{p}.workload.us"), *us, (0.0, false), hour, " us", "us = 50");
                if let Some(i) = inject {
                    let ip = format!("{p}.workload.inject");
                    self.float_range(&format!("{ip}.us"), i.us, (0.0, false), hour, " us", "us = 500");
                    self.int_range(&format!("{ip}.at_cycle"), i.at_cycle, 0, MAX_CYCLES, "", "at_cycle = 100");
                    self.int_range(&format!("{ip}.cycles"), i.cycles, 1, MAX_CYCLES, "", "cycles = 1");
                }
            }
            RawWork::Drive { us, .. } => {
                self.float_range(&format!("{p}.workload.us"), *us, (0.0, false), hour, " us", "us = 20");
            }
            RawWork::Scribble { at_cycle, cycles, .. } => {
                let w = format!("{p}.workload");
                self.int_range(&format!("{w}.at_cycle"), *at_cycle, 0, MAX_CYCLES, "", "at_cycle = 100");
                self.int_range(&format!("{w}.cycles"), *cycles, 1, MAX_CYCLES, "", "cycles = 1");
            }
            RawWork::Trajectory { from_deg, to_deg, move_s } => {
                for (f, v) in [("from_deg", from_deg), ("to_deg", to_deg)] {
                    self.float_range(&format!("{p}.workload.{f}"), *v, (-MAX_DEG, false), MAX_DEG, " deg", "e.g. 90");
                }
                self.float_range(
                    &format!("{p}.workload.move_s"),
                    *move_s,
                    (0.0, true),
                    MAX_DURATION_S,
                    " s",
                    "move_s = 2",
                );
            }
            _ => {}
        }
    }

    /// The files the scenario names in the results directory: each a valid relative name that is not one
    /// of rtcell's own outputs, and no file written by two tasks.
    pub(super) fn check_output_files(&mut self, raw: &RawScenario) {
        let mut writers: BTreeMap<String, &str> = BTreeMap::new();
        for (tname, t) in &raw.tasks {
            let RawWork::Log { file, .. } = &t.workload else { continue };
            let path = format!("tasks.{tname}.workload.file");
            if let Some(why) = rtcell_host::outdir::check_relative(file) {
                let shown: String = file.chars().take(60).collect();
                self.err(
                    &path,
                    format!("log file {shown:?}: {why}"),
                    "file = \"motion.log\" (inside the results directory)",
                );
                continue;
            }
            // One file, one writer (names compared as the file system may: without case).
            if let Some(prev) = writers.insert(file.to_ascii_lowercase(), tname) {
                self.err(
                    &path,
                    format!("task {prev:?} already writes log file {file:?} (two writers on one file)"),
                    "give each log task its own file",
                );
            }
        }
        // A file cannot also be a directory of another file (`logs` and `logs/b.log`).
        for (file, tname) in &writers {
            let inside = format!("{file}/");
            if let Some((other, _)) = writers.range(inside.clone()..).next().filter(|(o, _)| o.starts_with(&inside)) {
                self.err(
                    &format!("tasks.{tname}.workload.file"),
                    format!("log file {file:?} is also the directory of log file {other:?}"),
                    "give the log a name that is not a directory of another log, e.g. add .log",
                );
            }
        }
    }
}

/// Why `path` is not a shared object this machine can load (`None`: it is one): the ELF magic, a
/// 64-bit little-endian shared object (ET_DYN) for this machine's architecture.
pub fn shared_object_problem(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 20];
    let read = std::fs::File::open(path).and_then(|f| {
        let mut n = 0;
        let mut f = f.take(head.len() as u64);
        loop {
            match f.read(&mut head[n..])? {
                0 => return Ok(n),
                k => n += k,
            }
        }
    });
    let n = match read {
        Ok(n) => n,
        Err(e) => return Some(format!("cannot be read: {e}")),
    };
    const MACHINE: u16 = if cfg!(target_arch = "aarch64") { 183 } else { 62 };
    let what = if n < head.len() || head[..4] != *b"\x7fELF" {
        "is not an ELF file".to_string()
    } else if head[4] != 2 || head[5] != 1 {
        "is not a 64-bit little-endian ELF file".to_string()
    } else if u16::from_le_bytes([head[16], head[17]]) != 3 {
        "is an ELF file but not a shared object (ET_DYN)".to_string()
    } else if u16::from_le_bytes([head[18], head[19]]) != MACHINE {
        format!("is a shared object for another machine (e_machine {})", u16::from_le_bytes([head[18], head[19]]))
    } else {
        return None;
    };
    Some(what)
}

/// The complaint about a scenario of `len` bytes, if it is over [`MAX_FILE_BYTES`].
pub(super) fn too_large(len: usize) -> Option<crate::file::Diag> {
    (len > MAX_FILE_BYTES).then(|| {
        crate::file::Diag::new(
            None,
            "",
            format!("the scenario file is larger than {MAX_FILE_BYTES} bytes (1 MiB), the most rtcell reads"),
            "a scenario is a short text: check that this is the right file",
        )
    })
}

/// The text of the scenario file at `path`, reading at most [`MAX_FILE_BYTES`] + 1 bytes.
pub(super) fn read_capped(path: &std::path::Path) -> Result<String, crate::file::Diag> {
    use std::io::Read;
    let cannot = |e: std::io::Error| {
        crate::file::Diag::new(None, "", format!("cannot read the scenario: {e}"), "check the path")
    };
    let f = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    f.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if let Some(d) = too_large(bytes.len()) {
        return Err(d);
    }
    String::from_utf8(bytes).map_err(|e| {
        crate::file::Diag::new(None, "", format!("the scenario is not UTF-8 text ({e})"), "save it as UTF-8 text")
    })
}
