//! `rtcell ecat-sim`: the simulated segment answering frames on an interface.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::frame::{Command, for_each_datagram};
use crate::net::RawSocket;
use crate::segment::{Segment, SegmentCounters};

/// Whether the simulator busy-polls its socket instead of sleeping on it.
pub static BUSY_POLL: AtomicBool = AtomicBool::new(false);

/// Faults the simulated segment injects, to see how a master copes. Process-data frames (LRW) are the
/// ones delayed or miscounted, so bring-up is not disturbed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// The segment disappears after answering this many frames (a SubDevice that drops out).
    pub drop_after: Option<u64>,
    /// Every Nth process-data reply is held back by `late_by` (a reply that misses its cycle).
    pub late_every: Option<u64>,
    pub late_by: Duration,
    /// Every Nth process-data reply comes back with its working counter one short (a device that did
    /// not process it).
    pub wrong_wkc_every: Option<u64>,
}

/// Answers frames on `socket` until `stop`, injecting `faults`. Returns the counters.
pub fn serve(socket: &RawSocket, devices: u16, stop: &AtomicBool, faults: Faults) -> std::io::Result<SegmentCounters> {
    let mut seg = Segment::new(devices);
    let mut process_data: u64 = 0;
    socket.set_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 1536];
    let t0 = std::time::Instant::now();
    let busy = BUSY_POLL.load(Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        // Busy-polling answers like hardware (no wake-up latency) at the cost of a whole CPU.
        let got = if busy { socket.try_recv(&mut buf)? } else { socket.recv(&mut buf)? };
        let Some(n) = got else {
            if busy {
                std::hint::spin_loop();
            }
            continue;
        };
        let frame = &mut buf[..n];
        // A frame that already went through an ESC is a returned one (ours, looped back): not for us.
        if n > 6 && frame[6] & 0x02 != 0 {
            continue;
        }
        if faults.drop_after.is_some_and(|d| seg.counters.frames >= d) {
            seg.present = false;
        }
        let now = t0.elapsed().as_nanos() as u64;
        // A malformed frame is not answered (a real segment would drop it too); it is counted.
        if !matches!(seg.process(frame, now), Ok(true)) {
            continue;
        }
        let mut lrw = false;
        let _ = for_each_datagram(frame, |d| lrw |= d.command == Command::Lrw);
        if lrw {
            process_data += 1;
            let nth = |every: Option<u64>| every.is_some_and(|e| e > 0 && process_data % e == 0);
            if nth(faults.wrong_wkc_every) {
                let mut first = true;
                let _ = for_each_datagram(frame, |d| {
                    if std::mem::take(&mut first) {
                        d.add_wkc(u16::MAX);
                    }
                });
            }
            if nth(faults.late_every) {
                std::thread::sleep(faults.late_by);
            }
        }
        // A reply the interface refuses (a full queue) is lost, as on a wire; the segment goes on.
        if socket.send(frame).is_err() {
            seg.counters.send_failed += 1;
        }
    }
    Ok(seg.counters)
}

/// A simulated segment answering on its own thread.
pub struct Running {
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<std::io::Result<SegmentCounters>>>,
}

impl Running {
    /// Starts answering on `interface` (inside namespace `netns` if given; on `cpu` if given) and returns
    /// once the socket is open, so no frame sent after this returns is missed.
    pub fn start(
        interface: &str,
        netns: Option<&str>,
        devices: u16,
        faults: Faults,
        cpu: Option<usize>,
    ) -> std::io::Result<Running> {
        Running::start_with(interface, netns, devices, faults, cpu, None)
    }

    /// [`Running::start`] at SCHED_FIFO `priority`, if given: simulated hardware answers however busy
    /// the CPU it shares is (a sleeping simulator at normal priority waits behind every other thread).
    pub fn start_with(
        interface: &str,
        netns: Option<&str>,
        devices: u16,
        faults: Faults,
        cpu: Option<usize>,
        priority: Option<i32>,
    ) -> std::io::Result<Running> {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
        let (s2, iface, ns) = (std::sync::Arc::clone(&stop), interface.to_string(), netns.map(String::from));
        let thread = std::thread::Builder::new().name("ecat-sim".into()).spawn(move || {
            let opened = (|| {
                if let Some(ns) = &ns {
                    crate::net::enter_netns(ns)?;
                }
                if let Some(c) = cpu {
                    pin(c);
                }
                if let Some(p) = priority {
                    let param = libc::sched_param { sched_priority: p };
                    // SAFETY: sets this thread's policy from a valid sched_param.
                    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
                        return Err(std::io::Error::other(format!(
                            "SCHED_FIFO {p} for the simulator: {}",
                            std::io::Error::last_os_error()
                        )));
                    }
                }
                RawSocket::open(&iface)
            })();
            let sock = match opened {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let msg = e.to_string();
                    let _ = ready_tx.send(Err(e));
                    return Err(std::io::Error::other(msg));
                }
            };
            serve(&sock, devices, &s2, faults)
        })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Running { stop, thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(std::io::Error::other("the simulator thread ended before opening its socket")),
        }
    }

    /// Stops answering; returns what the segment saw.
    pub fn stop(mut self) -> std::io::Result<SegmentCounters> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the simulator thread panicked")),
            None => Ok(SegmentCounters::default()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
