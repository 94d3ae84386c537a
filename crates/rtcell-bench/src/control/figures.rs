//! A control run's figures: its series, labels and the report text with the speed summary.

use super::*;
use rtcell_report::goal::Goal;

/// The offloaded round trip's goal: at most 1.1 x the cell's exec plus a loopback round trip.
const OFFLOAD_GOAL: Goal = Goal::AtMost(1.1);

/// A run reduced to its series and figures.
pub(super) struct RunFigures {
    pub(super) precision: Precision,
    pub(super) placement: Placement,
    pub(super) exec: Series,
    pub(super) rtt: Option<Series>,
    pub(super) clock: Series,
    pub(super) probe_rtt: Option<Series>,
    pub(super) exits: Option<Series>,
    pub(super) errors: u64,
    pub(super) max_rel_err: f64,
}

fn run_labels(cfg: &ControlConfig, precision: Precision, placement: Placement) -> BTreeMap<String, String> {
    let mut l = labels!(
        "precision" => precision,
        "cell" => placement.as_str(),
        "load" => cfg.load.as_str(),
        "master_cpu" => cfg.master_cpu,
    );
    if placement != Placement::Local {
        l.insert("cell_cpu".into(), cfg.cell_cpu.to_string());
    }
    l
}

pub(super) fn figures(tsc: &TscClock, cfg: &ControlConfig, run: Run) -> RunFigures {
    let labels = run_labels(cfg, run.precision, run.placement);
    let exec = series_us(tsc, "control_exec", labels.clone(), Kind::ExecTime, &run.exec_ticks, run.errors);
    let rtt = (run.placement != Placement::Local)
        .then(|| series_us(tsc, "control_rtt", labels.clone(), Kind::RoundTrip, &run.rtt_ticks, run.errors));
    let clock = series_us(tsc, "control_clock", labels.clone(), Kind::ExecTime, &run.clock_ticks, 0);
    let probe_rtt = (run.placement != Placement::Local)
        .then(|| series_us(tsc, "control_probe_rtt", labels.clone(), Kind::RoundTrip, &run.probe_rtt_ticks, 0));
    let exits = run.exits.as_ref().map(|e| {
        let mut s = Series::from_samples(
            "vm_exits",
            labels.clone(),
            Unit::Count,
            Kind::Count,
            vec![e.get("exits").copied().unwrap_or(0) as f64],
            0,
        );
        s.histogram = None;
        for (k, v) in e {
            s.labels.insert(format!("exits.{k}"), v.to_string());
        }
        s
    });
    RunFigures {
        precision: run.precision,
        placement: run.placement,
        exec,
        rtt,
        clock,
        probe_rtt,
        exits,
        errors: run.errors,
        max_rel_err: run.max_rel_err,
    }
}

pub(super) fn report_text(
    cfg: &ControlConfig,
    runs: &[RunFigures],
    loopbacks: &[(CellKind, Series)],
    load_bps: f64,
) -> String {
    let mut text = String::new();
    let published: Vec<_> =
        ["control_exec", "control_rtt"].iter().flat_map(|m| rtcell_report::published::for_metric(m)).collect();
    for &precision in &cfg.precisions {
        let rows: Vec<&RunFigures> = runs.iter().filter(|r| r.precision == precision).collect();
        if rows.is_empty() {
            continue;
        }
        text.push_str(&format!(
            "\nController step, {precision}: {}-state internal-model controller, {} reference inputs looped, {} steps per row; master CPU {}, cell CPU {}, load {} (us)\n",
            DEFAULT_MODEL64.n,
            REFERENCE_SAMPLES,
            cfg.iterations,
            cfg.master_cpu,
            cfg.cell_cpu,
            cfg.load.as_str()
        ));
        let mut t = Table::new(&[
            "cell",
            "time",
            "min",
            "max",
            "mean",
            "median",
            "p99",
            "p99.9",
            "errors",
            "max |u - u_ref| / FS",
        ]);
        for r in rows {
            let mut add = |what: &str, s: &Series| {
                let st = &s.stats;
                t.row(vec![
                    r.placement.as_str().to_string(),
                    what.to_string(),
                    fmt_us(st.min * 1000.0),
                    fmt_us(st.max * 1000.0),
                    fmt_us(st.mean * 1000.0),
                    fmt_us(st.median * 1000.0),
                    fmt_us(st.p99 * 1000.0),
                    fmt_us(st.p999 * 1000.0),
                    r.errors.to_string(),
                    if r.precision == Precision::F64 && r.errors == 0 {
                        "bit-exact".to_string()
                    } else {
                        format!("{:.2e}", r.max_rel_err)
                    },
                ]);
            };
            add("exec", &r.exec);
            if let Some(rtt) = &r.rtt {
                add("round trip", rtt);
            }
            add("clock", &r.clock);
            if let Some(p) = &r.probe_rtt {
                add("probe round trip", p);
            }
        }
        text.push_str(&t.render());
        text.push('\n');
    }
    text.push_str(&format!(
        "exec: the step alone, timed in the cell with its TSC (lfence; rdtsc before and after); round trip: the master's TSC from sending the inputs to receiving the output; clock: an empty region timed like the step (a probe after every {PROBE_EVERY}th step; what the clock adds to each exec figure); probe round trip: the master's round trip of those probes (the loopback of a {MESSAGE_BYTES}-byte message through the same cell, interleaved with the steps). Outputs checked: f64 bit-exact with a local f64 step, f32 within {F32_TOLERANCE:e} and Q31 within {Q31_TOLERANCE:e} of full scale ({OUTPUT_FS} V) of the f64 reference.\n"
    ));
    for r in runs {
        if let Some(e) = &r.exits {
            let detail: Vec<String> =
                e.labels.iter().filter_map(|(k, v)| k.strip_prefix("exits.").map(|k| format!("{k} {v}"))).collect();
            text.push_str(&format!(
                "VM exits of the kvm cell's vCPU during the measured {} steps: {} ({})\n",
                r.precision,
                e.stats.max as u64,
                detail.join(", ")
            ));
        }
    }
    if !published.is_empty() {
        text.push_str("Published figures, other platforms:\n");
        for p in &published {
            text.push_str(&format!(
                "  {} ({}), {} {}: min {} mean {} max {} {}\n",
                p.platform,
                p.source,
                p.metric,
                p.condition,
                p.min.map_or("-".into(), |v| v.to_string()),
                p.mean.map_or("-".into(), |v| v.to_string()),
                p.max.map_or("-".into(), |v| v.to_string()),
                p.unit
            ));
        }
    }
    text.push_str(&speed_summary(runs, loopbacks));
    if cfg.load == Load::Memcpy {
        text.push_str(&format!("load {}: {:.2} GB/s copied while measuring\n", cfg.load.as_str(), load_bps / 1e9));
    }
    text
}

/// The offloaded round trip against its parts, and against the local step, from this run's medians.
fn speed_summary(runs: &[RunFigures], loopbacks: &[(CellKind, Series)]) -> String {
    let mut out = String::new();
    if !loopbacks.is_empty() {
        out.push_str(&format!(
            "\nLoopback round trip at the control message size ({MESSAGE_BYTES} B), same cells, this run (us):\n"
        ));
        for (kind, s) in loopbacks {
            out.push_str(&format!(
                "  {kind}: median {}, p99.9 {}, max {} ({} round trips, {} errors)\n",
                fmt_us(s.stats.median * 1000.0),
                fmt_us(s.stats.p999 * 1000.0),
                fmt_us(s.stats.max * 1000.0),
                s.stats.count,
                s.errors
            ));
        }
    }
    let mut lines = Vec::new();
    for r in runs {
        let (Placement::Cell(kind), Some(rtt)) = (r.placement, &r.rtt) else {
            continue;
        };
        let (rt, ex) = (rtt.stats.median, r.exec.stats.median);
        let ratio = |base: f64| {
            if base > 0.0 { format!("{:.3} x ({})", rt / base, OFFLOAD_GOAL.verdict(rt / base)) } else { "-".into() }
        };
        let mut line =
            format!("  {} on {kind}: round trip {}, exec {}", r.precision, fmt_us(rt * 1000.0), fmt_us(ex * 1000.0));
        if let Some((_, lb)) = loopbacks.iter().find(|(k, _)| *k == kind) {
            let l = lb.stats.median;
            line.push_str(&format!("; / (exec + loopback {}) = {}", fmt_us(l * 1000.0), ratio(ex + l)));
        }
        if let Some(p) = r.probe_rtt.as_ref().filter(|p| p.stats.count > 0) {
            let l = p.stats.median;
            line.push_str(&format!("; / (exec + probe round trip {}) = {}", fmt_us(l * 1000.0), ratio(ex + l)));
        }
        if let Some(lo) = runs.iter().find(|x| x.placement == Placement::Local && x.precision == r.precision) {
            line.push_str(&format!("; local exec / round trip {:.2}", lo.exec.stats.median / rt));
        }
        lines.push(line);
    }
    if !lines.is_empty() {
        out.push_str(
            "\nOffloaded round trip / (cell exec + loopback round trip at the same size), medians of this run (goal <= 1.1, met or missed per line); \
             the loopback is measured in a phase of its own, the probe round trip interleaved with the steps in the same \
             cell (on a nested VM the outer hypervisor may place our vCPUs differently from one phase to the next):\n",
        );
        out.push_str(&lines.join("\n"));
        out.push('\n');
    }
    out
}
