//! `rtcell bench itc` — seed 002's inter-task communication experiment on this Linux, with rtcell's
//! channels beside the kernel's. Two SCHED_FIFO threads, the requester at priority 95 and the responder
//! at 90, on one CPU or on two, exchange a payload: the requester sends a random payload, the responder
//! receives it into its own buffer and sends it back, the requester checks every byte and times the
//! round trip with the TSC. Back to back, or one exchange per period (seed 002: every 10 ms).

mod driver;
mod end;
mod guarded;
mod kernel;
mod ring;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::TscClock;
use rtcell_report::table::{Table, fmt_us};
use rtcell_report::{Kind, Suite, labels};

use crate::c2c::{self, C2cConfig, C2cMeasurement};
use crate::{BenchError, SuiteRun, series_us, stop_requested};
use rtcell_loads::{Load, RunningLoad};

/// Largest payload (bytes).
pub const MAX_SIZE: usize = 65536;
/// Seed 002's payload sizes, 4 to 3072 bytes.
pub const DEFAULT_SIZES: [usize; 11] = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072];
/// Exchanges per cell, back to back.
pub const DEFAULT_ITERATIONS: usize = 10_000;
pub const QUICK_ITERATIONS: usize = 1_000;
/// Exchanges per cell, periodic.
pub const DEFAULT_PERIODIC_ITERATIONS: usize = 200;
pub const QUICK_PERIODIC_ITERATIONS: usize = 20;
/// Seed 002's period: one exchange every 10 ms.
pub const DEFAULT_PERIOD_US: u64 = 10_000;
/// Seed 002's priorities.
pub const REQUESTER_PRIORITY: i32 = 95;
pub const RESPONDER_PRIORITY: i32 = 90;
/// Exchanges before measuring, back to back and periodic (caches, page faults, wake-up paths).
const WARMUP_BACK_TO_BACK: usize = 1000;
const WARMUP_PERIODIC: usize = 2;
/// Shortest watchdog: no exchange completed for this long stops a measurement.
const WATCHDOG_MIN: Duration = Duration::from_secs(2);
const NOT_APPLICABLE: &str = "not applicable: a polled channel needs its own CPU";

/// An inter-task communication mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mechanism {
    Pipe,
    Fifo,
    Mqueue,
    UnixStream,
    UnixDgram,
    Semaphore,
    Mutex,
    Condvar,
    Futex,
    Eventfd,
    RingFutex,
    RingPoll,
}

/// Where a mechanism's payload travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// The kernel copies it (write/read, send/recv, mq_send/mq_receive).
    Kernel,
    /// A buffer the signalling mechanism guards: written before the signal, read after the wake-up.
    SharedBuffer,
    /// An rtcell ring in shared memory.
    Ring,
}

impl DataPath {
    pub fn as_str(self) -> &'static str {
        match self {
            DataPath::Kernel => "kernel",
            DataPath::SharedBuffer => "shared-buffer",
            DataPath::Ring => "ring",
        }
    }
}

impl Mechanism {
    pub const ALL: [Mechanism; 12] = [
        Mechanism::Pipe,
        Mechanism::Fifo,
        Mechanism::Mqueue,
        Mechanism::UnixStream,
        Mechanism::UnixDgram,
        Mechanism::Semaphore,
        Mechanism::Mutex,
        Mechanism::Condvar,
        Mechanism::Futex,
        Mechanism::Eventfd,
        Mechanism::RingFutex,
        Mechanism::RingPoll,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::Pipe => "pipe",
            Mechanism::Fifo => "fifo",
            Mechanism::Mqueue => "mqueue",
            Mechanism::UnixStream => "unix-stream",
            Mechanism::UnixDgram => "unix-dgram",
            Mechanism::Semaphore => "semaphore",
            Mechanism::Mutex => "mutex",
            Mechanism::Condvar => "condvar",
            Mechanism::Futex => "futex",
            Mechanism::Eventfd => "eventfd",
            Mechanism::RingFutex => "ring-futex",
            Mechanism::RingPoll => "ring-poll",
        }
    }

    pub fn data_path(self) -> DataPath {
        match self {
            Mechanism::Pipe | Mechanism::Fifo | Mechanism::Mqueue | Mechanism::UnixStream | Mechanism::UnixDgram => {
                DataPath::Kernel
            }
            Mechanism::Semaphore | Mechanism::Mutex | Mechanism::Condvar | Mechanism::Futex | Mechanism::Eventfd => {
                DataPath::SharedBuffer
            }
            Mechanism::RingFutex | Mechanism::RingPoll => DataPath::Ring,
        }
    }

    /// A kernel mechanism (everything but rtcell's rings), for the speed goal.
    pub fn is_kernel(self) -> bool {
        self.data_path() != DataPath::Ring
    }

    /// Whether both sides busy-poll (so each needs a CPU of its own).
    pub fn polls(self) -> bool {
        self == Mechanism::RingPoll
    }

    fn names() -> String {
        Mechanism::ALL.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mechanism::ALL
            .iter()
            .copied()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown mechanism {s:?}: use {} or all", Mechanism::names()))
    }
}

/// Where the two threads run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Both on the requester's CPU: every exchange is two context switches.
    SameCpu,
    /// Each on a CPU of its own: every exchange is two cross-CPU wake-ups (or cache-line transfers).
    CrossCpu,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::SameCpu => "same-cpu",
            Placement::CrossCpu => "cross-cpu",
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "same-cpu" => Ok(Placement::SameCpu),
            "cross-cpu" => Ok(Placement::CrossCpu),
            other => Err(format!("unknown placement {other:?}: use same-cpu or cross-cpu")),
        }
    }
}

/// When the requester starts an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Right after the previous reply: caches and wake-up paths stay warm.
    BackToBack,
    /// One exchange per period on an absolute grid, both sides asleep in between (seed 002).
    Periodic,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::BackToBack => "back-to-back",
            Trigger::Periodic => "periodic",
        }
    }
}

impl std::str::FromStr for Trigger {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "back-to-back" => Ok(Trigger::BackToBack),
            "periodic" => Ok(Trigger::Periodic),
            other => Err(format!("unknown trigger {other:?}: use back-to-back or periodic")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ItcConfig {
    /// The requester's CPU; with `same-cpu` the responder's too.
    pub requester_cpu: usize,
    /// The responder's CPU with `cross-cpu`.
    pub responder_cpu: usize,
    pub mechanisms: Vec<Mechanism>,
    /// Payload bytes, 1..=[`MAX_SIZE`].
    pub sizes: Vec<usize>,
    pub placements: Vec<Placement>,
    pub triggers: Vec<Trigger>,
    /// Measured exchanges per cell, back to back.
    pub iterations: usize,
    /// Measured exchanges per cell, periodic.
    pub periodic_iterations: usize,
    pub period_us: u64,
    pub load: Load,
    /// Seed of the random payloads.
    pub seed: u64,
}

impl ItcConfig {
    fn warmup(&self, trigger: Trigger) -> usize {
        match trigger {
            Trigger::BackToBack => WARMUP_BACK_TO_BACK,
            Trigger::Periodic => WARMUP_PERIODIC,
        }
    }

    fn iterations_for(&self, trigger: Trigger) -> usize {
        match trigger {
            Trigger::BackToBack => self.iterations,
            Trigger::Periodic => self.periodic_iterations,
        }
    }

    fn responder_cpu_for(&self, placement: Placement) -> usize {
        match placement {
            Placement::SameCpu => self.requester_cpu,
            Placement::CrossCpu => self.responder_cpu,
        }
    }

    fn applicable(&self, m: Mechanism, p: Placement) -> bool {
        !(m.polls() && p == Placement::SameCpu)
    }

    /// The periodic cells alone take this long (the back-to-back ones depend on the mechanisms).
    pub fn periodic_duration(&self) -> Duration {
        if !self.triggers.contains(&Trigger::Periodic) {
            return Duration::ZERO;
        }
        let cells: usize = self
            .placements
            .iter()
            .map(|&p| self.mechanisms.iter().filter(|&&m| self.applicable(m, p)).count() * self.sizes.len())
            .sum();
        let per_cell = (WARMUP_PERIODIC + self.periodic_iterations) as u64 * self.period_us;
        Duration::from_micros(cells as u64 * per_cell)
    }
}

/// Both ends of `mechanism` for `size`-byte messages: (requester's, responder's).
fn open(mechanism: Mechanism, size: usize, ctl: &Arc<end::Ctl>) -> Result<end::Pair, end::Fault> {
    match mechanism {
        Mechanism::Pipe => kernel::pipes(ctl),
        Mechanism::Fifo => kernel::fifos(ctl),
        Mechanism::Mqueue => kernel::mqueues(size, ctl),
        Mechanism::UnixStream => kernel::unix_stream(ctl),
        Mechanism::UnixDgram => kernel::unix_dgram(ctl),
        Mechanism::Semaphore => guarded::semaphores(size, ctl),
        Mechanism::Mutex => guarded::mutexes(size, ctl),
        Mechanism::Condvar => guarded::condvars(size, ctl),
        Mechanism::Futex => guarded::futexes(size, ctl),
        Mechanism::Eventfd => guarded::eventfds(size, ctl),
        Mechanism::RingFutex => ring::rings(size, true, ctl),
        Mechanism::RingPoll => ring::rings(size, false, ctl),
    }
}

/// One measured cell of the matrix.
struct CellRun {
    mechanism: Mechanism,
    size: usize,
    placement: Placement,
    trigger: Trigger,
    m: driver::Measured,
}

/// Runs the whole suite.
pub fn run(tsc: &TscClock, cfg: &ItcConfig) -> Result<SuiteRun, BenchError> {
    let mut warnings = Vec::new();
    rtcell_host::kick::Kick::BenchWait.install();
    // Memory locked once for the process; every side's thread is born locked.
    warnings.extend(apply_rt(&RtRequest { cpu: None, fifo_priority: None, lock_memory: true })?);
    let load = RunningLoad::start_beside_master(cfg.load, cfg.requester_cpu, cfg.responder_cpu, &mut warnings)?;
    let pool = Arc::new(driver::payload_pool(cfg.seed));
    let period_ns = cfg.period_us * 1000;
    // Generous beside any exchange, and above a period (the responder waits a whole period for a request).
    let watchdog = WATCHDOG_MIN.max(Duration::from_nanos(2 * period_ns) + Duration::from_secs(1));
    let watchdog_ticks = tsc.ns_to_ticks(watchdog.as_nanos() as f64);
    let periodic = cfg.periodic_duration();
    crate::progress!(
        "itc: {} mechanisms x {} sizes x {} placements x {} triggers{}",
        cfg.mechanisms.len(),
        cfg.sizes.len(),
        cfg.placements.len(),
        cfg.triggers.len(),
        if periodic.is_zero() {
            String::new()
        } else {
            format!("; the periodic cells alone take {:.0} s", periodic.as_secs_f64())
        }
    );

    let mut thread_warnings = BTreeSet::new();
    let mut floor = None;
    let mut cells = Vec::new();
    let mut incomplete = false;
    let mut failure = None;
    // The c2c floor is taken right before the cells it is compared with (the polled ring's, cross-CPU,
    // back to back; else the first cross-CPU cells): it moves with where the outer hypervisor runs our
    // vCPUs, which can change within a minute.
    let floor_at = (cfg.triggers.contains(&Trigger::BackToBack) && cfg.mechanisms.contains(&Mechanism::RingPoll))
        .then_some((Trigger::BackToBack, Mechanism::RingPoll));
    'all: for &placement in &cfg.placements {
        let responder_cpu = cfg.responder_cpu_for(placement);
        for &trigger in &cfg.triggers {
            for &mechanism in &cfg.mechanisms {
                if !cfg.applicable(mechanism, placement) {
                    continue;
                }
                if placement == Placement::CrossCpu
                    && floor.is_none()
                    && floor_at.is_none_or(|at| at == (trigger, mechanism))
                {
                    let c = C2cConfig {
                        cpu_a: cfg.requester_cpu,
                        cpu_b: cfg.responder_cpu,
                        samples: 20_000,
                        batches: 20,
                        batch: 1000,
                        priority: Some(REQUESTER_PRIORITY),
                    };
                    crate::progress!("itc: c2c floor between CPU {} and CPU {} ...", c.cpu_a, c.cpu_b);
                    let m = c2c::measure(&c)?;
                    thread_warnings.extend(m.warnings.iter().cloned());
                    floor = Some((c, m));
                }
                // One progress line per mechanism, said when its sizes are done (or it stops).
                let mut line =
                    format!("itc: {}, {}, {}, bytes:", placement.as_str(), trigger.as_str(), mechanism.as_str());
                for &size in &cfg.sizes {
                    if stop_requested() {
                        incomplete = true;
                        crate::progress::say(&line);
                        break 'all;
                    }
                    line.push_str(&format!(" {size}"));
                    let job = driver::Job {
                        mechanism,
                        size,
                        requester_cpu: cfg.requester_cpu,
                        responder_cpu,
                        period_ns: (trigger == Trigger::Periodic).then_some(period_ns),
                        warmup: cfg.warmup(trigger),
                        iterations: cfg.iterations_for(trigger),
                        pool: &pool,
                        watchdog,
                        watchdog_ticks,
                    };
                    match driver::measure(&job) {
                        Ok(mut m) => {
                            if m.aborted.is_some() {
                                line.push_str(" (aborted)");
                            }
                            thread_warnings.extend(m.warnings.drain(..));
                            let interrupted = m.interrupted;
                            cells.push(CellRun { mechanism, size, placement, trigger, m });
                            if interrupted {
                                incomplete = true;
                                crate::progress::say(&line);
                                break 'all;
                            }
                        }
                        Err(e) => {
                            failure = Some(e.to_string());
                            incomplete = true;
                            crate::progress::say(&line);
                            break 'all;
                        }
                    }
                }
                line.push_str(" B");
                crate::progress::say(&line);
            }
        }
    }
    let load_bps = load.stop();
    warnings.extend(thread_warnings);
    let mut run = build(tsc, cfg, &cells, floor.as_ref(), load_bps, warnings, incomplete);
    if let Some(f) = &failure {
        run.warnings.push(format!("run broke off: {f}"));
    }
    run.failure = failure;
    Ok(run)
}

/// Medians of the cross-CPU back-to-back cells, for the speed goal: (mechanism, bytes) -> median us.
type Medians = BTreeMap<(Mechanism, usize), f64>;

fn build(
    tsc: &TscClock,
    cfg: &ItcConfig,
    cells: &[CellRun],
    floor: Option<&(C2cConfig, C2cMeasurement)>,
    load_bps: f64,
    mut warnings: Vec<String>,
    incomplete: bool,
) -> SuiteRun {
    let mut series = Vec::new();
    let mut total_errors = 0;
    let mut aborted = Vec::new();
    // (placement, trigger, mechanism, size) -> the cell's series.
    let mut by_cell: BTreeMap<(&str, &str, Mechanism, usize), usize> = BTreeMap::new();
    for c in cells {
        let errors = c.m.mismatches + u64::from(c.m.aborted.is_some());
        total_errors += errors;
        let mut l = labels!(
            "mechanism" => c.mechanism.as_str(),
            "bytes" => c.size,
            "placement" => c.placement.as_str(),
            "trigger" => c.trigger.as_str(),
            "load" => cfg.load.as_str(),
            "data" => c.mechanism.data_path().as_str(),
            "requester_cpu" => cfg.requester_cpu,
            "responder_cpu" => cfg.responder_cpu_for(c.placement),
        );
        if c.trigger == Trigger::Periodic {
            l.insert("period_us".into(), cfg.period_us.to_string());
        }
        if let Some(why) = &c.m.aborted {
            let what =
                format!("{} {} B, {}, {}", c.mechanism.as_str(), c.size, c.placement.as_str(), c.trigger.as_str());
            warnings.push(format!("itc {what}: {why} (counted as an error)"));
            aborted.push(serde_json::json!({
                "mechanism": c.mechanism.as_str(), "bytes": c.size, "placement": c.placement.as_str(),
                "trigger": c.trigger.as_str(), "reason": why,
            }));
        }
        if c.m.mismatches > 0 {
            warnings.push(format!(
                "itc {} {} B, {}, {}: {} replies differed from the request",
                c.mechanism.as_str(),
                c.size,
                c.placement.as_str(),
                c.trigger.as_str(),
                c.m.mismatches
            ));
        }
        by_cell.insert((c.placement.as_str(), c.trigger.as_str(), c.mechanism, c.size), series.len());
        series.push(series_us(tsc, "itc_rtt", l, Kind::RoundTrip, &c.m.ticks, errors));
    }

    let mut text = String::new();
    let mut not_applicable = Vec::new();
    let host = rtcell_host::facts::HostFacts::collect(Some(tsc.khz()));
    let host_text = format!(
        "host {}, kernel preemption {}",
        host.hypervisor.as_ref().map_or("bare metal".to_string(), |h| format!("a virtual machine ({h})")),
        host.preempt
    );
    for &placement in &cfg.placements {
        for &trigger in &cfg.triggers {
            text.push_str(&format!(
                "\nITC round trip (request -> reply, timed by the requester with the TSC), median in us by payload size: {}, {}\n  {}; {}; load {}; {host_text}\n",
                placement.as_str(),
                trigger.as_str(),
                placement_text(cfg, placement),
                trigger_text(cfg, trigger),
                cfg.load.as_str()
            ));
            let mut headers = vec!["mechanism".to_string(), "data".to_string()];
            headers.extend(cfg.sizes.iter().map(|s| format!("{s} B")));
            headers.extend(["p99.9 (worst size)".into(), "max (worst size)".into(), "errors".into()]);
            let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
            // Figures line up even in columns that hold "n/a".
            for col in 2..headers.len() {
                t.right_align(col);
            }
            let mut has_na = false;
            for &m in &cfg.mechanisms {
                let mut row = vec![m.as_str().to_string(), m.data_path().as_str().to_string()];
                if !cfg.applicable(m, placement) {
                    has_na = true;
                    row.extend(cfg.sizes.iter().map(|_| "n/a".to_string()));
                    row.extend(["n/a".into(), "n/a".into(), "-".into()]);
                    t.row(row);
                    not_applicable.push(serde_json::json!({
                        "mechanism": m.as_str(), "placement": placement.as_str(), "trigger": trigger.as_str(),
                        "reason": NOT_APPLICABLE,
                    }));
                    continue;
                }
                let (mut p999, mut max, mut errors) = (f64::NAN, f64::NAN, 0u64);
                for &size in &cfg.sizes {
                    match by_cell.get(&(placement.as_str(), trigger.as_str(), m, size)).map(|&i| &series[i]) {
                        Some(s) if s.stats.count > 0 => {
                            row.push(fmt_us(s.stats.median * 1000.0));
                            p999 = p999.max(s.stats.p999);
                            max = max.max(s.stats.max);
                            errors += s.errors;
                        }
                        Some(s) => {
                            row.push("-".into());
                            errors += s.errors;
                        }
                        None => row.push("-".into()),
                    }
                }
                row.extend([fmt_us(p999 * 1000.0), fmt_us(max * 1000.0), errors.to_string()]);
                t.row(row);
            }
            text.push_str(&t.render());
            text.push('\n');
            if has_na {
                text.push_str(&format!(
                    "  ring-poll n/a: {NOT_APPLICABLE} (two SCHED_FIFO threads on one CPU: the higher-priority side would spin forever and the other never run)\n"
                ));
            }
        }
    }
    text.push_str(
        "data: kernel = the kernel copies the payload; shared-buffer = the payload sits in a buffer the mechanism guards \
         (written before the signal, read after the wake-up); ring = rtcell ring in shared memory. \
         Every reply is checked byte for byte; p99.9 and max of every cell are in results.json (series itc_rtt).\n",
    );
    if cfg.mechanisms.contains(&Mechanism::Mutex) && cells.iter().any(|c| c.placement == Placement::CrossCpu) {
        text.push_str(
            "mutex across CPUs: the kernel's PI futex waiter (rt_mutex) spins while the owner runs on another CPU \
             (adaptive spinning) instead of sleeping, so both CPUs stay busy, as with a polled ring.\n",
        );
    }
    text.push_str(&seed_002_line());
    if let Some((runtime, period)) = rt_throttling() {
        text.push_str(&format!(
            "RT throttling is on (sched_rt_runtime_us {runtime} of sched_rt_period_us {period}): a CPU kept busy by \
             SCHED_FIFO threads (same-cpu back-to-back, a spinning waiter) is taken from them for up to {:.0} ms of \
             every {:.0} ms so normal tasks run; maxima near that are the throttling, not the mechanism (rtcell check \
             shows the fix)\n",
            (period - runtime) as f64 / 1000.0,
            period as f64 / 1000.0
        ));
    }
    let mut floor_ns = None;
    if let Some((c, m)) = floor {
        let before = if cfg.triggers.contains(&Trigger::BackToBack) && cfg.mechanisms.contains(&Mechanism::RingPoll) {
            "the polled ring's cells"
        } else {
            "the first cross-CPU cells"
        };
        let s = c2c::series(tsc, c, m);
        floor_ns = s.first().map(|x| x.stats.median);
        text.push_str(&format!(
            "c2c floor, CPU {} <-> CPU {}, taken right before {before}: cache-line round trip median {:.1} ns \
             (each timed), one way median {:.1} ns (batch RTT / 2); the floor under any shared-memory channel between these \
             CPUs, and it moves with where the outer hypervisor runs our vCPUs\n",
            c.cpu_a,
            c.cpu_b,
            s.first().map_or(f64::NAN, |x| x.stats.median),
            s.get(1).map_or(f64::NAN, |x| x.stats.median),
        ));
        series.extend(s);
    }

    let medians: Medians = cells
        .iter()
        .filter(|c| c.placement == Placement::CrossCpu && c.trigger == Trigger::BackToBack)
        .filter_map(|c| {
            let s = &series[by_cell[&(c.placement.as_str(), c.trigger.as_str(), c.mechanism, c.size)]];
            (s.stats.count > 0 && s.errors == 0).then_some(((c.mechanism, c.size), s.stats.median))
        })
        .collect();
    let (goal_text, goal_json) = speed_goal(cfg, &medians);
    text.push_str(&goal_text);
    if cfg.load != Load::None {
        text.push_str(&format!(
            "load {} beside the requester (every CPU but {}): {:.2} GB/s copied while measuring\n",
            cfg.load.as_str(),
            cfg.responder_cpu,
            load_bps / 1e9
        ));
    }
    if total_errors > 0 {
        warnings.push(format!("{total_errors} exchanges failed (wrong reply or aborted measurement): this run FAILED"));
    }
    let config = serde_json::json!({
        "requester_cpu": cfg.requester_cpu,
        "responder_cpu": cfg.responder_cpu,
        "requester_priority": REQUESTER_PRIORITY,
        "responder_priority": RESPONDER_PRIORITY,
        "mechanisms": cfg.mechanisms.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        "data_paths": cfg.mechanisms.iter().map(|m| (m.as_str(), m.data_path().as_str())).collect::<BTreeMap<_, _>>(),
        "sizes": cfg.sizes,
        "placements": cfg.placements.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "triggers": cfg.triggers.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
        "iterations": cfg.iterations,
        "periodic_iterations": cfg.periodic_iterations,
        "period_us": cfg.period_us,
        "warmup": { "back-to-back": WARMUP_BACK_TO_BACK, "periodic": WARMUP_PERIODIC },
        "load": cfg.load.as_str(),
        "load_bytes_per_s": load_bps,
        "seed": cfg.seed,
        "tsc_khz": tsc.khz(),
        "not_applicable": not_applicable,
        "aborted": aborted,
        "speed_goal": goal_json,
        "c2c_floor_round_trip_ns": floor_ns,
    });
    let mut suite = Suite::new("itc", config);
    suite.series = series;
    SuiteRun { suite, text, warnings, incomplete, errors: total_errors, failure: None }
}

/// (sched_rt_runtime_us, sched_rt_period_us) when RT throttling is on (as by default), else `None`.
fn rt_throttling() -> Option<(i64, i64)> {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{f}")).ok()?.trim().parse::<i64>().ok();
    let (runtime, period) = (read("sched_rt_runtime_us")?, read("sched_rt_period_us")?);
    (runtime >= 0 && runtime < period).then_some((runtime, period))
}

fn placement_text(cfg: &ItcConfig, p: Placement) -> String {
    match p {
        Placement::SameCpu => format!(
            "same CPU: requester (SCHED_FIFO {REQUESTER_PRIORITY}) and responder (SCHED_FIFO {RESPONDER_PRIORITY}) on CPU {}",
            cfg.requester_cpu
        ),
        Placement::CrossCpu => format!(
            "cross-CPU: requester CPU {} (SCHED_FIFO {REQUESTER_PRIORITY}), responder CPU {} (SCHED_FIFO {RESPONDER_PRIORITY})",
            cfg.requester_cpu, cfg.responder_cpu
        ),
    }
}

fn trigger_text(cfg: &ItcConfig, t: Trigger) -> String {
    match t {
        Trigger::BackToBack => format!("back-to-back, {} exchanges per cell", cfg.iterations),
        Trigger::Periodic => format!(
            "periodic, one exchange every {} ms (seed 002: 10 ms), {} exchanges per cell",
            cfg.period_us as f64 / 1000.0,
            cfg.periodic_iterations
        ),
    }
}

/// Seed 002's PREEMPT_RT figures, for scale: another platform and a one-way handoff.
fn seed_002_line() -> String {
    let mut parts = Vec::new();
    for (metric, what) in [("itc_semaphore", "semaphore"), ("itc_mutex", "mutex")] {
        for r in rtcell_report::published::for_metric(metric) {
            if let Some(mean) = r.mean {
                parts.push(format!("{} {what} {mean} us", r.platform));
            }
        }
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "seed 002 Table 4 (PREEMPT_RT, mean release -> acquire between tasks at priority 95/90, no payload; other platforms, for scale): {}\n",
        parts.join("; ")
    )
}

/// The goal: the polled ring's median round trip at least 20 x below the best kernel mechanism's, across
/// CPUs, back to back, at 4 and at 3072 bytes.
fn speed_goal(cfg: &ItcConfig, medians: &Medians) -> (String, Vec<serde_json::Value>) {
    let mut text = String::from(
        "\nSpeed goal (cross-CPU, back-to-back, medians of round trips; goal: rtcell ring polled >= 20 x faster than the best kernel mechanism):\n",
    );
    let mut json = Vec::new();
    for size in [4usize, 3072] {
        let best = medians
            .iter()
            .filter(|((m, s), _)| m.is_kernel() && *s == size)
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|((m, _), &v)| (*m, v));
        let ring = medians.get(&(Mechanism::RingPoll, size)).copied();
        match (best, ring) {
            (Some((m, k)), Some(r)) if r > 0.0 => {
                let ratio = k / r;
                text.push_str(&format!(
                    "  best kernel mechanism at {size} B: {} (median {:.3} µs); rtcell ring polled: {:.3} µs; ratio {ratio:.1} x (goal >= 20 x)\n",
                    m.as_str(),
                    k,
                    r
                ));
                json.push(serde_json::json!({
                    "bytes": size, "best_kernel_mechanism": m.as_str(), "kernel_median_us": k,
                    "ring_poll_median_us": r, "ratio": ratio, "goal": 20.0,
                }));
                // The PI mutex busy-waits in the kernel across CPUs; set the ring beside the best
                // kernel mechanism that sleeps too.
                if m == Mechanism::Mutex
                    && let Some(((s, _), &v)) = medians
                        .iter()
                        .filter(|((x, s), _)| x.is_kernel() && *x != Mechanism::Mutex && *s == size)
                        .min_by(|a, b| a.1.total_cmp(b.1))
                {
                    text.push_str(&format!(
                        "    (best kernel mechanism whose waiter sleeps: {} (median {v:.3} µs); ratio {:.1} x)\n",
                        s.as_str(),
                        v / r
                    ));
                }
            }
            _ => text.push_str(&format!(
                "  at {size} B: not measured in this run (needs --placement cross-cpu, --trigger back-to-back, --sizes {size}, ring-poll and a kernel mechanism{})\n",
                if cfg.sizes.contains(&size) { ", without errors" } else { "" }
            )),
        }
    }
    (text, json)
}
