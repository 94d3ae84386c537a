//! Activation timing: the latency suite (actual start - intended release of a periodic activation, per
//! mode and tool) and scenarios (per task the CODESYS-style table of seed 003, per channel its messages),
//! each with histograms on a log count axis.

use maud::{Markup, html};

use super::hist::{self, MAX_OVERLAYS};
use super::suites::{Ctx, Picker};
use super::tables::Table;
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
        &crate::columns::LATENCY,
    );
    for row in crate::columns::latency(&lat, &overruns).rows {
        t.row(row);
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

pub(super) fn scenario(ctx: &mut Ctx<'_, '_>, pick: &mut Picker<'_>) -> Result<Markup, ReportError> {
    let exec = pick.take("task_exec_time");
    let lat = pick.take("task_latency");
    // The count series repeat what the task labels already hold; they are shown through those.
    pick.take_if(|s| {
        matches!(s.name.as_str(), "task_cycles" | "task_overruns" | "task_longest_overrun_run" | "task_skipped")
    });
    let channels = pick.take("channel_messages");
    let mut t = Table::new(
        format!("{}-tasks", ctx.id),
        format!(
            "Task statistics of scenario {} (as CODESYS shows them, seed 003): execution time and activation \
             latency (actual start - intended release) in µs; {} s measured.",
            ctx.config_text("scenario"),
            ctx.config_text("measured_s")
        ),
        &crate::columns::TASKS,
    );
    for row in crate::columns::tasks(ctx.suite).rows {
        t.row(row);
    }
    let mut parts = Vec::new();
    if !t.is_empty() {
        parts.push(t.render(ctx.page));
    }
    if !channels.is_empty() {
        let mut ct = Table::new(
            format!("{}-channels", ctx.id),
            "Messages per channel: sent, received, lost (gaps in the sequence numbers), refused (the ring was \
             full), queued at the end, and sent per second measured.",
            &crate::columns::CHANNELS,
        );
        for row in crate::columns::channels(ctx.suite).rows {
            ct.row(row);
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
