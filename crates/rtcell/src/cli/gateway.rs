//! `rtcell run --serve` and `rtcell serve`: the gateway (gRPC API and Prometheus metrics) over a run.
//!
//! Exit status of `rtcell serve`: 0 after Ctrl-C or SIGTERM; 2 bad options (nothing started); 1 the
//! gateway could not start (a socket in use, a certificate that does not load).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use rtcell_gateway::listen::{Addr, default_socket};
use rtcell_gateway::server::{Running, ServeOptions, TcpAuth, TlsFiles};
use rtcell_gateway::start::ScenarioSources;
use rtcell_gateway::{Gateway, GatewayOptions, Refusal, RunOutcome, RunSlot, Runner, StartRequest};
use rtcell_host::tsc::TscClock;
use rtcell_scenario::Plan;

use super::{EXIT_USAGE, install_ctrlc};

pub const SERVE_HELP: &str = "Examples:
  rtcell serve --scenario-dir examples               # Unix socket only (see below)
  rtcell serve --scenario-dir /etc/rtcell/scenarios --library-dir /opt/rtcell/lib --metrics 127.0.0.1:9464
  rtcell serve --listen tcp://0.0.0.0:7447 --token-file /etc/rtcell/tokens
  rtcell serve --listen tcp://0.0.0.0:7447 --tls-cert gw.pem --tls-key gw.key --tls-client-ca ca.pem \\
               --tls-role ops-console=operator --tls-role ci=admin

Then: rtcell ctl start offload; rtcell ctl stats; rtcell ctl deploy payload.elf --cpu 1.

Roles: viewer (status, statistics, signal reads, results, metrics), operator (+ signal writes, scenario \
start and stop), admin (+ payload deploys, stop-cell). The token file holds `ROLE TOKEN` lines (a file of \
one bare token: admin); a client certificate's role is its SAN URI urn:rtcell:role:ROLE, else its CN mapped \
by --tls-role CN=ROLE, else viewer; Unix-socket clients (the server's own user or root) are admin.

Clients start scenarios by name (a file NAME.toml of --scenario-dir) or send a scenario text; C tasks of \
those run only in process or kvm cells, from --library-dir. Payloads and scenario texts are kept in the \
state directory (at most 64 MiB, oldest unused items removed first). Deploys never use the gateway's CPUs \
(--cpus, default 0) nor a CPU a run holds.

The Unix socket is created 0600 in a directory only its owner may enter: $XDG_RUNTIME_DIR/rtcell/\
gateway.sock, else /run/rtcell/gateway.sock for root, else /tmp/rtcell-UID/gateway.sock. TCP is refused \
unless a bearer token file (not world-readable) or mutual TLS is given. Every write, start, stop, deploy \
and refused call is logged (stderr, and --audit-log FILE).";

/// Options shared by `rtcell run --serve` and `rtcell serve`.
#[derive(Args, Clone, Debug, Default)]
pub struct GatewayFlags {
    /// Bearer tokens for TCP clients: `ROLE TOKEN` lines (viewer, operator, admin; tokens of at least 16
    /// characters; `#` comments), or one bare token (admin). Refused if world-readable.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Server certificate (PEM) for TCP with mutual TLS.
    #[arg(long, value_name = "PEM", requires_all = ["tls_key", "tls_client_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA that signs the certificates clients must present (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Role of client certificates by subject CN, e.g. --tls-role ops-console=operator (repeatable; a SAN
    /// URI urn:rtcell:role:ROLE in the certificate wins; neither: viewer).
    #[arg(long, value_name = "CN=ROLE", requires = "tls_cert")]
    pub tls_role: Vec<String>,
    /// Serve Prometheus /metrics over plain HTTP at this address (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Append the audit log (every write, start, stop and deploy, as JSON lines) to this file too.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Signal writes per second allowed per identity (uid, certificate or token; bursts of the same number).
    #[arg(long, default_value_t = 200.0, value_name = "N")]
    pub write_rate: f64,
}

/// `rtcell run FILE --serve [ADDR]`.
#[derive(Clone, Debug)]
pub struct ServeArgs {
    pub listen: Vec<Addr>,
    pub flags: GatewayFlags,
    /// Keep serving (results, final statistics) this long after the run ends.
    pub linger: Duration,
}

impl ServeArgs {
    /// `--serve` with an optional address (empty: the default socket).
    pub fn parse(addr: &str, flags: GatewayFlags, linger: Option<&str>) -> Result<ServeArgs, String> {
        let listen = if addr.is_empty() {
            Addr::Unix(default_socket())
        } else {
            Addr::parse(addr).map_err(|e| format!("--serve: {e}"))?
        };
        let linger = match linger {
            Some(l) => rtcell_scenario::parse_duration(l).map_err(|e| format!("--linger {e}"))?,
            None => Duration::ZERO,
        };
        Ok(ServeArgs { listen: vec![listen], flags, linger })
    }
}

fn options(listen: &[Addr], f: &GatewayFlags, cpus: Vec<usize>) -> Result<ServeOptions, String> {
    let token = f.token_file.as_deref().map(rtcell_gateway::access::read_token_file).transpose()?;
    let tls_roles =
        f.tls_role.iter().map(|r| rtcell_gateway::access::parse_tls_role(r)).collect::<Result<Vec<_>, _>>()?;
    let tls = match (&f.tls_cert, &f.tls_key, &f.tls_client_ca) {
        (Some(cert), Some(key), Some(ca)) => {
            Some(TlsFiles { cert: cert.clone(), key: key.clone(), client_ca: ca.clone() })
        }
        (None, None, None) => None,
        _ => return Err("mutual TLS needs all three of --tls-cert, --tls-key and --tls-client-ca".into()),
    };
    if listen.iter().any(|a| matches!(a, Addr::Tcp(_))) && token.is_none() && tls.is_none() {
        return Err("TCP needs authentication: give --token-file FILE, or --tls-cert, --tls-key and --tls-client-ca (mutual TLS), or both".into());
    }
    if !(f.write_rate > 0.0 && f.write_rate <= 100_000.0) {
        return Err(format!("--write-rate {}: give 0 < N <= 100000", f.write_rate));
    }
    Ok(ServeOptions { listen: listen.to_vec(), tcp_auth: TcpAuth { token, tls, tls_roles }, metrics: f.metrics, cpus })
}

/// What `rtcell serve` adds to a gateway: where scenarios, C code and client files live.
#[derive(Default)]
struct Daemon {
    runner: Option<Arc<dyn Runner>>,
    state_dir: Option<PathBuf>,
    sources: ScenarioSources,
    master_cpus: Vec<usize>,
}

/// The gateway, or the error and the exit status (a bad `--audit-log`, e.g. a link: 2).
fn gateway(f: &GatewayFlags, d: Daemon) -> Result<Gateway, (String, i32)> {
    let audit = rtcell_gateway::security::Audit::open(f.audit_log.as_deref())
        .map_err(|e| (format!("error: --audit-log: {e}"), EXIT_USAGE))?;
    Gateway::new(GatewayOptions {
        runner: d.runner,
        state_dir: d.state_dir,
        write_rate: f.write_rate,
        write_burst: f.write_rate,
        audit,
        sources: d.sources,
        master_cpus: d.master_cpus,
    })
    .map_err(|e| (format!("error: {e}"), 1))
}

fn announce(r: &Running) {
    for a in &r.bound {
        eprintln!("gateway: gRPC on {a}");
    }
    if let Some(m) = r.metrics_bound {
        eprintln!("gateway: Prometheus metrics on http://{m}/metrics");
    }
}

/// A gateway serving the run of `rtcell run --serve`.
pub struct Served {
    pub slot: Arc<RunSlot>,
    running: Running,
    linger: Duration,
}

impl Served {
    /// The run is over: its results can be fetched; serve `linger` longer (or until Ctrl-C), then stop.
    pub fn finish(self, ended: &super::run::Ended) {
        self.slot.finish(RunOutcome {
            exit_code: ended.code,
            results_path: ended.results.clone(),
            error: ended.error.clone(),
        });
        if !self.linger.is_zero() {
            eprintln!("gateway: serving the results for {:.0} s more (Ctrl-C to end now)", self.linger.as_secs_f64());
            let t0 = std::time::Instant::now();
            while t0.elapsed() < self.linger && !rtcell_host::stop::stop_requested() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.running.stop();
    }
}

/// Starts the gateway of `rtcell run --serve`, on the CPUs none of the plan's cells uses.
pub fn serve_run(s: &ServeArgs, plan: &Plan, out: &Path) -> Result<Served, (String, i32)> {
    let online = rtcell_host::cpu::online_cpus().unwrap_or_default();
    let cpus: Vec<usize> = online.into_iter().filter(|c| !plan.cells.iter().any(|x| x.cpu == *c)).collect();
    let opts = options(&s.listen, &s.flags, cpus).map_err(|e| (format!("error: {e}"), EXIT_USAGE))?;
    let g = Arc::new(gateway(&s.flags, Daemon::default())?);
    let slot = Arc::new(RunSlot::new(run_id(&plan.name), plan.name.clone(), plan.duration, out.to_owned()));
    g.add_run(Arc::clone(&slot));
    let running = rtcell_gateway::server::start(g, &opts).map_err(|e| (format!("error: gateway: {e}"), 1))?;
    announce(&running);
    Ok(Served { slot, running, linger: s.linger })
}

fn run_id(scenario: &str) -> String {
    let ts = rtcell_report::doc::rfc3339_utc(std::time::SystemTime::now()).replace([':', '-'], "");
    let ts = ts.split('.').next().unwrap_or(&ts).to_string();
    format!("{ts}-{scenario}")
}

/// Starts scenarios for `rtcell serve`, exactly as `rtcell run` runs them.
struct ScenarioRunner {
    tsc: TscClock,
    history: Option<PathBuf>,
    out_root: PathBuf,
}

impl Runner for ScenarioRunner {
    fn start(&self, req: StartRequest) -> Result<Arc<RunSlot>, Refusal> {
        let plan = super::run::load_plan_from(&req.path, req.duration.as_deref(), &req.kinds, &req.origin)
            .map_err(|(m, _)| Refusal::Invalid(m))?;
        let id = run_id(&plan.name);
        let out = super::run::out_dir(&plan, Some(self.out_root.join(&id))).map_err(|(m, _)| Refusal::Invalid(m))?;
        // The same CPUs as `rtcell run` takes: its cells exclusively, its Linux side and loads shared.
        let locks =
            rtcell_host::cpulock::lock_run_cpus(&super::run::plan_cpus(&plan), &super::run::plan_linux_cpus(&plan))
                .map_err(|e| {
                    eprintln!("gateway: scenario {:?} refused: {e}", plan.name);
                    if e.is_busy() { Refusal::Busy(e.client_message()) } else { Refusal::Failed(e.client_message()) }
                })?;
        let slot = Arc::new(RunSlot::new(id, plan.name.clone(), plan.duration, out.clone()));
        let (s2, tsc, history, file) = (Arc::clone(&slot), self.tsc, self.history.clone(), req.path.clone());
        std::thread::Builder::new()
            .name("scenario".into())
            .spawn(move || {
                let observe = |live: Arc<rtcell_scenario::Live>| s2.attach(live);
                let stop = || s2.stop_requested();
                let ended = super::run::execute(&plan, &file, &out, history.as_deref(), &tsc, &observe, &stop);
                // Free before the run is seen as over, so that the next start finds its CPUs free.
                drop(locks);
                s2.finish(RunOutcome { exit_code: ended.code, results_path: ended.results, error: ended.error });
            })
            .map_err(|e| Refusal::Failed(format!("cannot start the run's thread: {e}")))?;
        Ok(slot)
    }
}

#[derive(Args)]
pub struct ServeCmd {
    /// Where to listen: unix:PATH, a socket path, or tcp://HOST:PORT (repeatable; default: the Unix
    /// socket named below).
    #[arg(long, value_name = "ADDR")]
    listen: Vec<String>,
    /// Private directory for deployed payloads and received scenarios (default: beside the socket, or
    /// $RTCELL_HOME/gateway).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Scenarios clients may start by name: NAME is the file DIR/NAME.toml (e.g. rtcell ctl start offload).
    #[arg(long, value_name = "DIR")]
    scenario_dir: Option<PathBuf>,
    /// C libraries (.so, for process cells) and payload ELFs (kvm cells) that scenarios started through the
    /// gateway may use; relative paths in a sent scenario resolve here. Without it, their C tasks are refused.
    #[arg(long, value_name = "DIR")]
    library_dir: Option<PathBuf>,
    /// Directory for the runs' results (default: rtcell-results/).
    #[arg(long, value_name = "DIR", default_value = "rtcell-results")]
    out_root: PathBuf,
    /// CPUs for the gateway's own threads (default: CPU 0, where cells do not go by default).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    cpus: Option<Vec<usize>>,
    #[command(flatten)]
    flags: GatewayFlags,
    #[command(flatten)]
    history: super::history::HistoryDb,
}

pub fn serve_main(a: ServeCmd) -> i32 {
    let mut listen = Vec::new();
    for l in &a.listen {
        match Addr::parse(l) {
            Ok(x) => listen.push(x),
            Err(e) => {
                eprintln!("error: --listen {e}");
                return EXIT_USAGE;
            }
        }
    }
    if listen.is_empty() {
        listen.push(Addr::Unix(default_socket()));
    }
    let state_dir = a.state_dir.clone().unwrap_or_else(|| {
        match listen.iter().find_map(|l| match l {
            Addr::Unix(p) => p.parent().map(Path::to_path_buf),
            Addr::Tcp(_) => None,
        }) {
            Some(d) => d.join("state"),
            None => std::env::var_os(rtcell_report::history::HOME_ENV)
                .map(PathBuf::from)
                .unwrap_or_else(|| std::env::temp_dir().join(format!("rtcell-gateway-{}", std::process::id())))
                .join("gateway"),
        }
    });
    let master_cpus = a.cpus.clone().unwrap_or_else(|| vec![0]);
    // Every thread of the daemon (this one, the signal handler's, the runtime's) stays on its CPUs: the
    // threads started from here inherit this affinity. Cells pin themselves to their own CPUs.
    if let Err(e) = rtcell_host::cpu::pin_current_thread_to(&master_cpus) {
        eprintln!("error: --cpus {master_cpus:?}: {e}");
        return EXIT_USAGE;
    }
    let opts = match options(&listen, &a.flags, master_cpus.clone()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_USAGE;
        }
    };
    let sources = match ScenarioSources::new(a.scenario_dir.as_deref(), a.library_dir.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_USAGE;
        }
    };
    let tsc = match TscClock::calibrate() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    rtcell_cells::set_tsc_khz(tsc.khz());
    let runner: Arc<dyn Runner> =
        Arc::new(ScenarioRunner { tsc, history: a.history.path.clone(), out_root: a.out_root.clone() });
    let daemon = Daemon { runner: Some(runner), state_dir: Some(state_dir.clone()), sources, master_cpus };
    let g = match gateway(&a.flags, daemon) {
        Ok(g) => Arc::new(g),
        Err((e, code)) => {
            eprintln!("{e}");
            return code;
        }
    };
    // Ctrl-C and SIGTERM (service managers send it) stop the daemon alike.
    install_ctrlc();
    let running = match rtcell_gateway::server::start(Arc::clone(&g), &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: gateway: {e}");
            return 1;
        }
    };
    announce(&running);
    eprintln!("gateway: payloads and scenarios kept in {}; Ctrl-C to stop", state_dir.display());
    while !rtcell_host::stop::stop_requested() {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("gateway: stopping (the current run is stopped and its results written; deployed cells are stopped)");
    g.shutdown();
    // Give the run's thread the time to write its results.
    let t0 = std::time::Instant::now();
    while g.current().is_some_and(|r| r.outcome().is_none()) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    running.stop();
    0
}
