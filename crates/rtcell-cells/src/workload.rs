//! What runs inside a cell. A workload is described by data (so a process cell can be told what to run
//! on its command line) and runs against the shared region and its control block.

use serde::{Deserialize, Serialize};

use rtcell_shm::{RecvError, RegionView, SendError};

use crate::control::ControlBlock;

/// A workload, by name and parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "workload", rename_all = "snake_case")]
pub enum WorkloadSpec {
    /// Loopback responder: every message received on ring `rx` is copied into the cell's own memory and
    /// sent back on ring `tx`. With `notify`, the cell sleeps in a futex wait when idle instead of polling.
    Echo { rx: String, tx: String, max_frame: usize, notify: bool },
    /// A named payload with its arguments, for kvm cells only (e.g. `spin`, `faults`). `guest_writes` names
    /// the channels the payload may write; the rest of the region is read-only to it.
    Payload { payload: String, args: String, guest_writes: Vec<String> },
}

impl WorkloadSpec {
    /// What runs this workload in a kvm cell: payload name, its arguments, and the channels it writes
    /// (its control block included).
    pub fn kvm_payload(&self, cell: &str) -> (String, String, Vec<String>) {
        let ctl = crate::control::channel_name(cell);
        match self {
            WorkloadSpec::Echo { rx, tx, max_frame, .. } => (
                "echo".into(),
                format!("cell={cell}\nrx={rx}\ntx={tx}\nmax_frame={max_frame}\n"),
                vec![rx.clone(), tx.clone(), ctl],
            ),
            WorkloadSpec::Payload { payload, args, guest_writes } => {
                let mut w = guest_writes.clone();
                w.push(ctl);
                (payload.clone(), format!("cell={cell}\n{args}"), w)
            }
        }
    }
}

/// How a workload ended, when it ended on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkloadEnd {
    /// Stopped on request.
    Stopped,
    /// Finished with an exit code.
    Done(i32),
    /// Failed; the reason is shown to the user.
    Faulted(String),
}

/// Idle polls between two heartbeats / stop checks.
const POLLS_PER_BEAT: u32 = 1024;
/// Futex wait per idle round when sleeping (bounds how late a stop request is seen).
const IDLE_WAIT_NS: u64 = 1_000_000;

/// Runs `spec` until it ends or a stop is requested.
pub fn run(spec: &WorkloadSpec, region: &RegionView<'_>, ctl: &ControlBlock<'_>) -> WorkloadEnd {
    match spec {
        WorkloadSpec::Echo { rx, tx, max_frame, notify } => echo(region, ctl, rx, tx, *max_frame, *notify),
        WorkloadSpec::Payload { payload, .. } => {
            WorkloadEnd::Faulted(format!("payload {payload:?} runs only in a kvm cell"))
        }
    }
}

fn echo(
    region: &RegionView<'_>,
    ctl: &ControlBlock<'_>,
    rx: &str,
    tx: &str,
    max_frame: usize,
    notify: bool,
) -> WorkloadEnd {
    let (rx_ring, tx_ring) = match (region.ring(rx), region.ring(tx)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return WorkloadEnd::Faulted(format!("echo: channels {rx}/{tx}: {e}"));
        }
    };
    let mut consumer = rx_ring.consumer();
    let mut producer = tx_ring.producer();
    // The cell's own copy of each message.
    let mut buf = vec![0u8; max_frame];
    ctl.set_running(crate::control::now_ns());
    let mut idle: u32 = 0;
    loop {
        match consumer.try_recv(&mut buf) {
            Ok(n) => {
                loop {
                    match producer.try_send(&buf[..n]) {
                        Ok(()) => break,
                        Err(SendError::Full) => {
                            if ctl.stop_requested() {
                                return WorkloadEnd::Stopped;
                            }
                            core::hint::spin_loop();
                        }
                        Err(e) => {
                            return WorkloadEnd::Faulted(format!("echo: send on {tx}: {e:?}"));
                        }
                    }
                }
                ctl.add_handled(1);
                ctl.beat();
            }
            Err(RecvError::Empty) => {
                idle = idle.wrapping_add(1);
                if notify {
                    ctl.beat();
                    if ctl.stop_requested() {
                        return WorkloadEnd::Stopped;
                    }
                    consumer.wait_for_message(IDLE_WAIT_NS);
                } else if idle % POLLS_PER_BEAT == 0 {
                    ctl.beat();
                    if ctl.stop_requested() {
                        return WorkloadEnd::Stopped;
                    }
                } else {
                    core::hint::spin_loop();
                }
            }
            Err(RecvError::TooSmall { len }) => {
                return WorkloadEnd::Faulted(format!(
                    "echo: a {len}-byte message on {rx} exceeds max_frame {max_frame}"
                ));
            }
            Err(RecvError::Corrupt(what)) => {
                return WorkloadEnd::Faulted(format!("echo: ring {rx} corrupt: {what}"));
            }
        }
    }
}
