//! The itc suite's figures: its series per mechanism, placement and trigger, the report text, and the speed goal against the floors measured in the same run.

use super::*;
use rtcell_report::Series;
use rtcell_report::goal::Goal;

/// Medians of the cross-CPU back-to-back cells, for the speed goal: (mechanism, bytes) -> median us.
type Medians = BTreeMap<(Mechanism, usize), f64>;

pub(super) fn build(
    tsc: &TscClock,
    cfg: &ItcConfig,
    cells: &[CellRun],
    floor: Option<&(C2cConfig, C2cMeasurement)>,
    load_bps: f64,
    mut warnings: Vec<String>,
    incomplete: bool,
) -> SuiteRun {
    let CellSeries { mut series, by_cell, aborted, errors: total_errors } = cell_series(tsc, cfg, cells, &mut warnings);
    let mut text = String::new();
    let mut not_applicable = Vec::new();
    let host = rtcell_host::facts::HostFacts::collect(Some(tsc.khz()));
    let host_text = format!(
        "host {}, kernel preemption {}",
        host.hypervisor.as_ref().map_or("bare metal".to_string(), |h| format!("a virtual machine ({h})")),
        host.preempt
    );
    for &placement in &cfg.placements {
        for &trigger in &cfg.triggers {
            let table =
                MedianTable { cfg, placement, trigger, host_text: &host_text, by_cell: &by_cell, series: &series };
            text.push_str(&table.render(&mut not_applicable));
        }
    }
    text.push_str(&notes_text(cfg, cells));
    let floor_ns = floor.and_then(|f| floor_text(tsc, cfg, f, &mut series, &mut text));

    let medians: Medians = cells
        .iter()
        .filter(|c| c.placement == Placement::CrossCpu && c.trigger == Trigger::BackToBack)
        .filter_map(|c| {
            let s = &series[by_cell[&(c.placement.as_str(), c.trigger.as_str(), c.mechanism, c.size)]];
            (s.stats.count > 0 && s.errors == 0).then_some(((c.mechanism, c.size), s.stats.median))
        })
        .collect();
    let (goal_text, goal_json) = speed_goal(cfg, &medians);
    text.push_str(&goal_text);
    if cfg.load != Load::None {
        text.push_str(&format!(
            "load {} beside the requester (every CPU but {}): {:.2} GB/s copied while measuring\n",
            cfg.load.as_str(),
            cfg.responder_cpu,
            load_bps / 1e9
        ));
    }
    if total_errors > 0 {
        warnings.push(format!("{total_errors} exchanges failed (wrong reply or aborted measurement): this run FAILED"));
    }
    let config = serde_json::json!({
        "requester_cpu": cfg.requester_cpu,
        "responder_cpu": cfg.responder_cpu,
        "requester_priority": REQUESTER_PRIORITY,
        "responder_priority": RESPONDER_PRIORITY,
        "mechanisms": cfg.mechanisms.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        "data_paths": cfg.mechanisms.iter().map(|m| (m.as_str(), m.data_path().as_str())).collect::<BTreeMap<_, _>>(),
        "sizes": cfg.sizes,
        "placements": cfg.placements.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "triggers": cfg.triggers.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
        "iterations": cfg.iterations,
        "periodic_iterations": cfg.periodic_iterations,
        "period_us": cfg.period_us,
        "warmup": { "back-to-back": WARMUP_BACK_TO_BACK, "periodic": WARMUP_PERIODIC },
        "load": cfg.load.as_str(),
        "load_bytes_per_s": load_bps,
        "seed": cfg.seed,
        "tsc_khz": tsc.khz(),
        "not_applicable": not_applicable,
        "aborted": aborted,
        "speed_goal": goal_json,
        "c2c_floor_round_trip_ns": floor_ns,
    });
    let mut suite = Suite::new("itc", config);
    suite.series = series;
    SuiteRun { suite, text, warnings, incomplete, errors: total_errors, failure: None }
}

/// Each cell's series, where it is, and what failed (mismatched replies, aborted measurements, each
/// also a warning).
struct CellSeries<'a> {
    series: Vec<Series>,
    by_cell: ByCell<'a>,
    aborted: Vec<serde_json::Value>,
    errors: u64,
}

fn cell_series<'a>(
    tsc: &TscClock,
    cfg: &ItcConfig,
    cells: &'a [CellRun],
    warnings: &mut Vec<String>,
) -> CellSeries<'a> {
    let mut series = Vec::new();
    let mut total_errors = 0;
    let mut aborted = Vec::new();
    // (placement, trigger, mechanism, size) -> the cell's series.
    let mut by_cell: ByCell = BTreeMap::new();
    for c in cells {
        let errors = c.m.mismatches + u64::from(c.m.aborted.is_some());
        total_errors += errors;
        let mut l = labels!(
            "mechanism" => c.mechanism.as_str(),
            "bytes" => c.size,
            "placement" => c.placement.as_str(),
            "trigger" => c.trigger.as_str(),
            "load" => cfg.load.as_str(),
            "data" => c.mechanism.data_path().as_str(),
            "requester_cpu" => cfg.requester_cpu,
            "responder_cpu" => cfg.responder_cpu_for(c.placement),
        );
        if c.trigger == Trigger::Periodic {
            l.insert("period_us".into(), cfg.period_us.to_string());
        }
        if let Some(why) = &c.m.aborted {
            let what =
                format!("{} {} B, {}, {}", c.mechanism.as_str(), c.size, c.placement.as_str(), c.trigger.as_str());
            warnings.push(format!("itc {what}: {why} (counted as an error)"));
            aborted.push(serde_json::json!({
                "mechanism": c.mechanism.as_str(), "bytes": c.size, "placement": c.placement.as_str(),
                "trigger": c.trigger.as_str(), "reason": why,
            }));
        }
        if c.m.mismatches > 0 {
            warnings.push(format!(
                "itc {} {} B, {}, {}: {} replies differed from the request",
                c.mechanism.as_str(),
                c.size,
                c.placement.as_str(),
                c.trigger.as_str(),
                c.m.mismatches
            ));
        }
        by_cell.insert((c.placement.as_str(), c.trigger.as_str(), c.mechanism, c.size), series.len());
        series.push(series_us(tsc, "itc_rtt", l, Kind::RoundTrip, &c.m.ticks, errors));
    }

    CellSeries { series, by_cell, aborted, errors: total_errors }
}

/// What the tables' words mean, and what shapes their figures (adaptive spinning, RT throttling).
fn notes_text(cfg: &ItcConfig, cells: &[CellRun]) -> String {
    let mut text = String::new();
    text.push_str(
        "data: kernel = the kernel copies the payload; shared-buffer = the payload sits in a buffer the mechanism guards \
         (written before the signal, read after the wake-up); ring = rtcell ring in shared memory. \
         Every reply is checked byte for byte; p99.9 and max of every cell are in results.json (series itc_rtt).\n",
    );
    if cfg.mechanisms.contains(&Mechanism::Mutex) && cells.iter().any(|c| c.placement == Placement::CrossCpu) {
        text.push_str(
            "mutex across CPUs: the kernel's PI futex waiter (rt_mutex) spins while the owner runs on another CPU \
             (adaptive spinning) instead of sleeping, so both CPUs stay busy, as with a polled ring.\n",
        );
    }
    text.push_str(&seed_002_line());
    if let Some((runtime, period)) = rt_throttling() {
        text.push_str(&format!(
            "RT throttling is on (sched_rt_runtime_us {runtime} of sched_rt_period_us {period}): a CPU kept busy by \
             SCHED_FIFO threads (same-cpu back-to-back, a spinning waiter) is taken from them for up to {:.0} ms of \
             every {:.0} ms so normal tasks run; maxima near that are the throttling, not the mechanism (rtcell check \
             shows the fix)\n",
            (period - runtime) as f64 / 1000.0,
            period as f64 / 1000.0
        ));
    }
    text
}

/// The cache-line floor measured in the same run: its series join the suite's, its line the text;
/// returns its round-trip median (ns).
fn floor_text(
    tsc: &TscClock,
    cfg: &ItcConfig,
    (c, m): &(C2cConfig, C2cMeasurement),
    series: &mut Vec<Series>,
    text: &mut String,
) -> Option<f64> {
    let before = if cfg.triggers.contains(&Trigger::BackToBack) && cfg.mechanisms.contains(&Mechanism::RingPoll) {
        "the polled ring's cells"
    } else {
        "the first cross-CPU cells"
    };
    let s = c2c::series(tsc, c, m);
    let floor_ns = s.first().map(|x| x.stats.median);
    text.push_str(&format!(
        "c2c floor, CPU {} <-> CPU {}, taken right before {before}: cache-line round trip median {:.1} ns \
         (each timed), one way median {:.1} ns (batch RTT / 2); the floor under any shared-memory channel between these \
         CPUs, and it moves with where the outer hypervisor runs our vCPUs\n",
        c.cpu_a,
        c.cpu_b,
        s.first().map_or(f64::NAN, |x| x.stats.median),
        s.get(1).map_or(f64::NAN, |x| x.stats.median),
    ));
    series.extend(s);
    floor_ns
}

/// Where each cell's series is: (placement, trigger, mechanism, size) -> index in the suite's series.
type ByCell<'a> = BTreeMap<(&'a str, &'a str, Mechanism, usize), usize>;

/// One table of the report: the medians of every mechanism and size for one placement and trigger.
struct MedianTable<'a> {
    cfg: &'a ItcConfig,
    placement: Placement,
    trigger: Trigger,
    host_text: &'a str,
    by_cell: &'a ByCell<'a>,
    series: &'a [rtcell_report::Series],
}

impl MedianTable<'_> {
    /// The table's text; the mechanisms that cannot run in this placement are added to `not_applicable`.
    fn render(&self, not_applicable: &mut Vec<serde_json::Value>) -> String {
        let MedianTable { cfg, placement, trigger, host_text, by_cell, series } = *self;
        let mut out = String::new();
        out.push_str(&format!(
            "\nITC round trip (request -> reply, timed by the requester with the TSC), median in us by payload size: {}, {}\n  {}; {}; load {}; {host_text}\n",
            placement.as_str(),
            trigger.as_str(),
            placement_text(cfg, placement),
            trigger_text(cfg, trigger),
            cfg.load.as_str()
        ));
        let mut headers = vec!["mechanism".to_string(), "data".to_string()];
        headers.extend(cfg.sizes.iter().map(|s| format!("{s} B")));
        headers.extend(["p99.9 (worst size)".into(), "max (worst size)".into(), "errors".into()]);
        let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
        // Figures line up even in columns that hold "n/a".
        for col in 2..headers.len() {
            t.right_align(col);
        }
        let mut has_na = false;
        for &m in &cfg.mechanisms {
            let mut row = vec![m.as_str().to_string(), m.data_path().as_str().to_string()];
            if !cfg.applicable(m, placement) {
                has_na = true;
                row.extend(cfg.sizes.iter().map(|_| "n/a".to_string()));
                row.extend(["n/a".into(), "n/a".into(), "-".into()]);
                t.row(row);
                not_applicable.push(serde_json::json!({
                    "mechanism": m.as_str(), "placement": placement.as_str(), "trigger": trigger.as_str(),
                    "reason": NOT_APPLICABLE,
                }));
                continue;
            }
            let (mut p999, mut max, mut errors) = (f64::NAN, f64::NAN, 0u64);
            for &size in &cfg.sizes {
                match by_cell.get(&(placement.as_str(), trigger.as_str(), m, size)).map(|&i| &series[i]) {
                    Some(s) if s.stats.count > 0 => {
                        row.push(fmt_us(s.stats.median * 1000.0));
                        p999 = p999.max(s.stats.p999);
                        max = max.max(s.stats.max);
                        errors += s.errors;
                    }
                    Some(s) => {
                        row.push("-".into());
                        errors += s.errors;
                    }
                    None => row.push("-".into()),
                }
            }
            row.extend([fmt_us(p999 * 1000.0), fmt_us(max * 1000.0), errors.to_string()]);
            t.row(row);
        }
        out.push_str(&t.render());
        out.push('\n');
        if has_na {
            out.push_str(&format!(
                "  ring-poll n/a: {NOT_APPLICABLE} (two SCHED_FIFO threads on one CPU: the higher-priority side would spin forever and the other never run)\n"
            ));
        }
        out
    }
}

/// (sched_rt_runtime_us, sched_rt_period_us) when RT throttling is on (as by default), else `None`.
fn rt_throttling() -> Option<(i64, i64)> {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{f}")).ok()?.trim().parse::<i64>().ok();
    let (runtime, period) = (read("sched_rt_runtime_us")?, read("sched_rt_period_us")?);
    (runtime >= 0 && runtime < period).then_some((runtime, period))
}

fn placement_text(cfg: &ItcConfig, p: Placement) -> String {
    match p {
        Placement::SameCpu => format!(
            "same CPU: requester (SCHED_FIFO {REQUESTER_PRIORITY}) and responder (SCHED_FIFO {RESPONDER_PRIORITY}) on CPU {}",
            cfg.requester_cpu
        ),
        Placement::CrossCpu => format!(
            "cross-CPU: requester CPU {} (SCHED_FIFO {REQUESTER_PRIORITY}), responder CPU {} (SCHED_FIFO {RESPONDER_PRIORITY})",
            cfg.requester_cpu, cfg.responder_cpu
        ),
    }
}

fn trigger_text(cfg: &ItcConfig, t: Trigger) -> String {
    match t {
        Trigger::BackToBack => format!("back-to-back, {} exchanges per cell", cfg.iterations),
        Trigger::Periodic => format!(
            "periodic, one exchange every {} ms (seed 002: 10 ms), {} exchanges per cell",
            cfg.period_us as f64 / 1000.0,
            cfg.periodic_iterations
        ),
    }
}

/// Seed 002's PREEMPT_RT figures, for scale: another platform and a one-way handoff.
fn seed_002_line() -> String {
    let mut parts = Vec::new();
    for (metric, what) in [("itc_semaphore", "semaphore"), ("itc_mutex", "mutex")] {
        for r in rtcell_report::published::for_metric(metric) {
            if let Some(mean) = r.mean {
                parts.push(format!("{} {what} {mean} us", r.platform));
            }
        }
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "seed 002 Table 4 (PREEMPT_RT, mean release -> acquire between tasks at priority 95/90, no payload; other platforms, for scale): {}\n",
        parts.join("; ")
    )
}

/// The goal: the polled ring's median round trip at least 20 x below the best kernel mechanism's, across
/// CPUs, back to back, at 4 and at 3072 bytes.
fn speed_goal(cfg: &ItcConfig, medians: &Medians) -> (String, Vec<serde_json::Value>) {
    let mut text = String::from(
        "\nSpeed goal (cross-CPU, back-to-back, medians of round trips; goal: rtcell ring polled >= 20 x faster than the best kernel mechanism):\n",
    );
    let mut json = Vec::new();
    for size in [4usize, 3072] {
        let best = medians
            .iter()
            .filter(|((m, s), _)| m.is_kernel() && *s == size)
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|((m, _), &v)| (*m, v));
        let ring = medians.get(&(Mechanism::RingPoll, size)).copied();
        match (best, ring) {
            (Some((m, k)), Some(r)) if r > 0.0 => {
                let ratio = k / r;
                text.push_str(&format!(
                    "  best kernel mechanism at {size} B: {} (median {:.3} µs); rtcell ring polled: {:.3} µs; ratio {ratio:.1} x ({})\n",
                    m.as_str(),
                    k,
                    r,
                    Goal::AtLeast(20.0).judge(ratio)
                ));
                json.push(serde_json::json!({
                    "bytes": size, "best_kernel_mechanism": m.as_str(), "kernel_median_us": k,
                    "ring_poll_median_us": r, "ratio": ratio, "goal": 20.0,
                }));
                // The PI mutex busy-waits in the kernel across CPUs; set the ring beside the best
                // kernel mechanism that sleeps too.
                if m == Mechanism::Mutex
                    && let Some(((s, _), &v)) = medians
                        .iter()
                        .filter(|((x, s), _)| x.is_kernel() && *x != Mechanism::Mutex && *s == size)
                        .min_by(|a, b| a.1.total_cmp(b.1))
                {
                    text.push_str(&format!(
                        "    (best kernel mechanism whose waiter sleeps: {} (median {v:.3} µs); ratio {:.1} x)\n",
                        s.as_str(),
                        v / r
                    ));
                }
            }
            _ => text.push_str(&format!(
                "  at {size} B: not measured in this run (needs --placement cross-cpu, --trigger back-to-back, --sizes {size}, ring-poll and a kernel mechanism{})\n",
                if cfg.sizes.contains(&size) { ", without errors" } else { "" }
            )),
        }
    }
    (text, json)
}
