//! The HTML report over a synthetic document shaped like a full run of every suite, plus the edge cases:
//! unknown suites, missing fields, nothing measured. The browser test of real runs is in the rtcell crate.
//!
//! `cargo test --release -p rtcell-report --test html -- --ignored --nocapture` times a full-size report.

use std::time::Instant;

use rtcell_report::html::{REPORT_FILE, render_html, write_report};
use rtcell_report::{HostFacts, Kind, Results, Series, Suite, Unit, labels};
use serde_json::json;

/// Host facts as a document holds them (read through serde, so fields added later with defaults are fine).
fn host() -> HostFacts {
    serde_json::from_value(json!({
        "cpu_model": "AMD EPYC", "cpus": 2, "tsc_khz": 2_596_122, "kernel": "6.1.0 #1 SMP PREEMPT_DYNAMIC",
        "preempt": "none", "cmdline": "quiet", "isolated_cpus": [], "hypervisor": "KVM", "steal_pct": 0.11,
        "kvm": "nested"
    }))
    .expect("host facts")
}

/// Deterministic samples: a body around `base` with a long, thin tail (like a preempted VM's).
fn samples(n: usize, base: f64, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            if u < 0.001 { base * (5.0 + 200.0 * u * 1000.0) } else { base * (1.0 + 0.3 * u) }
        })
        .collect()
}

fn series(
    name: &str,
    l: std::collections::BTreeMap<String, String>,
    unit: Unit,
    kind: Kind,
    base: f64,
    n: usize,
) -> Series {
    let seed = l
        .values()
        .chain([&name.to_string()])
        .flat_map(|s| s.bytes())
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    Series::from_samples(name, l, unit, kind, samples(n, base, seed), 0)
}

fn count(name: &str, l: std::collections::BTreeMap<String, String>, v: f64) -> Series {
    let mut s = Series::from_samples(name, l, Unit::Count, Kind::Count, vec![v], 0);
    s.histogram = None;
    s
}

/// A document with every suite rtcell has, at about full size (`n` samples per series).
fn full_document(n: usize) -> Results {
    let mut r = Results::new("0.1.0", Some("abc123".into()), Some("rtcell bench".into()), host());
    r.warnings.push("host is a virtual machine (KVM), 0.11% of CPU time stolen during the run".into());
    r.warnings.push("kernel preemption model is \"none\", not PREEMPT_RT".into());

    let mut c2c = Suite::new("c2c", json!({"cpu_a": 0, "cpu_b": 1}));
    c2c.series.push(series(
        "c2c_round_trip",
        labels!("cpus" => "0-1", "method" => "timed_each"),
        Unit::Ns,
        Kind::RoundTrip,
        100.0,
        n,
    ));
    c2c.series.push(series(
        "c2c_one_way",
        labels!("cpus" => "0-1", "method" => "batch"),
        Unit::Ns,
        Kind::OneWay,
        30.0,
        100,
    ));
    r.suites.push(c2c);

    let sizes = [0u32, 1, 8, 16, 32, 64, 128, 256, 512, 1024];
    let mut lb = Suite::new("loopback", json!({"master_cpu": 0, "cell_cpu": 1, "iterations": n, "load": "none"}));
    for (cell, transport, notify) in [
        ("thread", "ring", Some("poll")),
        ("process", "ring", Some("poll")),
        ("kvm", "ring", Some("poll")),
        ("thread", "pipe", None),
    ] {
        for &b in &sizes {
            let mut l = labels!("cell" => cell, "transport" => transport, "bytes" => b, "load" => "none", "master_cpu" => 0, "cell_cpu" => 1);
            if let Some(nt) = notify {
                l.insert("notify".into(), nt.into());
            }
            let base = if transport == "pipe" { 30.0 } else { 0.18 + f64::from(b) / 4000.0 };
            lb.series.push(series("loopback_rtt", l.clone(), Unit::Us, Kind::RoundTrip, base, n));
            let mut t = Series::from_samples("loopback_throughput", l, Unit::BytesPerS, Kind::Throughput, vec![5e8], 0);
            t.histogram = None;
            lb.series.push(t);
        }
        if transport == "ring" {
            let mut s = count("cell_start", labels!("cell" => cell, "cpu" => 1), 1210.0);
            s.unit = Unit::Us;
            s.kind = Kind::Latency;
            lb.series.push(s);
        }
    }
    lb.series.push(count(
        "vm_exits",
        labels!("cell" => "kvm", "bytes" => 0, "exits.exits" => 11, "exits.irq_exits" => 8),
        11.0,
    ));
    r.suites.push(lb);

    let mut ctl = Suite::new(
        "control",
        json!({"states": 41, "iterations": n, "master_cpu": 0, "cell_cpu": 1, "load": "none", "message_bytes": 32}),
    );
    for p in ["f64", "f32", "q31"] {
        for cell in ["local", "thread", "process", "kvm"] {
            let l = labels!("precision" => p, "cell" => cell, "load" => "none", "master_cpu" => 0);
            ctl.series.push(series("control_exec", l.clone(), Unit::Us, Kind::ExecTime, 0.23, n));
            ctl.series.push(series("control_clock", l.clone(), Unit::Us, Kind::ExecTime, 0.02, n / 4));
            if cell != "local" {
                ctl.series.push(series("control_rtt", l.clone(), Unit::Us, Kind::RoundTrip, 0.93, n));
                ctl.series.push(series("control_probe_rtt", l, Unit::Us, Kind::RoundTrip, 0.72, n / 4));
            }
        }
    }
    r.suites.push(ctl);

    let mut lat = Suite::new("latency", json!({"cpu": 1, "period_us": 1000, "priority": 95, "load": "none"}));
    for (tool, mode, base) in [
        ("rtcell", "nanosleep", 40.0),
        ("rtcell", "poll", 0.02),
        ("rtcell", "kvm", 0.05),
        ("cyclictest", "nanosleep", 45.0),
    ] {
        let l = labels!("tool" => tool, "mode" => mode, "cpu" => 1);
        lat.series.push(series("latency", l.clone(), Unit::Us, Kind::Latency, base, n));
        lat.series.push(count("latency_overruns", l, 2.0));
    }
    r.suites.push(lat);

    let mut sc = Suite::new(
        "scenario",
        json!({"scenario": "plc", "measured_s": 60.0,
        "outcome": {"tasks": [{"name": "ethercat", "expected": 60000}]}}),
    );
    for (task, base) in [("ethercat", 29.0), ("high", 36.0), ("low", 7.0)] {
        let l = labels!("scenario" => "plc", "task" => task, "cell" => "plc", "cell_kind" => "thread", "cpu" => 1,
            "priority" => 90, "period_us" => 1000, "cycles" => 59922, "overruns" => 48, "longest_overrun_run" => 2,
            "skipped" => 78, "state" => "done");
        sc.series.push(series("task_exec_time", l.clone(), Unit::Us, Kind::ExecTime, base, n));
        sc.series.push(series("task_latency", l, Unit::Us, Kind::Latency, 30.0, n));
        for c in ["task_cycles", "task_overruns", "task_longest_overrun_run", "task_skipped"] {
            sc.series.push(count(c, labels!("scenario" => "plc", "task" => task), 5.0));
        }
    }
    for dir in ["sent", "received", "lost"] {
        sc.series.push(count(
            "channel_messages",
            labels!("scenario" => "plc", "channel" => "ecat_frames", "direction" => dir),
            59922.0,
        ));
    }
    r.suites.push(sc);

    let mut mb = Suite::new(
        "membench",
        json!({"accesses_per_sample": 4096, "caches": [
        {"name": "L1i", "type": "Instruction", "size_bytes": 32768},
        {"name": "L1d", "type": "Data", "size_bytes": 49152},
        {"name": "L2", "type": "Unified", "size_bytes": 1048576},
        {"name": "L3", "type": "Unified", "size_bytes": 33554432}],
        "plateaus": [{"pattern": "seq", "interferers": 0, "label": "L1d", "from_bytes": 1024, "to_bytes": 32768, "median_ns": 1.1}]}),
    );
    for pattern in ["seq", "random"] {
        for k in [0, 1] {
            for e in 10..=26 {
                let wss = 1u64 << e;
                let base = if pattern == "seq" { 1.1 } else { 1.1 + (e as f64 - 10.0).max(0.0).powi(2) * 0.5 };
                let l = labels!("pattern" => pattern, "wss_bytes" => wss, "interferers" => k, "fits" => "L1d", "plateau" => "L1d", "cpu" => 1);
                mb.series.push(series("membench_read_latency", l, Unit::Ns, Kind::Latency, base, n / 10));
            }
        }
    }
    r.suites.push(mb);

    // As many series as seed 002's inter-task communication matrix: left to the generic table.
    let mut itc = Suite::new("itc", json!({"requester_cpu": 0}));
    for mech in [
        "pipe",
        "fifo",
        "mqueue",
        "semaphore",
        "mutex",
        "condvar",
        "futex",
        "eventfd",
        "unix-stream",
        "unix-dgram",
        "ring",
        "guarded",
    ] {
        for b in [4u32, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072] {
            for placement in ["same-cpu", "cross-cpu"] {
                for trigger in ["back-to-back", "periodic"] {
                    let l = labels!("mechanism" => mech, "bytes" => b, "placement" => placement, "trigger" => trigger);
                    itc.series.push(series("itc_rtt", l, Unit::Us, Kind::RoundTrip, 5.0, n / 20));
                }
            }
        }
    }
    r.suites.push(itc);

    // A suite rtcell has no view of, with a label that must be escaped.
    let mut unknown = Suite::new("frobnicate", json!({"knob": "<b>&"}));
    for (i, k) in ["a", "b", "c"].iter().enumerate() {
        unknown.series.push(series(
            "frob_time",
            labels!("knob" => format!("<{k}>&"), "i" => i),
            Unit::Cycles,
            Kind::Period,
            900.0,
            n,
        ));
    }
    unknown.series.push(count("frob_events", labels!("knob" => "x"), 3.0));
    r.suites.push(unknown);
    r
}

fn ids(html: &str) -> Vec<String> {
    html.split(" id=\"").skip(1).filter_map(|s| s.split('"').next()).map(str::to_string).collect()
}

#[test]
fn every_suite_gets_its_section_tables_and_figures() {
    let doc = full_document(20_000);
    let html = render_html(&doc).unwrap();
    let ids = ids(&html);
    for id in [
        "host",
        "warnings",
        "host-facts",
        "suite-c2c",
        "suite-c2c-c2c",
        "suite-c2c-hist-0",
        "suite-loopback",
        "suite-loopback-rtt-size",
        "suite-loopback-table-0",
        "suite-loopback-table-3",
        "suite-loopback-start",
        "suite-loopback-exits",
        "suite-loopback-published",
        "suite-control",
        "suite-control-table-f64",
        "suite-control-exec-f64",
        "suite-control-rtt-q31",
        "suite-latency",
        "suite-latency-table",
        "suite-latency-hist-0",
        "suite-latency-published",
        "suite-scenario",
        "suite-scenario-tasks",
        "suite-scenario-channels",
        "suite-scenario-exec-0",
        "suite-scenario-latency-0",
        "suite-membench",
        "suite-membench-wss",
        "suite-membench-table",
        "suite-membench-plateaus",
        "suite-itc-series",
        "suite-itc-published",
        "suite-frobnicate",
        "suite-frobnicate-series",
        "suite-frobnicate-hist-0-0",
    ] {
        assert!(ids.iter().any(|i| i == id), "no element with id {id}; ids: {ids:?}");
    }
    // Ids are unique.
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "duplicate ids");
    // Host facts and warnings come before any suite.
    let first_suite = html.find("id=\"suite-").unwrap();
    assert!(html.find("id=\"warnings\"").unwrap() < first_suite);
    assert!(html.contains("not PREEMPT_RT") && html.contains("this host is a virtual machine"));
    // Published figures are there and labelled as another platform.
    assert!(html.contains("STM32MP157 Jailhouse A7 cell, idle (other platform)"), "published overlay label");
    assert!(html.contains("Jailhouse A7 mean (other platform)"));
    // Cache sizes are marked on the membench plot (the instruction cache is not a data size).
    assert!(html.contains("L1d 48K") && html.contains("L2 1M") && html.contains("L3 32M") && !html.contains("L1i 32K"));
    // The unknown suite is listed whole, its labels escaped.
    assert!(html.contains("frob_time") && html.contains("frob_events") && html.contains("cycles"));
    assert!(html.contains("knob=&lt;a&gt;&amp;") && !html.contains("<a>&"), "labels are escaped");
    // Too many series to overlay: said, not drawn.
    assert!(html.contains("too many series to overlay: itc_rtt (528 series)"));
    // Every figure says what it shows.
    // c2c 2, loopback 1 (Fig. 2), control 2 per precision, latency 1, scenario 2, membench 1, unknown 1.
    let figures = html.matches("<figure").count();
    assert_eq!(figures, 14, "figures");
    assert_eq!(html.matches("<figcaption>").count(), figures);
    assert_eq!(html.matches("<svg").count(), figures);
}

#[test]
fn the_page_is_self_contained() {
    let html = render_html(&full_document(2000)).unwrap();
    for banned in ["<script", "<link", "<img", "<iframe", "@import", "url(", " src=", "https:"] {
        assert!(!html.contains(banned), "the page contains {banned:?}");
    }
    // The only absolute URL is the SVG namespace; every link is to an anchor on the page.
    assert_eq!(html.matches("http").count(), html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count());
    for href in html.split("href=\"").skip(1) {
        assert!(href.starts_with('#'), "link out of the page: {}", &href[..40.min(href.len())]);
    }
    assert!(html.contains("@media print"), "print stylesheet");
}

#[test]
fn missing_and_unknown_fields_are_tolerated() {
    let mut r = Results::new("0.1.0", None, None, host());
    r.incomplete = true;
    // A membench suite without caches or plateaus in its config, one series without a size, one empty.
    let mut mb = Suite::new("membench", json!({}));
    mb.series.push(series(
        "membench_read_latency",
        labels!("pattern" => "seq", "wss_bytes" => 4096),
        Unit::Ns,
        Kind::Latency,
        1.0,
        100,
    ));
    mb.series.push(series(
        "membench_read_latency",
        labels!("pattern" => "seq", "wss_bytes" => 8192),
        Unit::Ns,
        Kind::Latency,
        1.2,
        100,
    ));
    mb.series.push(series("membench_read_latency", labels!("pattern" => "odd"), Unit::Ns, Kind::Latency, 1.0, 100));
    mb.series.push(Series::from_samples(
        "membench_read_latency",
        labels!("wss_bytes" => 1024),
        Unit::Ns,
        Kind::Latency,
        vec![],
        0,
    ));
    r.suites.push(mb);
    // Known suites with none of the series their views expect, and empty ones.
    r.suites.push(Suite::new("loopback", json!({})));
    let mut ctl = Suite::new("control", json!({}));
    ctl.series.push(series("something_new", labels!(), Unit::Ratio, Kind::Count, 1.0, 10));
    r.suites.push(ctl);
    r.suites.push(Suite::new("latency", json!({})));
    r.suites.push(Suite::new("scenario", json!({})));
    r.suites.push(Suite::new("c2c", json!({})));
    let html = render_html(&r).unwrap();
    let ids = ids(&html);
    for id in [
        "incomplete",
        "suite-membench-wss",
        "suite-membench-series",
        "suite-control-series",
        "suite-loopback",
        "suite-c2c",
    ] {
        assert!(ids.iter().any(|i| i == id), "no element with id {id}; ids: {ids:?}");
    }
    assert!(html.contains("pattern=odd"), "the series without a size is in the generic table");
    assert!(html.contains("The configuration names no cache sizes."));
    assert!(html.contains("something_new"));
    assert!(html.contains("The run recorded no warnings."));
    assert!(html.contains("Incomplete run"));

    let empty = Results::new("0.1.0", None, None, host());
    let html = render_html(&empty).unwrap();
    assert!(html.contains("no suites") && html.contains("id=\"host\""));
}

#[test]
fn write_report_replaces_the_page_whole() {
    let dir = tempfile::tempdir().unwrap();
    let doc = full_document(500);
    let path = write_report(&doc, dir.path()).unwrap();
    assert_eq!(path, dir.path().join(REPORT_FILE));
    let first = std::fs::read_to_string(&path).unwrap();
    assert!(first.starts_with("<!DOCTYPE html>") && first.trim_end().ends_with("</html>"));
    let mut other = doc.clone();
    other.suites.truncate(1);
    write_report(&other, dir.path()).unwrap();
    let second = std::fs::read_to_string(&path).unwrap();
    assert!(second.len() < first.len() && second.contains("suite-c2c") && !second.contains("suite-loopback"));
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, [REPORT_FILE], "no temporary file left behind");
    let missing = dir.path().join("no/such/dir");
    let e = write_report(&doc, &missing).unwrap_err().to_string();
    assert!(e.contains("no/such/dir") && e.contains("check the path"), "{e}");
}

/// Report generation for a full-size document: every suite, ~750 series, most with full histograms.
#[test]
#[ignore = "timing: run with --release -- --ignored --nocapture"]
fn timing_full_size_document() {
    let t = Instant::now();
    let doc = full_document(200_000);
    let with_hist = doc.suites.iter().flat_map(|s| &s.series).filter(|s| s.histogram.is_some()).count();
    let buckets: usize =
        doc.suites.iter().flat_map(|s| &s.series).filter_map(|s| s.histogram.as_ref()).map(|h| h.counts.len()).sum();
    let series: usize = doc.suites.iter().map(|s| s.series.len()).sum();
    println!(
        "document: {} suites, {series} series, {with_hist} with histograms ({buckets} buckets), built in {:.2} s",
        doc.suites.len(),
        t.elapsed().as_secs_f64()
    );
    let json = doc.to_json_pretty().unwrap();
    // What `rtcell report` does: read the document, render, write the page.
    let dir = tempfile::tempdir().unwrap();
    doc.write_to_dir(dir.path()).unwrap();
    let t = Instant::now();
    let loaded = Results::load(dir.path().join("results.json")).unwrap();
    let load_s = t.elapsed().as_secs_f64();
    write_report(&loaded, dir.path()).unwrap();
    println!("load + render + write: {:.3} s (load {load_s:.3} s)", t.elapsed().as_secs_f64());
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let html = render_html(&doc).unwrap();
        times.push(t.elapsed().as_secs_f64());
        size = html.len();
    }
    let first = times[0];
    times.sort_by(f64::total_cmp);
    println!(
        "render_html: first {:.3} s, median of 5 {:.3} s, slowest {:.3} s; page {} KiB from a {} KiB document",
        first,
        times[2],
        times[4],
        size / 1024,
        json.len() / 1024
    );
}

#[test]
fn the_recorded_host_check_is_shown() {
    use rtcell_host::check::{HostCheck, Level, Verdict};
    let mut r = Results::new("0.1.0", None, None, host());
    let mut bad = Verdict::new("isolation", Level::Warn, "CPU 1 is not isolated");
    bad.fix = Some("boot with isolcpus=1 nohz_full=1".into());
    r.host.check = Some(HostCheck::from_verdicts(1, vec![bad, Verdict::new("governor", Level::Ok, "performance")]));
    let html = render_html(&r).unwrap();
    assert!(html.contains("id=\"host-check\""), "check table");
    assert!(html.contains("Host check of cell CPU 1"));
    assert!(html.contains("CPU 1 is not isolated") && html.contains("boot with isolcpus=1 nohz_full=1"));
    assert!(html.contains("ok: governor.") && !html.contains("performance"), "ok items by name only");
    let without = render_html(&Results::new("0.1.0", None, None, host())).unwrap();
    assert!(!without.contains("host-check"));
}
