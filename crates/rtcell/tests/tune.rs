//! End-to-end: `rtcell check` on this machine, `rtcell tune` against fixture trees and (as root) on
//! this machine, and the check recorded in every results document.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use rtcell_host::HostRoot;

fn write(base: &Path, rel: &str, text: &str) {
    let p = base.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn read(base: &Path, rel: &str) -> String {
    std::fs::read_to_string(base.join(rel)).unwrap()
}

fn root_or_skip(what: &str) -> bool {
    if rtcell_host::is_root() {
        return true;
    }
    rtcell_testkit::skip(&format!("{what} needs root"));
    false
}

/// The cell CPU the tests use: 1, or the last online CPU on a single-CPU machine.
fn cell_cpu() -> usize {
    let online = rtcell_host::cpu::online_cpus().unwrap();
    if online.contains(&1) { 1 } else { *online.last().unwrap() }
}

#[test]
fn check_reports_every_item_with_why_fix_and_score() {
    let cpu = cell_cpu().to_string();
    let o = run(&["check", "--cpu", &cpu, "--json"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["cpu"].as_u64().unwrap().to_string(), cpu);
    let verdicts = doc["verdicts"].as_array().unwrap();
    for item in [
        "isolation",
        "irqs",
        "irqbalance",
        "governor",
        "pm qos",
        "rt throttling",
        "timer migration",
        "thp",
        "workqueue",
        "clocksource",
        "kernel threads",
        "preemption",
        "hypervisor",
        "kvm",
        "resctrl",
        "privileges",
    ] {
        assert!(verdicts.iter().any(|v| v["item"] == item), "no {item} in {verdicts:#?}");
    }
    for v in verdicts {
        assert!(["ok", "warn", "bad"].contains(&v["level"].as_str().unwrap()), "{v}");
        assert!(!v["why"].as_str().unwrap().is_empty(), "{v}");
        assert!((1..=3).contains(&v["weight"].as_u64().unwrap()), "{v}");
        if v["level"] != "ok" {
            assert!(v["fix"].is_string(), "a finding without a fix: {v}");
        }
    }
    assert!(doc["score"].as_u64().unwrap() <= 100);
    assert!(doc["top"].as_array().unwrap().len() <= 3);
    assert!(doc["host"]["cpus"].as_u64().unwrap() >= 1);
    assert_eq!(o.status.code() == Some(1), doc["bad"].as_u64().unwrap() > 0);

    let o = run(&["check", "--cpu", &cpu]);
    let t = text(&o);
    assert!(t.contains("\nsummary: ") && t.contains("; score "), "{t}");
    assert!(t.contains("why: "), "{t}");
}

#[test]
fn check_and_tune_refuse_bad_input_with_status_2() {
    for (args, says) in [
        (&["check", "--cpu", "4095"][..], "--cpu 4095: this machine has no CPU 4095"),
        (&["check", "--root", "/nonexistent/tree"][..], "--root /nonexistent/tree: not a directory"),
        (&["tune", "--cpu", "4095"][..], "--cpu 4095: this machine has no CPU 4095"),
        (&["tune", "--apply"][..], "--apply needs --cpu N"),
        (&["tune", "--revert", "--cpu", "1"][..], "--revert takes no --cpu"),
        (&["tune", "--measure"][..], "--apply"),
        (&["tune", "--apply", "--revert"][..], "cannot be used with"),
        (&["tune", "--revert", "--state", "/nonexistent/state.json"][..], "no state file at /nonexistent/state.json"),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
    }
    // Nothing applied: nothing to revert, and that is fine.
    let o = run(&["tune", "--revert"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("nothing to revert: no state file at "), "{}", text(&o));
}

/// A non-root user: check reads what it can and says what it could not; tune refuses to apply.
#[test]
fn without_root_check_works_and_tune_refuses() {
    if !root_or_skip("switching to an unprivileged user") {
        return;
    }
    let as_nobody = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_rtcell")])
            .args(args)
            .current_dir("/")
            .output()
            .expect("setpriv runs (util-linux)")
    };
    let o = as_nobody(&["check", "--json"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let v = doc["verdicts"].as_array().unwrap();
    let privs = v.iter().find(|v| v["item"] == "privileges").unwrap();
    assert!(privs["detail"].as_str().unwrap().starts_with("not root"), "{privs}");
    let qos = v.iter().find(|v| v["item"] == "pm qos").unwrap();
    if std::path::Path::new("/dev/cpu_dma_latency").exists() {
        assert_eq!(qos["unknown"], true, "{qos}");
        assert!(qos["detail"].as_str().unwrap().contains("readable by root only"), "{qos}");
    }
    let o = as_nobody(&["tune", "--cpu", &cell_cpu().to_string(), "--apply", "--state", "/nonexistent/s.json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("needs root (running as uid 65534)"), "{}", text(&o));
}

/// A two-CPU machine with IRQs on CPU 1, RT throttling on and timer migration on.
fn fixture(base: &Path) {
    write(base, "sys/devices/system/cpu/online", "0-1\n");
    write(base, "sys/devices/system/cpu/isolated", "\n");
    write(base, "proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet -- init-arg\n");
    write(base, "proc/irq/5/smp_affinity_list", "0-1\n");
    write(base, "proc/irq/6/smp_affinity_list", "0\n");
    write(base, "proc/irq/7/smp_affinity", "2\n");
    write(base, "proc/irq/default_smp_affinity", "3\n");
    write(base, "proc/sys/kernel/sched_rt_runtime_us", "950000\n");
    write(base, "proc/sys/kernel/sched_rt_period_us", "1000000\n");
    write(base, "proc/sys/kernel/timer_migration", "1\n");
    write(base, "sys/devices/virtual/workqueue/cpumask", "3\n");
    write(base, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "schedutil\n");
}

#[test]
fn tune_apply_and_revert_a_fixture_tree() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    fixture(&tree);
    let state = dir.path().join("state.json");
    let (t, s) = (tree.to_str().unwrap(), state.to_str().unwrap());
    let before: Vec<(&str, String)> = [
        "proc/irq/5/smp_affinity_list",
        "proc/irq/6/smp_affinity_list",
        "proc/irq/7/smp_affinity",
        "proc/irq/default_smp_affinity",
        "proc/sys/kernel/sched_rt_runtime_us",
        "proc/sys/kernel/timer_migration",
        "sys/devices/virtual/workqueue/cpumask",
        "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
    ]
    .into_iter()
    .map(|p| (p, read(&tree, p)))
    .collect();

    // Dry run: the changes as before -> after, the boot line, nothing written.
    let o = run(&["tune", "--cpu", "1", "--root", t, "--state", s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("dry run: nothing is changed"), "{out}");
    assert!(out.contains("/proc/irq/5/smp_affinity_list") && out.contains("0-1 -> 0"), "{out}");
    assert!(out.contains("950000 -> -1") && out.contains("schedutil -> performance"), "{out}");
    assert!(!out.contains("/proc/irq/6/"), "{out}");
    assert!(out.contains("add: isolcpus=domain,managed_irq,1 nohz_full=1 rcu_nocbs=1 irqaffinity=0"), "{out}");
    assert!(out.contains("quiet isolcpus=domain,managed_irq,1 "), "{out}");
    assert!(out.contains(" -- init-arg"), "{out}");
    assert!(out.contains("/dev/cpu_dma_latency: not changed"), "{out}");
    assert!(!state.exists());
    assert!(before.iter().all(|(p, v)| read(&tree, p) == *v));

    let o = run(&["tune", "--cpu", "1", "--root", t, "--state", s, "--apply"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(&format!("undo with: rtcell tune --revert --root {t} --state {s}")), "{}", text(&o));
    assert_eq!(read(&tree, "proc/irq/5/smp_affinity_list"), "0\n");
    assert_eq!(read(&tree, "proc/irq/7/smp_affinity"), "1\n");
    assert_eq!(read(&tree, "proc/sys/kernel/sched_rt_runtime_us"), "-1\n");
    assert_eq!(read(&tree, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"), "performance\n");
    assert!(state.exists());
    // A second apply would record tuned values as the originals: refused.
    let o = run(&["tune", "--cpu", "1", "--root", t, "--state", s, "--apply"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("still in effect"), "{}", text(&o));

    let o = run(&["tune", "--revert", "--root", t, "--state", s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("every value reads as before; state file removed"), "{}", text(&o));
    for (p, v) in &before {
        assert_eq!(read(&tree, p), *v, "{p}");
    }
    assert!(!state.exists());
}

/// Every file `rtcell tune` may touch on this machine, with its contents.
fn snapshot_knobs(cpu: usize) -> BTreeMap<PathBuf, String> {
    let root = HostRoot::system();
    let mut paths: Vec<String> =
        rtcell_host::tune::plan(&root, cpu).unwrap().changes.into_iter().map(|c| c.path).collect();
    for p in [
        "/proc/irq/default_smp_affinity",
        "/proc/sys/kernel/sched_rt_runtime_us",
        "/proc/sys/kernel/timer_migration",
        "/sys/devices/virtual/workqueue/cpumask",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ] {
        paths.push(p.into());
    }
    paths.push(format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"));
    for n in rtcell_host::check::irq::irq_numbers(&root).unwrap_or_default() {
        paths.push(format!("/proc/irq/{n}/smp_affinity_list"));
    }
    paths.into_iter().filter_map(|p| std::fs::read_to_string(&p).ok().map(|v| (PathBuf::from(p), v))).collect()
}

/// Puts back every snapshotted value that differs, even when the test fails half-way.
struct Restore(BTreeMap<PathBuf, String>);

impl Drop for Restore {
    fn drop(&mut self) {
        for (path, was) in &self.0 {
            if std::fs::read_to_string(path).is_ok_and(|now| now == *was) {
                continue;
            }
            // A choice file reads "always [madvise] never": write the selected word back.
            let value = match was.split_whitespace().find_map(|w| w.strip_prefix('[')?.strip_suffix(']')) {
                Some(sel) => sel.to_string(),
                None => was.trim().to_string(),
            };
            if let Err(e) = std::fs::write(path, format!("{value}\n")) {
                eprintln!("could not restore {} to {value:?}: {e}", path.display());
            }
        }
    }
}

/// The real thing, as root: apply on this machine, then revert; every value reads as before, byte for
/// byte. Kept short: it moves IRQs and switches RT throttling off for the whole machine.
#[test]
fn tune_apply_and_revert_on_this_machine_restores_every_byte() {
    if !root_or_skip("changing this machine's kernel settings") {
        return;
    }
    let _serial = serial();
    let cpu = cell_cpu();
    let snapshot = snapshot_knobs(cpu);
    let guard = Restore(snapshot.clone());
    let plan = rtcell_host::tune::plan(&HostRoot::system(), cpu).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let s = state.to_str().unwrap();
    let o = run(&["tune", "--cpu", &cpu.to_string(), "--apply", "--state", s]);
    let applied = text(&o);
    // Read back what was changed before anything else can run.
    let now = snapshot_knobs(cpu);
    let o2 = run(&["tune", "--revert", "--state", s]);
    assert_eq!(o.status.code(), Some(0), "{applied}");
    for c in &plan.changes {
        if applied.contains(&format!("REFUSED  {}", c.label)) {
            continue; // e.g. a managed IRQ
        }
        let value = now.get(Path::new(&c.path)).map(|v| v.trim().to_string());
        let selected = value.as_deref().map(|v| {
            v.split_whitespace().find_map(|w| w.strip_prefix('[')?.strip_suffix(']')).unwrap_or(v).to_string()
        });
        assert_eq!(selected.as_deref(), Some(c.after.as_str()), "{} after apply\n{applied}", c.path);
    }
    assert_eq!(o2.status.code(), Some(0), "{}", text(&o2));
    assert!(!state.exists());
    let after = snapshot_knobs(cpu);
    assert_eq!(after, snapshot, "values differ after the revert");
    drop(guard);
}

/// Every results document says how the host was set up: the check of the run's cell CPU.
#[test]
fn bench_records_the_check_in_the_host_section() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = run(&["bench", "c2c", "--samples", "1000", "--quick", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let doc = valid_results(&out);
    let check = &doc["host"]["check"];
    let online = rtcell_host::cpu::online_cpus().unwrap();
    assert_eq!(check["cpu"].as_u64(), online.last().map(|&c| c as u64), "c2c's second CPU");
    let verdicts = check["verdicts"].as_array().unwrap();
    assert!(verdicts.iter().any(|v| v["item"] == "rt throttling"));
    assert!(check["score"].as_u64().unwrap() <= 100);
    // The steal it reports is the run's own.
    if doc["host"]["hypervisor"].is_string() {
        let hv = verdicts.iter().find(|v| v["item"] == "hypervisor").unwrap();
        assert!(!hv["detail"].as_str().unwrap().contains("not measured"), "{hv}");
    }
}

#[test]
fn help_has_examples() {
    for args in [&["check", "--help"][..], &["tune", "--help"]] {
        let o = run(args);
        assert!(o.status.success());
        assert!(text(&o).contains("Examples:"), "{args:?}");
    }
}
