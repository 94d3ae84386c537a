//! The cell control block lives in the channel layer (`rtcell_shm::control`) so that every cell kind,
//! VM payloads included, uses the same one. This adds the host clock the thread and process cells use.

pub use rtcell_shm::control::*;

/// CLOCK_MONOTONIC in ns: when a host cell reports running, and when the supervisor spawned it.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
