//! Region header and channel table: layouts, every attach error, and the memfd and /dev/shm mappings
//! (including a ring shared with another process).

#![cfg(not(loom))]

mod common;

use common::*;
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::region::{HEADER_WORDS, LAYOUT_VERSION, MAGIC};
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{AttachError, ChannelKind, Overflow, RecvError, RegionLayout, RegionView, RingConfig, SendError};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

fn full_layout() -> RegionLayout {
    let mut l = RegionLayout::new();
    l.ring("rx", RingConfig::for_frames(100, 4))
        .unwrap()
        .ring("tx", RingConfig { overflow: Overflow::OverwriteOldest, notify: true, ..RingConfig::for_frames(64, 8) })
        .unwrap()
        .signal("speed", 8)
        .unwrap()
        .com("com", com_config())
        .unwrap()
        .raw("ctl", 100)
        .unwrap();
    l
}

/// Word `k` of table entry `i`.
fn entry_word(words: &[AtomicU64], i: usize, k: usize) -> &AtomicU64 {
    &words[HEADER_WORDS + 8 * i + k]
}

#[test]
fn layout_places_every_channel() {
    let layout = full_layout();
    let words = build(&layout);
    let r = RegionView::attach(&words).unwrap();
    assert_eq!(r.len(), 5);
    assert!(!r.is_empty());
    assert_eq!(r.size(), layout.size_bytes());
    assert_eq!(r.creator_pid(), 4242);
    let names: Vec<_> = (0..r.len()).map(|i| r.entry(i).unwrap().name().to_string()).collect();
    assert_eq!(names, ["rx", "tx", "speed", "com", "ctl"]);
    let kinds: Vec<_> = (0..r.len()).map(|i| r.entry(i).unwrap().kind).collect();
    use ChannelKind::*;
    assert_eq!(kinds, [Ring, Ring, Signal, Com, Raw]);
    // Channels are cache-line aligned, after the table, inside the region, and do not overlap.
    let mut end = (HEADER_WORDS + 5 * 8) * 8;
    for i in 0..r.len() {
        let e = r.entry(i).unwrap();
        assert_eq!(e.offset % 64, 0);
        assert!(e.offset >= end);
        end = e.offset + e.size;
    }
    assert!(end <= r.size());
    assert_eq!(r.entry(5), Err(AttachError::NotFound));
    // Accessors by name and kind.
    assert_eq!(r.ring("rx").unwrap().config(), RingConfig::for_frames(100, 4));
    let tx = r.ring("tx").unwrap().config();
    assert_eq!((tx.overflow, tx.notify), (Overflow::OverwriteOldest, true));
    assert_eq!(r.signal("speed").unwrap().capacity(), 8);
    assert_eq!(r.com("com").unwrap().signal_count(), 8);
    assert_eq!(r.raw("ctl").unwrap().len(), 128 / 8); // rounded up to a cache line
    assert_eq!(r.ring("nope").err(), Some(AttachError::NotFound));
    assert_eq!(r.ring("speed").err(), Some(AttachError::WrongKind { found: Signal, wanted: Ring }));
    assert_eq!(r.signal("rx").err(), Some(AttachError::WrongKind { found: Ring, wanted: Signal }));
    assert_eq!(r.com("ctl").err(), Some(AttachError::WrongKind { found: Raw, wanted: Com }));
    assert_eq!(r.raw("com").err(), Some(AttachError::WrongKind { found: Com, wanted: Raw }));
    assert_eq!(r.find("ctl").unwrap().kind, Raw);
    // Channels really are separate memory.
    let mut p = r.ring("rx").unwrap().producer();
    p.try_send(b"one").unwrap();
    assert_eq!(r.ring("tx").unwrap().consumer().try_recv(&mut [0; 64]), Err(RecvError::Empty));
    let mut buf = [0u8; 100];
    assert_eq!(r.ring("rx").unwrap().consumer().try_recv(&mut buf), Ok(3));
}

#[test]
fn init_resets_a_used_region() {
    let layout = full_layout();
    let words = build(&layout);
    {
        let r = RegionView::attach(&words).unwrap();
        r.ring("rx").unwrap().producer().try_send(b"stale").unwrap();
        r.signal("speed").unwrap().write(b"fast").unwrap();
        r.raw("ctl").unwrap()[0].store(7, Ordering::Relaxed);
    }
    // Garbage everywhere, then init again.
    for w in &words {
        w.store(0xdead_beef_dead_beef, Ordering::Relaxed);
    }
    layout.init(&words, 1).unwrap();
    let r = RegionView::attach(&words).unwrap();
    assert_eq!(r.ring("rx").unwrap().consumer().try_recv(&mut [0; 100]), Err(RecvError::Empty));
    assert_eq!(r.ring("rx").unwrap().counters(), Default::default());
    assert_eq!(r.signal("speed").unwrap().seq_word().load(Ordering::Relaxed), 0);
    assert_eq!(r.raw("ctl").unwrap()[0].load(Ordering::Relaxed), 0);
    assert_eq!(r.creator_pid(), 1);
    // A larger memory than needed is fine; the region is the layout's size.
    let big = zeroed(layout.size_bytes() / 8 + 100);
    layout.init(&big, 2).unwrap();
    assert_eq!(RegionView::attach(&big).unwrap().size(), layout.size_bytes());
    // A smaller one is refused.
    let small = zeroed(layout.size_bytes() / 8 - 1);
    assert!(layout.init(&small, 2).is_err());
}

#[test]
fn layout_errors() {
    let ring = RingConfig::for_frames(16, 2);
    assert!(RegionLayout::new().ring("", ring).is_err());
    assert!(RegionLayout::new().ring(&"x".repeat(33), ring).is_err());
    assert!(RegionLayout::new().ring(&"x".repeat(32), ring).is_ok());
    assert!(RegionLayout::new().ring("a\0b", ring).is_err());
    assert!(RegionLayout::new().ring("r", RingConfig { capacity: 100, ..ring }).is_err());
    assert!(RegionLayout::new().ring("r", RingConfig { max_frame: 10_000, ..ring }).is_err());
    let mut l = RegionLayout::new();
    l.signal("a", 4).unwrap();
    assert!(l.raw("a", 8).is_err(), "duplicate names");
    let mut l = RegionLayout::new();
    for i in 0..256 {
        l.raw(&format!("c{i}"), 8).unwrap();
    }
    assert!(l.raw("one-more", 8).is_err());
    // 256 channels is allowed and attaches.
    let words = build(&l);
    let r = RegionView::attach(&words).unwrap();
    assert_eq!(r.len(), 256);
    assert_eq!(r.raw("c255").unwrap().len(), 8);
    // An empty layout is a valid (empty) region.
    let words = build(&RegionLayout::new());
    let r = RegionView::attach(&words).unwrap();
    assert!(r.is_empty());
    let err = RegionLayout::new().ring("", ring).err().unwrap();
    assert!(!err.to_string().is_empty());
}

#[test]
fn attach_rejects_bad_headers() {
    let layout = full_layout();
    let fresh = || build(&layout);

    assert!(matches!(RegionView::attach(&zeroed(7)), Err(AttachError::Truncated { need: 64, have: 56 })));
    assert_eq!(RegionView::attach(&zeroed(64)).err(), Some(AttachError::BadMagic { found: 0 }));

    let w = fresh();
    w[1].store(2 | 5 << 32, Ordering::Relaxed);
    assert_eq!(RegionView::attach(&w).err(), Some(AttachError::Version { found: 2, supported: LAYOUT_VERSION }));

    let w = fresh();
    w[1].store(LAYOUT_VERSION as u64 | 257 << 32, Ordering::Relaxed);
    assert!(matches!(RegionView::attach(&w), Err(AttachError::Corrupt { channel: None, .. })));

    let w = fresh();
    let total = w[2].load(Ordering::Relaxed);
    w[2].store(total + 8, Ordering::Relaxed);
    assert!(matches!(RegionView::attach(&w), Err(AttachError::Truncated { .. })));
    // The mapping handed over is shorter than the region.
    let w = fresh();
    assert!(matches!(RegionView::attach(&w[..w.len() - 1]), Err(AttachError::Truncated { .. })));

    let w = fresh();
    w[2].store(total - 4, Ordering::Relaxed);
    assert!(matches!(RegionView::attach(&w), Err(AttachError::Corrupt { channel: None, .. })));

    let w = fresh();
    w[2].store(64, Ordering::Relaxed);
    assert!(matches!(RegionView::attach(&w), Err(AttachError::Corrupt { channel: None, .. })));

    // A region shrunk so that the last channel sticks out.
    let w = fresh();
    w[2].store(total - 64, Ordering::Relaxed);
    assert!(matches!(RegionView::attach(&w), Err(AttachError::Corrupt { channel: Some(4), .. })));

    // Magic is stored last: a region whose creator has not finished is not attached.
    let w = fresh();
    assert_eq!(w[0].load(Ordering::Relaxed), MAGIC);
    w[0].store(0, Ordering::Relaxed);
    assert!(matches!(RegionView::attach(&w), Err(AttachError::BadMagic { .. })));

    for e in [
        AttachError::Truncated { need: 1, have: 0 },
        AttachError::BadMagic { found: 1 },
        AttachError::Version { found: 9, supported: 1 },
        AttachError::Corrupt { channel: Some(1), what: "x" },
        AttachError::Corrupt { channel: None, what: "x" },
        AttachError::NotFound,
        AttachError::WrongKind { found: ChannelKind::Ring, wanted: ChannelKind::Raw },
    ] {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn attach_rejects_bad_entries() {
    let layout = full_layout();
    // (entry, word, new value), each on a fresh region; every one must be refused for that channel.
    let total = layout.size_bytes() as u64;
    let cases: Vec<(usize, usize, u64)> = vec![
        (0, 0, 0),                          // empty name
        (1, 0, 0xff),                       // not UTF-8
        (2, 4, 9),                          // unknown kind
        (3, 5, 8 * 1000 + 4),               // misaligned offset
        (3, 6, 12),                         // misaligned size
        (4, 5, 0),                          // inside the header
        (4, 5, total),                      // past the end
        (4, 6, u64::MAX - 7),               // size overflowing
        (0, 7, 64 | 16 << 32),              // ring capacity that does not match its size
        (0, 7, 4096 | 16 << 32),            // ring shape fine, size not
        (1, 7, 100 | 16 << 32),             // invalid ring shape
        (2, 7, 9),                          // signal capacity that does not match its size
        (0, 4, ChannelKind::Signal as u64), // a ring's words read as a signal
        (2, 4, ChannelKind::Ring as u64),   // a signal's words read as a ring
    ];
    for (i, k, v) in cases {
        let w = build(&layout);
        entry_word(&w, i, k).store(v, Ordering::Relaxed);
        match RegionView::attach(&w) {
            Err(AttachError::Corrupt { channel: Some(c), what }) => {
                assert_eq!(c, i, "entry {i} word {k} = {v:#x}: {what}")
            }
            other => panic!("entry {i} word {k} = {v:#x}: {:?}", other.err()),
        }
    }
    // A valid change is accepted: a longer name, a different raw channel flag.
    let w = build(&layout);
    entry_word(&w, 4, 0).store(u64::from_le_bytes(*b"control\0"), Ordering::Relaxed);
    entry_word(&w, 4, 4).store(ChannelKind::Raw as u64 | 0xffff << 32, Ordering::Relaxed);
    let r = RegionView::attach(&w).unwrap();
    assert!(r.raw("control").is_ok());
    // A 32-byte name without NUL.
    for k in 0..4 {
        entry_word(&w, 4, k).store(u64::from_le_bytes(*b"abcdefgh"), Ordering::Relaxed);
    }
    let r = RegionView::attach(&w).unwrap();
    assert_eq!(r.entry(4).unwrap().name(), "abcdefgh".repeat(4));
}

#[test]
fn anonymous_mapping() {
    let layout = full_layout();
    let m = SharedMemory::create_anonymous("rtcell-test", layout.size_bytes()).unwrap();
    assert_eq!(m.len() % 4096, 0);
    assert!(m.len() >= layout.size_bytes());
    assert!(!m.is_empty());
    assert!(m.words().iter().all(|w| w.load(Ordering::Relaxed) == 0));
    layout.init(m.words(), std::process::id()).unwrap();
    // The same memory through a second mapping of the same file.
    let fd: OwnedFd = std::fs::File::open(format!("/proc/self/fd/{}", m.fd())).map(OwnedFd::from).unwrap();
    let fd2 = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", m.fd()))
        .map(OwnedFd::from)
        .unwrap();
    drop(fd);
    let m2 = SharedMemory::from_fd(fd2).unwrap();
    assert_eq!(m2.len(), m.len());
    assert_ne!(m2.as_ptr(), m.as_ptr());
    let r1 = RegionView::attach(m.words()).unwrap();
    let r2 = RegionView::attach(m2.words()).unwrap();
    assert_eq!(r2.creator_pid(), std::process::id());
    r1.ring("rx").unwrap().producer().try_send(b"across mappings").unwrap();
    let mut buf = [0u8; 100];
    assert_eq!(r2.ring("rx").unwrap().consumer().try_recv(&mut buf), Ok(15));
    assert_eq!(&buf[..15], b"across mappings");
    assert!(SharedMemory::create_anonymous("a\0b", 10).is_err());
    assert_eq!(SharedMemory::create_anonymous("tiny", 0).unwrap().len(), 4096);
}

/// A peer holding the region's memfd (a process cell) cannot shrink it under our mapping: a shrunk file
/// makes every later access of ours to the cut-off pages a SIGBUS, killing the Linux side.
#[test]
fn a_peer_holding_the_memfd_cannot_resize_the_region() {
    let layout = full_layout();
    let m = SharedMemory::create_anonymous("rtcell-test", layout.size_bytes()).unwrap();
    layout.init(m.words(), std::process::id()).unwrap();
    // The peer's own open file description of the region, read-write (as a child inherits it).
    let peer = std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/self/fd/{}", m.fd())).unwrap();
    let shrunk = peer.set_len(0);
    if shrunk.is_ok() {
        // Put the size back before anything touches the mapping (else this test dies of SIGBUS).
        peer.set_len(m.len() as u64).unwrap();
    }
    assert!(shrunk.is_err(), "the peer shrank the region to 0 bytes under the creator's mapping");
    assert!(peer.set_len(2 * m.len() as u64).is_err(), "the peer grew the region");
    assert!(RegionView::attach(m.words()).is_ok());
}

#[test]
fn from_fd_refuses_unusable_sizes() {
    let dir = std::env::temp_dir();
    for (i, len) in [0usize, 12].into_iter().enumerate() {
        let path = dir.join(format!("rtcell-shm-test-{}-{i}", std::process::id()));
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(SharedMemory::from_fd(OwnedFd::from(f)).is_err(), "{len} bytes");
    }
}

fn unique(tag: &str) -> String {
    format!("test-{}-{tag}", std::process::id())
}

#[test]
fn named_regions_and_stale_detection() {
    let layout = full_layout();
    let name = unique("named");
    let path = format!("/dev/shm/rtcell.{name}");
    {
        let (m, stale) = SharedMemory::create_named(&name, layout.size_bytes()).unwrap();
        assert_eq!(stale, None);
        assert!(std::path::Path::new(&path).exists());
        layout.init(m.words(), std::process::id()).unwrap();
        let other = SharedMemory::open_named(&name).unwrap();
        let r = RegionView::attach(other.words()).unwrap();
        r.signal("speed").unwrap().write(b"42").unwrap();
        let mut seen = 0;
        let mut out = [0u8; 8];
        let got = RegionView::attach(m.words()).unwrap().signal("speed").unwrap().read(&mut out, &mut seen);
        assert_eq!(got, Ok((2, rtcell_shm::Freshness::New)));
        // Its creator (this process) is alive: a second creation is refused, the region is kept.
        let err = SharedMemory::create_named(&name, 4096).err().unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        assert!(std::path::Path::new(&path).exists());
        assert!(!SharedMemory::stale_named().iter().any(|(n, _)| *n == name));
    }
    // Dropping the creator's mapping removes the file.
    assert!(!std::path::Path::new(&path).exists());
    assert!(SharedMemory::open_named(&name).is_err());

    // A region left by a process that no longer runs is stale: listed, and replaced on creation.
    let dead_pid = i32::MAX as u32; // above any pid_max
    let leftover = {
        let (m, _) = SharedMemory::create_named(&name, layout.size_bytes()).unwrap();
        layout.init(m.words(), dead_pid).unwrap();
        m
    };
    // Keep the file but not our mapping's unlink-on-drop: reopen it and forget the creator.
    let reopened = SharedMemory::open_named(&name).unwrap();
    std::mem::forget(leftover);
    assert!(SharedMemory::stale_named().contains(&(name.clone(), dead_pid)));
    drop(reopened);
    let (m, stale) = SharedMemory::create_named(&name, 4096).unwrap();
    assert_eq!(stale, Some(dead_pid));
    assert!(m.words().iter().all(|w| w.load(Ordering::Relaxed) == 0), "a new, zeroed region");
    // A leftover that is not a region at all is stale too.
    drop(m);
    std::fs::write(&path, [1u8; 64]).unwrap();
    let (m, stale) = SharedMemory::create_named(&name, 4096).unwrap();
    assert_eq!(stale, Some(0));
    drop(m);
    assert!(!std::path::Path::new(&path).exists());

    for bad in ["", "a/b", "a.b", &"x".repeat(65), "white space"] {
        let e = SharedMemory::create_named(bad, 4096).err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        assert!(SharedMemory::open_named(bad).is_err());
    }
}

const CHILD_ENV: &str = "RTCELL_SHM_TEST_CHILD_REGION";
const CROSS_MESSAGES: u64 = 200_000;

/// The other process of `ring_between_processes`, which starts it with `--ignored`: not a test of its own.
#[test]
#[ignore = "the child process of ring_between_processes, started by it"]
fn child_consumer() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    let m = SharedMemory::open_named(&name).unwrap();
    let r = RegionView::attach(m.words()).unwrap();
    let mut c = r.ring("rx").unwrap().consumer();
    let mut buf = [0u8; 100];
    let mut expect = 0u64;
    while expect < CROSS_MESSAGES {
        match c.try_recv(&mut buf) {
            Ok(len) => {
                assert_eq!(len, 8 + (expect % 93) as usize);
                assert_eq!(read_tagged(&buf[..len]), Some(expect));
                expect += 1;
            }
            Err(RecvError::Empty) => std::thread::yield_now(),
            Err(e) => panic!("{e:?}"),
        }
    }
    // Report back through the region.
    r.signal("speed").unwrap().write(&expect.to_le_bytes()).unwrap();
}

#[test]
fn ring_between_processes() {
    let layout = full_layout();
    let name = unique("cross");
    let (m, _) = SharedMemory::create_named(&name, layout.size_bytes()).unwrap();
    layout.init(m.words(), std::process::id()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_consumer", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &name)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let r = RegionView::attach(m.words()).unwrap();
    let mut p = r.ring("rx").unwrap().producer();
    let mut buf = [0u8; 100];
    for seq in 0..CROSS_MESSAGES {
        let len = 8 + (seq % 93) as usize;
        tagged(seq, &mut buf[..len]);
        loop {
            match p.try_send(&buf[..len]) {
                Ok(()) => break,
                Err(SendError::Full) => {
                    if let Some(status) = child.try_wait().unwrap() {
                        panic!("consumer process exited early: {status}");
                    }
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "consumer process failed: {status}");
    let mut out = [0u8; 8];
    let mut seen = 0;
    let got = r.signal("speed").unwrap().read(&mut out, &mut seen).unwrap();
    assert_eq!(got.0, 8);
    assert_eq!(u64::from_le_bytes(out), CROSS_MESSAGES);
    let k = r.ring("rx").unwrap().counters();
    assert_eq!((k.sent, k.received, k.lost), (CROSS_MESSAGES, CROSS_MESSAGES, 0));
}

/// Set in the child of `a_peer_that_opens_a_named_region_cannot_crash_its_creator_by_truncating_it`.
const TRUNCATE_ENV: &str = "RTCELL_TEST_TRUNCATE_NAMED";

/// A peer started separately opens a named region read-write, as it must to use it, and truncates the
/// file: the creator's next access to its mapping would be a SIGBUS (a /dev/shm file cannot be sealed like
/// the memfd). The file is given its size back instead, the creator reads zeros and sees its region as
/// invalid, and the repair is counted. The creator runs in a child process so that a SIGBUS, if it came,
/// would not end the test harness.
#[test]
fn a_peer_that_opens_a_named_region_cannot_crash_its_creator_by_truncating_it() {
    if let Ok(name) = std::env::var(TRUNCATE_ENV) {
        let layout = full_layout();
        let (m, _) = SharedMemory::create_named(&name, layout.size_bytes()).unwrap();
        layout.init(m.words(), std::process::id()).unwrap();
        assert!(RegionView::attach(m.words()).is_ok());
        let peer = std::fs::OpenOptions::new().read(true).write(true).open(format!("/dev/shm/rtcell.{name}")).unwrap();
        peer.set_len(0).unwrap();
        assert!(RegionView::attach(m.words()).is_err(), "the cut region reads as zeros, not as a valid region");
        assert_eq!(rtcell_shm::truncation::repairs(), 1);
        assert_eq!(peer.metadata().unwrap().len() as usize, m.len(), "the file has its size back");
        return;
    }
    let name = unique("truncate");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_peer_that_opens_a_named_region_cannot_crash_its_creator_by_truncating_it",
            "--test-threads=1",
        ])
        .env(TRUNCATE_ENV, &name)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    // A creator killed by the signal leaves its file behind.
    let _ = std::fs::remove_file(format!("/dev/shm/rtcell.{name}"));
    assert!(status.success(), "the region's creator died after the peer truncated the file: {status}");
}

/// Set in the child of `a_sigbus_that_is_not_a_cut_region_still_ends_the_process`.
const RAISE_ENV: &str = "RTCELL_TEST_RAISE_SIGBUS";

/// The truncation guard handles only faults inside the regions it guards: a fault in another cut file
/// mapping ends the process as before.
#[test]
fn a_sigbus_that_is_not_a_cut_region_still_ends_the_process() {
    if let Ok(name) = std::env::var(RAISE_ENV) {
        use std::os::fd::AsRawFd;
        let (_m, _) = SharedMemory::create_named(&name, 4096).unwrap();
        let path = std::env::temp_dir().join(format!("{name}.other"));
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        f.set_len(4096).unwrap();
        // SAFETY: a shared mapping of 4 KiB of our own file, read once below and never unmapped.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) as *const u8
        };
        assert_ne!(p as *mut libc::c_void, libc::MAP_FAILED);
        f.set_len(0).unwrap();
        // SAFETY: reading the mapping made above (its file was cut: this read is the fault under test).
        let _ = unsafe { std::ptr::read_volatile(p) };
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let name = unique("raise");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_sigbus_that_is_not_a_cut_region_still_ends_the_process", "--test-threads=1"])
        .env(RAISE_ENV, &name)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    let _ = std::fs::remove_file(format!("/dev/shm/rtcell.{name}"));
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status}");
}
