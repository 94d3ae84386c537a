//! The TSC as a clock for the fast path.
//!
//! Reading the TSC costs a few tens of cycles and needs no syscall or VM exit, so it is what the
//! real-time side timestamps with. It is only a clock if it ticks at a constant rate regardless of
//! frequency scaling (`constant_tsc`) and keeps ticking in deep idle states (`nonstop_tsc`); the
//! rate is measured against `CLOCK_MONOTONIC_RAW` and cross-checked with the kernel's own figure.

use std::io;
use std::time::Duration;

use crate::root::{HostRoot, ReadError};

/// Reads the time-stamp counter. Not ordered with surrounding instructions: cheap, for when a few
/// cycles of skew do not matter. Use [`rdtsc_ordered`] to time a code section.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC exists on every x86_64 CPU and Linux leaves it enabled for user space
    // (CR4.TSD clear); it reads a register and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Reads the time-stamp counter after all earlier instructions have completed (`lfence; rdtsc`),
/// so the timestamp cannot be taken before the work it is meant to follow.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn rdtsc_ordered() -> u64 {
    // SAFETY: LFENCE is part of SSE2, which every x86_64 CPU has; RDTSC as in `rdtsc`. Neither
    // touches memory.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

/// Fallback for targets without a TSC: `CLOCK_MONOTONIC` in nanoseconds (a "1 GHz TSC").
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn rdtsc() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// Fallback for targets without a TSC: `CLOCK_MONOTONIC` in nanoseconds.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn rdtsc_ordered() -> u64 {
    rdtsc()
}

/// Frequency the fallback clock pretends to have (1 tick = 1 ns).
#[cfg(not(target_arch = "x86_64"))]
const FALLBACK_KHZ: u64 = 1_000_000;

fn clock_ns(clock: libc::clockid_t) -> io::Result<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec that the call fills in.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC_RAW` in nanoseconds: not slewed by NTP, so it is the right reference for a
/// hardware counter's rate.
pub fn monotonic_raw_ns() -> io::Result<u64> {
    clock_ns(libc::CLOCK_MONOTONIC_RAW)
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> io::Result<u64> {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Length of one calibration window.
pub const CALIBRATION_WINDOW: Duration = Duration::from_millis(25);
/// Two windows must agree this closely (parts per million) for the calibration to be accepted.
pub const AGREEMENT_PPM: f64 = 500.0;
/// Attempts before giving up; a nested VM's vCPU may be descheduled in any single window.
pub const CALIBRATION_ATTEMPTS: u32 = 5;
/// Largest accepted gap between our figure and the kernel's (parts per million). Both should be
/// within a few hundred ppm of the truth; beyond this one of them is wrong and timings would be too.
pub const REFERENCE_TOLERANCE_PPM: f64 = 2000.0;
/// A (clock, TSC) pair whose clock readings straddle more than this was interrupted; resample.
#[cfg(target_arch = "x86_64")]
const MAX_BRACKET_NS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum TscError {
    #[error(
        "the TSC is not usable as a clock here: /proc/cpuinfo lacks the {} flag{}, so its rate may \
         follow frequency changes or stop in idle states and TSC-based results would be wrong",
        missing.join(" and "),
        if missing.len() > 1 { "s" } else { "" }
    )]
    Unstable { missing: Vec<&'static str> },
    #[error(transparent)]
    CpuInfo(#[from] ReadError),
    #[error(
        "TSC calibration did not settle after {attempts} attempts: two {window_ms} ms windows gave \
         {a_khz:.0} and {b_khz:.0} kHz ({ppm:.0} ppm apart, limit {AGREEMENT_PPM} ppm); the machine \
         is too busy or its (virtual) CPU keeps being preempted"
    )]
    Unsettled { attempts: u32, window_ms: u128, a_khz: f64, b_khz: f64, ppm: f64 },
    #[error(
        "calibrated TSC frequency {measured_khz} kHz disagrees with the {source_name} value \
         {reference_khz} kHz by {ppm:.0} ppm (limit {REFERENCE_TOLERANCE_PPM} ppm)"
    )]
    ReferenceMismatch { measured_khz: u64, reference_khz: u64, source_name: &'static str, ppm: f64 },
    #[error("clock_gettime failed during TSC calibration: {0}")]
    Clock(#[source] io::Error),
    #[error("TSC frequency must be positive, got {0} kHz")]
    InvalidKhz(u64),
}

/// The kernel's (or firmware's) statement of the TSC frequency, used as a cross-check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TscReference {
    pub khz: u64,
    /// Where it came from, e.g. "kernel log (tsc: Detected)".
    pub source: &'static str,
}

/// Converts between TSC ticks and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TscClock {
    khz: u64,
    ns_per_tick: f64,
    /// Disagreement of the two calibration windows, when calibrated here.
    spread_ppm: Option<f64>,
    reference: Option<TscReference>,
}

impl TscClock {
    /// A clock with a known frequency, e.g. one a child process received from its parent (so both
    /// sides convert ticks identically and calibration runs once).
    pub fn from_khz(khz: u64) -> Result<TscClock, TscError> {
        if khz == 0 {
            return Err(TscError::InvalidKhz(khz));
        }
        Ok(TscClock { khz, ns_per_tick: 1e6 / khz as f64, spread_ppm: None, reference: None })
    }

    /// Checks that the TSC is a stable clock and measures its rate on the live system.
    pub fn calibrate() -> Result<TscClock, TscError> {
        Self::calibrate_in(&HostRoot::system())
    }

    /// [`calibrate`](Self::calibrate), reading `/proc/cpuinfo` and the kernel log under `root`
    /// (the measurement itself always uses this machine's TSC).
    #[cfg(target_arch = "x86_64")]
    pub fn calibrate_in(root: &HostRoot) -> Result<TscClock, TscError> {
        let cpuinfo = root.read("/proc/cpuinfo")?;
        check_tsc_flags(&cpuinfo)?;
        let (khz, spread) = measure_khz()?;
        let reference = tsc_reference(root);
        if let Some(r) = reference {
            let ppm = ppm_apart(khz as f64, r.khz as f64);
            if ppm > REFERENCE_TOLERANCE_PPM {
                return Err(TscError::ReferenceMismatch {
                    measured_khz: khz,
                    reference_khz: r.khz,
                    source_name: r.source,
                    ppm,
                });
            }
        }
        let mut clock = TscClock::from_khz(khz)?;
        clock.spread_ppm = Some(spread);
        clock.reference = reference;
        Ok(clock)
    }

    /// Without a TSC the fallback clock counts nanoseconds; nothing to calibrate.
    #[cfg(not(target_arch = "x86_64"))]
    pub fn calibrate_in(_root: &HostRoot) -> Result<TscClock, TscError> {
        TscClock::from_khz(FALLBACK_KHZ)
    }

    pub fn khz(&self) -> u64 {
        self.khz
    }

    /// How far apart the two accepted calibration windows were (ppm); `None` for [`from_khz`](Self::from_khz).
    pub fn spread_ppm(&self) -> Option<f64> {
        self.spread_ppm
    }

    /// The kernel's figure this calibration was checked against, if one was available.
    pub fn reference(&self) -> Option<TscReference> {
        self.reference
    }

    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> f64 {
        ticks as f64 * self.ns_per_tick
    }

    /// Nanoseconds to ticks, rounded; negative or NaN input gives 0.
    #[inline]
    pub fn ns_to_ticks(&self, ns: f64) -> u64 {
        (ns * self.khz as f64 / 1e6).round() as u64
    }

    /// Nanoseconds from `start` to `end` ticks (wrapping, so a counter wrap does not go negative).
    #[inline]
    pub fn elapsed_ns(&self, start: u64, end: u64) -> f64 {
        self.ticks_to_ns(end.wrapping_sub(start))
    }

    /// Current TSC value, ordered after preceding instructions.
    #[inline(always)]
    pub fn now_ticks(&self) -> u64 {
        rdtsc_ordered()
    }
}

/// Rejects a TSC that is not a clock: both `constant_tsc` and `nonstop_tsc` must be among the
/// `flags` of the first CPU in a `/proc/cpuinfo` text.
pub fn check_tsc_flags(cpuinfo: &str) -> Result<(), TscError> {
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "flags").then_some(v)
        })
        .map(|v| v.split_whitespace().collect())
        .unwrap_or_default();
    let missing: Vec<&'static str> =
        ["constant_tsc", "nonstop_tsc"].into_iter().filter(|f| !flags.contains(f)).collect();
    if missing.is_empty() { Ok(()) } else { Err(TscError::Unstable { missing }) }
}

#[cfg(target_arch = "x86_64")]
fn ppm_apart(a: f64, b: f64) -> f64 {
    (a - b).abs() / ((a + b) / 2.0) * 1e6
}

/// One (clock ns, TSC) pair: the TSC read is bracketed by two clock reads and the narrowest of a
/// few tries is kept, so an interruption between the reads does not skew the pair.
#[cfg(target_arch = "x86_64")]
fn sample_pair() -> Result<Option<(u64, u64)>, TscError> {
    let mut best: Option<(u64, u64, u64)> = None;
    for _ in 0..8 {
        let c0 = monotonic_raw_ns().map_err(TscError::Clock)?;
        let t = rdtsc_ordered();
        let c1 = monotonic_raw_ns().map_err(TscError::Clock)?;
        let bracket = c1.saturating_sub(c0);
        if best.is_none_or(|(b, _, _)| bracket < b) {
            best = Some((bracket, c0 + bracket / 2, t));
        }
    }
    Ok(best.and_then(|(bracket, ns, t)| (bracket <= MAX_BRACKET_NS).then_some((ns, t))))
}

/// TSC kHz over one window, or `None` if a sample was disturbed.
#[cfg(target_arch = "x86_64")]
fn window_khz(window: Duration) -> Result<Option<f64>, TscError> {
    let Some((ns0, t0)) = sample_pair()? else {
        return Ok(None);
    };
    std::thread::sleep(window);
    let Some((ns1, t1)) = sample_pair()? else {
        return Ok(None);
    };
    let dns = ns1.saturating_sub(ns0);
    let dt = t1.wrapping_sub(t0);
    if dns == 0 || dt == 0 {
        return Ok(None);
    }
    Ok(Some(dt as f64 * 1e6 / dns as f64))
}

/// Measures the TSC rate over two windows until they agree; returns kHz and their spread in ppm.
#[cfg(target_arch = "x86_64")]
fn measure_khz() -> Result<(u64, f64), TscError> {
    let mut last = (0.0, 0.0, f64::INFINITY);
    for _ in 0..CALIBRATION_ATTEMPTS {
        let (Some(a), Some(b)) = (window_khz(CALIBRATION_WINDOW)?, window_khz(CALIBRATION_WINDOW)?) else {
            continue;
        };
        let ppm = ppm_apart(a, b);
        if ppm <= AGREEMENT_PPM {
            return Ok((((a + b) / 2.0).round() as u64, ppm));
        }
        last = (a, b, ppm);
    }
    Err(TscError::Unsettled {
        attempts: CALIBRATION_ATTEMPTS,
        window_ms: CALIBRATION_WINDOW.as_millis(),
        a_khz: last.0,
        b_khz: last.1,
        ppm: last.2,
    })
}

/// The TSC frequency as the kernel or firmware states it, best source first:
/// the kernel's refined calibration, its boot-time detection (both from the kernel log), the
/// `tsc_freq_khz` sysfs file some kernels add, and CPUID leaves 0x40000010 (hypervisor timing
/// leaf) and 0x15 (TSC/crystal ratio). CPUID is consulted only on the live system.
pub fn tsc_reference(root: &HostRoot) -> Option<TscReference> {
    if let Ok(log) = root.kernel_log() {
        if let Some(r) = tsc_reference_from_log(&log) {
            return Some(r);
        }
    }
    if let Ok(Some(text)) = root.read_optional("/sys/devices/system/cpu/cpu0/tsc_freq_khz") {
        if let Ok(khz) = text.trim().parse::<u64>() {
            if khz > 0 {
                return Some(TscReference { khz, source: "sysfs tsc_freq_khz" });
            }
        }
    }
    if root.is_system() { cpuid_tsc_khz() } else { None }
}

/// Finds the kernel's TSC frequency in kernel log messages; the refined calibration wins.
pub fn tsc_reference_from_log<S: AsRef<str>>(messages: &[S]) -> Option<TscReference> {
    let mut detected = None;
    for m in messages {
        let m = m.as_ref();
        if let Some(rest) = m.strip_prefix("tsc: Refined TSC clocksource calibration: ") {
            if let Some(khz) = parse_mhz_as_khz(rest) {
                return Some(TscReference { khz, source: "kernel log (tsc: Refined TSC clocksource calibration)" });
            }
        }
        if let Some(rest) = m.strip_prefix("tsc: Detected ") {
            if let Some(khz) = parse_mhz_as_khz(rest) {
                detected = Some(TscReference { khz, source: "kernel log (tsc: Detected)" });
            }
        }
    }
    detected
}

/// "2596.122 MHz ..." → 2596122. Exact decimal parsing (the kernel prints kHz precision).
fn parse_mhz_as_khz(text: &str) -> Option<u64> {
    let (num, rest) = text.trim().split_once(' ')?;
    if !rest.starts_with("MHz") {
        return None;
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let mhz: u64 = int.parse().ok()?;
    let mut frac3 = String::from(frac);
    if frac3.len() > 3 || !frac3.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    while frac3.len() < 3 {
        frac3.push('0');
    }
    let khz_frac: u64 = frac3.parse().ok()?;
    let khz = mhz.checked_mul(1000)?.checked_add(khz_frac)?;
    (khz > 0).then_some(khz)
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn cpuid(leaf: u32) -> core::arch::x86_64::CpuidResult {
    // SAFETY: CPUID exists on every x86_64 CPU and only reads identification registers; out-of-range
    // leaves return zeros or the highest basic leaf. (Safe to call on newer toolchains, hence the
    // allow.)
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::__cpuid(leaf)
    }
}

#[cfg(target_arch = "x86_64")]
fn cpuid_tsc_khz() -> Option<TscReference> {
    let hv_max = cpuid(0x4000_0000).eax;
    if (0x4000_0010..0x4000_0100).contains(&hv_max) {
        let khz = cpuid(0x4000_0010).eax as u64;
        if khz > 0 {
            return Some(TscReference { khz, source: "hypervisor CPUID leaf 0x40000010" });
        }
    }
    if cpuid(0).eax >= 0x15 {
        let l = cpuid(0x15);
        if l.eax != 0 && l.ebx != 0 && l.ecx != 0 {
            let hz = l.ecx as u64 * l.ebx as u64 / l.eax as u64;
            if hz >= 1000 {
                return Some(TscReference { khz: hz / 1000, source: "CPUID leaf 0x15" });
            }
        }
    }
    None
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_tsc_khz() -> Option<TscReference> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_must_include_constant_and_nonstop_tsc() {
        let good = "processor\t: 0\nflags\t\t: fpu tsc constant_tsc nonstop_tsc rdtscp\n";
        assert!(check_tsc_flags(good).is_ok());
        let e = check_tsc_flags("flags\t\t: fpu tsc constant_tsc\n").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("nonstop_tsc") && msg.contains("wrong"), "{msg}");
        assert!(!msg.contains("constant_tsc"), "{msg}");
        match check_tsc_flags("model name : x\n").unwrap_err() {
            TscError::Unstable { missing } => {
                assert_eq!(missing, vec!["constant_tsc", "nonstop_tsc"])
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn kernel_log_reference_prefers_refined() {
        let log = [
            "tsc: Detected 2596.122 MHz processor",
            "clocksource: Switched to clocksource tsc",
            "tsc: Refined TSC clocksource calibration: 2596.1 MHz",
        ];
        let r = tsc_reference_from_log(&log).unwrap();
        assert_eq!(r.khz, 2_596_100);
        assert!(r.source.contains("Refined"));
        let r = tsc_reference_from_log(&log[..2]).unwrap();
        assert_eq!(r.khz, 2_596_122);
        assert!(tsc_reference_from_log(&["nothing here"]).is_none());
        assert_eq!(parse_mhz_as_khz("3000 MHz processor"), Some(3_000_000));
        assert_eq!(parse_mhz_as_khz("3000.1234 MHz"), None);
        assert_eq!(parse_mhz_as_khz("abc MHz"), None);
    }

    #[test]
    fn calibration_rejects_unstable_tsc_and_wrong_kernel_figure() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path();
        std::fs::create_dir_all(b.join("proc")).unwrap();
        std::fs::create_dir_all(b.join("dev")).unwrap();
        std::fs::write(b.join("proc/cpuinfo"), "flags\t\t: fpu tsc nonstop_tsc\n").unwrap();
        let root = HostRoot::at(b);
        let e = TscClock::calibrate_in(&root).unwrap_err();
        assert!(matches!(&e, TscError::Unstable { missing } if missing == &vec!["constant_tsc"]), "{e}");

        if cfg!(target_arch = "x86_64") {
            std::fs::write(b.join("proc/cpuinfo"), "flags\t\t: fpu tsc constant_tsc nonstop_tsc\n").unwrap();
            // A kernel figure far from any real TSC rate: the measurement must be refused.
            std::fs::write(b.join("dev/kmsg"), "6,1,0,-;tsc: Detected 1.000 MHz processor\n").unwrap();
            match TscClock::calibrate_in(&root) {
                Err(TscError::ReferenceMismatch { reference_khz, .. }) => {
                    assert_eq!(reference_khz, 1000)
                }
                // Calibration can also fail to settle on a busy machine; anything else is a bug.
                Err(TscError::Unsettled { .. }) => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn conversions_round_trip() {
        let c = TscClock::from_khz(2_500_000).unwrap();
        assert_eq!(c.khz(), 2_500_000);
        assert!((c.ticks_to_ns(2_500) - 1_000.0).abs() < 1e-9);
        assert_eq!(c.ns_to_ticks(1_000.0), 2_500);
        assert_eq!(c.ns_to_ticks(-5.0), 0);
        assert!((c.elapsed_ns(u64::MAX - 1_249, 1_250) - 1_000.0).abs() < 1e-9);
        assert!(matches!(TscClock::from_khz(0), Err(TscError::InvalidKhz(0))));
    }

    #[test]
    fn ordered_reads_do_not_go_backwards() {
        let a = rdtsc_ordered();
        let b = rdtsc_ordered();
        assert!(b >= a);
        assert!(rdtsc() > 0);
    }

    /// Calibrates, then times a 20 ms sleep with both the TSC and CLOCK_MONOTONIC; they must agree
    /// within 5 % (generous: a nested VM may stretch either reading).
    #[test]
    fn calibration_agrees_with_monotonic_clock() {
        let clock = match TscClock::calibrate() {
            Ok(c) => c,
            Err(e @ TscError::Unstable { .. }) => {
                rtcell_testkit::skip(&e.to_string());
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert!(clock.khz() > 0);
        assert!(clock.spread_ppm().is_some_and(|p| p <= AGREEMENT_PPM));
        let m0 = monotonic_ns().unwrap();
        let t0 = clock.now_ticks();
        std::thread::sleep(Duration::from_millis(20));
        let t1 = clock.now_ticks();
        let m1 = monotonic_ns().unwrap();
        let tsc_ns = clock.elapsed_ns(t0, t1);
        let mono_ns = (m1 - m0) as f64;
        let ratio = tsc_ns / mono_ns;
        assert!((0.95..=1.05).contains(&ratio), "tsc {tsc_ns} ns vs monotonic {mono_ns} ns");
    }
}
