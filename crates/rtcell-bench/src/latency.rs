//! `rtcell bench latency` — activation latency on the cell CPU: how late a periodic real-time activity
//! gets going against its intended release time (one way, microseconds), per way of waiting for it:
//!
//! - `nanosleep`: the cyclictest method — a SCHED_FIFO thread, memory locked, `/dev/cpu_dma_latency` held
//!   at 0, sleeping in clock_nanosleep(TIMER_ABSTIME); lateness = wake time − release (CLOCK_MONOTONIC).
//! - `poll`: a cell activation — a thread (or process) cell busy-polls the TSC until the release; no timer
//!   interrupt is on that path, as on a dedicated control core.
//! - `kvm`: the same inside a kvm cell (the `spin` payload).
//!
//! Figures as Xenomai's `latency -s` gives them (min, avg, max, stddev, overruns) and percentiles; the
//! distributions also go into cyclictest's histogram and JSON layouts beside results.json. With
//! `--vs cyclictest`, Debian's cyclictest runs on the same CPU, period and priority in rounds alternating
//! with rtcell's (A B A B ...), and both are set side by side with their ratios.

pub mod cyclictest;
pub mod histfile;
pub(crate) mod measure;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use rtcell_cells::CellKind;
use rtcell_host::tsc::TscClock;
use rtcell_report::table::{Table, fmt_us};
use rtcell_report::{Kind, Series, Stats, Suite, Unit, labels};

use crate::{BenchError, SuiteRun};
pub use measure::DmaLatency;
use rtcell_loads::{Load, RunningLoad};

mod report;
use report::{Context, build};

/// Shortest period of the nanosleep mode (and of cyclictest): each activation is a timer interrupt, a
/// wake-up and two system calls, tens of microseconds on a virtual machine; below this the thread would
/// spend most of each period waking up, and its lateness would be its own overhead.
pub const NANOSLEEP_MIN_PERIOD_US: u64 = 50;
/// Shortest period of the poll and kvm modes: recording an activation takes well under a microsecond,
/// but a busy-poll shorter than this mostly measures the progress of the loop itself.
pub const POLL_MIN_PERIOD_US: u64 = 10;
/// Longest period.
pub const MAX_PERIOD_US: u64 = 1_000_000;
/// Most activations kept per mode (8 bytes each in memory, and in the cell's region).
pub const MAX_ACTIVATIONS: u64 = 20_000_000;
/// Rounds of each side with `--vs cyclictest`.
pub const VS_ROUNDS: usize = 4;
/// Fewest activations a round must hold.
pub const MIN_ROUND_ACTIVATIONS: u64 = 10;
/// Default time per mode, and with `--quick`.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(60);
pub const QUICK_DURATION: Duration = Duration::from_secs(10);
/// Shortest sleep a poll cell takes to give CPU time back: a shorter one costs more (a timer, two context
/// switches) than it returns.
const MIN_BUDGET_SLEEP_NS: u64 = 20_000;

/// How the activity waits for its release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// clock_nanosleep(TIMER_ABSTIME) on a SCHED_FIFO thread: the cyclictest method.
    Nanosleep,
    /// A cell busy-polls the TSC; `Poll(CellKind::Kvm)` is the kvm mode.
    Poll(CellKind),
}

impl Mode {
    /// The mode's name on the command line and in labels: nanosleep, poll, kvm.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Nanosleep => "nanosleep",
            Mode::Poll(CellKind::Kvm) => "kvm",
            Mode::Poll(_) => "poll",
        }
    }

    /// The cell kind, for the modes that run in a cell.
    pub fn cell(&self) -> Option<CellKind> {
        match self {
            Mode::Nanosleep => None,
            Mode::Poll(k) => Some(*k),
        }
    }

    /// For people: "nanosleep (SCHED_FIFO thread)", "poll (thread cell)", "kvm (kvm cell)".
    pub fn describe(&self) -> String {
        match self {
            Mode::Nanosleep => "nanosleep (SCHED_FIFO thread)".into(),
            Mode::Poll(k) => format!("{} ({k} cell)", self.name()),
        }
    }

    /// Short name of the mode's column in the histogram files.
    fn column(&self) -> String {
        match self {
            Mode::Nanosleep => "nanosleep".into(),
            Mode::Poll(CellKind::Kvm) => "kvm".into(),
            Mode::Poll(k) => format!("poll-{k}"),
        }
    }

    /// Shortest period the mode can honour, us.
    pub fn min_period_us(&self) -> u64 {
        match self {
            Mode::Nanosleep => NANOSLEEP_MIN_PERIOD_US,
            Mode::Poll(_) => POLL_MIN_PERIOD_US,
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct LatencyConfig {
    /// The CPU every mode (and cyclictest) runs on.
    pub cpu: usize,
    pub modes: Vec<Mode>,
    pub period_us: u64,
    /// Measured time per mode (and for cyclictest), split into the rounds.
    pub duration: Duration,
    /// SCHED_FIFO priority of the measuring thread, cell or vCPU (and of cyclictest).
    pub priority: i32,
    pub load: Load,
    /// CPUs the load runs on.
    pub load_cpus: Vec<usize>,
    /// cyclictest's binary and version line, for `--vs cyclictest`.
    pub cyclictest: Option<(PathBuf, String)>,
    /// The run directory: the histogram files and cyclictest's own output go there.
    pub out_dir: PathBuf,
    /// The command line, for the JSON file.
    pub command: String,
}

impl LatencyConfig {
    /// Rounds per side: alternating with cyclictest, or one.
    pub fn rounds(&self) -> usize {
        if self.cyclictest.is_some() { VS_ROUNDS } else { 1 }
    }

    pub fn round_duration(&self) -> Duration {
        self.duration / self.rounds() as u32
    }

    /// Releases in one round.
    fn round_activations(&self) -> u64 {
        (self.round_duration().as_nanos() / (u128::from(self.period_us) * 1000)) as u64
    }

    /// Buckets (1 us each) of the histogram files and of cyclictest's histogram: ten periods, at least
    /// 1 ms, at most 100 ms.
    pub fn hist_buckets(&self) -> usize {
        (10 * self.period_us).clamp(1000, 100_000) as usize
    }

    /// Checks what cannot be measured as asked; the message says what, and how to fix it.
    pub fn check(&self) -> Result<(), String> {
        if self.modes.is_empty() {
            return Err("--mode is empty: give nanosleep, poll, kvm or a list of them".into());
        }
        if self.period_us > MAX_PERIOD_US {
            return Err(format!("--period {}: at most {MAX_PERIOD_US} us (1 s)", self.period_us));
        }
        let mut floors: Vec<(String, u64)> =
            self.modes.iter().map(|m| (m.name().to_string(), m.min_period_us())).collect();
        if self.cyclictest.is_some() {
            floors.push(("--vs cyclictest (same period)".into(), NANOSLEEP_MIN_PERIOD_US));
        }
        if let Some((what, floor)) = floors.iter().find(|(_, f)| self.period_us < *f) {
            return Err(format!(
                "--period {}: {what} cannot honour periods below {floor} us (nanosleep and cyclictest: a timer \
                 interrupt, a wake-up and system calls per activation; poll and kvm: {POLL_MIN_PERIOD_US} us); \
                 give --period {floor} or more",
                self.period_us
            ));
        }
        let total = (self.duration.as_nanos() / (u128::from(self.period_us) * 1000)) as u64;
        if total > MAX_ACTIVATIONS {
            return Err(format!(
                "--duration {:.0} s at --period {} us is {total} activations per mode; at most {MAX_ACTIVATIONS} \
                 are kept: shorten --duration or lengthen --period",
                self.duration.as_secs_f64(),
                self.period_us
            ));
        }
        let per_round = self.round_activations();
        if per_round < MIN_ROUND_ACTIVATIONS {
            let need = Duration::from_micros(MIN_ROUND_ACTIVATIONS * self.period_us * self.rounds() as u64);
            return Err(format!(
                "--duration {:.3} s at --period {} us leaves {per_round} activations per round ({} round{}); \
                 give --duration {:.3}s or more",
                self.duration.as_secs_f64(),
                self.period_us,
                self.rounds(),
                if self.rounds() == 1 { "" } else { "s, alternating with cyclictest" },
                need.as_secs_f64()
            ));
        }
        Ok(())
    }
}

/// The kernel's real-time throttling: a SCHED_FIFO thread may run `runtime_us` of every `period_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    pub runtime_us: i64,
    pub period_us: i64,
}

impl Throttle {
    pub fn read() -> Option<Throttle> {
        let root = rtcell_host::root::HostRoot::system();
        Some(Throttle {
            runtime_us: root.read_i64("/proc/sys/kernel/sched_rt_runtime_us").ok()?,
            period_us: root.read_i64("/proc/sys/kernel/sched_rt_period_us").ok()?,
        })
    }

    /// Whether a thread that never sleeps gets stopped.
    pub fn active(&self) -> bool {
        self.runtime_us >= 0 && self.runtime_us < self.period_us && self.period_us > 0
    }

    /// How long it is stopped each period, us.
    pub fn gap_us(&self) -> i64 {
        self.period_us - self.runtime_us
    }
}

/// How long a poll cell sleeps after each activation: twice the share of time throttling would take from
/// a thread that never sleeps (10% of the period for the default 950000 / 1000000), so the busy-poll stays
/// inside its budget and the 50 ms stop never comes. Nothing when throttling is off, when that share would
/// leave less than half the period to poll, or when the sleep would be too short to be worth it (short
/// periods): then the cell polls without a break, and the gaps show in its figures and are reported.
pub fn budget_sleep_ns(period_ns: u64, throttle: Option<&Throttle>) -> u64 {
    match throttle {
        Some(t) if t.active() => {
            let share = 2.0 * t.gap_us() as f64 / t.period_us as f64;
            let sleep = (period_ns as f64 * share) as u64;
            if share >= 0.5 || sleep < MIN_BUDGET_SLEEP_NS { 0 } else { sleep }
        }
        _ => 0,
    }
}

/// Everything one mode measured, over all rounds.
struct ModeRun {
    mode: Mode,
    late_ns: Vec<u64>,
    overruns: u64,
    dropped: u64,
    rounds: usize,
    sleep_ns: u64,
}

/// Runs the suite: every mode, round by round, alternating with cyclictest when asked.
pub fn run(tsc: &TscClock, cfg: &LatencyConfig) -> Result<SuiteRun, BenchError> {
    let mut warnings: Vec<String> = Vec::new();
    std::fs::create_dir_all(&cfg.out_dir)
        .map_err(|e| BenchError::Other(format!("cannot create {}: {e}", cfg.out_dir.display())))?;
    let throttle = Throttle::read();
    let sleep_ns = budget_sleep_ns(cfg.period_us * 1000, throttle.as_ref());
    let dma = match DmaLatency::hold() {
        Ok(d) => Some(d),
        Err(e) => {
            warnings.push(format!(
                "{} not held at 0 ({e}): CPUs may enter idle states with exit latency (run as root)",
                DmaLatency::PATH
            ));
            None
        }
    };
    let load = RunningLoad::start(cfg.load, &cfg.load_cpus)
        .map_err(|e| BenchError::Other(format!("cannot start the {} load: {e}", cfg.load.as_str())))?;
    let started = SystemTime::now();
    let rounds = cfg.rounds();
    let capacity = (cfg.round_activations() + cfg.round_activations() / 20 + 64) as usize;
    let mut runs: Vec<ModeRun> = cfg
        .modes
        .iter()
        .map(|&mode| ModeRun {
            mode,
            late_ns: Vec::new(),
            overruns: 0,
            dropped: 0,
            rounds: 0,
            sleep_ns: if mode == Mode::Nanosleep { 0 } else { sleep_ns },
        })
        .collect();
    let mut ct_rounds: Vec<cyclictest::Round> = Vec::new();
    let mut merged = cyclictest::Merged::default();
    let (mut incomplete, mut failure) = (false, None);
    'rounds: for round in 1..=rounds {
        for m in runs.iter_mut() {
            let what = format!("{}, round {round}/{rounds}", m.mode.describe());
            crate::progress!("latency: {what}: {:.1} s on CPU {} ...", cfg.round_duration().as_secs_f64(), cfg.cpu);
            let spec = measure::RoundSpec {
                what: &what,
                cpu: cfg.cpu,
                priority: cfg.priority,
                period_ns: cfg.period_us * 1000,
                duration: cfg.round_duration(),
                capacity,
            };
            let got = match m.mode {
                Mode::Nanosleep => measure::nanosleep_round(&spec),
                Mode::Poll(kind) => measure::poll_round(&spec, kind, m.sleep_ns, tsc),
            };
            match got {
                Ok(s) => {
                    for w in s.warnings {
                        let w = format!("{}: {w}", m.mode.describe());
                        if !warnings.contains(&w) {
                            warnings.push(w);
                        }
                    }
                    m.late_ns.extend(s.late_ns);
                    m.overruns += s.overruns;
                    m.dropped += s.dropped;
                    m.rounds += 1;
                    if s.incomplete {
                        incomplete = true;
                        break 'rounds;
                    }
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break 'rounds;
                }
            }
        }
        if let Some((bin, _)) = &cfg.cyclictest {
            crate::progress!(
                "latency: cyclictest, round {round}/{rounds}: {:.1} s on CPU {} ...",
                cfg.round_duration().as_secs_f64(),
                cfg.cpu
            );
            let spec = cyclictest::RoundSpec {
                bin,
                cpu: cfg.cpu,
                priority: cfg.priority,
                period_us: cfg.period_us,
                loops: cfg.round_activations(),
                nbuckets: cfg.hist_buckets(),
                dir: &cfg.out_dir,
                round,
            };
            match cyclictest::run_round(&spec) {
                Ok(r) => {
                    merged.add(&r);
                    let stopped = r.interrupted;
                    ct_rounds.push(r);
                    if stopped {
                        incomplete = true;
                        break 'rounds;
                    }
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break 'rounds;
                }
            }
        }
    }
    let load_bps = load.stop();
    let dma_held = dma.is_some();
    drop(dma);
    if failure.is_some() {
        incomplete = true;
    }
    let ended = SystemTime::now();
    let ctx = Context { cfg, throttle, sleep_ns, load_bps, dma_held, started, ended };
    let mut run =
        build(&ctx, &runs, cfg.cyclictest.as_ref().map(|c| (&merged, ct_rounds.as_slice(), c.1.as_str())), warnings)?;
    run.incomplete = incomplete;
    if let Some(f) = &failure {
        run.warnings.push(format!("run broke off: {f}"));
    }
    run.failure = failure;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::report::gap_threshold_ns;
    use super::*;

    fn cfg(modes: Vec<Mode>, period_us: u64, secs: f64, vs: bool) -> LatencyConfig {
        LatencyConfig {
            cpu: 1,
            modes,
            period_us,
            duration: Duration::from_secs_f64(secs),
            priority: 95,
            load: Load::None,
            load_cpus: vec![0],
            cyclictest: vs.then(|| (PathBuf::from("/usr/bin/cyclictest"), "cyclictest V 2.40".into())),
            out_dir: PathBuf::from("out"),
            command: String::new(),
        }
    }

    #[test]
    fn period_floors_per_mode() {
        assert!(cfg(vec![Mode::Nanosleep], 50, 1.0, false).check().is_ok());
        let e = cfg(vec![Mode::Nanosleep], 49, 1.0, false).check().unwrap_err();
        assert!(e.contains("below 50 us"), "{e}");
        assert!(cfg(vec![Mode::Poll(CellKind::Thread)], 10, 1.0, false).check().is_ok());
        assert!(cfg(vec![Mode::Poll(CellKind::Kvm)], 9, 1.0, false).check().is_err());
        let e = cfg(vec![Mode::Poll(CellKind::Thread)], 20, 1.0, true).check().unwrap_err();
        assert!(e.contains("--vs cyclictest"), "{e}");
        assert!(cfg(vec![Mode::Nanosleep], 1_000_001, 100.0, false).check().is_err());
        assert!(cfg(vec![], 1000, 1.0, false).check().is_err());
    }

    #[test]
    fn rounds_and_activation_limits() {
        let c = cfg(vec![Mode::Nanosleep], 1000, 2.0, true);
        assert_eq!((c.rounds(), c.round_activations()), (4, 500));
        let e = cfg(vec![Mode::Nanosleep], 1000, 0.02, true).check().unwrap_err();
        assert!(e.contains("5 activations per round") && e.contains("0.040s"), "{e}");
        let e = cfg(vec![Mode::Poll(CellKind::Thread)], 10, 3600.0, false).check().unwrap_err();
        assert!(e.contains("360000000 activations"), "{e}");
        assert_eq!(cfg(vec![Mode::Nanosleep], 1000, 1.0, false).hist_buckets(), 10_000);
        assert_eq!(cfg(vec![Mode::Nanosleep], 50, 1.0, false).hist_buckets(), 1000);
    }

    #[test]
    fn budget_sleep_follows_the_throttle() {
        let default = Throttle { runtime_us: 950_000, period_us: 1_000_000 };
        assert_eq!(budget_sleep_ns(1_000_000, Some(&default)), 100_000);
        assert_eq!(budget_sleep_ns(100_000, Some(&default)), 0, "10 us is not worth a sleep");
        assert_eq!(budget_sleep_ns(1_000_000, Some(&Throttle { runtime_us: -1, period_us: 1_000_000 })), 0);
        assert_eq!(budget_sleep_ns(1_000_000, Some(&Throttle { runtime_us: 700_000, period_us: 1_000_000 })), 0);
        assert_eq!(budget_sleep_ns(1_000_000, None), 0);
        assert_eq!(gap_threshold_ns(&default), 25_000_000);
    }
}
