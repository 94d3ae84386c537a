//! COM contexts: one or more COM channels of a region bound together (signal ids unique across them),
//! with this side's receive state, and the AUTOSAR `Com_*` functions on the thread's current context.

use core::ffi::{c_char, c_void};
use core::ptr;

use rtcell_shm::{ComError, ComReceiver, ComView, Freshness, SignalRef};

use crate::error::fail;
use crate::region::rtcell_region;
use crate::{
    COM_BUSY, COM_SERVICE_NOT_AVAILABLE, Com_SignalGroupIdType, Com_SignalIdType, E_NOT_OK, E_OK, RTCELL_FRESH_NEVER,
    RTCELL_FRESH_NEW, RTCELL_FRESH_OLD, RTE_E_NO_DATA, Std_ReturnType, c_str, guard, slots,
};

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

#[cfg(feature = "std")]
std::thread_local! {
    static CURRENT: core::cell::Cell<*mut rtcell_com> = const { core::cell::Cell::new(ptr::null_mut()) };
    /// What `rtcell_cell_attach` made for this thread (released by the next one).
    static CELL: core::cell::Cell<(*mut rtcell_region, *mut rtcell_com)> =
        const { core::cell::Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

#[cfg(feature = "std")]
fn current() -> *mut rtcell_com {
    CURRENT.with(|c| c.get())
}

#[cfg(feature = "std")]
fn set_current(p: *mut rtcell_com) {
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
fn current() -> *mut rtcell_com {
    CURRENT.load(core::sync::atomic::Ordering::Relaxed)
}

#[cfg(not(feature = "std"))]
fn set_current(p: *mut rtcell_com) {
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
