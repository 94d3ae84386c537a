//! The Linux baseline of the loopback benchmark: the same exchange over a pair of pipes, with the echo
//! side a SCHED_FIFO thread pinned to the cell CPU, blocking in read(2).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

use rtcell_host::sched::{RtRequest, apply_rt};

use crate::BenchError;

fn pipe() -> std::io::Result<(File, File)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((File::from(r), File::from(w)))
}

/// The master's end of a pipe echo: send a framed message, read the echo back.
pub struct PipeEcho {
    to_cell: File,
    from_cell: File,
    frame: Vec<u8>,
    echo: Option<std::thread::JoinHandle<Result<Vec<String>, String>>>,
}

impl PipeEcho {
    /// Starts the echo thread on `cpu`. Messages are a 4-byte length then the payload, so a 0-byte
    /// payload still makes a round trip.
    pub fn start(cpu: usize, priority: Option<i32>, max_frame: usize) -> Result<PipeEcho, BenchError> {
        let io = |e: std::io::Error| BenchError::Other(format!("pipe baseline: {e}"));
        let (from_master, to_cell) = pipe().map_err(io)?;
        let (from_cell, to_master) = pipe().map_err(io)?;
        let req = RtRequest { cpu: Some(cpu), fifo_priority: priority, lock_memory: true };
        let echo = std::thread::Builder::new()
            .name("pipe-echo".into())
            .spawn(move || {
                let warnings = apply_rt(&req).map_err(|e| e.to_string())?;
                let (mut rx, mut tx) = (from_master, to_master);
                let mut buf = vec![0u8; 4 + max_frame];
                loop {
                    if rx.read_exact(&mut buf[..4]).is_err() {
                        return Ok(warnings); // master closed its end: done
                    }
                    let n = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                    if n > max_frame {
                        return Err(format!("pipe echo: frame of {n} bytes above {max_frame}"));
                    }
                    rx.read_exact(&mut buf[4..4 + n]).map_err(|e| e.to_string())?;
                    tx.write_all(&buf[..4 + n]).map_err(|e| e.to_string())?;
                }
            })
            .map_err(io)?;
        Ok(PipeEcho { to_cell, from_cell, frame: vec![0u8; 4 + max_frame], echo: Some(echo) })
    }

    /// One round trip; the echoed payload lands in `reply`. Returns the echoed length.
    #[inline]
    pub fn round_trip(&mut self, payload: &[u8], reply: &mut [u8]) -> std::io::Result<usize> {
        let n = payload.len();
        self.frame[..4].copy_from_slice(&(n as u32).to_le_bytes());
        self.frame[4..4 + n].copy_from_slice(payload);
        self.to_cell.write_all(&self.frame[..4 + n])?;
        let mut len = [0u8; 4];
        self.from_cell.read_exact(&mut len)?;
        let m = u32::from_le_bytes(len) as usize;
        if m > reply.len() {
            return Err(std::io::Error::other(format!("echo returned {m} bytes, more than sent")));
        }
        self.from_cell.read_exact(&mut reply[..m])?;
        Ok(m)
    }

    /// Closes the pipes and joins the echo thread; returns its warnings.
    pub fn finish(mut self) -> Result<Vec<String>, BenchError> {
        let Some(h) = self.echo.take() else {
            return Ok(Vec::new());
        };
        drop(self);
        match h.join() {
            Ok(Ok(w)) => Ok(w),
            Ok(Err(e)) => Err(BenchError::Other(e)),
            Err(_) => Err(BenchError::Other("pipe echo thread panicked".into())),
        }
    }
}
