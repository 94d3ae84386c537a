//! One phase's figures: the judged task's, from its statistics at the phase's ends; the gateway
//! process's resident memory at both ends; a good client's GetStatus times during the phase.

use std::time::{Duration, Instant};

use rtcell_gateway::client::{Connect, connect};
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
    /// Resident memory of the gateway's process (bytes) at the phase's start and end.
    pub rss: (Option<u64>, Option<u64>),
    pub probe: Probe,
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
            ..Phase::default()
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

/// A good client during a phase: a new connection and a GetStatus every [`PROBE_EVERY`].
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// Connection and answer, ns.
    pub ns: Vec<f64>,
    pub failed: u64,
    pub first_error: Option<String>,
}

pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// Probes until `end`; a probe that is not answered within the connection's timeout fails.
pub async fn probe(conn: Connect, end: tokio::time::Instant) -> Probe {
    let mut p = Probe::default();
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        let t0 = Instant::now();
        let once = async {
            let mut c = connect(&conn).await?;
            c.get_status(pb::GetStatusRequest {})
                .await
                .map_err(|s| format!("GetStatus: {}", rtcell_host::peer_text(s.message().as_bytes(), 200)))
        };
        match tokio::time::timeout(conn.timeout, once).await {
            Ok(Ok(_)) => p.ns.push(t0.elapsed().as_nanos() as f64),
            Ok(Err(e)) => p.fail(e),
            Err(_) => p.fail(format!("no answer in {:.0} s", conn.timeout.as_secs_f64())),
        }
    }
    p
}

impl Probe {
    fn fail(&mut self, e: String) {
        self.failed += 1;
        self.first_error.get_or_insert(e);
    }
}

/// Resident memory of process `pid` (bytes), from /proc/PID/statm.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    rtcell_gateway::metrics::resident_bytes_of(Some(pid))
}
