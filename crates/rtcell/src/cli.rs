//! Subcommands: check, bench, and the hidden cell entry of process cells.

mod all;
mod cpus;
mod ctl;
mod ecat;
mod gateway;
mod gateway_bench;
mod history;
mod itc;
mod latency;
mod membench;
mod report;
mod run;
mod sdk;
mod tune;

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use rtcell_bench::SuiteRun;
use rtcell_bench::c2c::C2cConfig;
use rtcell_bench::control::{self as control_suite, ControlConfig};
use rtcell_bench::loopback::{self, LoopbackConfig, Notify};
use rtcell_cells::CellKind;
use rtcell_control::offload::Precision;
use rtcell_host::facts::{HostFacts, StealSampler};
use rtcell_host::tsc::TscClock;
use rtcell_loads::Load;
use rtcell_report::Results;

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
    C2c {
        /// The two CPUs, e.g. 0,1 (default: the first and the last online CPU).
        #[arg(long, value_delimiter = ',')]
        cpus: Option<Vec<usize>>,
        /// Individually timed round trips (default 1,000,000; --quick 100,000).
        #[arg(long)]
        samples: Option<usize>,
        #[command(flatten)]
        common: Common,
    },
    /// Seed 000 Table I: master -> cell -> master round trip over shared memory, every byte checked.
    #[command(
        after_help = "Examples:\n  rtcell bench loopback --quick\n  rtcell bench loopback --cell thread --sizes 0,64,1024 --iterations 1000000\n  rtcell bench loopback --notify poll,futex --load memcpy --out /tmp/lb"
    )]
    Loopback {
        /// Payload sizes in bytes (default 0,1,8,16,32,64,128,256,512,1024; at most 65536).
        #[arg(long, value_delimiter = ',')]
        sizes: Option<Vec<usize>>,
        /// Round trips per size (default 1,000,000; --quick 100,000).
        #[arg(long)]
        iterations: Option<usize>,
        /// Cell kinds to measure: thread, process, kvm, or auto (thread, process, and kvm when /dev/kvm is
        /// usable).
        #[arg(long, value_delimiter = ',', default_value = "auto")]
        cell: Vec<String>,
        /// How the idle side waits: poll (busy-poll shared memory) or futex (sleep until woken).
        #[arg(long, value_delimiter = ',', default_value = "poll")]
        notify: Vec<String>,
        #[arg(long, default_value = "none", help = rtcell_loads::LOAD_HELP)]
        load: String,
        /// The cell CPU (default: the last online CPU).
        #[arg(long)]
        cpu: Option<usize>,
        /// The master loop's CPU (default: the first online CPU that is not the cell's).
        #[arg(long)]
        master_cpu: Option<usize>,
        /// Skip the pipe baseline.
        #[arg(long)]
        no_baseline: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Seed 000 Fig. 3/4: the 41-state controller stepped locally and offloaded to cells, every output
    /// checked against the reference data; execution time in the cell and round trip.
    #[command(
        after_help = "Examples:\n  rtcell bench control --quick\n  rtcell bench control --precision f64 --cell thread,kvm --iterations 2000000\n  rtcell bench control --load memcpy --out /tmp/ctl"
    )]
    Control {
        /// Controller steps per precision and cell kind: the 2,000 reference inputs looped (default
        /// 2,000,000; --quick 100,000).
        #[arg(long)]
        iterations: Option<usize>,
        /// Arithmetic of the controller: f64, f32, q31.
        #[arg(long, value_delimiter = ',', default_value = "f64,f32,q31")]
        precision: Vec<String>,
        /// Cell kinds to offload to: thread, process, kvm, or auto (thread, process, and kvm when /dev/kvm
        /// is usable). The master's own local step is always measured too.
        #[arg(long, value_delimiter = ',', default_value = "auto")]
        cell: Vec<String>,
        #[arg(long, default_value = "none", help = rtcell_loads::LOAD_HELP)]
        load: String,
        /// The cell CPU (default: the last online CPU).
        #[arg(long)]
        cpu: Option<usize>,
        /// The master loop's CPU (default: the first online CPU that is not the cell's).
        #[arg(long)]
        master_cpu: Option<usize>,
        #[command(flatten)]
        common: Common,
    },
    /// Seed 004 Fig. 5: read latency against working-set size (1 KiB .. 96 MiB), sequential and random,
    /// on the cell CPU without and with memcpy interferers; plateaus named after the caches.
    #[command(after_help = membench::AFTER_HELP)]
    Membench(membench::MembenchArgs),
    /// Activation latency on the cell CPU: clock_nanosleep (the cyclictest method), a cell busy-polling
    /// the TSC, a kvm cell; optionally side by side with cyclictest.
    #[command(after_help = latency::AFTER_HELP)]
    Latency(latency::LatencyArgs),
    /// Seed 002's inter-task communication: round trip between two SCHED_FIFO threads (95/90) over
    /// pipe, FIFO, message queue, semaphore, PI mutex, condvar, futex, eventfd, UNIX sockets and rtcell rings.
    #[command(after_help = itc::AFTER_HELP)]
    Itc(itc::ItcArgs),
    /// C against Rust in one run: the example C controller's step (examples/c-controller) against the Rust
    /// f64 step on the cell CPU, and a COM signal round trip through the C API against the Rust API.
    #[command(
        after_help = "Examples:\n  rtcell bench capi --quick\n  rtcell bench capi --steps 2000000 --round-trips 1000000 --cpu 1"
    )]
    Capi {
        /// Controller steps timed per implementation (default 1,000,000; --quick 100,000).
        #[arg(long)]
        steps: Option<usize>,
        /// Signal round trips timed per API (default 400,000; --quick 40,000).
        #[arg(long)]
        round_trips: Option<usize>,
        /// The cell CPU (default: the last online CPU).
        #[arg(long)]
        cpu: Option<usize>,
        /// The master's CPU (default: the first online CPU that is not the cell's).
        #[arg(long)]
        master_cpu: Option<usize>,
        #[command(flatten)]
        common: Common,
    },
    /// Seeds 003 and 004: an EtherCAT master (ethercrab) on a simulated segment over a veth pair: its
    /// process-data round trip against a raw-socket ping-pong on the same path, the master task's
    /// activation jitter and cycle at each rate with frames sent, received and lost, and the highest
    /// cycle rate sustained back to back. Needs root (veth pair, raw sockets).
    #[command(
        after_help = "Examples:\n  rtcell bench ethercat\n  rtcell bench ethercat --quick\n  rtcell bench ethercat --rates 20000 --duration 60s --devices 4\n  rtcell bench ethercat --master-busy-poll --sim-sleeps\n  rtcell bench ethercat --load memcpy"
    )]
    Ethercat {
        /// Simulated SubDevices on the segment.
        #[arg(long, default_value_t = 3)]
        devices: u16,
        /// Round trips timed for the floor and for the master (default 10,000; --quick 1,000).
        #[arg(long)]
        samples: Option<usize>,
        /// Cycle rates of the master task, Hz.
        #[arg(long, value_delimiter = ',', default_value = "1000,20000")]
        rates: Vec<u32>,
        /// How long the master task runs at each rate (default 10s; --quick 2s).
        #[arg(long)]
        duration: Option<String>,
        /// The master's CPU (default: the last online CPU).
        #[arg(long)]
        cpu: Option<usize>,
        /// The simulator's CPU (default: the first online CPU that is not the master's).
        #[arg(long)]
        master_cpu: Option<usize>,
        /// Let the simulator sleep on its socket instead of busy-polling it (then its own wake-up adds
        /// to every round trip).
        #[arg(long)]
        sim_sleeps: bool,
        /// Let the master task busy-poll for each reply instead of sleeping until it arrives (the
        /// round trips are timed both ways regardless).
        #[arg(long)]
        master_busy_poll: bool,
        #[arg(long, default_value = "none", help = rtcell_loads::LOAD_HELP)]
        load: String,
        #[command(flatten)]
        common: Common,
    },
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
    Gateway {
        /// The scenario (it must have the task and the writable signal below).
        #[arg(long, default_value = "examples/offload.toml")]
        scenario: PathBuf,
        /// The task whose activation latency and overruns are judged.
        #[arg(long, default_value = "master")]
        task: String,
        /// The writable signal written during the load.
        #[arg(long, default_value = "master.trim")]
        signal: String,
        /// Length of each phase (default 60s; --quick 5s).
        #[arg(long)]
        phase: Option<String>,
        /// Statistics reads per second during the load.
        #[arg(long, default_value_t = 1000)]
        reads: u32,
        /// Signal writes per second during the load.
        #[arg(long, default_value_t = 100)]
        writes: u32,
        #[command(flatten)]
        common: Common,
    },
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
        Cmd::Bench { suite, all } => match bench(suite, all) {
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

fn bench(suite: Option<Suite>, all: all::AllArgs) -> Result<i32, Usage> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // Things found while validating that change how to read the run.
    let mut pre_warnings: Vec<String> = Vec::new();
    // Validate everything before anything starts.
    match suite {
        Some(suite) => {
            let (name, common, plan) = plan_suite(suite, &mut pre_warnings)?;
            let out = common.out.clone().unwrap_or_else(|| default_out(name));
            execute(vec![(name, plan)], &out, common.history.path.as_deref(), command, pre_warnings, None)
        }
        None => all::main(all, command, pre_warnings),
    }
}

/// Checks one suite's options and turns them into its plan (nothing starts).
fn plan_suite(suite: Suite, pre_warnings: &mut Vec<String>) -> Result<(&'static str, Common, Plan), Usage> {
    Ok(match suite {
        Suite::C2c { cpus, samples, common } => {
            let (a, b) = match cpus.as_deref() {
                Some([a, b]) => {
                    let online = online();
                    (check_cpu(*a, "first (--cpus)", &online)?, check_cpu(*b, "second (--cpus)", &online)?)
                }
                Some(other) => {
                    return usage(format!("--cpus takes exactly two CPUs, e.g. 0,1 (got {} values)", other.len()));
                }
                None => pick_cpus(None, None)?,
            };
            if a == b {
                return usage(format!("--cpus {a},{b}: give two different CPUs"));
            }
            let samples = samples.unwrap_or(if common.quick { 100_000 } else { 1_000_000 });
            if samples == 0 {
                return usage("--samples 0: give at least 1");
            }
            let cfg = C2cConfig {
                cpu_a: a,
                cpu_b: b,
                samples,
                batches: if common.quick { 100 } else { 1000 },
                batch: 1000,
                priority: Some(80),
            };
            ("c2c", common, Plan::C2c(cfg))
        }
        Suite::Loopback { sizes, iterations, cell, notify, load, cpu, master_cpu, no_baseline, common } => {
            let (master, cell_cpu) = pick_cpus(master_cpu, cpu)?;
            let sizes = sizes.unwrap_or_else(|| loopback::DEFAULT_SIZES.to_vec());
            if sizes.is_empty() {
                return usage("--sizes is empty: give at least one payload size");
            }
            if let Some(&s) = sizes.iter().find(|&&s| s > loopback::MAX_PAYLOAD) {
                return usage(format!(
                    "--sizes: {s} bytes is above the maximum frame of {} bytes; use sizes up to {}",
                    loopback::MAX_PAYLOAD,
                    loopback::MAX_PAYLOAD
                ));
            }
            let iterations = iterations.unwrap_or(if common.quick { 100_000 } else { 1_000_000 });
            if iterations == 0 {
                return usage("--iterations 0: give at least 1 round trip per size");
            }
            let cells = parse_cells(&cell, pre_warnings)?;
            let mut notifies = Vec::new();
            for n in &notify {
                let k: Notify = n.parse().map_err(|e| Usage(format!("--notify: {e}")))?;
                if !notifies.contains(&k) {
                    notifies.push(k);
                }
            }
            let load: Load = load.parse().map_err(|e| Usage(format!("--load: {e}")))?;
            let cfg = LoopbackConfig {
                master_cpu: master,
                cell_cpu,
                sizes,
                iterations,
                cells,
                notify: notifies,
                load,
                pipe_baseline: !no_baseline,
                c2c_floor: true,
                master_priority: Some(80),
                cell_priority: Some(90),
                seed: 0x5eed_0000_0000_0001,
            };
            ("loopback", common, Plan::Loopback(cfg))
        }
        Suite::Capi { steps, round_trips, cpu, master_cpu, common } => {
            let (master, cell_cpu) = pick_cpus(master_cpu, cpu)?;
            let steps = steps.unwrap_or(if common.quick { 100_000 } else { 1_000_000 });
            let round_trips = round_trips.unwrap_or(if common.quick { 40_000 } else { 400_000 });
            if steps == 0 || round_trips < 8 {
                return usage("--steps must be at least 1 and --round-trips at least 8");
            }
            let cfg =
                rtcell_bench::capi::CapiConfig { master_cpu: master, cell_cpu, steps, round_trips, priority: Some(80) };
            ("capi", common, Plan::Capi(cfg))
        }
        Suite::Ethercat {
            devices,
            samples,
            rates,
            duration,
            cpu,
            master_cpu,
            sim_sleeps,
            master_busy_poll,
            load,
            common,
        } => {
            let (sim_cpu, cell_cpu) = pick_cpus(master_cpu, cpu)?;
            let samples = samples.unwrap_or(if common.quick { 1_000 } else { 10_000 });
            let duration = match duration {
                Some(d) => rtcell_scenario::parse_duration(&d).map_err(|e| Usage(format!("--duration {e}")))?,
                None if common.quick => std::time::Duration::from_secs(2),
                None => std::time::Duration::from_secs(10),
            };
            if !(1..=rtcell_ecat::master::MAX_DEVICES as u16).contains(&devices) {
                return usage(format!("--devices must be 1 to {}", rtcell_ecat::master::MAX_DEVICES));
            }
            if samples == 0 || rates.is_empty() || rates.iter().any(|r| !(1..=100_000).contains(r)) {
                return usage("--samples must be at least 1 and every --rates value 1 to 100000 Hz");
            }
            // SAFETY: getuid only reads the process's user id.
            if unsafe { libc::getuid() } != 0 {
                return usage("bench ethercat creates a veth pair and opens raw sockets: run it as root");
            }
            let cfg = rtcell_bench::ethercat::EthercatConfig {
                devices,
                samples,
                rates,
                duration,
                max_rate_for: std::time::Duration::from_secs(if common.quick { 1 } else { 3 }),
                cell_cpu,
                master_cpu: sim_cpu,
                priority: 80,
                frame_timeout: std::time::Duration::from_millis(10),
                sim_busy_poll: !sim_sleeps,
                master_busy_poll,
                load: load.parse().map_err(|e| Usage(format!("--load: {e}")))?,
            };
            ("ethercat", common, Plan::Ethercat(cfg))
        }
        Suite::Gateway { scenario, task, signal, phase, reads, writes, common } => {
            let phase = match phase {
                Some(p) => rtcell_scenario::parse_duration(&p).map_err(|e| Usage(format!("--phase {e}")))?,
                None if common.quick => std::time::Duration::from_secs(5),
                None => std::time::Duration::from_secs(60),
            };
            if phase < std::time::Duration::from_secs(1) {
                return usage("--phase must be at least 1s");
            }
            if !(1..=20_000).contains(&reads) || !(1..=1_000).contains(&writes) {
                return usage("--reads must be 1 to 20000 per second and --writes 1 to 1000");
            }
            if let Err((m, _)) = run::load_plan(&scenario, None, &[]) {
                return usage(format!("--scenario {}:\n{m}", scenario.display()));
            }
            let cfg = gateway_bench::GatewayBenchConfig {
                scenario,
                task,
                signal,
                phase,
                reads_per_s: reads,
                writes_per_s: writes,
                scrape_every: std::time::Duration::from_secs(1),
                history: common.history.path.clone(),
                hostile: Default::default(),
            };
            ("gateway", common, Plan::Gateway(cfg))
        }
        Suite::Control { iterations, precision, cell, load, cpu, master_cpu, common } => {
            let (master, cell_cpu) = pick_cpus(master_cpu, cpu)?;
            let iterations = iterations.unwrap_or(if common.quick {
                control_suite::QUICK_ITERATIONS
            } else {
                control_suite::DEFAULT_ITERATIONS
            });
            if iterations == 0 {
                return usage("--iterations 0: give at least 1 controller step");
            }
            let mut precisions = Vec::new();
            for p in &precision {
                let p: Precision = p.parse().map_err(|e| Usage(format!("--precision {p:?}: {e}")))?;
                if !precisions.contains(&p) {
                    precisions.push(p);
                }
            }
            let cells = parse_cells(&cell, pre_warnings)?;
            let load: Load = load.parse().map_err(|e| Usage(format!("--load: {e}")))?;
            let cfg = ControlConfig {
                master_cpu: master,
                cell_cpu,
                iterations,
                precisions,
                cells,
                load,
                master_priority: Some(80),
                cell_priority: Some(90),
            };
            ("control", common, Plan::Control(cfg))
        }
        Suite::Membench(args) => membench::plan(args)?,
        Suite::Latency(args) => latency::plan(args)?,
        Suite::Itc(args) => itc::plan(args)?,
    })
}

/// Runs `plans` one after the other into one results document in `out` (which must not hold one yet),
/// then writes report.html, the CSVs and the gnuplot script beside it and records the run in the history.
/// `progress` (the default run's bars) is told when each plan starts and ends.
fn execute(
    plans: Vec<(&'static str, Plan)>,
    out: &std::path::Path,
    history_db: Option<&std::path::Path>,
    command: String,
    pre_warnings: Vec<String>,
    mut progress: Option<&mut all::Progress>,
) -> Result<i32, Usage> {
    if out.exists() && out.join(rtcell_report::doc::RESULTS_FILE).exists() {
        return usage(format!(
            "--out {}: it already holds a results.json; pick another directory or remove it",
            out.display()
        ));
    }

    // Held until the run ends.
    let cell_cpus: Vec<usize> = plans.iter().flat_map(|(_, p)| cpus::plan_cpus(p)).collect();
    let _cpu_locks = match cpus::take(&cell_cpus) {
        Ok(l) => l,
        Err((msg, EXIT_USAGE)) => return Err(Usage(msg.trim_start_matches("error: ").to_string())),
        Err((msg, code)) => {
            eprintln!("{msg}");
            return Ok(code);
        }
    };
    let tsc = match TscClock::calibrate() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(1);
        }
    };
    install_ctrlc();
    let facts = HostFacts::collect(Some(tsc.khz()));
    eprintln!("{}", host_summary(&facts));
    let git = Some(env!("RTCELL_GIT").to_string()).filter(|s| !s.is_empty());
    let mut results = Results::new(env!("CARGO_PKG_VERSION"), git, Some(command), facts);
    let started = Instant::now();
    let steal = StealSampler::start();

    let check_cpu = plans.first().map_or(0, |(_, p)| tune::plan_cell_cpu(p));
    // Per suite: (name, failure) and how the run ended overall.
    let mut failures: Vec<(&str, String)> = Vec::new();
    let (mut errors, mut incomplete) = (0u64, false);
    let mut texts = Vec::new();
    for (i, (name, plan)) in plans.into_iter().enumerate() {
        if rtcell_bench::stop_requested() {
            incomplete = true;
            break;
        }
        if let Some(p) = progress.as_deref_mut() {
            p.start(i);
        }
        let run = match plan {
            Plan::C2c(cfg) => rtcell_bench::c2c::run(&tsc, &cfg),
            Plan::Loopback(cfg) => loopback::run(&tsc, &cfg),
            Plan::Control(cfg) => control_suite::run(&tsc, &cfg),
            Plan::Membench(cfg) => rtcell_bench::membench::run(&tsc, &cfg),
            Plan::Latency(cfg) => rtcell_bench::latency::run(&tsc, &cfg),
            Plan::Itc(cfg) => rtcell_bench::itc::run(&tsc, &cfg),
            Plan::Capi(cfg) => rtcell_bench::capi::run(&tsc, &cfg),
            Plan::Gateway(cfg) => gateway_bench::run(&cfg, out).map_err(rtcell_bench::BenchError::Other),
            Plan::Ethercat(cfg) => rtcell_bench::ethercat::run(&tsc, &cfg),
        };
        if let Some(p) = progress.as_deref_mut() {
            p.done(i);
        }
        let mut run: SuiteRun = match run {
            Ok(r) => r,
            Err(e) => {
                // A suite that could not run at all: the others still run and are written.
                eprintln!("error: {name}: {e}");
                failures.push((name, e.to_string()));
                continue;
            }
        };
        run.attach_load_reports();
        results.warnings.extend(run.warnings.iter().cloned());
        errors += run.errors;
        incomplete |= run.incomplete;
        if let Some(f) = &run.failure {
            failures.push((name, f.clone()));
            incomplete = true;
        }
        texts.push(run.text);
        results.suites.push(run.suite);
    }
    if let Some(p) = progress {
        p.finish();
    }
    results.host.steal_pct = steal.finish();
    tune::record_check(&mut results.host, check_cpu);
    results.finish(started);
    let mut warnings = host_warnings(&results.host);
    warnings.extend(pre_warnings);
    warnings.append(&mut results.warnings);
    results.warnings = warnings;
    results.incomplete = incomplete;

    for t in &texts {
        println!("{t}");
    }
    if !results.warnings.is_empty() {
        println!("Warnings:");
        for w in &results.warnings {
            println!("  - {w}");
        }
    }
    match results.write_to_dir(out) {
        Ok(path) => {
            println!("\nresults: {}", path.display());
            report::write_beside(&results, out);
            match rtcell_report::export::write_exports(&results, out) {
                Ok(x) => println!(
                    "CSV: {} ({} histogram files); gnuplot: cd {} && gnuplot {}",
                    out.join(&x.summary).display(),
                    x.series_csvs.len(),
                    out.display(),
                    x.gnuplot.display()
                ),
                Err(e) => eprintln!("warning: could not write the CSV files: {e}"),
            }
            history::record(history_db, &results, &path);
        }
        Err(e) => {
            eprintln!("error: could not write the results: {e}");
            return Ok(1);
        }
    }
    if !failures.is_empty() {
        for (name, f) in &failures {
            eprintln!("error: {name}: {f}");
        }
        eprintln!("the results above cover only what ran before that (marked incomplete)");
        return Ok(1);
    }
    if incomplete {
        eprintln!("interrupted: the results cover only what ran before Ctrl-C (marked incomplete)");
        return Ok(EXIT_INTERRUPTED);
    }
    if errors > 0 {
        eprintln!("FAILED: {errors} measurement errors (see the errors column)");
        return Ok(1);
    }
    Ok(0)
}

enum Plan {
    C2c(C2cConfig),
    Loopback(LoopbackConfig),
    Control(ControlConfig),
    Membench(rtcell_bench::membench::MembenchConfig),
    Latency(rtcell_bench::latency::LatencyConfig),
    Itc(rtcell_bench::itc::ItcConfig),
    Capi(rtcell_bench::capi::CapiConfig),
    Gateway(gateway_bench::GatewayBenchConfig),
    Ethercat(rtcell_bench::ethercat::EthercatConfig),
}

/// The cell kinds of a `--cell` list: names, or `auto` (thread, process, and kvm when usable; a skipped
/// kvm becomes a warning). Asking for kvm where it is not usable is refused with the reason.
fn parse_cells(cell: &[String], pre_warnings: &mut Vec<String>) -> Result<Vec<CellKind>, Usage> {
    let mut cells = Vec::new();
    let kvm = rtcell_kvm::kvm_status();
    for c in cell {
        let kinds: Vec<CellKind> = if c == "auto" {
            if !kvm.is_usable() {
                pre_warnings.push(format!("kvm cells skipped: {}", kvm.explain()));
            }
            let mut v = vec![CellKind::Thread, CellKind::Process];
            if kvm.is_usable() {
                v.push(CellKind::Kvm);
            }
            v
        } else {
            vec![c.parse().map_err(|e| Usage(format!("--cell: {e}")))?]
        };
        for k in kinds {
            if k == CellKind::Kvm && !kvm.is_usable() {
                return usage(format!("--cell kvm: {}", kvm.explain()));
            }
            if !cells.contains(&k) {
                cells.push(k);
            }
        }
    }
    Ok(cells)
}

/// `rtcell control reference`: the reference data of `seed` as CSV, to `out` or standard output.
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
        if rtcell_bench::stop_requested() {
            // Second Ctrl-C: the user wants out now.
            std::process::exit(EXIT_INTERRUPTED);
        }
        eprintln!(
            "\nstopping (Ctrl-C or SIGTERM): finishing the current step and writing what was measured \
             (Ctrl-C again to abort)"
        );
        rtcell_bench::request_stop();
    });
    if let Err(e) = r {
        eprintln!("warning: Ctrl-C handler not installed ({e}); an interrupted run will not be saved");
    }
}
