//! CLOCK_MONOTONIC reads and absolute sleeps: the release clock of every task.

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

/// Sleeps for `ns` from now.
pub fn sleep_ns(ns: u64) {
    sleep_until(mono_ns().saturating_add(ns));
}
