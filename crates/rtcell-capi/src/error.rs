//! `rtcell_last_error()`: why the last failing call failed, as text (per thread on the host; one buffer
//! in a payload, which runs on one vCPU).

use core::ffi::c_char;
use core::fmt::{self, Write};

use crate::Std_ReturnType;

/// Longest message kept (bytes, without the NUL).
const MAX: usize = 255;

#[repr(C)]
struct Buf {
    bytes: [u8; MAX + 1],
    len: usize,
}

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len < MAX && b != 0 {
                self.bytes[self.len] = b;
                self.len += 1;
            }
        }
        Ok(())
    }
}

impl Buf {
    const fn new() -> Buf {
        Buf { bytes: [0; MAX + 1], len: 0 }
    }

    fn set(&mut self, msg: fmt::Arguments<'_>) {
        self.len = 0;
        let _ = self.write_fmt(msg);
        self.bytes[self.len] = 0;
    }
}

#[cfg(feature = "std")]
std::thread_local! {
    static LAST: core::cell::RefCell<Buf> = const { core::cell::RefCell::new(Buf::new()) };
}

#[cfg(not(feature = "std"))]
struct One(core::cell::UnsafeCell<Buf>);
// SAFETY: a payload runs on one vCPU with no interrupts: never two accesses at once.
#[cfg(not(feature = "std"))]
unsafe impl Sync for One {}
#[cfg(not(feature = "std"))]
static LAST: One = One(core::cell::UnsafeCell::new(Buf::new()));

/// Records `msg` as the last error and returns `code`.
pub(crate) fn fail(code: Std_ReturnType, msg: fmt::Arguments<'_>) -> Std_ReturnType {
    #[cfg(feature = "std")]
    LAST.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            b.set(msg);
        }
    });
    #[cfg(not(feature = "std"))]
    {
        // SAFETY: one vCPU; no reference into the buffer outlives this call or `rtcell_last_error`'s.
        let b = unsafe { &mut *LAST.0.get() };
        b.set(msg);
    }
    code
}

/// Why the last failing call on this thread failed: a NUL-terminated message, never NULL, "" when none.
/// Valid until the next failing call on the same thread.
#[unsafe(no_mangle)]
pub extern "C" fn rtcell_last_error() -> *const c_char {
    #[cfg(feature = "std")]
    {
        LAST.with(|b| b.as_ptr() as *const Buf as *const c_char)
    }
    #[cfg(not(feature = "std"))]
    {
        LAST.0.get() as *const c_char
    }
}
