//! `rtcell run scenario.toml`: validate the whole file, run it, print the per-task and per-channel
//! tables, write the results document (suite `scenario`).
//!
//! Exit status: 0 when every task ran to the end with no error; 1 when a watchdog tripped, a task or a
//! cell failed, or a check failed (the results are written all the same); 2 when the scenario is invalid
//! (nothing started); 130 after Ctrl-C (what was measured is written, marked incomplete).

use std::path::{Path, PathBuf};
use std::time::Instant;

use rtcell_host::facts::{HostFacts, StealSampler};
use rtcell_host::tsc::TscClock;
use rtcell_report::Results;
use rtcell_scenario::{HostView, parse_duration};

use super::{EXIT_INTERRUPTED, EXIT_USAGE, default_out, host_summary, host_warnings, install_ctrlc};

/// `history`: the run history to record the run in (`--history PATH`; `None`: the default location).
pub fn main(
    file: &Path,
    duration: Option<&str>,
    out: Option<PathBuf>,
    kinds: &[String],
    history: Option<&Path>,
) -> i32 {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let host = HostView::here();
    let mut overrides = Vec::new();
    for k in kinds {
        match k.split_once('=') {
            Some((cell, kind)) if !cell.is_empty() && !kind.is_empty() => {
                overrides.push((cell.to_string(), kind.to_string()))
            }
            _ => {
                eprintln!("error: --kind {k:?}: give CELL=KIND, e.g. --kind ctrl=process");
                return EXIT_USAGE;
            }
        }
    }
    let mut plan = match rtcell_scenario::load_with(file, &host, &overrides) {
        Ok(p) => p,
        Err(invalid) => {
            eprintln!("{invalid}");
            let n = invalid.diags.len();
            eprintln!(
                "error: {} invalid: {n} problem{}; nothing was started",
                file.display(),
                if n == 1 { "" } else { "s" }
            );
            return EXIT_USAGE;
        }
    };
    if let Some(d) = duration {
        match parse_duration(d) {
            Ok(d) => plan = plan.with_duration(d),
            Err(e) => {
                eprintln!("error: --duration {e}");
                return EXIT_USAGE;
            }
        }
    }
    let out = out.unwrap_or_else(|| default_out(&format!("scenario-{}", plan.name)));
    if out.join(rtcell_report::doc::RESULTS_FILE).exists() {
        eprintln!(
            "error: --out {}: it already holds a results.json; pick another directory or remove it",
            out.display()
        );
        return EXIT_USAGE;
    }
    let tsc = match TscClock::calibrate() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    install_ctrlc();
    let facts = HostFacts::collect(Some(tsc.khz()));
    eprintln!("{}", host_summary(&facts));
    eprintln!(
        "scenario {:?} from {}: {} cell(s), {} task(s), {:.1} s",
        plan.name,
        file.display(),
        plan.cells.len(),
        plan.tasks.len(),
        plan.duration.as_secs_f64()
    );
    let git = Some(env!("RTCELL_GIT").to_string()).filter(|s| !s.is_empty());
    let mut results = Results::new(env!("CARGO_PKG_VERSION"), git, Some(command), facts);
    let started = Instant::now();
    let steal = StealSampler::start();
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("error: cannot create {}: {e}", out.display());
        return 1;
    }
    let r = match rtcell_scenario::run(&plan, tsc.khz(), &out, &rtcell_bench::stop_requested) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: scenario {:?} could not start: {e}", plan.name);
            return 1;
        }
    };
    results.host.steal_pct = steal.finish();
    // The check of the first cell's CPU (the last online CPU when the scenario has no cell).
    let cell_cpu = plan
        .cells
        .first()
        .map(|c| c.cpu)
        .unwrap_or_else(|| rtcell_host::cpu::online_cpus().ok().and_then(|c| c.last().copied()).unwrap_or(0));
    super::tune::record_check(&mut results.host, cell_cpu);
    results.finish(started);
    results.warnings.extend(host_warnings(&results.host));
    results.warnings.extend(r.warnings.iter().cloned());
    results.warnings.extend(r.errors.iter().map(|e| format!("error: {e}")));
    results.incomplete = r.incomplete;
    let mut suite = rtcell_scenario::report::suite(&plan, &r);
    let mut text = rtcell_scenario::report::text(&plan, &r);
    rtcell_bench::loads::attach_reports_to(&mut suite, &mut results.warnings, &mut text);
    results.suites.push(suite);

    println!("{text}");
    if !results.warnings.is_empty() {
        println!("Warnings:");
        for w in &results.warnings {
            println!("  - {w}");
        }
    }
    for f in &r.files {
        println!("log: {}", f.display());
    }
    match results.write_to_dir(&out) {
        Ok(path) => {
            println!("\nresults: {}", path.display());
            super::report::write_beside(&results, &out);
            super::history::record(history, &results, &path);
        }
        Err(e) => {
            eprintln!("error: could not write the results: {e}");
            return 1;
        }
    }
    if r.incomplete {
        eprintln!("interrupted: the results cover only what ran before Ctrl-C (marked incomplete)");
        return EXIT_INTERRUPTED;
    }
    if !r.errors.is_empty() {
        for e in &r.errors {
            eprintln!("error: {e}");
        }
        eprintln!("FAILED: {} error(s) during the run (the results above include them)", r.errors.len());
        return 1;
    }
    0
}
