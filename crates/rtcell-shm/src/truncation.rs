//! A mapped file that a peer cuts short must not kill us.
//!
//! A region in /dev/shm (or one received as a descriptor of such a file) is shared with peers that hold
//! it open read-write, as they must to use it; any of them can `ftruncate` it, and every access of ours
//! to the pages cut off is then a SIGBUS, which ends the process. A memfd is sealed against that
//! (`F_SEAL_SHRINK`, see [`crate::mapping`]); a /dev/shm file cannot be sealed.
//!
//! So each mapping whose file can shrink is registered here ([`guard`]), and a SIGBUS handler,
//! installed once per process and chained to the handler that was there before, looks the faulting
//! address up: inside a registered mapping it gives the file its size back (`ftruncate`) and backs the
//! faulting page (`fallocate`), and returns, so the access is retried and reads zeros where the peer's
//! cut removed data; the region's own checks then report that as corruption, and [`repairs`] counts it.
//! When the file cannot back the page again (its file system is full, e.g. after the peer punched a
//! hole), the page is replaced in this process by a private page of zeros (`mmap MAP_FIXED`), cut off
//! from the peer: the access goes on rather than faulting forever.
//! A fault anywhere else goes to the previous handler, or to the default action (the process ends as
//! it would have without us).
//!
//! At most [`SLOTS`] such mappings are guarded at once in a process; [`guard`] refuses a further one.
//! Why not a crate: the handler must be async-signal-safe and look up a fixed table of atomics; the
//! signal-hook crates do not support handlers that repair a synchronous fault and retry it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// How many mappings one process can have guarded at once.
pub const SLOTS: usize = 64;

/// The page size of the mappings (regions are made of 4 KiB pages).
const PAGE: usize = 4096;

/// A slot's `start` while it is being filled.
const CLAIMED: usize = usize::MAX;

struct Slot {
    /// Start address of the mapping; 0 when free, [`CLAIMED`] while being filled.
    start: AtomicUsize,
    len: AtomicUsize,
    fd: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), fd: AtomicI32::new(-1) };
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
static REPAIRS: AtomicU64 = AtomicU64::new(0);
/// The handler that was installed before ours (set once, before ours is installed).
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Times a truncated file was given its size back in this process (each a peer's cut, seen on access).
pub fn repairs() -> u64 {
    REPAIRS.load(Ordering::Relaxed)
}

/// A guarded mapping; unregistered when dropped (before the mapping is unmapped and its file closed).
#[derive(Debug)]
pub struct Guard {
    slot: usize,
}

impl Drop for Guard {
    fn drop(&mut self) {
        TABLE[self.slot].start.store(0, Ordering::Release);
    }
}

/// Guards the mapping `[start, start + len)` of file `fd` (which must stay open and mapped while the
/// guard lives): a SIGBUS inside it gives the file `len` bytes again.
pub fn guard(start: *mut u8, len: usize, fd: i32) -> std::io::Result<Guard> {
    install()?;
    for (i, slot) in TABLE.iter().enumerate() {
        if slot.start.compare_exchange(0, CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            slot.len.store(len, Ordering::Relaxed);
            slot.fd.store(fd, Ordering::Relaxed);
            slot.start.store(start as usize, Ordering::Release);
            return Ok(Guard { slot: i });
        }
    }
    Err(std::io::Error::other(format!(
        "more than {SLOTS} shared regions backed by files that can shrink are mapped in this process"
    )))
}

fn install() -> std::io::Result<()> {
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let r = INSTALLED.get_or_init(|| {
        // SAFETY: sigaction with a zeroed struct we own, filled with our handler; the previous action is
        // written into `old`, which we own.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
            }
            let _ = PREVIOUS.set(old);
            if libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
            }
        }
        Ok(())
    });
    r.map_err(std::io::Error::from_raw_os_error)
}

/// The SIGBUS handler: async-signal-safe (atomics, ftruncate, sigaction, and the previous handler).
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // Only a fault (si_code > 0) has an address; a SIGBUS sent with kill() goes on as before.
    for slot in TABLE.iter().filter(|_| code > 0) {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || start == CLAIMED {
            continue;
        }
        let len = slot.len.load(Ordering::Relaxed);
        if addr >= start && addr - start < len {
            let fd = slot.fd.load(Ordering::Relaxed);
            let page = (addr - start) & !(PAGE - 1);
            // SAFETY: ftruncate and fallocate on the descriptor registered with this mapping, open while it
            // is guarded, within the mapping's length.
            let backed = unsafe {
                libc::ftruncate(fd, len as libc::off_t) == 0
                    && libc::fallocate(fd, 0, page as libc::off_t, PAGE as libc::off_t) == 0
            };
            // The file cannot back the page again (its file system is full: the access would fault
            // forever): this process gets a private page of zeros there instead, cut off from the peer.
            // SAFETY: replaces exactly one page inside our own mapping, which lives while it is guarded.
            let replaced = !backed
                && unsafe {
                    libc::mmap(
                        (start + page) as *mut libc::c_void,
                        PAGE,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    ) != libc::MAP_FAILED
                };
            if backed || replaced {
                REPAIRS.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
    chain(sig, info, ctx);
}

/// Not a fault of ours: what would have happened without us.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
    type Plain = extern "C" fn(libc::c_int);
    let Some(prev) = PREVIOUS.get() else { return default_action(sig) };
    match prev.sa_sigaction {
        // Ignored or default: what the kernel does with the signal then (for a fault, ignoring it is not
        // possible either: the process ends).
        libc::SIG_DFL | libc::SIG_IGN => default_action(sig),
        f if prev.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this signature.
            let f = unsafe { std::mem::transmute::<usize, Handler>(f) };
            f(sig, info, ctx)
        }
        f => {
            // SAFETY: the previous handler was installed without SA_SIGINFO, so it takes the signal only.
            let f = unsafe { std::mem::transmute::<usize, Plain>(f) };
            f(sig)
        }
    }
}

/// Restores the default action and raises the signal again: it is blocked while this handler runs, so
/// it is delivered (and ends the process) as the handler returns; a fault's access would fault again
/// anyway.
fn default_action(sig: libc::c_int) {
    // SAFETY: sigaction with a zeroed struct (SIG_DFL) we own; raise with a signal number.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
        libc::raise(sig);
    }
}
