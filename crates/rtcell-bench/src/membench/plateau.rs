//! Plateaus of a latency-against-working-set curve, and the caches they belong to.
//!
//! A plateau is a maximal run of consecutive working-set sizes whose latencies stay within
//! [`TOLERANCE`] of each other (largest / smallest ≤ 1.15) and which spans at least one octave (the
//! largest size at least twice the smallest, so two points of a smooth ramp do not count). Runs are
//! grown greedily from the smallest size; the points between plateaus are transitions. Each plateau is
//! named after the smallest cache (sizes from sysfs) that holds its working sets: `L1d`, `L2`, `L3`, or
//! `DRAM` beyond the last level; one that spans levels (a prefetched sequential read is as fast from L2
//! as from L1) is named after both ends, e.g. `L1d-L2`. With no cache information they are numbered.

use rtcell_host::cache::{Cache, level_holding};

/// Largest spread of latencies within a plateau, as a fraction of the smallest.
pub const TOLERANCE: f64 = 0.15;

/// One plateau: points `first..=last` of the curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Plateau {
    pub first: usize,
    pub last: usize,
    /// Median of the latencies of its points.
    pub ns: f64,
    pub label: String,
}

/// The plateaus of the curve `ns` over `sizes` (ascending), labelled from `caches`.
pub fn plateaus(sizes: &[usize], ns: &[f64], caches: &[Cache]) -> Vec<Plateau> {
    let n = sizes.len().min(ns.len());
    let mut out: Vec<Plateau> = Vec::new();
    let mut i = 0;
    while i < n {
        let (mut lo, mut hi) = (ns[i], ns[i]);
        let mut j = i;
        while j + 1 < n && ns[j + 1].is_finite() {
            let (l, h) = (lo.min(ns[j + 1]), hi.max(ns[j + 1]));
            if h > l * (1.0 + TOLERANCE) {
                break;
            }
            (lo, hi, j) = (l, h, j + 1);
        }
        if ns[i].is_finite() && j > i && sizes[j] >= 2 * sizes[i] {
            let mut values = ns[i..=j].to_vec();
            values.sort_by(f64::total_cmp);
            let (from, to) = (level_holding(caches, sizes[i] as u64), level_holding(caches, sizes[j] as u64));
            let label = if caches.is_empty() {
                format!("plateau {}", out.len() + 1)
            } else if from == to {
                from
            } else {
                format!("{from}-{to}")
            };
            out.push(Plateau { first: i, last: j, ns: values[(values.len() - 1) / 2], label });
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// The plateau label of each point of a curve of `n` points, `None` for transitions.
pub fn point_labels(n: usize, plateaus: &[Plateau]) -> Vec<Option<&str>> {
    let mut labels = vec![None; n];
    for p in plateaus {
        for l in labels.iter_mut().take(p.last + 1).skip(p.first) {
            *l = Some(p.label.as_str());
        }
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caches() -> Vec<Cache> {
        let c = |level, kind: &str, size| Cache { level, kind: kind.into(), size_bytes: size, shared_with: vec![] };
        vec![c(1, "Instruction", 32 << 10), c(1, "Data", 48 << 10), c(2, "Unified", 1 << 20), c(3, "Unified", 32 << 20)]
    }

    /// Sizes from 1 KiB to 128 MiB, `per_octave` steps per doubling.
    fn sizes(per_octave: u32) -> Vec<usize> {
        (0..=17 * per_octave).map(|k| (1024.0 * 2f64.powf(k as f64 / per_octave as f64)) as usize).collect()
    }

    /// A staircase with the steps at the cache sizes, plus a deterministic ±4% wobble.
    fn staircase(sizes: &[usize]) -> Vec<f64> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let level = if s <= 48 << 10 {
                    1.0
                } else if s <= 1 << 20 {
                    3.5
                } else if s <= 32 << 20 {
                    12.0
                } else {
                    90.0
                };
                level * (1.0 + 0.04 * ((i * 7 % 5) as f64 - 2.0) / 2.0)
            })
            .collect()
    }

    #[test]
    fn a_staircase_gives_one_plateau_per_level_named_from_the_caches() {
        for per_octave in [1, 2, 4] {
            let s = sizes(per_octave);
            let p = plateaus(&s, &staircase(&s), &caches());
            let labels: Vec<&str> = p.iter().map(|p| p.label.as_str()).collect();
            assert_eq!(labels, ["L1d", "L2", "L3", "DRAM"], "{per_octave} per octave: {p:?}");
            assert_eq!(p[0].first, 0);
            assert!(s[p[0].last] <= 48 << 10 && s[p[0].last + 1] > 48 << 10, "{p:?}");
            assert!(s[p[2].last] <= 32 << 20, "{p:?}");
            assert_eq!(p[3].last, s.len() - 1);
            for (plateau, level) in p.iter().zip([1.0, 3.5, 12.0, 90.0]) {
                assert!((plateau.ns / level - 1.0).abs() <= 0.04, "{plateau:?}");
            }
        }
    }

    #[test]
    fn a_plateau_across_levels_is_named_after_both_ends() {
        let s = [1 << 10, 8 << 10, 64 << 10, 512 << 10, 4 << 20, 64 << 20];
        let p = plateaus(&s, &[1.1, 1.1, 1.2, 1.1, 1.8, 2.0], &caches());
        let labels: Vec<&str> = p.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["L1d-L2", "L3-DRAM"], "{p:?}");
    }

    #[test]
    fn a_smooth_ramp_has_no_plateau() {
        let s = sizes(4);
        // +10% per step: any octave (4 steps) spreads by 46%.
        let ramp: Vec<f64> = (0..s.len()).map(|i| 1.1f64.powi(i as i32)).collect();
        assert!(plateaus(&s, &ramp, &caches()).is_empty());
    }

    #[test]
    fn two_flat_points_less_than_an_octave_apart_are_no_plateau() {
        let s = [1024, 1536, 4096, 6144];
        assert!(plateaus(&s, &[1.0, 1.0, 5.0, 5.0], &caches()).is_empty());
        let p = plateaus(&[1024, 2048, 4096, 8192], &[1.0, 1.0, 5.0, 5.0], &caches());
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].first, p[0].last, p[1].first, p[1].last), (0, 1, 2, 3));
    }

    #[test]
    fn transitions_between_plateaus_are_unlabelled() {
        let s = [1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10];
        let ns = [1.0, 1.05, 1.1, 1.0, 1.0, 2.5, 4.0, 4.2, 4.3];
        let p = plateaus(&s, &ns, &caches());
        assert_eq!(p.len(), 2, "{p:?}");
        let mut expected = vec![Some("L1d"); 5];
        expected.push(None);
        expected.extend([Some("L2"); 3]);
        assert_eq!(point_labels(s.len(), &p), expected);
    }

    #[test]
    fn the_tolerance_is_fifteen_percent_of_the_smallest() {
        let s = [1 << 10, 2 << 10, 4 << 10];
        let p = plateaus(&s, &[1.0, 1.15, 1.0], &caches());
        assert_eq!((p.len(), p[0].first, p[0].last), (1, 0, 2));
        let p = plateaus(&s, &[1.0, 1.16, 1.32], &caches());
        assert_eq!((p.len(), p[0].first, p[0].last), (1, 1, 2), "1.32 / 1.16 is within 15%");
        assert!(plateaus(&[1 << 10, 2 << 10], &[1.0, 1.16], &caches()).is_empty());
    }

    #[test]
    fn without_cache_information_plateaus_are_numbered() {
        let s = sizes(1);
        let labels: Vec<String> = plateaus(&s, &staircase(&s), &[]).into_iter().map(|p| p.label).collect();
        assert_eq!(labels, ["plateau 1", "plateau 2", "plateau 3", "plateau 4"]);
    }

    #[test]
    fn non_finite_values_break_plateaus() {
        let s = [1 << 10, 2 << 10, 4 << 10, 8 << 10];
        let p = plateaus(&s, &[1.0, f64::NAN, 1.0, 1.0], &caches());
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].first, p[0].last), (2, 3));
    }
}
