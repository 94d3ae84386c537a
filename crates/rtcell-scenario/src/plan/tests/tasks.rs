//! Tasks: name, cell and CPU, timing, policies, safe value, budget.

use super::*;
use rtcell_tasks::{MissedPolicy, OnCorrupt};

#[test]
fn a_linux_task_is_accepted_with_its_timing() {
    let plan = accepted(&linux("offset_us = 100\ndeadline_us = 800\non_overrun = \"run_at_once\"\n", SPIN, ""));
    let t = &plan.tasks[0];
    assert_eq!(t.cell, None);
    let s = &t.spec;
    assert_eq!((s.period_ns, s.offset_ns, s.deadline_ns, s.priority, s.cpu), (1_000_000, 100_000, 800_000, 50, 0));
    assert_eq!((s.missed, s.on_corrupt), (MissedPolicy::RunAtOnce, OnCorrupt::Resync));
    assert_eq!(t.budget_us, 5.0);
}

#[test]
fn tasks_keep_the_files_order() {
    let text = linux("", SPIN, "")
        + "[tasks.0first]\ncell = \"linux\"\nperiod_us = 1000\npriority = 40\nworkload = { kind = \"spin\", us = 5 }\n";
    let plan = accepted(&text);
    let names: Vec<&str> = plan.tasks.iter().map(|t| t.spec.name.as_str()).collect();
    assert_eq!(names, ["a", "0first"]);
}

#[test]
fn a_task_name_too_long_is_refused() {
    let long = "t".repeat(23);
    let text = linux("", SPIN, "").replace("[tasks.a]", &format!("[tasks.{long}]"));
    refusal(
        &text,
        &format!("tasks.{long}"),
        "[tasks.",
        "must be 1 to 22 letters, digits, '_' or '-'",
        "rename the task",
    );
}

#[test]
fn an_unknown_cell_is_refused_with_the_known_ones() {
    let text = in_cell("thread", "", SPIN, "").replace("cell = \"c\"", "cell = \"x\"");
    refusal(&text, "tasks.a.cell", "cell = \"x\"", "no cell named \"x\"", "use one of: c, linux");
}

#[test]
fn only_a_c_task_runs_in_a_kvm_cell_and_none_in_a_payload_cell() {
    let text = in_cell("kvm", "", SPIN, "");
    refusal(&text, "tasks.a.cell", "cell = \"c\"", "cell \"c\" is a kvm cell", "cell = \"linux\"");
    let text = in_cell("kvm", "", SPIN, "").replace("cpu = 1\n", "cpu = 1\npayload = \"echo\"\n");
    let d = refused_on(&text, &host(), &Origin::Operator);
    assert!(d.iter().any(|d| d.path == "tasks.a.cell"), "{d:?}");
    let text = in_cell("thread", "", SPIN, "")
        .replace("cpu = 1\n", "cpu = 1\nservice = { kind = \"controller\", request = \"q\", reply = \"r\" }\n");
    let d = refused_on(&text, &host(), &Origin::Operator);
    let d = d.iter().find(|d| d.path == "tasks.a.cell").unwrap_or_else(|| panic!("{d:?}"));
    assert_eq!(d.message, "cell \"c\" runs a service or a payload, not tasks");
}

#[test]
fn period_offset_and_deadline_are_checked() {
    let text = linux("", SPIN, "").replace("period_us = 1000", "period_us = 0");
    refusal(&text, "tasks.a.period_us", "period_us", "period must be > 0", "period_us = 1000");
    let text = linux("offset_us = 1000\n", SPIN, "");
    refusal(&text, "tasks.a.offset_us", "offset_us", "offset 1000 us is not below the period 1000 us", "between 0 and");
    let text = linux("deadline_us = 0\n", SPIN, "");
    refusal(&text, "tasks.a.deadline_us", "deadline_us", "deadline must be > 0", "leave it out");
    let text = linux("deadline_us = 2000\n", SPIN, "");
    refusal(
        &text,
        "tasks.a.deadline_us",
        "deadline_us",
        "deadline 2000 us is above the period 1000 us",
        "deadline_us = 1000",
    );
}

#[test]
fn a_task_priority_outside_1_to_99_is_refused() {
    let text = linux("", SPIN, "").replace("priority = 50", "priority = 100");
    refusal(&text, "tasks.a.priority", "priority", "priority 100 is outside 1..=99 (SCHED_FIFO)", "priority = 80");
}

#[test]
fn unknown_policies_are_refused() {
    refusal(
        &linux("on_overrun = \"panic\"\n", SPIN, ""),
        "tasks.a.on_overrun",
        "on_overrun",
        "unknown policy \"panic\"",
        "\"skip\"",
    );
    let text = linux("send = \"r\"\non_corrupt = \"ignore\"\n", SPIN, "[channels.r]\ncapacity = 8\nframe_bytes = 64\n");
    refusal(&text, "tasks.a.on_corrupt", "on_corrupt", "unknown choice \"ignore\"", "\"resync\"");
}

#[test]
fn on_corrupt_needs_a_channel_it_could_find_corrupted() {
    let text = linux("on_corrupt = \"trip\"\n", SPIN, "");
    refusal(&text, "tasks.a.on_corrupt", "on_corrupt", "task \"a\" reads and writes no channel", "remove on_corrupt");
    let text = linux("send = \"r\"\non_corrupt = \"trip\"\n", SPIN, "[channels.r]\ncapacity = 8\nframe_bytes = 64\n");
    assert_eq!(accepted(&text).tasks[0].spec.on_corrupt, OnCorrupt::Trip);
}

#[test]
fn a_watchdog_needs_a_time_and_a_sensitivity() {
    let text = linux("watchdog = { time_us = 0, sensitivity = 0 }\n", SPIN, "");
    refusal(&text, "tasks.a.watchdog.time_us", "watchdog", "watchdog time must be > 0", "time_us = 1000");
    refusal(&text, "tasks.a.watchdog.sensitivity", "watchdog", "sensitivity must be at least 1", "sensitivity = 3");
}

#[test]
fn a_safe_value_is_written_to_the_output_when_the_watchdog_trips() {
    let ok = linux(
        "output = \"u\"\nsafe_value = [1.5]\nwatchdog = { time_us = 2000, sensitivity = 3 }\n",
        SPIN,
        "[signals.u]\nvalues = 1\n",
    );
    let plan = accepted(&ok);
    assert_eq!(plan.tasks[0].spec.safe_value, [1.5]);
    assert_eq!(plan.tasks[0].spec.watchdog.map(|w| (w.time_ns, w.sensitivity)), Some((2_000_000, 3)));
    let text = linux("safe_value = [1.0]\n", SPIN, "");
    refusal(&text, "tasks.a.safe_value", "safe_value", "a safe value needs an output signal", "add output");
    refusal(&text, "tasks.a.safe_value", "safe_value", "and this task has none", "add watchdog = {");
    let text = ok.replace("[1.5]", "[1.5, 2.5]");
    refusal(&text, "tasks.a.safe_value", "safe_value", "2 values, but signal \"u\" holds 1", "at most 1 values");
    let text = ok.replace("[1.5]", "[nan]");
    refusal(&text, "tasks.a.safe_value", "safe_value", "safe values must be finite numbers", "safe_value = [0.0]");
}

#[test]
fn a_negative_budget_is_refused() {
    let text = linux("budget_us = -1\n", SPIN, "");
    refusal(&text, "tasks.a.budget_us", "budget_us", "budget must be a number >= 0", "budget_us = 50");
}
