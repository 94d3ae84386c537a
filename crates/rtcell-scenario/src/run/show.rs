//! What a run shows while it runs: the live line per task, the cells' states for observers, and the
//! draining of the rings nobody in the scenario receives from.

use std::io::Write;
use std::time::Duration;

use rtcell_cells::Cell;
use rtcell_shm::RegionView;
use rtcell_tasks::stats::{latency_channel, read_histogram};
use rtcell_tasks::{TaskSpec, read_counters};

use super::results::{handled_bound, possible_claim};
use crate::live::CellSnapshot;
use crate::plan::Plan;

/// The cells' states for observers; what a cell claims it handled is checked against what it can have
/// handled in the time it ran (an impossible claim is unknown, `None`).
pub(super) fn snapshot(cells: &mut [(Cell, Option<Duration>)], plan: &Plan) -> Vec<CellSnapshot> {
    cells
        .iter_mut()
        .map(|(c, _)| {
            let st = c.status();
            let claim = c.progress().1;
            // The bound is taken after the claim was read: never smaller than when the cell wrote it.
            let ran_for = c.ran_for();
            let bound = handled_bound(plan, c.name(), ran_for);
            CellSnapshot {
                name: c.name().to_string(),
                kind: c.kind().to_string(),
                cpu: c.cpu(),
                finished: st.is_finished(),
                status: st.to_string(),
                handled: possible_claim(claim, bound),
                vm_exits: c.vm_exits().unwrap_or_default(),
            }
        })
        .collect()
}

pub(super) fn drain(sinks: &mut [(String, rtcell_shm::Consumer<'_>, Vec<u8>)]) {
    for (_, c, buf) in sinks.iter_mut() {
        while c.try_recv(buf).is_ok() {}
    }
}

/// One line per task: cycles, overruns, worst latency so far. On a terminal the block is redrawn in
/// place; otherwise it is printed again. Returns the number of lines printed.
pub(super) fn print_live(
    region: &RegionView<'_>,
    specs: &[(Option<String>, TaskSpec)],
    t: Duration,
    tty: bool,
    prev: usize,
) -> usize {
    let mut out = String::new();
    if tty && prev > 0 {
        out.push_str(&format!("\x1b[{prev}A"));
    }
    for (_, s) in specs {
        let c = read_counters(region, &s.name).unwrap_or_default();
        let lat = read_histogram(region, &latency_channel(&s.name)).ok().and_then(|h| h.max());
        let state = c.state.map_or("?", |s| s.as_str());
        let line = format!(
            "[{:7.1} s] {:<22} {:>9} cycles {:>6} overruns  worst latency {:>9}  {state}",
            t.as_secs_f64(),
            s.name,
            c.cycles,
            c.overruns,
            lat.map_or("-".to_string(), |ns| format!("{:.1} us", ns as f64 / 1e3)),
        );
        out.push_str(&line);
        if tty {
            out.push_str("\x1b[K");
        }
        out.push('\n');
    }
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(out.as_bytes());
    let _ = err.flush();
    specs.len()
}
