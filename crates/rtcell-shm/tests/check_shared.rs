//! `RingView::check_shared`, what a supervisor (or an idle ring end) uses to notice a peer that broke a
//! ring's shared positions: never an error while an honest producer and consumer run concurrently, under
//! either overflow policy; an error once a position is scribbled.

#![cfg(not(loom))]

mod common;

use common::*;
use rtcell_shm::sync::Ordering;
use rtcell_shm::{Overflow, RegionView};
use std::sync::atomic::AtomicBool;

const MESSAGES: u64 = 200_000;
/// Checks made while the producer and consumer run, at least: the producer keeps sending until the checker
/// made them (under CPU contention the checker may not run at all while 200,000 messages go through).
const MIN_CHECKS: u64 = 1_000;

fn honest_run_never_fails_the_check(overflow: Overflow) {
    let words = ring_region(cfg(4096, 64, overflow));
    let region = RegionView::attach(&words).unwrap();
    let ring = region.ring("r").unwrap();
    let done = AtomicBool::new(false);
    let checked = std::sync::atomic::AtomicU64::new(0);
    let checks = std::thread::scope(|s| {
        s.spawn(|| {
            let mut p = ring.producer();
            let mut seq = 0u64;
            while seq < MESSAGES || checked.load(std::sync::atomic::Ordering::Relaxed) < MIN_CHECKS {
                if p.try_send(&seq.to_le_bytes()).is_ok() {
                    seq += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        s.spawn(|| {
            let mut c = ring.consumer();
            let mut buf = [0u8; 64];
            loop {
                if c.try_recv(&mut buf).is_err() {
                    if done.load(std::sync::atomic::Ordering::Acquire) {
                        break;
                    }
                    std::thread::yield_now();
                }
            }
        });
        let checker = s.spawn(|| {
            let mut n = 0u64;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                if let Err(e) = ring.check_shared() {
                    panic!("an honest ring failed the check ({overflow:?}): {e}");
                }
                n += 1;
                checked.store(n, std::sync::atomic::Ordering::Relaxed);
            }
            n
        });
        checker.join().unwrap()
    });
    assert!(checks >= MIN_CHECKS, "{checks} checks");
    ring.check_shared().unwrap();
    // A scribbled consumer head or producer tail is noticed.
    let all = region.channel_words(&region.find("r").unwrap());
    for (word, garbage) in [(8usize, 0x8000_0000_8000_0001u64), (0, 0x8000_0000_8000_0001)] {
        let saved = all[word].load(Ordering::Relaxed);
        all[word].store(garbage, Ordering::Relaxed);
        assert!(ring.check_shared().is_err(), "word {word} scribbled");
        all[word].store(saved, Ordering::Relaxed);
        ring.check_shared().unwrap();
    }
}

#[test]
fn an_honest_reject_ring_never_fails_the_check_and_a_scribbled_one_does() {
    honest_run_never_fails_the_check(Overflow::Reject);
}

#[test]
fn an_honest_overwrite_ring_never_fails_the_check_and_a_scribbled_one_does() {
    honest_run_never_fails_the_check(Overflow::OverwriteOldest);
}
