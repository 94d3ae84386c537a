//! Signal and COM unit tests: freshness, lengths, busy and corrupt slots, signal groups and the
//! AUTOSAR-style receiver, blocking receive.

#![cfg(not(loom))]

mod common;

use common::*;
use rtcell_shm::com::code;
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{ComError, ComReceiver, ComView, Freshness, RegionLayout, RegionView, SignalError, SignalView};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

fn signal_region(capacity: u32) -> Vec<AtomicU64> {
    let mut layout = RegionLayout::new();
    layout.signal("s", capacity).unwrap();
    build(&layout)
}

fn com_region() -> Vec<AtomicU64> {
    let mut layout = RegionLayout::new();
    layout.com("c", com_config()).unwrap();
    build(&layout)
}

fn com(words: &[AtomicU64]) -> ComView<'_> {
    RegionView::attach(words).unwrap().com("c").unwrap()
}

#[test]
fn signal_never_written() {
    let words = signal_region(24);
    let s = RegionView::attach(&words).unwrap().signal("s").unwrap();
    assert_eq!(s.capacity(), 24);
    assert_eq!(s.seq_word().load(Ordering::Relaxed), 0);
    let mut seen = 0;
    let mut out = [0xaau8; 24];
    assert_eq!(s.read(&mut out, &mut seen), Ok((0, Freshness::NeverWritten)));
    assert_eq!(seen, 0);
    // A never-written signal has no length to be too long for an empty buffer.
    assert_eq!(s.read(&mut [], &mut seen), Ok((0, Freshness::NeverWritten)));
}

#[test]
fn signal_lengths_and_freshness() {
    let words = signal_region(24);
    let s = RegionView::attach(&words).unwrap().signal("s").unwrap();
    let (mut a, mut b) = (0u64, 0u64);
    let mut out = [0u8; 24];
    for (k, len) in [0usize, 1, 7, 8, 9, 16, 23, 24, 3, 0, 24].into_iter().enumerate() {
        let v = payload(k as u64, len);
        s.write(&v).unwrap();
        let seq = s.seq_word().load(Ordering::Relaxed);
        assert_eq!(seq, 2 * (k as u64 + 1), "even and counting writes");
        out.fill(0xee);
        assert_eq!(s.read(&mut out, &mut a), Ok((len, Freshness::New)));
        assert_eq!(&out[..len], &v[..]);
        assert_eq!(a, seq);
        assert_eq!(s.read(&mut out, &mut a), Ok((len, Freshness::Old)));
        assert_eq!(&out[..len], &v[..]);
        // A second reader that reads every other value still sees New each time it reads.
        if k % 2 == 0 {
            assert_eq!(s.read(&mut out, &mut b), Ok((len, Freshness::New)));
        }
    }
    assert_eq!(s.write(&[0; 25]), Err(SignalError::TooLarge { len: 25, max: 24 }));
    // The failed write changed nothing.
    assert_eq!(s.read(&mut out, &mut a), Ok((24, Freshness::Old)));
    // A buffer too small for the current value.
    s.write(&payload(99, 10)).unwrap();
    assert_eq!(s.read(&mut out[..9], &mut a), Err(SignalError::TooSmall { len: 10 }));
    assert_eq!(s.read(&mut out[..10], &mut a), Ok((10, Freshness::New)));
    assert!(is_payload(99, &out[..10]));
}

#[test]
fn signal_of_zero_capacity() {
    let words = signal_region(0);
    let s = RegionView::attach(&words).unwrap().signal("s").unwrap();
    let mut seen = 0;
    s.write(&[]).unwrap();
    assert_eq!(s.write(&[1]), Err(SignalError::TooLarge { len: 1, max: 0 }));
    assert_eq!(s.read(&mut [], &mut seen), Ok((0, Freshness::New)));
    assert_eq!(s.read(&mut [], &mut seen), Ok((0, Freshness::Old)));
}

#[test]
fn signal_busy_and_corrupt() {
    let words = zeroed(SignalView::words_needed(16));
    assert!(SignalView::new(&words[..3], 16).is_err());
    assert!(SignalView::new(&words, 17).is_err()); // 17 bytes need 3 data words, not 2
    let s = SignalView::new(&words, 16).unwrap();
    let mut seen = 0;
    let mut out = [0u8; 16];
    s.write(b"hello").unwrap();
    // A writer that died mid-update leaves the sequence odd: readers give up with Busy.
    words[0].store(3, Ordering::Relaxed);
    assert_eq!(s.read(&mut out, &mut seen), Err(SignalError::Busy));
    // The next write completes it.
    s.write(b"world").unwrap();
    assert_eq!(words[0].load(Ordering::Relaxed), 4);
    assert_eq!(s.read(&mut out, &mut seen), Ok((5, Freshness::New)));
    assert_eq!(&out[..5], b"world");
    // An impossible length is reported, not used.
    words[1].store(17, Ordering::Relaxed);
    assert!(matches!(s.read(&mut out, &mut seen), Err(SignalError::Corrupt(_))));
    words[1].store(u64::MAX, Ordering::Relaxed);
    assert!(matches!(s.read(&mut out, &mut seen), Err(SignalError::Corrupt(_))));
    // read_with hands the raw length and data words over.
    s.write(b"abc").unwrap();
    let seq = s
        .read_with(|len, data| {
            assert_eq!(len, 3);
            assert_eq!(data.len(), 2);
            assert_eq!(data[0].load(Ordering::Relaxed), u64::from_le_bytes(*b"abc\0\0\0\0\0"));
            Ok(())
        })
        .unwrap();
    assert_eq!(seq, 6);
}

#[test]
fn com_layout_and_lengths() {
    let words = com_region();
    let c = com(&words);
    assert_eq!((c.signal_count(), c.group_count()), (8, 2));
    assert_eq!(c.signal_len(1), Ok((4, false)));
    assert_eq!(c.signal_len(2), Ok((40, true)));
    assert_eq!(c.signal_len(3), Ok((0, true)));
    assert_eq!(c.signal_len(10), Ok((8, false)));
    assert_eq!(c.signal_len(11), Ok((3, false)));
    assert_eq!(c.signal_len(12), Ok((13, false)));
    assert_eq!(c.signal_len(21), Ok((1, false)));
    assert!(matches!(c.signal_len(4), Err(ComError::NotOk(_))));
    assert_eq!(c.group_len(100), Ok(24));
    assert_eq!(c.group_len(200), Ok(17));
    assert!(matches!(c.group_len(10), Err(ComError::NotOk(_))));
    assert_eq!(ComReceiver::storage_needed(&c), (24, 10));
}

#[test]
fn com_config_is_checked() {
    use rtcell_shm::{GroupDef, SignalDef};
    let sig = |id, group, dynamic| SignalDef { id, max_len: 4, dynamic, group };
    let bad = [
        (vec![sig(1, None, false), sig(1, None, false)], vec![]),
        (vec![sig(1, Some(5), true)], vec![GroupDef { id: 5 }]),
        (vec![sig(1, Some(6), false)], vec![GroupDef { id: 5 }]),
        (vec![], vec![GroupDef { id: 5 }, GroupDef { id: 5 }]),
    ];
    for (signals, groups) in bad {
        let cfg = rtcell_shm::ComConfig { signals, groups };
        assert!(cfg.words_needed().is_err(), "{cfg:?}");
        assert!(RegionLayout::new().com("c", cfg).is_err());
    }
    let empty = rtcell_shm::ComConfig::default();
    let mut layout = RegionLayout::new();
    layout.com("c", empty).unwrap();
    let words = build(&layout);
    let c = com(&words);
    assert_eq!((c.signal_count(), c.group_count()), (0, 0));
    assert!(matches!(c.send_signal(1, &[]), Err(ComError::NotOk(_))));
}

#[test]
fn com_standalone_signals() {
    let words = com_region();
    let c = com(&words);
    let mut seen = 0;
    let mut out = [0u8; 64];
    assert_eq!(c.receive_signal(1, &mut out, &mut seen), Ok((0, Freshness::NeverWritten)));
    // Fixed length: exactly 4 bytes.
    assert!(matches!(c.send_signal(1, &[1, 2, 3]), Err(ComError::NotOk(_))));
    assert!(matches!(c.send_signal(1, &[1, 2, 3, 4, 5]), Err(ComError::NotOk(_))));
    c.send_signal(1, &[1, 2, 3, 4]).unwrap();
    assert_eq!(c.receive_signal(1, &mut out, &mut seen), Ok((4, Freshness::New)));
    assert_eq!(&out[..4], &[1, 2, 3, 4]);
    assert_eq!(c.receive_signal(1, &mut out, &mut seen), Ok((4, Freshness::Old)));
    assert!(matches!(c.receive_signal(1, &mut out[..3], &mut seen), Err(ComError::NotOk(_))));
    // Dynamic length: anything up to 40 bytes.
    let mut seen2 = 0;
    for len in [0usize, 1, 17, 40, 5] {
        c.send_signal(2, &payload(len as u64, len)).unwrap();
        assert_eq!(c.receive_signal(2, &mut out, &mut seen2), Ok((len, Freshness::New)));
        assert!(is_payload(len as u64, &out[..len]));
    }
    assert!(matches!(c.send_signal(2, &[0; 41]), Err(ComError::NotOk(_))));
    c.send_signal(3, &[]).unwrap();
    assert!(matches!(c.send_signal(3, &[0]), Err(ComError::NotOk(_))));
    let mut seen3 = 0;
    assert_eq!(c.receive_signal(3, &mut [], &mut seen3), Ok((0, Freshness::New)));
    // Signals are independent.
    assert_eq!(c.receive_signal(1, &mut out, &mut seen), Ok((4, Freshness::Old)));
    // Unknown ids, and members read the wrong way.
    assert!(matches!(c.send_signal(99, &[]), Err(ComError::NotOk(_))));
    assert!(matches!(c.receive_signal(99, &mut out, &mut seen), Err(ComError::NotOk(_))));
    assert!(matches!(c.receive_signal(10, &mut out, &mut seen), Err(ComError::NotOk(_))));
}

#[test]
fn com_groups_commit_as_one() {
    let words = com_region();
    let c = com(&words);
    let mut seen = 0;
    let mut out = [0u8; 24];
    assert_eq!(c.receive_signal_group(100, &mut out, &mut seen), Ok(Freshness::NeverWritten));
    assert!(matches!(c.receive_signal_group(100, &mut [0; 23], &mut seen), Err(ComError::NotOk(_))));
    assert!(matches!(c.send_signal(10, &[1; 7]), Err(ComError::NotOk(_))));
    c.send_signal(10, &[1; 8]).unwrap();
    c.send_signal(11, &[2; 3]).unwrap();
    c.send_signal(12, &[3; 13]).unwrap();
    // Nothing is visible before the group is committed.
    assert_eq!(c.receive_signal_group(100, &mut out, &mut seen), Ok(Freshness::NeverWritten));
    c.send_signal_group(100).unwrap();
    assert_eq!(c.receive_signal_group(100, &mut out, &mut seen), Ok(Freshness::New));
    let mut want = [0u8; 24];
    want[..8].fill(1);
    want[8..11].fill(2);
    want[11..].fill(3);
    assert_eq!(out, want);
    assert_eq!(c.receive_signal_group(100, &mut out, &mut seen), Ok(Freshness::Old));
    // Update one member: the others keep their values in the next commit.
    c.send_signal(11, &[9, 8, 7]).unwrap();
    assert_eq!(c.receive_signal_group(100, &mut out, &mut seen), Ok(Freshness::Old));
    assert_eq!(out, want);
    c.send_signal_group(100).unwrap();
    want[8..11].copy_from_slice(&[9, 8, 7]);
    assert_eq!(c.receive_signal_group(100, &mut out, &mut seen), Ok(Freshness::New));
    assert_eq!(out, want);
    // The other group is untouched; a larger buffer is fine.
    let mut seen_b = 0;
    let mut big = [0u8; 64];
    assert_eq!(c.receive_signal_group(200, &mut big, &mut seen_b), Ok(Freshness::NeverWritten));
    c.send_signal(20, &[5; 16]).unwrap();
    c.send_signal(21, &[6]).unwrap();
    c.send_signal_group(200).unwrap();
    assert_eq!(c.receive_signal_group(200, &mut big, &mut seen_b), Ok(Freshness::New));
    assert_eq!(&big[..16], &[5; 16]);
    assert_eq!(big[16], 6);
    assert!(matches!(c.send_signal_group(300), Err(ComError::NotOk(_))));
}

#[test]
fn com_receiver_reads_members_from_its_shadow() {
    let words = com_region();
    let view = com(&words);
    let (ns, nw) = ComReceiver::storage_needed(&view);
    let mut shadow = vec![0u8; ns];
    let mut seen = vec![0u64; nw];
    assert!(matches!(ComReceiver::new(view, &mut shadow[..ns - 1], &mut seen), Err(ComError::NotOk(_))));
    assert!(matches!(ComReceiver::new(view, &mut shadow, &mut seen[..nw - 1]), Err(ComError::NotOk(_))));
    let mut rx = ComReceiver::new(view, &mut shadow, &mut seen).unwrap();
    let mut out = [0u8; 16];
    assert!(matches!(rx.receive_signal(10, &mut out), Err(ComError::NotOk(_))));
    assert_eq!(rx.receive_signal_group(100), Ok(Freshness::NeverWritten));
    assert_eq!(rx.receive_signal(10, &mut out), Ok((8, Freshness::NeverWritten)));

    view.send_signal(10, &[1; 8]).unwrap();
    view.send_signal(11, &[2; 3]).unwrap();
    view.send_signal(12, &[3; 13]).unwrap();
    view.send_signal_group(100).unwrap();
    // The shadow still holds the old group value until the group is received again.
    assert_eq!(rx.receive_signal(11, &mut out), Ok((3, Freshness::NeverWritten)));
    assert_eq!(rx.receive_signal_group(100), Ok(Freshness::New));
    assert_eq!(rx.receive_signal(11, &mut out), Ok((3, Freshness::New)));
    assert_eq!(&out[..3], &[2; 3]);
    assert_eq!(rx.receive_signal(11, &mut out), Ok((3, Freshness::Old)));
    assert_eq!(rx.receive_signal(12, &mut out), Ok((13, Freshness::New)));
    assert_eq!(&out[..13], &[3; 13]);
    assert!(matches!(rx.receive_signal(12, &mut out[..12]), Err(ComError::NotOk(_))));
    assert_eq!(rx.receive_signal(10, &mut out), Ok((8, Freshness::New)));
    assert_eq!(&out[..8], &[1; 8]);
    // A member of another group needs that group received first.
    assert!(matches!(rx.receive_signal(20, &mut out), Err(ComError::NotOk(_))));
    assert_eq!(rx.receive_signal_group(200), Ok(Freshness::NeverWritten));
    assert!(matches!(rx.receive_signal(10, &mut out), Err(ComError::NotOk(_))));
    // Standalone signals pass straight through.
    view.send_signal(1, &[4, 3, 2, 1]).unwrap();
    assert_eq!(rx.receive_signal(1, &mut out), Ok((4, Freshness::New)));
    assert_eq!(rx.receive_signal(1, &mut out), Ok((4, Freshness::Old)));
    assert_eq!(rx.view().signal_count(), 8);
}

#[test]
fn com_error_codes() {
    assert_eq!(ComError::NotOk("x").code(), code::E_NOT_OK);
    assert_eq!(ComError::ServiceNotAvailable.code(), code::COM_SERVICE_NOT_AVAILABLE);
    assert_eq!(ComError::Busy.code(), code::COM_BUSY);
    assert_eq!(ComError::Timeout.code(), code::RTE_E_NO_DATA);
    assert_eq!(ComError::from(SignalError::Busy), ComError::Busy);
    assert_eq!(ComError::from(SignalError::Corrupt("x")), ComError::ServiceNotAvailable);
    assert!(matches!(ComError::from(SignalError::TooSmall { len: 1 }), ComError::NotOk(_)));
}

#[test]
fn com_blocking_receive() {
    let words = com_region();
    let c = com(&words);
    let mut out = [0u8; 40];
    let mut seen = 0;
    // Nothing new: times out.
    assert_eq!(c.receive_signal_blocking(2, &mut out, &mut seen, 10_000_000), Err(ComError::Timeout));
    // Something new already there: returns it at once.
    c.send_signal(2, b"ready").unwrap();
    assert_eq!(c.receive_signal_blocking(2, &mut out, &mut seen, 120_000_000_000), Ok(5));
    assert_eq!(&out[..5], b"ready");
    // Already seen: times out again.
    assert_eq!(c.receive_signal_blocking(2, &mut out, &mut seen, 10_000_000), Err(ComError::Timeout));
    // Errors are returned, not waited on.
    assert!(matches!(c.receive_signal_blocking(99, &mut out, &mut seen, 120_000_000_000), Err(ComError::NotOk(_))));

    // A sender in another thread wakes the sleeper; a lost wake-up would make it sleep two minutes.
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut out = [0u8; 40];
            let r = c.receive_signal_blocking(2, &mut out, &mut seen, 120_000_000_000);
            tx.send((r, out)).unwrap();
        });
        // Send once the receiver is waiting (word 8 of the channel counts sleepers).
        let base = RegionView::attach(&words).unwrap().find("c").unwrap().offset / 8;
        while words[base + 8].load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        c.send_signal(2, b"wake").unwrap();
        let (r, out) = rx.recv_timeout(Duration::from_secs(60)).expect("the receiver was not woken");
        assert_eq!(r, Ok(4));
        assert_eq!(&out[..4], b"wake");
    });
}
