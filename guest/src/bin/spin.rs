//! Periodic activation on a polled TSC: activation `k` is due at `start + k * period`; the payload
//! busy-polls the TSC until then and records how late it woke (ns): in a histogram, in a log of every
//! activation, or both, which the host reads. An activation more than a period late is an overrun: the
//! schedule skips to the next period still ahead, and the log counts the releases skipped. Every
//! activation is a heartbeat.
//!
//! Arguments: `cell=<name> hist=<raw channel> log=<raw channel> period_ns=<ns, default 1000000>
//! bucket_ns=<ns, default 1000> sleep_ns=<ns, default 0>`; at least one of `hist` and `log`. The histogram
//! gets as many buckets as its channel holds (`rtcell_shm::histogram::bytes_for`), the log as many values
//! (`rtcell_shm::samplelog::bytes_for`). With `sleep_ns`, the vCPU sleeps that long on the host right
//! after each activation (hypercall `HC_SLEEP`) when more than twice that time is left before the next
//! release, to give back CPU time the host's real-time throttling would otherwise take from the loop.

#![no_std]
#![no_main]

use rtcell_guest::abi::BootInfo;
use rtcell_guest::rt::{Clock, rdtsc};
use rtcell_payloads::{arg_or, control, fault, region};
use rtcell_shm::control::CellState;
use rtcell_shm::histogram::{HEADER_WORDS, HistogramWriter, MAX_BUCKETS};
use rtcell_shm::samplelog::SampleLogWriter;

rtcell_guest::entry!(main);

/// Longest period accepted (so `k * period` cannot come near wrapping the TSC).
const MAX_PERIOD_NS: u64 = 60_000_000_000;

fn main(boot: &'static BootInfo) -> i32 {
    let region = region(boot, "spin");
    let ctl = control(boot, &region, "spin");
    let period_ns: u64 = arg_or(boot, "spin", "period_ns", 1_000_000);
    let bucket_ns: u64 = arg_or(boot, "spin", "bucket_ns", 1000);
    let sleep_ns: u32 = arg_or(boot, "spin", "sleep_ns", 0);
    let mut hist = match boot.arg("hist") {
        None => None,
        Some(name) => {
            let words = match region.raw(name) {
                Ok(w) => w,
                Err(e) => return fault(&ctl, format_args!("spin: histogram {name}: {e}")),
            };
            let nbuckets = words.len().saturating_sub(HEADER_WORDS).min(MAX_BUCKETS);
            match HistogramWriter::init(words, bucket_ns, nbuckets) {
                Ok(h) => Some(h),
                Err(e) => return fault(&ctl, format_args!("spin: histogram {name}: {e}")),
            }
        }
    };
    let mut log = match boot.arg("log") {
        None => None,
        Some(name) => {
            let words = match region.raw(name) {
                Ok(w) => w,
                Err(e) => return fault(&ctl, format_args!("spin: sample log {name}: {e}")),
            };
            match SampleLogWriter::init(words) {
                Ok(l) => {
                    l.prefault();
                    Some(l)
                }
                Err(e) => return fault(&ctl, format_args!("spin: sample log {name}: {e}")),
            }
        }
    };
    if hist.is_none() && log.is_none() {
        return fault(&ctl, format_args!("spin: give hist=<channel>, log=<channel> or both"));
    }
    let clock = Clock::from_boot(boot);
    let period = clock.ns_to_ticks(period_ns);
    if period == 0 || period_ns > MAX_PERIOD_NS {
        return fault(&ctl, format_args!("spin: period_ns={period_ns} is not between a TSC tick and 60 s"));
    }
    // Sleep only when twice the sleep is still ahead: the rest of the period is polled.
    let sleep_window = clock.ns_to_ticks(2 * u64::from(sleep_ns));
    rtcell_guest::log!(
        "spin: period {period_ns} ns = {period} TSC ticks at {} kHz; sleep {sleep_ns} ns per period",
        clock.tsc_khz()
    );

    ctl.set_running(0);
    let start = rdtsc();
    let mut k: u64 = 1;
    loop {
        let due = start.wrapping_add(k.wrapping_mul(period));
        let mut now = rdtsc();
        if sleep_ns > 0 && (due.wrapping_sub(now) as i64) > sleep_window as i64 {
            rtcell_guest::rt::sleep_ns(sleep_ns);
            now = rdtsc();
        }
        // Wrapping difference read as signed: correct even if the TSC wrapped.
        while (now.wrapping_sub(due) as i64) < 0 {
            if ctl.stop_requested() {
                ctl.finish(CellState::Stopped, 0, "");
                return 0;
            }
            core::hint::spin_loop();
            now = rdtsc();
        }
        let late = now.wrapping_sub(due);
        let late_ns = clock.ticks_to_ns(late);
        if let Some(h) = hist.as_mut() {
            h.record(late_ns);
        }
        if let Some(l) = log.as_mut() {
            l.push(late_ns);
        }
        ctl.beat();
        ctl.add_handled(1);
        if ctl.stop_requested() {
            ctl.finish(CellState::Stopped, 0, "");
            return 0;
        }
        if late > period {
            if let Some(h) = hist.as_mut() {
                h.record_overrun();
            }
            // The first activation still ahead of now; the ones in between are skipped.
            let next = now.wrapping_sub(start) / period + 1;
            if let Some(l) = log.as_mut() {
                l.add_overruns(next.saturating_sub(k + 1));
            }
            k = next;
        } else {
            k += 1;
        }
    }
}
