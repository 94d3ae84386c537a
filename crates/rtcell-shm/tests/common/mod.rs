//! Helpers shared by the integration tests: regions in ordinary memory, payloads that carry their own
//! sequence number, and a small deterministic PRNG.

#![allow(dead_code)]

use rtcell_shm::com::ComConfig;
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{GroupDef, Overflow, RegionLayout, RingConfig, SignalDef};

/// `n` zeroed shared words.
pub fn zeroed(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

/// Memory for `layout`, initialised by it.
pub fn build(layout: &RegionLayout) -> Vec<AtomicU64> {
    let words = zeroed(layout.size_bytes() / 8);
    layout.init(&words, 4242).expect("layout fits the memory made for it");
    words
}

/// A region holding one ring named "r".
pub fn ring_region(cfg: RingConfig) -> Vec<AtomicU64> {
    let mut layout = RegionLayout::new();
    layout.ring("r", cfg).expect("valid ring config");
    build(&layout)
}

/// A ring configuration with the given data-area capacity and largest frame.
pub fn cfg(capacity: u32, max_frame: u32, overflow: Overflow) -> RingConfig {
    RingConfig { capacity, max_frame, overflow, notify: false }
}

/// Bytes of a frame (header included) carrying `len` payload bytes.
pub fn frame_bytes(len: usize) -> u64 {
    16 + len.div_ceil(16) as u64 * 16
}

/// Filler byte `i` of message `seq`: different for neighbouring messages and positions.
#[inline]
pub fn filler(seq: u64, i: usize) -> u8 {
    let h = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (h >> 29) as u8 ^ (h >> 7) as u8
}

/// Writes message `seq` of `len` bytes into `buf[..len]`: the sequence number in the first 8 bytes (as far
/// as they go), filler after it.
pub fn fill(seq: u64, buf: &mut [u8]) {
    let head = seq.to_le_bytes();
    for (i, b) in buf.iter_mut().enumerate() {
        *b = if i < 8 { head[i] ^ filler(seq, i) } else { filler(seq, i) };
    }
}

/// Message `seq` of `len` bytes.
pub fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fill(seq, &mut v);
    v
}

/// Whether `data` is exactly message `seq` of its length.
pub fn is_payload(seq: u64, data: &[u8]) -> bool {
    let head = seq.to_le_bytes();
    data.iter().enumerate().all(|(i, &b)| b == if i < 8 { head[i] ^ filler(seq, i) } else { filler(seq, i) })
}

/// A message whose sequence number can be read back from it (at least 8 bytes).
pub fn tagged(seq: u64, buf: &mut [u8]) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in buf.iter_mut().enumerate().skip(8) {
        *b = filler(seq, i);
    }
}

/// The sequence number of a tagged message, if the whole message is consistent with it.
pub fn read_tagged(data: &[u8]) -> Option<u64> {
    let seq = u64::from_le_bytes(data.get(..8)?.try_into().ok()?);
    data.iter().enumerate().skip(8).all(|(i, &b)| b == filler(seq, i)).then_some(seq)
}

/// SplitMix64: small, fast, deterministic.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// A COM configuration exercising every shape: fixed and dynamic standalone signals, and two groups whose
/// members do not end on word boundaries.
pub fn com_config() -> ComConfig {
    let sig = |id, max_len, dynamic, group| SignalDef { id, max_len, dynamic, group };
    ComConfig {
        signals: vec![
            sig(1, 4, false, None),
            sig(2, 40, true, None),
            sig(10, 8, false, Some(100)),
            sig(11, 3, false, Some(100)),
            sig(12, 13, false, Some(100)),
            sig(20, 16, false, Some(200)),
            sig(21, 1, false, Some(200)),
            sig(3, 0, true, None),
        ],
        groups: vec![GroupDef { id: 100 }, GroupDef { id: 200 }],
    }
}
