//! The guest's text: log and panic hypercalls, read from the message buffer in guest RAM.
//!
//! Design: the guest is untrusted, so its text is bounded before anything is read (the claimed length is
//! capped by the buffer and the peer-text cap), escaped to one printable line, and shown labelled as the
//! guest's. A guest that logs too much is rate-limited and capped per cell; what is dropped is counted,
//! never silently lost, and the drop is reported as a log storm.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rtcell_guest::abi::{MSG_GPA, MSG_SIZE};
use rtcell_host::peer_text::{LogLimiter, PEER_TEXT_CAP, peer_text};

use crate::memory::GuestRam;

/// Log lines kept per cell; later ones are counted as suppressed.
const MAX_LOG_LINES: usize = 1000;
/// Log hypercalls kept per second per cell (after a burst of [`LOG_BURST`]); the rest are counted.
pub const LOG_PER_SECOND: u32 = 100;
/// Log hypercalls a cell may make at once before [`LOG_PER_SECOND`] applies.
pub const LOG_BURST: u32 = 200;

/// The lines a cell logged, shared between its vCPU thread (which writes) and the supervisor.
#[derive(Default)]
pub(crate) struct GuestLog {
    lines: Mutex<Vec<String>>,
    /// Log hypercalls over the rate limit or past `MAX_LOG_LINES`: counted, not kept.
    suppressed: AtomicU64,
}

/// The rate limit of one cell's log hypercalls (owned by its vCPU thread).
pub(crate) fn limiter() -> LogLimiter {
    LogLimiter::new(LOG_PER_SECOND, LOG_BURST)
}

impl GuestLog {
    /// The guest's `HC_LOG` with a message of `len` bytes. Over the limit it is counted, and the guest
    /// memory is not even read.
    pub(crate) fn record(&self, limiter: &mut LogLimiter, ram: &GuestRam, len: u64) {
        let kept = limiter.allow()
            && self.lines.lock().is_ok_and(|mut l| {
                l.len() < MAX_LOG_LINES && {
                    l.push(message(ram, len));
                    true
                }
            });
        if !kept {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub(crate) fn suppressed(&self) -> u64 {
        self.suppressed.load(Ordering::Relaxed)
    }

    /// The monitor's note on a log storm, if the guest logged more than it may.
    pub(crate) fn storm(&self) -> Option<String> {
        let n = self.suppressed();
        (n > 0).then(|| {
            format!(
                "log storm: {n} log messages of the guest suppressed (limit {LOG_PER_SECOND} per second, bursts of {LOG_BURST}, {MAX_LOG_LINES} kept)"
            )
        })
    }
}

/// Text the payload left in the message buffer: the claimed length `len` is bounded by the buffer and
/// the peer-text cap before anything is read, then the text is escaped (see `rtcell_host::peer_text`).
pub(crate) fn message(ram: &GuestRam, len: u64) -> String {
    let cap = MSG_SIZE.min(PEER_TEXT_CAP);
    let n = usize::try_from(len).unwrap_or(usize::MAX).min(cap);
    let bytes = ram.read(MSG_GPA, n);
    let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
    let mut text = peer_text(&bytes[..end], cap);
    if len > cap as u64 {
        text.push_str(&format!("…[the guest claimed {len} bytes; {cap} read]"));
    }
    text
}
