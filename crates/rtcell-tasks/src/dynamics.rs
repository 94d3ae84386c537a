//! Rigid-body inverse dynamics of a 6-axis arm: the recursive Newton-Euler algorithm (Luh, Walker and
//! Paul, 1980) in standard Denavit-Hartenberg form, as `rne_dh` of Corke's Robotics Toolbox computes it.
//!
//! # Parameter set: PUMA 560
//!
//! Kinematics (standard DH, metres and radians) and link inertial parameters as in the Robotics
//! Toolbox `mdl_puma560` (kinematics from Craig; masses, centres of mass and inertias from Armstrong,
//! Khatib and Burdick, 1986). Motor inertia, gearing and friction are left out: this is the rigid-body
//! part only.
//!
//! | link | a | d | alpha | m (kg) | centre of mass r (m, link frame) | I diag (kg m^2, about the COM) |
//! |---|---|---|---|---|---|---|
//! | 1 | 0 | 0 | pi/2 | 0 | 0, 0, 0 | 0, 0.35, 0 |
//! | 2 | 0.4318 | 0 | 0 | 17.4 | -0.3638, 0.006, 0.2275 | 0.13, 0.524, 0.539 |
//! | 3 | 0.0203 | 0.15005 | -pi/2 | 4.8 | -0.0203, -0.0141, 0.070 | 0.066, 0.086, 0.0125 |
//! | 4 | 0 | 0.4318 | pi/2 | 0.82 | 0, 0.019, 0 | 1.8e-3, 1.3e-3, 1.8e-3 |
//! | 5 | 0 | 0 | -pi/2 | 0.34 | 0, 0, 0 | 0.3e-3, 0.4e-3, 0.3e-3 |
//! | 6 | 0 | 0 | 0 | 0.09 | 0, 0, 0.032 | 0.15e-3, 0.15e-3, 0.04e-3 |
//!
//! Gravity is 9.81 m/s^2 along the base frame's -z. Link 1's zero mass is the Toolbox's (its inertia
//! about the vertical axis still counts).
//!
//! # Algorithm
//!
//! Frame `i` is attached to link `i`; `R_i = Rz(q_i) Rx(alpha_i)` turns frame `i` into frame `i-1`, and
//! `p_i = (a_i, d_i sin alpha_i, d_i cos alpha_i)` is the origin of frame `i` seen from frame `i-1`,
//! expressed in frame `i`. Outward, for `i = 1..6` (`z = (0, 0, 1)`, base at rest with acceleration
//! `-g` so that gravity is included):
//!
//! ```text
//! w_i   = R_i^T (w_{i-1} + z qd_i)
//! wd_i  = R_i^T (wd_{i-1} + z qdd_i + w_{i-1} x z qd_i)
//! vd_i  = wd_i x p_i + w_i x (w_i x p_i) + R_i^T vd_{i-1}
//! vc_i  = wd_i x r_i + w_i x (w_i x r_i) + vd_i
//! F_i   = m_i vc_i,   N_i = I_i wd_i + w_i x (I_i w_i)
//! ```
//!
//! inward, for `i = 6..1` (`f_7 = n_7 = 0`, `R_7 = I`):
//!
//! ```text
//! f_i   = R_{i+1} f_{i+1} + F_i
//! n_i   = R_{i+1} (n_{i+1} + (R_{i+1}^T p_i) x f_{i+1}) + (p_i + r_i) x F_i + N_i
//! tau_i = n_i . (R_i^T z)
//! ```
//!
//! About 700 floating-point operations per call, no allocation.

/// Joints.
pub const DOF: usize = 6;

type V3 = [f64; 3];
type M3 = [[f64; 3]; 3];

/// One link's kinematic and inertial parameters (standard DH).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub a: f64,
    pub d: f64,
    pub alpha: f64,
    pub mass: f64,
    /// Centre of mass in the link frame.
    pub r: V3,
    /// Inertia tensor about the centre of mass, in the link frame.
    pub inertia: M3,
}

const fn diag(x: f64, y: f64, z: f64) -> M3 {
    [[x, 0.0, 0.0], [0.0, y, 0.0], [0.0, 0.0, z]]
}

const HALF_PI: f64 = core::f64::consts::FRAC_PI_2;

/// The PUMA 560 (see the module documentation for the sources).
pub const PUMA560: [Link; DOF] = [
    Link { a: 0.0, d: 0.0, alpha: HALF_PI, mass: 0.0, r: [0.0, 0.0, 0.0], inertia: diag(0.0, 0.35, 0.0) },
    Link { a: 0.4318, d: 0.0, alpha: 0.0, mass: 17.4, r: [-0.3638, 0.006, 0.2275], inertia: diag(0.13, 0.524, 0.539) },
    Link {
        a: 0.0203,
        d: 0.15005,
        alpha: -HALF_PI,
        mass: 4.8,
        r: [-0.0203, -0.0141, 0.070],
        inertia: diag(0.066, 0.086, 0.0125),
    },
    Link { a: 0.0, d: 0.4318, alpha: HALF_PI, mass: 0.82, r: [0.0, 0.019, 0.0], inertia: diag(1.8e-3, 1.3e-3, 1.8e-3) },
    Link { a: 0.0, d: 0.0, alpha: -HALF_PI, mass: 0.34, r: [0.0, 0.0, 0.0], inertia: diag(0.3e-3, 0.4e-3, 0.3e-3) },
    Link { a: 0.0, d: 0.0, alpha: 0.0, mass: 0.09, r: [0.0, 0.0, 0.032], inertia: diag(0.15e-3, 0.15e-3, 0.04e-3) },
];

/// Standard gravity (m/s^2), along the base's -z.
pub const GRAVITY: f64 = 9.81;

#[inline]
fn cross(a: V3, b: V3) -> V3 {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

#[inline]
fn add(a: V3, b: V3) -> V3 {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

#[inline]
fn scale(a: V3, s: f64) -> V3 {
    [a[0] * s, a[1] * s, a[2] * s]
}

#[inline]
fn mul(m: &M3, v: V3) -> V3 {
    [
        m[0][0] * v[0] + m[0][1] * v[1] + m[0][2] * v[2],
        m[1][0] * v[0] + m[1][1] * v[1] + m[1][2] * v[2],
        m[2][0] * v[0] + m[2][1] * v[1] + m[2][2] * v[2],
    ]
}

#[inline]
fn mul_t(m: &M3, v: V3) -> V3 {
    [
        m[0][0] * v[0] + m[1][0] * v[1] + m[2][0] * v[2],
        m[0][1] * v[0] + m[1][1] * v[1] + m[2][1] * v[2],
        m[0][2] * v[0] + m[1][2] * v[1] + m[2][2] * v[2],
    ]
}

/// `Rz(theta) Rx(alpha)`: frame `i` to frame `i-1`.
#[inline]
fn rotation(theta: f64, alpha: f64) -> M3 {
    let (st, ct) = theta.sin_cos();
    let (sa, ca) = alpha.sin_cos();
    [[ct, -st * ca, st * sa], [st, ct * ca, -ct * sa], [0.0, sa, ca]]
}

/// Joint torques (N m) that move `links` along `q`, `qd`, `qdd` (rad, rad/s, rad/s^2) under gravity
/// `gravity` (m/s^2 along the base's -z; 0 for none).
pub fn inverse_dynamics(
    links: &[Link; DOF],
    q: &[f64; DOF],
    qd: &[f64; DOF],
    qdd: &[f64; DOF],
    gravity: f64,
) -> [f64; DOF] {
    let z = [0.0, 0.0, 1.0];
    let mut rot = [[[0.0; 3]; 3]; DOF];
    let mut p = [[0.0; 3]; DOF];
    let mut force = [[0.0; 3]; DOF];
    let mut moment = [[0.0; 3]; DOF];
    let (mut w, mut wd, mut vd) = ([0.0; 3], [0.0; 3], [0.0, 0.0, gravity]);
    for i in 0..DOF {
        let l = &links[i];
        rot[i] = rotation(q[i], l.alpha);
        let (sa, ca) = l.alpha.sin_cos();
        p[i] = [l.a, l.d * sa, l.d * ca];
        let zq = scale(z, qd[i]);
        let w_new = mul_t(&rot[i], add(w, zq));
        let wd_new = mul_t(&rot[i], add(add(wd, scale(z, qdd[i])), cross(w, zq)));
        w = w_new;
        wd = wd_new;
        vd = add(add(cross(wd, p[i]), cross(w, cross(w, p[i]))), mul_t(&rot[i], vd));
        let vc = add(add(cross(wd, l.r), cross(w, cross(w, l.r))), vd);
        force[i] = scale(vc, l.mass);
        moment[i] = add(mul(&l.inertia, wd), cross(w, mul(&l.inertia, w)));
    }
    let mut tau = [0.0; DOF];
    let (mut f, mut n) = ([0.0; 3], [0.0; 3]);
    for i in (0..DOF).rev() {
        let l = &links[i];
        let (f_new, n_new) = if i + 1 < DOF {
            let r_next = &rot[i + 1];
            let f_in = mul(r_next, f);
            let n_in = mul(r_next, add(n, cross(mul_t(r_next, p[i]), f)));
            (add(f_in, force[i]), add(add(n_in, cross(add(p[i], l.r), force[i])), moment[i]))
        } else {
            (force[i], add(cross(add(p[i], l.r), force[i]), moment[i]))
        };
        f = f_new;
        n = n_new;
        let axis = mul_t(&rot[i], z);
        tau[i] = n[0] * axis[0] + n[1] * axis[1] + n[2] * axis[2];
    }
    tau
}

/// Position of every link's centre of mass in the base frame (for the potential energy in tests).
pub fn com_positions(links: &[Link; DOF], q: &[f64; DOF]) -> [V3; DOF] {
    let mut rot: M3 = diag(1.0, 1.0, 1.0);
    let mut origin = [0.0; 3];
    let mut out = [[0.0; 3]; DOF];
    for i in 0..DOF {
        let l = &links[i];
        let ri = rotation(q[i], l.alpha);
        // Origin of frame i in frame i-1: (a cos q, a sin q, d).
        let (s, c) = q[i].sin_cos();
        let o_local = [l.a * c, l.a * s, l.d];
        origin = add(origin, mul(&rot, o_local));
        let mut next = [[0.0; 3]; 3];
        for (r, row) in next.iter_mut().enumerate() {
            for (col, x) in row.iter_mut().enumerate() {
                *x = rot[r][0] * ri[0][col] + rot[r][1] * ri[1][col] + rot[r][2] * ri[2][col];
            }
        }
        rot = next;
        out[i] = add(origin, mul(&rot, l.r));
    }
    out
}

/// Smooth point-to-point profile: position, velocity, acceleration at time `t` of a quintic move from
/// `a` to `b` in `dur` seconds (zero velocity and acceleration at both ends), held outside `[0, dur]`.
pub fn quintic(a: f64, b: f64, dur: f64, t: f64) -> (f64, f64, f64) {
    if dur <= 0.0 {
        return (b, 0.0, 0.0);
    }
    let s = (t / dur).clamp(0.0, 1.0);
    let h = b - a;
    let (s2, s3) = (s * s, s * s * s);
    let pos = a + h * s3 * (10.0 - 15.0 * s + 6.0 * s2);
    if t <= 0.0 || t >= dur {
        return (pos, 0.0, 0.0);
    }
    let vel = h * 30.0 * s2 * (1.0 - s) * (1.0 - s) / dur;
    let acc = h * 60.0 * s * (1.0 - s) * (1.0 - 2.0 * s) / (dur * dur);
    (pos, vel, acc)
}

#[cfg(test)]
// Matrix code reads best with indices.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    fn potential(q: &[f64; DOF]) -> f64 {
        let c = com_positions(&PUMA560, q);
        (0..DOF).map(|i| PUMA560[i].mass * GRAVITY * c[i][2]).sum()
    }

    /// Mass matrix column j: torques for qdd = e_j with no velocity and no gravity.
    fn mass_matrix(q: &[f64; DOF]) -> [[f64; DOF]; DOF] {
        let mut m = [[0.0; DOF]; DOF];
        for j in 0..DOF {
            let mut e = [0.0; DOF];
            e[j] = 1.0;
            let col = inverse_dynamics(&PUMA560, q, &[0.0; DOF], &e, 0.0);
            for i in 0..DOF {
                m[i][j] = col[i];
            }
        }
        m
    }

    const QS: [[f64; DOF]; 3] = [[0.0; DOF], [0.3, -0.7, 1.1, 0.4, -0.9, 0.2], [1.2, 0.5, -0.4, -1.3, 0.8, 2.0]];

    #[test]
    fn gravity_torque_is_the_gradient_of_the_potential_energy() {
        for q in &QS {
            let tau = inverse_dynamics(&PUMA560, q, &[0.0; DOF], &[0.0; DOF], GRAVITY);
            for j in 0..DOF {
                let h = 1e-6;
                let (mut a, mut b) = (*q, *q);
                a[j] += h;
                b[j] -= h;
                let grad = (potential(&a) - potential(&b)) / (2.0 * h);
                assert!((tau[j] - grad).abs() < 1e-5, "q {q:?} joint {j}: tau {} dV/dq {grad}", tau[j]);
            }
        }
        // The well-known figure: the shoulder holds about 37 N m with the arm stretched out (q = 0).
        let tau0 = inverse_dynamics(&PUMA560, &[0.0; DOF], &[0.0; DOF], &[0.0; DOF], GRAVITY);
        assert!((tau0[1] - 37.4).abs() < 1.0, "{tau0:?}");
    }

    #[test]
    fn mass_matrix_is_symmetric_positive_definite() {
        for q in &QS {
            let m = mass_matrix(q);
            for i in 0..DOF {
                for j in 0..DOF {
                    assert!((m[i][j] - m[j][i]).abs() < 1e-12, "q {q:?} M[{i}][{j}]");
                }
            }
            // Cholesky succeeds only for a positive-definite matrix.
            let mut l = [[0.0; DOF]; DOF];
            for i in 0..DOF {
                for j in 0..=i {
                    let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
                    if i == j {
                        let d = m[i][i] - s;
                        assert!(d > 0.0, "q {q:?}: not positive definite at {i}");
                        l[i][j] = d.sqrt();
                    } else {
                        l[i][j] = (m[i][j] - s) / l[j][j];
                    }
                }
            }
        }
    }

    #[test]
    fn power_balance_holds_along_a_motion() {
        // d/dt (kinetic + potential energy) = tau . qd for the torques along any smooth motion.
        let path = |t: f64| -> ([f64; DOF], [f64; DOF], [f64; DOF]) {
            let mut q = [0.0; DOF];
            let mut qd = [0.0; DOF];
            let mut qdd = [0.0; DOF];
            for j in 0..DOF {
                let w = 1.0 + j as f64 * 0.3;
                let amp = 0.8 - j as f64 * 0.05;
                q[j] = amp * (w * t).sin() + 0.1 * j as f64;
                qd[j] = amp * w * (w * t).cos();
                qdd[j] = -amp * w * w * (w * t).sin();
            }
            (q, qd, qdd)
        };
        let energy = |t: f64| {
            let (q, qd, _) = path(t);
            let m = mass_matrix(&q);
            let mut ke = 0.0;
            for i in 0..DOF {
                for j in 0..DOF {
                    ke += 0.5 * qd[i] * m[i][j] * qd[j];
                }
            }
            ke + potential(&q)
        };
        for &t in &[0.1, 0.7, 1.9] {
            let (q, qd, qdd) = path(t);
            let tau = inverse_dynamics(&PUMA560, &q, &qd, &qdd, GRAVITY);
            let power: f64 = (0..DOF).map(|j| tau[j] * qd[j]).sum();
            let h = 1e-5;
            let de = (energy(t + h) - energy(t - h)) / (2.0 * h);
            assert!((power - de).abs() < 1e-4 * (1.0 + de.abs()), "t {t}: tau.qd {power} dE/dt {de}");
        }
    }

    #[test]
    fn quintic_profile_ends() {
        let b = core::f64::consts::FRAC_PI_2;
        assert_eq!(quintic(0.0, b, 2.0, 0.0), (0.0, 0.0, 0.0));
        let (p, v, a) = quintic(0.0, b, 2.0, 2.0);
        assert!((p - b).abs() < 1e-15 && v == 0.0 && a == 0.0);
        let (p, v, a) = quintic(0.0, b, 2.0, 1.0);
        assert!((p - b / 2.0).abs() < 1e-12 && v > 0.0 && a.abs() < 1e-12);
        assert_eq!(quintic(0.0, b, 2.0, 5.0).0, b);
    }
}
