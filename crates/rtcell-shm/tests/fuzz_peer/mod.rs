//! The hostile peer of the channel fuzz targets: a thread that scribbles a live channel while the honest
//! side runs, and the values it writes (boundary values of indices, lengths, sequence numbers, offsets and
//! counters, near the values in place, so that they get past the first checks).
//!
//! Episodes: the honest side disarms the peer, waits until no write is in flight, puts a valid state in
//! place, and arms the peer again after a clean prefix (some episodes stay clean all through). It knows
//! whether a write landed since the episode began (`effective`), so a clean stretch is checked exactly and
//! a scribbled one for what must hold for any content.

#![allow(dead_code)]

use rtcell_testkit::fuzz::{Rng, SmallRng};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};

/// Shared between the honest side and the hostile thread.
#[derive(Default)]
pub struct Peer {
    armed: AtomicBool,
    stop: AtomicBool,
    pending: AtomicU64,
    /// Stores the peer made (each counted before it is made).
    pub effective: AtomicU64,
    /// Which of the target's channels the peer scribbles now.
    pub target: AtomicUsize,
    /// How many spin-loop iterations the peer waits between two writes (its rate).
    pub gap: AtomicU64,
}

impl Peer {
    /// Stops the peer's writes and waits until none is in flight; returns the store count to compare with.
    pub fn disarm(&self) -> u64 {
        self.armed.store(false, SeqCst);
        while self.pending.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
        self.effective.load(SeqCst)
    }

    pub fn arm(&self, gap: u64) {
        self.gap.store(gap, SeqCst);
        self.armed.store(true, SeqCst);
    }

    /// No store since `base`: what the honest side read came from honest writes only.
    pub fn clean_since(&self, base: u64) -> bool {
        self.effective.load(SeqCst) == base
    }

    pub fn stop(&self) {
        self.stop.store(true, SeqCst);
    }

    /// The hostile thread's loop: `scribble(rng, target)` makes one store, while armed, until stopped.
    pub fn run(&self, mut rng: SmallRng, mut scribble: impl FnMut(&mut SmallRng, usize)) {
        while !self.stop.load(SeqCst) {
            self.pending.fetch_add(1, SeqCst);
            let armed = self.armed.load(SeqCst);
            if armed {
                self.effective.fetch_add(1, SeqCst);
                scribble(&mut rng, self.target.load(SeqCst));
            }
            self.pending.fetch_sub(1, SeqCst);
            if armed {
                let gap = self.gap.load(SeqCst);
                for _ in 0..rng.random_range(0..=gap) {
                    std::hint::spin_loop();
                }
                if rng.random_ratio(1, 64) {
                    // Sharing a CPU with the honest side (a loaded machine), hand it back now and then,
                    // so that stores land between its calls all through an episode, not in one burst.
                    std::thread::yield_now();
                }
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Called by the honest side after a call: now and then it yields, so that a peer sharing its CPU (a loaded
/// machine) gets in mid-episode, between calls, rather than only when the honest side is preempted.
pub fn let_in(rng: &mut SmallRng, one_in: u32) {
    if rng.random_ratio(1, one_in) {
        std::thread::yield_now();
    }
}

/// A hostile value for a word now holding `cur`: boundary values, values near `cur` and near the `hints`
/// (the sizes and positions the honest side uses), flipped bits, and random words.
pub fn boundary(rng: &mut SmallRng, cur: u64, hints: &[u64]) -> u64 {
    let hint = if hints.is_empty() { cur } else { hints[rng.random_range(0..hints.len())] };
    let near = |rng: &mut SmallRng, v: u64| v.wrapping_add(rng.random_range(0..17)).wrapping_sub(8);
    match rng.random_range(0..16u32) {
        0 => 0,
        1 => 1,
        2 => u64::MAX - rng.random_range(0..3),
        3 => (1 << 63) + rng.random_range(0..3) - 1,
        4 => (1 << 32) + rng.random_range(0..3) - 1,
        5 => u32::MAX as u64 - rng.random_range(0..2),
        6 => near(rng, cur),
        7 | 8 => near(rng, hint),
        9 => hint & !15,
        10 => cur ^ (1 << rng.random_range(0..64)),
        11 => (cur & 0xffff_ffff) | near(rng, hint) << 32,
        12 => (cur & !0xffff_ffff) | (near(rng, hint) & 0xffff_ffff),
        13 => cur.wrapping_add(hint),
        14 => rng.random(),
        _ => 1 << rng.random_range(0..64),
    }
}

/// Runs `episodes` of the honest side with a hostile thread racing it, on a scoped thread.
pub fn with_peer<S>(peer: &Peer, rng: SmallRng, scribble: S, honest: impl FnOnce())
where
    S: FnMut(&mut SmallRng, usize) + Send,
{
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("hostile-peer".into())
            .spawn_scoped(s, move || peer.run(rng, scribble))
            .expect("hostile thread");
        // A panic in the honest side must stop the peer too, or the scope would wait for it forever.
        struct StopOnDrop<'p>(&'p Peer);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.stop();
            }
        }
        let _stop = StopOnDrop(peer);
        honest();
        drop(_stop);
        h.join().expect("hostile thread panicked");
    });
}
