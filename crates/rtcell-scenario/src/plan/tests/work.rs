//! Workloads: what each kind needs of the scenario; C tasks and where their code may come from.

use super::*;
use crate::plan::CellRole;
use rtcell_tasks::TaskWork;

#[test]
fn a_negative_spin_and_a_non_finite_injection_are_refused() {
    let text = linux("", "{ kind = \"spin\", us = -1 }", "");
    refusal(&text, "tasks.a.workload.us", "workload", "spin time must be >= 0", "us = 50");
    let text = linux("", "{ kind = \"spin\", us = 5, inject = { at_cycle = 3, us = nan } }", "");
    refusal(&text, "tasks.a.workload.inject.us", "workload", "NaN is not a finite number", "give a number");
}

#[test]
fn a_trajectory_moves_in_a_positive_time() {
    let text = linux(
        "output = \"sp\"\n",
        "{ kind = \"trajectory\", from_deg = 0, to_deg = 9, move_s = 0 }",
        "[signals.sp]\nvalues = 18\n",
    );
    refusal(&text, "tasks.a.workload.move_s", "workload", "move time must be above 0 s", "move_s = 2");
}

#[test]
fn a_work_with_a_result_needs_an_output() {
    let text = linux("", "{ kind = \"inverse_dynamics\", setpoint = \"sp\" }", "[signals.sp]\nvalues = 18\n");
    refusal(&text, "tasks.a.output", "[tasks.a]", "task writes its result to an output signal", "<signal of 6 values>");
    let text =
        linux("", "{ kind = \"drive\", setpoint = \"sp\", torque = \"tq\", us = 5 }", "[signals.sp]\nvalues = 18\n");
    refusal(&text, "tasks.a.workload.torque", "workload", "no signal named \"tq\"", "[signals.tq] values = 6");
}

#[test]
fn a_log_task_runs_on_the_linux_side_and_logs_known_tasks() {
    let log = "{ kind = \"log\", file = \"a.log\", tasks = [\"zz\"] }";
    refusal(&linux("", log, ""), "tasks.a.workload.tasks", "workload", "no task named \"zz\"", "list tasks");
    let text = in_cell("thread", "", &log.replace("\"zz\"", "\"a\""), "");
    refusal(&text, "tasks.a.cell", "cell = \"c\"", "a log task writes a file", "cell = \"linux\"");
}

const OFFLOAD: &str = "[channels.q]\ncapacity = 16\nframe_bytes = 32\n[channels.r]\ncapacity = 16\nframe_bytes = 32\n";
const MASTER: &str = "{ kind = \"master\", request = \"q\", reply = \"r\" }";

#[test]
fn the_offload_master_takes_the_precision_of_the_cell_serving_it() {
    let cell = "[cells.k]\nkind = \"thread\"\ncpu = 1\nservice = { kind = \"controller\", request = \"q\", reply = \"r\", precision = \"f32\" }\n";
    let plan = accepted(&linux("", MASTER, &format!("{OFFLOAD}{cell}")));
    let TaskWork::Master { precision, .. } = &plan.tasks[0].spec.work else { panic!("{:?}", plan.tasks[0]) };
    assert_eq!(*precision, rtcell_control::offload::Precision::F32);
    assert!(!plan.channels.iter().any(|c| c.sink), "the cell receives the requests, the master the replies");
    let text = linux("", MASTER, OFFLOAD);
    refusal(&text, "tasks.a.workload", "workload", "no cell serves the controller on \"q\" / \"r\"", "service = {");
}

#[test]
fn the_offload_masters_rings_carry_its_messages() {
    let text = linux("", MASTER, &OFFLOAD.replacen("frame_bytes = 32", "frame_bytes = 24", 1));
    refusal(&text, "tasks.a.workload.request", "workload", "channel \"q\" carries 24-byte frames", "frame_bytes = 32");
}

#[test]
fn a_scribble_names_a_channel_of_the_scenario() {
    let text = linux("", "{ kind = \"scribble\", channel = \"zz\", at_cycle = 1 }", "");
    refusal(&text, "tasks.a.workload.channel", "workload", "no channel named \"zz\"", "task.<task>");
    accepted(&linux("", "{ kind = \"scribble\", channel = \"task.a\", at_cycle = 1 }", ""));
}

#[test]
fn an_ethercat_task_needs_the_segment_and_two_values_per_device() {
    let text = linux("output = \"io\"\n", "{ kind = \"ethercat\" }", "[signals.io]\nvalues = 2\n");
    refusal(&text, "tasks.a.workload", "workload", "needs the scenario's [ethercat] segment", "simulated = 3");
    let text =
        linux("output = \"io\"\n", "{ kind = \"ethercat\" }", "[ethercat]\nsimulated = 3\n[signals.io]\nvalues = 2\n");
    refusal(&text, "tasks.a.output", "output", "signal \"io\" holds 2 values, this needs 6", "values = 6");
    let plan = accepted(&text.replace("values = 2", "values = 6"));
    let TaskWork::Ethercat { timeout_us, .. } = &plan.tasks[0].spec.work else { panic!() };
    assert_eq!(*timeout_us, 900, "90% of the period by default");
}

const C_LIB: &str = "{ kind = \"c\", library = \"libctrl.so\", step = \"s\" }";

#[test]
fn c_code_runs_in_a_cell_and_names_its_files() {
    refusal(
        &linux("", C_LIB, ""),
        "tasks.a.cell",
        "cell = \"linux\"",
        "C code runs in a cell",
        "thread, process or kvm",
    );
    let text = in_cell("thread", "", "{ kind = \"c\" }", "");
    refusal(
        &text,
        "tasks.a.workload.library",
        "workload",
        "a C task in a thread cell needs a library",
        "build/libctrl.so",
    );
    refusal(&text, "tasks.a.workload.step", "workload", "a C task names its step function", "step = \"ctrl_step\"");
    let text = in_cell("kvm", "", "{ kind = \"c\" }", "");
    refusal(&text, "tasks.a.workload.payload", "workload", "a C task in a kvm cell needs a payload", "build/ctrl.elf");
}

#[test]
fn a_missing_library_and_a_file_that_is_not_one_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = in_cell("process", "", C_LIB, "");
    let at = dir.path().join("t.toml");
    let run = |text: &str| validate_text_from(text, &at, &host(), &[], &Origin::Operator).expect_err("accepted").diags;
    let d = run(&text);
    assert!(d.iter().any(|d| d.path == "tasks.a.workload.library" && d.message.starts_with("no file ")), "{d:?}");
    std::fs::write(dir.path().join("libctrl.so"), "text").expect("write");
    let d = run(&text);
    let d = d.iter().find(|d| d.path == "tasks.a.workload.library").unwrap_or_else(|| panic!("{d:?}"));
    assert_eq!(d.message, "library \"libctrl.so\" is not an ELF file");
    assert_eq!(d.line, Some(line_of(&text, "workload")));
}

#[test]
fn a_scenario_from_the_api_runs_no_c_code_in_a_thread_cell_nor_outside_its_library() {
    let text = in_cell("thread", "", C_LIB, "");
    let api = Origin::Api { library_dir: None, base: None };
    refusal_on(
        &text,
        &host(),
        &api,
        "tasks.a.cell",
        "cell = \"c\"",
        "runs inside the gateway's own process",
        "kind = \"process\"",
    );
    let text = in_cell("process", "", C_LIB, "");
    refusal_on(
        &text,
        &host(),
        &api,
        "tasks.a.workload.library",
        "workload",
        "the gateway accepts no C code",
        "--library-dir",
    );
    let lib = tempfile::tempdir().expect("tempdir");
    let api = Origin::Api { library_dir: Some(lib.path().to_path_buf()), base: None };
    let text = in_cell("process", "", &C_LIB.replace("libctrl.so", "../x.so"), "");
    refusal_on(
        &text,
        &host(),
        &api,
        "tasks.a.workload.library",
        "workload",
        "is outside the gateway's library directory",
        "library directory",
    );
}

#[test]
fn a_kvm_cells_c_task_becomes_its_payload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let elf = rtcell_kvm::payloads::payload("faults").expect("a built-in payload");
    std::fs::write(dir.path().join("ctrl.elf"), elf).expect("write");
    let text = in_cell("kvm", "", "{ kind = \"c\", payload = \"ctrl.elf\", com = [] }", "");
    let plan = validate_text_from(&text, &dir.path().join("t.toml"), &host(), &[], &Origin::Operator)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.tasks.is_empty(), "the task left the task list: {:?}", plan.tasks);
    let CellRole::Payload { payload, args, writes } = &plan.cells[0].role else { panic!("{:?}", plan.cells[0]) };
    assert!(payload.ends_with("ctrl.elf"), "{payload}");
    assert_eq!(args, "com=\nperiod_ns=1000000\n");
    assert!(writes.is_empty());
    assert!(plan.notes[0].contains("runs as the payload of kvm cell \"c\""), "{:?}", plan.notes);
}

#[test]
fn a_kvm_cell_runs_one_c_task_which_acknowledges_no_params() {
    let c = "{ kind = \"c\", payload = \"x.elf\" }";
    let text = in_cell("kvm", "", c, "")
        + "[tasks.b]\ncell = \"c\"\nperiod_us = 1000\npriority = 50\nworkload = { kind = \"c\", payload = \"x.elf\" }\n";
    refusal(
        &text,
        "cells.c",
        "[cells.c]",
        "kvm cell \"c\" has 2 tasks; a kvm cell runs one C task",
        "move the other tasks",
    );
    let text = in_cell("kvm", "params = [\"g\"]\n", c, "[signals.g]\nvalues = 1\nwritable = true\n");
    refusal(&text, "tasks.a.params", "params", "which cannot acknowledge params", "Linux-side task");
}
