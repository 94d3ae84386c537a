//! Periodic activation on a polled TSC: activation `k` is due at `start + k * period`; the payload
//! busy-polls the TSC until then and records how late it woke (ns) in a histogram the host reads. An
//! activation more than a period late counts as an overrun, and the schedule skips to the next period
//! still ahead. Every activation is a heartbeat.
//!
//! Arguments: `cell=<name> hist=<raw channel> period_ns=<ns, default 1000000> bucket_ns=<ns, default 1000>`.
//! The histogram gets as many buckets as its channel holds (`rtcell_shm::histogram::bytes_for`).

#![no_std]
#![no_main]

use rtcell_guest::abi::BootInfo;
use rtcell_guest::rt::{Clock, rdtsc};
use rtcell_payloads::{arg, arg_or, control, fault, region};
use rtcell_shm::control::CellState;
use rtcell_shm::histogram::{HEADER_WORDS, HistogramWriter, MAX_BUCKETS};

rtcell_guest::entry!(main);

/// Longest period accepted (so `k * period` cannot come near wrapping the TSC).
const MAX_PERIOD_NS: u64 = 60_000_000_000;

fn main(boot: &'static BootInfo) -> i32 {
    let region = region(boot, "spin");
    let ctl = control(boot, &region, "spin");
    let period_ns: u64 = arg_or(boot, "spin", "period_ns", 1_000_000);
    let bucket_ns: u64 = arg_or(boot, "spin", "bucket_ns", 1000);
    let hist_name = arg(boot, "spin", "hist");
    let words = match region.raw(hist_name) {
        Ok(w) => w,
        Err(e) => return fault(&ctl, format_args!("spin: histogram {hist_name}: {e}")),
    };
    let nbuckets = words.len().saturating_sub(HEADER_WORDS).min(MAX_BUCKETS);
    let mut hist = match HistogramWriter::init(words, bucket_ns, nbuckets) {
        Ok(h) => h,
        Err(e) => return fault(&ctl, format_args!("spin: histogram {hist_name}: {e}")),
    };
    let clock = Clock::from_boot(boot);
    let period = clock.ns_to_ticks(period_ns);
    if period == 0 || period_ns > MAX_PERIOD_NS {
        return fault(&ctl, format_args!("spin: period_ns={period_ns} is not between a TSC tick and 60 s"));
    }
    rtcell_guest::log!(
        "spin: period {period_ns} ns = {period} TSC ticks at {} kHz; {nbuckets} buckets of {bucket_ns} ns",
        clock.tsc_khz()
    );

    ctl.set_running(0);
    let start = rdtsc();
    let mut k: u64 = 1;
    loop {
        let due = start.wrapping_add(k.wrapping_mul(period));
        let mut now = rdtsc();
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
        hist.record(clock.ticks_to_ns(late));
        ctl.beat();
        ctl.add_handled(1);
        if ctl.stop_requested() {
            ctl.finish(CellState::Stopped, 0, "");
            return 0;
        }
        if late > period {
            hist.record_overrun();
            // The first activation still ahead of now.
            k = now.wrapping_sub(start) / period + 1;
        } else {
            k += 1;
        }
    }
}
