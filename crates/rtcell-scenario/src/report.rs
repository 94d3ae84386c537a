//! The end of a run as people read it (the per-task table of CODESYS task statistics and seed 003, the
//! per-channel message counts) and as other tools read it (suite `scenario` of the results document).

use rtcell_report::table::Table;
use rtcell_report::{Histogram, Kind, Series, Stats, Suite, Unit, labels};

use crate::plan::{CellRole, Plan};
use crate::run::{HistSummary, RunResult, TaskResult};

/// Cycle count agrees with duration / period within 1% (cycles + skipped releases, one release of
/// slack for the edges), or the shortfall is explained by overruns, skips, a trip or a stop.
pub fn cycles_ok(t: &TaskResult) -> bool {
    let got = t.counters.cycles + t.counters.skipped;
    let tol = (t.expected as f64 * 0.01).ceil() as u64 + 1;
    got.abs_diff(t.expected) <= tol
}

/// The human report: per-task table, per-channel counts, what the masters and cells did, steal.
pub fn text(plan: &Plan, r: &RunResult) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "Scenario {:?}: {} task(s) in {} cell(s), master CPU {}, {:.1} s{}\n",
        plan.name,
        r.tasks.len(),
        r.cells.len(),
        plan.master_cpu,
        r.measured.as_secs_f64(),
        if r.incomplete { " (stopped early)" } else { "" }
    ));
    task_table(plan, r, &mut s);
    channel_table(plan, r, &mut s);
    master_lines(plan, r, &mut s);
    trip_lines(r, &mut s);
    cell_lines(r, &mut s);
    footer(r, &mut s);
    s
}

/// The per-task table (CODESYS task statistics), the same columns the HTML report shows: built from the
/// results document's series; a scribbled block's figures are shown as `?`.
fn task_table(plan: &Plan, r: &RunResult, s: &mut String) {
    s.push_str("Tasks (times in µs; latency = start - intended release; exec = end - start):\n");
    s.push_str(&Table::of(&rtcell_report::columns::tasks(&suite(plan, r))).render());
    s.push('\n');
}

/// The per-channel message counts, the same columns the HTML report shows.
fn channel_table(plan: &Plan, r: &RunResult, s: &mut String) {
    if !r.channels.is_empty() {
        s.push_str("Channels (messages):\n");
        s.push_str(&Table::of(&rtcell_report::columns::channels(&suite(plan, r))).render());
        s.push('\n');
    }
}

/// A line per offload, C offload and EtherCAT master: what it sent, got back and checked.
fn master_lines(plan: &Plan, r: &RunResult, s: &mut String) {
    let offload: Vec<&TaskResult> = r
        .tasks
        .iter()
        .filter(|t| !t.scribbled && matches!(t.spec.work, rtcell_tasks::TaskWork::Master { .. }))
        .collect();
    for m in offload {
        let c = &m.counters;
        s.push_str(&format!(
            "Offload master {:?}: {} requests sent, {} dropped (request ring full); {} replies, {} checked against the reference, {} ({} wrong), {} unchecked (their pass lost a request); {} not back within 90% of the deadline, when the master stops waiting ({} came later)\n",
            m.name,
            c.sent,
            c.send_fail,
            c.received,
            c.received - c.unchecked,
            match &m.spec.work {
                rtcell_tasks::TaskWork::Master { precision: rtcell_control::offload::Precision::F64, .. } => {
                    "f64, bit for bit".to_string()
                }
                rtcell_tasks::TaskWork::Master { precision, .. } => {
                    format!("{precision} within {:e} of full scale", precision.tolerance())
                }
                _ => String::new(),
            },
            c.errors,
            c.unchecked,
            c.recv_lost,
            c.late
        ));
    }
    for m in r.tasks.iter().filter(|t| !t.scribbled && matches!(t.spec.work, rtcell_tasks::TaskWork::ComMaster { .. }))
    {
        let c = &m.counters;
        s.push_str(&format!(
            "C offload master {:?} (COM signals): {} samples sent, each held until answered; {} answers, every one checked against the reference (f64, bit for bit; {} wrong); {} came after their cycle (the master held the next sample); {} cycles ended without an answer within 90% of the deadline\n",
            m.name,
            c.sent,
            c.received,
            c.errors,
            c.late,
            c.recv_lost
        ));
    }
    for m in r.tasks.iter().filter(|t| !t.scribbled) {
        let rtcell_tasks::TaskWork::Ethercat { interface, timeout_us, busy_poll, .. } = &m.spec.work else { continue };
        let segment = match &plan.ethercat {
            Some(crate::plan::PlanEthercat::Simulated { devices, .. }) => {
                format!("a simulated segment of {devices} device(s) on {interface}")
            }
            _ => format!("interface {interface}"),
        };
        let c = &m.counters;
        s.push_str(&format!(
            "EtherCAT task {:?} ({segment}, master {} for replies): {} frames sent, {} received, {} lost (not back within {timeout_us} us, counting {} the interface refused to send); {} replies came after their cycle gave up (dropped); {} exchanges wrong (working counter short or a device out of OP; inputs kept their last good values)\n",
            m.name,
            if *busy_poll { "busy-polling" } else { "sleeping" },
            c.sent,
            c.received,
            c.recv_lost,
            c.send_fail,
            c.late,
            c.errors
        ));
    }
}

/// A line per task that tripped: when, why, and the safe value its output holds.
fn trip_lines(r: &RunResult, s: &mut String) {
    for x in r.tasks.iter().filter(|t| !t.scribbled) {
        if let Some(k) = x.counters.trip_cycle {
            s.push_str(&format!(
                "{}: task {:?} tripped at cycle {k}: {}; its output {:?} holds {:?}\n",
                if x.spec.watchdog.is_some() { "Watchdog" } else { "Corrupt channel" },
                x.name,
                x.counters.message,
                x.spec.output.as_deref().unwrap_or("-"),
                x.spec.output.as_ref().and_then(|o| r.signals.get(o)).cloned().unwrap_or_default()
            ));
        }
    }
}

/// A line per cell (kind, CPU, status, start, exits, its claim), then its log.
fn cell_lines(r: &RunResult, s: &mut String) {
    for c in &r.cells {
        let start = c.start.map_or(String::new(), |d| format!(", started in {:.1} ms", d.as_secs_f64() * 1e3));
        let exits =
            c.vm_exits.as_ref().and_then(|e| e.get("exits")).map_or(String::new(), |n| format!(", {n} VM exits"));
        let handled = match c.handled {
            Some(0) => String::new(),
            Some(n) => format!(", {n} steps or messages handled (the cell's claim)"),
            None => ", steps or messages handled unknown (its control block was scribbled)".into(),
        };
        s.push_str(&format!("Cell {:?}: {} on CPU {}, {}{start}{exits}{handled}\n", c.name, c.kind, c.cpu, c.status));
        if c.log_kept > c.log.len() as u64 {
            s.push_str(&format!("cell {:?}: the last {} of {} log lines kept:\n", c.name, c.log.len(), c.log_kept));
        }
        for l in &c.log {
            s.push_str(&format!("cell {:?} log: {l}\n", c.name));
        }
        if let Some(storm) = &c.log_storm {
            s.push_str(&format!("cell {:?}: {storm}\n", c.name));
        }
    }
}

/// Steal during the run, and tasks whose cycle counts are off.
fn footer(r: &RunResult, s: &mut String) {
    let steal: Vec<String> = r.steal_ms.iter().map(|(cpu, ms)| format!("CPU {cpu} {ms:.0} ms")).collect();
    if !steal.is_empty() {
        s.push_str(&format!("Stolen by the host during the run: {}\n", steal.join(", ")));
    }
    let off: Vec<&str> = r.tasks.iter().filter(|t| !t.scribbled && !cycles_ok(t)).map(|t| t.name.as_str()).collect();
    if !off.is_empty() && !r.incomplete {
        s.push_str(&format!(
            "Cycle counts off by more than 1% of duration / period: {} (see overruns, skipped and steal)\n",
            off.join(", ")
        ));
    }
}

/// A series from a shared-memory histogram (ns), in us. Min, max and mean are exact; the percentiles
/// are the upper bounds of their buckets (clamped to the max), the standard deviation is taken from
/// the bucket midpoints.
fn series_from_hist(name: &str, l: std::collections::BTreeMap<String, String>, kind: Kind, h: &HistSummary) -> Series {
    if h.count == 0 || h.bucket_ns == 0 {
        return Series {
            name: name.into(),
            labels: l,
            unit: Unit::Us,
            kind,
            stats: Stats::default(),
            histogram: None,
            errors: 0,
        };
    }
    let total: u64 = h.buckets.iter().sum::<u64>() + h.overflow;
    let w = h.bucket_ns as f64;
    let q = |p: f64| -> f64 {
        let rank = ((p * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, c) in h.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return ((i as f64 + 1.0) * w).min(h.max_ns as f64).max(h.min_ns as f64);
            }
        }
        h.max_ns as f64
    };
    let mean = h.sum_ns as f64 / h.count as f64;
    let mut var = 0.0;
    for (i, c) in h.buckets.iter().enumerate() {
        if *c > 0 {
            let mid = ((i as f64 + 0.5) * w).clamp(h.min_ns as f64, h.max_ns as f64);
            var += *c as f64 * (mid - mean).powi(2);
        }
    }
    var += h.overflow as f64 * (h.max_ns as f64 - mean).powi(2);
    let stddev = if total > 0 { (var / total as f64).sqrt() } else { 0.0 };
    let last = h.buckets.iter().rposition(|c| *c > 0).map_or(0, |i| i + 1);
    Series {
        name: name.into(),
        labels: l,
        unit: Unit::Us,
        kind,
        stats: Stats {
            count: h.count,
            min: h.min_ns as f64 / 1e3,
            mean: mean / 1e3,
            median: q(0.5) / 1e3,
            p90: q(0.9) / 1e3,
            p99: q(0.99) / 1e3,
            p999: q(0.999) / 1e3,
            p9999: q(0.9999) / 1e3,
            max: h.max_ns as f64 / 1e3,
            stddev: stddev / 1e3,
        },
        histogram: Some(Histogram { bucket_width: w / 1e3, counts: h.buckets[..last].to_vec(), overflows: h.overflow }),
        errors: 0,
    }
}

fn count_series(name: &str, l: std::collections::BTreeMap<String, String>, v: u64) -> Series {
    let x = v as f64;
    Series {
        name: name.into(),
        labels: l,
        unit: Unit::Count,
        kind: Kind::Count,
        stats: Stats { count: 1, min: x, mean: x, median: x, p90: x, p99: x, p999: x, p9999: x, max: x, stddev: 0.0 },
        histogram: None,
        errors: 0,
    }
}

/// Suite `scenario` of the results document.
pub fn suite(plan: &Plan, r: &RunResult) -> Suite {
    let tasks: Vec<serde_json::Value> = plan
        .tasks
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.spec.name,
                "cell": t.cell.clone().unwrap_or_else(|| crate::plan::LINUX.into()),
                "cpu": t.spec.cpu,
                "priority": t.spec.priority,
                "period_us": t.spec.period_ns as f64 / 1e3,
                "offset_us": t.spec.offset_ns as f64 / 1e3,
                "deadline_us": t.spec.deadline_ns as f64 / 1e3,
                "workload": serde_json::to_value(&t.spec.work).unwrap_or_default(),
                "watchdog": t.spec.watchdog.map(|w| serde_json::json!({"time_us": w.time_ns as f64 / 1e3, "sensitivity": w.sensitivity})),
                "on_overrun": t.spec.missed.as_str(),
                "send": t.spec.send,
                "recv": t.spec.recv,
                "output": t.spec.output,
                "safe_value": t.spec.safe_value,
                "budget_us": t.budget_us,
            })
        })
        .collect();
    let cells: Vec<serde_json::Value> = plan
        .cells
        .iter()
        .map(|c| {
            let role = match &c.role {
                CellRole::Tasks => serde_json::json!("tasks"),
                CellRole::Controller { request, reply, precision } => {
                    serde_json::json!({"service": "controller", "request": request, "reply": reply, "precision": precision})
                }
                CellRole::Payload { payload, args, .. } => serde_json::json!({"payload": payload, "args": args}),
            };
            serde_json::json!({"name": c.name, "kind": c.kind.as_str(), "requested_kind": c.requested.as_str(), "cpu": c.cpu, "priority": c.priority, "runs": role})
        })
        .collect();
    let outcome_tasks: Vec<serde_json::Value> = r
        .tasks
        .iter()
        .map(|t| {
            if t.scribbled {
                // Nothing read from a scribbled block is the task's: its figures are unknown.
                return serde_json::json!({
                    "name": t.name,
                    "cell": t.cell, "cell_kind": t.cell_kind, "cpu": t.spec.cpu, "priority": t.spec.priority,
                    "period_us": t.spec.period_ns as f64 / 1e3,
                    "statistics_block": "scribbled",
                    "state": null, "message": null, "cycles": null, "expected": t.expected, "skipped": null,
                    "overruns": null, "longest_overrun_run": null, "trip_cycle": null, "corrupt_steps": null,
                    "on_corrupt": t.spec.on_corrupt.as_str(), "cycles_within_1pct": null, "messages": null,
                });
            }
            serde_json::json!({
                "name": t.name,
                "state": t.counters.state.map_or("?", |s| s.as_str()),
                "message": t.counters.message,
                "cycles": t.counters.cycles,
                "expected": t.expected,
                "skipped": t.counters.skipped,
                "overruns": t.counters.overruns,
                "longest_overrun_run": t.counters.longest,
                "trip_cycle": t.counters.trip_cycle,
                "corrupt_steps": t.counters.corrupt,
                "on_corrupt": t.spec.on_corrupt.as_str(),
                "cycles_within_1pct": cycles_ok(t),
                "messages": {
                    "sent": t.counters.sent,
                    "send_failed": t.counters.send_fail,
                    "received": t.counters.received,
                    "lost": t.counters.recv_lost,
                    "late": t.counters.late,
                    "wrong": t.counters.errors,
                    "unchecked": t.counters.unchecked,
                },
            })
        })
        .collect();
    let config = serde_json::json!({
        "scenario": plan.name,
        "description": plan.description,
        "file": plan.file.display().to_string(),
        "duration_s": plan.duration.as_secs_f64(),
        "measured_s": r.measured.as_secs_f64(),
        "master_cpu": plan.master_cpu,
        "cells": cells,
        "channels": plan.channels.iter().map(|c| serde_json::json!({"name": c.name, "capacity": c.frames, "frame_bytes": c.frame_bytes})).collect::<Vec<_>>(),
        "signals": plan.signals.iter().map(|s| serde_json::json!({"name": s.name, "values": s.values})).collect::<Vec<_>>(),
        "com": plan.coms.iter().map(|c| serde_json::json!({
            "name": c.name,
            "groups": c.groups.iter().map(|(id, name)| serde_json::json!({"id": id, "name": name})).collect::<Vec<_>>(),
            "signals": c.signals.iter().map(|s| serde_json::json!({"id": s.id, "name": s.name, "type": s.ty, "bytes": s.bytes, "dynamic": s.dynamic, "group": s.group})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "tasks": tasks,
        "ethercat": plan.ethercat.as_ref().map(|e| match e {
            crate::plan::PlanEthercat::Interface(i) => serde_json::json!({ "interface": i }),
            crate::plan::PlanEthercat::Simulated { devices, drop_after } => serde_json::json!({ "simulated": devices, "drop_after": drop_after }),
        }),
        "loads": plan.loads.iter().map(|l| serde_json::json!({"kind": l.kind.as_str(), "cpus": l.cpus})).collect::<Vec<_>>(),
        "outcome": {
            "tasks": outcome_tasks,
            "signals": r.signals,
            "cells": r.cells.iter().map(cell_outcome).collect::<Vec<_>>(),
            "steal_ms": r.steal_ms.iter().map(|(k, v)| (k.to_string(), *v)).collect::<std::collections::BTreeMap<_, _>>(),
            "errors": r.errors,
            "files": r.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        },
    });
    let mut suite = Suite::new("scenario", config);
    for t in r.tasks.iter().filter(|t| !t.scribbled) {
        let c = &t.counters;
        let l = labels!(
            "scenario" => plan.name,
            "task" => t.name,
            "cell" => t.cell,
            "cell_kind" => t.cell_kind,
            "cpu" => t.spec.cpu,
            "priority" => t.spec.priority,
            "period_us" => t.spec.period_ns as f64 / 1e3,
            "cycles" => c.cycles,
            "overruns" => c.overruns,
            "longest_overrun_run" => c.longest,
            "skipped" => c.skipped,
            "state" => c.state.map_or("?", |s| s.as_str()),
        );
        let mut e = series_from_hist("task_exec_time", l.clone(), Kind::ExecTime, &t.exec);
        e.errors = c.errors;
        suite.series.push(e);
        suite.series.push(series_from_hist("task_latency", l, Kind::Latency, &t.latency));
        for (name, v) in [
            ("task_cycles", c.cycles),
            ("task_overruns", c.overruns),
            ("task_longest_overrun_run", c.longest),
            ("task_skipped", c.skipped),
        ] {
            suite.series.push(count_series(name, labels!("scenario" => plan.name, "task" => t.name), v));
        }
    }
    for ch in &r.channels {
        for (dir, v) in [
            ("sent", ch.sent),
            ("received", ch.received),
            ("lost", ch.lost),
            ("refused", ch.refused),
            ("queued", ch.queued),
        ] {
            suite.series.push(count_series(
                "channel_messages",
                labels!("scenario" => plan.name, "channel" => ch.name, "direction" => dir),
                v,
            ));
        }
    }
    suite
}

/// A cell's end in the results document: the monitor's verdict, the cell's claim of what it handled
/// (`null` when impossible) with the most it can have handled, and its log's end and counts.
fn cell_outcome(c: &crate::run::CellResult) -> serde_json::Value {
    serde_json::json!({
        "name": c.name,
        "kind": c.kind.as_str(),
        "cpu": c.cpu,
        "status": c.status,
        "handled": c.handled,
        "handled_is": "the cell's claim",
        "handled_at_most": c.handled_bound,
        "start_ms": c.start.map(|d| d.as_secs_f64() * 1e3),
        "vm_exits": c.vm_exits,
        "log": {"last_lines": c.log, "kept": c.log_kept, "suppressed": c.log_suppressed, "storm": c.log_storm},
    })
}
