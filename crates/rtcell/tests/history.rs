//! End-to-end: every run recorded in the history, `rtcell history` and `rtcell compare` as a user runs
//! them, and files that are not a history left alone. Each test has a history of its own (RTCELL_HOME
//! or --history in a temporary directory).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use rtcell_report::history::{History, Store};
use rtcell_report::{HostFacts, Kind, Results, Series, Stats, Suite, ToolInfo, Unit, labels};

/// rtcell with its history in `home`.
fn at(home: &Path, args: &[&str]) -> Output {
    rtcell().env("RTCELL_HOME", home).args(args).output().expect("rtcell runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// The id in "history: run ID recorded in PATH".
fn recorded_id(o: &Output) -> String {
    let out = stdout(o);
    let line =
        out.lines().find(|l| l.starts_with("history: run ")).unwrap_or_else(|| panic!("not recorded: {}", text(o)));
    line.split_whitespace().nth(2).unwrap().to_owned()
}

fn host() -> HostFacts {
    // From JSON, as a results document holds it: fields added later with defaults need no change here.
    serde_json::from_value(serde_json::json!({
        "cpu_model": "Test CPU", "cpus": 2, "tsc_khz": 2_000_000, "kernel": "6.1.0-test", "preempt": "none",
        "cmdline": "", "isolated_cpus": [], "hypervisor": null, "steal_pct": null, "kvm": "absent"
    }))
    .unwrap()
}

fn series(name: &str, labels: BTreeMap<String, String>, unit: Unit, kind: Kind, median: f64) -> Series {
    let stats = Stats {
        count: 10_000,
        min: median / 2.0,
        mean: median,
        median,
        p90: median,
        p99: median,
        p999: median,
        p9999: median,
        max: median,
        stddev: 0.0,
    };
    Series { name: name.into(), labels, unit, kind, stats, histogram: None, errors: 0 }
}

fn doc(started_at: &str, suites: Vec<Suite>) -> Results {
    Results {
        schema: rtcell_report::SCHEMA_ID.into(),
        rtcell: ToolInfo { version: "0.1.0".into(), git: None },
        started_at: started_at.into(),
        duration_s: Some(1.0),
        command: Some("rtcell bench synthetic".into()),
        host: host(),
        warnings: vec![],
        suites,
        incomplete: false,
    }
}

fn suite(name: &str, series: Vec<Series>) -> Suite {
    Suite { suite: name.into(), config: serde_json::json!({}), series }
}

/// Two runs whose medians move by known amounts: latency +10% (worse), round trip -10% (better), exec
/// time +3% (noise), throughput +20% (better), a count -20% (no direction: changed), one series dropped
/// and one new. Bare metal, so maxima are judged; they move with the medians.
fn known_pair() -> (Results, Results) {
    let l = || labels!("cell" => "thread", "bytes" => 0);
    let set = |lat, rtt, exec, tp, n, extra: &str| {
        vec![
            series("lat", l(), Unit::Us, Kind::Latency, lat),
            series("rtt", l(), Unit::Us, Kind::RoundTrip, rtt),
            series("exec", l(), Unit::Us, Kind::ExecTime, exec),
            series("tp", l(), Unit::BytesPerS, Kind::Throughput, tp),
            series("n", l(), Unit::Count, Kind::Count, n),
            series(extra, l(), Unit::Us, Kind::Latency, 1.0),
        ]
    };
    (
        doc("2026-03-01T00:00:00.000Z", vec![suite("s", set(100.0, 100.0, 100.0, 100.0, 100.0, "only_a"))]),
        doc("2026-03-02T00:00:00.000Z", vec![suite("s", set(110.0, 90.0, 103.0, 120.0, 80.0, "only_b"))]),
    )
}

#[test]
fn bench_and_run_are_recorded_then_listed_and_compared() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let mut ids = Vec::new();
    for out in [&a, &b] {
        let o = at(&home, &["bench", "c2c", "--samples", "2000", "--quick", "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        ids.push(recorded_id(&o));
    }
    let (id_a, id_b) = (&ids[0], &ids[1]);

    let list = json(&at(&home, &["history", "--json"]));
    assert_eq!(list["total"], 2);
    let runs = list["runs"].as_array().unwrap();
    assert_eq!(runs[0]["id"], id_b.as_str(), "most recent first");
    assert_eq!(runs[1]["id"], id_a.as_str());
    assert_eq!(runs[0]["suites"], serde_json::json!(["c2c"]));
    assert_eq!(runs[0]["headline"][0]["series"], "c2c_round_trip");
    assert!(runs[0]["results_path"].as_str().unwrap().ends_with("b/results.json"), "{}", runs[0]);
    assert!(runs[0]["command"].as_str().unwrap().contains("bench c2c"));

    let o = at(&home, &["history"]);
    assert!(o.status.success(), "{}", text(&o));
    let t = stdout(&o);
    assert!(t.contains(id_a.as_str()) && t.contains(id_b.as_str()) && t.contains("c2c rtt"), "{t}");
    assert!(t.contains("2 of 2 run(s)"), "{t}");
    assert!(stdout(&at(&home, &["history", "--limit", "1"])).contains("1 of 2 run(s)"));

    let o = at(&home, &["compare", "latest~1", "latest"]);
    assert!(o.status.success(), "{}", text(&o));
    let t = stdout(&o);
    assert!(t.contains(&format!("A: {id_a}")) && t.contains(&format!("B: {id_b}")), "{t}");
    assert!(t.contains("noise: median ±5%") && t.contains("summary: "), "{t}");

    // The stored document is the results.json byte for byte, and outlives the run directory.
    let o = at(&home, &["history", "--document", id_b]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(o.stdout, std::fs::read(b.join("results.json")).unwrap());
    std::fs::remove_dir_all(&b).unwrap();
    // An id against a results.json path.
    let c = json(&at(&home, &["compare", id_b, a.to_str().unwrap(), "--json"]));
    assert_eq!(c["series"].as_array().unwrap().len(), 2);
    assert_eq!(c["summary"]["added"], 0);
    assert_eq!(c["summary"]["removed"], 0);
    assert_eq!(c["a"]["name"], id_b.as_str());

    // `rtcell run` records its scenario too, here in a file given with --history.
    let file = dir.path().join("runs.sqlite");
    let plc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/plc.toml");
    let out = dir.path().join("plc");
    let o = rtcell()
        .args(["run", plc.to_str().unwrap(), "--duration", "1s", "--out", out.to_str().unwrap()])
        .args(["--history", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let id = recorded_id(&o);
    let list = json(&rtcell().args(["history", "--json", "--history", file.to_str().unwrap()]).output().unwrap());
    assert_eq!(list["total"], 1);
    assert_eq!(list["runs"][0]["id"], id.as_str());
    assert_eq!(list["runs"][0]["suites"], serde_json::json!(["scenario"]));
    assert_eq!(list["runs"][0]["headline"][0]["series"], "task_latency");
    assert_eq!(json(&at(&home, &["history", "--json"]))["total"], 2, "--history kept it out of RTCELL_HOME");
}

#[test]
fn compare_two_files_with_known_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = known_pair();
    let pa = a.write_to_dir(&dir.path().join("a")).unwrap();
    b.write_to_dir(&dir.path().join("b")).unwrap();
    // Two files need no history: none is created.
    let home = dir.path().join("no-home");
    let args = |json: bool| {
        let mut v = vec!["compare".to_owned(), pa.display().to_string(), dir.path().join("b").display().to_string()];
        if json {
            v.push("--json".into());
        }
        v
    };
    let o = rtcell().env("RTCELL_HOME", &home).args(args(true)).output().unwrap();
    let c = json(&o);
    let verdicts: Vec<(String, String)> = c["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s["verdict"].as_str().unwrap().to_owned()))
        .collect();
    let want = [("lat", "worse"), ("rtt", "better"), ("exec", "within_noise"), ("tp", "better"), ("n", "changed")];
    assert_eq!(verdicts, want.map(|(n, v)| (n.to_owned(), v.to_owned())));
    assert_eq!(c["series"][0]["median"]["threshold"], 0.05);
    assert_eq!(c["max_judged"], true, "both runs on bare metal");
    assert_eq!(c["added"][0]["name"], "only_b");
    assert_eq!(c["removed"][0]["name"], "only_a");
    assert!(!home.exists());

    let o = rtcell().env("RTCELL_HOME", &home).args(args(false)).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let t = stdout(&o);
    assert!(t.contains("worse (median)") && t.contains("better (median, p99.9)"), "{t}");
    assert!(t.contains("+10.0%") && t.contains("-10.0%"), "{t}");
    assert!(t.contains("summary: 2 better, 1 worse, 1 within noise, 1 changed, 0 no data, 1 added, 1 removed"), "{t}");
    assert!(t.contains("max ±25% (both runs on bare metal)"), "{t}");
}

#[test]
fn bad_run_names_and_documents_exit_2_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mut h = History::open(&home.join("history.sqlite")).unwrap();
    let first = h.record(&doc("2026-01-01T00:00:00.000Z", vec![]), None).unwrap();
    let x = h.record(&doc("2026-02-03T04:05:06.000Z", vec![]), None).unwrap();
    let y = h.record(&doc("2026-02-03T04:05:06.200Z", vec![]), None).unwrap();
    drop(h);
    let mut old = serde_json::to_value(doc("2026-01-01T00:00:00.000Z", vec![])).unwrap();
    old["schema"] = "rtcell.results/0".into();
    let old_path = dir.path().join("old.json");
    std::fs::write(&old_path, old.to_string()).unwrap();
    let missing = dir.path().join("missing/results.json");

    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["compare", "20260203-040506", "latest"], vec!["type more of the id", x.as_str(), y.as_str()]),
        (vec!["compare", "2099", "latest"], vec!["no run \"2099\"", "rtcell history"]),
        (vec!["compare", "latest~3", "latest"], vec!["holds 3 run(s)"]),
        (vec!["compare", "latest~x", "latest"], vec!["latest~1"]),
        (vec!["compare", "Not An Id", "latest"], vec!["not a run id"]),
        (vec!["compare", old_path.to_str().unwrap(), "latest"], vec!["rtcell.results/0"]),
        (vec!["compare", missing.to_str().unwrap(), "latest"], vec!["check the path"]),
        (vec!["history", "--document", "2099"], vec!["no run"]),
        (vec!["history", "--limit", "0"], vec!["at least 1"]),
    ];
    for (args, wanted) in cases {
        let o = at(&home, &args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        for w in wanted {
            assert!(t.contains(w), "{args:?}: {w:?} not in {t}");
        }
    }
    // A unique prefix and latest~N do name runs.
    let c = json(&at(&home, &["compare", "20260101", "latest~1", "--json"]));
    assert_eq!(c["a"]["name"], first.as_str());
    assert!([x.as_str(), y.as_str()].contains(&c["b"]["name"].as_str().unwrap()));
    assert_eq!(json(&at(&home, &["history", "--json", "--limit", "2"]))["runs"].as_array().unwrap().len(), 2);
}

#[test]
fn the_history_is_found_by_rtcell_home_then_xdg_data_home_then_home() {
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| dir.path().join(p);
    let where_ = |envs: &[(&str, PathBuf)]| {
        let mut c = rtcell();
        for v in ["RTCELL_HOME", "XDG_DATA_HOME", "HOME"] {
            c.env_remove(v);
        }
        c.envs(envs.iter().map(|(k, v)| (k, v))).args(["history"]);
        c.output().unwrap()
    };
    let all = [("RTCELL_HOME", d("r")), ("XDG_DATA_HOME", d("x")), ("HOME", d("h"))];
    let cases = [
        (&all[..], d("r/history.sqlite")),
        (&all[1..], d("x/rtcell/history.sqlite")),
        (&all[2..], d("h/.local/share/rtcell/history.sqlite")),
    ];
    for (envs, want) in cases {
        let o = where_(envs);
        assert!(o.status.success(), "{}", text(&o));
        assert!(stdout(&o).contains(&format!("no runs recorded in {}", want.display())), "{}", text(&o));
        assert!(!want.exists(), "reading created the file");
    }
    let o = where_(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("set RTCELL_HOME=DIR or give --history PATH"), "{}", text(&o));
}

/// Writes `bytes` as the history in a fresh RTCELL_HOME; every command must refuse it with status 2 and
/// leave it as it was.
fn refused_untouched(make: impl Fn(&Path), wanted: &str) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let file = home.join("history.sqlite");
    make(&file);
    let before = std::fs::read(&file).unwrap();
    let file_s = file.to_str().unwrap();
    for args in [
        vec!["history"],
        vec!["history", "--history", file_s],
        vec!["compare", "latest~1", "latest", "--history", file_s],
        vec!["history", "--document", "latest"],
    ] {
        let o = at(&home, &args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(wanted) && t.contains(file_s) && t.contains("untouched"), "{args:?}: {t}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), before, "the file changed");
    let entries = std::fs::read_dir(&home).unwrap().count();
    assert_eq!(entries, 1, "files appeared beside it");
}

#[test]
fn files_that_are_not_our_history_are_refused_untouched() {
    refused_untouched(
        |f| {
            std::fs::write(f, (0..50_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect::<Vec<_>>())
                .unwrap()
        },
        "is not an SQLite database",
    );
    refused_untouched(
        |f| {
            let c = rusqlite::Connection::open(f).unwrap();
            c.execute_batch(
                "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('x');",
            )
            .unwrap();
        },
        "another application",
    );
    refused_untouched(
        |f| {
            History::open(f).unwrap().record(&doc("2026-01-01T00:00:00.000Z", vec![]), None).unwrap();
            let c = rusqlite::Connection::open(f).unwrap();
            c.pragma_update(None, "user_version", 99).unwrap();
            c.pragma_update(None, "journal_mode", "DELETE").unwrap();
        },
        "schema version 99",
    );
}

#[test]
fn a_history_that_cannot_be_written_does_not_lose_the_results() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("junk.sqlite");
    std::fs::write(&bad, b"this is not a database, and must stay as it is").unwrap();
    let before = std::fs::read(&bad).unwrap();
    let out = dir.path().join("run");
    let o = rtcell()
        .args(["bench", "c2c", "--samples", "1000", "--quick", "--out", out.to_str().unwrap()])
        .args(["--history", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("warning: this run was not recorded in the history"), "{}", text(&o));
    valid_results(&out);
    assert_eq!(std::fs::read(&bad).unwrap(), before);
}

// --- speed ----------------------------------------------------------------------------------------------

/// A realistic mix of documents: loopback (95 series, histograms), control (48), c2c (2), each with stats
/// from samples, as the suites make them.
fn templates() -> Vec<Results> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut samples = |median: f64, n: usize| -> Vec<f64> {
        (0..n)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let u = (seed >> 11) as f64 / (1u64 << 53) as f64;
                // Mostly near the median, a heavy tail of preemptions.
                if i % 997 == 0 { median * (10.0 + 1000.0 * u) } else { median * (0.8 + 0.4 * u) }
            })
            .collect()
    };
    let mut lb = Vec::new();
    for cell in ["thread", "process", "kvm", "pipe"] {
        for bytes in [0, 1, 8, 16, 32, 64, 128, 256, 512, 1024] {
            let transport = if cell == "pipe" { "pipe" } else { "ring" };
            let l = labels!(
                "cell" => cell, "transport" => transport, "bytes" => bytes, "load" => "none", "notify" => "poll",
                "master_cpu" => 0, "cell_cpu" => 1
            );
            lb.push(Series::from_samples(
                "loopback_rtt",
                l,
                Unit::Us,
                Kind::RoundTrip,
                samples(0.2 + bytes as f64 / 2000.0, 5000),
                0,
            ));
        }
    }
    for i in 0..55 {
        lb.push(Series::from_samples(
            "cell_start",
            labels!("cell" => "thread", "i" => i),
            Unit::Us,
            Kind::Latency,
            samples(1200.0, 50),
            0,
        ));
    }
    let mut ctl = Vec::new();
    for p in ["f64", "f32", "q31"] {
        for cell in ["local", "thread", "process", "kvm"] {
            for name in ["control_exec", "control_rtt", "control_clock", "control_probe_rtt"] {
                let kind = if name.ends_with("rtt") { Kind::RoundTrip } else { Kind::ExecTime };
                ctl.push(Series::from_samples(
                    name,
                    labels!("precision" => p, "cell" => cell, "load" => "none"),
                    Unit::Us,
                    kind,
                    samples(0.3, 5000),
                    0,
                ));
            }
        }
    }
    let c2c = vec![
        Series::from_samples(
            "c2c_round_trip",
            labels!("cpus" => "0-1", "method" => "timed_each"),
            Unit::Ns,
            Kind::RoundTrip,
            samples(100.0, 5000),
            0,
        ),
        Series::from_samples(
            "c2c_one_way",
            labels!("cpus" => "0-1", "method" => "batch"),
            Unit::Ns,
            Kind::OneWay,
            samples(30.0, 500),
            0,
        ),
    ];
    vec![doc("", vec![suite("loopback", lb)]), doc("", vec![suite("control", ctl)]), doc("", vec![suite("c2c", c2c)])]
}

fn timed(home: &Path, args: &[&str], reps: usize) -> (Duration, Duration, String) {
    let mut times = Vec::new();
    let mut out = String::new();
    for _ in 0..reps {
        let t = Instant::now();
        let o = at(home, args);
        times.push(t.elapsed());
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        out = stdout(&o);
    }
    times.sort();
    (times[reps / 2], times[reps - 1], out)
}

/// `rtcell history` and `rtcell compare` with 10,000 runs recorded (RTCELL_BENCH_RUNS to change), timed
/// as processes, start included. Prints the figures; asserts only that the output is right.
///
/// cargo test --release -p rtcell --test history -- --ignored --nocapture history_speed
#[test]
#[ignore = "a benchmark: builds a database of 10,000 runs (about two minutes); run it with --ignored"]
fn history_speed_with_10000_runs() {
    let n: usize = std::env::var("RTCELL_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_owned();
    let db: PathBuf = home.join("history.sqlite");
    let templates = templates();
    let t = Instant::now();
    let mut h = History::open(&db).unwrap();
    for i in 0..n {
        let mut d = templates[i % templates.len()].clone();
        // One run an hour, medians drifting by up to ±8%.
        let secs = 1_767_225_600 + i as u64 * 3600;
        d.started_at = rtcell_report::doc::rfc3339_utc(std::time::UNIX_EPOCH + Duration::from_secs(secs));
        let f = 1.0 + ((i * 7919) % 161) as f64 / 1000.0 - 0.08;
        for s in d.suites.iter_mut().flat_map(|s| s.series.iter_mut()) {
            s.stats.median *= f;
            s.stats.p90 *= f;
        }
        h.record(&d, None).unwrap();
    }
    drop(h);
    let build = t.elapsed();
    let size = std::fs::metadata(&db).unwrap().len()
        + std::fs::metadata(home.join("history.sqlite-wal")).map_or(0, |m| m.len());
    println!("built {n} runs in {:.1} s, database {:.0} MB", build.as_secs_f64(), size as f64 / 1e6);

    let oldest = History::open_read(&db).unwrap().find(&format!("latest~{}", n - 1)).unwrap().id;
    let prefix = &oldest[..15];
    let reps = 11;
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["history"], format!("20 of {n} run(s)")),
        (vec!["history", "--suite", "control", "--limit", "50"], "50 of".into()),
        (vec!["history", "--json"], format!("\"total\": {n}")),
        (vec!["compare", "latest~1", "latest"], "summary:".into()),
        (vec!["compare", "latest~3", "latest"], "summary: ".into()),
        (vec!["compare", prefix, "latest~2"], oldest.clone()),
        (vec!["history", "--document", "latest"], "\"schema\"".into()),
        (vec!["history", "--limit", "10000"], "run(s)".into()),
    ];
    println!("{:<45} {:>10} {:>10}", "command (wall time, process start included)", "median ms", "max ms");
    for (args, want) in cases {
        let (median, max, out) = timed(&home, &args, reps);
        assert!(out.contains(&want), "{args:?}: {want:?} not in the output");
        println!(
            "rtcell {:<38} {:>10.1} {:>10.1}",
            args.join(" "),
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
}

/// A throw-away PostgreSQL server on a free loopback port, stopped (and its files removed) on drop.
/// As root it runs as the `postgres` system user (the server refuses root).
struct PgServer {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl PgServer {
    /// `None` (with the reason printed) where PostgreSQL is not installed, outside CI; in CI that fails.
    fn start() -> Option<PgServer> {
        let mut bins: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| {
                d.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).filter(|b| b.join("initdb").exists()).collect()
            })
            .unwrap_or_default();
        bins.sort_by_key(|b| b.parent().and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok()).unwrap_or(0));
        let Some(bin) = bins.pop() else {
            rtcell_testkit::skip(
                "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb): scripts/setup installs it",
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: getuid only reads the process's user id.
        let root = unsafe { libc::getuid() } == 0;
        // The server itself runs as `postgres` (not through runuser, so that signals reach it directly).
        let ids = root.then(|| {
            let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
            let line = passwd
                .lines()
                .find(|l| l.starts_with("postgres:"))
                .expect("a postgres user (Debian's postgresql package makes it)");
            let f: Vec<&str> = line.split(':').collect();
            (f[2].parse::<u32>().unwrap(), f[3].parse::<u32>().unwrap())
        });
        let as_server = |exe: &str| {
            use std::os::unix::process::CommandExt;
            let mut c = std::process::Command::new(bin.join(exe));
            if let Some((uid, gid)) = ids {
                c.uid(uid).gid(gid).env("HOME", "/tmp");
            }
            c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            c
        };
        if root {
            let o = std::process::Command::new("chown").arg("postgres").arg(dir.path()).output().unwrap();
            assert!(o.status.success(), "chown postgres: {}", text(&o));
        }
        let data = dir.path().join("data");
        let o = as_server("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "rtcell", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .unwrap();
        assert!(o.status.success(), "initdb: {}", text(&o));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = as_server("postgres")
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .arg("-k")
            .arg(dir.path())
            // Its log goes to a file: a pipe nobody reads would stall the server once full.
            .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
            .spawn()
            .unwrap();
        let server = PgServer { child, port, _dir: dir };
        let t0 = Instant::now();
        while postgres::Client::connect(&server.url("postgres"), postgres::NoTls).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(30), "the PostgreSQL server did not start in 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(server)
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://rtcell@127.0.0.1:{}/{db}", self.port)
    }

    /// A new, empty database.
    fn database(&self, name: &str) -> String {
        let mut c = postgres::Client::connect(&self.url("postgres"), postgres::NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        self.url(name)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGINT: the server's fast shutdown.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_fleet_history_in_postgresql_records_lists_finds_and_compares() {
    // It runs a benchmark on the cell CPU: one such test at a time, across test binaries too.
    let _serial = serial();
    let Some(pg) = PgServer::start() else { return };
    let url = pg.database("fleet");
    let home = tempfile::tempdir().unwrap();
    let (a, b) = known_pair();
    {
        let mut s = rtcell_report::history::open(Path::new(&url)).unwrap();
        s.record(&a, None).unwrap();
        s.record(&b, None).unwrap();
    }
    // The command line, as on any machine of the fleet.
    let o = at(home.path(), &["history", "--history", &url, "--json"]);
    let v = json(&o);
    assert_eq!(v["total"], 2, "{}", stdout(&o));
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    let id_b = v["runs"][0]["id"].as_str().unwrap().to_string();
    let o = at(home.path(), &["history", "--history", &url, "--document", &id_b[..17]]);
    assert!(o.status.success(), "{}", text(&o));
    let stored: Results = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(stored, b, "the stored document comes back whole");
    let o = at(home.path(), &["compare", "latest~1", "latest", "--history", &url, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let c = json(&o);
    assert!(c.to_string().contains("worse") && c.to_string().contains("better"), "{c}");
    // The environment variable names it too.
    let o = rtcell()
        .env("RTCELL_HOME", home.path())
        .env("RTCELL_HISTORY", &url)
        .args(["history", "--json"])
        .output()
        .unwrap();
    assert_eq!(json(&o)["total"], 2);
    // A run of the CLI records into it.
    let out = home.path().join("c2c");
    let o = at(home.path(), &["bench", "c2c", "--samples", "2000", "--out", out.to_str().unwrap(), "--history", &url]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains(&format!("recorded in {url}")), "{}", stdout(&o));
    assert_eq!(json(&at(home.path(), &["history", "--history", &url, "--json", "--suite", "c2c"]))["total"], 1);
}

#[test]
fn machines_recording_at_once_into_a_new_postgresql_history_are_all_kept() {
    let Some(pg) = PgServer::start() else { return };
    let url = pg.database("race");
    let (a, _) = known_pair();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (url, a) = (url.clone(), a.clone());
            std::thread::spawn(move || {
                // Each "machine" opens the fresh database itself: the tables are made once.
                let mut s = rtcell_report::history::open(Path::new(&url)).unwrap();
                (0..5).map(|_| s.record(&a, None).unwrap().0).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ids: Vec<String> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20, "every run kept, under its own id");
    let s = rtcell_report::history::open_read(Path::new(&url)).unwrap();
    assert_eq!(s.count(None).unwrap(), 20);
}

#[test]
fn postgresql_databases_that_are_not_our_history_are_refused_untouched() {
    // It runs a benchmark on the cell CPU: one such test at a time, across test binaries too.
    let _serial = serial();
    let Some(pg) = PgServer::start() else { return };
    let home = tempfile::tempdir().unwrap();
    // A newer schema of ours.
    let url = pg.database("newer");
    rtcell_report::history::open(Path::new(&url)).unwrap();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("UPDATE rtcell_meta SET value = '99' WHERE key = 'schema_version'").unwrap();
    let o = at(home.path(), &["history", "--history", &url]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("schema version 99, newer than this rtcell reads"), "{}", text(&o));
    let (a, _) = known_pair();
    assert!(rtcell_report::history::open(Path::new(&url)).and_then(|mut s| s.record(&a, None)).is_err());
    let n: i64 = c.query_one("SELECT count(*) FROM rtcell_runs", &[]).unwrap().get(0);
    assert_eq!(n, 0, "nothing written");
    // Someone else's table of the same name.
    let url = pg.database("others");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("CREATE TABLE rtcell_runs (x INT); INSERT INTO rtcell_runs VALUES (7)").unwrap();
    let out = home.path().join("c2c");
    let o = at(home.path(), &["bench", "c2c", "--samples", "2000", "--out", out.to_str().unwrap(), "--history", &url]);
    assert!(o.status.success(), "a history that cannot be written does not fail the run: {}", text(&o));
    assert!(text(&o).contains("not recorded in the history") && text(&o).contains("left untouched"), "{}", text(&o));
    let rows: Vec<i32> = c.query("SELECT x FROM rtcell_runs", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(rows, vec![7], "left as it was");
    // Unreachable, with a password: the password never shows.
    let o = at(home.path(), &["history", "--history", "postgres://rtcell:hunter2@127.0.0.1:1/x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("postgres://rtcell:***@127.0.0.1:1/x") && !text(&o).contains("hunter2"), "{}", text(&o));
    assert!(text(&o).contains("could not connect"), "{}", text(&o));
    // TLS asked for: refused, not connected in clear.
    let o = at(home.path(), &["history", "--history", &format!("{}?sslmode=require", pg.url("postgres"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("TLS to the database is not supported"), "{}", text(&o));
}
