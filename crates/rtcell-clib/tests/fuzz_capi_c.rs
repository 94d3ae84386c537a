//! The C API against a hostile peer, from C under valgrind memcheck: `tests/c/fuzz_capi.c`, compiled
//! against `include/rtcell.h` and the built `librtcell.so`, calls every COM and queue function with
//! buffers of exactly the size it claims while a second thread scribbles the live signal table, the
//! slots and the rings (structure-aware: valid values mutated). Memcheck reports any access outside
//! those buffers (or anywhere else); the driver also checks canary bytes, return codes and lengths, and
//! that the COM handle works again once the table is restored.
//!
//! `RTCELL_FUZZ_CASES` (default: a CI budget of a few seconds under valgrind) and `RTCELL_FUZZ_SEED`
//! (default: random) as for every fuzz target.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{ComConfig, GroupDef, Overflow, RegionLayout, RegionView, RingConfig, SignalDef};
use rtcell_testkit::fuzz::Fuzz;

/// Cases under valgrind when `RTCELL_FUZZ_CASES` is unset (a few seconds on a loaded 2-CPU machine).
const CI_CASES: u64 = 6000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory cargo put this build's libraries in (target/<profile>).
fn artifacts() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// The region of the driver: COM channel "c" (signals as in the driver's SIGS, dynamic signal 4, group
/// 10), rings "q" (reject) and "o" (overwrite oldest).
pub fn layout() -> RegionLayout {
    let sig = |id, max_len, dynamic, group| SignalDef { id, max_len, dynamic, group };
    let mut l = RegionLayout::new();
    l.com(
        "c",
        ComConfig {
            signals: vec![
                sig(1, 8, false, None),
                sig(2, 1, false, None),
                sig(3, 13, false, None),
                sig(4, 24, true, None),
                sig(5, 4, false, Some(10)),
                sig(6, 8, false, Some(10)),
                sig(7, 2, false, None),
            ],
            groups: vec![GroupDef { id: 10 }],
        },
    )
    .unwrap();
    l.ring("q", RingConfig::for_frames(16, 4)).unwrap();
    let mut o = RingConfig::for_frames(16, 4);
    o.overflow = Overflow::OverwriteOldest;
    l.ring("o", o).unwrap();
    l
}

#[test]
fn fuzz_capi_c_valgrind() {
    rtcell_testkit::require!(
        Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success()),
        "valgrind is not installed (scripts/setup installs it)"
    );
    let fuzz = Fuzz::start("fuzz_capi_c_valgrind", CI_CASES);
    let (cases, seed) = (fuzz.cases(), fuzz.seed());

    let lib = artifacts().join("librtcell.so");
    assert!(lib.is_file(), "{} is built with the workspace (cargo build --release -p rtcell-clib)", lib.display());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("fuzz_capi");
    // The library as installed: its SONAME is librtcell.so.0.
    std::fs::copy(&lib, dir.join("librtcell.so.0")).unwrap();
    let _ = std::fs::remove_file(dir.join("librtcell.so"));
    std::os::unix::fs::symlink("librtcell.so.0", dir.join("librtcell.so")).unwrap();
    let cc = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_DEFAULT_SOURCE", "-O1", "-g", "-pthread", "-o"])
        .arg(&exe)
        .arg(repo().join("crates/rtcell-clib/tests/c/fuzz_capi.c"))
        .arg(format!("-I{}", repo().join("include").display()))
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-lrtcell")
        .output()
        .expect("the system C compiler runs");
    assert!(cc.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&cc.stderr));

    let l = layout();
    let shm = SharedMemory::create_anonymous("fuzz-capi", l.size_bytes()).unwrap();
    l.init(shm.words(), std::process::id()).unwrap();
    let view = RegionView::attach(shm.words()).unwrap();
    let (c, q, o) = (view.find("c").unwrap(), view.find("q").unwrap(), view.find("o").unwrap());
    // The COM table: a 16-word header, then two words per signal and per group.
    let table_words = 16 + 2 * (view.com("c").unwrap().signal_count() + view.com("c").unwrap().group_count());
    assert_eq!(q.size, o.size);

    let fd = shm.fd().as_raw_fd();
    let mut cmd = Command::new("valgrind");
    cmd.args(["--error-exitcode=1", "--quiet", "--track-origins=no", "--fair-sched=yes"]).arg(&exe);
    for a in [fd as u64, shm.len() as u64, cases, seed] {
        cmd.arg(a.to_string());
    }
    for a in [c.offset / 8, table_words, c.size / 8, q.offset / 8, o.offset / 8, q.size / 8] {
        cmd.arg(a.to_string());
    }
    // SAFETY: in the forked child before exec: fcntl on a descriptor number copied in.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("valgrind runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && text.contains(&format!("fuzz_capi: {cases} cases, 0 findings")),
        "fuzz_capi_c_valgrind FINDING ({}), seed {seed}; replay: RTCELL_FUZZ_SEED={seed} RTCELL_FUZZ_CASES={cases}\n{text}",
        out.status
    );
    if let Some(line) = text.lines().find(|l| l.starts_with("fuzz_capi: calls")) {
        println!("fuzz fuzz_capi_c_valgrind: {}", &line["fuzz_capi: ".len()..]);
    }
    drop(shm);
    let _ = std::fs::remove_dir_all(&dir);
    fuzz.cases_done(cases);
    fuzz.finish();
}
