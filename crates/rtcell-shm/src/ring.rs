//! Ring: queued, variable-length messages from one producer to one consumer.
//!
//! Layout (all words little-endian `u64`, offsets in bytes from the start of the channel):
//!
//! | bytes       | written by | words                                                                 |
//! |-------------|------------|-----------------------------------------------------------------------|
//! | 0..64       | producer   | tail, next_seq, sent, rejected, overwritten, oldest_pos, oldest_seq, event |
//! | 64..128     | consumer   | head, received, lost, expected                                        |
//! | 128..192    | consumer   | waiters (sides asleep in a futex wait)                                |
//! | 192..       | producer   | data: `capacity` bytes of frames                                      |
//!
//! A frame is a 16-byte header — `stamp` (its sequence number, 1, 2, ...) and `len | flags << 32` —
//! followed by the payload padded to 16 bytes. Frames never wrap: when the rest of the data area is too
//! short, the producer leaves a WRAP marker and writes the frame at offset 0.
//!
//! **Publication.** The producer writes the payload and length, zeroes the stamp of the position after the
//! frame (the *sentinel*), and only then stores the stamp with release ordering. The consumer polls the stamp
//! at its own position: it is either 0 (nothing yet) or exactly the sequence number it expects. So the
//! consumer touches one cache line per small message and never reads the producer's indices — the round
//! trip costs what a bare cache-line ping-pong costs. Anything else in the stamp means the peer wrote
//! garbage: `Corrupt`.
//!
//! **Reject** (default): the producer never overwrites unread bytes. It keeps a cached copy of the
//! consumer's `head` and reloads it only when the ring looks full; when it is still full, `try_send`
//! returns `Full` and `rejected` grows.
//!
//! **OverwriteOldest**: the producer never waits. When it needs room it drops the oldest frames itself: it
//! zeroes their stamps, advances `oldest_seq`/`oldest_pos` (published), issues a release fence and only
//! then writes over their bytes. This is a seqlock whose version is `oldest_seq`: the consumer accepts
//! frame `s` only if, after copying it and an acquire fence, `oldest_seq <= s` still holds — if any byte it
//! copied came from a newer frame, the fence pairing guarantees it sees the advanced `oldest_seq`. When it
//! finds itself lapped, it jumps to the published oldest frame (validated by that frame's own stamp) and
//! adds the skipped count to `lost`. With a single consumer this is exact: every sequence number is either
//! received or counted as lost.
//!
//! Every index, length and stamp read from shared memory is checked before use; nothing the peer writes
//! can make either side read or write outside the channel, loop forever, or panic.

use crate::sync::{AtomicU64, Ordering, copy_from_words, copy_to_words, fence};

/// Bytes in a frame header.
pub const FRAME_HEADER: usize = 16;
/// Bytes before the data area (three cache lines: producer, consumer, waiters).
pub const RING_CONTROL_BYTES: usize = 192;
/// Flag in a frame header: the rest of the data area is padding, the next frame is at offset 0.
const FLAG_WRAP: u64 = 1;

// Word indices inside the control lines.
const P_TAIL: usize = 0;
const P_NEXT_SEQ: usize = 1;
const P_SENT: usize = 2;
const P_REJECTED: usize = 3;
const P_OVERWRITTEN: usize = 4;
const P_OLDEST_POS: usize = 5;
const P_OLDEST_SEQ: usize = 6;
const P_EVENT: usize = 7;
const C_HEAD: usize = 8;
const C_RECEIVED: usize = 9;
const C_LOST: usize = 10;
const C_EXPECTED: usize = 11;
const W_WAITERS: usize = 16;
const DATA: usize = RING_CONTROL_BYTES / 8;

/// What the producer does when the consumer has not made room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Refuse the new message (`Full`); nothing already queued is lost.
    Reject,
    /// Drop the oldest queued messages; the consumer learns how many it lost.
    OverwriteOldest,
}

/// Static shape of a ring, as recorded in the region's channel table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes of the data area (a power of two, at least 64).
    pub capacity: u32,
    /// Largest payload a frame may carry.
    pub max_frame: u32,
    pub overflow: Overflow,
    /// Whether the producer wakes consumers that sleep in a futex wait (costs a fence per send).
    pub notify: bool,
}

impl RingConfig {
    /// A ring that holds at least `frames` frames of `max_frame` bytes. Panics when that ring would be
    /// larger than a ring can be ([`RingConfig::try_for_frames`] says so instead).
    pub const fn for_frames(max_frame: u32, frames: u32) -> RingConfig {
        match RingConfig::try_for_frames(max_frame, frames) {
            Some(c) => c,
            None => panic!("ring too large: frames x max_frame above 2 GiB"),
        }
    }

    /// [`RingConfig::for_frames`], or `None` when the ring's capacity (a power of two in a `u32`) would
    /// be above 2 GiB: the arithmetic never wraps.
    pub const fn try_for_frames(max_frame: u32, frames: u32) -> Option<RingConfig> {
        let frame = FRAME_HEADER as u64 + ((max_frame as u64 + 15) & !15);
        let need = frame * frames as u64 + FRAME_HEADER as u64 + 64;
        if need > 1 << 31 {
            return None;
        }
        let capacity = (need as u32).next_power_of_two();
        let capacity = if capacity < 64 { 64 } else { capacity };
        Some(RingConfig { capacity, max_frame, overflow: Overflow::Reject, notify: false })
    }

    /// Bytes the whole channel takes in the region.
    pub const fn channel_bytes(&self) -> usize {
        RING_CONTROL_BYTES + self.capacity as usize
    }

    /// Checks the shape: a frame of `max_frame` bytes must always fit twice, so a send can always succeed
    /// once the consumer has caught up.
    pub fn validate(&self) -> Result<(), &'static str> {
        // A power of two, so positions wrap with a mask instead of a division on the hot path.
        if self.capacity < 64 || !self.capacity.is_power_of_two() {
            return Err("ring capacity must be a power of two of at least 64 bytes");
        }
        if self.max_frame > MAX_FRAME_LIMIT {
            return Err("ring max_frame is above the 16 MiB limit");
        }
        let frame = FRAME_HEADER as u64 + round16(self.max_frame) as u64;
        if (self.capacity as u64) < 2 * frame + FRAME_HEADER as u64 {
            return Err("ring capacity must hold two frames of max_frame bytes plus a 16-byte header");
        }
        Ok(())
    }
}

/// Largest `max_frame` a ring accepts.
pub const MAX_FRAME_LIMIT: u32 = 16 << 20;

/// Positions and sequence numbers never get this large in an honest ring (2^63 bytes is decades of
/// traffic); below it, no arithmetic on them can overflow. A side that (re)starts takes its state from
/// shared memory, where the peer may have left anything, and checks it against this bound.
const POS_LIMIT: u64 = 1 << 63;

const fn round16(n: u32) -> u32 {
    (n + 15) & !15
}

/// Why `try_send` did not send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No room (Reject policy); try again later.
    Full,
    /// Payload above the ring's `max_frame`.
    TooLarge { len: usize, max: usize },
    /// The consumer's index is impossible: the peer wrote garbage.
    Corrupt(&'static str),
}

/// Why `try_recv` returned no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvError {
    /// Nothing queued.
    Empty,
    /// The next message has `len` bytes, more than the buffer given; it stays queued.
    TooSmall { len: usize },
    /// The shared state is impossible: the peer wrote garbage. The ring stays poisoned.
    Corrupt(&'static str),
}

/// Counters of a ring, readable from either side (shared memory: figures to show, not to size anything).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Messages queued by the producer.
    pub sent: u64,
    /// Messages the consumer took.
    pub received: u64,
    /// Sends refused because the ring was full (Reject): never queued, so never lost.
    pub rejected: u64,
    /// Queued messages the producer dropped before the consumer took them (OverwriteOldest).
    pub overwritten: u64,
    /// Queued messages the consumer found dropped when it caught up (the same messages as `overwritten`,
    /// counted by the consumer once it notices).
    pub lost: u64,
}

/// Shared words of one ring channel, with its checked configuration.
#[derive(Clone, Copy)]
pub struct RingView<'a> {
    words: &'a [AtomicU64],
    cfg: RingConfig,
    cap: u64,
    /// `cap - 1`: byte positions wrap with a mask.
    mask: u64,
}

impl<'a> RingView<'a> {
    /// Wraps the channel's words. `words` must be exactly `cfg.channel_bytes() / 8` long.
    pub fn new(words: &'a [AtomicU64], cfg: RingConfig) -> Result<Self, &'static str> {
        cfg.validate()?;
        if words.len() != cfg.channel_bytes() / 8 {
            return Err("ring channel size does not match its capacity");
        }
        Ok(RingView { words, cfg, cap: cfg.capacity as u64, mask: cfg.capacity as u64 - 1 })
    }

    /// Writes the initial state (creator only, before anyone attaches).
    pub fn init(&self) {
        for w in self.words {
            w.store(0, Ordering::Relaxed);
        }
        self.words[P_NEXT_SEQ].store(1, Ordering::Relaxed);
        self.words[P_OLDEST_SEQ].store(1, Ordering::Relaxed);
        self.words[C_EXPECTED].store(1, Ordering::Relaxed);
    }

    pub fn config(&self) -> RingConfig {
        self.cfg
    }

    pub fn counters(&self) -> RingCounters {
        let r = |i: usize| self.words[i].load(Ordering::Relaxed);
        RingCounters {
            sent: r(P_SENT),
            received: r(C_RECEIVED),
            rejected: r(P_REJECTED),
            overwritten: r(P_OVERWRITTEN),
            lost: r(C_LOST),
        }
    }

    /// The futex word the producer bumps when a sleeping consumer waits.
    pub fn event_word(&self) -> &'a AtomicU64 {
        &self.words[P_EVENT]
    }

    /// Frames the receiver will never get: those it found overwritten (`lost`) plus those the sender has
    /// dropped that it has not reached yet. Unlike `overwritten`, never counts a frame the receiver took
    /// while the sender was dropping it; exact once both sides stop, approximate while they run.
    pub fn lost_total(&self) -> u64 {
        let lost = self.words[C_LOST].load(Ordering::Relaxed);
        let expected = self.words[C_EXPECTED].load(Ordering::Relaxed);
        let oldest = self.words[P_OLDEST_SEQ].load(Ordering::Relaxed);
        lost.wrapping_add(oldest.saturating_sub(expected))
    }

    /// Checks the shared positions against what either side can have written: positions in range, the
    /// consumer never more than a frame past the producer, sequence numbers in order. Holds at any moment of an honest run
    /// (read consumer first, then producer: both only move forward). `Err` names what a peer broke.
    pub fn check_shared(&self) -> Result<(), &'static str> {
        let r = |i: usize| self.words[i].load(Ordering::Acquire);
        let (head, expected) = (r(C_HEAD), r(C_EXPECTED));
        let oldest_seq = r(P_OLDEST_SEQ);
        let (tail, next) = (r(P_TAIL), r(P_NEXT_SEQ));
        if head > POS_LIMIT || tail > POS_LIMIT || next > POS_LIMIT || expected > POS_LIMIT {
            return Err("a position or sequence number is out of range");
        }
        // The producer publishes a frame's stamp before its tail and next sequence number: the consumer
        // may be one frame (at most the ring) ahead of them for a moment.
        if head > tail.saturating_add(self.cap) {
            return Err("the consumer head is past the producer tail");
        }
        if expected == 0 || expected > next.saturating_add(1) || oldest_seq > next {
            return Err("sequence numbers out of order");
        }
        Ok(())
    }

    /// Frames sent but not yet received (approximate while both sides run).
    pub fn queued(&self) -> u64 {
        let next = self.words[P_NEXT_SEQ].load(Ordering::Relaxed);
        let expected = self.words[C_EXPECTED].load(Ordering::Relaxed);
        next.saturating_sub(expected)
    }

    #[inline]
    fn data(&self, byte_off: u64) -> &'a AtomicU64 {
        // Offsets are reduced modulo the capacity and 8-aligned by construction; index stays in bounds.
        &self.words[DATA + (byte_off & self.mask) as usize / 8]
    }

    /// Words of the data area starting at offset `off` (< capacity), `n` words long, bounds-checked.
    #[inline]
    fn data_words(&self, off: u64, n: usize) -> Option<&'a [AtomicU64]> {
        let start = DATA + (off / 8) as usize;
        self.words.get(start..start.checked_add(n)?)
    }

    /// The producer end. Only one may exist at a time across all processes sharing the region.
    pub fn producer(&self) -> Producer<'a> {
        let tail = self.words[P_TAIL].load(Ordering::Relaxed);
        let seq = self.words[P_NEXT_SEQ].load(Ordering::Relaxed);
        Producer {
            ring: *self,
            tail,
            seq,
            head_cache: self.words[C_HEAD].load(Ordering::Acquire),
            oldest_pos: self.words[P_OLDEST_POS].load(Ordering::Relaxed),
            oldest_seq: self.words[P_OLDEST_SEQ].load(Ordering::Relaxed),
            sent: self.words[P_SENT].load(Ordering::Relaxed),
        }
    }

    /// The consumer end. Only one may exist at a time across all processes sharing the region.
    pub fn consumer(&self) -> Consumer<'a> {
        Consumer {
            ring: *self,
            head: self.words[C_HEAD].load(Ordering::Relaxed),
            expected: self.words[C_EXPECTED].load(Ordering::Relaxed),
            received: self.words[C_RECEIVED].load(Ordering::Relaxed),
            skipped: 0,
        }
    }
}

/// Sending end of a ring.
pub struct Producer<'a> {
    ring: RingView<'a>,
    tail: u64,
    seq: u64,
    head_cache: u64,
    oldest_pos: u64,
    oldest_seq: u64,
    sent: u64,
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

/// Receiving end of a ring.
pub struct Consumer<'a> {
    ring: RingView<'a>,
    head: u64,
    expected: u64,
    received: u64,
    /// Messages this consumer found dropped (its own count; the shared `lost` is the peer's to scribble).
    skipped: u64,
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
