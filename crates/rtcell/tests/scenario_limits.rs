//! End-to-end: what a hostile or careless scenario file, a stop at a bad moment, or a second run beside
//! this one can do to `rtcell run` (escaped and bounded complaints, prompt stops, directories of their
//! own, CPU locks that cover the Linux side). Timings are bounded far from what is measured, never
//! asserted tight.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn spawn(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill sends a signal to the child we spawned; it has no memory effects here.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// A shared object built from `c` with the system's C compiler (`None`: no compiler here).
fn shared_object(dir: &Path, name: &str, c: &str) -> Option<PathBuf> {
    let src = write(dir, &format!("{name}.c"), c);
    let so = dir.join(format!("lib{name}.so"));
    let ok = Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&src).status().is_ok_and(|s| s.success());
    ok.then_some(so)
}

/// Whether any process maps `path` (a library a cell loaded).
fn anyone_maps(path: &Path) -> bool {
    let want = path.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|e| std::fs::read_to_string(e.path().join("maps")).is_ok_and(|m| m.contains(&want)))
}

#[test]
fn complaints_with_control_characters_or_a_megabyte_key_are_escaped_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "ctl_key.toml",
            "duration_s = 1\n\"\\u001b[2J\\u001b[H\\u0007Cell evil: done (exit code 0)\" = 1\n".to_string(),
        ),
        ("long_key.toml", format!("duration_s = 1\n{} = 1\n", "A".repeat(1_000_000))),
    ];
    for (name, text) in cases {
        let f = write(dir.path(), name, &text);
        let o = rtcell()
            .args(["run", f.to_str().unwrap(), "--out", dir.path().join("o").to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{name}: {}", text_of(&o));
        assert!(o.stderr.len() < 8 * 1024, "{name}: {} bytes on stderr", o.stderr.len());
        assert!(!o.stderr.contains(&0x1b) && !o.stderr.contains(&0x07), "{name}: raw control bytes on stderr");
        assert!(String::from_utf8_lossy(&o.stderr).contains("nothing was started"), "{name}: {}", text_of(&o));
    }
}

fn text_of(o: &std::process::Output) -> String {
    let t = text(o);
    t.chars().take(2000).collect()
}

/// A stop while a task sleeps until a release a minute away ends the run within a second or so. The bound
/// (15 s) is far above that, so a loaded machine does not fail it, and far below the 60 s period the old
/// code slept through before it saw the stop.
#[test]
fn sigterm_ends_a_run_whose_task_sleeps_for_a_long_period_promptly() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "longperiod.toml",
        "duration_s = 100\n[tasks.a]\ncell = \"linux\"\nperiod_us = 60000000\npriority = 50\n\
         workload = { kind = \"spin\", us = 5 }\n",
    );
    let out = dir.path().join("run");
    let child = spawn(rtcell().args(["run", f.to_str().unwrap(), "--out", out.to_str().unwrap()]));
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    signal(&child, libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    let took = t0.elapsed();
    assert_eq!(o.status.code(), Some(130), "{}", text_of(&o));
    assert!(took < Duration::from_secs(15), "the stop took {took:?}");
    assert_eq!(valid_results(&out)["incomplete"], true);
}

/// SIGTERM while a C task's init hangs in the trial before the run (thread cell), or while a process
/// cell's init hangs (its init behaves in the trial only): exit 130 within a bound far below the trial's
/// and the start's own deadlines (10 s, 15 s), nothing left running.
#[test]
fn sigterm_during_the_c_trial_or_a_process_cells_start_ends_the_run_at_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // The libraries stand in for librtcell's attach (E_OK): only their init matters here.
    let attach = "unsigned char rtcell_cell_attach(void *b, unsigned long l, const char *const *c, unsigned long n)\n\
                  { (void)b; (void)l; (void)c; (void)n; return 0; }\n";
    let hang =
        format!("{attach}#include <unistd.h>\nvoid hang_init(void){{ for(;;) sleep(1); }}\nvoid hang_step(void){{}}\n");
    let sly = attach.to_string()
        + "#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\nvoid sly_init(void){\n\
               char b[4096]={0}; FILE *f=fopen(\"/proc/self/cmdline\",\"r\"); size_t n=f?fread(b,1,sizeof b-1,f):0;\n\
               if(f)fclose(f); for(size_t i=0;i<n;i++) if(!b[i]) b[i]=' ';\n\
               if(strstr(b,\"__c-probe\")) return; for(;;) sleep(1); }\nvoid sly_step(void){}\n";
    let (Some(hang_so), Some(sly_so)) =
        (shared_object(dir.path(), "hang", &hang), shared_object(dir.path(), "sly", &sly))
    else {
        rtcell_testkit::require!(false, "no C compiler (cc) to build the test libraries");
        return;
    };
    for (kind, name, so) in [("thread", "hang", &hang_so), ("process", "sly", &sly_so)] {
        let f = write(
            dir.path(),
            &format!("{name}.toml"),
            &format!(
                "duration_s = 1\n[cells.c]\nkind = \"{kind}\"\ncpu = 1\n[com.x]\n\
                 signals = [{{ id = 1, name = \"a\", type = \"uint8\" }}]\n[tasks.a]\ncell = \"c\"\nperiod_us = 1000\n\
                 priority = 50\nworkload = {{ kind = \"c\", library = \"{}\", init = \"{name}_init\", \
                 step = \"{name}_step\", com = [\"x\"] }}\n",
                so.display()
            ),
        );
        let out = dir.path().join(format!("run-{name}"));
        let child = spawn(rtcell().args(["run", f.to_str().unwrap(), "--out", out.to_str().unwrap()]));
        std::thread::sleep(Duration::from_millis(1500));
        let t0 = Instant::now();
        signal(&child, libc::SIGTERM);
        let o = child.wait_with_output().unwrap();
        let took = t0.elapsed();
        assert_eq!(o.status.code(), Some(130), "{name}: {}", text_of(&o));
        assert!(took < Duration::from_secs(5), "{name}: the stop took {took:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("interrupted"), "{name}: {}", text_of(&o));
        assert!(!anyone_maps(so), "{name}: a process still has {} loaded", so.display());
    }
}

/// Two runs started in the same second without --out each get a directory of their own.
#[test]
fn runs_in_the_same_second_never_share_a_results_directory() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "b.toml",
        "duration_s = 0.05\n[tasks.a]\ncell = \"linux\"\nperiod_us = 10000\npriority = 50\n\
         workload = { kind = \"spin\", us = 5 }\n",
    );
    for attempt in 0..3 {
        let work = dir.path().join(format!("w{attempt}"));
        std::fs::create_dir_all(&work).unwrap();
        let kids: Vec<Child> =
            (0..2).map(|_| spawn(rtcell().current_dir(&work).args(["run", f.to_str().unwrap()]))).collect();
        let outs: Vec<_> = kids.into_iter().map(|k| k.wait_with_output().unwrap()).collect();
        for o in &outs {
            assert_eq!(o.status.code(), Some(0), "{}", text_of(o));
        }
        let dirs: Vec<PathBuf> =
            std::fs::read_dir(work.join("rtcell-results")).unwrap().flatten().map(|e| e.path()).collect();
        let names: Vec<String> = dirs.iter().map(|d| d.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(dirs.len(), 2, "{names:?}");
        for d in &dirs {
            valid_results(d);
        }
        // Made in one second: the second one has a suffix. Otherwise try again (a second boundary fell
        // between the two starts).
        if names.iter().any(|n| n.ends_with("-2")) {
            return;
        }
    }
    panic!("three tries never started two runs in the same second");
}

/// The CPU lock covers the Linux side and the loads: a run whose master CPU is another run's cell CPU is
/// refused (exit 2, the holder named); two runs may share a master CPU.
#[test]
fn a_run_never_puts_its_linux_side_on_another_runs_cell_cpu() {
    let _serial = serial();
    let online = rtcell_host::cpu::online_cpus().unwrap_or_default();
    rtcell_testkit::require!(online.contains(&0) && online.contains(&1), "needs CPUs 0 and 1 online");
    let dir = tempfile::tempdir().unwrap();
    let rt = dir.path().join("rt");
    let run = |name: &str, text: &str| -> Command {
        let f = write(dir.path(), name, text);
        let mut c = rtcell();
        c.env("RTCELL_RUNTIME_DIR", &rt).args([
            "run",
            f.to_str().unwrap(),
            "--out",
            dir.path().join(format!("out-{name}")).to_str().unwrap(),
        ]);
        c
    };
    let a = spawn(&mut run(
        "cell_a.toml",
        "duration_s = 30\n[cells.c]\nkind = \"thread\"\ncpu = 1\n[tasks.a]\ncell = \"c\"\nperiod_us = 1000\n\
         priority = 50\nworkload = { kind = \"spin\", us = 5 }\n",
    ));
    // Until A holds CPU 1 (its record names it).
    let t0 = Instant::now();
    while !std::fs::read_to_string(rt.join("cpu1.lock")).is_ok_and(|r| r.contains(&format!("\"pid\":{}", a.id()))) {
        assert!(t0.elapsed() < Duration::from_secs(20), "run A never took CPU 1");
        std::thread::sleep(Duration::from_millis(50));
    }
    let master_b = run(
        "master_b.toml",
        "duration_s = 0.2\nmaster_cpu = 1\n[tasks.b]\ncell = \"linux\"\nperiod_us = 1000\npriority = 60\n\
         workload = { kind = \"spin\", us = 5 }\n",
    )
    .output()
    .unwrap();
    let load_c = run(
        "load_c.toml",
        "duration_s = 0.2\n[tasks.b]\ncell = \"linux\"\nperiod_us = 1000\npriority = 60\n\
         workload = { kind = \"spin\", us = 5 }\n[[loads]]\nkind = \"memcpy\"\ncpus = [1]\n",
    )
    .output()
    .unwrap();
    let shared_d = run(
        "shared_d.toml",
        "duration_s = 0.2\nmaster_cpu = 0\n[tasks.b]\ncell = \"linux\"\nperiod_us = 1000\npriority = 60\n\
         workload = { kind = \"spin\", us = 5 }\n",
    )
    .output()
    .unwrap();
    let a_id = a.id();
    signal(&a, libc::SIGTERM);
    let a = a.wait_with_output().unwrap();
    for (what, o) in [("master on CPU 1", &master_b), ("load on CPU 1", &load_c)] {
        assert_eq!(o.status.code(), Some(2), "{what}: {}", text_of(o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("CPU 1 is a cell CPU of another rtcell run"), "{what}: {err}");
        assert!(err.contains(&format!("pid {a_id}")), "{what}: {err}");
    }
    assert_eq!(shared_d.status.code(), Some(0), "a shared master CPU: {}", text_of(&shared_d));
    assert_eq!(a.status.code(), Some(130), "{}", text_of(&a));
}

/// A cycle that runs past the end of the run (an injection of 400 ms at cycle 900 of 1000) skips no
/// release after the end: cycles + skipped stay within the run's releases, as the README says.
#[test]
fn a_cycle_running_past_the_end_counts_only_releases_inside_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "inject_end.toml",
        "duration_s = 1\n[tasks.a]\ncell = \"linux\"\nperiod_us = 1000\npriority = 50\n\
         workload = { kind = \"spin\", us = 5, inject = { at_cycle = 900, cycles = 1, us = 400000 } }\n",
    );
    let out = dir.path().join("run");
    let o = rtcell().args(["run", f.to_str().unwrap(), "--out", out.to_str().unwrap()]).output().unwrap();
    assert!(matches!(o.status.code(), Some(0) | Some(1)), "{}", text_of(&o));
    let doc = valid_results(&out);
    let t = outcome_task(&doc, "a");
    let (cycles, skipped, expected) =
        (t["cycles"].as_u64().unwrap(), t["skipped"].as_u64().unwrap(), t["expected"].as_u64().unwrap());
    assert!(cycles + skipped <= expected + 1, "{cycles} cycles + {skipped} skipped of {expected}");
    assert!(cycles > 900, "{t}");
}
