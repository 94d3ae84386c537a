//! The cell control block: a small raw channel per cell through which the supervisor and the cell see
//! each other, whatever the cell kind (thread, process, and later VM). Words:
//! 0 state, 1 heartbeat, 2 stop request, 3 exit code, 4 messages handled, 5 first-heartbeat time
//! (CLOCK_MONOTONIC ns), 6 reserved, 7 message length, then up to 504 bytes of message text.
//!
//! The supervisor reads what the cell wrote as untrusted input: states are checked, lengths clamped.

use crate::region::{AttachError, RegionView};
use crate::sync::{AtomicU64, Ordering, copy_from_words, copy_to_words};

const W_STATE: usize = 0;
const W_HEARTBEAT: usize = 1;
const W_STOP: usize = 2;
const W_EXIT: usize = 3;
const W_HANDLED: usize = 4;
const W_FIRST_BEAT_NS: usize = 5;
const W_MSG_LEN: usize = 7;
const W_MSG: usize = 8;
/// Longest message a cell can leave (fault reason, panic text).
pub const MAX_MESSAGE: usize = 504;
const WORDS: usize = W_MSG + MAX_MESSAGE / 8;

/// Lifecycle of a cell as it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellState {
    Starting = 0,
    Running = 1,
    Done = 2,
    Faulted = 3,
    Stopped = 4,
}

/// Prefix of a cell's control channel name: `ctl.<cell>`.
pub const CHANNEL_PREFIX: &str = "ctl.";
/// Bytes of a control block.
pub const CONTROL_BYTES: usize = WORDS * 8;

/// Writes `ctl.<cell>` into `buf`, returning the name (no allocation, so guests can use it too).
pub fn channel_name_into<'b>(cell: &str, buf: &'b mut [u8; 64]) -> Option<&'b str> {
    let n = CHANNEL_PREFIX.len() + cell.len();
    if n > buf.len() {
        return None;
    }
    buf[..CHANNEL_PREFIX.len()].copy_from_slice(CHANNEL_PREFIX.as_bytes());
    buf[CHANNEL_PREFIX.len()..n].copy_from_slice(cell.as_bytes());
    core::str::from_utf8(&buf[..n]).ok()
}

/// Name of the control channel of cell `name`.
#[cfg(feature = "std")]
pub fn channel_name(cell: &str) -> std::string::String {
    std::format!("{CHANNEL_PREFIX}{cell}")
}

/// Adds the control block of cell `name` to a region layout.
#[cfg(feature = "std")]
pub fn add_to_layout(layout: &mut crate::RegionLayout, cell: &str) -> Result<(), crate::LayoutError> {
    layout.raw(&channel_name(cell), CONTROL_BYTES)?;
    Ok(())
}

/// A cell's control block.
#[derive(Clone, Copy)]
pub struct ControlBlock<'a> {
    w: &'a [AtomicU64],
}

impl<'a> ControlBlock<'a> {
    pub fn attach(region: &RegionView<'a>, cell: &str) -> Result<Self, AttachError> {
        let mut buf = [0u8; 64];
        let name = channel_name_into(cell, &mut buf).ok_or(AttachError::NotFound)?;
        let w = region.raw(name)?;
        if w.len() < WORDS {
            return Err(AttachError::Corrupt { channel: None, what: "cell control block too small" });
        }
        Ok(ControlBlock { w })
    }

    // --- cell side ---

    /// Marks the cell running and records the first heartbeat's time (CLOCK_MONOTONIC ns where the cell
    /// has that clock; 0 where it does not, e.g. in a VM, and the supervisor times it itself).
    pub fn set_running(&self, now_ns: u64) {
        self.w[W_FIRST_BEAT_NS].store(now_ns, Ordering::Relaxed);
        self.w[W_HEARTBEAT].fetch_add(1, Ordering::Relaxed);
        self.w[W_STATE].store(CellState::Running as u64, Ordering::Release);
    }

    /// Proof of progress; the supervisor's watchdog reads it.
    #[inline]
    pub fn beat(&self) {
        let w = &self.w[W_HEARTBEAT];
        w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    #[inline]
    pub fn add_handled(&self, n: u64) {
        let w = &self.w[W_HANDLED];
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    #[inline]
    pub fn stop_requested(&self) -> bool {
        self.w[W_STOP].load(Ordering::Relaxed) != 0
    }

    /// Final state with an exit code and an optional message (truncated to `MAX_MESSAGE` bytes).
    pub fn finish(&self, state: CellState, code: i32, message: &str) {
        let bytes = message.as_bytes();
        let n = bytes.len().min(MAX_MESSAGE);
        copy_to_words(&bytes[..n], &self.w[W_MSG..]);
        self.w[W_MSG_LEN].store(n as u64, Ordering::Relaxed);
        self.w[W_EXIT].store(code as u32 as u64, Ordering::Relaxed);
        self.w[W_STATE].store(state as u64, Ordering::Release);
    }

    // --- supervisor side ---

    pub fn request_stop(&self) {
        self.w[W_STOP].store(1, Ordering::Release);
    }

    /// The state the cell reports; an impossible value reads as a fault.
    pub fn state(&self) -> Result<CellState, u64> {
        match self.w[W_STATE].load(Ordering::Acquire) {
            0 => Ok(CellState::Starting),
            1 => Ok(CellState::Running),
            2 => Ok(CellState::Done),
            3 => Ok(CellState::Faulted),
            4 => Ok(CellState::Stopped),
            v => Err(v),
        }
    }

    pub fn heartbeat(&self) -> u64 {
        self.w[W_HEARTBEAT].load(Ordering::Relaxed)
    }

    pub fn handled(&self) -> u64 {
        self.w[W_HANDLED].load(Ordering::Relaxed)
    }

    pub fn exit_code(&self) -> i32 {
        self.w[W_EXIT].load(Ordering::Relaxed) as u32 as i32
    }

    /// CLOCK_MONOTONIC time of the first heartbeat, 0 if none yet.
    pub fn first_beat_ns(&self) -> u64 {
        self.w[W_FIRST_BEAT_NS].load(Ordering::Relaxed)
    }

    /// The cell's message (clamped to `MAX_MESSAGE` bytes, whatever length the cell wrote).
    pub fn message_into<'b>(&self, buf: &'b mut [u8; MAX_MESSAGE]) -> &'b [u8] {
        let n = (self.w[W_MSG_LEN].load(Ordering::Relaxed) as usize).min(MAX_MESSAGE);
        copy_from_words(&self.w[W_MSG..], &mut buf[..n]);
        &buf[..n]
    }

    #[cfg(feature = "std")]
    pub fn message(&self) -> std::string::String {
        let mut buf = [0u8; MAX_MESSAGE];
        std::string::String::from_utf8_lossy(self.message_into(&mut buf)).into_owned()
    }
}
