//! The loopback suite's figures: series per transport and size, the report text, and the speed goals as ratios of medians measured in the same run.

use super::*;
use rtcell_report::goal::Goal;

pub(super) fn build(
    tsc: &TscClock,
    cfg: &LoopbackConfig,
    runs: Vec<TransportRun>,
    floor: Option<(C2cConfig, c2c::C2cMeasurement)>,
    load_bps: f64,
    mut warnings: Vec<String>,
    incomplete: bool,
) -> SuiteRun {
    let mut series = Vec::new();
    let mut text = String::new();
    let mut total_errors = 0;
    // Medians for the speed summary: (cell, transport, notify, size) -> median us.
    let mut medians: Vec<Median> = Vec::new();
    for r in &runs {
        total_errors += transport_table(tsc, cfg, r, &mut text, &mut series, &mut medians);
        vm_exits(cfg, r, &mut text, &mut series);
        cell_start(cfg, r, &mut text, &mut series);
    }
    text.push_str(
        "Jailhouse A7 columns: seed 000 Table I, STM32MP157 Cortex-A7 cell under Jailhouse, idle (or under interference when a load ran), mean/max in us — another platform, for scale only.\n",
    );

    let mut floor_rtt = None;
    if let Some((c, m)) = &floor {
        let s = c2c::series(tsc, c, m);
        floor_rtt = s.first().map(|x| x.stats.median);
        text.push_str(&format!(
            "c2c floor, CPU {} <-> CPU {}: round trip median {:.1} ns (each timed), one way median {:.1} ns (batch RTT / 2)\n",
            c.cpu_a,
            c.cpu_b,
            s.first().map_or(f64::NAN, |x| x.stats.median),
            s.get(1).map_or(f64::NAN, |x| x.stats.median),
        ));
        series.extend(s);
    }
    text.push_str(&speed_summary(&medians, floor_rtt));
    if cfg.load == Load::Memcpy {
        text.push_str(&format!(
            "load {} on CPUs {:?}: {:.2} GB/s copied while measuring\n",
            cfg.load.as_str(),
            cfg.cell_cpu_complement(),
            load_bps / 1e9
        ));
    }
    if total_errors > 0 {
        warnings.push(format!("{total_errors} round trips came back with a wrong payload: this run FAILED"));
    }
    let config = serde_json::json!({
        "master_cpu": cfg.master_cpu,
        "cell_cpu": cfg.cell_cpu,
        "sizes": cfg.sizes,
        "iterations": cfg.iterations,
        "warmup": WARMUP,
        "cells": cfg.cells.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        "notify": cfg.notify.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        "load": cfg.load.as_str(),
        "load_bytes_per_s": load_bps,
        "pipe_baseline": cfg.pipe_baseline,
        "master_priority": cfg.master_priority,
        "cell_priority": cfg.cell_priority,
        "seed": cfg.seed,
        "tsc_khz": tsc.khz(),
    });
    let mut suite = Suite::new("loopback", config);
    suite.series = series;
    SuiteRun { suite, text, warnings, incomplete, errors: total_errors, failure: None }
}

/// A median for the speed summary: (cell, transport, notify, size, median us).
type Median = (String, &'static str, Option<Notify>, usize, f64);

/// One transport's table (a row per size, with seed 000's Jailhouse figures for scale) into `text`, its
/// round-trip and throughput series into `series`, its medians into `medians`. Returns its errors.
fn transport_table(
    tsc: &TscClock,
    cfg: &LoopbackConfig,
    r: &TransportRun,
    text: &mut String,
    series: &mut Vec<Series>,
    medians: &mut Vec<Median>,
) -> u64 {
    let mut errors = 0;
    let what = match r.notify {
        Some(n) => format!("{} cell, ring, notify {}", r.cell, n.as_str()),
        None => "Linux baseline: pipe pair, echo thread".to_string(),
    };
    text.push_str(&format!(
        "\nLoopback round trip: {what}; master CPU {}, cell CPU {}, load {} (us, round trip, {} per size)\n",
        cfg.master_cpu,
        cfg.cell_cpu,
        cfg.load.as_str(),
        cfg.iterations
    ));
    let first = series.len();
    for s in &r.sizes {
        let ser = series_us(tsc, "loopback_rtt", labels_for(cfg, r, s.size), Kind::RoundTrip, &s.ticks, s.errors);
        errors += s.errors;
        let st: Stats = ser.stats;
        let secs = tsc.ticks_to_ns(s.elapsed_ticks) / 1e9;
        // Payload bytes moved per second, both directions, over the whole timed loop.
        let mbps = if secs > 0.0 { (2 * s.size * (s.ticks.len() + WARMUP)) as f64 / secs / 1e6 } else { 0.0 };
        if secs > 0.0 && !s.ticks.is_empty() {
            let mut thr = Series::from_samples(
                "loopback_throughput",
                labels_for(cfg, r, s.size),
                Unit::BytesPerS,
                Kind::Throughput,
                vec![mbps * 1e6],
                0,
            );
            thr.histogram = None;
            series.push(thr);
        }
        medians.push((r.cell.clone(), r.transport, r.notify, s.size, st.median));
        series.push(ser);
    }
    // The table the HTML report shows too, from this transport's series.
    let of = |name: &str| series[first..].iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let grid = rtcell_report::columns::loopback("loopback", &of("loopback_rtt"), &of("loopback_throughput"));
    text.push_str(&Table::of(&grid).render());
    text.push('\n');
    errors
}

/// A cell's start time (spawn to first heartbeat), when measured: a line and a series.
fn cell_start(cfg: &LoopbackConfig, r: &TransportRun, text: &mut String, series: &mut Vec<Series>) {
    if let Some(st) = r.start_time {
        text.push_str(&format!("{} cell start (spawn to first heartbeat): {:.3} ms\n", r.cell, st.as_secs_f64() * 1e3));
        let mut s = Series::from_samples(
            "cell_start",
            labels!("cell" => r.cell, "cpu" => cfg.cell_cpu),
            Unit::Us,
            Kind::Latency,
            vec![st.as_secs_f64() * 1e6],
            0,
        );
        s.histogram = None;
        series.push(s);
    }
}

/// The kvm cell's VM exits during the measured round trips: lines into `text`, one series per size.
fn vm_exits(cfg: &LoopbackConfig, r: &TransportRun, text: &mut String, series: &mut Vec<Series>) {
    let exit_lines: Vec<String> = r
        .sizes
        .iter()
        .filter_map(|s| s.exits.as_ref().map(|e| (s.size, e)))
        .map(|(size, e)| {
            let total = e.get("exits").copied().unwrap_or(0);
            let detail: Vec<String> =
                e.iter().filter(|(k, _)| k.as_str() != "exits").map(|(k, v)| format!("{k} {v}")).collect();
            format!(
                "  {size} B: {total} exits{}",
                if detail.is_empty() { String::new() } else { format!(" ({})", detail.join(", ")) }
            )
        })
        .collect();
    if !exit_lines.is_empty() {
        text.push_str("VM exits of the kvm cell's vCPU during the measured round trips (goal: 0):\n");
        text.push_str(&exit_lines.join("\n"));
        text.push('\n');
        if r.sizes.iter().any(|s| s.exits.as_ref().is_some_and(|e| e.get("irq_exits").is_some_and(|&v| v > 0))) {
            text.push_str(
                "  irq_exits are host interrupts (the timer tick) taken while the guest ran: the payload made no exit; \
                 isolcpus + nohz_full on the cell CPU removes them\n",
            );
        }
        for s in &r.sizes {
            if let Some(e) = &s.exits {
                let mut ser = Series::from_samples(
                    "vm_exits",
                    labels_for(cfg, r, s.size),
                    Unit::Count,
                    Kind::Count,
                    vec![e.get("exits").copied().unwrap_or(0) as f64],
                    0,
                );
                ser.histogram = None;
                for (k, v) in e {
                    ser.labels.insert(format!("exits.{k}"), v.to_string());
                }
                series.push(ser);
            }
        }
    }
}

impl LoopbackConfig {
    fn cell_cpu_complement(&self) -> Vec<usize> {
        rtcell_host::cpu::online_cpus().unwrap_or_default().into_iter().filter(|&c| c != self.cell_cpu).collect()
    }
}

/// The speed goals as ratios of medians measured in this run.
fn speed_summary(medians: &[Median], floor_rtt_ns: Option<f64>) -> String {
    let find = |cell: &str, transport: &str, notify: Option<Notify>, size: usize| {
        medians.iter().find(|m| m.0 == cell && m.1 == transport && m.2 == notify && m.3 == size).map(|m| m.4)
    };
    let mut out = String::from("\nRatios of medians from this run:\n");
    let mut any = false;
    if let Some(t0) = find("thread", "ring", Some(Notify::Poll), 0) {
        if let Some(f) = floor_rtt_ns {
            let r = t0 * 1000.0 / f;
            out.push_str(&format!(
                "  thread cell 0 B round trip / c2c round trip: {r:.2} x ({} us / {} us; {})\n",
                fmt_us(t0 * 1000.0),
                fmt_us(f),
                Goal::AtMost(1.5).judge(r)
            ));
            any = true;
        }
        if let Some(p0) = find("thread", "pipe", None, 0) {
            let r = p0 / t0;
            out.push_str(&format!(
                "  pipe 0 B round trip / thread cell 0 B round trip: {r:.1} x faster ({})\n",
                Goal::AtLeast(20.0).judge(r)
            ));
            any = true;
        }
        if let Some(t1k) = find("thread", "ring", Some(Notify::Poll), 1024) {
            let r = t1k / t0;
            out.push_str(&format!(
                "  thread cell 1024 B / 0 B round trip: {r:.2} x ({})\n",
                Goal::AtMost(3.0).judge(r)
            ));
            any = true;
        }
        if let Some(p) = find("process", "ring", Some(Notify::Poll), 0) {
            out.push_str(&format!("  process cell 0 B / thread cell 0 B round trip: {:.2} x\n", p / t0));
            any = true;
        }
        if let Some(k) = find("kvm", "ring", Some(Notify::Poll), 0) {
            let r = k / t0;
            out.push_str(&format!(
                "  kvm cell 0 B / thread cell 0 B round trip: {r:.2} x ({})\n",
                Goal::AtMost(1.15).judge(r)
            ));
            any = true;
        }
    }
    if any { out } else { String::new() }
}
