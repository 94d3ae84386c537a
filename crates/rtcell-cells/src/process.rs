//! Process cells: the rtcell binary re-executed in cell mode (`rtcell __cell`), the region passed as an
//! inherited memfd, standard output and error through a pipe ([`crate::output`]), confined before and
//! after exec ([`crate::confine`]).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use rtcell_shm::RegionView;
use rtcell_shm::control::{CellState, ControlBlock};
use rtcell_shm::mapping::SharedMemory;

use crate::{CellError, CellSpec, cell_body, confine, output};

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
        return 3;
    }
    let spec: CellSpec = match serde_json::from_str(spec_json) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rtcell cell: bad --spec: {e}");
            return 2;
        }
    };
    if fd < 0 {
        eprintln!("rtcell cell: bad --fd {fd}");
        return 2;
    }
    // SAFETY: the parent passed us this inherited descriptor for our exclusive use in this process.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let shm = match SharedMemory::from_fd(owned) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rtcell cell {}: cannot map the region: {e}", spec.name);
            return 2;
        }
    };
    let region = match RegionView::attach(shm.words()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rtcell cell {}: {e}", spec.name);
            return 2;
        }
    };
    let ctl = match ControlBlock::attach(&region, &spec.name) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rtcell cell {}: no control block: {e}", spec.name);
            return 2;
        }
    };
    // Before any user code is loaded: no exec, no change of the death signal, no reach into rtcell.
    if let Err(e) = confine::lock_down() {
        ctl.finish(CellState::Faulted, 1, &format!("cannot confine the cell (seccomp): {e}"));
        return 1;
    }
    cell_body(&spec, &region, &ctl);
    match ctl.state() {
        Ok(CellState::Faulted) => 1,
        Ok(CellState::Done) => ctl.exit_code(),
        _ => 0,
    }
}
