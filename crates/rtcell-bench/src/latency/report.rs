//! The latency suite's figures: series per mode and tool (ours beside cyclictest), and the report text with the ratios.

use super::*;
use rtcell_report::goal::Goal;

pub(super) struct Context<'a> {
    pub(super) cfg: &'a LatencyConfig,
    pub(super) throttle: Option<Throttle>,
    pub(super) sleep_ns: u64,
    pub(super) load_bps: f64,
    pub(super) dma_held: bool,
    pub(super) started: SystemTime,
    pub(super) ended: SystemTime,
}

impl Context<'_> {
    fn labels(&self, tool: &str, mode: Mode, rounds: usize) -> BTreeMap<String, String> {
        let c = self.cfg;
        let mut l = labels!(
            "tool" => tool,
            "mode" => mode.name(),
            "cpu" => c.cpu,
            "period_us" => c.period_us,
            "priority" => c.priority,
            "load" => c.load.as_str(),
            "rounds" => rounds,
        );
        if let Some(k) = mode.cell() {
            l.insert("cell".into(), k.as_str().into());
        }
        l
    }
}

/// Lateness from which an activation counts as a throttling gap: half the stop.
pub(super) fn gap_threshold_ns(t: &Throttle) -> u64 {
    (t.gap_us().max(0) as u64) * 1000 / 2
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() { format!("{:.3}", a / b) } else { "-".into() }
}

type CyclictestPart<'a> = (&'a cyclictest::Merged, &'a [cyclictest::Round], &'a str);

pub(super) fn build(
    ctx: &Context<'_>,
    runs: &[ModeRun],
    ct: Option<CyclictestPart<'_>>,
    mut warnings: Vec<String>,
) -> Result<SuiteRun, BenchError> {
    let cfg = ctx.cfg;
    let mut series = Vec::new();
    let mut text = String::new();
    let load_where = if cfg.load == Load::None {
        "load none".to_string()
    } else {
        format!("load {} on CPU {}", cfg.load.as_str(), rtcell_host::cpu::format_cpu_list(&cfg.load_cpus))
    };
    let rounds = cfg.rounds();
    text.push_str(&format!(
        "\nActivation latency on CPU {}: period {} us, SCHED_FIFO {}, {load_where}, {:.1} s per mode{}\n\
         (us, one way: actual start - intended release; min/avg/max/stddev/overruns as Xenomai's latency -s; \
         percentiles nearest-rank)\n",
        cfg.cpu,
        cfg.period_us,
        cfg.priority,
        cfg.duration.as_secs_f64(),
        if rounds > 1 { format!(" in {rounds} rounds alternating with cyclictest") } else { String::new() }
    ));
    let mut rtcell_stats: Vec<(Mode, Stats)> = Vec::new();
    let mut columns = Vec::new();
    for r in runs {
        let mut l = ctx.labels("rtcell", r.mode, r.rounds);
        if r.mode != Mode::Nanosleep {
            l.insert("sleep_us".into(), format!("{}", r.sleep_ns as f64 / 1e3));
        }
        let us: Vec<f64> = r.late_ns.iter().map(|&ns| ns as f64 / 1e3).collect();
        let s = Series::from_samples("latency", l.clone(), Unit::Us, Kind::Latency, us, r.dropped);
        rtcell_stats.push((r.mode, s.stats));
        series.push(s);
        let mut ov = Series::from_samples("latency_overruns", l, Unit::Count, Kind::Count, vec![r.overruns as f64], 0);
        ov.histogram = None;
        series.push(ov);
        columns.push(histfile::HistColumn::from_ns(r.mode.column(), &r.late_ns, cfg.hist_buckets(), cfg.cpu));
        if r.dropped > 0 {
            warnings.push(format!(
                "{}: {} activations found the sample log full and are not in the figures",
                r.mode.describe(),
                r.dropped
            ));
        }
    }
    let ct_stats = ct.map(|(merged, ct_rounds, version)| {
        let mut l = ctx.labels("cyclictest", Mode::Nanosleep, ct_rounds.len());
        l.insert("version".into(), version.into());
        let s = merged.series("latency", l);
        let st = s.stats;
        series.push(s);
        columns.push(merged.column("cyclictest", cfg.cpu, cfg.hist_buckets()));
        st
    });
    // The table the HTML report shows too (cyclictest, which counts no skipped releases, shows no overruns).
    let of = |name: &str| series.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    text.push_str(&Table::of(&rtcell_report::columns::latency(&of("latency"), &of("latency_overruns"))).render());
    text.push('\n');
    if ct_stats.is_some() {
        text.push_str(
            "cyclictest: whole microseconds (its resolution, truncated), overruns not counted; rtcell: nanoseconds.\n",
        );
    }

    // Side by side with cyclictest.
    let comparison = match ct_stats {
        Some(c) => vs_cyclictest(cfg, &rtcell_stats, &c, &mut text),
        None => serde_json::Map::new(),
    };

    if let Some(th) = ctx.throttle.filter(Throttle::active) {
        throttling(ctx, &th, runs, &mut text, &mut warnings);
    }
    if cfg.load != Load::None {
        text.push_str(&format!(
            "load {} on CPU {}: {:.2} GB/s copied while measuring\n",
            cfg.load.as_str(),
            rtcell_host::cpu::format_cpu_list(&cfg.load_cpus),
            ctx.load_bps / 1e9
        ));
    }

    // The distributions in cyclictest's layouts.
    text.push_str(&write_layouts(ctx, &columns, &load_where, ct)?);

    let config = serde_json::json!({
        "cpu": cfg.cpu,
        "modes": cfg.modes.iter().map(|m| m.column()).collect::<Vec<_>>(),
        "period_us": cfg.period_us,
        "duration_s": cfg.duration.as_secs_f64(),
        "rounds": rounds,
        "priority": cfg.priority,
        "load": cfg.load.as_str(),
        "load_cpus": cfg.load_cpus,
        "load_bytes_per_s": ctx.load_bps,
        "dma_latency_held": ctx.dma_held,
        "rt_throttle": ctx.throttle.map(|t| serde_json::json!({"runtime_us": t.runtime_us, "period_us": t.period_us})),
        "poll_sleep_us": ctx.sleep_ns as f64 / 1e3,
        "hist_buckets_us": cfg.hist_buckets(),
        "files": { "histogram": "latency.hist", "json": "latency.json" },
        "vs": ct.map(|(_, rounds, version)| serde_json::json!({
            "tool": "cyclictest",
            "version": version,
            "commands": rounds.iter().map(|r| r.cmdline.clone()).collect::<Vec<_>>(),
            "files": rounds.iter().flat_map(|r| [r.hist_file.display().to_string(), r.json_file.display().to_string()]).collect::<Vec<_>>(),
        })),
        "comparison": comparison,
    });
    let mut suite = Suite::new("latency", config);
    suite.series = series;
    Ok(SuiteRun { suite, text, warnings, incomplete: false, errors: 0, failure: None })
}

/// rtcell's modes beside cyclictest (`c`): the table into `text`, the ratios for the results.
fn vs_cyclictest(
    cfg: &LatencyConfig,
    rtcell_stats: &[(Mode, Stats)],
    c: &Stats,
    text: &mut String,
) -> serde_json::Map<String, serde_json::Value> {
    let mut comparison = serde_json::Map::new();
    text.push_str(&format!(
        "\nrtcell vs cyclictest on CPU {}, same period, priority and load, alternating rounds \
         (us; ratio = rtcell / cyclictest, below 1: rtcell starts closer to the release)\n",
        cfg.cpu
    ));
    let mut t = Table::new(&["rtcell mode", "figure", "rtcell us", "cyclictest us", "ratio"]);
    for (mode, st) in rtcell_stats {
        let mut figs = serde_json::Map::new();
        for (name, a, b) in [
            ("median", st.median, c.median),
            ("p99", st.p99, c.p99),
            ("p99.9", st.p999, c.p999),
            ("max", st.max, c.max),
        ] {
            t.row(vec![mode.describe(), name.into(), fmt_us(a * 1e3), fmt_us(b * 1e3), ratio(a, b)]);
            figs.insert(name.into(), serde_json::json!(if b > 0.0 { Some(a / b) } else { None }));
        }
        comparison.insert(mode.column(), serde_json::Value::Object(figs));
    }
    text.push_str(&t.render());
    text.push('\n');
    for (mode, st) in rtcell_stats.iter().filter(|(m, _)| *m != Mode::Nanosleep) {
        text.push_str(&format!(
            "{} p99.9 / cyclictest p99.9: {} x ({} us / {} us; {})\n",
            mode.describe(),
            ratio(st.p999, c.p999),
            fmt_us(st.p999 * 1e3),
            fmt_us(c.p999 * 1e3),
            Goal::AtMost(0.25).judge(if c.p999 > 0.0 { st.p999 / c.p999 } else { f64::NAN })
        ));
    }
    comparison
}

/// Real-time throttling: what the poll cells did about it (into `text`), and what still got through.
fn throttling(ctx: &Context<'_>, th: &Throttle, runs: &[ModeRun], text: &mut String, warnings: &mut Vec<String>) {
    let cfg = ctx.cfg;
    let polling = runs.iter().any(|r| r.mode != Mode::Nanosleep);
    if polling {
        if ctx.sleep_ns > 0 {
            text.push_str(&format!(
                "Real-time throttling is on (sched_rt_runtime_us {} of {} us): the poll and kvm cells sleep {:.0} us \
                 after each activation when at least twice that remains, and busy-poll the rest of the period up to the release.\n",
                th.runtime_us,
                th.period_us,
                ctx.sleep_ns as f64 / 1e3
            ));
        } else {
            text.push_str(&format!(
                "Real-time throttling is on (sched_rt_runtime_us {} of {} us) and a {} us period is too short to sleep in: \
                 the poll and kvm cells busy-poll without a break and are stopped {} ms every {} ms.\n",
                th.runtime_us,
                th.period_us,
                cfg.period_us,
                th.gap_us() / 1000,
                th.period_us / 1000
            ));
        }
    }
    let threshold = gap_threshold_ns(th);
    for r in runs {
        let gaps = r.late_ns.iter().filter(|&&ns| ns >= threshold).count();
        if gaps > 0 {
            warnings.push(format!(
                "{}: {gaps} activations were {} ms or more late, the size of the real-time throttling stop \
                 (sched_rt_runtime_us {} of {} us; `rtcell check` explains it; fix: echo -1 > /proc/sys/kernel/sched_rt_runtime_us)",
                r.mode.describe(),
                threshold / 1_000_000,
                th.runtime_us,
                th.period_us
            ));
        }
    }
}

/// Writes latency.hist and latency.json (cyclictest's layouts) into the run directory; the lines that
/// name them.
fn write_layouts(
    ctx: &Context<'_>,
    columns: &[histfile::HistColumn],
    load_where: &str,
    ct: Option<CyclictestPart<'_>>,
) -> Result<String, BenchError> {
    let cfg = ctx.cfg;
    let mut text = String::new();
    let names: Vec<String> = columns.iter().map(|c| c.label.clone()).collect();
    let header = vec![
        format!(
            "rtcell bench latency: activation latency, CPU {}, period {} us, SCHED_FIFO {}, {load_where}",
            cfg.cpu, cfg.period_us, cfg.priority
        ),
        format!("Columns: {}", names.join(" ")),
    ];
    let hist_path = cfg.out_dir.join("latency.hist");
    let json_path = cfg.out_dir.join("latency.json");
    let werr = |p: &PathBuf, e: std::io::Error| BenchError::Other(format!("cannot write {}: {e}", p.display()));
    let mut buf = Vec::new();
    histfile::write_hist(&mut buf, &header, columns).map_err(|e| werr(&hist_path, e))?;
    rtcell_host::outdir::write_own(&cfg.out_dir, "latency.hist", &buf).map_err(|e| werr(&hist_path, e))?;
    let (start, end) = (histfile::rfc2822_utc(ctx.started), histfile::rfc2822_utc(ctx.ended));
    let version = format!("rtcell {}", env!("CARGO_PKG_VERSION"));
    let jrun = histfile::JsonRun { cmdline: &cfg.command, version: &version, start_time: &start, end_time: &end };
    let json_text = serde_json::to_string_pretty(&histfile::json(&jrun, columns))
        .map_err(|e| BenchError::Other(format!("latency JSON: {e}")))?;
    rtcell_host::outdir::write_own(&cfg.out_dir, "latency.json", (json_text + "\n").as_bytes())
        .map_err(|e| werr(&json_path, e))?;
    text.push_str(&format!(
        "cyclictest layouts (histogram columns: {}): {}, {}\n",
        names.join(", "),
        hist_path.display(),
        json_path.display()
    ));
    if let Some((_, ct_rounds, _)) = ct {
        if let (Some(first), Some(last)) = (ct_rounds.first(), ct_rounds.last()) {
            text.push_str(&format!(
                "cyclictest's own output: {} ... {} (and .json)\n",
                first.hist_file.display(),
                last.hist_file.display()
            ));
        }
    }
    Ok(text)
}
