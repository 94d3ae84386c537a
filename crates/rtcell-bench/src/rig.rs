//! What the suites that talk to a cell through a pair of rings share: the region (a master-to-cell ring,
//! a cell-to-master ring and the cell's control block), the cell started on it, the master's wait for an
//! answer (which notices a dead or silent cell), and stopping the cell.

use std::sync::Arc;
use std::time::Duration;

use rtcell_cells::{Cell, CellKind, CellSpec, CellStatus, VmOptions, WorkloadSpec, control};
use rtcell_host::tsc::{TscClock, rdtsc_ordered};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{Consumer, RecvError, RegionLayout, RegionView, RingConfig};

use crate::{BenchError, stop_requested};

/// The master-to-cell ring.
pub const M2C: &str = "m2c";
/// The cell-to-master ring.
pub const C2M: &str = "c2m";
/// A cell that has not answered for this long is checked for death; twice as long is an error.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a cell may take to report running.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a cell may take to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// A running cell on its own region.
pub struct RingCell {
    pub shm: Arc<SharedMemory>,
    pub cell: Cell,
    /// Spawn to first heartbeat.
    pub start_time: Duration,
}

/// Lays out a region with rings [`M2C`] and [`C2M`] of configuration `ring` and the control block of
/// cell `name`, and starts `workload` in it as a `kind` cell on `cpu`. A kvm cell gets its channels on
/// pages of their own, so that what it must not write (the region header) is mapped read-only into it.
/// `suite` names the region and the errors.
#[allow(clippy::too_many_arguments)]
pub fn start(
    suite: &str,
    kind: CellKind,
    name: &str,
    ring: RingConfig,
    workload: WorkloadSpec,
    cpu: usize,
    priority: Option<i32>,
    tsc: &TscClock,
    warnings: &mut Vec<String>,
) -> Result<RingCell, BenchError> {
    let mut layout = RegionLayout::new();
    if kind == CellKind::Kvm {
        layout.page_aligned();
    }
    let lerr = |e: rtcell_shm::LayoutError| BenchError::Other(format!("{suite} region layout: {e}"));
    layout.ring(M2C, ring).map_err(lerr)?.ring(C2M, ring).map_err(lerr)?;
    control::add_to_layout(&mut layout, name).map_err(lerr)?;
    let shm = SharedMemory::create_anonymous(&format!("rtcell-{suite}"), layout.size_bytes())
        .map_err(|e| BenchError::Other(format!("cannot create the shared region: {e}")))?;
    layout.init(shm.words(), std::process::id()).map_err(lerr)?;
    let shm = Arc::new(shm);
    let spec =
        CellSpec { name: name.to_string(), kind, cpu, priority, lock_memory: true, workload, vm: VmOptions::default() };
    rtcell_cells::set_tsc_khz(tsc.khz());
    let mut cell = Cell::start(spec, Arc::clone(&shm))?;
    let start_time = cell.wait_running(START_TIMEOUT)?;
    warnings.extend(cell.warnings().iter().cloned());
    Ok(RingCell { shm, cell, start_time })
}

/// The region of a [`RingCell`], attached.
pub fn region(shm: &SharedMemory) -> Result<RegionView<'_>, BenchError> {
    RegionView::attach(shm.words()).map_err(|e| BenchError::Other(format!("region: {e}")))
}

/// Stops the cell; an end other than a clean stop becomes a warning.
pub fn stop(cell: Cell, warnings: &mut Vec<String>) {
    let kind = cell.kind();
    let report = cell.stop(STOP_TIMEOUT);
    if !matches!(report.status, CellStatus::Stopped) {
        warnings.push(format!("cell {:?} ({kind}) ended {} instead of stopping cleanly", report.name, report.status));
    }
}

/// Waits for the cell's answer to a request sent at TSC `t0`, receiving it into `buf`: `Ok(Some(len))`.
/// Busy-polls, or with `futex` sleeps in the ring's futex between polls. A cell that has not answered
/// after [`ANSWER_TIMEOUT`] is checked: dead is an error at once, alive but silent for twice as long is
/// an error too; `what` (called only then) says which exchange, e.g. "the 64-byte round trips". A stop
/// request (Ctrl-C) seen while waiting that long gives `Ok(None)`.
#[allow(clippy::too_many_arguments)]
pub fn await_reply(
    rx: &mut Consumer<'_>,
    buf: &mut [u8],
    cell: &mut Cell,
    t0: u64,
    timeout_ticks: u64,
    futex: bool,
    what: impl Fn() -> String,
) -> Result<Option<usize>, BenchError> {
    let mut spins = 0u32;
    loop {
        match rx.try_recv(buf) {
            Ok(n) => return Ok(Some(n)),
            Err(RecvError::Empty) => {
                spins = spins.wrapping_add(1);
                if futex {
                    rx.wait_for_message(1_000_000);
                } else {
                    std::hint::spin_loop();
                }
                if spins % 65536 == 0 || futex {
                    let waited = rdtsc_ordered().wrapping_sub(t0);
                    if waited > timeout_ticks {
                        let st = cell.status();
                        if st.is_finished() {
                            return Err(BenchError::Other(format!(
                                "cell {:?} ({}, CPU {}) {st} during {}",
                                cell.name(),
                                cell.kind(),
                                cell.cpu(),
                                what()
                            )));
                        }
                        if waited > 2 * timeout_ticks {
                            return Err(BenchError::Other(format!(
                                "cell {:?} ({}, CPU {}) is {st} but did not answer within {:?} during {}",
                                cell.name(),
                                cell.kind(),
                                cell.cpu(),
                                2 * ANSWER_TIMEOUT,
                                what()
                            )));
                        }
                        if stop_requested() {
                            return Ok(None);
                        }
                    }
                }
            }
            Err(e) => return Err(BenchError::Other(format!("receive from the cell during {}: {e:?}", what()))),
        }
    }
}
