//! `rtcell bench gateway`: does the gateway disturb the real-time side?
//!
//! Runs a scenario (default `examples/offload.toml`: a 10 kHz master offloading the controller to a
//! cell) in a child `rtcell run --serve`, and drives its gateway from here in three phases of equal
//! length: idle, loaded (1,000 statistics reads/s and 100 signal writes/s over gRPC, and a Prometheus
//! scrape every second), idle again. Each phase's activation latency (p99.9) and overruns of the task
//! come from the difference of its histogram between the phase's ends; the loaded phase is compared
//! with the noise between the two idle phases. Every write's acknowledgement must carry the value
//! written (seen by the task that reads it): a mismatch, a timeout or a refusal is an error.

mod load;
mod phase;
mod report;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtcell_bench::SuiteRun;
use rtcell_gateway::client::{Client, Connect, connect};
use rtcell_gateway::listen::Addr;
use rtcell_gateway::pb;

use load::{LoadTally, load};
use phase::Phase;
use report::report;

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
