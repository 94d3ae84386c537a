//! Signals: values, writable ones, and the tasks around them.

use super::*;

const PARAM: &str = "[signals.g]\nvalues = 1\nwritable = true\n";

#[test]
fn a_writable_signal_read_by_a_task_is_accepted_with_its_reader() {
    let plan = accepted(&linux("params = [\"g\"]\n", SPIN, PARAM));
    let w = plan.signals[0].writable.as_ref().expect("writable");
    assert_eq!(w.reader, "a");
    assert_eq!(w.ty, crate::plan::ValueType::F64);
}

#[test]
fn signal_values_have_limits() {
    let text = linux("", SPIN, "[signals.s]\nvalues = 0\n");
    refusal(&text, "signals.s.values", "values", "values must be 1 to 64", "values = 1");
    let text = linux("", SPIN, "[signals.s]\nvalues = 65\n");
    refusal(&text, "signals.s.values", "values", "values must be 1 to 64", "values = 1");
}

#[test]
fn a_writable_signal_nobody_reads_is_refused() {
    let text = linux("", SPIN, PARAM);
    refusal(&text, "signals.g.writable", "writable", "no task reads writable signal \"g\"", "params = [\"g\"]");
}

#[test]
fn a_writable_signal_a_task_writes_is_refused() {
    let text = linux("params = [\"g\"]\noutput = \"g\"\n", SPIN, PARAM);
    refusal(&text, "signals.g.writable", "writable", "task \"a\" writes signal \"g\"", "another signal");
}

#[test]
fn params_name_writable_signals_each_read_by_one_task() {
    refusal(
        &linux("params = [\"x\"]\n", SPIN, ""),
        "tasks.a.params[0]",
        "params",
        "no signal named \"x\"",
        "writable = true",
    );
    let text = linux("params = [\"s\"]\n", SPIN, "[signals.s]\nvalues = 1\n");
    refusal(&text, "tasks.a.params[0]", "params", "signal \"s\" is not writable", "add writable = true to [signals.s]");
    let text = linux("params = [\"g\"]\n", SPIN, PARAM)
        + "[tasks.b]\ncell = \"linux\"\nperiod_us = 1000\npriority = 40\nparams = [\"g\"]\nworkload = { kind = \"spin\", us = 5 }\n";
    let d = refused_on(&text, &host(), &Origin::Operator);
    let d = d.iter().find(|d| d.path == "tasks.b.params[0]").unwrap_or_else(|| panic!("{d:?}"));
    assert_eq!(d.message, "task \"a\" already reads signal \"g\" (one task acknowledges a writable signal)");
}

#[test]
fn an_output_signal_must_exist_and_hold_what_the_work_writes() {
    let traj = "{ kind = \"trajectory\", from_deg = 0, to_deg = 90, move_s = 2 }";
    refusal(&linux("output = \"sp\"\n", traj, ""), "tasks.a.output", "output", "no signal named \"sp\"", "values = 18");
    let text = linux("output = \"sp\"\n", traj, "[signals.sp]\nvalues = 6\n");
    refusal(&text, "tasks.a.output", "output", "signal \"sp\" holds 6 values, this needs 18", "values = 18");
    accepted(&linux("output = \"sp\"\n", traj, "[signals.sp]\nvalues = 18\n"));
}

#[test]
fn a_signal_has_one_writer() {
    let text = linux("output = \"s\"\n", SPIN, "[signals.s]\nvalues = 1\n")
        + "[tasks.b]\ncell = \"linux\"\nperiod_us = 1000\npriority = 40\noutput = \"s\"\nworkload = { kind = \"spin\", us = 5 }\n";
    let d = refused_on(&text, &host(), &Origin::Operator);
    let d = d.iter().find(|d| d.path == "tasks.b.output").unwrap_or_else(|| panic!("{d:?}"));
    assert_eq!(d.message, "task \"a\" already writes signal \"s\" (a signal has one writer)");
    assert_eq!(d.fix, "give each task its own output signal");
}
