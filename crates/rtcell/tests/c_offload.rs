//! C code in cells, end to end: the SDK installed into a prefix, the example controller built out of
//! tree against it, and `examples/c-offload.toml` run in a thread, a process and a kvm cell with every
//! answer checked bit for bit; then the ways a C task can be broken, each reported with its cell's name.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{
    c_shared_object, c_task_scenario, outcome_task, repo, rtcell, run_scenario, serial, sh, text, valid_results,
};

/// A working directory for this test binary: the SDK prefix and the examples built against it.
struct Sdk {
    prefix: PathBuf,
    /// A copy of `examples/` holding c-offload.toml and the built c-controller.
    examples: PathBuf,
}

/// Installs the SDK (once per test binary) and builds the example controller out of tree with it.
fn sdk() -> &'static Sdk {
    static SDK: OnceLock<Sdk> = OnceLock::new();
    SDK.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-offload");
        let _ = std::fs::remove_dir_all(&root);
        let prefix = root.join("prefix");
        let examples = root.join("examples");
        std::fs::create_dir_all(&examples).unwrap();
        common::install_sdk(&prefix);
        std::fs::copy(repo().join("examples/c-offload.toml"), examples.join("c-offload.toml")).unwrap();
        let src = repo().join("examples/c-controller");
        let dst = examples.join("c-controller");
        std::fs::create_dir_all(&dst).unwrap();
        for e in std::fs::read_dir(&src).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
            }
        }
        sh(
            Command::new("make")
                .arg("-C")
                .arg(&dst)
                .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
                .env("MAKEFLAGS", "")
                .env("MFLAGS", ""),
            "make -C examples/c-controller against the installed SDK",
        );
        assert!(dst.join("build/libctrl.so").is_file(), "the shared object for thread and process cells");
        assert!(dst.join("build/ctrl.elf").is_file(), "the payload for kvm cells");
        Sdk { prefix, examples }
    })
}

fn offload_in(kind: &str) {
    let _serial = serial();
    let sdk = sdk();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&sdk.examples.join("c-offload.toml"), &["--kind", &format!("ctrl={kind}")], &out);
    assert_eq!(code, Some(0), "c-offload in a {kind} cell failed:\n{t}");
    let doc = valid_results(&out);
    assert_eq!(doc["suites"][0]["config"]["cells"][0]["kind"], kind, "{t}");
    let m = &outcome_task(&doc, "master")["messages"];
    let (sent, received, wrong, unchecked) = (
        m["sent"].as_u64().unwrap(),
        m["received"].as_u64().unwrap(),
        m["wrong"].as_u64().unwrap(),
        m["unchecked"].as_u64().unwrap(),
    );
    assert_eq!(wrong, 0, "answers differed from the reference:\n{t}");
    assert_eq!(unchecked, 0, "every answer is checked:\n{t}");
    // Every sample is held until answered: at most the last one is still out at the end.
    assert!(received + 1 >= sent, "{received} answers of {sent}\n{t}");
    assert!(received > 5_000, "2 s at 10 kHz: {received} answers\n{t}");
    assert!(t.contains("f64, bit for bit; 0 wrong"), "{t}");
    if kind == "kvm" {
        let cell = &doc["suites"][0]["config"]["outcome"]["cells"][0];
        assert!(cell["handled"].as_u64().unwrap() > 10_000, "the payload's steps are counted: {cell}\n{t}");
    } else {
        let c = outcome_task(&doc, "ctrl");
        assert_eq!(c["state"], "done", "{t}");
        assert!(c["cycles"].as_u64().unwrap() > 10_000, "ctrl_step every 50 us: {c}");
    }
}

#[test]
fn the_c_controller_runs_in_a_thread_cell_with_every_answer_bit_exact() {
    offload_in("thread");
}

#[test]
fn the_c_controller_runs_in_a_process_cell_with_every_answer_bit_exact() {
    offload_in("process");
}

#[test]
fn the_c_controller_runs_in_a_kvm_cell_with_every_answer_bit_exact() {
    let kvm = rtcell_kvm::kvm_status();
    rtcell_testkit::require!(kvm.is_usable(), "{}", kvm.explain());
    offload_in("kvm");
}

/// A scenario with one C task in cell `ctrl` (kind `kind`) running `library`'s `init`/`step`.
const BROKEN: &str = r#"
#include <stddef.h>
#include "rtcell.h"
static volatile int *nowhere = NULL;
static int steps;
void ok_init(void) {}
void crash_init(void) { *nowhere = 1; }
void ok_step(void) { double x = 1.0; Com_SendSignal(1, &x); }
void crash_step(void) { if (++steps == 200) *nowhere = 1; }
"#;

#[test]
fn a_library_without_the_named_step_is_refused_with_the_cell_name_before_anything_starts() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let so = c_shared_object(&sdk().prefix, dir.path(), "broken", BROKEN);
    let file = c_task_scenario(dir.path(), "thread", &so, "ok_init", "no_such_step");
    let (code, t) = run_scenario(&file, &[], &dir.path().join("run"));
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("cell \"ctrl\"") && t.contains("no_such_step") && t.contains("nothing was started"), "{t}");
}

#[test]
fn a_crash_in_init_is_reported_with_the_cell_name_and_does_not_take_rtcell_down() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let so = c_shared_object(&sdk().prefix, dir.path(), "broken", BROKEN);
    for kind in ["thread", "process"] {
        let file = c_task_scenario(dir.path(), kind, &so, "crash_init", "ok_step");
        let (code, t) = run_scenario(&file, &[], &dir.path().join(format!("run-{kind}")));
        assert_eq!(code, Some(1), "{kind}: {t}");
        assert!(t.contains("cell \"ctrl\"") && t.contains("crash_init") && t.contains("SIGSEGV"), "{kind}: {t}");
    }
}

#[test]
fn a_crash_in_a_process_cell_step_stops_that_cell_only() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let so = c_shared_object(&sdk().prefix, dir.path(), "broken", BROKEN);
    let file = c_task_scenario(dir.path(), "process", &so, "ok_init", "crash_step");
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("cell \"ctrl\" (process, CPU 1) killed by signal") && t.contains("SIGSEGV"), "{t}");
    let doc = valid_results(&out);
    let other = outcome_task(&doc, "other");
    assert_eq!(other["state"], "done", "the Linux-side task ran to the end: {other}\n{t}");
    assert!(other["cycles"].as_u64().unwrap() > 1500, "{other}");
}

#[test]
fn a_library_not_linked_with_librtcell_is_refused_with_a_fix() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("plain.c");
    std::fs::write(&c, "void plain_step(void) {}\n").unwrap();
    let so = dir.path().join("libplain.so");
    sh(Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&c), "cc -shared");
    let file = c_task_scenario(dir.path(), "thread", &so, "plain_step", "plain_step");
    let (code, t) = run_scenario(&file, &[], &dir.path().join("run"));
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("rtcell_cell_attach") && t.contains("pkg-config --cflags --libs rtcell"), "{t}");
}

/// A named region holding COM channel `io` (signal 1: float64).
fn io_region(name: &str) -> rtcell_shm::mapping::SharedMemory {
    let mut l = rtcell_shm::RegionLayout::new();
    l.com(
        "io",
        rtcell_shm::ComConfig {
            signals: vec![rtcell_shm::SignalDef { id: 1, max_len: 8, dynamic: false, group: None }],
            groups: vec![],
        },
    )
    .unwrap();
    let (shm, _) = rtcell_shm::mapping::SharedMemory::create_named(name, l.size_bytes()).unwrap();
    l.init(shm.words(), std::process::id()).unwrap();
    shm
}

#[test]
fn a_program_builds_out_of_tree_against_the_installed_sdk_with_pkg_config_and_with_cmake() {
    let sdk = sdk();
    let dir = tempfile::tempdir().unwrap();
    let src = repo().join("crates/rtcell/tests/c/out_of_tree");
    for f in ["app.c", "Makefile", "CMakeLists.txt"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let name = format!("oot-{}", std::process::id());
    let _region = io_region(&name);
    // pkg-config and make.
    sh(
        Command::new("make")
            .arg("-C")
            .arg(dir.path())
            .env("PKG_CONFIG_PATH", sdk.prefix.join("lib/pkgconfig"))
            .env("MAKEFLAGS", ""),
        "make with pkg-config",
    );
    let t = sh(Command::new(dir.path().join("build/app")).arg(&name), "the pkg-config build");
    assert!(t.contains("ok 42.5"), "{t}");
    // CMake, shared and static.
    let build = dir.path().join("cmake-build");
    sh(
        Command::new("cmake")
            .arg("-S")
            .arg(dir.path())
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", sdk.prefix.display())),
        "cmake configure",
    );
    sh(Command::new("cmake").arg("--build").arg(&build), "cmake --build");
    for exe in ["app", "app_static"] {
        let t = sh(Command::new(build.join(exe)).arg(&name), exe);
        assert!(t.contains("ok 42.5"), "{exe}: {t}");
    }
    // The shared library is found through the installed prefix, not the build tree.
    let ldd = sh(Command::new("ldd").arg(build.join("app")), "ldd");
    assert!(ldd.contains(&sdk.prefix.join("lib/librtcell.so.0").display().to_string()), "{ldd}");
    // The example controller with its CMakeLists.txt, out of tree.
    let ctrl_build = dir.path().join("ctrl-build");
    sh(
        Command::new("cmake")
            .arg("-S")
            .arg(sdk.examples.join("c-controller"))
            .arg("-B")
            .arg(&ctrl_build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", sdk.prefix.display())),
        "cmake configure of examples/c-controller",
    );
    sh(Command::new("cmake").arg("--build").arg(&ctrl_build), "cmake --build of examples/c-controller");
    let nm = sh(Command::new("nm").arg("-D").arg("--defined-only").arg(ctrl_build.join("libctrl.so")), "nm");
    assert!(nm.contains(" T ctrl_step") && nm.contains(" T ctrl_init"), "{nm}");
}

#[test]
fn bench_capi_puts_the_c_and_rust_figures_side_by_side() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = rtcell()
        .args(["bench", "capi", "--quick", "--steps", "4000", "--round-trips", "800", "--out"])
        .arg(&out)
        .output()
        .expect("rtcell runs");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let doc = valid_results(&out);
    let suite = &doc["suites"][0];
    assert_eq!(suite["suite"], "capi");
    let series = suite["series"].as_array().unwrap();
    for (name, label, value) in [
        ("capi_step_exec", "impl", "c"),
        ("capi_step_exec", "impl", "rust"),
        ("capi_com_round_trip", "api", "c"),
        ("capi_com_round_trip", "api", "rust"),
    ] {
        let s = series
            .iter()
            .find(|s| s["name"] == name && s["labels"][label] == value)
            .unwrap_or_else(|| panic!("no {name} {label}={value}: {t}"));
        assert!(s["stats"]["count"].as_u64().unwrap() > 0, "{s}");
        assert!(s["stats"]["median"].as_f64().is_some_and(|m| m.is_finite() && m > 0.0), "{s}");
    }
    assert_eq!(suite["config"]["step_mismatches"], 0, "the C step is bit-exact with Rust's: {t}");
    assert!(suite["config"]["step_ratio"].as_f64().is_some_and(f64::is_finite), "{t}");
    assert!(t.contains("C step / Rust step") && t.contains("C API round trip / Rust API round trip"), "{t}");
}
