//! Process cells: the rtcell binary re-executed in cell mode (`rtcell __cell`), the region passed as an
//! inherited memfd, standard output and error through a pipe ([`crate::output`]), confined before and
//! after exec ([`crate::confine`]).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use rtcell_shm::RegionView;
use rtcell_shm::control::{CellState, ControlBlock};
use rtcell_shm::mapping::SharedMemory;

use rtcell_tasks::TaskState;

use crate::{CellError, CellSpec, CellStatus, WorkloadSpec, cell_body, confine, output};

static CELL_EXE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Sets the executable that process cells run (`EXE __cell ...`). Defaults to the current executable,
/// which is right for the `rtcell` binary; test harnesses point it at the built `rtcell`.
pub fn set_cell_executable(path: PathBuf) {
    if let Ok(mut g) = CELL_EXE.lock() {
        *g = Some(path);
    }
}

pub(crate) fn cell_executable() -> std::io::Result<PathBuf> {
    if let Ok(g) = CELL_EXE.lock() {
        if let Some(p) = g.as_ref() {
            return Ok(p.clone());
        }
    }
    std::env::current_exe()
}

pub(crate) fn spawn_process(spec: &CellSpec, shm: &SharedMemory) -> Result<(Child, output::CellOutput), CellError> {
    let err = |source| CellError::Spawn { cell: spec.name.clone(), kind: spec.kind, source };
    let exe = cell_executable().map_err(err)?;
    let spec_json = serde_json::to_string(spec).map_err(|e| err(std::io::Error::other(e)))?;
    let fd = shm.fd();
    let parent = std::process::id();
    let mut cmd = Command::new(exe);
    cmd.arg("__cell")
        .arg("--fd")
        .arg(fd.to_string())
        .arg("--parent")
        .arg(parent.to_string())
        .arg("--spec")
        .arg(spec_json);
    // Never the operator's terminal: one pipe for both, drained by a reader that escapes each line.
    let (read, write) = output::pipe().map_err(err)?;
    let write2 = write.try_clone().map_err(err)?;
    cmd.stdin(Stdio::null()).stdout(Stdio::from(write)).stderr(Stdio::from(write2));
    pass_region(&mut cmd, fd).map_err(err)?;
    let child = cmd.spawn().map_err(err)?;
    // Our copies of the write end go with `cmd`: the pipe closes when the cell's do.
    drop(cmd);
    match output::CellOutput::start(&spec.name, spec.cpu, read, Box::new(std::io::stderr())) {
        Ok(out) => Ok((child, out)),
        Err(e) => {
            rtcell_host::child::kill_and_reap(child);
            Err(err(e))
        }
    }
}

/// Makes a child of `cmd` keep the region's descriptor `fd` across exec, die with this process rather
/// than spin orphaned, and never make a process of its own or reach into this one ([`confine`]): the
/// child runs user C code, and a process it forked would outlive the run (the death signal is not
/// inherited across fork).
pub(crate) fn pass_region(cmd: &mut Command, fd: i32) -> std::io::Result<()> {
    static PROTECTED: std::sync::Once = std::sync::Once::new();
    let mut protected = Ok(());
    PROTECTED.call_once(|| protected = confine::protect_parent());
    protected?;
    let filter = confine::Filter::no_fork();
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (close_range, setsid, fcntl, prctl, seccomp) on values built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            inherit_only_stdio();
            // A session of its own: no controlling terminal (rtcell's), so /dev/tty is not there to write
            // to or type into.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            confine::drop_capabilities()?;
            filter.install()
        });
    }
    Ok(())
}

/// Marks every descriptor from 3 up close-on-exec, so the child keeps only its standard streams (and the
/// region, passed again after this): descriptors rtcell inherited from its caller (a `flock` wrapper's
/// lock, a terminal, a socket) never reach a cell. Async-signal-safe (a `pre_exec` closure).
fn inherit_only_stdio() {
    // SAFETY: close_range with integer arguments only.
    let done = unsafe { libc::close_range(3, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int) } == 0;
    if done {
        return;
    }
    // A kernel before 5.11: one fcntl per descriptor below the soft limit (capped, so a huge limit does not
    // make the start slow).
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we pass.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 { limit.rlim_cur } else { 1024 };
    for d in 3..top.min(65_536) as libc::c_int {
        // SAFETY: fcntl on a descriptor number; a closed one gives EBADF, which changes nothing.
        unsafe { libc::fcntl(d, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// Entry of a process cell (`rtcell __cell --fd N --parent PID --spec JSON`). Returns the exit code.
pub fn process_cell_main(fd: i32, parent: u32, spec_json: &str) -> i32 {
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } as u32 != parent {
        eprintln!("rtcell cell: parent {parent} is gone; exiting");
        return exit::ORPHANED;
    }
    let spec: CellSpec = match serde_json::from_str(spec_json) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rtcell cell: bad --spec: {e}");
            return exit::USAGE;
        }
    };
    if fd < 0 {
        eprintln!("rtcell cell: bad --fd {fd}");
        return exit::USAGE;
    }
    // SAFETY: the parent passed us this inherited descriptor for our exclusive use in this process.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let shm = match SharedMemory::from_fd(owned) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rtcell cell {}: cannot map the region: {e}", spec.name);
            return exit::USAGE;
        }
    };
    let region = match RegionView::attach(shm.words()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rtcell cell {}: {e}", spec.name);
            return exit::USAGE;
        }
    };
    let ctl = match ControlBlock::attach(&region, &spec.name) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rtcell cell {}: no control block: {e}", spec.name);
            return exit::USAGE;
        }
    };
    // Before any user code is loaded: no exec, no change of the death signal, no reach into rtcell.
    if let Err(e) = confine::lock_down() {
        ctl.finish(CellState::Faulted, 1, &format!("cannot confine the cell (seccomp): {e}"));
        return exit::FAULTED;
    }
    // Libraries stay loaded (closing one runs its destructors) and the process ends with `_exit`: no
    // exit handler or destructor of the user's code runs after the tasks wrote their final figures.
    rtcell_tasks::cwork::keep_libraries_loaded();
    if let Err(why) = load_code(&spec) {
        ctl.finish(CellState::Faulted, 1, &why);
        end_now(exit::FAULTED);
    }
    let code = cell_body(&spec, &region, &ctl);
    // Code written over during the run (through /proc/self/mem: nothing can be made executable) is
    // code that may have changed how the harness measured: its record is not to be trusted.
    if let Ok(Some(m)) = confine::patched_code() {
        ctl.finish(CellState::Faulted, 1, &format!("code of the cell's process was written over during the run: {m}"));
        end_now(exit::FAULTED);
    }
    end_now(code)
}

/// Loads every C library the cell's tasks name (their constructors run now), then forbids new code
/// ([`confine::seal_code`]): from then on nothing in the process becomes executable.
fn load_code(spec: &CellSpec) -> Result<(), String> {
    let filters = confine::filter_count();
    if let WorkloadSpec::TaskSet { tasks } = &spec.workload {
        for t in tasks {
            if let rtcell_tasks::TaskWork::C { library, .. } = &t.work {
                rtcell_tasks::cwork::preload(library).map_err(|e| format!("task {:?}: {e}", t.name))?;
            }
        }
    }
    confine::seal_code(filters)
}

/// Exit codes of a process cell. Once user code is loaded, the harness ends the process with `_exit`
/// right after the final states are written, with a code chosen from its own record of how the
/// workload ended (never read back from the region): the supervisor checks the blocks against it.
pub mod exit {
    /// Every task ended at the end of the run, or the cell stopped on request.
    pub const DONE: i32 = 0;
    /// The cell or one of its tasks faulted.
    pub const FAULTED: i32 = 1;
    /// Bad arguments or no region (no user code loaded).
    pub const USAGE: i32 = 2;
    /// The supervisor was gone at the start.
    pub const ORPHANED: i32 = 3;
    /// A task's watchdog tripped (or a task stopped on a corrupt channel).
    pub const TRIPPED: i32 = 4;
}

/// Ends the process with `code` now: standard output flushed, then `_exit`, so that no `atexit`
/// handler or ELF destructor (the user's code) runs after the harness wrote the final states.
fn end_now(code: i32) -> ! {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // SAFETY: _exit ends the process at once; nothing after it runs, no Rust destructor is needed
    // (the kernel releases the mappings and descriptors).
    unsafe { libc::_exit(code) }
}

/// How a process cell ended, judged once when its exit is first seen: its status, and when its tasks'
/// blocks are not its harness's, why (`disowned`: nothing read from them is to be shown).
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    pub status: CellStatus,
    pub disowned: Option<String>,
}

/// Judges a process cell's exit `st` against what its control block reports (`reported`) and what its
/// tasks' statistics blocks in `region` hold. The exit code is its harness's own verdict (or the cell's
/// code, which can end the process itself): a cell may claim a worse outcome than its harness saw,
/// never a better one. `early`: no stop was asked and its tasks could not have ended yet.
pub(crate) fn judge_exit(
    spec: &CellSpec,
    region: &RegionView<'_>,
    st: std::process::ExitStatus,
    reported: CellStatus,
    early: bool,
) -> Ended {
    use std::os::unix::process::ExitStatusExt;
    let plain = |status| Ended { status, disowned: None };
    if let Some(sig) = st.signal() {
        return plain(CellStatus::Killed { signal: sig, name: rtcell_host::child::signal_name(sig) });
    }
    let code = st.code().unwrap_or(-1);
    if !reported.is_finished() {
        let why = format!("process exited with code {code} without reporting a final state");
        return plain(CellStatus::Faulted(why));
    }
    let tasks: &[rtcell_tasks::TaskSpec] = match &spec.workload {
        WorkloadSpec::TaskSet { tasks } => tasks,
        _ => &[],
    };
    let states: Vec<Option<TaskState>> =
        tasks.iter().map(|t| rtcell_tasks::read_counters(region, &t.name).ok().and_then(|c| c.state)).collect();
    let why = match code {
        exit::DONE if early => Some(
            "ended early: its process exited by itself, with the code of a finished run, before its tasks could \
             have ended and before a stop was asked"
                .to_string(),
        ),
        exit::TRIPPED if !states.contains(&Some(TaskState::Tripped)) => Some(
            "ended with the exit code of a watchdog trip, but no statistics block of its tasks shows one: a block \
             was rewritten after its task ended"
                .to_string(),
        ),
        exit::FAULTED if !matches!(reported, CellStatus::Faulted(_)) => {
            Some(format!("ended with the exit code of a fault, but its control block says {reported}"))
        }
        exit::DONE | exit::TRIPPED | exit::FAULTED => None,
        other => Some(format!("ended with exit code {other}, which its harness never ends with")),
    };
    match why {
        // The process's own exit status and the harness's outcome, not the control block's code.
        None if code == exit::TRIPPED => plain(CellStatus::Tripped { exit_code: code }),
        None => plain(reported),
        Some(why) => Ended { status: CellStatus::Faulted(why.clone()), disowned: Some(why) },
    }
}

/// How long a process cell that reported its final state has to exit by itself before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// Ends a cell's process: one that reported its final state (`finished`) gets [`EXIT_GRACE`] to exit by
/// itself; then SIGKILL, and at most the kill deadline. `Err` names a process that outlived that and was
/// abandoned (`process pid N did not end within 2 s of SIGKILL (...); abandoned`).
pub(crate) fn end_process(child: Option<Child>, finished: bool) -> Result<(), String> {
    let Some(mut child) = child else { return Ok(()) };
    let grace = if finished { EXIT_GRACE } else { Duration::from_millis(5) };
    if let Ok(Some(_)) = rtcell_host::child::wait_within(&mut child, grace) {
        return Ok(());
    }
    match rtcell_host::child::kill_and_reap(child) {
        rtcell_host::child::Reaped::Ended(_) => Ok(()),
        rtcell_host::child::Reaped::Abandoned(msg) => Err(msg),
    }
}
