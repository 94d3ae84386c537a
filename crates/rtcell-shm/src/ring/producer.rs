//! The sending end of a ring.

use super::*;
use crate::sync::{copy_to_words, fence};

/// Sending end of a ring.
pub struct Producer<'a> {
    pub(super) ring: RingView<'a>,
    pub(super) tail: u64,
    pub(super) seq: u64,
    pub(super) head_cache: u64,
    pub(super) oldest_pos: u64,
    pub(super) oldest_seq: u64,
    pub(super) sent: u64,
}

impl<'a> Producer<'a> {
    /// Queues one message of `data.len()` bytes (0 allowed, up to `max_frame`).
    pub fn try_send(&mut self, data: &[u8]) -> Result<(), SendError> {
        let r = self.ring;
        if data.len() > r.cfg.max_frame as usize {
            return Err(SendError::TooLarge { len: data.len(), max: r.cfg.max_frame as usize });
        }
        if self.tail > POS_LIMIT || self.seq > POS_LIMIT {
            return Err(SendError::Corrupt("producer position out of range"));
        }
        let size = (FRAME_HEADER + data.len().div_ceil(16) * 16) as u64;
        let off = self.tail & r.mask;
        let pad = if r.cap - off < size { r.cap - off } else { 0 };
        let start = self.tail + pad;
        // The frame and the sentinel header after it must lie in free space.
        let end = start + size + FRAME_HEADER as u64;
        // The first stamp of the next cache line, zeroed after publishing when it is free too: only so that
        // the line is ours before a later frame puts a sentinel there, keeping that ownership transfer off
        // the critical path of the next send.
        let ahead = ((start + size) & !63) + 64;

        match r.cfg.overflow {
            Overflow::Reject => {
                if self.head_cache > self.tail || end - self.head_cache > r.cap {
                    let head = r.words[C_HEAD].load(Ordering::Acquire);
                    if head > self.tail || self.tail - head > r.cap || head % 16 != 0 {
                        return Err(SendError::Corrupt("consumer head outside the ring"));
                    }
                    self.head_cache = head;
                    if end - head > r.cap {
                        r.words[P_REJECTED].fetch_add(1, Ordering::Relaxed);
                        return Err(SendError::Full);
                    }
                }
            }
            Overflow::OverwriteOldest => {
                if self.oldest_pos > self.tail || self.oldest_seq > POS_LIMIT {
                    return Err(SendError::Corrupt("overwrite bookkeeping outside the ring"));
                }
                if end - self.oldest_pos > r.cap {
                    self.drop_oldest_until(end)?;
                    r.words[P_OLDEST_POS].store(self.oldest_pos, Ordering::Relaxed);
                    r.words[P_OLDEST_SEQ].store(self.oldest_seq, Ordering::Relaxed);
                    // Dropped stamps and the new oldest_seq become visible before any byte we overwrite.
                    fence(Ordering::Release);
                }
            }
        }

        let start_off = start & r.mask;
        let payload_words = data.len().div_ceil(8);
        let Some(payload) = r.data_words(start_off + FRAME_HEADER as u64, payload_words) else {
            return Err(SendError::Corrupt("frame outside the ring"));
        };
        copy_to_words(data, payload);
        r.data(start_off + 8).store(data.len() as u64, Ordering::Relaxed);
        r.data(start + size).store(0, Ordering::Relaxed); // sentinel: not published yet
        if pad > 0 {
            r.data(off + 8).store(FLAG_WRAP << 32, Ordering::Relaxed);
        }
        r.data(start_off).store(self.seq, Ordering::Release);
        if pad > 0 {
            // The marker is published after the frame it points to.
            r.data(off).store(self.seq, Ordering::Release);
        }

        self.tail = start + size;
        self.seq += 1;
        self.sent = self.sent.wrapping_add(1);
        r.words[P_TAIL].store(self.tail, Ordering::Relaxed);
        r.words[P_NEXT_SEQ].store(self.seq, Ordering::Release);
        r.words[P_SENT].store(self.sent, Ordering::Relaxed);
        let free_from = match r.cfg.overflow {
            Overflow::Reject => self.head_cache,
            Overflow::OverwriteOldest => self.oldest_pos,
        };
        if ahead + FRAME_HEADER as u64 - free_from <= r.cap {
            r.data(ahead).store(0, Ordering::Relaxed);
        }
        if r.cfg.notify {
            self.wake();
        }
        Ok(())
    }

    /// Drops frames from the oldest end until the bytes up to `end` are free (OverwriteOldest).
    fn drop_oldest_until(&mut self, end: u64) -> Result<(), SendError> {
        let r = &self.ring;
        let head = r.words[C_HEAD].load(Ordering::Acquire);
        // Each round frees at least 16 bytes and less than a lap ever needs freeing, so an honest ring never
        // needs more rounds than this. A restarted producer reads its positions from shared memory, where
        // the peer may have left anything: they must not keep us here (nearly) forever.
        let mut rounds = r.cap / 16 + 1;
        while end - self.oldest_pos > r.cap {
            if self.oldest_pos >= self.tail || rounds == 0 {
                return Err(SendError::Corrupt("overwrite bookkeeping passed the tail"));
            }
            rounds -= 1;
            let off = self.oldest_pos & r.mask;
            let mut lf = r.data(off + 8).load(Ordering::Relaxed);
            r.data(off).store(0, Ordering::Relaxed);
            if (lf >> 32) & FLAG_WRAP != 0 {
                // A WRAP marker carries the stamp of the frame at offset 0 and is where the consumer looks for
                // that frame: drop the two together, so that `oldest_seq` has moved past the frame before the
                // marker's bytes are reused. (Dropping the marker alone would let a consumer waiting there
                // read the new bytes as that frame's header, unnoticed.)
                self.oldest_pos += r.cap - off;
                if self.oldest_pos >= self.tail {
                    return Err(SendError::Corrupt("overwrite bookkeeping passed the tail"));
                }
                lf = r.data(8).load(Ordering::Relaxed);
                r.data(0).store(0, Ordering::Relaxed);
                if (lf >> 32) & FLAG_WRAP != 0 {
                    return Err(SendError::Corrupt("queued frame length was overwritten"));
                }
            }
            let len = lf & 0xffff_ffff;
            if len > r.cfg.max_frame as u64 {
                return Err(SendError::Corrupt("queued frame length was overwritten"));
            }
            if self.oldest_pos >= head {
                r.words[P_OVERWRITTEN].fetch_add(1, Ordering::Relaxed);
            }
            self.oldest_pos += FRAME_HEADER as u64 + len.div_ceil(16) * 16;
            self.oldest_seq += 1;
            if self.oldest_pos > self.tail {
                return Err(SendError::Corrupt("queued frame length was overwritten"));
            }
        }
        Ok(())
    }

    #[inline]
    fn wake(&self) {
        let r = &self.ring;
        // Pairs with the fence in `wait_for_message`: either the sleeper sees our frame, or we see it waiting.
        fence(Ordering::SeqCst);
        if r.words[W_WAITERS].load(Ordering::Relaxed) != 0 {
            r.words[P_EVENT].fetch_add(1, Ordering::Release);
            #[cfg(all(feature = "std", not(loom)))]
            crate::futex::wake_all(&r.words[P_EVENT]);
        }
    }

    pub fn view(&self) -> &RingView<'a> {
        &self.ring
    }
}
