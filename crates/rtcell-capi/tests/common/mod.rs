//! What the C API's hostile-peer tests share: caller buffers with canaries either side.

#![allow(dead_code)] // each test binary uses its own part

use std::ffi::c_void;

/// The canary byte around every guarded buffer.
pub const CANARY: u8 = 0x5a;
/// Canary bytes on each side.
pub const PAD: usize = 32;

/// `n` bytes for the library, with canaries either side: a write past either end changes a canary.
pub struct Guarded(pub Vec<u8>, usize);

impl Guarded {
    pub fn new(n: usize, fill: u8) -> Guarded {
        let mut v = vec![CANARY; PAD + n + PAD];
        v[PAD..PAD + n].fill(fill);
        Guarded(v, n)
    }
    pub fn ptr(&mut self) -> *mut c_void {
        self.0[PAD..].as_mut_ptr() as *mut c_void
    }
    pub fn bytes(&self) -> &[u8] {
        &self.0[PAD..PAD + self.1]
    }
    pub fn canaries_intact(&self) -> bool {
        self.0[..PAD].iter().chain(&self.0[PAD + self.1..]).all(|&b| b == CANARY)
    }
    /// Fails naming `what` when a canary changed.
    pub fn check(&self, what: &str) {
        assert!(self.canaries_intact(), "{what} wrote outside its {}-byte buffer: {:x?}", self.1, self.0);
    }
}
