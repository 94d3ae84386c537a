//! Prints the design and the closed-loop figures behind the tests: gains, closed-loop spectral radius,
//! tracking error per machine cycle with and without the internal model, and the agreement of the f32
//! and Q31 controllers with the f64 reference data.
//!
//! `cargo run --release -p rtcell-control --example report`

use rtcell_control::design::{DesignParams, closed_loop_spectral_radius, design_detailed};
use rtcell_control::reference::{DEFAULT_SEED, default_scaling, generate, max_relative_error, sim_params};
use rtcell_control::sim::simulate;
use rtcell_control::{Controller32, Controller64, ControllerQ31, ModelQ31};

fn main() {
    let sp = sim_params(DEFAULT_SEED);
    let cycle = (1.0 / (sp.design.f0_hz * sp.design.ts)).round() as usize;
    for h in [20usize, 0] {
        let dp = DesignParams { harmonics: h, ..sp.design.clone() };
        let d = design_detailed(&dp).expect("design");
        let rho = closed_loop_spectral_radius(&dp, &d.model);
        println!(
            "H = {h}: n = {}, Kp = {:.4} V/rad, g0 = {:.4} V/(rad s), J = {:.4e} kg m^2",
            d.model.n, d.kp, d.g0, d.inertia
        );
        println!("  refinement: last relative change {:.2e}", d.refine_change);
        println!("  closed-loop spectral radius {rho:.9} (slowest time constant {:.4} s)", -dp.ts / rho.ln());
        if h > 0 {
            let (a1, b1) = d.resonators[0];
            let (ah, bh) = d.resonators[h - 1];
            println!("  resonator 1: a = {a1:.4e}, b = {b1:.4e}; resonator {h}: a = {ah:.4e}, b = {bh:.4e}");
        }
        let spx = rtcell_control::sim::SimParams { design: dp.clone(), ..sp.clone() };
        let mut c = Controller64::new(&d.model);
        let tr = simulate(&spx, &mut c, 30 * cycle);
        print!("  error RMS per cycle (rad):");
        for k in 0..30 {
            if k % 6 == 0 {
                print!("\n   ");
            }
            print!(" {:9.3e}", tr.error_rms(k * cycle, (k + 1) * cycle));
        }
        println!();
        let (from, to) = (25 * cycle, 30 * cycle);
        println!(
            "  last 5 cycles: RMS {:.4e} rad, max {:.4e} rad; saturated periods {}",
            tr.error_rms(from, to),
            tr.error_max(from, to),
            tr.saturated
        );
        let umax = tr.u.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let vmax = tr.v.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        println!("  max |u| {umax:.3} V, max |v| {vmax:.3} V");
    }
    let data = generate(DEFAULT_SEED);
    let model = rtcell_control::design::design(&sp.design).unwrap();
    let scaling = default_scaling();
    println!("state full scales: {:?}", &scaling.state_fs[..model.n]);
    let q = ModelQ31::from_f64(&model, &scaling).unwrap();
    println!("Q31 shifts: a {} b {} c {} d {}", q.shift_a, q.shift_b, q.shift_c, q.shift_d);
    let u32s = data.replay(&mut Controller32::from_f64(&model));
    let uq = data.replay(&mut ControllerQ31::new(&q));
    let u64s = data.replay(&mut Controller64::new(&model));
    let exact = u64s.iter().zip(&data.u).all(|(a, b)| a.to_bits() == b.to_bits());
    println!("f64 replay bit-exact: {exact}");
    println!("f32 max error / FS: {:.3e}", max_relative_error(&u32s, &data.u));
    println!("Q31 max error / FS: {:.3e}", max_relative_error(&uq, &data.u));
    let umax = data.u.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let rmax = data.r.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    println!("reference data: max |u| {umax:.3} V, max |r| {rmax:.3} rad");
}
