//! The truncation guard's fallback: a peer punches a hole in a named region on a /dev/shm that is full,
//! so the file cannot back the page again and the creator's access would fault forever. The creator gets
//! a private page of zeros there instead: it lives on, sees its region as invalid, and no longer shares
//! that page with the peer.
//!
//! The creator runs in a child process in a mount namespace of its own, with a small tmpfs of its own
//! on /dev/shm (so filling it touches nothing else); that needs root (CAP_SYS_ADMIN).

#![cfg(not(loom))]

use std::io::Write;
use std::os::fd::AsRawFd;

use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{RegionLayout, RegionView};

/// Set in the child: the region's name.
const CHILD_ENV: &str = "RTCELL_TEST_TRUNCATE_FULL";
/// Pages of the child's /dev/shm beyond the region's own (taken by a filler file).
const SPARE_PAGES: usize = 4;
const PAGE: usize = 4096;

fn layout() -> RegionLayout {
    let mut l = RegionLayout::new();
    l.signal("speed", 8).unwrap().raw("ctl", 2 * PAGE).unwrap();
    l
}

/// Writes pages to `f` until the file system is full.
fn fill(f: &mut std::fs::File) {
    let page = [0x5a_u8; PAGE];
    loop {
        match f.write(&page) {
            Ok(n) if n > 0 => continue,
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "filling /dev/shm: {e}");
                break;
            }
        }
    }
}

fn child(name: &str) {
    let layout = layout();
    let (m, _) = SharedMemory::create_named(name, layout.size_bytes()).unwrap();
    layout.init(m.words(), std::process::id()).unwrap();
    assert!(RegionView::attach(m.words()).is_ok());
    let mut filler = std::fs::File::create("/dev/shm/filler").unwrap();
    fill(&mut filler);
    // The peer punches a hole in the region's first page, and the space it freed is taken at once.
    let peer = std::fs::OpenOptions::new().read(true).write(true).open(format!("/dev/shm/rtcell.{name}")).unwrap();
    // SAFETY: fallocate on a descriptor we own, within the file's length.
    let punched = unsafe {
        libc::fallocate(peer.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 0, PAGE as i64)
    };
    assert_eq!(punched, 0, "punching a hole: {}", std::io::Error::last_os_error());
    fill(&mut filler);
    // SAFETY: as above; the file system is full, so the page cannot be backed again.
    let backed = unsafe { libc::fallocate(peer.as_raw_fd(), 0, 0, PAGE as i64) };
    assert_eq!(backed, -1, "the file system was meant to be full");
    // The access that would fault forever: a private page of zeros answers it.
    assert!(RegionView::attach(m.words()).is_err(), "the cut page reads as zeros, not as a valid region");
    assert_eq!(rtcell_shm::truncation::repairs(), 1);
    // That page is ours alone now: what we write there does not reach the peer's file.
    m.words()[0].store(0x1234, std::sync::atomic::Ordering::Relaxed);
    let mut first = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&peer, &mut first, 0).unwrap();
    assert_eq!(first, [0; 8], "the private page is cut off from the file");
}

#[test]
fn a_hole_punched_in_a_full_dev_shm_does_not_make_the_creator_fault_forever() {
    if let Ok(name) = std::env::var(CHILD_ENV) {
        child(&name);
        return;
    }
    use std::os::unix::process::CommandExt;
    let size = layout().size_bytes().div_ceil(PAGE) * PAGE + SPARE_PAGES * PAGE;
    let options = std::ffi::CString::new(format!("size={size},mode=1777")).unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "a_hole_punched_in_a_full_dev_shm_does_not_make_the_creator_fault_forever",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, format!("test-{}-full", std::process::id()))
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    // SAFETY: between fork and exec only unshare and mount (system calls) on strings made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let ok = libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
                && libc::mount(
                    c"tmpfs".as_ptr(),
                    c"/dev/shm".as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    options.as_ptr().cast(),
                ) == 0;
            if ok { Ok(()) } else { Err(std::io::Error::last_os_error()) }
        });
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => {
            rtcell_testkit::require!(
                e.raw_os_error() != Some(libc::EPERM),
                "a mount namespace with a tmpfs of its own needs root (CAP_SYS_ADMIN): {e}"
            );
            panic!("starting the creator in a mount namespace: {e}");
        }
    };
    assert!(
        out.status.success(),
        "the region's creator died or failed after the peer punched a hole in a full /dev/shm: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
