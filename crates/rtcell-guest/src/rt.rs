//! The payload runtime: entry point, hypercalls, panic reporting, TSC clock, the channel region, and the
//! C memory functions the compiler calls (payloads link with `-nostdlib`).
//!
//! A payload is a `#![no_std]`, `#![no_main]` binary that names its main function with
//! [`entry!`](crate::entry):
//!
//! ```ignore
//! #![no_std]
//! #![no_main]
//! use rtcell_guest::abi::BootInfo;
//!
//! rtcell_guest::entry!(main);
//!
//! fn main(boot: &'static BootInfo) -> i32 {
//!     rtcell_guest::log!("hello from CPU {}", boot.cell_cpu);
//!     0
//! }
//! ```
//!
//! It runs in 64-bit ring 3: `hlt`, `cli`, port I/O and control registers are not allowed. A hypercall
//! is a 32-bit write to `abi::hypercall_gpa(n)`, an address with no memory behind it, so the write exits
//! to the monitor. There are no interrupts; the payload polls the TSC and shared memory.

use core::arch::asm;
use core::fmt::{self, Write};
use core::panic::PanicInfo;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering, compiler_fence};

use crate::abi::{
    ARGS_SIZE, BOOT_INFO_GPA, BOOT_MAGIC, BOOT_VERSION, BootInfo, HC_DONE, HC_LOG, HC_PANIC, HC_SLEEP, MSG_GPA,
    MSG_SIZE, hypercall_gpa,
};

/// Defines the payload's entry point `_start` and its panic handler, and names its main function,
/// `fn main(boot: &'static BootInfo) -> i32`: its return value is the exit code given to `done`.
///
/// Both items are emitted into the payload crate (not into this library), so a host build that
/// happens to enable feature `payload` never gets a second `_start` or panic handler.
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        /// Where the vCPU starts: the monitor sets RIP here and RSP to the top of the stack minus 8
        /// (as after a `call`), so this is an ordinary C function.
        #[unsafe(no_mangle)]
        pub extern "C" fn _start() -> ! {
            let main: fn(&'static $crate::abi::BootInfo) -> i32 = $main;
            $crate::rt::start(main)
        }

        #[panic_handler]
        fn __rtcell_panic(info: &::core::panic::PanicInfo<'_>) -> ! {
            $crate::rt::panic_report(info)
        }
    };
}

/// Sends a formatted line to the monitor's log (truncated to `MSG_SIZE` bytes).
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {{
        let mut w = $crate::rt::MsgWriter::new();
        let _ = ::core::fmt::Write::write_fmt(&mut w, ::core::format_args!($($arg)*));
        w.send_log();
    }};
}

/// Highest TSC frequency believed (100 GHz); anything above is a broken boot-info page.
pub const MAX_TSC_KHZ: u64 = 100_000_000;

/// Runs the payload: checks the boot-info page, calls `main`, reports its exit code. Called by `_start`.
#[doc(hidden)]
pub fn start(main: fn(&'static BootInfo) -> i32) -> ! {
    // SAFETY: the monitor maps the boot-info page at BOOT_INFO_GPA (page-aligned, so aligned for
    // BootInfo) read-only for the whole run and writes it before the vCPU starts; it never changes
    // afterwards, and BootInfo is plain integers, so whatever bytes are there form a valid value.
    let boot: &'static BootInfo = unsafe { &*(BOOT_INFO_GPA as *const BootInfo) };
    if boot.magic != BOOT_MAGIC {
        panic!(
            "boot info: magic {:#018x}, expected {BOOT_MAGIC:#018x} (\"RTCBOOT1\"): no boot-info page at {BOOT_INFO_GPA:#x}",
            boot.magic
        );
    }
    if boot.version != BOOT_VERSION {
        panic!(
            "boot info: version {}, this payload was built for version {BOOT_VERSION}: monitor and payload are from different rtcell versions",
            boot.version
        );
    }
    if boot.size as usize != size_of::<BootInfo>() {
        panic!(
            "boot info: {} bytes, this payload expects {}: monitor and payload disagree on its layout",
            boot.size,
            size_of::<BootInfo>()
        );
    }
    if boot.tsc_khz == 0 || boot.tsc_khz > MAX_TSC_KHZ {
        panic!("boot info: impossible TSC frequency {} kHz", boot.tsc_khz);
    }
    if boot.args_len as usize > ARGS_SIZE {
        panic!("boot info: {} bytes of arguments, at most {ARGS_SIZE}", boot.args_len);
    }
    done(main(boot))
}

// --- hypercalls ---

/// Hypercall `n` with argument `value`: a 32-bit write to `hypercall_gpa(n)`, which exits to the monitor
/// as an MMIO write (`KVM_EXIT_MMIO`).
#[inline(always)]
fn hypercall(n: u16, value: u32) {
    // The monitor reads the message page: every write to it must be done before the exit.
    compiler_fence(Ordering::SeqCst);
    // SAFETY: the monitor's page tables map the hypercall window user-writable, but no memory backs it,
    // so the write only exits to the monitor; no Rust object lives there.
    unsafe { (hypercall_gpa(n) as *mut u32).write_volatile(value) };
}

/// Waits for the monitor to stop the vCPU (it does after `done` and `panic`; `hlt` is privileged).
fn spin_forever() -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// Logs `text` (truncated to `MSG_SIZE` bytes at a character boundary).
pub fn log(text: &str) {
    let mut w = MsgWriter::new();
    let _ = w.write_str(text);
    w.send_log();
}

/// Pauses the vCPU for `ns` nanoseconds: the monitor sleeps on the host, then enters the guest again.
/// A VM exit and a host sleep, so it belongs well before a deadline, never on a timed path.
pub fn sleep_ns(ns: u32) {
    hypercall(HC_SLEEP, ns);
}

/// Ends the payload with exit code `code`. The vCPU does not run again.
pub fn done(code: i32) -> ! {
    hypercall(HC_DONE, code as u32);
    spin_forever()
}

static PANICKING: AtomicBool = AtomicBool::new(false);

/// Reports a panic through hypercall `HC_PANIC`: "panicked at FILE:LINE:COL: MESSAGE". Called by the panic
/// handler that [`entry!`](crate::entry) defines.
#[doc(hidden)]
pub fn panic_report(info: &PanicInfo<'_>) -> ! {
    let mut w = MsgWriter::new();
    if PANICKING.swap(true, Ordering::Relaxed) {
        // Formatting the first message panicked: report that, without formatting anything.
        let _ = w.write_str("panicked while reporting a panic");
    } else {
        let _ = match info.location() {
            Some(l) => write!(w, "panicked at {}:{}:{}: {}", l.file(), l.line(), l.column(), info.message()),
            None => write!(w, "panicked: {}", info.message()),
        };
    }
    hypercall(HC_PANIC, w.len() as u32);
    spin_forever()
}

/// Bytes of `s` that fit in `room` bytes without splitting a character.
fn fit(s: &str, room: usize) -> usize {
    if s.len() <= room {
        return s.len();
    }
    let mut n = room;
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

/// A formatter that writes straight into the message page at `MSG_GPA`, silently truncating at
/// `MSG_SIZE` bytes. Writes are volatile byte stores through a raw pointer: no Rust reference to the
/// page exists, so a panic while a log line is being formatted can safely reuse the page.
pub struct MsgWriter {
    len: usize,
}

impl MsgWriter {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> MsgWriter {
        MsgWriter { len: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Hands the text to the monitor's log.
    pub fn send_log(self) {
        hypercall(HC_LOG, self.len as u32);
    }
}

impl Write for MsgWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = fit(s, MSG_SIZE - self.len);
        let dst = (MSG_GPA as usize + self.len) as *mut u8;
        for (i, &b) in s.as_bytes()[..n].iter().enumerate() {
            // SAFETY: self.len + i < MSG_SIZE, so the byte lies in the message page, which the monitor
            // maps read-write for the payload and which holds no Rust object.
            unsafe { dst.add(i).write_volatile(b) };
        }
        self.len += n;
        Ok(())
    }
}

/// A fixed-size text buffer (no allocator): `write!` into it, then [`FmtBuf::as_str`]. Text beyond `N`
/// bytes is dropped at a character boundary.
pub struct FmtBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> FmtBuf<N> {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        FmtBuf { buf: [0; N], len: 0 }
    }

    pub fn as_str(&self) -> &str {
        // Only whole characters are ever copied in, so this is always valid UTF-8.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> Write for FmtBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = fit(s, N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

// --- time ---

/// The time-stamp counter. Not serialising: good for polling deadlines and timing loops.
#[inline(always)]
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: rdtsc only reads the TSC into edx:eax; the monitor leaves CR4.TSD clear, so ring 3 may.
    unsafe {
        asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    }
    (hi as u64) << 32 | lo as u64
}

/// The time-stamp counter read after every earlier instruction has completed (`lfence; rdtsc`), for
/// timing a piece of work: the read cannot be taken before the work it follows. No `nomem`, so the
/// compiler does not move memory accesses across it either.
#[inline(always)]
pub fn rdtsc_ordered() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: lfence (SSE2, always present on x86_64) waits for earlier instructions and touches no
    // memory; rdtsc as in `rdtsc`.
    unsafe {
        asm!("lfence", "rdtsc", out("eax") lo, out("edx") hi, options(nostack, preserves_flags));
    }
    (hi as u64) << 32 | lo as u64
}

/// Converts between TSC ticks and nanoseconds with 32.32 fixed-point factors (a multiply, no division
/// on the fast path; relative error below 1e-9 for any TSC from 1 MHz up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    tsc_khz: u64,
    ns_per_tick_q32: u64,
    ticks_per_ns_q32: u64,
}

impl Clock {
    /// The clock at the TSC frequency the monitor calibrated.
    pub fn from_boot(boot: &BootInfo) -> Clock {
        Clock::from_khz(boot.tsc_khz)
    }

    /// A clock for a TSC of `khz` kHz (clamped to 1..=`MAX_TSC_KHZ`).
    pub const fn from_khz(khz: u64) -> Clock {
        let khz = if khz == 0 {
            1
        } else if khz > MAX_TSC_KHZ {
            MAX_TSC_KHZ
        } else {
            khz
        };
        // Neither shift overflows: 1e6 << 32 < 2^52 and MAX_TSC_KHZ << 32 < 2^59.
        Clock { tsc_khz: khz, ns_per_tick_q32: (1_000_000u64 << 32) / khz, ticks_per_ns_q32: (khz << 32) / 1_000_000 }
    }

    pub fn tsc_khz(&self) -> u64 {
        self.tsc_khz
    }

    /// Nanoseconds in `ticks` TSC ticks (saturating).
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        mul_q32(ticks, self.ns_per_tick_q32)
    }

    /// TSC ticks in `ns` nanoseconds (saturating).
    #[inline]
    pub fn ns_to_ticks(&self, ns: u64) -> u64 {
        mul_q32(ns, self.ticks_per_ns_q32)
    }
}

#[inline]
fn mul_q32(x: u64, factor_q32: u64) -> u64 {
    u64::try_from((x as u128 * factor_q32 as u128) >> 32).unwrap_or(u64::MAX)
}

// --- the channel region ---

/// The shared channel region as words, for `RegionView::attach`. Panics (with a report to the monitor)
/// if the boot-info page describes an impossible region; an empty region gives an empty slice.
pub fn region(boot: &BootInfo) -> &'static [AtomicU64] {
    let (gpa, size) = (boot.region_gpa, boot.region_size);
    if size == 0 {
        return &[];
    }
    let end = gpa.checked_add(size);
    if gpa % 4096 != 0 || size % 8 != 0 || gpa < boot.ram_size || end.is_none_or(|e| e > 1 << 47) {
        panic!("boot info: impossible region at {gpa:#x}, {size} bytes (RAM ends at {:#x})", boot.ram_size);
    }
    // SAFETY: the monitor maps `size` bytes at `gpa` (page-aligned, so aligned for AtomicU64; above
    // guest RAM and within the canonical lower half, as checked) for the whole run, and nothing else
    // in the payload refers to that memory. The host reads and writes it concurrently, which is why
    // it is only ever accessed through atomics.
    unsafe { core::slice::from_raw_parts(gpa as *const AtomicU64, (size / 8) as usize) }
}

// --- C memory functions ---
//
// The compiler lowers copies, fills and comparisons to calls of these symbols. They must not be
// written as plain Rust loops, which LLVM recognises and turns back into calls to themselves: copies
// and fills are `rep movsb` / `rep stosb` (fast on every CPU with ERMSB), comparisons use volatile
// loads. The direction flag is clear on entry (C ABI and Rust's asm rules) and left clear.

/// # Safety
/// `dest` and `src` valid for `n` bytes and not overlapping.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees both ranges are valid for n bytes; `rep movsb` copies exactly
    // rcx = n bytes forwards from rsi to rdi.
    unsafe {
        asm!("rep movsb", inout("rcx") n => _, inout("rdi") dest => _, inout("rsi") src => _,
            options(nostack, preserves_flags));
    }
    dest
}

/// # Safety
/// `dest` and `src` valid for `n` bytes; they may overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dest as usize).wrapping_sub(src as usize) >= n {
        // `dest` is below `src`, or past its end: a forward copy never reads a byte it wrote.
        // SAFETY: as in memcpy; overlap with dest < src is fine forwards.
        unsafe {
            asm!("rep movsb", inout("rcx") n => _, inout("rdi") dest => _, inout("rsi") src => _,
                options(nostack, preserves_flags));
        }
    } else {
        // `dest` lies inside `src` (so n >= 1): copy backwards, from the last byte down.
        // SAFETY: the caller guarantees both ranges are valid for n bytes; with DF set `rep movsb`
        // copies n bytes from rsi downwards; `cld` restores the direction flag.
        unsafe {
            asm!("std", "rep movsb", "cld",
                inout("rcx") n => _,
                inout("rdi") dest.wrapping_add(n - 1) => _,
                inout("rsi") src.wrapping_add(n - 1) => _,
                options(nostack));
        }
    }
    dest
}

/// # Safety
/// `dest` valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memset(dest: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees dest is valid for n bytes; `rep stosb` stores al n times.
    unsafe {
        asm!("rep stosb", inout("rcx") n => _, inout("rdi") dest => _, in("al") c as u8,
            options(nostack, preserves_flags));
    }
    dest
}

/// # Safety
/// `a` and `b` valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: i < n and the caller guarantees both ranges are valid for n bytes. Volatile, so
        // LLVM cannot recognise the loop as a memcmp and call this very function.
        let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// # Safety
/// `a` and `b` valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract as memcmp.
    unsafe { memcmp(a, b, n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_never_splits_a_character() {
        assert_eq!(fit("abc", 5), 3);
        assert_eq!(fit("abc", 2), 2);
        assert_eq!(fit("aé", 2), 1, "é is two bytes");
        assert_eq!(fit("€", 2), 0);
        assert_eq!(fit("", 0), 0);
    }

    #[test]
    fn fmt_buf_truncates() {
        let mut b = FmtBuf::<8>::new();
        let s = "ééé";
        write!(b, "{}-{s}", 1234).unwrap();
        assert_eq!(b.as_str(), "1234-é");
        write!(b, "x").unwrap();
        assert_eq!(b.as_str(), "1234-éx");
        write!(b, "yz").unwrap();
        assert_eq!(b.as_str(), "1234-éx");
    }

    #[test]
    fn clock_converts_both_ways() {
        let c = Clock::from_khz(2_500_000);
        assert_eq!(c.ns_to_ticks(1_000_000), 2_500_000);
        let ns = c.ticks_to_ns(2_500_000_000);
        assert!(ns.abs_diff(1_000_000_000) <= 1, "{ns}");
        assert_eq!(Clock::from_khz(0).tsc_khz(), 1);
        assert_eq!(Clock::from_khz(u64::MAX).tsc_khz(), MAX_TSC_KHZ);
        assert_eq!(Clock::from_khz(1).ticks_to_ns(u64::MAX), u64::MAX, "saturates");
        let odd = Clock::from_khz(2_994_371);
        let t = odd.ns_to_ticks(1_000_000_000);
        assert!(t.abs_diff(2_994_371_000) <= 3, "{t}");
    }

    #[test]
    fn mem_functions() {
        let mut a = *b"0123456789";
        // SAFETY: all ranges lie inside `a`.
        unsafe {
            let p = a.as_mut_ptr();
            memmove(p.add(2), p, 5); // overlapping, backwards
            assert_eq!(&a, b"0101234789");
            memmove(p, p.add(3), 4); // overlapping, forwards
            assert_eq!(&a, b"1234234789");
            memset(p, b'x' as i32, 3);
            assert_eq!(&a, b"xxx4234789");
            memcpy(p, b"ab".as_ptr(), 2);
            assert_eq!(&a, b"abx4234789");
            assert_eq!(memcmp(b"abc".as_ptr(), b"abd".as_ptr(), 3), -1);
            assert_eq!(memcmp(b"abc".as_ptr(), b"abd".as_ptr(), 2), 0);
            assert!(bcmp(b"b".as_ptr(), b"a".as_ptr(), 1) != 0);
        }
    }
}
