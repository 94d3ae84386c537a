//! The control suite (seed 000 Fig. 3/4): per arithmetic, the controller step's execution time and the
//! offloaded round trip per placement, as tables and as histograms with a log count axis.

use maud::{Markup, html};

use super::suites::{Ctx, Picker};
use super::tables::Table;
use super::{fmt_value, hist, label, slug};
use crate::doc::Series;
use crate::error::ReportError;

pub(super) fn render(ctx: &mut Ctx<'_, '_>, pick: &mut Picker<'_>) -> Result<Markup, ReportError> {
    let exec = pick.take("control_exec");
    let rtt = pick.take("control_rtt");
    let clock = pick.take("control_clock");
    let probe = pick.take("control_probe_rtt");
    let loopback = pick.take("loopback_rtt");
    let exits = pick.take("vm_exits");
    // Precisions in the order the run measured them.
    let mut precisions: Vec<String> = Vec::new();
    for s in exec.iter().chain(&rtt) {
        let p = label(s, "precision").unwrap_or("-").to_string();
        if !precisions.contains(&p) {
            precisions.push(p);
        }
    }
    fn of<'s>(list: &[&'s Series], p: &str) -> Vec<&'s Series> {
        list.iter().filter(|s| label(s, "precision").unwrap_or("-") == p).copied().collect()
    }
    let conditions = format!(
        "{}-state controller, {} steps per row; master CPU {}, cell CPU {}, load {}",
        ctx.config_text("states"),
        ctx.config_text("iterations"),
        ctx.config_text("master_cpu"),
        ctx.config_text("cell_cpu"),
        ctx.config_text("load")
    );
    let mut parts = Vec::new();
    for p in &precisions {
        let mut t = Table::new(
            format!("{}-table-{}", ctx.id, slug(p)),
            format!(
                "Controller step, {p}: {conditions} (µs). exec: the step alone, timed in the cell with its TSC; \
                 round trip: the master's TSC from sending the inputs to receiving the output; clock: an empty \
                 region timed like the step; probe round trip: a message of the same size through the same cell."
            ),
            &["cell", "time", "count", "min", "max", "mean", "median", "p99", "p99.9", "errors"],
        );
        let (e, r, c, pr) = (of(&exec, p), of(&rtt, p), of(&clock, p), of(&probe, p));
        let placements: Vec<&str> = {
            let mut v: Vec<&str> = Vec::new();
            for s in e.iter().chain(&r) {
                let cell = label(s, "cell").unwrap_or("-");
                if !v.contains(&cell) {
                    v.push(cell);
                }
            }
            v
        };
        for cell in &placements {
            let at = |list: &[&Series]| -> Option<Vec<String>> {
                list.iter().find(|s| label(s, "cell").unwrap_or("-") == *cell).map(|s| row(cell, "", s))
            };
            for (what, r) in
                [("exec", at(&e)), ("round trip", at(&r)), ("clock", at(&c)), ("probe round trip", at(&pr))]
            {
                if let Some(mut cells) = r {
                    cells[1] = what.to_string();
                    t.row(cells);
                }
            }
        }
        parts.push(html! { h3 { "Precision " (p) } });
        parts.push(t.render(ctx.page));
        if let Some(f) = hist::figure_of(
            &format!("{}-exec-{}", ctx.id, slug(p)),
            &format!("Controller step alone, {p}"),
            &format!("Execution time of one controller step, {p}, per placement (seed 000 Fig. 3)"),
            &e,
            &["cell"],
            ctx.page,
        )? {
            parts.push(f);
        }
        if let Some(f) = hist::figure_of(
            &format!("{}-rtt-{}", ctx.id, slug(p)),
            &format!("Offloaded controller step, {p}"),
            &format!("Offloaded controller step, master's round trip, {p}, per cell kind (seed 000 Fig. 4)"),
            &r,
            &["cell"],
            ctx.page,
        )? {
            parts.push(f);
        }
    }
    if !loopback.is_empty() {
        let mut t = Table::new(
            format!("{}-loopback", ctx.id),
            format!(
                "Loopback round trip of a {}-byte message through the same cells, measured before the steps (µs).",
                ctx.config_text("message_bytes")
            ),
            &["cell", "time", "count", "min", "max", "mean", "median", "p99", "p99.9", "errors"],
        );
        for s in &loopback {
            t.row(row(label(s, "cell").unwrap_or("-"), "loopback round trip", s));
        }
        parts.push(t.render(ctx.page));
    }
    if !exits.is_empty() {
        let mut t = Table::new(
            format!("{}-exits", ctx.id),
            "VM exits of the kvm cell's vCPU during the measured steps (goal: 0).",
            &["precision", "cell", "exits", "by reason"],
        );
        for s in &exits {
            let detail: Vec<String> = s
                .labels
                .iter()
                .filter_map(|(k, v)| k.strip_prefix("exits.").filter(|k| *k != "exits").map(|k| format!("{k} {v}")))
                .collect();
            t.row(vec![
                label(s, "precision").unwrap_or("-").into(),
                label(s, "cell").unwrap_or("-").into(),
                fmt_value(s.stats.max, s.unit),
                detail.join(", "),
            ]);
        }
        parts.push(t.render(ctx.page));
    }
    Ok(html! { @for p in &parts { (p) } })
}

fn row(cell: &str, what: &str, s: &Series) -> Vec<String> {
    let st = &s.stats;
    let v = |x: f64| if st.count == 0 { "-".to_string() } else { fmt_value(x, s.unit) };
    vec![
        cell.to_string(),
        what.to_string(),
        st.count.to_string(),
        v(st.min),
        v(st.max),
        v(st.mean),
        v(st.median),
        v(st.p99),
        v(st.p999),
        s.errors.to_string(),
    ]
}
