//! Core-to-core latency: a cache line bounced between two CPUs. The physical floor under every
//! shared-memory channel: a channel round trip cannot beat one cache-line round trip.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::{TscClock, rdtsc_ordered};
use rtcell_report::table::{Table, fmt_ns};
use rtcell_report::{Kind, Series, Suite, Unit, labels};

use crate::{BenchError, SuiteRun, release_thread, series_ns, stop_requested};

#[repr(align(128))]
struct Line(AtomicU64);

/// What to measure.
#[derive(Debug, Clone)]
pub struct C2cConfig {
    pub cpu_a: usize,
    pub cpu_b: usize,
    /// Individually timed round trips.
    pub samples: usize,
    /// Untimed batches of `batch` round trips, each timed as a whole (no timer overhead per trip).
    pub batches: usize,
    pub batch: usize,
    pub priority: Option<i32>,
}

/// Raw measurement.
pub struct C2cMeasurement {
    /// Each round trip timed on its own with the TSC (same method as the loopback benchmark).
    pub rtt_ticks: Vec<u64>,
    /// Mean round trip of each batch, in TSC ticks (fractional).
    pub batch_rtt_ticks: Vec<f64>,
    pub warnings: Vec<String>,
    pub incomplete: bool,
}

/// Bounces a cache line between the calling thread (pinned to `cpu_a`) and a thread on `cpu_b`.
pub fn measure(cfg: &C2cConfig) -> Result<C2cMeasurement, BenchError> {
    let line = Arc::new(Line(AtomicU64::new(0)));
    let total_trips = (cfg.samples + cfg.batches * cfg.batch) as u64;
    let peer_line = Arc::clone(&line);
    let peer_req = RtRequest { cpu: Some(cfg.cpu_b), fifo_priority: cfg.priority, lock_memory: false };
    let peer = std::thread::Builder::new()
        .name("c2c-peer".into())
        .spawn(move || -> Result<Vec<String>, String> {
            let w = apply_rt(&peer_req).map_err(|e| e.to_string())?;
            // Answer every odd value v with v + 1 until the last trip, or until the owner gives up (u64::MAX).
            let mut expect = 1u64;
            while expect < 2 * total_trips {
                let v = peer_line.0.load(Ordering::Acquire);
                if v == u64::MAX {
                    break;
                }
                if v == expect {
                    peer_line.0.store(v + 1, Ordering::Release);
                    expect += 2;
                } else {
                    std::hint::spin_loop();
                }
            }
            Ok(w)
        })
        .map_err(|e| BenchError::Other(format!("cannot start the c2c peer thread: {e}")))?;

    let mut warnings = apply_rt(&RtRequest { cpu: Some(cfg.cpu_a), fifo_priority: cfg.priority, lock_memory: false })?;
    let mut rtt_ticks = Vec::with_capacity(cfg.samples);
    let mut batch_rtt_ticks = Vec::with_capacity(cfg.batches);
    let mut v = 1u64;
    let mut incomplete = false;
    let bounce = |v: u64| {
        line.0.store(v, Ordering::Release);
        while line.0.load(Ordering::Acquire) != v + 1 {
            std::hint::spin_loop();
        }
    };
    for i in 0..cfg.samples {
        if i % 4096 == 0 && stop_requested() {
            incomplete = true;
            break;
        }
        let t0 = rdtsc_ordered();
        bounce(v);
        let t1 = rdtsc_ordered();
        rtt_ticks.push(t1.wrapping_sub(t0));
        v += 2;
    }
    if !incomplete {
        for _ in 0..cfg.batches {
            if stop_requested() {
                incomplete = true;
                break;
            }
            let t0 = rdtsc_ordered();
            for _ in 0..cfg.batch {
                bounce(v);
                v += 2;
            }
            let t1 = rdtsc_ordered();
            batch_rtt_ticks.push(t1.wrapping_sub(t0) as f64 / cfg.batch as f64);
        }
    }
    line.0.store(u64::MAX, Ordering::Release);
    release_thread();
    match peer.join() {
        Ok(Ok(w)) => warnings.extend(w),
        Ok(Err(e)) => {
            return Err(BenchError::Other(format!("c2c peer on CPU {}: {e}", cfg.cpu_b)));
        }
        Err(_) => return Err(BenchError::Other("c2c peer thread panicked".into())),
    }
    Ok(C2cMeasurement { rtt_ticks, batch_rtt_ticks, warnings, incomplete })
}

/// Series for a measurement: timed round trips, and one-way latency from batches (round trip / 2).
pub fn series(tsc: &TscClock, cfg: &C2cConfig, m: &C2cMeasurement) -> Vec<Series> {
    let pair = format!("{}-{}", cfg.cpu_a, cfg.cpu_b);
    let rtt = series_ns(
        tsc,
        "c2c_round_trip",
        labels!("cpus" => pair, "method" => "timed_each"),
        Kind::RoundTrip,
        &m.rtt_ticks,
    );
    let one_way: Vec<f64> = m.batch_rtt_ticks.iter().map(|&t| tsc.ticks_to_ns(1) * t / 2.0).collect();
    let ow = Series::from_samples(
        "c2c_one_way",
        labels!("cpus" => pair, "method" => format!("batch_of_{}_rtt_div_2", cfg.batch)),
        Unit::Ns,
        Kind::OneWay,
        one_way,
        0,
    );
    vec![rtt, ow]
}

/// `rtcell bench c2c`.
pub fn run(tsc: &TscClock, cfg: &C2cConfig) -> Result<SuiteRun, BenchError> {
    crate::progress!("c2c: bouncing a cache line between CPU {} and CPU {} ...", cfg.cpu_a, cfg.cpu_b);
    let m = measure(cfg)?;
    let series = series(tsc, cfg, &m);
    let mut t = Table::new(&["series", "unit", "count", "min", "median", "mean", "p99", "p99.9", "max"]);
    for s in &series {
        let st = &s.stats;
        t.row(vec![
            if s.name == "c2c_round_trip" { "round trip, each timed".into() } else { "one way, batch RTT / 2".into() },
            "ns".into(),
            st.count.to_string(),
            fmt_ns(st.min),
            fmt_ns(st.median),
            fmt_ns(st.mean),
            fmt_ns(st.p99),
            fmt_ns(st.p999),
            fmt_ns(st.max),
        ]);
    }
    let mut text = format!("Core-to-core cache-line ping-pong, CPU {} <-> CPU {} (ns)\n", cfg.cpu_a, cfg.cpu_b);
    text.push_str(&t.render());
    text.push('\n');
    let published: Vec<String> = rtcell_report::published::for_metric("c2c_one_way")
        .iter()
        .filter_map(|r| r.mean.map(|m| format!("  {} ({}): one way {m} ns {}", r.platform, r.source, r.condition)))
        .collect();
    if !published.is_empty() {
        text.push_str("Published figures, other platforms:\n");
        text.push_str(&published.join("\n"));
        text.push('\n');
    }
    let config = serde_json::json!({
        "cpu_a": cfg.cpu_a, "cpu_b": cfg.cpu_b, "samples": cfg.samples,
        "batches": cfg.batches, "batch": cfg.batch, "priority": cfg.priority,
    });
    let mut suite = Suite::new("c2c", config);
    suite.series = series;
    Ok(SuiteRun { suite, text, warnings: m.warnings, incomplete: m.incomplete, errors: 0, failure: None })
}
