//! Continuous-time design of the internal-model controller and its exact discretisation.
//!
//! # Structure
//!
//! The tracking error `e = r - y` drives the internal model, a bank of `2H + 1` states:
//!
//! ```text
//! eta_0'   = g_0 e                                         (integrator)
//! eta_k1'  =  w_k eta_k2 + a_k e,   eta_k2' = -w_k eta_k1 + b_k e,   w_k = k w_0,  k = 1..H
//! u        = Kp e + eta_0 + sum_k eta_k1
//! ```
//!
//! so `u = (Kp + g_0 / s + sum_k (a_k s + b_k w_k) / (s^2 + w_k^2)) e`: a proportional stabiliser plus an
//! integrator and one resonator per harmonic. The plant (voltage-driven motor: type 1, with back-EMF
//! damping) is stabilised by `Kp` alone, chosen so that the loop crosses over at `crossover_hz` on the
//! nominal linear plant
//!
//! ```text
//! P(s) = kt / (s ((J s + b)(L s + R) + kt^2)),   J = mean of J(theta) over a revolution.
//! ```
//!
//! # Internal-model gains
//!
//! Each mode is placed by the phase-compensated small-gain rule used for harmonic compensators
//! (Marconi, Ronchi, Tilli 2007): adding a resonator at `w_k` to a stable loop moves its pole pair from
//! `+-j w_k` to `+-j w_k + delta`, with, to first order,
//!
//! ```text
//! delta = -G(j w_k) (b_k + j a_k) / (2 j),   G = P_d / (1 + P_d C),   P_d(s) = P(s) e^{-s T/2}
//! ```
//!
//! where `C` is the controller built so far and `e^{-sT/2}` the zero-order hold's delay. Choosing
//! `b_k + j a_k = 2 j sigma / G(j w_k)`, i.e. with `G = |G| e^{j phi}`,
//!
//! ```text
//! a_k = 2 sigma cos(phi) / |G|,   b_k = 2 sigma sin(phi) / |G|,
//! ```
//!
//! makes `delta = -sigma`: every harmonic converges with the same rate `sigma` (1/s), whatever its
//! frequency. The integrator is the case `w = 0`: `g_0 = sigma_0 / G(0) = sigma_0 Kp`. This first pass adds
//! the modes one after the other (integrator, then k = 1..H), each with `G` computed on the loop that
//! already contains the previous ones.
//!
//! The first-order rule ignores what later modes do to earlier ones, which matters with 21 modes, so a
//! refinement follows: [`REFINE_SWEEPS`] Gauss-Seidel sweeps in which each mode's gains are solved
//! exactly so that `1 + P_d(s*) C(s*) = 0` at its target pole `s* = -sigma + j w_k` (resp. `-sigma_0`),
//! with all the other modes as they currently are. Writing `G_k = P_d / (1 + P_d C_without_k)` and
//! `-(s*^2 + w_k^2) / G_k(s*) = X + jY`: `a_k = Y / w_k`, `b_k = (X + a_k sigma) / w_k`,
//! `g_0 = sigma_0 / G_0(-sigma_0)`. The sweeps reach a fixed point (relative change 0 in the last sweep
//! for the defaults), i.e. all 41 internal-model poles sit at their targets (in the continuous-time model
//! with the hold's delay). Stability of everything else is checked on the exact sampled closed loop
//! ([`closed_loop_spectral_radius`]).
//!
//! Why `sigma` is 6/s and not faster: with a static stabiliser the loop `P C` has relative degree 3, so
//! the sum of the closed-loop poles and the sum of their pairwise products equal the open-loop ones. The
//! internal-model poles start on the imaginary axis; moving each to real part `-sigma` must be paid for
//! by the three plant poles, and the two invariants leave those stable only while, roughly,
//! `sigma_0 + 2 H sigma` stays below the motor's mechanical rate `kt^2 / (J R)` (about 460/s here). With
//! H = 20 that caps `sigma` near 10/s; 6/s keeps the loop stable with the inertia frozen at values from 0.9
//! times the mechanism's smallest to 1.2 times its largest (tested at five points).
//!
//! # Discretisation
//!
//! Zero-order-hold equivalent at `T`: `A = e^{Ac T}`, `B = int_0^T e^{Ac s} ds Bc` (augmented-matrix
//! exponential, [`crate::linalg::zoh`]), `C = Cc`, `D = Dc`. The oscillators' discrete poles are exactly
//! `e^{+-j w_k T}`, so sampled harmonics are rejected exactly at the sampling instants. Inputs are
//! `w = [r, y]`: `B = [Be, -Be]`, `D = [Kp, -Kp]`.

use crate::linalg::{Mat, spectral_radius, zoh};
use crate::model::{MAX_H, MAX_N, Model64};
use crate::plant::PlantParams;

/// Design parameters. The defaults are the benchmark's controller.
#[derive(Clone, Debug, PartialEq)]
pub struct DesignParams {
    /// Fundamental frequency (Hz): one crank revolution per machine cycle.
    pub f0_hz: f64,
    /// Number of harmonics `H` (0..=20); the model has `2H + 1` states.
    pub harmonics: usize,
    /// Sampling period `T` (s).
    pub ts: f64,
    /// Crossover frequency of the proportional loop (Hz).
    pub crossover_hz: f64,
    /// Convergence rate of each harmonic mode (1/s).
    pub sigma: f64,
    /// Convergence rate of the integrator mode (1/s).
    pub sigma_integrator: f64,
    /// The plant the design is for (its nominal linearisation is used).
    pub plant: PlantParams,
}

impl Default for DesignParams {
    fn default() -> Self {
        DesignParams {
            f0_hz: 10.0,
            harmonics: MAX_H,
            ts: 100e-6,
            crossover_hz: 25.0,
            sigma: 6.0,
            sigma_integrator: 20.0,
            plant: PlantParams::default(),
        }
    }
}

/// Why a design failed.
#[derive(Debug, Clone, PartialEq)]
pub enum DesignError {
    /// More than [`MAX_H`] harmonics.
    TooManyHarmonics(usize),
    /// A parameter is not a finite positive number.
    BadParameter(&'static str),
    /// A harmonic reaches the Nyquist frequency.
    AboveNyquist,
}

impl core::fmt::Display for DesignError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DesignError::TooManyHarmonics(h) => write!(f, "{h} harmonics requested, at most {MAX_H}"),
            DesignError::BadParameter(p) => write!(f, "design parameter {p} must be finite and positive"),
            DesignError::AboveNyquist => f.write_str("highest harmonic at or above the Nyquist frequency"),
        }
    }
}

impl std::error::Error for DesignError {}

/// Gauss-Seidel sweeps of the exact mode placement after the small-gain first pass.
pub const REFINE_SWEEPS: usize = 40;

/// A design: the discrete model and the continuous-time gains it came from.
#[derive(Clone, Debug)]
pub struct Design {
    /// The discrete model (what the controllers run).
    pub model: Model64,
    /// Proportional stabiliser gain (V/rad).
    pub kp: f64,
    /// Integrator gain `g_0` (V/(rad s)).
    pub g0: f64,
    /// Resonator input gains `(a_k, b_k)` for k = 1..H (V/(rad s)).
    pub resonators: Vec<(f64, f64)>,
    /// Nominal inertia used (kg m^2).
    pub inertia: f64,
    /// Largest relative change of a mode's gains in the last refinement sweep (convergence measure).
    pub refine_change: f64,
}

/// Complex number for frequency responses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cx {
    /// Real part.
    pub re: f64,
    /// Imaginary part.
    pub im: f64,
}

impl Cx {
    /// `re + j im`.
    pub const fn new(re: f64, im: f64) -> Self {
        Cx { re, im }
    }
    /// `e^{j phi}`.
    pub fn expj(phi: f64) -> Self {
        Cx::new(libm::cos(phi), libm::sin(phi))
    }
    /// Magnitude.
    pub fn abs(self) -> f64 {
        libm::hypot(self.re, self.im)
    }
    /// Phase.
    pub fn arg(self) -> f64 {
        libm::atan2(self.im, self.re)
    }
}

impl core::ops::Add for Cx {
    type Output = Cx;
    fn add(self, o: Cx) -> Cx {
        Cx::new(self.re + o.re, self.im + o.im)
    }
}

impl core::ops::Mul for Cx {
    type Output = Cx;
    fn mul(self, o: Cx) -> Cx {
        Cx::new(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)
    }
}

impl core::ops::Div for Cx {
    type Output = Cx;
    fn div(self, o: Cx) -> Cx {
        let d = o.re * o.re + o.im * o.im;
        Cx::new((self.re * o.re + self.im * o.im) / d, (self.im * o.re - self.re * o.im) / d)
    }
}

/// Nominal linear plant (voltage to angle) at a complex frequency `s`.
pub fn plant_at(p: &PlantParams, inertia: f64, s: Cx) -> Cx {
    let mech = s * Cx::new(inertia, 0.0) + Cx::new(p.viscous, 0.0);
    let elec = s * Cx::new(p.inductance, 0.0) + Cx::new(p.resistance, 0.0);
    let den = s * (mech * elec + Cx::new(p.kt * p.kt, 0.0));
    Cx::new(p.kt, 0.0) / den
}

/// The controller at `s`, leaving out mode `skip` (0 = integrator, k = resonator k, none if out of range).
fn controller_at(kp: f64, g0: f64, modes: &[(f64, f64, f64)], s: Cx, skip: usize) -> Cx {
    let mut c = Cx::new(kp, 0.0);
    if skip != 0 {
        c = c + Cx::new(g0, 0.0) / s;
    }
    let s2 = s * s;
    for (idx, &(wk, a, b)) in modes.iter().enumerate() {
        if idx + 1 != skip {
            c = c + (s * Cx::new(a, 0.0) + Cx::new(b * wk, 0.0)) / (s2 + Cx::new(wk * wk, 0.0));
        }
    }
    c
}

/// Designs the controller (see the module documentation).
pub fn design_detailed(p: &DesignParams) -> Result<Design, DesignError> {
    let h = p.harmonics;
    if h > MAX_H {
        return Err(DesignError::TooManyHarmonics(h));
    }
    for (name, v) in [
        ("f0_hz", p.f0_hz),
        ("ts", p.ts),
        ("crossover_hz", p.crossover_hz),
        ("sigma", p.sigma),
        ("sigma_integrator", p.sigma_integrator),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(DesignError::BadParameter(name));
        }
    }
    if h as f64 * p.f0_hz >= 0.5 / p.ts {
        return Err(DesignError::AboveNyquist);
    }
    let two_pi = 2.0 * core::f64::consts::PI;
    let w0 = two_pi * p.f0_hz;
    let inertia = p.plant.mean_inertia();
    // Plant with the hold's half-period delay, at complex s.
    let pd = |s: Cx| {
        let delay = Cx::expj(-s.im * p.ts / 2.0) * Cx::new(libm::exp(-s.re * p.ts / 2.0), 0.0);
        plant_at(&p.plant, inertia, s) * delay
    };
    let one = Cx::new(1.0, 0.0);

    let kp = 1.0 / plant_at(&p.plant, inertia, Cx::new(0.0, two_pi * p.crossover_hz)).abs();
    // First pass, small-gain rule: integrator G(0) = 1 / Kp, pole at -sigma_0; resonators added one
    // after the other with G on the imaginary axis.
    let mut g0 = p.sigma_integrator * kp;
    let mut modes: Vec<(f64, f64, f64)> = Vec::with_capacity(h);
    for k in 1..=h {
        let wk = w0 * k as f64;
        let s = Cx::new(0.0, wk);
        let g = pd(s) / (one + pd(s) * controller_at(kp, g0, &modes, s, usize::MAX));
        let (mag, phi) = (g.abs(), g.arg());
        modes.push((wk, 2.0 * p.sigma * libm::cos(phi) / mag, 2.0 * p.sigma * libm::sin(phi) / mag));
    }
    // Refinement: exact placement of each mode's pole (pair) at -sigma_0, resp. -sigma +- j w_k, on the
    // loop that contains all the other modes as they currently are; a fixed number of sweeps.
    let mut last_change = f64::INFINITY;
    for _ in 0..REFINE_SWEEPS {
        let rel = |new: f64, old: f64| (new - old).abs() / old.abs().max(f64::MIN_POSITIVE);
        let mut change = 0.0f64;
        let s = Cx::new(-p.sigma_integrator, 0.0);
        let g = pd(s) / (one + pd(s) * controller_at(kp, g0, &modes, s, 0));
        // 1 + G(s*) g0 / s* = 0, G real on the real axis.
        let g0_new = p.sigma_integrator / g.re;
        change = change.max(rel(g0_new, g0));
        g0 = g0_new;
        for k in 1..=h {
            let wk = modes[k - 1].0;
            let s = Cx::new(-p.sigma, wk);
            let g = pd(s) / (one + pd(s) * controller_at(kp, g0, &modes, s, k));
            // a s* + b w_k = -(s*^2 + w_k^2) / G(s*) =: X + jY  =>  a = Y / w_k, b = (X + a sigma) / w_k
            let z = Cx::new(-1.0, 0.0) * (s * s + Cx::new(wk * wk, 0.0)) / g;
            let a = z.im / wk;
            let b = (z.re + a * p.sigma) / wk;
            let (_, a_old, b_old) = modes[k - 1];
            let scale = libm::hypot(a_old, b_old);
            change = change.max(libm::hypot(a - a_old, b - b_old) / scale.max(f64::MIN_POSITIVE));
            modes[k - 1] = (wk, a, b);
        }
        last_change = change;
    }

    // Continuous-time realisation, input e.
    let n = 2 * h + 1;
    let mut ac = Mat::zeros(n, n);
    let mut be = Mat::zeros(n, 1);
    be[(0, 0)] = g0;
    for (k, &(wk, a, b)) in modes.iter().enumerate() {
        let i = 1 + 2 * k;
        ac[(i, i + 1)] = wk;
        ac[(i + 1, i)] = -wk;
        be[(i, 0)] = a;
        be[(i + 1, 0)] = b;
    }
    let (ad, bd) = zoh(&ac, &be, p.ts);

    let mut model = Model64::zeroed();
    model.n = n;
    for i in 0..n {
        for j in 0..n {
            model.a[i][j] = ad[(i, j)];
        }
        model.b[i] = [bd[(i, 0)], -bd[(i, 0)]];
        model.c[i] = if i == 0 || i % 2 == 1 { 1.0 } else { 0.0 };
    }
    model.d = [kp, -kp];
    debug_assert!(n <= MAX_N);
    Ok(Design {
        model,
        kp,
        g0,
        resonators: modes.iter().map(|&(_, a, b)| (a, b)).collect(),
        inertia,
        refine_change: last_change,
    })
}

/// Designs the controller and returns its discrete model.
pub fn design(p: &DesignParams) -> Result<Model64, DesignError> {
    design_detailed(p).map(|d| d.model)
}

/// Spectral radius of the sampled closed loop of `model` with the nominal linear plant of `p`
/// (zero-order hold, state `[theta, omega, i]`, `u(k)` applied over `[kT, (k+1)T)`). Below 1 means
/// asymptotically stable. `-T / ln(rho)` is the slowest closed-loop time constant.
pub fn closed_loop_spectral_radius(p: &DesignParams, model: &Model64) -> f64 {
    closed_loop_spectral_radius_at(p, model, p.plant.mean_inertia())
}

/// [`closed_loop_spectral_radius`] with the plant's inertia frozen at `inertia` instead of its mean
/// (robustness to the mechanism's position-dependent inertia: check it at the extremes of `J(theta)`).
pub fn closed_loop_spectral_radius_at(p: &DesignParams, model: &Model64, inertia: f64) -> f64 {
    let pl = &p.plant;
    let mut a = Mat::zeros(3, 3);
    a[(0, 1)] = 1.0;
    a[(1, 1)] = -pl.viscous / inertia;
    a[(1, 2)] = pl.kt / inertia;
    a[(2, 1)] = -pl.kt / pl.inductance;
    a[(2, 2)] = -pl.resistance / pl.inductance;
    let mut b = Mat::zeros(3, 1);
    b[(2, 0)] = 1.0 / pl.inductance;
    let (ap, bp) = zoh(&a, &b, p.ts);

    // u = C x + d1 y (r = 0), y = theta.
    let n = model.n;
    let m = 3 + n;
    let mut cl = Mat::zeros(m, m);
    for i in 0..3 {
        for j in 0..3 {
            cl[(i, j)] = ap[(i, j)];
        }
        cl[(i, 0)] += bp[(i, 0)] * model.d[1];
        for j in 0..n {
            cl[(i, 3 + j)] = bp[(i, 0)] * model.c[j];
        }
    }
    for i in 0..n {
        cl[(3 + i, 0)] = model.b[i][1];
        for j in 0..n {
            cl[(3 + i, 3 + j)] = model.a[i][j];
        }
    }
    spectral_radius(&cl, 30)
}
