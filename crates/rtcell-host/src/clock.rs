//! CLOCK_MONOTONIC reads and absolute sleeps: the one clock of tasks, cells, benchmark releases and the
//! supervisor (`Instant` reads the same clock, but a time that crosses a shared-memory region or a process
//! boundary is kept in these nanoseconds).

/// CLOCK_MONOTONIC in ns (vDSO: no system call).
#[inline]
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own; CLOCK_MONOTONIC always exists on Linux, so the
    // call cannot fail and the zero value is never used.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (absolute, so a late wake-up never shifts the
/// schedule). Returns at once if the time is already past.
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: `ts` is a valid timespec that outlives the call; the remaining-time pointer may be
        // null with TIMER_ABSTIME.
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, core::ptr::null_mut()) };
        // clock_nanosleep returns the error number; only EINTR (a signal) means "sleep again".
        if rc != libc::EINTR {
            return;
        }
    }
}

/// Longest slice of a sleep that honours a stop: a stop is seen within this (100 ms).
pub const STOP_SLICE_NS: u64 = 100_000_000;

/// [`sleep_until`], in slices of at most [`STOP_SLICE_NS`] while more than one slice is left, checking
/// `stopped` after each: `false` when a stop came first. A sleep shorter than a slice (any period below
/// 100 ms) is the one absolute sleep of [`sleep_until`], so short-period tasks are unchanged.
pub fn sleep_until_or_stop(deadline_ns: u64, stopped: &dyn Fn() -> bool) -> bool {
    loop {
        let now = mono_ns();
        if deadline_ns.saturating_sub(now) <= STOP_SLICE_NS {
            sleep_until(deadline_ns);
            return true;
        }
        sleep_until(now + STOP_SLICE_NS);
        if stopped() {
            return false;
        }
    }
}

/// Sleeps for `ns` from now.
pub fn sleep_ns(ns: u64) {
    sleep_until(mono_ns().saturating_add(ns));
}
