//! What every mechanism implements — one end sends a message to its peer and receives the peer's — and
//! what the ends share: the stop flag of a measurement, the buffer a signalling mechanism guards, and
//! waits that always come back (a timed wait, or a read that the kick signal interrupts).

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rtcell_shm::sync::{copy_from_words, copy_to_words, words_for};

/// Longest single timed wait: a side blocked in one re-checks the stop flag at least this often.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Why an exchange did not complete.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The measurement told this side to stop (it is over, the watchdog fired, Ctrl-C).
    Stopped,
    /// A system call failed.
    Os { op: &'static str, err: std::io::Error },
    /// The mechanism delivered something impossible (end of file, a message out of sequence, a peer
    /// that stopped answering).
    Broken(String),
}

impl Fault {
    /// The last OS error of `op`.
    pub(crate) fn last_os(op: &'static str) -> Fault {
        Fault::Os { op, err: std::io::Error::last_os_error() }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Stopped => f.write_str("stopped"),
            Fault::Os { op, err } => write!(f, "{op}: {err}"),
            Fault::Broken(what) => f.write_str(what),
        }
    }
}

/// What both sides of one measurement and its watchdog share.
pub(crate) struct Ctl {
    stop: AtomicBool,
    /// TSC ticks a busy-polling side waits for its peer before giving up by itself: while both sides
    /// spin at real-time priority, the watchdog may not get a CPU.
    pub poll_timeout_ticks: u64,
}

impl Ctl {
    pub(crate) fn new(poll_timeout_ticks: u64) -> Ctl {
        Ctl { stop: AtomicBool::new(false), poll_timeout_ticks }
    }

    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// `Err(Stopped)` once the measurement was told to stop.
    #[inline]
    pub(crate) fn check(&self) -> Result<(), Fault> {
        if self.stopped() { Err(Fault::Stopped) } else { Ok(()) }
    }
}

/// One end of a mechanism, working in its thread.
pub(crate) trait Ops {
    /// Sends `msg` to the peer.
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault>;
    /// Blocks until the peer's next message arrives and puts it into `buf`, which is exactly as long as
    /// the expected message; returns the message's length.
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault>;
}

/// The body a thread runs with its end: the exchange loop.
pub(crate) type Body<'a> = dyn FnMut(&mut dyn Ops) -> Result<(), Fault> + 'a;

/// One end of a mechanism, before it moves to its thread.
pub(crate) trait End: Send {
    /// Sets the end up in its thread (a ring attaches its region, a mutex end takes its first locks),
    /// runs `body` with it, and takes it down.
    fn run(self: Box<Self>, body: &mut Body<'_>) -> Result<(), Fault>;
}

/// Both ends of a mechanism: (the requester's, the responder's).
pub(crate) type Pair = (Box<dyn End>, Box<dyn End>);

/// An end that needs no setup in its thread.
pub(crate) struct Plain<T>(pub T);

impl<T: Ops + Send> End for Plain<T> {
    fn run(self: Box<Self>, body: &mut Body<'_>) -> Result<(), Fault> {
        let mut ops = self.0;
        body(&mut ops)
    }
}

/// The buffer a signalling mechanism (semaphore, mutex, condition variable, futex, eventfd) guards: one
/// per direction. The sender writes the payload and then its sequence number with release ordering; the
/// receiver, once the mechanism woke it, checks that number with acquire ordering — so it reads only a
/// payload that was completely written, and a wake-up without a message is caught, not counted.
pub(crate) struct Slot {
    seq: AtomicU64,
    len: AtomicU64,
    words: Box<[AtomicU64]>,
}

impl Slot {
    pub(crate) fn new(max_bytes: usize) -> Slot {
        Slot {
            seq: AtomicU64::new(0),
            len: AtomicU64::new(0),
            words: (0..words_for(max_bytes)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The sequence word (also the futex word of the futex mechanism).
    pub(crate) fn seq_word(&self) -> &AtomicU64 {
        &self.seq
    }

    /// Whether message `seq` is in the buffer.
    #[inline]
    pub(crate) fn holds(&self, seq: u64) -> bool {
        self.seq.load(Ordering::Acquire) == seq
    }

    /// Writes message number `seq`.
    #[inline]
    pub(crate) fn put(&self, seq: u64, msg: &[u8]) -> Result<(), Fault> {
        if words_for(msg.len()) > self.words.len() {
            return Err(Fault::Broken(format!("a {}-byte message does not fit the shared buffer", msg.len())));
        }
        copy_to_words(msg, &self.words);
        self.len.store(msg.len() as u64, Ordering::Relaxed);
        self.seq.store(seq, Ordering::Release);
        Ok(())
    }

    /// Reads message number `seq` into `buf`; anything else in the buffer means the mechanism woke us
    /// without a message.
    #[inline]
    pub(crate) fn take(&self, seq: u64, buf: &mut [u8]) -> Result<usize, Fault> {
        let found = self.seq.load(Ordering::Acquire);
        if found != seq {
            return Err(Fault::Broken(format!("woken with message {found} in the shared buffer, expected {seq}")));
        }
        let n = self.len.load(Ordering::Relaxed) as usize;
        if n > buf.len() {
            return Err(Fault::Broken(format!("a {n}-byte message, expected {}", buf.len())));
        }
        copy_from_words(&self.words, &mut buf[..n]);
        Ok(n)
    }
}

/// Writes all of `msg`. A blocked write interrupted by the kick signal returns `Stopped` once the
/// measurement is told to stop, and carries on otherwise.
pub(crate) fn write_all(f: &mut File, mut msg: &[u8], ctl: &Ctl, op: &'static str) -> Result<(), Fault> {
    while !msg.is_empty() {
        match f.write(msg) {
            Ok(0) => return Err(Fault::Broken(format!("{op}: wrote nothing"))),
            Ok(n) => msg = &msg[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => ctl.check()?,
            Err(err) => return Err(Fault::Os { op, err }),
        }
    }
    Ok(())
}

/// Fills `buf` exactly (a byte stream may deliver a message in pieces); interrupted as [`write_all`].
pub(crate) fn read_exact(f: &mut File, buf: &mut [u8], ctl: &Ctl, op: &'static str) -> Result<(), Fault> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => return Err(Fault::Broken(format!("{op}: the peer closed its end"))),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => ctl.check()?,
            Err(err) => return Err(Fault::Os { op, err }),
        }
    }
    Ok(())
}

/// CLOCK_REALTIME + `d` as an absolute deadline for the timed waits of POSIX semaphores, message queues,
/// mutexes and condition variables (all CLOCK_REALTIME). Read from the coarse clock: a vDSO read with no
/// hardware access; a deadline a tick early only makes the wait re-check the stop flag sooner.
#[inline]
pub(crate) fn realtime_deadline(d: Duration) -> libc::timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own; CLOCK_REALTIME_COARSE exists on every Linux
    // since 2.6.32, and on failure the zero time makes the wait return at once (it is retried).
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    let nsec = ts.tv_nsec as u64 + d.subsec_nanos() as u64;
    libc::timespec {
        tv_sec: ts.tv_sec + d.as_secs() as libc::time_t + (nsec / 1_000_000_000) as libc::time_t,
        tv_nsec: (nsec % 1_000_000_000) as libc::c_long,
    }
}
