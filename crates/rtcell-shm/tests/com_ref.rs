//! `SignalRef`: a signal looked up once reads and writes like a full lookup, and a table entry changed
//! afterwards (a hostile or restarted peer) is noticed: the call falls back to a full lookup.

use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::sync::Ordering;
use rtcell_shm::{ComConfig, ComError, Freshness, RegionLayout, RegionView, SignalDef};

fn region() -> SharedMemory {
    let sig = |id| SignalDef { id, max_len: 8, dynamic: false, group: None };
    let mut l = RegionLayout::new();
    l.com("c", ComConfig { signals: vec![sig(1), sig(2)], groups: vec![] }).unwrap();
    let shm = SharedMemory::create_anonymous("com-ref", l.size_bytes()).unwrap();
    l.init(shm.words(), 1).unwrap();
    shm
}

#[test]
fn a_looked_up_signal_behaves_as_a_full_lookup_and_notices_a_changed_table() {
    let shm = region();
    let r = RegionView::attach(shm.words()).unwrap();
    let c = r.com("c").unwrap();
    let one = c.signal_ref(1).unwrap();
    assert_eq!((one.id(), one.max_len, one.dynamic), (1, 8, false));
    c.send_ref(&one, &7u64.to_le_bytes()).unwrap();
    let (mut out, mut seen) = ([0u8; 8], 0u64);
    assert_eq!(c.receive_ref(&one, &mut out, &mut seen).unwrap(), (8, Freshness::New));
    assert_eq!(u64::from_le_bytes(out), 7);
    assert_eq!(c.send_ref(&one, &[0u8; 4]), Err(ComError::NotOk("fixed-length signal sent with another length")));
    let (mut out2, mut seen2) = ([0u8; 8], 0u64);
    c.receive_signal(1, &mut out2, &mut seen2).unwrap();
    assert_eq!(out2, out, "the full lookup reads the same slot");

    // The peer rewrites signal 1's table entry to be signal 9: the reference is stale, and the call
    // falls back to looking id 1 up, which no longer exists.
    let base = r.find("c").unwrap().offset / 8;
    let entry = &shm.words()[base + 16];
    let v = entry.load(Ordering::Relaxed);
    entry.store((v & !0xffff) | 9, Ordering::Relaxed);
    assert_eq!(c.send_ref(&one, &1u64.to_le_bytes()), Err(ComError::NotOk("unknown signal id")));
    assert_eq!(c.receive_ref(&one, &mut out, &mut seen), Err(ComError::NotOk("unknown signal id")));
    assert!(c.signal_ref(2).is_ok(), "the other entries are untouched");
}

/// A pinned view takes every length and offset from the table copied at `pin`: a live table changed
/// afterwards is `ServiceNotAvailable` (never a different length), and works again once restored. The
/// unpinned view keeps reading the live table (bounded by the channel).
#[test]
fn a_pinned_view_uses_the_table_copied_at_pin_and_refuses_a_changed_one_until_restored() {
    let shm = region();
    let r = RegionView::attach(shm.words()).unwrap();
    let live = r.com("c").unwrap();
    let mut copy = vec![0u64; live.table_words()];
    live.pin(&mut copy).unwrap();
    let c = live.pinned(&copy);
    assert_eq!(c.signal_len(1), Ok((8, false)));
    let base = r.find("c").unwrap().offset / 8;
    let entry = &shm.words()[base + 17];
    let v = entry.load(Ordering::Relaxed);
    entry.store((v & 0xffff_ffff) | 16 << 32, Ordering::Relaxed);
    assert_eq!(live.signal_len(1), Ok((16, false)), "the live view reads the live table");
    assert_eq!(c.signal_len(1), Err(ComError::ServiceNotAvailable));
    let (mut out, mut seen) = ([0u8; 16], 0u64);
    assert_eq!(c.receive_signal(1, &mut out, &mut seen), Err(ComError::ServiceNotAvailable));
    assert_eq!(c.send_signal(1, &[0u8; 16]), Err(ComError::ServiceNotAvailable));
    assert_eq!(c.signal_len(2), Ok((8, false)), "an unchanged entry still works");
    let counts = &shm.words()[base];
    let n = counts.load(Ordering::Relaxed);
    counts.store(n + 1, Ordering::Relaxed);
    assert_eq!(c.signal_len(2), Err(ComError::ServiceNotAvailable), "changed counts");
    counts.store(n, Ordering::Relaxed);
    entry.store(v, Ordering::Relaxed);
    c.send_signal(1, &5u64.to_le_bytes()).unwrap();
    assert_eq!(c.receive_signal(1, &mut out[..8], &mut seen), Ok((8, Freshness::New)));
    // A copy too short for the table is no table at all.
    assert_eq!(live.pinned(&copy[..4]).signal_len(1), Err(ComError::NotOk("unknown signal id")));
    // A table whose entry runs past the channel when it is pinned is refused.
    entry.store((v & 0xffff_ffff) | 1 << 60, Ordering::Relaxed);
    assert!(live.pin(&mut copy).is_err());
    entry.store(v, Ordering::Relaxed);
}
