//! Signal: last-is-best state, like an AUTOSAR COM signal. One writer, any number of readers.
//!
//! Layout: `seq`, `len`, then `capacity` bytes of data. The writer makes `seq` odd, issues a release fence,
//! writes length and data word by word, then stores the next even `seq` with release ordering. A reader
//! loads `seq` (acquire), copies, issues an acquire fence and loads `seq` again: equal and even means the
//! copy is whole. This is the classic seqlock with every shared access atomic, so a racing or hostile
//! writer can make a read fail (`Busy`, `Corrupt`), never make it torn or out of bounds.
//!
//! A signal group is one signal whose value is the concatenation of its members: committed and read as a
//! unit (see `com`).

use crate::sync::{AtomicU64, Ordering, copy_from_words, copy_to_words, fence, words_for};

/// Words before the data.
pub const SIGNAL_HEADER_WORDS: usize = 2;
/// How often a reader retries when it races the writer before giving up with `Busy`.
const READ_RETRIES: u32 = 64;

/// How new a value is, from one reader's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Written since this reader last read it.
    New,
    /// The same value this reader saw last time.
    Old,
    /// Never written: the returned value is all zeros of length 0.
    NeverWritten,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalError {
    /// Value longer than the signal's capacity.
    TooLarge { len: usize, max: usize },
    /// The caller's buffer is shorter than the current value (`len` bytes).
    TooSmall { len: usize },
    /// The writer was mid-update on every retry (or died mid-update).
    Busy,
    /// The stored length is impossible: the writer wrote garbage.
    Corrupt(&'static str),
}

/// Shared words of one signal slot.
#[derive(Clone, Copy)]
pub struct SignalView<'a> {
    words: &'a [AtomicU64],
    capacity: usize,
}

impl<'a> SignalView<'a> {
    /// Words needed for a signal of `capacity` bytes.
    pub const fn words_needed(capacity: usize) -> usize {
        SIGNAL_HEADER_WORDS + words_for(capacity)
    }

    /// Wraps a slot. `words` must be exactly `words_needed(capacity)` long.
    pub fn new(words: &'a [AtomicU64], capacity: usize) -> Result<Self, &'static str> {
        if words.len() != Self::words_needed(capacity) {
            return Err("signal slot size does not match its capacity");
        }
        Ok(SignalView { words, capacity })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The sequence word (even when stable; 0 = never written). Also a futex word for sleepers.
    pub fn seq_word(&self) -> &'a AtomicU64 {
        &self.words[0]
    }

    /// Publishes a new value (writer side only).
    pub fn write(&self, data: &[u8]) -> Result<(), SignalError> {
        self.write_with(data.len(), |dst| copy_to_words(data, dst))
    }

    /// Publishes a new value of `len` bytes produced by `fill` into the slot's data words (writer only).
    /// Used by signal groups to commit several members at once.
    pub fn write_with(&self, len: usize, fill: impl FnOnce(&[AtomicU64])) -> Result<(), SignalError> {
        if len > self.capacity {
            return Err(SignalError::TooLarge { len, max: self.capacity });
        }
        // Odd while writing; the next even value is never 0 ("never written"), even when the peer left the
        // word at its largest value.
        let seq = match self.words[0].load(Ordering::Relaxed) | 1 {
            u64::MAX => 1,
            s => s,
        };
        self.words[0].store(seq, Ordering::Relaxed);
        fence(Ordering::Release);
        self.words[1].store(len as u64, Ordering::Relaxed);
        fill(&self.words[SIGNAL_HEADER_WORDS..]);
        self.words[0].store(seq.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Reads the current value into `out`; `last_seen` is this reader's memory of the last sequence number
    /// it read (start at 0), used to tell New from Old.
    pub fn read(&self, out: &mut [u8], last_seen: &mut u64) -> Result<(usize, Freshness), SignalError> {
        let mut len = 0usize;
        let seq = self.read_with(|len_word, data| {
            let l = len_word as usize;
            if l > self.capacity {
                return Err(SignalError::Corrupt("signal length above capacity"));
            }
            if l > out.len() {
                return Err(SignalError::TooSmall { len: l });
            }
            copy_from_words(data, &mut out[..l]);
            len = l;
            Ok(())
        })?;
        // An earlier attempt may have copied a value before a retry saw "never written" (a peer can store
        // 0 in the sequence word): that value is not the answer.
        let len = if seq == 0 { 0 } else { len };
        Ok((len, Self::freshness(seq, last_seen)))
    }

    /// Runs `copy(len_word, data_words)` until it observes a stable value; returns the sequence number.
    /// `copy` may return an error, which is reported only if the value it saw was stable.
    pub fn read_with(
        &self,
        mut copy: impl FnMut(u64, &[AtomicU64]) -> Result<(), SignalError>,
    ) -> Result<u64, SignalError> {
        for _ in 0..READ_RETRIES {
            let s1 = self.words[0].load(Ordering::Acquire);
            if s1 & 1 == 1 {
                crate::sync::spin_loop();
                continue;
            }
            if s1 == 0 {
                return Ok(0);
            }
            let len_word = self.words[1].load(Ordering::Relaxed);
            let res = copy(len_word, &self.words[SIGNAL_HEADER_WORDS..]);
            fence(Ordering::Acquire);
            let s2 = self.words[0].load(Ordering::Relaxed);
            if s1 == s2 {
                return res.map(|()| s1);
            }
        }
        Err(SignalError::Busy)
    }

    fn freshness(seq: u64, last_seen: &mut u64) -> Freshness {
        if seq == 0 {
            Freshness::NeverWritten
        } else if seq == *last_seen {
            Freshness::Old
        } else {
            *last_seen = seq;
            Freshness::New
        }
    }
}
