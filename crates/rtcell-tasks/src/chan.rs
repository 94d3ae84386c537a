//! The channels a task uses, with our (scenario) names for them: signals ([`Sig`]) and ring ends
//! ([`RingEnd`], [`Frames`]). What a peer made impossible in one of them is a corrupt channel
//! ([`StepError::Corrupt`], naming it), which the task's `on_corrupt` handles in one place (the
//! executive); a ring end found corrupted is taken up again from the shared positions next time.

use std::cell::Cell;

use rtcell_shm::sync::Ordering;
use rtcell_shm::{Consumer, Producer, RecvError, RegionView, RingView, SendError, SignalView};

use crate::corrupt::{StepError, ring_corrupt, signal_corrupt};
use crate::spec::{MIN_FRAME_BYTES, TaskSpec};
use crate::stats::StatsWriter;
use crate::work::{try_read_f64s, try_write_f64s};

/// A signal a task uses, with our (scenario) name for it: its errors name the channel.
#[derive(Clone)]
pub struct Sig<'a> {
    pub name: String,
    pub view: SignalView<'a>,
    /// The sequence word as our last write left it (0: none to compare with). A signal has one writer,
    /// so a change between two of our writes is a peer's.
    written: Cell<u64>,
}

impl<'a> Sig<'a> {
    pub fn new(name: &str, view: SignalView<'a>) -> Sig<'a> {
        Sig { name: name.to_string(), view, written: Cell::new(0) }
    }
}

impl<'a> std::ops::Deref for Sig<'a> {
    type Target = SignalView<'a>;
    fn deref(&self) -> &SignalView<'a> {
        &self.view
    }
}

/// [`read_f64s`] of a named signal: a value a peer made impossible is a corrupt channel.
pub fn read_sig(sig: &Sig<'_>, out: &mut [f64]) -> Result<usize, StepError> {
    try_read_f64s(&sig.view, out).map_err(|e| signal_corrupt(&sig.name, "read", e))
}

/// [`write_f64s`] to a named signal: a slot a peer made impossible is a corrupt channel.
/// A slot changed since our last write (we are its only writer) is one too: the write is skipped this
/// time and goes ahead next time (a resync), unless the task trips.
pub fn write_sig(sig: &Sig<'_>, values: &[f64]) -> Result<(), StepError> {
    let last = sig.written.replace(0);
    if last != 0 && sig.view.seq_word().load(Ordering::Acquire) != last {
        return Err(StepError::Corrupt {
            channel: sig.name.clone(),
            what: "write: the slot changed since our last write (a signal has one writer)".into(),
        });
    }
    try_write_f64s(&sig.view, values).map_err(|e| signal_corrupt(&sig.name, "write", e))?;
    sig.written.set(sig.view.seq_word().load(Ordering::Relaxed));
    Ok(())
}

/// One end of a ring a task uses, with our (scenario) name for it. After a step found the ring
/// corrupted the end is `stale`: the next step takes it up again from the ring's shared positions, so
/// the task resyncs once the peer's data is valid again.
pub struct RingEnd<'a, T> {
    name: String,
    view: RingView<'a>,
    end: T,
    stale: bool,
}

impl<'a, T> RingEnd<'a, T> {
    pub(crate) fn new(region: &RegionView<'a>, name: &str, make: fn(&RingView<'a>) -> T) -> Result<Self, String> {
        let view = region.ring(name).map_err(|e| format!("ring {name:?}: {e}"))?;
        Ok(RingEnd { name: name.to_string(), view, end: make(&view), stale: false })
    }

    /// The end, taken up again from the shared positions when the last step found the ring corrupted.
    pub(crate) fn get(&mut self, make: fn(&RingView<'a>) -> T) -> &mut T {
        if self.stale {
            self.end = make(&self.view);
            self.stale = false;
        }
        &mut self.end
    }

    /// A corrupt-channel error for this ring (the end is taken up again next time).
    pub(crate) fn corrupt(&mut self, op: &str, what: &'static str) -> StepError {
        self.stale = true;
        ring_corrupt(&self.name, op, what)
    }

    /// The ring's shared positions checked (see `RingView::check_shared`): an end that finds nothing
    /// to do still notices a peer that broke them.
    fn check(&mut self) -> Result<(), StepError> {
        match self.view.check_shared() {
            Ok(()) => Ok(()),
            Err(what) => Err(self.corrupt("positions", what)),
        }
    }
}

pub(crate) fn producer<'a>(v: &RingView<'a>) -> Producer<'a> {
    v.producer()
}

pub(crate) fn consumer<'a>(v: &RingView<'a>) -> Consumer<'a> {
    v.consumer()
}

/// Frames on a task's `send` / `recv` rings.
pub struct Frames<'a> {
    send: Option<RingEnd<'a, Producer<'a>>>,
    recv: Option<RingEnd<'a, Consumer<'a>>>,
    frame: Vec<u8>,
    buf: Vec<u8>,
    send_seq: u64,
    expect_seq: u64,
}

impl<'a> Frames<'a> {
    pub fn new(spec: &TaskSpec, region: &RegionView<'a>) -> Result<Self, String> {
        let send = match &spec.send {
            Some(n) => Some(RingEnd::new(region, n, producer)?),
            None => None,
        };
        let recv = match &spec.recv {
            Some(n) => Some(RingEnd::new(region, n, consumer)?),
            None => None,
        };
        let max = recv.as_ref().map_or(0, |c| c.view.config().max_frame as usize);
        Ok(Frames {
            send,
            recv,
            frame: vec![0u8; spec.frame_bytes.max(MIN_FRAME_BYTES) as usize],
            buf: vec![0u8; max.max(MIN_FRAME_BYTES as usize)],
            send_seq: 0,
            expect_seq: 0,
        })
    }

    /// One frame out (sequence number, TSC, a value) and everything queued in. A ring a peer corrupted
    /// is a corrupt channel (the task's `on_corrupt` decides what follows).
    #[inline]
    pub fn exchange(&mut self, value: f64, stats: &mut StatsWriter<'_>) -> Result<(), StepError> {
        if let Some(s) = &mut self.send {
            self.frame[0..8].copy_from_slice(&self.send_seq.to_le_bytes());
            self.frame[8..16].copy_from_slice(&rtcell_host::tsc::rdtsc().to_le_bytes());
            self.frame[16..24].copy_from_slice(&value.to_le_bytes());
            self.send_seq += 1;
            match s.get(producer).try_send(&self.frame) {
                Ok(()) => stats.sent += 1,
                Err(SendError::Full) => stats.send_fail += 1,
                Err(SendError::Corrupt(what)) => return Err(s.corrupt("send", what)),
                Err(e @ SendError::TooLarge { .. }) => return Err(StepError::Fault(format!("send: {e:?}"))),
            }
            s.check()?;
        }
        if let Some(c) = &mut self.recv {
            loop {
                match c.get(consumer).try_recv(&mut self.buf) {
                    Ok(n) => {
                        stats.received += 1;
                        if n >= 8 {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(&self.buf[..8]);
                            let seq = u64::from_le_bytes(b);
                            stats.recv_lost += seq.saturating_sub(self.expect_seq);
                            self.expect_seq = seq.max(self.expect_seq) + 1;
                        }
                    }
                    Err(RecvError::Empty) => break,
                    Err(RecvError::Corrupt(what)) => return Err(c.corrupt("receive", what)),
                    // Our buffer holds the ring's largest frame: a longer one is the peer's doing.
                    Err(RecvError::TooSmall { .. }) => {
                        return Err(c.corrupt("receive", "frame length above the ring's frame size"));
                    }
                }
            }
            c.check()?;
        }
        Ok(())
    }
}
