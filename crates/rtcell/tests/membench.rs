//! End-to-end: `rtcell bench membench` (seed 004 Fig. 5). Structure and labels are checked, never timings.

mod common;

use common::*;

/// Interferer counts `--interferers 0,N` means on this machine.
fn interferer_counts() -> Vec<usize> {
    let others = rtcell_host::cpu::online_cpus().unwrap().len() - 1;
    if others == 0 { vec![0] } else { vec![0, others] }
}

/// The last online CPU: membench's default cell CPU.
fn cell_cpu() -> usize {
    *rtcell_host::cpu::online_cpus().unwrap().last().unwrap()
}

/// (name, size in bytes) of the data and unified caches of `cpu`, read from sysfs here, independently of
/// rtcell, smallest first.
fn sysfs_caches(cpu: usize) -> Vec<(String, u64)> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cache");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else { return out };
    for e in entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("index")) {
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).unwrap().trim().to_string();
        let (level, kind, size) = (read("level"), read("type"), read("size"));
        let kib: u64 = size.trim_end_matches('K').parse().expect("sysfs cache sizes are in K");
        match kind.as_str() {
            "Data" => out.push((format!("L{level}d"), kib << 10)),
            "Unified" => out.push((format!("L{level}"), kib << 10)),
            _ => {}
        }
    }
    out.sort_by_key(|c| c.1);
    out
}

/// A numeric label of a series.
fn label_num(s: &serde_json::Value, key: &str) -> u64 {
    s["labels"][key].as_str().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("label {key} of {s}"))
}

/// The smallest cache of `caches` holding `bytes`, as rtcell must name it.
fn holding(caches: &[(String, u64)], bytes: u64) -> String {
    caches.iter().find(|c| c.1 >= bytes).map_or("DRAM".to_string(), |c| c.0.clone())
}

#[test]
fn a_tiny_run_has_a_series_per_size_pattern_and_interferer_count_labelled_from_sysfs() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let sizes = [1u64 << 10, 16 << 10, 256 << 10, 4 << 20];
    let o =
        run(&["bench", "membench", "--sizes", "1K,16K,256K,4M", "--accesses", "8192", "--out", out.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "membench failed: {t}");
    let doc = valid_results(&out);
    assert_eq!(doc["suites"][0]["suite"], "membench");
    assert_eq!(doc["incomplete"], false);
    let cpu = cell_cpu();
    let caches = sysfs_caches(cpu);
    let names: Vec<&str> = caches.iter().map(|c| c.0.as_str()).chain(["DRAM"]).collect();
    let all = series(&doc);
    let counts = interferer_counts();
    assert_eq!(all.len(), sizes.len() * 2 * counts.len());
    for k in &counts {
        for pattern in ["seq", "random"] {
            for &bytes in &sizes {
                let matching: Vec<_> = all
                    .iter()
                    .filter(|s| {
                        s["labels"]["pattern"] == pattern
                            && label_num(s, "interferers") == *k as u64
                            && label_num(s, "wss_bytes") == bytes
                    })
                    .collect();
                assert_eq!(matching.len(), 1, "{pattern}, {k} interferers, {bytes} B");
                let s = matching[0];
                assert_eq!(s["name"], "membench_read_latency");
                assert_eq!((s["unit"].as_str(), s["kind"].as_str()), (Some("ns"), Some("latency")));
                assert_eq!(s["labels"]["cpu"], cpu.to_string());
                assert_eq!(s["labels"]["load"], "none");
                // At least 8192 reads, and at least one read of every 64-byte line, in batches of 4096.
                let reads = 8192u64.max(bytes / 64).div_ceil(4096) * 4096;
                assert_eq!(s["labels"]["accesses"], reads.to_string());
                assert_eq!(s["labels"]["accesses_per_sample"], "4096");
                assert_eq!(s["stats"]["count"], reads / 4096);
                assert_eq!(s["errors"], 0);
                let st = &s["stats"];
                assert!(st["min"].as_f64().unwrap() > 0.0);
                assert!(st["min"].as_f64().unwrap() <= st["median"].as_f64().unwrap());
                assert!(st["median"].as_f64().unwrap() <= st["max"].as_f64().unwrap());
                // Cache names come from sysfs: where the set fits, and the plateau's name (or none).
                assert_eq!(s["labels"]["fits"], holding(&caches, bytes), "{s}");
                let plateau = s["labels"]["plateau"].as_str().unwrap();
                if caches.is_empty() {
                    assert!(plateau == "transition" || plateau.starts_with("plateau "), "{plateau}");
                } else {
                    assert!(
                        plateau == "transition" || plateau.split('-').all(|part| names.contains(&part)),
                        "plateau {plateau:?} is not named after a cache of {names:?}"
                    );
                }
            }
        }
    }
    let config = &doc["suites"][0]["config"];
    let config_caches: Vec<&str> = config["caches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] != "Instruction")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = caches.iter().map(|c| c.0.as_str()).collect();
    let mut got = config_caches.clone();
    expected.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, expected, "the caches of CPU {cpu} as sysfs lists them");
    for p in config["plateaus"].as_array().unwrap() {
        let label = p["label"].as_str().unwrap();
        let members = all.iter().filter(|s| {
            s["labels"]["pattern"] == p["pattern"]
                && Some(label_num(s, "interferers")) == p["interferers"].as_u64()
                && s["labels"]["plateau"] == label
        });
        assert!(members.count() >= 2, "a plateau spans at least two sizes: {p}");
    }
    assert!(config["huge_pages"]["buffer_bytes"].as_u64().unwrap() >= 4 << 20);
    // The printed report says what its figures are and under which conditions.
    for needle in ["ns per read", "median", "huge pages", "Plateaus", "cell CPU", "SCHED_FIFO 90", "load none"] {
        assert!(t.contains(needle), "no {needle:?} in: {t}");
    }
    let last = format!("membench [{:>3}/{}]", all.len(), all.len());
    assert!(String::from_utf8_lossy(&o.stderr).contains(&last), "progress on stderr: {t}");
}

#[test]
fn ctrl_c_keeps_what_was_measured() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Interrupted once the first size is measured (its progress line): the second size (a billion reads)
    // is still being prepared or measured then.
    let (code, t) = interrupt_when(
        rtcell()
            .args(["bench", "membench", "--sizes", "32K,64M", "--pattern", "random", "--interferers", "0"])
            .args(["--accesses", "1000000000", "--out"])
            .arg(&out),
        |l| l.contains("membench [  1/2]"),
        libc::SIGINT,
    );
    assert_eq!(code, Some(130), "{t}");
    let doc = valid_results(&out);
    assert_eq!(doc["incomplete"], true);
    let s = series(&doc);
    assert!(!s.is_empty() && s.len() <= 2, "{s:?}");
    // What was measured is kept, and no series is stored without a sample.
    assert!(s.iter().any(|s| label_num(s, "wss_bytes") == 32 << 10), "{s:?}");
    assert!(s.iter().all(|s| s["stats"]["count"].as_u64().unwrap() > 0), "{s:?}");
}

fn refused(args: &[&str], needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = rtcell().args(["bench", "membench"]).args(args).arg("--out").arg(&out).output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
    assert!(t.contains(needle), "{args:?}: expected {needle:?} in: {t}");
    assert!(!out.exists(), "{args:?}: nothing may start");
}

#[test]
fn bad_input_is_refused_with_exit_2_and_a_fix() {
    refused(&["--sizes", "0"], "at least one 64-byte line");
    refused(&["--sizes", "4Q"], "e.g. 4K, 1M, 96M");
    refused(&["--sizes", "2G"], "above the largest working set");
    refused(&["--min", "1M", "--max", "4K"], "give the smaller size to --min");
    refused(&["--per-octave", "0"], "1 to 16 sizes per doubling");
    refused(&["--pattern", "zigzag"], "use seq, random");
    refused(&["--interferers", "64"], "use 0 to");
    refused(&["--interferers", "some"], "such as 0,1 or N");
    refused(&["--accesses", "0"], "at least 1 timed read");
    refused(&["--cpu", "4096"], "does not exist or is offline");
    refused(&["--load", "hell"], "none, memcpy, stress-ng or dohell");
    refused(&["--sizes", "4K", "--per-octave", "2"], "cannot be used with");
}

#[test]
fn help_has_examples() {
    let o = run(&["bench", "membench", "--help"]);
    assert!(o.status.success());
    let t = text(&o);
    assert!(t.contains("Examples:") && t.contains("rtcell bench membench --quick"), "{t}");
}
