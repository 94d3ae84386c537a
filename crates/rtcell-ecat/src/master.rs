//! The master: ethercrab brings the segment to OP, then the caller runs process-data cycles on its own
//! thread (a cell's CPU). That one thread drives everything: it polls ethercrab's futures, sends the
//! frames they queue on our raw socket and hands them the replies, with no runtime, reactor thread or
//! timer wheel in between. So a cycle's frame limit is kept to the microsecond, and a reply that comes
//! back after its cycle gave up on it is counted and dropped (ethercrab's own socket task would end on
//! it, and with it every later exchange).

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use ethercrab::std::ethercat_now;
use ethercrab::subdevice_group::Op;
use ethercrab::{MainDevice, MainDeviceConfig, PduRx, PduStorage, PduTx, SubDeviceGroup, SubDeviceState, Timeouts};

use crate::net::RawSocket;

/// Most SubDevices a master handles (a power of two, as ethercrab needs).
pub const MAX_DEVICES: usize = 16;
/// Most process data in bytes, all devices together.
pub const MAX_PDI: usize = 512;
const MAX_FRAMES: usize = 16;
const MAX_PDU_DATA: usize = PduStorage::element_size(1100);

/// How long one exchange may take during bring-up (EEPROM reads, state changes): generous, so a
/// loaded host does not fail the bring-up; cycles have their own, shorter limit.
const BRING_UP_TIMEOUT: Duration = Duration::from_millis(200);
/// The whole bring-up, all exchanges and state changes together.
const BRING_UP_LIMIT: Duration = Duration::from_secs(20);
/// While ethercrab waits on its own timers (bring-up), its futures are polled at least this often.
const TIMER_POLL: Duration = Duration::from_micros(100);

/// Why a cycle's process data is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleError {
    /// The frame was not back within the cycle's limit (µs).
    Lost { limit_us: u64 },
    /// Back, but not every device processed it: the working counter says how many did.
    WrongWorkingCounter { got: u16, want: u16 },
    /// Back, but a device is no longer in OP (its outputs are not applied).
    NotOp { device: usize, state: String },
    /// ethercrab refused the exchange.
    Failed(String),
}

impl std::fmt::Display for CycleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CycleError::Lost { limit_us } => write!(f, "frame lost: not back within {limit_us} us"),
            CycleError::WrongWorkingCounter { got, want } => {
                write!(f, "working counter {got}, {want} expected: a device did not process the frame")
            }
            CycleError::NotOp { device, state } => write!(f, "device {device} is in {state}, not OP"),
            CycleError::Failed(e) => write!(f, "exchange failed: {e}"),
        }
    }
}

/// Frames in and out on one interface, for ethercrab's frame storage.
struct Link {
    tx: PduTx<'static>,
    rx: PduRx<'static>,
    socket: RawSocket,
    buf: Box<[u8; 1536]>,
    busy_poll: bool,
    /// Replies no exchange was waiting for any more (late ones), and frames ethercrab could not place.
    discarded: u64,
    send_failed: u64,
}

impl Link {
    /// Polls `fut` until it completes or `deadline` passes (`None` then; dropping the future releases
    /// its frame). Between polls: sends what it queued, waits for replies and hands them over.
    /// `slice`: the longest wait between polls (ethercrab's own timers only fire when polled).
    fn drive<F: Future>(&mut self, fut: F, deadline: Instant, slice: Duration) -> Option<F::Output> {
        let mut fut = std::pin::pin!(fut);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return Some(v);
            }
            self.send_queued();
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let wait = (deadline - now).min(slice);
            let ready = if self.busy_poll {
                self.socket.spin_recv(&mut self.buf[..], now + wait).ok().flatten()
            } else {
                match self.socket.wait_readable(wait) {
                    Ok(true) => self.socket.try_recv(&mut self.buf[..]).ok().flatten(),
                    _ => None,
                }
            };
            if let Some(n) = ready {
                self.hand_over(n);
                // Whatever else arrived meanwhile.
                while let Ok(Some(n)) = self.socket.try_recv(&mut self.buf[..]) {
                    self.hand_over(n);
                }
            }
        }
    }

    fn send_queued(&mut self) {
        while let Some(frame) = self.tx.next_sendable_frame() {
            let socket = &self.socket;
            let sent = frame.send_blocking(|data| {
                socket.send(data).map(|()| data.len()).map_err(|_| ethercrab::error::Error::SendFrame)
            });
            if sent.is_err() {
                // The frame goes back to ethercrab, which gives up on it at its timeout.
                self.send_failed += 1;
                break;
            }
        }
    }

    fn hand_over(&mut self, n: usize) {
        if self.rx.receive_frame(&self.buf[..n]).is_err() {
            self.discarded += 1;
        }
    }
}

/// A master with its segment in OP.
pub struct Master {
    link: Link,
    maindevice: MainDevice<'static>,
    group: SubDeviceGroup<MAX_DEVICES, MAX_PDI, ethercrab::DefaultLock, Op>,
    pub interface: String,
    cycle_timeout: Duration,
    /// The working counter of an exchange every device processed: per device, 1 for reading its
    /// inputs and 2 for writing its outputs.
    want_wkc: u16,
}

impl Master {
    /// Finds the devices on `interface` and brings them to OP. `timeout`: how long a process-data
    /// exchange may take before its frame counts as lost.
    pub fn bring_up(interface: &str, timeout: Duration) -> Result<Master, String> {
        // A link that is down would only show as timeouts: say so plainly first.
        if let Ok(state) = std::fs::read_to_string(format!("/sys/class/net/{interface}/operstate"))
            && state.trim() == "down"
        {
            return Err(format!(
                "interface {interface} is down: bring it up (ip link set {interface} up) and check the cable"
            ));
        }
        let socket = RawSocket::open(interface).map_err(|e| format!("EtherCAT on {interface}: {e}"))?;
        // ethercrab keeps frames in storage that must outlive the master: one small allocation per master,
        // kept for the life of the process.
        let storage: &'static PduStorage<MAX_FRAMES, MAX_PDU_DATA> = Box::leak(Box::new(PduStorage::new()));
        let (tx, rx, pdu_loop) = storage.try_split().map_err(|_| "PDU storage already in use".to_string())?;
        let slow = BRING_UP_TIMEOUT.max(timeout);
        let timeouts = Timeouts {
            pdu: slow,
            eeprom: slow,
            state_transition: Duration::from_secs(5),
            wait_loop_delay: Duration::from_micros(200),
            ..Timeouts::default()
        };
        let maindevice = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
        let mut link =
            Link { tx, rx, socket, buf: Box::new([0; 1536]), busy_poll: false, discarded: 0, send_failed: 0 };
        let md = &maindevice;
        let up = async {
            let group = md
                .init_single_group::<MAX_DEVICES, MAX_PDI>(ethercat_now)
                .await
                .map_err(|e| format!("finding the devices on {interface}: {e}"))?;
            if group.is_empty() {
                return Err(format!(
                    "no EtherCAT device answered on {interface}: is the segment connected (or rtcell ecat-sim running)?"
                ));
            }
            group.into_op(md).await.map_err(|e| format!("bringing the devices on {interface} to OP: {e}"))
        };
        let group = link.drive(up, Instant::now() + BRING_UP_LIMIT, TIMER_POLL).ok_or_else(|| {
            format!("bringing up the segment on {interface}: not done after {} s", BRING_UP_LIMIT.as_secs())
        })??;
        let want_wkc = group
            .iter(&maindevice)
            .map(|d| {
                let io = d.io_raw();
                u16::from(!io.inputs().is_empty()) + 2 * u16::from(!io.outputs().is_empty())
            })
            .sum();
        Ok(Master { link, maindevice, group, interface: interface.to_string(), cycle_timeout: timeout, want_wkc })
    }

    /// Busy-poll for replies instead of sleeping until one arrives: the reply is seen sooner, the CPU
    /// is never idle during an exchange.
    pub fn set_busy_poll(&mut self, on: bool) {
        self.link.busy_poll = on;
    }

    /// Replies that came after their exchange gave up (or that ethercrab could not place), dropped.
    pub fn discarded(&self) -> u64 {
        self.link.discarded
    }

    /// Frames the interface refused to send.
    pub fn send_failed(&self) -> u64 {
        self.link.send_failed
    }

    pub fn devices(&self) -> usize {
        self.group.len()
    }

    /// (order number, vendor id, product code) of each device, in segment order.
    pub fn identities(&self) -> Vec<(String, u32, u32)> {
        self.group
            .iter(&self.maindevice)
            .map(|d| (d.name().to_string(), d.identity().vendor_id, d.identity().product_id))
            .collect()
    }

    /// One process-data exchange (outputs out, inputs in), checked: every device processed it and is
    /// in OP. A lost frame lasts the whole limit, as waiting for a frame that never comes does on a real
    /// segment, so a lost segment shows in the cycle time (and trips a watchdog on it).
    pub fn cycle(&mut self) -> Result<(), CycleError> {
        let limit = self.cycle_timeout;
        let deadline = Instant::now() + limit;
        let r = self.link.drive(self.group.tx_rx(&self.maindevice), deadline, limit);
        let resp = match r {
            None => return Err(CycleError::Lost { limit_us: limit.as_micros() as u64 }),
            Some(Err(e)) => return Err(CycleError::Failed(e.to_string())),
            Some(Ok(resp)) => resp,
        };
        if resp.working_counter != self.want_wkc {
            return Err(CycleError::WrongWorkingCounter { got: resp.working_counter, want: self.want_wkc });
        }
        if let Some((device, state)) = resp.subdevice_states.iter().enumerate().find(|(_, s)| **s != SubDeviceState::Op)
        {
            return Err(CycleError::NotOp { device, state: format!("{state}") });
        }
        Ok(())
    }

    /// Device `i`'s inputs and outputs, for `f` to read and write.
    pub fn with_io<R>(&mut self, i: usize, f: impl FnOnce(&[u8], &mut [u8]) -> R) -> Option<R> {
        let d = self.group.subdevice(&self.maindevice, i).ok()?;
        let mut io = d.io_raw_mut();
        let inputs = io.inputs().to_vec();
        Some(f(&inputs, io.outputs()))
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        // Back to INIT, so real devices drop their outputs; errors do not matter any more.
        let group = std::mem::take(&mut self.group);
        let md = &self.maindevice;
        let down = async move {
            if let Ok(g) = group.into_safe_op(md).await
                && let Ok(g) = g.into_pre_op(md).await
            {
                let _ = g.into_init(md).await;
            }
        };
        let _ = self.link.drive(down, Instant::now() + Duration::from_secs(2), TIMER_POLL);
    }
}
