//! Ending a child process within a deadline, whatever it does.
//!
//! A SIGKILLed process ends only when it leaves the kernel, and some never do promptly: a process blocked
//! in a file system that does not answer (FUSE), an exit stuck in `d_invalidate`, or one held by a tracer
//! that is not us (the kernel shows a traced process's end to its tracer first). Waiting for such a
//! child with `wait()` hangs the run for good. Everything in rtcell that ends a child (process cells, C
//! task trials, interference loads) goes through here instead: SIGKILL, then at most [`KILL_DEADLINE`];
//! a child still there then is described from /proc ([`proc_state`]) and abandoned to a detached
//! thread that reaps it if it ever ends. Never waited for.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How long a SIGKILLed child may take to end before it is abandoned.
pub const KILL_DEADLINE: Duration = Duration::from_secs(2);

/// How often a wait with a deadline looks again.
const POLL: Duration = Duration::from_millis(2);

/// Waits at most `limit` for `child` to end: `Ok(None)` when it is still running then.
pub fn wait_within(child: &mut Child, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if t0.elapsed() >= limit {
            return Ok(None);
        }
        std::thread::sleep(POLL.min(limit.saturating_sub(t0.elapsed())));
    }
}

/// How a killed child went.
#[derive(Debug)]
pub enum Reaped {
    /// It ended and was reaped (`None`: it could not be waited for, e.g. reaped elsewhere already).
    Ended(Option<ExitStatus>),
    /// It did not end within [`KILL_DEADLINE`] of SIGKILL: `process pid N did not end within 2 s of
    /// SIGKILL (command …, state …, wait channel …); abandoned`. A detached thread reaps it if it ends.
    Abandoned(String),
}

/// SIGKILLs `child` (a no-op when it has ended already) and reaps it within [`KILL_DEADLINE`]; see
/// [`Reaped`] for one that does not end.
pub fn kill_and_reap(mut child: Child) -> Reaped {
    let _ = child.kill();
    match wait_within(&mut child, KILL_DEADLINE) {
        Ok(Some(status)) => return Reaped::Ended(Some(status)),
        Ok(None) => {}
        Err(_) => return Reaped::Ended(None),
    }
    let pid = child.id();
    let msg = format!(
        "process pid {pid} did not end within {} s of SIGKILL ({}); abandoned",
        KILL_DEADLINE.as_secs(),
        proc_state(pid as i32)
    );
    // If even a thread cannot be made, the child is left unreaped (a zombie once it ends): still never
    // waited for here.
    let _ = std::thread::Builder::new().name("rtcell-reaper".into()).spawn(move || {
        let _ = child.wait();
    });
    Reaped::Abandoned(msg)
}

/// `command NAME, state D (disk sleep), wait channel d_invalidate` from /proc (what is readable), every
/// part made printable and capped; `gone from /proc` when nothing is.
pub fn proc_state(pid: i32) -> String {
    // Read as bytes: the command name is the process's own (`/proc/self/comm`), any bytes at all.
    let read =
        |f: &str| String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default()).into_owned();
    let stat = read("stat");
    let comm = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')')).map(|(c, _)| c);
    let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next());
    let status = read("status");
    let state_long = status.lines().find_map(|l| l.strip_prefix("State:")).map(str::trim);
    let wchan = read("wchan");
    let shown = |s: &str| s.chars().filter(|c| !c.is_control()).take(64).collect::<String>();
    match (comm, state) {
        (Some(c), Some(s)) => format!(
            "command {}, state {}, wait channel {}",
            shown(c),
            shown(state_long.unwrap_or(s)),
            if wchan.trim().is_empty() || wchan.trim() == "0" { "-".into() } else { shown(wchan.trim()) }
        ),
        _ => "gone from /proc".into(),
    }
}

/// Name of a signal number, e.g. 9 → "SIGKILL".
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn sleeper() -> Command {
        let mut c = Command::new("sleep");
        c.arg("1000").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        c
    }

    #[test]
    fn a_child_that_ends_is_reaped_and_one_that_runs_is_waited_for_no_longer_than_asked() {
        let mut child = sleeper().spawn().unwrap();
        assert!(wait_within(&mut child, Duration::from_millis(50)).unwrap().is_none());
        match kill_and_reap(child) {
            Reaped::Ended(Some(s)) => assert!(!s.success()),
            other => panic!("{other:?}"),
        }
    }

    /// A child held by a tracer that is not us cannot be reaped (its end is shown to the tracer first),
    /// as one stuck in the kernel: it is abandoned within the deadline, described, and reaped in the
    /// background once the tracer lets go.
    #[test]
    fn a_child_that_cannot_be_reaped_is_abandoned_and_described() {
        let child = sleeper().spawn().unwrap();
        let pid = child.id() as libc::pid_t;
        let tracer = rtcell_testkit::Tracer::seize(pid);
        let Ok(tracer) = tracer else {
            kill_and_reap(child);
            rtcell_testkit::skip(&format!("cannot ptrace a child here: {:?}", tracer.err()));
            return;
        };
        let reaped = kill_and_reap(child);
        drop(tracer);
        match reaped {
            Reaped::Abandoned(msg) => {
                assert!(msg.starts_with(&format!("process pid {pid} did not end within 2 s of SIGKILL")), "{msg}");
                assert!(msg.contains("state Z") && msg.ends_with("; abandoned"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
        assert!(rtcell_testkit::gone_within(pid, Duration::from_secs(60)), "pid {pid} never reaped");
    }
}
