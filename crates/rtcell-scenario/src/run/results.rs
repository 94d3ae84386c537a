//! What a run reports: per task its counters and histograms, per channel what it carried, per cell its
//! end, and the run's warnings and errors; the counters read at the end, checked against the tasks' own
//! record.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rtcell_cells::CellKind;
use rtcell_shm::RegionView;
use rtcell_tasks::stats::{BlockReading, read_histogram};
use rtcell_tasks::{TaskCounters, TaskSpec, TaskWork, read_counters};

use crate::plan::{CellRole, Plan};

/// What one task did.
#[derive(Debug, Clone)]
pub struct TaskResult {
    pub name: String,
    /// Cell name, or `linux`.
    pub cell: String,
    pub cell_kind: String,
    pub spec: TaskSpec,
    pub counters: TaskCounters,
    /// The task's statistics block was found scribbled and the task keeps no record of its own: its
    /// figures are unknown (`counters` holds zeros, never shown as the task's).
    pub scribbled: bool,
    /// Releases due in the run: what `cycles + skipped` should be.
    pub expected: u64,
    pub exec: HistSummary,
    pub latency: HistSummary,
}

/// A histogram read back from shared memory (ns), with its summary.
#[derive(Debug, Clone, Default)]
pub struct HistSummary {
    pub count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub sum_ns: u64,
    pub bucket_ns: u64,
    pub buckets: Vec<u64>,
    pub overflow: u64,
}

impl HistSummary {
    /// Reads a histogram; one a peer scribbled is an error of the run (never silently zero).
    pub(super) fn read(region: &RegionView<'_>, channel: &str, errors: &mut Vec<String>) -> HistSummary {
        match read_histogram(region, channel) {
            Ok(h) => HistSummary {
                count: h.count,
                min_ns: h.min().unwrap_or(0),
                max_ns: h.max().unwrap_or(0),
                sum_ns: h.sum,
                bucket_ns: h.bucket_width_ns,
                buckets: h.buckets().map(|(_, c)| c).collect(),
                overflow: h.overflow,
            },
            Err(e) => {
                errors.push(format!("histogram {e}"));
                HistSummary::default()
            }
        }
    }

    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64)
    }
}

/// What one channel carried.
#[derive(Debug, Clone)]
pub struct ChannelResult {
    pub name: String,
    pub sent: u64,
    pub received: u64,
    /// Queued and then lost before the receiver took them.
    pub lost: u64,
    /// Refused at the sender (ring full): never queued, so not lost.
    pub refused: u64,
    /// Still queued at the end.
    pub queued: u64,
}

/// What one cell did.
#[derive(Debug, Clone)]
pub struct CellResult {
    pub name: String,
    pub kind: CellKind,
    pub cpu: usize,
    pub status: String,
    pub start: Option<Duration>,
    pub vm_exits: Option<BTreeMap<String, u64>>,
    /// Messages or steps the cell claims it handled (its control block's `handled`, which the cell
    /// writes); `None` when the claim is impossible (more than `handled_bound`).
    pub handled: Option<u64>,
    /// The most the cell can have handled in the time it ran.
    pub handled_bound: u64,
    /// The last lines a kvm payload logged (escaped, capped, the guest's).
    pub log: Vec<String>,
    /// Lines kept of the cell's log (a kvm payload's), of which `log` is the end.
    pub log_kept: u64,
    /// Log messages (or output lines of a process cell) counted but not kept: over the rate limit.
    pub log_suppressed: u64,
    /// The monitor's note on a log (or output) storm.
    pub log_storm: Option<String>,
}

/// Steps of a period in `ns` (1% and two steps more, for the clocks and the edges).
fn steps(ns: u64, period: u64) -> u64 {
    let n = ns / period.max(1);
    n + n / 100 + 2
}

fn nanos(elapsed: Duration) -> u64 {
    elapsed.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// The most cell `cell` can have handled in `elapsed`: a step per period of each of its tasks, or of
/// its payload when its args give `period_ns` (see [`payload_handled_bound`]); for a service, twice
/// what every task of the plan can have sent; anything else, one per nanosecond.
pub(crate) fn handled_bound(plan: &Plan, cell: &str, elapsed: Duration) -> u64 {
    let ns = nanos(elapsed);
    let own: u64 =
        plan.tasks.iter().filter(|t| t.cell.as_deref() == Some(cell)).map(|t| steps(ns, t.spec.period_ns)).sum();
    match plan.cells.iter().find(|c| c.name == cell).map(|c| &c.role) {
        Some(CellRole::Controller { .. }) => {
            plan.tasks.iter().map(|t| steps(ns, t.spec.period_ns)).sum::<u64>().saturating_mul(2)
        }
        Some(CellRole::Payload { args, .. }) => own.saturating_add(payload_handled_bound(args, elapsed)),
        _ => own + 2,
    }
}

/// The most a kvm payload started with `args` can have handled in `elapsed`: a step per `period_ns` when
/// its args give one (1% and two steps more), else one per nanosecond.
pub fn payload_handled_bound(args: &str, elapsed: Duration) -> u64 {
    let ns = nanos(elapsed);
    crate::plan::payload_args::arg_pairs(args)
        .find(|(k, _)| *k == "period_ns")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .map_or(ns, |p| steps(ns, p))
}

/// The one check of a cell's claim of what it handled (its control block's count, which the cell
/// writes): the claim when it is possible (at most `bound`, see [`handled_bound`]), `None` when it is
/// not (the block was scribbled: the figure is unknown and never shown). Every place that shows the
/// count (the run's report, the live and final snapshots observers read, deployed cells) goes through it.
pub fn possible_claim(claim: u64, bound: u64) -> Option<u64> {
    (claim <= bound).then_some(claim)
}

/// A cell's claim of what it handled, checked by [`possible_claim`]: an impossible one is an error
/// of the run naming the cell (its control block was scribbled) and is not shown.
pub(super) fn checked_handled(cell: &str, claim: u64, bound: u64, errors: &mut Vec<String>) -> Option<u64> {
    let checked = possible_claim(claim, bound);
    if checked.is_none() {
        errors.push(format!(
            "cell {cell:?}'s control block was scribbled: it claims {claim} steps or messages handled where at \
             most {bound} were possible (not shown)"
        ));
    }
    checked
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub tasks: Vec<TaskResult>,
    pub channels: Vec<ChannelResult>,
    pub cells: Vec<CellResult>,
    /// Final value of every signal.
    pub signals: BTreeMap<String, Vec<f64>>,
    /// Stolen time per CPU during the run (ms), from /proc/stat.
    pub steal_ms: BTreeMap<usize, f64>,
    pub measured: Duration,
    pub warnings: Vec<String>,
    /// Watchdog trips, cell deaths, task faults, wrong replies: a run with any is a failed run.
    pub errors: Vec<String>,
    pub incomplete: bool,
    /// Files the run wrote (logs).
    pub files: Vec<PathBuf>,
}

/// A task's final counters: a Linux-side task's own record (`own`), a cell task's block once checked.
/// A block that does not hold what the task recorded, or fails its check, is an error naming it; `None`
/// when it fails its check and the task keeps no record of its own (its figures are unknown).
pub(super) fn final_counters(
    task: &str,
    reading: Result<&BlockReading, &rtcell_shm::AttachError>,
    own: Option<&TaskCounters>,
    errors: &mut Vec<String>,
) -> Option<TaskCounters> {
    let block = rtcell_tasks::stats::stats_channel(task);
    let shared = reading.map_err(|e| format!("statistics block {block:?}: {e}")).and_then(BlockReading::checked);
    match (own, shared) {
        (Some(own), Ok(shared)) if shared != *own => {
            errors.push(format!(
                "statistics block {block:?} was scribbled: it holds {} cycles, state {}, where task {task:?} counted \
                 {} cycles, state {} (the task's own record is reported)",
                shared.cycles,
                shared.state.map_or("?", |s| s.as_str()),
                own.cycles,
                own.state.map_or("?", |s| s.as_str()),
            ));
            Some(own.clone())
        }
        (Some(own), Ok(_)) => Some(own.clone()),
        (Some(own), Err(e)) => {
            errors.push(format!("{e} (task {task:?}'s own record is reported)"));
            Some(own.clone())
        }
        (None, Ok(shared)) => Some(shared),
        (None, Err(e)) => {
            errors.push(e);
            None
        }
    }
}

/// The earliest moment cell `cell`'s tasks can all have ended by themselves in a run from `start_ns` to
/// `end_ns`: the last release of the task released last (a task ends after its last release's cycle, or
/// at the start when it has none). A cell with no task never ends by itself (`u64::MAX`).
pub(super) fn earliest_end(plan: &Plan, cell: &str, start_ns: u64, end_ns: u64) -> u64 {
    let last = |offset: u64, period: u64| {
        let first = start_ns.saturating_add(offset);
        if first >= end_ns { start_ns } else { first + (end_ns - 1 - first) / period.max(1) * period.max(1) }
    };
    let mine = plan.tasks.iter().filter(|t| t.cell.as_deref() == Some(cell));
    mine.map(|t| last(t.spec.offset_ns, t.spec.period_ns)).max().unwrap_or(u64::MAX)
}

/// What every ring of the plan has carried so far.
pub fn channels_now(plan: &Plan, region: &RegionView<'_>) -> Vec<ChannelResult> {
    // A task that finds a ring full drops its frame (refused); a cell service retries until there is room
    // (not refused), so the ring's own reject count is not what tasks refused.
    let mut channels = Vec::new();
    for ch in &plan.channels {
        if let Ok(r) = region.ring(&ch.name) {
            let c = r.counters();
            let dropped: u64 = plan
                .tasks
                .iter()
                .filter(|t| {
                    t.spec.send.as_deref() == Some(ch.name.as_str())
                        || matches!(&t.spec.work, TaskWork::Master { request, .. } if *request == ch.name)
                })
                .map(|t| read_counters(region, &t.spec.name).map_or(0, |c| c.send_fail))
                .sum();
            channels.push(ChannelResult {
                name: ch.name.clone(),
                sent: c.sent,
                received: c.received,
                lost: c.lost,
                refused: dropped,
                queued: c.sent.saturating_sub(c.received + c.lost),
            });
        }
    }
    channels
}
