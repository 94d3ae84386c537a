//! The executive: one SCHED_FIFO thread per task, pinned to the task's CPU at the task's priority,
//! released by `clock_nanosleep(TIMER_ABSTIME)` on a common grid, so that priorities preempt as on a
//! PREEMPT_RT controller.
//!
//! Per cycle: latency = actual start - intended release (CLOCK_MONOTONIC, the clock the sleep uses);
//! execution time = end - start (ordered TSC reads); overrun = the cycle completed after
//! `release + deadline`. Then the watchdog judges the execution time, and if the cycle ran past the next
//! release the missed-cycle policy decides what comes next.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::rdtsc_ordered;
use rtcell_shm::histogram::HistogramWriter;
use rtcell_shm::{RegionView, SignalView};

use crate::chan::Frames;
use crate::corrupt::StepError;
use crate::params::ParamReader;
use crate::spec::{MissedPolicy, OnCorrupt, TaskSpec};
use crate::stats::{
    BUCKET_NS, BUCKETS, Schedule, StatsWriter, TaskCounters, TaskState, exec_channel, latency_channel, read_counters,
};
use crate::work::{Body, CycleInfo, write_f64s};
use rtcell_host::clock::{mono_ns, sleep_ns, sleep_until_or_stop};

/// How long tasks may take to get ready (calibration, files) before the set gives up.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Poll interval while waiting for the common start.
const GO_POLL_NS: u64 = 200_000;

/// How a task set ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetOutcome {
    /// Tasks whose watchdog tripped: (task, reason).
    pub tripped: Vec<(String, String)>,
    /// Tasks that could not run: (task, reason).
    pub faulted: Vec<(String, String)>,
    /// A stop was requested before the end.
    pub stopped: bool,
    /// Each task's own record of its counters (kept off the shared region, so a peer that scribbles
    /// the region cannot change them); a task that could not attach its statistics has none.
    pub counters: Vec<(String, TaskCounters)>,
}

/// Where a task set learns that it must stop early.
pub trait StopSignal: Sync {
    fn stop_requested(&self) -> bool;
}

impl StopSignal for AtomicBool {
    fn stop_requested(&self) -> bool {
        self.load(Ordering::Relaxed)
    }
}

impl StopSignal for rtcell_shm::control::ControlBlock<'_> {
    fn stop_requested(&self) -> bool {
        rtcell_shm::control::ControlBlock::stop_requested(self)
    }
}

/// ns per TSC tick from a kHz figure, calibrating when it is 0.
fn ns_per_tick(tsc_khz: u64) -> f64 {
    let khz = if tsc_khz > 0 {
        tsc_khz
    } else {
        rtcell_host::tsc::TscClock::calibrate().map(|c| c.khz()).unwrap_or(1_000_000)
    };
    1e6 / khz as f64
}

/// Runs `tasks` to the end of the schedule (or a stop), each in its own thread, and returns how they
/// ended. `on_ready` is called once every task is initialised, with the guarantees that could not be had
/// (no SCHED_FIFO, no mlock), before any task is released; `beat` is called every few ms while the tasks
/// run (a cell's heartbeat). The calling thread only supervises: it sleeps at normal priority.
pub fn run_set(
    tasks: &[TaskSpec],
    region: &RegionView<'_>,
    stop: &dyn StopSignal,
    on_ready: &mut dyn FnMut(&[String]),
    beat: &dyn Fn(),
) -> SetOutcome {
    run_set_scheduled(tasks, region, None, stop, on_ready, beat)
}

/// [`run_set`] following `schedule` instead of the region's schedule block (`None`): the Linux side
/// follows the supervisor's own copy ([`crate::PrivateSchedule`]), which no cell can write.
pub fn run_set_scheduled(
    tasks: &[TaskSpec],
    region: &RegionView<'_>,
    schedule: Option<Schedule<'_>>,
    stop: &dyn StopSignal,
    on_ready: &mut dyn FnMut(&[String]),
    beat: &dyn Fn(),
) -> SetOutcome {
    let warnings = Mutex::new(Vec::<String>::new());
    let halt = AtomicBool::new(false);
    let mut outcome = SetOutcome::default();
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for t in tasks {
            let (warnings, halt) = (&warnings, &halt);
            let h = std::thread::Builder::new().name(format!("task-{}", t.name)).spawn_scoped(s, move || {
                task_main(t, region, schedule, stop, halt, warnings).map(|c| (t.name.clone(), c))
            });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => outcome.faulted.push((t.name.clone(), format!("cannot start its thread: {e}"))),
            }
        }
        // Wait until every task is ready (or has failed).
        let t0 = std::time::Instant::now();
        loop {
            let states: Vec<Option<TaskState>> =
                tasks.iter().map(|t| read_counters(region, &t.name).ok().and_then(|c| c.state)).collect();
            if states.iter().all(|s| matches!(s, Some(st) if *st != TaskState::Starting)) {
                break;
            }
            if t0.elapsed() > READY_TIMEOUT || stop.stop_requested() || !outcome.faulted.is_empty() {
                halt.store(true, Ordering::Relaxed);
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for t in tasks {
            if let Ok(c) = read_counters(region, &t.name)
                && c.state == Some(TaskState::Faulted)
            {
                outcome.faulted.push((t.name.clone(), c.message));
            }
        }
        if outcome.faulted.is_empty() && !halt.load(Ordering::Relaxed) {
            let w = warnings.lock().map(|w| w.clone()).unwrap_or_default();
            on_ready(&w);
        } else {
            halt.store(true, Ordering::Relaxed);
        }
        // Supervise at normal priority: never take the CPU from a task.
        let _ = rtcell_host::sched::set_normal();
        while !handles.iter().all(|h| h.is_finished()) {
            beat();
            if stop.stop_requested() {
                outcome.stopped = true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for h in handles {
            if let Ok(Some(c)) = h.join() {
                outcome.counters.push(c);
            }
        }
    });
    for t in tasks {
        let own = outcome.counters.iter().find(|(n, _)| n == &t.name).map(|(_, c)| c.clone());
        if let Some(c) = own.or_else(|| read_counters(region, &t.name).ok()) {
            match c.state {
                Some(TaskState::Tripped) => outcome.tripped.push((t.name.clone(), c.message)),
                Some(TaskState::Faulted) if !outcome.faulted.iter().any(|(n, _)| n == &t.name) => {
                    outcome.faulted.push((t.name.clone(), c.message))
                }
                Some(TaskState::Stopped) => outcome.stopped = true,
                _ => {}
            }
        }
    }
    outcome
}

/// Everything a running task holds.
struct Running<'a> {
    spec: &'a TaskSpec,
    stats: StatsWriter<'a>,
    lat: HistogramWriter<'a>,
    exec: HistogramWriter<'a>,
    body: Body<'a>,
    frames: Frames<'a>,
    out: Option<SignalView<'a>>,
    params: Vec<ParamReader<'a>>,
    ns_per_tick: f64,
    wd_over: u32,
}

fn task_main(
    spec: &TaskSpec,
    region: &RegionView<'_>,
    schedule: Option<Schedule<'_>>,
    stop: &dyn StopSignal,
    halt: &AtomicBool,
    warnings: &Mutex<Vec<String>>,
) -> Option<TaskCounters> {
    let Ok(mut stats) = StatsWriter::attach(region, &spec.name) else {
        // No statistics channel: nothing can be reported; the supervisor times out on this task.
        return None;
    };
    let fault = |mut stats: StatsWriter<'_>, msg: String| {
        stats.finish(TaskState::Faulted, &msg);
        Some(stats.own())
    };
    let req = RtRequest { cpu: Some(spec.cpu), fifo_priority: Some(spec.priority), lock_memory: true };
    match apply_rt(&req) {
        Ok(w) => {
            if let Ok(mut all) = warnings.lock() {
                all.extend(w.into_iter().map(|w| format!("task {:?}: {w}", spec.name)));
            }
        }
        Err(e) => return fault(stats, format!("real-time setup: {e}")),
    }
    let hist = |ch: String| -> Result<HistogramWriter<'_>, String> {
        let w = region.raw(&ch).map_err(|e| format!("{ch}: {e}"))?;
        HistogramWriter::init(w, BUCKET_NS, BUCKETS).map_err(|e| format!("{ch}: {e}"))
    };
    let ns_per_tick = ns_per_tick(spec.tsc_khz);
    let prepared = (|| -> Result<_, String> {
        let lat = hist(latency_channel(&spec.name))?;
        let exec = hist(exec_channel(&spec.name))?;
        let body = Body::prepare(spec, region, ns_per_tick)?;
        let frames = Frames::new(spec, region)?;
        let out = match &spec.output {
            Some(n) => Some(region.signal(n).map_err(|e| format!("signal {n:?}: {e}"))?),
            None => None,
        };
        let params = spec.params.iter().map(|n| ParamReader::attach(region, n)).collect::<Result<Vec<_>, _>>()?;
        let sched = match schedule {
            Some(s) => s,
            None => Schedule::attach(region).map_err(|e| format!("schedule channel: {e}"))?,
        };
        Ok((lat, exec, body, frames, out, params, sched))
    })();
    let (lat, exec, body, frames, out, params, sched) = match prepared {
        Ok(p) => p,
        Err(e) => return fault(stats, e),
    };
    stats.set_state(TaskState::Ready);
    let mut run = Running { spec, stats, lat, exec, body, frames, out, params, ns_per_tick, wd_over: 0 };
    // Wait for the common start.
    let (start, _) = loop {
        if let Some(s) = sched.started() {
            break s;
        }
        if stop.stop_requested() || halt.load(Ordering::Relaxed) {
            run.stats.finish(TaskState::Stopped, "");
            return Some(run.stats.own());
        }
        sleep_ns(GO_POLL_NS);
    };
    run.stats.set_state(TaskState::Running);
    let stopped = || stop.stop_requested() || halt.load(Ordering::Relaxed);
    let end = run.periodic_loop(start, &sched, &stopped);
    match end {
        Ok(true) => run.stats.finish(TaskState::Done, ""),
        Ok(false) => run.stats.finish(TaskState::Stopped, ""),
        Err(End::Tripped(msg)) => {
            let mut msg = msg;
            if let Some(o) = &run.out
                && let Err(e) = write_f64s(o, &spec.safe_value)
            {
                msg.push_str(&format!("; the safe value could not be written: {e}"));
            }
            run.stats.finish(TaskState::Tripped, &msg);
        }
        Err(End::Fault(msg)) => run.stats.finish(TaskState::Faulted, &msg),
    }
    Some(run.stats.own())
}

enum End {
    Tripped(String),
    Fault(String),
}

impl Running<'_> {
    /// Bookkeeping after a cycle: histograms, deadline, watchdog. `Err` when the watchdog trips.
    #[inline]
    fn account(&mut self, k: u64, latency_ns: Option<u64>, exec_ns: u64, overrun: bool) -> Result<(), End> {
        if let Some(l) = latency_ns {
            self.lat.record(l);
        }
        self.exec.record(exec_ns);
        self.stats.cycles += 1;
        self.stats.deadline(overrun);
        if let Some(wd) = &self.spec.watchdog {
            if exec_ns > wd.time_ns {
                self.stats.watchdog_over += 1;
            }
            let (over, verdict) = wd.judge(self.wd_over, exec_ns);
            self.wd_over = over;
            if let Some(v) = verdict {
                self.stats.set_trip_cycle(k);
                self.stats.publish();
                return Err(End::Tripped(format!("{v}, at cycle {k}")));
            }
        }
        self.stats.publish();
        Ok(())
    }

    /// A step that failed: a fault ends the task; a corrupt channel is counted and reported, then the
    /// task resyncs (`Ok(None)`: this step's work is skipped) or trips, as its `on_corrupt` says.
    fn corrupt_step(&mut self, e: StepError, k: u64) -> Result<Option<f64>, End> {
        let msg = match e {
            StepError::Fault(m) => return Err(End::Fault(m)),
            e @ StepError::Corrupt { .. } => e.to_string(),
        };
        self.stats.corrupt += 1;
        match self.spec.on_corrupt {
            OnCorrupt::Resync => {
                if self.stats.corrupt == 1 {
                    self.stats.set_message(&format!("{msg}, first at cycle {k}; resyncing"));
                }
                Ok(None)
            }
            OnCorrupt::Trip => {
                self.stats.set_trip_cycle(k);
                self.stats.publish();
                Err(End::Tripped(format!("{msg}, at cycle {k}")))
            }
        }
    }

    /// Returns `Ok(true)` at the end of the schedule, `Ok(false)` on a stop.
    fn periodic_loop(&mut self, start: u64, sched: &Schedule<'_>, stopped: &dyn Fn() -> bool) -> Result<bool, End> {
        let period = self.spec.period_ns;
        let deadline = self.spec.deadline_ns.max(1);
        let mut release = start.saturating_add(self.spec.offset_ns);
        let mut k: u64 = 0;
        loop {
            if stopped() {
                return Ok(false);
            }
            if release >= sched.end() {
                return Ok(true);
            }
            // A long sleep (a long period) wakes on a stop; a short one is one absolute sleep as before.
            if !sleep_until_or_stop(release, stopped) {
                return Ok(false);
            }
            let t_start = mono_ns();
            let c0 = rdtsc_ordered();
            let info = CycleInfo {
                k,
                t_s: release.saturating_sub(start) as f64 / 1e9,
                release_ns: release,
                deadline_ns: release.saturating_add(deadline),
            };
            for p in &mut self.params {
                p.poll().map_err(End::Fault)?;
            }
            let value = match self.body.cycle(&info, &mut self.stats) {
                Ok(v) => Some(v),
                Err(e) => self.corrupt_step(e, k)?,
            };
            if let Some(value) = value
                && let Err(e) = self.frames.exchange(value, &mut self.stats)
            {
                self.corrupt_step(e, k)?;
            }
            let c1 = rdtsc_ordered();
            let t_end = mono_ns();
            let exec_ns = (c1.wrapping_sub(c0) as f64 * self.ns_per_tick) as u64;
            let latency = t_start.saturating_sub(release);
            self.account(k, Some(latency), exec_ns, t_end > info.deadline_ns)?;
            k += 1;
            let next = release.saturating_add(period);
            if t_end >= next && self.spec.missed == MissedPolicy::Skip {
                // Every release already past is skipped; the next one still ahead runs. Only releases
                // inside the run count as skipped (a cycle running past the end skips no release after it).
                let behind = (t_end - next) / period + 1;
                let inside = if next >= sched.end() { 0 } else { (sched.end() - next - 1) / period + 1 };
                self.stats.skipped += behind.min(inside);
                self.stats.publish();
                release = next.saturating_add(behind.saturating_mul(period));
            } else {
                release = next;
            }
        }
    }
}
