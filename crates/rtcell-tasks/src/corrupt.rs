//! Channels a peer corrupted: the error a step returns when a channel it uses no longer reads as the
//! layout we created (named by the channel's scenario name, with what was wrong), and the fault
//! injection workload that plays the hostile peer.

use rtcell_shm::sync::{AtomicU64, Ordering};
use rtcell_shm::{ComError, RegionView, SignalError};

/// Why a step could not be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The task cannot go on (a file that cannot be written, a broken setup...).
    #[error("{0}")]
    Fault(String),
    /// A channel the step uses was corrupted by a peer; `channel` is our (scenario) name for it.
    #[error("corrupt channel {channel:?}: {what}")]
    Corrupt { channel: String, what: String },
}

impl From<String> for StepError {
    fn from(s: String) -> Self {
        StepError::Fault(s)
    }
}

/// A COM error on channel `channel` (laid out by us, used with ids resolved from the scenario) as a
/// step error: everything but a writer caught mid-update means the peer changed the channel.
pub fn com_corrupt(channel: &str, op: &str, e: ComError) -> StepError {
    let what = match e {
        ComError::NotOk(why) => format!("{op}: {why} (the channel's table no longer matches its layout)"),
        ComError::ServiceNotAvailable => {
            format!("{op}: its table or a value slot is out of bounds or inconsistent (COM_SERVICE_NOT_AVAILABLE)")
        }
        ComError::Busy => format!("{op}: the value stays mid-update"),
        ComError::Timeout => format!("{op}: no value before the timeout"),
    };
    StepError::Corrupt { channel: channel.to_string(), what }
}

/// A ring error on channel `channel` that only a peer can cause (`what`: the ring's own words).
pub fn ring_corrupt(channel: &str, op: &str, what: &str) -> StepError {
    StepError::Corrupt { channel: channel.to_string(), what: format!("{op}: {what}") }
}

/// A signal error on channel `channel`: a value above its capacity is our own mistake (a fault);
/// everything else means the peer changed the slot.
pub fn signal_corrupt(channel: &str, op: &str, e: SignalError) -> StepError {
    let what = match e {
        SignalError::TooLarge { len, max } => {
            return StepError::Fault(format!("signal {channel:?}: {op}: {len} bytes, above its capacity of {max}"));
        }
        SignalError::Corrupt(what) => format!("{op}: {what}"),
        SignalError::TooSmall { len } => format!("{op}: it claims a value of {len} bytes, more than it holds"),
        SignalError::Busy => format!("{op}: the value stays mid-update"),
    };
    StepError::Corrupt { channel: channel.to_string(), what }
}

/// Words a scribbler overwrites at the start of its channel: a COM channel's header and table, a
/// task's whole counter block.
const SCRIBBLE_WORDS: usize = 64;

/// The hostile peer of [`crate::TaskWork::Scribble`].
pub struct Scribbler<'a> {
    channel: String,
    words: &'a [AtomicU64],
    at_cycle: u64,
    cycles: u64,
    /// What the channel held when the scribbling started (put back at its end).
    saved: Vec<u64>,
}

impl<'a> Scribbler<'a> {
    pub fn prepare(region: &RegionView<'a>, channel: &str, at_cycle: u64, cycles: u64) -> Result<Self, String> {
        let e = region.find(channel).map_err(|e| format!("scribble: channel {channel:?}: {e}"))?;
        let all = region.channel_words(&e);
        let words = &all[..all.len().min(SCRIBBLE_WORDS)];
        Ok(Scribbler { channel: channel.to_string(), words, at_cycle, cycles, saved: Vec::new() })
    }

    /// Cycle `k`: scribbles inside the window, restores right after it. Returns the number of words
    /// written.
    pub fn cycle(&mut self, k: u64) -> u64 {
        let Some(i) = k.checked_sub(self.at_cycle) else { return 0 };
        if i < self.cycles {
            if self.saved.is_empty() {
                self.saved = self.words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
            }
            for (j, w) in self.words.iter().enumerate() {
                // Garbage that changes every cycle and never reads as a small count or offset.
                let g = (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (j as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9))
                    | 0x8000_0000_8000_0000;
                w.store(g, Ordering::Relaxed);
            }
            return self.words.len() as u64;
        }
        if i == self.cycles && !self.saved.is_empty() {
            for (w, v) in self.words.iter().zip(&self.saved) {
                w.store(*v, Ordering::Relaxed);
            }
            self.saved.clear();
        }
        0
    }

    pub fn channel(&self) -> &str {
        &self.channel
    }
}
