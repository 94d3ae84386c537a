//! Fuzz: the simulated segment's frame parser and ESC model, with structure-aware inputs.
//!
//! Frames are built valid first — Ethernet header with EtherType 0x88A4, EtherCAT header, a chain of
//! datagrams with real commands, position/station/logical addresses aimed at the registers a master
//! uses (station address, AL control/status, SII control/address/data, FMMUs, SyncManagers, process
//! RAM and the end of the address space), plausible lengths and working counters — on a segment that a
//! configuration prefix brought to OP with FMMUs mapped, so logical datagrams and SII reads get answered.
//! Most frames are then mutated (a datagram's length, the "more datagrams" bit, the EtherCAT length and
//! type, the command code, addresses, truncation, padding, spliced datagrams, byte flips); some are
//! random bytes.
//!
//! Checked on every frame: no panic; an independent parser written from ETG.1000.4 (below) agrees on
//! accept or refuse and on the datagram count; a refused frame is left exactly as it was and counted as
//! refused; an accepted one keeps its length and layout (only data, addresses and working counters
//! change, working counters only grow) and comes back with the returned-frame bit set.
//! The coverage counters say how far the cases got (past the EtherType check, accepted, datagrams).
//!
//! `RTCELL_FUZZ_CASES`, `RTCELL_FUZZ_SEED`: see `rtcell_testkit::fuzz`; `scripts/fuzz` runs it.

use rtcell_ecat::frame::{Command, DATAGRAM_HEADER, ECAT_HEADER, ETH_HEADER, ETHERTYPE, WKC, build};
use rtcell_ecat::segment::Segment;
use rtcell_testkit::fuzz::{Fuzz, Rng, SmallRng};
use std::time::Duration;

/// Registers and RAM a master addresses (ADO).
const ADOS: [u16; 16] = [
    0x0000, 0x0010, 0x0110, 0x0120, 0x0130, 0x0134, 0x0502, 0x0504, 0x0508, 0x0600, 0x0610, 0x0800, 0x0808, 0x1000,
    0x1100, 0x1ffe,
];

/// The reference parser: the datagram count of a well-formed frame, or None. Written from the standard,
/// independently of `frame.rs`, to check it.
fn reference(f: &[u8]) -> Option<usize> {
    let et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    let h = u16::from_le_bytes([*f.get(14)?, *f.get(15)?]);
    if et != ETHERTYPE || h >> 12 != 1 {
        return None;
    }
    let body = f.get(16..16 + (h & 0x7ff) as usize)?;
    let (mut at, mut n) = (0usize, 0usize);
    loop {
        let hd = body.get(at..at + 10)?;
        if hd[0] > 14 {
            return None;
        }
        let lf = u16::from_le_bytes([hd[6], hd[7]]);
        at += 10 + (lf & 0x7ff) as usize + 2;
        if at > body.len() {
            return None;
        }
        n += 1;
        if lf & 0x8000 == 0 {
            return (at == body.len()).then_some(n);
        }
    }
}

/// (offset, data length) of each datagram of a frame the reference accepted.
fn spans(f: &[u8]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut at = ETH_HEADER + ECAT_HEADER;
    loop {
        let lf = u16::from_le_bytes([f[at + 6], f[at + 7]]);
        let len = (lf & 0x7ff) as usize;
        v.push((at, len));
        at += DATAGRAM_HEADER + len + WKC;
        if lf & 0x8000 == 0 {
            return v;
        }
    }
}

type Dg = (Command, u8, u32, Vec<u8>);

fn frame_of(dgs: &[Dg]) -> Vec<u8> {
    let refs: Vec<(Command, u8, u32, &[u8])> = dgs.iter().map(|(c, i, a, d)| (*c, *i, *a, d.as_slice())).collect();
    build([0x10; 6], &refs)
}

/// Brings every device to OP: station addresses, SyncManagers, FMMUs (outputs at logical 8p, inputs at
/// 0x100 + 8p), AL control.
fn bring_up(seg: &mut Segment, n: u16) {
    for p in 0..n {
        let station = 0x1000 + p;
        let adp = u32::from(0u16.wrapping_sub(p));
        let mut fmmu = Vec::new();
        for (l, len, phys, ty) in [(8 * u32::from(p), 2u16, 0x1000u16, 2u8), (0x100 + 8 * u32::from(p), 4, 0x1100, 1)] {
            fmmu.extend_from_slice(&l.to_le_bytes());
            fmmu.extend_from_slice(&len.to_le_bytes());
            fmmu.extend_from_slice(&[0, 7]);
            fmmu.extend_from_slice(&phys.to_le_bytes());
            fmmu.extend_from_slice(&[0, ty, 1, 0, 0, 0]);
        }
        let sm = [0x00, 0x10, 2, 0, 0x64, 0, 1, 0, 0x00, 0x11, 4, 0, 0x20, 0, 1, 0];
        let fp = |ado: u16| u32::from(station) | u32::from(ado) << 16;
        let mut f = frame_of(&[
            (Command::Apwr, 0, adp | 0x0010 << 16, station.to_le_bytes().to_vec()),
            (Command::Fpwr, 1, fp(0x0800), sm.to_vec()),
            (Command::Fpwr, 2, fp(0x0600), fmmu),
            (Command::Fpwr, 3, fp(0x0120), vec![2, 0]),
            (Command::Fpwr, 4, fp(0x0120), vec![4, 0]),
            (Command::Fpwr, 5, fp(0x0120), vec![8, 0]),
        ]);
        seg.process(&mut f, 0).expect("bring-up frame is well formed");
    }
    for d in &seg.devices {
        assert_eq!(d.al_state(), rtcell_ecat::esc::OP, "the bring-up prefix reaches OP");
    }
}

/// A valid datagram aimed at what a master uses.
fn datagram(rng: &mut SmallRng, n: u16) -> Dg {
    use Command::*;
    let cmds = [Nop, Aprd, Apwr, Aprw, Fprd, Fpwr, Fprw, Brd, Bwr, Brw, Lrd, Lwr, Lrw, Armw, Frmw];
    let cmd = cmds[rng.random_range(0..cmds.len())];
    let p = rng.random_range(0..n + 2);
    let ado = if rng.random_ratio(7, 8) { ADOS[rng.random_range(0..ADOS.len())] } else { rng.random() };
    let adp = match cmd {
        Aprd | Apwr | Aprw | Armw | Brd | Bwr | Brw => 0u16.wrapping_sub(p),
        _ => 0x1000 + p,
    };
    let mut addr = u32::from(adp) | u32::from(ado) << 16;
    if matches!(cmd, Lrd | Lwr | Lrw) {
        addr = [8 * u32::from(p), 0x100 + 8 * u32::from(p), 0, u32::MAX - 1, rng.random()][rng.random_range(0..5)];
    }
    let len = match rng.random_range(0..6u32) {
        0 => 2,
        1 => 8,
        2 => rng.random_range(0..=16),
        3 => rng.random_range(0..=300),
        4 => 0,
        _ => 4,
    };
    let mut data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
    if ado == 0x0502 && data.len() >= 2 && rng.random_bool(0.5) {
        // An SII read of word `a`: control 0x0100 (read), address after it.
        let a: u16 = rng.random_range(0..0x60);
        data.resize(6, 0);
        data[..6].copy_from_slice(&[0x00, 0x01, a as u8, (a >> 8) as u8, 0, 0]);
    }
    (cmd, rng.random(), addr, data)
}

/// One mutation of a frame (any bytes may result).
fn mutate(rng: &mut SmallRng, f: &mut Vec<u8>) {
    let dgs = if reference(f).is_some() { spans(f) } else { vec![(16, 0)] };
    let (at, len) = dgs[rng.random_range(0..dgs.len())];
    let set16 = |f: &mut Vec<u8>, i: usize, v: u16| {
        if i + 2 <= f.len() {
            f[i..i + 2].copy_from_slice(&v.to_le_bytes());
        }
    };
    let get16 = |f: &Vec<u8>, i: usize| if i + 2 <= f.len() { u16::from_le_bytes([f[i], f[i + 1]]) } else { 0 };
    match rng.random_range(0..12u32) {
        0 => {
            // A datagram's length: near its own, zero, the maximum, past the frame.
            let lf = get16(f, at + 6);
            let l =
                [len as u16 + 1, (len as u16).wrapping_sub(1), 0, 0x7ff, len as u16 + 2, rng.random::<u16>() & 0x7ff]
                    [rng.random_range(0..6)];
            set16(f, at + 6, (lf & 0xf800) | (l & 0x7ff));
        }
        1 => {
            let lf = get16(f, at + 6);
            set16(f, at + 6, lf ^ 0x8000); // the "more datagrams" bit
        }
        2 => {
            let h = get16(f, 14);
            let l = (h & 0x7ff) as i32 + rng.random_range(-12..=12);
            set16(f, 14, (h & 0xf800) | (l.clamp(0, 0x7ff) as u16));
        }
        3 => {
            let h = get16(f, 14);
            set16(f, 14, (h & 0x0fff) | u16::from(rng.random_range(0..16u8)) << 12); // type
        }
        4 => {
            if at < f.len() {
                f[at] = [15, 16, 0x80, 0xff, rng.random()][rng.random_range(0..5)]; // command code
            }
        }
        5 => {
            let i = at + 2 + rng.random_range(0..4);
            if i < f.len() {
                f[i] = [0, 0xff, 0x7f, 0x80, rng.random()][rng.random_range(0..5)]; // address
            }
        }
        6 => {
            let cut = rng.random_range(0..=f.len());
            f.truncate(cut);
        }
        7 => f.resize(f.len().max(60) + rng.random_range(0..4), 0), // padding as on the wire
        8 => {
            // Splice a datagram: appended after the last one, with the header length kept as it was.
            let extra = frame_of(&[(Command::Brd, 0, 0, vec![0; rng.random_range(0..8)])]);
            f.extend_from_slice(&extra[16..]);
        }
        9 => {
            let i = at + DATAGRAM_HEADER + len; // the working counter
            set16(f, i, [0xffff, 0xfffe, rng.random()][rng.random_range(0..3)]);
        }
        10 => {
            if !f.is_empty() {
                let i = rng.random_range(0..f.len());
                f[i] ^= 1 << rng.random_range(0..8);
            }
        }
        _ => {
            if f.len() > 13 {
                f[12..14].copy_from_slice(&[[0x88, 0xa5], [0xa4, 0x88], [0x08, 0x00]][rng.random_range(0..3)]);
            }
        }
    }
}

#[test]
fn fuzz_frames() {
    let fuzz = Fuzz::start("fuzz_frames", 400_000).with_counters(&[
        "frames past the EtherType check",
        "frames accepted by the parser and run through the segment",
        "accepted frames with 2 or more datagrams",
        "datagrams parsed and answered",
        "datagrams a device counted (working counter grew)",
        "logical datagrams a device's FMMU mapped",
        "SII reads answered with EEPROM data",
        "mutated frames accepted",
    ]);
    let _wd = fuzz.watchdog(Duration::from_secs(60));
    let mut rng = fuzz.rng(0);
    let mut seg = Segment::new(1);
    let mut devices = 1;
    for case in 0..fuzz.cases() {
        if case % 256 == 0 {
            devices = rng.random_range(1..=4u16);
            seg = Segment::new(devices);
            bring_up(&mut seg, devices);
        }
        let kind = rng.random_range(0..10u32);
        let mut f = if kind == 0 {
            let len = rng.random_range(0..1600);
            let mut f: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if f.len() > 13 && rng.random_bool(0.5) {
                f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
            }
            f
        } else {
            let n = rng.random_range(1..=8);
            let dgs: Vec<Dg> = (0..n).map(|_| datagram(&mut rng, devices)).collect();
            frame_of(&dgs)
        };
        let mutated = kind >= 4;
        if mutated {
            for _ in 0..rng.random_range(1..=3) {
                mutate(&mut rng, &mut f);
            }
        }
        check_frame(&fuzz, &mut seg, f, mutated);
        fuzz.case();
    }
    fuzz.finish();
}

fn check_frame(fuzz: &Fuzz, seg: &mut Segment, mut f: Vec<u8>, mutated: bool) {
    let before = f.clone();
    let counters = seg.counters;
    let want = reference(&f);
    if f.len() >= 14 && f[12..14] == ETHERTYPE.to_be_bytes() {
        fuzz.hit(0, 1);
    }
    match seg.process(&mut f, 123_456) {
        Err(e) => {
            assert_eq!(want, None, "refused a frame the reference parser accepts: {e}");
            assert_eq!(f, before, "a refused frame was changed");
            assert_eq!(seg.counters.refused, counters.refused + 1);
        }
        Ok(back) => {
            assert!(back, "a present segment returns every frame");
            let n = want.unwrap_or_else(|| panic!("accepted a frame the reference parser refuses: {before:02x?}"));
            assert_eq!(seg.counters.datagrams, counters.datagrams + n as u64);
            assert_eq!(f.len(), before.len(), "an answered frame changed length");
            assert_eq!(f[6], before[6] | 2, "the returned-frame bit");
            fuzz.hit(1, 1);
            fuzz.hit(2, u64::from(n >= 2));
            fuzz.hit(3, n as u64);
            fuzz.hit(7, u64::from(mutated));
            for (at, len) in spans(&before) {
                // Layout unchanged: command, index, length word; the working counter only grows.
                assert_eq!(f[at..at + 2], before[at..at + 2]);
                assert_eq!(f[at + 6..at + 10], before[at + 6..at + 10]);
                let w = |g: &[u8]| u16::from_le_bytes([g[at + 10 + len], g[at + 11 + len]]);
                let grew = w(&f).wrapping_sub(w(&before));
                if grew > 0 {
                    fuzz.hit(4, 1);
                    if (10..=12).contains(&f[at]) {
                        fuzz.hit(5, 1);
                    }
                    let ado = u16::from_le_bytes([f[at + 4], f[at + 5]]);
                    if matches!(f[at], 1 | 4) && ado == 0x0508 && len >= 2 && f[at + 10..at + 12] != [0, 0] {
                        fuzz.hit(6, 1);
                    }
                }
            }
        }
    }
}
