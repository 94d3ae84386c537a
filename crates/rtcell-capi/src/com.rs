//! COM contexts: one or more COM channels of a region bound together (signal ids unique across them),
//! with this side's receive state. The functions on a context are in `explicit` (on a handle, bounded by the
//! caller's length) and `autosar` (the `Com_*` functions, on the thread's current context, see `current`).

use core::ffi::{c_char, c_void};
use core::ptr;

use rtcell_shm::{ComError, ComReceiver, ComView, Freshness, SignalRef};

use crate::error::fail;
use crate::region::rtcell_region;
use crate::{
    COM_BUSY, COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, E_OK, RTCELL_FRESH_NEVER, RTCELL_FRESH_NEW, RTCELL_FRESH_OLD,
    RTE_E_NO_DATA, Std_ReturnType, c_str, guard, slots,
};

// In this order: the generated header lists the functions as cbindgen meets them.
mod current;

mod explicit;

mod autosar;

pub use autosar::*;
pub use current::*;
pub use explicit::*;

/// Most COM channels one context binds.
pub const RTCELL_MAX_COM_CHANNELS: usize = 8;
/// Payloads (no allocator): bytes of the largest signal group a context can receive.
#[cfg(not(feature = "std"))]
const SHADOW_BYTES: usize = 2048;
/// Payloads: signals plus groups one channel of a context may hold.
#[cfg(not(feature = "std"))]
const SEEN_WORDS: usize = 256;
/// Payloads: words of the copy of a channel's table (header and two words per signal and group).
#[cfg(not(feature = "std"))]
const TABLE_WORDS: usize = 16 + 2 * SEEN_WORDS;

/// What this handle's calls did (not shared: the peer's calls are its own).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct rtcell_com_counters {
    /// Signals and signal groups sent.
    pub sent: u64,
    /// Signals and signal groups received (new or not).
    pub received: u64,
    /// Of those, values this handle had not read before.
    pub received_new: u64,
    /// Calls that failed.
    pub errors: u64,
    /// Calls that found the sender mid-update on every retry (`COM_BUSY`).
    pub busy: u64,
}

#[cfg(feature = "std")]
type Shadow = std::vec::Vec<u8>;
#[cfg(feature = "std")]
type Seen = std::vec::Vec<u64>;
#[cfg(not(feature = "std"))]
type Shadow = [u8; SHADOW_BYTES];
#[cfg(not(feature = "std"))]
type Seen = [u64; SEEN_WORDS];
#[cfg(feature = "std")]
type Table = std::vec::Vec<u64>;
#[cfg(not(feature = "std"))]
type Table = [u64; TABLE_WORDS];

/// One bound channel and this side's receive state for it.
struct Chan {
    /// The channel in shared memory; used only through [`Chan::view`] (its table pinned to `table`).
    live: ComView<'static>,
    /// The channel's table, copied out and checked at open: every length and offset comes from here, and
    /// every call checks that the live table still equals it (else `COM_SERVICE_NOT_AVAILABLE`).
    table: Table,
    shadow: Shadow,
    seen: Seen,
    shadow_len: usize,
    seen_len: usize,
    shadow_group: Option<u16>,
    /// Standalone signals looked up recently (each re-checked against its table entry on use).
    refs: [Option<SignalRef>; REFS],
    next_ref: usize,
}

/// Looked-up signals remembered per channel.
const REFS: usize = 4;

impl Chan {
    fn new(live: ComView<'static>, name: &str) -> Result<Chan, Std_ReturnType> {
        let words = live.table_words();
        #[cfg(feature = "std")]
        let mut table = std::vec![0u64; words];
        #[cfg(not(feature = "std"))]
        let mut table = {
            if words > TABLE_WORDS {
                return Err(fail(
                    E_NOT_OK,
                    format_args!(
                        "COM channel {name:?} has too many signals and groups for a payload (at most {SEEN_WORDS})"
                    ),
                ));
            }
            [0u64; TABLE_WORDS]
        };
        if live.pin(&mut table).is_err() {
            return Err(fail(
                COM_SERVICE_NOT_AVAILABLE,
                format_args!("COM channel {name:?}: its table changed while it was read (the peer is writing it)"),
            ));
        }
        let (shadow_len, seen_len) = ComReceiver::storage_needed(&live.pinned(&table));
        #[cfg(feature = "std")]
        let (shadow, seen) = (std::vec![0u8; shadow_len], std::vec![0u64; seen_len]);
        #[cfg(not(feature = "std"))]
        let (shadow, seen) = {
            if shadow_len > SHADOW_BYTES || seen_len > SEEN_WORDS {
                return Err(fail(
                    E_NOT_OK,
                    format_args!(
                        "COM channel {name:?} is too large for a payload ({shadow_len} group bytes, {seen_len} signals and groups; at most {SHADOW_BYTES} and {SEEN_WORDS})"
                    ),
                ));
            }
            ([0u8; SHADOW_BYTES], [0u64; SEEN_WORDS])
        };
        #[cfg(feature = "std")]
        let _ = name;
        Ok(Chan {
            live,
            table,
            shadow,
            seen,
            shadow_len,
            seen_len,
            shadow_group: None,
            refs: [None; REFS],
            next_ref: 0,
        })
    }

    /// The channel, with lengths and offsets from the table copied at open.
    fn view(&self) -> ComView<'_> {
        self.live.pinned(&self.table)
    }

    /// A receiver over this channel's state; `done` stores what it remembers.
    fn with_receiver<R>(&mut self, f: impl FnOnce(&mut ComReceiver<'_, '_>) -> R) -> Result<R, ComError> {
        let group = self.shadow_group;
        let mut rx = ComReceiver::resume(
            self.live.pinned(&self.table),
            &mut self.shadow[..self.shadow_len],
            &mut self.seen[..self.seen_len],
            group,
        )?;
        let r = f(&mut rx);
        self.shadow_group = rx.shadow_group();
        Ok(r)
    }
}

/// A COM context (opaque to C).
pub struct rtcell_com {
    chans: [Option<Chan>; RTCELL_MAX_COM_CHANNELS],
    n: usize,
    /// The channel of the last signal looked up (a hint, checked on use).
    last_signal_chan: usize,
    region: *mut rtcell_region,
    counters: rtcell_com_counters,
}

#[cfg(not(feature = "std"))]
crate::slots::pooled!(rtcell_com);

fn com_failed(e: ComError) -> Std_ReturnType {
    match e {
        ComError::NotOk(why) => fail(E_NOT_OK, format_args!("{why}")),
        ComError::ServiceNotAvailable => fail(
            COM_SERVICE_NOT_AVAILABLE,
            format_args!("the COM channel's table is corrupt (changed by the peer after attach)"),
        ),
        ComError::Busy => fail(COM_BUSY, format_args!("the sender was mid-update on every retry")),
        ComError::Timeout => fail(RTE_E_NO_DATA, format_args!("no new value before the timeout")),
    }
}

fn fresh_code(f: Freshness) -> u8 {
    match f {
        Freshness::NeverWritten => RTCELL_FRESH_NEVER,
        Freshness::Old => RTCELL_FRESH_OLD,
        Freshness::New => RTCELL_FRESH_NEW,
    }
}

impl rtcell_com {
    /// Which bound channel holds signal `id`, with the signal's (max length, dynamic), looked up in the
    /// channel's table (shared memory, re-checked on every call). The channel of the last signal looked
    /// up is tried first: a generated step calls the same few ids over and over.
    fn find_signal(&mut self, id: u16) -> Result<(usize, usize, bool), Std_ReturnType> {
        let n = self.n;
        let probe = |c: &Option<Chan>| c.as_ref().map(|c| c.view().signal_len(id));
        let hint = self.last_signal_chan;
        let order = core::iter::once(hint).chain((0..n).filter(move |&i| i != hint));
        for i in order.filter(|&i| i < n) {
            match probe(&self.chans[i]) {
                Some(Ok((len, dynamic))) => {
                    self.last_signal_chan = i;
                    return Ok((i, len, dynamic));
                }
                Some(Err(ComError::NotOk(_))) | None => continue,
                Some(Err(e)) => return Err(com_failed(e)),
            }
        }
        Err(fail(E_NOT_OK, format_args!("unknown signal id {id}")))
    }

    /// Standalone signal `id`, looked up once and remembered: (channel, reference). `None` for group
    /// members and unknown ids (the full path handles and reports those).
    fn signal_ref(&mut self, id: u16) -> Option<(usize, SignalRef)> {
        // Every channel's remembered signals first: a step alternating between the signals of two
        // channels (receive from one, send on the other) finds both here.
        for (i, c) in self.chans[..self.n].iter().enumerate() {
            if let Some(r) = c.as_ref().and_then(|c| c.refs.iter().flatten().find(|r| r.id() == id)) {
                return Some((i, *r));
            }
        }
        let (i, _, _) = self.find_signal(id).ok()?;
        let c = self.chans[i].as_mut()?;
        if let Some(r) = c.refs.iter().flatten().find(|r| r.id() == id) {
            return Some((i, *r));
        }
        let r = c.view().signal_ref(id).ok()?;
        c.refs[c.next_ref] = Some(r);
        c.next_ref = (c.next_ref + 1) % REFS;
        Some((i, r))
    }

    /// The bound channel holding signal `id`.
    fn chan_of_signal(&mut self, id: u16) -> Result<&mut Chan, Std_ReturnType> {
        let (i, _, _) = self.find_signal(id)?;
        self.chans[i].as_mut().ok_or(E_NOT_OK)
    }

    fn chan_of_group(&mut self, id: u16) -> Result<&mut Chan, Std_ReturnType> {
        let n = self.n;
        let found = self.chans[..n]
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| !matches!(c.view().group_len(id), Err(ComError::NotOk(_)))));
        match found.and_then(|i| self.chans[i].as_mut()) {
            Some(c) => Ok(c),
            None => Err(fail(E_NOT_OK, format_args!("unknown signal group id {id}"))),
        }
    }

    /// Counts a successful receive.
    fn received(&mut self, fresh: Freshness) {
        self.counters.received += 1;
        if fresh == Freshness::New {
            self.counters.received_new += 1;
        }
    }

    /// Counts the outcome of a call.
    fn count(&mut self, code: Std_ReturnType) -> Std_ReturnType {
        if code == COM_BUSY {
            self.counters.busy += 1;
        }
        if code != E_OK {
            self.counters.errors += 1;
        }
        code
    }

    fn send(&mut self, id: u16, data: &[u8]) -> Std_ReturnType {
        let r = match self.chan_of_signal(id) {
            Ok(c) => c.view().send_signal(id, data).map_or_else(com_failed, |()| E_OK),
            Err(code) => code,
        };
        self.sent(r)
    }

    /// Sends through channel `i` (from `find_signal`).
    fn send_in(&mut self, i: usize, id: u16, data: &[u8]) -> Std_ReturnType {
        let r = match self.chans[i].as_ref() {
            Some(c) => c.view().send_signal(id, data).map_or_else(com_failed, |()| E_OK),
            None => E_NOT_OK,
        };
        self.sent(r)
    }

    fn sent(&mut self, r: Std_ReturnType) -> Std_ReturnType {
        if r == E_OK {
            self.counters.sent += 1;
        }
        self.count(r)
    }

    /// (max length, dynamic) of signal `id`.
    fn info(&mut self, id: u16) -> Result<(usize, bool), Std_ReturnType> {
        self.find_signal(id).map(|(_, len, dynamic)| (len, dynamic))
    }

    fn receive(&mut self, id: u16, out: &mut [u8]) -> Result<(usize, Freshness), Std_ReturnType> {
        match self.find_signal(id) {
            Ok((i, _, _)) => self.receive_in(i, id, out),
            Err(code) => Err(self.count(code)),
        }
    }

    /// Receives through channel `i` (from `find_signal`).
    fn receive_in(&mut self, i: usize, id: u16, out: &mut [u8]) -> Result<(usize, Freshness), Std_ReturnType> {
        let r = match self.chans[i].as_mut().ok_or(E_NOT_OK) {
            Ok(c) => match c.with_receiver(|rx| rx.receive_signal(id, out)) {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) | Err(e) => Err(com_failed(e)),
            },
            Err(code) => Err(code),
        };
        match r {
            Ok((len, fresh)) => {
                self.received(fresh);
                Ok((len, fresh))
            }
            Err(code) => Err(self.count(code)),
        }
    }

    fn send_group(&mut self, id: u16) -> Std_ReturnType {
        let r = match self.chan_of_group(id) {
            Ok(c) => c.view().send_signal_group(id).map_or_else(com_failed, |()| E_OK),
            Err(code) => code,
        };
        if r == E_OK {
            self.counters.sent += 1;
        }
        self.count(r)
    }

    fn receive_group(&mut self, id: u16) -> Std_ReturnType {
        let r = match self.chan_of_group(id) {
            Ok(c) => match c.with_receiver(|rx| rx.receive_signal_group(id)) {
                Ok(Ok(fresh)) => {
                    self.received(fresh);
                    E_OK
                }
                Ok(Err(e)) | Err(e) => com_failed(e),
            },
            Err(code) => code,
        };
        self.count(r)
    }
}

/// `data` as a byte slice; NULL is fine only for zero bytes.
///
/// # Safety
/// `data` NULL or readable for `len` bytes.
unsafe fn bytes<'a>(data: *const c_void, len: usize) -> Result<&'a [u8], Std_ReturnType> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(fail(E_NOT_OK, format_args!("data is NULL")));
    }
    // SAFETY: non-NULL, and readable for len bytes by the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(data as *const u8, len) })
}

/// `buf` as a writable byte slice; NULL is fine only for zero bytes.
///
/// # Safety
/// `buf` NULL or writable for `len` bytes.
unsafe fn bytes_mut<'a>(buf: *mut c_void, len: usize) -> Result<&'a mut [u8], Std_ReturnType> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(fail(E_NOT_OK, format_args!("buffer is NULL")));
    }
    // SAFETY: non-NULL, and writable for len bytes by the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(buf as *mut u8, len) })
}

/// Binds COM channels `channels[0..count]` of region `r` (`count` 0: every COM channel of the region)
/// into one context; signal and group ids must be unique across them. `*out` gets the handle.
///
/// Each channel's signal table is copied out of the region here and checked: every length and offset
/// the context uses comes from that copy, never from the shared table again. Every call checks that
/// the table entries it uses (and the channel's counts) in the region still equal the copy; while they
/// do not (the peer changed them), the call returns COM_SERVICE_NOT_AVAILABLE, and calls work again
/// once the table reads as the copy. The copy is what the region held at open: a program that cannot
/// trust the region at that moment checks each signal with `rtcell_com_signal_info` against the length
/// its own configuration fixes before it uses `Com_SendSignal` / `Com_ReceiveSignal` (which carry no
/// length), or uses `rtcell_com_send_signal` / `rtcell_com_receive_signal`, bounded by its buffer.
///
/// # Safety
/// `r` a live region handle; `channels` NULL (with count 0) or `count` NUL-terminated strings; `out`
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_open(
    r: *mut rtcell_region,
    channels: *const *const c_char,
    count: usize,
    out: *mut *mut rtcell_com,
) -> Std_ReturnType {
    guard(|| {
        if out.is_null() {
            return fail(E_NOT_OK, format_args!("out is NULL"));
        }
        if r.is_null() {
            return fail(E_NOT_OK, format_args!("the region handle is NULL"));
        }
        // SAFETY: the caller's contract: a live region handle.
        let region = unsafe { &*r };
        let view = region.view;
        let mut com = rtcell_com {
            chans: [const { None }; RTCELL_MAX_COM_CHANNELS],
            n: 0,
            last_signal_chan: 0,
            region: r,
            counters: Default::default(),
        };
        let add = |com: &mut rtcell_com, name: &str| -> Std_ReturnType {
            if com.n == RTCELL_MAX_COM_CHANNELS {
                return fail(E_NOT_OK, format_args!("more than {RTCELL_MAX_COM_CHANNELS} COM channels in one context"));
            }
            let v = match view.com(name) {
                Ok(v) => v,
                Err(rtcell_shm::AttachError::NotFound) => {
                    return fail(E_NOT_OK, format_args!("no COM channel named {name:?} in the region"));
                }
                Err(rtcell_shm::AttachError::WrongKind { found, .. }) => {
                    return fail(E_NOT_OK, format_args!("channel {name:?} is a {found:?}, not a COM channel"));
                }
                Err(e) => return crate::region::attach_failed(&e),
            };
            let c = match Chan::new(v, name) {
                Ok(c) => c,
                Err(code) => return code,
            };
            // Ids must be unique across the context: C names a signal by its id alone.
            let v = c.view();
            for other in com.chans[..com.n].iter().flatten() {
                let clash =
                    v.signal_ids().find(|&id| !matches!(other.view().signal_len(id), Err(ComError::NotOk(_)))).or_else(
                        || v.group_ids().find(|&id| !matches!(other.view().group_len(id), Err(ComError::NotOk(_)))),
                    );
                if let Some(id) = clash {
                    return fail(
                        E_NOT_OK,
                        format_args!("id {id} of COM channel {name:?} is also in another bound channel"),
                    );
                }
            }
            com.chans[com.n] = Some(c);
            com.n += 1;
            E_OK
        };
        if count == 0 {
            for i in 0..view.len() {
                if let Ok(e) = view.entry(i)
                    && e.kind == rtcell_shm::ChannelKind::Com
                {
                    let mut name = [0u8; rtcell_shm::region::MAX_NAME];
                    let n = e.name().len().min(name.len());
                    name[..n].copy_from_slice(&e.name().as_bytes()[..n]);
                    let name = core::str::from_utf8(&name[..n]).unwrap_or("?");
                    tri!(code_ok(add(&mut com, name)));
                }
            }
            if com.n == 0 {
                return fail(E_NOT_OK, format_args!("the region has no COM channel"));
            }
        } else {
            if channels.is_null() {
                return fail(E_NOT_OK, format_args!("channels is NULL with count {count}"));
            }
            for i in 0..count {
                // SAFETY: channels holds count pointers by the caller's contract.
                let p = unsafe { *channels.add(i) };
                // SAFETY: each is NULL or a NUL-terminated string.
                let name = tri!(unsafe { c_str(p, "a channel name") });
                tri!(code_ok(add(&mut com, name)));
            }
        }
        match slots::alloc(com) {
            Some(p) => {
                // SAFETY: out checked non-NULL above.
                unsafe { *out = p };
                E_OK
            }
            None => fail(E_NOT_OK, format_args!("too many COM contexts open at once")),
        }
    })
}

fn code_ok(c: Std_ReturnType) -> Result<(), Std_ReturnType> {
    if c == E_OK { Ok(()) } else { Err(c) }
}

/// Releases a COM context (NULL is fine); if it is this thread's current one, the thread has none after.
///
/// # Safety
/// `c` NULL or a handle from `rtcell_com_open`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_com_close(c: *mut rtcell_com) {
    if c.is_null() {
        return;
    }
    if current() == c {
        set_current(ptr::null_mut());
    }
    // SAFETY: the caller's contract.
    unsafe { slots::free(c) };
}
