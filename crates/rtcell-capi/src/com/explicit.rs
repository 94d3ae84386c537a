//! The `rtcell_com_*` functions on an explicit handle, each bounded by the length its caller passes.

use core::ffi::c_void;

#[cfg(feature = "std")]
use rtcell_shm::Freshness;

#[cfg(feature = "std")]
use super::com_failed;
use super::{bytes, bytes_mut, fresh_code, rtcell_com, rtcell_com_counters};
use crate::error::fail;
use crate::{Com_SignalGroupIdType, Com_SignalIdType, E_NOT_OK, E_OK, Std_ReturnType, guard};

/// Sends `len` bytes of signal `id` (a fixed-length signal takes exactly its length; a dynamic one up to
/// its maximum). A group member's value is committed by `rtcell_com_send_signal_group`.
///
/// # Safety
/// `c` a live handle or NULL; `data` readable for `len` bytes (or NULL with len 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_send_signal(
    c: *mut rtcell_com,
    id: Com_SignalIdType,
    data: *const c_void,
    len: usize,
) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let com = tri!(unsafe { crate::handle(c, "COM") });
        // SAFETY: the caller's contract.
        let data = tri!(unsafe { bytes(data, len) });
        com.send(id, data)
    })
}

/// Receives signal `id` into `buf` (`buf_len` bytes, at least the value's length). `*len_out` gets the
/// value's length, `*fresh_out` RTCELL_FRESH_NEVER / _OLD / _NEW (both may be NULL). A signal never
/// written gives E_OK, length 0, RTCELL_FRESH_NEVER and `buf_len` zero bytes. A group member is
/// read from the copy the last `rtcell_com_receive_signal_group` of its group made; after one that
/// failed, E_NOT_OK until one succeeds (the copy may hold part of the refused value).
///
/// # Safety
/// `c` a live handle or NULL; `buf` writable for `buf_len` bytes; `len_out`, `fresh_out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_receive_signal(
    c: *mut rtcell_com,
    id: Com_SignalIdType,
    buf: *mut c_void,
    buf_len: usize,
    len_out: *mut usize,
    fresh_out: *mut u8,
) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let com = tri!(unsafe { crate::handle(c, "COM") });
        // SAFETY: the caller's contract.
        let out = tri!(unsafe { bytes_mut(buf, buf_len) });
        let (len, fresh) = tri!(com.receive(id, out));
        // SAFETY: NULL or writable, by the caller's contract.
        unsafe {
            if !len_out.is_null() {
                *len_out = len;
            }
            if !fresh_out.is_null() {
                *fresh_out = fresh_code(fresh);
            }
        }
        E_OK
    })
}

/// Commits every member of group `id` sent since the last commit as one value.
///
/// # Safety
/// `c` a live handle or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_send_signal_group(c: *mut rtcell_com, id: Com_SignalGroupIdType) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let com = tri!(unsafe { crate::handle(c, "COM") });
        com.send_group(id)
    })
}

/// Copies group `id`'s current value, so its members read consistently with `rtcell_com_receive_signal`.
///
/// # Safety
/// `c` a live handle or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_receive_signal_group(
    c: *mut rtcell_com,
    id: Com_SignalGroupIdType,
) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let com = tri!(unsafe { crate::handle(c, "COM") });
        com.receive_group(id)
    })
}

/// Waits (sleeping on a futex, no busy loop) until standalone signal `id` has a value this handle has not
/// read, or `timeout_ns` passes (`RTE_E_NO_DATA`). For sides that may sleep; not in a payload.
///
/// # Safety
/// As `rtcell_com_receive_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_receive_signal_timeout(
    c: *mut rtcell_com,
    id: Com_SignalIdType,
    buf: *mut c_void,
    buf_len: usize,
    len_out: *mut usize,
    timeout_ns: u64,
) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let com = tri!(unsafe { crate::handle(c, "COM") });
        // SAFETY: the caller's contract.
        let out = tri!(unsafe { bytes_mut(buf, buf_len) });
        #[cfg(feature = "std")]
        {
            let r = match com.chan_of_signal(id) {
                Ok(ch) => match ch.with_receiver(|rx| rx.receive_signal_blocking(id, out, timeout_ns)) {
                    Ok(Ok(len)) => Ok(len),
                    Ok(Err(e)) | Err(e) => Err(com_failed(e)),
                },
                Err(code) => Err(code),
            };
            match r {
                Ok(len) => {
                    com.received(Freshness::New);
                    if !len_out.is_null() {
                        // SAFETY: non-NULL and writable by the caller's contract.
                        unsafe { *len_out = len };
                    }
                    E_OK
                }
                Err(code) => com.count(code),
            }
        }
        #[cfg(not(feature = "std"))]
        {
            let _ = (out, len_out, timeout_ns, id);
            com.count(fail(E_NOT_OK, format_args!("a payload cannot sleep: poll with rtcell_com_receive_signal")))
        }
    })
}

/// The maximum length of signal `id` and whether it is dynamic-length (1) or fixed (0).
///
/// # Safety
/// `c` a live handle or NULL; `max_len`, `dynamic` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_signal_info(
    c: *mut rtcell_com,
    id: Com_SignalIdType,
    max_len: *mut usize,
    dynamic: *mut u8,
) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let com = tri!(unsafe { crate::handle(c, "COM") });
        let (len, dyn_) = tri!(com.info(id));
        // SAFETY: NULL or writable by the caller's contract.
        unsafe {
            if !max_len.is_null() {
                *max_len = len;
            }
            if !dynamic.is_null() {
                *dynamic = dyn_ as u8;
            }
        }
        E_OK
    })
}

/// This handle's counters.
///
/// # Safety
/// `c` a live handle or NULL; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_get_counters(c: *mut rtcell_com, out: *mut rtcell_com_counters) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let com = tri!(unsafe { crate::handle(c, "COM") });
        if out.is_null() {
            return fail(E_NOT_OK, format_args!("out is NULL"));
        }
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { *out = com.counters };
        E_OK
    })
}
