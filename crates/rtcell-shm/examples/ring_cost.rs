//! Single-thread cost of try_send + try_recv (no cross-core traffic): the software part of a round trip.
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{RegionLayout, RegionView, RingConfig};
use std::time::Instant;

fn main() {
    let mut layout = RegionLayout::new();
    layout.ring("r", RingConfig::for_frames(4096, 4)).unwrap();
    let words: Vec<AtomicU64> = (0..layout.size_bytes() / 8).map(|_| AtomicU64::new(0)).collect();
    layout.init(&words, 1).unwrap();
    let r = RegionView::attach(&words).unwrap();
    let ring = r.ring("r").unwrap();
    let (mut p, mut c) = (ring.producer(), ring.consumer());
    let mut buf = [0u8; 4096];
    for size in [0usize, 64, 1024] {
        let msg = vec![7u8; size];
        let n = 10_000_000;
        let t = Instant::now();
        for _ in 0..n {
            p.try_send(&msg).unwrap();
            let got = c.try_recv(&mut buf).unwrap();
            std::hint::black_box(got);
        }
        println!("{size} B: {:.1} ns per send+recv", t.elapsed().as_nanos() as f64 / n as f64);
    }
}
