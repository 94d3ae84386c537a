//! The process's stop request (Ctrl-C or SIGTERM, set by the command's handler): every long-running
//! part of a run (a bench suite, a scenario, the gateway's linger, `tune --apply`) checks it and ends
//! after keeping what it measured.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

/// Asks everything running in this process to stop at its next check. What was measured is kept.
pub fn request_stop() {
    STOP.store(true, Ordering::Relaxed);
}

/// Whether a stop was requested.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
