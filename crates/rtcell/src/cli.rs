//! Subcommands: check, bench, and the hidden cell entry of process cells.

mod all;
mod bench;
mod cpus;
mod ctl;
mod ecat;
mod gateway;
mod gateway_bench;
mod history;
mod report;
mod run;
mod sdk;
mod session;
mod tune;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use rtcell_host::facts::HostFacts;

use bench::{Plan, execute, plan_suite};

/// Exit status for bad input (as clap uses).
const EXIT_USAGE: i32 = 2;
/// Exit status of a run stopped by Ctrl-C (after writing what was measured).
const EXIT_INTERRUPTED: i32 = 130;

#[derive(Parser)]
#[command(
    name = "rtcell",
    version,
    about = "Run hard real-time control loops in isolated cells on stock Linux, and prove their timing",
    after_help = "Examples:\n  rtcell check --cpu 1\n  rtcell tune --cpu 1\n  rtcell bench loopback --quick\n  rtcell bench control --quick\n  rtcell bench c2c --cpus 0,1\n  rtcell control reference --out reference.csv"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Report host facts and what hurts real time on the cell CPU: each item with its verdict, why it
    /// matters and its fix; a score and the changes that would help most.
    #[command(after_help = tune::CHECK_HELP)]
    Check(tune::CheckArgs),
    /// Change the run-time knobs the check flags for a cell CPU (dry run unless --apply), and change them
    /// back (--revert); print the boot-time ones as a kernel command line.
    #[command(after_help = tune::TUNE_HELP)]
    Tune(tune::TuneArgs),
    /// Run the benchmark suites (a quick selection of all of them, or one) and write a run directory:
    /// results.json, report.html, CSVs, cyclictest-format histograms and a gnuplot script.
    #[command(args_conflicts_with_subcommands = true, after_help = all::AFTER_HELP)]
    Bench {
        #[command(subcommand)]
        suite: Option<Suite>,
        #[command(flatten)]
        all: all::AllArgs,
    },
    /// The control benchmark's controller and data.
    Control {
        #[command(subcommand)]
        cmd: ControlCmd,
    },
    /// Run a scenario file (cells, channels, periodic tasks, loads) and write DIR/results.json.
    #[command(
        after_help = "Examples:\n  rtcell run examples/plc.toml\n  rtcell run examples/motion.toml --duration 10s --out /tmp/motion\n  rtcell run examples/offload.toml --duration 2s\n\nExit status: 0 all tasks ran to the end; 1 a watchdog tripped, a task or cell failed, or a check\nfailed (results are still written); 2 the scenario is invalid (nothing started); 130 Ctrl-C\n(what was measured is written, marked incomplete)."
    )]
    Run {
        /// The scenario file (TOML).
        file: PathBuf,
        /// Run for this long instead of the file's duration_s (e.g. 2s, 500ms, 1m).
        #[arg(long)]
        duration: Option<String>,
        /// Output directory for results.json and the tasks' log files (default: rtcell-results/<timestamp>-scenario-<name>/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Run cell CELL as KIND (thread, process or kvm) instead of the file's kind, e.g. --kind ctrl=process.
        /// Repeatable.
        #[arg(long = "kind", value_name = "CELL=KIND")]
        kinds: Vec<String>,
        #[command(flatten)]
        history: history::HistoryDb,
        /// Serve the gateway (gRPC API, see `rtcell ctl`) while the scenario runs: on ADDR (unix:PATH,
        /// a socket path, or tcp://HOST:PORT), by default the Unix socket `rtcell serve` uses.
        #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
        serve: Option<String>,
        /// With --serve: keep serving the results this long after the run ends (e.g. 30s).
        #[arg(long, value_name = "DURATION", requires = "serve")]
        linger: Option<String>,
        #[command(flatten)]
        gateway: gateway::GatewayFlags,
    },
    /// Serve the gateway: start scenarios, read statistics, write signals and deploy payloads through
    /// its gRPC API (rtcell ctl, or any gRPC client of proto/rtcell/v1), Prometheus metrics.
    #[command(after_help = gateway::SERVE_HELP)]
    Serve(gateway::ServeCmd),
    /// A simulated EtherCAT segment (SubDevices with I/O) on a veth pair or an interface, for a master
    /// to be run and tested without hardware.
    #[command(name = "ecat-sim", after_help = ecat::ECAT_SIM_HELP)]
    EcatSim(ecat::EcatSimArgs),
    /// Talk to a gateway: status, statistics, signals, scenarios, payload deploys, results.
    #[command(after_help = ctl::CTL_HELP)]
    Ctl(ctl::CtlArgs),
    /// Make the HTML report (report.html) of a results document: host facts and warnings, tables and plots
    /// per suite, published figures of other platforms beside ours.
    #[command(after_help = report::AFTER_HELP)]
    Report(report::ReportArgs),
    /// List the recorded runs, most recent first, with a headline figure per suite.
    #[command(after_help = history::HISTORY_HELP)]
    History(history::HistoryArgs),
    /// Compare two runs series by series (median, p99.9, max), with a verdict per series.
    #[command(after_help = history::COMPARE_HELP)]
    Compare(history::CompareArgs),
    /// Write parts of the C SDK (the kvm payload kit) under a prefix.
    Sdk {
        #[command(subcommand)]
        cmd: sdk::SdkCmd,
    },
    /// Internal: the body of a process cell (started by rtcell itself).
    #[command(name = "__cell", hide = true)]
    Cell {
        #[arg(long)]
        fd: i32,
        #[arg(long)]
        parent: u32,
        #[arg(long)]
        spec: String,
    },
    /// Internal: the trial of a C task's shared object (started by rtcell run).
    #[command(name = "__c-probe", hide = true)]
    CProbe {
        #[arg(long)]
        fd: i32,
        #[arg(long)]
        library: String,
        #[arg(long)]
        init: Option<String>,
        #[arg(long)]
        step: String,
        #[arg(long, default_value = "")]
        com: String,
    },
}

#[derive(Subcommand)]
enum ControlCmd {
    /// Regenerate the reference data (controller inputs and f64 outputs of a closed-loop simulation) as
    /// CSV; with the default seed it is the shipped file, byte for byte.
    #[command(
        after_help = "Examples:\n  rtcell control reference --out reference.csv\n  rtcell control reference --seed 7 | head"
    )]
    Reference {
        /// Write the CSV here (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Seed of the simulation's process-load phases (default 0, the shipped data).
        #[arg(long, default_value_t = rtcell_control::reference::DEFAULT_SEED)]
        seed: u64,
    },
    /// Write the controller's parameters as C (model_data.h, model_data.c: exact hexadecimal floats), as
    /// a code generator would for the C controller of examples/c-controller.
    #[command(name = "export-c", after_help = "Examples:\n  rtcell control export-c --out examples/c-controller")]
    ExportC {
        /// Directory to write model_data.h and model_data.c into (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Args, Clone)]
struct Common {
    /// Output directory for results.json (default: rtcell-results/<timestamp>-<suite>/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// A short run (fewer iterations) for a first look or CI.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    history: history::HistoryDb,
}

#[derive(Subcommand)]
enum Suite {
    /// Cache-line ping-pong between two CPUs: the floor under every shared-memory channel.
    #[command(after_help = "Examples:\n  rtcell bench c2c\n  rtcell bench c2c --cpus 0,1 --samples 1000000")]
    C2c(bench::c2c::C2cArgs),
    /// Seed 000 Table I: master -> cell -> master round trip over shared memory, every byte checked.
    #[command(
        after_help = "Examples:\n  rtcell bench loopback --quick\n  rtcell bench loopback --cell thread --sizes 0,64,1024 --iterations 1000000\n  rtcell bench loopback --notify poll,futex --load memcpy --out /tmp/lb"
    )]
    Loopback(bench::loopback::LoopbackArgs),
    /// Seed 000 Fig. 3/4: the 41-state controller stepped locally and offloaded to cells, every output
    /// checked against the reference data; execution time in the cell and round trip.
    #[command(
        after_help = "Examples:\n  rtcell bench control --quick\n  rtcell bench control --precision f64 --cell thread,kvm --iterations 2000000\n  rtcell bench control --load memcpy --out /tmp/ctl"
    )]
    Control(bench::control::ControlArgs),
    /// Seed 004 Fig. 5: read latency against working-set size (1 KiB .. 96 MiB), sequential and random,
    /// on the cell CPU without and with memcpy interferers; plateaus named after the caches.
    #[command(after_help = bench::membench::AFTER_HELP)]
    Membench(bench::membench::MembenchArgs),
    /// Activation latency on the cell CPU: clock_nanosleep (the cyclictest method), a cell busy-polling
    /// the TSC, a kvm cell; optionally side by side with cyclictest.
    #[command(after_help = bench::latency::AFTER_HELP)]
    Latency(bench::latency::LatencyArgs),
    /// Seed 002's inter-task communication: round trip between two SCHED_FIFO threads (95/90) over
    /// pipe, FIFO, message queue, semaphore, PI mutex, condvar, futex, eventfd, UNIX sockets and rtcell rings.
    #[command(after_help = bench::itc::AFTER_HELP)]
    Itc(bench::itc::ItcArgs),
    /// C against Rust in one run: the example C controller's step (examples/c-controller) against the Rust
    /// f64 step on the cell CPU, and a COM signal round trip through the C API against the Rust API.
    #[command(
        after_help = "Examples:\n  rtcell bench capi --quick\n  rtcell bench capi --steps 2000000 --round-trips 1000000 --cpu 1"
    )]
    Capi(bench::capi::CapiArgs),
    /// Seeds 003 and 004: an EtherCAT master (ethercrab) on a simulated segment over a veth pair: its
    /// process-data round trip against a raw-socket ping-pong on the same path, the master task's
    /// activation jitter and cycle at each rate with frames sent, received and lost, and the highest
    /// cycle rate sustained back to back. Needs root (veth pair, raw sockets).
    #[command(
        after_help = "Examples:\n  rtcell bench ethercat\n  rtcell bench ethercat --quick\n  rtcell bench ethercat --rates 20000 --duration 60s --devices 4\n  rtcell bench ethercat --master-busy-poll --sim-sleeps\n  rtcell bench ethercat --load memcpy"
    )]
    Ethercat(bench::ethercat::EthercatArgs),
    /// Does the gateway disturb the real-time side? A scenario (default examples/offload.toml) runs
    /// with its gateway (TCP loopback, a bearer token) through five phases: idle, loaded (statistics
    /// reads, signal writes, Prometheus scrapes), idle, misbehaving (idle sockets up to the connection
    /// cap, unread statistics streams, requests that must be refused), idle; the task's latency p99.9
    /// and overruns in each disturbing phase are compared with the noise between the idle phases around
    /// it, every write's acknowledgement is checked, and the gateway's memory and a good client's
    /// GetStatus time are shown per phase.
    #[command(
        after_help = "Examples:\n  rtcell bench gateway\n  rtcell bench gateway --quick\n  rtcell bench gateway --phase 5m --reads 2000"
    )]
    Gateway(bench::gateway::GatewayArgs),
}

/// A usage error: printed, exit status 2.
struct Usage(String);

fn usage<T>(msg: impl Into<String>) -> Result<T, Usage> {
    Err(Usage(msg.into()))
}

pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Cell { fd, parent, spec } => rtcell_cells::process_cell_main(fd, parent, &spec),
        Cmd::Check(args) => tune::check_main(args),
        Cmd::Tune(args) => tune::tune_main(args),
        Cmd::Run { file, duration, out, kinds, history, serve, linger, gateway } => {
            let serve = match serve.map(|a| gateway::ServeArgs::parse(&a, gateway, linger.as_deref())).transpose() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e}");
                    return EXIT_USAGE;
                }
            };
            run::main(&file, duration.as_deref(), out, &kinds, history.path.as_deref(), serve.as_ref())
        }
        Cmd::Serve(args) => gateway::serve_main(args),
        Cmd::Ctl(args) => ctl::main(args),
        Cmd::EcatSim(args) => ecat::main(args),
        Cmd::CProbe { fd, library, init, step, com } => {
            let com: Vec<String> = com.split(',').filter(|s| !s.is_empty()).map(String::from).collect();
            rtcell_cells::c_probe_main(fd, &library, init.as_deref(), &step, &com)
        }
        Cmd::Sdk { cmd } => sdk::main(cmd),
        Cmd::History(args) => history::history_main(args),
        Cmd::Compare(args) => history::compare_main(args),
        Cmd::Report(args) => report::main(args),
        Cmd::Control { cmd: ControlCmd::Reference { out, seed } } => control_reference(out, seed),
        Cmd::Control { cmd: ControlCmd::ExportC { out } } => control_export_c(&out),
        Cmd::Bench { suite, all } => match bench::main(suite, all) {
            Ok(code) => code,
            Err(Usage(m)) => {
                eprintln!("error: {m}");
                EXIT_USAGE
            }
        },
    }
}

fn online() -> Vec<usize> {
    rtcell_host::cpu::online_cpus().unwrap_or_else(|_| vec![0])
}

fn check_cpu(cpu: usize, what: &str, online: &[usize]) -> Result<usize, Usage> {
    if !online.contains(&cpu) {
        return usage(format!(
            "{what} CPU {cpu} does not exist or is offline; online CPUs: {}",
            rtcell_host::cpu::format_cpu_list(online)
        ));
    }
    Ok(cpu)
}

/// (master CPU, cell CPU) from the options, checked.
fn pick_cpus(master: Option<usize>, cell: Option<usize>) -> Result<(usize, usize), Usage> {
    let online = online();
    let cell = match cell {
        Some(c) => check_cpu(c, "cell (--cpu)", &online)?,
        None => *online.last().unwrap_or(&0),
    };
    let master = match master {
        Some(m) => check_cpu(m, "master (--master-cpu)", &online)?,
        None => match online.iter().find(|&&c| c != cell) {
            Some(&m) => m,
            None => return usage("a cell needs a CPU of its own: this machine has one online CPU"),
        },
    };
    if master == cell {
        return usage(format!(
            "the cell CPU and the master CPU are both {cell}: give the cell a CPU of its own (--cpu N, --master-cpu M)"
        ));
    }
    Ok((master, cell))
}

fn host_summary(f: &HostFacts) -> String {
    format!(
        "Host: {} ({} CPUs), kernel {}, preemption {}, {}, KVM {}, TSC {}",
        f.cpu_model,
        f.cpus,
        f.kernel,
        f.preempt,
        match &f.hypervisor {
            Some(h) => format!("running under hypervisor {h}"),
            None => "bare metal".into(),
        },
        f.kvm,
        f.tsc_khz.map_or("unavailable".into(), |k| format!("{:.3} GHz", k as f64 / 1e6)),
    )
}

fn default_out(suite: &str) -> PathBuf {
    let ts = rtcell_report::doc::rfc3339_utc(std::time::SystemTime::now()).replace([':', '-'], "");
    let ts = ts.split('.').next().unwrap_or(&ts).to_string();
    PathBuf::from("rtcell-results").join(format!("{ts}-{suite}"))
}

/// `rtcell control export-c`: the controller's parameters as C source in `out`.
fn control_export_c(out: &std::path::Path) -> i32 {
    let (h, c) = rtcell_control::codegen::c_model_data(&rtcell_control::DEFAULT_MODEL64);
    let written = std::fs::create_dir_all(out)
        .and_then(|()| std::fs::write(out.join("model_data.h"), h))
        .and_then(|()| std::fs::write(out.join("model_data.c"), c));
    match written {
        Ok(()) => {
            eprintln!("wrote {0}/model_data.h and {0}/model_data.c", out.display());
            0
        }
        Err(e) => {
            eprintln!("error: writing the C model data into {}: {e}", out.display());
            1
        }
    }
}

/// `rtcell control reference`: the reference data of `seed` as CSV, to `out` or standard output.
fn control_reference(out: Option<PathBuf>, seed: u64) -> i32 {
    use std::io::Write;
    let data = rtcell_control::reference::generate(seed);
    let written = match &out {
        Some(path) => std::fs::File::create(path).and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            data.write_csv(&mut w)?;
            w.flush()
        }),
        None => {
            let mut w = std::io::stdout().lock();
            data.write_csv(&mut w).and_then(|()| w.flush())
        }
    };
    match written {
        Ok(()) => {
            if let Some(p) = out {
                eprintln!("reference data, seed {seed}: {} samples written to {}", data.r.len(), p.display());
            }
            0
        }
        Err(e) => {
            let target = out.map_or("standard output".to_string(), |p| p.display().to_string());
            eprintln!("error: writing the reference data to {target}: {e}");
            1
        }
    }
}

/// Conditions that change how every figure of the run must be read.
fn host_warnings(h: &HostFacts) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(hv) = &h.hypervisor {
        w.push(format!(
            "host is a virtual machine ({hv}){}: the outer hypervisor preempts our vCPUs, so maxima include its delays",
            h.steal_pct.map_or(String::new(), |s| format!(", {s:.2}% of CPU time stolen during the run"))
        ));
    }
    if h.preempt != "rt" {
        w.push(format!("kernel preemption model is {:?}, not PREEMPT_RT", h.preempt));
    }
    if h.isolated_cpus.is_empty() {
        w.push("no CPU is isolated (isolcpus/nohz_full): the cell CPU also runs kernel housekeeping".into());
    }
    w
}

fn install_ctrlc() {
    let r = ctrlc::set_handler(|| {
        if rtcell_host::stop::stop_requested() {
            // Second Ctrl-C: the user wants out now.
            std::process::exit(EXIT_INTERRUPTED);
        }
        eprintln!(
            "\nstopping (Ctrl-C or SIGTERM): finishing the current step and writing what was measured \
             (Ctrl-C again to abort)"
        );
        rtcell_host::stop::request_stop();
    });
    if let Err(e) = r {
        eprintln!("warning: Ctrl-C handler not installed ({e}); an interrupted run will not be saved");
    }
}
