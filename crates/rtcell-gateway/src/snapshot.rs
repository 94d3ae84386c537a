//! Turning a run's live view into API messages: every figure read from shared memory as the report
//! reads it, never waiting on the real-time side.

use rtcell_scenario::Live;
use rtcell_scenario::plan::{Plan, PlanSignal};
use rtcell_shm::RegionView;
use rtcell_tasks::read_counters;
use rtcell_tasks::stats::{exec_channel, latency_channel, read_histogram};

use crate::pb;
use crate::runs::RunSlot;

/// CLOCK_MONOTONIC, ns.
pub fn mono_ns() -> u64 {
    rtcell_host::clock::mono_ns()
}

pub fn run_info(slot: &RunSlot) -> pb::RunInfo {
    let o = slot.outcome();
    pb::RunInfo {
        run_id: slot.id.clone(),
        scenario: slot.scenario.clone(),
        state: slot.state().into(),
        duration_s: slot.duration.as_secs_f64(),
        elapsed_s: slot.live().map_or(0.0, |l| elapsed_s(l)),
        out_dir: slot.out_dir.display().to_string(),
        error: o.and_then(|o| o.error.clone()).unwrap_or_default(),
        exit_code: o.map_or(0, |o| o.exit_code),
    }
}

fn elapsed_s(live: &Live) -> f64 {
    match live.window() {
        Some((start, end)) => (mono_ns().min(end).saturating_sub(start)) as f64 / 1e9,
        None => 0.0,
    }
}

/// A histogram channel of the region; an absent or corrupt one reads as empty.
pub fn histogram(region: &RegionView<'_>, channel: &str, buckets: bool) -> pb::Histogram {
    let Ok(h) = read_histogram(region, channel) else {
        return pb::Histogram::default();
    };
    let q = |q: f64| h.quantile_upper_ns(q).unwrap_or(0);
    pb::Histogram {
        count: h.count,
        min_ns: h.min().unwrap_or(0),
        max_ns: h.max().unwrap_or(0),
        sum_ns: h.sum,
        p50_ns: q(0.5),
        p99_ns: q(0.99),
        p999_ns: q(0.999),
        bucket_ns: h.bucket_width_ns,
        buckets: if buckets { h.buckets().map(|(_, c)| c).collect() } else { Vec::new() },
        overflow: h.overflow,
    }
}

pub fn cell_states(live: &Live) -> Vec<pb::CellState> {
    live.cells()
        .iter()
        .map(|c| pb::CellState {
            name: c.name.clone(),
            kind: c.kind.clone(),
            cpu: c.cpu as u32,
            status: c.status.clone(),
            finished: c.finished,
            handled: c.handled,
            vm_exits: c.vm_exits.clone().into_iter().collect(),
            origin: "scenario".into(),
        })
        .collect()
}

/// Statistics of every task, channel and cell of the run now.
pub fn stats(slot: &RunSlot, buckets: bool) -> pb::Stats {
    let mut s = pb::Stats { mono_ns: mono_ns(), run_id: slot.id.clone(), ..Default::default() };
    let Some(live) = slot.live() else {
        return s;
    };
    s.elapsed_s = elapsed_s(live);
    s.finished = live.finished();
    s.cells = cell_states(live);
    let region = live.region();
    for t in &live.plan.tasks {
        let n = &t.spec.name;
        let c = read_counters(&region, n).unwrap_or_default();
        s.tasks.push(pb::TaskStats {
            name: n.clone(),
            cell: t.cell.clone().unwrap_or_else(|| rtcell_scenario::plan::LINUX.into()),
            state: c.state.map_or("?", |st| st.as_str()).into(),
            cycles: c.cycles,
            overruns: c.overruns,
            skipped: c.skipped,
            watchdog_over: c.watchdog_over,
            latency: Some(histogram(&region, &latency_channel(n), buckets)),
            exec: Some(histogram(&region, &exec_channel(n), buckets)),
            errors: c.errors,
        });
    }
    s.channels = rtcell_scenario::run::channels_now(&live.plan, &region)
        .into_iter()
        .map(|c| pb::ChannelStats { name: c.name, sent: c.sent, received: c.received, lost: c.lost, queued: c.queued })
        .collect();
    s
}

pub fn signal_info(s: &PlanSignal) -> pb::SignalInfo {
    let w = s.writable.as_ref();
    pb::SignalInfo {
        name: s.name.clone(),
        values: s.values,
        writable: w.is_some(),
        r#type: w.map_or("f64", |w| w.ty.as_str()).into(),
        min: w.and_then(|w| w.min),
        max: w.and_then(|w| w.max),
        reader: w.map(|w| w.reader.clone()).unwrap_or_default(),
    }
}

pub fn task_infos(plan: &Plan, region: &RegionView<'_>) -> Vec<pb::TaskInfo> {
    plan.tasks
        .iter()
        .map(|t| {
            let cell = t.cell.clone().unwrap_or_else(|| rtcell_scenario::plan::LINUX.into());
            let kind = plan
                .cells
                .iter()
                .find(|c| Some(&c.name) == t.cell.as_ref())
                .map_or("linux".into(), |c| c.kind.to_string());
            let state = read_counters(region, &t.spec.name).ok().and_then(|c| c.state).map_or("?", |s| s.as_str());
            pb::TaskInfo {
                name: t.spec.name.clone(),
                cell,
                cell_kind: kind,
                cpu: t.spec.cpu as u32,
                period_ns: t.spec.period_ns,
                priority: t.spec.priority,
                state: state.into(),
                params: t.spec.params.clone(),
                workload: t.spec.work.kind().into(),
            }
        })
        .collect()
}
