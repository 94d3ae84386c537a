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

use crate::sync::{AtomicU64, Ordering};

mod consumer;
mod producer;

pub use consumer::Consumer;
pub use producer::Producer;

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
