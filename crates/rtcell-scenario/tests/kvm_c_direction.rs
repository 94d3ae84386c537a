//! A C task run as a kvm cell's payload may write only the COM channels it sends on: the ones a
//! `com_master` task writes are its inputs, given to it as read-only memory slots.

use rtcell_scenario::plan::CellRole;
use rtcell_scenario::{HostView, validate_text};

const SCENARIO: &str = r#"
name = "kvm-c-direction"
duration_s = 1

[cells.ctrl]
kind = "kvm"
cpu = 1

[com."ctrl.in"]
groups = [{ id = 1, name = "ctrl_in" }]
signals = [
  { id = 1, name = "seq", type = "uint32", group = 1 },
  { id = 2, name = "reset", type = "uint8", group = 1 },
  { id = 3, name = "r", type = "float64", group = 1 },
  { id = 4, name = "y", type = "float64", group = 1 },
]

[com."ctrl.out"]
groups = [{ id = 2, name = "ctrl_out" }]
signals = [
  { id = 10, name = "seq", type = "uint32", group = 2 },
  { id = 11, name = "u", type = "float64", group = 2 },
]

[tasks.ctrl]
cell = "ctrl"
period_us = 50
priority = 90
workload = { kind = "c", payload = "ctrl.elf", com = ["ctrl.in", "ctrl.out"] }

[tasks.master]
cell = "linux"
period_us = 100
priority = 80
workload = { kind = "com_master", input = "ctrl.in", output = "ctrl.out" }
"#;

#[test]
fn a_kvm_c_task_may_not_write_the_com_channel_its_master_writes() {
    let dir = tempfile::tempdir().unwrap();
    // Any valid payload ELF will do: the plan only checks that it loads.
    std::fs::write(dir.path().join("ctrl.elf"), rtcell_kvm::payloads::payload("faults").unwrap()).unwrap();
    let host = HostView { online: vec![0, 1], kvm_unusable: None, payloads: vec!["faults".into()] };
    let plan = validate_text(SCENARIO, &dir.path().join("s.toml"), &host)
        .unwrap_or_else(|e| panic!("the scenario validates: {e:?}"));
    let cell = plan.cells.iter().find(|c| c.name == "ctrl").unwrap();
    let CellRole::Payload { writes, args, .. } = &cell.role else { panic!("not a payload cell: {:?}", cell.role) };
    assert!(args.contains("com=ctrl.in,ctrl.out"), "{args}");
    assert!(!writes.iter().any(|w| w == "ctrl.in"), "the payload may write its input channel: {writes:?}");
    assert!(writes.iter().any(|w| w == "ctrl.out"), "the payload cannot write its output channel: {writes:?}");
}
