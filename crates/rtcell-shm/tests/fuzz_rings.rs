//! Fuzz: rings and signals against a hostile peer that scribbles them while the honest side runs.
//!
//! Each case is one honest call (send, receive, counters, a side restarting from the shared state, a
//! signal write or read). A hostile thread races those calls, writing boundary values into the control
//! words, the frame headers at the live head and tail, the sequence and length words and the data; the
//! honest side also scribbles between its calls (replayable from the seed). Checked on every call: it
//! returns (a watchdog aborts on a hang), a length is within the caller's buffer and the channel's own
//! maximum, and only the typed errors come back; while no hostile store landed, the values are exact.
//!
//! `RTCELL_FUZZ_CASES`, `RTCELL_FUZZ_SEED`: see `rtcell_testkit::fuzz`; `scripts/fuzz` runs these.

#![cfg(not(loom))]

mod common;
mod fuzz_peer;

use common::{fill, is_payload, zeroed};
use fuzz_peer::{Peer, boundary, let_in, with_peer};
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{Freshness, Overflow, RecvError, RingConfig, RingView, SendError, SignalError, SignalView};
use rtcell_testkit::fuzz::{Fuzz, Rng, SmallRng};
use std::sync::atomic::Ordering;
use std::time::Duration;

const STALL: Duration = Duration::from_secs(60);

/// (capacity, max_frame) of the rings fuzzed, each with both overflow policies and notify on/off.
const SHAPES: [(u32, u32); 6] = [(64, 0), (128, 32), (256, 64), (512, 100), (1024, 250), (4096, 1000)];

fn ring_cfgs() -> Vec<RingConfig> {
    let mut v = Vec::new();
    for (k, &(capacity, max_frame)) in SHAPES.iter().enumerate() {
        for overflow in [Overflow::Reject, Overflow::OverwriteOldest] {
            v.push(RingConfig { capacity, max_frame, overflow, notify: k % 2 == 0 });
        }
    }
    v
}

/// One hostile store into a ring channel: a control word, the header at the live head or tail, or any word.
fn scribble_ring(rng: &mut SmallRng, words: &[AtomicU64], cfg: &RingConfig) {
    let cap = cfg.capacity as u64;
    let data = |pos: u64| 24 + ((pos & (cap - 1)) / 8) as usize;
    let (tail, head, seq) =
        (words[0].load(Ordering::Relaxed), words[8].load(Ordering::Relaxed), words[1].load(Ordering::Relaxed));
    let i = match rng.random_range(0..8u32) {
        0 | 1 => rng.random_range(0..24usize),
        2 | 3 => data(head) + rng.random_range(0..2usize),
        4 => data(tail) + rng.random_range(0..2usize),
        5 => 24,
        _ => rng.random_range(0..words.len()),
    };
    let i = i.min(words.len() - 1);
    let mf = cfg.max_frame as u64;
    let hints =
        [tail, head, seq, seq.wrapping_sub(1), seq.wrapping_add(1), cap, cap - 16, mf, mf + 1, 1 << 32, (1 << 32) | mf];
    let v = boundary(rng, words[i].load(Ordering::Relaxed), &hints);
    words[i].store(v, Ordering::Relaxed);
}

/// What must hold for any receive, whatever the peer wrote.
fn check_recv(res: Result<usize, RecvError>, out: usize, max: usize) {
    match res {
        Ok(len) => assert!(len <= out && len <= max, "received {len} bytes into {out} (max_frame {max})"),
        Err(RecvError::TooSmall { len }) => assert!(len > out && len <= max, "TooSmall {len} for {out} (max {max})"),
        Err(RecvError::Empty | RecvError::Corrupt(_)) => {}
    }
}

/// The honest model of a clean ring: messages sent (their lengths), and the last one received.
#[derive(Default)]
struct Model {
    lens: Vec<usize>,
    last: u64,
}

#[test]
fn fuzz_ring() {
    let fuzz = Fuzz::start("fuzz_ring", 2_000_000).with_counters(&[
        "calls with a hostile store before them in the episode",
        "receives that returned a message",
        "calls answered Corrupt",
        "clean calls checked exactly",
        "stores by the hostile thread, racing the calls",
    ]);
    let _wd = fuzz.watchdog(STALL);
    let cfgs = ring_cfgs();
    let bufs: Vec<Vec<AtomicU64>> = cfgs.iter().map(|c| zeroed(c.channel_bytes() / 8)).collect();
    let peer = Peer::default();
    let scribble = |rng: &mut SmallRng, t: usize| scribble_ring(rng, &bufs[t], &cfgs[t]);
    with_peer(&peer, fuzz.rng(1), scribble, || {
        let mut rng = fuzz.rng(0);
        while fuzz.done() < fuzz.cases() {
            let t = rng.random_range(0..cfgs.len());
            let ops = rng.random_range(1..=2048u64).min(fuzz.cases() - fuzz.done());
            ring_episode(&fuzz, &peer, &mut rng, t, &bufs[t], cfgs[t], ops);
        }
    });
    fuzz.hit(4, peer.effective.load(Ordering::SeqCst));
    fuzz.finish();
}

fn ring_episode(
    fuzz: &Fuzz,
    peer: &Peer,
    rng: &mut SmallRng,
    t: usize,
    words: &[AtomicU64],
    cfg: RingConfig,
    ops: u64,
) {
    let base = peer.disarm();
    peer.target.store(t, Ordering::SeqCst);
    let ring = RingView::new(words, cfg).expect("valid shape");
    ring.init();
    let (mut p, mut c) = (ring.producer(), ring.consumer());
    let max = cfg.max_frame as usize;
    let mut buf = vec![0u8; max + 8];
    let arm_at = if rng.random_ratio(1, 5) { u64::MAX } else { rng.random_range(0..ops.max(1)) };
    let mut scribbled = false;
    let mut model = Model::default();
    for op in 0..ops {
        if op == arm_at {
            peer.arm((1 << rng.random_range(0..12u32)) - 1);
        }
        if op >= arm_at && rng.random_ratio(1, 50) {
            scribbled = true;
            scribble_ring(rng, words, &cfg);
        }
        let clean_before = !scribbled && peer.clean_since(base);
        match rng.random_range(0..20u32) {
            0..=8 => {
                let len = match rng.random_range(0..8u32) {
                    0 => max,
                    1 => 0,
                    2 => max + 1 + rng.random_range(0..7usize),
                    _ => rng.random_range(0..=max),
                };
                fill(model.lens.len() as u64 + 1, &mut buf[..len]);
                let res = p.try_send(&buf[..len]);
                match res {
                    Err(SendError::TooLarge { len: l, max: m }) => assert!(l == len && m == max && len > max),
                    _ if len > max => panic!("{len} bytes into max_frame {max}: {res:?}"),
                    Err(SendError::Corrupt(_)) => fuzz.hit(2, 1),
                    Ok(()) | Err(SendError::Full) => {}
                }
                if clean_before && peer.clean_since(base) && len <= max {
                    fuzz.hit(3, 1);
                    match res {
                        Ok(()) => model.lens.push(len),
                        Err(SendError::Full) => assert_eq!(cfg.overflow, Overflow::Reject, "OverwriteOldest refused"),
                        Err(e) => panic!("clean ring refused a send: {e:?}"),
                    }
                }
            }
            9..=17 => {
                let out = if rng.random_ratio(1, 4) { rng.random_range(0..=max) } else { max + 8 };
                let res = c.try_recv(&mut buf[..out]);
                check_recv(res, out, max);
                match res {
                    Ok(_) => fuzz.hit(1, 1),
                    Err(RecvError::Corrupt(_)) => fuzz.hit(2, 1),
                    _ => {}
                }
                if clean_before && peer.clean_since(base) {
                    fuzz.hit(3, 1);
                    check_clean_recv(&ring, &mut model, res, &buf, out);
                }
            }
            18 => {
                let k = ring.counters();
                let _ = (k, ring.queued(), c.has_message());
                if cfg.notify && rng.random_ratio(1, 16) {
                    c.wait_for_message(0);
                }
            }
            _ => {
                // A side that restarts takes its state from the shared words, wherever the peer left them.
                if rng.random_bool(0.5) {
                    p = ring.producer();
                } else {
                    c = ring.consumer();
                }
            }
        }
        if !(clean_before && peer.clean_since(base)) {
            scribbled = true;
            fuzz.hit(0, 1);
        }
        fuzz.case();
        let_in(rng, 256);
    }
}

/// A clean ring delivers each message it accepted, in order, exactly (OverwriteOldest may skip some, and
/// counts them as lost).
fn check_clean_recv(ring: &RingView<'_>, m: &mut Model, res: Result<usize, RecvError>, buf: &[u8], out: usize) {
    let sent = m.lens.len() as u64;
    match res {
        Ok(len) => {
            let k = ring.counters();
            let seq = k.received + k.lost;
            assert!(seq > m.last && seq <= sent, "message #{seq} after #{} of {sent}", m.last);
            assert_eq!(m.lens[seq as usize - 1], len, "length of message #{seq}");
            assert!(is_payload(seq, &buf[..len]), "payload of message #{seq}");
            m.last = seq;
        }
        Err(RecvError::Empty) => {
            let k = ring.counters();
            assert_eq!(k.received + k.lost, sent, "Empty with messages queued");
        }
        Err(RecvError::TooSmall { len }) => assert!(len > out),
        Err(RecvError::Corrupt(e)) => panic!("clean ring: {e}"),
    }
}

/// Signal capacities fuzzed.
const CAPACITIES: [usize; 8] = [0, 1, 7, 8, 9, 20, 64, 100];

fn scribble_signal(rng: &mut SmallRng, words: &[AtomicU64], capacity: usize) {
    let i = match rng.random_range(0..5u32) {
        0 | 1 => 0,
        2 | 3 => 1,
        _ => rng.random_range(0..words.len()),
    };
    let cap = capacity as u64;
    let seq = words[0].load(Ordering::Relaxed);
    let hints = [cap, cap + 1, cap.saturating_sub(1), seq | 1, seq.wrapping_add(2), 1 << 32];
    words[i].store(boundary(rng, words[i].load(Ordering::Relaxed), &hints), Ordering::Relaxed);
}

fn check_read(res: Result<(usize, Freshness), SignalError>, out: usize, capacity: usize) {
    match res {
        Ok((len, fresh)) => {
            assert!(len <= out && len <= capacity, "read {len} bytes into {out} (capacity {capacity})");
            if fresh == Freshness::NeverWritten {
                assert_eq!(len, 0, "never written, yet {len} bytes");
            }
        }
        Err(SignalError::TooSmall { len }) => assert!(len > out && len <= capacity, "TooSmall {len} for {out}"),
        Err(SignalError::Busy | SignalError::Corrupt(_)) => {}
        Err(SignalError::TooLarge { .. }) => panic!("TooLarge from a read"),
    }
}

#[test]
fn fuzz_signal() {
    let fuzz = Fuzz::start("fuzz_signal", 2_000_000).with_counters(&[
        "calls with a hostile store before them in the episode",
        "reads that returned a value",
        "reads answered Busy or Corrupt",
        "clean reads checked exactly",
        "stores by the hostile thread, racing the calls",
    ]);
    let _wd = fuzz.watchdog(STALL);
    let bufs: Vec<Vec<AtomicU64>> = CAPACITIES.iter().map(|&c| zeroed(SignalView::words_needed(c))).collect();
    let peer = Peer::default();
    let scribble = |rng: &mut SmallRng, t: usize| scribble_signal(rng, &bufs[t], CAPACITIES[t]);
    with_peer(&peer, fuzz.rng(1), scribble, || {
        let mut rng = fuzz.rng(0);
        while fuzz.done() < fuzz.cases() {
            let t = rng.random_range(0..CAPACITIES.len());
            let ops = rng.random_range(1..=2048u64).min(fuzz.cases() - fuzz.done());
            signal_episode(&fuzz, &peer, &mut rng, t, &bufs[t], ops);
        }
    });
    fuzz.hit(4, peer.effective.load(Ordering::SeqCst));
    fuzz.finish();
}

fn signal_episode(fuzz: &Fuzz, peer: &Peer, rng: &mut SmallRng, t: usize, words: &[AtomicU64], ops: u64) {
    let base = peer.disarm();
    peer.target.store(t, Ordering::SeqCst);
    let capacity = CAPACITIES[t];
    for w in words {
        w.store(0, Ordering::Relaxed);
    }
    let sig = SignalView::new(words, capacity).expect("valid slot");
    let mut buf = vec![0u8; capacity + 9];
    let mut seen = 0u64;
    let arm_at = if rng.random_ratio(1, 5) { u64::MAX } else { rng.random_range(0..ops.max(1)) };
    let mut scribbled = false;
    let mut last: Option<Vec<u8>> = None;
    for op in 0..ops {
        if op == arm_at {
            peer.arm((1 << rng.random_range(0..12u32)) - 1);
        }
        if op >= arm_at && rng.random_ratio(1, 50) {
            scribbled = true;
            scribble_signal(rng, words, capacity);
        }
        let clean_before = !scribbled && peer.clean_since(base);
        if rng.random_bool(0.4) {
            let len = rng.random_range(0..=capacity + 1);
            fill(rng.random(), &mut buf[..len]);
            match sig.write(&buf[..len]) {
                Ok(()) => {
                    assert!(len <= capacity);
                    last = Some(buf[..len].to_vec());
                }
                Err(SignalError::TooLarge { len: l, max }) => assert!(l == len && max == capacity && len > capacity),
                Err(e) => panic!("write: {e:?}"),
            }
        } else {
            let out = if rng.random_ratio(1, 4) { rng.random_range(0..=capacity) } else { capacity + 9 };
            let res = sig.read(&mut buf[..out], &mut seen);
            check_read(res, out, capacity);
            match res {
                Ok(_) => fuzz.hit(1, 1),
                Err(_) => fuzz.hit(2, 1),
            }
            if clean_before && peer.clean_since(base) {
                fuzz.hit(3, 1);
                match (&last, res) {
                    (None, Ok((0, Freshness::NeverWritten))) => {}
                    (Some(v), Ok((len, fresh))) => {
                        assert_ne!(fresh, Freshness::NeverWritten);
                        assert_eq!(&buf[..len], &v[..], "clean signal read back another value");
                    }
                    (Some(v), Err(SignalError::TooSmall { len })) => assert!(len == v.len() && len > out),
                    (l, r) => panic!("clean signal: {r:?} after writing {l:?}"),
                }
            }
        }
        if !(clean_before && peer.clean_since(base)) {
            scribbled = true;
            fuzz.hit(0, 1);
        }
        fuzz.case();
        let_in(rng, 256);
    }
}

/// Found by `fuzz_signal`: a read whose first attempt copied a value, raced the writer, and whose retry
/// then saw the sequence word at 0 returned `NeverWritten` with the first attempt's length (and bytes).
/// A peer that writes 0 into the sequence word must get "never written, 0 bytes", as documented.
#[test]
fn a_read_racing_a_reset_to_never_written_returns_no_bytes() {
    let words = zeroed(SignalView::words_needed(16));
    let sig = SignalView::new(&words, 16).expect("valid slot");
    sig.write(&[7; 16]).expect("fits");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // The peer flips the sequence word between a stable value and "never written".
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                words[0].store(if k % 2 == 0 { 0 } else { 2 * k }, Ordering::Relaxed);
            }
        });
        let start = std::time::Instant::now();
        let mut buf = [0u8; 16];
        let mut bad = None;
        for _ in 0..20_000_000u64 {
            let mut seen = 0;
            if let Ok((len, Freshness::NeverWritten)) = sig.read(&mut buf, &mut seen) {
                if len != 0 {
                    bad = Some(len);
                    break;
                }
            }
            if start.elapsed() > Duration::from_secs(3) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(bad, None, "NeverWritten with bytes");
    });
}
