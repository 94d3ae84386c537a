//! The two ways rtcell measures activation latency, one round at a time, each into a sample log (one
//! lateness in ns per activation): the cyclictest method on a SCHED_FIFO thread, and a cell's busy-poll
//! of the TSC (thread, process or kvm cell).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rtcell_cells::{Cell, CellKind, CellSpec, CellStatus, VmOptions, WorkloadSpec, control};
use rtcell_host::clock::{mono_ns, sleep_until};
use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::TscClock;
use rtcell_shm::RegionLayout;
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::samplelog::{self, SampleLogReader, SampleLogWriter};

use crate::{BenchError, stop_requested};

/// The sample log channel of a poll cell.
const LOG: &str = "latency.log";
/// How long a cell may take to report running, and to stop.
const START_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a long round says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// What one round measured.
#[derive(Debug, Default)]
pub struct RoundSamples {
    /// Lateness of each activation, ns.
    pub late_ns: Vec<u64>,
    /// Releases skipped because an activation came more than a period late.
    pub overruns: u64,
    /// Activations that found the log full.
    pub dropped: u64,
    /// Stopped early (Ctrl-C).
    pub incomplete: bool,
    /// Guarantees the measuring thread could not get.
    pub warnings: Vec<String>,
}

/// What a round is asked to do.
pub struct RoundSpec<'a> {
    /// Says what is measured in progress lines, e.g. "poll (thread cell), round 2/4".
    pub what: &'a str,
    pub cpu: usize,
    pub priority: i32,
    pub period_ns: u64,
    pub duration: Duration,
    /// Activations the log holds (the round's expected count and a margin).
    pub capacity: usize,
}

/// Holds `/dev/cpu_dma_latency` at 0 while alive, as cyclictest does: the PM QoS request that keeps the
/// CPUs out of idle states with an exit latency. The kernel drops the request when the file is closed.
pub struct DmaLatency(#[allow(dead_code)] std::fs::File);

impl DmaLatency {
    pub const PATH: &'static str = "/dev/cpu_dma_latency";

    pub fn hold() -> std::io::Result<DmaLatency> {
        let mut f = std::fs::OpenOptions::new().write(true).open(Self::PATH)?;
        // A binary 32-bit value (microseconds): 0.
        f.write_all(&0i32.to_ne_bytes())?;
        Ok(DmaLatency(f))
    }
}

/// Waits out a round, printing progress from the log, until `duration` has passed, a stop is requested
/// (`Ok(true)`), or `alive` reports the measuring side gone (its error).
fn wait_round(
    s: &RoundSpec<'_>,
    words: &[AtomicU64],
    mut alive: impl FnMut() -> Result<(), BenchError>,
) -> Result<bool, BenchError> {
    let t0 = Instant::now();
    let mut next_report = PROGRESS_EVERY;
    let (mut seen, mut worst) = (0usize, 0u64);
    while t0.elapsed() < s.duration {
        std::thread::sleep(Duration::from_millis(20).min(s.duration.saturating_sub(t0.elapsed())));
        alive()?;
        if stop_requested() {
            return Ok(true);
        }
        if t0.elapsed() >= next_report {
            next_report += PROGRESS_EVERY;
            if let Ok(r) = SampleLogReader::read(words) {
                worst = r.values_from(seen).fold(worst, u64::max);
                seen = r.count;
            }
            crate::progress!(
                "latency: {}: {:.0} of {:.0} s, {seen} activations, worst {:.1} us so far",
                s.what,
                t0.elapsed().as_secs_f64(),
                s.duration.as_secs_f64(),
                worst as f64 / 1e3
            );
        }
    }
    Ok(false)
}

fn read_log(words: &[AtomicU64], what: &str) -> Result<RoundSamples, BenchError> {
    let r = SampleLogReader::read(words).map_err(|e| BenchError::Other(format!("{what}: sample log: {e}")))?;
    Ok(RoundSamples {
        late_ns: r.values_from(0).collect(),
        overruns: r.overruns,
        dropped: r.dropped,
        ..RoundSamples::default()
    })
}

/// The cyclictest method: a SCHED_FIFO thread on the CPU, memory locked, sleeps with
/// clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) until each release and takes CLOCK_MONOTONIC right
/// after it wakes; lateness = wake time - release. A wake-up more than a period late skips the releases
/// already past, as cyclictest does.
pub fn nanosleep_round(s: &RoundSpec<'_>) -> Result<RoundSamples, BenchError> {
    let words: Arc<Vec<AtomicU64>> =
        Arc::new((0..samplelog::bytes_for(s.capacity) / 8).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let req = RtRequest { cpu: Some(s.cpu), fifo_priority: Some(s.priority), lock_memory: true };
    let (w, st, period) = (Arc::clone(&words), Arc::clone(&stop), s.period_ns);
    let thread = std::thread::Builder::new()
        .name("latency-nanosleep".into())
        .spawn(move || -> Result<Vec<String>, String> {
            let warnings = apply_rt(&req).map_err(|e| e.to_string())?;
            let mut log = SampleLogWriter::init(&w)?;
            log.prefault();
            let mut next = mono_ns() + period;
            while !st.load(Ordering::Relaxed) {
                sleep_until(next);
                let now = mono_ns();
                log.push(now.saturating_sub(next));
                next += period;
                if now > next {
                    let missed = (now - next) / period + 1;
                    log.add_overruns(missed);
                    next += missed * period;
                }
            }
            Ok(warnings)
        })
        .map_err(|e| BenchError::Other(format!("cannot start the nanosleep thread: {e}")))?;
    let waited = wait_round(s, &words, || {
        if thread.is_finished() {
            Err(BenchError::Other(format!("{}: the thread ended early", s.what)))
        } else {
            Ok(())
        }
    });
    stop.store(true, Ordering::Relaxed);
    let warnings = match thread.join() {
        Ok(Ok(w)) => w,
        Ok(Err(e)) => return Err(BenchError::Other(format!("{}: {e}", s.what))),
        Err(_) => return Err(BenchError::Other(format!("{}: the thread panicked", s.what))),
    };
    let incomplete = waited?;
    crate::release_thread();
    let mut r = read_log(&words, s.what)?;
    r.incomplete = incomplete;
    r.warnings = warnings;
    Ok(r)
}

/// A cell's activation: a `kind` cell on the CPU busy-polls the TSC until each release and logs its
/// lateness (thread and process cells: `rtcell_cells::activation`; kvm cells: the `spin` payload).
/// `sleep_ns`: how long it sleeps after each activation to give CPU time back (0: never).
pub fn poll_round(
    s: &RoundSpec<'_>,
    kind: CellKind,
    sleep_ns: u64,
    tsc: &TscClock,
) -> Result<RoundSamples, BenchError> {
    let name = "latency";
    let mut layout = RegionLayout::new();
    if kind == CellKind::Kvm {
        // The kvm cell must not write the region header: channels on pages of their own.
        layout.page_aligned();
    }
    let lerr = |e: rtcell_shm::LayoutError| BenchError::Other(format!("latency region layout: {e}"));
    layout.raw(LOG, samplelog::bytes_for(s.capacity)).map_err(lerr)?;
    control::add_to_layout(&mut layout, name).map_err(lerr)?;
    let shm = SharedMemory::create_anonymous("rtcell-latency", layout.size_bytes())
        .map_err(|e| BenchError::Other(format!("cannot create the shared region: {e}")))?;
    layout.init(shm.words(), std::process::id()).map_err(lerr)?;
    let shm = Arc::new(shm);
    let region = crate::rig::region(&shm)?;
    let words = region.raw(LOG).map_err(|e| BenchError::Other(format!("latency region: {e}")))?;
    let period_ms = s.period_ns.div_ceil(1_000_000);
    let spec = CellSpec {
        name: name.into(),
        kind,
        cpu: s.cpu,
        priority: Some(s.priority),
        lock_memory: true,
        workload: WorkloadSpec::Poll { log: LOG.into(), period_ns: s.period_ns, sleep_ns, tsc_khz: tsc.khz() },
        // The payload beats once per activation: the watchdog must outlast a few periods.
        vm: VmOptions { watchdog_ms: Some(1000.max(4 * period_ms)), ..VmOptions::default() },
    };
    rtcell_cells::set_tsc_khz(tsc.khz());
    let mut cell = Cell::start(spec, Arc::clone(&shm))?;
    cell.wait_running(START_TIMEOUT)?;
    let warnings = cell.warnings().to_vec();
    let waited = wait_round(s, words, || {
        let st = cell.status();
        if st.is_finished() {
            Err(BenchError::Other(format!("{}: the {kind} cell on CPU {} {st}", s.what, s.cpu)))
        } else {
            Ok(())
        }
    });
    let report = cell.stop(STOP_TIMEOUT);
    let incomplete = waited?;
    if !matches!(report.status, CellStatus::Stopped) {
        return Err(BenchError::Other(format!(
            "{}: the {kind} cell ended {} instead of stopping",
            s.what, report.status
        )));
    }
    let mut r = read_log(words, s.what)?;
    r.incomplete = incomplete;
    r.warnings = warnings;
    Ok(r)
}
