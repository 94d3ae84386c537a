//! Ring unit tests: empty, zero-length and maximum frames, full, wraparound, buffers too small,
//! OverwriteOldest accounting, restarted ends, and futex waits.

#![cfg(not(loom))]

mod common;

use common::*;
use rtcell_shm::ring::FRAME_HEADER;
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{Overflow, RecvError, RegionView, RingConfig, RingView, SendError};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use Overflow::{OverwriteOldest, Reject};

fn ring(words: &[AtomicU64]) -> RingView<'_> {
    RegionView::attach(words).expect("valid region").ring("r").expect("ring r")
}

/// The positions a Reject ring's producer works with, kept by the test: which frames are queued where,
/// so that `Full` can be checked to happen exactly when the next frame (and the sentinel after it) would
/// overwrite unread bytes.
struct RejectModel {
    cap: u64,
    tail: u64,
    head: u64,
    queued: VecDeque<(u64, u64, usize)>, // (seq, frame start, len)
    wraps: u64,
}

impl RejectModel {
    fn new(cap: u32) -> Self {
        RejectModel { cap: cap as u64, tail: 0, head: 0, queued: VecDeque::new(), wraps: 0 }
    }

    /// Where the frame goes and whether a WRAP marker precedes it; None if the ring is full.
    fn send(&mut self, seq: u64, len: usize) -> Option<()> {
        let size = frame_bytes(len);
        let off = self.tail % self.cap;
        let pad = if self.cap - off < size { self.cap - off } else { 0 };
        let start = self.tail + pad;
        if start + size + FRAME_HEADER as u64 - self.head > self.cap {
            return None;
        }
        if pad > 0 {
            self.wraps += 1;
        }
        self.queued.push_back((seq, start, len));
        self.tail = start + size;
        Some(())
    }

    fn recv(&mut self) -> Option<(u64, usize)> {
        let (seq, start, len) = self.queued.pop_front()?;
        self.head = start + frame_bytes(len);
        Some((seq, len))
    }
}

#[test]
fn empty_ring_is_empty() {
    for overflow in [Reject, OverwriteOldest] {
        let words = ring_region(cfg(256, 64, overflow));
        let r = ring(&words);
        let mut c = r.consumer();
        let mut buf = [0u8; 64];
        assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
        assert_eq!(c.try_recv(&mut []), Err(RecvError::Empty));
        assert!(!c.has_message());
        assert_eq!(r.queued(), 0);
        assert_eq!(r.counters(), Default::default());
        // Still empty after a message went through.
        let mut p = r.producer();
        p.try_send(b"x").unwrap();
        assert!(c.has_message());
        assert_eq!(r.queued(), 1);
        assert_eq!(c.try_recv(&mut buf), Ok(1));
        assert_eq!(&buf[..1], b"x");
        assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
        assert!(!c.has_message());
        assert_eq!(r.queued(), 0);
    }
}

#[test]
fn zero_length_frames() {
    for overflow in [Reject, OverwriteOldest] {
        // Smallest valid ring for 16-byte frames: 2 * 32 + 16 rounds up to 128 bytes.
        let words = ring_region(cfg(128, 16, overflow));
        let r = ring(&words);
        let (mut p, mut c) = (r.producer(), r.consumer());
        // Many laps of zero-length frames, in batches, received into an empty buffer.
        for round in 0..500 {
            let batch = 1 + round % 7;
            for _ in 0..batch {
                p.try_send(&[]).unwrap();
            }
            for _ in 0..batch {
                assert_eq!(c.try_recv(&mut []), Ok(0));
            }
            assert_eq!(c.try_recv(&mut []), Err(RecvError::Empty));
        }
        // Zero-length frames between non-empty ones keep their place.
        let mut buf = [0u8; 16];
        p.try_send(b"before").unwrap();
        p.try_send(&[]).unwrap();
        p.try_send(b"after").unwrap();
        assert_eq!(c.try_recv(&mut buf), Ok(6));
        assert_eq!(&buf[..6], b"before");
        assert_eq!(c.try_recv(&mut buf), Ok(0));
        assert_eq!(c.try_recv(&mut buf), Ok(5));
        assert_eq!(&buf[..5], b"after");
        let n: u64 = (0..500).map(|r| 1 + r % 7).sum::<u64>() + 3;
        let k = r.counters();
        assert_eq!((k.sent, k.received, k.lost, k.rejected, k.overwritten), (n, n, 0, 0, 0));
    }

    // A Reject ring of 128 bytes holds exactly (128 - 16) / 16 = 7 empty frames (the sentinel takes 16).
    let words = ring_region(cfg(128, 16, Reject));
    let r = ring(&words);
    let (mut p, mut c) = (r.producer(), r.consumer());
    for _ in 0..7 {
        p.try_send(&[]).unwrap();
    }
    assert_eq!(p.try_send(&[]), Err(SendError::Full));
    for _ in 0..7 {
        assert_eq!(c.try_recv(&mut []), Ok(0));
    }
    assert_eq!(c.try_recv(&mut []), Err(RecvError::Empty));
}

#[test]
fn max_frame_sized_frames() {
    for max in [4096u32, 4100, 65536] {
        for overflow in [Reject, OverwriteOldest] {
            let mut config = RingConfig::for_frames(max, 3);
            config.overflow = overflow;
            let words = ring_region(config);
            let r = ring(&words);
            let (mut p, mut c) = (r.producer(), r.consumer());
            let mut buf = vec![0u8; max as usize];
            let mut seq = 0u64;
            // Enough rounds to wrap the ring many times, with one or two frames in flight.
            for round in 0..60 {
                let n = 1 + round % 2;
                for k in 0..n {
                    p.try_send(&payload(seq + k, max as usize)).unwrap();
                }
                for _ in 0..n {
                    buf.fill(0);
                    assert_eq!(c.try_recv(&mut buf), Ok(max as usize));
                    assert!(is_payload(seq, &buf), "max {max} seq {seq}");
                    seq += 1;
                }
            }
            // Interleaved with small frames, so that large ones land at odd offsets and need WRAP markers.
            for i in 0..60u64 {
                let len = if i % 3 == 0 { max as usize } else { (i as usize * 37) % 100 };
                p.try_send(&payload(seq, len)).unwrap();
                assert_eq!(c.try_recv(&mut buf), Ok(len));
                assert!(is_payload(seq, &buf[..len]));
                seq += 1;
            }
            assert_eq!(r.counters().lost, 0);
        }
    }
}

#[test]
fn too_large_is_refused_and_changes_nothing() {
    for overflow in [Reject, OverwriteOldest] {
        let words = ring_region(cfg(256, 64, overflow));
        let r = ring(&words);
        let (mut p, mut c) = (r.producer(), r.consumer());
        assert_eq!(p.try_send(&[0; 65]), Err(SendError::TooLarge { len: 65, max: 64 }));
        assert_eq!(p.try_send(&[0; 100_000]), Err(SendError::TooLarge { len: 100_000, max: 64 }));
        assert_eq!(r.counters(), Default::default());
        assert_eq!(c.try_recv(&mut [0; 128]), Err(RecvError::Empty));
        p.try_send(&payload(7, 64)).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(c.try_recv(&mut buf), Ok(64));
        assert!(is_payload(7, &buf));
    }
}

#[test]
fn reject_fills_up_then_drains_in_order() {
    // 40-byte payloads make 64-byte frames: (1024 - 16) / 64 = 15 fit.
    let words = ring_region(cfg(1024, 100, Reject));
    let r = ring(&words);
    let (mut p, mut c) = (r.producer(), r.consumer());
    let mut sent = 0u64;
    while p.try_send(&payload(sent, 40)).is_ok() {
        sent += 1;
        assert!(sent <= 15, "more frames accepted than fit");
    }
    assert_eq!(sent, 15);
    assert_eq!(r.counters().rejected, 1);
    for k in 2..=5 {
        assert_eq!(p.try_send(&payload(sent, 40)), Err(SendError::Full));
        assert_eq!(r.counters().rejected, k);
    }
    // A shorter payload of the same frame size does not fit either.
    assert_eq!(p.try_send(&[0; 33]), Err(SendError::Full));
    assert_eq!(r.counters().sent, 15);
    assert_eq!(r.queued(), 15);

    // One received: exactly one more frame of that size fits.
    let mut buf = [0u8; 100];
    assert_eq!(c.try_recv(&mut buf), Ok(40));
    assert!(is_payload(0, &buf[..40]));
    p.try_send(&payload(15, 40)).unwrap();
    assert_eq!(p.try_send(&payload(16, 40)), Err(SendError::Full));

    // Drain: nothing was lost, order kept.
    for seq in 1..=15 {
        assert_eq!(c.try_recv(&mut buf), Ok(40));
        assert!(is_payload(seq, &buf[..40]), "seq {seq}");
    }
    assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
    // And it fills up again, across the end of the data area.
    let mut more = 0;
    while p.try_send(&payload(100 + more, 40)).is_ok() {
        more += 1;
    }
    assert_eq!(more, 15);
    for seq in 100..115 {
        assert_eq!(c.try_recv(&mut buf), Ok(40));
        assert!(is_payload(seq, &buf[..40]));
    }
    let k = r.counters();
    assert_eq!((k.sent, k.received, k.lost, k.overwritten), (31, 31, 0, 0));
    assert_eq!(k.rejected, 8);
}

/// Random batches of random sizes through a Reject ring, hundreds of laps: `Full` exactly when the
/// frame would not fit, every message in order with its content.
#[test]
fn reject_wraparound_mixed_sizes() {
    for (capacity, max_frame, seed) in [(128u32, 16u32, 1u64), (512, 100, 2), (512, 200, 3), (4096, 1000, 4)] {
        let words = ring_region(cfg(capacity, max_frame, Reject));
        let r = ring(&words);
        let (mut p, mut c) = (r.producer(), r.consumer());
        let mut model = RejectModel::new(capacity);
        let mut rng = Rng(seed);
        let mut buf = vec![0u8; max_frame as usize];
        let (mut next, mut fulls) = (0u64, 0u64);
        while model.tail / capacity as u64 <= 400 {
            for _ in 0..1 + rng.below(6) {
                // Mostly random lengths; sometimes the largest, which forces a WRAP marker at most offsets.
                let len = if rng.chance(1, 4) { max_frame as usize } else { rng.below(max_frame as u64 + 1) as usize };
                let res = p.try_send(&payload(next, len));
                match model.send(next, len) {
                    Some(()) => {
                        assert_eq!(res, Ok(()), "seq {next} len {len}");
                        next += 1;
                    }
                    None => {
                        assert_eq!(res, Err(SendError::Full), "seq {next} len {len}");
                        fulls += 1;
                        break;
                    }
                }
            }
            for _ in 0..rng.below(6) {
                let res = c.try_recv(&mut buf);
                match model.recv() {
                    Some((seq, len)) => {
                        assert_eq!(res, Ok(len), "seq {seq}");
                        assert!(is_payload(seq, &buf[..len]), "seq {seq}");
                    }
                    None => assert_eq!(res, Err(RecvError::Empty)),
                }
            }
        }
        while let Some((seq, len)) = model.recv() {
            assert_eq!(c.try_recv(&mut buf), Ok(len));
            assert!(is_payload(seq, &buf[..len]));
        }
        assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
        eprintln!("{capacity}/{max_frame}: {} wraps, {} fulls", model.wraps, fulls);
        assert!(model.wraps >= 40, "only {} wraps", model.wraps);
        let k = r.counters();
        assert_eq!((k.sent, k.received, k.lost, k.overwritten), (next, next, 0, 0));
        assert_eq!(k.rejected, fulls);
    }
}

#[test]
fn too_small_buffer_leaves_the_message_queued() {
    for overflow in [Reject, OverwriteOldest] {
        let words = ring_region(cfg(256, 64, overflow));
        let r = ring(&words);
        let (mut p, mut c) = (r.producer(), r.consumer());
        let mut small = [0u8; 63];
        let mut buf = [0u8; 64];
        // Three 80-byte frames wrap the 256-byte area: the fourth lies behind a WRAP marker at offset 240.
        for seq in 0..4 {
            p.try_send(&payload(seq, 64)).unwrap();
            for _ in 0..3 {
                assert_eq!(c.try_recv(&mut small), Err(RecvError::TooSmall { len: 64 }));
            }
            assert_eq!(c.try_recv(&mut []), Err(RecvError::TooSmall { len: 64 }));
            assert_eq!(r.counters().received, seq);
            assert_eq!(c.try_recv(&mut buf), Ok(64));
            assert!(is_payload(seq, &buf));
        }
        // A larger buffer than needed is fine, and TooSmall on one message does not disturb the next.
        p.try_send(&payload(10, 5)).unwrap();
        p.try_send(&payload(11, 30)).unwrap();
        assert_eq!(c.try_recv(&mut small[..4]), Err(RecvError::TooSmall { len: 5 }));
        assert_eq!(c.try_recv(&mut small), Ok(5));
        assert!(is_payload(10, &small[..5]));
        assert_eq!(c.try_recv(&mut small[..29]), Err(RecvError::TooSmall { len: 30 }));
        assert_eq!(c.try_recv(&mut small[..30]), Ok(30));
        assert!(is_payload(11, &small[..30]));
        let k = r.counters();
        assert_eq!((k.sent, k.received, k.lost), (6, 6, 0));
    }
}

#[test]
fn overwrite_oldest_keeps_the_newest() {
    // 48-byte payloads make 64-byte frames; with the sentinel, 15 fit in 1024 bytes.
    let words = ring_region(cfg(1024, 64, OverwriteOldest));
    let r = ring(&words);
    let (mut p, mut c) = (r.producer(), r.consumer());
    for seq in 1..=1000 {
        p.try_send(&payload(seq, 48)).unwrap(); // never Full
    }
    let k = r.counters();
    assert_eq!((k.sent, k.rejected, k.overwritten, k.lost, k.received), (1000, 0, 985, 0, 0));
    let mut buf = [0u8; 64];
    for seq in 986..=1000 {
        assert_eq!(c.try_recv(&mut buf), Ok(48));
        assert!(is_payload(seq, &buf[..48]), "seq {seq}");
    }
    assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
    let k = r.counters();
    assert_eq!((k.received, k.lost, k.overwritten), (15, 985, 985));
    assert_eq!(k.sent, k.received + k.lost);
}

/// `overwritten` counts frames dropped before the consumer got them; dropping frames it already read
/// is not a loss.
#[test]
fn overwritten_counts_only_unread_frames() {
    let words = ring_region(cfg(1024, 64, OverwriteOldest));
    let r = ring(&words);
    let (mut p, mut c) = (r.producer(), r.consumer());
    let mut buf = [0u8; 64];
    for seq in 1..=15 {
        p.try_send(&payload(seq, 48)).unwrap();
    }
    for seq in 1..=15 {
        assert_eq!(c.try_recv(&mut buf), Ok(48));
        assert!(is_payload(seq, &buf[..48]));
    }
    // The next 15 reuse the space of the first 15, which were all read.
    for seq in 16..=30 {
        p.try_send(&payload(seq, 48)).unwrap();
    }
    assert_eq!((r.counters().overwritten, r.counters().lost), (0, 0));
    // Now two unread ones go.
    p.try_send(&payload(31, 48)).unwrap();
    p.try_send(&payload(32, 48)).unwrap();
    assert_eq!((r.counters().overwritten, r.counters().lost), (2, 0));
    for seq in 18..=32 {
        assert_eq!(c.try_recv(&mut buf), Ok(48));
        assert!(is_payload(seq, &buf[..48]), "seq {seq}");
    }
    assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
    let k = r.counters();
    assert_eq!((k.sent, k.received, k.lost, k.overwritten), (32, 30, 2, 2));
}

/// Frames placed behind a WRAP marker and then overwritten: the smallest ring, a frame that wraps, and a
/// following frame whose sentinel lands exactly on the marker.
#[test]
fn overwrite_drops_a_wrapped_frame_with_its_marker() {
    let words = ring_region(cfg(128, 16, OverwriteOldest));
    let r = ring(&words);
    let (mut p, mut c) = (r.producer(), r.consumer());
    let mut buf = [0u8; 16];
    // Frames: 1 at [0,16), 2..4 at [16,112) (32 bytes each), 5 behind a marker at 112, at [128,160).
    let lens = [0usize, 16, 16, 16, 16];
    for (i, &len) in lens.iter().enumerate() {
        p.try_send(&payload(i as u64 + 1, len)).unwrap();
    }
    // Sending 5 dropped 1 and 2: the consumer resyncs and gets 3 and 4; 5 is next, behind the marker.
    for seq in 3..=4 {
        assert_eq!(c.try_recv(&mut buf), Ok(16));
        assert!(is_payload(seq, &buf));
    }
    assert_eq!(r.counters().lost, 2);
    // 6 and 7 (32 bytes each) drop 3 and 4; 8 (16 bytes, ending at 240) needs the marker's place for
    // its sentinel.
    p.try_send(&payload(6, 16)).unwrap();
    p.try_send(&payload(7, 16)).unwrap();
    p.try_send(&payload(8, 0)).unwrap();
    // Whatever was dropped, the consumer must get the rest, and the accounting must add up.
    let mut got = Vec::new();
    loop {
        match c.try_recv(&mut buf) {
            Ok(len) => got.push((len, buf)),
            Err(RecvError::Empty) => break,
            Err(e) => panic!("honest ring reported {e:?}"),
        }
    }
    let k = r.counters();
    assert_eq!(k.received + k.lost, 8, "{k:?}, received after the wrap: {}", got.len());
    assert_eq!(k.received, 2 + got.len() as u64);
    assert!(!got.is_empty());
    let last = got.last().unwrap();
    assert_eq!(last.0, 0);
    assert_eq!(k.overwritten, k.lost);
}

/// Single-threaded random walks over OverwriteOldest rings of many shapes. With nobody running
/// concurrently, a receive that finds nothing means everything sent was either received or counted as
/// lost; every message received is whole and newer than the one before.
#[test]
fn overwrite_random_walk_accounting_is_exact() {
    let shapes = [(128u32, 16u32), (64, 0), (256, 64), (512, 100), (512, 200), (1024, 64), (4096, 1000)];
    for (n, &(capacity, max_frame)) in shapes.iter().enumerate() {
        for seed in 0..40u64 {
            let words = ring_region(cfg(capacity, max_frame, OverwriteOldest));
            let r = ring(&words);
            let (mut p, mut c) = (r.producer(), r.consumer());
            let mut rng = Rng(seed * 1000 + n as u64);
            let mut buf = vec![0u8; max_frame as usize];
            let (mut sent, mut received, mut last) = (0u64, 0u64, 0u64);
            let mut lens = Vec::new();
            for _ in 0..3000 {
                if rng.chance(3, 5) {
                    let len = match rng.below(4) {
                        0 => max_frame as usize,
                        1 => 0,
                        _ => rng.below(max_frame as u64 + 1) as usize,
                    };
                    sent += 1;
                    lens.push(len);
                    p.try_send(&payload(sent, len)).unwrap();
                } else {
                    match c.try_recv(&mut buf) {
                        Ok(len) => {
                            received += 1;
                            // Single-threaded, the counters tell which message this must be: the one after
                            // everything received or lost so far.
                            let k = r.counters();
                            assert_eq!(k.received, received);
                            let seq = k.received + k.lost;
                            assert!(seq > last && seq <= sent, "shape {capacity}/{max_frame} seed {seed}: seq {seq}");
                            assert_eq!(lens[seq as usize - 1], len, "seq {seq}");
                            assert!(is_payload(seq, &buf[..len]), "seq {seq}");
                            last = seq;
                        }
                        Err(RecvError::Empty) => {
                            let k = r.counters();
                            assert_eq!(
                                k.received + k.lost,
                                sent,
                                "Empty with messages outstanding: shape {capacity}/{max_frame} seed {seed}, {k:?}"
                            );
                        }
                        Err(e) => panic!("honest ring reported {e:?} (shape {capacity}/{max_frame} seed {seed})"),
                    }
                }
            }
            loop {
                match c.try_recv(&mut buf) {
                    Ok(_) => received += 1,
                    Err(RecvError::Empty) => break,
                    Err(e) => panic!("honest ring reported {e:?}"),
                }
            }
            let k = r.counters();
            assert_eq!((k.sent, k.received), (sent, received));
            assert_eq!(k.received + k.lost, k.sent, "shape {capacity}/{max_frame} seed {seed}");
            assert_eq!(k.overwritten, k.lost, "single-threaded, every overwritten frame is a lost one");
            assert_eq!(k.rejected, 0);
        }
    }
}

/// A producer or consumer made again from the shared state (a restarted process) continues where the
/// previous one stopped.
#[test]
fn ends_can_be_recreated() {
    for overflow in [Reject, OverwriteOldest] {
        let words = ring_region(cfg(512, 64, overflow));
        let r = ring(&words);
        let mut buf = [0u8; 64];
        let mut seq = 0u64;
        let mut expect = 0u64;
        for round in 0..200 {
            {
                let mut p = r.producer();
                for _ in 0..1 + round % 4 {
                    p.try_send(&payload(seq, (seq as usize * 13) % 65)).unwrap();
                    seq += 1;
                }
            }
            let mut c = ring(&words).consumer();
            while expect < seq {
                let len = c.try_recv(&mut buf).unwrap();
                assert_eq!(len, (expect as usize * 13) % 65);
                assert!(is_payload(expect, &buf[..len]));
                expect += 1;
            }
            assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
        }
        let k = r.counters();
        assert_eq!((k.sent, k.received, k.lost), (seq, seq, 0));
    }
}

#[test]
fn validate_and_for_frames() {
    let ok = |capacity, max_frame| cfg(capacity, max_frame, Reject).validate();
    assert!(ok(128, 16).is_ok());
    assert!(ok(128, 32).is_ok()); // 2 * (16 + 32) + 16 = 112
    assert!(ok(128, 33).is_err()); // 2 * (16 + 48) + 16 = 144
    assert!(ok(0, 0).is_err());
    assert!(ok(100, 0).is_err());
    assert!(ok(64, 0).is_ok()); // 2 * 16 + 16 = 48
    assert!(ok(64, 1).is_err()); // 2 * 32 + 16 = 80
    assert!(ok(1 << 31, 16 << 20).is_ok());
    assert!(ok(1 << 31, (16 << 20) + 1).is_err());
    for max in [0u32, 1, 15, 16, 17, 100, 4096, 65535] {
        for frames in [2u32, 3, 10] {
            let c = RingConfig::for_frames(max, frames);
            assert!(c.validate().is_ok(), "for_frames({max}, {frames})");
            assert_eq!(c.capacity % 64, 0);
            assert!(c.capacity as u64 >= frames as u64 * frame_bytes(max as usize) + 16);
            // It really holds that many maximum frames in a Reject ring.
            let words = ring_region(c);
            let mut p = ring(&words).producer();
            for _ in 0..frames {
                p.try_send(&vec![1; max as usize]).unwrap();
            }
        }
    }
}

#[test]
fn wait_for_message_wakes_on_send() {
    for overflow in [Reject, OverwriteOldest] {
        let words = ring_region(RingConfig { notify: true, ..cfg(256, 64, overflow) });
        let r = ring(&words);
        let event = r.event_word();
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut c = r.consumer();
                let mut buf = [0u8; 64];
                // Spurious wake-ups are allowed: wait again until the message is there.
                let got = loop {
                    match c.try_recv(&mut buf) {
                        Ok(len) => break buf[..len].to_vec(),
                        Err(RecvError::Empty) => c.wait_for_message(120_000_000_000),
                        Err(e) => panic!("{e:?}"),
                    }
                };
                tx.send(got).unwrap();
            });
            // Send once the consumer is asleep (or about to be). If the wake-up were lost the consumer would
            // sleep for two minutes.
            let waiters = &words[RegionView::attach(&words).unwrap().find("r").unwrap().offset / 8 + 16];
            while waiters.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            r.producer().try_send(b"wake up").unwrap();
            assert!(event.load(Ordering::Relaxed) > 0, "a waiting consumer was not signalled");
            let got = rx.recv_timeout(Duration::from_secs(60)).expect("the consumer was not woken");
            assert_eq!(got, b"wake up");
        });
    }
}

#[test]
fn wait_for_message_times_out_or_returns_at_once() {
    let words = ring_region(RingConfig { notify: true, ..cfg(256, 64, Reject) });
    let r = ring(&words);
    let mut c = r.consumer();
    // Nothing sent: returns after the timeout, nothing received.
    c.wait_for_message(20_000_000);
    assert_eq!(c.try_recv(&mut [0; 64]), Err(RecvError::Empty));
    // Without sleepers, sending does not touch the event word.
    r.producer().try_send(b"x").unwrap();
    assert_eq!(r.event_word().load(Ordering::Relaxed), 0);
    // A message already waiting: returns at once (a lost check would sleep for two minutes).
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            c.wait_for_message(120_000_000_000);
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(60)).expect("wait_for_message slept with a message waiting");
    });
    assert_eq!(c.try_recv(&mut [0; 64]), Ok(1));
}
