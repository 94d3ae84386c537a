//! Closed-loop simulation of the reference plant with any controller implementation.
//!
//! Each sampling period `k` (time `t = kT`): the reference `r(k)` is sampled from the profile, the encoder
//! gives `y(k)`, the controller computes `u(k) = step(r(k), y(k))`, and the power stage applies
//! `v = clamp(u_ff(t) + u(k), +-v_max)` over `[kT, (k+1)T)` (zero-order hold; the controller's computation
//! time is taken as zero). `u_ff` is the master's nominal voltage feedforward for the reference motion,
//! `kt w_ref + R (J a_ref + b w_ref) / kt` with the mean inertia `J`; it leaves the feedback to cancel the
//! mechanism's position-dependent torques, friction, gravity and the process load. The plant is
//! integrated with `substeps` RK4 steps per period.

use crate::controller::Step;
use crate::design::DesignParams;
use crate::plant::{Plant, reference_profile};

/// Simulation set-up.
#[derive(Clone, Debug, PartialEq)]
pub struct SimParams {
    /// The design parameters (plant, fundamental, sampling period).
    pub design: DesignParams,
    /// Duration of the start-up acceleration to cruise speed (s).
    pub accel_time: f64,
    /// RK4 steps per sampling period.
    pub substeps: usize,
    /// Seed of the process-load phases.
    pub seed: u64,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams { design: DesignParams::default(), accel_time: 0.1, substeps: 10, seed: 0 }
    }
}

/// What a simulation recorded, one entry per sampling period.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// Sampling period (s).
    pub ts: f64,
    /// Reference position given to the controller (rad).
    pub r: Vec<f64>,
    /// Measured position given to the controller (rad).
    pub y: Vec<f64>,
    /// Controller output (V).
    pub u: Vec<f64>,
    /// Voltage applied to the motor (V).
    pub v: Vec<f64>,
    /// True crank angle at the sampling instant (rad).
    pub theta: Vec<f64>,
    /// Periods in which the voltage limit clipped the command.
    pub saturated: usize,
}

impl Trace {
    /// RMS of the true tracking error `r - theta` over samples `from..to`.
    pub fn error_rms(&self, from: usize, to: usize) -> f64 {
        let n = (to - from) as f64;
        libm::sqrt((from..to).map(|k| (self.r[k] - self.theta[k]).powi(2)).sum::<f64>() / n)
    }

    /// Largest `|r - theta|` over samples `from..to`.
    pub fn error_max(&self, from: usize, to: usize) -> f64 {
        (from..to).map(|k| (self.r[k] - self.theta[k]).abs()).fold(0.0, f64::max)
    }
}

/// Runs the closed loop for `steps` periods from rest, with `ctrl` in whatever state it is.
pub fn simulate(sp: &SimParams, ctrl: &mut dyn Step, steps: usize) -> Trace {
    let d = &sp.design;
    let p = &d.plant;
    let inertia = p.mean_inertia();
    let speed = 2.0 * core::f64::consts::PI * d.f0_hz;
    let mut plant = Plant::new(p.clone(), sp.seed);
    let mut tr = Trace { ts: d.ts, ..Trace::default() };
    for k in 0..steps {
        let t = k as f64 * d.ts;
        let (r, w_ref, a_ref) = reference_profile(speed, sp.accel_time, t);
        let y = plant.measure();
        let u = ctrl.step_f64(r, y);
        let u_ff = p.kt * w_ref + p.resistance * (inertia * a_ref + p.viscous * w_ref) / p.kt;
        let cmd = u_ff + u;
        let v = cmd.clamp(-p.v_max, p.v_max);
        if v != cmd {
            tr.saturated += 1;
        }
        tr.r.push(r);
        tr.y.push(y);
        tr.u.push(u);
        tr.v.push(v);
        tr.theta.push(plant.z[0]);
        plant.advance(v, d.ts, sp.substeps);
    }
    tr
}
