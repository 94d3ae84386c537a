//! Queued send/receive with RTE-style codes over ring channels: every message is delivered once, in
//! order; a full queue refuses (`RTE_E_LIMIT`: the message was never queued, so it is counted as refused,
//! not lost); a receiver learns of messages that were queued and then lost before the one it gets
//! (`RTE_E_LOST_DATA`, from its own count, not from the peer's counters).

use core::ffi::{c_char, c_void};

use rtcell_shm::{Consumer, Producer, RecvError, RingView, SendError};

use crate::error::fail;
use crate::region::rtcell_region;
use crate::{
    COM_SERVICE_NOT_AVAILABLE, E_NOT_OK, RTE_E_LIMIT, RTE_E_LOST_DATA, RTE_E_NO_DATA, RTE_E_OK, Std_ReturnType, c_str,
    guard, slots,
};

/// The ring's shared counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct rtcell_queue_counters {
    /// Messages the sender put in.
    pub sent: u64,
    /// Messages the receiver took out.
    pub received: u64,
    /// Messages that were queued and then lost before the receiver took them (overwritten by the sender).
    pub lost: u64,
    /// Messages waiting now (approximate while both sides run).
    pub queued: u64,
    /// Sends refused because the queue was full (`RTE_E_LIMIT`): never queued, so not lost.
    pub refused: u64,
}

/// A queue handle (opaque to C): one side of one ring; a ring has one sender and one receiver.
pub struct rtcell_queue {
    view: RingView<'static>,
    producer: Option<Producer<'static>>,
    consumer: Option<Consumer<'static>>,
    /// The receiver's lost-message count already reported (`RTE_E_LOST_DATA`).
    lost_seen: u64,
}

#[cfg(not(feature = "std"))]
crate::slots::pooled!(rtcell_queue);

/// Opens ring channel `ring` of region `r` as a queue. `*out` gets the handle.
///
/// # Safety
/// `r` a live region handle or NULL; `ring` NULL or NUL-terminated; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_queue_open(
    r: *mut rtcell_region,
    ring: *const c_char,
    out: *mut *mut rtcell_queue,
) -> Std_ReturnType {
    guard(|| {
        if out.is_null() {
            return fail(E_NOT_OK, format_args!("out is NULL"));
        }
        if r.is_null() {
            return fail(E_NOT_OK, format_args!("the region handle is NULL"));
        }
        // SAFETY: the caller's contract.
        let name = tri!(unsafe { c_str(ring, "ring") });
        // SAFETY: the caller's contract: a live region handle.
        let view = match unsafe { &*r }.view.ring(name) {
            Ok(v) => v,
            Err(rtcell_shm::AttachError::NotFound) => {
                return fail(E_NOT_OK, format_args!("no ring named {name:?} in the region"));
            }
            Err(rtcell_shm::AttachError::WrongKind { found, .. }) => {
                return fail(E_NOT_OK, format_args!("channel {name:?} is a {found:?}, not a ring"));
            }
            Err(e) => return crate::region::attach_failed(&e),
        };
        let q = rtcell_queue { view, producer: None, consumer: None, lost_seen: 0 };
        match slots::alloc(q) {
            Some(p) => {
                // SAFETY: out checked non-NULL.
                unsafe { *out = p };
                RTE_E_OK
            }
            None => fail(E_NOT_OK, format_args!("too many queues open at once")),
        }
    })
}

/// Releases a queue handle (NULL is fine).
///
/// # Safety
/// `q` NULL or a handle from `rtcell_queue_open`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_queue_close(q: *mut rtcell_queue) {
    if !q.is_null() {
        // SAFETY: the caller's contract.
        unsafe { slots::free(q) };
    }
}

/// Queues `len` bytes (at most the ring's frame size). RTE_E_OK, RTE_E_LIMIT when full (the message is
/// not queued; it is counted as refused, and the receiver is not told of a loss), E_NOT_OK for bad
/// arguments or a message too long.
///
/// # Safety
/// `q` a live handle or NULL; `data` readable for `len` bytes (or NULL with len 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_queue_send(q: *mut rtcell_queue, data: *const c_void, len: usize) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let q = tri!(unsafe { crate::handle(q, "queue") });
        let data: &[u8] = if len == 0 {
            &[]
        } else if data.is_null() {
            return fail(E_NOT_OK, format_args!("data is NULL"));
        } else {
            // SAFETY: non-NULL and readable for len bytes by the caller's contract.
            unsafe { core::slice::from_raw_parts(data as *const u8, len) }
        };
        let view = q.view;
        let p = q.producer.get_or_insert_with(|| view.producer());
        match p.try_send(data) {
            Ok(()) => RTE_E_OK,
            Err(SendError::Full) => fail(RTE_E_LIMIT, format_args!("the queue is full")),
            Err(SendError::TooLarge { len, max }) => {
                fail(E_NOT_OK, format_args!("a {len}-byte message; the queue takes at most {max}"))
            }
            Err(e) => fail(COM_SERVICE_NOT_AVAILABLE, format_args!("the ring is corrupt: {e:?}")),
        }
    })
}

/// Takes the oldest message into `buf`. RTE_E_OK (or-ed with RTE_E_LOST_DATA when messages were lost
/// since the last receive), RTE_E_NO_DATA when empty, E_NOT_OK when `buf_len` is shorter than the message
/// (which stays queued; `*len_out` then says how long it is).
///
/// # Safety
/// `q` a live handle or NULL; `buf` writable for `buf_len` bytes; `len_out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_queue_receive(
    q: *mut rtcell_queue,
    buf: *mut c_void,
    buf_len: usize,
    len_out: *mut usize,
) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let q = tri!(unsafe { crate::handle(q, "queue") });
        // SAFETY: the caller's contract.
        unsafe { receive(q, buf, buf_len, len_out) }
    })
}

/// # Safety
/// As `rtcell_queue_receive`.
unsafe fn receive(q: &mut rtcell_queue, buf: *mut c_void, buf_len: usize, len_out: *mut usize) -> Std_ReturnType {
    let out: &mut [u8] = if buf_len == 0 {
        &mut []
    } else if buf.is_null() {
        return fail(E_NOT_OK, format_args!("buffer is NULL"));
    } else {
        // SAFETY: non-NULL and writable for buf_len bytes by the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(buf as *mut u8, buf_len) }
    };
    let view = q.view;
    let c = q.consumer.get_or_insert_with(|| view.consumer());
    let put_len = |n: usize| {
        if !len_out.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { *len_out = n };
        }
    };
    match c.try_recv(out) {
        Ok(n) => {
            put_len(n);
            let lost = c.skipped();
            if lost != q.lost_seen {
                q.lost_seen = lost;
                RTE_E_OK | RTE_E_LOST_DATA
            } else {
                RTE_E_OK
            }
        }
        Err(RecvError::Empty) => fail(RTE_E_NO_DATA, format_args!("the queue is empty")),
        Err(RecvError::TooSmall { len }) => {
            put_len(len);
            fail(E_NOT_OK, format_args!("a {len}-byte message does not fit the {buf_len}-byte buffer; it stays queued"))
        }
        Err(RecvError::Corrupt(what)) => fail(COM_SERVICE_NOT_AVAILABLE, format_args!("the ring is corrupt: {what}")),
    }
}

/// As `rtcell_queue_receive`, but waits up to `timeout_ns` for a message (futex when the ring was
/// created with notify, else short sleeps). Not in a payload.
///
/// # Safety
/// As `rtcell_queue_receive`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_queue_receive_timeout(
    q: *mut rtcell_queue,
    buf: *mut c_void,
    buf_len: usize,
    len_out: *mut usize,
    timeout_ns: u64,
) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let q = tri!(unsafe { crate::handle(q, "queue") });
        #[cfg(feature = "std")]
        {
            let deadline = std::time::Instant::now() + std::time::Duration::from_nanos(timeout_ns);
            loop {
                // SAFETY: the caller's contract.
                let code = unsafe { receive(q, buf, buf_len, len_out) };
                if code != RTE_E_NO_DATA {
                    return code;
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    return fail(RTE_E_NO_DATA, format_args!("no message before the timeout"));
                }
                let left = (deadline - now).as_nanos() as u64;
                let view = q.view;
                let c = q.consumer.get_or_insert_with(|| view.consumer());
                if view.config().notify {
                    c.wait_for_message(left);
                } else {
                    std::thread::sleep(std::time::Duration::from_nanos(left.min(50_000)));
                }
            }
        }
        #[cfg(not(feature = "std"))]
        {
            let _ = (q, buf, buf_len, len_out, timeout_ns);
            fail(E_NOT_OK, format_args!("a payload cannot sleep: poll with rtcell_queue_receive"))
        }
    })
}

/// The ring's counters (shared by both sides).
///
/// # Safety
/// `q` a live handle or NULL; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtcell_queue_get_counters(
    q: *mut rtcell_queue,
    out: *mut rtcell_queue_counters,
) -> Std_ReturnType {
    guard(|| {
        // SAFETY: the caller's contract.
        let q = tri!(unsafe { crate::handle(q, "queue") });
        if out.is_null() {
            return fail(E_NOT_OK, format_args!("out is NULL"));
        }
        let c = q.view.counters();
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe {
            *out = rtcell_queue_counters {
                sent: c.sent,
                received: c.received,
                // Not the sender's `overwritten`: it also counts frames the receiver took while they were
                // being dropped, so `received + lost` exceeded `sent`.
                lost: q.view.lost_total(),
                queued: q.view.queued(),
                refused: c.rejected,
            }
        };
        RTE_E_OK
    })
}
