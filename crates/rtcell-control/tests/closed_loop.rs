//! The closed loop works: the design is stable (also at the extremes of the mechanism's inertia), and
//! after the transient the internal model rejects the position-periodic disturbance, which it does not
//! without its harmonics (H = 0).

use rtcell_control::Controller64;
use rtcell_control::design::{
    DesignParams, closed_loop_spectral_radius, closed_loop_spectral_radius_at, design_detailed,
};
use rtcell_control::reference::{DEFAULT_SEED, sim_params};
use rtcell_control::sim::{SimParams, Trace, simulate};

/// Machine cycles simulated.
const CYCLES: usize = 30;
/// Cycles at the end over which the error is measured.
const LAST: usize = 5;

fn cycle_len(d: &DesignParams) -> usize {
    (1.0 / (d.f0_hz * d.ts)).round() as usize
}

fn run(harmonics: usize, seed: u64) -> (Trace, usize) {
    let base = sim_params(seed);
    let sp = SimParams { design: DesignParams { harmonics, ..base.design.clone() }, ..base };
    let model = design_detailed(&sp.design).expect("design").model;
    let mut ctrl = Controller64::new(&model);
    let cycle = cycle_len(&sp.design);
    (simulate(&sp, &mut ctrl, CYCLES * cycle), cycle)
}

#[test]
fn design_has_the_seed_shape_and_is_stable() {
    let p = DesignParams::default();
    let d = design_detailed(&p).unwrap();
    assert_eq!(d.model.n, 41, "integrator + 20 harmonics");
    d.model.validate().unwrap();
    assert!(d.refine_change < 1e-12, "mode placement did not converge: {}", d.refine_change);
    let rho = closed_loop_spectral_radius(&p, &d.model);
    let tau = -p.ts / rho.ln();
    // Every mode is placed at rate sigma = 6/s: the slowest time constant is close to 1/6 s.
    assert!(rho < 1.0, "unstable: spectral radius {rho}");
    assert!((0.15..0.19).contains(&tau), "slowest time constant {tau} s");
}

#[test]
fn design_is_stable_over_the_mechanism_inertia_range() {
    let p = DesignParams::default();
    let d = design_detailed(&p).unwrap();
    let (mut jmin, mut jmax) = (f64::INFINITY, 0.0f64);
    for k in 0..3600 {
        let th = k as f64 * core::f64::consts::PI / 1800.0;
        let j = p.plant.inertia(th.sin(), th.cos()).0;
        jmin = jmin.min(j);
        jmax = jmax.max(j);
    }
    assert!(jmax / jmin > 1.9, "the mechanism should be markedly nonlinear ({jmin}..{jmax})");
    // Frozen at the extremes, and with margin beyond them.
    for j in [0.9 * jmin, jmin, d.inertia, jmax, 1.2 * jmax] {
        let rho = closed_loop_spectral_radius_at(&p, &d.model, j);
        assert!(rho < 1.0, "unstable with J = {j}: spectral radius {rho}");
    }
}

#[test]
fn internal_model_rejects_the_harmonic_disturbance() {
    let (im, cycle) = run(20, DEFAULT_SEED);
    let (plain, _) = run(0, DEFAULT_SEED);
    let (from, to) = ((CYCLES - LAST) * cycle, CYCLES * cycle);
    let e_im = im.error_rms(from, to);
    let e_plain = plain.error_rms(from, to);
    let e_im_max = im.error_max(from, to);
    let count = sim_params(DEFAULT_SEED).design.plant.encoder_step();
    eprintln!("last {LAST} cycles: RMS error H=20 {e_im:.3e} rad (max {e_im_max:.3e}), H=0 {e_plain:.3e} rad");
    // Without the harmonics the periodic disturbance leaves a large error ...
    assert!(e_plain > 5e-3, "H=0 error unexpectedly small: {e_plain}");
    // ... which the internal model removes: at least 80 dB less, and below one encoder count at all times.
    assert!(e_im <= 1e-4 * e_plain, "rejection too weak: {e_im} vs {e_plain}");
    assert!(e_im_max <= count, "peak error {e_im_max} above one encoder count {count}");
    assert_eq!(im.saturated, 0, "the voltage limit was hit");
    assert_eq!(plain.saturated, 0, "the voltage limit was hit");
}

#[test]
fn error_converges_cycle_by_cycle() {
    let (tr, cycle) = run(20, DEFAULT_SEED);
    let per_cycle: Vec<f64> = (0..CYCLES).map(|k| tr.error_rms(k * cycle, (k + 1) * cycle)).collect();
    let shown: Vec<String> = per_cycle.iter().map(|e| format!("{e:.2e}")).collect();
    eprintln!("error RMS per cycle: {}", shown.join(" "));
    // After the start-up (cycles 0-1), the error shrinks by about e^{-sigma * 0.1 s} = 0.55 per cycle
    // until it reaches the floor set by the encoder resolution.
    for k in 2..14 {
        assert!(per_cycle[k + 1] < 0.7 * per_cycle[k], "cycle {}: {:e} -> {:e}", k + 1, per_cycle[k], per_cycle[k + 1]);
    }
    assert!(per_cycle[CYCLES - 1] < 1e-4 * per_cycle[1]);
}

#[test]
fn rejection_holds_for_other_seeds() {
    for seed in [1u64, 0xdead_beef] {
        let (im, cycle) = run(20, seed);
        let (from, to) = ((CYCLES - LAST) * cycle, CYCLES * cycle);
        let e = im.error_rms(from, to);
        assert!(e < 1e-6, "seed {seed}: RMS error {e}");
    }
}
