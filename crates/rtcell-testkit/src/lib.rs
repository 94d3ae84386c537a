//! Test support shared by the tests of every rtcell crate (a dev-dependency only; nothing ships it).
//!
//! - [`in_ci`], [`skip`] and [`require!`]: the one rule for a test that cannot run on this machine. With `CI`
//!   set to anything non-empty the missing facility is a failure (CI installs everything the tests need);
//!   elsewhere the test prints why, records the skip, and returns. `scripts/test` reads the record
//!   (`RTCELL_TEST_SKIPS`, a file it names) to show each such test as skipped, never as ok, and to print
//!   the list at the end.
//! - [`cell_cpu`]: the lock every test takes before it uses the cell CPU (CPU 1), held across test
//!   binaries and processes (an advisory `flock` on one file), so two tests never busy-poll it at once.
//!
//! - [`fuzz`]: the harness of every `fuzz_*` target (budget, seed, replay and closing lines).
//!
//! It depends on nothing of rtcell's, so every crate's tests may use it.

pub mod fuzz;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Whether this is CI: `CI` set to anything non-empty (CI services set `true`, `1` or `yes`).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The name `scripts/test` matches a skip by: the test binary's file stem (`loads-0123abcd`) and the test's
/// name as the test harness prints it (the harness names each test's thread after the test).
fn this_test() -> (String, String) {
    let exe = std::env::current_exe().ok();
    let stem =
        exe.as_deref().and_then(|p| p.file_stem()).map_or_else(|| "?".into(), |s| s.to_string_lossy().into_owned());
    let name = std::thread::current().name().unwrap_or("?").to_string();
    (stem, name)
}

/// A test that cannot run here: in CI, a failure naming `reason`; elsewhere the reason is printed and
/// recorded for `scripts/test`'s summary, and the caller returns. Prefer [`require!`].
///
/// # Panics
/// In CI, always: a missing facility there is a failure.
pub fn skip(reason: &str) {
    record("", reason);
}

/// A part of a test that cannot run here (e.g. the kvm mode of a benchmark on a machine without KVM)
/// while the rest runs: in CI a failure; elsewhere printed and recorded, and `scripts/test` shows the test
/// as ok with the part it skipped, and lists it.
///
/// # Panics
/// In CI, always.
pub fn skip_part(reason: &str) {
    record("part: ", reason);
}

fn record(kind: &str, reason: &str) {
    let (binary, test) = this_test();
    assert!(!in_ci(), "{test}: cannot run here and CI must run it: {reason}");
    eprintln!("skipped: {kind}{test}: {reason}");
    let Some(path) = std::env::var_os("RTCELL_TEST_SKIPS") else { return };
    // One line per skip, written with one append so that tests skipping at once never interleave.
    let line = format!("{binary}\t{test}\t{kind}{}\n", reason.replace(['\n', '\t'], " "));
    let written =
        OpenOptions::new().create(true).append(true).open(&path).and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("rtcell-testkit: could not record the skip in {}: {e}", PathBuf::from(path).display());
    }
}

/// `require!(condition, "why it is needed {}", arg)`: runs the rest of the test only where `condition`
/// holds; otherwise [`skip`] (a failure in CI) and `return` from the test.
#[macro_export]
macro_rules! require {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            $crate::skip(&format!($($why)+));
            return;
        }
    };
}

/// The lock file of the cell CPU's tests: one per machine, in the temporary directory.
fn lock_path(cpu: usize) -> PathBuf {
    std::env::temp_dir().join(format!("rtcell-tests-cpu{cpu}.lock"))
}

/// How long a test waits for another to release the cell CPU before it fails. Generous: whole test
/// binaries hold it in turn; a test that waited this long is stuck behind a hung one.
pub const CELL_CPU_WAIT: Duration = Duration::from_secs(30 * 60);

/// Held while a test uses the cell CPU; released when dropped (or by the kernel when the process dies).
#[derive(Debug)]
pub struct CellCpuGuard {
    _file: File,
}

/// Takes the cell CPU (CPU 1) for this test: waits while another test, in this binary or any other
/// process, holds it. Every test that runs a cell, a benchmark or a busy-poller on CPU 1 takes it first.
///
/// # Panics
/// When the lock file cannot be opened, or another holder kept it for [`CELL_CPU_WAIT`].
pub fn cell_cpu() -> CellCpuGuard {
    let path = lock_path(1);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open the cell CPU's test lock {}: {e}", path.display()));
    let start = Instant::now();
    loop {
        // SAFETY: flock on a descriptor we own; LOCK_NB makes it return at once.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return CellCpuGuard { _file: file };
        }
        let err = std::io::Error::last_os_error();
        assert!(
            err.raw_os_error() == Some(libc::EWOULDBLOCK),
            "cannot lock the cell CPU's test lock {}: {err}",
            path.display()
        );
        assert!(
            start.elapsed() < CELL_CPU_WAIT,
            "another test held the cell CPU's lock {} for {} s",
            path.display(),
            CELL_CPU_WAIT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A process (`sleep`, all its standard streams on /dev/null) that holds another with `PTRACE_SEIZE`:
/// the kernel shows the held process's end to this tracer first, and it never looks, so the process's
/// parent cannot reap it, as if it were stuck in the kernel. Killed (and the hold released) when
/// dropped, however the test ends.
pub struct Tracer(std::process::Child);

impl Tracer {
    /// Starts a tracer of `pid` (an error where ptrace is not allowed).
    pub fn seize(pid: i32) -> std::io::Result<Tracer> {
        use std::os::unix::process::CommandExt;
        use std::process::Stdio;
        let mut c = std::process::Command::new("sleep");
        c.arg("1000").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: runs in the forked child before exec: one system call on a copied integer.
        unsafe {
            c.pre_exec(move || {
                if libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c.spawn().map(Tracer)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether process `pid` is gone (reaped) within `bound`.
pub fn gone_within(pid: i32, bound: Duration) -> bool {
    let t0 = Instant::now();
    while std::fs::metadata(format!("/proc/{pid}")).is_ok() {
        if t0.elapsed() > bound {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_holders_never_hold_the_cell_cpu_at_once() {
        let held = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let held = held.clone();
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let _g = cell_cpu();
                        let now = held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        assert_eq!(now, 0, "two holders at once");
                        std::thread::yield_now();
                        held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("holder thread");
        }
    }
}
