//! The reference data and the three controller implementations: regeneration is deterministic and
//! matches the shipped file, f64 replays bit-exactly, f32 and Q31 stay within their tolerances, the
//! shipped tables are what the design produces, and the Q31 arithmetic cannot overflow.

use rtcell_control::design::{DesignParams, design};
use rtcell_control::reference::{
    DEFAULT_SEED, REFERENCE_SAMPLES, ReferenceData, default_scaling, generate, max_relative_error,
};
use rtcell_control::{
    Controller32, Controller64, ControllerQ31, DEFAULT_MODEL_Q31, DEFAULT_MODEL64, F32_TOLERANCE, MAX_N, Model64,
    ModelError, ModelQ31, Q31_TOLERANCE, Step, within_tolerance,
};

const SHIPPED: &str = include_str!("../data/reference.csv");
const REGENERATE: &str = "run `cargo run -p rtcell-control --example regenerate`";

fn shipped() -> ReferenceData {
    ReferenceData::read_csv(SHIPPED.as_bytes()).expect("shipped reference data parses")
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn regeneration_is_deterministic_and_matches_the_shipped_file() {
    let one = generate(DEFAULT_SEED).to_csv_string();
    let two = generate(DEFAULT_SEED).to_csv_string();
    assert_eq!(one, two, "two generations differ");
    assert!(one == SHIPPED, "data/reference.csv is stale: {REGENERATE}");
    let other = generate(1);
    assert!(!same_bits(&other.u, &shipped().u), "the seed has no effect");
}

#[test]
fn shipped_data_has_the_seed_shape() {
    let d = shipped();
    assert_eq!(d.seed, DEFAULT_SEED);
    assert_eq!(d.ts, 100e-6);
    assert_eq!(d.r.len(), REFERENCE_SAMPLES);
    assert_eq!(d.y.len(), REFERENCE_SAMPLES);
    assert_eq!(d.u.len(), REFERENCE_SAMPLES);
    // Inside the Q31 full scales, with headroom.
    assert!(d.r.iter().chain(&d.y).all(|v| v.abs() < 0.75 * rtcell_control::INPUT_FS));
    assert!(d.u.iter().all(|v| v.abs() < 0.5 * rtcell_control::OUTPUT_FS));
}

#[test]
fn csv_round_trips_exactly() {
    let d = generate(7);
    let back = ReferenceData::read_csv(d.to_csv_string().as_bytes()).unwrap();
    assert_eq!(back.seed, 7);
    assert_eq!(back.ts.to_bits(), d.ts.to_bits());
    assert!(same_bits(&back.r, &d.r) && same_bits(&back.y, &d.y) && same_bits(&back.u, &d.u));
}

#[test]
fn csv_reader_rejects_malformed_files() {
    let good = generate(DEFAULT_SEED).to_csv_string();
    let no_header = good.replace("k,t_s,r_rad,y_rad,u_V\n", "");
    assert!(ReferenceData::read_csv(no_header.as_bytes()).is_err());
    let bad_number = good.replacen("\n1,1e-4,", "\n1,1e-4,x", 1);
    assert!(ReferenceData::read_csv(bad_number.as_bytes()).is_err());
    let skipped = good.replacen("\n1,", "\n9,", 1);
    assert!(ReferenceData::read_csv(skipped.as_bytes()).is_err());
    assert!(ReferenceData::read_csv("k,t_s,r_rad,y_rad,u_V\n".as_bytes()).is_err(), "no seed line");
}

#[test]
fn shipped_tables_are_what_the_design_produces() {
    let model = design(&DesignParams::default()).unwrap();
    assert!(DEFAULT_MODEL64.bits_eq(&model), "src/tables.rs is stale: {REGENERATE}");
    let q = ModelQ31::from_f64(&model, &default_scaling()).unwrap();
    assert!(DEFAULT_MODEL_Q31 == q, "src/tables.rs is stale: {REGENERATE}");
    DEFAULT_MODEL_Q31.validate().unwrap();
}

#[test]
fn f64_replay_is_bit_exact() {
    let d = shipped();
    let mut c = Controller64::new(&DEFAULT_MODEL64);
    let out = d.replay(&mut c);
    let first_diff = out.iter().zip(&d.u).position(|(a, b)| a.to_bits() != b.to_bits());
    assert_eq!(first_diff, None, "f64 replay differs from the reference");
    // Twice in a row (reset in between), as the benchmark loops over the data.
    assert!(same_bits(&d.replay(&mut c), &d.u));
}

#[test]
fn f32_is_within_tolerance() {
    let d = shipped();
    let out = d.replay(&mut Controller32::from_f64(&DEFAULT_MODEL64));
    let err = max_relative_error(&out, &d.u);
    eprintln!("f32: max |u32 - u64| / FS = {err:.3e} (tolerance {F32_TOLERANCE:e})");
    assert!(err <= F32_TOLERANCE);
    assert!(out.iter().zip(&d.u).all(|(&a, &b)| within_tolerance(a, b, F32_TOLERANCE)));
    assert!(err > 0.0, "f32 identical to f64: the comparison is not testing anything");
}

#[test]
fn q31_is_within_tolerance() {
    let d = shipped();
    let out = d.replay(&mut ControllerQ31::new(&DEFAULT_MODEL_Q31));
    let err = max_relative_error(&out, &d.u);
    eprintln!("Q31: max |uq31 - u64| / FS = {err:.3e} (tolerance {Q31_TOLERANCE:e})");
    assert!(err <= Q31_TOLERANCE);
    assert!(out.iter().zip(&d.u).all(|(&a, &b)| within_tolerance(a, b, Q31_TOLERANCE)));
}

/// The Q31 step recomputed in i128, checking that no i64 accumulator could overflow.
#[allow(clippy::needless_range_loop)] // mirrors the documented loop order
fn q31_step_wide(m: &ModelQ31, x: &mut [i32; MAX_N], r: i32, y: i32) -> i32 {
    let n = m.n;
    let fits = |v: i128| v >= i64::MIN as i128 && v <= i64::MAX as i128;
    let shift = |v: i128, s: u32| ((v >> (s - 1)) + 1) >> 1;
    let sat = |v: i128| v.clamp(i32::MIN as i128, i32::MAX as i128) as i32;
    let (r, y) = (r as i128, y as i128);
    let mut acc: i128 = 0;
    for j in 0..n {
        acc += m.c[j] as i128 * x[j] as i128;
        assert!(fits(acc));
    }
    let acw = m.d[0] as i128 * r + m.d[1] as i128 * y;
    assert!(fits(acw));
    let u = sat(shift(acc, m.shift_c) + shift(acw, m.shift_d));
    let mut xn = [0i32; MAX_N];
    for i in 0..n {
        let mut acc: i128 = 0;
        for j in 0..n {
            acc += m.a[i][j] as i128 * x[j] as i128;
            assert!(fits(acc));
        }
        let acw = m.b[i][0] as i128 * r + m.b[i][1] as i128 * y;
        assert!(fits(acw));
        xn[i] = sat(shift(acc, m.shift_a) + shift(acw, m.shift_b));
    }
    *x = xn;
    u
}

#[test]
fn q31_cannot_overflow_and_saturates() {
    // Extreme inputs drive every state into saturation; the step must agree with the wide version
    // (which asserts every partial sum fits an i64) at every step.
    let m = &DEFAULT_MODEL_Q31;
    let mut c = ControllerQ31::new(m);
    let mut x = [0i32; MAX_N];
    let mut saturated = false;
    for k in 0..20_000u32 {
        let (r, y) = match (k / 500) % 4 {
            0 => (i32::MAX, i32::MIN),
            1 => (i32::MIN, i32::MAX),
            2 => (i32::MAX, i32::MAX),
            _ => ((k.wrapping_mul(2654435761)) as i32, (k.wrapping_mul(40503)) as i32),
        };
        let u = c.step(r, y);
        assert_eq!(u, q31_step_wide(m, &mut x, r, y), "step {k}");
        assert_eq!(&x, c.state());
        saturated |= x.iter().any(|&v| v == i32::MAX || v == i32::MIN);
    }
    assert!(saturated, "the test never reached saturation");
}

#[test]
fn q31_matches_the_wide_reference_on_the_data() {
    let d = shipped();
    let m = &DEFAULT_MODEL_Q31;
    let mut c = ControllerQ31::new(m);
    let mut x = [0i32; MAX_N];
    for k in 0..d.r.len() {
        let (r, y) = (c.input_to_q31(d.r[k]), c.input_to_q31(d.y[k]));
        assert_eq!(c.step(r, y), q31_step_wide(m, &mut x, r, y));
    }
}

#[test]
fn q31_is_invariant_to_a_common_input_offset() {
    let d = shipped();
    let mut a = ControllerQ31::new(&DEFAULT_MODEL_Q31);
    let mut b = ControllerQ31::new(&DEFAULT_MODEL_Q31);
    let offset = a.input_to_q31(-2.0 * core::f64::consts::PI);
    for k in 0..d.r.len() {
        let (r, y) = (a.input_to_q31(d.r[k]), a.input_to_q31(d.y[k]));
        assert_eq!(a.step(r, y), b.step(r + offset, y + offset), "step {k}");
    }
}

#[test]
fn reset_restarts_from_zero_state() {
    let d = shipped();
    let mut c32 = Controller32::from_f64(&DEFAULT_MODEL64);
    let first = d.replay(&mut c32);
    c32.step_f64(1.0, -1.0);
    assert!(same_bits(&d.replay(&mut c32), &first));
    let mut cq = ControllerQ31::new(&DEFAULT_MODEL_Q31);
    let first = d.replay(&mut cq);
    cq.step_f64(1.0, -1.0);
    assert!(same_bits(&d.replay(&mut cq), &first));
}

#[test]
fn invalid_models_are_refused() {
    let mut m = DEFAULT_MODEL64;
    m.n = 0;
    assert_eq!(m.validate(), Err(ModelError::BadOrder));
    m.n = MAX_N + 1;
    assert_eq!(m.validate(), Err(ModelError::BadOrder));
    let mut m = DEFAULT_MODEL64;
    m.a[3][4] = f64::NAN;
    assert_eq!(m.validate(), Err(ModelError::NotFinite));
    let mut small: Model64 = design(&DesignParams { harmonics: 2, ..DesignParams::default() }).unwrap();
    small.validate().unwrap();
    small.a[10][10] = 1.0;
    assert_eq!(small.validate(), Err(ModelError::Padding));

    let mut q = DEFAULT_MODEL_Q31;
    q.shift_a = 0;
    assert_eq!(q.validate(), Err(ModelError::NoShift));
    let mut q = DEFAULT_MODEL_Q31;
    q.a[0] = [i32::MAX; MAX_N];
    assert_eq!(q.validate(), Err(ModelError::NoShift), "row bound");
    let mut scaling = default_scaling();
    scaling.state_fs[0] = 0.0;
    assert_eq!(ModelQ31::from_f64(&DEFAULT_MODEL64, &scaling), Err(ModelError::BadScale));
}
