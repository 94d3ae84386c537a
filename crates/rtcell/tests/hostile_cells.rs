//! Process cells whose C code attacks the Linux side: output meant to fool the terminal, a schedule
//! moved, a process forked to outlive the run, the region's directory rewritten. Each is named, kept
//! to the cell, and leaves nothing behind.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{c_shared_object, c_task_scenario, outcome_task, rtcell, run_scenario, serial, text, valid_results};

/// Builds `src` into DIR/libNAME.so against the SDK, installed once per test binary.
fn so(dir: &Path, name: &str, src: &str) -> PathBuf {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-cells-sdk");
        let _ = std::fs::remove_dir_all(&p);
        common::install_sdk(&p);
        p
    });
    c_shared_object(prefix, dir, name, src)
}

/// A process cell's C code writing to its standard output and error: screen clearing, a forged
/// verdict, then a line every step.
const NOISY: &str = r#"
#include <unistd.h>
#include "rtcell.h"
static int steps;
void noisy_init(void) {}
void noisy_step(void) {
    double x = 1.0;
    Com_SendSignal(1, &x);
    if (++steps == 10) {
        const char m[] = "\033[2J\033[HCell \"ctrl\": done (exit code 0)\n";
        write(2, m, sizeof m - 1);
        write(1, m, sizeof m - 1);
    } else if (steps > 10) {
        write(1, "tick\n", 5);
    }
}
"#;

#[test]
fn a_process_cell_s_output_is_escaped_attributed_and_rate_limited_never_raw_on_the_terminal() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let so = so(dir.path(), "noisy", NOISY);
    let file = c_task_scenario(dir.path(), "process", &so, "noisy_init", "noisy_step");
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert_eq!(code, Some(0), "{t}");
    assert!(!t.contains('\x1b'), "no escape sequence of the cell reaches the terminal:\n{t}");
    let forged = "cell \"ctrl\": \\x1b[2J\\x1b[HCell \"ctrl\": done (exit code 0)";
    assert_eq!(t.matches(forged).count(), 2, "both lines shown escaped, as the cell's:\n{t}");
    assert!(t.contains("cell \"ctrl\": tick"), "{t}");
    assert!(t.contains("lines of its output suppressed (limit 100 per second"), "a flood is counted:\n{t}");
    // The cell's task was never held up by its output (the pipe is drained, the rest dropped).
    let doc = valid_results(&out);
    let c = outcome_task(&doc, "ctrl");
    assert_eq!(c["state"], "done", "{c}\n{t}");
    let (cycles, expected) = (c["cycles"].as_u64().unwrap(), c["expected"].as_u64().unwrap());
    assert!(cycles + c["skipped"].as_u64().unwrap() + expected / 100 + 1 >= expected, "{c}\n{t}");
}

/// C that finds the run's region in the cell's address space, as an attacker would (through
/// /proc/self/maps): `region()` is its first word (NULL if not found), `entry(name)` its directory entry.
const REGION_C: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "rtcell.h"
static volatile uint64_t *region(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long a = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, "memfd:scenario-")) { sscanf(line, "%lx", &a); break; }
    }
    if (f) fclose(f);
    return (volatile uint64_t *)a;
}
static volatile uint64_t *entry(volatile uint64_t *w, const char *name) {
    uint64_t count = w[1] >> 32;
    for (uint64_t i = 0; i < count && i < 256; i++) {
        volatile uint64_t *e = w + 8 + i * 8;
        if (!strncmp((const char *)e, name, 32)) return e;
    }
    return 0;
}
"#;

/// A process cell's C code (after [`REGION_C`]) that writes the end of the schedule (word 2 of the
/// `sched` block) to "now" at its step 300.
const ENDNOW: &str = r#"
static int n;
void endnow_init(void) {}
void endnow_step(void) {
    double x = 1.0;
    Com_SendSignal(1, &x);
    volatile uint64_t *w = n++ == 300 ? region() : 0;
    volatile uint64_t *e = w ? entry(w, "sched") : 0;
    if (e) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        w[e[5] / 8 + 2] = (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
    }
}
"#;

#[test]
fn a_process_cell_that_moves_the_end_of_the_schedule_is_named_and_cannot_end_the_linux_side() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let so = so(dir.path(), "endnow", &format!("{REGION_C}{ENDNOW}"));
    let file = c_task_scenario(dir.path(), "process", &so, "endnow_init", "endnow_step");
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert_eq!(code, Some(1), "a run whose schedule a cell changed fails:\n{t}");
    assert!(t.contains("schedule block \"sched\" was changed by a cell"), "{t}");
    let doc = valid_results(&out);
    let other = outcome_task(&doc, "other");
    assert_eq!(other["state"], "done", "{other}\n{t}");
    let (cycles, skipped, expected) =
        (other["cycles"].as_u64().unwrap(), other["skipped"].as_u64().unwrap(), other["expected"].as_u64().unwrap());
    assert!(
        cycles + skipped + expected / 100 + 1 >= expected,
        "the Linux-side task ran to the supervisor's end, not the cell's: {other}\n{t}"
    );
}

/// A process cell's C code that starts a thread at step 3 and forks at step 5: the child leaves the
/// session (`setsid`) and spins at the priority and on the CPU it inherited (1 ms of every 2, for at
/// most a minute). Files in DIR: `cell.pid`, `thread` (the thread ran), `fork` (fork's result and
/// errno), `child.pid` (written by the child, if there is one).
const FORKER: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "rtcell.h"
static int n;
static void note(const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "@DIR@/%s", name);
    FILE *f = fopen(p, "w");
    if (f) { fputs(text, f); fclose(f); }
}
static void *thread_body(void *a) { (void)a; note("thread", "ran\n"); return NULL; }
static long ns_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}
void fork_init(void) { char b[32]; snprintf(b, sizeof b, "%d\n", (int)getpid()); note("cell.pid", b); }
void fork_step(void) {
    double x = 1.0;
    Com_SendSignal(1, &x);
    if (++n == 3) {
        pthread_t t;
        if (pthread_create(&t, NULL, thread_body, NULL) == 0) pthread_join(t, NULL);
    } else if (n == 5) {
        pid_t p = fork();
        if (p == 0) {
            setsid();
            char b[32];
            snprintf(b, sizeof b, "%d\n", (int)getpid());
            note("child.pid", b);
            for (int i = 0; i < 30000; i++) {
                struct timespec t0;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                while (ns_since(&t0) < 1000000L) {}
                usleep(1000);
                if (i % 100 == 0) write(2, "child alive\n", 12);
            }
            _exit(0);
        }
        char b[64];
        snprintf(b, sizeof b, "%d %d\n", (int)p, p < 0 ? errno : 0);
        note("fork", b);
    } else if (n == 7) {
        /* From the step thread: an exec here would leave a process without the death signal. */
        char *argv[] = {"sleep", "60", NULL};
        int r = execv("/bin/sleep", argv);
        char b[64];
        snprintf(b, sizeof b, "%d %d\n", r, errno);
        note("exec", b);
    } else if (n == 9) {
        char path[64], b[64];
        snprintf(path, sizeof path, "/proc/%d/mem", (int)getppid());
        int fd = open(path, O_RDWR);
        /* A change of the file-system user would clear the death signal as well. */
        snprintf(b, sizeof b, "%d %d %d %ld\n", fd < 0 ? -1 : 0, fd < 0 ? errno : 0, prctl(PR_SET_PDEATHSIG, 0),
                 syscall(SYS_setfsuid, 65534));
        note("mem", b);
    }
}
"#;

/// The pid in `file`, if the file was written.
fn pid_in(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok().and_then(|s| s.trim().parse().ok())
}

/// Whether process `pid` is gone within `bound`; one still there is killed (never left spinning on the
/// cell CPU by a failing test).
fn gone_within(pid: i32, bound: std::time::Duration) -> bool {
    let t0 = std::time::Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        if t0.elapsed() > bound {
            // SAFETY: kill with a pid we read and a signal number; no memory is touched.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}

/// No process of the cell is left: the child it forked, if the fork worked, is gone; if it did not,
/// the C code saw the fork refused with EPERM. Threads still work.
fn nothing_left_of_the_forker(dir: &Path, t: &str) {
    // 5 s: far more than a SIGKILL's delivery takes even on a loaded machine.
    let bound = std::time::Duration::from_secs(5);
    if let Some(cell) = pid_in(&dir.join("cell.pid")) {
        assert!(gone_within(cell, bound), "the cell process {cell} outlived its run:\n{t}");
    }
    if let Some(child) = pid_in(&dir.join("child.pid")) {
        assert!(gone_within(child, bound), "the process {child} the cell forked outlived the run:\n{t}");
    }
    let fork = std::fs::read_to_string(dir.join("fork")).unwrap_or_default();
    assert_eq!(fork.trim(), format!("-1 {}", libc::EPERM), "the cell's fork is refused with EPERM:\n{t}");
    assert!(dir.join("thread").is_file(), "a process cell's C code can still start a thread:\n{t}");
    let exec = std::fs::read_to_string(dir.join("exec")).unwrap_or_default();
    assert_eq!(exec.trim(), format!("-1 {}", libc::EPERM), "the cell's exec is refused with EPERM:\n{t}");
    let mem = std::fs::read_to_string(dir.join("mem")).unwrap_or_default();
    let refused = [libc::EACCES, libc::EPERM].map(|e| format!("-1 {e} -1 -1"));
    assert!(
        refused.contains(&mem.trim().to_string()),
        "rtcell's memory cannot be opened (EACCES or EPERM), the death signal not dropped (prctl, setfsuid), \
         got {mem:?}:\n{t}"
    );
}

#[test]
fn a_process_cell_cannot_fork_a_process_that_outlives_its_run() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let so = so(dir.path(), "forker", &FORKER.replace("@DIR@", &dir.path().display().to_string()));
    let file = c_task_scenario(dir.path(), "process", &so, "fork_init", "fork_step");
    let runtime = dir.path().join("runtime");
    let o = rtcell()
        .env("RTCELL_RUNTIME_DIR", &runtime)
        .arg("run")
        .arg(&file)
        .args(["--duration", "2s", "--out"])
        .arg(dir.path().join("run"))
        .output()
        .expect("rtcell runs");
    let t = text(&o);
    nothing_left_of_the_forker(dir.path(), &t);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let c = outcome_task(&valid_results(&dir.path().join("run")), "ctrl").clone();
    assert_eq!(c["state"], "done", "the task went on after its fork was refused: {c}\n{t}");
    assert!(rtcell_host::cpulock::lock_cpus_in(&runtime, &[1]).is_ok(), "CPU 1 is free after the run");
}

#[test]
fn a_process_cell_of_a_killed_run_leaves_no_process_behind() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let so = so(dir.path(), "forker", &FORKER.replace("@DIR@", &dir.path().display().to_string()));
    let file = c_task_scenario(dir.path(), "process", &so, "fork_init", "fork_step");
    let runtime = dir.path().join("runtime");
    let mut run = rtcell()
        .env("RTCELL_RUNTIME_DIR", &runtime)
        .arg("run")
        .arg(&file)
        .args(["--duration", "60s", "--out"])
        .arg(dir.path().join("run"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("rtcell run starts");
    let t0 = std::time::Instant::now();
    while !dir.path().join("mem").is_file() {
        if let Ok(Some(st)) = run.try_wait() {
            panic!("the run ended ({st}) before its cell tried fork, exec and /proc/PPID/mem");
        }
        if t0.elapsed() > std::time::Duration::from_secs(60) {
            let _ = run.kill();
            let _ = run.wait();
            panic!("the cell did not reach its step 9 within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    run.kill().expect("SIGKILL to the run");
    let _ = run.wait();
    nothing_left_of_the_forker(dir.path(), "(run killed with SIGKILL)");
    assert!(rtcell_host::cpulock::lock_cpus_in(&runtime, &[1]).is_ok(), "CPU 1 is free after the killed run");
}

/// A process cell's C code (after [`REGION_C`]) that, from its 100th step on, rewrites in every step the
/// directory entry of the Linux-side task `other`'s counters to point at those of the slow task `slow`.
const REDIRECT: &str = r#"
static volatile uint64_t *w;
static int n;
void redir_init(void) { w = region(); }
void redir_step(void) {
    double x = 1.0;
    Com_SendSignal(1, &x);
    if (!w || ++n < 100) return;
    volatile uint64_t *from = entry(w, "task.other"), *to = entry(w, "task.slow");
    if (from && to) { from[5] = to[5]; from[6] = to[6]; from[7] = to[7]; }
}
"#;

#[test]
fn a_process_cell_that_rewrites_the_region_directory_is_named_and_redirects_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let lib = so(dir.path(), "redirect", &format!("{REGION_C}{REDIRECT}"));
    let file = c_task_scenario(dir.path(), "process", &lib, "redir_init", "redir_step");
    let mut toml = std::fs::read_to_string(&file).unwrap();
    toml.push_str(
        "[tasks.slow]\ncell = \"linux\"\nperiod_us = 100000\npriority = 60\nworkload = { kind = \"spin\", us = 5 }\n",
    );
    std::fs::write(&file, toml).unwrap();
    let out = dir.path().join("run");
    let (code, t) = run_scenario(&file, &[], &out);
    assert_eq!(code, Some(1), "a run whose directory a cell rewrote fails:\n{t}");
    assert!(t.contains("directory entry") && t.contains("\"task.other\" was rewritten"), "{t}");
    let doc = valid_results(&out);
    let other = outcome_task(&doc, "other");
    let (cycles, skipped, expected) =
        (other["cycles"].as_u64().unwrap(), other["skipped"].as_u64().unwrap(), other["expected"].as_u64().unwrap());
    // Redirected, the report would show `slow`'s counters: about 20 cycles of the 2,000 expected.
    assert!(
        cycles + skipped + expected / 100 + 1 >= expected,
        "the report read task other's own counters, not those the cell pointed it at: {other}\n{t}"
    );
}

/// A process cell's C code that writes its pid to @DIR@/cell.pid in its first step (the trial runs
/// only init).
const PIDFILE: &str = r#"
#include <stdio.h>
#include <unistd.h>
#include "rtcell.h"
static int steps;
void pid_init(void) {}
void pid_step(void) {
    double x = 1.0;
    Com_SendSignal(1, &x);
    if (steps++ == 0) {
        FILE *f = fopen("@DIR@/cell.pid.tmp", "w");
        FILE *g = fopen("@DIR@/cell.sid", "w");
        if (g) { fprintf(g, "%d\n", (int)getsid(0)); fclose(g); }
        if (f) { fprintf(f, "%d\n", (int)getpid()); fclose(f); rename("@DIR@/cell.pid.tmp", "@DIR@/cell.pid"); }
    }
}
"#;

/// A cell process that outlives SIGKILL (here: held by a tracer that is not rtcell, so its end is shown
/// to the tracer first and rtcell cannot reap it, as a process stuck in the kernel would be) is named
/// and abandoned: the run ends on its clock, exits 1 and writes its results; the process goes once the
/// tracer lets go.
#[test]
fn a_process_cell_that_cannot_be_reaped_is_abandoned_and_named_and_the_run_still_ends() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let lib = so(dir.path(), "pidfile", &PIDFILE.replace("@DIR@", &dir.path().display().to_string()));
    let file = c_task_scenario(dir.path(), "process", &lib, "pid_init", "pid_step");
    let out = dir.path().join("run");
    let run = rtcell()
        .env("RTCELL_RUNTIME_DIR", dir.path().join("runtime"))
        .arg("run")
        .arg(&file)
        .args(["--duration", "5s", "--out"])
        .arg(&out)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("rtcell run starts");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run.wait_with_output());
    });
    let t0 = std::time::Instant::now();
    let pid = loop {
        if let Some(pid) = pid_in(&dir.path().join("cell.pid")) {
            break pid;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "the cell did not write its pid within 60 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(pid_in(&dir.path().join("cell.sid")), Some(pid), "the cell leads a session of its own (no terminal)");
    let tracer = rtcell_testkit::Tracer::seize(pid);
    // Bounded: the run ends on its own clock (5 s) plus the stop's deadlines, whatever the cell does.
    let o = rx.recv_timeout(std::time::Duration::from_secs(120));
    drop(tracer);
    let o = o.expect("the run did not end within 120 s").expect("rtcell ran");
    let t = text(&o);
    assert!(gone_within(pid, std::time::Duration::from_secs(60)), "pid {pid} was never reaped:\n{t}");
    let msg = format!("process pid {pid} did not end within 2 s of SIGKILL");
    assert!(t.contains(&msg) && t.contains("abandoned"), "the cell's process is named as abandoned:\n{t}");
    assert_eq!(o.status.code(), Some(1), "{t}");
    let doc = valid_results(&out).to_string();
    assert!(doc.contains(&msg), "results.json names it:\n{t}");
}

/// A process cell's C code trying, from its step (after its harness confined it), what would let it
/// make its harness measure false times or run code of its own in the harness's place: an `rdtsc` that
/// traps to it, a seccomp filter of its own, its own code page made writable and executable, a new
/// executable mapping, a page moved over another, an io_uring (unseen by seccomp). Each result goes to
/// DIR/sealed as `name return errno`. With `CTOR`, a constructor writes over a vDSO page (made writable
/// while the libraries load) instead.
const SEALED: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <linux/seccomp.h>
#include <linux/filter.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "rtcell.h"
static int n;
static FILE *out;
static void note(const char *name, long r) { fprintf(out, "%s %ld %d\n", name, r, r == -1 ? errno : 0); }
#ifdef CTOR
__attribute__((constructor)) static void patch_vdso(void) {
    volatile unsigned char *v = (unsigned char *)getauxval(AT_SYSINFO_EHDR);
    /* The whole vDSO (a special mapping is not split): its size in pages is tried. */
    for (size_t len = 4096; v && len <= 65536; len += 4096)
        if (mprotect((void *)v, len, PROT_READ | PROT_WRITE | PROT_EXEC) == 0) {
            v[0] = v[0];
            mprotect((void *)v, len, PROT_READ | PROT_EXEC);
            break;
        }
}
#endif
void sealed_init(void) {}
void sealed_step(void) {
    double x = 1.0;
    Com_SendSignal(1, &x);
    if (++n != 5) return;
    out = fopen("@DIR@/sealed", "w");
    if (!out) return;
    note("tsc", prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0));
    prctl(PR_SET_TSC, PR_TSC_ENABLE, 0, 0, 0);
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = { 1, &allow };
    note("seccomp", syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
    uintptr_t code = (uintptr_t)sealed_step & ~(uintptr_t)4095;
    note("mprotect", mprotect((void *)code, 4096, PROT_READ | PROT_WRITE | PROT_EXEC));
    void *m = mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    note("mmap", m == MAP_FAILED ? -1 : 0);
    char *d = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *r = d == MAP_FAILED ? MAP_FAILED : mremap(d, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, d + 4096);
    note("mremap", r == MAP_FAILED ? -1 : 0);
    unsigned char params[120] = {0};
    long u = syscall(SYS_io_uring_setup, 4, params);
    note("io_uring", u < 0 ? -1 : 0);
    fclose(out);
}
"#;

/// Builds SEALED (with `-DCTOR` when `ctor`) and runs it in process cell `ctrl` (results in DIR/run).
fn sealed_run(dir: &Path, ctor: bool) -> (Option<i32>, String) {
    let src = SEALED.replace("@DIR@", &dir.display().to_string());
    let src = if ctor { format!("#define CTOR 1\n{src}") } else { src };
    let so = so(dir, "sealed", &src);
    let file = c_task_scenario(dir, "process", &so, "sealed_init", "sealed_step");
    run_scenario(&file, &[], &dir.join("run"))
}

#[test]
fn a_process_cell_can_neither_trap_its_harness_s_clocks_nor_make_anything_executable() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (code, t) = sealed_run(dir.path(), false);
    let doc = valid_results(&dir.path().join("run"));
    let got = std::fs::read_to_string(dir.path().join("sealed")).unwrap_or_default();
    let refused: Vec<&str> = got.lines().filter(|l| l.ends_with(&format!(" -1 {}", libc::EPERM))).collect();
    for name in ["tsc", "seccomp", "mprotect", "mmap", "mremap", "io_uring"] {
        assert!(refused.iter().any(|l| l.starts_with(&format!("{name} "))), "{name} refused with EPERM: {got:?}\n{t}");
    }
    assert_eq!(code, Some(0), "{t}");
    assert_eq!(outcome_task(&doc, "ctrl")["state"], "done", "the task went on after the refusals:\n{t}");
}

#[test]
fn a_process_cell_whose_library_writes_over_code_as_it_loads_is_faulted() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (code, t) = sealed_run(dir.path(), true);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("code was written over while the C libraries loaded"), "{t}");
    assert!(t.contains("[vdso]"), "the mapping is named:\n{t}");
    assert!(!dir.path().join("sealed").exists(), "no step ran:\n{t}");
}
