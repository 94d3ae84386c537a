//! Cells: one real-time workload on a dedicated CPU, behind one interface whatever the isolation.
//!
//! - `thread`: a pinned SCHED_FIFO thread in this process, memory locked, stack prefaulted.
//! - `process`: the same binary re-executed in cell mode (`rtcell __cell`), sharing the region through an
//!   inherited memfd; it dies with its parent (PR_SET_PDEATHSIG) and cannot make processes of its own,
//!   exec, drop its death signal or reach into rtcell ([`confine`]), so a run, ended or killed, leaves
//!   nothing behind.
//!   Its standard output and error are the peer's text: escaped and shown as the cell's ([`output`]).
//! - `kvm`: a micro-VM running a bare-metal payload on a vCPU pinned to the cell CPU (`rtcell-kvm`); the
//!   region is mapped into it, read-only where it must not write.
//!
//! Supervisor and cell see each other only through the cell's control block in the shared region.

pub mod activation;
pub mod confine;
pub mod control;
pub mod cprobe;
pub mod output;
mod process;

pub(crate) use process::{cell_executable, end_process, pass_region};
pub use process::{exit, process_cell_main, set_cell_executable};
mod vm;
pub mod workload;

pub use vm::set_tsc_khz;
use vm::start_kvm;

use std::process::Child;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{Directory, RegionView};

pub use control::{CellState, ControlBlock};
pub use cprobe::{c_probe_main, probe_c_task_until};
pub use workload::{WorkloadEnd, WorkloadSpec};

/// How a cell is isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellKind {
    Thread,
    Process,
    Kvm,
}

impl CellKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            CellKind::Thread => "thread",
            CellKind::Process => "process",
            CellKind::Kvm => "kvm",
        }
    }
}

impl std::fmt::Display for CellKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CellKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "thread" => Ok(CellKind::Thread),
            "process" => Ok(CellKind::Process),
            "kvm" => Ok(CellKind::Kvm),
            other => Err(format!("unknown cell kind {other:?}: use thread, process or kvm")),
        }
    }
}

/// What to start where.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CellSpec {
    pub name: String,
    pub kind: CellKind,
    pub cpu: usize,
    /// SCHED_FIFO priority; `None` leaves the normal policy.
    pub priority: Option<i32>,
    pub lock_memory: bool,
    pub workload: WorkloadSpec,
    /// Options of kvm cells (ignored by the other kinds).
    #[serde(default)]
    pub vm: VmOptions,
}

/// Options of a kvm cell.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VmOptions {
    /// Guest RAM in MiB (a multiple of 2).
    pub ram_mib: u32,
    /// Report payload exceptions precisely (vector, RIP, address); without, any exception is a triple fault.
    pub exception_handlers: bool,
    /// Stop the vCPU when the payload's heartbeat does not move for this many ms.
    pub watchdog_ms: Option<u64>,
}

impl Default for VmOptions {
    fn default() -> Self {
        VmOptions { ram_mib: 2, exception_handlers: true, watchdog_ms: Some(1000) }
    }
}

/// What the supervisor sees of a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellStatus {
    Starting,
    Running,
    Done(i32),
    /// A process cell that ended as asked with a task's watchdog tripped: its process's exit code (the
    /// harness's verdict, `process::exit::TRIPPED`), not the control block's.
    Tripped {
        exit_code: i32,
    },
    Faulted(String),
    /// The process was killed by a signal.
    Killed {
        signal: i32,
        name: String,
    },
    Stopped,
}

impl CellStatus {
    pub fn is_finished(&self) -> bool {
        !matches!(self, CellStatus::Starting | CellStatus::Running)
    }
}

impl std::fmt::Display for CellStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CellStatus::Starting => write!(f, "starting"),
            CellStatus::Running => write!(f, "running"),
            CellStatus::Done(c) => write!(f, "done (exit code {c})"),
            CellStatus::Tripped { exit_code } => {
                write!(f, "tripped: a task's watchdog tripped (exit code {exit_code})")
            }
            CellStatus::Faulted(m) => write!(f, "faulted: {m}"),
            CellStatus::Killed { signal, name } => write!(f, "killed by signal {signal} ({name})"),
            CellStatus::Stopped => write!(f, "stopped"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CellError {
    #[error("cell {cell:?}: the region has no control block for it: {source}")]
    NoControlBlock { cell: String, source: rtcell_shm::AttachError },
    #[error("cell {cell:?}: could not start the {kind} cell: {source}")]
    Spawn { cell: String, kind: CellKind, source: std::io::Error },
    #[error("cell {cell:?} ({kind}, CPU {cpu}) {status} before it was running")]
    DiedStarting { cell: String, kind: CellKind, cpu: usize, status: CellStatus },
    #[error("cell {cell:?} ({kind}, CPU {cpu}) did not report running within {waited:?}")]
    StartTimeout { cell: String, kind: CellKind, cpu: usize, waited: Duration },
    #[error("region: {0}")]
    Region(rtcell_shm::AttachError),
    #[error("cell {cell:?}: {source}")]
    Kvm { cell: String, source: rtcell_kvm::KvmError },
    #[error("cell {cell:?}: no payload named {payload:?} (built-in payloads: {known})")]
    NoPayload { cell: String, payload: String, known: String },
    #[error("cell {cell:?}: {source}")]
    PayloadFile { cell: String, source: rtcell_kvm::elf::FileError },
}

/// How many of a kvm payload's last log lines a report shows (the rest are counted).
pub const SHOWN_LOG_LINES: usize = 20;

/// Final account of a cell.
#[derive(Debug, Clone)]
pub struct CellReport {
    pub name: String,
    pub kind: CellKind,
    pub cpu: usize,
    pub status: CellStatus,
    pub heartbeat: u64,
    pub handled: u64,
    /// Why the statistics blocks of its tasks do not hold what its harness recorded (a process cell
    /// that ended early, or with an exit code its blocks contradict): nothing read from them is to be
    /// shown as the tasks' figures.
    pub disowned: Option<String>,
    /// How long it ran (see [`Cell::ran_for`]): what it can have handled is bounded by this.
    pub ran_for: Duration,
}

enum Runner {
    Thread(Option<JoinHandle<()>>),
    /// `None` once ended (reaped or abandoned).
    Process(Option<Child>),
    Kvm(Option<rtcell_kvm::KvmCell>),
}

/// A started cell.
pub struct Cell {
    spec: CellSpec,
    shm: Arc<SharedMemory>,
    /// The table as the region's creator wrote it (see [`Cell::start_in`]).
    dir: Arc<Directory>,
    runner: Runner,
    /// When it was started, and when its end was first seen (CLOCK_MONOTONIC ns; see [`Cell::ran_for`]).
    spawned_ns: u64,
    end_seen_ns: Option<u64>,
    /// A kvm cell's end was judged early or not (see [`Cell::status`]).
    judged: bool,
    /// Guarantees the cell could not get (no SCHED_FIFO, no mlock), as it reported them.
    warnings: Vec<String>,
    stop_sent: bool,
    /// The reader of a process cell's standard output and error.
    output: Option<output::CellOutput>,
    /// A process cell's end, judged when first seen.
    ended: Option<process::Ended>,
    /// See [`Cell::expect_end_after`].
    end_after_ns: Option<u64>,
}

/// Runs the cell body in the calling thread (a thread cell's thread, or a process cell's main thread):
/// real-time setup, the workload, and the final state in the control block. Returns the exit code a
/// process cell ends with ([`process::exit`]), from the body's own record of how the workload ended.
fn cell_body(spec: &CellSpec, region: &RegionView<'_>, ctl: &ControlBlock<'_>) -> i32 {
    let req = RtRequest { cpu: Some(spec.cpu), fifo_priority: spec.priority, lock_memory: spec.lock_memory };
    match apply_rt(&req) {
        Ok(w) if !w.is_empty() => ctl.finish(CellState::Starting, 0, &w.join("\n")),
        Ok(_) => {}
        Err(e) => {
            ctl.finish(CellState::Faulted, 1, &format!("real-time setup failed: {e}"));
            return process::exit::FAULTED;
        }
    }
    let body = std::panic::AssertUnwindSafe(|| workload::run(&spec.workload, region, ctl));
    match std::panic::catch_unwind(body) {
        Ok(WorkloadEnd::Stopped) => ctl.finish(CellState::Stopped, 0, ""),
        Ok(WorkloadEnd::Done(code)) => {
            ctl.finish(CellState::Done, code, "");
            return code;
        }
        // A trip stops one task, not the cell: the cell ended as asked, its exit code says the trip.
        Ok(WorkloadEnd::Tripped { stopped }) => {
            ctl.finish(if stopped { CellState::Stopped } else { CellState::Done }, 0, "");
            return process::exit::TRIPPED;
        }
        Ok(WorkloadEnd::Faulted(m)) => {
            ctl.finish(CellState::Faulted, 1, &m);
            return process::exit::FAULTED;
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic".into());
            ctl.finish(CellState::Faulted, 101, &format!("panicked: {msg}"));
            return process::exit::FAULTED;
        }
    }
    process::exit::DONE
}

impl Cell {
    /// Starts a cell. The region must hold its control block (`control::add_to_layout`) and whatever
    /// channels its workload names. Returns once the cell is spawned; see `wait_running`.
    /// The region's table is copied now: start no other cell in it before (see [`Cell::start_in`]).
    pub fn start(spec: CellSpec, shm: Arc<SharedMemory>) -> Result<Cell, CellError> {
        let dir = Directory::of_live(shm.words()).map_err(CellError::Region)?;
        Cell::start_in(spec, shm, dir)
    }

    /// Starts a cell in a region whose channels are located from `dir`, the creator's own copy of the
    /// table: the supervisor's reads of the cell's control block and a thread cell's channels never
    /// follow what another cell wrote into the live table.
    pub fn start_in(spec: CellSpec, shm: Arc<SharedMemory>, dir: Directory) -> Result<Cell, CellError> {
        ControlBlock::attach(&dir.view(shm.words()), &spec.name)
            .map_err(|source| CellError::NoControlBlock { cell: spec.name.clone(), source })?;
        let dir = Arc::new(dir);
        let spawned_ns = rtcell_host::clock::mono_ns();
        let mut output = None;
        let runner = match spec.kind {
            CellKind::Thread => {
                let (shm2, dir2) = (Arc::clone(&shm), Arc::clone(&dir));
                let spec2 = spec.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("cell-{}", spec.name))
                    .spawn(move || {
                        let region = dir2.view(shm2.words());
                        let Ok(ctl) = ControlBlock::attach(&region, &spec2.name) else {
                            return;
                        };
                        cell_body(&spec2, &region, &ctl);
                    })
                    .map_err(|source| CellError::Spawn { cell: spec.name.clone(), kind: spec.kind, source })?;
                Runner::Thread(Some(handle))
            }
            CellKind::Process => {
                let (child, out) = process::spawn_process(&spec, &shm)?;
                output = Some(out);
                Runner::Process(Some(child))
            }
            CellKind::Kvm => Runner::Kvm(Some(start_kvm(&spec, &shm)?)),
        };
        let warnings = match &runner {
            Runner::Kvm(Some(k)) => k.warnings().to_vec(),
            _ => Vec::new(),
        };
        Ok(Cell {
            spec,
            shm,
            dir,
            runner,
            spawned_ns,
            end_seen_ns: None,
            judged: false,
            warnings,
            stop_sent: false,
            output,
            ended: None,
            end_after_ns: None,
        })
    }

    pub fn spec(&self) -> &CellSpec {
        &self.spec
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn kind(&self) -> CellKind {
        self.spec.kind
    }

    pub fn cpu(&self) -> usize {
        self.spec.cpu
    }

    /// Process id of a process cell.
    pub fn pid(&self) -> Option<u32> {
        match &self.runner {
            Runner::Process(c) => c.as_ref().map(Child::id),
            Runner::Thread(_) | Runner::Kvm(_) => None,
        }
    }

    /// Warnings the cell reported while starting (missing real-time guarantees).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn with_ctl<T>(&self, f: impl FnOnce(&ControlBlock<'_>) -> T) -> Option<T> {
        let region = self.dir.view(self.shm.words());
        let ctl = ControlBlock::attach(&region, &self.spec.name).ok()?;
        Some(f(&ctl))
    }

    fn reported_status(&self) -> CellStatus {
        self.with_ctl(|c| match c.state() {
            Ok(CellState::Starting) => CellStatus::Starting,
            Ok(CellState::Running) => CellStatus::Running,
            Ok(CellState::Done) => CellStatus::Done(c.exit_code()),
            // The cell's own words: capped, escaped and labelled as its claim.
            Ok(CellState::Faulted) => {
                let mut buf = [0u8; rtcell_shm::control::MAX_MESSAGE];
                let text = rtcell_host::peer_text(c.message_into(&mut buf), rtcell_host::PEER_TEXT_CAP);
                CellStatus::Faulted(format!("the cell reports: {text}"))
            }
            Ok(CellState::Stopped) => CellStatus::Stopped,
            Err(v) => CellStatus::Faulted(format!("cell wrote an impossible state {v} into its control block")),
        })
        .unwrap_or_else(|| CellStatus::Faulted("control block no longer readable".into()))
    }

    /// Current status; notices a finished thread, an exited or killed process or an ended VM. The
    /// moment its end is first seen is kept (see [`Cell::ran_for`]); a kvm cell that ends itself before
    /// its tasks could have ended, no stop asked, ended early (as a process cell does, see
    /// [`process::judge_exit`]).
    pub fn status(&mut self) -> CellStatus {
        if let Some(e) = &self.ended {
            return e.status.clone();
        }
        let status = self.observed_status();
        if status.is_finished() && self.end_seen_ns.is_none() {
            let kvm_end = match &self.runner {
                Runner::Kvm(Some(k)) => k.ended_ns(),
                _ => None,
            };
            self.end_seen_ns = Some(kvm_end.unwrap_or_else(rtcell_host::clock::mono_ns));
        }
        // Judged once the end is seen and its tasks' last release is known (a scenario's cells, from
        // their go on; a VM may have ended before it): a payload run on its own may end when it likes.
        let kvm_done = matches!((&self.runner, &status), (Runner::Kvm(_), CellStatus::Done(_)));
        if kvm_done && self.end_after_ns.is_some() && !self.judged {
            self.judged = true;
            if self.early() {
                let why = "ended early: its VM ended by itself, as done, before its tasks could have ended and \
                           before a stop was asked"
                    .to_string();
                let ended = process::Ended { status: CellStatus::Faulted(why.clone()), disowned: Some(why) };
                self.ended = Some(ended.clone());
                return ended.status;
            }
        }
        status
    }

    /// No stop was asked and its tasks cannot have ended yet when it ended (or now, if it has not):
    /// see [`Cell::expect_end_after`].
    fn early(&self) -> bool {
        let at = self.end_seen_ns.unwrap_or_else(rtcell_host::clock::mono_ns);
        !self.stop_sent && at < self.end_after_ns.unwrap_or(u64::MAX)
    }

    /// How long the cell has run: from its start to the moment its end was first seen (for a kvm cell,
    /// when its monitor saw the VM end), frozen there; until now while it runs. What it can have done
    /// (its claim of what it handled) is bounded by this, never by the time since it started.
    pub fn ran_for(&mut self) -> Duration {
        let _ = self.status();
        let end = self.end_seen_ns.unwrap_or_else(rtcell_host::clock::mono_ns);
        Duration::from_nanos(end.saturating_sub(self.spawned_ns))
    }

    fn observed_status(&mut self) -> CellStatus {
        let reported = self.reported_status();
        let early = self.early();
        match &mut self.runner {
            Runner::Thread(h) => {
                let finished = h.as_ref().is_none_or(|h| h.is_finished());
                if finished && !reported.is_finished() {
                    return CellStatus::Faulted("cell thread ended without reporting a final state".into());
                }
                reported
            }
            Runner::Process(None) => reported,
            Runner::Process(Some(child)) => match child.try_wait() {
                Ok(Some(st)) => {
                    let region = self.dir.view(self.shm.words());
                    let ended = process::judge_exit(&self.spec, &region, st, reported, early);
                    self.ended = Some(ended.clone());
                    ended.status
                }
                Ok(None) => reported,
                Err(e) => CellStatus::Faulted(format!("cannot wait for the cell process: {e}")),
            },
            // The monitor's verdict wins over the control block, which the guest can write.
            Runner::Kvm(k) => match k.as_ref().and_then(|k| k.end()) {
                None if k.is_none() => reported,
                None => match reported {
                    CellStatus::Starting | CellStatus::Running => reported,
                    // The guest claims to be finished while its vCPU still runs: not yet.
                    _ => CellStatus::Running,
                },
                Some(rtcell_kvm::VmEnd::Done(code)) => match reported {
                    CellStatus::Stopped => CellStatus::Stopped,
                    CellStatus::Faulted(m) => CellStatus::Faulted(m),
                    _ => CellStatus::Done(code),
                },
                Some(rtcell_kvm::VmEnd::Stopped) => CellStatus::Stopped,
                Some(other) => CellStatus::Faulted(other.reason()),
            },
        }
    }

    /// VM-exit counters of a kvm cell's vCPU, by reason (`exits`, `io_exits`, `mmio_exits`, ...).
    pub fn vm_exits(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        match &self.runner {
            Runner::Kvm(Some(k)) => k.exit_counts(),
            _ => None,
        }
    }

    /// Lines a kvm payload logged: the guest's text, each capped and escaped to one printable line.
    /// Show them labelled as the guest's (`cell "x" log: ...`).
    pub fn logs(&self) -> Vec<String> {
        match &self.runner {
            Runner::Kvm(Some(k)) => k.logs(),
            _ => Vec::new(),
        }
    }

    /// The last [`SHOWN_LOG_LINES`] lines a kvm payload logged (as [`Cell::logs`]): what a report shows.
    pub fn log_tail(&self) -> Vec<String> {
        let mut logs = self.logs();
        logs.drain(..logs.len().saturating_sub(SHOWN_LOG_LINES));
        logs
    }

    /// Log messages of a kvm payload, or output lines of a process cell, counted but not kept (over
    /// the rate limit or past the lines kept).
    pub fn logs_suppressed(&self) -> u64 {
        match &self.runner {
            Runner::Kvm(Some(k)) => k.logs_suppressed(),
            _ => self.output.as_ref().map_or(0, |o| o.suppressed()),
        }
    }

    /// The monitor's note when a kvm payload logged more than its rate limit allows (the log
    /// hypercalls over it are counted, not kept).
    pub fn log_storm(&self) -> Option<String> {
        match &self.runner {
            Runner::Kvm(Some(k)) => k.log_storm(),
            _ => self.output.as_ref().and_then(|o| o.storm()),
        }
    }

    /// Lines of a process cell's standard output and error shown so far (as `cell "x": ...`).
    pub fn output_lines(&self) -> u64 {
        self.output.as_ref().map_or(0, |o| o.shown())
    }

    /// Waits until the cell reports running; returns the start time (spawn to first heartbeat).
    pub fn wait_running(&mut self, timeout: Duration) -> Result<Duration, CellError> {
        let t0 = Instant::now();
        loop {
            match self.status() {
                CellStatus::Running => break,
                CellStatus::Starting => {}
                other => {
                    return Err(CellError::DiedStarting {
                        cell: self.spec.name.clone(),
                        kind: self.spec.kind,
                        cpu: self.spec.cpu,
                        status: other,
                    });
                }
            }
            if t0.elapsed() > timeout {
                return Err(CellError::StartTimeout {
                    cell: self.spec.name.clone(),
                    kind: self.spec.kind,
                    cpu: self.spec.cpu,
                    waited: timeout,
                });
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        let seen_ns = rtcell_host::clock::mono_ns();
        let (first, msg) = self.with_ctl(|c| (c.first_beat_ns(), c.message())).unwrap_or((0, String::new()));
        // A VM payload has no host clock: it reports 0, and its start is when we saw it running.
        let first = if first == 0 { seen_ns } else { first };
        self.warnings =
            msg.lines().filter(|l| !l.is_empty()).map(|l| format!("cell {:?}: {l}", self.spec.name)).collect();
        Ok(Duration::from_nanos(first.saturating_sub(self.spawned_ns)))
    }

    /// The earliest moment (CLOCK_MONOTONIC ns) a process cell's work may end by itself (its tasks'
    /// last release): a process that exits before it with the code of a finished run, no stop asked,
    /// ended early (a fault, and its tasks' blocks are disowned). Unset, only a stop ends it.
    pub fn expect_end_after(&mut self, ns: u64) {
        self.end_after_ns = Some(ns);
    }

    /// Why the statistics blocks of its tasks do not hold its harness's figures (see
    /// [`CellReport::disowned`]), once its process ended.
    pub fn disowned(&self) -> Option<&str> {
        self.ended.as_ref().and_then(|e| e.disowned.as_deref())
    }

    /// Heartbeat and messages handled so far.
    pub fn progress(&self) -> (u64, u64) {
        self.with_ctl(|c| (c.heartbeat(), c.handled())).unwrap_or((0, 0))
    }

    /// Asks the cell to stop and waits for it up to `timeout`; a process that does not stop is killed.
    pub fn stop(mut self, timeout: Duration) -> CellReport {
        self.request_stop();
        let t0 = Instant::now();
        let mut status = self.status();
        while !status.is_finished() && t0.elapsed() < timeout {
            std::thread::sleep(Duration::from_micros(500));
            status = self.status();
        }
        match &mut self.runner {
            Runner::Process(child) => {
                let finished = status.is_finished();
                if !finished {
                    status = CellStatus::Faulted(format!("did not stop within {timeout:?}; killed"));
                }
                if let Err(abandoned) = end_process(child.take(), finished) {
                    status = CellStatus::Faulted(match status {
                        CellStatus::Faulted(m) => format!("{m}; {abandoned}"),
                        other => format!("{other}, but its {abandoned}"),
                    });
                }
                // What the cell printed last is shown before its verdict.
                if let Some(o) = &mut self.output {
                    o.finish(Duration::from_secs(1));
                }
            }
            Runner::Thread(h) => {
                if status.is_finished() {
                    if let Some(h) = h.take() {
                        let _ = h.join();
                    }
                } else {
                    status = CellStatus::Faulted(format!("did not stop within {timeout:?}; thread left detached"));
                }
            }
            Runner::Kvm(k) => {
                if let Some(k) = k.take() {
                    let forced = !status.is_finished();
                    let end = k.stop(Duration::from_millis(1));
                    if forced {
                        status = CellStatus::Faulted(format!("did not stop within {timeout:?}; vCPU stopped ({end})"));
                    }
                }
            }
        }
        // Read before the end is fixed: the bound is never smaller than when the cell wrote its claim.
        let (heartbeat, handled) = self.progress();
        let ran_for = self.ran_for();
        let disowned = self.disowned().map(String::from);
        CellReport {
            name: self.spec.name.clone(),
            kind: self.spec.kind,
            cpu: self.spec.cpu,
            status,
            heartbeat,
            handled,
            disowned,
            ran_for,
        }
    }

    /// Sets the stop flag without waiting.
    pub fn request_stop(&mut self) {
        self.stop_sent = true;
        self.with_ctl(|c| c.request_stop());
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        if !self.stop_sent {
            self.with_ctl(|c| c.request_stop());
        }
        if let Runner::Process(child) = &mut self.runner {
            // Dropped while running: a short grace to see the stop request, then killed; never waited
            // for beyond the kill deadline.
            let _ = end_process(child.take(), false);
        }
    }
}
