//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const SCHEMA: &str = include_str!("../../../schema/results.schema.json");

/// The rtcell binary, recording its runs in a history of this test binary's own (see [`test_home`]),
/// never in the user's.
pub fn rtcell() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtcell"));
    c.env("RTCELL_HOME", test_home());
    c
}

/// `RTCELL_HOME` of the tests: a directory under the build's temporary directory, one per test binary,
/// emptied when the binary first asks for it (so it does not grow from one test run to the next).
pub fn test_home() -> &'static Path {
    static HOME: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let name = exe.file_stem().map_or("tests".into(), |s| s.to_string_lossy().into_owned());
        let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rtcell-home").join(name);
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("create the tests' RTCELL_HOME");
        home
    })
}

/// Benchmarks and runs busy-poll the cell CPU at real-time priority: one at a time, across test binaries
/// too (the test kit's lock on the cell CPU).
pub fn serial() -> rtcell_testkit::CellCpuGuard {
    rtcell_testkit::cell_cpu()
}

pub fn run(args: &[&str]) -> Output {
    rtcell().args(args).output().expect("rtcell runs")
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Loads DIR/results.json and checks it against the schema; returns it.
pub fn valid_results(dir: &Path) -> serde_json::Value {
    let raw = std::fs::read_to_string(dir.join("results.json")).expect("results.json written");
    let doc: serde_json::Value = serde_json::from_str(&raw).expect("results.json is JSON");
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| format!("{} at {}", e, e.instance_path)).collect();
    assert!(errors.is_empty(), "results.json violates the schema: {errors:#?}");
    doc
}

/// The series of the first suite.
pub fn series(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    doc["suites"][0]["series"].as_array().cloned().unwrap_or_default()
}

/// Task `name` in the outcome of a scenario run's document.
pub fn outcome_task<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["suites"][0]["config"]["outcome"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no task {name} in the outcome"))
}

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository")
}

/// Where cargo put this build's binaries and libraries (the rtcell binary's directory).
pub fn artifacts() -> std::path::PathBuf {
    Path::new(env!("CARGO_BIN_EXE_rtcell")).parent().expect("target dir").to_path_buf()
}

/// Runs `cmd`, which must succeed; returns its output.
pub fn sh(cmd: &mut Command, what: &str) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let t = text(&o);
    assert!(o.status.success(), "{what} failed ({}):\n{t}", o.status);
    t
}

/// Installs the C SDK (library, header, payload kit) of this build under `prefix`.
pub fn install_sdk(prefix: &Path) {
    sh(
        Command::new("bash")
            .arg(repo().join("scripts/install-sdk"))
            .arg("--prefix")
            .arg(prefix)
            .arg("--artifacts")
            .arg(artifacts()),
        "scripts/install-sdk",
    );
}

/// A scenario DIR/broken.toml: task `ctrl`, the C `library`'s `init` and `step` in a `kind` cell on CPU 1
/// (1 ms), beside a Linux-side spin task `other` (1 ms); 2 s.
pub fn c_task_scenario(dir: &Path, kind: &str, library: &Path, init: &str, step: &str) -> PathBuf {
    let p = dir.join("broken.toml");
    std::fs::write(
        &p,
        format!(
            r#"duration_s = 2
[cells.ctrl]
kind = "{kind}"
cpu = 1
[com.io]
signals = [{{ id = 1, name = "x", type = "float64" }}]
[tasks.ctrl]
cell = "ctrl"
period_us = 1000
priority = 80
workload = {{ kind = "c", library = "{}", init = "{init}", step = "{step}" }}
[tasks.other]
cell = "linux"
period_us = 1000
priority = 70
workload = {{ kind = "spin", us = 5 }}
"#,
            library.display()
        ),
    )
    .unwrap();
    p
}

/// Builds `src` (C) into DIR/libNAME.so, linked with the librtcell installed under `prefix`.
pub fn c_shared_object(prefix: &Path, dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let so = dir.join(format!("lib{name}.so"));
    let lib = prefix.join("lib");
    sh(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&so)
            .arg(&c)
            .arg(format!("-I{}", prefix.join("include").display()))
            .arg(format!("-L{}", lib.display()))
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lrtcell"),
        "cc -shared",
    );
    so
}

/// `rtcell run SCENARIO --duration 2s --out OUT ARGS...`: (exit code, output).
pub fn run_scenario(scenario: &Path, args: &[&str], out: &Path) -> (Option<i32>, String) {
    let o = rtcell()
        .arg("run")
        .arg(scenario)
        .args(["--duration", "2s", "--out"])
        .arg(out)
        .args(args)
        .output()
        .expect("rtcell runs");
    (o.status.code(), text(&o))
}

/// Spawns `cmd` with piped output, waits until a line of its stderr satisfies `ready` (however slow the
/// machine: no fixed sleep decides when), sends it `signal`, and returns its exit code and its stdout and
/// stderr together. Panics, with what was printed, when stderr ends without such a line.
pub fn interrupt_when(cmd: &mut Command, ready: impl Fn(&str) -> bool, signal: i32) -> (Option<i32>, String) {
    use std::io::{BufRead, Read};
    let mut child =
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("rtcell starts");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("piped stderr"));
    let (mut seen, mut line) = (String::new(), String::new());
    while stderr.read_line(&mut line).expect("stderr reads") > 0 {
        seen.push_str(&line);
        if ready(&line) {
            // SAFETY: kill sends a signal to the child we spawned; it has no memory effects here.
            unsafe { libc::kill(child.id() as i32, signal) };
            stderr.read_to_string(&mut seen).expect("stderr reads");
            let o = child.wait_with_output().expect("rtcell ends");
            return (o.status.code(), format!("{}{seen}", String::from_utf8_lossy(&o.stdout)));
        }
        line.clear();
    }
    let o = child.wait_with_output().expect("rtcell ends");
    panic!("stderr ended before the line to interrupt at: {}{seen}", String::from_utf8_lossy(&o.stdout));
}

/// Sleeps `ms` milliseconds and says yes: for an [`interrupt_when`] condition that waits a moment after
/// its line.
pub fn pause(ms: u64) -> bool {
    std::thread::sleep(std::time::Duration::from_millis(ms));
    true
}
