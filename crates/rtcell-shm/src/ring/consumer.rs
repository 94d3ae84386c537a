//! The receiving end of a ring.

use super::*;
use crate::sync::{copy_from_words, fence};

/// Receiving end of a ring.
pub struct Consumer<'a> {
    pub(super) ring: RingView<'a>,
    pub(super) head: u64,
    pub(super) expected: u64,
    pub(super) received: u64,
    /// Messages this consumer found dropped (its own count; the shared `lost` is the peer's to scribble).
    pub(super) skipped: u64,
}

impl<'a> Consumer<'a> {
    /// Takes the next message into `out`, returning its length.
    pub fn try_recv(&mut self, out: &mut [u8]) -> Result<usize, RecvError> {
        if self.head > POS_LIMIT || self.expected > POS_LIMIT {
            return Err(RecvError::Corrupt("consumer position out of range"));
        }
        match self.ring.cfg.overflow {
            Overflow::Reject => self.recv_reject(out),
            Overflow::OverwriteOldest => {
                // A producer that laps us again while we resync makes us retry; a bounded number of times
                // so a runaway peer cannot hold us here.
                for _ in 0..8 {
                    match self.recv_overwrite(out) {
                        Err(Lapped) => continue,
                        Ok(r) => return r,
                    }
                }
                Err(RecvError::Empty)
            }
        }
    }

    /// Reads the header at the consumer's position. Returns (frame start position, payload length).
    #[inline]
    fn locate(&self, stamp: u64) -> Result<(u64, usize), RecvError> {
        let r = &self.ring;
        let off = self.head & r.mask;
        let lf = r.data(off + 8).load(Ordering::Relaxed);
        let mut start = self.head;
        let mut len_flags = lf;
        if (lf >> 32) & FLAG_WRAP != 0 {
            if lf & 0xffff_ffff != 0 || off == 0 {
                return Err(RecvError::Corrupt("malformed wrap marker"));
            }
            start = self.head + (r.cap - off);
            let at0 = r.data(0).load(Ordering::Acquire);
            if at0 != stamp {
                // An OverwriteOldest producer zeroes the stamps of the frames it drops before it publishes the
                // new `oldest_seq`: a zero here can be that frame being dropped right now (the next call sees
                // `oldest_seq` moved and resyncs), not necessarily garbage.
                return Err(if at0 == 0 && r.cfg.overflow == Overflow::OverwriteOldest {
                    RecvError::Empty
                } else {
                    RecvError::Corrupt("wrap marker without a frame at offset 0")
                });
            }
            len_flags = r.data(8).load(Ordering::Relaxed);
        }
        if len_flags >> 32 != 0 {
            return Err(RecvError::Corrupt("unknown frame flags"));
        }
        let len = (len_flags & 0xffff_ffff) as usize;
        if len > r.cfg.max_frame as usize {
            return Err(RecvError::Corrupt("frame length above max_frame"));
        }
        let end = (start & r.mask) + (FRAME_HEADER + len.div_ceil(16) * 16) as u64;
        if end > r.cap {
            return Err(RecvError::Corrupt("frame runs past the end of the ring"));
        }
        Ok((start, len))
    }

    #[inline]
    fn copy_out(&self, start: u64, len: usize, out: &mut [u8]) -> Result<(), RecvError> {
        let Some(src) = self.ring.data_words((start & self.ring.mask) + FRAME_HEADER as u64, len.div_ceil(8)) else {
            return Err(RecvError::Corrupt("frame outside the ring"));
        };
        copy_from_words(src, &mut out[..len]);
        Ok(())
    }

    #[inline]
    fn commit(&mut self, start: u64, len: usize) {
        let r = &self.ring;
        self.head = start + (FRAME_HEADER + len.div_ceil(16) * 16) as u64;
        self.expected += 1;
        self.received = self.received.wrapping_add(1);
        r.words[C_HEAD].store(self.head, Ordering::Release);
        r.words[C_EXPECTED].store(self.expected, Ordering::Relaxed);
        r.words[C_RECEIVED].store(self.received, Ordering::Relaxed);
    }

    fn recv_reject(&mut self, out: &mut [u8]) -> Result<usize, RecvError> {
        let stamp = self.ring.data(self.head & self.ring.mask).load(Ordering::Acquire);
        if stamp != self.expected {
            return Err(if stamp == 0 {
                RecvError::Empty
            } else {
                RecvError::Corrupt("frame stamp is not the expected sequence number")
            });
        }
        let (start, len) = self.locate(stamp)?;
        if len > out.len() {
            return Err(RecvError::TooSmall { len });
        }
        self.copy_out(start, len, out)?;
        self.commit(start, len);
        Ok(len)
    }

    fn recv_overwrite(&mut self, out: &mut [u8]) -> Result<Result<usize, RecvError>, Lapped> {
        let r = self.ring;
        let stamp = r.data(self.head & r.mask).load(Ordering::Acquire);
        let oldest = r.words[P_OLDEST_SEQ].load(Ordering::Relaxed);
        if oldest > self.expected {
            self.resync()?;
            return Err(Lapped);
        }
        if stamp != self.expected {
            return Ok(Err(if stamp == 0 {
                RecvError::Empty
            } else {
                RecvError::Corrupt("frame stamp is not the expected sequence number")
            }));
        }
        let (start, len) = match self.locate(stamp) {
            Ok(v) => v,
            // What we read may have been torn by the producer overwriting it: only trust the error if the
            // frame was not dropped meanwhile.
            Err(e) => return self.unless_dropped(Err(e)),
        };
        if len > out.len() {
            return self.unless_dropped(Err(RecvError::TooSmall { len }));
        }
        if let Err(e) = self.copy_out(start, len, out) {
            return self.unless_dropped(Err(e));
        }
        fence(Ordering::Acquire);
        if r.words[P_OLDEST_SEQ].load(Ordering::Relaxed) > self.expected {
            return Err(Lapped);
        }
        self.commit(start, len);
        Ok(Ok(len))
    }

    fn unless_dropped(&self, res: Result<usize, RecvError>) -> Result<Result<usize, RecvError>, Lapped> {
        fence(Ordering::Acquire);
        if self.ring.words[P_OLDEST_SEQ].load(Ordering::Relaxed) > self.expected { Err(Lapped) } else { Ok(res) }
    }

    /// Jumps to the oldest frame the producer still holds, counting what we skipped as lost.
    fn resync(&mut self) -> Result<(), Lapped> {
        let r = &self.ring;
        let seq = r.words[P_OLDEST_SEQ].load(Ordering::Acquire);
        let pos = r.words[P_OLDEST_POS].load(Ordering::Acquire);
        if pos % 16 != 0 || seq <= self.expected || pos < self.head || pos > POS_LIMIT || seq > POS_LIMIT {
            return Err(Lapped); // mid-update or impossible: try again, bounded by the caller
        }
        // The pair is consistent only if the frame there carries that sequence number.
        if r.data(pos & r.mask).load(Ordering::Acquire) != seq {
            return Err(Lapped);
        }
        let skipped = seq - self.expected;
        self.head = pos;
        self.expected = seq;
        self.skipped = self.skipped.wrapping_add(skipped);
        r.words[C_LOST].fetch_add(skipped, Ordering::Relaxed);
        r.words[C_HEAD].store(self.head, Ordering::Release);
        r.words[C_EXPECTED].store(self.expected, Ordering::Relaxed);
        Ok(())
    }

    /// Messages this consumer found dropped by the producer before it could take them, since it was made.
    /// Sends the producer refused (`Full`) were never queued and are not counted.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Whether a message may be waiting (a cheap poll; `try_recv` is the authority).
    #[inline]
    pub fn has_message(&self) -> bool {
        self.ring.data(self.head & self.ring.mask).load(Ordering::Acquire) != 0
    }

    /// Sleeps until the producer sends (requires a ring created with `notify`) or `timeout_ns` passes.
    /// Returns at once if a message is already waiting. Spurious wake-ups are possible: call `try_recv`.
    #[cfg(all(feature = "std", not(loom)))]
    pub fn wait_for_message(&self, timeout_ns: u64) {
        let r = &self.ring;
        r.words[W_WAITERS].fetch_add(1, Ordering::SeqCst);
        let seen = r.words[P_EVENT].load(Ordering::Acquire);
        fence(Ordering::SeqCst);
        if !self.has_message() {
            crate::futex::wait(&r.words[P_EVENT], seen, timeout_ns);
        }
        r.words[W_WAITERS].fetch_sub(1, Ordering::SeqCst);
    }

    pub fn view(&self) -> &RingView<'a> {
        &self.ring
    }
}

/// Internal: the producer overwrote what we were reading.
struct Lapped;
