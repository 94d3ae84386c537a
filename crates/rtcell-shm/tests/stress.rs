//! Two-thread stress tests (run them in release): millions of sequence-numbered messages through rings,
//! and a writer hammering signals and signal groups while readers check that no value is ever torn or
//! goes backwards. Every outcome checked here holds under any scheduling.

#![cfg(not(loom))]

mod common;

use common::*;
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{
    ComError, ComReceiver, Freshness, GroupDef, Overflow, RecvError, RegionLayout, RegionView, RingConfig, SendError,
    SignalDef, SignalError,
};
use std::sync::atomic::{AtomicBool, Ordering};

/// Messages per ring stress test.
const MESSAGES: u64 = 2_000_000;
const MAX_FRAME: usize = 256;

/// Length of message `seq`: 8..=256 bytes, varying from one message to the next.
fn len_for(seq: u64) -> usize {
    len_up_to(seq, MAX_FRAME)
}

/// Length of message `seq`: 8..=max bytes.
fn len_up_to(seq: u64, max: usize) -> usize {
    8 + (seq.wrapping_mul(0x9E37_79B9) >> 11) as usize % (max - 7)
}

/// Busy-waits a little, then yields: with two CPUs shared by several tests, spinning alone could starve
/// the other side.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins % 16 == 0 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Raises `abort` if the thread holding it panics, so its peer stops waiting for it.
struct AbortOnPanic<'a>(&'a AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

fn check_abort(abort: &AtomicBool) {
    assert!(!abort.load(Ordering::Relaxed), "the other thread failed");
}

fn ring_words(overflow: Overflow, capacity: u32) -> Vec<AtomicU64> {
    ring_region(RingConfig { capacity, max_frame: MAX_FRAME as u32, overflow, notify: false })
}

#[test]
fn reject_two_threads_no_loss() {
    let words = ring_words(Overflow::Reject, 16384);
    let r = RegionView::attach(&words).unwrap().ring("r").unwrap();
    let abort = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let mut p = r.producer();
            let mut buf = [0u8; MAX_FRAME];
            for seq in 1..=MESSAGES {
                let len = len_for(seq);
                tagged(seq, &mut buf[..len]);
                let mut spins = 0;
                loop {
                    match p.try_send(&buf[..len]) {
                        Ok(()) => break,
                        Err(SendError::Full) => {
                            check_abort(&abort);
                            backoff(&mut spins);
                        }
                        Err(e) => panic!("send {seq}: {e:?}"),
                    }
                }
            }
        });
        s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let mut c = r.consumer();
            let mut buf = [0u8; MAX_FRAME];
            let mut expect = 1u64;
            let mut spins = 0;
            while expect <= MESSAGES {
                match c.try_recv(&mut buf) {
                    Ok(len) => {
                        assert_eq!(len, len_for(expect), "length of message {expect}");
                        assert_eq!(read_tagged(&buf[..len]), Some(expect), "content of message {expect}");
                        expect += 1;
                    }
                    Err(RecvError::Empty) => {
                        check_abort(&abort);
                        backoff(&mut spins);
                    }
                    Err(e) => panic!("receive {expect}: {e:?}"),
                }
            }
            assert_eq!(c.try_recv(&mut buf), Err(RecvError::Empty));
        });
    });
    let k = r.counters();
    assert_eq!((k.sent, k.received, k.lost, k.overwritten), (MESSAGES, MESSAGES, 0, 0));
    eprintln!("reject: {k:?}");
}

#[test]
fn overwrite_two_threads_exact_loss() {
    // About 30 frames of average size fit: the consumer below is far slower than the producer.
    overwrite_exact_loss(4096, 256, MESSAGES);
    // The smallest ring: 1 to 7 frames, a lap every few messages, WRAP markers all the time.
    overwrite_exact_loss(128, 16, MESSAGES / 2);
    overwrite_exact_loss(512, 100, MESSAGES / 2);
}

fn overwrite_exact_loss(capacity: u32, max_frame: u32, messages: u64) {
    let len_for = |seq| len_up_to(seq, max_frame as usize);
    let words = ring_region(RingConfig { capacity, max_frame, overflow: Overflow::OverwriteOldest, notify: false });
    let r = RegionView::attach(&words).unwrap().ring("r").unwrap();
    let abort = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let (received, gaps) = std::thread::scope(|s| {
        s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let mut p = r.producer();
            let mut buf = [0u8; MAX_FRAME];
            for seq in 1..=messages {
                let len = len_for(seq);
                tagged(seq, &mut buf[..len]);
                p.try_send(&buf[..len]).unwrap_or_else(|e| panic!("send {seq}: {e:?}"));
                // Now and then, let the consumer catch up, so that both regimes (lapped and not) occur.
                if seq % 256 == 0 {
                    std::thread::yield_now();
                }
            }
            done.store(true, Ordering::Release);
        });
        let consumer = s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let mut c = r.consumer();
            let mut buf = [0u8; MAX_FRAME];
            // Start only once far more has been sent than the ring holds, so some loss is certain.
            while r.counters().sent < 10_000 {
                check_abort(&abort);
                std::thread::yield_now();
            }
            let (mut last, mut received, mut gaps) = (0u64, 0u64, 0u64);
            let mut spins = 0;
            loop {
                match c.try_recv(&mut buf) {
                    Ok(len) => {
                        let seq = read_tagged(&buf[..len]).unwrap_or_else(|| panic!("torn message after {last}"));
                        assert_eq!(len, len_for(seq), "length of message {seq}");
                        assert!(seq > last, "message {seq} after {last}");
                        gaps += seq - last - 1;
                        last = seq;
                        received += 1;
                        // A deliberately slow consumer.
                        for _ in 0..200 {
                            std::hint::spin_loop();
                        }
                    }
                    Err(RecvError::Empty) => {
                        // Read `done` before the last look: after it, everything sent is visible.
                        if done.load(Ordering::Acquire) {
                            match c.try_recv(&mut buf) {
                                Err(RecvError::Empty) => break,
                                Ok(len) => {
                                    let seq = read_tagged(&buf[..len]).expect("whole message");
                                    assert!(seq > last);
                                    gaps += seq - last - 1;
                                    last = seq;
                                    received += 1;
                                    continue;
                                }
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                        check_abort(&abort);
                        backoff(&mut spins);
                    }
                    Err(e) => panic!("receive after {last}: {e:?}"),
                }
            }
            assert_eq!(last, messages, "the newest message is never lost");
            (received, gaps)
        });
        consumer.join().unwrap()
    });
    let k = r.counters();
    eprintln!("overwrite {capacity}/{max_frame}: {k:?}");
    assert_eq!(k.sent, messages);
    assert_eq!(k.received, received);
    assert_eq!(k.lost, gaps, "lost counts exactly the sequence numbers never received");
    assert_eq!(k.received + k.lost, k.sent);
    assert!(k.lost > 0);
    assert!(k.overwritten >= k.lost, "every lost message was overwritten");
    assert_eq!(k.rejected, 0);
}

/// A consumer that sleeps in `wait_for_message` whenever the ring is empty.
#[test]
fn notify_ring_with_sleeping_consumer() {
    const N: u64 = 100_000;
    let words = ring_region(RingConfig { notify: true, ..RingConfig::for_frames(MAX_FRAME as u32, 8) });
    let r = RegionView::attach(&words).unwrap().ring("r").unwrap();
    let abort = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let mut p = r.producer();
            let mut buf = [0u8; MAX_FRAME];
            for seq in 1..=N {
                let len = len_for(seq);
                tagged(seq, &mut buf[..len]);
                let mut spins = 0;
                while let Err(e) = p.try_send(&buf[..len]) {
                    assert_eq!(e, SendError::Full);
                    check_abort(&abort);
                    backoff(&mut spins);
                }
                if seq % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let mut c = r.consumer();
            let mut buf = [0u8; MAX_FRAME];
            let mut expect = 1;
            while expect <= N {
                match c.try_recv(&mut buf) {
                    Ok(len) => {
                        assert_eq!(read_tagged(&buf[..len]), Some(expect));
                        expect += 1;
                    }
                    Err(RecvError::Empty) => {
                        check_abort(&abort);
                        c.wait_for_message(1_000_000_000);
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        });
    });
    let k = r.counters();
    assert_eq!((k.sent, k.received, k.lost), (N, N, 0));
}

/// Signal values: `words` words (1..=8, from the counter) each equal to the counter.
fn signal_value(counter: u64, buf: &mut [u8; 64]) -> usize {
    let words = 1 + (counter % 8) as usize;
    for w in 0..words {
        buf[w * 8..w * 8 + 8].copy_from_slice(&counter.to_le_bytes());
    }
    words * 8
}

/// Checks one read of the stress signal; false if it was Busy.
fn check_signal_read(res: Result<(usize, Freshness), SignalError>, out: &[u8; 64], last: &mut u64) -> bool {
    match res {
        Ok((len, Freshness::NeverWritten)) => {
            assert_eq!((len, *last), (0, 0));
            true
        }
        Ok((len, fresh)) => {
            assert!(len >= 8 && len % 8 == 0, "length {len}");
            let counter = u64::from_le_bytes(out[..8].try_into().unwrap());
            let mut expected = [0u8; 64];
            let want = signal_value(counter, &mut expected);
            assert_eq!(len, want, "length for value {counter}");
            assert_eq!(out[..len], expected[..len], "torn value {counter}");
            match fresh {
                Freshness::New => assert!(counter > *last, "{counter} after {last}"),
                _ => assert_eq!(counter, *last),
            }
            *last = counter;
            true
        }
        Err(SignalError::Busy) => false,
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn signal_never_torn_never_backwards() {
    const WRITES: u64 = 1_000_000;
    let mut layout = RegionLayout::new();
    layout.signal("s", 64).unwrap();
    let words = build(&layout);
    let sig = RegionView::attach(&words).unwrap().signal("s").unwrap();
    let done = AtomicBool::new(false);
    let abort = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let mut buf = [0u8; 64];
            for counter in 1..=WRITES {
                let len = signal_value(counter, &mut buf);
                sig.write(&buf[..len]).unwrap();
                if counter % 1024 == 0 {
                    check_abort(&abort);
                }
            }
            done.store(true, Ordering::Release);
        });
        for _ in 0..2 {
            s.spawn(|| {
                let _guard = AbortOnPanic(&abort);
                let (mut seen, mut last) = (0u64, 0u64);
                let mut out = [0u8; 64];
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let res = sig.read(&mut out, &mut seen);
                    check_signal_read(res, &out, &mut last);
                    if finished {
                        break;
                    }
                    check_abort(&abort);
                }
                // After the writer is done, the value is the last one written.
                let res = sig.read(&mut out, &mut seen);
                assert!(check_signal_read(res, &out, &mut last));
                assert_eq!(last, WRITES);
            });
        }
    });
}

/// Member `m` of a group value for `counter`: member 0 carries the counter itself.
fn member_bytes(counter: u64, m: usize, len: usize) -> Vec<u8> {
    if m == 0 {
        counter.to_le_bytes()[..len].to_vec()
    } else {
        (0..len).map(|i| filler(counter, m * 100 + i)).collect()
    }
}

#[test]
fn com_group_never_mixed() {
    const COMMITS: u64 = 300_000;
    // Members of odd sizes so that they share words.
    let members: [(u16, u32); 4] = [(10, 8), (11, 3), (12, 13), (13, 5)];
    let mut signals: Vec<SignalDef> =
        members.iter().map(|&(id, max_len)| SignalDef { id, max_len, dynamic: false, group: Some(1) }).collect();
    signals.push(SignalDef { id: 50, max_len: 32, dynamic: true, group: None });
    let cfg = rtcell_shm::ComConfig { signals, groups: vec![GroupDef { id: 1 }] };
    let mut layout = RegionLayout::new();
    layout.com("c", cfg).unwrap();
    let words = build(&layout);
    let view = RegionView::attach(&words).unwrap().com("c").unwrap();
    let done = AtomicBool::new(false);
    let abort = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let mut dynamic = [0u8; 32];
            for counter in 1..=COMMITS {
                for (m, &(id, len)) in members.iter().enumerate() {
                    view.send_signal(id, &member_bytes(counter, m, len as usize)).unwrap();
                }
                view.send_signal_group(1).unwrap();
                let dlen = 8 + (counter % 25) as usize;
                tagged(counter, &mut dynamic[..dlen]);
                view.send_signal(50, &dynamic[..dlen]).unwrap();
                if counter % 1024 == 0 {
                    check_abort(&abort);
                }
            }
            done.store(true, Ordering::Release);
        });
        s.spawn(|| {
            let _guard = AbortOnPanic(&abort);
            let (ns, nw) = ComReceiver::storage_needed(&view);
            let (mut shadow, mut seen) = (vec![0u8; ns], vec![0u64; nw]);
            let mut rx = ComReceiver::new(view, &mut shadow, &mut seen).unwrap();
            let (mut last, mut last_dynamic) = (0u64, 0u64);
            let mut out = [0u8; 32];
            loop {
                let finished = done.load(Ordering::Acquire);
                match rx.receive_signal_group(1) {
                    Ok(Freshness::NeverWritten) => assert_eq!(last, 0),
                    Ok(fresh) => {
                        let (len, _) = rx.receive_signal(10, &mut out).unwrap();
                        assert_eq!(len, 8);
                        let counter = u64::from_le_bytes(out[..8].try_into().unwrap());
                        match fresh {
                            Freshness::New => assert!(counter > last, "{counter} after {last}"),
                            _ => assert_eq!(counter, last),
                        }
                        last = counter;
                        for (m, &(id, len)) in members.iter().enumerate().skip(1) {
                            let (got, _) = rx.receive_signal(id, &mut out).unwrap();
                            assert_eq!(got, len as usize);
                            assert_eq!(out[..got], member_bytes(counter, m, got)[..], "group value {counter} mixed");
                        }
                    }
                    Err(ComError::Busy) => {}
                    Err(e) => panic!("{e:?}"),
                }
                match rx.receive_signal(50, &mut out) {
                    Ok((_, Freshness::NeverWritten)) => assert_eq!(last_dynamic, 0),
                    Ok((len, fresh)) => {
                        let counter = read_tagged(&out[..len]).expect("whole dynamic value");
                        assert_eq!(len, 8 + (counter % 25) as usize);
                        match fresh {
                            Freshness::New => assert!(counter > last_dynamic),
                            _ => assert_eq!(counter, last_dynamic),
                        }
                        last_dynamic = counter;
                    }
                    Err(ComError::Busy) => {}
                    Err(e) => panic!("{e:?}"),
                }
                if finished {
                    break;
                }
                check_abort(&abort);
            }
            // The last read started after the writer finished (unless Busy, which cannot happen then).
            assert_eq!((last, last_dynamic), (COMMITS, COMMITS));
        });
    });
}
