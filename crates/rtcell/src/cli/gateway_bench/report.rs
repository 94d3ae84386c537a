//! The suite's series, table and verdicts: each disturbing phase against the idle phases around it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use rtcell_bench::SuiteRun;
use rtcell_report::doc::{Kind, Series, Suite, Unit};
use rtcell_report::table::Table;

use super::load::LoadTally;
use super::misbehave::{self, Hostile};
use super::phase::Phase;
use super::{GatewayBenchConfig, PHASES};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn count(name: &str, l: &[(&str, &str)], n: u64) -> Series {
    Series::from_samples(name, labels(l), Unit::Count, Kind::Count, vec![n as f64], 0)
}

/// A figure of a disturbing phase against the same figure of the idle phases before and after it: the
/// limit is the worse idle figure plus the spread between the two; the ratio is figure / limit.
#[derive(Debug, Clone, Copy)]
struct Judged {
    value: f64,
    idle: (f64, f64),
    limit: f64,
    ratio: f64,
    met: bool,
}

impl Judged {
    fn new(value: f64, a: f64, b: f64) -> Judged {
        let limit = a.max(b) + (a - b).abs();
        let ratio = if limit > 0.0 {
            value / limit
        } else if value > 0.0 {
            f64::INFINITY
        } else {
            0.0
        };
        Judged { value, idle: (a, b), limit, ratio, met: value <= limit }
    }

    fn word(&self) -> &'static str {
        if self.met { "**met**" } else { "**missed**" }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "value": self.value, "idle": [self.idle.0, self.idle.1], "limit": self.limit,
            "ratio": self.ratio.is_finite().then_some(self.ratio), "met": self.met,
        })
    }
}

/// The latency and overruns of phase `i` against phases `i - 1` and `i + 1` (both idle).
fn judge(phases: &[Phase], i: usize) -> (Judged, Judged) {
    let (a, p, b) = (&phases[i - 1], &phases[i], &phases[i + 1]);
    (
        Judged::new(p.p999_us(), a.p999_us(), b.p999_us()),
        Judged::new(p.overruns as f64, a.overruns as f64, b.overruns as f64),
    )
}

fn median_max_ms(ns: &[f64]) -> (f64, f64) {
    if ns.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut v = ns.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2] / 1e6, v[v.len() - 1] / 1e6)
}

fn mib(b: Option<u64>) -> String {
    b.map_or("?".into(), |b| format!("{:.1}", b as f64 / (1 << 20) as f64))
}

pub fn report(
    cfg: &GatewayBenchConfig,
    phases: &[Phase],
    t: &LoadTally,
    h: &misbehave::Tally,
    scenario_results: &str,
) -> SuiteRun {
    let mut series = Vec::new();
    let mut lat = Vec::new();
    for p in phases {
        let phase = p.name.replace(' ', "");
        let l = labels(&[("task", &cfg.task), ("phase", &phase)]);
        lat.push(Series::from_samples("activation_latency", l.clone(), Unit::Us, Kind::Latency, p.samples_us(), 0));
        series.push(lat[lat.len() - 1].clone());
        series.push(Series::from_samples("overruns", l, Unit::Count, Kind::Count, vec![p.overruns as f64], 0));
        series.push(Series::from_samples(
            "good_client_get_status",
            labels(&[("phase", &phase)]),
            Unit::Ns,
            Kind::RoundTrip,
            p.probe.ns.clone(),
            p.probe.failed,
        ));
    }
    let take = |m: &std::sync::Mutex<Vec<f64>>| m.lock().map(|v| v.clone()).unwrap_or_default();
    let bad = t.write_bad.load(Ordering::Relaxed);
    let rt = |name: &str, l: &[(&str, &str)], m: &std::sync::Mutex<Vec<f64>>, fail: u64| {
        Series::from_samples(name, labels(l), Unit::Ns, Kind::RoundTrip, take(m), fail)
    };
    series.push(rt("write_acknowledged", &[("signal", &cfg.signal)], &t.ack_ns, bad));
    series.push(rt("stats_read", &[], &t.read_ns, t.read_fail.load(Ordering::Relaxed)));
    series.push(rt("metrics_scrape", &[], &t.scrape_ns, t.scrape_fail.load(Ordering::Relaxed)));
    let (hostile_series, hostile_json, accepted) = hostile_counts(h);
    series.extend(hostile_series);

    let mut text = String::new();
    text.push_str(&format!(
        "Gateway load: task {:?} of {} (activation latency = release to start of the cycle, one-way, µs; p99.9 = bucket upper edge); gateway on TCP loopback with a bearer token\n",
        cfg.task,
        cfg.scenario.display()
    ));
    let mut tab = Table::new(&[
        "phase",
        "cycles",
        "overruns",
        "lat median µs",
        "lat p99.9 µs",
        "lat max µs (bucket)",
        "gateway RSS MiB start → end",
        "good GetStatus ms median / max (failed)",
    ]);
    let mut phases_json = Vec::new();
    for (p, s) in phases.iter().zip(&lat) {
        let (med, max) = median_max_ms(&p.probe.ns);
        tab.row(vec![
            p.name.to_string(),
            p.cycles.to_string(),
            p.overruns.to_string(),
            format!("{:.1}", s.stats.median),
            format!("{:.1}", p.p999_us()),
            format!("{:.1}", s.stats.max),
            format!("{} → {}", mib(p.rss.0), mib(p.rss.1)),
            format!("{med:.2} / {max:.2} ({} of {})", p.probe.failed, p.probe.failed + p.probe.ns.len() as u64),
        ]);
        phases_json.push(serde_json::json!({
            "name": p.name, "cycles": p.cycles, "overruns": p.overruns, "latency_p999_us": p.p999_us(),
            "gateway_rss_bytes": { "start": p.rss.0, "end": p.rss.1 },
            "good_client_get_status": {
                "median_ms": med.is_finite().then_some(med), "max_ms": max.is_finite().then_some(max),
                "answered": p.probe.ns.len(), "failed": p.probe.failed,
            },
        }));
    }
    text.push_str(&format!("{tab}\n"));
    text.push_str(&load_lines(cfg, t, &series));
    text.push_str(&hostile_line(&cfg.hostile, h));

    let mut warnings = Vec::new();
    let mut verdicts = verdicts(phases, &mut text, &mut warnings);
    text.push_str(&format!(
        "Writes: {}\n",
        if bad == 0 { "none lost or misapplied" } else { "SOME LOST OR MISAPPLIED" }
    ));
    text.push_str(&format!("The scenario's own results: {scenario_results}\n"));
    if let Ok(Some(e)) = t.first_error.lock().map(|e| e.clone()) {
        warnings.push(format!("first load error: {e}"));
    }
    if accepted > 0 {
        warnings.push(format!("the gateway accepted {accepted} requests it must refuse"));
    }
    verdicts.insert("writes_bad".into(), bad.into());
    let config = serde_json::json!({
        "scenario": cfg.scenario.display().to_string(),
        "task": cfg.task,
        "signal": cfg.signal,
        "phase_s": cfg.phase.as_secs_f64(),
        "reads_per_s": cfg.reads_per_s,
        "writes_per_s": cfg.writes_per_s,
        "scrape_every_s": cfg.scrape_every.as_secs_f64(),
        "transport": "tcp loopback, bearer token",
        "phases": phases_json,
        "misbehaving": hostile_json,
        "verdict": verdicts,
        "scenario_results": scenario_results,
    });
    SuiteRun {
        suite: Suite { suite: "gateway".into(), config, series },
        text,
        warnings,
        incomplete: false,
        errors: bad + t.read_fail.load(Ordering::Relaxed) + t.scrape_fail.load(Ordering::Relaxed) + accepted,
        failure: None,
    }
}

/// The verdict line of each disturbing phase against the idle phases around it (text, warnings, and
/// the document's object by phase).
fn verdicts(
    phases: &[Phase],
    text: &mut String,
    warnings: &mut Vec<String>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut verdicts = serde_json::Map::new();
    for i in 1..phases.len().saturating_sub(1) {
        if PHASES.get(i).is_none_or(|(_, d)| *d == super::Disturb::Idle) {
            continue;
        }
        let (l, o) = judge(phases, i);
        let p = &phases[i];
        let idle = &phases[i - 1];
        let (gm, gx) = median_max_ms(&p.probe.ns);
        let (im, ix) = median_max_ms(&idle.probe.ns);
        text.push_str(&format!(
            "Verdict {}: p99.9 {:.1} µs vs idle {:.1} / {:.1} µs (limit: the worse idle + their spread = {:.1}): ratio {:.2} {}; overruns {} vs idle {} / {} (limit {}): ratio {:.2} {}; a good client's GetStatus {gm:.2} / {gx:.2} ms (median / max) vs {im:.2} / {ix:.2} ms in {}, {} of {} failed\n",
            p.name,
            l.value,
            l.idle.0,
            l.idle.1,
            l.limit,
            l.ratio,
            l.word(),
            o.value,
            o.idle.0,
            o.idle.1,
            o.limit,
            o.ratio,
            o.word(),
            idle.name,
            p.probe.failed,
            p.probe.failed + p.probe.ns.len() as u64,
        ));
        if !l.met || !o.met {
            warnings.push(format!(
                "the {} phase was worse than the noise between the idle phases around it: see the gateway table",
                p.name
            ));
        }
        if let Some(e) = &p.probe.first_error {
            warnings.push(format!(
                "a good client during the {} phase: {} probes failed, the first: {e}",
                p.name, p.probe.failed
            ));
        }
        verdicts.insert(p.name.to_string(), serde_json::json!({ "latency_p999_us": l.json(), "overruns": o.json() }));
    }
    verdicts
}

/// The loaded phase's tally and round trips.
fn load_lines(cfg: &GatewayBenchConfig, t: &LoadTally, series: &[Series]) -> String {
    let (reads, writes, ok) =
        (t.reads.load(Ordering::Relaxed), t.writes.load(Ordering::Relaxed), t.write_ok.load(Ordering::Relaxed));
    let bad = t.write_bad.load(Ordering::Relaxed);
    let secs = cfg.phase.as_secs_f64();
    let mut text = format!(
        "Load: {reads} statistics reads ({:.0}/s, {} failed), {writes} writes ({:.0}/s): {ok} acknowledged with the value written, {bad} lost or misapplied; {} scrapes ({} failed)\n",
        reads as f64 / secs,
        t.read_fail.load(Ordering::Relaxed),
        writes as f64 / secs,
        t.scrapes.load(Ordering::Relaxed),
        t.scrape_fail.load(Ordering::Relaxed),
    );
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
    text
}

/// What the misbehaving clients did: series (counts), the document's object, and the number of
/// requests accepted that must have been refused.
fn hostile_counts(h: &misbehave::Tally) -> (Vec<Series>, serde_json::Value, u64) {
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let plain = [
        ("idle_sockets_opened", n(&h.idle_opened)),
        ("idle_sockets_closed_by_gateway", n(&h.idle_closed)),
        ("idle_socket_connects_failed", n(&h.idle_connect_failed)),
        ("stream_connections", n(&h.stream_conns)),
        ("streams_opened", n(&h.streams_opened)),
        ("streams_ended_by_gateway", n(&h.streams_ended)),
        ("streams_refused", n(&h.streams_refused)),
        ("stream_bytes_received", n(&h.stream_bytes)),
        ("refused_requests_without_answer", n(&h.refused_no_answer)),
    ];
    let codes = h.refused.lock().map(|m| m.clone()).unwrap_or_default();
    let mut series: Vec<Series> =
        plain.iter().map(|(what, v)| count("misbehaving_clients", &[("what", what)], *v)).collect();
    for (code, v) in &codes {
        series.push(count("misbehaving_clients", &[("what", "refused_requests"), ("code", code)], *v));
    }
    let mut json: serde_json::Map<String, serde_json::Value> =
        plain.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect();
    json.insert("refused_requests_by_code".into(), serde_json::json!(codes));
    let accepted = codes.get("ok").copied().unwrap_or(0);
    (series, serde_json::Value::Object(json), accepted)
}

fn hostile_line(plan: &Hostile, h: &misbehave::Tally) -> String {
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let codes = h.refused.lock().map(|m| m.clone()).unwrap_or_default();
    let by_code: Vec<String> = codes.iter().map(|(c, v)| format!("{v} {c}")).collect();
    let mut s = format!(
        "Misbehaving clients (from 127.0.0.2-4; the good ones from 127.0.0.1): idle sockets ({} places, each opened again {:.1} s after a close): {} opened, {} closed by the gateway, {} connects failed; unread streams ({} connections × {}, {} Hz with buckets, window never given back): {} opened, {} ended by the gateway, {} refused or not opened, {} bytes reached them; refused requests ({}/s: wrong token, undecodable message, unknown signal, out-of-range write in turn): {} answered ({}), {} without an answer\n",
        plan.idle_sockets,
        misbehave::REOPEN_AFTER.as_secs_f64(),
        n(&h.idle_opened),
        n(&h.idle_closed),
        n(&h.idle_connect_failed),
        plan.stream_conns,
        plan.streams_per_conn,
        plan.stream_hz,
        n(&h.streams_opened),
        n(&h.streams_ended),
        n(&h.streams_refused),
        n(&h.stream_bytes),
        plan.refused_per_s,
        h.refused_total() - n(&h.refused_no_answer),
        if by_code.is_empty() { "none".into() } else { by_code.join(", ") },
        n(&h.refused_no_answer),
    );
    if let Ok(Some(e)) = h.first_error.lock().map(|e| e.clone()) {
        s.push_str(&format!("  (the first error a misbehaving client met: {e})\n"));
    }
    s
}
