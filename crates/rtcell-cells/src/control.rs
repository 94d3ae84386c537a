//! The cell control block lives in the channel layer (`rtcell_shm::control`) so that every cell kind,
//! VM payloads included, uses the same one. Times in it are CLOCK_MONOTONIC
//! nanoseconds ([`rtcell_host::clock::mono_ns`]).

pub use rtcell_shm::control::*;
