//! One phase's figures for the judged task, from its statistics at the phase's ends.

use rtcell_gateway::pb;

/// One phase's figures for the judged task.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    pub name: &'static str,
    pub cycles: u64,
    pub overruns: u64,
    /// Activation latency in this phase: bucket counts (ns buckets of `bucket_ns`), overflow.
    buckets: Vec<u64>,
    overflow: u64,
    bucket_ns: u64,
}

impl Phase {
    pub fn between(name: &'static str, a: &pb::TaskStats, b: &pb::TaskStats) -> Phase {
        let (ha, hb) = (a.latency.clone().unwrap_or_default(), b.latency.clone().unwrap_or_default());
        let buckets = hb
            .buckets
            .iter()
            .enumerate()
            .map(|(i, n)| n.saturating_sub(ha.buckets.get(i).copied().unwrap_or(0)))
            .collect();
        Phase {
            name,
            cycles: b.cycles.saturating_sub(a.cycles),
            overruns: b.overruns.saturating_sub(a.overruns),
            buckets,
            overflow: hb.overflow.saturating_sub(ha.overflow),
            bucket_ns: hb.bucket_ns,
        }
    }

    /// Samples at their bucket's upper edge (µs); overflowed ones at the histogram's end.
    pub fn samples_us(&self) -> Vec<f64> {
        let mut v = Vec::new();
        for (i, n) in self.buckets.iter().enumerate() {
            v.extend(std::iter::repeat_n((i as u64 + 1) as f64 * self.bucket_ns as f64 / 1e3, *n as usize));
        }
        v.extend(std::iter::repeat_n(self.buckets.len() as f64 * self.bucket_ns as f64 / 1e3, self.overflow as usize));
        v
    }

    /// p99.9 (µs, bucket upper edge).
    pub fn p999_us(&self) -> f64 {
        let total: u64 = self.buckets.iter().sum::<u64>() + self.overflow;
        if total == 0 {
            return 0.0;
        }
        let rank = (total as f64 * 0.999).ceil() as u64;
        let mut acc = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            acc += n;
            if acc >= rank {
                return (i as u64 + 1) as f64 * self.bucket_ns as f64 / 1e3;
            }
        }
        self.buckets.len() as f64 * self.bucket_ns as f64 / 1e3
    }
}
