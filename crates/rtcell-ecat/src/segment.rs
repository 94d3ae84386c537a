//! A chain of simulated SubDevices: each frame passes every device in order, as on a real segment, and
//! comes back with its datagrams answered and working counters counted.

use crate::esc::Esc;
use crate::frame::{Command, Datagram, FrameError, for_each_datagram};

/// What the segment has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentCounters {
    pub frames: u64,
    pub datagrams: u64,
    /// Frames refused (malformed); nothing was answered.
    pub refused: u64,
    /// Frames swallowed while the segment was dropped out.
    pub dropped: u64,
    /// Replies the interface refused to send.
    pub send_failed: u64,
}

pub struct Segment {
    pub devices: Vec<Esc>,
    /// When false the segment has "disappeared": frames are not returned.
    pub present: bool,
    pub counters: SegmentCounters,
}

impl Segment {
    pub fn new(count: u16) -> Segment {
        Segment {
            devices: (0..count).map(|p| Esc::new(p, count)).collect(),
            present: true,
            counters: Default::default(),
        }
    }

    /// Runs `frame` through the chain in place. `Ok(true)`: send it back; `Ok(false)`: swallowed (the
    /// segment is dropped out).
    pub fn process(&mut self, frame: &mut [u8], now_ns: u64) -> Result<bool, FrameError> {
        if !self.present {
            self.counters.dropped += 1;
            return Ok(false);
        }
        let devices = &mut self.devices;
        let n = match for_each_datagram(frame, |d| {
            for dev in devices.iter_mut() {
                handle(dev, d, now_ns);
            }
        }) {
            Ok(n) => n,
            Err(e) => {
                self.counters.refused += 1;
                return Err(e);
            }
        };
        // A frame that went through an ESC comes back with bit 1 of the source address set (the
        // locally administered bit): that is how a master tells returned frames from its own.
        frame[6] |= 0x02;
        self.counters.frames += 1;
        self.counters.datagrams += n as u64;
        Ok(true)
    }
}

/// One device's part in one datagram.
fn handle(dev: &mut Esc, d: &mut Datagram<'_>, now_ns: u64) {
    use Command::*;
    let (reads, writes) = d.command.reads_writes();
    match d.command {
        Nop => {}
        Aprd | Apwr | Aprw | Armw => {
            let me = d.adp() == 0;
            if me {
                register(dev, d, reads, writes, now_ns);
            } else if d.command == Armw {
                // Everyone else takes the value the addressed device read.
                dev.write(d.ado(), d.data);
                d.add_wkc(1);
            }
            // Position addressing: each device increments the address as the frame passes.
            d.set_adp(d.adp().wrapping_add(1));
        }
        Fprd | Fpwr | Fprw | Frmw => {
            if d.adp() == dev.station_address() {
                register(dev, d, reads, writes, now_ns);
            } else if d.command == Frmw {
                dev.write(d.ado(), d.data);
                d.add_wkc(1);
            }
        }
        Brd | Bwr | Brw => {
            // Broadcast reads OR every device's bytes into the data.
            if reads {
                let mut mine = vec![0u8; d.data.len()];
                dev.read(d.ado(), &mut mine, now_ns);
                for (a, b) in d.data.iter_mut().zip(mine) {
                    *a |= b;
                }
            }
            if writes {
                let copy = d.data.to_vec();
                dev.write(d.ado(), &copy);
            }
            d.add_wkc(wkc(reads, writes));
            // Broadcasts increment the ADP too, as position addressing does.
            d.set_adp(d.adp().wrapping_add(1));
        }
        Lrd | Lwr | Lrw => {
            let laddr = d.logical();
            let (r, w) = dev.logical(laddr, d.data, reads, writes, now_ns);
            d.add_wkc(u16::from(r) + 2 * u16::from(w));
        }
    }
}

/// A register read, write or both by the addressed device.
fn register(dev: &mut Esc, d: &mut Datagram<'_>, reads: bool, writes: bool, now_ns: u64) {
    let written = d.data.to_vec();
    if reads {
        dev.read(d.ado(), d.data, now_ns);
    }
    if writes && !matches!(d.command, Command::Armw | Command::Frmw) {
        dev.write(d.ado(), &written);
    }
    let w = matches!(d.command, Command::Armw | Command::Frmw) || !writes;
    d.add_wkc(if w { 1 } else { wkc(reads, writes) });
}

fn wkc(reads: bool, writes: bool) -> u16 {
    match (reads, writes) {
        (true, true) => 3,
        (true, false) | (false, true) => 1,
        (false, false) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{ECAT_HEADER, ETH_HEADER, build};

    fn wkc_and_data(f: &[u8]) -> (u16, Vec<u8>) {
        let at = ETH_HEADER + ECAT_HEADER;
        let len = (u16::from_le_bytes([f[at + 6], f[at + 7]]) & 0x7ff) as usize;
        let d = f[at + 10..at + 10 + len].to_vec();
        (u16::from_le_bytes([f[at + 10 + len], f[at + 11 + len]]), d)
    }

    #[test]
    fn a_broadcast_read_counts_every_device_and_addresses_are_assigned_by_position() {
        let mut s = Segment::new(3);
        let mut f = build([0x10; 6], &[(Command::Brd, 0, 0, &[0, 0])]);
        assert!(s.process(&mut f, 0).unwrap());
        assert_eq!(wkc_and_data(&f).0, 3, "three devices answered");
        assert_eq!(f[6], 0x12, "the source address of a returned frame has bit 1 set");
        for pos in 0..3u16 {
            let adp = 0u16.wrapping_sub(pos) as u32;
            let mut f = build([0x10; 6], &[(Command::Apwr, 0, adp | (0x0010 << 16), &(0x1000 + pos).to_le_bytes())]);
            s.process(&mut f, 0).unwrap();
            assert_eq!(wkc_and_data(&f).0, 1);
        }
        let addrs: Vec<u16> = s.devices.iter().map(|d| d.station_address()).collect();
        assert_eq!(addrs, [0x1000, 0x1001, 0x1002]);
        // A configured-address read reaches only its device.
        let mut f = build([0x10; 6], &[(Command::Fprd, 0, 0x1001 | (0x0130 << 16), &[0, 0])]);
        s.process(&mut f, 0).unwrap();
        assert_eq!(wkc_and_data(&f), (1, vec![1, 0]), "AL status INIT");
        let mut f = build([0x10; 6], &[(Command::Fprd, 0, 0x2000 | (0x0130 << 16), &[0, 0])]);
        s.process(&mut f, 0).unwrap();
        assert_eq!(wkc_and_data(&f).0, 0, "nobody at 0x2000");
    }

    #[test]
    fn a_dropped_out_segment_returns_nothing_and_bad_frames_are_counted() {
        let mut s = Segment::new(1);
        let mut bad = vec![0u8; 20];
        assert!(s.process(&mut bad, 0).is_err());
        assert_eq!(s.counters.refused, 1);
        s.present = false;
        let mut f = build([0x10; 6], &[(Command::Brd, 0, 0, &[0, 0])]);
        assert!(!s.process(&mut f, 0).unwrap());
        assert_eq!(s.counters.dropped, 1);
    }
}
