//! The controller step in three arithmetics, written the way generated code runs it: a dense
//! state-space update with plain loops in a fixed order.
//!
//! # Operation order (normative; a C port must follow it to match f64 bit for bit)
//!
//! With `n` states, state `x`, inputs `r`, `y`, and a scratch vector `xn`:
//!
//! ```text
//! u = 0
//! for j in 0..n: u = u + c[j] * x[j]
//! u = u + d[0] * r
//! u = u + d[1] * y
//! for i in 0..n:
//!     acc = 0
//!     for j in 0..n: acc = acc + a[i][j] * x[j]
//!     acc = acc + b[i][0] * r
//!     acc = acc + b[i][1] * y
//!     xn[i] = acc
//! x = xn
//! return u
//! ```
//!
//! Every `*` and `+` is one IEEE-754 operation rounded to nearest, in exactly this order: no fused
//! multiply-add (Rust never contracts; compile C with `-ffp-contract=off`), no reassociation, no
//! vectorised reduction. The accumulators start at `+0.0` (so a row whose terms are all `-0.0` gives
//! `+0.0`). All multiplications are performed, zeros included: the step costs `n^2 + 3n + 2`
//! multiply-adds whatever the sparsity of the model.
//!
//! The f32 step is the same with f32 everywhere (inputs rounded to f32 by the caller).
//!
//! The f64 and f32 controllers compute the same sums with the loops rearranged for speed: the output's
//! sum first, then the state update in blocks of rows, each block's accumulators held in registers while
//! `j` runs over the columns of a column-major copy of `A` (made once in `new`, padded with zero rows to
//! whole blocks). Each accumulator still starts at `+0.0` and receives exactly the terms above in exactly
//! that order, so every result is the same bit for bit; but the `BLOCK` rows of a block are independent,
//! so the compiler computes them with packed SSE2 instructions (2 rows per instruction in f64, 4 in f32)
//! and no accumulator goes through memory. A port may use either form.
//!
//! The Q31 step is the same on integers, with the state and input sums of each row kept in two
//! accumulators because each matrix has its own shift (see [`ModelQ31`]):
//!
//! ```text
//! acc = 0;  for j in 0..n: acc = acc + c[j] * x[j]
//! acw = d[0] * r;  acw = acw + d[1] * y
//! u = sat32(round_shift(acc, shift_c) + round_shift(acw, shift_d))
//! for i in 0..n:
//!     acc = 0;  for j in 0..n: acc = acc + a[i][j] * x[j]
//!     acw = b[i][0] * r;  acw = acw + b[i][1] * y
//!     xn[i] = sat32(round_shift(acc, shift_a) + round_shift(acw, shift_b))
//! x = xn
//! ```
//!
//! `acc`, `acw` are i64; each product is `i32 * i32 -> i64` (exact); the additions are exact (the model's
//! row bound rules out overflow). `round_shift(v, s) = ((v >> (s - 1)) + 1) >> 1` is the arithmetic shift
//! right by `s` rounding halves up (toward +inf), and cannot overflow; the sum of the two rounded terms is
//! below `2^34` in magnitude; `sat32` clamps it to `[-2^31, 2^31 - 1]`. States saturate like the output.
//! Because `b[i][1] = -b[i][0]` and `d[1] = -d[0]` exactly (the quantisation is symmetric), the input sums
//! depend only on `r - y`: adding the same offset to `r` and `y` (e.g. rebasing both by whole revolutions
//! to stay inside the input full scale) leaves every Q31 output bit unchanged.

use crate::model::{INPUTS, MAX_N, Model32, Model64, ModelQ31, from_q31, to_q31};

/// Rows per block of the f64 and f32 state update (accumulators kept in registers).
const BLOCK: usize = 16;
/// Blocks covering `MAX_N` rows.
const BLOCKS: usize = MAX_N.div_ceil(BLOCK);

/// The float types of the dense step (f64, f32).
trait Real: Copy + core::ops::Mul<Output = Self> + core::ops::AddAssign {
    const ZERO: Self;
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
}

/// The blocked dense step of the f64 and f32 controllers (module docs: the sums and their order).
/// Monomorphised and inlined into each controller's `step`, so each arithmetic gets its own packed code.
// The indexed loops are the normative operation order (shared with the C port), kept literal.
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
#[inline(always)]
fn dense_step<T: Real>(
    n: usize,
    c: &[T; MAX_N],
    d: &[T; INPUTS],
    b: &[[T; INPUTS]; MAX_N],
    at: &[[[T; BLOCK]; BLOCKS]; MAX_N],
    x: &mut [T; MAX_N],
    xn: &mut [T; MAX_N],
    r: T,
    y: T,
) -> T {
    let mut u = T::ZERO;
    for j in 0..n {
        u += c[j] * x[j];
    }
    u += d[0] * r;
    u += d[1] * y;
    for blk in 0..n.div_ceil(BLOCK) {
        let mut acc = [T::ZERO; BLOCK];
        for j in 0..n {
            let (col, xj) = (&at[j][blk], x[j]);
            for k in 0..BLOCK {
                acc[k] += col[k] * xj;
            }
        }
        let i0 = blk * BLOCK;
        for (k, xn) in xn[i0..n.min(i0 + BLOCK)].iter_mut().enumerate() {
            let bi = &b[i0 + k];
            let mut v = acc[k];
            v += bi[0] * r;
            v += bi[1] * y;
            *xn = v;
        }
    }
    x[..n].copy_from_slice(&xn[..n]);
    u
}

/// A controller that can be stepped with real-valued signals, whatever its arithmetic.
pub trait Step {
    /// One sampling period: inputs `r` (reference position, rad) and `y` (measured position, rad),
    /// returns the output `u` (V).
    fn step_f64(&mut self, r: f64, y: f64) -> f64;
    /// Sets the state to zero (the initial state of the reference data).
    fn reset(&mut self);
}

/// The f64 controller. Owns a copy of its model, so the step only touches the controller's own memory.
#[derive(Clone, Debug)]
pub struct Controller64 {
    model: Model64,
    /// `A` column-major in blocks of rows: `at[j][i / BLOCK][i % BLOCK] = a[i][j]`, zero past `MAX_N`.
    at: [[[f64; BLOCK]; BLOCKS]; MAX_N],
    x: [f64; MAX_N],
    xn: [f64; MAX_N],
}

impl Controller64 {
    /// A controller with zero state. The model is assumed valid ([`Model64::validate`]); an order above
    /// `MAX_N` is clamped.
    pub const fn new(model: &Model64) -> Self {
        let mut model = *model;
        if model.n > MAX_N {
            model.n = MAX_N;
        }
        Controller64 { model, at: transpose64(&model.a), x: [0.0; MAX_N], xn: [0.0; MAX_N] }
    }

    /// The model.
    pub fn model(&self) -> &Model64 {
        &self.model
    }

    /// The current state (the first `n` entries are used).
    pub fn state(&self) -> &[f64; MAX_N] {
        &self.x
    }

    /// Sets the state (e.g. to replay a recorded window that does not start from rest).
    pub fn set_state(&mut self, x: &[f64; MAX_N]) {
        self.x = *x;
    }

    /// One step in the documented operation order.
    #[inline(never)]
    pub fn step(&mut self, r: f64, y: f64) -> f64 {
        let m = &self.model;
        dense_step(m.n.min(MAX_N), &m.c, &m.d, &m.b, &self.at, &mut self.x, &mut self.xn, r, y)
    }
}

/// `A` column-major in blocks of rows (see [`Controller64`]'s `at`).
const fn transpose64(a: &[[f64; MAX_N]; MAX_N]) -> [[[f64; BLOCK]; BLOCKS]; MAX_N] {
    let mut t = [[[0.0; BLOCK]; BLOCKS]; MAX_N];
    let mut i = 0;
    while i < MAX_N {
        let mut j = 0;
        while j < MAX_N {
            t[j][i / BLOCK][i % BLOCK] = a[i][j];
            j += 1;
        }
        i += 1;
    }
    t
}

/// `A` column-major in blocks of rows (see [`Controller32`]'s `at`).
const fn transpose32(a: &[[f32; MAX_N]; MAX_N]) -> [[[f32; BLOCK]; BLOCKS]; MAX_N] {
    let mut t = [[[0.0; BLOCK]; BLOCKS]; MAX_N];
    let mut i = 0;
    while i < MAX_N {
        let mut j = 0;
        while j < MAX_N {
            t[j][i / BLOCK][i % BLOCK] = a[i][j];
            j += 1;
        }
        i += 1;
    }
    t
}

impl Step for Controller64 {
    fn step_f64(&mut self, r: f64, y: f64) -> f64 {
        self.step(r, y)
    }
    fn reset(&mut self) {
        self.x = [0.0; MAX_N];
    }
}

/// The f32 controller: the f64 model rounded to f32, same operation order.
#[derive(Clone, Debug)]
pub struct Controller32 {
    model: Model32,
    /// `A` column-major in blocks of rows: `at[j][i / BLOCK][i % BLOCK] = a[i][j]`, zero past `MAX_N`.
    at: [[[f32; BLOCK]; BLOCKS]; MAX_N],
    x: [f32; MAX_N],
    xn: [f32; MAX_N],
}

impl Controller32 {
    /// A controller with zero state.
    pub const fn new(model: &Model32) -> Self {
        let mut model = *model;
        if model.n > MAX_N {
            model.n = MAX_N;
        }
        Controller32 { model, at: transpose32(&model.a), x: [0.0; MAX_N], xn: [0.0; MAX_N] }
    }

    /// A controller with zero state from the f64 model.
    pub fn from_f64(model: &Model64) -> Self {
        Self::new(&Model32::from_f64(model))
    }

    /// The model.
    pub fn model(&self) -> &Model32 {
        &self.model
    }

    /// The current state.
    pub fn state(&self) -> &[f32; MAX_N] {
        &self.x
    }

    /// One step in the documented operation order, in f32.
    #[inline(never)]
    pub fn step(&mut self, r: f32, y: f32) -> f32 {
        let m = &self.model;
        dense_step(m.n.min(MAX_N), &m.c, &m.d, &m.b, &self.at, &mut self.x, &mut self.xn, r, y)
    }
}

impl Step for Controller32 {
    fn step_f64(&mut self, r: f64, y: f64) -> f64 {
        self.step(r as f32, y as f32) as f64
    }
    fn reset(&mut self) {
        self.x = [0.0; MAX_N];
    }
}

/// Arithmetic shift right by `s` (1..=62) rounding halves toward +inf, without overflow.
#[inline(always)]
pub fn round_shift(acc: i64, s: u32) -> i64 {
    ((acc >> (s - 1)) + 1) >> 1
}

/// Clamps to the i32 range.
#[inline(always)]
pub fn sat32(v: i64) -> i32 {
    if v > i32::MAX as i64 {
        i32::MAX
    } else if v < i32::MIN as i64 {
        i32::MIN
    } else {
        v as i32
    }
}

/// The Q31 controller (the MCU baseline): i32 coefficients and states, i64 accumulators, rounding and
/// saturation as documented in the module.
#[derive(Clone, Debug)]
pub struct ControllerQ31 {
    model: ModelQ31,
    x: [i32; MAX_N],
    xn: [i32; MAX_N],
}

impl ControllerQ31 {
    /// A controller with zero state. The model is assumed valid ([`ModelQ31::validate`]: a model whose
    /// rows break the accumulator bound could overflow); an order above `MAX_N` is clamped.
    pub const fn new(model: &ModelQ31) -> Self {
        let mut model = *model;
        if model.n > MAX_N {
            model.n = MAX_N;
        }
        ControllerQ31 { model, x: [0; MAX_N], xn: [0; MAX_N] }
    }

    /// The model.
    pub fn model(&self) -> &ModelQ31 {
        &self.model
    }

    /// The current state (Q31 of each state's full scale).
    pub fn state(&self) -> &[i32; MAX_N] {
        &self.x
    }

    /// One step on Q31 signals: `r`, `y` in Q31 of `scaling.input_fs`, result in Q31 of
    /// `scaling.output_fs`.
    // The indexed loops are the normative operation order (shared with the C port), kept literal.
    #[allow(clippy::needless_range_loop)]
    #[inline(never)]
    pub fn step(&mut self, r: i32, y: i32) -> i32 {
        let m = &self.model;
        let n = m.n.min(MAX_N);
        let (r, y) = (r as i64, y as i64);
        let mut acc: i64 = 0;
        for j in 0..n {
            acc += m.c[j] as i64 * self.x[j] as i64;
        }
        let mut acw = m.d[0] as i64 * r;
        acw += m.d[1] as i64 * y;
        let u = sat32(round_shift(acc, m.shift_c) + round_shift(acw, m.shift_d));
        for i in 0..n {
            let row = &m.a[i];
            let mut acc: i64 = 0;
            for j in 0..n {
                acc += row[j] as i64 * self.x[j] as i64;
            }
            let mut acw = m.b[i][0] as i64 * r;
            acw += m.b[i][1] as i64 * y;
            self.xn[i] = sat32(round_shift(acc, m.shift_a) + round_shift(acw, m.shift_b));
        }
        self.x[..n].copy_from_slice(&self.xn[..n]);
        u
    }

    /// Converts an input (rad) to Q31.
    pub fn input_to_q31(&self, v: f64) -> i32 {
        to_q31(v, self.model.scaling.input_fs)
    }

    /// Converts a Q31 output to volts.
    pub fn output_from_q31(&self, q: i32) -> f64 {
        from_q31(q, self.model.scaling.output_fs)
    }
}

impl Step for ControllerQ31 {
    fn step_f64(&mut self, r: f64, y: f64) -> f64 {
        let (rq, yq) = (self.input_to_q31(r), self.input_to_q31(y));
        let uq = self.step(rq, yq);
        self.output_from_q31(uq)
    }
    fn reset(&mut self) {
        self.x = [0; MAX_N];
    }
}

const _: () = assert!(INPUTS == 2);
