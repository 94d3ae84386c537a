//! A fixed-bucket latency histogram in a `Raw` channel: one cell writes it on its real-time path, the
//! host reads it (as untrusted input) whenever it likes.
//!
//! Words: 0 count, 1 min, 2 max, 3 sum, 4 overruns, 5 bucket_width_ns, 6 nbuckets, 7 overflow, then
//! `nbuckets` bucket counters. Bucket `i` counts values in `[i * width, (i + 1) * width)`; `overflow`
//! counts values at or above `nbuckets * width`. `min` is `u64::MAX` while `count` is 0.
//!
//! There is one writer, so it keeps the counters in its own memory and only stores them (relaxed, like
//! the rest of the crate; no read-modify-write on shared words). A reader that looks while the writer
//! runs sees each word whole, but the words need not agree with each other (the buckets may sum to a
//! little more or less than `count`); once the writer has stopped they are exact.

use crate::sync::{AtomicU64, Ordering};

const W_COUNT: usize = 0;
const W_MIN: usize = 1;
const W_MAX: usize = 2;
const W_SUM: usize = 3;
const W_OVERRUNS: usize = 4;
const W_WIDTH: usize = 5;
const W_NBUCKETS: usize = 6;
const W_OVERFLOW: usize = 7;
/// Words before the bucket counters.
pub const HEADER_WORDS: usize = 8;
/// Most buckets a histogram may have (8 MiB of counters).
pub const MAX_BUCKETS: usize = 1 << 20;

/// Bytes a histogram of `nbuckets` buckets takes in a region (for `RegionLayout::raw`).
pub const fn bytes_for(nbuckets: usize) -> usize {
    (HEADER_WORDS + nbuckets) * 8
}

/// The writing side (the cell). Holds its own copy of every counter and of the shape, so nothing a peer
/// writes into the shared words can make it index out of bounds.
pub struct HistogramWriter<'a> {
    words: &'a [AtomicU64],
    width: u64,
    buckets: &'a [AtomicU64],
    count: u64,
    min: u64,
    max: u64,
    sum: u64,
    overruns: u64,
    overflow: u64,
}

impl<'a> HistogramWriter<'a> {
    /// Lays out an empty histogram of `nbuckets` buckets `bucket_width_ns` wide in `words`.
    /// `nbuckets` is stored last (release), so a reader never sees a half-initialised shape.
    pub fn init(words: &'a [AtomicU64], bucket_width_ns: u64, nbuckets: usize) -> Result<Self, &'static str> {
        if bucket_width_ns == 0 {
            return Err("histogram bucket width must be above 0 ns");
        }
        if nbuckets == 0 || nbuckets > MAX_BUCKETS {
            return Err("histogram must have 1..=1048576 buckets");
        }
        if words.len() < HEADER_WORDS + nbuckets {
            return Err("histogram channel too small for its buckets");
        }
        let shared = &words[..HEADER_WORDS + nbuckets];
        for w in shared {
            w.store(0, Ordering::Relaxed);
        }
        shared[W_MIN].store(u64::MAX, Ordering::Relaxed);
        shared[W_WIDTH].store(bucket_width_ns, Ordering::Relaxed);
        shared[W_NBUCKETS].store(nbuckets as u64, Ordering::Release);
        Ok(HistogramWriter {
            words: shared,
            width: bucket_width_ns,
            buckets: &shared[HEADER_WORDS..],
            count: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
            overruns: 0,
            overflow: 0,
        })
    }

    /// Counts one value.
    #[inline]
    pub fn record(&mut self, value_ns: u64) {
        let i = usize::try_from(value_ns / self.width).unwrap_or(usize::MAX);
        match self.buckets.get(i) {
            Some(b) => {
                // Our own word: a plain load and store, no locked instruction.
                b.store(b.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
            }
            _ => {
                self.overflow = self.overflow.wrapping_add(1);
                self.words[W_OVERFLOW].store(self.overflow, Ordering::Relaxed);
            }
        }
        if value_ns < self.min {
            self.min = value_ns;
            self.words[W_MIN].store(value_ns, Ordering::Relaxed);
        }
        if value_ns > self.max {
            self.max = value_ns;
            self.words[W_MAX].store(value_ns, Ordering::Relaxed);
        }
        self.sum = self.sum.saturating_add(value_ns);
        self.words[W_SUM].store(self.sum, Ordering::Relaxed);
        self.count = self.count.wrapping_add(1);
        self.words[W_COUNT].store(self.count, Ordering::Release);
    }

    /// Counts one missed deadline (an activation that came more than a period late).
    #[inline]
    pub fn record_overrun(&mut self) {
        self.overruns = self.overruns.wrapping_add(1);
        self.words[W_OVERRUNS].store(self.overruns, Ordering::Relaxed);
    }

    /// Values recorded so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// What a reader sees: the scalar counters as read by [`HistogramReader::read`], and the bucket counters
/// (read live, bounds-checked, by [`HistogramReader::bucket`]).
#[derive(Clone, Copy)]
pub struct HistogramReader<'a> {
    buckets: &'a [AtomicU64],
    pub count: u64,
    /// Sum of all values (saturating).
    pub sum: u64,
    pub overruns: u64,
    /// Values at or above `nbuckets * bucket_width_ns`.
    pub overflow: u64,
    pub bucket_width_ns: u64,
    min: u64,
    max: u64,
}

impl<'a> HistogramReader<'a> {
    /// Checks the shape the writer recorded against the words available and reads the counters.
    pub fn read(words: &'a [AtomicU64]) -> Result<Self, &'static str> {
        if words.len() < HEADER_WORDS {
            return Err("histogram channel shorter than its header");
        }
        let nbuckets = words[W_NBUCKETS].load(Ordering::Acquire);
        if nbuckets == 0 {
            return Err("histogram not initialised (no buckets)");
        }
        let available = (words.len() - HEADER_WORDS) as u64;
        if nbuckets > available || nbuckets > MAX_BUCKETS as u64 {
            return Err("histogram bucket count runs past its channel");
        }
        let bucket_width_ns = words[W_WIDTH].load(Ordering::Relaxed);
        if bucket_width_ns == 0 {
            return Err("histogram bucket width is 0");
        }
        let r = |i: usize| words[i].load(Ordering::Relaxed);
        Ok(HistogramReader {
            buckets: &words[HEADER_WORDS..HEADER_WORDS + nbuckets as usize],
            count: words[W_COUNT].load(Ordering::Acquire),
            sum: r(W_SUM),
            overruns: r(W_OVERRUNS),
            overflow: r(W_OVERFLOW),
            bucket_width_ns,
            min: r(W_MIN),
            max: r(W_MAX),
        })
    }

    /// Number of bucket counters.
    pub fn nbuckets(&self) -> usize {
        self.buckets.len()
    }

    /// Smallest value, if any was recorded.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value, if any was recorded.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Mean value, if any was recorded.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// Counter of bucket `i` (`None` past the last bucket).
    pub fn bucket(&self, i: usize) -> Option<u64> {
        self.buckets.get(i).map(|w| w.load(Ordering::Relaxed))
    }

    /// `(lower bound ns, count)` of every bucket, in order.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let width = self.bucket_width_ns;
        self.buckets.iter().enumerate().map(move |(i, w)| ((i as u64).saturating_mul(width), w.load(Ordering::Relaxed)))
    }

    /// Values counted in buckets and overflow (saturating; may differ from `count` while the writer runs).
    pub fn total(&self) -> u64 {
        let t = self.buckets().fold(self.overflow as u128, |t, (_, c)| t + c as u128);
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// Upper bound (ns) of the bucket holding the `q`-quantile (`q` in 0..=1) of the bucketed values;
    /// `None` if nothing was recorded or the quantile lies in the overflow (then only `max` bounds it).
    pub fn quantile_upper_ns(&self, q: f64) -> Option<u64> {
        let total = self.total();
        if total == 0 || q.is_nan() {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        // Rank of the wanted value, 1-based: ceil(q * total), at least 1.
        let exact = q * total as f64;
        let mut rank = exact as u64;
        if (rank as f64) < exact {
            rank += 1;
        }
        let rank = rank.max(1);
        let mut seen: u64 = 0;
        for (lower, c) in self.buckets() {
            seen = seen.saturating_add(c);
            if seen >= rank {
                return Some(lower.saturating_add(self.bucket_width_ns));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize) -> std::vec::Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn records_into_buckets_and_overflow() {
        let w = words(bytes_for(4) / 8);
        let mut h = HistogramWriter::init(&w, 10, 4).unwrap();
        for v in [0, 9, 10, 39, 40, u64::MAX] {
            h.record(v);
        }
        h.record_overrun();
        let r = HistogramReader::read(&w).unwrap();
        assert_eq!(r.count, 6);
        assert_eq!(r.nbuckets(), 4);
        assert_eq!(r.buckets().collect::<std::vec::Vec<_>>(), [(0, 2), (10, 1), (20, 0), (30, 1)]);
        assert_eq!(r.overflow, 2);
        assert_eq!(r.overruns, 1);
        assert_eq!(r.min(), Some(0));
        assert_eq!(r.max(), Some(u64::MAX));
        assert_eq!(r.sum, u64::MAX, "sum saturates");
        assert_eq!(r.total(), 6);
        assert_eq!(r.bucket(4), None);
        assert_eq!(r.quantile_upper_ns(0.0), Some(10));
        assert_eq!(r.quantile_upper_ns(0.5), Some(20));
        assert_eq!(r.quantile_upper_ns(0.66), Some(40));
        assert_eq!(r.quantile_upper_ns(1.0), None, "in the overflow");
    }

    #[test]
    fn empty_histogram() {
        let w = words(bytes_for(3) / 8);
        HistogramWriter::init(&w, 1000, 3).unwrap();
        let r = HistogramReader::read(&w).unwrap();
        assert_eq!((r.count, r.min(), r.max(), r.mean()), (0, None, None, None));
        assert_eq!(r.quantile_upper_ns(0.99), None);
    }

    #[test]
    fn init_refuses_bad_shapes() {
        let w = words(10);
        assert!(HistogramWriter::init(&w, 0, 2).is_err());
        assert!(HistogramWriter::init(&w, 1, 0).is_err());
        assert!(HistogramWriter::init(&w, 1, 3).is_err());
        assert!(HistogramWriter::init(&w[..4], 1, 1).is_err());
        assert!(HistogramWriter::init(&w, 1, usize::MAX).is_err());
        assert!(HistogramWriter::init(&w, 1, 2).is_ok());
    }

    #[test]
    fn reader_refuses_hostile_headers() {
        let w = words(12);
        assert!(HistogramReader::read(&w[..7]).is_err(), "short header");
        assert!(HistogramReader::read(&w).is_err(), "not initialised");
        HistogramWriter::init(&w, 100, 4).unwrap();
        for bad in [5, 1 << 40, u64::MAX] {
            w[W_NBUCKETS].store(bad, Ordering::Relaxed);
            assert!(HistogramReader::read(&w).is_err(), "nbuckets {bad}");
        }
        w[W_NBUCKETS].store(4, Ordering::Relaxed);
        w[W_WIDTH].store(0, Ordering::Relaxed);
        assert!(HistogramReader::read(&w).is_err(), "zero width");
    }

    #[test]
    fn reader_survives_hostile_counters() {
        let w = words(bytes_for(3) / 8);
        HistogramWriter::init(&w, u64::MAX, 3).unwrap();
        for x in &w[HEADER_WORDS..] {
            x.store(u64::MAX, Ordering::Relaxed);
        }
        w[W_OVERFLOW].store(u64::MAX, Ordering::Relaxed);
        w[W_COUNT].store(u64::MAX, Ordering::Relaxed);
        w[W_MIN].store(7, Ordering::Relaxed);
        w[W_MAX].store(3, Ordering::Relaxed);
        let r = HistogramReader::read(&w).unwrap();
        assert_eq!(r.total(), u64::MAX);
        assert_eq!((r.min(), r.max()), (Some(7), Some(3)));
        assert_eq!(r.quantile_upper_ns(0.5), Some(u64::MAX), "bounds saturate");
        assert_eq!(r.buckets().last(), Some((u64::MAX, u64::MAX)));
        assert_eq!(r.quantile_upper_ns(f64::NAN), None);
        assert_eq!(r.quantile_upper_ns(-3.0), Some(u64::MAX));
    }

    #[test]
    fn writer_ignores_peer_writes_to_its_shape() {
        let w = words(bytes_for(2) / 8);
        let mut h = HistogramWriter::init(&w, 10, 2).unwrap();
        w[W_NBUCKETS].store(u64::MAX, Ordering::Relaxed);
        w[W_WIDTH].store(0, Ordering::Relaxed);
        h.record(15);
        h.record(1000);
        assert_eq!(w[HEADER_WORDS + 1].load(Ordering::Relaxed), 1);
        assert_eq!(w[W_OVERFLOW].load(Ordering::Relaxed), 1);
        assert_eq!(h.count(), 2);
    }
}
