//! A log of one value per event in a `Raw` channel: a cell appends on its real-time path (no system call,
//! no locked instruction), the host reads the values — live, for progress, or once the writer stopped —
//! as untrusted input. Where a histogram keeps the shape of a distribution, the log keeps every value, so
//! percentiles are exact and each value's position (the event's number) is known.
//!
//! Words: 0 capacity, 1 count (values stored), 2 dropped (values that found the log full), 3 overruns
//! (events the writer counts beside the values, e.g. periodic releases it missed), then `capacity` values.
//! `count` is stored with release ordering after the value it covers, so a reader that loads `count` with
//! acquire ordering sees every value below it.

use crate::sync::{AtomicU64, Ordering};

const W_CAPACITY: usize = 0;
const W_COUNT: usize = 1;
const W_DROPPED: usize = 2;
const W_OVERRUNS: usize = 3;
/// Words before the values.
pub const HEADER_WORDS: usize = 4;

/// Bytes a log of `capacity` values takes in a region (for `RegionLayout::raw`).
pub const fn bytes_for(capacity: usize) -> usize {
    (HEADER_WORDS + capacity) * 8
}

/// The writing side. Keeps its own copy of the counters and the capacity, so nothing a peer writes into
/// the shared words can make it index out of bounds.
pub struct SampleLogWriter<'a> {
    words: &'a [AtomicU64],
    values: &'a [AtomicU64],
    count: usize,
    dropped: u64,
    overruns: u64,
}

impl<'a> SampleLogWriter<'a> {
    /// Lays out an empty log over all of `words` (capacity: `words.len() - HEADER_WORDS`).
    pub fn init(words: &'a [AtomicU64]) -> Result<Self, &'static str> {
        if words.len() <= HEADER_WORDS {
            return Err("sample log channel has no room for values");
        }
        let capacity = words.len() - HEADER_WORDS;
        words[W_COUNT].store(0, Ordering::Relaxed);
        words[W_DROPPED].store(0, Ordering::Relaxed);
        words[W_OVERRUNS].store(0, Ordering::Relaxed);
        // Last, with release: a reader that sees the capacity sees the zeroed counters.
        words[W_CAPACITY].store(capacity as u64, Ordering::Release);
        Ok(SampleLogWriter { words, values: &words[HEADER_WORDS..], count: 0, dropped: 0, overruns: 0 })
    }

    /// Writes every page of the value area once (zeros, in 4 KiB steps), so the first value stored on
    /// each page does not pay for a page fault — or, in a VM, for the host mapping the page.
    pub fn prefault(&self) {
        for w in self.values.iter().step_by(512) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Appends a value; `false` (and counted as dropped) when the log is full.
    #[inline]
    pub fn push(&mut self, value: u64) -> bool {
        match self.values.get(self.count) {
            Some(slot) => {
                slot.store(value, Ordering::Relaxed);
                self.count += 1;
                self.words[W_COUNT].store(self.count as u64, Ordering::Release);
                true
            }
            None => {
                self.dropped = self.dropped.wrapping_add(1);
                self.words[W_DROPPED].store(self.dropped, Ordering::Relaxed);
                false
            }
        }
    }

    /// Adds `n` to the overrun counter.
    #[inline]
    pub fn add_overruns(&mut self, n: u64) {
        self.overruns = self.overruns.wrapping_add(n);
        self.words[W_OVERRUNS].store(self.overruns, Ordering::Relaxed);
    }

    /// Values stored so far.
    pub fn count(&self) -> usize {
        self.count
    }
}

/// What a reader sees: the counters as read by [`SampleLogReader::read`], and the values below `count`.
#[derive(Clone, Copy)]
pub struct SampleLogReader<'a> {
    values: &'a [AtomicU64],
    /// Values readable (the writer's count, clamped to the capacity).
    pub count: usize,
    pub dropped: u64,
    pub overruns: u64,
}

impl<'a> SampleLogReader<'a> {
    /// Checks the capacity the writer recorded against the words available and reads the counters.
    pub fn read(words: &'a [AtomicU64]) -> Result<Self, &'static str> {
        if words.len() < HEADER_WORDS {
            return Err("sample log channel shorter than its header");
        }
        let capacity = words[W_CAPACITY].load(Ordering::Acquire);
        if capacity == 0 {
            return Err("sample log not initialised (capacity 0)");
        }
        if capacity > (words.len() - HEADER_WORDS) as u64 {
            return Err("sample log capacity runs past its channel");
        }
        let values = &words[HEADER_WORDS..HEADER_WORDS + capacity as usize];
        let count = words[W_COUNT].load(Ordering::Acquire).min(capacity) as usize;
        Ok(SampleLogReader {
            values,
            count,
            dropped: words[W_DROPPED].load(Ordering::Relaxed),
            overruns: words[W_OVERRUNS].load(Ordering::Relaxed),
        })
    }

    /// Values the log can hold.
    pub fn capacity(&self) -> usize {
        self.values.len()
    }

    /// Value `i` (`None` at or past `count`).
    pub fn get(&self, i: usize) -> Option<u64> {
        (i < self.count).then(|| self.values[i].load(Ordering::Relaxed))
    }

    /// The values from `from` up to `count`, in order.
    pub fn values_from(&self, from: usize) -> impl Iterator<Item = u64> + 'a {
        let end = self.count;
        self.values[from.min(end)..end].iter().map(|w| w.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize) -> std::vec::Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn appends_reads_and_drops_when_full() {
        let w = words(bytes_for(3) / 8);
        let mut log = SampleLogWriter::init(&w).unwrap();
        assert!(log.push(7) && log.push(0) && log.push(u64::MAX));
        assert!(!log.push(9), "full");
        log.add_overruns(2);
        let r = SampleLogReader::read(&w).unwrap();
        assert_eq!((r.count, r.capacity(), r.dropped, r.overruns), (3, 3, 1, 2));
        assert_eq!(r.values_from(0).collect::<std::vec::Vec<_>>(), [7, 0, u64::MAX]);
        assert_eq!(r.values_from(2).collect::<std::vec::Vec<_>>(), [u64::MAX]);
        assert_eq!(r.values_from(10).count(), 0);
        assert_eq!((r.get(1), r.get(3)), (Some(0), None));
        assert_eq!(log.count(), 3);
    }

    #[test]
    fn refuses_bad_shapes() {
        let w = words(HEADER_WORDS);
        assert!(SampleLogWriter::init(&w).is_err(), "no room for values");
        assert!(SampleLogReader::read(&w[..3]).is_err(), "short header");
        assert!(SampleLogReader::read(&w).is_err(), "not initialised");
    }

    #[test]
    fn reader_survives_hostile_counters() {
        let w = words(bytes_for(2) / 8);
        SampleLogWriter::init(&w).unwrap();
        w[W_COUNT].store(u64::MAX, Ordering::Relaxed);
        let r = SampleLogReader::read(&w).unwrap();
        assert_eq!(r.count, 2, "count clamped to the capacity");
        for bad in [3, u64::MAX] {
            w[W_CAPACITY].store(bad, Ordering::Relaxed);
            assert!(SampleLogReader::read(&w).is_err(), "capacity {bad}");
        }
    }

    #[test]
    fn writer_ignores_peer_writes_to_its_shape() {
        let w = words(bytes_for(1) / 8);
        let mut log = SampleLogWriter::init(&w).unwrap();
        w[W_CAPACITY].store(u64::MAX, Ordering::Relaxed);
        w[W_COUNT].store(0, Ordering::Relaxed);
        assert!(log.push(5));
        assert!(!log.push(6));
        assert_eq!(w[HEADER_WORDS].load(Ordering::Relaxed), 5);
        assert_eq!(w[W_DROPPED].load(Ordering::Relaxed), 1);
    }
}
