//! Periodic activation on a polled TSC, the host twin of the kvm `spin` payload: activation `k` is due at
//! `start + k * period`; the cell busy-polls the TSC until then and appends how late it got there (ns) to
//! a sample log in the region. No timer interrupt is on that path: this is how a dedicated core runs a
//! control loop. An activation more than a period late skips the releases already past (counted as
//! overruns in the log).
//!
//! With `sleep_ns`, the cell sleeps that long right after each activation, when more than twice that is
//! left before the next release. Why: Linux stops a SCHED_FIFO thread that never sleeps for
//! `sched_rt_period_us - sched_rt_runtime_us` of every period (50 ms each second by default), which would
//! put a 50 ms activation into the log once a second. Sleeping early in the period, far from the release
//! the busy-poll then meets, keeps the thread inside its budget; a wake-up later than the rest of the
//! period would still show as lateness, so nothing is hidden.

use rtcell_host::tsc::rdtsc_ordered;
use rtcell_shm::RegionView;
use rtcell_shm::samplelog::SampleLogWriter;

use crate::WorkloadEnd;
use crate::control::ControlBlock;

/// Longest period accepted (so `k * period` cannot come near wrapping the TSC).
pub const MAX_PERIOD_NS: u64 = 60_000_000_000;

/// Runs the activation loop until a stop is requested.
pub fn run(
    region: &RegionView<'_>,
    ctl: &ControlBlock<'_>,
    log: &str,
    period_ns: u64,
    sleep_ns: u64,
    tsc_khz: u64,
) -> WorkloadEnd {
    let words = match region.raw(log) {
        Ok(w) => w,
        Err(e) => return WorkloadEnd::Faulted(format!("poll: sample log {log}: {e}")),
    };
    let mut samples = match SampleLogWriter::init(words) {
        Ok(l) => l,
        Err(e) => return WorkloadEnd::Faulted(format!("poll: sample log {log}: {e}")),
    };
    samples.prefault();
    let ticks = |ns: u64| (u128::from(ns) * u128::from(tsc_khz) / 1_000_000) as u64;
    let period = ticks(period_ns);
    if tsc_khz == 0 || period == 0 || period_ns > MAX_PERIOD_NS {
        return WorkloadEnd::Faulted(format!(
            "poll: period {period_ns} ns at TSC {tsc_khz} kHz is not between a TSC tick and 60 s"
        ));
    }
    let sleep = libc::timespec { tv_sec: (sleep_ns / 1_000_000_000) as _, tv_nsec: (sleep_ns % 1_000_000_000) as _ };
    let sleep_window = ticks(2 * sleep_ns);
    ctl.set_running(rtcell_host::clock::mono_ns());
    let start = rdtsc_ordered();
    let mut k: u64 = 1;
    loop {
        let due = start.wrapping_add(k.wrapping_mul(period));
        let mut now = rdtsc_ordered();
        if sleep_ns > 0 && (due.wrapping_sub(now) as i64) > sleep_window as i64 {
            // SAFETY: clock_nanosleep reads the timespec we own; no remainder is asked for.
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &sleep, std::ptr::null_mut()) };
            now = rdtsc_ordered();
        }
        // Wrapping difference read as signed: correct even if the TSC wrapped.
        while (now.wrapping_sub(due) as i64) < 0 {
            if ctl.stop_requested() {
                return WorkloadEnd::Stopped;
            }
            core::hint::spin_loop();
            now = rdtsc_ordered();
        }
        let late = now.wrapping_sub(due);
        samples.push((u128::from(late) * 1_000_000 / u128::from(tsc_khz)) as u64);
        ctl.beat();
        ctl.add_handled(1);
        if ctl.stop_requested() {
            return WorkloadEnd::Stopped;
        }
        if late > period {
            let next = now.wrapping_sub(start) / period + 1;
            samples.add_overruns(next.saturating_sub(k + 1));
            k = next;
        } else {
            k += 1;
        }
    }
}
