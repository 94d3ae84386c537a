//! `rtcell bench gateway`: does the gateway disturb the real-time side?
//!
//! Runs a scenario (default `examples/offload.toml`: a 10 kHz master offloading the controller to a
//! cell) in a child `rtcell run --serve`, and drives its gateway from here in three phases of equal
//! length: idle, loaded (1,000 statistics reads/s and 100 signal writes/s over gRPC, and a Prometheus
//! scrape every second), idle again. Each phase's activation latency (p99.9) and overruns of the task
//! come from the difference of its histogram between the phase's ends; the loaded phase is compared
//! with the noise between the two idle phases. Every write's acknowledgement must carry the value
//! written (seen by the task that reads it): a mismatch, a timeout or a refusal is an error.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rtcell_bench::SuiteRun;
use rtcell_gateway::client::{Client, Connect, connect};
use rtcell_gateway::listen::Addr;
use rtcell_gateway::pb;
use rtcell_report::doc::{Kind, Series, Suite, Unit};
use rtcell_report::table::Table;

/// What to run.
#[derive(Debug, Clone)]
pub struct GatewayBenchConfig {
    pub scenario: PathBuf,
    /// The task whose latency and overruns are judged.
    pub task: String,
    /// The writable signal written during the load.
    pub signal: String,
    pub phase: Duration,
    pub reads_per_s: u32,
    pub writes_per_s: u32,
    pub scrape_every: Duration,
    /// The history the scenario run is recorded in (`None`: the default).
    pub history: Option<PathBuf>,
}

/// One phase's figures for the judged task.
#[derive(Debug, Clone, Default)]
struct Phase {
    name: &'static str,
    cycles: u64,
    overruns: u64,
    /// Activation latency in this phase: bucket counts (ns buckets of `bucket_ns`), overflow.
    buckets: Vec<u64>,
    overflow: u64,
    bucket_ns: u64,
}

impl Phase {
    fn between(name: &'static str, a: &pb::TaskStats, b: &pb::TaskStats) -> Phase {
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
    fn samples_us(&self) -> Vec<f64> {
        let mut v = Vec::new();
        for (i, n) in self.buckets.iter().enumerate() {
            v.extend(std::iter::repeat_n((i as u64 + 1) as f64 * self.bucket_ns as f64 / 1e3, *n as usize));
        }
        v.extend(std::iter::repeat_n(self.buckets.len() as f64 * self.bucket_ns as f64 / 1e3, self.overflow as usize));
        v
    }

    /// p99.9 (µs, bucket upper edge).
    fn p999_us(&self) -> f64 {
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

/// What the load did.
#[derive(Default)]
struct LoadTally {
    reads: AtomicU64,
    read_fail: AtomicU64,
    writes: AtomicU64,
    write_ok: AtomicU64,
    /// Acknowledged with other values than written, or refused, or not acknowledged in time.
    write_bad: AtomicU64,
    scrapes: AtomicU64,
    scrape_fail: AtomicU64,
    read_ns: std::sync::Mutex<Vec<f64>>,
    ack_ns: std::sync::Mutex<Vec<f64>>,
    scrape_ns: std::sync::Mutex<Vec<f64>>,
    first_error: std::sync::Mutex<Option<String>>,
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

struct ChildRun {
    child: Child,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for ChildRun {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn run(cfg: &GatewayBenchConfig, out: &Path) -> Result<SuiteRun, String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let dir = out.join("gateway-run");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let sock_dir = tempfile_dir()?;
    let sock = sock_dir.join("gw.sock");
    // Idle, loaded, idle, plus the start and a margin at the end.
    let total = cfg.phase * 3 + Duration::from_secs(4);
    let mut child = Command::new(exe)
        .arg("run")
        .arg(&cfg.scenario)
        .arg("--duration")
        .arg(format!("{}s", total.as_secs()))
        .arg("--out")
        .arg(dir.join("scenario"))
        .arg("--serve")
        .arg(&sock)
        .arg("--metrics")
        .arg("127.0.0.1:0")
        .arg("--linger")
        .arg("30s")
        .args(cfg.history.iter().flat_map(|h| [std::ffi::OsStr::new("--history"), h.as_os_str()]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start rtcell run --serve: {e}"))?;
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    if let Some(err) = child.stderr.take() {
        let l2 = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if let Ok(mut l) = l2.lock() {
                    l.push(line);
                }
            }
        });
    }
    let mut child = ChildRun { child, lines };
    let log = |c: &ChildRun| c.lines.lock().map(|l| l.join("\n")).unwrap_or_default();
    // The metrics address, once announced.
    let t0 = Instant::now();
    let metrics = loop {
        let found = child.lines.lock().ok().and_then(|l| {
            l.iter().find_map(|x| {
                x.strip_prefix("gateway: Prometheus metrics on http://")
                    .and_then(|r| r.strip_suffix("/metrics"))
                    .map(String::from)
            })
        });
        if let Some(m) = found {
            break m;
        }
        if let Ok(Some(st)) = child.child.try_wait() {
            return Err(format!("the scenario run ended ({st}) before serving:\n{}", log(&child)));
        }
        if t0.elapsed() > Duration::from_secs(60) {
            return Err(format!("no gateway after 60 s:\n{}", log(&child)));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let tally = Arc::new(LoadTally::default());
    let conn = Connect { addr: Addr::Unix(sock.clone()), token: None, tls: None, timeout: Duration::from_secs(5) };
    let phases = rt.block_on(drive(cfg, &conn, &metrics, Arc::clone(&tally)));
    let phases = match phases {
        Ok(p) => p,
        Err(e) => return Err(format!("{e}\n{}", log(&child))),
    };
    // The run's own results (the scenario's document), then let it go.
    let results = rt.block_on(async {
        let mut c = connect(&conn).await?;
        let t0 = Instant::now();
        loop {
            match c.get_results(pb::GetResultsRequest::default()).await {
                Ok(r) => return Ok::<_, String>(r.into_inner()),
                Err(s) if s.code() == tonic::Code::Unavailable && t0.elapsed() < Duration::from_secs(60) => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(s) => return Err(format!("results: {}", s.message())),
            }
        }
    });
    drop(child);
    let _ = std::fs::remove_dir_all(&sock_dir);
    let scenario_doc = results?;
    let mut run = report(cfg, &phases, &tally, &scenario_doc.path);
    // Errors of the scenario itself (a task that faulted, a cell that died) fail the benchmark.
    let doc: serde_json::Value = serde_json::from_str(&scenario_doc.json).unwrap_or_default();
    let errors: Vec<String> = doc["warnings"]
        .as_array()
        .map(|w| w.iter().filter_map(|x| x.as_str()?.strip_prefix("error: ").map(String::from)).collect())
        .unwrap_or_default();
    if !errors.is_empty() {
        run.failure = Some(format!("the scenario run had errors: {}", errors.join("; ")));
    }
    Ok(run)
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let d = std::env::temp_dir().join(format!("rtcell-gwbench-{}", std::process::id()));
    rtcell_gateway::listen::private_dir(&d)?;
    Ok(d)
}

async fn drive(
    cfg: &GatewayBenchConfig,
    conn: &Connect,
    metrics: &str,
    tally: Arc<LoadTally>,
) -> Result<Vec<Phase>, String> {
    let mut c = connect(conn).await?;
    // Wait for the release, then a second of warm-up.
    let t0 = Instant::now();
    loop {
        let st = c.get_status(pb::GetStatusRequest {}).await.map_err(|s| s.message().to_string())?.into_inner();
        let run = st.run.unwrap_or_default();
        if run.state == "running" && run.elapsed_s > 1.0 {
            if !st.tasks.iter().any(|t| t.name == cfg.task) {
                return Err(format!("the scenario has no task {:?}", cfg.task));
            }
            if !st.signals.iter().any(|s| s.name == cfg.signal && s.writable) {
                return Err(format!("the scenario has no writable signal {:?}", cfg.signal));
            }
            break;
        }
        if t0.elapsed() > Duration::from_secs(60) || !matches!(run.state.as_str(), "starting" | "running") {
            return Err(format!("the run did not start: {run:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let snap = |c: &mut Client| {
        let mut c = c.clone();
        let task = cfg.task.clone();
        async move {
            let s = c
                .get_stats(pb::GetStatsRequest { buckets: true })
                .await
                .map_err(|s| s.message().to_string())?
                .into_inner();
            s.tasks.into_iter().find(|t| t.name == task).ok_or_else(|| format!("no task {task:?} in the statistics"))
        }
    };
    let s0 = snap(&mut c).await?;
    eprintln!("gateway bench: idle phase ({:.0} s)", cfg.phase.as_secs_f64());
    tokio::time::sleep(cfg.phase).await;
    let s1 = snap(&mut c).await?;
    eprintln!(
        "gateway bench: loaded phase ({:.0} s): {} statistics reads/s, {} writes/s, a scrape every {:.0} s",
        cfg.phase.as_secs_f64(),
        cfg.reads_per_s,
        cfg.writes_per_s,
        cfg.scrape_every.as_secs_f64()
    );
    load(cfg, conn, metrics, Arc::clone(&tally)).await?;
    let s2 = snap(&mut c).await?;
    eprintln!("gateway bench: idle phase ({:.0} s)", cfg.phase.as_secs_f64());
    tokio::time::sleep(cfg.phase).await;
    let s3 = snap(&mut c).await?;
    Ok(vec![Phase::between("idle 1", &s0, &s1), Phase::between("loaded", &s1, &s2), Phase::between("idle 2", &s2, &s3)])
}

/// The loaded phase: readers, writer and scraper until the phase ends.
async fn load(cfg: &GatewayBenchConfig, conn: &Connect, metrics: &str, tally: Arc<LoadTally>) -> Result<(), String> {
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
                            t.error(format!("statistics read: {}", s.message()));
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
                            s.message()
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

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn report(cfg: &GatewayBenchConfig, phases: &[Phase], t: &LoadTally, scenario_results: &str) -> SuiteRun {
    let mut series = Vec::new();
    for p in phases {
        let phase = p.name.replace(' ', "");
        series.push(Series::from_samples(
            "activation_latency",
            labels(&[("task", &cfg.task), ("phase", &phase)]),
            Unit::Us,
            Kind::Latency,
            p.samples_us(),
            0,
        ));
        series.push(Series::from_samples(
            "overruns",
            labels(&[("task", &cfg.task), ("phase", &phase)]),
            Unit::Count,
            Kind::Count,
            vec![p.overruns as f64],
            0,
        ));
    }
    let take = |m: &std::sync::Mutex<Vec<f64>>| m.lock().map(|v| v.clone()).unwrap_or_default();
    let bad = t.write_bad.load(Ordering::Relaxed);
    series.push(Series::from_samples(
        "write_acknowledged",
        labels(&[("signal", &cfg.signal)]),
        Unit::Ns,
        Kind::RoundTrip,
        take(&t.ack_ns),
        bad,
    ));
    series.push(Series::from_samples(
        "stats_read",
        labels(&[]),
        Unit::Ns,
        Kind::RoundTrip,
        take(&t.read_ns),
        t.read_fail.load(Ordering::Relaxed),
    ));
    series.push(Series::from_samples(
        "metrics_scrape",
        labels(&[]),
        Unit::Ns,
        Kind::RoundTrip,
        take(&t.scrape_ns),
        t.scrape_fail.load(Ordering::Relaxed),
    ));

    let (i1, ld, i2) = (&phases[0], &phases[1], &phases[2]);
    let (a, l, b) = (i1.p999_us(), ld.p999_us(), i2.p999_us());
    let noise = (a - b).abs();
    let lat_ok = l <= a.max(b) + noise;
    let (oa, ol, ob) = (i1.overruns, ld.overruns, i2.overruns);
    let over_ok = ol <= oa.max(ob) + oa.abs_diff(ob);
    let mut text = String::new();
    text.push_str(&format!(
        "Gateway load: task {:?} of {} (activation latency = release to start of the cycle, one-way, µs; p99.9 = bucket upper edge)\n",
        cfg.task,
        cfg.scenario.display()
    ));
    let mut tab = Table::new(&["phase", "cycles", "overruns", "lat median µs", "lat p99.9 µs", "lat max µs (bucket)"]);
    for (p, s) in phases.iter().zip(series.iter().step_by(2)) {
        tab.row(vec![
            p.name.to_string(),
            p.cycles.to_string(),
            p.overruns.to_string(),
            format!("{:.1}", s.stats.median),
            format!("{:.1}", p.p999_us()),
            format!("{:.1}", s.stats.max),
        ]);
    }
    text.push_str(&format!("{tab}\n"));
    let (reads, writes, ok) =
        (t.reads.load(Ordering::Relaxed), t.writes.load(Ordering::Relaxed), t.write_ok.load(Ordering::Relaxed));
    let secs = cfg.phase.as_secs_f64();
    text.push_str(&format!(
        "Load: {reads} statistics reads ({:.0}/s, {} failed), {writes} writes ({:.0}/s): {ok} acknowledged with the value written, {bad} lost or misapplied; {} scrapes ({} failed)\n",
        reads as f64 / secs,
        t.read_fail.load(Ordering::Relaxed),
        writes as f64 / secs,
        t.scrapes.load(Ordering::Relaxed),
        t.scrape_fail.load(Ordering::Relaxed),
    ));
    let med = |name: &str| series.iter().find(|s| s.name == name).map_or(0.0, |s| s.stats.median / 1e3);
    let p99 = |name: &str| series.iter().find(|s| s.name == name).map_or(0.0, |s| s.stats.p99 / 1e3);
    text.push_str(&format!(
        "Round trips (µs, median / p99): write to acknowledgement {:.0} / {:.0}; statistics read {:.0} / {:.0}; scrape {:.0} / {:.0}\n",
        med("write_acknowledged"),
        p99("write_acknowledged"),
        med("stats_read"),
        p99("stats_read"),
        med("metrics_scrape"),
        p99("metrics_scrape"),
    ));
    text.push_str(&format!(
        "Verdict: p99.9 loaded {l:.1} µs vs idle {a:.1} / {b:.1} µs (noise {noise:.1}): {}; overruns loaded {ol} vs idle {oa} / {ob}: {}; writes: {}\n",
        if lat_ok { "within the idle noise" } else { "WORSE than the idle noise" },
        if over_ok { "within the idle noise" } else { "WORSE than the idle noise" },
        if bad == 0 { "none lost or misapplied" } else { "SOME LOST OR MISAPPLIED" },
    ));
    text.push_str(&format!("The scenario's own results: {scenario_results}\n"));
    let mut warnings = Vec::new();
    if let Ok(Some(e)) = t.first_error.lock().map(|e| e.clone()) {
        warnings.push(format!("first load error: {e}"));
    }
    if !lat_ok || !over_ok {
        warnings
            .push("the loaded phase was worse than the noise between the idle phases: see the gateway table".into());
    }
    let config = serde_json::json!({
        "scenario": cfg.scenario.display().to_string(),
        "task": cfg.task,
        "signal": cfg.signal,
        "phase_s": cfg.phase.as_secs_f64(),
        "reads_per_s": cfg.reads_per_s,
        "writes_per_s": cfg.writes_per_s,
        "scrape_every_s": cfg.scrape_every.as_secs_f64(),
        "verdict": { "latency_within_noise": lat_ok, "overruns_within_noise": over_ok, "writes_bad": bad },
        "scenario_results": scenario_results,
    });
    SuiteRun {
        suite: Suite { suite: "gateway".into(), config, series },
        text,
        warnings,
        incomplete: false,
        errors: bad + t.read_fail.load(Ordering::Relaxed) + t.scrape_fail.load(Ordering::Relaxed),
        failure: None,
    }
}
