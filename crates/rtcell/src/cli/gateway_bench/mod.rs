//! `rtcell bench gateway`: does the gateway disturb the real-time side?
//!
//! Runs a scenario (default `examples/offload.toml`: a 10 kHz master offloading the controller to a
//! cell) in a child `rtcell run --serve` on a loopback TCP port with a bearer token, and drives its
//! gateway from here in five phases of equal length: idle, loaded (1,000 statistics reads/s and 100
//! signal writes/s over gRPC, and a Prometheus scrape every second), idle, misbehaving (idle sockets,
//! unread streams and refused requests: see [`misbehave`]), idle. Each phase's activation latency
//! (p99.9) and overruns of the task come from the difference of its histogram between the phase's
//! ends; each disturbing phase is compared with the noise between the two idle phases around it. Every
//! write's acknowledgement must carry the value written (seen by the task that reads it): a mismatch, a
//! timeout or a refusal is an error. In every phase a good client connects and asks GetStatus four
//! times a second, and the gateway process's resident memory is read at each phase's ends.

mod grpc_raw;
mod load;
mod misbehave;
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
use misbehave::{Hostile, Target, misbehave};
use phase::{Phase, probe, rss_bytes};
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
    /// The misbehaving clients.
    pub hostile: Hostile,
}

/// What disturbs a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disturb {
    Idle,
    Load,
    Misbehave,
}

/// The phases in order: an idle phase on each side of each disturbing one.
const PHASES: [(&str, Disturb); 5] = [
    ("idle 1", Disturb::Idle),
    ("loaded", Disturb::Load),
    ("idle 2", Disturb::Idle),
    ("misbehaving", Disturb::Misbehave),
    ("idle 3", Disturb::Idle),
];

/// After the misbehaving clients are gone, the gateway's clean-up before the next phase is measured.
const SETTLE: Duration = Duration::from_secs(1);

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

/// The descriptor number the scenario run finds its results directory at.
const CHILD_OUT_FD: std::os::fd::RawFd = 3;

pub fn run(cfg: &GatewayBenchConfig, out: &Path) -> Result<SuiteRun, String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    // The run's directories are made relative to the output directory's descriptor: a link planted at
    // `gateway-run` or `scenario` is an error, never a way to put the results elsewhere.
    let scenario_out = rtcell_host::outdir::RunDir::create(out)
        .and_then(|d| d.create_own_dir("gateway-run"))
        .and_then(|d| d.create_own_dir("scenario"))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let state_dir = tempfile_dir()?;
    let token = new_token()?;
    let token_file = state_dir.join("token");
    write_private(&token_file, &token)?;
    // The phases, the settling pause, plus the start and a margin at the end.
    let total = cfg.phase * PHASES.len() as u32 + SETTLE + Duration::from_secs(8);
    // The child gets the directory itself, as its descriptor 3, and writes through `/proc/self/fd/3`:
    // the directory opened above whatever is renamed or linked in its place meanwhile (a path handed
    // over would be resolved again by the child, and could lead elsewhere by then).
    let dir_fd = scenario_out.raw_fd();
    let mut cmd = Command::new(exe);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec only async-signal-safe calls (dup2, fcntl) on a descriptor that
        // stays open in the parent for the child's start (`scenario_out` lives until the function ends).
        unsafe {
            cmd.pre_exec(move || {
                let r = if dir_fd == CHILD_OUT_FD {
                    libc::fcntl(dir_fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(dir_fd, CHILD_OUT_FD)
                };
                if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
            });
        }
    }
    let mut child = cmd
        .arg("run")
        .arg(&cfg.scenario)
        .arg("--duration")
        .arg(format!("{}s", total.as_secs()))
        .arg("--out")
        .arg(format!("/proc/self/fd/{CHILD_OUT_FD}"))
        .arg("--serve")
        .arg("tcp://127.0.0.1:0")
        .arg("--token-file")
        .arg(&token_file)
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
    // The gRPC and metrics addresses, once announced.
    let t0 = Instant::now();
    let (grpc, metrics) = loop {
        let found = child.lines.lock().ok().map(|l| {
            let grpc = l.iter().find_map(|x| x.strip_prefix("gateway: gRPC on tcp://").and_then(|a| a.parse().ok()));
            let metrics = l.iter().find_map(|x| {
                x.strip_prefix("gateway: Prometheus metrics on http://")
                    .and_then(|r| r.strip_suffix("/metrics"))
                    .map(String::from)
            });
            (grpc, metrics)
        });
        if let Some((Some(g), Some(m))) = found {
            break (g, m);
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
    let hostile = Arc::new(misbehave::Tally::default());
    let conn = Connect { addr: Addr::Tcp(grpc), token: Some(token), tls: None, timeout: Duration::from_secs(5) };
    let pid = child.child.id();
    let phases = rt.block_on(drive(cfg, &conn, &metrics, pid, Arc::clone(&tally), Arc::clone(&hostile)));
    let (phases, stopped) = match phases {
        Ok(p) => p,
        Err(e) => return Err(format!("{e}\n{}", log(&child))),
    };
    // The run's own results (the scenario's document), then let it go.
    let results = rt.block_on(async {
        let mut c = connect(&conn).await?;
        if stopped {
            c.stop_scenario(pb::StopScenarioRequest::default())
                .await
                .map_err(|s| format!("stopping the run: {}", rtcell_host::peer_text(s.message().as_bytes(), 200)))?;
        }
        let t0 = Instant::now();
        loop {
            match c.get_results(pb::GetResultsRequest::default()).await {
                Ok(r) => return Ok::<_, String>(r.into_inner()),
                Err(s) if s.code() == tonic::Code::Unavailable && t0.elapsed() < Duration::from_secs(60) => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(s) => return Err(format!("results: {}", rtcell_host::peer_text(s.message().as_bytes(), 200))),
            }
        }
    });
    drop(child);
    let _ = std::fs::remove_dir_all(&state_dir);
    let scenario_doc = results?;
    // Where the scenario's results are as the user sees them: the child names its own view of the
    // directory (its descriptor 3), meaningless once the run is over.
    let scenario_results = out.join("gateway-run").join("scenario").join(rtcell_report::doc::RESULTS_FILE);
    let mut run = report(cfg, &phases, &tally, &hostile, &scenario_results.display().to_string());
    run.incomplete = stopped;
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

/// A bearer token for this run only: 32 hex digits from the kernel's random source.
fn new_token() -> Result<String, String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    Ok(rtcell_gateway::security::hex(&b))
}

/// Writes `text` to a new file only its owner may read.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(f, "{text}").map_err(|e| format!("{}: {e}", path.display()))
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
    pid: u32,
    tally: Arc<LoadTally>,
    hostile: Arc<misbehave::Tally>,
) -> Result<(Vec<Phase>, bool), String> {
    let mut c = connect(conn).await?;
    // Wait for the release, then a second of warm-up.
    let t0 = Instant::now();
    let signal = loop {
        let st = c.get_status(pb::GetStatusRequest {}).await.map_err(|s| s.message().to_string())?.into_inner();
        let run = st.run.unwrap_or_default();
        if run.state == "running" && run.elapsed_s > 1.0 {
            if !st.tasks.iter().any(|t| t.name == cfg.task) {
                return Err(format!("the scenario has no task {:?}", cfg.task));
            }
            match st.signals.into_iter().find(|s| s.name == cfg.signal && s.writable) {
                Some(s) => break s,
                None => return Err(format!("the scenario has no writable signal {:?}", cfg.signal)),
            }
        }
        if t0.elapsed() > Duration::from_secs(60) || !matches!(run.state.as_str(), "starting" | "running") {
            return Err(format!("the run did not start: {run:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let Addr::Tcp(addr) = conn.addr else { return Err("the misbehaving clients need the TCP listener".into()) };
    let target = Target {
        addr,
        token: conn.token.clone().unwrap_or_default(),
        signal: cfg.signal.clone(),
        // Beyond the range (or, for a signal without one, not a number).
        out_of_range: signal
            .max
            .map(|m| m + 1.0 + m.abs())
            .or(signal.min.map(|m| m - 1.0 - m.abs()))
            .unwrap_or(f64::NAN),
    };
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
    let secs = cfg.phase.as_secs_f64();
    let mut phases = Vec::new();
    for (name, what) in PHASES {
        match what {
            Disturb::Idle => eprintln!("gateway bench: {name} phase ({secs:.0} s)"),
            Disturb::Load => eprintln!(
                "gateway bench: loaded phase ({secs:.0} s): {} statistics reads/s, {} writes/s, a scrape every {:.0} s",
                cfg.reads_per_s,
                cfg.writes_per_s,
                cfg.scrape_every.as_secs_f64()
            ),
            Disturb::Misbehave => eprintln!(
                "gateway bench: misbehaving phase ({secs:.0} s): {} idle sockets, {} unread streams at {} Hz, {} refused requests/s",
                cfg.hostile.idle_sockets,
                cfg.hostile.stream_conns * cfg.hostile.streams_per_conn,
                cfg.hostile.stream_hz,
                cfg.hostile.refused_per_s
            ),
        }
        let rss0 = rss_bytes(pid);
        let s0 = snap(&mut c).await?;
        let end = tokio::time::Instant::now() + cfg.phase;
        let good = tokio::spawn(probe(conn.clone(), end));
        let work = async {
            match what {
                Disturb::Idle => tokio::time::sleep_until(end).await,
                Disturb::Load => load(cfg, conn, metrics, Arc::clone(&tally)).await?,
                Disturb::Misbehave => misbehave(&cfg.hostile, &target, end, Arc::clone(&hostile)).await?,
            }
            Ok::<(), String>(())
        };
        tokio::select! {
            r = work => r?,
            _ = stop_asked() => {
                // Ctrl-C or SIGTERM: the phases measured so far are reported, marked incomplete.
                good.abort();
                return Ok((phases, true));
            }
        }
        let s1 = snap(&mut c).await?;
        let rss1 = rss_bytes(pid);
        let mut p = Phase::between(name, &s0, &s1);
        p.rss = (rss0, rss1);
        p.probe = good.await.map_err(|e| format!("good client: {e}"))?;
        phases.push(p);
        if what == Disturb::Misbehave {
            tokio::time::sleep(SETTLE).await;
        }
    }
    Ok((phases, false))
}

/// Resolves once Ctrl-C or SIGTERM asked the benchmark to stop.
async fn stop_asked() {
    while !rtcell_host::stop::stop_requested() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
