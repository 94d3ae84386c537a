//! `rtcell report` and the report.html of real runs, opened in a real headless browser (Debian's
//! `chromium`): no console message, every expected section in the DOM, a screenshot that is not blank and
//! shows the plots' colours. In CI (CI set) a missing browser fails the test; elsewhere the browser part
//! skips, saying why.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{rtcell, run, serial, text, valid_results};
use serde_json::{Value, json};

/// The first line colour of every plot (Okabe-Ito blue); the page's CSS does not use it.
const PLOT_BLUE: [u8; 3] = [0, 114, 178];

/// The browser: `RTCELL_CHROMIUM`, or the first of chromium, chromium-browser, google-chrome on PATH.
fn browser() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RTCELL_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
}

fn browser_or_skip() -> Option<PathBuf> {
    let b = browser();
    if b.is_none() {
        rtcell_testkit::skip("no chromium on PATH (scripts/setup installs Debian's chromium; or set RTCELL_CHROMIUM)");
    }
    b
}

/// What the browser said about a page: the DOM after loading, and its log (console messages included).
struct Visit {
    dom: String,
    log: String,
}

/// Runs the browser headless on `page` with `args`; fails the test after two minutes.
fn headless(exe: &Path, page: &Path, args: &[String], work: &Path) -> Visit {
    let out = work.join("stdout");
    let err = work.join("stderr");
    let mut child = Command::new(exe)
        .args(["--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0"])
        // Anything the page tried to fetch from the network would fail (and show in the log).
        .arg("--proxy-server=127.0.0.1:9")
        .arg(format!("--user-data-dir={}", work.join("profile").display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("the browser starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().expect("wait for the browser").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the browser did not finish on {} within 120 s", page.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Visit {
        dom: std::fs::read_to_string(&out).expect("browser stdout"),
        log: std::fs::read_to_string(&err).expect("browser stderr"),
    }
}

/// The console messages (and uncaught errors) in a browser log.
fn console_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught")).collect()
}

/// Opens `page`: no console message, every id in `ids` in the DOM, nothing loaded from outside, and a
/// screenshot with content and plot colours.
fn check_in_browser(exe: &Path, page: &Path, ids: &[&str], work: &Path) {
    let name = page.file_name().unwrap().to_string_lossy().into_owned();
    let dir = work.join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let visit = headless(exe, page, &["--dump-dom".to_string()], &dir);
    let console = console_lines(&visit.log);
    assert!(console.is_empty(), "{name}: console messages: {console:#?}");
    assert!(visit.dom.contains("</html>"), "{name}: no DOM dumped; browser log:\n{}", visit.log);
    for id in ids {
        assert!(visit.dom.contains(&format!("id=\"{id}\"")), "{name}: no element with id {id} in the DOM");
    }
    for banned in ["<script", "<link", "<img", "<iframe", " src="] {
        assert!(!visit.dom.contains(banned), "{name}: the page holds {banned:?}");
    }
    assert!(visit.dom.contains("<svg"), "{name}: no plot");

    let shot = dir.join("shot.png");
    let visit =
        headless(exe, page, &[format!("--screenshot={}", shot.display()), "--window-size=1280,4000".into()], &dir);
    let console = console_lines(&visit.log);
    assert!(console.is_empty(), "{name}: console messages: {console:#?}");
    let (width, height, pixels) = decode_rgb(&shot);
    assert_eq!((width, height), (1280, 4000), "{name}: screenshot size");
    let total = pixels.len();
    let inked = pixels.iter().filter(|p| p.iter().any(|&c| c < 235)).count();
    let mut colours: Vec<[u8; 3]> = pixels.clone();
    colours.sort_unstable();
    colours.dedup();
    let blue = pixels.iter().filter(|p| p.iter().zip(PLOT_BLUE).all(|(&a, b)| a.abs_diff(b) <= 12)).count();
    assert!(inked * 50 > total, "{name}: screenshot nearly blank: {inked} of {total} pixels not white");
    assert!(colours.len() > 100, "{name}: only {} distinct colours", colours.len());
    assert!(blue > 50, "{name}: the plots' first colour appears in {blue} pixels only: were the SVG plots drawn?");
}

/// A PNG as RGB pixels.
fn decode_rgb(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let mut decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).expect("screenshot")));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    let step = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    let pixels = buf[..info.buffer_size()].chunks_exact(step).map(|c| [c[0], c[1], c[2]]).collect();
    (info.width, info.height, pixels)
}

fn bench(args: &[&str], dir: &Path) {
    let mut all: Vec<&str> = vec!["bench"];
    all.extend_from_slice(args);
    let out = dir.to_str().unwrap();
    all.extend_from_slice(&["--out", out]);
    let o = run(&all);
    assert!(o.status.success(), "rtcell {all:?} failed:\n{}", text(&o));
    valid_results(dir);
    let t = text(&o);
    assert!(t.contains(&format!("report: {out}/report.html")), "the run names its report:\n{t}");
    let page =
        std::fs::read_to_string(dir.join("report.html")).expect("the run writes report.html beside results.json");
    assert!(page.starts_with("<!DOCTYPE html>"));
}

fn report(args: &[&str]) -> std::process::Output {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    run(&all)
}

#[test]
fn report_of_real_runs_in_a_browser() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (c2c, lb, ctl) = (root.join("c2c"), root.join("loopback"), root.join("control"));
    bench(&["c2c", "--quick"], &c2c);
    bench(&["loopback", "--quick", "--cell", "thread", "--sizes", "0,64"], &lb);
    bench(&["control", "--quick", "--iterations", "20000", "--cell", "thread"], &ctl);

    // The three ways to name the document and the page.
    std::fs::remove_file(c2c.join("report.html")).unwrap();
    let o = report(&[c2c.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let c2c_page = c2c.join("report.html");
    assert!(c2c_page.is_file(), "rtcell report DIR writes DIR/report.html");
    let o = report(&[lb.join("results.json").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let lb_page = lb.join("report.html");
    let ctl_page = root.join("control.html");
    let o = report(&[ctl.join("results.json").to_str().unwrap(), "--out", ctl_page.to_str().unwrap()]);
    assert!(o.status.success() && text(&o).contains("control.html"), "{}", text(&o));

    // A suite rtcell has no view of, on this host's real facts: a generic table and histograms.
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(c2c.join("results.json")).unwrap()).unwrap();
    let mut series = doc["suites"][0]["series"][0].clone();
    series["name"] = json!("frob_time");
    series["labels"] = json!({"knob": "<b>&", "mode": "odd"});
    doc["suites"] = json!([{"suite": "frobnicate", "config": {"knob": 3}, "series": [series]}]);
    let unknown = root.join("unknown");
    std::fs::create_dir(&unknown).unwrap();
    std::fs::write(unknown.join("results.json"), serde_json::to_string(&doc).unwrap()).unwrap();
    let o = report(&[unknown.join("results.json").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let unknown_page = unknown.join("report.html");
    let html = std::fs::read_to_string(&unknown_page).unwrap();
    assert!(html.contains("knob=&lt;b&gt;&amp;"), "labels escaped");

    let Some(exe) = browser_or_skip() else { return };
    let work = root.join("browser");
    std::fs::create_dir(&work).unwrap();

    // The console capture works on this browser: a page with a script error is caught.
    let bad = root.join("bad.html");
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><body><script>console.error('x'); noSuchFunction();</script></body></html>",
    )
    .unwrap();
    let probe = work.join("probe");
    std::fs::create_dir(&probe).unwrap();
    let visit = headless(&exe, &bad, &["--dump-dom".to_string()], &probe);
    assert!(
        console_lines(&visit.log).iter().any(|l| l.contains("noSuchFunction")),
        "the browser log does not show console errors, so their absence proves nothing; log:\n{}",
        visit.log
    );

    let host = ["host", "warnings", "host-facts", "run-facts"];
    let ids = |own: &[&'static str]| host.iter().chain(own).copied().collect::<Vec<&str>>();
    check_in_browser(
        &exe,
        &c2c_page,
        &ids(&["suite-c2c", "suite-c2c-c2c", "suite-c2c-hist-0", "suite-c2c-hist-1", "suite-c2c-published"]),
        &work,
    );
    check_in_browser(
        &exe,
        &lb_page,
        &ids(&[
            "suite-loopback",
            "suite-loopback-rtt-size",
            "suite-loopback-table-0",
            "suite-loopback-table-1",
            "suite-loopback-start",
            "suite-loopback-c2c",
            "suite-loopback-published",
        ]),
        &work,
    );
    check_in_browser(
        &exe,
        &ctl_page,
        &ids(&[
            "suite-control",
            "suite-control-table-f64",
            "suite-control-table-f32",
            "suite-control-table-q31",
            "suite-control-exec-f64",
            "suite-control-rtt-f64",
            "suite-control-exec-q31",
            "suite-control-loopback",
        ]),
        &work,
    );
    check_in_browser(
        &exe,
        &unknown_page,
        &ids(&["suite-frobnicate", "suite-frobnicate-series", "suite-frobnicate-hist-0-0"]),
        &work,
    );
}

/// The smallest valid document: one unknown suite with one series.
fn minimal_doc() -> Value {
    json!({
        "schema": "rtcell.results/1",
        "rtcell": {"version": "0.1.0", "git": null},
        "started_at": "2026-01-01T00:00:00.000Z",
        "host": {"cpu_model": "test", "cpus": 2, "tsc_khz": null, "kernel": "k", "preempt": "rt", "cmdline": "",
                 "isolated_cpus": [1], "hypervisor": null, "steal_pct": null, "kvm": "absent"},
        "warnings": [],
        "suites": [{"suite": "frobnicate", "config": {}, "series": [{
            "name": "x", "labels": {"k": "v"}, "unit": "us", "kind": "latency",
            "stats": {"count": 1, "min": 1.0, "mean": 1.0, "median": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0,
                      "p9999": 1.0, "max": 1.0, "stddev": 0.0},
            "errors": 0}]}],
        "incomplete": false
    })
}

#[test]
fn report_reads_its_schema_and_refuses_everything_else() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let write = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let refused = |path: &Path, expect: &[&str]| {
        let o = report(&[path.to_str().unwrap()]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{}: {t}", path.display());
        for e in expect {
            assert!(t.contains(e), "{}: expected {e:?} in: {t}", path.display());
        }
        assert!(!dir.join("report.html").exists(), "no page for a refused document");
    };

    let valid = minimal_doc();
    let mut newer = valid.clone();
    newer["schema"] = json!("rtcell.results/2");
    refused(
        &write("newer.json", &newer.to_string()),
        &["newer.json", "\"rtcell.results/2\"", "reads only", "rtcell.results/1"],
    );
    let mut older = valid.clone();
    older["schema"] = json!("rtcell.results/0");
    refused(
        &write("older.json", &older.to_string()),
        &["\"rtcell.results/0\"", "use the rtcell version that wrote it"],
    );
    let mut none = valid.clone();
    none.as_object_mut().unwrap().remove("schema");
    refused(&write("none.json", &none.to_string()), &["no `schema` field"]);
    let mut bad_unit = valid.clone();
    bad_unit["suites"][0]["series"][0]["unit"] = json!("furlongs");
    refused(&write("badunit.json", &bad_unit.to_string()), &["does not follow that schema", "furlongs"]);
    refused(&write("truncated.json", &valid.to_string()[..100]), &["is not valid JSON"]);
    refused(&dir.join("missing.json"), &["missing.json", "check the path"]);

    // The valid one: the page beside it, 0.
    let good = write("results.json", &valid.to_string());
    let o = report(&[good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("id=\"suite-frobnicate\""));

    // Where the page cannot go.
    let o = report(&[good.to_str().unwrap(), "--out", dir.join("no/such/dir/r.html").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
    let before = std::fs::read(&good).unwrap();
    let o = report(&[good.to_str().unwrap(), "--out", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("the results document itself"), "{}", text(&o));
    assert_eq!(std::fs::read(&good).unwrap(), before, "results.json untouched");

    let o = rtcell().args(["report", "--help"]).output().unwrap();
    assert!(o.status.success() && text(&o).contains("Examples:") && text(&o).contains("rtcell report"));
}
