//! Running a plan: the region, the cells, the Linux-side tasks, the loads ([`start`]); a live line per
//! task while it runs ([`supervise`]); at the end what every task and channel did ([`results`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rtcell_cells::{Cell, CellStatus};
use rtcell_host::clock::mono_ns;
use rtcell_shm::RegionView;
use rtcell_shm::mapping::SharedMemory;
use rtcell_tasks::stats::{BlockReading, exec_channel, latency_channel};
use rtcell_tasks::{Schedule, TaskCounters, TaskState};

use crate::live::{CellSnapshot, Live, RunRegion};
use crate::plan::Plan;

mod results;
mod show;
mod start;
mod supervise;
pub use results::{
    CellResult, ChannelResult, HistSummary, RunResult, TaskResult, channels_now, payload_handled_bound, possible_claim,
};
use results::{checked_handled, earliest_end, final_counters, handled_bound};
pub(crate) use start::layout;
use start::{LinuxSide, Specs};
use supervise::{Guards, Supervisor};

/// Time between the go signal and the first release: every task is asleep on its first release by then.
const START_MARGIN: Duration = Duration::from_millis(50);

/// Why a run could not start (after validation: the machine refused something). What had started by
/// then is stopped.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The plan's channels and tables do not fit one region.
    #[error("region layout: {0}")]
    Layout(String),
    /// The region's memory could not be made.
    #[error("shared memory: {0}")]
    SharedMemory(#[source] std::io::Error),
    /// The region could not be initialised or its directory read back.
    #[error("region: {0}")]
    Region(String),
    /// The run's schedule channel could not be attached.
    #[error("schedule: {0}")]
    Schedule(#[source] rtcell_shm::AttachError),
    /// A C task failed its trial (load, symbols, attach, init) in a throw-away process.
    #[error("cell {cell:?}: task {task:?}: {why}; nothing was started")]
    CTask { cell: String, task: String, why: String },
    /// The results directory, or a task's log file in it, could not be made.
    #[error("{what}{}: {source}", path.display())]
    Output { what: &'static str, path: PathBuf, source: std::io::Error },
    /// The simulated EtherCAT segment (a veth pair and the simulator on it) could not be made.
    #[error("simulated EtherCAT segment: {source}{hint}")]
    Segment { source: std::io::Error, hint: &'static str },
    /// A cell did not start, or did not report running in time.
    #[error(transparent)]
    Cell(#[from] rtcell_cells::CellError),
    /// Ctrl-C or SIGTERM while a cell was starting.
    #[error("interrupted while cell {cell:?} was starting; nothing ran")]
    Interrupted { cell: String },
    /// The Linux side's thread could not be made.
    #[error("cannot start the Linux-side tasks: {0}")]
    LinuxThread(#[source] std::io::Error),
    /// The Linux-side tasks did not get ready: the faults of those that faulted, if any.
    #[error("{0}")]
    LinuxNotReady(String),
    /// An interference load could not be started.
    #[error("load {load}: {source}")]
    Load { load: &'static str, source: std::io::Error },
}

/// Per-CPU steal counters (jiffies) from /proc/stat.
fn steal_jiffies() -> BTreeMap<usize, u64> {
    let mut m = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return m;
    };
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(name) = f.next() else { continue };
        let Some(cpu) = name.strip_prefix("cpu").and_then(|n| n.parse::<usize>().ok()) else { continue };
        if let Some(steal) = f.nth(7).and_then(|v| v.parse::<u64>().ok()) {
            m.insert(cpu, steal);
        }
    }
    m
}

fn user_hz() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// Releases due in `[start + offset, end)` at `period`.
pub fn expected_releases(duration: Duration, offset_ns: u64, period_ns: u64) -> u64 {
    let d = duration.as_nanos() as u64;
    if d <= offset_ns || period_ns == 0 { 0 } else { (d - offset_ns).div_ceil(period_ns) }
}

/// Runs `plan` for its duration (or until `stop()` says so). `out_dir` receives the tasks' log files.
pub fn run(plan: &Plan, tsc_khz: u64, out_dir: &Path, stop: &dyn Fn() -> bool) -> Result<RunResult, StartError> {
    run_observed(plan, tsc_khz, out_dir, stop, &|_| {})
}

/// [`run`], handing `observe` the run's [`Live`] view once its cells have started (before the first
/// release). The view stays valid after the run: it then shows the final state.
pub fn run_observed(
    plan: &Plan,
    tsc_khz: u64,
    out_dir: &Path,
    stop: &dyn Fn() -> bool,
    observe: &dyn Fn(Arc<Live>),
) -> Result<RunResult, StartError> {
    let layout = layout(plan).map_err(StartError::Layout)?;
    start::preflight_c_tasks(plan, &layout, stop)?;
    let shm = SharedMemory::create_anonymous(&format!("scenario-{}", plan.name), layout.size_bytes())
        .map_err(StartError::SharedMemory)?;
    layout.init(shm.words(), std::process::id()).map_err(|e| StartError::Region(e.to_string()))?;
    // The run's own directory, from the layout: every Linux-side read locates channels from it.
    let dir = layout.directory(std::process::id()).map_err(|e| StartError::Region(e.to_string()))?;
    let run_region = Arc::new(RunRegion::new(Arc::new(shm), dir));
    let region = run_region.view();
    let sched = Schedule::attach(&region).map_err(StartError::Schedule)?;
    let mut guards = Guards {
        dir: crate::integrity::DirectoryGuard::new(&run_region),
        sched: crate::integrity::ScheduleGuard::new(sched),
        watch: crate::integrity::RegionWatch::new(plan, &region).map_err(|e| StartError::Region(e.to_string()))?,
    };
    rtcell_cells::set_tsc_khz(tsc_khz);
    let mut warnings: Vec<String> = plan.notes.clone();
    warnings.extend(start::throttling_warning(plan));
    let mut errors: Vec<String> = Vec::new();

    let (mut specs, files) = start::task_specs(plan, tsc_khz, out_dir)?;
    let _segment = start::start_segment(plan, &mut specs)?;
    let mut cells = start::start_cells(plan, &specs, &run_region, stop, &mut warnings)?;
    let linux = LinuxSide::start(&specs, &run_region, guards.sched.own(), &mut warnings)?;
    let loads = start::start_loads(plan)?;

    // Go.
    let live = Arc::new(Live::new(plan.clone(), tsc_khz, Arc::clone(&run_region)));
    live.set_cells(show::snapshot(&mut cells, plan));
    observe(Arc::clone(&live));
    let stop = || stop() || live.stop_requested();
    let steal0 = steal_jiffies();
    let start = mono_ns() + START_MARGIN.as_nanos() as u64;
    let end = start + plan.duration.as_nanos() as u64;
    guards.sched.go(start, end);
    for (c, _) in cells.iter_mut() {
        c.expect_end_after(earliest_end(plan, c.name(), start, end));
    }
    live.set_window(start, end);
    let mut sup = Supervisor::new(plan, &region, &specs);
    sup.run(&mut cells, &live, &stop, &linux, &mut guards, (start, end), &mut errors, &mut warnings);

    // The end.
    guards.check(start, &mut errors);
    let measured = sup.started_at.elapsed().saturating_sub(START_MARGIN).min(plan.duration);
    let steal1 = steal_jiffies();
    for l in loads {
        l.stop();
    }
    linux.request_stop();
    live.set_cells(show::snapshot(&mut cells, plan));
    let cell_results = stop_cells(plan, cells, &mut guards.watch, &mut errors);
    let own = linux.finish();
    show::drain(&mut sup.sinks);
    sup.last_live();

    // Results.
    let hz = user_hz();
    let steal_ms: BTreeMap<usize, f64> = steal1
        .iter()
        .filter_map(|(cpu, s1)| steal0.get(cpu).map(|s0| (*cpu, s1.saturating_sub(*s0) as f64 * 1000.0 / hz)))
        .collect();
    let incomplete = sup.incomplete;
    let run_duration = if incomplete { measured } else { plan.duration };
    let ended = Ended { region: &region, own: &own, start, run_duration };
    let tasks = task_results(plan, &specs, &ended, &mut guards.watch, &mut errors);
    let channels = channels_now(plan, &region);
    let signals = signals_now(plan, &region);
    live.set_cells(cell_results.iter().map(CellResult::final_snapshot).collect());
    live.set_finished();
    Ok(RunResult {
        tasks,
        channels,
        cells: cell_results,
        signals,
        steal_ms,
        measured: run_duration,
        warnings,
        errors,
        incomplete,
        files,
    })
}

/// Stops each cell (3 s each at most) and reads what it did: its status, what it handled (checked
/// against what it could have in the time it ran), its log. A cell that ended badly is an error; a
/// cell disowned by its stop (killed, its record lost) disowns its tasks' blocks.
fn stop_cells(
    plan: &Plan,
    cells: Vec<(Cell, Option<Duration>)>,
    watch: &mut crate::integrity::RegionWatch<'_>,
    errors: &mut Vec<String>,
) -> Vec<CellResult> {
    let mut out = Vec::new();
    for (c, start) in cells {
        let exits = c.vm_exits();
        let (name, kind, cpu) = (c.name().to_string(), c.kind(), c.cpu());
        let (log, log_kept, log_storm) = (c.log_tail(), c.logs().len() as u64, c.log_storm());
        let log_suppressed = c.logs_suppressed();
        let rep = c.stop(Duration::from_secs(3));
        let handled_bound = handled_bound(plan, &name, rep.ran_for);
        let handled = checked_handled(&name, rep.handled, handled_bound, errors);
        if let Some(why) = &rep.disowned {
            for t in plan.tasks.iter().filter(|t| t.cell.as_deref() == Some(name.as_str())) {
                watch.disown(&t.spec.name, &format!("cell {name:?} {why}"), errors);
            }
        }
        if !matches!(rep.status, CellStatus::Done(_) | CellStatus::Tripped { .. } | CellStatus::Stopped) {
            let msg = format!("cell {name:?} ({kind}, CPU {cpu}) {}", rep.status);
            if !errors.contains(&msg) {
                errors.push(msg);
            }
        }
        out.push(CellResult {
            name,
            kind,
            cpu,
            status: rep.status.to_string(),
            start,
            vm_exits: exits,
            handled,
            handled_bound,
            log,
            log_kept,
            log_suppressed,
            log_storm,
        });
    }
    out
}

/// What the end of a run leaves to read its tasks' results from.
struct Ended<'a, 'r> {
    region: &'a RegionView<'r>,
    /// The Linux-side tasks' own record of their counters.
    own: &'a BTreeMap<String, TaskCounters>,
    /// The window's start (monotonic ns) and how long it ran.
    start: u64,
    run_duration: Duration,
}

/// Each task's result from one reading of its block: what is checked is what is shown. A task without
/// a record of its own whose block was found scribbled has unknown figures. Trips, faults, corrupt
/// inputs and wrong replies are errors.
fn task_results(
    plan: &Plan,
    specs: &Specs,
    e: &Ended<'_, '_>,
    watch: &mut crate::integrity::RegionWatch<'_>,
    errors: &mut Vec<String>,
) -> Vec<TaskResult> {
    let mut tasks = Vec::new();
    for (cell, s) in specs {
        let own = e.own.get(&s.name);
        let reading = BlockReading::read(e.region, &s.name);
        let checked = reading.as_ref().ok().and_then(|r| watch.counters_ok(s, r, e.start, errors));
        let found = own.is_none() && reading.is_ok() && checked.is_none();
        let counters = if found { None } else { final_counters(&s.name, reading.as_ref(), own, errors) };
        let scribbled = counters.is_none();
        let counters = counters.unwrap_or_default();
        match counters.state {
            Some(TaskState::Tripped) => errors.push(format!("task {:?}: {}", s.name, counters.message)),
            Some(TaskState::Faulted) => errors.push(format!("task {:?} faulted: {}", s.name, counters.message)),
            _ if counters.corrupt > 0 => errors.push(format!("task {:?}: {}", s.name, counters.message)),
            _ => {}
        }
        if counters.errors > 0 {
            errors.push(format!("task {:?}: {} replies did not match the reference output", s.name, counters.errors));
        }
        let kind = match cell {
            None => "linux".to_string(),
            Some(c) => plan.cells.iter().find(|x| &x.name == c).map_or("?".into(), |x| x.kind.to_string()),
        };
        tasks.push(TaskResult {
            name: s.name.clone(),
            cell: cell.clone().unwrap_or_else(|| crate::plan::LINUX.into()),
            cell_kind: kind,
            spec: s.clone(),
            expected: expected_releases(e.run_duration, s.offset_ns, s.period_ns),
            exec: HistSummary::read(e.region, &exec_channel(&s.name), errors),
            latency: HistSummary::read(e.region, &latency_channel(&s.name), errors),
            counters,
            scribbled,
        });
    }
    tasks
}

/// The last values of the plan's signals.
fn signals_now(plan: &Plan, region: &RegionView<'_>) -> BTreeMap<String, Vec<f64>> {
    let mut signals = BTreeMap::new();
    for s in &plan.signals {
        if let Ok(view) = region.signal(&s.name) {
            let mut vals = vec![0.0; s.values as usize];
            let n = rtcell_tasks::work::read_f64s(&view, &mut vals).unwrap_or(0);
            vals.truncate(n);
            signals.insert(s.name.clone(), vals);
        }
    }
    signals
}

impl CellResult {
    /// The cell as observers see it once the run has ended.
    fn final_snapshot(&self) -> CellSnapshot {
        CellSnapshot {
            name: self.name.clone(),
            kind: self.kind.to_string(),
            cpu: self.cpu,
            status: self.status.clone(),
            finished: true,
            handled: self.handled,
            vm_exits: self.vm_exits.clone().unwrap_or_default(),
        }
    }
}
