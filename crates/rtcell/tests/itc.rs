//! End-to-end: `rtcell bench itc` as a user runs it. Every mechanism briefly, on one CPU and across two,
//! back to back and periodic; every reply checked; bad input refused with exit status 2.

mod common;

use common::*;

const ALL: [&str; 12] = [
    "pipe",
    "fifo",
    "mqueue",
    "unix-stream",
    "unix-dgram",
    "semaphore",
    "mutex",
    "condvar",
    "futex",
    "eventfd",
    "ring-futex",
    "ring-poll",
];

/// Cross-CPU needs two online CPUs: always there in CI; elsewhere the test skips, saying why.
fn two_cpus() -> bool {
    let n = rtcell_host::cpu::online_cpus().map(|c| c.len()).unwrap_or(0);
    if n >= 2 {
        return true;
    }
    rtcell_testkit::skip(&format!("the cross-CPU placement needs two online CPUs, this machine has {n}"));
    false
}

#[test]
fn every_mechanism_both_placements_and_triggers_yield_checked_series() {
    if !two_cpus() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("itc");
    let o = run(&[
        "bench",
        "itc",
        "--sizes",
        "4,3072",
        "--iterations",
        "200",
        "--periodic-iterations",
        "5",
        "--period-us",
        "1000",
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "itc failed: {t}");
    let doc = valid_results(&out);
    assert_eq!(doc["suites"][0]["suite"], "itc");
    assert_eq!(doc["incomplete"], false);
    let rtt: Vec<_> = series(&doc).into_iter().filter(|s| s["name"] == "itc_rtt").collect();
    let mut expected = 0;
    for placement in ["same-cpu", "cross-cpu"] {
        for trigger in ["back-to-back", "periodic"] {
            for mechanism in ALL {
                let found: Vec<_> = rtt
                    .iter()
                    .filter(|s| {
                        let l = &s["labels"];
                        l["mechanism"] == mechanism && l["placement"] == placement && l["trigger"] == trigger
                    })
                    .collect();
                if mechanism == "ring-poll" && placement == "same-cpu" {
                    assert!(found.is_empty(), "a polled ring on one CPU must not run");
                    continue;
                }
                for size in ["4", "3072"] {
                    let s = found
                        .iter()
                        .find(|s| s["labels"]["bytes"] == size)
                        .unwrap_or_else(|| panic!("no series for {mechanism} {size} B {placement} {trigger}"));
                    expected += 1;
                    let count = if trigger == "periodic" { 5 } else { 200 };
                    assert_eq!(s["stats"]["count"], count, "{mechanism} {size} B {placement} {trigger}");
                    assert_eq!(s["errors"], 0, "{mechanism} {size} B {placement} {trigger}");
                    assert_eq!(s["unit"], "us");
                    assert_eq!(s["kind"], "round_trip");
                    assert_eq!(s["labels"]["load"], "none");
                    let st = &s["stats"];
                    assert!(st["min"].as_f64().unwrap() > 0.0, "{mechanism}: a round trip takes time");
                    assert!(st["min"].as_f64().unwrap() <= st["median"].as_f64().unwrap());
                    assert!(st["median"].as_f64().unwrap() <= st["p999"].as_f64().unwrap());
                    assert!(st["p999"].as_f64().unwrap() <= st["max"].as_f64().unwrap());
                }
            }
        }
    }
    assert_eq!(rtt.len(), expected);
    let config = &doc["suites"][0]["config"];
    let na = config["not_applicable"].as_array().unwrap();
    assert_eq!(na.len(), 2, "{na:?}");
    assert!(na.iter().all(|n| n["mechanism"] == "ring-poll" && n["placement"] == "same-cpu"));
    assert!(na[0]["reason"].as_str().unwrap().contains("a polled channel needs its own CPU"));
    assert_eq!(config["speed_goal"].as_array().unwrap().len(), 2, "{config}");
    // The output says what the figures are.
    assert!(t.contains("ITC round trip"), "{t}");
    assert!(t.contains("median in us"), "{t}");
    assert!(t.contains("not applicable: a polled channel needs its own CPU"), "{t}");
    assert!(t.contains("best kernel mechanism at 4 B:"), "{t}");
    assert!(t.contains("best kernel mechanism at 3072 B:"), "{t}");
    assert!(t.contains("goal >= 20: met") || t.contains("goal >= 20: missed"), "{t}");
    assert!(t.contains("c2c floor"), "{t}");
}

#[test]
fn one_cpu_alone_runs_same_cpu_only() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("itc");
    let cpu = rtcell_host::cpu::online_cpus().unwrap()[0].to_string();
    let o = run(&[
        "bench",
        "itc",
        "--mechanism",
        "unix-dgram,condvar,ring-poll",
        "--sizes",
        "1,65536",
        "--placement",
        "same-cpu",
        "--trigger",
        "back-to-back",
        "--iterations",
        "50",
        "--cpus",
        &cpu,
        "--load",
        "memcpy",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "itc failed: {}", text(&o));
    let doc = valid_results(&out);
    let rtt: Vec<_> = series(&doc).into_iter().filter(|s| s["name"] == "itc_rtt").collect();
    assert_eq!(rtt.len(), 4);
    assert!(rtt.iter().all(|s| s["errors"] == 0 && s["labels"]["load"] == "memcpy"));
    assert!(rtt.iter().all(|s| s["labels"]["requester_cpu"] == cpu.as_str() && s["labels"]["responder_cpu"] == cpu));
    // No cross-CPU back-to-back cells: the speed goal says it was not measured.
    assert!(text(&o).contains("at 4 B: not measured in this run"), "{}", text(&o));
}

#[test]
fn ctrl_c_stops_a_blocked_exchange_and_keeps_what_was_measured() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("itc");
    // Interrupted 1.5 s after the plan is printed (not after the process starts: calibration comes first).
    let (code, t) = interrupt_when(
        rtcell()
            .args(["bench", "itc", "--mechanism", "mutex", "--sizes", "64", "--trigger", "periodic"])
            .args(["--placement", "same-cpu", "--periodic-iterations", "1000000", "--period-us", "1000", "--out"])
            .arg(&out),
        |l| l.starts_with("itc: 1 mechanisms") && pause(1500),
        libc::SIGINT,
    );
    assert_eq!(code, Some(130), "{t}");
    let doc = valid_results(&out);
    assert_eq!(doc["incomplete"], true);
    let rtt: Vec<_> = series(&doc).into_iter().filter(|s| s["name"] == "itc_rtt").collect();
    assert_eq!(rtt.len(), 1);
    assert!(rtt[0]["stats"]["count"].as_u64().unwrap() > 0);
    assert_eq!(rtt[0]["errors"], 0);
}

fn refused(args: &[&str], needle: &str) {
    let o = run(args);
    assert_eq!(o.status.code(), Some(2), "{args:?} should exit 2: {}", text(&o));
    let t = text(&o);
    assert!(t.contains(needle), "{args:?}: message should mention {needle:?}: {t}");
}

#[test]
fn bad_input_is_refused_with_exit_2_before_anything_starts() {
    refused(&["bench", "itc", "--mechanism", "pipe,carrier-pigeon"], "unknown mechanism \"carrier-pigeon\"");
    refused(&["bench", "itc", "--sizes", "0"], "0 bytes");
    refused(&["bench", "itc", "--sizes", "4,65537"], "above the maximum payload of 65536");
    refused(&["bench", "itc", "--cpus", "4096,0"], "CPU 4096 does not exist");
    refused(&["bench", "itc", "--cpus", "0,4096"], "CPU 4096 does not exist");
    refused(&["bench", "itc", "--cpus", "0,0"], "two different CPUs");
    refused(&["bench", "itc", "--cpus", "0"], "cross-cpu needs a second CPU");
    refused(&["bench", "itc", "--cpus", "0,1,2"], "takes the requester's CPU and the responder's");
    refused(&["bench", "itc", "--placement", "diagonal"], "unknown placement");
    refused(&["bench", "itc", "--trigger", "sometimes"], "unknown trigger");
    refused(&["bench", "itc", "--iterations", "0"], "at least 1");
    refused(&["bench", "itc", "--periodic-iterations", "0"], "at least 1");
    refused(&["bench", "itc", "--period-us", "5"], "from 100 us");
    refused(&["bench", "itc", "--load", "hackbench"], "unknown load");
    refused(&["bench", "itc", "--sizes", "four"], "invalid");
}

#[test]
fn help_has_examples_and_says_how_signals_carry_the_payload() {
    let o = run(&["bench", "itc", "--help"]);
    assert!(o.status.success());
    let t = text(&o);
    assert!(t.contains("Examples:"), "{t}");
    assert!(t.contains("shared buffer"), "{t}");
    assert!(t.contains("round trip"), "{t}");
}
