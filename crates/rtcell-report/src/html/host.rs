//! The first section of the page: the run, the host, and the warnings. A virtual machine, stolen time, a
//! CPU that is not isolated or a kernel that is not PREEMPT_RT change how every figure below must be read,
//! so each such fact is flagged here with what it means, whether or not the run recorded a warning for it.

use maud::{Markup, html};

use crate::doc::Results;

pub(super) fn render(results: &Results) -> Markup {
    let h = &results.host;
    let vm = h.hypervisor.as_deref();
    let steal = h.steal_pct;
    let rows: Vec<(&str, String, Option<String>)> = vec![
        ("CPU", format!("{} ({} CPUs)", h.cpu_model, h.cpus), None),
        (
            "TSC",
            h.tsc_khz.map_or("unavailable".into(), |k| format!("{:.3} GHz", k as f64 / 1e6)),
            h.tsc_khz.is_none().then(|| "no calibrated TSC: times come from a slower clock".to_string()),
        ),
        ("kernel", h.kernel.clone(), None),
        (
            "preemption model",
            h.preempt.clone(),
            (h.preempt != "rt").then(|| {
                "not PREEMPT_RT: a kernel section that cannot be preempted delays real-time threads, so maxima \
                 include kernel latencies"
                    .to_string()
            }),
        ),
        (
            "isolated CPUs",
            if h.isolated_cpus.is_empty() {
                "none".into()
            } else {
                h.isolated_cpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            },
            h.isolated_cpus.is_empty().then(|| {
                "no isolcpus/nohz_full: the cell CPUs also run kernel housekeeping (timer tick, workqueues)".to_string()
            }),
        ),
        (
            "hypervisor",
            vm.map_or("none (bare metal)".into(), |v| format!("{v}: this host is a virtual machine")),
            vm.map(|_| "the outer hypervisor preempts our vCPUs: maxima include its delays".to_string()),
        ),
        (
            "steal time during the run",
            steal.map_or("not measured".into(), |s| format!("{s:.2}% of CPU time")),
            steal.filter(|&s| s > 0.0).map(|s| format!("{s:.2}% of the time the outer host ran something else")),
        ),
        ("KVM", h.kvm.clone(), (h.kvm == "nested").then(|| "kvm cells run nested: VM exits cost more".to_string())),
    ];
    html! {
        section id="host" {
            section.warnings id="warnings" {
                h2 { "Read this first: warnings" }
                @if results.warnings.is_empty() {
                    p { "The run recorded no warnings." }
                } @else {
                    ul { @for w in &results.warnings { li { (w) } } }
                }
            }
            h2 { "Host and run" }
            div.wide {
                p.caption { "The machine the figures were measured on. Flagged facts change how to read every figure." }
                table id="host-facts" {
                    tr { th { "fact" } th { "value" } th { "what it means for the figures" } }
                    @for (what, value, flag) in &rows {
                        tr {
                            th scope="row" { (what) }
                            td { (value) }
                            td { @if let Some(f) = flag { span.flag { (f) } } }
                        }
                    }
                    tr { th scope="row" { "kernel command line" } td colspan="2" { code { (h.cmdline) } } }
                }
                table id="run-facts" {
                    tr { th scope="row" { "rtcell" } td { (results.rtcell.version) @if let Some(g) = &results.rtcell.git { " (" (g) ")" } } }
                    tr { th scope="row" { "started (UTC)" } td { (results.started_at) } }
                    tr {
                        th scope="row" { "duration" }
                        td { (results.duration_s.map_or("not recorded".into(), |d| format!("{d:.1} s"))) }
                    }
                    @if let Some(c) = &results.command { tr { th scope="row" { "command" } td { code { (c) } } } }
                    tr { th scope="row" { "schema" } td { (results.schema) } }
                    tr {
                        th scope="row" { "complete" }
                        td { @if results.incomplete { span.flag { "no: cut short" } } @else { "yes" } }
                    }
                }
            }
            @if let Some(check) = check_table(results) { (check) }
        }
    }
}

/// The host check recorded with the run (`host.check`: the verdicts of `rtcell check` for the cell CPU),
/// when the document has one. Read as JSON, field by field, so older and newer layouts of it still show.
fn check_table(results: &Results) -> Option<Markup> {
    let host = serde_json::to_value(&results.host).ok()?;
    let check = host.get("check")?;
    let verdicts = check.get("verdicts")?.as_array()?;
    let text = |v: &serde_json::Value, k: &str| match v.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(x) => x.to_string(),
    };
    let summary: Vec<String> = check
        .as_object()?
        .iter()
        .filter(|(k, v)| !matches!(k.as_str(), "verdicts" | "cpu") && (v.is_number() || v.is_string()))
        .map(|(k, v)| format!("{k} {}", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
        .collect();
    let is_ok = |v: &serde_json::Value| text(v, "level").eq_ignore_ascii_case("ok");
    let ok: Vec<String> = verdicts.iter().filter(|v| is_ok(v)).map(|v| text(v, "item")).collect();
    let not_ok: Vec<&serde_json::Value> = verdicts.iter().filter(|v| !is_ok(v)).collect();
    // Collapsed: it can run to dozens of items, and the warnings above already say what matters most.
    Some(html! {
        details id="host-check" {
            summary {
                "Host check of cell CPU " (text(check, "cpu")) " when the run started, as rtcell check reports it"
                @if !summary.is_empty() { " (" (summary.join(", ")) ")" }
                ": " (not_ok.len()) " items to improve"
            }
            @if !ok.is_empty() { p.note { "ok: " (ok.join(", ")) "." } }
            @if !not_ok.is_empty() {
                div.wide {
                    table {
                        tr { th { "item" } th { "level" } th { "found" } th { "fix" } }
                        @for v in &not_ok {
                            tr {
                                td { (text(v, "item")) }
                                td { span.flag { (text(v, "level")) } }
                                td { (text(v, "detail")) }
                                td { (text(v, "fix")) }
                            }
                        }
                    }
                }
            }
        }
    })
}
