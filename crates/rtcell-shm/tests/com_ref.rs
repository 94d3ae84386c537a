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
