//! rtcell channels: lock-free shared-memory communication between cells and the Linux side.
//!
//! `no_std` and allocation-free on the reading/writing path, so the same code runs inside a KVM payload
//! and on the host. Everything in shared memory is accessed through atomics and bounds-checked: the peer
//! is untrusted, and garbage it writes yields `Corrupt` errors, never undefined behaviour.
//!
//! - [`region`]: the header and channel table; attach validates it.
//! - [`ring`]: queued variable-length messages, single producer / single consumer.
//! - [`signal`]: last-is-best values with torn-read-free (seqlock) reads.
//! - [`com`]: AUTOSAR-COM-style signals and signal groups over one channel.
//! - [`control`]: the per-cell control block; [`histogram`]: fixed-bucket latency histograms;
//!   [`samplelog`]: one value per event (e.g. each activation's lateness).
//! - `directory` (feature `std`): the creator's private copy of the table, which the Linux side reads.
//! - `mapping` (feature `std`): memfd and /dev/shm backing; `futex`: sleeping receivers; `truncation`: a
//!   /dev/shm file a peer cuts short is given its size back instead of killing us with SIGBUS.

#![cfg_attr(not(feature = "std"), no_std)]

pub mod com;
pub mod control;
#[cfg(all(feature = "std", not(loom)))]
pub mod directory;
#[cfg(all(feature = "std", not(loom)))]
pub mod futex;
pub mod histogram;
#[cfg(all(feature = "std", not(loom)))]
pub mod mapping;
pub mod region;
pub mod ring;
pub mod samplelog;
pub mod signal;
pub mod sync;
#[cfg(all(feature = "std", not(loom)))]
pub mod truncation;

#[cfg(feature = "std")]
pub use com::ComConfig;
pub use com::{ComError, ComReceiver, ComView, GroupDef, SignalDef, SignalRef};
#[cfg(all(feature = "std", not(loom)))]
pub use directory::{Directory, DirectoryChange};
#[cfg(feature = "std")]
pub use region::layout::{LayoutError, RegionLayout};
pub use region::{AttachError, ChannelKind, RegionView};
pub use ring::{Consumer, Overflow, Producer, RecvError, RingConfig, RingCounters, RingView, SendError};
pub use signal::{Freshness, SignalError, SignalView};
