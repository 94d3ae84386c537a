//! What validation refuses so that a run cannot be fooled: two senders on one ring when one of them is
//! a kvm payload naming the ring in its args, and an `on_corrupt` policy on a task that uses no channel
//! it could find corrupted. Both with file:line.

use rtcell_scenario::{HostView, validate_text};

fn host() -> HostView {
    HostView { online: vec![0, 1], kvm_unusable: None, payloads: vec!["echo".into()] }
}

fn refusal(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    match validate_text(text, &path, &host()) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_ring_a_payload_sends_on_cannot_have_a_second_sender() {
    let text = r#"duration_s = 1
[cells.k]
kind = "kvm"
cpu = 1
payload = "echo"
args = "rx=m2c\ntx=c2m"
writes = ["c2m", "m2c"]
[channels.m2c]
capacity = 64
frame_bytes = 64
[channels.c2m]
capacity = 64
frame_bytes = 64
[tasks.tx]
cell = "linux"
period_us = 100
priority = 50
send = "m2c"
workload = { kind = "spin", us = 1 }
[tasks.tx2]
cell = "linux"
period_us = 100
priority = 50
send = "c2m"
workload = { kind = "spin", us = 1 }
[tasks.rx]
cell = "linux"
period_us = 100
priority = 50
recv = "c2m"
workload = { kind = "spin", us = 1 }
"#;
    let e = refusal(text);
    assert!(e.contains("s.toml:24:"), "file:line of the second sender's send: {e}");
    assert!(e.contains("cell \"k\" (its payload's tx=) and task \"tx2\" send on channel \"c2m\""), "{e}");
    // One sender and one receiver each, the payload's included: accepted.
    let ok = text.replace("send = \"c2m\"\n", "");
    let dir = tempfile::tempdir().unwrap();
    validate_text(&ok, &dir.path().join("s.toml"), &host()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn on_corrupt_on_a_task_that_uses_no_channel_is_refused_with_its_line() {
    let text = r#"duration_s = 1
[signals.s]
values = 1
[tasks.evil]
cell = "linux"
period_us = 1000
priority = 50
on_corrupt = "trip"
workload = { kind = "scribble", channel = "s", at_cycle = 10, cycles = 10 }
[tasks.spin]
cell = "linux"
period_us = 1000
priority = 50
on_corrupt = "resync"
workload = { kind = "spin", us = 5 }
[tasks.w]
cell = "linux"
period_us = 1000
priority = 50
output = "s"
on_corrupt = "trip"
workload = { kind = "spin", us = 5 }
"#;
    let e = refusal(text);
    assert!(e.contains("s.toml:8:") && e.contains("task \"evil\" reads and writes no channel"), "{e}");
    assert!(e.contains("s.toml:14:") && e.contains("task \"spin\" reads and writes no channel"), "{e}");
    assert!(!e.contains("task \"w\""), "a task writing a signal may have on_corrupt: {e}");
}
