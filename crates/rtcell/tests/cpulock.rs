//! One owner per cell CPU across processes: a second run asking for a held CPU is refused (exit 2,
//! naming the holder), `rtcell check` lists the holder, and a SIGKILLed holder leaves the CPU free.
//! The lock files live in a runtime directory of this test's own (RTCELL_RUNTIME_DIR).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{repo, rtcell, serial, text};

fn with_dir(mut c: Command, dir: &Path) -> Command {
    c.env("RTCELL_RUNTIME_DIR", dir);
    c
}

/// A scenario run on CPU 1 that goes on until it is killed (60 s).
fn holder(dir: &Path, out: &Path) -> Child {
    with_dir(rtcell(), dir)
        .arg("run")
        .arg(repo().join("examples/plc.toml"))
        .args(["--duration", "60s", "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtcell run starts")
}

/// Waits until `child` holds CPU 1 (its pid is in the lock file).
fn wait_held(dir: &Path, child: &mut Child) {
    let t0 = Instant::now();
    let want = format!("\"pid\":{}", child.id());
    loop {
        if std::fs::read_to_string(dir.join("cpu1.lock")).is_ok_and(|s| s.contains(&want)) {
            return;
        }
        if let Ok(Some(st)) = child.try_wait() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
            panic!("the first run ended ({st}) before it held CPU 1:\n{err}");
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the first run did not take CPU 1 within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check(dir: &Path) -> String {
    let o = with_dir(rtcell(), dir).args(["check", "--cpu", "1"]).output().expect("rtcell check runs");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn second_run(dir: &Path, out: &Path) -> std::process::Output {
    with_dir(rtcell(), dir)
        .arg("run")
        .arg(repo().join("examples/plc.toml"))
        .args(["--duration", "1s", "--out"])
        .arg(out)
        .output()
        .expect("rtcell run starts")
}

#[test]
fn a_second_run_on_a_held_cpu_is_refused_naming_the_holder_until_the_holder_dies() {
    let _cpu = serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("runtime");
    let mut first = holder(&dir, &tmp.path().join("first"));
    wait_held(&dir, &mut first);
    let pid = first.id();

    let listed = check(&dir);
    assert!(listed.contains(&format!("CPU 1: pid {pid} (")), "rtcell check does not list the holder:\n{listed}");

    let o = second_run(&dir, &tmp.path().join("second"));
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "a second run on CPU 1 must be refused with exit 2:\n{t}");
    assert!(t.contains(&format!("CPU 1 is in use by another rtcell run: pid {pid} (")), "{t}");
    assert!(t.contains("nothing was started"), "{t}");
    assert!(!tmp.path().join("second").join("results.json").exists(), "the refused run wrote results");

    // SAFETY: killing the child this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = first.wait();
    let listed = check(&dir);
    assert!(listed.contains("Cell CPUs held by rtcell runs: none"), "still listed after SIGKILL:\n{listed}");
    let o = second_run(&dir, &tmp.path().join("third"));
    let t = text(&o);
    assert_ne!(o.status.code(), Some(2), "CPU 1 still refused after its holder was SIGKILLed:\n{t}");
    assert!(!t.contains("is in use by another rtcell run"), "{t}");
}
