//! The calling thread's current COM context (what the `Com_*` functions use) and the cell runners'
//! one-call attach.

use core::ffi::{c_char, c_void};
use core::ptr;

use super::{code_ok, rtcell_com, rtcell_com_close, rtcell_com_open};
use crate::region::rtcell_region;
use crate::{E_OK, Std_ReturnType, guard};

#[cfg(feature = "std")]
std::thread_local! {
    static CURRENT: core::cell::Cell<*mut rtcell_com> = const { core::cell::Cell::new(ptr::null_mut()) };
    /// What `rtcell_cell_attach` made for this thread (released by the next one).
    static CELL: core::cell::Cell<(*mut rtcell_region, *mut rtcell_com)> =
        const { core::cell::Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

#[cfg(feature = "std")]
pub(super) fn current() -> *mut rtcell_com {
    CURRENT.with(|c| c.get())
}

#[cfg(feature = "std")]
pub(super) fn set_current(p: *mut rtcell_com) {
    CURRENT.with(|c| c.set(p));
}

#[cfg(feature = "std")]
fn cell_binding() -> (*mut rtcell_region, *mut rtcell_com) {
    CELL.with(|c| c.get())
}

#[cfg(feature = "std")]
fn set_cell_binding(b: (*mut rtcell_region, *mut rtcell_com)) {
    CELL.with(|c| c.set(b));
}

#[cfg(not(feature = "std"))]
static CURRENT: core::sync::atomic::AtomicPtr<rtcell_com> = core::sync::atomic::AtomicPtr::new(ptr::null_mut());
#[cfg(not(feature = "std"))]
static CELL_REGION: core::sync::atomic::AtomicPtr<rtcell_region> = core::sync::atomic::AtomicPtr::new(ptr::null_mut());
#[cfg(not(feature = "std"))]
static CELL_COM: core::sync::atomic::AtomicPtr<rtcell_com> = core::sync::atomic::AtomicPtr::new(ptr::null_mut());

#[cfg(not(feature = "std"))]
pub(super) fn current() -> *mut rtcell_com {
    CURRENT.load(core::sync::atomic::Ordering::Relaxed)
}

#[cfg(not(feature = "std"))]
pub(super) fn set_current(p: *mut rtcell_com) {
    CURRENT.store(p, core::sync::atomic::Ordering::Relaxed);
}

#[cfg(not(feature = "std"))]
fn cell_binding() -> (*mut rtcell_region, *mut rtcell_com) {
    use core::sync::atomic::Ordering::Relaxed;
    (CELL_REGION.load(Relaxed), CELL_COM.load(Relaxed))
}

#[cfg(not(feature = "std"))]
fn set_cell_binding(b: (*mut rtcell_region, *mut rtcell_com)) {
    use core::sync::atomic::Ordering::Relaxed;
    CELL_REGION.store(b.0, Relaxed);
    CELL_COM.store(b.1, Relaxed);
}

/// Makes `c` the calling thread's current context, which the `Com_*` functions use (NULL: none).
///
/// # Safety
/// `c` NULL or a live handle, used by this thread only while current.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_use(c: *mut rtcell_com) -> Std_ReturnType {
    set_current(c);
    E_OK
}

/// For cell runners: attaches the region at `base` (`len` bytes), binds COM channels
/// `channels[0..count]` (0: all) and makes them the calling thread's current context, in one call. A
/// second call on the same thread releases what the first made.
///
/// # Safety
/// As `rtcell_region_attach_memory` and `rtcell_com_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_cell_attach(
    base: *mut c_void,
    len: usize,
    channels: *const *const c_char,
    count: usize,
) -> Std_ReturnType {
    guard(|| {
        let (old_region, old_com) = cell_binding();
        set_cell_binding((ptr::null_mut(), ptr::null_mut()));
        // SAFETY: what a previous call made for this thread, used by nobody else.
        unsafe {
            rtcell_com_close(old_com);
            crate::region::rtcell_region_detach(old_region);
        }
        let mut r: *mut rtcell_region = ptr::null_mut();
        // SAFETY: the caller's contract.
        tri!(code_ok(unsafe { crate::region::rtcell_region_attach_memory(base, len, &mut r) }));
        let mut c: *mut rtcell_com = ptr::null_mut();
        // SAFETY: r is the live handle just made; the rest is the caller's contract.
        let code = unsafe { rtcell_com_open(r, channels, count, &mut c) };
        if code != E_OK {
            // SAFETY: r was made above and is used by nothing else.
            unsafe { crate::region::rtcell_region_detach(r) };
            return code;
        }
        set_cell_binding((r, c));
        set_current(c);
        E_OK
    })
}

/// The region of the calling thread's current context, or NULL.
#[unsafe(no_mangle)]
pub extern "C" fn rtcell_cell_region() -> *mut rtcell_region {
    let c = current();
    if c.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: the current context is live while current (rtcell_com_close clears it).
    unsafe { (*c).region }
}
