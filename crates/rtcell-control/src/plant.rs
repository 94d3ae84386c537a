//! The reference plant: a voltage-driven DC motor turning the crank of a vertical slider-crank
//! mechanism, with a position-periodic process load. Simulated in f64 with classical RK4.
//!
//! State `z = [theta, omega, i]` (crank angle rad, speed rad/s, armature current A), input `v` (armature
//! voltage V, clamped to `+-v_max`):
//!
//! ```text
//! theta' = omega
//! J(theta) omega' = kt i - 1/2 J'(theta) omega^2 - m g s'(theta) - b omega - tc tanh(omega / ws) - tl(theta)
//! L i' = v - R i - kt omega
//! ```
//!
//! with the slider position `s(theta) = rho cos(theta) + sqrt(l^2 - rho^2 sin^2(theta))` (crank radius
//! `rho`, rod length `l`), the reflected inertia `J(theta) = J_rotor + m s'(theta)^2` (the slider mass `m`
//! moving with speed `s'(theta) omega`), its Coriolis-like term `1/2 J'(theta) omega^2`, the slider's weight
//! (vertical axis) and the process load
//!
//! ```text
//! tl(theta) = tl_0 + sum_{k=1..K} (A_1 / k) cos(k theta + phi_k)
//! ```
//!
//! whose phases `phi_k` are drawn, uniform in [0, 2 pi), from the seed. At constant speed every term is
//! periodic in time with the crank's rotation frequency: the disturbance the internal model rejects.

use crate::rng::SplitMix64;

/// Physical parameters of the plant.
#[derive(Clone, Debug, PartialEq)]
pub struct PlantParams {
    /// Armature resistance (ohm).
    pub resistance: f64,
    /// Armature inductance (H).
    pub inductance: f64,
    /// Torque constant (N m/A), equal to the back-EMF constant (V s/rad).
    pub kt: f64,
    /// Inertia of rotor, crank and flywheel (kg m^2).
    pub rotor_inertia: f64,
    /// Viscous friction (N m s/rad).
    pub viscous: f64,
    /// Coulomb friction (N m), smoothed by `tanh(omega / coulomb_speed)`.
    pub coulomb: f64,
    /// Speed scale of the Coulomb friction smoothing (rad/s).
    pub coulomb_speed: f64,
    /// Crank radius (m).
    pub crank_radius: f64,
    /// Connecting-rod length (m).
    pub rod_length: f64,
    /// Slider mass (kg).
    pub slider_mass: f64,
    /// Gravity along the slider axis (m/s^2).
    pub gravity: f64,
    /// Mean process load torque (N m).
    pub load_mean: f64,
    /// Amplitude of the first load harmonic (N m); harmonic k has `load_amplitude / k`.
    pub load_amplitude: f64,
    /// Number of load harmonics.
    pub load_harmonics: usize,
    /// Voltage limit of the power stage (V).
    pub v_max: f64,
    /// Encoder resolution (bits per revolution); the measurement is the angle rounded to a count.
    pub encoder_bits: u32,
}

impl Default for PlantParams {
    fn default() -> Self {
        PlantParams {
            resistance: 0.25,
            inductance: 0.125e-3,
            kt: 0.5,
            rotor_inertia: 1.5e-3,
            viscous: 1e-3,
            coulomb: 0.05,
            coulomb_speed: 0.5,
            crank_radius: 0.03,
            rod_length: 0.12,
            slider_mass: 1.5,
            gravity: 9.81,
            load_mean: 0.1,
            load_amplitude: 0.3,
            load_harmonics: 16,
            v_max: 48.0,
            encoder_bits: 20,
        }
    }
}

impl PlantParams {
    /// Slider kinematics: `(s'(theta), s''(theta))`.
    pub fn slider_derivatives(&self, sin: f64, cos: f64) -> (f64, f64) {
        let (rho, l) = (self.crank_radius, self.rod_length);
        let sc = sin * cos;
        let q = libm::sqrt(l * l - rho * rho * sin * sin);
        let ds = -rho * sin - rho * rho * sc / q;
        let cos2 = cos * cos - sin * sin;
        let dds = -rho * cos - rho * rho * cos2 / q - rho * rho * rho * rho * sc * sc / (q * q * q);
        (ds, dds)
    }

    /// Reflected inertia and its derivative: `(J(theta), J'(theta))`.
    pub fn inertia(&self, sin: f64, cos: f64) -> (f64, f64) {
        let (ds, dds) = self.slider_derivatives(sin, cos);
        let m = self.slider_mass;
        (self.rotor_inertia + m * ds * ds, 2.0 * m * ds * dds)
    }

    /// Mean of `J(theta)` over a revolution (3600-point rule): the nominal inertia of the design.
    pub fn mean_inertia(&self) -> f64 {
        let n = 3600;
        let mut sum = 0.0;
        for k in 0..n {
            let th = 2.0 * core::f64::consts::PI * k as f64 / n as f64;
            sum += self.inertia(libm::sin(th), libm::cos(th)).0;
        }
        sum / n as f64
    }

    /// Encoder count (rad).
    pub fn encoder_step(&self) -> f64 {
        2.0 * core::f64::consts::PI / (1u64 << self.encoder_bits) as f64
    }
}

/// The process load drawn from a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// Mean torque (N m).
    pub mean: f64,
    /// Per harmonic k = 1..: `(A_k cos(phi_k), A_k sin(phi_k))`.
    pub harmonics: Vec<(f64, f64)>,
}

impl Load {
    /// The load of `params` with phases from `seed`.
    pub fn from_seed(params: &PlantParams, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let harmonics = (1..=params.load_harmonics)
            .map(|k| {
                let phi = 2.0 * core::f64::consts::PI * rng.next_f64();
                let amp = params.load_amplitude / k as f64;
                (amp * libm::cos(phi), amp * libm::sin(phi))
            })
            .collect();
        Load { mean: params.load_mean, harmonics }
    }

    /// `tl(theta)` given `sin(theta)`, `cos(theta)` (harmonics by the angle-addition recurrence).
    pub fn torque(&self, sin: f64, cos: f64) -> f64 {
        let mut t = self.mean;
        let (mut ck, mut sk) = (cos, sin);
        for &(ac, asn) in &self.harmonics {
            // A cos(k th + phi) = (A cos phi) cos k th - (A sin phi) sin k th
            t += ac * ck - asn * sk;
            let c_next = ck * cos - sk * sin;
            let s_next = sk * cos + ck * sin;
            ck = c_next;
            sk = s_next;
        }
        t
    }
}

/// The plant with its state.
#[derive(Clone, Debug)]
pub struct Plant {
    /// Parameters.
    pub params: PlantParams,
    /// Process load.
    pub load: Load,
    /// `[theta, omega, i]`.
    pub z: [f64; 3],
}

impl Plant {
    /// At rest at `theta = 0`, no current.
    pub fn new(params: PlantParams, seed: u64) -> Self {
        let load = Load::from_seed(&params, seed);
        Plant { params, load, z: [0.0; 3] }
    }

    /// Time derivative of the state under voltage `v`.
    pub fn derivative(&self, z: &[f64; 3], v: f64) -> [f64; 3] {
        let p = &self.params;
        let [th, w, i] = *z;
        let (s, c) = (libm::sin(th), libm::cos(th));
        let (j, dj) = p.inertia(s, c);
        let (ds, _) = p.slider_derivatives(s, c);
        let torque = p.kt * i
            - 0.5 * dj * w * w
            - p.slider_mass * p.gravity * ds
            - p.viscous * w
            - p.coulomb * libm::tanh(w / p.coulomb_speed)
            - self.load.torque(s, c);
        [w, torque / j, (v - p.resistance * i - p.kt * w) / p.inductance]
    }

    /// Advances by `dt` under constant voltage `v` (clamped to `+-v_max`) with `substeps` RK4 steps.
    pub fn advance(&mut self, v: f64, dt: f64, substeps: usize) {
        let v = v.clamp(-self.params.v_max, self.params.v_max);
        let h = dt / substeps as f64;
        let add = |z: &[f64; 3], k: &[f64; 3], f: f64| [z[0] + f * k[0], z[1] + f * k[1], z[2] + f * k[2]];
        for _ in 0..substeps {
            let z = self.z;
            let k1 = self.derivative(&z, v);
            let k2 = self.derivative(&add(&z, &k1, 0.5 * h), v);
            let k3 = self.derivative(&add(&z, &k2, 0.5 * h), v);
            let k4 = self.derivative(&add(&z, &k3, h), v);
            for n in 0..3 {
                self.z[n] = z[n] + h / 6.0 * (k1[n] + 2.0 * k2[n] + 2.0 * k3[n] + k4[n]);
            }
        }
    }

    /// The encoder reading: the angle rounded to a whole count.
    pub fn measure(&self) -> f64 {
        let q = self.params.encoder_step();
        // `+ 0.0` turns a rounded -0.0 into +0.0.
        libm::round(self.z[0] / q) * q + 0.0
    }
}

/// The position reference: from rest, the speed rises along a half cosine to `speed` in `accel_time`,
/// then stays constant. Returns `(position, speed, acceleration)` at time `t`.
pub fn reference_profile(speed: f64, accel_time: f64, t: f64) -> (f64, f64, f64) {
    use core::f64::consts::PI;
    if t <= 0.0 {
        (0.0, 0.0, 0.0)
    } else if t < accel_time {
        let x = PI * t / accel_time;
        let pos = 0.5 * speed * (t - accel_time / PI * libm::sin(x));
        let vel = 0.5 * speed * (1.0 - libm::cos(x));
        let acc = 0.5 * speed * PI / accel_time * libm::sin(x);
        (pos, vel, acc)
    } else {
        (0.5 * speed * accel_time + speed * (t - accel_time), speed, 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slider_derivatives_match_finite_differences() {
        let p = PlantParams::default();
        let pos = |th: f64| {
            let (s, c) = (libm::sin(th), libm::cos(th));
            p.crank_radius * c + libm::sqrt(p.rod_length.powi(2) - (p.crank_radius * s).powi(2))
        };
        let h = 1e-5;
        for k in 0..24 {
            let th = k as f64 * 0.27;
            let (ds, dds) = p.slider_derivatives(libm::sin(th), libm::cos(th));
            let fd1 = (pos(th + h) - pos(th - h)) / (2.0 * h);
            let fd2 = (pos(th + h) - 2.0 * pos(th) + pos(th - h)) / (h * h);
            assert!((ds - fd1).abs() < 1e-9, "s' at {th}: {ds} vs {fd1}");
            assert!((dds - fd2).abs() < 1e-4, "s'' at {th}: {dds} vs {fd2}");
        }
    }

    #[test]
    fn load_recurrence_matches_direct_evaluation() {
        let p = PlantParams::default();
        let load = Load::from_seed(&p, 3);
        for k in 0..50 {
            let th = k as f64 * 0.7 - 10.0;
            let direct: f64 = load.mean
                + load
                    .harmonics
                    .iter()
                    .enumerate()
                    .map(|(i, &(ac, asn))| {
                        let kt = (i + 1) as f64 * th;
                        ac * libm::cos(kt) - asn * libm::sin(kt)
                    })
                    .sum::<f64>();
            assert!((load.torque(libm::sin(th), libm::cos(th)) - direct).abs() < 1e-12);
        }
    }

    #[test]
    fn profile_is_continuous() {
        let (w, ta) = (62.8, 0.1);
        let before = reference_profile(w, ta, ta - 1e-9);
        let after = reference_profile(w, ta, ta + 1e-9);
        assert!((before.0 - after.0).abs() < 1e-6 && (before.1 - after.1).abs() < 1e-6);
        // Position is the integral of the speed.
        let n = 100_000;
        let dt = 0.2 / n as f64;
        let integral: f64 = (0..n).map(|k| reference_profile(w, ta, (k as f64 + 0.5) * dt).1 * dt).sum();
        assert!((integral - reference_profile(w, ta, 0.2).0).abs() < 1e-6);
    }
}
