//! `rtcell bench` with no suite: the README's main command, end to end. It runs the quick selection of
//! every suite (about 80 s here) into one run directory; contents and counts are checked, never timings.

mod common;

use common::*;

#[test]
fn the_default_run_writes_one_directory_with_every_suite_and_its_files() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = run(&["bench", "--out", out.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    // The selection is printed first, then one progress line per suite (standard error is not a terminal).
    assert!(t.contains("rtcell bench: 6 suites"), "{t}");
    for (i, suite) in ["c2c", "loopback", "latency", "control", "itc", "membench"].iter().enumerate() {
        assert!(t.contains(&format!("[{}/6] {suite}: about", i + 1)), "no progress line for {suite}: {t}");
    }
    let doc = valid_results(&out);
    let suites: Vec<&str> = doc["suites"].as_array().unwrap().iter().map(|s| s["suite"].as_str().unwrap()).collect();
    assert_eq!(suites, ["c2c", "loopback", "latency", "control", "itc", "membench"]);
    assert_eq!(doc["incomplete"], false);
    assert!(doc["host"]["check"].is_object(), "the check's verdicts are recorded: {}", doc["host"]);
    // One summary row per series, and a histogram CSV plus a gnuplot plot line for each histogram.
    let all: Vec<&serde_json::Value> =
        doc["suites"].as_array().unwrap().iter().flat_map(|s| s["series"].as_array().unwrap()).collect();
    let n_series = all.len();
    let summary = std::fs::read_to_string(out.join("csv/summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), n_series + 1, "header + a row per series");
    let with_hist = all.iter().filter(|s| s["histogram"]["counts"].as_array().is_some_and(|c| !c.is_empty())).count();
    let gp = std::fs::read_to_string(out.join("plot.gp")).unwrap();
    assert_eq!(gp.matches("\nplot '").count(), with_hist, "{gp}");
    // The latency suite's cyclictest-format files, the page, and the history entry.
    let hist = std::fs::read_to_string(out.join("latency.hist")).unwrap();
    assert!(hist.contains("# Max Latencies:"), "{hist}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for suite in &suites {
        assert!(html.contains(suite), "report.html does not mention {suite}");
    }
    let h = run(&["history", "--json"]);
    assert_eq!(h.status.code(), Some(0), "{}", text(&h));
    assert!(text(&h).contains("membench"), "{}", text(&h));
}

#[test]
fn the_default_run_refuses_a_directory_that_holds_results() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("results.json"), "{}").unwrap();
    let o = run(&["bench", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("already holds a results.json"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(dir.path().join("results.json")).unwrap(), "{}");
}
