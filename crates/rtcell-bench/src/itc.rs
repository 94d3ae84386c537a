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

mod report;
use report::build;

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
