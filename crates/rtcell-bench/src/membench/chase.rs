//! The measured loop: a pointer chase. Every 64-byte line of the working set holds the address of the
//! next line to read, so each read depends on the one before and the time per read is the latency of
//! wherever that line lives (L1, L2, L3, DRAM). The order of the lines makes the pattern:
//! - `seq`: address order. The hardware prefetcher sees the stride and fetches ahead, as it would for
//!   any loop walking an array.
//! - `random`: a random cyclic order (Sattolo's algorithm: one cycle through every line), which no
//!   prefetcher can guess.
//!
//! The buffer is mapped aligned to 2 MiB and advised `MADV_HUGEPAGE` before it is first touched, so
//! that where transparent huge pages are enabled, large working sets are measured with few TLB misses;
//! how much of it the kernel really backed with huge pages is read back from `/proc/self/smaps`.

use rand::{Rng, SeedableRng};
use rtcell_host::tsc::rdtsc_ordered;

/// Bytes per node of the chase: one cache line.
pub const LINE: usize = 64;
/// Dependent reads per timed sample.
pub const BATCH: u64 = 4096;
/// The x86-64 huge page the buffer is aligned to.
const HUGE_PAGE: usize = 2 << 20;
/// Links followed per loop iteration (the loop is unrolled by this much).
const UNROLL: u64 = 8;

/// How the buffer's pages ended up.
#[derive(Debug, Clone)]
pub struct HugePages {
    /// The kernel's transparent huge page mode (`always`, `madvise`, `never`, or `unavailable`).
    pub thp_mode: String,
    /// `madvise(MADV_HUGEPAGE)` was accepted; otherwise why not.
    pub advised: Result<(), String>,
    /// Bytes of the buffer backed by huge pages after it was touched (`None`: smaps unreadable).
    pub backed_bytes: Option<u64>,
    pub buffer_bytes: u64,
}

impl HugePages {
    /// One line for the report.
    pub fn describe(&self) -> String {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        match (&self.advised, self.backed_bytes) {
            (Ok(()), Some(b)) if b > 0 => format!(
                "huge pages: {:.1} of {:.1} MiB on 2 MiB transparent huge pages (MADV_HUGEPAGE, THP mode {})",
                mib(b),
                mib(self.buffer_bytes),
                self.thp_mode
            ),
            (Ok(()), _) => format!(
                "huge pages: asked for (MADV_HUGEPAGE) but not given (THP mode {}): 4 KiB pages, so working sets \
                 beyond the TLB's reach include page walks",
                self.thp_mode
            ),
            (Err(e), _) => format!(
                "huge pages: not available ({e}; THP mode {}): 4 KiB pages, so working sets beyond the TLB's reach \
                 include page walks",
                self.thp_mode
            ),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "thp_mode": self.thp_mode,
            "madv_hugepage": self.advised.as_ref().err().map_or_else(|| "accepted".to_string(), |e| e.clone()),
            "backed_bytes": self.backed_bytes,
            "buffer_bytes": self.buffer_bytes,
        })
    }
}

/// Anonymous memory for the chase, aligned to a huge page, touched, unmapped on drop.
pub struct Buffer {
    map: *mut libc::c_void,
    map_len: usize,
    /// First byte of the aligned part, a multiple of [`HUGE_PAGE`].
    base: *mut u8,
    len: usize,
    pub huge: HugePages,
}

impl Buffer {
    /// Maps at least `len` bytes, advises huge pages and touches every page (call it before locking
    /// memory: `mlockall(MCL_FUTURE)` would fault a new mapping in with small pages at once).
    pub fn new(len: usize) -> std::io::Result<Buffer> {
        let len = len.max(LINE).next_multiple_of(HUGE_PAGE);
        let map_len = len + HUGE_PAGE;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let offset = (map as usize).next_multiple_of(HUGE_PAGE) - map as usize;
        // SAFETY: `offset` < HUGE_PAGE, so `base .. base + len` lies inside the `map_len` bytes mapped.
        let base = unsafe { (map as *mut u8).add(offset) };
        // SAFETY: the range is part of our own mapping; the advice changes only how it is backed.
        let advised = if unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) } == 0 {
            Ok(())
        } else {
            Err(format!("madvise(MADV_HUGEPAGE): {}", std::io::Error::last_os_error()))
        };
        let thp_mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .ok()
            .and_then(|s| s.split_once('[').and_then(|(_, r)| r.split_once(']')).map(|(m, _)| m.to_string()))
            .unwrap_or_else(|| "unavailable".into());
        let huge = HugePages { thp_mode, advised, backed_bytes: None, buffer_bytes: len as u64 };
        let mut buf = Buffer { map, map_len, base, len, huge };
        // First touch: the kernel backs each aligned 2 MiB with a huge page where it can. Every line
        // starts out linked to itself, so that any line holds the address of a line of the buffer.
        for i in 0..buf.lines() {
            buf.set_link(i, i);
        }
        buf.huge.backed_bytes = anon_huge_bytes(buf.base as usize, buf.len);
        Ok(buf)
    }

    /// Lines the buffer holds.
    pub fn lines(&self) -> usize {
        self.len / LINE
    }

    fn words(&mut self) -> &mut [usize] {
        // SAFETY: `base .. base + len` is mapped read-write, owned by this Buffer, aligned to a huge
        // page (so to usize), and `len` is a multiple of the word size; `&mut self` makes the view unique.
        unsafe { std::slice::from_raw_parts_mut(self.base.cast::<usize>(), self.len / std::mem::size_of::<usize>()) }
    }

    /// Makes line `line` point to line `next` (both within the buffer).
    fn set_link(&mut self, line: usize, next: usize) {
        let target = self.base as usize + next * LINE;
        self.words()[line * (LINE / std::mem::size_of::<usize>())] = target;
    }

    /// Links the first `lines` lines into one cycle, in address order (`random == false`) or in a
    /// random order drawn from `seed`.
    pub fn link(&mut self, lines: usize, random: bool, seed: u64) -> Chain {
        let lines = lines.clamp(1, self.lines());
        let order: Vec<usize> = if random { random_cycle(lines, seed) } else { (0..lines).collect() };
        for (i, &line) in order.iter().enumerate() {
            self.set_link(line, order[(i + 1) % lines]);
        }
        Chain { start: order[0], lines }
    }

    /// The address of line `line` (clamped to the buffer).
    fn line_ptr(&self, line: usize) -> *const usize {
        let line = line.min(self.lines() - 1);
        (self.base as usize + line * LINE) as *const usize
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`; nothing refers to it once the Buffer is gone (a
        // Chain holds line numbers, not addresses).
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// A linked cycle in a [`Buffer`]: its first line and its length.
#[derive(Debug, Clone, Copy)]
pub struct Chain {
    start: usize,
    lines: usize,
}

/// A random cyclic order of `0..n`, starting at 0: each element's successor is the next one, the last's
/// is the first (Sattolo's shuffle makes a single cycle, so the chase visits every line).
pub fn random_cycle(n: usize, seed: u64) -> Vec<usize> {
    let mut next: Vec<usize> = (0..n).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for i in (1..n).rev() {
        let j = rng.random_range(0..i);
        next.swap(i, j);
    }
    // `next` is now a cyclic permutation (i -> next[i]); walk it into an order.
    let mut order = Vec::with_capacity(n);
    let mut at = 0;
    for _ in 0..n {
        order.push(at);
        at = next[at];
    }
    order
}

/// Times `samples` batches of [`BATCH`] reads along `chain`, after one untimed pass over it (so the
/// working set is where it will be while measured). Returns the TSC ticks of each batch; stops early
/// when `stop()` says so (checked every 64 batches).
pub fn measure(buf: &Buffer, chain: Chain, samples: u64, stop: &dyn Fn() -> bool) -> (Vec<u64>, bool) {
    let mut p = buf.line_ptr(chain.start);
    // The untimed pass.
    // SAFETY: `p` is a line of `buf`, which is borrowed (unchanged, mapped) for this whole function,
    // and every line of it holds the address of a line of it (see `Buffer::new`).
    p = unsafe { follow(p, (chain.lines as u64).max(BATCH).next_multiple_of(UNROLL)) };
    let mut ticks = Vec::with_capacity(samples as usize);
    let mut stopped = false;
    for i in 0..samples {
        if i % 64 == 0 && stop() {
            stopped = true;
            break;
        }
        let t0 = rdtsc_ordered();
        // SAFETY: as for the untimed pass: `p` is still a line of `buf`.
        p = unsafe { follow(p, BATCH) };
        let t1 = rdtsc_ordered();
        ticks.push(t1.wrapping_sub(t0));
    }
    std::hint::black_box(p);
    (ticks, stopped)
}

/// Follows `n` links (a multiple of [`UNROLL`]) from `p` and returns where it ends.
///
/// # Safety
/// `p` and every address reachable from it must be readable, aligned `usize`s holding the next address.
#[inline(never)]
unsafe fn follow(mut p: *const usize, n: u64) -> *const usize {
    for _ in 0..n / UNROLL {
        for _ in 0..UNROLL {
            // SAFETY: the caller guarantees every link is a readable, aligned address of the chain.
            p = unsafe { p.read() } as *const usize;
        }
    }
    p
}

/// Bytes backed by transparent huge pages in `[start, start + len)`, from `/proc/self/smaps`.
fn anon_huge_bytes(start: usize, len: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    Some(sum_anon_huge(&smaps, start, start + len))
}

/// Sums `AnonHugePages` of the mappings in `smaps` that overlap `[start, end)`.
pub fn sum_anon_huge(smaps: &str, start: usize, end: usize) -> u64 {
    let mut total = 0;
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            inside = a < end && b > start;
        } else if inside && let Some(kb) = line.strip_prefix("AnonHugePages:") {
            total += kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap_or(0) * 1024;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_cycles_visit_every_line_once() {
        for n in [1, 2, 3, 64, 1000] {
            let order = random_cycle(n, 7);
            let mut seen = order.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n = {n}");
            assert_eq!(order[0], 0);
        }
        assert_ne!(random_cycle(1000, 1), random_cycle(1000, 2));
        assert_eq!(random_cycle(1000, 1), random_cycle(1000, 1));
    }

    #[test]
    fn chains_link_every_line_and_measure_counts_batches() {
        let mut buf = Buffer::new(64 << 10).unwrap();
        assert_eq!(buf.lines(), HUGE_PAGE / LINE, "rounded up to a huge page");
        for random in [false, true] {
            let lines = 1000;
            let chain = buf.link(lines, random, 3);
            // Walk the cycle by hand: back at the start after exactly `lines` links, every line once.
            let mut seen = std::collections::HashSet::new();
            let start = buf.line_ptr(chain.start);
            let mut p = start;
            for _ in 0..lines {
                assert!(seen.insert(p as usize));
                let off = p as usize - buf.base as usize;
                assert!(off % LINE == 0 && off / LINE < lines);
                // SAFETY: p is a line start inside the buffer (checked just above).
                p = unsafe { p.read() } as *const usize;
            }
            assert_eq!(p, start);
            let (ticks, stopped) = measure(&buf, chain, 5, &|| false);
            assert_eq!((ticks.len(), stopped), (5, false));
            let (ticks, stopped) = measure(&buf, chain, 5, &|| true);
            assert_eq!((ticks.len(), stopped), (0, true));
        }
    }

    #[test]
    fn smaps_huge_pages_are_summed_over_the_range() {
        let smaps = "\
7f0000000000-7f0000200000 rw-p 00000000 00:00 0
Size:               2048 kB
AnonHugePages:      2048 kB
7f0000200000-7f0000400000 rw-p 00000000 00:00 0
AnonHugePages:         0 kB
7f0000400000-7f0000800000 rw-p 00000000 00:00 0
AnonHugePages:      4096 kB
";
        assert_eq!(sum_anon_huge(smaps, 0x7f00_0000_0000, 0x7f00_0040_0000), 2 << 20);
        assert_eq!(sum_anon_huge(smaps, 0x7f00_0010_0000, 0x7f00_0080_0000), 6 << 20);
        assert_eq!(sum_anon_huge(smaps, 0x1000, 0x2000), 0);
    }
}
