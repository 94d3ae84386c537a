//! End-to-end: the `rtcell` binary as a user runs it.

mod common;

use common::*;

#[test]
fn loopback_writes_schema_valid_results_with_one_series_per_size_and_cell() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o =
        run(&["bench", "loopback", "--iterations", "1000", "--sizes", "0,1,64,1024", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "loopback failed: {}", text(&o));
    let doc = valid_results(&out);
    assert_eq!(doc["suites"][0]["suite"], "loopback");
    assert_eq!(doc["incomplete"], false);
    let rtt: Vec<_> = series(&doc).into_iter().filter(|s| s["name"] == "loopback_rtt").collect();
    // The default (`--cell auto`) adds a kvm cell wherever KVM works; CI has it.
    let mut transports = vec![("thread", "ring"), ("process", "ring"), ("thread", "pipe")];
    if rtcell_kvm::kvm_status().is_usable() {
        transports.push(("kvm", "ring"));
    }
    for &transport in &transports {
        for size in ["0", "1", "64", "1024"] {
            let s = rtt
                .iter()
                .find(|s| {
                    s["labels"]["cell"] == transport.0
                        && s["labels"]["transport"] == transport.1
                        && s["labels"]["bytes"] == size
                })
                .unwrap_or_else(|| panic!("no series for {transport:?} {size} B"));
            assert_eq!(s["stats"]["count"], 1000);
            assert_eq!(s["errors"], 0);
            assert_eq!(s["unit"], "us");
            assert_eq!(s["kind"], "round_trip");
            let st = &s["stats"];
            assert!(st["min"].as_f64().unwrap() <= st["median"].as_f64().unwrap());
            assert!(st["median"].as_f64().unwrap() <= st["max"].as_f64().unwrap());
        }
    }
    assert_eq!(rtt.len(), 4 * transports.len());
    // The human table says what the figures are.
    let t = text(&o);
    assert!(t.contains("Loopback round trip: thread cell"), "{t}");
    assert!(t.contains("us, round trip"), "{t}");
    assert!(t.contains("Jailhouse A7"), "{t}");
    assert!(t.contains("c2c floor"), "{t}");
}

#[test]
fn loopback_with_futex_notify_and_memcpy_load() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = run(&[
        "bench",
        "loopback",
        "--iterations",
        "500",
        "--sizes",
        "0,256",
        "--cell",
        "thread",
        "--notify",
        "poll,futex",
        "--load",
        "memcpy",
        "--no-baseline",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "loopback failed: {}", text(&o));
    let doc = valid_results(&out);
    let rtt: Vec<_> = series(&doc).into_iter().filter(|s| s["name"] == "loopback_rtt").collect();
    assert_eq!(rtt.len(), 4);
    assert!(rtt.iter().any(|s| s["labels"]["notify"] == "futex"));
    assert!(rtt.iter().all(|s| s["labels"]["load"] == "memcpy" && s["errors"] == 0));
    assert!(doc["suites"][0]["config"]["load_bytes_per_s"].as_f64().unwrap() > 0.0, "the load did not run");
}

#[test]
fn c2c_writes_schema_valid_results() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c2c");
    let o = run(&["bench", "c2c", "--samples", "2000", "--quick", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "c2c failed: {}", text(&o));
    let doc = valid_results(&out);
    let s = series(&doc);
    assert!(s.iter().any(|s| s["name"] == "c2c_round_trip" && s["stats"]["count"] == 2000));
    assert!(s.iter().any(|s| s["name"] == "c2c_one_way" && s["kind"] == "one_way"));
}

#[test]
fn a_reader_that_goes_away_neither_stops_a_run_nor_loses_its_results() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c2c");
    let mut child = rtcell()
        .args(["bench", "c2c", "--samples", "2000", "--quick", "--out", out.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the first line (`rtcell bench c2c | head -0`).
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "a closed stdout is not a crash: {err}");
    assert!(o.status.success(), "the run ends as it would have: {err}");
    let doc = valid_results(&out);
    assert!(series(&doc).iter().any(|s| s["name"] == "c2c_round_trip" && s["stats"]["count"] == 2000));
}

#[test]
fn output_that_cannot_be_written_is_an_error_not_a_success() {
    let home = tempfile::tempdir().unwrap();
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    // `rtcell history > /dev/full`: the list cannot be written (no space left on the device).
    let o = rtcell().env("RTCELL_HOME", home.path()).arg("history").stdout(full).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "a cut output is not passed off as complete: {err}");
    assert!(err.contains("writing to standard output"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn refused(args: &[&str], needle: &str) {
    let o = run(args);
    assert_eq!(o.status.code(), Some(2), "{args:?} should exit 2: {}", text(&o));
    let t = text(&o);
    assert!(t.contains(needle), "{args:?}: message should mention {needle:?}: {t}");
}

#[test]
fn bad_input_is_refused_with_exit_2_and_a_fix() {
    refused(&["bench", "loopback", "--sizes", "0,70000"], "above the maximum frame");
    refused(&["bench", "loopback", "--cpu", "4096"], "does not exist");
    refused(&["bench", "loopback", "--cpu", "1", "--master-cpu", "1"], "a CPU of its own");
    refused(&["bench", "loopback", "--iterations", "0"], "at least 1");
    refused(&["bench", "loopback", "--cell", "vm"], "unknown cell kind");
    refused(&["bench", "loopback", "--notify", "sleep"], "unknown notify mode");
    refused(&["bench", "loopback", "--load", "hackbench"], "unknown load");
    refused(&["bench", "loopback", "--sizes", "abc"], "invalid");
    refused(&["bench", "c2c", "--cpus", "1,1"], "two different CPUs");
    refused(&["bench", "nosuch"], "unrecognized subcommand");
}

#[test]
fn existing_results_are_never_overwritten() {
    // Refused before any cell starts, but a held cell CPU could be named first: hold it like the runs do.
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("results.json"), "precious").unwrap();
    refused(&["bench", "c2c", "--samples", "10", "--out", dir.path().to_str().unwrap()], "already holds");
    assert_eq!(std::fs::read_to_string(dir.path().join("results.json")).unwrap(), "precious");
}

#[test]
fn ctrl_c_stops_cleanly_and_keeps_what_was_measured() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Interrupted 1.5 s after the measurement starts (not after the process starts: calibration and the
    // c2c floor come first and take longer on a loaded machine).
    let (code, t) = interrupt_when(
        rtcell()
            .args(["bench", "loopback", "--iterations", "100000000", "--sizes", "0", "--cell", "thread", "--out"])
            .arg(&out),
        |l| l.starts_with("loopback: thread cell") && pause(1500),
        libc::SIGINT,
    );
    assert_eq!(code, Some(130), "{t}");
    let doc = valid_results(&out);
    assert_eq!(doc["incomplete"], true);
    let rtt: Vec<_> = series(&doc).into_iter().filter(|s| s["name"] == "loopback_rtt").collect();
    assert_eq!(rtt.len(), 1);
    assert!(rtt[0]["stats"]["count"].as_u64().unwrap() > 0);
    assert_eq!(rtt[0]["errors"], 0);
}

#[test]
fn check_reports_verdicts_as_json() {
    let o = run(&["check", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let verdicts = doc["verdicts"].as_array().unwrap();
    assert!(verdicts.iter().any(|v| v["item"] == "rt throttling"));
    for v in verdicts {
        assert!(["ok", "warn", "bad"].contains(&v["level"].as_str().unwrap()), "{v}");
    }
    assert!(doc["host"]["cpus"].as_u64().unwrap() >= 1);
}

#[test]
fn help_has_examples() {
    for args in [&["--help"][..], &["bench", "loopback", "--help"], &["bench", "c2c", "--help"], &["check", "--help"]] {
        let o = run(args);
        assert!(o.status.success());
        assert!(text(&o).contains("Examples:"), "{args:?}");
    }
}

/// Children of `pid` (from /proc).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
    }
    out
}

#[test]
fn a_process_cell_killed_mid_run_is_reported_and_the_measured_part_kept() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let child = rtcell()
        .args([
            "bench",
            "loopback",
            "--iterations",
            "100000000",
            "--sizes",
            "0,64",
            "--cell",
            "process",
            "--no-baseline",
            "--out",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the cell process to appear, let it run a little, then kill it.
    let t0 = std::time::Instant::now();
    let cell_pid = loop {
        if let Some(&p) = children(child.id()).first() {
            break p;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "no cell process appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: killing the cell process of the run we started.
    unsafe { libc::kill(cell_pid as i32, libc::SIGKILL) };
    let o = child.wait_with_output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("killed by signal 9 (SIGKILL)"), "{t}");
    assert!(t.contains("echo-process"), "names the cell: {t}");
    let doc = valid_results(&out);
    assert_eq!(doc["incomplete"], true);
    assert!(doc["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("SIGKILL")));
    // Nothing left behind: the cell process is gone.
    assert!(
        !std::path::Path::new(&format!("/proc/{cell_pid}/cmdline")).exists()
            || std::fs::read_to_string(format!("/proc/{cell_pid}/cmdline")).unwrap_or_default().is_empty()
    );
}
