//! The results document against its schema, and its round trip through the file system.

use std::time::Instant;

use rtcell_report::{HostFacts, Kind, ReportError, Results, SCHEMA_ID, Series, Stats, Suite, Unit, labels};
use serde_json::{Value, json};

/// Embedded so the test works from any checkout, wherever it runs.
const SCHEMA: &str = include_str!("../../../schema/results.schema.json");

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(SCHEMA).expect("schema file is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

/// Every schema violation in `doc`, as readable lines (empty when valid).
fn violations(doc: &Value) -> Vec<String> {
    validator().iter_errors(doc).map(|e| format!("{} at {}", e, e.instance_path)).collect()
}

fn host() -> HostFacts {
    HostFacts {
        cpu_model: "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz".into(),
        cpus: 2,
        tsc_khz: Some(2_899_998),
        kernel: "6.1.0-18-amd64".into(),
        preempt: "dynamic".into(),
        cmdline: "BOOT_IMAGE=/vmlinuz root=/dev/vda1 isolcpus=1".into(),
        isolated_cpus: vec![1],
        hypervisor: Some("KVM".into()),
        steal_pct: Some(0.4),
        kvm: "nested".into(),
        check: None,
    }
}

fn ramp(n: u32, base: f64, spread: u32) -> Vec<f64> {
    (0..n).map(|i| base + f64::from((i * 7919) % spread)).collect()
}

fn sample_results() -> Results {
    let started = Instant::now();
    let mut r = Results::new(
        "0.1.0",
        Some("0123abcd".into()),
        Some("rtcell bench loopback --out rtcell-results".into()),
        host(),
    );
    r.warnings.push("running under a hypervisor (KVM): maxima include outer preemption".into());

    let mut loopback = Suite::new(
        "loopback",
        json!({"payload_bytes": [0, 64, 1024], "iterations": 10000, "cells": ["thread", "kvm"]}),
    );
    for (cell, base) in [("thread", 80.0), ("kvm", 95.0)] {
        for bytes in [0u32, 64, 1024] {
            loopback.series.push(Series::from_samples(
                "loopback_rtt",
                rtcell_report::labels!("cell" => cell, "bytes" => bytes, "load" => "none"),
                Unit::Ns,
                Kind::RoundTrip,
                ramp(5_000, base + f64::from(bytes) / 10.0, 40),
                u64::from(bytes == 1024),
            ));
        }
    }
    r.suites.push(loopback);

    let mut latency = Suite::new("latency", json!({"interval_us": 1000, "duration_s": 10}));
    latency.series.push(Series::from_samples(
        "timer_latency",
        labels(&[("tool", "rtcell"), ("cell", "thread")]),
        Unit::Us,
        Kind::Latency,
        ramp(10_000, 2.0, 9),
        0,
    ));
    latency.series.push(Series::from_samples(
        "timer_latency",
        labels(&[("tool", "cyclictest")]),
        Unit::Us,
        Kind::Latency,
        vec![],
        0,
    ));
    latency.series.push(Series::from_samples(
        "missed_periods",
        labels(&[]),
        Unit::Count,
        Kind::Count,
        vec![0.0, 0.0, 1.0],
        2,
    ));
    r.suites.push(latency);
    r.finish(started);
    r
}

#[test]
fn serialised_document_follows_the_schema() {
    let r = sample_results();
    let doc: Value = serde_json::from_str(&r.to_json_pretty().unwrap()).unwrap();
    assert_eq!(violations(&doc), Vec::<String>::new());

    assert_eq!(doc["schema"], SCHEMA_ID);
    assert_eq!(doc["incomplete"], false, "always written");
    assert!(doc["duration_s"].is_number());
    assert_eq!(doc["suites"].as_array().unwrap().len(), 2);
    let first = &doc["suites"][0]["series"][0];
    assert_eq!(first["labels"]["bytes"], "0");
    assert_eq!(first["unit"], "ns");
    assert_eq!(first["kind"], "round_trip");
    assert!(first["histogram"]["counts"].as_array().unwrap().len() >= 10);
    assert_eq!(doc["suites"][0]["series"][2]["errors"], 1);
    // A series without samples has no histogram (omitted, not null) and zero, not NaN, figures.
    let empty = &doc["suites"][1]["series"][1];
    assert!(empty.get("histogram").is_none());
    assert_eq!(empty["stats"]["count"], 0);
    assert_eq!(empty["stats"]["mean"], 0.0);

    // An interrupted run is marked, and still valid.
    let mut cut = r.clone();
    cut.incomplete = true;
    let doc: Value = serde_json::from_str(&cut.to_json_pretty().unwrap()).unwrap();
    assert_eq!(doc["incomplete"], true);
    assert_eq!(violations(&doc), Vec::<String>::new());

    // Before `finish` and without a command line: those fields are omitted, not null.
    let bare = Results::new("0.1.0", None, None, host());
    let doc: Value = serde_json::from_str(&bare.to_json_pretty().unwrap()).unwrap();
    assert!(doc.get("duration_s").is_none() && doc.get("command").is_none());
    assert_eq!(doc["rtcell"]["git"], Value::Null);
    assert_eq!(violations(&doc), Vec::<String>::new());
}

#[test]
fn schema_check_rejects_invalid_documents() {
    let good: Value = serde_json::to_value(sample_results()).unwrap();

    let mut bad = good.clone();
    bad["suites"][0]["series"][0]["unit"] = json!("parsecs");
    let v = violations(&bad);
    assert!(v.iter().any(|e| e.contains("parsecs")), "{v:?}");

    let mut bad = good.clone();
    bad["schema"] = json!("rtcell.results/0");
    assert!(!violations(&bad).is_empty());

    let mut bad = good.clone();
    bad["suites"][1]["series"][0].as_object_mut().unwrap().remove("stats");
    assert!(!violations(&bad).is_empty());

    let mut bad = good;
    bad["host"]["kvm"] = json!("maybe");
    assert!(!violations(&bad).is_empty());
}

#[test]
fn documents_that_would_break_the_schema_are_not_written() {
    let dir = tempfile::tempdir().unwrap();

    let mut r = sample_results();
    r.suites[0].series[0].stats.p99 = f64::NAN;
    let e = r.write_to_dir(dir.path()).unwrap_err();
    assert!(matches!(e, ReportError::Invalid { .. }), "{e}");
    assert!(e.to_string().contains("stats.p99"), "{e}");

    let mut r = sample_results();
    r.suites[1].config = json!([1, 2]);
    let e = r.write_to_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("\"latency\"") && e.contains("object"), "{e}");

    let mut r = sample_results();
    r.host.preempt = "PREEMPT_RT".into();
    let e = r.write_to_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("host.preempt"), "{e}");

    assert!(!dir.path().join("results.json").exists());
}

#[test]
fn write_then_load_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/run-1");
    let r = sample_results();
    let path = r.write_to_dir(&out).unwrap();
    assert_eq!(path, out.join("results.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\n  \"schema\""), "pretty-printed");
    assert_eq!(Results::load(&path).unwrap(), r);

    // Overwriting replaces the document whole and leaves no temporary file behind.
    let mut second = r.clone();
    second.incomplete = true;
    second.write_to_dir(&out).unwrap();
    assert_eq!(Results::load(&path).unwrap(), second);
    let names: Vec<_> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, ["results.json"]);
}

/// Writes `doc` as `results.json` in a fresh directory and tries to load it.
fn load_value(doc: &Value) -> (tempfile::TempDir, Result<Results, ReportError>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.json");
    std::fs::write(&path, serde_json::to_string(doc).unwrap()).unwrap();
    let r = Results::load(&path);
    (dir, r)
}

#[test]
fn other_schema_versions_are_refused() {
    let good: Value = serde_json::to_value(sample_results()).unwrap();

    let mut old = good.clone();
    old["schema"] = json!("rtcell.results/0");
    let (_dir, r) = load_value(&old);
    let e = r.unwrap_err();
    assert!(matches!(&e, ReportError::UnsupportedSchema { found: Some(f), .. } if f == "\"rtcell.results/0\""));
    let msg = e.to_string();
    assert!(msg.contains("rtcell.results/0"), "{msg}");
    assert!(msg.contains(SCHEMA_ID), "{msg}");
    assert!(msg.contains("results.json"), "names the file: {msg}");

    let mut none = good.clone();
    none.as_object_mut().unwrap().remove("schema");
    let (_dir, r) = load_value(&none);
    let e = r.unwrap_err();
    assert!(matches!(&e, ReportError::UnsupportedSchema { found: None, .. }));
    let msg = e.to_string();
    assert!(msg.contains("no `schema`") && msg.contains(SCHEMA_ID), "{msg}");

    let mut numeric = good.clone();
    numeric["schema"] = json!(1);
    let (_dir, r) = load_value(&numeric);
    assert!(r.unwrap_err().to_string().contains("schema 1"));

    // Right id, wrong content: refused as malformed, naming the field.
    let mut broken = good;
    broken["suites"][0]["series"][0]["unit"] = json!("parsecs");
    let (_dir, r) = load_value(&broken);
    let e = r.unwrap_err();
    assert!(matches!(e, ReportError::Malformed { .. }), "{e}");
    assert!(e.to_string().contains("parsecs"), "{e}");
}

#[test]
fn unreadable_files_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope/results.json");
    let e = Results::load(&missing).unwrap_err().to_string();
    assert!(e.contains("read the results file") && e.contains("nope"), "{e}");

    let truncated = dir.path().join("results.json");
    std::fs::write(&truncated, "{\"schema\": \"rtcell.results/1\", \"suites\": [").unwrap();
    let e = Results::load(&truncated).unwrap_err();
    assert!(matches!(e, ReportError::NotJson { .. }), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");
}

#[test]
fn stats_of_empty_series_are_zero_not_nan() {
    let s = Series::from_samples("x", labels(&[]), Unit::Ns, Kind::OneWay, vec![], 0);
    assert_eq!(s.stats, Stats::default());
}
