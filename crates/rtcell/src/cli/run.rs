//! `rtcell run scenario.toml`: validate the whole file, run it, print the per-task and per-channel
//! tables, write the results document (suite `scenario`). With `--serve`, a gateway shows the run
//! (gRPC and Prometheus) while it goes.
//!
//! Exit status: 0 when every task ran to the end with no error; 1 when a watchdog tripped, a task or a
//! cell failed, or a check failed (the results are written all the same); 2 when the scenario is invalid
//! (nothing started); 130 after Ctrl-C or SIGTERM (what was measured is written, marked incomplete).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rtcell_host::tsc::TscClock;
use rtcell_scenario::{HostView, Live, Plan, parse_duration};

use super::{EXIT_INTERRUPTED, EXIT_USAGE, default_out, host_summary, host_warnings, install_ctrlc};

/// A scenario file made into a plan, with the command line's overrides; `Err` holds the message and
/// the exit status (2: invalid, nothing started).
pub fn load_plan(file: &Path, duration: Option<&str>, kinds: &[String]) -> Result<Plan, (String, i32)> {
    load_plan_from(file, duration, kinds, &rtcell_scenario::Origin::Operator)
}

/// [`load_plan`] for a scenario of the given origin (what it may load).
pub fn load_plan_from(
    file: &Path,
    duration: Option<&str>,
    kinds: &[String],
    origin: &rtcell_scenario::Origin,
) -> Result<Plan, (String, i32)> {
    let host = HostView::here();
    let mut overrides = Vec::new();
    for k in kinds {
        match k.split_once('=') {
            Some((cell, kind)) if !cell.is_empty() && !kind.is_empty() => {
                overrides.push((cell.to_string(), kind.to_string()))
            }
            _ => {
                let k = rtcell_host::peer_text::peer_str(k, 128);
                return Err((format!("error: --kind \"{k}\": give CELL=KIND, e.g. --kind ctrl=process"), EXIT_USAGE));
            }
        }
    }
    let mut plan = rtcell_scenario::load_from(file, &host, &overrides, origin).map_err(|invalid| {
        let n = invalid.diags.len();
        (
            format!(
                "{invalid}\nerror: {} invalid: {n} problem{}; nothing was started",
                file.display(),
                if n == 1 { "" } else { "s" }
            ),
            EXIT_USAGE,
        )
    })?;
    if let Some(d) = duration {
        plan = plan.with_duration(parse_duration(d).map_err(|e| (format!("error: --duration {e}"), EXIT_USAGE))?);
    }
    Ok(plan)
}

/// The cell CPUs of a scenario.
pub fn plan_cpus(plan: &Plan) -> Vec<usize> {
    plan.cells.iter().map(|c| c.cpu).collect()
}

/// The CPUs of a scenario's Linux side (the master CPU) and its loads: shared with other runs' Linux
/// sides, never another run's cell CPU.
pub fn plan_linux_cpus(plan: &Plan) -> Vec<usize> {
    std::iter::once(plan.master_cpu).chain(plan.loads.iter().flat_map(|l| l.cpus.iter().copied())).collect()
}

/// The results directory of a run: `out`, or a new one; refused if it holds a results.json already.
pub fn out_dir(plan: &Plan, out: Option<PathBuf>) -> Result<PathBuf, (String, i32)> {
    let out = out.unwrap_or_else(|| default_out(&format!("scenario-{}", plan.name)));
    if out.join(rtcell_report::doc::RESULTS_FILE).exists() {
        return Err((
            format!(
                "error: --out {}: it already holds a results.json; pick another directory or remove it",
                out.display()
            ),
            EXIT_USAGE,
        ));
    }
    if let Some(msg) = symlink_on_a_log_path(plan, &out) {
        return Err((format!("error: {msg}; nothing was started"), EXIT_USAGE));
    }
    Ok(out)
}

/// A symbolic link already in `out` on the way to a log file of the plan (a directory or the file
/// itself): rtcell never writes through one, so the run is refused before it starts, naming the link.
fn symlink_on_a_log_path(plan: &Plan, out: &Path) -> Option<String> {
    for (task, file) in plan.log_files() {
        let mut at = out.to_path_buf();
        for part in Path::new(file).components() {
            at.push(part);
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                return Some(format!(
                    "--out {}: {} (on the way to task {:?}'s log file {file:?}) is a symbolic link; rtcell never \
                     writes through one: remove it or pick another --out",
                    out.display(),
                    at.display(),
                    task
                ));
            }
        }
    }
    None
}

/// A results directory of its own for a run without `--out`: `base` made with mkdir (never reused, so
/// two runs in the same second never share one), else `base-2`, `base-3`, ... Its parents are created.
pub fn claim_new_dir(base: &Path) -> Result<PathBuf, (String, i32)> {
    let fail = |p: &Path, e: std::io::Error| (format!("error: cannot create {}: {e}", p.display()), 1);
    if let Some(parent) = base.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| fail(parent, e))?;
    }
    let name = base.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for i in 1..=1000 {
        let p = if i == 1 { base.to_path_buf() } else { base.with_file_name(format!("{name}-{i}")) };
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(&p, e)),
        }
    }
    Err((format!("error: {} and 999 others like it exist already; give --out", base.display()), 1))
}

/// How a run ended: its exit status and, when written, its results.json.
pub struct Ended {
    pub code: i32,
    pub results: Option<PathBuf>,
    pub error: Option<String>,
}

/// Runs a validated plan to the end, prints its tables, writes results.json (and report.html) into
/// `out`, records it in the history. `observe` gets the live view once the cells are up; `stop` asks
/// for an early end (checked with Ctrl-C).
pub fn execute(
    plan: &Plan,
    file: &Path,
    out: &Path,
    history: Option<&Path>,
    tsc: &TscClock,
    observe: &dyn Fn(Arc<Live>),
    stop: &dyn Fn() -> bool,
) -> Ended {
    let failed = |e: String| {
        eprintln!("{e}");
        Ended { code: 1, results: None, error: Some(e) }
    };
    let session = super::session::Session::start(tsc);
    eprintln!("{}", host_summary(&session.results.host));
    eprintln!(
        "scenario {:?} from {}: {} cell(s), {} task(s), {:.1} s",
        plan.name,
        file.display(),
        plan.cells.len(),
        plan.tasks.len(),
        plan.duration.as_secs_f64()
    );
    if let Err(e) = std::fs::create_dir_all(out) {
        return failed(format!("error: cannot create {}: {e}", out.display()));
    }
    let stop = || stop() || rtcell_host::stop::stop_requested();
    let r = match rtcell_scenario::run_observed(plan, tsc.khz(), out, &stop, observe) {
        Ok(r) => r,
        Err(e) if stop() => {
            // Ctrl-C or SIGTERM while the run was starting: nothing ran, nothing is left running.
            eprintln!("interrupted before the run started: {e}");
            return Ended { code: EXIT_INTERRUPTED, results: None, error: Some(format!("interrupted: {e}")) };
        }
        Err(e) => return failed(format!("error: scenario {:?} could not start: {e}", plan.name)),
    };
    // The check of the first cell's CPU (the last online CPU when the scenario has no cell).
    let cell_cpu = plan
        .cells
        .first()
        .map(|c| c.cpu)
        .unwrap_or_else(|| rtcell_host::cpu::online_cpus().ok().and_then(|c| c.last().copied()).unwrap_or(0));
    let mut results = session.finish(cell_cpu);
    results.warnings.extend(host_warnings(&results.host));
    results.warnings.extend(r.warnings.iter().cloned());
    results.warnings.extend(r.errors.iter().map(|e| format!("error: {e}")));
    results.incomplete = r.incomplete;
    let mut suite = rtcell_scenario::report::suite(plan, &r);
    let mut text = rtcell_scenario::report::text(plan, &r);
    rtcell_loads::attach_reports_to(&mut suite, &mut results.warnings, &mut text);
    results.suites.push(suite);

    outln!("{text}");
    if !results.warnings.is_empty() {
        outln!("Warnings:");
        for w in &results.warnings {
            outln!("  - {w}");
        }
    }
    for f in &r.files {
        outln!("log: {}", f.display());
    }
    let path = match results.write_to_dir(out) {
        Ok(path) => {
            outln!("\nresults: {}", path.display());
            super::report::write_beside(&results, out);
            super::history::record(history, &results, &path);
            path
        }
        Err(e) => return failed(format!("error: could not write the results: {e}")),
    };
    let ended = |code: i32, error: Option<String>| Ended { code, results: Some(path.clone()), error };
    if r.incomplete {
        eprintln!("interrupted: the results cover only what ran before the stop (marked incomplete)");
        return ended(EXIT_INTERRUPTED, None);
    }
    if !r.errors.is_empty() {
        for e in &r.errors {
            eprintln!("error: {e}");
        }
        eprintln!("FAILED: {} error(s) during the run (the results above include them)", r.errors.len());
        return ended(1, Some(r.errors.join("; ")));
    }
    ended(0, None)
}

/// `rtcell run`. `history`: the run history to record the run in (`None`: the default location).
pub fn main(
    file: &Path,
    duration: Option<&str>,
    out: Option<PathBuf>,
    kinds: &[String],
    history: Option<&Path>,
    serve: Option<&super::gateway::ServeArgs>,
) -> i32 {
    let fresh = out.is_none();
    let prepared = load_plan(file, duration, kinds).and_then(|plan| out_dir(&plan, out).map(|o| (plan, o)));
    let (plan, mut out) = match prepared {
        Ok(p) => p,
        Err((msg, code)) => {
            eprintln!("{msg}");
            return code;
        }
    };
    // Held until the run ends (the gateway's linger included).
    let _cpu_locks = match super::cpus::take_run(&plan_cpus(&plan), &plan_linux_cpus(&plan)) {
        Ok(l) => l,
        Err((msg, code)) => {
            eprintln!("{msg}");
            return code;
        }
    };
    if fresh {
        // Made here, once the CPUs are ours: a refused run leaves no directory behind.
        out = match claim_new_dir(&out) {
            Ok(o) => o,
            Err((msg, code)) => {
                eprintln!("{msg}");
                return code;
            }
        };
    }
    let tsc = match TscClock::calibrate() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    // Ctrl-C and SIGTERM (and SIGHUP) alike: the run stops, what was measured is written, marked incomplete.
    install_ctrlc();
    let served = match serve.map(|s| super::gateway::serve_run(s, &plan, &out)).transpose() {
        Ok(s) => s,
        Err((msg, code)) => {
            eprintln!("{msg}");
            return code;
        }
    };
    let observe = |live: Arc<Live>| {
        if let Some(s) = &served {
            s.slot.attach(live);
        }
    };
    let stop = || served.as_ref().is_some_and(|s| s.slot.stop_requested());
    let ended = execute(&plan, file, &out, history, &tsc, &observe, &stop);
    if let Some(s) = served {
        s.finish(&ended);
    }
    ended.code
}
