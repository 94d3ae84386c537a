//! Statistics over measured samples: summary figures, histograms, and whole series.
//!
//! Computed off the real-time path, once a run (or a reporting interval) is over, from the raw samples.
//!
//! Conventions, fixed here so that every suite quotes the same thing:
//! - **Percentiles** use the nearest-rank method: the p-th percentile of n sorted values is
//!   `sorted[ceil(p/100 * n) - 1]`, always a measured value, never an interpolation. The median is the
//!   50th percentile by the same rule (for an even count, the lower of the two middle values). The rank is
//!   computed in integers, so p99 of 100 values is exactly the 99th value.
//! - **Standard deviation** is the population one (divide by n): the samples are the whole run, not a
//!   sample of a larger population.
//! - **Non-finite values** (NaN, ±inf) are not measurements: they are left out of the statistics, and
//!   [`Series::from_samples`] counts them as errors.

use std::collections::BTreeMap;

use crate::doc::{Histogram, Kind, Series, Stats, Unit};

/// Histograms made by [`Histogram::auto`] never have more buckets than this; larger values are overflows.
pub const AUTO_MAX_BUCKETS: usize = 2000;

/// [`Histogram::auto`] picks the smallest 1-2-5 width giving at most this many buckets up to p99.99
/// (and therefore at least `AUTO_TARGET_BUCKETS / 2.5` of them).
pub const AUTO_TARGET_BUCKETS: f64 = 1000.0;

/// Builds a series' label map from pairs; see also the [`labels!`](crate::labels!) macro.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

impl Stats {
    /// Summary statistics of `samples`, which are sorted in place (by `f64::total_cmp`).
    ///
    /// Returns `None` when there is no finite sample. Non-finite values are left out: `count` is the
    /// number of finite samples.
    pub fn from_samples(samples: &mut [f64]) -> Option<Stats> {
        samples.sort_unstable_by(f64::total_cmp);
        Stats::from_sorted(finite_part(samples))
    }

    /// Statistics of values already sorted ascending and all finite (e.g. [`finite_part`] of a sorted
    /// slice). `None` when empty.
    pub fn from_sorted(sorted: &[f64]) -> Option<Stats> {
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let n = sorted.len() as f64;
        // Compensated sums keep the mean exact to the last bits even for millions of samples
        // of similar size; the two-pass variance avoids the cancellation of E[x²] - E[x]².
        let mean = (neumaier_sum(sorted.iter().copied()) / n).clamp(min, max);
        let variance = neumaier_sum(sorted.iter().map(|x| (x - mean) * (x - mean))) / n;
        Some(Stats {
            count: sorted.len() as u64,
            min,
            mean,
            median: percentile_sorted(sorted, 5000),
            p90: percentile_sorted(sorted, 9000),
            p99: percentile_sorted(sorted, 9900),
            p999: percentile_sorted(sorted, 9990),
            p9999: percentile_sorted(sorted, 9999),
            max,
            stddev: variance.sqrt(),
        })
    }
}

/// The nearest-rank percentile of a sorted, non-empty slice (callers check); `per_10k` is the percentile
/// in hundredths of a percent (9999 = p99.99), so the rank is computed exactly in integers.
fn percentile_sorted(sorted: &[f64], per_10k: u32) -> f64 {
    let n = sorted.len() as u128;
    let rank = (u128::from(per_10k) * n).div_ceil(10_000).clamp(1, n);
    // rank ≤ n = sorted.len(), so the index fits a usize.
    sorted[(rank - 1) as usize]
}

/// The nearest-rank `p`-th percentile (0 < p ≤ 100) of sorted values; `None` when `sorted` is empty.
/// `p` is rounded to hundredths of a percent.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(p.is_finite() && p > 0.0 && p <= 100.0) {
        return None;
    }
    let per_10k = (p * 100.0).round().clamp(1.0, 10_000.0) as u32;
    Some(percentile_sorted(sorted, per_10k))
}

/// The finite values of a slice sorted by `f64::total_cmp`, which orders
/// -NaN < -inf < finite < +inf < +NaN, so the finite ones are contiguous.
pub fn finite_part(sorted: &[f64]) -> &[f64] {
    let start = sorted.iter().position(|x| x.is_finite());
    let end = sorted.iter().rposition(|x| x.is_finite());
    match (start, end) {
        (Some(s), Some(e)) => &sorted[s..=e],
        _ => &[],
    }
}

/// Neumaier's compensated summation: the error stays O(ε) instead of growing with the count.
fn neumaier_sum(values: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut comp) = (0.0f64, 0.0f64);
    for x in values {
        let t = sum + x;
        if sum.abs() >= x.abs() {
            comp += (sum - t) + x;
        } else {
            comp += (x - t) + sum;
        }
        sum = t;
    }
    sum + comp
}

impl Histogram {
    /// Counts sorted values into buckets of `bucket_width`, with as many buckets as the largest value
    /// needs but at most `max_buckets`; values beyond go to `overflows`.
    ///
    /// The histogram is meant for non-negative quantities: a negative value (e.g. a one-way time under
    /// clock skew) is counted in bucket 0, and a non-finite one as an overflow, so that buckets plus
    /// overflows always add up to `sorted.len()`. Returns `None` unless `bucket_width` is finite and
    /// positive.
    pub fn from_sorted(sorted: &[f64], bucket_width: f64, max_buckets: usize) -> Option<Histogram> {
        if !(bucket_width.is_finite() && bucket_width > 0.0) {
            return None;
        }
        // Bucket index of a value, or None for an overflow. `as usize` saturates for huge quotients.
        let index = |v: f64| -> Option<usize> {
            if !v.is_finite() {
                return None;
            }
            let i = (v.max(0.0) / bucket_width).floor() as usize;
            (i < max_buckets).then_some(i)
        };
        let needed =
            sorted.iter().rev().find(|v| v.is_finite()).map_or(0, |&top| index(top).map_or(max_buckets, |i| i + 1));
        let mut counts = vec![0u64; needed];
        let mut overflows = 0u64;
        for &v in sorted {
            match index(v) {
                Some(i) => counts[i] += 1,
                None => overflows += 1,
            }
        }
        Some(Histogram { bucket_width, counts, overflows })
    }

    /// A histogram whose bucket width, from the 1-2-5 series (…, 0.5, 1, 2, 5, 10, …), is the smallest
    /// that covers the values up to p99.99 in at most [`AUTO_TARGET_BUCKETS`] buckets — so roughly 400
    /// to 1000 buckets show the body and tail — with at most [`AUTO_MAX_BUCKETS`] buckets in all, the
    /// rarest outliers counted as overflows. `None` when there is no finite value.
    pub fn auto(sorted: &[f64]) -> Option<Histogram> {
        let finite = finite_part(sorted);
        if finite.is_empty() {
            return None;
        }
        let top = percentile_sorted(finite, 9999);
        let width = if top > 0.0 { width_1_2_5(top / AUTO_TARGET_BUCKETS) } else { 1.0 };
        Histogram::from_sorted(sorted, width, AUTO_MAX_BUCKETS)
    }

    /// The number of values counted, buckets and overflows together.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum::<u64>() + self.overflows
    }
}

/// The smallest value of the 1-2-5 series that is at least `min_width` (> 0).
fn width_1_2_5(min_width: f64) -> f64 {
    let k = min_width.log10().floor() as i32;
    // log10 may round across a decade boundary; looking one decade either side makes that harmless.
    for e in (k - 1)..=(k + 1) {
        for m in [1.0, 2.0, 5.0] {
            // 10^n is exact in f64 for n ≤ 22, and m / 10^n is then correctly rounded (0.002, not 0.0020000000000000005).
            let w = if e >= 0 { m * 10f64.powi(e) } else { m / 10f64.powi(-e) };
            if w >= min_width {
                return w;
            }
        }
    }
    10f64.powi(k + 2)
}

impl Series {
    /// A series from raw samples: its statistics and an automatic histogram ([`Histogram::auto`]).
    ///
    /// Non-finite samples are not measurements: they are left out and added to `errors`. With no
    /// (finite) samples, `stats` has `count` 0 and every figure 0 — never NaN, which JSON cannot carry —
    /// and there is no histogram; readers must look at `count` before the figures.
    pub fn from_samples(
        name: impl Into<String>,
        labels: BTreeMap<String, String>,
        unit: Unit,
        kind: Kind,
        mut samples: Vec<f64>,
        errors: u64,
    ) -> Series {
        samples.sort_unstable_by(f64::total_cmp);
        let finite = finite_part(&samples);
        let dropped = (samples.len() - finite.len()) as u64;
        Series {
            name: name.into(),
            labels,
            unit,
            kind,
            stats: Stats::from_sorted(finite).unwrap_or_default(),
            histogram: Histogram::auto(finite),
            errors: errors.saturating_add(dropped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_to_hundred() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Stats::from_samples(&mut v).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.mean, 50.5);
        assert_eq!(s.median, 50.0);
        assert_eq!(s.p90, 90.0);
        assert_eq!(s.p99, 99.0);
        assert_eq!(s.p999, 100.0);
        assert_eq!(s.p9999, 100.0);
        // Population variance of 1..=n is (n² - 1) / 12.
        assert!((s.stddev - (9999.0f64 / 12.0).sqrt()).abs() < 1e-12);
        assert!(v.windows(2).all(|w| w[0] <= w[1]), "sorted in place");
    }

    #[test]
    fn nearest_rank_on_larger_counts() {
        let mut v: Vec<f64> = (1..=10_000).map(f64::from).collect();
        let s = Stats::from_samples(&mut v).unwrap();
        assert_eq!((s.median, s.p90, s.p99, s.p999, s.p9999), (5000.0, 9000.0, 9900.0, 9990.0, 9999.0));
        // ceil(0.5 * 5) = 3rd value.
        let mut odd = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(Stats::from_samples(&mut odd).unwrap().median, 3.0);
        // Even count: the lower middle value, ceil(0.5 * 4) = 2nd.
        let mut even = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(Stats::from_samples(&mut even).unwrap().median, 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 75.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn single_sample() {
        let s = Stats::from_samples(&mut [7.5]).unwrap();
        assert_eq!(s.count, 1);
        for v in [s.min, s.mean, s.median, s.p90, s.p99, s.p999, s.p9999, s.max] {
            assert_eq!(v, 7.5);
        }
        assert_eq!(s.stddev, 0.0);
    }

    #[test]
    fn known_stddev() {
        // The textbook set: mean 5, population standard deviation exactly 2.
        let s = Stats::from_samples(&mut [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.mean, 5.0);
        assert_eq!(s.stddev, 2.0);
    }

    #[test]
    fn mean_is_accurate_with_large_offset() {
        // Values around 1e9 ns (a second) differing by single nanoseconds: naive E[x²]-E[x]² would
        // lose everything here.
        let mut v: Vec<f64> = (0..100_000).map(|i| 1e9 + f64::from(i % 3)).collect();
        let s = Stats::from_samples(&mut v).unwrap();
        let exact_mean = 1e9 + (33_333.0 + 2.0 * 33_333.0) / 100_000.0;
        assert!((s.mean - exact_mean).abs() < 1e-6, "{}", s.mean);
        assert!((s.stddev - 0.816_496).abs() < 1e-3, "{}", s.stddev);
    }

    #[test]
    fn empty_and_non_finite() {
        assert_eq!(Stats::from_samples(&mut []), None);
        assert_eq!(Stats::from_samples(&mut [f64::NAN, f64::INFINITY]), None);
        let s = Stats::from_samples(&mut [f64::NAN, 3.0, f64::NEG_INFINITY, 1.0, -f64::NAN]).unwrap();
        assert_eq!((s.count, s.min, s.max, s.mean), (2, 1.0, 3.0, 2.0));

        let series = Series::from_samples("x", labels(&[]), Unit::Ns, Kind::Latency, vec![1.0, f64::NAN, 2.0], 5);
        assert_eq!(series.stats.count, 2);
        assert_eq!(series.errors, 6, "the NaN counts as an error");

        let empty = Series::from_samples("x", labels(&[]), Unit::Ns, Kind::Latency, vec![], 0);
        assert_eq!(empty.stats, Stats::default());
        assert_eq!(empty.histogram, None);
    }

    #[test]
    fn histogram_buckets_and_overflows() {
        let sorted = [0.0, 0.5, 1.0, 1.9, 2.0, 3.0, 10.0, 11.0];
        let h = Histogram::from_sorted(&sorted, 1.0, 4).unwrap();
        assert_eq!(h.counts, vec![2, 2, 1, 1]);
        assert_eq!(h.overflows, 2);
        assert_eq!(h.total(), sorted.len() as u64);

        // Only as many buckets as the largest value needs.
        let h = Histogram::from_sorted(&[0.0, 2.5], 1.0, 100).unwrap();
        assert_eq!(h.counts, vec![1, 0, 1]);
        assert_eq!(h.overflows, 0);

        // Negative values land in bucket 0; non-finite ones are overflows.
        let h = Histogram::from_sorted(&[-3.0, 0.2, f64::INFINITY], 1.0, 10).unwrap();
        assert_eq!((h.counts.as_slice(), h.overflows), (&[2u64][..], 1));

        assert_eq!(Histogram::from_sorted(&sorted, 0.0, 10), None);
        assert_eq!(Histogram::from_sorted(&sorted, f64::NAN, 10), None);
        let h = Histogram::from_sorted(&[], 1.0, 10).unwrap();
        assert_eq!((h.counts.len(), h.overflows), (0, 0));
    }

    #[test]
    fn auto_histogram_width_and_totals() {
        // 1..=100000 ns: p99.99 = 99990, smallest 1-2-5 width with ≤ 1000 buckets is 100.
        let v: Vec<f64> = (1..=100_000).map(f64::from).collect();
        let h = Histogram::auto(&v).unwrap();
        assert_eq!(h.bucket_width, 100.0);
        assert!((200..=1001).contains(&h.counts.len()), "{}", h.counts.len());
        assert_eq!(h.total(), 100_000);
        assert_eq!(h.overflows, 0);

        // A long tail: most values near 80 ns, a few preemptions of milliseconds.
        let mut v: Vec<f64> = (0..50_000).map(|i| 80.0 + f64::from(i % 40)).collect();
        v.extend([2e6, 3e6, 5e6]);
        v.sort_unstable_by(f64::total_cmp);
        let h = Histogram::auto(&v).unwrap();
        assert_eq!(h.bucket_width, 0.2, "119 / 1000 → 0.2");
        assert_eq!(h.counts.len(), AUTO_MAX_BUCKETS);
        assert_eq!(h.overflows, 3);
        assert_eq!(h.total(), v.len() as u64);

        // Small ratios and all-zero data.
        let v = [0.001, 0.002, 0.003];
        let h = Histogram::auto(&v).unwrap();
        assert_eq!(h.bucket_width, 0.000_005);
        assert_eq!(h.total(), 3);
        let h = Histogram::auto(&[0.0, 0.0]).unwrap();
        assert_eq!((h.bucket_width, h.counts.as_slice()), (1.0, &[2u64][..]));
        assert_eq!(Histogram::auto(&[]), None);
    }

    #[test]
    fn widths_follow_1_2_5() {
        assert_eq!(width_1_2_5(1.0), 1.0);
        assert_eq!(width_1_2_5(1.01), 2.0);
        assert_eq!(width_1_2_5(2.5), 5.0);
        assert_eq!(width_1_2_5(5.1), 10.0);
        assert_eq!(width_1_2_5(0.0123), 0.02);
        assert_eq!(width_1_2_5(4_000.0), 5_000.0);
    }

    #[test]
    fn series_histogram_matches_count() {
        let samples: Vec<f64> = (0..10_000).map(|i| f64::from((i * 7919) % 1000)).collect();
        let s = Series::from_samples(
            "rtt",
            crate::labels!("cell" => "thread", "bytes" => 64),
            Unit::Ns,
            Kind::RoundTrip,
            samples,
            0,
        );
        let h = s.histogram.as_ref().unwrap();
        assert_eq!(h.total(), s.stats.count);
        assert_eq!(s.labels["bytes"], "64");
    }
}
