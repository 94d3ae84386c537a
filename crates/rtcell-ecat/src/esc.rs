//! One simulated SubDevice: the EtherCAT slave controller's (ESC) register map and process RAM, its SII
//! EEPROM, the AL state machine, SyncManagers and FMMUs, and a simple I/O terminal behind them: 16
//! digital outputs echoed to 16 digital inputs, and a 16-bit analog input carrying a 1 kHz ramp (seed
//! 003's signal generator).
//!
//! Register and EEPROM layouts follow ETG.1000.4 and ETG.2010, as far as a master needs them to bring a
//! device to OP and exchange process data: identity, mailbox-less device with its PDOs described in the
//! EEPROM, no distributed clocks.

/// Size of the ESC address space: registers below 0x1000, process RAM from 0x1000.
pub const ESC_SIZE: usize = 0x2000;
/// Where the outputs (master → device) and inputs (device → master) live in process RAM.
pub const OUTPUTS_AT: u16 = 0x1000;
pub const INPUTS_AT: u16 = 0x1100;
/// Process data sizes: 2 bytes of digital outputs; 2 bytes of digital inputs and 2 of analog input.
pub const OUTPUT_BYTES: u16 = 2;
pub const INPUT_BYTES: u16 = 4;
/// Identity in the EEPROM.
pub const VENDOR_ID: u32 = 0x0000_0e1c;
pub const PRODUCT_CODE: u32 = 0x5254_4331; // "RTC1"
/// The order number in the EEPROM.
pub const ORDER_NUMBER: &str = "RTC-SIM-IO";
/// Period of the analog ramp.
pub const RAMP_PERIOD_NS: u64 = 1_000_000;

mod reg {
    pub const TYPE: usize = 0x0000;
    pub const FMMU_COUNT: usize = 0x0004;
    pub const SM_COUNT: usize = 0x0005;
    pub const RAM_SIZE: usize = 0x0006;
    pub const PORT_DESC: usize = 0x0007;
    pub const STATION: usize = 0x0010;
    pub const DL_STATUS: usize = 0x0110;
    pub const AL_CONTROL: usize = 0x0120;
    pub const AL_STATUS: usize = 0x0130;
    pub const AL_CODE: usize = 0x0134;
    pub const SII_CONTROL: usize = 0x0502;
    pub const SII_ADDRESS: usize = 0x0504;
    pub const SII_DATA: usize = 0x0508;
    pub const FMMU: usize = 0x0600;
    pub const SM: usize = 0x0800;
}

/// AL states.
pub const INIT: u8 = 1;
pub const PREOP: u8 = 2;
pub const BOOT: u8 = 3;
pub const SAFEOP: u8 = 4;
pub const OP: u8 = 8;

const FMMUS: usize = 3;
const SMS: usize = 2;

/// One simulated device.
pub struct Esc {
    mem: Vec<u8>,
    sii: Vec<u16>,
    /// Position in the chain (0 = next to the master); the last device closes the ring.
    pub position: u16,
}

impl Esc {
    /// A device at `position` of a chain of `count`.
    pub fn new(position: u16, count: u16) -> Esc {
        let mut mem = vec![0u8; ESC_SIZE];
        mem[reg::TYPE] = 0x11; // an ESC of the ET1100 family
        mem[reg::TYPE + 1] = 1;
        mem[reg::FMMU_COUNT] = FMMUS as u8;
        mem[reg::SM_COUNT] = SMS as u8;
        mem[reg::RAM_SIZE] = 8; // KiB
        mem[reg::PORT_DESC] = 0b0000_1111; // ports 0 and 1: MII
        // Link on port 0 (towards the master) and on port 1 unless it is the last device; the loop is
        // closed on every port without a link.
        let mut dl: u16 = 0x0001 | 0x0010 | 0x0200; // PDI operational, link port 0, communication port 0
        if position + 1 < count {
            dl |= 0x0020 | 0x0800; // link and communication on port 1
        } else {
            dl |= 0x0400; // loop port 1 closed
        }
        mem[reg::DL_STATUS..reg::DL_STATUS + 2].copy_from_slice(&dl.to_le_bytes());
        mem[reg::AL_STATUS] = INIT;
        Esc { mem, sii: eeprom(position), position }
    }

    pub fn station_address(&self) -> u16 {
        u16::from_le_bytes([self.mem[reg::STATION], self.mem[reg::STATION + 1]])
    }

    pub fn al_state(&self) -> u8 {
        self.mem[reg::AL_STATUS] & 0x0f
    }

    /// The digital outputs the master last wrote.
    pub fn outputs(&self) -> u16 {
        let o = OUTPUTS_AT as usize;
        u16::from_le_bytes([self.mem[o], self.mem[o + 1]])
    }

    /// Reads registers or RAM at `ado` into `out`. Bytes beyond the address space read as 0.
    pub fn read(&mut self, ado: u16, out: &mut [u8], now_ns: u64) {
        self.refresh_inputs(ado, out.len(), now_ns);
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.mem.get(ado as usize + i).copied().unwrap_or(0);
        }
    }

    /// Writes `data` at `ado`, with the side effects of the registers written.
    pub fn write(&mut self, ado: u16, data: &[u8]) {
        let (start, end) = (ado as usize, (ado as usize + data.len()).min(ESC_SIZE));
        if start >= ESC_SIZE {
            return;
        }
        let writable = |a: usize| !(a < 0x0010 || (0x0110..0x0120).contains(&a) || (0x0130..0x0140).contains(&a));
        for (i, a) in (start..end).enumerate() {
            if writable(a) {
                self.mem[a] = data[i];
            }
        }
        let touches = |lo: usize, hi: usize| start < hi && end > lo;
        if touches(reg::AL_CONTROL, reg::AL_CONTROL + 2) {
            self.al_control();
        }
        if touches(reg::SII_CONTROL, reg::SII_CONTROL + 2) {
            self.sii_command();
        }
    }

    /// A requested state change: accepted when the transition is one the AL state machine has.
    fn al_control(&mut self) {
        let req = self.mem[reg::AL_CONTROL] & 0x0f;
        let ack = self.mem[reg::AL_CONTROL] & 0x10 != 0;
        let cur = self.al_state();
        let error = self.mem[reg::AL_STATUS] & 0x10 != 0;
        if error && !ack {
            return;
        }
        let ok = match req {
            INIT => true,
            PREOP => matches!(cur, INIT | PREOP | SAFEOP | OP),
            SAFEOP => matches!(cur, PREOP | SAFEOP | OP) && self.process_data_configured(),
            OP => matches!(cur, SAFEOP | OP),
            BOOT => matches!(cur, INIT | BOOT),
            _ => false,
        };
        if ok {
            self.mem[reg::AL_STATUS] = req;
            self.mem[reg::AL_CODE..reg::AL_CODE + 2].copy_from_slice(&0u16.to_le_bytes());
        } else {
            // Stay, flag the error: 0x0011 invalid requested state change, 0x001D invalid output config.
            let code: u16 = if req == SAFEOP && matches!(cur, PREOP) { 0x001d } else { 0x0011 };
            self.mem[reg::AL_STATUS] = cur | 0x10;
            self.mem[reg::AL_CODE..reg::AL_CODE + 2].copy_from_slice(&code.to_le_bytes());
        }
    }

    /// SAFEOP needs the process-data SyncManagers set up as the EEPROM describes them.
    fn process_data_configured(&self) -> bool {
        (0..SMS).all(|i| {
            let (start, len, _, enabled) = self.sm(i);
            let (want_start, want_len) = if i == 0 { (OUTPUTS_AT, OUTPUT_BYTES) } else { (INPUTS_AT, INPUT_BYTES) };
            enabled && start == want_start && len == want_len
        })
    }

    /// (start, length, control, enabled) of SyncManager `i`.
    fn sm(&self, i: usize) -> (u16, u16, u8, bool) {
        let b = reg::SM + 8 * i;
        let m = &self.mem;
        (u16::from_le_bytes([m[b], m[b + 1]]), u16::from_le_bytes([m[b + 2], m[b + 3]]), m[b + 4], m[b + 6] & 1 != 0)
    }

    /// An SII read: the 4 words at the requested address go to the data register (8-byte reads).
    fn sii_command(&mut self) {
        let ctl = u16::from_le_bytes([self.mem[reg::SII_CONTROL], self.mem[reg::SII_CONTROL + 1]]);
        let addr = u16::from_le_bytes([self.mem[reg::SII_ADDRESS], self.mem[reg::SII_ADDRESS + 1]]) as usize;
        let mut status = ctl & 0x00ff;
        status |= 0x0040; // read size: 8 bytes
        if ctl & 0x0100 != 0 {
            for w in 0..4 {
                let v = self.sii.get(addr + w).copied().unwrap_or(0xffff);
                let at = reg::SII_DATA + 2 * w;
                self.mem[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        } else if ctl & 0x0200 != 0 {
            // The EEPROM is read-only here: refuse writes (write error).
            status |= 0x4000;
        }
        // Done at once: never busy.
        self.mem[reg::SII_CONTROL..reg::SII_CONTROL + 2].copy_from_slice(&status.to_le_bytes());
    }

    /// Before a read that covers the inputs: the echo of the outputs and the ramp at `now_ns`.
    fn refresh_inputs(&mut self, ado: u16, len: usize, now_ns: u64) {
        let (lo, hi) = (ado as usize, ado as usize + len);
        let (ilo, ihi) = (INPUTS_AT as usize, (INPUTS_AT + INPUT_BYTES) as usize);
        if lo < ihi && hi > ilo {
            self.update_inputs(now_ns);
        }
    }

    fn update_inputs(&mut self, now_ns: u64) {
        let out = self.outputs();
        let i = INPUTS_AT as usize;
        self.mem[i..i + 2].copy_from_slice(&out.to_le_bytes());
        self.mem[i + 2..i + 4].copy_from_slice(&ramp(now_ns).to_le_bytes());
    }

    /// A logical datagram (LRD/LWR/LRW) at `laddr`: the FMMUs map it onto process RAM. Returns whether
    /// a read and a write mapping matched (for the working counter).
    pub fn logical(&mut self, laddr: u32, data: &mut [u8], read: bool, write: bool, now_ns: u64) -> (bool, bool) {
        if !matches!(self.al_state(), SAFEOP | OP) {
            return (false, false);
        }
        let (mut r_hit, mut w_hit) = (false, false);
        for f in 0..FMMUS {
            let b = reg::FMMU + 16 * f;
            let m = &self.mem;
            let lstart = u32::from_le_bytes([m[b], m[b + 1], m[b + 2], m[b + 3]]);
            let flen = u16::from_le_bytes([m[b + 4], m[b + 5]]) as u32;
            let pstart = u16::from_le_bytes([m[b + 8], m[b + 9]]) as usize;
            let ty = m[b + 11];
            let active = m[b + 12] & 1 != 0;
            if !active || flen == 0 {
                continue;
            }
            // Overlap of [laddr, laddr + len) and [lstart, lstart + flen).
            let (d0, d1) = (laddr as u64, laddr as u64 + data.len() as u64);
            let (f0, f1) = (lstart as u64, lstart as u64 + flen as u64);
            let (o0, o1) = (d0.max(f0), d1.min(f1));
            if o0 >= o1 {
                continue;
            }
            let (di, fi, n) = ((o0 - d0) as usize, (o0 - f0) as usize, (o1 - o0) as usize);
            let p = pstart + fi;
            if p + n > ESC_SIZE {
                continue;
            }
            // The ESC counts the write in SAFEOP too; the application applies outputs only in OP and
            // keeps them safe (zero) before.
            if write && ty & 2 != 0 {
                if self.al_state() == OP {
                    self.mem[p..p + n].copy_from_slice(&data[di..di + n]);
                }
                w_hit = true;
            }
            if read && ty & 1 != 0 {
                self.update_inputs(now_ns);
                data[di..di + n].copy_from_slice(&self.mem[p..p + n]);
                r_hit = true;
            }
        }
        (r_hit, w_hit)
    }
}

/// The analog input: a sawtooth from 0 to 32767 every millisecond.
pub fn ramp(now_ns: u64) -> u16 {
    ((now_ns % RAMP_PERIOD_NS) * 32768 / RAMP_PERIOD_NS) as u16
}

/// The device's EEPROM image (words), ETG.2010: identity, no mailbox, and the categories a master reads
/// (strings, general, FMMU, SyncManager, PDOs).
fn eeprom(position: u16) -> Vec<u16> {
    let mut w = vec![0u16; 0x40];
    let put32 = |w: &mut Vec<u16>, at: usize, v: u32| {
        w[at] = v as u16;
        w[at + 1] = (v >> 16) as u16;
    };
    put32(&mut w, 0x08, VENDOR_ID);
    put32(&mut w, 0x0a, PRODUCT_CODE);
    put32(&mut w, 0x0c, 1);
    put32(&mut w, 0x0e, 1000 + position as u32);
    w[0x3e] = 1; // 2 Kbit - 1
    w[0x3f] = 1; // version
    let cat = |w: &mut Vec<u16>, ty: u16, bytes: Vec<u8>| {
        let mut b = bytes;
        if b.len() % 2 == 1 {
            b.push(0);
        }
        w.push(ty);
        w.push((b.len() / 2) as u16);
        w.extend(b.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])));
    };
    // Strings: 1 = the order number (what masters show as the device's name), 2 = the description.
    let mut s = vec![2u8];
    for text in [ORDER_NUMBER.as_bytes(), b"rtcell simulated I/O"] {
        s.push(text.len() as u8);
        s.extend_from_slice(text);
    }
    cat(&mut w, 10, s);
    // General: order number string 1, name string 2, no CoE/FoE/EoE, ports MII.
    let mut g = vec![0u8; 32];
    g[2] = 1; // order number
    g[3] = 2; // name
    g[15] = 0x11; // ports 0 and 1: MII
    cat(&mut w, 30, g);
    // FMMUs: 0 outputs, 1 inputs, 2 unused.
    cat(&mut w, 40, vec![1, 2, 0, 0]);
    // SyncManagers: 0 process data out, 1 process data in (start, length, control, status, enable, type).
    let mut sm = Vec::new();
    for (start, len, control, ty) in [(OUTPUTS_AT, OUTPUT_BYTES, 0x64u8, 3u8), (INPUTS_AT, INPUT_BYTES, 0x20, 4)] {
        sm.extend_from_slice(&start.to_le_bytes());
        sm.extend_from_slice(&len.to_le_bytes());
        sm.extend_from_slice(&[control, 0, 1, ty]);
    }
    cat(&mut w, 41, sm);
    // TxPDO 0x1A00 (inputs, SM1): 0x6000:01 16 bits, 0x6010:01 16 bits.
    let mut tx = vec![0x00, 0x1a, 2, 1, 0, 0, 0, 0];
    for index in [0x6000u16, 0x6010] {
        tx.extend_from_slice(&index.to_le_bytes());
        tx.extend_from_slice(&[1, 0, 0x06, 16, 0, 0]); // subindex 1, no name, UINT16, 16 bits
    }
    cat(&mut w, 50, tx);
    // RxPDO 0x1600 (outputs, SM0): 0x7000:01 16 bits.
    let mut rx = vec![0x00, 0x16, 1, 0, 0, 0, 0, 0];
    rx.extend_from_slice(&0x7000u16.to_le_bytes());
    rx.extend_from_slice(&[1, 0, 0x06, 16, 0, 0]);
    cat(&mut w, 51, rx);
    w.push(0xffff);
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eeprom_reads_back_its_identity_through_the_sii_registers() {
        let mut e = Esc::new(0, 1);
        // Request a read of word 0x08 (vendor id, product code).
        e.write(0x0502, &[0x00, 0x01, 0x08, 0x00, 0x00, 0x00]);
        let mut st = [0u8; 2];
        e.read(0x0502, &mut st, 0);
        assert_eq!(u16::from_le_bytes(st) & 0x8000, 0, "never busy");
        let mut d = [0u8; 8];
        e.read(0x0508, &mut d, 0);
        assert_eq!(u32::from_le_bytes([d[0], d[1], d[2], d[3]]), VENDOR_ID);
        assert_eq!(u32::from_le_bytes([d[4], d[5], d[6], d[7]]), PRODUCT_CODE);
    }

    #[test]
    fn safe_op_needs_the_sync_managers_and_op_passes_outputs() {
        let mut e = Esc::new(0, 1);
        e.write(0x0120, &[PREOP, 0]);
        assert_eq!(e.al_state(), PREOP);
        e.write(0x0120, &[SAFEOP, 0]);
        assert_eq!(e.mem[reg::AL_STATUS], PREOP | 0x10, "refused without the SyncManagers");
        e.write(0x0120, &[PREOP | 0x10, 0]); // acknowledge the error
        assert_eq!(e.al_state(), PREOP);
        // SM0 outputs, SM1 inputs; FMMU0 logical 0 → 0x1000 (write), FMMU1 logical 2 → 0x1100 (read).
        e.write(0x0800, &[0x00, 0x10, 2, 0, 0x64, 0, 1, 0]);
        e.write(0x0808, &[0x00, 0x11, 4, 0, 0x20, 0, 1, 0]);
        e.write(0x0600, &[0, 0, 0, 0, 2, 0, 0, 7, 0x00, 0x10, 0, 2, 1, 0, 0, 0]);
        e.write(0x0610, &[2, 0, 0, 0, 4, 0, 0, 7, 0x00, 0x11, 0, 1, 1, 0, 0, 0]);
        e.write(0x0120, &[SAFEOP, 0]);
        assert_eq!(e.al_state(), SAFEOP);
        let mut pd = [0x34, 0x12, 0, 0, 0, 0];
        assert_eq!(e.logical(0, &mut pd, true, true, 500_000), (true, true));
        assert_eq!(e.outputs(), 0, "outputs stay safe in SAFEOP");
        e.write(0x0120, &[OP, 0]);
        let mut pd = [0x34, 0x12, 0, 0, 0, 0];
        e.logical(0, &mut pd, true, true, 500_000);
        assert_eq!(e.outputs(), 0x1234);
        let mut pd = [0x34, 0x12, 0, 0, 0, 0];
        e.logical(0, &mut pd, true, true, 250_000);
        assert_eq!(u16::from_le_bytes([pd[2], pd[3]]), 0x1234, "outputs echoed to inputs");
        assert_eq!(u16::from_le_bytes([pd[4], pd[5]]), ramp(250_000));
        assert_eq!(ramp(250_000), 8192);
    }
}
