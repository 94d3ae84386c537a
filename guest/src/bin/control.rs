//! The offloaded controller, the guest twin of the host `control` workload: every request received on
//! ring `rx` (`rtcell_control::offload`: sequence number, reset flag, `r`, `y`) is one step of the
//! internal-model controller in the chosen arithmetic; the reply on ring `tx` carries the output and the
//! TSC ticks of the step alone (`lfence; rdtsc` before and after); a probe request times an empty region
//! instead. It only polls (a VM has no futex).
//!
//! Arguments: `cell=<name> rx=<ring> tx=<ring> precision=f64|f32|q31`.

#![no_std]
#![no_main]

use core::cell::UnsafeCell;

use rtcell_control::offload::{
    MESSAGE_BYTES, OffloadStep, Precision, Request, default_controller_q31, default_controller32, default_controller64,
    serve as serve_request,
};
use rtcell_control::{Controller32, Controller64, ControllerQ31};
use rtcell_guest::abi::BootInfo;
use rtcell_guest::rt::rdtsc_ordered;
use rtcell_payloads::{arg, control, fault, region};
use rtcell_shm::control::{CellState, ControlBlock};
use rtcell_shm::{Consumer, Producer, RecvError, SendError};

rtcell_guest::entry!(main);

/// Idle polls between two heartbeats / stop checks.
const POLLS_PER_BEAT: u32 = 1024;

/// A controller in .data, built at compile time: each is tens of KiB, too much for the stack.
struct Slot<T>(UnsafeCell<T>);
// SAFETY: a payload runs on one vCPU, and `main` takes the only reference to the one slot it uses.
unsafe impl<T> Sync for Slot<T> {}

static C64: Slot<Controller64> = Slot(UnsafeCell::new(default_controller64()));
static C32: Slot<Controller32> = Slot(UnsafeCell::new(default_controller32()));
static CQ31: Slot<ControllerQ31> = Slot(UnsafeCell::new(default_controller_q31()));

fn main(boot: &'static BootInfo) -> i32 {
    let region = region(boot, "control");
    let ctl = control(boot, &region, "control");
    let (rx, tx) = (arg(boot, "control", "rx"), arg(boot, "control", "tx"));
    let precision_arg = arg(boot, "control", "precision");
    let precision: Precision = match precision_arg.parse() {
        Ok(p) => p,
        Err(e) => return fault(&ctl, format_args!("control: precision={precision_arg:?}: {e}")),
    };
    let (rx_ring, tx_ring) = match (region.ring(rx), region.ring(tx)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return fault(&ctl, format_args!("control: channels {rx}/{tx}: {e}"));
        }
    };
    rtcell_guest::log!("control: {rx} -> {tx}, precision {precision}");
    let (consumer, producer) = (rx_ring.consumer(), tx_ring.producer());
    match precision {
        Precision::F64 => {
            // SAFETY: `main` runs once, on the only vCPU, and takes one reference to one slot; nothing
            // else refers to the slots.
            let c = unsafe { &mut *C64.0.get() };
            serve(c, consumer, producer, &ctl, rx, tx)
        }
        Precision::F32 => {
            // SAFETY: as for C64.
            let c = unsafe { &mut *C32.0.get() };
            serve(c, consumer, producer, &ctl, rx, tx)
        }
        Precision::Q31 => {
            // SAFETY: as for C64.
            let c = unsafe { &mut *CQ31.0.get() };
            serve(c, consumer, producer, &ctl, rx, tx)
        }
    }
}

fn stopped(ctl: &ControlBlock<'_>) -> i32 {
    ctl.finish(CellState::Stopped, 0, "");
    0
}

fn serve<C: OffloadStep>(
    ctrl: &mut C,
    mut consumer: Consumer<'_>,
    mut producer: Producer<'_>,
    ctl: &ControlBlock<'_>,
    rx: &str,
    tx: &str,
) -> i32 {
    let mut buf = [0u8; MESSAGE_BYTES];
    let mut steps: u64 = 0;
    ctl.set_running(0); // no CLOCK_MONOTONIC here: the supervisor times the start itself
    let mut idle: u32 = 0;
    loop {
        match consumer.try_recv(&mut buf) {
            Ok(n) => {
                let Some(req) = Request::decode(&buf[..n]) else {
                    return fault(
                        ctl,
                        format_args!("control: a {n}-byte message on {rx} is not a {MESSAGE_BYTES}-byte request"),
                    );
                };
                let reply = serve_request(ctrl, &mut steps, &req, rdtsc_ordered).encode();
                loop {
                    match producer.try_send(&reply) {
                        Ok(()) => break,
                        Err(SendError::Full) => {
                            if ctl.stop_requested() {
                                return stopped(ctl);
                            }
                            core::hint::spin_loop();
                        }
                        Err(e) => return fault(ctl, format_args!("control: send on {tx}: {e:?}")),
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
                        return stopped(ctl);
                    }
                } else {
                    core::hint::spin_loop();
                }
            }
            Err(RecvError::TooSmall { len }) => {
                return fault(
                    ctl,
                    format_args!("control: a {len}-byte message on {rx} is not a {MESSAGE_BYTES}-byte request"),
                );
            }
            Err(RecvError::Corrupt(what)) => {
                return fault(ctl, format_args!("control: ring {rx} corrupt: {what}"));
            }
        }
    }
}
