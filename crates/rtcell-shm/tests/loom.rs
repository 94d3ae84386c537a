//! Model checking of the ring, signal and COM algorithms with loom: every interleaving of two threads
//! (up to a preemption bound) together with the weak-memory outcomes loom simulates, on the very same
//! code, since under `--cfg loom` the crate's atomics are loom's.
//!
//! Run with (a target directory of its own keeps the loom build apart from the normal one):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p rtcell-shm --release --test loom
//! ```
//!
//! `LOOM_MAX_PREEMPTIONS=n` overrides the preemption bound each model sets below.

#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{
    ComConfig, ComView, Freshness, GroupDef, Overflow, RecvError, RegionLayout, RegionView, RingConfig, RingView,
    SendError, SignalDef, SignalError, SignalView,
};

fn builder(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = Some(preemptions);
    }
    b
}

fn shared(n: usize) -> Arc<Vec<AtomicU64>> {
    Arc::new((0..n).map(|_| AtomicU64::new(0)).collect())
}

/// Message `k` of `len` bytes: every byte is `k`, so a copy that mixes two messages (or a message with
/// older bytes of the same place) shows.
fn msg(k: u8, len: usize) -> Vec<u8> {
    vec![k; len]
}

/// The smallest ring that validates for 16-byte frames: 2 * (16 + 16) + 16 rounds up to 128 bytes.
fn small_ring(overflow: Overflow) -> RingConfig {
    RingConfig { capacity: 128, max_frame: 16, overflow, notify: false }
}

/// A ring in fresh shared words whose positions have been brought to byte 112 (four frames sent and
/// received), so that the next 32-byte frame needs a WRAP marker.
fn ring_at_112(cfg: RingConfig) -> Arc<Vec<AtomicU64>> {
    let words = shared(cfg.channel_bytes() / 8);
    let ring = RingView::new(&words, cfg).unwrap();
    ring.init();
    let (mut p, mut c) = (ring.producer(), ring.consumer());
    let mut buf = [0u8; 16];
    for len in [16, 16, 16, 0] {
        p.try_send(&msg(100, len)).unwrap();
        assert_eq!(c.try_recv(&mut buf), Ok(len));
    }
    words
}

/// Runs `producer` and `consumer` on two threads and returns what the consumer returns. Loom's
/// partial-order reduction only notices a load racing with a later store when no access of the storing
/// thread to that word comes in between; which thread runs first (the main one) changes what it notices,
/// so the models run with either side spawned.
fn pair<R: Send + 'static>(
    producer_spawned: bool,
    producer: impl FnOnce() + Send + 'static,
    consumer: impl FnOnce() -> R + Send + 'static,
) -> R {
    if producer_spawned {
        let p = thread::spawn(producer);
        let r = consumer();
        p.join().unwrap();
        r
    } else {
        let c = thread::spawn(consumer);
        producer();
        c.join().unwrap()
    }
}

/// Reject: four messages of 16, 3, 0 and 16 bytes; the first goes behind a WRAP marker and the last finds
/// the ring full until the consumer has taken the first. Every message arrives once, in order, whole.
fn reject_model(producer_spawned: bool) {
    const LENS: [usize; 4] = [16, 3, 0, 16];
    let cfg = small_ring(Overflow::Reject);
    // Preemption bound 6: every interleaving with up to six forced switches, plus all those the spin
    // loops yield at; a few seconds.
    builder(6).check(move || {
        let words = ring_at_112(cfg);
        let (wp, wc) = (words.clone(), words.clone());
        let producer = move || {
            let mut p = RingView::new(&wp, cfg).unwrap().producer();
            for (k, &len) in LENS.iter().enumerate() {
                loop {
                    match p.try_send(&msg(k as u8 + 1, len)) {
                        Ok(()) => break,
                        Err(SendError::Full) => thread::yield_now(),
                        Err(e) => panic!("send {k}: {e:?}"),
                    }
                }
            }
        };
        let consumer = move || {
            let mut c = RingView::new(&wc, cfg).unwrap().consumer();
            let mut buf = [0u8; 16];
            let mut got = 0;
            while got < LENS.len() {
                match c.try_recv(&mut buf) {
                    Ok(len) => {
                        assert_eq!(len, LENS[got], "message {}", got + 1);
                        assert!(buf[..len].iter().all(|&b| b == got as u8 + 1), "message {} torn: {buf:?}", got + 1);
                        got += 1;
                    }
                    Err(RecvError::Empty) => thread::yield_now(),
                    Err(e) => panic!("receive {}: {e:?}", got + 1),
                }
            }
        };
        pair(producer_spawned, producer, consumer);
        let ring = RingView::new(&words, cfg).unwrap();
        assert_eq!(ring.consumer().try_recv(&mut [0; 16]), Err(RecvError::Empty));
        let k = ring.counters();
        assert_eq!((k.sent, k.received, k.lost), (8, 8, 0));
    });
}

#[test]
fn reject_ring_in_order_and_whole() {
    reject_model(true);
}

#[test]
fn reject_ring_in_order_and_whole_consumer_spawned() {
    reject_model(false);
}

/// OverwriteOldest messages for the models below: 16, 16, 16, 0 and 16 bytes into a ring that holds three
/// 32-byte frames, starting at byte 112. The first and the last go behind WRAP markers; the fourth one's
/// sentinel lands on the first one's marker, so the producer must drop the first message with its marker;
/// the fifth is written over the first one's bytes.
const OVERWRITE_LENS: [usize; 5] = [16, 16, 16, 0, 16];

/// Checks one receive from an OverwriteOldest model; returns whether a message came.
fn check_overwrite(res: Result<usize, RecvError>, buf: &[u8; 16], last: &mut u8) -> bool {
    match res {
        Ok(len) => {
            // The only empty message is the fourth.
            let k = if len == 0 { 4 } else { buf[0] };
            assert!(k >= 1 && k as usize <= OVERWRITE_LENS.len(), "message {k}");
            assert_eq!(len, OVERWRITE_LENS[k as usize - 1]);
            assert!(buf[..len].iter().all(|&b| b == k), "torn message: {buf:?}");
            assert!(k > *last, "message {k} after {last}");
            *last = k;
            true
        }
        Err(RecvError::Empty) => false,
        Err(e) => panic!("{e:?}"),
    }
}

/// The first `sent_before` messages are sent before the threads start, the rest by the producer thread
/// while the consumer tries to receive `attempts` times. Whatever the consumer receives is whole and in order;
/// after draining, the last message is there and every message was either received or counted as lost.
fn overwrite_model(messages: usize, sent_before: usize, attempts: usize, producer_spawned: bool, preemptions: usize) {
    let cfg = small_ring(Overflow::OverwriteOldest);
    builder(preemptions).check(move || {
        let words = ring_at_112(cfg);
        {
            let mut p = RingView::new(&words, cfg).unwrap().producer();
            for (k, &len) in OVERWRITE_LENS.iter().enumerate().take(sent_before) {
                p.try_send(&msg(k as u8 + 1, len)).unwrap();
            }
        }
        let (wp, wc) = (words.clone(), words.clone());
        let producer = move || {
            let mut p = RingView::new(&wp, cfg).unwrap().producer();
            for (k, &len) in OVERWRITE_LENS.iter().enumerate().take(messages).skip(sent_before) {
                p.try_send(&msg(k as u8 + 1, len)).unwrap();
            }
        };
        let consumer = move || {
            let mut c = RingView::new(&wc, cfg).unwrap().consumer();
            let mut buf = [0u8; 16];
            let mut last = 0u8;
            for _ in 0..attempts {
                let res = c.try_recv(&mut buf);
                if !check_overwrite(res, &buf, &mut last) {
                    thread::yield_now();
                }
            }
            last
        };
        let mut last = pair(producer_spawned, producer, consumer);
        // Drain (the consumer's position is in shared memory: a new end continues from it).
        let ring = RingView::new(&words, cfg).unwrap();
        let mut c = ring.consumer();
        let mut buf = [0u8; 16];
        while check_overwrite(c.try_recv(&mut buf), &buf, &mut last) {}
        assert_eq!(last as usize, messages, "the newest message is never lost");
        let k = ring.counters();
        assert_eq!(k.sent, 4 + messages as u64);
        assert_eq!(k.received + k.lost, k.sent, "{k:?}");
    });
}

// The first four messages, all sent concurrently with the receives: dropping a message with its marker.
// Preemption bound 2 (3 passes too, in minutes).

#[test]
fn overwrite_ring_drops_marker_with_frame() {
    overwrite_model(4, 0, 3, true, 2);
}

#[test]
fn overwrite_ring_drops_marker_with_frame_consumer_spawned() {
    overwrite_model(4, 0, 3, false, 2);
}

// All five, the first three sent before the threads start: the consumer receives once, reading the first
// message (through its marker) while the producer drops it and writes the fifth over its bytes. This is
// the model that fails at once if the consumer's acquire fence before its `oldest_seq` check is removed.
// Preemption bound 1 and only the producer spawned: about half a million executions already (the other
// arrangement, or bound 2, takes several minutes).

#[test]
fn overwrite_ring_never_torn() {
    overwrite_model(5, 3, 1, true, 1);
}

/// Signal seqlock: the writer publishes two values (16 bytes of 1s, then 24 bytes of 2s) while a reader
/// reads twice. A read is never torn, and never goes back to an older value.
///
/// The reader is the spawned thread and the writer the main one, which runs first: loom's partial-order
/// reduction then sees each of the reader's loads race with the writer's stores and explores the reader
/// at every point of the writes. (The other way round, the writer's own load of the sequence word hides
/// the reader's earlier loads from it, and it explores almost nothing.)
#[test]
fn signal_never_torn() {
    // Preemption bound 4: short threads, and spinning yields, so this stays cheap.
    builder(4).check(|| {
        let words = shared(SignalView::words_needed(24));
        let w = words.clone();
        let reader = thread::spawn(move || {
            let s = SignalView::new(&w, 24).unwrap();
            let mut seen = 0;
            let mut last = 0u8;
            for _ in 0..2 {
                let mut out = [0xffu8; 24];
                match s.read(&mut out, &mut seen) {
                    Ok((0, Freshness::NeverWritten)) => assert_eq!(last, 0),
                    Ok((len, _)) => {
                        let v = out[0];
                        assert_eq!(len, if v == 1 { 16 } else { 24 }, "length of value {v}");
                        assert!(out[..len].iter().all(|&b| b == v) && (v == 1 || v == 2), "torn: {out:?}");
                        assert!(v >= last, "went back from {last} to {v}");
                        last = v;
                    }
                    Err(SignalError::Busy) => {}
                    Err(e) => panic!("{e:?}"),
                }
            }
        });
        let s = SignalView::new(&words, 24).unwrap();
        s.write(&[1; 16]).unwrap();
        s.write(&[2; 24]).unwrap();
        reader.join().unwrap();
        let (mut seen, mut out) = (0, [0u8; 24]);
        assert_eq!(s.read(&mut out, &mut seen).map(|r| r.0), Ok(24));
        assert_eq!(out, [2; 24]);
    });
}

/// COM signal group: the sender sets two members and commits the group, twice; a receiver reading the
/// group never sees members from different commits. (Receiver spawned, sender in the main thread, as for
/// the signal.)
#[test]
fn com_group_commit_is_atomic() {
    // Preemption bound 4, as for the signal.
    builder(4).check(|| {
        let cfg = ComConfig {
            signals: vec![
                SignalDef { id: 1, max_len: 8, dynamic: false, group: Some(9) },
                SignalDef { id: 2, max_len: 8, dynamic: false, group: Some(9) },
            ],
            groups: vec![GroupDef { id: 9 }],
        };
        let mut layout = RegionLayout::new();
        layout.com("c", cfg).unwrap();
        let words = shared(layout.size_bytes() / 8);
        layout.init(&words, 1).unwrap();
        let w = words.clone();
        let receiver = thread::spawn(move || {
            let c: ComView<'_> = RegionView::attach(&w).unwrap().com("c").unwrap();
            let mut seen = 0;
            let mut last = 0u8;
            for _ in 0..2 {
                let mut out = [0xffu8; 16];
                match c.receive_signal_group(9, &mut out, &mut seen) {
                    Ok(Freshness::NeverWritten) => assert_eq!(last, 0),
                    Ok(_) => {
                        let k = out[0];
                        assert!(out.iter().all(|&b| b == k) && (k == 1 || k == 2), "mixed group value: {out:?}");
                        assert!(k >= last);
                        last = k;
                    }
                    Err(rtcell_shm::ComError::Busy) => {}
                    Err(e) => panic!("{e:?}"),
                }
            }
        });
        let c = RegionView::attach(&words).unwrap().com("c").unwrap();
        for k in 1..=2u8 {
            c.send_signal(1, &[k; 8]).unwrap();
            c.send_signal(2, &[k; 8]).unwrap();
            c.send_signal_group(9).unwrap();
        }
        receiver.join().unwrap();
        let (mut seen, mut out) = (0, [0u8; 16]);
        assert_eq!(c.receive_signal_group(9, &mut out, &mut seen).map(|_| out), Ok([2; 16]));
    });
}
