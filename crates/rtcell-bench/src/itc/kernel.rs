//! Mechanisms through which the kernel itself carries the payload: pipe, FIFO, POSIX message queue,
//! UNIX stream and datagram sockets. Seed 002 used two of each (one per direction) for pipes, FIFOs and
//! message queues; a socket pair is bidirectional, so one suffices.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::end::{Ctl, Fault, Ops, Pair, Plain, WAIT_SLICE, read_exact, realtime_deadline, write_all};

/// A byte stream each way (pipe, FIFO, UNIX stream socket): both sides know the message size, so a
/// message is exactly that many bytes, however the stream splits them.
struct StreamEnd {
    tx: File,
    rx: File,
    ctl: Arc<Ctl>,
}

impl Ops for StreamEnd {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        write_all(&mut self.tx, msg, &self.ctl, "write")
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        read_exact(&mut self.rx, buf, &self.ctl, "read")?;
        Ok(buf.len())
    }
}

fn stream_pair(a: (File, File), b: (File, File), ctl: &Arc<Ctl>) -> Pair {
    (
        Box::new(Plain(StreamEnd { tx: a.0, rx: a.1, ctl: Arc::clone(ctl) })),
        Box::new(Plain(StreamEnd { tx: b.0, rx: b.1, ctl: Arc::clone(ctl) })),
    )
}

/// (read end, write end) of a new pipe.
fn pipe() -> Result<(File, File), Fault> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Fault::last_os("pipe2"));
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((File::from(r), File::from(w)))
}

/// Two pipes: requester -> responder and back.
pub(crate) fn pipes(ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let (req_rx, req_tx) = pipe()?;
    let (rep_rx, rep_tx) = pipe()?;
    Ok(stream_pair((req_tx, rep_rx), (rep_tx, req_rx), ctl))
}

/// (read end, write end) of a new FIFO at `path`. The read end opens first without blocking, so the
/// write end's open finds a reader and does not block either; then the read end is made blocking.
fn fifo(path: &Path) -> Result<(File, File), Fault> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Fault::Broken(format!("FIFO path {} holds a NUL byte", path.display())))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(Fault::last_os("mkfifo"));
    }
    let open = |e| Fault::Os { op: "open FIFO", err: e };
    let rx = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(open)?;
    let tx = OpenOptions::new().write(true).open(path).map_err(open)?;
    let fd = rx.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL read and write only its status flags.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if !ok {
        return Err(Fault::last_os("fcntl(F_SETFL) on the FIFO"));
    }
    Ok((rx, tx))
}

/// Two FIFOs (named pipes) in a private temporary directory, removed once open.
pub(crate) fn fifos(ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let dir = tempfile::Builder::new()
        .prefix("rtcell-itc-")
        .tempdir()
        .map_err(|e| Fault::Os { op: "create a directory for the FIFOs", err: e })?;
    let (req_rx, req_tx) = fifo(&dir.path().join("request"))?;
    let (rep_rx, rep_tx) = fifo(&dir.path().join("reply"))?;
    Ok(stream_pair((req_tx, rep_rx), (rep_tx, req_rx), ctl))
}

/// One UNIX stream socket pair; each side reads and writes its own socket.
pub(crate) fn unix_stream(ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let (a, b) = UnixStream::pair().map_err(|e| Fault::Os { op: "socketpair(AF_UNIX, SOCK_STREAM)", err: e })?;
    let dup = |s: &UnixStream| s.try_clone().map_err(|e| Fault::Os { op: "dup", err: e });
    let (a2, b2) = (dup(&a)?, dup(&b)?);
    let file = |s: UnixStream| File::from(OwnedFd::from(s));
    Ok(stream_pair((file(a), file(a2)), (file(b), file(b2)), ctl))
}

/// A datagram socket: one message per send, whole or not at all.
struct DgramEnd {
    sock: UnixDatagram,
    ctl: Arc<Ctl>,
}

impl Ops for DgramEnd {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        loop {
            match self.sock.send(msg) {
                Ok(n) if n == msg.len() => return Ok(()),
                Ok(n) => return Err(Fault::Broken(format!("send: {n} of {} bytes sent", msg.len()))),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => self.ctl.check()?,
                Err(err) => return Err(Fault::Os { op: "send", err }),
            }
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        loop {
            // MSG_TRUNC: the datagram's real length, so a longer one than expected shows.
            // SAFETY: recv writes at most `buf.len()` bytes into the buffer we own.
            let n = unsafe { libc::recv(self.sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC) };
            if n >= 0 {
                let n = n as usize;
                if n > buf.len() {
                    return Err(Fault::Broken(format!("a {n}-byte datagram, expected {}", buf.len())));
                }
                return Ok(n);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(Fault::Os { op: "recv", err });
            }
            self.ctl.check()?;
        }
    }
}

/// One UNIX datagram socket pair.
pub(crate) fn unix_dgram(ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let (a, b) = UnixDatagram::pair().map_err(|e| Fault::Os { op: "socketpair(AF_UNIX, SOCK_DGRAM)", err: e })?;
    Ok((
        Box::new(Plain(DgramEnd { sock: a, ctl: Arc::clone(ctl) })),
        Box::new(Plain(DgramEnd { sock: b, ctl: Arc::clone(ctl) })),
    ))
}

/// A POSIX message queue descriptor, closed on drop.
struct Mq(libc::mqd_t);

impl Drop for Mq {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed only here.
        unsafe { libc::mq_close(self.0) };
    }
}

/// A fresh queue of one message of `size` bytes: (write descriptor, read descriptor). Its name is
/// removed at once; the descriptors keep it alive.
fn mqueue(size: usize) -> Result<(Mq, Mq), Fault> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("/rtcell-itc-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let c = CString::new(name).map_err(|_| Fault::Broken("message queue name holds a NUL byte".into()))?;
    // SAFETY: all-zero is a valid mq_attr (plain integers); the fields that matter are set below.
    let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
    attr.mq_maxmsg = 1;
    attr.mq_msgsize = size as _;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    // SAFETY: a valid name, flags, mode and attribute block, all outliving the call.
    let w = unsafe { libc::mq_open(c.as_ptr(), flags, 0o600 as libc::mode_t, &attr as *const libc::mq_attr) };
    if w < 0 {
        let err = std::io::Error::last_os_error();
        let hint = if err.raw_os_error() == Some(libc::EINVAL) {
            format!(
                " (a {size}-byte message is above /proc/sys/fs/mqueue/msgsize_max for this user: raise it, e.g. sysctl fs.mqueue.msgsize_max={}, or run as root)",
                size.next_power_of_two()
            )
        } else {
            String::new()
        };
        return Err(Fault::Broken(format!("mq_open: {err}{hint}")));
    }
    let w = Mq(w);
    // SAFETY: as above; opening the queue just created, for reading.
    let r = unsafe { libc::mq_open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // SAFETY: the name is valid; unlinking leaves open descriptors working.
    unsafe { libc::mq_unlink(c.as_ptr()) };
    if r < 0 {
        return Err(Fault::last_os("mq_open"));
    }
    Ok((w, Mq(r)))
}

struct MqEnd {
    tx: Mq,
    rx: Mq,
    ctl: Arc<Ctl>,
}

impl Ops for MqEnd {
    fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
        loop {
            let deadline = realtime_deadline(WAIT_SLICE);
            // SAFETY: the message buffer and deadline outlive the call; the descriptor is open.
            let rc = unsafe { libc::mq_timedsend(self.tx.0, msg.as_ptr().cast(), msg.len(), 0, &deadline) };
            if rc == 0 {
                return Ok(());
            }
            retry_or_fail(&self.ctl, "mq_timedsend")?;
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
        loop {
            let deadline = realtime_deadline(WAIT_SLICE);
            // SAFETY: at most `buf.len()` bytes are written into the buffer we own; the priority pointer
            // may be null; the deadline outlives the call.
            let n = unsafe {
                libc::mq_timedreceive(self.rx.0, buf.as_mut_ptr().cast(), buf.len(), std::ptr::null_mut(), &deadline)
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            retry_or_fail(&self.ctl, "mq_timedreceive")?;
        }
    }
}

/// After a failed timed call: a timeout or a signal means "check the stop flag and wait again".
fn retry_or_fail(ctl: &Ctl, op: &'static str) -> Result<(), Fault> {
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ETIMEDOUT) | Some(libc::EINTR) => ctl.check(),
        _ => Err(Fault::Os { op, err }),
    }
}

/// Two message queues of one `size`-byte message each.
pub(crate) fn mqueues(size: usize, ctl: &Arc<Ctl>) -> Result<Pair, Fault> {
    let (req_tx, req_rx) = mqueue(size)?;
    let (rep_tx, rep_rx) = mqueue(size)?;
    Ok((
        Box::new(Plain(MqEnd { tx: req_tx, rx: rep_rx, ctl: Arc::clone(ctl) })),
        Box::new(Plain(MqEnd { tx: rep_tx, rx: req_rx, ctl: Arc::clone(ctl) })),
    ))
}
