//! Trial runs of user C code in a throw-away process (`rtcell __c-probe`): load the shared object,
//! find its symbols, bind it to a scratch copy of the region and run its init. A missing symbol, an
//! unresolved import or a crash in init then shows up, with its cause, before any cell starts, and
//! cannot take the supervisor down.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rtcell_shm::RegionView;
use rtcell_shm::mapping::SharedMemory;

/// How long a trial may take (loading plus init).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Tries `library` against `scratch` (a region of the run's layout) in a child process; gives up (the
/// trial killed) as soon as `stop()` says so (Ctrl-C, SIGTERM).
pub fn probe_c_task_until(
    scratch: &SharedMemory,
    library: &str,
    init: Option<&str>,
    step: &str,
    com: &[String],
    stop: &dyn Fn() -> bool,
) -> Result<(), String> {
    let exe = crate::cell_executable().map_err(|e| format!("cannot find the rtcell executable: {e}"))?;
    let fd = scratch.fd();
    let mut cmd = Command::new(exe);
    cmd.arg("__c-probe")
        .arg("--fd")
        .arg(fd.to_string())
        .arg("--library")
        .arg(library)
        .arg("--step")
        .arg(step)
        .arg("--com")
        .arg(com.join(","));
    if let Some(i) = init {
        cmd.arg("--init").arg(i);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    crate::pass_region(&mut cmd, fd).map_err(|e| format!("cannot start the trial of {library}: {e}"))?;
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the trial of {library}: {e}"))?;
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() > PROBE_TIMEOUT => {
                return Err(format!(
                    "{library}: loading it and running its init took more than {} s (does init wait for something?){}",
                    PROBE_TIMEOUT.as_secs(),
                    abandoned(child)
                ));
            }
            Ok(None) if stop() => {
                return Err(format!("the trial of {library} was interrupted (stop requested){}", abandoned(child)));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("trial of {library}: {e}")),
        }
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let err = err.trim();
    if status.success() {
        return Ok(());
    }
    if let Some(sig) = status.signal() {
        let during = match init {
            Some(i) => format!("while loading it or running its init {i}()"),
            None => "while loading it".into(),
        };
        return Err(format!("{library} crashed {during}: killed by {}", rtcell_host::child::signal_name(sig)));
    }
    Err(if err.is_empty() { format!("{library}: the trial failed ({status})") } else { err.to_string() })
}

/// Kills a trial and reaps it within the kill deadline: `""` when it ended, else `; its process pid N did
/// not end … abandoned`.
fn abandoned(child: std::process::Child) -> String {
    match rtcell_host::child::kill_and_reap(child) {
        rtcell_host::child::Reaped::Ended(_) => String::new(),
        rtcell_host::child::Reaped::Abandoned(msg) => format!("; its {msg}"),
    }
}

/// Entry of `rtcell __c-probe`: exit code 0 when the library loads, binds and initialises.
pub fn c_probe_main(fd: i32, library: &str, init: Option<&str>, step: &str, com: &[String]) -> i32 {
    if fd < 0 {
        eprintln!("bad --fd {fd}");
        return 2;
    }
    // SAFETY: the parent passed this inherited descriptor for this process alone.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let shm = match SharedMemory::from_fd(owned) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot map the scratch region: {e}");
            return 2;
        }
    };
    let region = match RegionView::attach(shm.words()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("scratch region: {e}");
            return 2;
        }
    };
    if let Err(e) = crate::confine::lock_down() {
        eprintln!("cannot confine the trial (seccomp): {e}");
        return 2;
    }
    match rtcell_tasks::cwork::probe(&region, library, init, step, com) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            2
        }
    }
}
