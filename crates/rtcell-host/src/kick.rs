//! Kick signals: real-time signals with a no-op handler, sent to one thread (`pthread_kill`) to make a
//! blocking system call it is in (`KVM_RUN`, a read, a write, a timed wait) return EINTR.
//!
//! Design: one registry of the process's kick signals, so two users never take the same number and every
//! handler is installed the same way: once per process, an empty mask and no SA_RESTART (a restarted
//! call would not see the kick).

use std::sync::OnceLock;

/// A kick signal, by its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kick {
    /// Stops a vCPU in `KVM_RUN` (the kvm monitor).
    Vcpu,
    /// Interrupts a bench side blocked in a read, write or wait when its measurement stops.
    BenchWait,
}

impl Kick {
    /// The signal number. glibc keeps the two signals below `SIGRTMIN()` for itself.
    pub fn signal(self) -> i32 {
        libc::SIGRTMIN()
            + match self {
                Kick::Vcpu => 2,
                Kick::BenchWait => 3,
            }
    }

    /// Installs the no-op handler of this signal, once per process.
    pub fn install(self) {
        static VCPU: OnceLock<()> = OnceLock::new();
        static BENCH_WAIT: OnceLock<()> = OnceLock::new();
        let once = match self {
            Kick::Vcpu => &VCPU,
            Kick::BenchWait => &BENCH_WAIT,
        };
        once.get_or_init(|| {
            // SAFETY: a zeroed sigaction is valid; we set a handler that does nothing (async-signal-safe)
            // and an empty mask, for a real-time signal nothing else in the process uses; no SA_RESTART,
            // so the interrupted call returns EINTR.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_kick as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(self.signal(), &sa, std::ptr::null_mut());
            }
        });
    }
}

extern "C" fn on_kick(_: libc::c_int) {}

#[cfg(test)]
mod tests {
    use super::Kick;

    #[test]
    fn kick_signals_are_distinct_real_time_signals() {
        let (a, b) = (Kick::Vcpu.signal(), Kick::BenchWait.signal());
        assert_ne!(a, b);
        for s in [a, b] {
            assert!(s > libc::SIGRTMIN() && s <= libc::SIGRTMAX());
        }
    }
}
