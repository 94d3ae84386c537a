//! Kicking the vCPU out of `KVM_RUN`: the supervisor's stop and the watchdog's verdict.
//!
//! Design: a kick sets `immediate_exit` in the vCPU's `kvm_run` page (so a vCPU about to enter the guest
//! does not) and sends the vCPU thread a signal with a no-op handler (`rtcell_host::kick::Kick::Vcpu`, so
//! a vCPU in the guest exits with EINTR). Both targets live in one [`Kicker`] behind a lock the vCPU
//! thread clears before it unmaps `kvm_run` and exits, so a kick that races with the end of the VM never
//! writes freed memory or signals a dead thread. The first reason wins; later kicks only repeat the
//! signal.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

use rtcell_host::kick::Kick;

const NONE: u8 = 0;

/// Why the vCPU thread was kicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Reason {
    /// The supervisor stops the cell.
    Stop = 1,
    /// The watchdog saw no progress.
    Watchdog = 2,
}

/// The vCPU thread's `kvm_run` address (for `immediate_exit`) and pthread_t; 0 when not (or no longer) there.
#[derive(Default)]
struct Target {
    run: usize,
    tid: usize,
}

/// What a kick may touch, and why the vCPU was kicked.
pub(crate) struct Kicker {
    /// Both words cleared under the lock before the thread unmaps `kvm_run` and exits.
    target: Mutex<Target>,
    reason: AtomicU8,
}

impl Kicker {
    pub(crate) fn new() -> Kicker {
        Kicker { target: Mutex::new(Target::default()), reason: AtomicU8::new(NONE) }
    }

    /// Why the vCPU was kicked, if it was.
    pub(crate) fn pending(&self) -> Option<Reason> {
        match self.reason.load(Ordering::Acquire) {
            1 => Some(Reason::Stop),
            2 => Some(Reason::Watchdog),
            _ => None,
        }
    }

    /// Records the vCPU's `kvm_run` mapping, for `immediate_exit`.
    pub(crate) fn set_run(&self, run: *mut kvm_bindings::kvm_run) {
        self.lock().run = run as usize;
    }

    /// Makes the calling thread (the vCPU thread) the one a kick signals, until the guard drops; the
    /// guard then empties the target, so no later kick touches `kvm_run` or the thread.
    pub(crate) fn attach_current_thread(&self) -> Attached<'_> {
        // SAFETY: pthread_self has no preconditions.
        self.lock().tid = unsafe { libc::pthread_self() } as usize;
        Attached(self)
    }

    /// Stops the vCPU now: immediate exit plus signal. The reason is kept only if none was given before.
    pub(crate) fn kick(&self, reason: Reason) {
        let _ = self.reason.compare_exchange(NONE, reason as u8, Ordering::AcqRel, Ordering::Acquire);
        // Held across both writes: the vCPU thread clears the target under this lock before it unmaps
        // `kvm_run` and exits, so neither can vanish in between.
        let target = self.lock();
        let run = target.run as *mut kvm_bindings::kvm_run;
        if !run.is_null() {
            // SAFETY: `run` is the vCPU's kvm_run mapping, still mapped because the target is non-zero under
            // the lock; KVM documents `immediate_exit` as written by other threads to stop KVM_RUN.
            unsafe { std::ptr::addr_of_mut!((*run).immediate_exit).write_volatile(1) };
        }
        if target.tid != 0 {
            // SAFETY: tid is the vCPU thread's pthread_t, alive because it is non-zero under the lock.
            unsafe { libc::pthread_kill(target.tid as libc::pthread_t, Kick::Vcpu.signal()) };
        }
    }

    /// The kick target, also after a panic elsewhere poisoned the lock (the two words stay consistent).
    fn lock(&self) -> MutexGuard<'_, Target> {
        self.target.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Empties the kick target when dropped: from then on no kick touches `kvm_run` or the vCPU thread.
pub(crate) struct Attached<'a>(&'a Kicker);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        *self.0.lock() = Target::default();
    }
}

/// Installs the no-op handler of the vCPU's kick signal, whose only job is to make KVM_RUN return EINTR.
pub(crate) fn install_handler() {
    Kick::Vcpu.install();
}
