//! `rtcell ecat-sim` and `rtcell bench ethercat` end to end: a master finds the simulated devices the
//! command serves, the benchmark runs briefly with every frame accounted for, and nothing is left behind.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

fn root() -> bool {
    // SAFETY: getuid only reads the process's user id.
    let root = unsafe { libc::getuid() } == 0;
    if !root {
        rtcell_testkit::skip("needs root for veth pairs and raw sockets");
    }
    root
}

fn links() -> String {
    let o = std::process::Command::new("ip").args(["-o", "link"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_master_finds_the_devices_ecat_sim_serves_and_the_pair_is_removed_after() {
    if !root() {
        return;
    }
    let mut child = common::rtcell()
        .args(["ecat-sim", "--veth", "rtce2", "--netns", "--devices", "4", "--duration", "30s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(
        line.contains("4 device(s) answering on rtce2-s (namespace rtce2-ns); point the master at rtce2-m"),
        "{line}"
    );
    let mut m = rtcell_ecat::master::Master::bring_up("rtce2-m", Duration::from_millis(200)).expect("bring-up");
    assert_eq!(m.devices(), 4);
    for _ in 0..100 {
        m.cycle().unwrap();
    }
    drop(m);
    // SAFETY: SIGINT to our own child: it stops and reports.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let answered: u64 = out.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(answered > 100, "{out}");
    assert!(!links().contains("rtce2"), "{}", links());
    // Bad options.
    let o = common::run(&["ecat-sim", "--devices", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", common::text(&o));
    for bad in [&["--late-every", "0"][..], &["--late-by-us", "500"], &["--wrong-wkc-every", "x"]] {
        let o = common::run(&[&["ecat-sim", "--veth", "rtce3"][..], bad].concat());
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", common::text(&o));
    }
    assert!(!links().contains("rtce3"), "nothing made on bad options: {}", links());
    // Without CAP_NET_RAW (as an unprivileged user): refused with the reason and the fix.
    let o = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(env!("CARGO_BIN_EXE_rtcell"))
        .args(["ecat-sim", "--interface", "lo", "--duration", "1s"])
        .env("RTCELL_HOME", "/tmp")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", common::text(&o));
    assert!(common::text(&o).contains("raw sockets need CAP_NET_RAW"), "{}", common::text(&o));
    let o = common::run(&["ecat-sim", "--interface", "rtce-none0", "--duration", "1s"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        common::text(&o).contains("rtce-none0") && common::text(&o).contains("does not exist"),
        "{}",
        common::text(&o)
    );
}

#[test]
fn bench_ethercat_runs_briefly_with_every_frame_accounted() {
    if !root() {
        return;
    }
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ec");
    let child = common::rtcell()
        .args(["bench", "ethercat", "--quick", "--samples", "300", "--rates", "1000,5000", "--duration", "1s"])
        .args(["--load", "memcpy", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pair = format!("rtcb{}-m", child.id());
    let o = child.wait_with_output().unwrap();
    let t = common::text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("master round trip / raw ping-pong (medians)"), "{t}");
    assert!(t.contains("ERIKA on Xen"), "the seeds' figures beside ours: {t}");
    let doc = common::valid_results(&out);
    let config = &doc["suites"][0]["config"];
    assert_eq!(config["load"], "memcpy");
    assert!(config["load_bytes_per_s"].as_f64().unwrap() > 0.0, "the load ran: {config}");
    assert!(t.contains("Load: memcpy"), "{t}");
    // Round trips timed both ways of waiting, each against its floor.
    assert_eq!(config["ratio_master_over_floor"].as_array().map(Vec::len), Some(2), "{config}");
    assert!(t.contains("both sleeping") && t.contains("both busy-polled"), "{t}");
    let frames = config["frames"].as_array().unwrap().clone();
    assert_eq!(frames.len(), 2);
    for f in frames {
        let (s, r, l) = (f["sent"].as_u64().unwrap(), f["received"].as_u64().unwrap(), f["lost"].as_u64().unwrap());
        assert_eq!(s, r + l, "every frame accounted for: {f}");
        assert!(s > 0);
    }
    let names: Vec<String> = common::series(&doc).iter().map(|s| s["name"].as_str().unwrap().to_string()).collect();
    for want in
        ["raw_pingpong_rtt", "ethercat_rtt", "ethercat_task_activation", "ethercat_task_cycle", "ethercat_max_rate"]
    {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    assert!(!links().contains(&pair), "the benchmark's veth pair {pair} is gone: {}", links());
}

/// `examples/plc-ethercat.toml` for `duration`, with `extra` appended to its `[ethercat]` table.
fn plc_ethercat(dir: &std::path::Path, duration: &str, extra: &str) -> (std::process::Output, serde_json::Value) {
    let text = std::fs::read_to_string(common::repo().join("examples/plc-ethercat.toml")).unwrap();
    let mut text = text.replace("[ethercat]\nsimulated = 3\n", &format!("[ethercat]\nsimulated = 3\n{extra}\n"));
    if extra.contains("# no watchdogs") {
        text = text
            .lines()
            .filter(|l| !l.starts_with("watchdog = ") && !l.starts_with("safe_value"))
            .collect::<Vec<_>>()
            .join("\n");
    }
    let file = dir.join("plc-ethercat.toml");
    std::fs::write(&file, text).unwrap();
    let out = dir.join("out");
    let o = common::run(&["run", file.to_str().unwrap(), "--duration", duration, "--out", out.to_str().unwrap()]);
    assert!(out.join("results.json").exists(), "no results.json: {}", common::text(&o));
    let doc = common::valid_results(&out);
    (o, doc)
}

#[test]
fn the_plc_example_exchanges_frames_with_the_simulated_segment() {
    if !root() {
        return;
    }
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    // The master busy-polls for its replies here; the drop-out test below has it sleeping. This test is
    // about the exchange, not the deadlines: without the example's watchdogs (and safe values), which a loaded or
    // preempted host can trip (580 ms of CPU 1 stolen by the outer hypervisor in one 3 s run did).
    let (o, doc) = plc_ethercat(dir.path(), "3s", "busy_poll = true\n# no watchdogs");
    let t = common::text(&o);
    assert!(o.status.success(), "{t}");
    let task = common::outcome_task(&doc, "ethercat");
    assert_eq!(task["state"], "done", "{t}");
    let m = &task["messages"];
    let (sent, received, lost) =
        (m["sent"].as_u64().unwrap(), m["received"].as_u64().unwrap(), m["lost"].as_u64().unwrap());
    // A frame every 1 ms for 3 s, less the releases a loaded host makes the task skip.
    assert!(sent > 1000, "{m}");
    assert_eq!(sent, received + lost, "every frame accounted for: {m}");
    // The same counts in the printed report.
    assert!(t.contains("EtherCAT task \"ethercat\" (a simulated segment of 3 device(s) on "), "{t}");
    assert!(
        t.contains(&format!("master busy-polling for replies): {sent} frames sent, {received} received, {lost} lost")),
        "{t}"
    );
    // The inputs: each device echoes the PLC program's output (its cycle count, mod 2^16), and the ramp.
    let inputs: Vec<f64> = doc["suites"][0]["config"]["outcome"]["signals"]["ecat_in"]
        .as_array()
        .unwrap_or_else(|| panic!("ecat_in in the outcome: {}", doc["suites"][0]["config"]["outcome"]))
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let plc_out = doc["suites"][0]["config"]["outcome"]["signals"]["plc_out"][0].as_f64().unwrap();
    assert_eq!(inputs.len(), 6, "{inputs:?}");
    for d in 0..3 {
        // The two tasks end a few cycles apart: the last echo is of an output a little before the last.
        let echo = inputs[2 * d];
        assert!(echo > 0.0 && (plc_out % 65536.0 - echo).abs() <= 50.0, "device {d} echoes {echo} of {plc_out}");
        assert!((0.0..32768.0).contains(&inputs[2 * d + 1]), "analog {}", inputs[2 * d + 1]);
    }
    assert!(!links().contains("rtcs"), "the run's veth pair is gone: {}", links());
}

#[test]
fn a_segment_lost_mid_run_trips_the_watchdog_and_writes_the_safe_value() {
    if !root() {
        return;
    }
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    // Bring-up takes some hundred frames; the segment disappears after 3,000 (about 2 s of cycles).
    let (o, doc) = plc_ethercat(dir.path(), "6s", "drop_after = 3000");
    let t = common::text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    let task = common::outcome_task(&doc, "ethercat");
    assert_eq!(task["state"], "tripped", "{t}");
    assert!(task["messages"]["lost"].as_u64().unwrap() >= 20, "{}", task["messages"]);
    assert!(t.contains("master sleeping for replies): "), "{t}");
    assert!(t.contains("its output \"ecat_in\" holds [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]"), "{t}");
}
