//! The atomics every channel is built on. Under `--cfg loom` they are loom's, so the ring and signal
//! algorithms can be model-checked over every interleaving with the very same code.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicU64, Ordering, fence};

#[cfg(not(loom))]
pub use core::sync::atomic::{AtomicU64, Ordering, fence};

/// Busy-wait hint. Under loom it yields, so that a model lets the thread being waited for run instead of
/// exploring every way of spinning.
#[cfg(loom)]
pub use loom::hint::spin_loop;

#[cfg(not(loom))]
pub use core::hint::spin_loop;

/// Copies `dst.len()` bytes out of shared words starting at `words[0]`, word by word with relaxed atomic
/// loads: a peer writing at the same time can make the bytes stale, never make the copy undefined.
/// The caller has checked that `words` holds at least `dst.len()` bytes.
#[inline]
pub fn copy_from_words(words: &[AtomicU64], dst: &mut [u8]) {
    let mut chunks = dst.chunks_exact_mut(8);
    let mut i = 0;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&words[i].load(Ordering::Relaxed).to_le_bytes());
        i += 1;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let w = words[i].load(Ordering::Relaxed).to_le_bytes();
        rest.copy_from_slice(&w[..rest.len()]);
    }
}

/// Copies `src` into shared words (zero-padding the last word), with relaxed atomic stores; the caller
/// publishes them afterwards with a release store.
#[inline]
pub fn copy_to_words(src: &[u8], words: &[AtomicU64]) {
    let mut chunks = src.chunks_exact(8);
    let mut i = 0;
    for chunk in &mut chunks {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        words[i].store(u64::from_le_bytes(b), Ordering::Relaxed);
        i += 1;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        words[i].store(u64::from_le_bytes(b), Ordering::Relaxed);
    }
}

/// Number of 8-byte words needed for `bytes` bytes.
#[inline]
pub const fn words_for(bytes: usize) -> usize {
    bytes.div_ceil(8)
}
