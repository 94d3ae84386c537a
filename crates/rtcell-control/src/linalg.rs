//! Small dense real matrices for the design: products, the matrix exponential, zero-order-hold
//! discretisation and a spectral-radius estimate. Every loop runs in a fixed order, so results are
//! reproducible bit for bit.

/// Row-major dense matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Mat {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Entries, row-major.
    pub data: Vec<f64>,
}

impl Mat {
    /// All zeros.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Mat { rows, cols, data: vec![0.0; rows * cols] }
    }

    /// Identity.
    pub fn identity(n: usize) -> Self {
        let mut m = Mat::zeros(n, n);
        for i in 0..n {
            m[(i, i)] = 1.0;
        }
        m
    }

    /// Product `self * other`.
    pub fn mul(&self, other: &Mat) -> Mat {
        assert_eq!(self.cols, other.rows, "dimension mismatch");
        let mut out = Mat::zeros(self.rows, other.cols);
        for i in 0..self.rows {
            for j in 0..other.cols {
                let mut acc = 0.0;
                for k in 0..self.cols {
                    acc += self[(i, k)] * other[(k, j)];
                }
                out[(i, j)] = acc;
            }
        }
        out
    }

    /// Every entry times `s`.
    pub fn scale(&self, s: f64) -> Mat {
        Mat { rows: self.rows, cols: self.cols, data: self.data.iter().map(|v| v * s).collect() }
    }

    /// `self + other`.
    pub fn add(&self, other: &Mat) -> Mat {
        assert_eq!((self.rows, self.cols), (other.rows, other.cols), "dimension mismatch");
        Mat { rows: self.rows, cols: self.cols, data: self.data.iter().zip(&other.data).map(|(a, b)| a + b).collect() }
    }

    /// Induced 1-norm (largest column sum of absolute values).
    pub fn norm1(&self) -> f64 {
        (0..self.cols).map(|j| (0..self.rows).map(|i| self[(i, j)].abs()).sum::<f64>()).fold(0.0, f64::max)
    }

    /// Frobenius norm.
    pub fn frobenius(&self) -> f64 {
        libm::sqrt(self.data.iter().map(|v| v * v).sum::<f64>())
    }
}

impl core::ops::Index<(usize, usize)> for Mat {
    type Output = f64;
    fn index(&self, (i, j): (usize, usize)) -> &f64 {
        assert!(i < self.rows && j < self.cols, "index out of range");
        &self.data[i * self.cols + j]
    }
}

impl core::ops::IndexMut<(usize, usize)> for Mat {
    fn index_mut(&mut self, (i, j): (usize, usize)) -> &mut f64 {
        assert!(i < self.rows && j < self.cols, "index out of range");
        &mut self.data[i * self.cols + j]
    }
}

/// Matrix exponential by scaling and squaring: `M` is divided by `2^s` until its 1-norm is at most 1/4,
/// the Taylor series is summed to 20 terms (truncation below `0.25^21 / 21! ~ 4e-33` relative), and the
/// result squared `s` times.
pub fn expm(m: &Mat) -> Mat {
    assert_eq!(m.rows, m.cols, "expm of a non-square matrix");
    let mut s = 0u32;
    let mut norm = m.norm1();
    while norm > 0.25 {
        norm *= 0.5;
        s += 1;
    }
    let scaled = m.scale(libm::ldexp(1.0, -(s as i32)));
    let mut sum = Mat::identity(m.rows);
    let mut term = Mat::identity(m.rows);
    for k in 1..=20 {
        term = term.mul(&scaled).scale(1.0 / k as f64);
        sum = sum.add(&term);
    }
    for _ in 0..s {
        sum = sum.mul(&sum);
    }
    sum
}

/// Zero-order-hold discretisation of `x' = A x + B w` with period `t`: returns `(Ad, Bd)` with
/// `Ad = e^{A t}` and `Bd = int_0^t e^{A s} ds B`, both read off `expm([[A, B], [0, 0]] t)`.
pub fn zoh(a: &Mat, b: &Mat, t: f64) -> (Mat, Mat) {
    let (n, m) = (a.rows, b.cols);
    assert_eq!(a.cols, n);
    assert_eq!(b.rows, n);
    let mut aug = Mat::zeros(n + m, n + m);
    for i in 0..n {
        for j in 0..n {
            aug[(i, j)] = a[(i, j)] * t;
        }
        for j in 0..m {
            aug[(i, n + j)] = b[(i, j)] * t;
        }
    }
    let e = expm(&aug);
    let mut ad = Mat::zeros(n, n);
    let mut bd = Mat::zeros(n, m);
    for i in 0..n {
        for j in 0..n {
            ad[(i, j)] = e[(i, j)];
        }
        for j in 0..m {
            bd[(i, j)] = e[(i, n + j)];
        }
    }
    (ad, bd)
}

/// Spectral radius estimate `||M^k||^(1/k)` with `k = 2^squarings`, by repeated squaring with
/// renormalisation (so nothing overflows). Converges to the spectral radius as `k` grows; with
/// `squarings = 30` (k ~ 1e9) the factor from the norm's constant is below `1 + 1e-7` for matrices of
/// this size. Returns 0 for a nilpotent matrix.
pub fn spectral_radius(m: &Mat, squarings: u32) -> f64 {
    assert_eq!(m.rows, m.cols);
    let mut p = m.clone();
    let mut log_scale = 0.0f64; // ln of the factor divided out so far, as a multiple of M^k
    let mut k = 1.0f64;
    for _ in 0..squarings {
        let nrm = p.frobenius();
        if nrm == 0.0 {
            return 0.0;
        }
        p = p.scale(1.0 / nrm);
        log_scale += libm::log(nrm) / k;
        p = p.mul(&p);
        k *= 2.0;
    }
    let nrm = p.frobenius();
    if nrm == 0.0 {
        return 0.0;
    }
    libm::exp(log_scale + libm::log(nrm) / k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expm_of_rotation_generator() {
        let w = 3.0;
        let mut a = Mat::zeros(2, 2);
        a[(0, 1)] = w;
        a[(1, 0)] = -w;
        let e = expm(&a);
        assert!((e[(0, 0)] - libm::cos(w)).abs() < 1e-14);
        assert!((e[(0, 1)] - libm::sin(w)).abs() < 1e-14);
        assert!((e[(1, 0)] + libm::sin(w)).abs() < 1e-14);
    }

    #[test]
    fn zoh_of_first_order_lag() {
        // x' = -p x + w: Ad = e^{-pt}, Bd = (1 - e^{-pt}) / p.
        let (p, t) = (50.0, 1e-3);
        let mut a = Mat::zeros(1, 1);
        a[(0, 0)] = -p;
        let mut b = Mat::zeros(1, 1);
        b[(0, 0)] = 1.0;
        let (ad, bd) = zoh(&a, &b, t);
        let e = libm::exp(-p * t);
        assert!((ad[(0, 0)] - e).abs() < 1e-15);
        assert!((bd[(0, 0)] - (1.0 - e) / p).abs() < 1e-16);
    }

    #[test]
    fn spectral_radius_of_known_matrices() {
        let mut m = Mat::zeros(2, 2);
        m[(0, 0)] = 0.9;
        m[(0, 1)] = 5.0; // non-normal
        m[(1, 1)] = 0.5;
        assert!((spectral_radius(&m, 30) - 0.9).abs() < 1e-6);
        let mut r = Mat::zeros(2, 2);
        let (c, s) = (0.99 * libm::cos(0.3), 0.99 * libm::sin(0.3));
        r[(0, 0)] = c;
        r[(0, 1)] = s;
        r[(1, 0)] = -s;
        r[(1, 1)] = c;
        assert!((spectral_radius(&r, 30) - 0.99).abs() < 1e-9);
    }
}
