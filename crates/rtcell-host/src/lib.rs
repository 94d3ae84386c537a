//! Host real-time layer: CPU sets, scheduling, memory locking, the TSC and CLOCK_MONOTONIC clocks, and facts
//! about the host.
//!
//! Everything that reads `/proc` or `/sys` goes through a [`HostRoot`], so the same code can be run
//! against a fixture tree in tests.

pub mod cache;
pub mod check;
pub mod child;
pub mod clock;
pub mod cpu;
pub mod cpulock;
pub mod error;
pub mod facts;
#[cfg(test)]
mod fixture;
pub mod kick;
pub mod outdir;
pub mod peer_text;
pub mod root;
pub mod sched;
pub mod stop;
pub mod tsc;
pub mod tune;
pub mod utc;

pub use check::{Level, Verdict, check_cell_cpu, render_text};
pub use error::HostError;
pub use facts::{HostFacts, StealSampler, is_root};
pub use peer_text::{LogLimiter, PEER_TEXT_CAP, peer_str, peer_text, printable_line};
pub use root::{HostRoot, ReadError};
pub use sched::{RtRequest, SchedError, apply_rt};
pub use tsc::{TscClock, TscError};
