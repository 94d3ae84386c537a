//! Signalling mechanisms — POSIX semaphore, pthread mutex with priority inheritance, condition variable,
//! futex, eventfd — carry no data themselves: here each guards a shared buffer per direction
//! ([`Slot`]). The sender writes the payload into the buffer and signals; the receiver, woken, copies it
//! out. So every mechanism moves the same payload and every reply is checked byte for byte.

use std::cell::UnsafeCell;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::end::{Body, Ctl, End, Fault, Ops, Pair, Plain, Slot, WAIT_SLICE, read_exact, realtime_deadline, write_all};

/// Index of the requester -> responder buffer (and signal); the other direction is `1 - REQUEST`.
const REQUEST: usize = 0;
const REPLY: usize = 1;

/// Both directions' buffers.
fn slots(size: usize) -> [Slot; 2] {
    [Slot::new(size), Slot::new(size)]
}

/// Message counters of one end; messages are numbered from 1 in each direction.
#[derive(Default)]
struct Seq {
    sent: u64,
    received: u64,
}

/// A pthread function's result: 0, or the error number itself.
fn pthread_result(rc: i32, op: &'static str) -> Result<(), Fault> {
    if rc == 0 { Ok(()) } else { Err(Fault::Os { op, err: std::io::Error::from_raw_os_error(rc) }) }
}

// ---------------------------------------------------------------------------------------------------------
// POSIX semaphore

/// An unnamed POSIX semaphore on the heap (its address must not change once initialised).
struct Sem(Box<UnsafeCell<libc::sem_t>>);

// SAFETY: a sem_t is made to be used by several threads at once, through the sem_* functions only, which
// is all this type does with it.
unsafe impl Send for Sem {}
// SAFETY: as above.
unsafe impl Sync for Sem {}

impl Sem {
    fn new() -> Result<Sem, Fault> {
        // SAFETY: all-zero bytes are a valid place for sem_init to initialise.
        let cell = Box::new(UnsafeCell::new(unsafe { std::mem::zeroed::<libc::sem_t>() }));
        // SAFETY: a process-private semaphore (pshared 0) with value 0, at a stable heap address.
        if unsafe { libc::sem_init(cell.get(), 0, 0) } != 0 {
            return Err(Fault::last_os("sem_init"));
        }
        Ok(Sem(cell))
    }

    fn post(&self) -> Result<(), Fault> {
        // SAFETY: initialised in `new`, destroyed only on drop.
        if unsafe { libc::sem_post(self.0.get()) } != 0 {
            return Err(Fault::last_os("sem_post"));
        }
        Ok(())
    }

    fn wait(&self, ctl: &Ctl) -> Result<(), Fault> {
        loop {
            let deadline = realtime_deadline(WAIT_SLICE);
            // SAFETY: initialised in `new`; the deadline outlives the call.
            if unsafe { libc::sem_timedwait(self.0.get(), &deadline) } == 0 {
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ETIMEDOUT) | Some(libc::EINTR) => ctl.check()?,
                _ => return Err(Fault::Os { op: "sem_timedwait", err }),
            }
        }
    }
}

impl Drop for Sem {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`; nobody waits on it any more (both ends are gone).
        unsafe { libc::sem_destroy(self.0.get()) };
    }
}

struct SemShared {
    slots: [Slot; 2],
    sems: [Sem; 2],
}

struct SemEnd {
    sh: Arc<SemShared>,
    out: usize,
    seq: Seq,
    ctl: Arc<Ctl>,
}

impl Ops for SemEnd {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        self.seq.sent += 1;
        self.sh.slots[self.out].put(self.seq.sent, msg)?;
        self.sh.sems[self.out].post()
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        let inn = 1 - self.out;
        self.sh.sems[inn].wait(&self.ctl)?;
        self.seq.received += 1;
        self.sh.slots[inn].take(self.seq.received, buf)
    }
}

/// A semaphore per direction: post after writing the buffer, wait before reading it.
pub(crate) fn semaphores(size: usize, ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let sh = Arc::new(SemShared { slots: slots(size), sems: [Sem::new()?, Sem::new()?] });
    let end = |out| Box::new(Plain(SemEnd { sh: Arc::clone(&sh), out, seq: Seq::default(), ctl: Arc::clone(ctl) }));
    Ok((end(REQUEST), end(REPLY)))
}

// ---------------------------------------------------------------------------------------------------------
// pthread mutex with priority inheritance

/// A pthread mutex with the priority-inheritance protocol, on the heap.
struct PiMutex(Box<UnsafeCell<libc::pthread_mutex_t>>);

// SAFETY: a pthread mutex is made to be shared between threads, used through its functions only.
unsafe impl Send for PiMutex {}
// SAFETY: as above.
unsafe impl Sync for PiMutex {}

impl PiMutex {
    fn new() -> Result<PiMutex, Fault> {
        let cell = Box::new(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: the attribute object is initialised before use and destroyed after; the mutex is
        // initialised at a stable heap address.
        let rc = unsafe {
            let mut rc = libc::pthread_mutexattr_init(attr.as_mut_ptr());
            if rc == 0 {
                rc = libc::pthread_mutexattr_setprotocol(attr.as_mut_ptr(), libc::PTHREAD_PRIO_INHERIT);
                if rc == 0 {
                    rc = libc::pthread_mutex_init(cell.get(), attr.as_ptr());
                }
                libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            }
            rc
        };
        pthread_result(rc, "pthread_mutex_init (PTHREAD_PRIO_INHERIT)")?;
        Ok(PiMutex(cell))
    }

    /// Locks, re-checking the stop flag every [`WAIT_SLICE`] (a mutex wait is not interrupted by signals).
    fn lock(&self, ctl: &Ctl) -> Result<(), Fault> {
        loop {
            let deadline = realtime_deadline(WAIT_SLICE);
            // SAFETY: initialised in `new`; the deadline outlives the call.
            match unsafe { libc::pthread_mutex_timedlock(self.0.get(), &deadline) } {
                0 => return Ok(()),
                libc::ETIMEDOUT => ctl.check()?,
                rc => return pthread_result(rc, "pthread_mutex_timedlock"),
            }
        }
    }

    fn unlock(&self) -> Result<(), Fault> {
        // SAFETY: initialised in `new`; a PI mutex refuses (EPERM) an unlock by a thread not owning it.
        pthread_result(unsafe { libc::pthread_mutex_unlock(self.0.get()) }, "pthread_mutex_unlock")
    }
}

impl Drop for PiMutex {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`; both ends (the only users) are gone.
        unsafe { libc::pthread_mutex_destroy(self.0.get()) };
    }
}

struct MutexShared {
    m: [PiMutex; 3],
    slots: [Slot; 2],
}

/// A request/reply over mutexes alone, each unlocked only by its owner as priority inheritance requires.
/// Three mutexes rotate: before exchange k (r = k mod 3) the requester holds m[r] and m[r+1], the
/// responder m[r+2]. The requester unlocks m[r] (the request) and locks m[r+2]; the responder, blocked
/// in locking m[r], gets it, answers and unlocks m[r+2] (the reply). Afterwards the requester holds
/// m[r+1] and m[r+2], the responder m[r]: the same picture for k + 1. A mutex handed over before the
/// other side waits for it simply stays free until taken, so no ordering is assumed; while the
/// requester waits for m[r+2], the responder inherits its priority.
struct MutexEnd {
    sh: Arc<MutexShared>,
    requester: bool,
    /// Exchanges completed.
    k: usize,
    held: [bool; 3],
    seq: Seq,
    ctl: Arc<Ctl>,
}

impl MutexEnd {
    fn lock(&mut self, i: usize) -> Result<(), Fault> {
        self.sh.m[i].lock(&self.ctl)?;
        self.held[i] = true;
        Ok(())
    }

    fn unlock(&mut self, i: usize) -> Result<(), Fault> {
        self.held[i] = false;
        self.sh.m[i].unlock()
    }
}

impl Ops for MutexEnd {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        self.seq.sent += 1;
        if self.requester {
            self.sh.slots[REQUEST].put(self.seq.sent, msg)?;
            self.unlock(self.k % 3)
        } else {
            self.sh.slots[REPLY].put(self.seq.sent, msg)?;
            self.unlock((self.k + 2) % 3)?;
            self.k += 1;
            Ok(())
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        self.seq.received += 1;
        if self.requester {
            self.lock((self.k + 2) % 3)?;
            self.k += 1;
            self.sh.slots[REPLY].take(self.seq.received, buf)
        } else {
            self.lock(self.k % 3)?;
            self.sh.slots[REQUEST].take(self.seq.received, buf)
        }
    }
}

impl End for MutexEnd {
    fn run(self: Box<Self>, body: &mut Body<'_>) -> Result<(), Fault> {
        let mut me = *self;
        // The starting picture (k = 0), taken by each side in its own thread before the start gate.
        let first: &[usize] = if me.requester { &[0, 1] } else { &[2] };
        let mut result = Ok(());
        for &i in first {
            result = me.lock(i);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = body(&mut me);
        }
        for i in 0..3 {
            if me.held[i] {
                let _ = me.unlock(i);
            }
        }
        result
    }
}

/// Three PI mutexes in rotation (see [`MutexEnd`]).
pub(crate) fn mutexes(size: usize, ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let sh = Arc::new(MutexShared { m: [PiMutex::new()?, PiMutex::new()?, PiMutex::new()?], slots: slots(size) });
    let end = |requester| {
        Box::new(MutexEnd {
            sh: Arc::clone(&sh),
            requester,
            k: 0,
            held: [false; 3],
            seq: Seq::default(),
            ctl: Arc::clone(ctl),
        })
    };
    Ok((end(true), end(false)))
}

// ---------------------------------------------------------------------------------------------------------
// Condition variable

/// A pthread condition variable (CLOCK_REALTIME, like the mutex's timed lock) on the heap.
struct Cond(Box<UnsafeCell<libc::pthread_cond_t>>);

// SAFETY: a pthread condition variable is made to be shared between threads, used through its functions.
unsafe impl Send for Cond {}
// SAFETY: as above.
unsafe impl Sync for Cond {}

impl Cond {
    fn new() -> Cond {
        Cond(Box::new(UnsafeCell::new(libc::PTHREAD_COND_INITIALIZER)))
    }

    fn signal(&self) -> Result<(), Fault> {
        // SAFETY: statically initialised, at a stable heap address.
        pthread_result(unsafe { libc::pthread_cond_signal(self.0.get()) }, "pthread_cond_signal")
    }

    /// Waits at most [`WAIT_SLICE`]; `m` must be locked by the caller (and is again on return).
    fn wait(&self, m: &PiMutex) -> Result<(), Fault> {
        let deadline = realtime_deadline(WAIT_SLICE);
        // SAFETY: both objects are initialised; the caller holds `m`, as pthread_cond_timedwait requires.
        match unsafe { libc::pthread_cond_timedwait(self.0.get(), m.0.get(), &deadline) } {
            0 | libc::ETIMEDOUT => Ok(()),
            rc => pthread_result(rc, "pthread_cond_timedwait"),
        }
    }
}

impl Drop for Cond {
    fn drop(&mut self) {
        // SAFETY: nobody waits on it any more (both ends are gone).
        unsafe { libc::pthread_cond_destroy(self.0.get()) };
    }
}

struct CondShared {
    m: PiMutex,
    cv: [Cond; 2],
    slots: [Slot; 2],
}

/// Unlocks the shared mutex when dropped, on every path out of a critical section.
struct Locked<'a>(&'a PiMutex);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

struct CondEnd {
    sh: Arc<CondShared>,
    out: usize,
    seq: Seq,
    ctl: Arc<Ctl>,
}

impl Ops for CondEnd {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        self.sh.m.lock(&self.ctl)?;
        let _locked = Locked(&self.sh.m);
        self.seq.sent += 1;
        self.sh.slots[self.out].put(self.seq.sent, msg)?;
        self.sh.cv[self.out].signal()
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        let inn = 1 - self.out;
        self.sh.m.lock(&self.ctl)?;
        let _locked = Locked(&self.sh.m);
        let want = self.seq.received + 1;
        while !self.sh.slots[inn].holds(want) {
            self.ctl.check()?;
            self.sh.cv[inn].wait(&self.sh.m)?;
        }
        self.seq.received = want;
        self.sh.slots[inn].take(want, buf)
    }
}

/// One PI mutex and a condition variable per direction; the predicate is the buffer's sequence number.
pub(crate) fn condvars(size: usize, ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let sh = Arc::new(CondShared { m: PiMutex::new()?, cv: [Cond::new(), Cond::new()], slots: slots(size) });
    let end = |out| Box::new(Plain(CondEnd { sh: Arc::clone(&sh), out, seq: Seq::default(), ctl: Arc::clone(ctl) }));
    Ok((end(REQUEST), end(REPLY)))
}

// ---------------------------------------------------------------------------------------------------------
// futex

struct FutexEnd {
    sh: Arc<[Slot; 2]>,
    out: usize,
    seq: Seq,
    ctl: Arc<Ctl>,
}

impl Ops for FutexEnd {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        self.seq.sent += 1;
        let slot = &self.sh[self.out];
        slot.put(self.seq.sent, msg)?;
        rtcell_shm::futex::wake_all(slot.seq_word());
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        let slot = &self.sh[1 - self.out];
        let want = self.seq.received + 1;
        loop {
            let seen = slot.seq_word().load(Ordering::Acquire);
            if seen == want {
                break;
            }
            self.ctl.check()?;
            // Sleeps only while the word still holds `seen`: a wake between the load and the wait is
            // not lost.
            rtcell_shm::futex::wait(slot.seq_word(), seen, WAIT_SLICE.as_nanos() as u64);
        }
        self.seq.received = want;
        slot.take(want, buf)
    }
}

/// FUTEX_WAIT on the buffer's sequence word, FUTEX_WAKE after each write: the kernel primitive under
/// every other signalling mechanism here, bare.
pub(crate) fn futexes(size: usize, ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let sh = Arc::new(slots(size));
    let end = |out| Box::new(Plain(FutexEnd { sh: Arc::clone(&sh), out, seq: Seq::default(), ctl: Arc::clone(ctl) }));
    Ok((end(REQUEST), end(REPLY)))
}

// ---------------------------------------------------------------------------------------------------------
// eventfd

struct EventEnd {
    sh: Arc<[Slot; 2]>,
    out: usize,
    tx: File,
    rx: File,
    seq: Seq,
    ctl: Arc<Ctl>,
}

impl Ops for EventEnd {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        self.seq.sent += 1;
        self.sh[self.out].put(self.seq.sent, msg)?;
        write_all(&mut self.tx, &self.seq.sent.to_ne_bytes(), &self.ctl, "write(eventfd)")
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        let mut v = [0u8; 8];
        read_exact(&mut self.rx, &mut v, &self.ctl, "read(eventfd)")?;
        self.seq.received += 1;
        // One message in flight: the counter (reset by each read) is exactly the message number.
        let count = u64::from_ne_bytes(v);
        if count != self.seq.received {
            return Err(Fault::Broken(format!("eventfd counter {count}, expected {}", self.seq.received)));
        }
        self.sh[1 - self.out].take(self.seq.received, buf)
    }
}

fn eventfd() -> Result<OwnedFd, Fault> {
    // SAFETY: plain system call; the descriptor it returns is ours.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Fault::last_os("eventfd"));
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An eventfd per direction: the sender adds its message number, the receiver's blocking read returns it.
pub(crate) fn eventfds(size: usize, ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let sh = Arc::new(slots(size));
    let fds = [eventfd()?, eventfd()?];
    let dup = |fd: &OwnedFd| fd.try_clone().map(File::from).map_err(|e| Fault::Os { op: "dup", err: e });
    let end = |out: usize| -> Result<Box<dyn End>, Fault> {
        Ok(Box::new(Plain(EventEnd {
            sh: Arc::clone(&sh),
            out,
            tx: dup(&fds[out])?,
            rx: dup(&fds[1 - out])?,
            seq: Seq::default(),
            ctl: Arc::clone(ctl),
        })))
    };
    Ok((end(REQUEST)?, end(REPLY)?))
}
