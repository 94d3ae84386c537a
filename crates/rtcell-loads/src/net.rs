//! Loopback network traffic for `dohell`: a TCP stream through 127.0.0.1 between two threads of rtcell
//! on the load CPUs, so that the network stack's system calls and softirqs run there as fast as they can.
//! Threads rather than a child process: nothing to install, and nothing that could outlive rtcell.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

/// Bytes per write.
const CHUNK: usize = 64 << 10;

/// A running stream; [`Flood::stop`] ends it.
pub struct Flood {
    /// Both ends, kept to shut them down from here (which unblocks the threads).
    ends: Vec<TcpStream>,
    threads: Vec<JoinHandle<()>>,
    received: Arc<AtomicU64>,
}

impl Flood {
    /// Connects a sender and a receiver through 127.0.0.1 and starts both, pinned to `cpus`.
    pub fn start(cpus: &[usize]) -> std::io::Result<Flood> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let mut tx = TcpStream::connect(listener.local_addr()?)?;
        let (mut rx, _) = listener.accept()?;
        let ends = vec![tx.try_clone()?, rx.try_clone()?];
        let received = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&received);
        let on_load_cpus = {
            let cpus = cpus.to_vec();
            move || {
                let _ = rtcell_host::sched::set_normal();
                let _ = rtcell_host::cpu::pin_current_thread_to(&cpus);
            }
        };
        let pin = on_load_cpus.clone();
        let sender = std::thread::Builder::new().name("load-tcp-send".into()).spawn(move || {
            pin();
            let chunk = vec![0x5au8; CHUNK];
            // Ends when the stream is shut down.
            while tx.write_all(&chunk).is_ok() {}
        })?;
        let receiver = std::thread::Builder::new().name("load-tcp-recv".into()).spawn(move || {
            on_load_cpus();
            let mut buf = vec![0u8; CHUNK];
            while let Ok(n @ 1..) = rx.read(&mut buf) {
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
        let mut flood = Flood { ends, threads: vec![sender], received };
        flood.threads.push(receiver?);
        Ok(flood)
    }

    /// Stops the stream; returns the bytes that went through, and the threads that did not end within
    /// the load's stop deadline (left running, named). Calling it again returns the same bytes.
    pub fn stop(&mut self) -> (f64, Vec<String>) {
        for end in &self.ends {
            let _ = end.shutdown(Shutdown::Both);
        }
        let deadline = std::time::Instant::now() + super::procs::STOP_DEADLINE;
        let left = super::join_within(std::mem::take(&mut self.threads), deadline);
        (self.received.load(Ordering::Relaxed) as f64, left)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_flow_until_stopped() {
        let mut f = Flood::start(&rtcell_host::cpu::online_cpus().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (bytes, left) = f.stop();
        assert!(bytes > 0.0 && left.is_empty(), "{left:?}");
        assert_eq!(f.stop().0, bytes, "stopped for good");
    }
}
