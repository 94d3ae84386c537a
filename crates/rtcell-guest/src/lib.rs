//! KVM cell payloads.
//!
//! [`abi`] is the contract between the monitor (`rtcell-kvm`) and a payload: the guest memory map, the
//! boot-info page, and the hypercall ports. With feature `payload`, `rt` is the runtime a payload links
//! against: entry point, stack, TSC clock, hypercalls, panic reporting, and channel access through
//! `rtcell-shm` — the same channel code the host runs.

#![no_std]

pub mod abi;
#[cfg(feature = "payload")]
pub mod rt;
