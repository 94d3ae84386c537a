//! `rtcell bench SUITE` and the default run: each suite's options checked into its plan before anything
//! starts ([`plan_suite`]), then the plans run one after the other into one run directory ([`execute`]).

use rtcell_bench::SuiteRun;
use rtcell_bench::c2c::C2cConfig;
use rtcell_bench::control::{self as control_suite, ControlConfig};
use rtcell_bench::loopback::{self as loopback_suite, LoopbackConfig, Notify};
use rtcell_cells::CellKind;
use rtcell_control::offload::Precision;
use rtcell_host::tsc::TscClock;
use rtcell_loads::Load;

use super::*;

pub(super) mod c2c;
pub(super) mod capi;
pub(super) mod control;
pub(super) mod ethercat;
pub(super) mod gateway;
pub(super) mod itc;
pub(super) mod latency;
pub(super) mod loopback;
pub(super) mod membench;

pub(super) fn main(suite: Option<Suite>, all: all::AllArgs) -> Result<i32, Usage> {
    // Things found while validating that change how to read the run.
    let mut pre_warnings: Vec<String> = Vec::new();
    // Validate everything before anything starts.
    match suite {
        Some(suite) => {
            let (name, common, plan) = plan_suite(suite, &mut pre_warnings)?;
            let out = common.out.clone().unwrap_or_else(|| default_out(name));
            execute(vec![(name, plan)], &out, common.history.path.as_deref(), pre_warnings, None)
        }
        None => all::main(all, pre_warnings),
    }
}

// The cell CPU and the master's CPU of a suite with a master loop and a cell (a plain comment: a doc
// comment here would become the help text of the commands that flatten it).
#[derive(clap::Args, Clone)]
pub(super) struct CellCpus {
    /// The cell CPU (default: the last online CPU).
    #[arg(long)]
    cpu: Option<usize>,
    /// The master loop's CPU (default: the first online CPU that is not the cell's).
    #[arg(long)]
    master_cpu: Option<usize>,
}

impl CellCpus {
    /// (master CPU, cell CPU), checked.
    fn pick(&self) -> Result<(usize, usize), Usage> {
        pick_cpus(self.master_cpu, self.cpu)
    }
}

/// Checks one suite's options and turns them into its plan (nothing starts).
pub(super) fn plan_suite(suite: Suite, pre_warnings: &mut Vec<String>) -> Result<(&'static str, Common, Plan), Usage> {
    match suite {
        Suite::C2c(a) => c2c::plan(a),
        Suite::Loopback(a) => loopback::plan(a, pre_warnings),
        Suite::Capi(a) => capi::plan(a),
        Suite::Ethercat(a) => ethercat::plan(a),
        Suite::Gateway(a) => gateway::plan(a),
        Suite::Control(a) => control::plan(a, pre_warnings),
        Suite::Membench(args) => membench::plan(args),
        Suite::Latency(args) => latency::plan(args),
        Suite::Itc(args) => itc::plan(args),
    }
}

/// Runs `plans` one after the other into one results document in `out` (which must not hold one yet),
/// then writes report.html, the CSVs and the gnuplot script beside it and records the run in the history.
/// `progress` (the default run's bars) is told when each plan starts and ends.
pub(super) fn execute(
    plans: Vec<(&'static str, Plan)>,
    out: &std::path::Path,
    history_db: Option<&std::path::Path>,
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
    let mut session = session::Session::start(&tsc);
    eprintln!("{}", host_summary(&session.results.host));

    let check_cpu = plans.first().map_or(0, |(_, p)| tune::plan_cell_cpu(p));
    // Per suite: (name, failure) and how the run ended overall.
    let mut failures: Vec<(&str, String)> = Vec::new();
    let (mut errors, mut incomplete) = (0u64, false);
    let mut texts = Vec::new();
    for (i, (name, plan)) in plans.into_iter().enumerate() {
        if rtcell_host::stop::stop_requested() {
            incomplete = true;
            break;
        }
        if let Some(p) = progress.as_deref_mut() {
            p.start(i);
        }
        let run = match plan {
            Plan::C2c(cfg) => rtcell_bench::c2c::run(&tsc, &cfg),
            Plan::Loopback(cfg) => loopback_suite::run(&tsc, &cfg),
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
        run.drop_unmeasured_series();
        session.results.warnings.extend(run.warnings.iter().cloned());
        errors += run.errors;
        incomplete |= run.incomplete;
        if let Some(f) = &run.failure {
            failures.push((name, f.clone()));
            incomplete = true;
        }
        texts.push(run.text);
        session.results.suites.push(run.suite);
    }
    if let Some(p) = progress {
        p.finish();
    }
    let mut results = session.finish(check_cpu);
    let mut warnings = host_warnings(&results.host);
    warnings.extend(pre_warnings);
    warnings.append(&mut results.warnings);
    results.warnings = warnings;
    results.incomplete = incomplete;

    for t in &texts {
        outln!("{t}");
    }
    if !results.warnings.is_empty() {
        outln!("Warnings:");
        for w in &results.warnings {
            outln!("  - {w}");
        }
    }
    match results.write_to_dir(out) {
        Ok(path) => {
            outln!("\nresults: {}", path.display());
            report::write_beside(&results, out);
            match rtcell_report::export::write_exports(&results, out) {
                Ok(x) => outln!(
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
