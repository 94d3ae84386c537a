//! `rtcell ecat-sim`: the simulated segment answering frames on an interface.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::net::RawSocket;
use crate::segment::{Segment, SegmentCounters};

/// Answers frames on `socket` until `stop`. `drop_after`: the segment disappears after answering this
/// many frames (a SubDevice that drops out mid-run). Returns the counters.
pub fn serve(
    socket: &RawSocket,
    devices: u16,
    stop: &AtomicBool,
    drop_after: Option<u64>,
) -> std::io::Result<SegmentCounters> {
    let mut seg = Segment::new(devices);
    socket.set_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 1536];
    let t0 = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let Some(n) = socket.recv(&mut buf)? else { continue };
        let frame = &mut buf[..n];
        // A frame that already went through an ESC is a returned one (ours, looped back): not for us.
        if n > 6 && frame[6] & 0x02 != 0 {
            continue;
        }
        if drop_after.is_some_and(|d| seg.counters.frames >= d) {
            seg.present = false;
        }
        let now = t0.elapsed().as_nanos() as u64;
        match seg.process(frame, now) {
            Ok(true) => socket.send(frame)?,
            Ok(false) => {}
            // A malformed frame is not answered (a real segment would drop it too); it is counted.
            Err(_) => {}
        }
    }
    Ok(seg.counters)
}
