//! The run history: recording, listing, finding runs, comparing them, refusing files that are not ours,
//! and concurrent writers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rtcell_report::history::compare::{Verdict, compare};
use rtcell_report::history::{History, HistoryError, Store, store::SCHEMA_VERSION};
use rtcell_report::{HostFacts, Kind, Results, Series, Stats, Suite, ToolInfo, Unit, labels};

fn host() -> HostFacts {
    // From JSON, as a results document holds it: fields added later with defaults need no change here.
    serde_json::from_value(serde_json::json!({
        "cpu_model": "Test CPU", "cpus": 2, "tsc_khz": 2_000_000, "kernel": "6.1.0-test", "preempt": "none",
        "cmdline": "", "isolated_cpus": [], "hypervisor": "KVM", "steal_pct": null, "kvm": "nested"
    }))
    .unwrap()
}

fn series(name: &str, labels: BTreeMap<String, String>, unit: Unit, kind: Kind, median: f64) -> Series {
    Series {
        name: name.into(),
        labels,
        unit,
        kind,
        stats: Stats {
            count: 100_000,
            min: median * 0.5,
            mean: median,
            median,
            p90: median,
            p99: median,
            p999: median,
            p9999: median,
            max: median,
            stddev: 0.0,
        },
        histogram: None,
        errors: 0,
    }
}

/// A results document with one suite per (suite, series) group, starting at `started_at`.
fn doc(started_at: &str, suites: Vec<(&str, Vec<Series>)>) -> Results {
    Results {
        schema: rtcell_report::SCHEMA_ID.into(),
        rtcell: ToolInfo { version: "0.1.0".into(), git: None },
        started_at: started_at.into(),
        duration_s: Some(1.0),
        command: Some("rtcell bench test".into()),
        host: host(),
        warnings: vec![],
        suites: suites
            .into_iter()
            .map(|(name, series)| Suite { suite: name.into(), config: serde_json::json!({}), series })
            .collect(),
        incomplete: false,
    }
}

fn loopback(median: f64) -> Vec<Series> {
    let l = labels!("cell" => "thread", "transport" => "ring", "bytes" => 0, "notify" => "poll", "load" => "none");
    vec![series("loopback_rtt", l, Unit::Us, Kind::RoundTrip, median)]
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[test]
fn record_list_find_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h/history.sqlite");
    let mut h = History::open(&db).unwrap();
    let a = doc("2026-01-01T10:00:00.000Z", vec![("loopback", loopback(0.18))]);
    let out = dir.path().join("run-a");
    let a_path = a.write_to_dir(&out).unwrap();
    let id_a = h.record(&a, Some(&a_path)).unwrap();
    let mut b = doc("2026-01-02T10:00:00.000Z", vec![("loopback", loopback(0.2)), ("c2c", vec![])]);
    b.incomplete = true;
    let id_b = h.record(&b, None).unwrap();
    let id_c = h.record(&doc("2026-01-03T10:00:00.000Z", vec![("c2c", vec![])]), None).unwrap();
    assert!(id_a.as_str().starts_with("20260101-100000-"), "{id_a}");
    drop(h);

    let h = History::open_read(&db).unwrap();
    let runs = h.list(10, None).unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [id_c.as_str(), id_b.as_str(), id_a.as_str()], "most recent first");
    assert_eq!(h.count(None).unwrap(), 3);
    assert_eq!(h.list(2, None).unwrap().len(), 2);
    let with_loopback: Vec<String> = h.list(10, Some("loopback")).unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(with_loopback, [id_b.to_string(), id_a.to_string()]);
    assert_eq!(h.count(Some("c2c")).unwrap(), 2);
    assert!(h.list(10, Some("nothing")).unwrap().is_empty());

    let ra = &runs[2];
    assert_eq!(ra.suites, ["loopback"]);
    assert_eq!(ra.headline[0].text, "loopback thread 0 B rtt 0.180 us");
    assert_eq!(ra.hypervisor.as_deref(), Some("KVM"));
    assert_eq!(ra.cpu_model, "Test CPU");
    assert_eq!(ra.command.as_deref(), Some("rtcell bench test"));
    assert_eq!(ra.results_path.as_deref(), Some(a_path.canonicalize().unwrap().to_str().unwrap()));
    assert!(runs[1].incomplete && !ra.incomplete);
    assert_eq!(runs[1].suites, ["loopback", "c2c"]);

    assert_eq!(h.find("latest").unwrap().id, id_c.as_str());
    assert_eq!(h.find("latest~1").unwrap().id, id_b.as_str());
    assert_eq!(h.find("latest~2").unwrap().id, id_a.as_str());
    let e = h.find("latest~3").unwrap_err();
    assert!(matches!(e, HistoryError::NotThatManyRuns { have: 3, .. }), "{e}");
    assert!(e.is_usage());
    assert_eq!(h.find("20260102").unwrap().id, id_b.as_str(), "unique prefix");
    assert_eq!(h.find(id_a.as_str()).unwrap().id, id_a.as_str());

    // The document is kept whole: byte for byte the results.json, even once that is deleted.
    let written = std::fs::read_to_string(&a_path).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    let (_, text) = h.document_text(id_a.as_str()).unwrap();
    assert_eq!(text, written);
    assert_eq!(h.results(id_a.as_str()).unwrap(), a);
}

#[test]
fn ambiguous_and_unknown_runs_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.sqlite");
    let mut h = History::open(&db).unwrap();
    // Same start second: the ids differ only in their random tail.
    let x = h.record(&doc("2026-02-03T04:05:06.000Z", vec![]), None).unwrap();
    let y = h.record(&doc("2026-02-03T04:05:06.500Z", vec![]), None).unwrap();
    assert_ne!(x, y);
    let e = h.find("20260203-040506").unwrap_err();
    match &e {
        HistoryError::AmbiguousRun { candidates, .. } => {
            let mut want = vec![x.to_string(), y.to_string()];
            want.sort();
            assert_eq!(candidates, &want);
        }
        other => panic!("{other}"),
    }
    assert!(e.is_usage());
    assert!(e.to_string().contains("type more of the id"), "{e}");
    let e = h.find("2099").unwrap_err();
    assert!(matches!(e, HistoryError::UnknownRun { .. }) && e.is_usage(), "{e}");
    assert!(e.to_string().contains("rtcell history"), "{e}");
    let e = h.find("No Such Run").unwrap_err();
    assert!(matches!(e, HistoryError::BadRunRef { .. }) && e.is_usage(), "{e}");
}

#[test]
fn compare_recorded_runs_with_known_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.sqlite");
    let mut h = History::open(&db).unwrap();
    let l = || labels!("cell" => "thread");
    let set = |lat: f64, rtt: f64, exec: f64, tp: f64, n: f64, extra: &str| {
        vec![
            series("lat", l(), Unit::Us, Kind::Latency, lat),
            series("rtt", l(), Unit::Us, Kind::RoundTrip, rtt),
            series("exec", l(), Unit::Us, Kind::ExecTime, exec),
            series("tp", l(), Unit::BytesPerS, Kind::Throughput, tp),
            series("n", l(), Unit::Count, Kind::Count, n),
            series(extra, l(), Unit::Us, Kind::Latency, 1.0),
        ]
    };
    let a = doc("2026-03-01T00:00:00.000Z", vec![("s", set(100.0, 100.0, 100.0, 100.0, 100.0, "only_a"))]);
    let b = doc("2026-03-02T00:00:00.000Z", vec![("s", set(110.0, 90.0, 103.0, 120.0, 80.0, "only_b"))]);
    let a_path = a.write_to_dir(&dir.path().join("a")).unwrap();
    h.record(&a, Some(&a_path)).unwrap();
    h.record(&b, None).unwrap();

    let c = compare(h.figures("latest~1").unwrap(), h.figures("latest").unwrap());
    let verdicts: Vec<(&str, Verdict)> = c.series.iter().map(|s| (s.name.as_str(), s.verdict)).collect();
    assert_eq!(
        verdicts,
        [
            ("lat", Verdict::Worse),
            ("rtt", Verdict::Better),
            ("exec", Verdict::WithinNoise),
            ("tp", Verdict::Better),
            ("n", Verdict::Changed),
        ]
    );
    assert!((c.series[0].median.change.unwrap() - 0.10).abs() < 1e-12);
    assert_eq!(c.added.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["only_b"]);
    assert_eq!(c.removed.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["only_a"]);
    assert_eq!((c.summary.better, c.summary.worse, c.summary.within_noise, c.summary.changed), (2, 1, 1, 1));

    // The same run read from its file compares the same as from the history.
    let from_file = h.figures(a_path.to_str().unwrap()).unwrap();
    assert_eq!(from_file.series, h.figures("latest~1").unwrap().series);
}

#[test]
fn documents_of_another_schema_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.json");
    let mut v = serde_json::to_value(doc("2026-01-01T00:00:00.000Z", vec![])).unwrap();
    v["schema"] = "rtcell.results/0".into();
    std::fs::write(&old, v.to_string()).unwrap();
    let db = dir.path().join("history.sqlite");
    let e = History::open_read(&db).unwrap().figures(old.to_str().unwrap()).unwrap_err();
    assert!(e.is_usage());
    assert!(e.to_string().contains("rtcell.results/0"), "{e}");

    // A stored document whose schema the history marks as another one is not read as ours.
    let mut h = History::open(&db).unwrap();
    let id = h.record(&doc("2026-01-01T00:00:00.000Z", vec![]), None).unwrap();
    drop(h);
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE documents SET schema = 'rtcell.results/2'", []).unwrap();
    drop(conn);
    let e = History::open_read(&db).unwrap().results(id.as_str()).unwrap_err();
    assert!(e.to_string().contains("rtcell.results/2"), "{e}");
}

/// Opening for writing and for reading both refuse the file, and leave it (and its directory) as it was.
fn assert_refused_untouched(path: &Path, what: impl Fn(&HistoryError) -> bool) {
    let before = bytes(path);
    let listing = |d: &Path| {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    };
    let files = listing(path.parent().unwrap());
    for e in [History::open(path).err(), History::open_read(path).err()] {
        let e = e.expect("the file was accepted");
        assert!(what(&e), "unexpected error: {e}");
        assert!(e.is_usage());
        assert!(e.to_string().contains(path.to_str().unwrap()), "the message names the file: {e}");
        assert!(e.to_string().contains("untouched"), "{e}");
    }
    assert_eq!(bytes(path), before, "the file changed");
    assert_eq!(listing(path.parent().unwrap()), files, "files appeared beside it");
}

#[test]
fn random_bytes_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    let junk: Vec<u8> = (0..65_536).map(|_| rand::random::<u8>()).collect();
    std::fs::write(&path, &junk).unwrap();
    assert_refused_untouched(&path, |e| matches!(e, HistoryError::NotSqlite { .. }));
}

#[test]
fn damaged_sqlite_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    // A real SQLite header followed by garbage.
    let mut junk = b"SQLite format 3\0".to_vec();
    junk.extend((0..8192).map(|i| (i * 7 % 251) as u8));
    std::fs::write(&path, &junk).unwrap();
    assert_refused_untouched(&path, |e| matches!(e, HistoryError::Damaged { .. } | HistoryError::Sqlite { .. }));
}

#[test]
fn another_applications_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE contacts (name TEXT, phone TEXT); INSERT INTO contacts VALUES ('Ada', '1');")
        .unwrap();
    drop(conn);
    assert_refused_untouched(
        &path,
        |e| matches!(e, HistoryError::Foreign { detail, .. } if detail.contains("contacts")),
    );
}

#[test]
fn a_newer_schema_version_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    History::open(&path).unwrap().record(&doc("2026-01-01T00:00:00.000Z", vec![]), None).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    // Fold the WAL into the file, so that the file alone is the database whose bytes must not change.
    conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    drop(conn);
    assert_refused_untouched(
        &path,
        |e| matches!(e, HistoryError::NewerSchema { found, .. } if *found == SCHEMA_VERSION + 1),
    );
}

#[test]
fn reading_a_missing_history_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none/history.sqlite");
    let h = History::open_read(&path).unwrap();
    assert!(h.list(10, None).unwrap().is_empty());
    assert!(matches!(h.find("latest"), Err(HistoryError::NotThatManyRuns { have: 0, .. })));
    assert!(!path.parent().unwrap().exists());
    // An empty file (e.g. made by `touch`) is a new history too.
    std::fs::write(dir.path().join("empty.sqlite"), b"").unwrap();
    let mut h = History::open(&dir.path().join("empty.sqlite")).unwrap();
    h.record(&doc("2026-01-01T00:00:00.000Z", vec![]), None).unwrap();
    assert_eq!(h.count(None).unwrap(), 1);
}

const CHILD_DB: &str = "RTCELL_HISTORY_TEST_DB";
const PER_WRITER: usize = 20;
const WRITERS: usize = 8;

/// The body of one writer process of `concurrent_recording_from_8_processes`.
#[test]
#[ignore = "run by concurrent_recording_from_8_processes as a child process"]
fn record_child() {
    let db = std::env::var_os(CHILD_DB).expect("started by concurrent_recording_from_8_processes");
    for i in 0..PER_WRITER {
        let mut h = History::open(Path::new(&db)).unwrap();
        h.record(&doc(&format!("2026-04-01T00:00:{:02}.000Z", i % 60), vec![("loopback", loopback(0.2))]), None)
            .unwrap();
    }
}

#[test]
fn concurrent_recording_from_8_processes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.sqlite");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WRITERS)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "record_child", "--ignored", "--test-threads", "1"])
                .env(CHILD_DB, &db)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "a writer failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("1 passed"), "the writer did not run");
    }
    let h = History::open_read(&db).unwrap();
    let runs = h.list(1000, None).unwrap();
    assert_eq!(runs.len(), WRITERS * PER_WRITER);
    let mut ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), WRITERS * PER_WRITER, "ids are unique");
    // Every run kept its series and its document.
    for r in runs.iter().step_by(37) {
        assert_eq!(h.figures(&r.id).unwrap().series.len(), 1);
        assert!(h.document_text(&r.id).is_ok());
    }
}

#[test]
fn concurrent_recording_from_8_threads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.sqlite");
    std::thread::scope(|s| {
        for t in 0..WRITERS {
            let db = &db;
            s.spawn(move || {
                let mut h = History::open(db).unwrap();
                for i in 0..PER_WRITER {
                    h.record(&doc(&format!("2026-05-01T00:{t:02}:{i:02}.000Z"), vec![]), None).unwrap();
                }
            });
        }
    });
    assert_eq!(History::open_read(&db).unwrap().count(None).unwrap(), (WRITERS * PER_WRITER) as u64);
}
