//! Cells: name, kind and fallback, CPU, priority, role, and what each uses.

use super::*;
use crate::plan::CellRole;
use rtcell_cells::CellKind;

fn cell(lines: &str) -> String {
    in_cell("thread", "", SPIN, "").replace("kind = \"thread\"\ncpu = 1\n", lines)
}

#[test]
fn a_thread_cell_with_a_task_is_accepted() {
    let plan = accepted(&in_cell("thread", "", SPIN, ""));
    let c = &plan.cells[0];
    assert_eq!(
        (c.name.as_str(), c.kind, c.requested, c.cpu, c.priority),
        ("c", CellKind::Thread, CellKind::Thread, 1, 90)
    );
    assert_eq!(c.role, CellRole::Tasks);
    assert_eq!(plan.tasks[0].cell.as_deref(), Some("c"));
}

#[test]
fn a_cell_name_with_a_space_is_refused() {
    let text = in_cell("thread", "", SPIN, "")
        .replace("[cells.c]", "[cells.\"c d\"]")
        .replace("cell = \"c\"", "cell = \"c d\"");
    refusal(&text, "cells.c d", "[cells.", "may hold only letters, digits", "rename the cell");
}

#[test]
fn an_unknown_kind_is_refused() {
    refusal(
        &cell("kind = \"vm\"\ncpu = 1\n"),
        "cells.c.kind",
        "kind = \"vm\"",
        "vm",
        "kind = \"thread\", \"process\" or \"kvm\"",
    );
}

#[test]
fn a_cell_on_an_offline_cpu_is_refused() {
    let text = cell("kind = \"thread\"\ncpu = 7\n");
    refusal(&text, "cells.c.cpu", "cpu = 7", "CPU 7 does not exist or is offline (online: 0-1)", "use one of 0-1");
}

#[test]
fn a_cell_on_the_masters_cpu_is_refused_with_a_free_cpu_named() {
    let text = format!("master_cpu = 1\n{}", in_cell("thread", "", SPIN, ""));
    refusal(&text, "cells.c.cpu", "cpu = 1", "CPU 1 is the master's CPU (the Linux side)", "e.g. cpu = 0");
    let one = HostView { online: vec![0], ..host() };
    let text = cell("kind = \"thread\"\ncpu = 0\n");
    refusal_on(&text, &one, &Origin::Operator, "cells.c.cpu", "cpu = 0", "is the master's CPU", "no CPU to spare");
}

#[test]
fn two_cells_on_one_cpu_are_refused() {
    let text = in_cell("thread", "", SPIN, "")
        + "[cells.d]\nkind = \"thread\"\ncpu = 1\n[tasks.b]\ncell = \"d\"\nperiod_us = 1000\npriority = 50\nworkload = { kind = \"spin\", us = 5 }\n";
    let d = refused_on(&text, &host(), &Origin::Operator);
    let d = d.iter().find(|d| d.path == "cells.d.cpu").unwrap_or_else(|| panic!("{d:?}"));
    assert_eq!(d.line, Some(line_of(&text, "[cells.d]") + 2));
    assert_eq!(d.message, "CPU 1 is already cell \"c\"'s: two cells on one CPU");
    assert_eq!(d.fix, "give each cell a CPU of its own");
}

#[test]
fn a_cell_priority_outside_1_to_99_is_refused() {
    let text = cell("kind = \"thread\"\ncpu = 1\npriority = 0\n");
    refusal(&text, "cells.c.priority", "priority = 0", "priority 0 is outside 1..=99", "priority = 90");
}

#[test]
fn a_fallback_is_a_host_kind_of_a_kvm_cell() {
    let text = cell("kind = \"thread\"\ncpu = 1\nfallback = \"process\"\n");
    refusal(&text, "cells.c.fallback", "fallback", "a fallback applies only to a kvm cell", "kind = \"kvm\"");
    let text = cell("kind = \"kvm\"\ncpu = 1\nfallback = \"kvm\"\npayload = \"echo\"\n");
    refusal(
        &text,
        "cells.c.fallback",
        "fallback",
        "fallback \"kvm\" is not a host cell kind",
        "\"thread\" or \"process\"",
    );
}

fn payload_cell(kind: &str, extra: &str) -> String {
    format!("duration_s = 1\n[cells.k]\nkind = \"{kind}\"\ncpu = 1\npayload = \"echo\"\n{extra}")
}

#[test]
fn a_kvm_cell_without_a_fallback_is_refused_where_kvm_is_not_usable() {
    let text = payload_cell("kvm", "").replace("payload = \"echo\"\n", "fallback = \"process\"\n")
        + "[tasks.a]\ncell = \"k\"\nperiod_us = 1000\npriority = 50\nworkload = { kind = \"spin\", us = 5 }\n";
    let no_kvm = HostView { kvm_unusable: Some("no /dev/kvm".into()), ..host() };
    // A kvm cell runs C tasks only, whatever it falls back to.
    let d = refused_on(&text, &no_kvm, &Origin::Operator);
    assert!(d.iter().any(|d| d.path == "tasks.a.cell" && d.message.contains("is a kvm cell")), "{d:?}");
    let text = payload_cell("kvm", "");
    let plan = validate_on(&text, &no_kvm, &Origin::Operator);
    let d = plan.expect_err("a payload cell cannot fall back").diags;
    assert!(d.iter().any(|d| d.path == "cells.k.kind" && d.message == "KVM is not usable here: no /dev/kvm"), "{d:?}");
    assert!(d.iter().any(|d| d.fix.contains("add fallback = \"thread\"")), "{d:?}");
}

#[test]
fn a_fallback_note_says_why() {
    let text = "duration_s = 1\n[cells.k]\nkind = \"kvm\"\nfallback = \"thread\"\ncpu = 1\n\
                service = { kind = \"controller\", request = \"q\", reply = \"r\" }\n\
                [channels.q]\ncapacity = 16\nframe_bytes = 128\n[channels.r]\ncapacity = 16\nframe_bytes = 128\n\
                [tasks.m]\ncell = \"linux\"\nperiod_us = 1000\npriority = 50\nworkload = { kind = \"master\", request = \"q\", reply = \"r\" }\n";
    let no_kvm = HostView { kvm_unusable: Some("no /dev/kvm".into()), ..host() };
    let plan = validate_on(text, &no_kvm, &Origin::Operator).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((plan.cells[0].kind, plan.cells[0].requested), (CellKind::Thread, CellKind::Kvm));
    assert_eq!(plan.notes, ["cell \"k\": KVM is not usable here (no /dev/kvm): running it as a thread cell"]);
}

#[test]
fn payloads_run_only_in_kvm_cells_and_must_exist() {
    refusal(
        &payload_cell("thread", ""),
        "cells.k.payload",
        "payload",
        "payloads run only in kvm cells",
        "kind = \"kvm\"",
    );
    let text = payload_cell("kvm", "").replace("\"echo\"", "\"nope\"");
    refusal(&text, "cells.k.payload", "payload", "no payload named \"nope\"", "echo, control, spin, faults");
    let text = payload_cell("kvm", "service = { kind = \"controller\", request = \"q\", reply = \"r\" }\n");
    refusal(&text, "cells.k.payload", "payload", "a cell runs a service or a payload, not both", "remove one");
}

#[test]
fn args_are_for_a_payload_only() {
    let text = cell("kind = \"thread\"\ncpu = 1\nargs = \"x=1\"\n");
    refusal(&text, "cells.c.args", "args", "args are for a kvm payload", "remove them");
}

#[test]
fn an_unknown_controller_precision_is_refused() {
    let text = "duration_s = 1\n[cells.k]\nkind = \"thread\"\ncpu = 1\n\
                service = { kind = \"controller\", request = \"q\", reply = \"r\", precision = \"f16\" }\n";
    refusal(text, "cells.k.service.precision", "service", "unknown precision \"f16\"", "\"f64\", \"f32\" or \"q31\"");
}

#[test]
fn a_controller_needs_its_rings_with_room_for_its_messages() {
    let text = "duration_s = 1\n[cells.k]\nkind = \"thread\"\ncpu = 1\n\
                service = { kind = \"controller\", request = \"q\", reply = \"r\" }\n[channels.r]\ncapacity = 16\nframe_bytes = 24\n";
    refusal(text, "cells.k.service.request", "service", "no channel named \"q\"", "declare it: [channels.q]");
    refusal(
        text,
        "cells.k.service.reply",
        "service",
        "channel \"r\" carries 24-byte frames; controller messages are 32 bytes",
        "frame_bytes = ",
    );
}

#[test]
fn a_payload_writes_only_declared_channels() {
    let text = payload_cell("kvm", "writes = [\"zz\"]\n");
    refusal(&text, "cells.k.writes", "writes", "no channel or signal named \"zz\"", "list channels");
}

#[test]
fn a_cell_without_tasks_is_refused() {
    let text = "duration_s = 1\n[cells.c]\nkind = \"thread\"\ncpu = 1\n";
    refusal(text, "cells.c", "[cells.c]", "the cell has no tasks, no service and no payload", "cell = \"c\"");
}
