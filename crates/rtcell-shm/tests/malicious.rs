//! Property tests against a malicious peer: whatever it writes into the shared memory — random bytes
//! over a whole region, or targeted garbage in a ring's, signal's or COM channel's words between the honest
//! side's calls — attaching and every operation must return (no panic, no endless loop), never report a
//! length that does not fit the caller's buffer, and fail only with the documented errors.
//!
//! Every access is bounds-checked by Rust, so an out-of-bounds index would panic and fail the test.
//! The cases are deterministic (fixed proptest seed) unless `PROPTEST_RNG_SEED` is set;
//! `PROPTEST_CASES` overrides the number of cases.

#![cfg(not(loom))]

mod common;

use common::Rng;
use common::*;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{
    ComReceiver, ComView, Freshness, Overflow, RecvError, RegionLayout, RegionView, RingConfig, RingView, SendError,
    SignalError, SignalView,
};
use std::sync::atomic::Ordering;

/// Operations per case in the hostile-peer tests.
const OPS: usize = 2_000;

fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig { cases, failure_persistence: None, max_shrink_iters: 256, ..ProptestConfig::default() };
    if let Some(n) = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()) {
        c.cases = n;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(0x7274_6365_6c6c);
    }
    c
}

/// A region with every kind of channel, including both ring policies.
fn full_layout() -> RegionLayout {
    let mut l = RegionLayout::new();
    l.ring("rej", RingConfig::for_frames(40, 3))
        .unwrap()
        .ring("ovw", RingConfig { overflow: Overflow::OverwriteOldest, notify: true, ..RingConfig::for_frames(24, 4) })
        .unwrap()
        .signal("sig", 20)
        .unwrap()
        .com("com", com_config())
        .unwrap()
        .raw("raw", 24)
        .unwrap();
    l
}

/// Garbage a peer might write over `current`: mostly values close to plausible ones, so that they get
/// past the first checks.
fn hostile(rng: &mut Rng, current: u64, scale: u64) -> u64 {
    let scale = scale.max(1);
    match rng.below(14) {
        0 => 0,
        1 => u64::MAX - rng.below(4),
        2 => rng.next(),
        3 => current.wrapping_add(rng.below(9)).wrapping_sub(4),
        4 => current ^ (1 << rng.below(64)),
        5 => rng.below(scale * 3),
        6 => rng.below(scale * 3) & !15,
        7 => rng.below(scale) | (rng.below(4) << 32),
        8 => 1 << 32 | rng.below(3),
        9 => current.wrapping_mul(2),
        10 => current.wrapping_add(scale),
        11 => current.wrapping_sub(scale),
        12 => 1 << rng.below(64),
        _ => rng.below(64),
    }
}

/// The words of channel `name`.
fn channel<'a>(words: &'a [AtomicU64], name: &str) -> &'a [AtomicU64] {
    let e = RegionView::attach(words).unwrap().find(name).unwrap();
    &words[e.offset / 8..(e.offset + e.size) / 8]
}

// ---------------------------------------------------------------------------------------------------------
// (a) Whole regions of garbage.

/// Uses everything a region offers, by the names found in its own table; checks only what must hold for
/// any content. Returns the number of operations done.
fn exercise_region(words: &[AtomicU64], rng: &mut Rng) -> usize {
    let Ok(r) = RegionView::attach(words) else { return 1 };
    let mut ops = 1;
    let _ = (r.len(), r.is_empty(), r.size(), r.creator_pid());
    assert!(r.size() <= words.len() * 8);
    for i in 0..r.len() + 1 {
        let Ok(e) = r.entry(i) else { continue };
        ops += 1;
        assert!(e.offset + e.size <= r.size());
        let name = e.name().to_string();
        let _ = r.find(&name);
        match e.kind {
            rtcell_shm::ChannelKind::Ring => {
                if let Ok(ring) = r.ring(&name) {
                    ops += exercise_ring(ring, rng, 16);
                }
            }
            rtcell_shm::ChannelKind::Signal => {
                if let Ok(sig) = r.signal(&name) {
                    ops += exercise_signal(sig, rng, 8);
                }
            }
            rtcell_shm::ChannelKind::Com => {
                if let Ok(com) = r.com(&name) {
                    ops += exercise_com(com, r.channel_words(&e), rng, 16);
                }
            }
            rtcell_shm::ChannelKind::Raw => {
                // (By name, this may find another channel: the peer can make names repeat.)
                if let Ok(raw) = r.raw(&name) {
                    assert!(raw.len() * 8 <= r.size());
                }
                assert_eq!(r.channel_words(&e).len() * 8, e.size);
            }
        }
        // Asking for the wrong kind is an error, not a panic.
        let _ = (r.ring(&name).err(), r.signal(&name).err(), r.com(&name).err(), r.raw(&name).err());
    }
    ops
}

/// Ring operations with only the always-true checks.
fn exercise_ring(ring: RingView<'_>, rng: &mut Rng, n: usize) -> usize {
    let max = ring.config().max_frame as usize;
    let mut p = ring.producer();
    let mut c = ring.consumer();
    let mut buf = vec![0u8; max.min(1 << 16) + 1];
    for _ in 0..n {
        match rng.below(6) {
            0 | 1 => {
                let len = (rng.below(max as u64 + 2) as usize).min(buf.len());
                match p.try_send(&buf[..len]) {
                    Ok(()) | Err(SendError::Full) | Err(SendError::Corrupt(_)) => assert!(len <= max),
                    Err(SendError::TooLarge { len: l, max: m }) => assert!(l == len && m == max && len > max),
                }
            }
            2 | 3 => {
                let cap = rng.below(buf.len() as u64 + 1) as usize;
                check_recv(c.try_recv(&mut buf[..cap]), cap, max);
            }
            4 => {
                let _ = (ring.counters(), ring.queued(), c.has_message(), ring.event_word().load(Ordering::Relaxed));
            }
            _ => {
                // A restarted side picks its state up from the shared words.
                if rng.chance(1, 2) {
                    p = ring.producer();
                } else {
                    c = ring.consumer();
                }
                if ring.config().notify && rng.chance(1, 8) {
                    c.wait_for_message(0);
                }
            }
        }
    }
    n
}

fn check_recv(res: Result<usize, RecvError>, cap: usize, max: usize) {
    match res {
        Ok(len) => assert!(len <= cap && len <= max, "received {len} bytes into {cap} (max_frame {max})"),
        Err(RecvError::TooSmall { len }) => assert!(len > cap && len <= max, "TooSmall {len} for {cap}"),
        Err(RecvError::Empty) | Err(RecvError::Corrupt(_)) => {}
    }
}

fn check_signal_read(res: Result<(usize, Freshness), SignalError>, out: usize, capacity: usize) {
    match res {
        Ok((len, fresh)) => {
            assert!(len <= out && len <= capacity, "read {len} bytes into {out} (capacity {capacity})");
            if fresh == Freshness::NeverWritten {
                assert_eq!(len, 0);
            }
        }
        Err(SignalError::TooSmall { len }) => assert!(len > out && len <= capacity),
        Err(SignalError::Busy) | Err(SignalError::Corrupt(_)) => {}
        Err(SignalError::TooLarge { .. }) => panic!("TooLarge from a read"),
    }
}

fn exercise_signal(sig: SignalView<'_>, rng: &mut Rng, n: usize) -> usize {
    let cap = sig.capacity();
    let mut buf = vec![0u8; cap.min(1 << 16) + 2];
    let mut seen = rng.below(4);
    for _ in 0..n {
        if rng.chance(1, 2) {
            let len = (rng.below(cap as u64 + 2) as usize).min(buf.len());
            match sig.write(&buf[..len]) {
                Ok(()) => assert!(len <= cap),
                Err(SignalError::TooLarge { len: l, max }) => assert!(l == len && max == cap && len > cap),
                Err(e) => panic!("write: {e:?}"),
            }
        } else {
            let out = rng.below(buf.len() as u64 + 1) as usize;
            check_signal_read(sig.read(&mut buf[..out], &mut seen), out, cap);
        }
    }
    n
}

/// Signal and group ids to try: those in the table (read straight from the channel words), and others.
fn com_ids(chan: &[AtomicU64], rng: &mut Rng) -> Vec<u16> {
    let mut ids: Vec<u16> = vec![1, 2, 3, 10, 11, 12, 20, 21, 100, 200, 0xffff, rng.below(1 << 16) as u16];
    let counts = chan.first().map_or(0, |w| w.load(Ordering::Relaxed));
    let n = ((counts & 0xffff_ffff) + (counts >> 32)).min(64) as usize;
    for k in 0..n {
        if let Some(w) = chan.get(16 + 2 * k) {
            ids.push(w.load(Ordering::Relaxed) as u16);
        }
    }
    ids
}

fn exercise_com(com: ComView<'_>, chan: &[AtomicU64], rng: &mut Rng, n: usize) -> usize {
    let ids = com_ids(chan, rng);
    let mut buf = vec![0u8; 256];
    let (ns, nw) = ComReceiver::storage_needed(&com);
    let mut shadow = vec![0u8; ns.min(1 << 16)];
    let mut seen_words = vec![0u64; nw];
    let mut seen = 0u64;
    let mut rx = ComReceiver::new(com, &mut shadow, &mut seen_words).ok();
    for _ in 0..n {
        let id = ids[rng.below(ids.len() as u64) as usize];
        let out = rng.below(buf.len() as u64 + 1) as usize;
        match rng.below(9) {
            0 => {
                let _ = (com.signal_len(id), com.group_len(id), com.signal_count(), com.group_count());
            }
            1 => {
                let len = match com.signal_len(id) {
                    Ok((l, _)) if rng.chance(3, 4) => l.min(buf.len()),
                    _ => out,
                };
                let _ = com.send_signal(id, &buf[..len]);
            }
            2 => {
                let _ = com.send_signal_group(id);
            }
            3 => {
                if let Ok((len, _)) = com.receive_signal(id, &mut buf[..out], &mut seen) {
                    assert!(len <= out);
                }
            }
            4 => {
                let _ = com.receive_signal_group(id, &mut buf[..out], &mut seen);
            }
            5 => {
                if let Some(rx) = rx.as_mut() {
                    if let Ok((len, _)) = rx.receive_signal(id, &mut buf[..out]) {
                        assert!(len <= out);
                    }
                }
            }
            6 => {
                if let Some(rx) = rx.as_mut() {
                    let _ = rx.receive_signal_group(id);
                }
            }
            7 => {
                if rng.chance(1, 16) {
                    let r = com.receive_signal_blocking(id, &mut buf[..out], &mut seen, 0);
                    if let Ok(len) = r {
                        assert!(len <= out);
                    }
                }
            }
            _ => {
                let _ = ComReceiver::storage_needed(&com);
            }
        }
    }
    n
}

/// Valid header and table size, garbage entries and channels.
fn with_valid_header(bytes: &[u8], count: u64) -> Vec<AtomicU64> {
    let n = bytes.len() / 8;
    let words = zeroed(n.max(8));
    for (w, chunk) in words.iter().zip(bytes.chunks_exact(8)) {
        w.store(u64::from_le_bytes(chunk.try_into().unwrap()), Ordering::Relaxed);
    }
    words[0].store(rtcell_shm::region::MAGIC, Ordering::Relaxed);
    words[1].store(rtcell_shm::region::LAYOUT_VERSION as u64 | count << 32, Ordering::Relaxed);
    words[2].store(words.len() as u64 * 8, Ordering::Relaxed);
    words
}

proptest! {
    #![proptest_config(config(20_000))]

    /// Pure garbage, and garbage behind a valid header.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1200), count in 0u64..6, seed: u64) {
        let words = zeroed(bytes.len() / 8);
        for (w, chunk) in words.iter().zip(bytes.chunks_exact(8)) {
            w.store(u64::from_le_bytes(chunk.try_into().unwrap()), Ordering::Relaxed);
        }
        let mut rng = Rng(seed);
        exercise_region(&words, &mut rng);
        exercise_region(&with_valid_header(&bytes, count), &mut rng);
    }
}

proptest! {
    #![proptest_config(config(50_000))]

    /// A valid region with a few words or bytes changed, mostly in the header, the table and the
    /// channels' control words; then every channel is used.
    #[test]
    fn mutated_regions_never_panic(seed: u64, mutations in 1usize..8) {
        let layout = full_layout();
        let words = build(&layout);
        let mut rng = Rng(seed);
        // Some traffic first, so that the channels hold state worth corrupting.
        exercise_region(&words, &mut rng);
        let table_end = 8 + 8 * 5;
        for _ in 0..mutations {
            let i = match rng.below(3) {
                0 => rng.below(table_end as u64) as usize,
                _ => rng.below(words.len() as u64) as usize,
            };
            let cur = words[i].load(Ordering::Relaxed);
            let v = if rng.chance(1, 3) {
                cur ^ (0xff << (8 * rng.below(8))) & rng.next()
            } else {
                hostile(&mut rng, cur, 1024)
            };
            words[i].store(v, Ordering::Relaxed);
        }
        let ops = exercise_region(&words, &mut rng);
        prop_assert!(ops >= 1);
    }
}

// ---------------------------------------------------------------------------------------------------------
// (b) A hostile peer in a ring, between the honest side's calls.

const RING_SHAPES: [(u32, u32); 6] = [(128, 16), (128, 32), (256, 40), (512, 100), (1024, 64), (4096, 1000)];

proptest! {
    #![proptest_config(config(20_000))]

    #[test]
    fn hostile_ring_peer(shape in 0..RING_SHAPES.len(), overwrite: bool, seed: u64, rate in 1u64..60) {
        let (capacity, max_frame) = RING_SHAPES[shape];
        let overflow = if overwrite { Overflow::OverwriteOldest } else { Overflow::Reject };
        let words = ring_region(cfg(capacity, max_frame, overflow));
        let chan = channel(&words, "r");
        let ring = RegionView::attach(&words).unwrap().ring("r").unwrap();
        let max = max_frame as usize;
        let mut rng = Rng(seed);
        let (mut p, mut c) = (ring.producer(), ring.consumer());
        let mut buf = vec![0u8; max + 8];
        let mut corrupted = false;
        // Before any corruption, the ring must behave exactly.
        let (mut sent, mut last) = (0u64, 0u64);
        let mut lens = Vec::new();
        for _ in 0..OPS {
            let roll = rng.below(1000);
            if roll < rate * 3 {
                // The peer writes one word: a control word, or a frame header word, or any data word.
                let i = match rng.below(4) {
                    0 => rng.below(24) as usize,
                    1 | 2 => 24 + (rng.below(capacity as u64 / 16) * 2 + rng.below(2)) as usize,
                    _ => rng.below(chan.len() as u64) as usize,
                };
                let cur = chan[i].load(Ordering::Relaxed);
                // Sequence-like values near the producer's next one make forged stamps likely to match.
                let v = if rng.chance(1, 4) {
                    chan[1].load(Ordering::Relaxed).wrapping_add(rng.below(6)).wrapping_sub(3)
                } else {
                    hostile(&mut rng, cur, capacity as u64)
                };
                chan[i].store(v, Ordering::Relaxed);
                corrupted = true;
            } else if roll < 520 {
                let len = match rng.below(8) {
                    0 => max,
                    1 => 0,
                    2 => max + 1 + rng.below(7) as usize,
                    _ => rng.below(max as u64 + 1) as usize,
                };
                fill(sent + 1, &mut buf[..len]);
                let res = p.try_send(&buf[..len]);
                if len > max {
                    prop_assert_eq!(res, Err(SendError::TooLarge { len, max }));
                } else if corrupted {
                    prop_assert!(matches!(res, Ok(()) | Err(SendError::Full) | Err(SendError::Corrupt(_))), "{:?}", res);
                } else {
                    match res {
                        Ok(()) => {
                            sent += 1;
                            lens.push(len);
                        }
                        Err(SendError::Full) => prop_assert!(!overwrite, "OverwriteOldest never refuses"),
                        Err(e) => prop_assert!(false, "honest ring: {:?}", e),
                    }
                }
            } else if roll < 980 {
                let out = if rng.chance(1, 5) { rng.below(max as u64 + 1) as usize } else { max + 8 };
                let res = c.try_recv(&mut buf[..out]);
                check_recv(res, out, max);
                if !corrupted {
                    match res {
                        Ok(len) => {
                            let k = ring.counters();
                            let seq = k.received + k.lost;
                            prop_assert!(seq > last && seq <= sent);
                            prop_assert_eq!(lens[seq as usize - 1], len);
                            prop_assert!(is_payload(seq, &buf[..len]));
                            last = seq;
                        }
                        Err(RecvError::Empty) => {
                            let k = ring.counters();
                            prop_assert_eq!(k.received + k.lost, sent);
                        }
                        Err(RecvError::TooSmall { len }) => prop_assert!(len > out),
                        Err(RecvError::Corrupt(e)) => prop_assert!(false, "honest ring: {}", e),
                    }
                }
            } else if roll < 990 {
                let _ = (ring.counters(), ring.queued(), c.has_message());
            } else if rng.chance(1, 2) {
                p = ring.producer();
            } else {
                c = ring.consumer();
            }
        }
        // Once the peer stops and the creator puts a valid state back, fresh ends work exactly again:
        // nothing the peer wrote survives re-initialisation (e.g. in the restarted sides' state).
        ring.init();
        let (mut p, mut c) = (ring.producer(), ring.consumer());
        for seq in 1..=3u64 {
            let len = max.min(8 + seq as usize);
            fill(seq, &mut buf[..len]);
            prop_assert_eq!(p.try_send(&buf[..len]), Ok(()));
            let out = max + 8;
            prop_assert_eq!(c.try_recv(&mut buf[..out]), Ok(len));
            prop_assert!(is_payload(seq, &buf[..len]), "message {} after re-initialisation", seq);
        }
        prop_assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
    }
}

// ---------------------------------------------------------------------------------------------------------
// (c) Hostile peers in signals and COM channels.

proptest! {
    #![proptest_config(config(10_000))]

    #[test]
    fn hostile_signal_peer(capacity in 0usize..100, seed: u64, rate in 1u64..60) {
        let mut layout = RegionLayout::new();
        layout.signal("s", capacity as u32).unwrap();
        let words = build(&layout);
        let chan = channel(&words, "s");
        let sig = RegionView::attach(&words).unwrap().signal("s").unwrap();
        let mut rng = Rng(seed);
        let mut buf = vec![0u8; capacity + 9];
        let mut seen = 0u64;
        // The value last written, if nothing was corrupted since.
        let mut clean: Option<Vec<u8>> = None;
        for _ in 0..OPS {
            let roll = rng.below(1000);
            if roll < rate * 3 {
                let i = match rng.below(3) {
                    0 => 0,
                    1 => 1,
                    _ => rng.below(chan.len() as u64) as usize,
                };
                let cur = chan[i].load(Ordering::Relaxed);
                chan[i].store(hostile(&mut rng, cur, capacity as u64 + 8), Ordering::Relaxed);
                clean = None;
            } else if roll < 500 {
                let len = rng.below(capacity as u64 + 2) as usize;
                let counter = rng.next();
                fill(counter, &mut buf[..len]);
                match sig.write(&buf[..len]) {
                    Ok(()) => {
                        prop_assert!(len <= capacity);
                        clean = Some(buf[..len].to_vec());
                    }
                    Err(SignalError::TooLarge { .. }) => prop_assert!(len > capacity),
                    Err(e) => prop_assert!(false, "write: {:?}", e),
                }
            } else {
                let out = if rng.chance(1, 4) { rng.below(capacity as u64 + 1) as usize } else { capacity + 9 };
                let res = sig.read(&mut buf[..out], &mut seen);
                check_signal_read(res, out, capacity);
                if let Some(v) = &clean {
                    // An honest write repairs whatever was there: its value reads back exactly (also where
                    // the peer had pushed the sequence to where it would wrap to "never written").
                    match res {
                        Ok((len, fresh)) => {
                            prop_assert_ne!(fresh, Freshness::NeverWritten);
                            prop_assert_eq!(&buf[..len], &v[..]);
                        }
                        Err(SignalError::TooSmall { len }) => prop_assert!(len == v.len() && len > out),
                        Err(e) => prop_assert!(false, "after an honest write: {:?}", e),
                    }
                }
            }
        }
        // The writer repairs whatever the peer left: after one honest write the value reads back exactly
        // (also where the peer pushed the sequence word to where it would wrap to "never written").
        let value: Vec<u8> = (0..capacity).map(|i| i as u8 ^ 0x5a).collect();
        prop_assert_eq!(sig.write(&value), Ok(()));
        let out = capacity + 9;
        let (len, fresh) = sig.read(&mut buf[..out], &mut seen).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        // (New or Old: a peer that rewinds the sequence word can make the new value carry the number this
        // reader saw last.)
        prop_assert_ne!(fresh, Freshness::NeverWritten);
        prop_assert_eq!(&buf[..len], &value[..]);
    }

    #[test]
    fn hostile_com_peer(seed: u64, rate in 1u64..60) {
        let mut layout = RegionLayout::new();
        layout.com("c", com_config()).unwrap();
        let words = build(&layout);
        let chan = channel(&words, "c");
        let region = RegionView::attach(&words).unwrap();
        let mut rng = Rng(seed);
        let mut view = region.com("c").unwrap();
        let (ns, nw) = ComReceiver::storage_needed(&view);
        let mut shadow = vec![0u8; ns];
        let mut seen_words = vec![0u64; nw];
        let mut rx = ComReceiver::new(view, &mut shadow, &mut seen_words).unwrap();
        let ids = com_ids(chan, &mut rng);
        let table_end = 16 + 2 * 10;
        let mut buf = [0u8; 64];
        let mut seen = 0u64;
        for _ in 0..OPS {
            let roll = rng.below(1000);
            let id = ids[rng.below(ids.len() as u64) as usize];
            let out = if rng.chance(1, 4) { rng.below(65) as usize } else { 64 };
            if roll < rate * 3 {
                // The counts, the signal and group table, or any word of the slots.
                let i = match rng.below(4) {
                    0 => 0,
                    1 | 2 => 16 + rng.below(table_end as u64 - 16) as usize,
                    _ => rng.below(chan.len() as u64) as usize,
                };
                let cur = chan[i].load(Ordering::Relaxed);
                let v = if (16..table_end).contains(&i) && rng.chance(1, 2) {
                    // Plausible entries: an offset or capacity in the low half, a length in the high one.
                    let lo = rng.below(chan.len() as u64 + 8);
                    let hi = rng.below(chan.len() as u64 * 8 + 64);
                    if rng.chance(1, 2) { (cur & 0xffff_ffff) | hi << 32 } else { (cur & !0xffff_ffff) | lo }
                } else {
                    hostile(&mut rng, cur, chan.len() as u64)
                };
                chan[i].store(v, Ordering::Relaxed);
            } else {
                match rng.below(10) {
                    0 | 1 => {
                        let len = match view.signal_len(id) {
                            Ok((l, _)) if rng.chance(3, 4) => l.min(64),
                            _ => out,
                        };
                        let _ = view.send_signal(id, &buf[..len]);
                    }
                    2 => {
                        let _ = view.send_signal_group(id);
                    }
                    3 => {
                        if let Ok((len, _)) = view.receive_signal(id, &mut buf[..out], &mut seen) {
                            prop_assert!(len <= out);
                        }
                    }
                    4 => {
                        let _ = view.receive_signal_group(id, &mut buf[..out], &mut seen);
                    }
                    5 | 6 => {
                        if let Ok((len, _)) = rx.receive_signal(id, &mut buf[..out]) {
                            prop_assert!(len <= out);
                        }
                    }
                    7 => {
                        let _ = rx.receive_signal_group(id);
                    }
                    8 => {
                        let _ = (view.signal_len(id), view.group_len(id), ComReceiver::storage_needed(&view));
                    }
                    _ => {
                        // Attach again: the counts are read afresh.
                        match region.com("c") {
                            Ok(v) => view = v,
                            Err(e) => prop_assert!(matches!(e, rtcell_shm::AttachError::Corrupt { .. }), "{:?}", e),
                        }
                    }
                }
            }
        }
        // Once the table is valid again (the creator re-initialised the region), the receiver the honest
        // side kept through the attack works again: standalone signals and a group read back exactly.
        layout.init(&words, 4242).map_err(|e| TestCaseError::fail(e.0))?;
        let view = region.com("c").map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let values: [(u16, &[u8]); 4] = [(1, &[1, 2, 3, 4]), (10, &[9; 8]), (11, &[8; 3]), (12, &[7; 13])];
        for (id, v) in values {
            prop_assert_eq!(view.send_signal(id, v), Ok(()));
        }
        prop_assert_eq!(view.send_signal_group(100), Ok(()));
        prop_assert!(rx.receive_signal_group(100).is_ok());
        let mut out = [0u8; 64];
        for (id, v) in values {
            prop_assert_eq!(rx.receive_signal(id, &mut out).map(|r| r.0), Ok(v.len()), "signal {}", id);
            prop_assert_eq!(&out[..v.len()], v);
        }
    }
}
