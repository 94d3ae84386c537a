//! The C API from C: `tests/c/capi_test.c`, compiled by the system C compiler against `include/rtcell.h`
//! and the built `librtcell.a`, runs every function (misuse included) against regions made here.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::sync::Ordering;
use rtcell_shm::{ComConfig, GroupDef, RegionLayout, RingConfig, SignalDef};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory cargo put this build's libraries in (target/<profile>).
fn artifacts() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

fn layout() -> RegionLayout {
    let sig = |id, max_len, dynamic, group| SignalDef { id, max_len, dynamic, group };
    let mut l = RegionLayout::new();
    l.com(
        "tx.com",
        ComConfig {
            signals: vec![
                sig(1, 8, false, None),
                sig(2, 16, true, None),
                sig(3, 4, false, Some(10)),
                sig(4, 8, false, Some(10)),
            ],
            groups: vec![GroupDef { id: 10 }],
        },
    )
    .unwrap();
    l.com("dup.com", ComConfig { signals: vec![sig(1, 8, false, None)], groups: vec![] }).unwrap();
    l.ring("q", RingConfig::for_frames(32, 1)).unwrap();
    l.signal("plain", 8).unwrap();
    l
}

/// A named region of `layout()`, initialised.
fn region(name: &str) -> SharedMemory {
    let l = layout();
    let (shm, _) = SharedMemory::create_named(name, l.size_bytes()).unwrap();
    l.init(shm.words(), std::process::id()).unwrap();
    shm
}

#[test]
fn every_c_function_works_and_refuses_misuse() {
    let pid = std::process::id();
    let (good, other, corrupt) = (format!("capi-{pid}"), format!("capi-v-{pid}"), format!("capi-c-{pid}"));
    let shm = region(&good);
    let v = region(&other);
    // Another layout version in the header's version word.
    let w1 = v.words()[1].load(Ordering::Relaxed);
    v.words()[1].store((w1 & !0xffff_ffff) | 99, Ordering::Relaxed);
    let c = region(&corrupt);
    // The first channel's offset far past the region.
    c.words()[8 + 5].store(1 << 40, Ordering::Relaxed);

    let tmp = tempfile_dir();
    let exe = tmp.join("capi_test");
    let lib = artifacts().join("librtcell.a");
    assert!(lib.is_file(), "{} is built with the workspace", lib.display());
    let cc = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_DEFAULT_SOURCE", "-O1", "-o"])
        .arg(&exe)
        .arg(repo().join("crates/rtcell-clib/tests/c/capi_test.c"))
        .arg(format!("-I{}", repo().join("include").display()))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s"])
        .output()
        .expect("the system C compiler runs");
    assert!(cc.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&cc.stderr));

    let fd = shm.fd().as_raw_fd();
    let mut cmd = Command::new(&exe);
    cmd.arg(&good).arg(fd.to_string()).arg(&other).arg(&corrupt);
    // SAFETY: in the forked child before exec: fcntl on a descriptor number copied in.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("capi_test runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "capi_test failed ({}):\n{text}", out.status);
    assert!(text.contains("checks passed"), "{text}");
    drop((shm, v, c));
}

fn tempfile_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
