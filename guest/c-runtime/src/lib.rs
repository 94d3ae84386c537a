//! The runtime of KVM payloads written in C (`librtcell_payload.a`).
//!
//! A C payload is the user's freestanding objects linked with this archive and the SDK's `payload.ld`
//! into a static ELF. The archive holds everything else the payload needs: the entry point `_start`,
//! panic reporting, the C API (`rtcell_capi`, no_std: `Com_SendSignal`, `rtcell_queue_send`, ...) and
//! `memcpy`/`memset`/`memmove`/`memcmp`/`strlen`. The user's code provides two functions:
//!
//! - `void rtcell_cell_init(void)`: called once, before the first step (the SDK recipe maps it to the
//!   user's name with `--defsym`, or to [`rtcell_payload_no_init`] when there is none);
//! - `void rtcell_cell_step(void)`: called every period.
//!
//! Arguments (`key=value` lines of the boot-info page):
//!
//! - `cell=<name>`: the cell, whose control block is in the region (required);
//! - `com=<a,b,...>`: the COM channels the C code uses (empty or absent: every COM channel);
//! - `period_ns=<ns>`: step period on the guest TSC, on an absolute release grid; 0 (the default) calls
//!   the step back to back;
//! - `sleep_ns=<ns>`: with a period, sleep that long on the host after a step when more than twice that
//!   time is left before the next release (gives CPU time back to the host's real-time throttling).
//!
//! The loop beats the heartbeat at every release (at least every millisecond when stepping back to
//! back), counts steps as handled, and checks for a stop request at least every millisecond while it
//! waits. A release more than a period late is an overrun: the grid skips to the next release still
//! ahead. Anything wrong at start-up ends the cell as faulted with the reason.

#![no_std]

use core::ffi::{CStr, c_char, c_void};
use core::ptr;

use rtcell_guest::abi::{ARGS_SIZE, BootInfo};
use rtcell_guest::rt::{self, Clock, rdtsc};
use rtcell_payloads::{arg_or, control, fault, region};
use rtcell_shm::control::{CellState, ControlBlock};

rtcell_guest::entry!(main);

unsafe extern "C" {
    /// The user's initialisation, called once (the recipe's `INIT`).
    fn rtcell_cell_init();
    /// The user's step, called every period (the recipe's `STEP`).
    fn rtcell_cell_step();
}

/// The `rtcell_cell_init` of a payload without one: does nothing.
#[unsafe(no_mangle)]
pub extern "C" fn rtcell_payload_no_init() {}

/// Length of the NUL-terminated string at `s`. With `memcpy` and friends (in `rtcell_guest::rt`), the
/// C library function the compiler and `core` call (`CStr::from_ptr`), which C code may use too.
///
/// # Safety
/// `s` points to a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn strlen(s: *const c_char) -> usize {
    let mut n = 0;
    // SAFETY: the caller guarantees a terminator at or after `s`, and the loop stops at the first one.
    // Volatile, so LLVM cannot recognise the loop as a strlen and call this very function.
    while unsafe { s.add(n).read_volatile() } != 0 {
        n += 1;
    }
    n
}

/// Most COM channels `com=` may name.
const MAX_CHANNELS: usize = 64;
/// Longest period accepted (so the release grid cannot come near wrapping the TSC).
const MAX_PERIOD_NS: u64 = 60_000_000_000;
/// Longest time between two stop checks and heartbeats while waiting or stepping back to back.
const CHECK_NS: u64 = 1_000_000;

/// NUL-terminated copies of the channel names of `com=`, and pointers to them.
struct Channels {
    text: [u8; ARGS_SIZE + 1],
    ptrs: [*const c_char; MAX_CHANNELS],
    count: usize,
}

impl Channels {
    /// Splits `list` at commas; names are trimmed, empty ones skipped. `Err` with the number of names
    /// when there are more than `MAX_CHANNELS`.
    fn parse(&mut self, list: &str) -> Result<(), usize> {
        let names = list.split(',').map(str::trim).filter(|s| !s.is_empty());
        let n = names.clone().count();
        if n > MAX_CHANNELS {
            return Err(n);
        }
        let mut at = 0;
        for name in names {
            // The names and their terminators take at most list.len() + 1 bytes: `list` is part of the
            // arguments, so they fit in `text`.
            let end = at + name.len();
            self.text[at..end].copy_from_slice(name.as_bytes());
            self.text[end] = 0;
            self.ptrs[self.count] = self.text[at..].as_ptr().cast();
            self.count += 1;
            at = end + 1;
        }
        Ok(())
    }
}

/// The C API's last error message.
fn last_error() -> &'static str {
    let p = rtcell_capi::rtcell_last_error();
    if p.is_null() {
        return "";
    }
    // SAFETY: rtcell_last_error returns a NUL-terminated string in the C API's static storage, which
    // stays valid until the next failing call; it is only read here, before any other call.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("(message not UTF-8)")
}

fn main(boot: &'static BootInfo) -> i32 {
    const WHO: &str = "c payload";
    let region = region(boot, WHO);
    let ctl = control(boot, &region, WHO);
    let period_ns: u64 = arg_or(boot, WHO, "period_ns", 0);
    let sleep_ns: u32 = arg_or(boot, WHO, "sleep_ns", 0);
    if period_ns > MAX_PERIOD_NS {
        return fault(&ctl, format_args!("{WHO}: period_ns={period_ns} is above 60 s"));
    }
    let com = boot.arg("com").unwrap_or("").trim();
    let mut channels = Channels { text: [0; ARGS_SIZE + 1], ptrs: [ptr::null(); MAX_CHANNELS], count: 0 };
    if let Err(n) = channels.parse(com) {
        return fault(&ctl, format_args!("{WHO}: com= names {n} channels, at most {MAX_CHANNELS}"));
    }

    // A payload deployed on its own (no COM channel in its region, none asked for) runs without the
    // C API bound: its COM calls then answer E_NOT_OK.
    let any_com = (0..region.len()).any(|i| region.entry(i).is_ok_and(|e| e.kind == rtcell_shm::ChannelKind::Com));
    if com.is_empty() && !any_com {
        rtcell_guest::log!("{WHO}: the region has no COM channel: the C API is not bound");
    } else {
        // The same memory the region view reads, handed to the C API as the region of this payload.
        let words = rt::region(boot);
        let (base, len) = (words.as_ptr() as *mut c_void, core::mem::size_of_val(words));
        let list = if channels.count == 0 { ptr::null() } else { channels.ptrs.as_ptr() };
        // SAFETY: `base..base + len` is the channel region, mapped for the whole run and only accessed
        // through atomics; `list` is null (count 0) or points to `count` NUL-terminated names in `channels`,
        // which lives until `main` returns, as long as the payload runs.
        let rc = unsafe { rtcell_capi::com::rtcell_cell_attach(base, len, list, channels.count) };
        if rc != rtcell_capi::E_OK {
            let which = if com.is_empty() { "every COM channel" } else { com };
            return fault(&ctl, format_args!("{WHO}: attaching the C API to {which}: {}", last_error()));
        }
    }

    let clock = Clock::from_boot(boot);
    let period = clock.ns_to_ticks(period_ns);
    if period_ns > 0 && period == 0 {
        return fault(&ctl, format_args!("{WHO}: period_ns={period_ns} is shorter than a TSC tick"));
    }
    rtcell_guest::log!(
        "{WHO}: period {period_ns} ns ({period} TSC ticks at {} kHz), COM channels: {}",
        clock.tsc_khz(),
        if com.is_empty() { "all" } else { com }
    );

    // SAFETY: the C function the payload was linked with (or the runtime's no-op); it takes nothing
    // and returns nothing. What it does to memory is the C code's responsibility: the VM contains it.
    unsafe { rtcell_cell_init() };
    ctl.set_running(0); // no CLOCK_MONOTONIC here: the supervisor times the start itself
    let check = clock.ns_to_ticks(CHECK_NS).max(1);
    if period == 0 {
        back_to_back(&ctl, check)
    } else {
        periodic(&ctl, period, check, clock.ns_to_ticks(2 * u64::from(sleep_ns)), sleep_ns)
    }
}

/// Ends the cell as stopped on request.
fn stopped(ctl: &ControlBlock<'_>) -> i32 {
    ctl.finish(CellState::Stopped, 0, "");
    0
}

/// Calls the step back to back; beats and checks for a stop at least every `check` TSC ticks.
fn back_to_back(ctl: &ControlBlock<'_>, check: u64) -> i32 {
    let mut last = rdtsc();
    loop {
        // SAFETY: as for rtcell_cell_init.
        unsafe { rtcell_cell_step() };
        ctl.add_handled(1);
        let now = rdtsc();
        if now.wrapping_sub(last) >= check {
            last = now;
            ctl.beat();
            if ctl.stop_requested() {
                return stopped(ctl);
            }
        }
    }
}

/// Calls the step at `start + k * period` (TSC ticks), busy-waiting for each release.
fn periodic(ctl: &ControlBlock<'_>, period: u64, check: u64, sleep_window: u64, sleep_ns: u32) -> i32 {
    let start = rdtsc();
    let mut k: u64 = 0;
    loop {
        let due = start.wrapping_add(k.wrapping_mul(period));
        let mut now = rdtsc();
        if sleep_ns > 0 && (due.wrapping_sub(now) as i64) > sleep_window as i64 {
            rt::sleep_ns(sleep_ns);
            now = rdtsc();
        }
        let mut last_check = now;
        // Wrapping difference read as signed: correct even if the TSC wrapped.
        while (now.wrapping_sub(due) as i64) < 0 {
            if now.wrapping_sub(last_check) >= check {
                last_check = now;
                ctl.beat();
                if ctl.stop_requested() {
                    return stopped(ctl);
                }
            }
            core::hint::spin_loop();
            now = rdtsc();
        }
        // SAFETY: as for rtcell_cell_init.
        unsafe { rtcell_cell_step() };
        ctl.add_handled(1);
        ctl.beat();
        if ctl.stop_requested() {
            return stopped(ctl);
        }
        let late = now.wrapping_sub(due);
        k = if late > period {
            // The first release still ahead; the ones in between are skipped.
            rdtsc().wrapping_sub(start) / period + 1
        } else {
            k + 1
        };
    }
}
