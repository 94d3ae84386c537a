//! Starting a run, in order: the task specs as they will run (log files made), the simulated EtherCAT
//! segment, the cells (each running before the next starts), the Linux-side tasks, the loads. Each step
//! fails with a [`StartError`] that names what the machine refused; what started before is stopped
//! when dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rtcell_cells::{Cell, CellKind, CellSpec, VmOptions, WorkloadSpec};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{RegionLayout, RegionView, RingConfig};
use rtcell_tasks::{TaskCounters, TaskSpec, TaskState, TaskWork, read_counters};

use super::StartError;
use crate::live::RunRegion;
use crate::plan::{CellRole, Plan, PlanCell};

/// How long cells, and the Linux-side tasks, get to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The tasks as they will run, each with the name of its cell (`None`: the Linux side).
pub(super) type Specs = Vec<(Option<String>, TaskSpec)>;

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
pub(super) fn preflight_c_tasks(plan: &Plan, layout: &RegionLayout, stop: &dyn Fn() -> bool) -> Result<(), StartError> {
    let c_tasks: Vec<&crate::plan::PlanTask> =
        plan.tasks.iter().filter(|t| matches!(t.spec.work, TaskWork::C { .. })).collect();
    if c_tasks.is_empty() {
        return Ok(());
    }
    let scratch = SharedMemory::create_anonymous(&format!("probe-{}", plan.name), layout.size_bytes())
        .map_err(StartError::SharedMemory)?;
    layout.init(scratch.words(), std::process::id()).map_err(|e| StartError::Region(e.to_string()))?;
    for t in c_tasks {
        let TaskWork::C { library, init, step, com } = &t.spec.work else { continue };
        let cell = t.cell.as_deref().unwrap_or(crate::plan::LINUX);
        rtcell_cells::probe_c_task_until(&scratch, library, init.as_deref(), step, com, stop)
            .map_err(|why| StartError::CTask { cell: cell.to_owned(), task: t.spec.name.clone(), why })?;
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
                    return Err(StartError::Interrupted { cell: name });
                }
                if t0.elapsed() >= START_TIMEOUT {
                    let e = rtcell_cells::CellError::StartTimeout {
                        cell: name,
                        kind: cell.spec().kind,
                        cpu: cell.spec().cpu,
                        waited: START_TIMEOUT,
                    };
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A cell that busy-polls its CPU at SCHED_FIFO (a service or a payload) is stopped by the kernel for
/// the rest of each period once it has used `sched_rt_runtime_us`: tens of ms of silence every second.
pub(super) fn throttling_warning(plan: &Plan) -> Option<String> {
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

/// Task specs as they will run: the TSC rate known, each log file made new inside the results directory
/// (no symbolic link followed). Returns the specs and the log files made.
pub(super) fn task_specs(plan: &Plan, tsc_khz: u64, out_dir: &Path) -> Result<(Specs, Vec<PathBuf>), StartError> {
    let mut files = Vec::new();
    let mut specs: Specs = Vec::new();
    let mut run_dir: Option<rtcell_host::outdir::RunDir> = None;
    for t in &plan.tasks {
        let mut s = t.spec.clone();
        s.tsc_khz = tsc_khz;
        if let TaskWork::Log { file, created, .. } = &mut s.work {
            let dir = match run_dir.take() {
                Some(d) => d,
                None => rtcell_host::outdir::RunDir::create(out_dir).map_err(|source| StartError::Output {
                    what: "",
                    path: out_dir.to_owned(),
                    source,
                })?,
            };
            let (p, f) = dir.create_new(file).map_err(|source| StartError::Output {
                what: "log file ",
                path: out_dir.join(&*file),
                source,
            })?;
            let meta =
                f.metadata().map_err(|source| StartError::Output { what: "log file ", path: p.clone(), source })?;
            *created = Some((std::os::unix::fs::MetadataExt::dev(&meta), std::os::unix::fs::MetadataExt::ino(&meta)));
            run_dir = Some(dir);
            files.push(p.clone());
            *file = p.display().to_string();
        }
        specs.push((t.cell.clone(), s));
    }
    Ok((specs, files))
}

/// A simulated EtherCAT segment made for the run: the simulator answering on a veth pair's Linux side.
/// Both go when it is dropped (the simulator first).
pub(super) type Segment = (rtcell_ecat::sim::Running, rtcell_ecat::net::Veth);

/// Starts the plan's simulated segment, if it has one, and points its EtherCAT tasks at it.
pub(super) fn start_segment(plan: &Plan, specs: &mut Specs) -> Result<Option<Segment>, StartError> {
    let Some(crate::plan::PlanEthercat::Simulated { devices, drop_after }) = &plan.ethercat else { return Ok(None) };
    let veth = rtcell_ecat::net::Veth::create(&format!("rtcs{}", std::process::id()), false)
        .map_err(|source| StartError::Segment { source, hint: " (needs root and iproute2)" })?;
    // The simulator stands for hardware: at a real-time priority below the tasks', on the master CPU.
    let sim = rtcell_ecat::sim::Running::start_with(
        &veth.segment,
        None,
        *devices,
        rtcell_ecat::sim::Faults { drop_after: *drop_after, ..Default::default() },
        Some(plan.master_cpu),
        Some(50),
    )
    .map_err(|source| StartError::Segment { source, hint: "" })?;
    for (_, s) in specs.iter_mut() {
        if let TaskWork::Ethercat { interface, .. } = &mut s.work {
            *interface = veth.master.clone();
        }
    }
    Ok(Some((sim, veth)))
}

/// What the cell `c` runs: its tasks, its controller or its payload.
fn workload(c: &PlanCell, specs: &Specs) -> WorkloadSpec {
    match &c.role {
        CellRole::Tasks => WorkloadSpec::TaskSet {
            tasks: specs.iter().filter(|(cell, _)| cell.as_deref() == Some(&c.name)).map(|(_, s)| s.clone()).collect(),
        },
        CellRole::Controller { request, reply, precision } => {
            WorkloadSpec::Control { rx: request.clone(), tx: reply.clone(), precision: precision.clone() }
        }
        CellRole::Payload { payload, args, writes } => {
            WorkloadSpec::Payload { payload: payload.clone(), args: args.clone(), guest_writes: writes.clone() }
        }
    }
}

/// Starts the plan's cells one after the other, each running before the next starts; returns each
/// with the time it took to start. Their warnings go to `warnings`.
pub(super) fn start_cells(
    plan: &Plan,
    specs: &Specs,
    region: &RunRegion,
    stop: &dyn Fn() -> bool,
    warnings: &mut Vec<String>,
) -> Result<Vec<(Cell, Option<Duration>)>, StartError> {
    let mut cells = Vec::new();
    for c in &plan.cells {
        let spec = CellSpec {
            name: c.name.clone(),
            kind: c.kind,
            cpu: c.cpu,
            priority: Some(c.priority),
            lock_memory: true,
            workload: workload(c, specs),
            vm: VmOptions::default(),
        };
        let mut cell = Cell::start_in(spec, Arc::clone(region.shm()), region.directory().clone())?;
        let started = wait_started(&mut cell, stop)?;
        warnings.extend(cell.warnings().iter().cloned());
        cells.push((cell, Some(started)));
    }
    Ok(cells)
}

/// The Linux-side tasks: a supervisor thread running their set on the run's own schedule (no cell can
/// end the Linux side early).
pub(super) struct LinuxSide {
    handle: Option<std::thread::JoinHandle<rtcell_tasks::SetOutcome>>,
    stop: Arc<AtomicBool>,
}

impl LinuxSide {
    /// Starts the Linux-side tasks of `specs` and waits until they are ready (their warnings go to
    /// `warnings`), or fails naming a task that faulted on the way.
    pub(super) fn start(
        specs: &Specs,
        run_region: &Arc<RunRegion>,
        schedule: Arc<rtcell_tasks::PrivateSchedule>,
        warnings: &mut Vec<String>,
    ) -> Result<LinuxSide, StartError> {
        let tasks: Vec<TaskSpec> = specs.iter().filter(|(c, _)| c.is_none()).map(|(_, s)| s.clone()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        if tasks.is_empty() {
            return Ok(LinuxSide { handle: None, stop });
        }
        let ready = Arc::new(AtomicBool::new(false));
        let found = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let (region2, stop2, ready2, found2) =
            (Arc::clone(run_region), Arc::clone(&stop), Arc::clone(&ready), Arc::clone(&found));
        let handle = std::thread::Builder::new()
            .name("linux-tasks".into())
            .spawn(move || {
                let region = region2.view();
                let mut on_ready = |w: &[String]| {
                    if let Ok(mut all) = found2.lock() {
                        all.extend(w.iter().cloned());
                    }
                    ready2.store(true, Ordering::Release);
                };
                let own = Some(schedule.schedule());
                rtcell_tasks::run_set_scheduled(&tasks, &region, own, &*stop2, &mut on_ready, &|| {})
            })
            .map_err(StartError::LinuxThread)?;
        let side = LinuxSide { handle: Some(handle), stop };
        let t0 = Instant::now();
        while !ready.load(Ordering::Acquire) {
            if side.handle.as_ref().is_some_and(|h| h.is_finished()) || t0.elapsed() > START_TIMEOUT {
                side.request_stop();
                return Err(StartError::LinuxNotReady(not_ready(specs, &run_region.view())));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Ok(w) = found.lock() {
            warnings.extend(w.iter().cloned());
        }
        Ok(side)
    }

    pub(super) fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops the tasks and returns their own record of their counters (what a peer wrote into the
    /// region cannot change it); empty if there were none or their thread panicked.
    pub(super) fn finish(self) -> std::collections::BTreeMap<String, TaskCounters> {
        self.request_stop();
        match self.handle.map(|h| h.join()) {
            Some(Ok(outcome)) => outcome.counters.into_iter().collect(),
            _ => Default::default(),
        }
    }
}

/// Why the Linux-side tasks did not get ready: the faults of those that faulted, if any.
fn not_ready(specs: &Specs, region: &RegionView<'_>) -> String {
    let faults: Vec<String> = specs
        .iter()
        .filter(|(c, _)| c.is_none())
        .filter_map(|(_, s)| read_counters(region, &s.name).ok().map(|c| (s.name.clone(), c)))
        .filter(|(_, c)| c.state == Some(TaskState::Faulted))
        .map(|(n, c)| format!("task {n:?}: {}", c.message))
        .collect();
    if faults.is_empty() { "the Linux-side tasks did not get ready".into() } else { faults.join("; ") }
}

/// Starts the plan's interference loads.
pub(super) fn start_loads(plan: &Plan) -> Result<Vec<rtcell_loads::RunningLoad>, StartError> {
    plan.loads
        .iter()
        .map(|l| {
            rtcell_loads::RunningLoad::start(l.kind, &l.cpus)
                .map_err(|source| StartError::Load { load: l.kind.as_str(), source })
        })
        .collect()
}
