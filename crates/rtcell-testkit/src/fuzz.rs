//! The one harness every fuzz target uses: its budget, its seed, and the lines that make a run replayable.
//!
//! A fuzz target is an ordinary test named `fuzz_*`:
//!
//! ```no_run
//! use rtcell_testkit::fuzz::{Fuzz, Rng};
//!
//! let fuzz = Fuzz::start("fuzz_example", 200_000); // prints `fuzz fuzz_example: seed S`
//! let mut rng = fuzz.rng(0);
//! for _ in 0..fuzz.cases() {
//!     let x: u32 = rng.random();
//!     // ... feed x to the code under test, assert what must hold ...
//!     fuzz.case();
//! }
//! fuzz.finish(); // prints `fuzz fuzz_example: 200000 cases, seed S, 1.2 s, 0 findings`
//! ```
//!
//! - `RTCELL_FUZZ_CASES` sets the number of cases of every target (`10000000`, `10_000_000` or `1e7`);
//!   unset, each target runs its own short CI budget (a few seconds).
//! - `RTCELL_FUZZ_SEED` sets the seed (decimal or `0x` hex); unset, it is random from the OS. The seed is
//!   printed before the first case, so a failing run is replayed with the same seed and case count.
//! - A panic in the target (a finding) prints the seed, the cases done and the command line that replays it.
//! - [`Fuzz::watchdog`]: a hang (no case counted for a generous while) aborts the process after printing the
//!   seed, so every call of the code under test must return.
//! - [`Fuzz::with_counters`] / [`Fuzz::hit`]: coverage counters (how many cases reached each depth),
//!   printed before the closing line, so a report can say how far the cases got.
//!
//! The generator is `rand`'s `SmallRng` (xoshiro256++ on 64-bit targets): fast, and fully determined by the
//! seed with the workspace's locked `rand` version. Threads of one target take their own streams
//! ([`Fuzz::rng`] with distinct stream numbers), so a replay produces the same inputs per thread; the
//! interleaving of racing threads is, by design, not replayable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use rand::rngs::SmallRng;
pub use rand::{Rng, RngCore, SeedableRng};

/// The environment variable that sets every target's number of cases.
pub const CASES_VAR: &str = "RTCELL_FUZZ_CASES";
/// The environment variable that sets the seed.
pub const SEED_VAR: &str = "RTCELL_FUZZ_SEED";

/// One fuzz target's run: its name, budget and seed, and the cases done so far (counted by any thread).
#[derive(Debug)]
pub struct Fuzz {
    name: String,
    cases: u64,
    seed: u64,
    start: Instant,
    done: Arc<AtomicU64>,
    counters: Vec<(&'static str, AtomicU64)>,
    finished: bool,
}

/// Parses a case count: digits with optional `_` separators, or `<mantissa>e<exponent>` (`1e7`, `2.5e6`).
///
/// # Errors
/// A text that is not a positive whole number of cases, with what was expected.
pub fn parse_cases(text: &str) -> Result<u64, String> {
    let t = text.trim().replace('_', "");
    let bad = || format!("{CASES_VAR}={text:?}: expected a positive whole number of cases, e.g. 1000000 or 1e6");
    let n = if let Some((m, e)) = t.split_once(['e', 'E']) {
        let m: f64 = m.parse().map_err(|_| bad())?;
        let e: i32 = e.parse().map_err(|_| bad())?;
        let v = m * 10f64.powi(e);
        if !(1.0..=1e18).contains(&v) || v.fract() != 0.0 {
            return Err(bad());
        }
        // Exact: a whole number no larger than 1e18 fits u64 and f64's conversion truncates nothing.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = v as u64;
        n
    } else {
        t.parse::<u64>().map_err(|_| bad())?
    };
    if n == 0 {
        return Err(bad());
    }
    Ok(n)
}

/// Parses a seed: decimal, or hexadecimal with a `0x` prefix.
///
/// # Errors
/// A text that is neither, with what was expected.
pub fn parse_seed(text: &str) -> Result<u64, String> {
    let t = text.trim().replace('_', "");
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    };
    parsed.map_err(|_| format!("{SEED_VAR}={text:?}: expected a seed as printed by a fuzz run (decimal or 0x hex)"))
}

fn env_or<T>(var: &str, parse: fn(&str) -> Result<T, String>, default: impl FnOnce() -> T) -> T {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => parse(&v).unwrap_or_else(|e| panic!("{e}")),
        _ => default(),
    }
}

/// splitmix64: spreads a (seed, stream) pair into well-mixed seeds for the streams of one run.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Fuzz {
    /// Starts the target `name` with `default_cases` (its CI budget: a few seconds of work) unless
    /// `RTCELL_FUZZ_CASES` says otherwise, and prints `fuzz NAME: seed S` before anything else.
    ///
    /// # Panics
    /// When `RTCELL_FUZZ_CASES` or `RTCELL_FUZZ_SEED` is set to something unreadable.
    pub fn start(name: &str, default_cases: u64) -> Self {
        let cases = env_or(CASES_VAR, parse_cases, || default_cases.max(1));
        let seed = env_or(SEED_VAR, parse_seed, rand::random::<u64>);
        println!("fuzz {name}: seed {seed}");
        Self {
            name: name.to_string(),
            cases,
            seed,
            start: Instant::now(),
            done: Arc::new(AtomicU64::new(0)),
            counters: Vec::new(),
            finished: false,
        }
    }

    /// The number of cases to run.
    pub fn cases(&self) -> u64 {
        self.cases
    }

    /// The seed of this run.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The target's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A generator for stream `stream` of this run (one per thread or per phase), fully determined by the
    /// seed and the stream number.
    pub fn rng(&self, stream: u64) -> SmallRng {
        SmallRng::seed_from_u64(mix(self.seed ^ mix(stream)))
    }

    /// Counts one case done (any thread).
    pub fn case(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `n` cases done (any thread).
    pub fn cases_done(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// The cases counted so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Starts a watchdog: when no case is counted for `stall` (generous: a hang, not a slow machine), it
    /// prints the seed and the replay line and aborts the process (a hung call never returns, so the test
    /// could not fail otherwise). Stops when the returned guard is dropped.
    pub fn watchdog(&self, stall: Duration) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let (done, stop2) = (Arc::clone(&self.done), Arc::clone(&stop));
        let (name, seed, cases) = (self.name.clone(), self.seed, self.cases);
        let thread = std::thread::Builder::new()
            .name(format!("{name}-watchdog"))
            .spawn(move || {
                let (mut last, mut since) = (done.load(Ordering::Relaxed), Instant::now());
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    let now = done.load(Ordering::Relaxed);
                    if now != last {
                        (last, since) = (now, Instant::now());
                    } else if since.elapsed() > stall {
                        eprintln!(
                            "fuzz {name}: FINDING: HANG: no case finished for {} s after {now} cases, seed {seed}; \
                             replay: {SEED_VAR}={seed} {CASES_VAR}={cases}",
                            stall.as_secs()
                        );
                        std::process::abort();
                    }
                }
            })
            .unwrap_or_else(|e| panic!("cannot start the fuzz watchdog: {e}"));
        Watchdog { stop, thread: Some(thread) }
    }

    /// Declares the named coverage counters this target reports at the end (how many cases reached each
    /// depth of the code under test); call before the cases run. Counted with [`Fuzz::hit`] by index.
    #[must_use]
    pub fn with_counters(mut self, names: &[&'static str]) -> Self {
        self.counters = names.iter().map(|n| (*n, AtomicU64::new(0))).collect();
        self
    }

    /// Adds `n` to coverage counter `index` (its place in [`Fuzz::with_counters`]).
    ///
    /// # Panics
    /// When `index` names no counter (a bug in the target).
    pub fn hit(&self, index: usize, n: u64) {
        self.counters[index].1.fetch_add(n, Ordering::Relaxed);
    }

    /// The value of coverage counter `index`.
    ///
    /// # Panics
    /// When `index` names no counter.
    pub fn counter(&self, index: usize) -> u64 {
        self.counters[index].1.load(Ordering::Relaxed)
    }

    /// Ends the run: prints each coverage counter, then the closing line
    /// `fuzz NAME: CASES cases, seed S, SECS s, 0 findings`. Call it only after every case passed (a
    /// finding is a panic, reported by the drop of an unfinished run).
    pub fn finish(mut self) {
        self.finished = true;
        let done = self.done();
        for (name, n) in &self.counters {
            let n = n.load(Ordering::Relaxed);
            #[allow(clippy::cast_precision_loss)]
            let pct = if done == 0 { 0.0 } else { 100.0 * n as f64 / done as f64 };
            println!("fuzz {}: {name}: {n} ({pct:.1}% of cases)", self.name);
        }
        let secs = self.start.elapsed().as_secs_f64();
        println!("fuzz {}: {done} cases, seed {}, {secs:.1} s, 0 findings", self.name, self.seed);
    }
}

/// A running [`Fuzz::watchdog`]; dropping it stops the watchdog.
#[derive(Debug)]
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Fuzz {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let done = self.done();
        let why = if std::thread::panicking() { "FINDING" } else { "ended without finish()" };
        eprintln!(
            "fuzz {}: {why} after {done} of {} cases, seed {} ({:.1} s); replay: {SEED_VAR}={} {CASES_VAR}={} \
             cargo test --release ... {}",
            self.name,
            self.cases,
            self.seed,
            self.start.elapsed().as_secs_f64(),
            self.seed,
            self.cases,
            self.name
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_counts_and_seeds_parse() {
        assert_eq!(parse_cases("10_000_000"), Ok(10_000_000));
        assert_eq!(parse_cases("1e7"), Ok(10_000_000));
        assert_eq!(parse_cases("2.5e6"), Ok(2_500_000));
        assert_eq!(parse_cases(" 42 "), Ok(42));
        assert!(parse_cases("0").is_err());
        assert!(parse_cases("1.5").is_err());
        assert!(parse_cases("1e-3").is_err());
        assert!(parse_cases("lots").is_err());
        assert_eq!(parse_seed("0x10"), Ok(16));
        assert_eq!(parse_seed("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_seed("-1").is_err());
    }

    #[test]
    fn streams_are_determined_by_seed_and_stream() {
        let mut f = Fuzz::start("fuzz_selftest", 1);
        f.seed = 7;
        let a: u64 = f.rng(1).random();
        let b: u64 = f.rng(1).random();
        let c: u64 = f.rng(2).random();
        assert_eq!(a, b);
        assert_ne!(a, c);
        f.case();
        f.finish();
    }
}
