//! Interference loads that run on the non-cell CPUs for the whole of a measurement.
//!
//! - `none`.
//! - `memcpy`: a thread per load CPU copying across a 20 MiB buffer (seed 004, section V-A).
//! - `stress-ng`: one `stress-ng --cpu 1 --cache 1 --vm 1 --vm-bytes 256M` per load CPU, pinned to it:
//!   arithmetic, cache thrashing and page-touching memory traffic at once, the usual mix for RT tests.
//! - `dohell`: what Xenomai's `dohell` script runs, without the shell: `dd if=/dev/zero of=/dev/null`,
//!   `cat /proc/interrupts`, `ps -ef` and `ls -lR /` each run again as soon as it ends, `hackbench -T`
//!   in a loop when installed (rt-tests), and a TCP stream through 127.0.0.1 between two threads of
//!   rtcell. Every process may run on any load CPU, the TCP threads too.
//!
//! Load processes never outlive rtcell and never touch the cell CPU (see [`procs`]): each is pinned to
//! the load CPUs before exec, leads a process group of its own (so Ctrl-C reaches only rtcell, and its
//! whole group is killed at the end), and gets SIGKILL when rtcell dies. A load process that dies during
//! the run (killed, crashed, or a long-running one that exits) is reported at once on stderr and in the
//! run's warnings ("load stress-ng@0 (pid N) died at t=… s: killed by signal 9 (SIGKILL)"); it is not
//! restarted, and the run goes on with what is left of the load.
//!
//! Every listed load, when it stops, leaves a [`LoadReport`]; [`attach_reports`] puts those of a suite's
//! run into its configuration (`load_runs`) and its warnings.

pub mod net;
pub mod procs;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use procs::{ProcSpec, Supervisor};

/// Why a load could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("online CPUs: {0}")]
    OnlineCpus(std::io::Error),
    #[error("cannot start the load: {0}")]
    Start(std::io::Error),
}

/// Which load to run beside the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    None,
    /// A memcpy loop over a 20 MiB buffer on each non-cell CPU (seed 004, section V-A).
    Memcpy,
    /// `stress-ng` CPU, cache and memory stressors on each non-cell CPU.
    StressNg,
    /// rtcell's equivalent of Xenomai's `dohell`: processes, file system, /proc, scheduler and network.
    Dohell,
}

/// What `--load` accepts, for the help of every suite.
pub const LOAD_HELP: &str = "Interference load on the non-cell CPUs: none; memcpy (a 20 MiB memcpy loop per CPU); \
stress-ng (stress-ng --cpu 1 --cache 1 --vm 1 --vm-bytes 256M per CPU; apt-get install stress-ng); dohell \
(as Xenomai's dohell: dd, cat /proc/interrupts, ps, ls -lR /, hackbench when installed, loopback TCP traffic). \
Load processes are stopped at the end and never outlive rtcell; one that dies is reported and the run goes on";

/// Memory each stress-ng `--vm` worker keeps touching.
pub const STRESS_NG_VM_BYTES: &str = "256M";

impl Load {
    pub const NAMES: [&'static str; 4] = ["none", "memcpy", "stress-ng", "dohell"];

    pub fn as_str(&self) -> &'static str {
        match self {
            Load::None => "none",
            Load::Memcpy => "memcpy",
            Load::StressNg => "stress-ng",
            Load::Dohell => "dohell",
        }
    }

    /// Checks that the programs this load runs are installed; the error says what to install.
    pub fn check_tools(&self) -> Result<(), String> {
        let need: &[(&str, &str)] = match self {
            Load::None | Load::Memcpy => &[],
            Load::StressNg => &[("stress-ng", "stress-ng")],
            Load::Dohell => &[("dd", "coreutils"), ("cat", "coreutils"), ("ls", "coreutils")],
        };
        for (program, package) in need {
            if find_program(program).is_none() {
                return Err(format!(
                    "the {} load needs {program}, which is not installed (not found in PATH): install it with \
                     `apt-get install {package}` (scripts/setup does), or pick another load: {}",
                    self.as_str(),
                    Load::NAMES.join(", ")
                ));
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for Load {
    type Err = String;
    /// Parses a load name and checks that its programs are installed, so that every suite refuses a
    /// load it cannot run before anything starts.
    fn from_str(s: &str) -> Result<Self, String> {
        let load = match s {
            "none" => Load::None,
            "memcpy" => Load::Memcpy,
            "stress-ng" => Load::StressNg,
            "dohell" => Load::Dohell,
            other => return Err(format!("unknown load {other:?}: use none, memcpy, stress-ng or dohell")),
        };
        load.check_tools()?;
        Ok(load)
    }
}

/// The first executable file called `program` in `PATH`.
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| is_executable(p))
}

/// Buffer the memcpy load copies across (two halves of 10 MiB).
pub const MEMCPY_BUFFER: usize = 20 << 20;

/// A running load; stops (threads joined, processes killed and reaped) when dropped, also on error paths
/// and Ctrl-C.
pub struct RunningLoad {
    kind: Load,
    cpus: Vec<usize>,
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
    procs: Option<Supervisor>,
    flood: Option<net::Flood>,
    /// Parts of the load that could not run here, and why.
    skipped: Vec<String>,
    /// Whether its report goes to [`take_reports`].
    listed: bool,
    started: Instant,
    report: Option<LoadReport>,
}

impl RunningLoad {
    /// Starts `kind` on each CPU in `cpus` (normal scheduling policy, so real-time threads preempt it).
    /// Its [`LoadReport`] is listed for [`attach_reports`] when it stops.
    pub fn start(kind: Load, cpus: &[usize]) -> std::io::Result<RunningLoad> {
        Self::start_with(kind, cpus, true)
    }

    /// Like [`start`](Self::start), but not listed for [`attach_reports`]: for loads a suite reports
    /// itself (membench's interferers).
    pub fn start_unlisted(kind: Load, cpus: &[usize]) -> std::io::Result<RunningLoad> {
        Self::start_with(kind, cpus, false)
    }

    fn start_with(kind: Load, cpus: &[usize], listed: bool) -> std::io::Result<RunningLoad> {
        let mut load = RunningLoad {
            kind,
            cpus: cpus.to_vec(),
            stop: Arc::new(AtomicBool::new(false)),
            bytes: Arc::new(AtomicU64::new(0)),
            threads: Vec::new(),
            procs: None,
            flood: None,
            skipped: Vec::new(),
            // Listed once started: a load that failed to start has nothing to report.
            listed: false,
            started: Instant::now(),
            report: None,
        };
        if matches!(kind, Load::StressNg | Load::Dohell) && cpus.is_empty() {
            return Err(std::io::Error::other(format!(
                "the {} load needs a CPU besides the cell's, and this machine has none",
                kind.as_str()
            )));
        }
        match kind {
            Load::None => {}
            Load::Memcpy => load.start_memcpy()?,
            Load::StressNg => {
                let program = required(Load::StressNg, "stress-ng")?;
                let specs = cpus
                    .iter()
                    .map(|&cpu| ProcSpec {
                        name: format!("stress-ng@{cpu}"),
                        program: program.clone(),
                        args: ["--cpu", "1", "--cache", "1", "--vm", "1", "--vm-bytes", STRESS_NG_VM_BYTES, "--quiet"]
                            .map(String::from)
                            .to_vec(),
                        cpus: vec![cpu],
                        restart: false,
                    })
                    .collect();
                load.procs = Some(Supervisor::start(specs)?);
            }
            Load::Dohell => {
                let specs = load.dohell_specs()?;
                load.procs = Some(Supervisor::start(specs)?);
                load.flood = Some(net::Flood::start(cpus)?);
            }
        }
        for s in &load.skipped {
            rtcell_report::progress!("note: {s}");
        }
        load.listed = listed;
        Ok(load)
    }

    fn start_memcpy(&mut self) -> std::io::Result<()> {
        for &cpu in &self.cpus {
            let (stop, bytes) = (Arc::clone(&self.stop), Arc::clone(&self.bytes));
            let h = std::thread::Builder::new().name(format!("load-memcpy-{cpu}")).spawn(move || {
                // Threads inherit the policy of their creator, which may be a real-time thread.
                let _ = rtcell_host::sched::set_normal();
                let _ = rtcell_host::cpu::pin_current_thread(cpu);
                let mut buf = vec![0x5au8; MEMCPY_BUFFER];
                let half = MEMCPY_BUFFER / 2;
                while !stop.load(Ordering::Relaxed) {
                    let (a, b) = buf.split_at_mut(half);
                    b.copy_from_slice(a);
                    std::hint::black_box(&mut buf);
                    bytes.fetch_add(half as u64, Ordering::Relaxed);
                }
            })?;
            self.threads.push(h);
        }
        Ok(())
    }

    /// The processes of `dohell`; optional programs that are missing go to `skipped`.
    fn dohell_specs(&mut self) -> std::io::Result<Vec<ProcSpec>> {
        let spec = |name: &str, program: PathBuf, args: &[&str], restart: bool| ProcSpec {
            name: name.to_string(),
            program,
            args: args.iter().map(|a| a.to_string()).collect(),
            cpus: self.cpus.clone(),
            restart,
        };
        let mut specs = vec![
            // Endless by itself: 512-byte reads and writes, a system call storm.
            spec("dd", required(Load::Dohell, "dd")?, &["if=/dev/zero", "of=/dev/null"], false),
            spec("cat", required(Load::Dohell, "cat")?, &["/proc/interrupts"], true),
            spec("ls", required(Load::Dohell, "ls")?, &["-lR", "/"], true),
        ];
        match find_program("ps") {
            Some(p) => specs.push(spec("ps", p, &["-ef"], true)),
            None => self.skipped.push("dohell runs without ps (not installed: apt-get install procps)".into()),
        }
        match find_program("hackbench") {
            // Threads (-T): one process, so it dies whole with rtcell.
            Some(p) => specs.push(spec("hackbench", p, &["-T", "-g", "2", "-l", "1000"], true)),
            None => self.skipped.push("dohell runs without hackbench (not installed: apt-get install rt-tests)".into()),
        }
        Ok(specs)
    }

    /// Starts `kind` on every online CPU but the cell's. On a machine whose only such CPU is the master's,
    /// says in `warnings` that the load shares it with the SCHED_FIFO master loop.
    pub fn start_beside_master(
        kind: Load,
        master_cpu: usize,
        cell_cpu: usize,
        warnings: &mut Vec<String>,
    ) -> Result<RunningLoad, LoadError> {
        let online = rtcell_host::cpu::online_cpus().map_err(LoadError::OnlineCpus)?;
        let load_cpus: Vec<usize> = online.iter().copied().filter(|&c| c != cell_cpu).collect();
        if kind != Load::None && load_cpus.contains(&master_cpu) {
            warnings.push(format!(
                "the {} load shares CPU {} with the master loop (no other non-cell CPU on this machine); the master runs SCHED_FIFO, so the load runs only when the master is throttled or waiting",
                kind.as_str(),
                master_cpu
            ));
        }
        RunningLoad::start(kind, &load_cpus).map_err(LoadError::Start)
    }

    pub fn kind(&self) -> Load {
        self.kind
    }

    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Stops the load; returns the bytes the memcpy load copied per second (proof it ran, and how
    /// hard; 0 for the other loads, whose figures are in [`finish`](Self::finish)'s report).
    pub fn stop(mut self) -> f64 {
        self.halt().memcpy_bytes_per_s.unwrap_or(0.0)
    }

    /// Stops the load and returns what it did.
    pub fn finish(mut self) -> LoadReport {
        self.halt()
    }

    fn halt(&mut self) -> LoadReport {
        if let Some(r) = &self.report {
            return r.clone();
        }
        self.stop.store(true, Ordering::Relaxed);
        let mut stuck = join_within(std::mem::take(&mut self.threads), Instant::now() + procs::STOP_DEADLINE);
        let seconds = self.started.elapsed().as_secs_f64();
        let processes = self.procs.as_mut().map(Supervisor::stop).unwrap_or_default();
        let tcp_bytes_per_s = self.flood.as_mut().map(|f| {
            let (bytes, left) = f.stop();
            stuck.extend(left);
            bytes / seconds.max(1e-9)
        });
        let memcpy_bytes_per_s = (self.kind == Load::Memcpy)
            .then(|| if seconds > 0.0 { self.bytes.load(Ordering::Relaxed) as f64 / seconds } else { 0.0 });
        let report = LoadReport {
            kind: self.kind,
            cpus: self.cpus.clone(),
            seconds,
            processes,
            skipped: self.skipped.clone(),
            stuck,
            memcpy_bytes_per_s,
            tcp_bytes_per_s,
        };
        if self.listed && self.kind != Load::None {
            lock_reports().push(report.clone());
        }
        self.report = Some(report.clone());
        report
    }
}

impl Drop for RunningLoad {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The path of a program a load cannot run without.
fn required(load: Load, program: &str) -> std::io::Result<PathBuf> {
    find_program(program).ok_or_else(|| {
        std::io::Error::other(format!(
            "the {} load needs {program}, which is not installed (not found in PATH)",
            load.as_str()
        ))
    })
}

/// What a load did between its start and its stop.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub kind: Load,
    pub cpus: Vec<usize>,
    pub seconds: f64,
    /// Each load process (or loop of processes), and how it ended.
    pub processes: Vec<procs::ProcOutcome>,
    pub skipped: Vec<String>,
    /// Threads of the load that did not end by the stop's deadline (abandoned).
    pub stuck: Vec<String>,
    pub memcpy_bytes_per_s: Option<f64>,
    /// Bytes per second through the loopback TCP stream (dohell).
    pub tcp_bytes_per_s: Option<f64>,
}

impl LoadReport {
    /// True when no load process died before the stop.
    pub fn stayed_alive(&self) -> bool {
        self.processes.iter().all(|p| p.death.is_none())
    }

    /// One warning per load process that died during the run, and per process or thread that did not
    /// end when stopped.
    pub fn warnings(&self) -> Vec<String> {
        let died = self
            .processes
            .iter()
            .filter_map(|p| p.death.as_ref())
            .map(|d| format!("{d}; the run went on without it, so later figures had less interference"));
        let stuck = self.processes.iter().filter_map(|p| p.stuck.clone()).chain(self.stuck.iter().cloned());
        died.chain(stuck).collect()
    }

    /// One line for the printed report: what ran, where, how hard, and whether it all stayed alive.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(bps) = self.memcpy_bytes_per_s {
            parts.push(format!("{:.2} GB/s copied", bps / 1e9));
        }
        if !self.processes.is_empty() {
            let procs: Vec<String> = self
                .processes
                .iter()
                .map(|p| if p.runs > 1 { format!("{} ({} runs)", p.command, p.runs) } else { p.command.clone() })
                .collect();
            parts.push(procs.join(", "));
        }
        if let Some(bps) = self.tcp_bytes_per_s {
            parts.push(format!("loopback TCP {:.1} MB/s", bps / 1e6));
        }
        let dead = self.processes.iter().filter(|p| p.death.is_some()).count();
        if !self.processes.is_empty() {
            parts.push(if dead == 0 {
                "every process stayed alive".to_string()
            } else {
                format!("{dead} process(es) died (see the warnings)")
            });
        }
        let stuck = self.processes.iter().filter(|p| p.stuck.is_some()).count() + self.stuck.len();
        if stuck > 0 {
            parts.push(format!("{stuck} process(es) or thread(s) did not end when stopped and were abandoned"));
        }
        format!(
            "load {} on CPU {} for {:.1} s: {}",
            self.kind.as_str(),
            rtcell_host::cpu::format_cpu_list(&self.cpus),
            self.seconds,
            parts.join("; ")
        )
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind.as_str(),
            "cpus": self.cpus,
            "seconds": self.seconds,
            "stayed_alive": self.stayed_alive(),
            "processes": self.processes.iter().map(procs::ProcOutcome::to_json).collect::<Vec<_>>(),
            "skipped": self.skipped,
            "stuck": self.stuck,
            "memcpy_bytes_per_s": self.memcpy_bytes_per_s,
            "tcp_bytes_per_s": self.tcp_bytes_per_s,
        })
    }
}

/// Reports of the listed loads that stopped and have not been taken yet.
static REPORTS: Mutex<Vec<LoadReport>> = Mutex::new(Vec::new());

fn lock_reports() -> std::sync::MutexGuard<'static, Vec<LoadReport>> {
    REPORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes the reports of the listed loads that stopped since the last call.
pub fn take_reports() -> Vec<LoadReport> {
    std::mem::take(&mut *lock_reports())
}

/// Puts the reports of the loads that ran during a run into its parts: the suite's configuration gets
/// `load_runs` (which load, on which CPUs, its processes and whether each stayed alive), its text a
/// line per load of processes, and every load process that died becomes a warning.
pub fn attach_reports_to(suite: &mut rtcell_report::Suite, warnings: &mut Vec<String>, text: &mut String) {
    let reports = take_reports();
    if reports.is_empty() {
        return;
    }
    for r in &reports {
        warnings.extend(r.warnings());
        // The suites print the memcpy rate themselves.
        if !r.processes.is_empty() {
            text.push_str(&r.summary());
            text.push('\n');
        }
    }
    if let Some(config) = suite.config.as_object_mut() {
        config.insert("load_runs".into(), reports.iter().map(LoadReport::to_json).collect());
    }
}

/// Joins `threads`, waiting for each until `deadline` at most; those still running then are left
/// running (detached) and named in the result: `load thread NAME did not end ...`.
pub fn join_within(threads: Vec<JoinHandle<()>>, deadline: Instant) -> Vec<String> {
    let mut left = Vec::new();
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            let msg = format!(
                "load thread {} did not end within {:.0} s of the stop; abandoned, the run went on without it",
                t.thread().name().unwrap_or("?"),
                procs::STOP_DEADLINE.as_secs_f64()
            );
            rtcell_report::progress!("warning: {msg}");
            left.push(msg);
        }
    }
    left
}

/// Whether `path` names an executable file.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_loads_list_the_choices() {
        for name in ["none", "memcpy"] {
            assert_eq!(name.parse::<Load>().unwrap().as_str(), name);
        }
        let e = "hell".parse::<Load>().unwrap_err();
        assert!(e.contains("none, memcpy, stress-ng or dohell"), "{e}");
    }

    #[test]
    fn programs_are_found_in_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("no-such-program-here").is_none());
        assert!(is_executable(&find_program("sh").unwrap()));
    }

    #[test]
    fn memcpy_copies_and_reports_without_processes() {
        let load = RunningLoad::start_unlisted(Load::Memcpy, &[0]).unwrap();
        // Until it has copied something (a busy machine may keep it from starting for a while).
        let t0 = Instant::now();
        while load.bytes.load(Ordering::Relaxed) == 0 && t0.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let r = load.finish();
        assert!(r.memcpy_bytes_per_s.unwrap() > 0.0);
        assert!(r.processes.is_empty() && r.stayed_alive());
    }

    #[test]
    fn listed_loads_are_attached_to_the_run_with_their_deaths() {
        RunningLoad::start(Load::Memcpy, &[0]).unwrap().stop();
        let mut suite = rtcell_report::Suite::new("t", serde_json::json!({}));
        attach_reports_to(&mut suite, &mut vec![], &mut String::new());
        let runs = suite.config["load_runs"].as_array().unwrap();
        assert_eq!(
            (runs.len(), runs[0]["kind"].as_str(), runs[0]["stayed_alive"].as_bool()),
            (1, Some("memcpy"), Some(true))
        );
        assert!(take_reports().is_empty(), "taken once");

        let dead = procs::ProcOutcome {
            name: "dd".into(),
            command: "dd if=/dev/zero of=/dev/null".into(),
            cpus: vec![0],
            runs: 1,
            last_pid: Some(42),
            death: Some("load dd (pid 42) died at t=1.0 s: killed by signal 9 (SIGKILL)".into()),
            stuck: None,
        };
        let r = LoadReport {
            kind: Load::Dohell,
            cpus: vec![0],
            seconds: 2.0,
            processes: vec![dead],
            skipped: vec![],
            stuck: vec![],
            memcpy_bytes_per_s: None,
            tcp_bytes_per_s: Some(5e6),
        };
        assert!(!r.stayed_alive());
        assert_eq!(r.warnings().len(), 1);
        assert!(r.warnings()[0].starts_with("load dd (pid 42) died at t=1.0 s"));
        assert_eq!(
            r.summary(),
            "load dohell on CPU 0 for 2.0 s: dd if=/dev/zero of=/dev/null; loopback TCP 5.0 MB/s; 1 process(es) died (see the warnings)"
        );
    }

    #[test]
    fn process_loads_need_a_cpu() {
        let e = RunningLoad::start_unlisted(Load::Dohell, &[]).err().unwrap();
        assert!(e.to_string().contains("needs a CPU"), "{e}");
    }
}
