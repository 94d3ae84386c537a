//! Cells that write what rtcell reports about them: a kvm payload's log flood, a payload that forges its
//! control block, a process cell that scribbles the statistics of its task. What a cell writes is shown
//! as its claim, bounded by what is possible, and never as the task's figures.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{c_shared_object, c_task_scenario, outcome_task, run_scenario, serial, valid_results};

/// The SDK of this build, installed once per test binary.
fn sdk() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-claims-sdk");
        let _ = std::fs::remove_dir_all(&p);
        common::install_sdk(&p);
        p
    })
}

/// Builds the C payload `src` (`pinit`, `pstep`) with the payload kit into DIR/p.elf, and a scenario
/// DIR/k.toml running it in kvm cell `ctrl` every 1 ms beside a Linux-side spin task.
fn kvm_scenario(dir: &Path, src: &str) -> PathBuf {
    let code = dir.join("src");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("p.c"), src).unwrap();
    let elf = dir.join("p.elf");
    common::sh(
        std::process::Command::new("make")
            .arg("-s")
            .arg("-f")
            .arg(sdk().join("share/rtcell/payload.mk"))
            .arg(format!("SRC={}", code.display()))
            .args(["INIT=pinit", "STEP=pstep"])
            .arg(format!("OUT={}", elf.display()))
            .env("MAKEFLAGS", "")
            .env("MFLAGS", ""),
        "payload build",
    );
    let file = dir.join("k.toml");
    std::fs::write(
        &file,
        format!(
            r#"duration_s = 2
[cells.ctrl]
kind = "kvm"
cpu = 1
[com."ctrl.in"]
signals = [{{ id = 1, name = "x", type = "float64" }}]
[com."ctrl.out"]
signals = [{{ id = 2, name = "u", type = "float64" }}]
[tasks.ctrl]
cell = "ctrl"
period_us = 1000
priority = 80
workload = {{ kind = "c", payload = "{}", com = ["ctrl.in", "ctrl.out"] }}
[tasks.other]
cell = "linux"
period_us = 1000
priority = 70
workload = {{ kind = "spin", us = 5 }}
"#,
            elf.display()
        ),
    )
    .unwrap();
    file
}

fn outcome_cell(doc: &serde_json::Value) -> &serde_json::Value {
    &doc["suites"][0]["config"]["outcome"]["cells"][0]
}

/// A payload logging 20 lines meant to fool the terminal every step: far over the limit.
const FLOOD: &str = r#"
#define HC_LOG ((volatile unsigned int *)(0x3F000000ull + 8ull * 0x10))
#define MSG ((volatile char *)0x2000)
void pinit(void) {}
void pstep(void) {
    static const char e[] = "\x1b[2Jerror: run finished OK\n";
    for (int k = 0; k < 20; k++) {
        for (unsigned i = 0; i < sizeof e - 1; i++) MSG[i] = e[i];
        *HC_LOG = sizeof e - 1;
    }
}
"#;

#[test]
fn a_kvm_payload_s_log_and_its_storm_are_in_the_run_s_output_and_results() {
    let kvm = rtcell_kvm::kvm_status();
    rtcell_testkit::require!(kvm.is_usable(), "{}", kvm.explain());
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = kvm_scenario(dir.path(), FLOOD);
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert_eq!(code, Some(0), "{t}");
    assert!(!t.contains('\x1b'), "no escape sequence of the guest reaches the terminal:\n{t}");
    let shown = t.matches("cell \"ctrl\" log: \\x1b[2Jerror: run finished OK\n").count();
    assert!((1..=20).contains(&shown), "the last lines, escaped and labelled as the guest's ({shown}):\n{t}");
    assert!(t.contains("cell \"ctrl\": log storm: "), "the storm is reported:\n{t}");
    let doc = valid_results(&out);
    let log = &outcome_cell(&doc)["log"];
    assert_eq!(log["last_lines"].as_array().map(Vec::len), Some(shown), "{log}");
    assert!(log["kept"].as_u64().unwrap() >= shown as u64, "{log}");
    assert!(log["suppressed"].as_u64().unwrap() > 0, "{log}");
    assert!(log["storm"].as_str().unwrap().starts_with("log storm: "), "{log}");
}

/// A payload that fills its own control block (writable: it is the cell's) with 0x41 at step 500.
const FORGER: &str = r#"
static int steps;
void pinit(void) {}
void pstep(void) {
    volatile unsigned long *b = (volatile unsigned long *)0x40000000ull;
    if (++steps == 500)
        for (int i = 0x2000 / 8; i < 0x3000 / 8; i++) b[i] = 0x4141414141414141ull;
}
"#;

#[test]
fn a_kvm_payload_s_forged_count_is_a_claim_and_an_impossible_one_fails_the_run() {
    let kvm = rtcell_kvm::kvm_status();
    rtcell_testkit::require!(kvm.is_usable(), "{}", kvm.explain());
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = kvm_scenario(dir.path(), FORGER);
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert_eq!(code, Some(1), "{t}");
    let line = t.lines().find(|l| l.starts_with("Cell \"ctrl\":")).unwrap_or_default();
    assert!(line.ends_with("steps or messages handled unknown (its control block was scribbled)"), "{t}");
    assert!(t.contains("cell \"ctrl\"'s control block was scribbled: it claims 4702111234474983746"), "{t}");
    let doc = valid_results(&out);
    let c = outcome_cell(&doc);
    assert!(c["handled"].is_null(), "{c}");
    assert_eq!(c["handled_is"], "the cell's claim", "{c}");
    assert!(c["handled_at_most"].as_u64().unwrap() < 10_000, "2 s at 1 kHz: {c}");
}

/// `rtcell ctl --connect unix:SOCK ARGS`: its stdout.
fn ctl(sock: &Path, args: &[&str]) -> String {
    let c = format!("unix:{}", sock.display());
    let mut v = vec!["ctl", "--connect", c.as_str()];
    v.extend_from_slice(args);
    let o = common::run(&v);
    if o.status.success() { String::from_utf8_lossy(&o.stdout).into_owned() } else { common::text(&o) }
}

/// The cell `ctrl` as `ctl status --json` shows it, once `done(run state, cell)` says so (at most 30 s).
fn served_cell(sock: &Path, done: impl Fn(&str, &serde_json::Value) -> bool) -> serde_json::Value {
    let t0 = std::time::Instant::now();
    let mut seen = String::new();
    loop {
        let out = ctl(sock, &["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let cell = v["cells"].as_array().and_then(|c| c.iter().find(|c| c["name"] == "ctrl")).cloned();
        match cell {
            Some(c) if done(v["run"]["state"].as_str().unwrap_or_default(), &c) => return c,
            Some(c) => seen = c.to_string(),
            None => {}
        }
        let log = std::fs::read_to_string(sock.with_extension("log")).unwrap_or_default();
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "not in 30 s; last seen {seen}, now {out}\n{log}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_kvm_payload_s_impossible_count_is_never_served_live_nor_at_the_end() {
    let kvm = rtcell_kvm::kvm_status();
    rtcell_testkit::require!(kvm.is_usable(), "{}", kvm.explain());
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let file = kvm_scenario(dir.path(), FORGER);
    let sock = dir.path().join("gw.sock");
    let out = dir.path().join("run");
    // Killed when the test ends, passed or failed: a run left lingering would hold the cell CPU.
    let _child = KillOnDrop(
        common::rtcell()
            .args(["run", file.to_str().unwrap(), "--duration", "3s", "--out", out.to_str().unwrap()])
            .args(["--serve", sock.to_str().unwrap(), "--linger", "20s"])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(sock.with_extension("log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let forged = 0x4141414141414141u64.to_string();
    // While the run goes (the block is forged at step 500, 0.5 s in): unknown, never the forged count.
    let live = served_cell(&sock, |run, c| run == "running" && c["handled"].is_null());
    assert_eq!(live["handled_is"], "the cell's claim", "{live}");
    let metrics = ctl(&sock, &["metrics"]);
    assert!(!metrics.contains(&forged), "{metrics}");
    assert!(!metrics.lines().any(|l| l.starts_with("rtcell_cell_handled_total{")), "no sample: {metrics}");
    assert!(
        metrics.lines().any(|l| l.starts_with("rtcell_cell_handled_impossible{cell=\"ctrl\"") && l.ends_with(" 1")),
        "{metrics}"
    );
    assert!(metrics.contains("# HELP rtcell_cell_handled Messages or steps the cell CLAIMS"), "{metrics}");
    // Once the run has ended (the final snapshot, served while it lingers): still unknown, not 0.
    let end = served_cell(&sock, |run, c| run != "running" && c["finished"] == true);
    assert!(end["handled"].is_null(), "{end}");
    let stats = ctl(&sock, &["stats"]);
    assert!(!stats.contains(&forged) && stats.contains("unknown (impossible claim)"), "{stats}");
    assert!(!ctl(&sock, &["status"]).contains(&forged));
}

/// A child process killed and reaped when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_honest_kvm_payload_s_count_is_shown_as_its_claim() {
    let kvm = rtcell_kvm::kvm_status();
    rtcell_testkit::require!(kvm.is_usable(), "{}", kvm.explain());
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = kvm_scenario(dir.path(), "void pinit(void) {}\nvoid pstep(void) {}\n");
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert_eq!(code, Some(0), "{t}");
    assert!(t.contains("steps or messages handled (the cell's claim)"), "{t}");
    let c = outcome_cell(&valid_results(&out)).clone();
    let (n, most) = (c["handled"].as_u64().unwrap(), c["handled_at_most"].as_u64().unwrap());
    assert!(n > 1000 && n <= most, "{c}");
}

/// A process cell's C code that finds the run's region (as an attacker would, through /proc/self/maps)
/// and, as `MODE` says: fills all of it with 0x8000000000000000 every 50 steps after step 200 (1);
/// writes a trip at cycle 10 into its task's statistics block at step 100 (2); overruns every period
/// from step 300 on and, from a thread of its own, as soon as its harness wrote the final block,
/// rewrites it with no overruns and a check word computed again (3); overruns from step 300 on (its
/// watchdog trips) and rewrites the final block as done, trip erased, from a library destructor (4)
/// or from a thread of its own (5); at step 300 writes a final `done` into its control block and its
/// task's block (a valid check word) and ends its process with `_exit(0)` (6).
const SCRIBBLER: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>
#include "rtcell.h"
static volatile uint64_t *base;
static size_t len;
static long n;
static volatile uint64_t *channel(const char *name) {
    uint64_t count = base[1] >> 32;
    for (uint64_t i = 0; i < count && i < 256; i++) {
        volatile uint64_t *e = base + 8 + i * 8;
        if (!strncmp((const char *)e, name, 32)) return base + e[5] / 8;
    }
    return 0;
}
static volatile uint64_t *block(void) { return channel("task.ctrl"); }
static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}
/* Words of the block: 0 state (3 done, 5 tripped; 3..6 final), 2 overruns, 3 consecutive, 4 longest
   run, 12 trip cycle, 13 watchdog overruns, 30 check word, 31 message length. */
static void seal(volatile uint64_t *w) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 64; i++)
        if (i != 30) h = (h ^ w[i]) * 0x00000100000001b3ull;
    w[30] = h | 1;
}
static int rewrite(void) {
    volatile uint64_t *w = base ? block() : 0;
    if (!w || w[0] < 3 || w[0] > 6) return 0;
    w[2] = 0; w[3] = 0; w[4] = 0;
    if (MODE != 3) { w[0] = 3; w[12] = 0; w[13] = 0; w[31] = 0; }
    seal(w);
    return 1;
}
static void *watch(void *a) {
    (void)a;
    for (;;) {
        if (rewrite()) return 0;
        struct timespec d = {0, 50000};
        nanosleep(&d, 0);
    }
}
__attribute__((destructor)) static void forge(void) {
    if (MODE == 4) rewrite();
}
void s_init(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char l[512];
    while (f && fgets(l, sizeof l, f)) {
        unsigned long a, b;
        if (strstr(l, "memfd:scenario-") && sscanf(l, "%lx-%lx", &a, &b) == 2) {
            base = (volatile uint64_t *)a;
            len = b - a;
            break;
        }
    }
    if (f) fclose(f);
    pthread_t t;
    if (base && (MODE == 3 || MODE == 5)) pthread_create(&t, 0, watch, 0);
}
void s_step(void) {
    double x = 1.0;
    Com_SendSignal(1, &x);
    n++;
    if (!base) return;
#if MODE == 1
    if (n > 200 && n % 50 == 0)
        for (size_t i = 0; i < len / 8; i++) base[i] = 0x8000000000000000ull;
#elif MODE == 2
    if (n == 100) {
        volatile uint64_t *w = block();
        if (w) w[12] = 11;
    }
#elif MODE == 6
    if (n == 300) {
        volatile uint64_t *w = block(), *c = channel("ctl.ctrl");
        if (w && c) {
            w[1] = n; w[0] = 3; seal(w);
            c[3] = 0; c[0] = 2;
            _exit(0);
        }
    }
#else
    if (n >= 300) {
        uint64_t t = now_ns();
        while (now_ns() - t < 1500000) {}
    }
#endif
}
"#;

fn scribbled_run(mode: u32) -> (Option<i32>, String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let src = format!("#define MODE {mode}\n{SCRIBBLER}");
    let so = c_shared_object(sdk(), dir.path(), "scribbler", &src);
    let file = c_task_scenario(dir.path(), "process", &so, "s_init", "s_step");
    if mode == 4 || mode == 5 {
        // Its watchdog trips on the third cycle above 1 ms.
        let toml = std::fs::read_to_string(&file).unwrap();
        let toml =
            toml.replacen("priority = 80\n", "priority = 80\nwatchdog = { time_us = 1000, sensitivity = 3 }\n", 1);
        std::fs::write(&file, toml).unwrap();
    }
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert!(out.join("results.json").is_file(), "{t}");
    (code, t, valid_results(&out))
}

#[test]
fn nothing_of_a_scribbled_statistics_block_is_shown_as_the_task_s() {
    let _serial = serial();
    let (code, t, doc) = scribbled_run(1);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("statistics block \"task.ctrl\" was scribbled"), "{t}");
    assert!(!t.contains("tripped at cycle"), "no trip verdict from scribbled memory:\n{t}");
    let line = t.lines().find(|l| l.starts_with("Cell \"ctrl\":")).unwrap_or_default();
    assert!(line.ends_with("steps or messages handled unknown (its control block was scribbled)"), "{t}");
    let c = outcome_task(&doc, "ctrl");
    assert_eq!(c["statistics_block"], "scribbled", "{c}");
    for k in ["trip_cycle", "cycles", "state", "message", "overruns"] {
        assert!(c[k].is_null(), "{k} unknown: {c}");
    }
    assert!(outcome_cell(&doc)["handled"].is_null(), "{}", outcome_cell(&doc));
}

#[test]
fn a_trip_claimed_by_a_task_without_a_watchdog_is_a_scribble() {
    let _serial = serial();
    let (code, t, doc) = scribbled_run(2);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("statistics block \"task.ctrl\" was scribbled: it claims a trip at cycle 10"), "{t}");
    assert!(!t.contains("tripped at cycle"), "{t}");
    let c = outcome_task(&doc, "ctrl");
    assert_eq!(c["statistics_block"], "scribbled", "{c}");
    assert!(c["trip_cycle"].is_null(), "{c}");
}

#[test]
fn a_cell_that_rewrites_its_final_figures_is_caught_by_what_was_read_live() {
    let _serial = serial();
    let (code, t, doc) = scribbled_run(3);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("statistics block \"task.ctrl\" was scribbled: its overruns went from"), "{t}");
    let c = outcome_task(&doc, "ctrl");
    assert_eq!(c["statistics_block"], "scribbled", "{c}");
    assert!(c["overruns"].is_null(), "{c}");
}

#[test]
fn a_trip_a_library_destructor_rewrites_as_done_is_still_a_trip() {
    let _serial = serial();
    let (code, t, doc) = scribbled_run(4);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("error: task \"ctrl\": watchdog: 3 consecutive cycles above 1000.0 us"), "{t}");
    let c = outcome_task(&doc, "ctrl");
    assert_eq!(c["state"], "tripped", "the destructor never ran: {c}");
    let line = t.lines().find(|l| l.starts_with("Cell \"ctrl\":")).unwrap_or_default();
    assert!(line.contains("tripped: a task's watchdog tripped (exit code 4)"), "the process's exit code:\n{t}");
    assert!(c["trip_cycle"].as_u64().is_some(), "{c}");
}

#[test]
fn a_trip_erased_after_the_harness_wrote_it_is_told_by_the_cell_s_exit_code() {
    let _serial = serial();
    let (code, t, doc) = scribbled_run(5);
    assert_eq!(code, Some(1), "{t}");
    assert!(
        t.contains("cell \"ctrl\" (process, CPU 1) faulted: ended with the exit code of a watchdog trip, but no statistics block"),
        "{t}"
    );
    let c = outcome_task(&doc, "ctrl");
    assert_eq!(c["statistics_block"], "scribbled", "{c}");
    assert!(c["state"].is_null(), "{c}");
}

#[test]
fn a_process_cell_that_ends_itself_early_as_done_is_an_error() {
    let _serial = serial();
    let (code, t, doc) = scribbled_run(6);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("cell \"ctrl\" (process, CPU 1) faulted: ended early: its process exited by itself"), "{t}");
    let c = outcome_task(&doc, "ctrl");
    assert_eq!(c["statistics_block"], "scribbled", "{c}");
    assert!(c["state"].is_null() && c["cycles"].is_null(), "{c}");
}

/// A payload that, at step 200 (0.2 s), claims 1500 steps handled (possible in the 2 s of the run, not
/// in the time it ran) and ends itself as done (HC_DONE, exit code 0).
const EARLY_CLAIM: &str = r#"
static unsigned long steps;
void pinit(void) {}
void pstep(void) {
    volatile unsigned long *b = (volatile unsigned long *)0x40000000ull;
    if (++steps == 200) {
        for (int i = 0x2000 / 8; i < 0x3000 / 8; i++)
            if (b[i] == steps - 1) b[i] = 1500;
        *(volatile unsigned int *)(0x3F000000ull + 8 * 0x11) = 0;
        for (;;) ;
    }
}
"#;

#[test]
fn a_kvm_payload_s_claim_is_bounded_by_the_time_it_ran_and_its_early_end_is_an_error() {
    let kvm = rtcell_kvm::kvm_status();
    rtcell_testkit::require!(kvm.is_usable(), "{}", kvm.explain());
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = kvm_scenario(dir.path(), EARLY_CLAIM);
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("cell \"ctrl\" (kvm, CPU 1) faulted: ended early: its VM ended by itself"), "{t}");
    assert!(t.contains("cell \"ctrl\"'s control block was scribbled: it claims 1500 "), "{t}");
    let c = outcome_cell(&valid_results(&out)).clone();
    assert!(c["handled"].is_null(), "{c}");
    assert!(c["handled_at_most"].as_u64().unwrap() < 1500, "bounded by the time it ran: {c}");
}

/// A payload that ends itself as done at its fifth step (5 ms after it started), before its run's
/// window opens.
const DONE_AT_ONCE: &str = r#"
static unsigned long steps;
void pinit(void) {}
void pstep(void) {
    if (++steps == 5) {
        *(volatile unsigned int *)(0x3F000000ull + 8 * 0x11) = 0;
        for (;;) ;
    }
}
"#;

#[test]
fn a_kvm_payload_that_ends_before_its_run_starts_is_an_error() {
    let kvm = rtcell_kvm::kvm_status();
    rtcell_testkit::require!(kvm.is_usable(), "{}", kvm.explain());
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = kvm_scenario(dir.path(), DONE_AT_ONCE);
    // The earlier runner saw the VM's end while the Linux side was starting, before it knew when the
    // run would end, and called it done. On a loaded machine the VM may end before the runner has seen
    // it running (the run is then refused, and shows nothing of this): up to three tries.
    let mut tries = 0;
    let (code, t) = loop {
        tries += 1;
        let (code, t) = run_scenario(&file, &[], &dir.path().join(format!("run{tries}")));
        if !t.contains("before it was running") || tries == 3 {
            break (code, t);
        }
    };
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("cell \"ctrl\" (kvm, CPU 1) faulted: ended early: its VM ended by itself"), "{t}");
}
