//! Loopback responder, the guest twin of the host `echo` workload: every message received on ring `rx`
//! is copied into the payload's own memory and sent back on ring `tx`. It only polls (a VM has no futex).
//!
//! Arguments: `cell=<name> rx=<ring> tx=<ring> max_frame=<bytes>` (`max_frame` defaults to the rx
//! ring's, and may be at most 65536).

#![no_std]
#![no_main]

use core::cell::UnsafeCell;

use rtcell_guest::abi::BootInfo;
use rtcell_payloads::{arg, arg_or, control, fault, region};
use rtcell_shm::control::CellState;
use rtcell_shm::{RecvError, SendError};

rtcell_guest::entry!(main);

/// Largest message the payload can hold.
const BUF_BYTES: usize = 65536;
/// Idle polls between two heartbeats / stop checks.
const POLLS_PER_BEAT: u32 = 1024;

/// The payload's own copy of each message: in .bss, as 64 KiB would not fit on the stack beside everything else.
struct Buffer(UnsafeCell<[u8; BUF_BYTES]>);
// SAFETY: a payload runs on one vCPU, and `main` takes the only reference to the buffer.
unsafe impl Sync for Buffer {}
static BUF: Buffer = Buffer(UnsafeCell::new([0; BUF_BYTES]));

fn main(boot: &'static BootInfo) -> i32 {
    let region = region(boot, "echo");
    let ctl = control(boot, &region, "echo");
    let (rx, tx) = (arg(boot, "echo", "rx"), arg(boot, "echo", "tx"));
    let (rx_ring, tx_ring) = match (region.ring(rx), region.ring(tx)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return fault(&ctl, format_args!("echo: channels {rx}/{tx}: {e}"));
        }
    };
    let max_frame = arg_or(boot, "echo", "max_frame", rx_ring.config().max_frame as usize);
    if max_frame > BUF_BYTES {
        return fault(&ctl, format_args!("echo: max_frame {max_frame} is above the payload's {BUF_BYTES}-byte buffer"));
    }
    // SAFETY: `main` runs once, on the only vCPU, and nothing else refers to BUF: this is the one
    // reference to it for the rest of the run.
    let buf: &mut [u8; BUF_BYTES] = unsafe { &mut *BUF.0.get() };
    let buf = &mut buf[..max_frame];
    rtcell_guest::log!("echo: {rx} -> {tx}, max_frame {max_frame}");
    let mut consumer = rx_ring.consumer();
    let mut producer = tx_ring.producer();
    ctl.set_running(0); // no CLOCK_MONOTONIC here: the supervisor times the start itself
    let mut idle: u32 = 0;
    loop {
        match consumer.try_recv(buf) {
            Ok(n) => {
                loop {
                    match producer.try_send(&buf[..n]) {
                        Ok(()) => break,
                        Err(SendError::Full) => {
                            if ctl.stop_requested() {
                                ctl.finish(CellState::Stopped, 0, "");
                                return 0;
                            }
                            core::hint::spin_loop();
                        }
                        Err(e) => {
                            return fault(&ctl, format_args!("echo: send on {tx}: {e:?}"));
                        }
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
                        ctl.finish(CellState::Stopped, 0, "");
                        return 0;
                    }
                } else {
                    core::hint::spin_loop();
                }
            }
            Err(RecvError::TooSmall { len }) => {
                return fault(&ctl, format_args!("echo: a {len}-byte message on {rx} exceeds max_frame {max_frame}"));
            }
            Err(RecvError::Corrupt(what)) => {
                return fault(&ctl, format_args!("echo: ring {rx} corrupt: {what}"));
            }
        }
    }
}
