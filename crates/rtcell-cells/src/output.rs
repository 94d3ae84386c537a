//! A process cell's standard output and error: the peer's text, never the operator's terminal.
//!
//! Both go into one pipe. A reader thread (normal priority, off the cell's CPU) drains it as fast as
//! the child writes, so a cell that prints never blocks on a full pipe; each line goes through the one
//! sanitiser ([`rtcell_host::peer_text`]: capped, escaped) and is printed to our standard error as the
//! cell's text, `cell "NAME": ...`. Lines over the per-cell rate limit (the kvm log limit) are counted
//! and dropped, and the count is printed once the pipe closes.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtcell_host::peer_text::{LogLimiter, PEER_TEXT_CAP, peer_text};
use rtcell_kvm::guest_log::{LOG_BURST, LOG_PER_SECOND};

/// Bytes read from the pipe at once.
const CHUNK: usize = 64 * 1024;

/// Counts of a cell's output, shared with its reader thread.
#[derive(Default)]
struct Counts {
    shown: AtomicU64,
    suppressed: AtomicU64,
}

/// The reader of a process cell's output.
pub struct CellOutput {
    counts: Arc<Counts>,
    handle: Option<JoinHandle<()>>,
}

/// A pipe for a child's stdout and stderr: (read end, write end), both close-on-exec in this process.
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl CellOutput {
    /// Starts the reader of `read` (the pipe's read end) for cell `cell` on CPU `cell_cpu`; what it
    /// shows goes to `sink` (our standard error in a run).
    pub fn start(
        cell: &str,
        cell_cpu: usize,
        read: OwnedFd,
        sink: Box<dyn Write + Send>,
    ) -> std::io::Result<CellOutput> {
        let counts = Arc::new(Counts::default());
        let (c2, name) = (Arc::clone(&counts), cell.to_string());
        let handle = std::thread::Builder::new()
            .name(format!("out-{cell}"))
            .spawn(move || read_loop(&name, cell_cpu, std::fs::File::from(read), sink, &c2))?;
        Ok(CellOutput { counts, handle: Some(handle) })
    }

    /// Lines shown so far.
    pub fn shown(&self) -> u64 {
        self.counts.shown.load(Ordering::Relaxed)
    }

    /// Lines dropped over the rate limit so far.
    pub fn suppressed(&self) -> u64 {
        self.counts.suppressed.load(Ordering::Relaxed)
    }

    /// The note on lines dropped, if any.
    pub fn storm(&self) -> Option<String> {
        let n = self.suppressed();
        (n > 0).then(|| {
            format!("output storm: {n} lines of the cell's output suppressed (limit {LOG_PER_SECOND} per second, bursts of {LOG_BURST})")
        })
    }

    /// Waits up to `timeout` for the pipe to close (every writer gone) and the reader to finish;
    /// a reader still waiting then (a descendant of the cell holds the pipe) is left detached.
    pub fn finish(&mut self, timeout: Duration) {
        let t0 = Instant::now();
        while self.handle.as_ref().is_some_and(|h| !h.is_finished()) && t0.elapsed() < timeout {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(h) = self.handle.take_if(|h| h.is_finished()) {
            let _ = h.join();
        }
    }
}

/// Normal priority, on every online CPU but the cell's (when there is another).
fn leave_the_cell_cpu(cell_cpu: usize) {
    let _ = rtcell_host::sched::set_normal();
    if let Ok(cpus) = rtcell_host::cpu::online_cpus() {
        let others: Vec<usize> = cpus.into_iter().filter(|c| *c != cell_cpu).collect();
        if !others.is_empty() {
            let _ = rtcell_host::cpu::pin_current_thread_to(&others);
        }
    }
}

fn read_loop(cell: &str, cell_cpu: usize, mut pipe: std::fs::File, mut sink: Box<dyn Write + Send>, counts: &Counts) {
    leave_the_cell_cpu(cell_cpu);
    let mut lines = Lines::new(cell);
    let mut buf = vec![0u8; CHUNK];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lines.feed(&buf[..n], &mut *sink, counts),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    lines.flush(&mut *sink, counts);
    let n = counts.suppressed.load(Ordering::Relaxed);
    if n > 0 {
        let _ = writeln!(
            sink,
            "cell {cell:?}: {n} lines of its output suppressed (limit {LOG_PER_SECOND} per second, bursts of {LOG_BURST})"
        );
    }
    let _ = sink.flush();
}

/// Splits the cell's bytes into lines of at most [`PEER_TEXT_CAP`] bytes, each shown or counted.
struct Lines {
    prefix: String,
    limiter: LogLimiter,
    line: Vec<u8>,
    /// Bytes of the current line beyond the cap (not kept).
    cut: u64,
}

impl Lines {
    fn new(cell: &str) -> Lines {
        Lines {
            prefix: format!("cell {:?}: ", peer_text(cell.as_bytes(), PEER_TEXT_CAP)),
            limiter: LogLimiter::new(LOG_PER_SECOND, LOG_BURST),
            line: Vec::with_capacity(PEER_TEXT_CAP),
            cut: 0,
        }
    }

    fn feed(&mut self, mut bytes: &[u8], sink: &mut dyn Write, counts: &Counts) {
        while !bytes.is_empty() {
            let (part, rest, ends) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            let room = PEER_TEXT_CAP - self.line.len();
            let keep = part.len().min(room);
            self.line.extend_from_slice(&part[..keep]);
            self.cut += (part.len() - keep) as u64;
            if ends {
                self.emit(sink, counts);
            }
            bytes = rest;
        }
    }

    fn flush(&mut self, sink: &mut dyn Write, counts: &Counts) {
        if !self.line.is_empty() || self.cut > 0 {
            self.emit(sink, counts);
        }
    }

    fn emit(&mut self, sink: &mut dyn Write, counts: &Counts) {
        if self.limiter.allow() {
            let mut text = peer_text(&self.line, PEER_TEXT_CAP);
            if self.cut > 0 {
                text.push_str(&format!("…[{} more bytes of this line not shown]", self.cut));
            }
            let _ = writeln!(sink, "{}{text}", self.prefix);
            counts.shown.fetch_add(1, Ordering::Relaxed);
        } else {
            counts.suppressed.fetch_add(1, Ordering::Relaxed);
        }
        self.line.clear();
        self.cut = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_line_is_escaped_capped_attributed_and_a_flood_is_counted_not_kept() {
        let (r, w) = pipe().unwrap();
        let sink = Buf::default();
        let mut out = CellOutput::start("c", usize::MAX, r, Box::new(sink.clone())).unwrap();
        let mut w = std::fs::File::from(w);
        w.write_all(b"\x1b[2J\x1b[HCell \"c\": done (exit code 0)\n").unwrap();
        let long = vec![b'x'; 3 * PEER_TEXT_CAP];
        w.write_all(&long).unwrap();
        w.write_all(b"\n").unwrap();
        // A flood: the writer never waits on the reader for long.
        let flood = b"spam\n".repeat(100_000);
        w.write_all(&flood).unwrap();
        w.write_all(b"no newline at the end").unwrap();
        drop(w);
        out.finish(Duration::from_secs(10));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains('\x1b'), "no raw escape reaches the sink");
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("cell \"c\": \\x1b[2J\\x1b[HCell \"c\": done (exit code 0)"));
        let l2 = lines.next().unwrap();
        assert!(l2.starts_with("cell \"c\": xxx"), "{}", &l2[..40]);
        assert!(
            l2.ends_with(&format!("…[{} more bytes of this line not shown]", 2 * PEER_TEXT_CAP)),
            "{}",
            &l2[l2.len() - 80..]
        );
        let total = 100_000 + 3;
        assert_eq!(out.shown() + out.suppressed(), total, "every line is shown or counted");
        assert!(out.suppressed() > 0 && out.shown() < total, "a flood is rate limited");
        assert!(text.ends_with(&format!(
            "cell \"c\": {} lines of its output suppressed (limit {LOG_PER_SECOND} per second, bursts of {LOG_BURST})\n",
            out.suppressed()
        )), "{}", &text[text.len().saturating_sub(200)..]);
        assert!(out.storm().is_some());
    }
}
