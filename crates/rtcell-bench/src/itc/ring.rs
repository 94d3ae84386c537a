//! rtcell's own channel beside the kernel's: a ring per direction in a shared region, as between the
//! master and a cell. Polled (no system call at all) or with the ring's futex notify (the receiver
//! sleeps in a futex wait, the sender wakes it), as `rtcell bench loopback --notify poll,futex`.

use std::sync::Arc;

use rtcell_host::tsc::rdtsc;
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{Consumer, Producer, RecvError, RegionLayout, RegionView, RingConfig, SendError};

use super::end::{Body, Ctl, End, Fault, Ops, Pair, WAIT_SLICE};

const REQUEST: &str = "request";
const REPLY: &str = "reply";

/// One end: the region, and which ring it sends on.
struct RingEnd {
    shm: Arc<SharedMemory>,
    tx: &'static str,
    rx: &'static str,
    futex: bool,
    ctl: Arc<Ctl>,
}

impl End for RingEnd {
    fn run(self: Box<Self>, body: &mut Body<'_>) -> Result<(), Fault> {
        // Views borrow the region, so they are made here, in the thread that uses them.
        let region = RegionView::attach(self.shm.words()).map_err(|e| Fault::Broken(format!("ring region: {e}")))?;
        let ring = |name: &str| region.ring(name).map_err(|e| Fault::Broken(format!("ring {name}: {e}")));
        let mut ops =
            RingOps { tx: ring(self.tx)?.producer(), rx: ring(self.rx)?.consumer(), futex: self.futex, ctl: &self.ctl };
        body(&mut ops)
    }
}

struct RingOps<'a> {
    tx: Producer<'a>,
    rx: Consumer<'a>,
    futex: bool,
    ctl: &'a Ctl,
}

/// A busy-wait step: every 1024 spins, checks the stop flag and gives up after the poll timeout.
struct Spin {
    spins: u32,
    since: Option<u64>,
}

impl Spin {
    fn new() -> Spin {
        Spin { spins: 0, since: None }
    }

    #[inline]
    fn step(&mut self, ctl: &Ctl, what: &str) -> Result<(), Fault> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % 1024 == 0 {
            ctl.check()?;
            let now = rdtsc();
            let since = *self.since.get_or_insert(now);
            if now.wrapping_sub(since) > ctl.poll_timeout_ticks {
                return Err(Fault::Broken(format!("{what}: the peer did not answer within the poll timeout")));
            }
        }
        std::hint::spin_loop();
        Ok(())
    }
}

impl Ops for RingOps<'_> {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        let mut spin = Spin::new();
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => return Ok(()),
                // One message in flight: full only if the peer stopped reading.
                Err(SendError::Full) => spin.step(self.ctl, "ring send (full)")?,
                Err(e) => return Err(Fault::Broken(format!("ring send: {e:?}"))),
            }
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        let mut spin = Spin::new();
        loop {
            match self.rx.try_recv(buf) {
                Ok(n) => return Ok(n),
                Err(RecvError::Empty) if self.futex => {
                    self.ctl.check()?;
                    self.rx.wait_for_message(WAIT_SLICE.as_nanos() as u64);
                }
                Err(RecvError::Empty) => spin.step(self.ctl, "ring receive")?,
                Err(RecvError::TooSmall { len }) => {
                    return Err(Fault::Broken(format!("a {len}-byte ring message, expected {}", buf.len())));
                }
                Err(RecvError::Corrupt(what)) => return Err(Fault::Broken(format!("ring corrupt: {what}"))),
            }
        }
    }
}

/// A ring per direction for `size`-byte messages, polled or with futex notify.
pub(crate) fn rings(size: usize, futex: bool, ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let mut cfg = RingConfig::for_frames(size as u32, 4);
    cfg.notify = futex;
    let lerr = |e: rtcell_shm::LayoutError| Fault::Broken(format!("ring layout: {e}"));
    let mut layout = RegionLayout::new();
    layout.ring(REQUEST, cfg).map_err(lerr)?.ring(REPLY, cfg).map_err(lerr)?;
    let shm = SharedMemory::create_anonymous("rtcell-itc", layout.size_bytes())
        .map_err(|e| Fault::Os { op: "create the shared region", err: e })?;
    layout.init(shm.words(), std::process::id()).map_err(lerr)?;
    let shm = Arc::new(shm);
    let end = |tx, rx| Box::new(RingEnd { shm: Arc::clone(&shm), tx, rx, futex, ctl: Arc::clone(ctl) });
    Ok((end(REQUEST, REPLY), end(REPLY, REQUEST)))
}
