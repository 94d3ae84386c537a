//! End-to-end: the interference loads (`--load memcpy | stress-ng | dohell`) beside a suite. Each load must
//! run on the non-cell CPUs only, be recorded in the results, end with the run (also when rtcell is
//! SIGKILLed), and a load process killed mid-run must be reported while the run completes.
//!
//! stress-ng is installed by scripts/setup: in CI its tests must run; elsewhere they skip, saying why.
//! Load processes are found as descendants of the rtcell process under test (never by name, so other
//! runs on the same machine cannot confuse the tests).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use common::*;

/// A process as /proc shows it.
#[derive(Debug, Clone)]
struct Proc {
    pid: u32,
    comm: String,
    pgid: u32,
    /// Start time in clock ticks since boot: with the pid, names one process even if the pid is reused.
    start: u64,
    cpus_allowed: String,
}

/// (comm, state, pgid, start) of `pid`.
fn stat(pid: u32) -> Option<(String, char, u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = s.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((comm, f.first()?.chars().next()?, f.get(2)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// Every descendant of `root` running now.
fn descendants(root: u32) -> Vec<Proc> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for t in tasks.flatten() {
            let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for c in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                if let Some((comm, _, pgid, start)) = stat(c) {
                    let status = std::fs::read_to_string(format!("/proc/{c}/status")).unwrap_or_default();
                    let cpus_allowed = status
                        .lines()
                        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    out.push(Proc { pid: c, comm, pgid, start, cpus_allowed });
                }
                todo.push(c);
            }
        }
    }
    out
}

/// Whether `p` still runs (a zombie waiting for its new parent to reap it runs nothing).
fn running(p: &Proc) -> bool {
    stat(p.pid).is_some_and(|(_, state, _, start)| start == p.start && !matches!(state, 'Z' | 'X'))
}

/// Processes running now in any of the process groups `pgids`.
fn group_members(pgids: &[u32]) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Some((comm, state, pgid, _)) = stat(pid)
            && pgids.contains(&pgid)
            && !matches!(state, 'Z' | 'X')
        {
            out.push((pid, comm));
        }
    }
    out
}

/// Waits up to `limit` until nothing of `seen` runs and their groups are empty; panics naming what is left.
fn assert_all_gone(seen: &BTreeMap<(u32, u64), Proc>, limit: Duration, what: &str) {
    let pgids: Vec<u32> = seen.values().map(|p| p.pgid).collect();
    let t0 = Instant::now();
    loop {
        let left: Vec<&Proc> = seen.values().filter(|p| running(p)).collect();
        let members = group_members(&pgids);
        if left.is_empty() && members.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "{what}: load processes left after {limit:?}: {left:?}, in their groups: {members:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `rtcell bench membench ... --load LOAD` on one large random working set (so it runs a while),
/// output to files in `dir`.
fn start_membench(load: &str, accesses: &str, dir: &Path) -> Child {
    rtcell()
        .args(["bench", "membench", "--sizes", "32M", "--pattern", "random", "--interferers", "0"])
        .args(["--accesses", accesses, "--load", load, "--out"])
        .arg(dir.join("run"))
        .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        .spawn()
        .unwrap()
}

/// Polls the run's descendants until it ends; returns its output and every load process seen. `act` is
/// called on each poll with what runs now and may act on it (kill something) once.
fn watch(mut child: Child, dir: &Path, mut act: impl FnMut(&[Proc]) -> bool) -> (Output, BTreeMap<(u32, u64), Proc>) {
    let mut seen = BTreeMap::new();
    let mut acted = false;
    let t0 = Instant::now();
    // A child caught between fork and its own setpgid is still in rtcell's group: not a load process yet.
    let rtcell_group = stat(child.id()).map(|s| s.2);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let mut now = descendants(child.id());
        now.retain(|p| Some(p.pgid) != rtcell_group);
        for p in &now {
            seen.insert((p.pid, p.start), p.clone());
        }
        if !acted {
            acted = act(&now);
        }
        if t0.elapsed() > Duration::from_secs(120) {
            // Say where everything was stuck, then leave nothing running for the tests after this one.
            let state = where_stuck(child.id(), &now);
            let _ = child.kill();
            for p in &now {
                // SAFETY: SIGKILL to the process group of a load process of the run this test started.
                unsafe { libc::kill(-(p.pgid as i32), libc::SIGKILL) };
            }
            let _ = child.wait();
            let stderr = String::from_utf8_lossy(&std::fs::read(dir.join("stderr")).unwrap_or_default()).into_owned();
            panic!("the run did not end in 120 s (killed now)\n{state}\nits stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    (Output { status, stdout: read("stdout"), stderr: read("stderr") }, seen)
}

/// Each thread of rtcell (`pid`) and each of its load processes: name, state, kernel wait channel and,
/// when readable (root), kernel stack.
fn where_stuck(pid: u32, loads: &[Proc]) -> String {
    // A thread's /proc/TID is there though /proc does not list it.
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.flatten().filter_map(|t| t.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    tids.extend(loads.iter().map(|p| p.pid));
    let mut out = String::new();
    for tid in tids {
        let read = |f: &str| std::fs::read_to_string(format!("/proc/{tid}/{f}")).unwrap_or_default();
        let (comm, state) = stat(tid).map_or((String::new(), '?'), |(comm, state, _, _)| (comm, state));
        out.push_str(&format!("{tid} ({comm}) state {state} wchan {}\n", read("wchan")));
        for line in read("stack").lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
    out
}

/// Whether stress-ng is here: in CI it must be (scripts/setup installs it).
fn stress_ng_installed() -> bool {
    if rtcell_loads::find_program("stress-ng").is_some() {
        return true;
    }
    rtcell_testkit::skip("stress-ng is not installed here (scripts/setup installs it)");
    false
}

fn loads_to_test() -> Vec<&'static str> {
    let mut loads = vec!["memcpy", "dohell"];
    if stress_ng_installed() {
        loads.push("stress-ng");
    }
    loads
}

fn cell_cpu() -> usize {
    *rtcell_host::cpu::online_cpus().unwrap().last().unwrap()
}

/// The load_runs entry of a results document (exactly one).
fn load_run(doc: &serde_json::Value) -> serde_json::Value {
    let runs = doc["suites"][0]["config"]["load_runs"].as_array().expect("load_runs recorded").clone();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

#[test]
fn each_load_runs_on_the_other_cpus_is_recorded_and_leaves_nothing_behind() {
    let _serial = serial();
    let cell = cell_cpu().to_string();
    for load in loads_to_test() {
        let dir = tempfile::tempdir().unwrap();
        let child = start_membench(load, "4000000", dir.path());
        let (o, seen) = watch(child, dir.path(), |_| true);
        let t = text(&o);
        assert!(o.status.success(), "{load}: {t}");
        let doc = valid_results(&dir.path().join("run"));
        assert_eq!(doc["suites"][0]["config"]["load"], load);
        let r = load_run(&doc);
        assert_eq!(r["kind"], load);
        assert_eq!(r["stayed_alive"], true, "{load}: {r}");
        let cpus: Vec<u64> = r["cpus"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
        assert!(!cpus.is_empty() && !cpus.contains(&(cell_cpu() as u64)), "{load} on {cpus:?}");
        let names: Vec<&str> = r["processes"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        match load {
            "memcpy" => {
                assert!(r["memcpy_bytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
                assert!(seen.is_empty(), "memcpy runs in threads: {seen:?}");
            }
            "dohell" => {
                for n in ["dd", "cat", "ls"] {
                    assert!(names.contains(&n), "dohell runs {n}: {names:?}");
                }
                assert!(r["tcp_bytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
                assert!(seen.values().any(|p| p.comm == "dd"), "{seen:?}");
            }
            _ => {
                let expected: Vec<String> = cpus.iter().map(|c| format!("stress-ng@{c}")).collect();
                assert_eq!(names, expected);
                assert!(seen.values().any(|p| p.comm.starts_with("stress-ng")), "{seen:?}");
            }
        }
        for p in seen.values() {
            assert!(!p.cpus_allowed.is_empty(), "{p:?}");
            let allowed: Vec<&str> = p.cpus_allowed.split([',', '-']).collect();
            assert!(!allowed.contains(&cell.as_str()), "{load}: {p:?} may run on the cell CPU {cell}");
            assert!(seen.values().any(|q| q.pid == p.pgid), "{p:?} is in the group of a load process");
        }
        assert_all_gone(&seen, Duration::from_secs(2), load);
    }
}

#[test]
fn a_sigkilled_rtcell_leaves_no_load_process() {
    let _serial = serial();
    let mut loads = vec![("dohell", "dd")];
    if stress_ng_installed() {
        loads.push(("stress-ng", "stress-ng-vm"));
    }
    for (load, marker) in loads {
        let dir = tempfile::tempdir().unwrap();
        let child = start_membench(load, "1000000000", dir.path());
        let pid = child.id() as i32;
        let mut since: Option<Instant> = None;
        let (o, seen) = watch(child, dir.path(), |now| {
            // Once the load is up (for stress-ng: down to its workers), let it run a little, then kill.
            if now.iter().any(|p| p.comm == marker) {
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() > Duration::from_millis(500) {
                    // SAFETY: SIGKILL to the rtcell process this test started.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return true;
                }
            }
            false
        });
        assert!(since.is_some(), "{load}: {marker} never appeared: {}", text(&o));
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&o.status), Some(libc::SIGKILL));
        assert!(seen.values().any(|p| p.comm == marker));
        assert_all_gone(&seen, Duration::from_secs(2), load);
    }
}

#[test]
fn a_killed_load_process_is_reported_and_the_run_completes() {
    let _serial = serial();
    let mut loads = vec![("dohell", "dd", "dd")];
    if stress_ng_installed() {
        loads.push(("stress-ng", "stress-ng", "stress-ng@"));
    }
    for (load, victim, name) in loads {
        let dir = tempfile::tempdir().unwrap();
        let child = start_membench(load, "30000000", dir.path());
        let mut killed = None;
        let (o, seen) = watch(child, dir.path(), |now| {
            // The load's own process (a direct child of rtcell leads its own group), not a worker.
            match now.iter().find(|p| p.comm == victim && p.pgid == p.pid) {
                Some(p) => {
                    // SAFETY: SIGKILL to a load process of the run this test started.
                    unsafe { libc::kill(p.pid as i32, libc::SIGKILL) };
                    killed = Some(p.pid);
                    true
                }
                None => false,
            }
        });
        let t = text(&o);
        let pid = killed.unwrap_or_else(|| panic!("{load}: no {victim} process appeared: {t}"));
        assert!(o.status.success(), "{load}: the run goes on and completes: {t}");
        let needle = format!(" (pid {pid}) died at t=");
        assert!(t.contains(&needle) && t.contains("killed by signal 9 (SIGKILL)"), "{load}: {t}");
        let doc = valid_results(&dir.path().join("run"));
        assert_eq!(doc["incomplete"], false);
        assert_eq!(series(&doc).len(), 1, "the measurement is complete");
        assert!(
            doc["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains(&needle)),
            "{load}: a warning in the results: {}",
            doc["warnings"]
        );
        let r = load_run(&doc);
        assert_eq!(r["stayed_alive"], false);
        let dead: Vec<&serde_json::Value> =
            r["processes"].as_array().unwrap().iter().filter(|p| p["stayed_alive"] == false).collect();
        assert_eq!(dead.len(), 1, "{r}");
        assert!(dead[0]["name"].as_str().unwrap().starts_with(name), "{r}");
        assert_all_gone(&seen, Duration::from_secs(2), load);
    }
}

#[test]
fn a_missing_tool_is_refused_before_anything_starts() {
    let empty = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (&["bench", "membench", "--load", "stress-ng"][..], "apt-get install stress-ng"),
        (&["bench", "loopback", "--load", "stress-ng"][..], "apt-get install stress-ng"),
        (&["bench", "control", "--load", "dohell"][..], "needs dd"),
    ] {
        let out = empty.path().join("run");
        let o = rtcell().args(args).arg("--out").arg(&out).env("PATH", empty.path()).output().unwrap();
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(needle) && t.contains("scripts/setup"), "{args:?}: {t}");
        assert!(!out.exists(), "nothing started");
    }
}

#[test]
fn every_suite_with_a_load_lists_the_loads_in_its_help() {
    for suite in ["loopback", "control", "membench"] {
        let o = run(&["bench", suite, "--help"]);
        let t = text(&o);
        for load in ["memcpy", "stress-ng", "dohell"] {
            assert!(t.contains(load), "{suite} --help lacks {load}: {t}");
        }
    }
}
