//! Plan, apply and revert against writable fixture trees.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::fixture::{read, tuned, untuned, write};

/// Every regular file of a tree, by path, with its bytes.
fn snapshot(base: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                walk(&p, base, out);
            } else if meta.is_file() {
                out.insert(p.strip_prefix(base).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(base, base, &mut out);
    out
}

fn never() -> bool {
    false
}

#[test]
fn plan_for_an_untuned_machine() {
    let dir = tempfile::tempdir().unwrap();
    untuned(dir.path());
    let p = plan(&HostRoot::at(dir.path()), 1).unwrap();
    assert_eq!(p.housekeeping, [0]);
    let shown: Vec<(String, String, String)> =
        p.changes.iter().map(|c| (c.label.clone(), c.path.clone(), c.arrow())).collect();
    let want = [
        ("IRQ 36 (virtio1-req.0) affinity", "/proc/irq/36/smp_affinity_list", "0-1 -> 0"),
        ("IRQ 41 (virtio3-rx) affinity", "/proc/irq/41/smp_affinity_list", "0-1 -> 0"),
        ("default IRQ affinity (IRQs registered later)", "/proc/irq/default_smp_affinity", "3 -> 1"),
        ("unbound workqueue cpumask", "/sys/devices/virtual/workqueue/cpumask", "3 -> 1"),
        (
            "CPU 1 frequency governor",
            "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
            "powersave -> performance",
        ),
        ("RT throttling (sched_rt_runtime_us)", "/proc/sys/kernel/sched_rt_runtime_us", "950000 -> -1"),
        ("timer migration", "/proc/sys/kernel/timer_migration", "1 -> 0"),
        ("transparent huge pages", "/sys/kernel/mm/transparent_hugepage/enabled", "always -> never"),
    ];
    let want: Vec<(String, String, String)> =
        want.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())).collect();
    assert_eq!(shown, want);
    assert_eq!(p.changes[7].restore, "always");
    assert!(!p.unchanged.iter().any(|u| u.contains("fair deadline server")));
    // From 6.12 on, the fair server still preempts a polling cell: the plan says so.
    write(dir.path(), "proc/sys/kernel/osrelease", "6.12.9-amd64\n");
    let p6_12 = plan(&HostRoot::at(dir.path()), 1).unwrap();
    assert!(p6_12.unchanged.iter().any(|u| u.starts_with("note on RT throttling") && u.contains("fair_server/cpu1")));
    assert!(p.unchanged.iter().any(|u| u.starts_with("/dev/cpu_dma_latency: not changed")));
    assert!(p.boot.add.contains(&"isolcpus=domain,managed_irq,1".to_string()));
}

#[test]
fn a_tuned_machine_needs_no_change_and_bad_cpus_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    tuned(dir.path());
    let root = HostRoot::at(dir.path());
    let p = plan(&root, 1).unwrap();
    assert!(p.changes.is_empty(), "{:#?}", p.changes);
    assert!(
        p.unchanged.iter().any(|u| u == "RT throttling (sched_rt_runtime_us): already off (-1)"),
        "{:#?}",
        p.unchanged
    );
    let e = plan(&root, 5).unwrap_err().to_string();
    assert_eq!(e, "CPU 5 is not online (online CPUs: 0-1): give --cpu one of them");
    let empty = tempfile::tempdir().unwrap();
    let e = plan(&HostRoot::at(empty.path()), 1).unwrap_err().to_string();
    assert!(e.starts_with("could not read /sys/devices/system/cpu/online"), "{e}");
}

#[test]
fn apply_then_revert_restores_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("root");
    untuned(&tree);
    // Wider than 32 CPUs: the masks have comma-separated groups.
    write(&tree, "proc/irq/default_smp_affinity", "00000000,00000003\n");
    // A fixture cannot print a choice file as the kernel does ("always madvise [never]"), so THP is
    // left out here; its plan is checked above.
    write(&tree, "sys/kernel/mm/transparent_hugepage/enabled", "[madvise] never\n");
    let state = dir.path().join("state/tune-state.json");
    let root = HostRoot::at(&tree);
    let before = snapshot(&tree);
    let p = plan(&root, 1).unwrap();
    let mut seen = Vec::new();
    let applied = apply(&root, &p, &state, &never, &mut |c, _| seen.push(c.path.clone())).unwrap();
    assert!(!applied.stopped);
    assert_eq!(applied.refused(), 0);
    assert_eq!(seen.len(), p.changes.len());
    assert_eq!(read(&tree, "proc/irq/36/smp_affinity_list"), "0\n");
    assert_eq!(read(&tree, "proc/irq/default_smp_affinity"), "1\n");
    assert_eq!(read(&tree, "proc/sys/kernel/sched_rt_runtime_us"), "-1\n");
    assert_eq!(read(&tree, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"), "performance\n");
    // The state file names every change, before it was made.
    let s = State::load(&state).unwrap();
    assert_eq!(s.entries.len(), p.changes.len());
    assert_eq!(s.header.root, tree);
    // A second apply would lose the originals: refused, nothing touched.
    let again = apply(&root, &p, &state, &never, &mut |_, _| {}).unwrap_err();
    assert!(matches!(again, TuneError::StateExists { .. }), "{again}");

    let r = revert(&root, &state).unwrap();
    for (e, res) in &r.done {
        assert!(matches!(res, Restored::Restored), "{}: {res:?}", e.path);
    }
    assert!(r.removed && !state.exists());
    assert_eq!(snapshot(&tree), before);
    assert!(matches!(revert(&root, &state), Err(TuneError::NoState { .. })));
}

#[test]
fn an_interrupted_apply_is_reverted_from_its_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("root");
    untuned(&tree);
    write(&tree, "sys/kernel/mm/transparent_hugepage/enabled", "[madvise] never\n");
    let state = dir.path().join("tune-state.json");
    let root = HostRoot::at(&tree);
    let before = snapshot(&tree);
    let p = plan(&root, 1).unwrap();
    let made = std::cell::Cell::new(0);
    let stop = || made.get() >= 3;
    let applied = apply(&root, &p, &state, &stop, &mut |_, _| made.set(made.get() + 1)).unwrap();
    assert!(applied.stopped);
    assert_eq!(applied.done.len(), 3);
    assert_ne!(snapshot(&tree), before);
    // A crash while the fourth record was written leaves half a line: ignored, its change never made.
    let mut text = std::fs::read_to_string(&state).unwrap();
    text.push_str("{\"label\":\"timer migr");
    std::fs::write(&state, text).unwrap();
    let r = revert(&root, &state).unwrap();
    assert!(r.torn_tail);
    assert_eq!(r.done.len(), 3);
    assert!(r.all_ok() && r.removed);
    assert_eq!(snapshot(&tree), before);
}

#[test]
fn a_refused_write_is_reported_and_the_rest_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("root");
    untuned(&tree);
    write(&tree, "sys/kernel/mm/transparent_hugepage/enabled", "[madvise] never\n");
    let state = dir.path().join("tune-state.json");
    let root = HostRoot::at(&tree);
    let before = snapshot(&tree);
    let p = plan(&root, 1).unwrap();
    // IRQ 41's file turns into something that cannot be written (a managed IRQ refuses with EIO).
    let irq41 = tree.join("proc/irq/41/smp_affinity_list");
    std::fs::remove_file(&irq41).unwrap();
    std::fs::create_dir(&irq41).unwrap();
    let applied = apply(&root, &p, &state, &never, &mut |_, _| {}).unwrap();
    assert_eq!(applied.refused(), 1);
    assert_eq!(applied.done.len(), p.changes.len());
    let (c, o) = &applied.done[1];
    assert_eq!(c.path, "/proc/irq/41/smp_affinity_list");
    assert!(matches!(o, Outcome::Refused(e) if e.to_string().starts_with("could not write \"0\" to /proc/irq/41/")));
    assert_eq!(read(&tree, "proc/sys/kernel/timer_migration"), "0\n", "later changes were still made");
    // The value the kernel refused to change still reads as before: the revert leaves it alone.
    std::fs::remove_dir(&irq41).unwrap();
    write(&tree, "proc/irq/41/smp_affinity_list", "0-1\n");
    let r = revert(&root, &state).unwrap();
    assert!(r.all_ok(), "{r:?}");
    assert!(
        r.done
            .iter()
            .any(|(e, res)| e.path.ends_with("41/smp_affinity_list") && matches!(res, Restored::AlreadyAsBefore))
    );
    assert_eq!(snapshot(&tree), before);
}

#[test]
fn revert_keeps_the_state_file_when_something_is_not_restored_and_checks_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("root");
    untuned(&tree);
    write(&tree, "sys/kernel/mm/transparent_hugepage/enabled", "[madvise] never\n");
    let state = dir.path().join("tune-state.json");
    let root = HostRoot::at(&tree);
    let p = plan(&root, 1).unwrap();
    apply(&root, &p, &state, &never, &mut |_, _| {}).unwrap();
    let other = HostRoot::at(dir.path());
    let e = revert(&other, &state).unwrap_err().to_string();
    assert!(e.contains("revert with the same root"), "{e}");
    // A knob that disappeared in the meantime cannot be restored: reported, state file kept.
    std::fs::remove_file(tree.join("proc/sys/kernel/timer_migration")).unwrap();
    let r = revert(&root, &state).unwrap();
    assert!(!r.all_ok() && !r.removed && state.exists());
    let failed: Vec<&str> = r.done.iter().filter(|(_, res)| !res.is_ok()).map(|(e, _)| e.path.as_str()).collect();
    assert_eq!(failed, ["/proc/sys/kernel/timer_migration"]);
    // Once it is back, a second revert finishes the job.
    write(&tree, "proc/sys/kernel/timer_migration", "0\n");
    let r = revert(&root, &state).unwrap();
    assert!(r.all_ok() && r.removed);
    assert_eq!(read(&tree, "proc/sys/kernel/timer_migration"), "1\n");
}

#[test]
fn values_changed_since_the_plan_are_recorded_as_found() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("root");
    untuned(&tree);
    let state = dir.path().join("tune-state.json");
    let root = HostRoot::at(&tree);
    let p = plan(&root, 1).unwrap();
    write(&tree, "proc/sys/kernel/sched_rt_runtime_us", "900000\n");
    apply(&root, &p, &state, &never, &mut |_, _| {}).unwrap();
    let s = State::load(&state).unwrap();
    let e = s.entries.iter().find(|e| e.path.ends_with("sched_rt_runtime_us")).unwrap();
    assert_eq!((e.before.as_str(), e.restore.as_str()), ("900000\n", "900000"));
    revert(&root, &state).unwrap();
    assert_eq!(read(&tree, "proc/sys/kernel/sched_rt_runtime_us"), "900000\n");
}
