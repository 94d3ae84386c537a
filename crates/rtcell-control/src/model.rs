//! Discrete state-space models in fixed-size arrays (no allocation): f64, f32 and Q31.
//!
//! All three have the same shape: `n` states (`n <= MAX_N`), two inputs `w = [r, y]` (reference and
//! measured position) and one output `u`:
//!
//! ```text
//! u(k)   = C x(k) + D w(k)
//! x(k+1) = A x(k) + B w(k)
//! ```
//!
//! Only the leading `n` rows/columns of the arrays are used; the rest must be zero.

/// Most harmonics a model can hold.
pub const MAX_H: usize = 20;
/// Most states a model can hold: one integrator plus two states per harmonic.
pub const MAX_N: usize = 2 * MAX_H + 1;
/// Controller inputs: reference position `r` and measured position `y`.
pub const INPUTS: usize = 2;

/// Why a model was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelError {
    /// `n` is zero or larger than [`MAX_N`].
    BadOrder,
    /// A coefficient is NaN or infinite.
    NotFinite,
    /// A coefficient outside the leading `n` rows/columns is not zero.
    Padding,
    /// Q31 conversion: a full scale is not a finite positive number.
    BadScale,
    /// Q31 conversion: no shift in 1..=62 represents the coefficients (a coefficient is too large).
    NoShift,
}

impl core::fmt::Display for ModelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ModelError::BadOrder => "model order is 0 or above MAX_N",
            ModelError::NotFinite => "model coefficient is not finite",
            ModelError::Padding => "model coefficient outside the used block is not zero",
            ModelError::BadScale => "full scale is not a finite positive number",
            ModelError::NoShift => "no Q31 shift represents the coefficients",
        })
    }
}

/// The f64 model: the design's output and the reference every other implementation is checked against.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model64 {
    /// Number of states used.
    pub n: usize,
    /// State matrix, row-major: `a[i][j]` multiplies `x[j]` in the update of `x[i]`.
    pub a: [[f64; MAX_N]; MAX_N],
    /// Input matrix: `b[i][0]` multiplies `r`, `b[i][1]` multiplies `y`.
    pub b: [[f64; INPUTS]; MAX_N],
    /// Output row.
    pub c: [f64; MAX_N],
    /// Feedthrough: `d[0]` multiplies `r`, `d[1]` multiplies `y`.
    pub d: [f64; INPUTS],
}

impl Model64 {
    /// All-zero model with `n = 0` (a placeholder; [`Model64::validate`] refuses it).
    pub const fn zeroed() -> Self {
        Model64 { n: 0, a: [[0.0; MAX_N]; MAX_N], b: [[0.0; INPUTS]; MAX_N], c: [0.0; MAX_N], d: [0.0; INPUTS] }
    }

    /// Checks the order, that every coefficient is finite, and that the padding is zero.
    pub fn validate(&self) -> Result<(), ModelError> {
        let n = self.n;
        if n == 0 || n > MAX_N {
            return Err(ModelError::BadOrder);
        }
        for i in 0..MAX_N {
            for j in 0..MAX_N {
                check(self.a[i][j], i < n && j < n)?;
            }
            for k in 0..INPUTS {
                check(self.b[i][k], i < n)?;
            }
            check(self.c[i], i < n)?;
        }
        for k in 0..INPUTS {
            check(self.d[k], true)?;
        }
        Ok(())
    }

    /// True if both models have the same order and bit-identical coefficients.
    pub fn bits_eq(&self, other: &Model64) -> bool {
        let same = |p: f64, q: f64| p.to_bits() == q.to_bits();
        self.n == other.n
            && (0..MAX_N).all(|i| {
                (0..MAX_N).all(|j| same(self.a[i][j], other.a[i][j]))
                    && (0..INPUTS).all(|k| same(self.b[i][k], other.b[i][k]))
                    && same(self.c[i], other.c[i])
            })
            && (0..INPUTS).all(|k| same(self.d[k], other.d[k]))
    }
}

fn check(v: f64, used: bool) -> Result<(), ModelError> {
    if !v.is_finite() {
        Err(ModelError::NotFinite)
    } else if !used && v != 0.0 {
        Err(ModelError::Padding)
    } else {
        Ok(())
    }
}

/// The f32 model: every coefficient of the f64 model rounded to nearest f32.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model32 {
    /// Number of states used.
    pub n: usize,
    /// State matrix.
    pub a: [[f32; MAX_N]; MAX_N],
    /// Input matrix.
    pub b: [[f32; INPUTS]; MAX_N],
    /// Output row.
    pub c: [f32; MAX_N],
    /// Feedthrough.
    pub d: [f32; INPUTS],
}

impl Model32 {
    /// Rounds every coefficient of `m` to f32 (round to nearest even, as `as f32` does). A `const fn`, so
    /// a payload can hold the f32 model in a static built at compile time.
    pub const fn from_f64(m: &Model64) -> Self {
        let mut out =
            Model32 { n: m.n, a: [[0.0; MAX_N]; MAX_N], b: [[0.0; INPUTS]; MAX_N], c: [0.0; MAX_N], d: [0.0; INPUTS] };
        let mut i = 0;
        while i < MAX_N {
            let mut j = 0;
            while j < MAX_N {
                out.a[i][j] = m.a[i][j] as f32;
                j += 1;
            }
            let mut k = 0;
            while k < INPUTS {
                out.b[i][k] = m.b[i][k] as f32;
                k += 1;
            }
            out.c[i] = m.c[i] as f32;
            i += 1;
        }
        let mut k = 0;
        while k < INPUTS {
            out.d[k] = m.d[k] as f32;
            k += 1;
        }
        out
    }
}

/// Full scales of the Q31 signals: a Q31 value `q` stands for `fs * q / 2^31`.
///
/// Powers of two are recommended (and used by the shipped model): then scaling the coefficients is exact
/// and only the final rounding to integers loses information.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QScaling {
    /// Full scale of both inputs `r` and `y` (rad).
    pub input_fs: f64,
    /// Full scale of the output `u` (V).
    pub output_fs: f64,
    /// Full scale of each state (the state's own unit: V for this controller's realisation).
    pub state_fs: [f64; MAX_N],
}

/// The Q31 model: the f64 model after the diagonal state scaling of a [`QScaling`], each of its four
/// matrices stored as i32 with its own power-of-two shift.
///
/// A coefficient `g` of the scaled model is stored as `q = round(g * 2^shift)` (round half away from zero),
/// with the matrix's shift the largest in 1..=62 for which (1) every `q` fits an i32 and (2) every row
/// has `sum |q| <= 2^32 - 1`. Condition (2) proves that a row's 64-bit accumulator can never overflow,
/// whatever the inputs and states: each term is at most `|q| * 2^31`, so `|acc| <= (2^32 - 1) * 2^31 < 2^63`.
/// (For `B` and `D`, two i32 entries per row, (2) follows from (1).)
///
/// Scaled model, with `sx` the state full scales, `fi` the input and `fo` the output full scale:
/// `A~[i][j] = a[i][j] sx[j] / sx[i]`, `B~[i][k] = b[i][k] fi / sx[i]`, `C~[j] = c[j] sx[j] / fo`,
/// `D~[k] = d[k] fi / fo`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelQ31 {
    /// Number of states used.
    pub n: usize,
    /// `round(A~ * 2^shift_a)`.
    pub a: [[i32; MAX_N]; MAX_N],
    /// `round(B~ * 2^shift_b)`.
    pub b: [[i32; INPUTS]; MAX_N],
    /// `round(C~ * 2^shift_c)`.
    pub c: [i32; MAX_N],
    /// `round(D~ * 2^shift_d)`.
    pub d: [i32; INPUTS],
    /// Fractional bits of `a`.
    pub shift_a: u32,
    /// Fractional bits of `b`.
    pub shift_b: u32,
    /// Fractional bits of `c`.
    pub shift_c: u32,
    /// Fractional bits of `d`.
    pub shift_d: u32,
    /// The scaling the model was built with (for converting signals to and from Q31).
    pub scaling: QScaling,
}

/// `2^k` as f64 for `0 <= k <= 62` (exact).
fn pow2(k: u32) -> f64 {
    (1u64 << k) as f64
}

/// Round half away from zero to i64, exactly, for `|v| < 2^62`.
pub fn round_half_away(v: f64) -> i64 {
    let t = v as i64; // truncates toward zero
    let frac = v - t as f64; // exact for |v| < 2^52; zero above
    if frac >= 0.5 {
        t + 1
    } else if frac <= -0.5 {
        t - 1
    } else {
        t
    }
}

/// Converts a real value to Q31 of full scale `fs`: `round(v / fs * 2^31)`, saturated to the i32 range.
pub fn to_q31(v: f64, fs: f64) -> i32 {
    let s = v / fs * pow2(31);
    if s.is_nan() {
        return 0;
    }
    if s >= 2147483647.0 {
        i32::MAX
    } else if s <= -2147483648.0 {
        i32::MIN
    } else {
        round_half_away(s) as i32
    }
}

/// Converts a Q31 value of full scale `fs` back to a real value: `fs * q / 2^31`.
pub fn from_q31(q: i32, fs: f64) -> f64 {
    q as f64 / pow2(31) * fs
}

/// Quantises a matrix (given as rows of scaled coefficients) with the largest admissible shift.
fn choose_shift(rows: usize, cols: usize, coef: &dyn Fn(usize, usize) -> f64) -> Result<u32, ModelError> {
    'shift: for shift in (1..=62u32).rev() {
        let scale = pow2(shift);
        for i in 0..rows {
            let mut sum: u64 = 0;
            for j in 0..cols {
                let s = coef(i, j) * scale;
                if s.is_nan() || s.abs() >= 2147483647.0 {
                    continue 'shift;
                }
                sum += round_half_away(s).unsigned_abs();
            }
            if sum > (1u64 << 32) - 1 {
                continue 'shift;
            }
        }
        return Ok(shift);
    }
    Err(ModelError::NoShift)
}

impl ModelQ31 {
    /// Scales and quantises `m` (see the type's documentation for the formulas and the shift rule).
    pub fn from_f64(m: &Model64, scaling: &QScaling) -> Result<Self, ModelError> {
        m.validate()?;
        let n = m.n;
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !ok(scaling.input_fs) || !ok(scaling.output_fs) || !scaling.state_fs[..n].iter().all(|&s| ok(s)) {
            return Err(ModelError::BadScale);
        }
        let (sx, fi, fo) = (&scaling.state_fs, scaling.input_fs, scaling.output_fs);
        let a = |i: usize, j: usize| m.a[i][j] * sx[j] / sx[i];
        let b = |i: usize, k: usize| m.b[i][k] * fi / sx[i];
        let c = |_: usize, j: usize| m.c[j] * sx[j] / fo;
        let d = |_: usize, k: usize| m.d[k] * fi / fo;
        let shift_a = choose_shift(n, n, &a)?;
        let shift_b = choose_shift(n, INPUTS, &b)?;
        let shift_c = choose_shift(1, n, &c)?;
        let shift_d = choose_shift(1, INPUTS, &d)?;
        let q = |v: f64, shift: u32| round_half_away(v * pow2(shift)) as i32;
        let mut out = ModelQ31 {
            n,
            a: [[0; MAX_N]; MAX_N],
            b: [[0; INPUTS]; MAX_N],
            c: [0; MAX_N],
            d: [0; INPUTS],
            shift_a,
            shift_b,
            shift_c,
            shift_d,
            scaling: *scaling,
        };
        for i in 0..n {
            for j in 0..n {
                out.a[i][j] = q(a(i, j), shift_a);
            }
            for k in 0..INPUTS {
                out.b[i][k] = q(b(i, k), shift_b);
            }
            out.c[i] = q(c(0, i), shift_c);
        }
        for k in 0..INPUTS {
            out.d[k] = q(d(0, k), shift_d);
        }
        // Unused padding of the scaling is normalised so equal models compare equal.
        for s in out.scaling.state_fs[n..].iter_mut() {
            *s = 1.0;
        }
        Ok(out)
    }

    /// Checks the order, the shifts, the padding and the no-overflow row bound (for models that did not
    /// come from [`ModelQ31::from_f64`], e.g. received from a peer).
    pub fn validate(&self) -> Result<(), ModelError> {
        let n = self.n;
        if n == 0 || n > MAX_N {
            return Err(ModelError::BadOrder);
        }
        if [self.shift_a, self.shift_b, self.shift_c, self.shift_d].iter().any(|s| !(1..=62).contains(s)) {
            return Err(ModelError::NoShift);
        }
        let bound = (1u64 << 32) - 1;
        let row_sum = |r: &[i32]| r.iter().map(|q| q.unsigned_abs() as u64).sum::<u64>();
        if (0..n).any(|i| row_sum(&self.a[i][..n]) > bound) || row_sum(&self.c[..n]) > bound {
            return Err(ModelError::NoShift);
        }
        for i in 0..MAX_N {
            let pad_a = self.a[i].iter().enumerate().any(|(j, &q)| (i >= n || j >= n) && q != 0);
            let pad_b = i >= n && self.b[i].iter().any(|&q| q != 0);
            if pad_a || pad_b || (i >= n && self.c[i] != 0) {
                return Err(ModelError::Padding);
            }
        }
        Ok(())
    }
}
