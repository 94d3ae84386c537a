//! Fuzz: the C API's functions (called directly, as C calls them) against a hostile thread that
//! scribbles the live COM table, the signal slots and two rings while they run. Structure-aware: valid
//! entries with lengths and offsets moved a little or a lot, entries swapped or forged (a signal grown
//! inside its channel, with a value that long), counts changed, sequence and length words, ring indices
//! and frame headers; and undone, so calls race a table in flux. Every caller buffer has exactly the
//! size the call claims, with canary bytes around it. Every few hundred cases the scribbler stops and
//! restores the region: the COM handle must work again with exact values. `tests/fuzz_capi_c.rs` of
//! rtcell-clib runs the same from C under valgrind memcheck.
//!
//! `RTCELL_FUZZ_CASES` (default: a CI budget of a few seconds) and `RTCELL_FUZZ_SEED` (default: random).

mod common;
use common::Guarded;
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64 as StdAtomicU64, Ordering as O};
use std::time::Duration;

use rtcell_capi::com::{
    Com_ReceiveDynSignal, Com_ReceiveSignal, Com_ReceiveSignalGroup, Com_SendDynSignal, Com_SendSignal,
    Com_SendSignalGroup, rtcell_com, rtcell_com_close, rtcell_com_open, rtcell_com_receive_signal,
    rtcell_com_signal_info, rtcell_com_use,
};
use rtcell_capi::queue::{rtcell_queue_close, rtcell_queue_open, rtcell_queue_receive, rtcell_queue_send};
use rtcell_capi::region::{rtcell_region_attach_memory, rtcell_region_detach};
use rtcell_capi::{
    COM_BUSY, COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, E_OK, RTE_E_LIMIT, RTE_E_LOST_DATA, RTE_E_NO_DATA, RTE_E_OK,
    rtcell_last_error, rtcell_queue, rtcell_region,
};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::sync::{AtomicU64, Ordering};
use rtcell_shm::{ComConfig, GroupDef, Overflow, RegionLayout, RegionView, RingConfig, SignalDef};
use rtcell_testkit::fuzz::{Fuzz, Rng as _, RngCore as _, SmallRng};

/// Cases when `RTCELL_FUZZ_CASES` is unset (a few seconds here).
const CI_CASES: u64 = 1_000_000;
/// Fixed-length signals (id, bytes); 5 and 6 are members of group 10.
const SIGS: [(u16, usize); 6] = [(1, 8), (2, 1), (3, 13), (5, 4), (6, 8), (7, 2)];
const DYN_ID: u16 = 4;
const DYN_MAX: usize = 24;
const GROUP: u16 = 10;
const FRAME_MAX: usize = 16;

/// A thin view of the test kit's generator with the two draws this target uses.
struct Rng(SmallRng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.0.random_range(0..n) }
    }
}

fn layout() -> RegionLayout {
    let sig = |id, max_len, dynamic, group| SignalDef { id, max_len, dynamic, group };
    let mut l = RegionLayout::new();
    let mut signals: Vec<SignalDef> =
        SIGS.iter().map(|&(id, len)| sig(id, len as u32, false, (id == 5 || id == 6).then_some(GROUP))).collect();
    signals.insert(3, sig(DYN_ID, DYN_MAX as u32, true, None));
    l.com("c", ComConfig { signals, groups: vec![GroupDef { id: GROUP }] }).unwrap();
    l.ring("q", RingConfig::for_frames(FRAME_MAX as u32, 4)).unwrap();
    let mut o = RingConfig::for_frames(FRAME_MAX as u32, 4);
    o.overflow = Overflow::OverwriteOldest;
    l.ring("o", o).unwrap();
    l
}

/// Where the scribbler writes: word ranges of the region, and the region as it was made.
struct Target<'a> {
    w: &'a [AtomicU64],
    orig: Vec<u64>,
    com: usize,
    table: usize,
    com_words: usize,
    rings: [usize; 2],
    ring_words: usize,
}

impl Target<'_> {
    fn get(&self, k: usize) -> u64 {
        self.w[k].load(Ordering::Relaxed)
    }
    fn put(&self, k: usize, v: u64) {
        self.w[k].store(v, Ordering::Relaxed);
    }

    fn near32(&self, r: &mut Rng, v: u64) -> u64 {
        const D: [i64; 12] = [1, -1, 2, -2, 7, 8, -8, 9, 16, 64, -64, 4096];
        match r.below(6) {
            0 => 0,
            1 => 0xffff_ffff,
            2 => 0x7fff_ffff + r.below(3),
            3 => (v * 2) & 0xffff_ffff,
            4 => r.below(self.com_words as u64 + 64),
            _ => (v as i64).wrapping_add(D[r.below(12) as usize]) as u64 & 0xffff_ffff,
        }
    }

    fn near64(&self, r: &mut Rng, v: u64, k: usize) -> u64 {
        match r.below(9) {
            0 => (v & !0xffff_ffff) | self.near32(r, v & 0xffff_ffff),
            1 => (v & 0xffff_ffff) | self.near32(r, v >> 32) << 32,
            2 => v ^ 1 << r.below(64),
            3 => r.next(),
            4 => self.orig[k],
            5 => v.wrapping_add(16 * (r.below(8) + 1)),
            6 => v.wrapping_sub(16 * (r.below(8) + 1)),
            7 => 1 << 63 | r.below(1024),
            _ => [0, u64::MAX][r.below(2) as usize],
        }
    }

    fn mutate(&self, r: &mut Rng) {
        let entries = self.table - 16;
        if r.below(2) == 0 {
            // Undo: a table word back to its valid value, so calls race a table in flux.
            let k = if r.below(8) > 0 { self.com + 16 + r.below(entries as u64) as usize } else { self.com };
            return self.put(k, self.orig[k]);
        }
        match r.below(12) {
            10 | 11 => {
                // Forge: a signal grown (its slot still inside the channel) with a value that long.
                let sig = r.below((entries / 2 - 1) as u64) as usize;
                let k = self.com + 16 + 2 * sig + 1;
                let (off, len) = (self.orig[k] & 0xffff_ffff, (self.orig[k] >> 32) + 1 + r.below(40));
                self.put(k, off | len << 32);
                let standalone = (self.orig[k - 1] >> 16) & 0xffff == 0xffff;
                if standalone && off as usize + 2 + (len as usize).div_ceil(8) <= self.com_words {
                    let slot = self.com + off as usize;
                    self.put(slot + 1, len);
                    self.put(slot, (self.get(slot) + 2) & !1);
                }
            }
            0..=3 => {
                let k = self.com + 16 + r.below(entries as u64) as usize;
                if r.below(5) == 0 {
                    let other = self.com + 16 + r.below(entries as u64) as usize;
                    return self.put(k, self.orig[other]);
                }
                self.put(k, self.near64(r, self.orig[k], k));
            }
            4 => {
                let v = self.orig[self.com];
                let d = r.below(3).wrapping_sub(1);
                self.put(self.com, if r.below(2) == 0 { v.wrapping_add(d) } else { v.wrapping_add(d << 32) });
            }
            5 | 6 => {
                let k = self.com + self.table + r.below((self.com_words - self.table) as u64) as usize;
                let v = self.get(k);
                self.put(k, if r.below(3) == 0 { v | 1 } else { self.near64(r, v, k) });
            }
            _ => {
                let base = self.rings[r.below(2) as usize];
                let k = base
                    + if r.below(2) == 0 {
                        r.below(24) as usize
                    } else {
                        24 + 2 * r.below(((self.ring_words - 24) / 2) as u64) as usize + r.below(2) as usize
                    };
                self.put(k, self.near64(r, self.get(k), k));
            }
        }
    }

    fn restore(&self) {
        for k in (self.com..self.com + self.table).filter(|&k| k == self.com || k >= self.com + 16) {
            self.put(k, self.orig[k]);
        }
        for base in self.rings {
            for k in base..base + self.ring_words {
                self.put(k, self.orig[k]);
            }
        }
    }
}

fn why() -> String {
    // SAFETY: rtcell_last_error returns a NUL-terminated string.
    unsafe { CStr::from_ptr(rtcell_last_error()) }.to_string_lossy().into_owned()
}

/// The honest side: its handles, and what it counts.
struct Honest {
    region: *mut rtcell_region,
    com: *mut rtcell_com,
    /// Whether `com` was opened on the clean table (one opened mid-scribble holds what the peer wrote
    /// then, and is reopened once the table is restored, as a program does on a lasting
    /// COM_SERVICE_NOT_AVAILABLE).
    com_clean: bool,
    queues: [*mut rtcell_queue; 4],
    ok: u64,
    unavailable: u64,
    other: u64,
}

impl Honest {
    fn expect(&mut self, what: &str, rc: u8, allowed: &[u8]) {
        match rc & !RTE_E_LOST_DATA {
            E_OK => self.ok += 1,
            COM_SERVICE_NOT_AVAILABLE => self.unavailable += 1,
            _ => self.other += 1,
        }
        assert!(allowed.contains(&(rc & !RTE_E_LOST_DATA)), "{what}: code {rc:#x} ({})", why());
    }

    /// Opens the COM context; with `check`, keeps it only if every signal has the length this side
    /// configured (a table the peer rewrote before the open is what the context holds).
    fn open_com(&mut self, check: bool) -> bool {
        // SAFETY: NULL or a handle from rtcell_com_open.
        unsafe { rtcell_com_close(self.com) };
        self.com = null_mut();
        let name = c"c".as_ptr();
        // SAFETY: region live; one NUL-terminated name.
        if unsafe { rtcell_com_open(self.region, &name, 1, &mut self.com) } != E_OK {
            self.com = null_mut();
            return false;
        }
        for &(id, len) in SIGS.iter().filter(|_| check) {
            let (mut max, mut dynamic) = (0usize, 1u8);
            // SAFETY: com live; outputs writable.
            // SAFETY: as said above the match.
            let rc = unsafe { rtcell_com_signal_info(self.com, id, &mut max, &mut dynamic) };
            if rc != E_OK || max != len || dynamic != 0 {
                // SAFETY: as above.
                unsafe { rtcell_com_close(self.com) };
                self.com = null_mut();
                return false;
            }
        }
        // SAFETY: com live, used by this thread only.
        unsafe { rtcell_com_use(self.com) };
        true
    }

    fn open_queues(&mut self) {
        for (i, q) in self.queues.iter_mut().enumerate() {
            // SAFETY: NULL or a handle from rtcell_queue_open.
            unsafe { rtcell_queue_close(*q) };
            let name = if i < 2 { c"q" } else { c"o" };
            // SAFETY: region live; name NUL-terminated.
            assert_eq!(unsafe { rtcell_queue_open(self.region, name.as_ptr(), q) }, RTE_E_OK, "{}", why());
        }
    }

    /// On a restored region: the COM handle and fresh queues work, with exact values.
    fn check_recovery(&mut self, r: &mut Rng) {
        if !self.com_clean {
            assert!(self.open_com(false), "rtcell_com_open on a restored table: {}", why());
            self.com_clean = true;
        }
        let (v, mut got) = (r.next(), 0u64);
        // SAFETY: 8 bytes each, signal 1's length.
        unsafe {
            assert_eq!(Com_SendSignal(1, &v as *const u64 as *const c_void), E_OK, "send after restore: {}", why());
            assert_eq!(Com_ReceiveSignal(1, &mut got as *mut u64 as *mut c_void), E_OK, "after restore: {}", why());
        }
        assert_eq!(got, v, "the value sent after the table was restored");
        self.open_queues();
        let mut len = 0usize;
        got = 0;
        // SAFETY: 8 bytes each; len writable.
        unsafe {
            assert_eq!(rtcell_queue_send(self.queues[0], &v as *const u64 as *const c_void, 8), RTE_E_OK);
            let rc = rtcell_queue_receive(self.queues[1], &mut got as *mut u64 as *mut c_void, 8, &mut len);
            assert_eq!((rc, got, len), (RTE_E_OK, v, 8), "queue after restore: {}", why());
        }
    }

    fn one_case(&mut self, r: &mut Rng) {
        let (id, len) = SIGS[r.below(SIGS.len() as u64) as usize];
        let any = [E_OK, E_NOT_OK, COM_SERVICE_NOT_AVAILABLE, COM_BUSY];
        // Every call below: each buffer holds exactly the bytes the call is told of (or the signal's
        // length as configured, for the AUTOSAR calls); handles are live; outputs writable.
        match r.below(12) {
            0 => {
                let mut b = Guarded::new(len, r.next() as u8);
                // SAFETY: as said above the match.
                let rc = unsafe { Com_SendSignal(id, b.ptr()) };
                self.expect("Com_SendSignal", rc, &[E_OK, E_NOT_OK, COM_SERVICE_NOT_AVAILABLE]);
                b.check("Com_SendSignal");
            }
            1 | 2 => {
                let mut b = Guarded::new(len, 0xee);
                // SAFETY: as said above the match.
                let rc = unsafe { Com_ReceiveSignal(id, b.ptr()) };
                self.expect("Com_ReceiveSignal", rc, &any);
                b.check("Com_ReceiveSignal");
            }
            3 => {
                let n = r.below(DYN_MAX as u64 + 8) as usize;
                let mut b = Guarded::new(n, r.next() as u8);
                // SAFETY: as said above the match.
                let rc = unsafe { Com_SendDynSignal(DYN_ID, b.ptr(), n as u16) };
                self.expect("Com_SendDynSignal", rc, &[E_OK, E_NOT_OK, COM_SERVICE_NOT_AVAILABLE]);
                b.check("Com_SendDynSignal");
            }
            4 => {
                let n = r.below(DYN_MAX as u64 + 8) as usize;
                let mut b = Guarded::new(n, 0xee);
                let mut l = n as u16;
                // SAFETY: as said above the match.
                let rc = unsafe { Com_ReceiveDynSignal(DYN_ID, b.ptr(), &mut l) };
                self.expect("Com_ReceiveDynSignal", rc, &any);
                assert!(rc != E_OK || l as usize <= n, "Com_ReceiveDynSignal: length {l} for {n} bytes");
                b.check("Com_ReceiveDynSignal");
            }
            5 => {
                let n = r.below(32) as usize;
                let mut b = Guarded::new(n, 0xee);
                let (mut l, mut fresh) = (0usize, 0u8);
                let sid = if r.below(2) == 0 { id } else { DYN_ID };
                // SAFETY: as said above the match.
                let rc = unsafe { rtcell_com_receive_signal(self.com, sid, b.ptr(), n, &mut l, &mut fresh) };
                self.expect("rtcell_com_receive_signal", rc, &any);
                assert!(rc != E_OK || (l <= n && fresh <= 2), "rtcell_com_receive_signal: {l} > {n}");
                b.check("rtcell_com_receive_signal");
            }
            6 => {
                let rc = if r.below(2) == 0 { Com_SendSignalGroup(GROUP) } else { Com_ReceiveSignalGroup(GROUP) };
                self.expect("group call", rc, &any);
            }
            7 => {
                let (mut max, mut dynamic) = (0usize, 0u8);
                // SAFETY: as said above the match.
                let rc = unsafe { rtcell_com_signal_info(self.com, id, &mut max, &mut dynamic) };
                self.expect("rtcell_com_signal_info", rc, &any);
                assert!(rc != E_OK || (max, dynamic) == (len, 0), "signal {id}: {max} bytes, not {len}");
            }
            8 | 9 => {
                let q = self.queues[2 * r.below(2) as usize];
                let n = r.below(FRAME_MAX as u64 + 4) as usize;
                let mut b = Guarded::new(n, r.next() as u8);
                // SAFETY: as said above the match.
                let rc = unsafe { rtcell_queue_send(q, b.ptr(), n) };
                self.expect("rtcell_queue_send", rc, &[RTE_E_OK, RTE_E_LIMIT, E_NOT_OK, COM_SERVICE_NOT_AVAILABLE]);
                b.check("rtcell_queue_send");
            }
            _ => {
                let q = self.queues[1 + 2 * r.below(2) as usize];
                let n = r.below(FRAME_MAX as u64 + 4) as usize;
                let mut b = Guarded::new(n, 0xee);
                let mut l = 0usize;
                // SAFETY: as said above the match.
                let rc = unsafe { rtcell_queue_receive(q, b.ptr(), n, &mut l) };
                self.expect(
                    "rtcell_queue_receive",
                    rc,
                    &[RTE_E_OK, RTE_E_NO_DATA, E_NOT_OK, COM_SERVICE_NOT_AVAILABLE],
                );
                assert!(rc & !RTE_E_LOST_DATA != RTE_E_OK || l <= n, "rtcell_queue_receive: {l} > {n}");
                b.check("rtcell_queue_receive");
            }
        }
    }
}

#[test]
fn fuzz_capi() {
    let fuzz = Fuzz::start("fuzz_capi", CI_CASES);
    let cases = fuzz.cases();
    let l = layout();
    let shm = SharedMemory::create_anonymous("fuzz-capi", l.size_bytes()).unwrap();
    l.init(shm.words(), std::process::id()).unwrap();
    let view = RegionView::attach(shm.words()).unwrap();
    let (c, q, o) = (view.find("c").unwrap(), view.find("q").unwrap(), view.find("o").unwrap());
    let com_view = view.com("c").unwrap();
    let t = Target {
        w: shm.words(),
        orig: shm.words().iter().map(|w| w.load(Ordering::Relaxed)).collect(),
        com: c.offset / 8,
        table: 16 + 2 * (com_view.signal_count() + com_view.group_count()),
        com_words: c.size / 8,
        rings: [q.offset / 8, o.offset / 8],
        ring_words: q.size / 8,
    };
    let mut h = Honest {
        region: null_mut(),
        com: null_mut(),
        com_clean: false,
        queues: [null_mut(); 4],
        ok: 0,
        unavailable: 0,
        other: 0,
    };
    // SAFETY: the mapping outlives the handle (detached below).
    // SAFETY: as said above the match.
    let rc = unsafe { rtcell_region_attach_memory(shm.as_ptr() as *mut c_void, shm.len(), &mut h.region) };
    assert_eq!(rc, E_OK, "{}", why());
    let (stop, pause, paused) = (AtomicBool::new(false), AtomicBool::new(false), AtomicBool::new(false));
    let writes = StdAtomicU64::new(0);
    let mut r = Rng(fuzz.rng(0));
    h.check_recovery(&mut r);
    let hold = |on: bool| {
        pause.store(on, O::SeqCst);
        while paused.load(O::SeqCst) != on {
            std::thread::sleep(Duration::from_micros(20));
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut r = Rng(fuzz.rng(1));
            while !stop.load(O::Relaxed) {
                if pause.load(O::SeqCst) {
                    t.restore();
                    paused.store(true, O::SeqCst);
                    while pause.load(O::SeqCst) && !stop.load(O::Relaxed) {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                    paused.store(false, O::SeqCst);
                    continue;
                }
                t.mutate(&mut r);
                writes.fetch_add(1, O::Relaxed);
            }
        });
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for i in 0..cases {
                h.one_case(&mut r);
                fuzz.case();
                if i % 512 == 511 {
                    hold(true);
                    h.check_recovery(&mut r);
                    hold(false);
                }
                if i % 4096 == 4095 {
                    h.com_clean = false;
                    if !h.open_com(true) {
                        // Opened mid-scribble: refused, or a table unlike this side's configuration.
                        hold(true);
                        h.check_recovery(&mut r);
                        hold(false);
                    }
                }
            }
        }));
        stop.store(true, O::Relaxed);
        if let Err(e) = result {
            // The kit reports the seed, the cases done and the replay line for an unfinished run.
            std::panic::resume_unwind(e);
        }
    });
    t.restore();
    h.check_recovery(&mut r);
    // SAFETY: handles made above, not used afterwards.
    unsafe {
        for q in h.queues {
            rtcell_queue_close(q);
        }
        rtcell_com_close(h.com);
        rtcell_region_detach(h.region);
    }
    println!(
        "fuzz fuzz_capi: calls ok {}, refused as unavailable {}, other codes {}; {} hostile writes",
        h.ok,
        h.unavailable,
        h.other,
        writes.load(O::Relaxed)
    );
    fuzz.finish();
}
