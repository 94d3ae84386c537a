//! Regions: the shared memory holding the channels, attached by `/dev/shm` name, by file descriptor, or
//! as memory someone else mapped (a cell runner, a kvm payload).

use core::ffi::{c_char, c_int, c_void};

use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{AttachError, RegionView};

use crate::error::fail;
use crate::{COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, E_OK, Std_ReturnType, c_str, guard, slots};

/// An attached region (opaque to C).
pub struct rtcell_region {
    pub(crate) view: RegionView<'static>,
    /// The mapping this handle owns (attach by name or fd); `None` for memory the caller owns.
    #[cfg(feature = "std")]
    _shm: Option<rtcell_shm::mapping::SharedMemory>,
}

#[cfg(not(feature = "std"))]
crate::slots::pooled!(rtcell_region);

/// The attach error as a code and a message.
pub(crate) fn attach_failed(e: &AttachError) -> Std_ReturnType {
    match e {
        AttachError::Version { found, supported } => fail(
            COM_SERVICE_NOT_AVAILABLE,
            format_args!(
                "region layout version {found}, this library reads version {supported}: use the librtcell of the rtcell that made the region"
            ),
        ),
        other => fail(COM_SERVICE_NOT_AVAILABLE, format_args!("{other}")),
    }
}

/// Words of memory at `base`, checked for NULL, alignment and size.
///
/// # Safety
/// `base..base + len` is mapped, readable and writable, and stays so while the returned slice is used.
pub(crate) unsafe fn words_at(base: *mut c_void, len: usize) -> Result<&'static [AtomicU64], Std_ReturnType> {
    if base.is_null() {
        return Err(fail(E_NOT_OK, format_args!("region memory is NULL")));
    }
    if (base as usize) % 8 != 0 {
        return Err(fail(E_NOT_OK, format_args!("region memory is not 8-byte aligned")));
    }
    if len < 8 {
        return Err(fail(E_NOT_OK, format_args!("region length {len} is too short")));
    }
    // SAFETY: non-NULL, aligned, and the caller vouches for len bytes of shared memory; AtomicU64 has the
    // size and alignment of u64, and every access goes through atomics.
    Ok(unsafe { core::slice::from_raw_parts(base as *const AtomicU64, len / 8) })
}

fn give(out: *mut *mut rtcell_region, region: rtcell_region) -> Std_ReturnType {
    match slots::alloc(region) {
        Some(p) => {
            // SAFETY: out was checked non-NULL by every caller.
            unsafe { *out = p };
            E_OK
        }
        None => fail(E_NOT_OK, format_args!("too many regions attached at once")),
    }
}

/// Attaches to the region at `base` (8-byte aligned, `len` bytes), mapped by someone else who keeps it
/// mapped while the handle is in use. `*out` gets the handle; `rtcell_region_detach` releases it.
///
/// # Safety
/// `base..base+len` must be mapped read-write for the life of the handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_region_attach_memory(
    base: *mut c_void,
    len: usize,
    out: *mut *mut rtcell_region,
) -> Std_ReturnType {
    guard(|| {
        if out.is_null() {
            return fail(E_NOT_OK, format_args!("out is NULL"));
        }
        // SAFETY: the caller's contract.
        let words = match unsafe { words_at(base, len) } {
            Ok(w) => w,
            Err(c) => return c,
        };
        match RegionView::attach(words) {
            Ok(view) => give(
                out,
                rtcell_region {
                    view,
                    #[cfg(feature = "std")]
                    _shm: None,
                },
            ),
            Err(e) => attach_failed(&e),
        }
    })
}

#[cfg(feature = "std")]
fn attach_mapping(shm: rtcell_shm::mapping::SharedMemory, out: *mut *mut rtcell_region) -> Std_ReturnType {
    let words = shm.words();
    // SAFETY: the mapping moves into the handle with the view and is unmapped only when the handle is
    // dropped, so the words outlive every use through this handle.
    let words: &'static [AtomicU64] = unsafe { core::slice::from_raw_parts(words.as_ptr(), words.len()) };
    match RegionView::attach(words) {
        Ok(view) => give(out, rtcell_region { view, _shm: Some(shm) }),
        Err(e) => attach_failed(&e),
    }
}

/// Attaches to the named region `/dev/shm/rtcell-NAME` that an rtcell process created.
///
/// A region whose file can shrink (a /dev/shm file; not a sealed memfd) is guarded: if another process
/// truncates the file, the next access of this process gives it its size back (the cut part reads as
/// zeros, and the region then fails its checks) instead of the process dying of SIGBUS. For that,
/// librtcell installs a SIGBUS handler once, chained to the handler installed before it; a fault
/// anywhere else goes to that handler, or ends the process as it would have. At most 64 such regions
/// can be attached at once in a process.
///
/// # Safety
/// `name` NULL or a NUL-terminated string; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_region_attach_name(
    name: *const c_char,
    out: *mut *mut rtcell_region,
) -> Std_ReturnType {
    guard(|| {
        if out.is_null() {
            return fail(E_NOT_OK, format_args!("out is NULL"));
        }
        // SAFETY: the caller's contract.
        let name = match unsafe { c_str(name, "name") } {
            Ok(n) => n,
            Err(c) => return c,
        };
        #[cfg(feature = "std")]
        {
            match rtcell_shm::mapping::SharedMemory::open_named(name) {
                Ok(shm) => attach_mapping(shm, out),
                Err(e) => fail(COM_SERVICE_NOT_AVAILABLE, format_args!("region {name:?}: {e}")),
            }
        }
        #[cfg(not(feature = "std"))]
        {
            fail(E_NOT_OK, format_args!("region {name:?}: a payload has no named regions; it is given its region"))
        }
    })
}

/// Attaches to the region in file descriptor `fd` (a memfd or shm file); the descriptor is duplicated,
/// so the caller keeps and closes its own. A file that can shrink is guarded as in
/// `rtcell_region_attach_name`.
///
/// # Safety
/// `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_region_attach_fd(fd: c_int, out: *mut *mut rtcell_region) -> Std_ReturnType {
    guard(|| {
        if out.is_null() {
            return fail(E_NOT_OK, format_args!("out is NULL"));
        }
        #[cfg(feature = "std")]
        {
            use std::os::fd::BorrowedFd;
            if fd < 0 {
                return fail(E_NOT_OK, format_args!("fd {fd} is not a file descriptor"));
            }
            // SAFETY: fd >= 0; it is only borrowed for the duplication below, and a descriptor that is not
            // open makes the dup fail cleanly.
            let dup = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned();
            match dup.and_then(rtcell_shm::mapping::SharedMemory::from_fd) {
                Ok(shm) => attach_mapping(shm, out),
                Err(e) => fail(COM_SERVICE_NOT_AVAILABLE, format_args!("fd {fd}: {e}")),
            }
        }
        #[cfg(not(feature = "std"))]
        {
            fail(E_NOT_OK, format_args!("fd {fd}: a payload has no file descriptors"))
        }
    })
}

/// Releases a region handle (NULL is fine). COM contexts and queues opened on it must be closed first.
///
/// # Safety
/// `r` NULL or a handle from an attach function, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_region_detach(r: *mut rtcell_region) {
    if !r.is_null() {
        // SAFETY: the caller's contract.
        unsafe { slots::free(r) };
    }
}
