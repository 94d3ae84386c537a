//! A hostile peer scribbling the region mid-run: a process cell whose task overwrites the table of the
//! COM channel the Linux-side master reads, and the statistics block of another task. The master names
//! the channel and resyncs or trips (with its safe value) as the scenario says; the other task's
//! statistics survive; the run exits 1 naming what was scribbled and still writes its results.

mod common;

use std::path::Path;

use common::{outcome_task, rtcell, serial, text, valid_results};

/// The scenario: `master` (Linux side, `on_corrupt`) reads `ctrl.out`, which the process cell `evil`
/// scribbles from its cycle 300 for 300 cycles (then puts it back); `evil` also scribbles the counter
/// block of the Linux-side task `other` from its cycle 1000 to the end.
fn scenario(dir: &Path, on_corrupt: &str) -> std::path::PathBuf {
    let p = dir.join(format!("corrupt-{on_corrupt}.toml"));
    std::fs::write(
        &p,
        format!(
            r#"duration_s = 2
[cells.evil]
kind = "process"
cpu = 1
[signals.u]
values = 1
[com."ctrl.in"]
groups = [{{ id = 1, name = "ctrl_in" }}]
signals = [
  {{ id = 1, name = "seq", type = "uint32", group = 1 }},
  {{ id = 2, name = "reset", type = "uint8", group = 1 }},
  {{ id = 3, name = "r", type = "float64", group = 1 }},
  {{ id = 4, name = "y", type = "float64", group = 1 }},
]
[com."ctrl.out"]
groups = [{{ id = 2, name = "ctrl_out" }}]
signals = [
  {{ id = 10, name = "seq", type = "uint32", group = 2 }},
  {{ id = 11, name = "u", type = "float64", group = 2 }},
]
[tasks.evil]
cell = "evil"
period_us = 1000
priority = 80
workload = {{ kind = "scribble", channel = "ctrl.out", at_cycle = 300, cycles = 300 }}
[tasks.evil2]
cell = "evil"
period_us = 1000
priority = 79
workload = {{ kind = "scribble", channel = "task.other", at_cycle = 1000, cycles = 100000 }}
[tasks.master]
cell = "linux"
period_us = 1000
deadline_us = 100
priority = 80
on_corrupt = "{on_corrupt}"
output = "u"
safe_value = [-1.5]
watchdog = {{ time_us = 1000, sensitivity = 100 }}
workload = {{ kind = "com_master", input = "ctrl.in", output = "ctrl.out" }}
[tasks.other]
cell = "linux"
period_us = 1000
priority = 70
workload = {{ kind = "spin", us = 5 }}
"#
        ),
    )
    .unwrap();
    p
}

/// Runs the scenario; returns (exit code, output, results document).
fn run(on_corrupt: &str) -> (Option<i32>, String, serde_json::Value) {
    let _cpu = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o =
        rtcell().arg("run").arg(scenario(dir.path(), on_corrupt)).arg("--out").arg(&out).output().expect("rtcell runs");
    let t = text(&o);
    (o.status.code(), t.clone(), valid_results(&out))
}

/// What both choices share: exit 1 naming the channel and the scribbled block, and the other task's
/// statistics intact.
fn common_checks(code: Option<i32>, t: &str, doc: &serde_json::Value) {
    assert_eq!(code, Some(1), "a run whose region was scribbled fails:\n{t}");
    assert!(t.contains("corrupt channel \"ctrl.out\""), "the message names the channel:\n{t}");
    assert!(!t.contains("unknown signal group id\")"), "not the old misleading message:\n{t}");
    assert!(t.contains("statistics block \"task.other\" was scribbled"), "the scribbled block is named:\n{t}");
    let other = outcome_task(doc, "other");
    assert_eq!(other["state"], "done", "{other}\n{t}");
    assert!(
        other["cycles"].as_u64().unwrap() >= other["expected"].as_u64().unwrap() / 2,
        "the other task's own counters are reported, not the scribbled block: {other}\n{t}"
    );
}

#[test]
fn a_scribbled_channel_is_named_and_the_task_resyncs_when_it_is_valid_again() {
    let (code, t, doc) = run("resync");
    common_checks(code, &t, &doc);
    let m = outcome_task(&doc, "master");
    assert_eq!(m["state"], "done", "the master ran to the end: {m}\n{t}");
    let (cycles, corrupt) = (m["cycles"].as_u64().unwrap(), m["corrupt_steps"].as_u64().unwrap());
    assert!(corrupt > 0, "the corrupt steps are counted: {m}\n{t}");
    // The scribbler's window is 300 of its cycles (same period): the master resynced after it.
    assert!(corrupt <= 400 && cycles >= corrupt + 1000, "it went on once the table was valid again: {m}\n{t}");
    assert!(m["message"].as_str().unwrap().contains("corrupt channel \"ctrl.out\""), "{m}");
}

#[test]
fn a_scribbled_channel_trips_the_task_with_its_safe_value_when_the_scenario_says_so() {
    let (code, t, doc) = run("trip");
    common_checks(code, &t, &doc);
    let m = outcome_task(&doc, "master");
    assert_eq!(m["state"], "tripped", "{m}\n{t}");
    assert_eq!(m["corrupt_steps"], 1, "{m}");
    assert!(m["message"].as_str().unwrap().contains("corrupt channel \"ctrl.out\""), "{m}");
    let signals = &doc["suites"][0]["config"]["outcome"]["signals"];
    assert_eq!(signals["u"][0].as_f64(), Some(-1.5), "the safe value was applied: {signals}\n{t}");
}

/// Rings, signals, a COM channel nobody reads and a statistics block, scribbled by Linux-side tasks
/// (priorities order each cycle: the writers, then the scribblers, then the readers). Ring `r` and
/// signal `sp` are scribbled for 300 cycles from cycle 300, then put back; `x` (COM) and `s` (signal)
/// nobody reads are scribbled from cycle 10 to the end; the statistics block of `other` for 300
/// cycles from 300.
const CHANNELS: &str = r#"duration_s = 2
[channels.r]
capacity = 64
frame_bytes = 64
[signals.sp]
values = 18
[signals.tq]
values = 6
[signals.tq2]
values = 6
[signals.s]
values = 4
[com.x]
signals = [{ id = 1, name = "a", type = "uint8" }]
[tasks.traj]
cell = "linux"
period_us = 1000
priority = 62
output = "sp"
workload = { kind = "trajectory", from_deg = 0, to_deg = 90, move_s = 1 }
[tasks.tx]
cell = "linux"
period_us = 1000
priority = 61
send = "r"
workload = { kind = "spin", us = 1 }
[tasks.evil_sp]
cell = "linux"
period_us = 1000
priority = 60
workload = { kind = "scribble", channel = "sp", at_cycle = 300, cycles = 300 }
[tasks.evil_r]
cell = "linux"
period_us = 1000
priority = 59
workload = { kind = "scribble", channel = "r", at_cycle = 300, cycles = 300 }
[tasks.evil_x]
cell = "linux"
period_us = 1000
priority = 58
workload = { kind = "scribble", channel = "x", at_cycle = 10, cycles = 100000 }
[tasks.evil_s]
cell = "linux"
period_us = 1000
priority = 58
workload = { kind = "scribble", channel = "s", at_cycle = 10, cycles = 100000 }
[tasks.evil_stats]
cell = "linux"
period_us = 1000
priority = 57
workload = { kind = "scribble", channel = "task.other", at_cycle = 300, cycles = 300 }
[tasks.dyn]
cell = "linux"
period_us = 1000
priority = 55
output = "tq"
on_corrupt = "resync"
workload = { kind = "inverse_dynamics", setpoint = "sp" }
[tasks.dyn2]
cell = "linux"
period_us = 1000
priority = 54
output = "tq2"
on_corrupt = "trip"
safe_value = [0, 0, 0, 0, 0, -1.5]
watchdog = { time_us = 1000, sensitivity = 100 }
workload = { kind = "inverse_dynamics", setpoint = "sp" }
[tasks.rx]
cell = "linux"
period_us = 1000
priority = 53
recv = "r"
on_corrupt = "trip"
workload = { kind = "spin", us = 1 }
[tasks.other]
cell = "linux"
period_us = 1000
priority = 52
workload = { kind = "spin", us = 1 }
"#;

#[test]
fn scribbled_rings_signals_unread_channels_and_statistics_are_named_resynced_or_tripped() {
    let _cpu = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("channels.toml");
    std::fs::write(&file, CHANNELS).unwrap();
    let out = dir.path().join("run");
    let o = rtcell().arg("run").arg(&file).arg("--out").arg(&out).output().expect("rtcell runs");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    let doc = valid_results(&out);
    assert!(!t.contains("Corrupt(\""), "our words, not a Rust debug form:\n{t}");
    // The ring: the sender resyncs once it is valid again; the receiver trips as it says.
    let tx = outcome_task(&doc, "tx");
    let (cycles, corrupt) = (tx["cycles"].as_u64().unwrap(), tx["corrupt_steps"].as_u64().unwrap());
    assert_eq!(tx["state"], "done", "{tx}\n{t}");
    assert!(corrupt > 0 && corrupt <= 400 && cycles >= corrupt + 1000, "the sender resynced: {tx}\n{t}");
    assert!(tx["message"].as_str().unwrap().contains("corrupt channel \"r\""), "{tx}");
    let rx = outcome_task(&doc, "rx");
    assert_eq!(rx["state"], "tripped", "{rx}\n{t}");
    assert_eq!(rx["corrupt_steps"], 1, "{rx}");
    assert!(rx["message"].as_str().unwrap().contains("corrupt channel \"r\""), "{rx}");
    // The signal: one reader resyncs, the other trips with its safe value.
    let dyn1 = outcome_task(&doc, "dyn");
    let (cycles, corrupt) = (dyn1["cycles"].as_u64().unwrap(), dyn1["corrupt_steps"].as_u64().unwrap());
    assert_eq!(dyn1["state"], "done", "{dyn1}\n{t}");
    assert!(corrupt > 0 && corrupt <= 400 && cycles >= corrupt + 1000, "the reader resynced: {dyn1}\n{t}");
    assert!(dyn1["message"].as_str().unwrap().contains("corrupt channel \"sp\": read: "), "{dyn1}");
    let dyn2 = outcome_task(&doc, "dyn2");
    assert_eq!(dyn2["state"], "tripped", "{dyn2}\n{t}");
    assert_eq!(dyn2["corrupt_steps"], 1, "{dyn2}");
    let signals = &doc["suites"][0]["config"]["outcome"]["signals"];
    assert_eq!(signals["tq2"][5].as_f64(), Some(-1.5), "the safe value was applied: {signals}\n{t}");
    // Its writer finds the slot changed between two of its writes, and goes on.
    let traj = outcome_task(&doc, "traj");
    assert_eq!(traj["state"], "done", "{traj}\n{t}");
    assert!(traj["corrupt_steps"].as_u64().unwrap() > 0, "the writer noticed: {traj}\n{t}");
    assert!(traj["message"].as_str().unwrap().contains("corrupt channel \"sp\": write: "), "{traj}");
    // What nobody reads, and the statistics block, found by the supervisor and named.
    for name in ["r", "sp", "x", "s"] {
        assert!(t.contains(&format!("corrupt channel {name:?} (")), "channel {name} is named:\n{t}");
    }
    assert!(t.contains("statistics block \"task.other\" was scribbled"), "{t}");
    assert!(!t.contains("error: task \"other\""), "the scribbled block's garbage is not shown as the task's:\n{t}");
    let other = outcome_task(&doc, "other");
    assert_eq!(other["state"], "done", "{other}\n{t}");
}
