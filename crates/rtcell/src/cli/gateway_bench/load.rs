//! The loaded phase: statistics reads, acknowledged writes and scrapes at steady rates.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rtcell_gateway::client::{Connect, connect};
use rtcell_gateway::pb;
use rtcell_host::peer_text;

use super::GatewayBenchConfig;

/// What the load did.
#[derive(Default)]
pub struct LoadTally {
    pub reads: AtomicU64,
    pub read_fail: AtomicU64,
    pub writes: AtomicU64,
    pub write_ok: AtomicU64,
    /// Acknowledged with other values than written, or refused, or not acknowledged in time.
    pub write_bad: AtomicU64,
    pub scrapes: AtomicU64,
    pub scrape_fail: AtomicU64,
    pub read_ns: std::sync::Mutex<Vec<f64>>,
    pub ack_ns: std::sync::Mutex<Vec<f64>>,
    pub scrape_ns: std::sync::Mutex<Vec<f64>>,
    pub first_error: std::sync::Mutex<Option<String>>,
}

impl LoadTally {
    fn error(&self, e: String) {
        if let Ok(mut f) = self.first_error.lock()
            && f.is_none()
        {
            *f = Some(e);
        }
    }
}

/// The loaded phase: readers, writer and scraper until the phase ends.
pub async fn load(
    cfg: &GatewayBenchConfig,
    conn: &Connect,
    metrics: &str,
    tally: Arc<LoadTally>,
) -> Result<(), String> {
    let end = tokio::time::Instant::now() + cfg.phase;
    let mut tasks = Vec::new();
    // Reads: each on its own tick, on one connection (HTTP/2 streams).
    let reader = connect(conn).await?;
    {
        let (t, every) = (Arc::clone(&tally), Duration::from_secs_f64(1.0 / cfg.reads_per_s.max(1) as f64));
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut inflight = tokio::task::JoinSet::new();
            while tokio::time::Instant::now() < end {
                tick.tick().await;
                let (mut c, t) = (reader.clone(), Arc::clone(&t));
                inflight.spawn(async move {
                    let t0 = Instant::now();
                    match c.get_stats(pb::GetStatsRequest { buckets: false }).await {
                        Ok(_) => {
                            t.reads.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut v) = t.read_ns.lock() {
                                v.push(t0.elapsed().as_nanos() as f64);
                            }
                        }
                        Err(s) => {
                            t.read_fail.fetch_add(1, Ordering::Relaxed);
                            t.error(format!("statistics read: {}", peer_text(s.message().as_bytes(), 200)));
                        }
                    }
                });
                while inflight.len() > 64 {
                    inflight.join_next().await;
                }
            }
            while inflight.join_next().await.is_some() {}
        }));
    }
    // Writes: values that change every time, each acknowledgement checked.
    let mut writer = connect(conn).await?;
    {
        let (t, every, name) =
            (Arc::clone(&tally), Duration::from_secs_f64(1.0 / cfg.writes_per_s.max(1) as f64), cfg.signal.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut k: u64 = 0;
            while tokio::time::Instant::now() < end {
                tick.tick().await;
                k += 1;
                let v = ((k % 2001) as f64 - 1000.0) / 1000.0;
                t.writes.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                let req = pb::WriteSignalRequest {
                    name: name.clone(),
                    values: vec![pb::Value { kind: Some(pb::value::Kind::F64(v)) }],
                    timeout_ms: 0,
                };
                match writer.write_signal(req).await {
                    Ok(a) => {
                        let a = a.into_inner();
                        if a.seen.len() == 1 && a.seen[0].to_bits() == v.to_bits() {
                            t.write_ok.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut x) = t.ack_ns.lock() {
                                x.push(t0.elapsed().as_nanos() as f64);
                            }
                        } else {
                            t.write_bad.fetch_add(1, Ordering::Relaxed);
                            t.error(format!("write {v}: the task saw {:?}", a.seen));
                        }
                    }
                    Err(s) => {
                        t.write_bad.fetch_add(1, Ordering::Relaxed);
                        t.error(format!(
                            "write {v}: {}: {}",
                            rtcell_gateway::metrics::code_name(s.code()),
                            peer_text(s.message().as_bytes(), 200)
                        ));
                    }
                }
            }
        }));
    }
    // Scrapes.
    {
        let (t, every, addr) = (Arc::clone(&tally), cfg.scrape_every, metrics.to_string());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            while tokio::time::Instant::now() < end {
                tick.tick().await;
                let (a, t2) = (addr.clone(), Arc::clone(&t));
                let r = tokio::task::spawn_blocking(move || {
                    let t0 = Instant::now();
                    scrape(&a).map(|n| (n, t0.elapsed()))
                })
                .await;
                match r {
                    Ok(Ok((_, d))) => {
                        t2.scrapes.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut x) = t2.scrape_ns.lock() {
                            x.push(d.as_nanos() as f64);
                        }
                    }
                    Ok(Err(e)) => {
                        t2.scrape_fail.fetch_add(1, Ordering::Relaxed);
                        t2.error(format!("scrape: {e}"));
                    }
                    Err(e) => t2.error(format!("scrape task: {e}")),
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| format!("load task: {e}"))?;
    }
    Ok(())
}

/// GET /metrics; returns the number of samples.
fn scrape(addr: &str) -> Result<usize, String> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    if !text.starts_with("HTTP/1.1 200") {
        return Err(text.lines().next().unwrap_or("no answer").to_string());
    }
    Ok(text.lines().filter(|l| l.starts_with("rtcell_")).count())
}
