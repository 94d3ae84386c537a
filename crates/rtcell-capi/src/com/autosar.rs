//! The AUTOSAR `Com_*` functions, on the calling thread's current context (they carry no handle, and
//! fixed-length ones no length: the length is the one copied at `rtcell_com_open`).

use core::ffi::c_void;

use rtcell_shm::SignalRef;

use super::current::current;
use super::{bytes, bytes_mut, com_failed, rtcell_com};
use crate::error::fail;
use crate::{
    COM_SERVICE_NOT_AVAILABLE, Com_SignalGroupIdType, Com_SignalIdType, E_NOT_OK, E_OK, Std_ReturnType, guard,
};

/// The current context, or COM_SERVICE_NOT_AVAILABLE.
fn current_handle() -> Result<*mut rtcell_com, Std_ReturnType> {
    let c = current();
    if c.is_null() {
        return Err(fail(
            COM_SERVICE_NOT_AVAILABLE,
            format_args!("no COM context on this thread: call rtcell_com_use (or run inside an rtcell cell)"),
        ));
    }
    Ok(c)
}

/// The channel and configured length of fixed-length signal `id` (AUTOSAR calls carry no length).
fn fixed_len(com: &mut rtcell_com, id: u16) -> Result<(usize, usize), Std_ReturnType> {
    let (i, len, dynamic) = com.find_signal(id)?;
    if dynamic {
        return Err(fail(
            E_NOT_OK,
            format_args!("signal {id} is dynamic-length: use Com_SendDynSignal / Com_ReceiveDynSignal"),
        ));
    }
    Ok((i, len))
}

/// The fast path of the AUTOSAR calls: the current context and a remembered fixed-length signal `id`,
/// when there are both and `data` is not NULL. It runs outside `guard`: what it calls is shared-memory
/// code that reports problems as errors and cannot panic; everything else takes the guarded full path.
fn fast_signal<'a>(id: u16, data: *const c_void) -> Option<(&'a mut rtcell_com, usize, SignalRef)> {
    let c = current();
    if c.is_null() || data.is_null() {
        return None;
    }
    // SAFETY: the current context is live while current, and used by this thread only.
    let com = unsafe { &mut *c };
    let (i, r) = com.signal_ref(id)?;
    (!r.dynamic).then_some((com, i, r))
}

/// AUTOSAR: sends signal `id` from `data` (exactly the signal's length, as fixed at `rtcell_com_open`,
/// is read). COM_SERVICE_NOT_AVAILABLE (nothing read) while the channel's table differs from the one
/// read at open.
///
/// # Safety
/// `data` readable for the signal's length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn Com_SendSignal(id: Com_SignalIdType, data: *const c_void) -> Std_ReturnType {
    if let Some((com, i, r)) = fast_signal(id, data) {
        // SAFETY: the caller's contract: data holds the signal's length; non-NULL checked.
        let data = unsafe { core::slice::from_raw_parts(data as *const u8, r.max_len) };
        let code = match com.chans[i].as_ref() {
            Some(ch) => ch.view().send_ref(&r, data).map_or_else(com_failed, |()| E_OK),
            None => E_NOT_OK,
        };
        return com.sent(code);
    }
    guard(|| {
        let c = tri!(current_handle());
        // SAFETY: the current context is live while current.
        let com = unsafe { &mut *c };
        let (i, len) = match fixed_len(com, id) {
            Ok(l) => l,
            Err(code) => return com.count(code),
        };
        // SAFETY: the caller's contract: data holds the signal's length.
        let data = match unsafe { bytes(data, len) } {
            Ok(d) => d,
            Err(code) => return com.count(code),
        };
        com.send_in(i, id, data)
    })
}

/// AUTOSAR: receives signal `id` into `data` (exactly the signal's length, as fixed at
/// `rtcell_com_open`, is written). A signal never written gives zeros and E_OK (its initial value).
/// COM_SERVICE_NOT_AVAILABLE (nothing written) while the channel's table differs from the one read at
/// open; COM_SERVICE_NOT_AVAILABLE too for a value shorter than the signal's length (the peer wrote it
/// so; `data` then holds no valid value).
///
/// # Safety
/// `data` writable for the signal's length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn Com_ReceiveSignal(id: Com_SignalIdType, data: *mut c_void) -> Std_ReturnType {
    if let Some((com, i, r)) = fast_signal(id, data) {
        // SAFETY: the caller's contract: data has room for the signal's length; non-NULL checked.
        let out = unsafe { core::slice::from_raw_parts_mut(data as *mut u8, r.max_len) };
        let got = match com.chans[i].as_mut() {
            Some(ch) => match ch.seen.get_mut(r.index) {
                Some(seen) => ch.live.pinned(&ch.table).receive_ref(&r, out, seen).map_err(com_failed),
                None => Err(fail(COM_SERVICE_NOT_AVAILABLE, format_args!("signal index outside the receiver"))),
            },
            None => Err(E_NOT_OK),
        };
        return match got {
            Ok((_, fresh)) => {
                com.received(fresh);
                E_OK
            }
            Err(code) => com.count(code),
        };
    }
    guard(|| {
        let c = tri!(current_handle());
        // SAFETY: the current context is live while current.
        let com = unsafe { &mut *c };
        let (i, len) = match fixed_len(com, id) {
            Ok(l) => l,
            Err(code) => return com.count(code),
        };
        // SAFETY: the caller's contract: data has room for the signal's length.
        let out = match unsafe { bytes_mut(data, len) } {
            Ok(d) => d,
            Err(code) => return com.count(code),
        };
        match com.receive_in(i, id, out) {
            Ok(_) => E_OK,
            Err(code) => code,
        }
    })
}

/// AUTOSAR: sends `length` bytes of dynamic-length signal `id`.
///
/// # Safety
/// `data` readable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn Com_SendDynSignal(id: Com_SignalIdType, data: *const c_void, length: u16) -> Std_ReturnType {
    guard(|| {
        let c = tri!(current_handle());
        // SAFETY: the current context is live while current.
        let com = unsafe { &mut *c };
        match com.info(id) {
            Ok((_, true)) => {}
            Ok((_, false)) => {
                return com.count(fail(E_NOT_OK, format_args!("signal {id} is fixed-length: use Com_SendSignal")));
            }
            Err(code) => return com.count(code),
        }
        // SAFETY: the caller's contract.
        let data = match unsafe { bytes(data, length as usize) } {
            Ok(d) => d,
            Err(code) => return com.count(code),
        };
        com.send(id, data)
    })
}

/// AUTOSAR: receives dynamic-length signal `id`; `*length` is the buffer's size on entry and the value's
/// length on return. A buffer shorter than the value is E_NOT_OK (nothing is written past it).
///
/// # Safety
/// `length` NULL or writable; `data` writable for `*length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn Com_ReceiveDynSignal(
    id: Com_SignalIdType,
    data: *mut c_void,
    length: *mut u16,
) -> Std_ReturnType {
    guard(|| {
        let c = tri!(current_handle());
        // SAFETY: the current context is live while current.
        let com = unsafe { &mut *c };
        if length.is_null() {
            return com.count(fail(E_NOT_OK, format_args!("length is NULL")));
        }
        match com.info(id) {
            Ok((_, true)) => {}
            Ok((_, false)) => {
                return com.count(fail(E_NOT_OK, format_args!("signal {id} is fixed-length: use Com_ReceiveSignal")));
            }
            Err(code) => return com.count(code),
        }
        // SAFETY: non-NULL, readable and writable by the caller's contract.
        let room = unsafe { *length } as usize;
        // SAFETY: the caller's contract: data has room for *length bytes.
        let out = match unsafe { bytes_mut(data, room) } {
            Ok(d) => d,
            Err(code) => return com.count(code),
        };
        match com.receive(id, out) {
            Ok((len, _)) => {
                // SAFETY: as above; len <= room <= u16::MAX.
                unsafe { *length = len as u16 };
                E_OK
            }
            Err(code) => code,
        }
    })
}

/// AUTOSAR: commits signal group `id` (its members sent with Com_SendSignal) as one value.
#[unsafe(no_mangle)]
pub extern "C" fn Com_SendSignalGroup(id: Com_SignalGroupIdType) -> Std_ReturnType {
    guard(|| {
        let c = tri!(current_handle());
        // SAFETY: the current context is live while current.
        let com = unsafe { &mut *c };
        com.send_group(id)
    })
}

/// AUTOSAR: copies signal group `id`'s value, for its members' Com_ReceiveSignal.
#[unsafe(no_mangle)]
pub extern "C" fn Com_ReceiveSignalGroup(id: Com_SignalGroupIdType) -> Std_ReturnType {
    guard(|| {
        let c = tri!(current_handle());
        // SAFETY: the current context is live while current.
        let com = unsafe { &mut *c };
        com.receive_group(id)
    })
}
