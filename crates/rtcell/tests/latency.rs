//! End-to-end: `rtcell bench latency` as a user runs it. Correctness only (series, files, layouts,
//! refusals); how late anything was is what the benchmark reports, never asserted here.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;

/// Whether the kvm mode must run: always in CI; elsewhere only where KVM works.
fn kvm_or_skip() -> bool {
    let status = rtcell_kvm::kvm_status();
    if status.is_usable() {
        return true;
    }
    rtcell_testkit::skip_part(&format!("the kvm mode: {}", status.explain()));
    false
}

/// Whether `--vs cyclictest` can run: always in CI (scripts/setup installs rt-tests); elsewhere only
/// where cyclictest is installed.
fn cyclictest_or_skip() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|d| d.join("cyclictest").is_file()) {
        return true;
    }
    rtcell_testkit::skip("cyclictest is not installed (scripts/setup installs rt-tests)");
    false
}

/// One thread's column of a cyclictest histogram file, read as OSADL's and the usual gnuplot scripts
/// read it: every line not starting with '#' is `%06d` bucket (us) then the counts of the threads; the
/// trailer is found by its prefixes.
#[derive(Debug)]
struct Column {
    buckets: Vec<u64>,
    total: u64,
    min: u64,
    avg: u64,
    max: u64,
    overflows: u64,
}

fn parse_cyclictest_hist(text: &str) -> Vec<Column> {
    let mut rows: Vec<Vec<u64>> = Vec::new();
    let mut trailer: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('#') {
            if let Some((key, values)) = rest.trim().split_once(':') {
                let nums: Option<Vec<u64>> = values.split_whitespace().map(|v| v.parse().ok()).collect();
                if let Some(nums) = nums {
                    trailer.insert(key.to_string(), nums);
                }
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let (bucket, counts) = line.split_once(' ').unwrap_or_else(|| panic!("no bucket field: {line:?}"));
        assert_eq!(bucket.len(), 6, "bucket is not %06d: {line:?}");
        assert_eq!(bucket.parse::<usize>().unwrap(), rows.len(), "buckets must count up from 0: {line:?}");
        let counts: Vec<u64> = counts.split('\t').map(|c| c.parse().expect("count")).collect();
        assert!(line.split('\t').skip(1).all(|c| c.len() >= 6), "counts are %06lu: {line:?}");
        rows.push(counts);
    }
    assert!(!rows.is_empty(), "no histogram lines");
    let threads = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == threads), "every line has a count per thread");
    let get = |k: &str, t: usize| trailer.get(k).unwrap_or_else(|| panic!("no '# {k}:' line"))[t];
    (0..threads)
        .map(|t| Column {
            buckets: rows.iter().map(|r| r[t]).collect(),
            total: get("Total", t),
            min: get("Min Latencies", t),
            avg: get("Avg Latencies", t),
            max: get("Max Latencies", t),
            overflows: get("Histogram Overflows", t),
        })
        .collect()
}

fn latency_series(doc: &serde_json::Value, tool: &str) -> Vec<serde_json::Value> {
    series(doc).into_iter().filter(|s| s["name"] == "latency" && s["labels"]["tool"] == tool).collect()
}

fn stat(s: &serde_json::Value, k: &str) -> f64 {
    s["stats"][k].as_f64().unwrap_or_else(|| panic!("stats.{k}"))
}

/// A latency series is complete and ordered, and its histogram holds every activation.
fn check_series(s: &serde_json::Value) {
    assert_eq!(s["unit"], "us", "{s}");
    assert_eq!(s["kind"], "latency", "{s}");
    assert!(s["stats"]["count"].as_u64().unwrap() > 0, "no activations: {s}");
    let order = ["min", "median", "p99", "p999", "max"].map(|k| stat(s, k));
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    assert!(stat(s, "min") >= 0.0 && stat(s, "mean") <= stat(s, "max"));
    let h = &s["histogram"];
    let total: u64 = h["counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum::<u64>()
        + h["overflows"].as_u64().unwrap();
    assert_eq!(total, s["stats"]["count"].as_u64().unwrap(), "histogram total vs count: {s}");
}

/// The histogram file's columns are the series, in order: same counts, minima and maxima.
fn check_hist_file(dir: &Path, series: &[serde_json::Value]) {
    let text = std::fs::read_to_string(dir.join("latency.hist")).expect("latency.hist written");
    let cols = parse_cyclictest_hist(&text);
    assert_eq!(cols.len(), series.len(), "a column per series");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("latency.json")).expect("latency.json written"))
            .unwrap();
    assert_eq!(json["num_threads"], series.len());
    for (t, (c, s)) in cols.iter().zip(series).enumerate() {
        let count = s["stats"]["count"].as_u64().unwrap();
        assert_eq!(c.total, c.buckets.iter().sum::<u64>());
        assert_eq!(c.total + c.overflows, count, "column {t}");
        assert!(c.min <= c.avg && c.avg <= c.max, "column {t}: {c:?}");
        // Whole microseconds, truncated (cyclictest's own values already are).
        assert_eq!(c.max, stat(s, "max").floor() as u64, "column {t}");
        assert_eq!(c.min, stat(s, "min").floor() as u64, "column {t}");
        let th = &json["thread"][t.to_string()];
        assert_eq!(th["cycles"], count, "JSON thread {t}");
        assert_eq!(th["max"], c.max, "JSON thread {t}");
        let in_json: u64 = th["histogram"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(in_json, c.total, "JSON thread {t} histogram");
    }
}

#[test]
fn each_mode_runs_briefly_and_yields_a_schema_valid_series() {
    let _serial = serial();
    let kvm = kvm_or_skip();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let modes = if kvm { "nanosleep,poll,kvm" } else { "nanosleep,poll" };
    let o = run(&[
        "bench",
        "latency",
        "--mode",
        modes,
        "--cell",
        "thread,process",
        "--duration",
        "1s",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "latency failed: {}", text(&o));
    let doc = valid_results(&out);
    assert_eq!(doc["suites"][0]["suite"], "latency");
    assert_eq!(doc["incomplete"], false);
    let got = latency_series(&doc, "rtcell");
    let mut want = vec![("nanosleep", None), ("poll", Some("thread")), ("poll", Some("process"))];
    if kvm {
        want.push(("kvm", Some("kvm")));
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (s, (mode, cell)) in got.iter().zip(&want) {
        assert_eq!(s["labels"]["mode"], *mode);
        assert_eq!(s["labels"]["cell"].as_str(), *cell);
        assert_eq!(s["labels"]["period_us"], "1000");
        assert_eq!(s["labels"]["priority"], "95");
        assert_eq!(s["errors"], 0, "no activation dropped");
        check_series(s);
    }
    let overruns = series(&doc).into_iter().filter(|s| s["name"] == "latency_overruns").count();
    assert_eq!(overruns, want.len(), "an overrun count per mode");
    check_hist_file(&out, &got);
    let t = text(&o);
    for needle in ["Activation latency on CPU", "us, one way", "overruns", "p99.9", "latency.hist"] {
        assert!(t.contains(needle), "{needle:?} not in the output: {t}");
    }
}

#[test]
fn vs_cyclictest_alternates_rounds_and_prints_the_ratios() {
    let _serial = serial();
    if !cyclictest_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = run(&[
        "bench",
        "latency",
        "--mode",
        "poll",
        "--vs",
        "cyclictest",
        "--load",
        "memcpy",
        "--duration",
        "2s",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "latency --vs cyclictest failed: {}", text(&o));
    let doc = valid_results(&out);
    let ours = latency_series(&doc, "rtcell");
    let theirs = latency_series(&doc, "cyclictest");
    assert_eq!((ours.len(), theirs.len()), (1, 1));
    check_series(&ours[0]);
    check_series(&theirs[0]);
    assert_eq!(ours[0]["labels"]["rounds"], "4");
    assert_eq!(theirs[0]["labels"]["rounds"], "4");
    assert_eq!(theirs[0]["labels"]["load"], "memcpy");
    // cyclictest -l: 4 rounds of 0.5 s at 1 ms, exactly.
    assert_eq!(theirs[0]["stats"]["count"], 2000);
    let cfg = &doc["suites"][0]["config"];
    assert_eq!(cfg["vs"]["commands"].as_array().unwrap().len(), 4);
    for k in ["median", "p99", "p99.9", "max"] {
        assert!(cfg["comparison"]["poll-thread"][k].is_number(), "ratio {k}: {cfg}");
    }
    // cyclictest's own files, read with the same rules as ours.
    for round in 1..=4 {
        let raw = std::fs::read_to_string(out.join(format!("cyclictest-round{round}.hist"))).unwrap();
        let cols = parse_cyclictest_hist(&raw);
        assert_eq!(cols.len(), 1);
        assert_eq!(cols[0].total + cols[0].overflows, 500, "round {round}");
    }
    check_hist_file(&out, &[ours[0].clone(), theirs[0].clone()]);
    let t = text(&o);
    assert!(t.contains("rtcell vs cyclictest on CPU"), "{t}");
    assert!(t.contains("poll (thread cell) p99.9 / cyclictest p99.9: "), "{t}");
    assert!(t.contains("goal <= 0.25: met") || t.contains("goal <= 0.25: missed"), "{t}");
}

#[test]
fn bad_input_exits_2_with_the_message_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let o = out.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--mode", "sleepy"], "unknown mode \"sleepy\""),
        (&["--mode", "nanosleep", "--period", "20"], "cannot honour periods below 50 us"),
        (&["--mode", "poll", "--period", "5"], "cannot honour periods below 10 us"),
        (&["--cpu", "4096"], "CPU 4096 does not exist"),
        (&["--priority", "0"], "--priority 0"),
        (&["--duration", "1ms"], "activations per round"),
        (&["--cell", "kvm"], "--mode kvm"),
        (&["--vs", "oslat"], "--vs \"oslat\""),
        (&["--load", "nope"], "unknown load"),
    ];
    for (args, msg) in cases {
        let mut all = vec!["bench", "latency", "--out", o];
        all.extend_from_slice(args);
        let r = run(&all);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", text(&r));
        assert!(text(&r).contains(msg), "{args:?}: expected {msg:?} in {}", text(&r));
    }
    // cyclictest missing: says how to install it.
    let r =
        rtcell().env("PATH", dir.path()).args(["bench", "latency", "--vs", "cyclictest", "--out", o]).output().unwrap();
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert!(text(&r).contains("apt-get install rt-tests"), "{}", text(&r));
    assert!(!out.exists(), "nothing may start on bad input");
}
