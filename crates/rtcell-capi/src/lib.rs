//! The C API of rtcell channels (`include/rtcell.h`): what generated controller code calls.
//!
//! - regions ([`region`]): attach by `/dev/shm` name, file descriptor or memory;
//! - COM ([`com`]): AUTOSAR `Com_SendSignal` / `Com_ReceiveSignal`, signal groups, dynamic-length signals,
//!   a blocking receive, counters; the `Com_*` names act on the calling thread's current context
//!   (`rtcell_com_use`), the `rtcell_com_*` names on an explicit handle;
//! - queues ([`queue`]): RTE-style queued send/receive over rings (`RTE_E_NO_DATA`, `RTE_E_LOST_DATA`).
//!
//! Every pointer is checked for NULL and every length against the caller's buffer; shared memory is read
//! through `rtcell-shm`, which treats the peer as untrusted. A failure returns its code and leaves a
//! message for `rtcell_last_error()`. No function unwinds into C.
//!
//! With feature `std` (the host libraries) handles are heap objects and contexts and errors are per
//! thread. Without it (`no_std`, linked into kvm payloads) handles come from small static pools, and there
//! is one context: a payload runs on one vCPU.

#![cfg_attr(not(feature = "std"), no_std)]
#![allow(non_camel_case_types)]

/// The value of a `Result<T, Std_ReturnType>`, or return its code from the API function.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

pub mod com;
mod error;
pub mod queue;
pub mod region;
mod slots;

pub use com::rtcell_com;
pub use error::rtcell_last_error;
pub use queue::rtcell_queue;
pub use region::rtcell_region;

/// AUTOSAR `Std_ReturnType`.
pub type Std_ReturnType = u8;
/// AUTOSAR `Com_SignalIdType`.
pub type Com_SignalIdType = u16;
/// AUTOSAR `Com_SignalGroupIdType`.
pub type Com_SignalGroupIdType = u16;

/// The call succeeded.
pub const E_OK: Std_ReturnType = 0x00;
/// Bad argument: a NULL pointer, a wrong length, an unknown id, a buffer too small.
pub const E_NOT_OK: Std_ReturnType = 0x01;
/// The channel cannot be used: no context, a region of another layout version, a corrupt table.
pub const COM_SERVICE_NOT_AVAILABLE: Std_ReturnType = 0x80;
/// The sender was mid-update on every retry; try again.
pub const COM_BUSY: Std_ReturnType = 0x81;
/// RTE: success.
pub const RTE_E_OK: Std_ReturnType = 0x00;
/// RTE: the queue is full; the message was not sent (counted as refused, never as lost).
pub const RTE_E_LIMIT: Std_ReturnType = 0x82;
/// RTE: nothing was received (empty queue, or a timeout).
pub const RTE_E_NO_DATA: Std_ReturnType = 0x83;
/// RTE overlay flag, or-ed onto `RTE_E_OK`: data was returned, but messages were lost before it.
pub const RTE_E_LOST_DATA: Std_ReturnType = 0x40;
/// Freshness of a received value: the signal was never written (the buffer holds zeros).
pub const RTCELL_FRESH_NEVER: u8 = 0;
/// Freshness: the value was read before by this handle.
pub const RTCELL_FRESH_OLD: u8 = 1;
/// Freshness: a value this handle had not read.
pub const RTCELL_FRESH_NEW: u8 = 2;
/// Version of this API (`rtcell_abi_version()`). 2: `rtcell_queue_counters` gained `refused`.
pub const RTCELL_ABI_VERSION: u32 = 2;

/// The version of this API, `RTCELL_ABI_VERSION` of the library actually loaded.
#[unsafe(no_mangle)]
pub extern "C" fn rtcell_abi_version() -> u32 {
    RTCELL_ABI_VERSION
}

/// The region layout version this library reads; a region of another version is refused.
#[unsafe(no_mangle)]
pub extern "C" fn rtcell_layout_version() -> u32 {
    rtcell_shm::region::LAYOUT_VERSION
}

/// Runs an API function's body; a panic (a bug, never expected) becomes `E_NOT_OK` instead of
/// unwinding into C.
#[cfg(feature = "std")]
fn guard(f: impl FnOnce() -> Std_ReturnType) -> Std_ReturnType {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(c) => c,
        Err(_) => error::fail(E_NOT_OK, format_args!("internal error in librtcell (a bug: please report it)")),
    }
}

#[cfg(not(feature = "std"))]
fn guard(f: impl FnOnce() -> Std_ReturnType) -> Std_ReturnType {
    f()
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn c_str<'a>(p: *const core::ffi::c_char, what: &str) -> Result<&'a str, Std_ReturnType> {
    if p.is_null() {
        return Err(error::fail(E_NOT_OK, format_args!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let s = unsafe { core::ffi::CStr::from_ptr(p) };
    s.to_str().map_err(|_| error::fail(E_NOT_OK, format_args!("{what} is not UTF-8")))
}

/// A handle argument (`what` names it in the error).
///
/// # Safety
/// `p` NULL or a live handle of its type, used by one thread at a time.
unsafe fn handle<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Std_ReturnType> {
    if p.is_null() {
        return Err(error::fail(E_NOT_OK, format_args!("the {what} handle is NULL")));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { &mut *p })
}
