//! EtherCAT frames on the wire (ETG.1000.4): the Ethernet header (EtherType 0x88A4), the 2-byte
//! EtherCAT header, and the chain of datagrams, each a 10-byte header, data and a working counter.
//!
//! Frames come from the network: every length is checked against the buffer before it is used, and a
//! frame that does not add up is an error, never a panic or an access outside the buffer.

/// EtherType of EtherCAT frames.
pub const ETHERTYPE: u16 = 0x88A4;
/// Ethernet header: destination, source, EtherType.
pub const ETH_HEADER: usize = 14;
/// EtherCAT header (length and type).
pub const ECAT_HEADER: usize = 2;
/// Datagram header: command, index, address, length and flags, IRQ.
pub const DATAGRAM_HEADER: usize = 10;
/// Working counter after each datagram's data.
pub const WKC: usize = 2;
/// Most datagram data in one frame (a 1514-byte Ethernet frame).
pub const MAX_PAYLOAD: usize = 1500 - ECAT_HEADER;
/// Type field of an EtherCAT header carrying datagrams.
const TYPE_DATAGRAMS: u16 = 1;

/// Datagram commands (ETG.1000.4 table 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Nop,
    Aprd,
    Apwr,
    Aprw,
    Fprd,
    Fpwr,
    Fprw,
    Brd,
    Bwr,
    Brw,
    Lrd,
    Lwr,
    Lrw,
    Armw,
    Frmw,
}

impl Command {
    pub fn from_code(c: u8) -> Option<Command> {
        use Command::*;
        Some(match c {
            0 => Nop,
            1 => Aprd,
            2 => Apwr,
            3 => Aprw,
            4 => Fprd,
            5 => Fpwr,
            6 => Fprw,
            7 => Brd,
            8 => Bwr,
            9 => Brw,
            10 => Lrd,
            11 => Lwr,
            12 => Lrw,
            13 => Armw,
            14 => Frmw,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        use Command::*;
        match self {
            Nop => 0,
            Aprd => 1,
            Apwr => 2,
            Aprw => 3,
            Fprd => 4,
            Fpwr => 5,
            Fprw => 6,
            Brd => 7,
            Bwr => 8,
            Brw => 9,
            Lrd => 10,
            Lwr => 11,
            Lrw => 12,
            Armw => 13,
            Frmw => 14,
        }
    }

    /// Whether the command reads (data flows to the master) and writes (to the device).
    pub fn reads_writes(self) -> (bool, bool) {
        use Command::*;
        match self {
            Nop => (false, false),
            Aprd | Fprd | Brd | Lrd => (true, false),
            Apwr | Fpwr | Bwr | Lwr => (false, true),
            Aprw | Fprw | Brw | Lrw | Armw | Frmw => (true, true),
        }
    }
}

/// Why a frame was not processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes: shorter than the Ethernet and EtherCAT headers")]
    TooShort(usize),
    #[error("EtherType {0:#06x} is not EtherCAT (0x88a4)")]
    NotEtherCat(u16),
    #[error("EtherCAT header type {0}: only 1 (datagrams) is handled")]
    UnsupportedType(u16),
    #[error("EtherCAT header says {said} bytes of datagrams, the frame holds {have}")]
    LengthMismatch { said: usize, have: usize },
    #[error("datagram {index} runs past the end of the frame")]
    DatagramOverrun { index: usize },
    #[error("datagram {index} has unknown command {code}")]
    UnknownCommand { index: usize, code: u8 },
    #[error("datagrams after the last one (its 'more follows' bit is clear) or bytes left over")]
    TrailingBytes,
}

/// One datagram, in place in its frame.
pub struct Datagram<'a> {
    pub command: Command,
    pub index: u8,
    /// ADP and ADO (position or station address and register), or the 32-bit logical address.
    pub address: &'a mut [u8; 4],
    pub data: &'a mut [u8],
    pub wkc: &'a mut [u8; 2],
}

impl Datagram<'_> {
    pub fn adp(&self) -> u16 {
        u16::from_le_bytes([self.address[0], self.address[1]])
    }
    pub fn set_adp(&mut self, v: u16) {
        self.address[..2].copy_from_slice(&v.to_le_bytes());
    }
    pub fn ado(&self) -> u16 {
        u16::from_le_bytes([self.address[2], self.address[3]])
    }
    pub fn logical(&self) -> u32 {
        u32::from_le_bytes(*self.address)
    }
    pub fn wkc(&self) -> u16 {
        u16::from_le_bytes(*self.wkc)
    }
    pub fn add_wkc(&mut self, n: u16) {
        let v = self.wkc().wrapping_add(n);
        *self.wkc = v.to_le_bytes();
    }
}

/// The EtherType of a frame, if it is long enough to have one.
pub fn ethertype(frame: &[u8]) -> Option<u16> {
    (frame.len() >= ETH_HEADER).then(|| u16::from_be_bytes([frame[12], frame[13]]))
}

/// Checks a whole frame and calls `f` on each datagram, in order. Nothing is handed to `f` unless the
/// whole frame is well formed, so a bad frame changes nothing.
pub fn for_each_datagram(frame: &mut [u8], mut f: impl FnMut(&mut Datagram<'_>)) -> Result<usize, FrameError> {
    let spans = datagram_spans(frame)?;
    let n = spans.len();
    let mut rest: &mut [u8] = &mut frame[ETH_HEADER + ECAT_HEADER..];
    let mut consumed = 0;
    for (start, len) in spans {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
        let (dg, tail) = tail.split_at_mut(DATAGRAM_HEADER + len + WKC);
        consumed = start + DATAGRAM_HEADER + len + WKC;
        rest = tail;
        let (head, body) = dg.split_at_mut(DATAGRAM_HEADER);
        let (data, wkc) = body.split_at_mut(len);
        let command = Command::from_code(head[0]).ok_or(FrameError::UnknownCommand { index: 0, code: head[0] })?;
        let index = head[1];
        let address: &mut [u8; 4] = (&mut head[2..6]).try_into().map_err(|_| FrameError::TooShort(0))?;
        let wkc: &mut [u8; 2] = wkc.try_into().map_err(|_| FrameError::TooShort(0))?;
        f(&mut Datagram { command, index, address, data, wkc });
    }
    Ok(n)
}

/// (offset from the first datagram, data length) of each datagram, after checking the frame whole.
fn datagram_spans(frame: &[u8]) -> Result<Vec<(usize, usize)>, FrameError> {
    if frame.len() < ETH_HEADER + ECAT_HEADER {
        return Err(FrameError::TooShort(frame.len()));
    }
    let et = u16::from_be_bytes([frame[12], frame[13]]);
    if et != ETHERTYPE {
        return Err(FrameError::NotEtherCat(et));
    }
    let h = u16::from_le_bytes([frame[14], frame[15]]);
    let (said, ty) = ((h & 0x07ff) as usize, h >> 12);
    if ty != TYPE_DATAGRAMS {
        return Err(FrameError::UnsupportedType(ty));
    }
    let body = &frame[ETH_HEADER + ECAT_HEADER..];
    // Short frames are padded to 60 bytes on the wire: the body may be longer than the header says.
    if said > body.len() {
        return Err(FrameError::LengthMismatch { said, have: body.len() });
    }
    let body = &body[..said];
    let mut spans = Vec::new();
    let mut at = 0usize;
    loop {
        let index = spans.len();
        if at + DATAGRAM_HEADER > body.len() {
            return Err(FrameError::DatagramOverrun { index });
        }
        let code = body[at];
        if Command::from_code(code).is_none() {
            return Err(FrameError::UnknownCommand { index, code });
        }
        let lf = u16::from_le_bytes([body[at + 6], body[at + 7]]);
        let len = (lf & 0x07ff) as usize;
        let more = lf & 0x8000 != 0;
        let end = at + DATAGRAM_HEADER + len + WKC;
        if end > body.len() {
            return Err(FrameError::DatagramOverrun { index });
        }
        spans.push((at, len));
        at = end;
        if !more {
            break;
        }
    }
    if at != body.len() {
        return Err(FrameError::TrailingBytes);
    }
    Ok(spans)
}

/// Builds a frame of datagrams `(command, index, address, data)` from `src` to broadcast, as a master
/// sends it (working counters 0). Used by tests and the raw ping-pong baseline.
pub fn build(src: [u8; 6], datagrams: &[(Command, u8, u32, &[u8])]) -> Vec<u8> {
    let mut f = vec![0xffu8; 6];
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    let body: usize = datagrams.iter().map(|(_, _, _, d)| DATAGRAM_HEADER + d.len() + WKC).sum();
    f.extend_from_slice(&((body as u16 & 0x07ff) | (TYPE_DATAGRAMS << 12)).to_le_bytes());
    for (i, (cmd, idx, addr, data)) in datagrams.iter().enumerate() {
        f.push(cmd.code());
        f.push(*idx);
        f.extend_from_slice(&addr.to_le_bytes());
        let more = if i + 1 < datagrams.len() { 0x8000 } else { 0 };
        f.extend_from_slice(&((data.len() as u16 & 0x07ff) | more).to_le_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(data);
        f.extend_from_slice(&[0, 0]);
    }
    while f.len() < 60 {
        f.push(0);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_frame_parses_back() {
        let mut f = build([0x10; 6], &[(Command::Brd, 1, 0, &[0, 0]), (Command::Lrw, 2, 0x1000, &[1, 2, 3, 4])]);
        let mut seen = Vec::new();
        let n = for_each_datagram(&mut f, |d| {
            seen.push((d.command, d.index, d.logical(), d.data.to_vec()));
            d.add_wkc(3);
        })
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen[1], (Command::Lrw, 2, 0x1000, vec![1, 2, 3, 4]));
        // The working counter of the last datagram sits right after its data.
        let wkc_at = ETH_HEADER + ECAT_HEADER + (DATAGRAM_HEADER + 2 + WKC) + DATAGRAM_HEADER + 4;
        assert_eq!(u16::from_le_bytes([f[wkc_at], f[wkc_at + 1]]), 3);
    }

    #[test]
    fn malformed_frames_are_refused_untouched() {
        let good = build([0x10; 6], &[(Command::Fprd, 1, 0x1001_0130, &[0, 0])]);
        let check = |mut f: Vec<u8>, want: fn(&FrameError) -> bool| {
            let before = f.clone();
            let e = for_each_datagram(&mut f, |d| d.add_wkc(1)).unwrap_err();
            assert!(want(&e), "{e:?}");
            assert_eq!(f, before, "a refused frame is not changed");
        };
        check(good[..10].to_vec(), |e| matches!(e, FrameError::TooShort(10)));
        let mut f = good.clone();
        f[12] = 0x08;
        check(f, |e| matches!(e, FrameError::NotEtherCat(_)));
        let mut f = good.clone();
        f[15] = 0x50; // type 5
        check(f, |e| matches!(e, FrameError::UnsupportedType(5)));
        let mut f = good.clone();
        f[14] = 0xff;
        f[15] = 0x17; // said 2047 bytes
        check(f, |e| matches!(e, FrameError::LengthMismatch { .. }));
        let mut f = good.clone();
        f[16] = 99;
        check(f, |e| matches!(e, FrameError::UnknownCommand { code: 99, .. }));
        let mut f = good.clone();
        f[22] = 0xff; // datagram length 255: past the end
        check(f, |e| matches!(e, FrameError::DatagramOverrun { .. }));
        let mut f = good.clone();
        f[23] |= 0x80; // more follows, but nothing does
        check(f, |e| matches!(e, FrameError::DatagramOverrun { index: 1 }));
    }
}
