//! Load processes: started on the load CPUs, watched while they run, killed at the end, and never left
//! behind.
//!
//! Each process is started by a thread of its own that lives until the load stops, because
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child ends, not the process: a short-lived
//! spawning thread would kill its children as it returns. Before exec the child
//! - leads a new process group (Ctrl-C on the terminal reaches only rtcell; stopping kills the whole
//!   group, whatever the program forked),
//! - is pinned to the load CPUs (its own children inherit that),
//! - asks for SIGKILL when rtcell dies (a SIGKILLed rtcell leaves nothing running), and checks that
//!   rtcell is still its parent (it may have died before that request).
//!
//! Stopping is bounded: SIGKILL to every group, then at most [`STOP_DEADLINE`] for the processes to end.
//! One that has not ended by then is stuck in the kernel (a SIGKILLed process finishes its system call
//! first, and some never return promptly, e.g. an exit in `d_invalidate`): it is reported with its pid,
//! command name, state and wait channel, and abandoned; its watching thread reaps it if it ever ends.
//!
//! The watching thread waits for its child without reaping it (`waitid(WNOWAIT)`), kills what is left
//! in its group while the zombie still holds the group id (so the id cannot have been reused), then
//! reaps it. A command that ends by itself (`ls -lR /`) is started again, as a shell `while :` loop would;
//! one that is killed, or ends when it should run until stopped, is reported and not restarted.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long [`Supervisor::stop`] waits for the killed processes to end before it abandons them.
pub const STOP_DEADLINE: Duration = rtcell_host::child::KILL_DEADLINE;

/// A command that ends by itself with a failure this soon is broken, not looping.
const MIN_FAILING_RUN: Duration = Duration::from_secs(1);

/// One load process.
#[derive(Debug, Clone)]
pub struct ProcSpec {
    /// Name in reports, e.g. `stress-ng@0`, `ls`.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The CPUs it may run on.
    pub cpus: Vec<usize>,
    /// Start it again whenever it ends by itself (a loop); otherwise it must run until stopped.
    pub restart: bool,
}

impl ProcSpec {
    /// The command line, for reports.
    pub fn command(&self) -> String {
        let program = self.program.file_name().map_or(self.program.to_string_lossy(), |n| n.to_string_lossy());
        std::iter::once(program.into_owned()).chain(self.args.iter().cloned()).collect::<Vec<_>>().join(" ")
    }
}

/// How one load process (or loop of processes) went.
#[derive(Debug, Clone)]
pub struct ProcOutcome {
    pub name: String,
    pub command: String,
    pub cpus: Vec<usize>,
    /// Processes started (more than one for a loop).
    pub runs: u64,
    /// Pid of the last one started.
    pub last_pid: Option<u32>,
    /// `load NAME (pid N) died at t=… s: …` when it ended before the stop.
    pub death: Option<String>,
    /// `load NAME (pid N) did not end …` when it outlived the stop's deadline and was abandoned.
    pub stuck: Option<String>,
}

impl ProcOutcome {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "command": self.command,
            "cpus": self.cpus,
            "runs": self.runs,
            "last_pid": self.last_pid,
            "stayed_alive": self.death.is_none(),
            "death": self.death,
            "stuck": self.stuck,
        })
    }
}

#[derive(Default)]
struct State {
    stopping: bool,
    /// The running child, not yet reaped: its pid is also its process group id.
    pid: Option<i32>,
    runs: u64,
    last_pid: Option<u32>,
    death: Option<String>,
    stuck: Option<String>,
}

struct Slot {
    spec: ProcSpec,
    state: Mutex<State>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The load processes of one load, each watched by its own thread.
pub struct Supervisor {
    slots: Vec<Arc<Slot>>,
    threads: Vec<JoinHandle<()>>,
}

impl Supervisor {
    /// Starts every process; returns once each has been started once (or failed to start, which is an
    /// error, after the others are stopped again).
    pub fn start(specs: Vec<ProcSpec>) -> std::io::Result<Supervisor> {
        let t0 = Instant::now();
        let mut sup = Supervisor { slots: Vec::new(), threads: Vec::new() };
        for spec in specs {
            let slot = Arc::new(Slot { spec, state: Mutex::new(State::default()) });
            let (started_tx, started_rx) = std::sync::mpsc::channel();
            let watched = Arc::clone(&slot);
            let name = format!("load-{}", slot.spec.name);
            let thread = std::thread::Builder::new().name(name).spawn(move || watch(&watched, t0, started_tx))?;
            sup.slots.push(Arc::clone(&slot));
            sup.threads.push(thread);
            match started_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    sup.stop();
                    return Err(std::io::Error::new(e.kind(), format!("cannot start {}: {e}", slot.spec.command())));
                }
                Err(_) => {
                    sup.stop();
                    return Err(std::io::Error::other(format!("the thread starting {} ended", slot.spec.command())));
                }
            }
        }
        Ok(sup)
    }

    /// Pids of the processes running now.
    pub fn pids(&self) -> Vec<u32> {
        self.slots.iter().filter_map(|s| s.lock().pid).filter_map(|p| u32::try_from(p).ok()).collect()
    }

    /// Kills every process group, waits for the watching threads at most [`STOP_DEADLINE`], and says how
    /// each process went; one still running then is reported as stuck and abandoned (never waited for).
    /// Calling it again returns the same outcomes.
    pub fn stop(&mut self) -> Vec<ProcOutcome> {
        for slot in &self.slots {
            let mut st = slot.lock();
            st.stopping = true;
            if let Some(pid) = st.pid {
                kill_group(pid);
            }
        }
        let deadline = Instant::now() + STOP_DEADLINE;
        let threads = std::mem::take(&mut self.threads);
        for (slot, t) in self.slots.iter().zip(threads) {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
                continue;
            }
            // Detached: the thread reaps the process if it ever ends.
            drop(t);
            let mut st = slot.lock();
            let pid = st.pid.or_else(|| st.last_pid.and_then(|p| i32::try_from(p).ok())).unwrap_or(0);
            let msg = format!(
                "load {} (pid {pid}) did not end within {:.0} s of SIGKILL ({}); abandoned, the run went on without \
                 waiting for it",
                slot.spec.name,
                STOP_DEADLINE.as_secs_f64(),
                rtcell_host::child::proc_state(pid)
            );
            rtcell_report::progress!("warning: {msg}");
            st.stuck = Some(msg);
        }
        self.slots
            .iter()
            .map(|s| {
                let st = s.lock();
                ProcOutcome {
                    name: s.spec.name.clone(),
                    command: s.spec.command(),
                    cpus: s.spec.cpus.clone(),
                    runs: st.runs,
                    last_pid: st.last_pid,
                    death: st.death.clone(),
                    stuck: st.stuck.clone(),
                }
            })
            .collect()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The body of a watching thread: start the process, wait for it, start it again while it is a loop.
/// `started` gets the result of the first start.
fn watch(slot: &Slot, t0: Instant, started: std::sync::mpsc::Sender<std::io::Result<()>>) {
    // Threads inherit the creator's policy and CPUs; the processes inherit this thread's.
    let _ = rtcell_host::sched::set_normal();
    let _ = rtcell_host::cpu::pin_current_thread_to(&slot.spec.cpus);
    let mut started = Some(started);
    // Long-running processes write their complaints here, quoted when they die.
    let log = if slot.spec.restart { None } else { tempfile::tempfile().ok() };
    loop {
        let (mut child, began) = {
            let mut st = slot.lock();
            if st.stopping {
                return;
            }
            let stderr = log.as_ref().and_then(|f| f.try_clone().ok()).map_or_else(Stdio::null, Stdio::from);
            match spawn(&slot.spec, stderr) {
                Ok(c) => {
                    st.pid = i32::try_from(c.id()).ok();
                    st.runs += 1;
                    st.last_pid = Some(c.id());
                    if let Some(tx) = started.take() {
                        let _ = tx.send(Ok(()));
                    }
                    (c, Instant::now())
                }
                Err(e) => {
                    match started.take() {
                        Some(tx) => {
                            let _ = tx.send(Err(e));
                        }
                        None => {
                            let msg = format!(
                                "load {} could not be started again at t={:.1} s: {e}",
                                slot.spec.name,
                                t0.elapsed().as_secs_f64()
                            );
                            rtcell_report::progress!("warning: {msg}; the run goes on");
                            st.death = Some(msg);
                        }
                    }
                    return;
                }
            }
        };
        let pid = child.id();
        let waited = wait_exited(pid);
        // The child is a zombie now: its pid is still taken, so the group id names its group only.
        if let Ok(p) = i32::try_from(pid) {
            kill_group(p);
        }
        let mut st = slot.lock();
        let status = child.wait();
        st.pid = None;
        if st.stopping {
            return;
        }
        let at = t0.elapsed().as_secs_f64();
        let how = match (&waited, &status) {
            (Err(e), _) | (_, Err(e)) => format!("could not be waited for ({e})"),
            (Ok(()), Ok(s)) => {
                if slot.spec.restart && (s.success() || (s.signal().is_none() && began.elapsed() >= MIN_FAILING_RUN)) {
                    // Ended by itself, as a loop body does (ls -lR / may end with status 1 when a file
                    // vanishes under it).
                    continue;
                }
                describe(s)
            }
        };
        let complaint = log.as_ref().and_then(last_line).map(|l| format!(" ({l})")).unwrap_or_default();
        let msg = format!("load {} (pid {pid}) died at t={at:.1} s: {how}{complaint}", slot.spec.name);
        rtcell_report::progress!("warning: {msg}; the run goes on");
        st.death = Some(msg);
        return;
    }
}

/// Starts one load process (see the module documentation for what happens before exec).
fn spawn(spec: &ProcSpec, stderr: Stdio) -> std::io::Result<Child> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in &spec.cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::other(format!("CPU {cpu} is beyond the affinity mask")));
        }
        // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so the bit lies inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    let parent = std::process::id();
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr).process_group(0);
    // SAFETY: the closure runs in the forked child before exec; it calls only async-signal-safe system
    // calls on values copied in, and builds its errors without allocating.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // rtcell died before the request above: nobody would stop this process.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Waits until child `pid` has ended, leaving it unreaped.
fn wait_exited(pid: u32) -> std::io::Result<()> {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid buffer for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is writable; WNOWAIT leaves the child to be reaped by its std::process::Child.
        let rc = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// SIGKILL to the process group led by `pid` (gone already: nothing to do).
fn kill_group(pid: i32) {
    if pid > 0 {
        // SAFETY: kill takes plain integers; callers pass the pid of an unreaped child of ours, which
        // leads its own group, so the group id cannot belong to anyone else.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

/// How a process ended, in the words of the cell reports.
fn describe(s: &ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (_, Some(sig)) => format!("killed by signal {sig} ({})", rtcell_host::child::signal_name(sig)),
        (Some(code), None) => format!("exited with status {code}"),
        (None, None) => format!("ended ({s})"),
    }
}

/// The last non-empty line a process wrote to its log (at most 200 bytes of it).
fn last_line(mut log: &File) -> Option<String> {
    let len = log.seek(SeekFrom::End(0)).ok()?;
    log.seek(SeekFrom::Start(len.saturating_sub(512))).ok()?;
    let mut tail = String::new();
    log.take(512).read_to_string(&mut tail).ok()?;
    let line = tail.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    Some(line.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, program: &str, args: &[&str], restart: bool) -> ProcSpec {
        ProcSpec {
            name: name.into(),
            program: crate::find_program(program).unwrap(),
            args: args.iter().map(|a| a.to_string()).collect(),
            cpus: rtcell_host::cpu::online_cpus().unwrap(),
            restart,
        }
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
            .unwrap_or(false)
    }

    #[test]
    fn loops_restart_and_everything_is_killed_at_the_stop() {
        let mut sup =
            Supervisor::start(vec![spec("sleeper", "sleep", &["1000"], false), spec("looper", "true", &[], true)])
                .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let pids = sup.pids();
        let out = sup.stop();
        assert!(out[1].runs > 1, "a loop runs again: {out:?}");
        assert!(out.iter().all(|o| o.death.is_none()), "{out:?}");
        for p in pids {
            assert!(!alive(p), "pid {p} survived the stop");
        }
    }

    #[test]
    fn a_killed_process_is_reported_and_not_restarted() {
        let mut sup = Supervisor::start(vec![spec("sleeper", "sleep", &["1000"], false)]).unwrap();
        let pid = sup.pids()[0];
        // SAFETY: killing the child we just started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        std::thread::sleep(Duration::from_millis(200));
        let out = sup.stop();
        let death = out[0].death.as_deref().unwrap();
        assert!(death.starts_with(&format!("load sleeper (pid {pid}) died at t=")), "{death}");
        assert!(death.ends_with("killed by signal 9 (SIGKILL)"), "{death}");
        assert_eq!(out[0].runs, 1);
    }

    #[test]
    fn a_failing_loop_is_not_restarted_forever_and_its_words_are_kept() {
        let mut sup = Supervisor::start(vec![
            spec("false", "false", &[], true),
            spec("complainer", "sh", &["-c", "echo something broke >&2; exit 3"], false),
        ])
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let out = sup.stop();
        assert_eq!(out[0].runs, 1);
        assert!(out[0].death.as_deref().unwrap().contains("exited with status 1"), "{out:?}");
        assert!(out[1].death.as_deref().unwrap().ends_with("exited with status 3 (something broke)"), "{out:?}");
    }

    #[test]
    fn processes_run_only_on_their_cpus_in_their_own_group() {
        let mut s = spec("sleeper", "sleep", &["1000"], false);
        s.cpus = vec![0];
        let mut sup = Supervisor::start(vec![s]).unwrap();
        let pid = sup.pids()[0];
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let pgid: u32 = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(2).unwrap().parse().unwrap();
        sup.stop();
        assert_eq!(allowed, "0");
        assert_eq!(pgid, pid, "leads its own process group");
    }

    /// A load process that cannot be reaped: a tracer that is not rtcell holds it (the kernel shows a
    /// traced process's end to its tracer first, and this one never looks), as a process stuck in the
    /// kernel would be. The stop ends all the same, within its deadline, and names it.
    #[test]
    fn a_load_process_that_cannot_be_reaped_is_reported_and_abandoned() {
        rtcell_testkit::require!(crate::find_program("sleep").is_some(), "sleep is not installed");
        let mut sup = Supervisor::start(vec![spec("sleeper", "sleep", &["1000"], false)]).unwrap();
        let pid = sup.pids()[0] as libc::pid_t;
        let tracer = rtcell_testkit::Tracer::seize(pid);
        if tracer.is_err() {
            sup.stop();
        }
        rtcell_testkit::require!(tracer.is_ok(), "cannot ptrace a child here: {:?}", tracer.as_ref().err());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(sup.stop());
        });
        let out = rx.recv_timeout(Duration::from_secs(60));
        drop(tracer);
        let out = out.expect("the stop did not end within 60 s");
        let stuck = out[0].stuck.as_deref().expect("reported as stuck");
        assert!(stuck.starts_with(&format!("load sleeper (pid {pid}) did not end within 2 s of SIGKILL")), "{stuck}");
        assert!(stuck.contains("state Z"), "{stuck}");
        // Released by its tracer, it is reaped in the background.
        assert!(rtcell_testkit::gone_within(pid, Duration::from_secs(60)), "pid {pid} never reaped");
    }

    #[test]
    fn a_program_that_cannot_start_is_an_error() {
        let mut s = spec("sleeper", "sleep", &["1000"], false);
        s.program = PathBuf::from("/nonexistent/program");
        let e = Supervisor::start(vec![spec("other", "sleep", &["1000"], false), s]).err().unwrap();
        assert!(e.to_string().contains("cannot start program 1000"), "{e}");
    }
}
