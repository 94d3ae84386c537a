//! Running a plan: the region, the cells, the Linux-side tasks, the loads; a live line per task while it
//! runs; at the end what every task and channel did.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rtcell_cells::{Cell, CellKind, CellSpec, CellStatus, VmOptions, WorkloadSpec};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{RegionLayout, RingConfig};
use rtcell_tasks::clock::mono_ns;
use rtcell_tasks::stats::{BlockReading, exec_channel, latency_channel};
use rtcell_tasks::{Schedule, TaskCounters, TaskSpec, TaskState, TaskWork, read_counters};

use crate::live::{CellSnapshot, Live, RunRegion};
use crate::plan::{CellRole, Plan};

mod results;
mod show;
pub use results::{
    CellResult, ChannelResult, HistSummary, RunResult, TaskResult, channels_now, payload_handled_bound, possible_claim,
};
use results::{checked_handled, earliest_end, final_counters, handled_bound};
use show::{drain, print_live, snapshot};

/// Time between the go signal and the first release: every task is asleep on its first release by then.
const START_MARGIN: Duration = Duration::from_millis(50);
/// Supervision tick (draining sink channels, watching cells).
const TICK: Duration = Duration::from_millis(10);
/// Live line refresh on a terminal, and when the output is not one.
const LIVE_TTY: Duration = Duration::from_millis(500);
const LIVE_PIPE: Duration = Duration::from_secs(1);
/// Supervision ticks between two snapshots of the cells' states for observers (100 ms).
const SNAPSHOT_TICKS: u64 = 10;
/// How long cells get to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a run could not start (after validation: the machine refused something).
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

pub(crate) fn layout(plan: &Plan) -> Result<RegionLayout, String> {
    let mut l = RegionLayout::new();
    if plan.cells.iter().any(|c| c.kind == CellKind::Kvm) {
        l.page_aligned();
    }
    let e = |e: rtcell_shm::LayoutError| e.to_string();
    rtcell_tasks::add_schedule_to_layout(&mut l).map_err(e)?;
    for c in &plan.cells {
        rtcell_shm::control::add_to_layout(&mut l, &c.name).map_err(e)?;
    }
    for t in &plan.tasks {
        rtcell_tasks::add_task_to_layout(&mut l, &t.spec.name).map_err(e)?;
    }
    for ch in &plan.channels {
        let ring = RingConfig::try_for_frames(ch.frame_bytes, ch.frames).ok_or_else(|| {
            format!("ring {:?}: {} frames of {} bytes: above 2 GiB", ch.name, ch.frames, ch.frame_bytes)
        })?;
        l.ring(&ch.name, ring).map_err(e)?;
    }
    for s in &plan.signals {
        l.signal(&s.name, s.values * 8).map_err(e)?;
        if s.writable.is_some() {
            let ack = rtcell_tasks::params::ack_bytes(s.values as usize);
            l.signal(&rtcell_tasks::params::ack_name(&s.name), ack as u32).map_err(e)?;
        }
    }
    for c in &plan.coms {
        l.com(&c.name, c.config()).map_err(e)?;
    }
    Ok(l)
}

/// Tries every C task of a thread or process cell in a throw-away process against a scratch copy of
/// the region (load, symbols, attach, init), so a missing symbol or a crash in init is reported with
/// the cell's name before any cell starts, and cannot take this process down.
fn preflight_c_tasks(plan: &Plan, layout: &RegionLayout, stop: &dyn Fn() -> bool) -> Result<(), StartError> {
    let c_tasks: Vec<&crate::plan::PlanTask> =
        plan.tasks.iter().filter(|t| matches!(t.spec.work, TaskWork::C { .. })).collect();
    if c_tasks.is_empty() {
        return Ok(());
    }
    let scratch = SharedMemory::create_anonymous(&format!("probe-{}", plan.name), layout.size_bytes())
        .map_err(|e| StartError(format!("shared memory: {e}")))?;
    layout.init(scratch.words(), std::process::id()).map_err(|e| StartError(format!("region: {e}")))?;
    for t in c_tasks {
        let TaskWork::C { library, init, step, com } = &t.spec.work else { continue };
        let cell = t.cell.as_deref().unwrap_or(crate::plan::LINUX);
        rtcell_cells::probe_c_task_until(&scratch, library, init.as_deref(), step, com, stop)
            .map_err(|e| StartError(format!("cell {cell:?}: task {:?}: {e}; nothing was started", t.spec.name)))?;
    }
    Ok(())
}

/// Waits for a cell to run, up to [`START_TIMEOUT`], giving up within 100 ms of a stop (the cells
/// started so far are stopped, or killed, when dropped).
fn wait_started(cell: &mut Cell, stop: &dyn Fn() -> bool) -> Result<Duration, StartError> {
    let t0 = std::time::Instant::now();
    loop {
        let slice = START_TIMEOUT.saturating_sub(t0.elapsed()).min(Duration::from_millis(100));
        match cell.wait_running(slice) {
            Ok(d) => return Ok(d),
            Err(rtcell_cells::CellError::StartTimeout { cell: name, .. }) => {
                if stop() {
                    return Err(StartError(format!("interrupted while cell {name:?} was starting; nothing ran")));
                }
                if t0.elapsed() >= START_TIMEOUT {
                    let e = rtcell_cells::CellError::StartTimeout {
                        cell: name,
                        kind: cell.spec().kind,
                        cpu: cell.spec().cpu,
                        waited: START_TIMEOUT,
                    };
                    return Err(StartError(e.to_string()));
                }
            }
            Err(e) => return Err(StartError(e.to_string())),
        }
    }
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

/// A cell that busy-polls its CPU at SCHED_FIFO (a service or a payload) is stopped by the kernel for
/// the rest of each period once it has used `sched_rt_runtime_us`: tens of ms of silence every second.
fn throttling_warning(plan: &Plan) -> Option<String> {
    let polling: Vec<&str> = plan.cells.iter().filter(|c| c.role != CellRole::Tasks).map(|c| c.name.as_str()).collect();
    if polling.is_empty() {
        return None;
    }
    let read = |f: &str| std::fs::read_to_string(f).ok().and_then(|t| t.trim().parse::<i64>().ok());
    let runtime = read("/proc/sys/kernel/sched_rt_runtime_us")?;
    let period = read("/proc/sys/kernel/sched_rt_period_us")?;
    (runtime >= 0 && runtime < period).then(|| {
        format!(
            "cell(s) {} busy-poll their CPU at SCHED_FIFO while real-time throttling is on (sched_rt_runtime_us = {runtime} of \
             {period}): the kernel stops them for up to {} ms every second; `sysctl kernel.sched_rt_runtime_us=-1` turns \
             throttling off (see rtcell check)",
            polling.join(", "),
            (period - runtime) / 1000
        )
    })
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
    let layout = layout(plan).map_err(|e| StartError(format!("region layout: {e}")))?;
    preflight_c_tasks(plan, &layout, stop)?;
    let shm = SharedMemory::create_anonymous(&format!("scenario-{}", plan.name), layout.size_bytes())
        .map_err(|e| StartError(format!("shared memory: {e}")))?;
    layout.init(shm.words(), std::process::id()).map_err(|e| StartError(format!("region: {e}")))?;
    // The run's own directory, from the layout: every Linux-side read locates channels from it.
    let dir = layout.directory(std::process::id()).map_err(|e| StartError(format!("region: {e}")))?;
    let run_region = Arc::new(RunRegion::new(Arc::new(shm), dir));
    let shm = Arc::clone(run_region.shm());
    let region = run_region.view();
    let mut dir_guard = crate::integrity::DirectoryGuard::new(&run_region);
    let sched = Schedule::attach(&region).map_err(|e| StartError(format!("schedule: {e}")))?;
    let mut sched = crate::integrity::ScheduleGuard::new(sched);
    let mut watch =
        crate::integrity::RegionWatch::new(plan, &region).map_err(|e| StartError(format!("region: {e}")))?;
    rtcell_cells::set_tsc_khz(tsc_khz);
    let mut warnings: Vec<String> = plan.notes.clone();
    warnings.extend(throttling_warning(plan));
    let mut errors: Vec<String> = Vec::new();
    let mut files = Vec::new();

    // Task specs as they will run: TSC rate known, log files inside the results directory.
    // Each log file is made new inside the results directory, no symbolic link followed.
    let mut specs: Vec<(Option<String>, TaskSpec)> = Vec::new();
    let mut run_dir: Option<rtcell_host::outdir::RunDir> = None;
    for t in &plan.tasks {
        let mut s = t.spec.clone();
        s.tsc_khz = tsc_khz;
        if let TaskWork::Log { file, created, .. } = &mut s.work {
            let dir = match run_dir.take() {
                Some(d) => d,
                None => rtcell_host::outdir::RunDir::create(out_dir)
                    .map_err(|e| StartError(format!("{}: {e}", out_dir.display())))?,
            };
            let (p, f) = dir
                .create_new(file)
                .map_err(|e| StartError(format!("log file {}: {e}", out_dir.join(&*file).display())))?;
            let meta = f.metadata().map_err(|e| StartError(format!("log file {}: {e}", p.display())))?;
            *created = Some((std::os::unix::fs::MetadataExt::dev(&meta), std::os::unix::fs::MetadataExt::ino(&meta)));
            run_dir = Some(dir);
            files.push(p.clone());
            *file = p.display().to_string();
        }
        specs.push((t.cell.clone(), s));
    }

    // A simulated EtherCAT segment: a veth pair made for the run, the simulator answering on the Linux
    // side; both go when the run ends (the simulator first).
    let mut _segment: Option<(rtcell_ecat::sim::Running, rtcell_ecat::net::Veth)> = None;
    if let Some(crate::plan::PlanEthercat::Simulated { devices, drop_after }) = &plan.ethercat {
        let veth = rtcell_ecat::net::Veth::create(&format!("rtcs{}", std::process::id()), false)
            .map_err(|e| StartError(format!("simulated EtherCAT segment: {e} (needs root and iproute2)")))?;
        // The simulator stands for hardware: at a real-time priority below the tasks', on the master CPU.
        let sim = rtcell_ecat::sim::Running::start_with(
            &veth.segment,
            None,
            *devices,
            rtcell_ecat::sim::Faults { drop_after: *drop_after, ..Default::default() },
            Some(plan.master_cpu),
            Some(50),
        )
        .map_err(|e| StartError(format!("simulated EtherCAT segment: {e}")))?;
        for (_, s) in specs.iter_mut() {
            if let TaskWork::Ethercat { interface, .. } = &mut s.work {
                *interface = veth.master.clone();
            }
        }
        _segment = Some((sim, veth));
    }

    // Cells.
    // What a cell can have handled is bounded by the time it ran (`Cell::ran_for`).
    let mut cells: Vec<(Cell, Option<Duration>)> = Vec::new();
    for c in &plan.cells {
        let workload = match &c.role {
            CellRole::Tasks => WorkloadSpec::TaskSet {
                tasks: specs
                    .iter()
                    .filter(|(cell, _)| cell.as_deref() == Some(&c.name))
                    .map(|(_, s)| s.clone())
                    .collect(),
            },
            CellRole::Controller { request, reply, precision } => {
                WorkloadSpec::Control { rx: request.clone(), tx: reply.clone(), precision: precision.clone() }
            }
            CellRole::Payload { payload, args, writes } => {
                WorkloadSpec::Payload { payload: payload.clone(), args: args.clone(), guest_writes: writes.clone() }
            }
        };
        let spec = CellSpec {
            name: c.name.clone(),
            kind: c.kind,
            cpu: c.cpu,
            priority: Some(c.priority),
            lock_memory: true,
            workload,
            vm: VmOptions::default(),
        };
        let mut cell = Cell::start_in(spec, Arc::clone(&shm), run_region.directory().clone())
            .map_err(|e| StartError(e.to_string()))?;
        let started = wait_started(&mut cell, stop)?;
        warnings.extend(cell.warnings().iter().cloned());
        cells.push((cell, Some(started)));
    }

    // Linux-side tasks: a supervisor thread running their set.
    let linux_tasks: Vec<TaskSpec> = specs.iter().filter(|(c, _)| c.is_none()).map(|(_, s)| s.clone()).collect();
    let linux_stop = Arc::new(AtomicBool::new(false));
    let linux_ready = Arc::new(AtomicBool::new(linux_tasks.is_empty()));
    let linux_warn = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let linux_handle = if linux_tasks.is_empty() {
        None
    } else {
        let (region2, stop2, ready2, warn2) =
            (Arc::clone(&run_region), Arc::clone(&linux_stop), Arc::clone(&linux_ready), Arc::clone(&linux_warn));
        let own_sched = sched.own();
        let h = std::thread::Builder::new()
            .name("linux-tasks".into())
            .spawn(move || {
                let region = region2.view();
                let mut on_ready = |w: &[String]| {
                    if let Ok(mut all) = warn2.lock() {
                        all.extend(w.iter().cloned());
                    }
                    ready2.store(true, Ordering::Release);
                };
                // The supervisor's own schedule: no cell can end the Linux side early.
                let own = Some(own_sched.schedule());
                rtcell_tasks::run_set_scheduled(&linux_tasks, &region, own, &*stop2, &mut on_ready, &|| {})
            })
            .map_err(|e| StartError(format!("cannot start the Linux-side tasks: {e}")))?;
        Some(h)
    };
    let t0 = Instant::now();
    while !linux_ready.load(Ordering::Acquire) {
        if linux_handle.as_ref().is_some_and(|h| h.is_finished()) || t0.elapsed() > START_TIMEOUT {
            linux_stop.store(true, Ordering::Relaxed);
            let faults: Vec<String> = specs
                .iter()
                .filter(|(c, _)| c.is_none())
                .filter_map(|(_, s)| read_counters(&region, &s.name).ok().map(|c| (s.name.clone(), c)))
                .filter(|(_, c)| c.state == Some(TaskState::Faulted))
                .map(|(n, c)| format!("task {n:?}: {}", c.message))
                .collect();
            return Err(StartError(if faults.is_empty() {
                "the Linux-side tasks did not get ready".into()
            } else {
                faults.join("; ")
            }));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Ok(w) = linux_warn.lock() {
        warnings.extend(w.iter().cloned());
    }

    // Loads, then go.
    let mut loads = Vec::new();
    for l in &plan.loads {
        match rtcell_loads::RunningLoad::start(l.kind, &l.cpus) {
            Ok(r) => loads.push(r),
            Err(e) => return Err(StartError(format!("load {}: {e}", l.kind.as_str()))),
        }
    }
    let live = Arc::new(Live::new(plan.clone(), tsc_khz, Arc::clone(&run_region)));
    live.set_cells(snapshot(&mut cells, plan));
    observe(Arc::clone(&live));
    let stop = || stop() || live.stop_requested();
    let steal0 = steal_jiffies();
    let start = mono_ns() + START_MARGIN.as_nanos() as u64;
    let end = start + plan.duration.as_nanos() as u64;
    sched.go(start, end);
    for (c, _) in cells.iter_mut() {
        c.expect_end_after(earliest_end(plan, c.name(), start, end));
    }
    live.set_window(start, end);
    let started_at = Instant::now();

    // Supervise.
    let mut sinks: Vec<(String, rtcell_shm::Consumer<'_>, Vec<u8>)> = Vec::new();
    for ch in plan.channels.iter().filter(|c| c.sink) {
        if let Ok(r) = region.ring(&ch.name) {
            sinks.push((ch.name.clone(), r.consumer(), vec![0u8; ch.frame_bytes as usize]));
        }
    }
    let tty = std::io::stderr().is_terminal();
    let live_every = if tty { LIVE_TTY } else { LIVE_PIPE };
    let mut last_live = Instant::now();
    let mut live_lines = 0usize;
    let mut incomplete = false;
    let mut reported_trips: Vec<String> = Vec::new();
    let mut reported_corrupt: Vec<String> = Vec::new();
    let max_period = plan.tasks.iter().map(|t| t.spec.period_ns).max().unwrap_or(0);
    let linger = Duration::from_nanos(max_period) + Duration::from_millis(500);
    let mut ticks = 0u64;
    loop {
        std::thread::sleep(TICK);
        ticks += 1;
        if ticks % SNAPSHOT_TICKS == 0 {
            live.set_cells(snapshot(&mut cells, plan));
        }
        drain(&mut sinks);
        dir_guard.check(&mut errors);
        sched.check(&mut errors);
        watch.check(start, &mut errors);
        let now = mono_ns();
        if stop() && !incomplete {
            incomplete = true;
            linux_stop.store(true, Ordering::Relaxed);
            for (c, _) in cells.iter_mut() {
                c.request_stop();
            }
            sched.end_now(now);
        }
        for (c, _) in cells.iter_mut() {
            let st = c.status();
            if st.is_finished() && !matches!(st, CellStatus::Done(0) | CellStatus::Tripped { .. } | CellStatus::Stopped)
            {
                let msg = format!("cell {:?} ({}, CPU {}) {st}", c.name(), c.kind(), c.cpu());
                if !errors.contains(&msg) {
                    eprintln!("error: {msg}; the other cells go on");
                    errors.push(msg);
                }
            }
        }
        for (_, s) in &specs {
            // A block that does not hold what a task can write is reported as scribbled, never shown.
            let Ok(reading) = BlockReading::read(&region, &s.name) else { continue };
            let Some(cnt) = watch.counters_ok(s, &reading, start, &mut errors) else { continue };
            if cnt.corrupt > 0 && cnt.state != Some(TaskState::Tripped) && !reported_corrupt.contains(&s.name) {
                reported_corrupt.push(s.name.clone());
                if tty {
                    live_lines = 0;
                }
                eprintln!("error: task {:?}: {}", s.name, cnt.message);
            }
            if cnt.state == Some(TaskState::Tripped) && !reported_trips.contains(&s.name) {
                reported_trips.push(s.name.clone());
                let msg = format!("task {:?} stopped: {}", s.name, cnt.message);
                if tty {
                    live_lines = 0;
                }
                eprintln!("{msg}; its output holds its safe value, the other tasks go on");
            }
        }
        if last_live.elapsed() >= live_every {
            last_live = Instant::now();
            live_lines = print_live(&region, &specs, started_at.elapsed(), tty, live_lines);
        }
        let all_final = specs
            .iter()
            .all(|(_, s)| read_counters(&region, &s.name).ok().and_then(|c| c.state).is_some_and(|st| st.is_final()));
        if now >= end && all_final {
            break;
        }
        if now >= end.saturating_add(linger.as_nanos() as u64)
            || (incomplete && started_at.elapsed() > plan.duration + linger * 4)
        {
            warnings.push("some tasks did not end within their last period after the end of the run".into());
            break;
        }
        if incomplete && all_final {
            break;
        }
    }
    dir_guard.check(&mut errors);
    sched.check(&mut errors);
    watch.check(start, &mut errors);
    let measured = started_at.elapsed().saturating_sub(START_MARGIN).min(plan.duration);
    let steal1 = steal_jiffies();
    for l in loads {
        l.stop();
    }
    linux_stop.store(true, Ordering::Relaxed);
    let mut cell_results = Vec::new();
    live.set_cells(snapshot(&mut cells, plan));
    for (c, start) in cells {
        let exits = c.vm_exits();
        let (name, kind, cpu) = (c.name().to_string(), c.kind(), c.cpu());
        let (log, log_kept, log_storm) = (c.log_tail(), c.logs().len() as u64, c.log_storm());
        let log_suppressed = c.logs_suppressed();
        let rep = c.stop(Duration::from_secs(3));
        let handled_bound = handled_bound(plan, &name, rep.ran_for);
        let handled = checked_handled(&name, rep.handled, handled_bound, &mut errors);
        for t in plan.tasks.iter().filter(|t| t.cell.as_deref() == Some(name.as_str())) {
            if let Some(why) = &rep.disowned {
                watch.disown(&t.spec.name, &format!("cell {name:?} {why}"), &mut errors);
            }
        }
        if !matches!(rep.status, CellStatus::Done(_) | CellStatus::Tripped { .. } | CellStatus::Stopped) {
            let msg = format!("cell {name:?} ({kind}, CPU {cpu}) {}", rep.status);
            if !errors.contains(&msg) {
                errors.push(msg);
            }
        }
        cell_results.push(CellResult {
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
    // The Linux-side tasks' own record of their counters: what a peer wrote into the region cannot
    // change it.
    let own: BTreeMap<String, TaskCounters> = match linux_handle.map(|h| h.join()) {
        Some(Ok(outcome)) => outcome.counters.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    drain(&mut sinks);
    if tty && live_lines > 0 {
        print_live(&region, &specs, started_at.elapsed().min(plan.duration + START_MARGIN), tty, live_lines);
    }

    // Results.
    let hz = user_hz();
    let steal_ms: BTreeMap<usize, f64> = steal1
        .iter()
        .filter_map(|(cpu, s1)| steal0.get(cpu).map(|s0| (*cpu, s1.saturating_sub(*s0) as f64 * 1000.0 / hz)))
        .collect();
    let run_duration = if incomplete { measured } else { plan.duration };
    let mut tasks = Vec::new();
    for (cell, s) in &specs {
        let own = own.get(&s.name);
        // Without a record of its own, a task whose block was found scribbled has unknown figures. One
        // reading: what is checked is what is shown.
        let reading = BlockReading::read(&region, &s.name);
        let checked = reading.as_ref().ok().and_then(|r| watch.counters_ok(s, r, start, &mut errors));
        let found = own.is_none() && reading.is_ok() && checked.is_none();
        let counters = if found { None } else { final_counters(&s.name, reading.as_ref(), own, &mut errors) };
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
            expected: expected_releases(run_duration, s.offset_ns, s.period_ns),
            exec: HistSummary::read(&region, &exec_channel(&s.name), &mut errors),
            latency: HistSummary::read(&region, &latency_channel(&s.name), &mut errors),
            counters,
            scribbled,
        });
    }
    let channels = channels_now(plan, &region);
    let mut signals = BTreeMap::new();
    for s in &plan.signals {
        if let Ok(view) = region.signal(&s.name) {
            let mut vals = vec![0.0; s.values as usize];
            let n = rtcell_tasks::work::read_f64s(&view, &mut vals).unwrap_or(0);
            vals.truncate(n);
            signals.insert(s.name.clone(), vals);
        }
    }
    let finals: Vec<CellSnapshot> = cell_results
        .iter()
        .map(|c| CellSnapshot {
            name: c.name.clone(),
            kind: c.kind.to_string(),
            cpu: c.cpu,
            status: c.status.clone(),
            finished: true,
            handled: c.handled,
            vm_exits: c.vm_exits.clone().unwrap_or_default(),
        })
        .collect();
    live.set_cells(finals);
    live.set_finished();
    Ok(RunResult {
        tasks,
        channels,
        cells: cell_results,
        signals,
        steal_ms,
        measured: if incomplete { measured } else { plan.duration },
        warnings,
        errors,
        incomplete,
        files,
    })
}
