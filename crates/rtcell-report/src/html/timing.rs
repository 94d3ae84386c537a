//! Activation timing: the latency suite (actual start - intended release of a periodic activation, per
//! mode and tool) and scenarios (per task the CODESYS-style table of seed 003, per channel its messages),
//! each with histograms on a log count axis.

use maud::{Markup, html};

use super::hist::{self, MAX_OVERLAYS};
use super::suites::{Ctx, Picker};
use super::tables::Table;
use super::{fmt_value, label};
use crate::doc::{Series, Unit};
use crate::error::ReportError;

pub(super) fn latency(ctx: &mut Ctx<'_, '_>, pick: &mut Picker<'_>) -> Result<Markup, ReportError> {
    let lat = pick.take("latency");
    let overruns = pick.take("latency_overruns");
    if lat.is_empty() {
        return Ok(html! {});
    }
    let conditions = format!(
        "CPU {}, period {} µs, SCHED_FIFO {}, load {}",
        ctx.config_text("cpu"),
        ctx.config_text("period_us"),
        ctx.config_text("priority"),
        ctx.config_text("load")
    );
    let mut t = Table::new(
        format!("{}-table", ctx.id),
        format!(
            "Activation latency, one way: actual start - intended release ({conditions}); figures in each series' \
             unit (µs), min/avg/max/stddev/overruns as Xenomai's latency -s, percentiles nearest-rank."
        ),
        &[
            "tool",
            "mode",
            "cell",
            "activations",
            "min",
            "avg",
            "stddev",
            "median",
            "p99",
            "p99.9",
            "p99.99",
            "max",
            "overruns",
            "dropped",
        ],
    );
    for s in &lat {
        let st = &s.stats;
        let v = |x: f64| if st.count == 0 { "-".to_string() } else { fmt_value(x, s.unit) };
        let ov =
            overruns.iter().find(|o| o.labels == s.labels).map_or("-".into(), |o| fmt_value(o.stats.max, Unit::Count));
        t.row(vec![
            label(s, "tool").unwrap_or("-").into(),
            label(s, "mode").unwrap_or("-").into(),
            label(s, "cell").unwrap_or("-").into(),
            st.count.to_string(),
            v(st.min),
            v(st.mean),
            v(st.stddev),
            v(st.median),
            v(st.p99),
            v(st.p999),
            v(st.p9999),
            v(st.max),
            ov,
            s.errors.to_string(),
        ]);
    }
    let mut parts = vec![t.render(ctx.page)];
    for (i, chunk) in lat.chunks(MAX_OVERLAYS).enumerate() {
        let what = format!("Activation latency per mode and tool, {conditions}");
        if let Some(f) = hist::figure_of(
            &format!("{}-hist-{i}", ctx.id),
            "Activation latency per mode and tool",
            &what,
            chunk,
            &["tool", "mode", "cell"],
            ctx.page,
        )? {
            parts.push(f);
        }
    }
    Ok(html! { @for p in &parts { (p) } })
}

/// Expected releases of a task (duration / period) from the recorded outcome, when present.
fn expected(ctx: &Ctx<'_, '_>, task: &str) -> Option<u64> {
    let tasks = ctx.suite.config.get("outcome")?.get("tasks")?.as_array()?;
    tasks.iter().find(|t| t.get("name").and_then(|n| n.as_str()) == Some(task))?.get("expected")?.as_u64()
}

pub(super) fn scenario(ctx: &mut Ctx<'_, '_>, pick: &mut Picker<'_>) -> Result<Markup, ReportError> {
    let exec = pick.take("task_exec_time");
    let lat = pick.take("task_latency");
    // The count series repeat what the task labels already hold; they are shown through those.
    let counts = pick.take_if(|s| {
        matches!(s.name.as_str(), "task_cycles" | "task_overruns" | "task_longest_overrun_run" | "task_skipped")
    });
    let channels = pick.take("channel_messages");
    let mut tasks: Vec<&str> = Vec::new();
    for s in exec.iter().chain(&lat) {
        let t = label(s, "task").unwrap_or("-");
        if !tasks.contains(&t) {
            tasks.push(t);
        }
    }
    let count_of = |task: &str, name: &str, key: &str, s: Option<&Series>| -> String {
        counts
            .iter()
            .find(|c| c.name == name && label(c, "task") == Some(task))
            .map(|c| fmt_value(c.stats.max, Unit::Count))
            .or_else(|| s.and_then(|s| label(s, key)).map(str::to_string))
            .unwrap_or_else(|| "-".into())
    };
    let mut t = Table::new(
        format!("{}-tasks", ctx.id),
        format!(
            "Task statistics of scenario {} (as CODESYS shows them, seed 003): execution time and activation \
             latency (actual start - intended release) in µs; {} s measured.",
            ctx.config_text("scenario"),
            ctx.config_text("measured_s")
        ),
        &[
            "task",
            "cell",
            "cpu",
            "priority",
            "period µs",
            "cycles",
            "expected",
            "exec min",
            "exec avg",
            "exec max",
            "lat min",
            "lat avg",
            "lat max",
            "overruns",
            "longest run",
            "skipped",
            "state",
        ],
    );
    for task in &tasks {
        let e = exec.iter().find(|s| label(s, "task") == Some(task)).copied();
        let l = lat.iter().find(|s| label(s, "task") == Some(task)).copied();
        let any = e.or(l);
        let lab = |k: &str| any.and_then(|s| label(s, k)).unwrap_or("-").to_string();
        let fig = |s: Option<&Series>, f: fn(&Series) -> f64| {
            s.filter(|s| s.stats.count > 0).map_or("-".into(), |s| fmt_value(f(s), s.unit))
        };
        t.row(vec![
            task.to_string(),
            format!("{} ({})", lab("cell"), lab("cell_kind")),
            lab("cpu"),
            lab("priority"),
            lab("period_us"),
            count_of(task, "task_cycles", "cycles", any),
            expected(ctx, task).map_or("-".into(), |v| v.to_string()),
            fig(e, |s| s.stats.min),
            fig(e, |s| s.stats.mean),
            fig(e, |s| s.stats.max),
            fig(l, |s| s.stats.min),
            fig(l, |s| s.stats.mean),
            fig(l, |s| s.stats.max),
            count_of(task, "task_overruns", "overruns", any),
            count_of(task, "task_longest_overrun_run", "longest_overrun_run", any),
            count_of(task, "task_skipped", "skipped", any),
            lab("state"),
        ]);
    }
    let mut parts = Vec::new();
    if !t.is_empty() {
        parts.push(t.render(ctx.page));
    }
    if !channels.is_empty() {
        let mut names: Vec<&str> = Vec::new();
        for s in &channels {
            let n = label(s, "channel").unwrap_or("-");
            if !names.contains(&n) {
                names.push(n);
            }
        }
        let mut ct = Table::new(
            format!("{}-channels", ctx.id),
            "Messages per channel: sent, received, and lost (gaps in the sequence numbers).",
            &["channel", "sent", "received", "lost"],
        );
        for n in names {
            let dir = |d: &str| {
                channels
                    .iter()
                    .find(|s| label(s, "channel") == Some(n) && label(s, "direction") == Some(d))
                    .map_or("-".into(), |s| fmt_value(s.stats.max, Unit::Count))
            };
            ct.row(vec![n.to_string(), dir("sent"), dir("received"), dir("lost")]);
        }
        parts.push(ct.render(ctx.page));
    }
    for (list, title, what, tag) in [
        (&exec, "Task execution time", "Task execution time, per task", "exec"),
        (
            &lat,
            "Task activation latency",
            "Task activation latency (actual start - intended release), per task",
            "latency",
        ),
    ] {
        for (i, chunk) in list.chunks(MAX_OVERLAYS).enumerate() {
            let id = format!("{}-{tag}-{i}", ctx.id);
            if let Some(f) = hist::figure_of(&id, title, what, chunk, &["task"], ctx.page)? {
                parts.push(f);
            }
        }
    }
    Ok(html! { @for p in &parts { (p) } })
}
