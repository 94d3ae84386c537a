//! The suite's series, table and verdict.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use rtcell_bench::SuiteRun;
use rtcell_report::doc::{Kind, Series, Suite, Unit};
use rtcell_report::table::Table;

use super::GatewayBenchConfig;
use super::load::LoadTally;
use super::phase::Phase;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

pub fn report(cfg: &GatewayBenchConfig, phases: &[Phase], t: &LoadTally, scenario_results: &str) -> SuiteRun {
    let mut series = Vec::new();
    for p in phases {
        let phase = p.name.replace(' ', "");
        series.push(Series::from_samples(
            "activation_latency",
            labels(&[("task", &cfg.task), ("phase", &phase)]),
            Unit::Us,
            Kind::Latency,
            p.samples_us(),
            0,
        ));
        series.push(Series::from_samples(
            "overruns",
            labels(&[("task", &cfg.task), ("phase", &phase)]),
            Unit::Count,
            Kind::Count,
            vec![p.overruns as f64],
            0,
        ));
    }
    let take = |m: &std::sync::Mutex<Vec<f64>>| m.lock().map(|v| v.clone()).unwrap_or_default();
    let bad = t.write_bad.load(Ordering::Relaxed);
    series.push(Series::from_samples(
        "write_acknowledged",
        labels(&[("signal", &cfg.signal)]),
        Unit::Ns,
        Kind::RoundTrip,
        take(&t.ack_ns),
        bad,
    ));
    series.push(Series::from_samples(
        "stats_read",
        labels(&[]),
        Unit::Ns,
        Kind::RoundTrip,
        take(&t.read_ns),
        t.read_fail.load(Ordering::Relaxed),
    ));
    series.push(Series::from_samples(
        "metrics_scrape",
        labels(&[]),
        Unit::Ns,
        Kind::RoundTrip,
        take(&t.scrape_ns),
        t.scrape_fail.load(Ordering::Relaxed),
    ));

    let (i1, ld, i2) = (&phases[0], &phases[1], &phases[2]);
    let (a, l, b) = (i1.p999_us(), ld.p999_us(), i2.p999_us());
    let noise = (a - b).abs();
    let lat_ok = l <= a.max(b) + noise;
    let (oa, ol, ob) = (i1.overruns, ld.overruns, i2.overruns);
    let over_ok = ol <= oa.max(ob) + oa.abs_diff(ob);
    let mut text = String::new();
    text.push_str(&format!(
        "Gateway load: task {:?} of {} (activation latency = release to start of the cycle, one-way, µs; p99.9 = bucket upper edge)\n",
        cfg.task,
        cfg.scenario.display()
    ));
    let mut tab = Table::new(&["phase", "cycles", "overruns", "lat median µs", "lat p99.9 µs", "lat max µs (bucket)"]);
    for (p, s) in phases.iter().zip(series.iter().step_by(2)) {
        tab.row(vec![
            p.name.to_string(),
            p.cycles.to_string(),
            p.overruns.to_string(),
            format!("{:.1}", s.stats.median),
            format!("{:.1}", p.p999_us()),
            format!("{:.1}", s.stats.max),
        ]);
    }
    text.push_str(&format!("{tab}\n"));
    let (reads, writes, ok) =
        (t.reads.load(Ordering::Relaxed), t.writes.load(Ordering::Relaxed), t.write_ok.load(Ordering::Relaxed));
    let secs = cfg.phase.as_secs_f64();
    text.push_str(&format!(
        "Load: {reads} statistics reads ({:.0}/s, {} failed), {writes} writes ({:.0}/s): {ok} acknowledged with the value written, {bad} lost or misapplied; {} scrapes ({} failed)\n",
        reads as f64 / secs,
        t.read_fail.load(Ordering::Relaxed),
        writes as f64 / secs,
        t.scrapes.load(Ordering::Relaxed),
        t.scrape_fail.load(Ordering::Relaxed),
    ));
    let med = |name: &str| series.iter().find(|s| s.name == name).map_or(0.0, |s| s.stats.median / 1e3);
    let p99 = |name: &str| series.iter().find(|s| s.name == name).map_or(0.0, |s| s.stats.p99 / 1e3);
    text.push_str(&format!(
        "Round trips (µs, median / p99): write to acknowledgement {:.0} / {:.0}; statistics read {:.0} / {:.0}; scrape {:.0} / {:.0}\n",
        med("write_acknowledged"),
        p99("write_acknowledged"),
        med("stats_read"),
        p99("stats_read"),
        med("metrics_scrape"),
        p99("metrics_scrape"),
    ));
    text.push_str(&format!(
        "Verdict: p99.9 loaded {l:.1} µs vs idle {a:.1} / {b:.1} µs (noise {noise:.1}): {}; overruns loaded {ol} vs idle {oa} / {ob}: {}; writes: {}\n",
        if lat_ok { "within the idle noise" } else { "WORSE than the idle noise" },
        if over_ok { "within the idle noise" } else { "WORSE than the idle noise" },
        if bad == 0 { "none lost or misapplied" } else { "SOME LOST OR MISAPPLIED" },
    ));
    text.push_str(&format!("The scenario's own results: {scenario_results}\n"));
    let mut warnings = Vec::new();
    if let Ok(Some(e)) = t.first_error.lock().map(|e| e.clone()) {
        warnings.push(format!("first load error: {e}"));
    }
    if !lat_ok || !over_ok {
        warnings
            .push("the loaded phase was worse than the noise between the idle phases: see the gateway table".into());
    }
    let config = serde_json::json!({
        "scenario": cfg.scenario.display().to_string(),
        "task": cfg.task,
        "signal": cfg.signal,
        "phase_s": cfg.phase.as_secs_f64(),
        "reads_per_s": cfg.reads_per_s,
        "writes_per_s": cfg.writes_per_s,
        "scrape_every_s": cfg.scrape_every.as_secs_f64(),
        "verdict": { "latency_within_noise": lat_ok, "overruns_within_noise": over_ok, "writes_bad": bad },
        "scenario_results": scenario_results,
    });
    SuiteRun {
        suite: Suite { suite: "gateway".into(), config, series },
        text,
        warnings,
        incomplete: false,
        errors: bad + t.read_fail.load(Ordering::Relaxed) + t.scrape_fail.load(Ordering::Relaxed),
        failure: None,
    }
}
