//! Times the f64 controller step against the same matrix-vector work done with `nalgebra`, in the same
//! run on the same data, and prints the ratio (goal: at most 1.0).
//!
//! Both step the shipped 41-state model over the 2,000 reference inputs: ours is [`Controller64::step`]
//! (dense, fixed operation order, bit-exact with the reference data); nalgebra's is
//! `u = C x + D w; x = A x + B w` on `SMatrix<f64, 41, 41>` & co., in two spellings (the operator
//! expression, and in-place `gemv` into a scratch vector), of which the faster counts. Passes over the
//! data alternate between the implementations so both see the same machine conditions; the figure is
//! the median over passes of the time per step.
//!
//! `cargo run --release -p rtcell-control --example vs_nalgebra [-- PASSES]`

use std::hint::black_box;
use std::time::Instant;

use nalgebra::{SMatrix, SVector, Vector2};
use rtcell_control::reference::{REFERENCE_SAMPLES, shipped};
use rtcell_control::{Controller64, DEFAULT_MODEL64, MAX_N};

const N: usize = MAX_N;

struct Nalg {
    a: SMatrix<f64, N, N>,
    b: SMatrix<f64, N, 2>,
    c: SVector<f64, N>,
    d: Vector2<f64>,
    x: SVector<f64, N>,
    xn: SVector<f64, N>,
}

impl Nalg {
    fn new() -> Self {
        let m = &DEFAULT_MODEL64;
        assert_eq!(m.n, N, "the shipped model has {N} states");
        Nalg {
            a: SMatrix::from_fn(|i, j| m.a[i][j]),
            b: SMatrix::from_fn(|i, j| m.b[i][j]),
            c: SVector::from_fn(|i, _| m.c[i]),
            d: Vector2::new(m.d[0], m.d[1]),
            x: SVector::zeros(),
            xn: SVector::zeros(),
        }
    }

    fn reset(&mut self) {
        self.x.fill(0.0);
    }

    /// The operator spelling.
    #[inline(never)]
    fn step_ops(&mut self, r: f64, y: f64) -> f64 {
        let w = Vector2::new(r, y);
        let u = self.c.dot(&self.x) + self.d.dot(&w);
        self.x = self.a * self.x + self.b * w;
        u
    }

    /// In place: `xn = A x; xn += B w; swap`.
    #[inline(never)]
    fn step_gemv(&mut self, r: f64, y: f64) -> f64 {
        let w = Vector2::new(r, y);
        let u = self.c.dot(&self.x) + self.d.dot(&w);
        self.xn.gemv(1.0, &self.a, &self.x, 0.0);
        self.xn.gemv(1.0, &self.b, &w, 1.0);
        std::mem::swap(&mut self.x, &mut self.xn);
        u
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let passes: usize = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 300,
        Some(Ok(p)) if p > 0 => p,
        Some(_) => {
            eprintln!("usage: vs_nalgebra [PASSES > 0]");
            std::process::exit(2);
        }
    };
    let data = match shipped() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let inputs: Vec<(f64, f64)> = data.r.iter().copied().zip(data.y.iter().copied()).collect();
    assert_eq!(inputs.len(), REFERENCE_SAMPLES);

    let mut ours = Controller64::new(&DEFAULT_MODEL64);
    let mut nal = Nalg::new();
    // Agreement first: ours is bit-exact with the reference; nalgebra sums in another order.
    let (mut exact, mut max_ops, mut max_gemv) = (true, 0.0f64, 0.0f64);
    let mut nal2 = Nalg::new();
    for (k, &(r, y)) in inputs.iter().enumerate() {
        exact &= ours.step(r, y).to_bits() == data.u[k].to_bits();
        max_ops = max_ops.max((nal.step_ops(r, y) - data.u[k]).abs());
        max_gemv = max_gemv.max((nal2.step_gemv(r, y) - data.u[k]).abs());
    }

    type Pass<'a> = Box<dyn FnMut() -> f64 + 'a>;
    let mut impls: Vec<(&str, Pass)> = vec![
        (
            "rtcell Controller64::step",
            Box::new(|| {
                use rtcell_control::Step;
                ours.reset();
                let mut s = 0.0;
                for &(r, y) in &inputs {
                    s += ours.step(black_box(r), black_box(y));
                }
                s
            }),
        ),
        (
            "nalgebra, A * x + B * w",
            Box::new(|| {
                nal.reset();
                let mut s = 0.0;
                for &(r, y) in &inputs {
                    s += nal.step_ops(black_box(r), black_box(y));
                }
                s
            }),
        ),
        (
            "nalgebra, gemv in place",
            Box::new(|| {
                nal2.reset();
                let mut s = 0.0;
                for &(r, y) in &inputs {
                    s += nal2.step_gemv(black_box(r), black_box(y));
                }
                s
            }),
        ),
    ];
    let mut per_step: Vec<Vec<f64>> = vec![Vec::with_capacity(passes); impls.len()];
    // Warm-up pass each, then alternate.
    for (_, f) in impls.iter_mut() {
        black_box(f());
    }
    for _ in 0..passes {
        for (i, (_, f)) in impls.iter_mut().enumerate() {
            let t0 = Instant::now();
            black_box(f());
            per_step[i].push(t0.elapsed().as_secs_f64() * 1e9 / inputs.len() as f64);
        }
    }
    let names: Vec<&str> = impls.iter().map(|(n, _)| *n).collect();
    let medians: Vec<f64> = per_step.iter_mut().map(|v| median(v)).collect();
    let mins: Vec<f64> = per_step.iter().map(|v| v.iter().copied().fold(f64::INFINITY, f64::min)).collect();
    println!(
        "f64 step of the {N}-state controller, {} steps per pass, {passes} passes each (ns per step):",
        inputs.len()
    );
    for i in 0..names.len() {
        println!("  {:<28} median {:8.1}   best pass {:8.1}", names[i], medians[i], mins[i]);
    }
    let best_nalgebra = medians[1].min(medians[2]);
    println!(
        "ratio rtcell / nalgebra (medians, faster nalgebra spelling): {:.3} x (goal <= 1.0)",
        medians[0] / best_nalgebra
    );
    println!(
        "agreement over the reference data: rtcell bit-exact {exact}; nalgebra max |u - u_ref| {max_ops:.2e} V (ops), {max_gemv:.2e} V (gemv)"
    );
}
