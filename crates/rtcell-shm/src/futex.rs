//! Futex wait and wake on a shared 64-bit word (its low 32 bits), for the sides allowed to sleep.
//! Shared futexes (no FUTEX_PRIVATE_FLAG), because the word may live in memory shared between processes.

use core::sync::atomic::AtomicU64;

#[cfg(not(target_endian = "little"))]
compile_error!("futex words use the low half of a u64 word: little-endian targets only");

/// Sleeps while the low 32 bits of `word` equal the low 32 bits of `seen`, at most `timeout_ns`.
/// Returns early on a wake-up, a signal, or a changed word; callers re-check their condition.
pub fn wait(word: &AtomicU64, seen: u64, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: the futex syscall only reads the 32-bit value at the word's address (valid, aligned, and
    // alive for the call) and the timespec on our stack; it does not write user memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr() as *const u32,
            libc::FUTEX_WAIT,
            seen as u32,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every sleeper on `word`.
pub fn wake_all(word: &AtomicU64) {
    // SAFETY: FUTEX_WAKE reads nothing but the address, which is valid for the call.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr() as *const u32, libc::FUTEX_WAKE, i32::MAX);
    }
}
