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
    /// The offloaded controller (`rtcell_control::offload`): every request on ring `rx` is one step of the
    /// internal-model controller in `precision` (`f64`, `f32` or `q31`); the reply on `tx` carries the
    /// output and the TSC ticks of the step alone. A request with the reset flag zeroes the state first;
    /// a probe request times an empty region instead (the clock's own cost in this cell).
    Control { rx: String, tx: String, precision: String },
    /// A named payload with its arguments, for kvm cells only (e.g. `spin`, `faults`), or a payload ELF
    /// file: a path containing `/` or ending in `.elf` (e.g. a C payload built with the SDK's
    /// `payload.mk`). `guest_writes` names the channels the payload may write; the rest of the region is
    /// read-only to it.
    Payload { payload: String, args: String, guest_writes: Vec<String> },
    /// Periodic tasks (`rtcell_tasks`): one SCHED_FIFO thread per task on the cell CPU, released on a
    /// common schedule, with statistics, watchdog and safe outputs in the region. Thread and process
    /// cells only.
    TaskSet { tasks: Vec<rtcell_tasks::TaskSpec> },
    /// Periodic activation on a polled TSC (`crate::activation`): each activation's lateness (ns) goes to
    /// the sample log in raw channel `log`; `sleep_ns` after each activation gives CPU time back. A kvm
    /// cell runs it as the `spin` payload.
    Poll { log: String, period_ns: u64, sleep_ns: u64, tsc_khz: u64 },
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
            WorkloadSpec::Control { rx, tx, precision } => (
                "control".into(),
                format!("cell={cell}\nrx={rx}\ntx={tx}\nprecision={precision}\n"),
                vec![rx.clone(), tx.clone(), ctl],
            ),
            WorkloadSpec::Payload { payload, args, guest_writes } => {
                let mut w = guest_writes.clone();
                w.push(ctl);
                (payload.clone(), format!("cell={cell}\n{args}"), w)
            }
            WorkloadSpec::Poll { log, period_ns, sleep_ns, .. } => (
                "spin".into(),
                format!("cell={cell}\nlog={log}\nperiod_ns={period_ns}\nsleep_ns={sleep_ns}\n"),
                vec![log.clone(), ctl],
            ),
            // No payload runs task sets: starting one in a kvm cell fails with "no payload named".
            WorkloadSpec::TaskSet { .. } => ("task-set".into(), String::new(), vec![ctl]),
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
    /// A task set whose tasks all ended, one or more with a watchdog trip (or stopped on a corrupt
    /// channel); `stopped` when a stop was requested too.
    Tripped { stopped: bool },
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
        WorkloadSpec::Control { rx, tx, precision } => control(region, ctl, rx, tx, precision),
        WorkloadSpec::Payload { payload, .. } => {
            WorkloadEnd::Faulted(format!("payload {payload:?} runs only in a kvm cell"))
        }
        WorkloadSpec::TaskSet { tasks } => task_set(tasks, region, ctl),
        WorkloadSpec::Poll { log, period_ns, sleep_ns, tsc_khz } => {
            crate::activation::run(region, ctl, log, *period_ns, *sleep_ns, *tsc_khz)
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
    ctl.set_running(rtcell_host::clock::mono_ns());
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

fn control(region: &RegionView<'_>, ctl: &ControlBlock<'_>, rx: &str, tx: &str, precision: &str) -> WorkloadEnd {
    use rtcell_control::offload::{MESSAGE_BYTES, OffloadController, Precision, Request};
    let precision: Precision = match precision.parse() {
        Ok(p) => p,
        Err(e) => return WorkloadEnd::Faulted(format!("control: precision {precision:?}: {e}")),
    };
    let (rx_ring, tx_ring) = match (region.ring(rx), region.ring(tx)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return WorkloadEnd::Faulted(format!("control: channels {rx}/{tx}: {e}"));
        }
    };
    let mut consumer = rx_ring.consumer();
    let mut producer = tx_ring.producer();
    // On the heap: the f64 controller is tens of KiB.
    let mut ctrl = Box::new(OffloadController::new(precision));
    let mut buf = [0u8; MESSAGE_BYTES];
    ctl.set_running(rtcell_host::clock::mono_ns());
    let mut idle: u32 = 0;
    loop {
        match consumer.try_recv(&mut buf) {
            Ok(n) => {
                let Some(req) = Request::decode(&buf[..n]) else {
                    return WorkloadEnd::Faulted(format!(
                        "control: a {n}-byte message on {rx} is not a {MESSAGE_BYTES}-byte request"
                    ));
                };
                let reply = ctrl.serve(&req, rtcell_host::tsc::rdtsc_ordered).encode();
                loop {
                    match producer.try_send(&reply) {
                        Ok(()) => break,
                        Err(SendError::Full) => {
                            if ctl.stop_requested() {
                                return WorkloadEnd::Stopped;
                            }
                            core::hint::spin_loop();
                        }
                        Err(e) => return WorkloadEnd::Faulted(format!("control: send on {tx}: {e:?}")),
                    }
                }
                ctl.add_handled(1);
                ctl.beat();
            }
            Err(RecvError::Empty) => {
                idle = idle.wrapping_add(1);
                if idle % POLLS_PER_BEAT == 0 {
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
                    "control: a {len}-byte message on {rx} is not a {MESSAGE_BYTES}-byte request"
                ));
            }
            Err(RecvError::Corrupt(what)) => {
                return WorkloadEnd::Faulted(format!("control: ring {rx} corrupt: {what}"));
            }
        }
    }
}

/// Runs a task set: the cell reports running once every task is ready (with the guarantees the tasks
/// could not get as its warnings), beats while they run, and ends when they all have. A watchdog trip
/// stops one task, not the cell.
fn task_set(tasks: &[rtcell_tasks::TaskSpec], region: &RegionView<'_>, ctl: &ControlBlock<'_>) -> WorkloadEnd {
    let mut on_ready = |warnings: &[String]| {
        if !warnings.is_empty() {
            ctl.finish(crate::control::CellState::Starting, 0, &warnings.join("\n"));
        }
        ctl.set_running(rtcell_host::clock::mono_ns());
    };
    let out = rtcell_tasks::run_set(tasks, region, ctl, &mut on_ready, &|| ctl.beat());
    if let Some((task, why)) = out.faulted.first() {
        return WorkloadEnd::Faulted(format!("task {task:?}: {why}"));
    }
    // A trip is named first: the process cell's exit code says it, whatever else happened.
    if !out.tripped.is_empty() {
        return WorkloadEnd::Tripped { stopped: out.stopped };
    }
    if out.stopped { WorkloadEnd::Stopped } else { WorkloadEnd::Done(0) }
}
