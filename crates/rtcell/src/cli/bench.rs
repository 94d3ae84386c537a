//! `rtcell bench SUITE` and the default run: each suite's options checked into its plan before anything
//! starts ([`plan_suite`]), then the plans run one after the other into one run directory ([`execute`]).

use std::time::Instant;

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

use super::*;

pub(super) fn main(suite: Option<Suite>, all: all::AllArgs) -> Result<i32, Usage> {
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
pub(super) fn plan_suite(suite: Suite, pre_warnings: &mut Vec<String>) -> Result<(&'static str, Common, Plan), Usage> {
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
pub(super) fn execute(
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

pub(super) enum Plan {
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
