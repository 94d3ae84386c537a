//! Debian's cyclictest (package rt-tests), run on the same CPU with the same period and priority as
//! rtcell's own measurement, in rounds that alternate with it. Its histogram file and JSON document are
//! read back (and must agree with each other), and the rounds merged into one distribution.

use std::path::{Path, PathBuf};
use std::process::Command;

use rtcell_report::{Histogram, Kind, Series, Stats, Unit};

use super::histfile::{self, ParsedColumn};
use crate::BenchError;

/// How to get cyclictest where it is missing.
pub const INSTALL_HINT: &str = "apt-get install rt-tests (or run scripts/setup as root)";

/// The cyclictest binary on PATH, with its version line (e.g. "cyclictest V 2.40"); an error that says
/// how to install it, or why the one found cannot be used.
pub fn find() -> Result<(PathBuf, String), String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let bin = std::env::split_paths(&path)
        .map(|d| d.join("cyclictest"))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("--vs cyclictest: cyclictest is not installed (not on PATH): {INSTALL_HINT}"))?;
    // It prints its usage, version first, on standard error.
    let out = Command::new(&bin)
        .arg("--help")
        .output()
        .map_err(|e| format!("--vs cyclictest: cannot run {}: {e}", bin.display()))?;
    let help = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    if !help.contains("--json") || !help.contains("--histfile") {
        return Err(format!(
            "--vs cyclictest: {} has no --json/--histfile options (rt-tests before 2.0): install a newer rt-tests ({INSTALL_HINT})",
            bin.display()
        ));
    }
    let version = help.lines().next().unwrap_or("cyclictest").trim().to_string();
    Ok((bin, version))
}

/// One cyclictest run.
pub struct Round {
    pub cmdline: String,
    pub hist_file: PathBuf,
    pub json_file: PathBuf,
    pub column: ParsedColumn,
    pub cycles: u64,
    pub avg_us: f64,
    /// Stopped by Ctrl-C (cyclictest got the same SIGINT and wrote what it had).
    pub interrupted: bool,
}

/// What a round is asked to do.
pub struct RoundSpec<'a> {
    pub bin: &'a Path,
    pub cpu: usize,
    pub priority: i32,
    pub period_us: u64,
    pub loops: u64,
    pub nbuckets: usize,
    pub dir: &'a Path,
    pub round: usize,
}

/// Runs cyclictest once, as people run it for a histogram: memory locked, one SCHED_FIFO thread pinned to
/// the CPU, clock_nanosleep with absolute times (its default), histogram and JSON into files.
pub fn run_round(s: &RoundSpec<'_>) -> Result<Round, BenchError> {
    let hist_file = s.dir.join(format!("cyclictest-round{}.hist", s.round));
    let json_file = s.dir.join(format!("cyclictest-round{}.json", s.round));
    for f in [&hist_file, &json_file] {
        rtcell_host::outdir::clear_for_output(f)
            .map_err(|e| BenchError::Other(format!("cannot clear {} for cyclictest: {e}", f.display())))?;
    }
    let args: Vec<String> = vec![
        "-m".into(),
        "-q".into(),
        "-t".into(),
        "1".into(),
        format!("-a{}", s.cpu),
        format!("-p{}", s.priority),
        format!("-i{}", s.period_us),
        format!("-l{}", s.loops),
        format!("-h{}", s.nbuckets),
        format!("--histfile={}", hist_file.display()),
        format!("--json={}", json_file.display()),
    ];
    let cmdline = format!("{} {}", s.bin.display(), args.join(" "));
    let out = Command::new(s.bin)
        .args(&args)
        .output()
        .map_err(|e| BenchError::Other(format!("cannot run cyclictest ({cmdline}): {e}")))?;
    let interrupted = crate::stop_requested();
    if !out.status.success() && !interrupted {
        return Err(BenchError::Other(format!(
            "cyclictest failed ({}): {cmdline}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| BenchError::Other(format!("cyclictest output {}: {e}", p.display())))
    };
    let bad = |p: &Path, e: String| BenchError::Other(format!("cyclictest output {}: {e}", p.display()));
    let mut columns = histfile::parse_hist(&read(&hist_file)?).map_err(|e| bad(&hist_file, e))?;
    let threads = histfile::parse_json(&read(&json_file)?).map_err(|e| bad(&json_file, e))?;
    if columns.len() != 1 || threads.len() != 1 {
        return Err(bad(
            &hist_file,
            format!("{} histogram columns, {} JSON threads; expected 1", columns.len(), threads.len()),
        ));
    }
    let (column, t) = (columns.remove(0), &threads[0]);
    // The two files describe the same run: the histogram's buckets and overflows are the JSON's cycles.
    if column.total + column.overflows != t.cycles || column.max_us != t.max_us || column.min_us != t.min_us {
        return Err(bad(
            &json_file,
            format!(
                "disagrees with {}: cycles {} vs total {} + overflows {}, min {} vs {}, max {} vs {}",
                hist_file.display(),
                t.cycles,
                column.total,
                column.overflows,
                t.min_us,
                column.min_us,
                t.max_us,
                column.max_us
            ),
        ));
    }
    Ok(Round { cmdline, hist_file, json_file, column, cycles: t.cycles, avg_us: t.avg_us, interrupted })
}

/// The rounds merged: one distribution in whole microseconds.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    pub buckets: Vec<u64>,
    pub overflows: u64,
    pub cycles: u64,
    pub min_us: u64,
    pub max_us: u64,
    /// Sum of the values (from each round's mean x cycles).
    pub sum_us: f64,
}

impl Merged {
    pub fn add(&mut self, r: &Round) {
        if r.cycles == 0 {
            return;
        }
        if self.buckets.len() < r.column.buckets.len() {
            self.buckets.resize(r.column.buckets.len(), 0);
        }
        for (m, c) in self.buckets.iter_mut().zip(&r.column.buckets) {
            *m += c;
        }
        self.min_us = if self.cycles == 0 { r.column.min_us } else { self.min_us.min(r.column.min_us) };
        self.max_us = self.max_us.max(r.column.max_us);
        self.overflows += r.column.overflows;
        self.cycles += r.cycles;
        self.sum_us += r.avg_us * r.cycles as f64;
    }

    /// The nearest-rank percentile (`per_10k` = hundredths of a percent) of the whole-microsecond values:
    /// the bucket's value; in the overflow, only the maximum bounds it.
    fn percentile(&self, per_10k: u64) -> f64 {
        let rank = (per_10k * self.cycles).div_ceil(10_000).clamp(1, self.cycles.max(1));
        let mut seen = 0;
        for (us, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return us as f64;
            }
        }
        self.max_us as f64
    }

    /// A series in microseconds (kind latency), statistics from the merged histogram: percentiles
    /// nearest-rank over whole microseconds, the mean from cyclictest's own, the standard deviation from
    /// the buckets (overflows counted at the maximum).
    pub fn series(&self, name: &str, labels: std::collections::BTreeMap<String, String>) -> Series {
        if self.cycles == 0 {
            return Series {
                name: name.into(),
                labels,
                unit: Unit::Us,
                kind: Kind::Latency,
                stats: Stats::default(),
                histogram: None,
                errors: 0,
            };
        }
        let n = self.cycles as f64;
        let mean = self.sum_us / n;
        let var = self.buckets.iter().enumerate().map(|(us, &c)| c as f64 * (us as f64 - mean).powi(2)).sum::<f64>()
            + self.overflows as f64 * (self.max_us as f64 - mean).powi(2);
        let last = self.buckets.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
        Series {
            name: name.into(),
            labels,
            unit: Unit::Us,
            kind: Kind::Latency,
            stats: Stats {
                count: self.cycles,
                min: self.min_us as f64,
                mean,
                median: self.percentile(5000),
                p90: self.percentile(9000),
                p99: self.percentile(9900),
                p999: self.percentile(9990),
                p9999: self.percentile(9999),
                max: self.max_us as f64,
                stddev: (var / n).sqrt(),
            },
            histogram: Some(Histogram {
                bucket_width: 1.0,
                counts: self.buckets[..last].to_vec(),
                overflows: self.overflows,
            }),
            errors: 0,
        }
    }

    /// The merged distribution as a column of a histogram file.
    pub fn column(&self, label: &str, cpu: usize, nbuckets: usize) -> histfile::HistColumn {
        let mut buckets = self.buckets.clone();
        buckets.resize(nbuckets.max(buckets.len()), 0);
        histfile::HistColumn {
            label: label.into(),
            buckets,
            overflows: self.overflows,
            // Cycle numbers restart with every round: they stay in the rounds' own files.
            overflow_cycles: Vec::new(),
            cycles: self.cycles,
            min_us: self.min_us,
            max_us: self.max_us,
            avg_us: if self.cycles == 0 { 0.0 } else { self.sum_us / self.cycles as f64 },
            cpu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(buckets: Vec<u64>, overflows: u64, min: u64, max: u64, avg: f64) -> Round {
        let total = buckets.iter().sum::<u64>();
        Round {
            cmdline: String::new(),
            hist_file: PathBuf::new(),
            json_file: PathBuf::new(),
            cycles: total + overflows,
            column: ParsedColumn { buckets, total, min_us: min, avg_us: avg as u64, max_us: max, overflows },
            avg_us: avg,
            interrupted: false,
        }
    }

    #[test]
    fn rounds_merge_into_one_distribution() {
        let mut m = Merged::default();
        m.add(&round(vec![0, 2, 1], 0, 1, 2, 1.33));
        m.add(&round(vec![0, 0, 3, 3], 1, 2, 40, 8.0));
        assert_eq!(m.buckets, vec![0, 2, 4, 3]);
        assert_eq!((m.cycles, m.overflows, m.min_us, m.max_us), (10, 1, 1, 40));
        let s = m.series("latency", rtcell_report::labels!("tool" => "cyclictest"));
        assert_eq!(s.stats.count, 10);
        assert_eq!(s.stats.median, 2.0, "5th of 1,1,2,2,2,2,3,3,3,ovf");
        assert_eq!(s.stats.p90, 3.0);
        assert_eq!(s.stats.max, 40.0);
        assert_eq!(s.stats.p999, 40.0, "in the overflow: the maximum bounds it");
        assert!((s.stats.mean - (1.33 * 3.0 + 8.0 * 7.0) / 10.0).abs() < 1e-9);
        let h = s.histogram.unwrap();
        assert_eq!((h.counts.len(), h.overflows, h.bucket_width), (4, 1, 1.0));
        let c = m.column("cyclictest", 1, 6);
        assert_eq!(c.buckets, vec![0, 2, 4, 3, 0, 0]);
    }

    #[test]
    fn empty_merge_is_an_empty_series() {
        let s = Merged::default().series("latency", rtcell_report::labels!("tool" => "cyclictest"));
        assert_eq!(s.stats.count, 0);
        assert!(s.histogram.is_none());
    }
}
