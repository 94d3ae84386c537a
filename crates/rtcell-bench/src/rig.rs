//! What the suites that talk to a cell through a pair of rings share: the region (a master-to-cell ring,
//! a cell-to-master ring and the cell's control block), the cell started on it, the master's wait for an
//! answer (which notices a dead or silent cell), and stopping the cell.

use std::sync::Arc;
use std::time::Duration;

use rtcell_cells::{Cell, CellKind, CellSpec, CellStatus, VmOptions, WorkloadSpec, control};
use rtcell_host::tsc::{TscClock, rdtsc_ordered};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{Consumer, Producer, RecvError, RegionLayout, RegionView, RingConfig, SendError};

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

/// Sends `msg` to the cell, waiting while its ring is full: `Ok(true)` sent, `Ok(false)` a stop request
/// (Ctrl-C, SIGTERM) came while waiting. A cell that leaves the ring full for [`ANSWER_TIMEOUT`] is
/// checked (dead: an error at once); full for twice as long is an error naming the cell. `what` (called
/// only then) says which exchange.
pub fn send(tx: &mut Producer<'_>, msg: &[u8], cell: &mut Cell, what: impl Fn() -> String) -> Result<bool, BenchError> {
    let mut since: Option<std::time::Instant> = None;
    let mut spins = 0u32;
    loop {
        match tx.try_send(msg) {
            Ok(()) => return Ok(true),
            Err(SendError::Full) => {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                if spins % 4096 != 0 {
                    continue;
                }
                let t0 = *since.get_or_insert_with(std::time::Instant::now);
                let waited = t0.elapsed();
                if waited > Duration::from_millis(100) && stop_requested() {
                    return Ok(false);
                }
                if waited > ANSWER_TIMEOUT {
                    let st = cell.status();
                    let gone = st.is_finished();
                    if gone || waited > 2 * ANSWER_TIMEOUT {
                        return Err(BenchError::Other(format!(
                            "cell {:?} ({}, CPU {}) {} during {}: its input ring stayed full for {:.1} s",
                            cell.name(),
                            cell.kind(),
                            cell.cpu(),
                            if gone { format!("{st}") } else { format!("is {st} but stopped consuming") },
                            what(),
                            waited.as_secs_f64()
                        )));
                    }
                }
            }
            Err(e) => {
                return Err(BenchError::Other(format!("send to cell {:?} during {}: {e:?}", cell.name(), what())));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell that stops consuming its input (here: an echo cell reading the other ring, so the master's
    /// ring fills): the master's send ends with an error naming the cell instead of spinning forever.
    #[test]
    fn a_cell_that_stops_consuming_is_named_instead_of_spun_on() {
        let _cpu = rtcell_testkit::cell_cpu();
        let tsc = TscClock::calibrate().unwrap();
        let ring = RingConfig::for_frames(64, 4);
        // Reads C2M (which nobody writes) and never drains M2C.
        let workload = WorkloadSpec::Echo { rx: C2M.into(), tx: M2C.into(), max_frame: 64, notify: false };
        let mut warnings = Vec::new();
        let RingCell { shm, mut cell, .. } =
            start("rigtest", CellKind::Thread, "deaf", ring, workload, 1, None, &tsc, &mut warnings).unwrap();
        let region = region(&shm).unwrap();
        let mut tx = region.ring(M2C).unwrap().producer();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let outcome = std::thread::scope(|s| {
            s.spawn(|| {
                let r = loop {
                    match send(&mut tx, &[7u8; 16], &mut cell, || "the test's sends".into()) {
                        Ok(true) => {}
                        other => break other,
                    }
                };
                let _ = done_tx.send(r.map_err(|e| e.to_string()));
            });
            let r = done_rx.recv_timeout(Duration::from_secs(60));
            if r.is_err() {
                // Unblock the spinning sender so that the scope can end and the test fail.
                crate::request_stop();
            }
            r
        });
        let err = outcome.expect("the send still spins after 60 s").expect_err("a full ring is an error");
        assert!(err.contains("cell \"deaf\" (thread, CPU 1)"), "{err}");
        assert!(err.contains("stopped consuming during the test's sends"), "{err}");
        stop(cell, &mut warnings);
        drop(warnings);
    }
}
