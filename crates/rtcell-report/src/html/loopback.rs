//! The loopback suite (seed 000 Table I and Fig. 2: round trip against payload size per cell kind) and
//! the c2c floor, which both the c2c suite and loopback runs carry.

use maud::{Markup, html};

use super::plots::{self, Axis, Chart, Line, Marks, Scale};
use super::suites::{Ctx, Picker};
use super::tables::Table;
use super::{figure, fmt_value, hist, label, labels_text, reference};
use crate::doc::{Series, Unit};
use crate::error::ReportError;

/// The labels that make one loopback configuration (one line of the figure, one table).
const GROUP_KEYS: [&str; 4] = ["cell", "transport", "notify", "load"];

fn group_key(s: &Series) -> Vec<String> {
    GROUP_KEYS.iter().map(|k| label(s, k).unwrap_or("").to_string()).collect()
}

fn group_name(key: &[String]) -> String {
    let (cell, transport, notify) = (&key[0], &key[1], &key[2]);
    if transport == "pipe" {
        "Linux baseline: pipe pair, echo thread".to_string()
    } else if notify.is_empty() {
        format!("{cell} cell, {transport}")
    } else {
        format!("{cell} cell, {transport}, notify {notify}")
    }
}

fn bytes(s: &Series) -> Option<u64> {
    label(s, "bytes").and_then(|b| b.parse().ok())
}

/// µs of a series in its unit (loopback series are in µs; tolerate ns).
fn us(s: &Series, v: f64) -> f64 {
    if s.unit == Unit::Ns { v / 1000.0 } else { v }
}

pub(super) fn loopback(ctx: &mut Ctx<'_, '_>, pick: &mut Picker<'_>) -> Result<Markup, ReportError> {
    let rtt = pick.take_if(|s| s.name == "loopback_rtt" && matches!(s.unit, Unit::Us | Unit::Ns));
    let throughput = pick.take("loopback_throughput");
    let starts = pick.take("cell_start");
    let exits = pick.take("vm_exits");
    let floor = pick.take_if(|s| s.name.starts_with("c2c_"));

    let mut groups: Vec<(Vec<String>, Vec<&Series>)> = Vec::new();
    for s in &rtt {
        let key = group_key(s);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(s),
            None => groups.push((key, vec![s])),
        }
    }
    for (_, v) in &mut groups {
        v.sort_by_key(|s| bytes(s).unwrap_or(u64::MAX));
    }
    let cpus = format!("master CPU {}, cell CPU {}", ctx.config_text("master_cpu"), ctx.config_text("cell_cpu"));
    let mut parts = Vec::new();
    if !groups.is_empty() {
        parts.push(size_figure(ctx, &groups, &cpus)?);
    }
    for (gi, (key, members)) in groups.iter().enumerate() {
        parts.push(group_table(ctx, gi, key, members, &throughput, &cpus));
    }
    if !starts.is_empty() {
        let mut t = Table::new(
            format!("{}-start", ctx.id),
            "Cell start: from spawning the cell to its first heartbeat (ms).",
            &["cell", "cpu", "start ms"],
        );
        for s in &starts {
            t.row(vec![
                label(s, "cell").unwrap_or("-").into(),
                label(s, "cpu").unwrap_or("-").into(),
                format!("{:.3}", us(s, s.stats.max) / 1000.0),
            ]);
        }
        parts.push(t.render(ctx.page));
    }
    if !exits.is_empty() {
        parts.push(exits_table(ctx, &exits));
    }
    if !floor.is_empty() {
        parts.push(html! { h3 { "c2c floor between the same CPUs" } });
        parts.push(c2c_part(ctx, &floor)?);
    }
    Ok(html! { @for p in &parts { (p) } })
}

/// Seed 000 Fig. 2: median and p99 of the round trip per size, one colour per configuration, with the
/// published means of other platforms as crosses.
fn size_figure(
    ctx: &mut Ctx<'_, '_>,
    groups: &[(Vec<String>, Vec<&Series>)],
    cpus: &str,
) -> Result<Markup, ReportError> {
    let mut sizes: Vec<u64> = groups.iter().flat_map(|(_, v)| v.iter().filter_map(|s| bytes(s))).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let index = |b: u64| sizes.iter().position(|&x| x == b).map(|i| i as f64);
    let mut lines = Vec::new();
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    let mut see = |v: f64| {
        if v > 0.0 {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    };
    for (gi, (key, members)) in groups.iter().enumerate() {
        let with: Vec<&&Series> = members.iter().filter(|s| s.stats.count > 0).collect();
        let pts = |f: &dyn Fn(&Series) -> f64| -> Vec<(f64, f64)> {
            with.iter().filter_map(|s| Some((index(bytes(s)?)?, us(s, f(s))))).collect()
        };
        let median = pts(&|s| s.stats.median);
        let p99 = pts(&|s| s.stats.p99);
        median.iter().chain(&p99).for_each(|&(_, y)| see(y));
        let name = group_name(key);
        lines.push(Line {
            label: format!("{name}: median"),
            points: median,
            color: plots::color(gi),
            dashed: false,
            markers: true,
        });
        lines.push(Line {
            label: format!("{name}: p99"),
            points: p99,
            color: plots::color(gi),
            dashed: true,
            markers: false,
        });
    }
    // Published figures at the sizes we measured, one set of crosses per platform and condition.
    let mut marks: Vec<Marks> = Vec::new();
    for (_, members) in groups {
        for s in members {
            for r in crate::published::rows_for_series(&ctx.suite.suite, s) {
                let (Some(mean), Some(b)) = (r.mean, r.payload_bytes) else { continue };
                let Some(x) = index(u64::from(b)) else { continue };
                let v = if r.unit == "ns" { mean / 1000.0 } else { mean };
                let label = format!("{}, mean", reference::row_label(r));
                match marks.iter_mut().find(|m| m.label == label) {
                    Some(m) if !m.points.contains(&(x, v)) => m.points.push((x, v)),
                    Some(_) => {}
                    None => {
                        let color = plots::color(groups.len() + marks.len());
                        marks.push(Marks { label, points: vec![(x, v)], color });
                    }
                }
            }
        }
    }
    marks.iter().flat_map(|m| &m.points).for_each(|&(_, y)| see(y));
    if hi <= 0.0 {
        lo = 0.1;
        hi = 1.0;
    }
    let chart = Chart {
        title: "Loopback round trip against payload size (µs, log)".into(),
        x: Axis {
            desc: "payload bytes (the measured sizes, evenly spaced)".into(),
            scale: Scale::Categories(sizes.iter().map(u64::to_string).collect()),
            lo: 0.0,
            hi: 0.0,
        },
        y: Axis { desc: "round trip (µs, log)".into(), scale: Scale::Log10, lo: lo / 1.5, hi: hi * 1.5 },
        lines,
        marks,
        markers: Vec::new(),
    };
    let svg = plots::render(&chart)?;
    let n = ctx.page.next_figure();
    let iterations = ctx.config_text("iterations");
    let crosses: Vec<&str> = chart.marks.iter().map(|m| m.label.as_str()).collect();
    Ok(figure(
        &format!("{}-rtt-size", ctx.id),
        n,
        svg,
        html! {
            "Round trip master → cell → master against payload size, per cell kind (seed 000 Fig. 2): median (solid, dots) \
             and p99 (dashed) of " (iterations) " round trips per size, in µs on a log axis; every byte checked. "
            (cpus) ", load " (ctx.config_text("load")) "."
            @if crosses.is_empty() {
                " No published figure of another platform is at these sizes."
            } @else {
                " Crosses: published means of other platforms at the same sizes, for scale only — not measured here: "
                (crosses.join("; ")) "."
            }
        },
    ))
}

fn group_table(
    ctx: &mut Ctx<'_, '_>,
    gi: usize,
    key: &[String],
    members: &[&Series],
    throughput: &[&Series],
    cpus: &str,
) -> Markup {
    let load = &key[3];
    let condition = if load == "none" || load.is_empty() { "idle" } else { "interference" };
    let mut t = Table::new(
        format!("{}-table-{gi}", ctx.id),
        format!(
            "Loopback round trip: {}; {cpus}, load {load} (µs, round trip, {} per size). The last two columns are \
             seed 000 Table I's STM32MP157 Jailhouse A7 cell ({condition}), another platform, for scale only.",
            group_name(key),
            ctx.config_text("iterations")
        ),
        &crate::columns::LOOPBACK,
    );
    for row in crate::columns::loopback(&ctx.suite.suite, members, throughput).rows {
        t.row(row);
    }
    t.render(ctx.page)
}

fn exits_table(ctx: &mut Ctx<'_, '_>, exits: &[&Series]) -> Markup {
    let mut t = Table::new(
        format!("{}-exits", ctx.id),
        "VM exits of the kvm cell's vCPU during the measured round trips (goal: 0). irq_exits are host \
         interrupts (the timer tick) taken while the guest ran; isolcpus + nohz_full on the cell CPU removes them.",
        &["cell", "bytes", "exits", "by reason"],
    );
    for s in exits {
        let detail =
            labels_text(s.labels.iter().filter(|(k, _)| k.starts_with("exits.") && k.as_str() != "exits.exits"));
        t.row(vec![
            label(s, "cell").unwrap_or("-").into(),
            label(s, "bytes").unwrap_or("-").into(),
            fmt_value(s.stats.max, Unit::Count),
            detail.replace("exits.", ""),
        ]);
    }
    t.render(ctx.page)
}

/// The c2c suite: the floor table and its histograms.
pub(super) fn c2c_suite(ctx: &mut Ctx<'_, '_>, pick: &mut Picker<'_>) -> Result<Markup, ReportError> {
    let series = pick.take_if(|s| s.name.starts_with("c2c_"));
    if series.is_empty() {
        return Ok(html! {});
    }
    let mut parts = vec![c2c_part(ctx, &series)?];
    for (i, s) in series.iter().enumerate() {
        let (title, what) = match s.name.as_str() {
            "c2c_round_trip" => ("Cache-line round trip", "Cache line bounced between two CPUs, each round trip timed"),
            "c2c_one_way" => {
                ("Cache-line one way", "Cache line passed between two CPUs, one way = a batch's round trip / 2")
            }
            other => (other, other),
        };
        if let Some(f) = hist::figure_of(&format!("{}-hist-{i}", ctx.id), title, what, &[s], &["cpus"], ctx.page)? {
            parts.push(f);
        }
    }
    Ok(html! { @for p in &parts { (p) } })
}

fn c2c_part(ctx: &mut Ctx<'_, '_>, series: &[&Series]) -> Result<Markup, ReportError> {
    let mut t = Table::new(
        format!("{}-c2c", ctx.id),
        "A cache line bounced between two CPUs: the physical floor under every shared-memory channel. Round \
         trips are timed one by one; one way is a batch's round trip / 2.",
        &["series", "what", "cpus", "unit", "count", "min", "median", "mean", "p99", "p99.9", "max"],
    );
    for s in series {
        let st = &s.stats;
        let what = match s.name.as_str() {
            "c2c_round_trip" => "round trip, each timed".to_string(),
            "c2c_one_way" => "one way, batch round trip / 2".to_string(),
            _ => super::kind_text(s.kind).to_string(),
        };
        t.row(vec![
            s.name.clone(),
            what,
            label(s, "cpus").unwrap_or("-").into(),
            super::unit_text(s.unit).into(),
            st.count.to_string(),
            fmt_value(st.min, s.unit),
            fmt_value(st.median, s.unit),
            fmt_value(st.mean, s.unit),
            fmt_value(st.p99, s.unit),
            fmt_value(st.p999, s.unit),
            fmt_value(st.max, s.unit),
        ]);
    }
    // Published one-way figures of other machines, as rows of the same table.
    let mut seen = Vec::new();
    for s in series {
        for r in crate::published::rows_for_series(&ctx.suite.suite, s) {
            if seen.contains(&r) {
                continue;
            }
            seen.push(r);
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| v.to_string());
            t.other_row(vec![
                r.metric.clone(),
                format!("{} (other platform)", reference::row_label(r)),
                "-".into(),
                r.unit.clone(),
                "-".into(),
                f(r.min),
                // Sources that quote a median put it in the table's mean column, with condition "median".
                if r.condition == "median" { f(r.mean) } else { "-".into() },
                if r.condition == "median" { "-".into() } else { f(r.mean) },
                "-".into(),
                "-".into(),
                f(r.max),
            ]);
        }
    }
    Ok(t.render(ctx.page))
}
