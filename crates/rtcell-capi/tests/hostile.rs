//! The C API against a peer that rewrites the shared table: every copy into or out of the caller's
//! buffer is bounded by what the caller passed or what was fixed at `rtcell_com_open`, never by the live
//! table; a changed table is COM_SERVICE_NOT_AVAILABLE until it reads as at open again. And the counters
//! and codes tell the truth: a refused send is not a lost message, a never-written signal reads as zeros.

mod common;
use common::{CANARY, Guarded};
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;

use rtcell_capi::com::{
    Com_ReceiveSignal, Com_ReceiveSignalGroup, Com_SendSignal, rtcell_com, rtcell_com_close, rtcell_com_open,
    rtcell_com_receive_signal, rtcell_com_use,
};
use rtcell_capi::queue::{
    rtcell_queue_close, rtcell_queue_counters, rtcell_queue_get_counters, rtcell_queue_open, rtcell_queue_receive,
    rtcell_queue_send,
};
use rtcell_capi::region::{rtcell_region_attach_memory, rtcell_region_detach};
use rtcell_capi::{
    COM_SERVICE_NOT_AVAILABLE, E_OK, RTCELL_FRESH_NEVER, RTE_E_LIMIT, RTE_E_LOST_DATA, RTE_E_NO_DATA, RTE_E_OK,
    rtcell_last_error, rtcell_queue, rtcell_region,
};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::sync::{AtomicU64, Ordering};
use rtcell_shm::{ComConfig, GroupDef, Overflow, RegionLayout, RegionView, RingConfig, SignalDef};

/// Word index of the COM table in a channel (after the 16-word header).
const TABLE: usize = 16;

fn why() -> String {
    // SAFETY: rtcell_last_error returns a NUL-terminated string.
    unsafe { CStr::from_ptr(rtcell_last_error()) }.to_string_lossy().into_owned()
}

fn region(l: &RegionLayout) -> SharedMemory {
    let shm = SharedMemory::create_anonymous("capi-hostile", l.size_bytes()).unwrap();
    l.init(shm.words(), std::process::id()).unwrap();
    shm
}

fn attach(shm: &SharedMemory) -> *mut rtcell_region {
    let mut r = null_mut();
    // SAFETY: the mapping outlives the handle (detached by every test before the mapping drops).
    let code = unsafe { rtcell_region_attach_memory(shm.as_ptr() as *mut c_void, shm.len(), &mut r) };
    assert_eq!(code, E_OK, "{}", why());
    r
}

fn open_com(r: *mut rtcell_region) -> *mut rtcell_com {
    let mut c = null_mut();
    // SAFETY: r is live; count 0 binds every COM channel.
    let code = unsafe { rtcell_com_open(r, std::ptr::null(), 0, &mut c) };
    assert_eq!(code, E_OK, "{}", why());
    // SAFETY: c is live and used by this thread only.
    unsafe { rtcell_com_use(c) };
    c
}

#[test]
fn a_peer_growing_max_len_never_moves_a_copy_past_the_callers_buffer_and_the_handle_recovers() {
    let sig = |id, max_len| SignalDef { id, max_len, dynamic: false, group: None };
    let mut l = RegionLayout::new();
    l.com("c", ComConfig { signals: vec![sig(1, 8), sig(2, 64)], groups: vec![] }).unwrap();
    let shm = region(&l);
    let base = RegionView::attach(shm.words()).unwrap().find("c").unwrap().offset / 8;
    let w = |k: usize| -> &AtomicU64 { &shm.words()[base + k] };
    let r = attach(&shm);
    let c = open_com(r);

    // The peer grows signal 1 to 40 bytes (its slot has room) and publishes a 40-byte value in it.
    let entry = w(TABLE + 1).load(Ordering::Relaxed);
    let slot = (entry & 0xffff_ffff) as usize;
    w(TABLE + 1).store((entry & 0xffff_ffff) | 40 << 32, Ordering::Relaxed);
    w(slot + 1).store(40, Ordering::Relaxed);
    for k in 0..5 {
        w(slot + 2 + k).store(u64::from_le_bytes([0xee; 8]), Ordering::Relaxed);
    }
    w(slot).store(2, Ordering::Release);

    let mut buf = Guarded::new(8, 0);
    // SAFETY: buf holds the signal's 8 bytes (as configured when the context was opened).
    let code = unsafe { Com_ReceiveSignal(1, buf.ptr()) };
    assert!(buf.canaries_intact(), "Com_ReceiveSignal wrote past the caller's 8 bytes: {:x?}", buf.0);
    assert_eq!(code, COM_SERVICE_NOT_AVAILABLE, "{}", why());
    let mut data = Guarded::new(8, 0x11);
    // SAFETY: data holds the signal's 8 bytes.
    let code = unsafe { Com_SendSignal(1, data.ptr()) };
    assert_eq!(code, COM_SERVICE_NOT_AVAILABLE, "{}", why());
    let slot_bytes: Vec<u8> = (0..5).flat_map(|k| w(slot + 2 + k).load(Ordering::Relaxed).to_le_bytes()).collect();
    assert!(!slot_bytes.contains(&CANARY), "Com_SendSignal read past the caller's 8 bytes: {slot_bytes:x?}");
    // The other signal's entry is as at open: it still works.
    let mut other = Guarded::new(64, 0xee);
    // SAFETY: 64 bytes, signal 2's length.
    assert_eq!(unsafe { Com_ReceiveSignal(2, other.ptr()) }, E_OK, "{}", why());
    assert!(other.canaries_intact() && other.bytes() == [0; 64]);

    // The table reads as at open again: the handle works.
    w(TABLE + 1).store(entry, Ordering::Relaxed);
    // SAFETY: as above.
    assert_eq!(unsafe { Com_SendSignal(1, data.ptr()) }, E_OK, "{}", why());
    // SAFETY: as above.
    assert_eq!(unsafe { Com_ReceiveSignal(1, buf.ptr()) }, E_OK, "{}", why());
    assert_eq!(buf.bytes(), [0x11; 8]);
    assert!(buf.canaries_intact() && data.canaries_intact());

    // A peer shrinking the entry (or moving its slot) is refused too, and recovers the same way.
    for bad in [(entry & 0xffff_ffff) | 4 << 32, entry + 8, entry ^ 1 << 63] {
        w(TABLE + 1).store(bad, Ordering::Relaxed);
        // SAFETY: as above.
        assert_eq!(unsafe { Com_ReceiveSignal(1, buf.ptr()) }, COM_SERVICE_NOT_AVAILABLE, "entry {bad:#x}");
        // SAFETY: as above.
        assert_eq!(unsafe { Com_SendSignal(1, data.ptr()) }, COM_SERVICE_NOT_AVAILABLE, "entry {bad:#x}");
        w(TABLE + 1).store(entry, Ordering::Relaxed);
        // SAFETY: as above.
        assert_eq!(unsafe { Com_ReceiveSignal(1, buf.ptr()) }, E_OK, "{}", why());
        assert!(buf.canaries_intact());
    }
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_com_close(c);
        rtcell_region_detach(r);
    }
}

#[test]
fn a_signal_never_written_reads_as_zeros() {
    let sig = |id, max_len, group| SignalDef { id, max_len, dynamic: false, group };
    let mut l = RegionLayout::new();
    l.com(
        "c",
        ComConfig {
            signals: vec![sig(1, 8, None), sig(2, 8, Some(10)), sig(3, 8, Some(11))],
            groups: vec![GroupDef { id: 10 }, GroupDef { id: 11 }],
        },
    )
    .unwrap();
    let shm = region(&l);
    let r = attach(&shm);
    let c = open_com(r);

    let mut buf = Guarded::new(8, 0xee);
    // SAFETY: 8 bytes, the signal's length.
    assert_eq!(unsafe { Com_ReceiveSignal(1, buf.ptr()) }, E_OK, "{}", why());
    assert_eq!(buf.bytes(), [0; 8], "a never-written signal gives zeros");
    let mut b2 = Guarded::new(16, 0xee);
    let (mut len, mut fresh) = (99usize, 99u8);
    // SAFETY: b2 holds 16 bytes; len and fresh are writable.
    let code = unsafe { rtcell_com_receive_signal(c, 1, b2.ptr(), 16, &mut len, &mut fresh) };
    assert_eq!((code, len, fresh), (E_OK, 0, RTCELL_FRESH_NEVER), "{}", why());
    assert_eq!(b2.bytes(), [0; 16], "the whole buffer holds zeros");

    // A group never written, after another group filled the receiver's copy: its members read zeros.
    let v = 0x0102_0304_0506_0708u64;
    // SAFETY: 8 bytes each.
    unsafe {
        assert_eq!(Com_SendSignal(2, &v as *const u64 as *const c_void), E_OK);
        assert_eq!(rtcell_capi::com::Com_SendSignalGroup(10), E_OK);
        assert_eq!(Com_ReceiveSignalGroup(10), E_OK);
        assert_eq!(Com_ReceiveSignal(2, buf.ptr()), E_OK);
    }
    assert_eq!(buf.bytes(), v.to_le_bytes());
    // SAFETY: as above.
    unsafe {
        assert_eq!(Com_ReceiveSignalGroup(11), E_OK, "{}", why());
        assert_eq!(Com_ReceiveSignal(3, buf.ptr()), E_OK, "{}", why());
    }
    assert_eq!(buf.bytes(), [0; 8], "a member of a never-written group gives zeros");
    assert!(buf.canaries_intact() && b2.canaries_intact());
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_com_close(c);
        rtcell_region_detach(r);
    }
}

fn queue(r: *mut rtcell_region, name: &std::ffi::CStr) -> *mut rtcell_queue {
    let mut q = null_mut();
    // SAFETY: r is live, name NUL-terminated.
    assert_eq!(unsafe { rtcell_queue_open(r, name.as_ptr(), &mut q) }, RTE_E_OK, "{}", why());
    q
}

fn counters(q: *mut rtcell_queue) -> rtcell_queue_counters {
    let mut k = rtcell_queue_counters::default();
    // SAFETY: q is live, k writable.
    assert_eq!(unsafe { rtcell_queue_get_counters(q, &mut k) }, RTE_E_OK);
    k
}

fn send(q: *mut rtcell_queue, v: u64) -> u8 {
    // SAFETY: 8 readable bytes.
    unsafe { rtcell_queue_send(q, &v as *const u64 as *const c_void, 8) }
}

fn recv(q: *mut rtcell_queue) -> (u8, u64) {
    let (mut v, mut len) = (0u64, 0usize);
    // SAFETY: 8 writable bytes; len writable.
    let code = unsafe { rtcell_queue_receive(q, &mut v as *mut u64 as *mut c_void, 8, &mut len) };
    (code, v)
}

#[test]
fn a_refused_send_is_counted_as_refused_and_never_reported_to_the_receiver_as_lost() {
    let mut l = RegionLayout::new();
    l.ring("q", RingConfig::for_frames(8, 2)).unwrap();
    let mut over = RingConfig::for_frames(8, 2);
    over.overflow = Overflow::OverwriteOldest;
    l.ring("o", over).unwrap();
    let shm = region(&l);
    let r = attach(&shm);

    let (tx, rx) = (queue(r, c"q"), queue(r, c"q"));
    let mut sent = 0u64;
    let mut refused = 0u64;
    while refused < 3 {
        match send(tx, sent + 1) {
            RTE_E_OK => sent += 1,
            RTE_E_LIMIT => refused += 1,
            other => panic!("send: {other:#x} {}", why()),
        }
    }
    for v in 1..=sent {
        assert_eq!(recv(rx), (RTE_E_OK, v), "every queued message arrives, none was lost: {}", why());
    }
    assert_eq!(recv(rx).0, RTE_E_NO_DATA);
    let k = counters(tx);
    assert_eq!((k.sent, k.received, k.lost, k.refused, k.queued), (sent, sent, 0, refused, 0));

    // Messages queued and then overwritten are lost, counted once, and the receiver is told once.
    let (tx, rx) = (queue(r, c"o"), queue(r, c"o"));
    for v in 1..=20u64 {
        assert_eq!(send(tx, v), RTE_E_OK);
    }
    let (code, first) = recv(rx);
    assert_eq!(code, RTE_E_OK | RTE_E_LOST_DATA, "{}", why());
    let mut got = 1;
    loop {
        match recv(rx) {
            (RTE_E_OK, _) => got += 1,
            (RTE_E_NO_DATA, _) => break,
            other => panic!("receive: {other:x?} {}", why()),
        }
    }
    assert_eq!(first + got - 1, 20, "the newest messages arrive in order");
    let k = counters(rx);
    assert_eq!((k.sent, k.received, k.lost, k.refused), (20, got, first - 1, 0));
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_queue_close(tx);
        rtcell_queue_close(rx);
        rtcell_region_detach(r);
    }
}

#[test]
fn a_value_sent_after_the_peer_left_the_sequence_word_at_its_largest_value_is_read_back() {
    let mut l = RegionLayout::new();
    l.com(
        "c",
        ComConfig { signals: vec![SignalDef { id: 1, max_len: 8, dynamic: false, group: None }], groups: vec![] },
    )
    .unwrap();
    let shm = region(&l);
    let base = RegionView::attach(shm.words()).unwrap().find("c").unwrap().offset / 8;
    let slot = (shm.words()[base + TABLE + 1].load(Ordering::Relaxed) & 0xffff_ffff) as usize;
    let r = attach(&shm);
    let c = open_com(r);
    shm.words()[base + slot].store(u64::MAX, Ordering::Relaxed);
    let v = 0x1122_3344_5566_7788u64;
    let mut got = Guarded::new(8, 0);
    // SAFETY: 8 bytes each, the signal's length.
    unsafe {
        assert_eq!(Com_SendSignal(1, &v as *const u64 as *const c_void), E_OK, "{}", why());
        assert_eq!(Com_ReceiveSignal(1, got.ptr()), E_OK, "{}", why());
    }
    assert_eq!(got.bytes(), v.to_le_bytes(), "the value sent, not 'never written'");
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_com_close(c);
        rtcell_region_detach(r);
    }
}

#[test]
fn a_fixed_length_signal_the_peer_published_shorter_is_not_returned_as_valid() {
    let mut l = RegionLayout::new();
    l.com(
        "c",
        ComConfig { signals: vec![SignalDef { id: 1, max_len: 8, dynamic: false, group: None }], groups: vec![] },
    )
    .unwrap();
    let shm = region(&l);
    let base = RegionView::attach(shm.words()).unwrap().find("c").unwrap().offset / 8;
    let w = |k: usize| -> &AtomicU64 { &shm.words()[base + k] };
    let slot = (w(TABLE + 1).load(Ordering::Relaxed) & 0xffff_ffff) as usize;
    let r = attach(&shm);
    let c = open_com(r);
    // The peer publishes a 3-byte value in the 8-byte fixed-length signal (the table is unchanged).
    w(slot + 1).store(3, Ordering::Relaxed);
    w(slot + 2).store(u64::from_le_bytes([0xaa; 8]), Ordering::Relaxed);
    w(slot).store(2, Ordering::Release);

    // Both paths: the first call looks the signal up, the second uses the remembered reference.
    for call in 0..2 {
        let mut got = Guarded::new(8, 0x77);
        // SAFETY: 8 bytes, the signal's length.
        let code = unsafe { Com_ReceiveSignal(1, got.ptr()) };
        assert!(got.canaries_intact());
        assert_ne!(
            code,
            E_OK,
            "call {call}: E_OK for a fixed 8-byte signal holding a 3-byte value; the caller got {:x?}",
            got.bytes()
        );
    }
    let mut got = Guarded::new(8, 0x77);
    let mut len = 99usize;
    // SAFETY: 8 writable bytes; len writable.
    let code = unsafe { rtcell_com_receive_signal(c, 1, got.ptr(), 8, &mut len, null_mut()) };
    assert_ne!(code, E_OK, "E_OK with length {len} for a fixed 8-byte signal");

    // A whole value again: read back exactly.
    w(slot + 1).store(8, Ordering::Relaxed);
    w(slot).store(4, Ordering::Release);
    let mut got = Guarded::new(8, 0x77);
    // SAFETY: 8 bytes, the signal's length.
    assert_eq!(unsafe { Com_ReceiveSignal(1, got.ptr()) }, E_OK, "{}", why());
    assert_eq!(got.bytes(), [0xaa; 8]);
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_com_close(c);
        rtcell_region_detach(r);
    }
}

#[test]
fn a_failed_group_receive_does_not_leave_a_half_copied_value_for_its_members() {
    let sig = |id| SignalDef { id, max_len: 8, dynamic: false, group: Some(10) };
    let mut l = RegionLayout::new();
    l.com("c", ComConfig { signals: vec![sig(1), sig(2)], groups: vec![GroupDef { id: 10 }] }).unwrap();
    let shm = region(&l);
    let base = RegionView::attach(shm.words()).unwrap().find("c").unwrap().offset / 8;
    let w = |k: usize| -> &AtomicU64 { &shm.words()[base + k] };
    // The group's entry follows the two signals' entries.
    let slot = (w(TABLE + 2 * 2 + 1).load(Ordering::Relaxed) & 0xffff_ffff) as usize;
    let r = attach(&shm);
    let c = open_com(r);
    let publish = |seq: u64, len: u64, a: u8, b: u8| {
        w(slot + 1).store(len, Ordering::Relaxed);
        w(slot + 2).store(u64::from_le_bytes([a; 8]), Ordering::Relaxed);
        w(slot + 3).store(u64::from_le_bytes([b; 8]), Ordering::Relaxed);
        w(slot).store(seq, Ordering::Release);
    };
    publish(2, 16, 0x11, 0x22);
    let mut buf = Guarded::new(8, 0);
    // SAFETY: 8 bytes, the member's length.
    unsafe {
        assert_eq!(Com_ReceiveSignalGroup(10), E_OK, "{}", why());
        assert_eq!(Com_ReceiveSignal(1, buf.ptr()), E_OK, "{}", why());
    }
    assert_eq!(buf.bytes(), [0x11; 8]);

    // The peer publishes a 3-byte value in the 16-byte group: the group receive is refused...
    publish(4, 3, 0xee, 0xee);
    assert_eq!(Com_ReceiveSignalGroup(10), COM_SERVICE_NOT_AVAILABLE, "{}", why());
    // ...and a member read afterwards is either refused or the last whole value, never a mix of both.
    let mut buf = Guarded::new(8, 0);
    let mut fresh = 0u8;
    // SAFETY: 8 writable bytes; fresh writable.
    let code = unsafe { rtcell_com_receive_signal(c, 1, buf.ptr(), 8, null_mut(), &mut fresh) };
    assert!(
        code != E_OK || buf.bytes() == [0x11; 8],
        "E_OK (freshness {fresh}) with {:x?}: part of a refused value",
        buf.bytes()
    );

    // A whole value again: both members read it.
    publish(6, 16, 0x33, 0x44);
    // SAFETY: as above.
    unsafe {
        assert_eq!(Com_ReceiveSignalGroup(10), E_OK, "{}", why());
        assert_eq!(Com_ReceiveSignal(1, buf.ptr()), E_OK, "{}", why());
        assert_eq!(buf.bytes(), [0x33; 8]);
        assert_eq!(Com_ReceiveSignal(2, buf.ptr()), E_OK, "{}", why());
        assert_eq!(buf.bytes(), [0x44; 8]);
    }
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_com_close(c);
        rtcell_region_detach(r);
    }
}

/// An overwriting queue with a receiver racing the sender: `lost` is the messages that never arrived, so
/// `received + lost == sent` once both sides stop (a message the receiver took while the sender was
/// overwriting it must not be counted as lost as well).
#[test]
fn an_overwriting_queue_never_counts_a_received_message_as_lost() {
    const N: u64 = 300_000;
    let mut l = RegionLayout::new();
    let mut over = RingConfig::for_frames(8, 4);
    over.overflow = Overflow::OverwriteOldest;
    l.ring("o", over).unwrap();
    let shm = region(&l);
    let r = attach(&shm);
    let (tx, rx) = (queue(r, c"o") as usize, queue(r, c"o"));
    let done = std::sync::atomic::AtomicBool::new(false);
    let (received, gaps) = std::thread::scope(|s| {
        s.spawn(|| {
            for v in 1..=N {
                assert_eq!(send(tx as *mut rtcell_queue, v), RTE_E_OK, "{}", why());
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let (mut last, mut received, mut gaps) = (0u64, 0u64, 0u64);
        loop {
            let finished = done.load(std::sync::atomic::Ordering::Acquire);
            match recv(rx) {
                (code, v) if code & !RTE_E_LOST_DATA == RTE_E_OK => {
                    assert!(v > last, "message {v} after {last}");
                    gaps += v - last - 1;
                    last = v;
                    received += 1;
                }
                (RTE_E_NO_DATA, _) if finished => break,
                (RTE_E_NO_DATA, _) => std::thread::yield_now(),
                other => panic!("receive: {other:x?} {}", why()),
            }
        }
        assert_eq!(last, N, "the newest message arrives");
        (received, gaps)
    });
    let k = counters(rx);
    assert_eq!((k.sent, k.received), (N, received));
    assert_eq!(k.lost, gaps, "lost counts the messages that never arrived ({k:?})");
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_queue_close(tx as *mut rtcell_queue);
        rtcell_queue_close(rx);
        rtcell_region_detach(r);
    }
}

/// The header's promise: every call checks that the table entries it uses still read as at open; a
/// group's entry is its id word as well as its place.
#[test]
fn a_group_whose_id_the_peer_changed_is_not_available_until_restored() {
    let mut l = RegionLayout::new();
    l.com(
        "c",
        ComConfig {
            signals: vec![SignalDef { id: 1, max_len: 8, dynamic: false, group: Some(10) }],
            groups: vec![GroupDef { id: 10 }],
        },
    )
    .unwrap();
    let shm = region(&l);
    let base = RegionView::attach(shm.words()).unwrap().find("c").unwrap().offset / 8;
    let id_word = &shm.words()[base + TABLE + 2];
    let r = attach(&shm);
    let c = open_com(r);
    let v = 7u64;
    // SAFETY: 8 readable bytes, the member's length.
    assert_eq!(unsafe { Com_SendSignal(1, &v as *const u64 as *const c_void) }, E_OK, "{}", why());
    id_word.store(12, Ordering::Relaxed);
    assert_eq!(Com_ReceiveSignalGroup(10), COM_SERVICE_NOT_AVAILABLE, "group 10 is now 12 in the table");
    assert_eq!(rtcell_capi::com::Com_SendSignalGroup(10), COM_SERVICE_NOT_AVAILABLE);
    id_word.store(10, Ordering::Relaxed);
    assert_eq!(rtcell_capi::com::Com_SendSignalGroup(10), E_OK, "{}", why());
    assert_eq!(Com_ReceiveSignalGroup(10), E_OK, "{}", why());
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_com_close(c);
        rtcell_region_detach(r);
    }
}

/// A group value refused as short does not count as read: once the peer completes it (same sequence
/// number), it is new to this handle.
#[test]
fn a_refused_group_value_is_not_remembered_as_read() {
    let mut l = RegionLayout::new();
    l.com(
        "c",
        ComConfig {
            signals: vec![SignalDef { id: 1, max_len: 8, dynamic: false, group: Some(10) }],
            groups: vec![GroupDef { id: 10 }],
        },
    )
    .unwrap();
    let shm = region(&l);
    let base = RegionView::attach(shm.words()).unwrap().find("c").unwrap().offset / 8;
    let w = |k: usize| -> &AtomicU64 { &shm.words()[base + k] };
    let slot = (w(TABLE + 2 + 1).load(Ordering::Relaxed) & 0xffff_ffff) as usize;
    let r = attach(&shm);
    let c = open_com(r);
    let new_reads = || {
        let mut k = rtcell_capi::com::rtcell_com_counters::default();
        // SAFETY: c is live, k writable.
        assert_eq!(unsafe { rtcell_capi::com::rtcell_com_get_counters(c, &mut k) }, E_OK);
        k.received_new
    };
    w(slot + 1).store(8, Ordering::Relaxed);
    w(slot).store(2, Ordering::Release);
    assert_eq!(Com_ReceiveSignalGroup(10), E_OK, "{}", why());
    assert_eq!(new_reads(), 1);
    w(slot + 1).store(3, Ordering::Relaxed);
    w(slot).store(4, Ordering::Release);
    assert_eq!(Com_ReceiveSignalGroup(10), COM_SERVICE_NOT_AVAILABLE);
    w(slot + 1).store(8, Ordering::Relaxed);
    assert_eq!(Com_ReceiveSignalGroup(10), E_OK, "{}", why());
    assert_eq!(new_reads(), 2, "value 4 was never read whole before: it is new");
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        rtcell_com_close(c);
        rtcell_region_detach(r);
    }
}
