//! rtcell control: the control benchmark's internal-model servo controller, in f64, f32 and Q31, with
//! its design, the reference plant it was designed for, and the reference data the benchmark checks
//! every offloaded step against.
//!
//! # Where this comes from
//!
//! The benchmark reproduces seed 000 (Orciari, Raggini, Tilli, "Taming edge computing for hard real-time
//! advanced control of mechatronic systems", IEEE TII 2024), section V: a microcontroller (the master)
//! sends the motor's position reference and measured position to an isolated core, which computes the
//! output of an internal-model controller with "20 harmonics and an integrator (41 state components)" and
//! sends it back; the master checks it against the output of a simulation, over 2,000 recorded samples
//! looped for 2 million iterations; the controller runs in fixed point (the MCU baseline) and in floating
//! point. Here:
//!
//! | seed 000 | this crate |
//! |---|---|
//! | Simulink-designed IMP controller, 41 states | [`design`]: integrator + 20 resonators + proportional stabiliser, discretised exactly at 100 us |
//! | Embedded Coder C code, fixed and floating point | [`Controller64`], [`Controller32`], [`ControllerQ31`]: one dense state-space step each, fixed operation order ([`controller`]) |
//! | Simulink model of the drive and the nonlinear mechanism | [`plant`]: voltage-driven DC motor + vertical slider-crank + position-periodic load, RK4 in f64 ([`sim`]) |
//! | 2,000 controller inputs (reference, measured position) and outputs | [`reference`](mod@reference): `data/reference.csv`, regenerated bit for bit from a seed |
//! | the A7 returns `u`, the M4 checks it | f64 must equal a local f64 step bit for bit; f32 and Q31 within [`F32_TOLERANCE`], [`Q31_TOLERANCE`] of the f64 reference |
//!
//! A benchmark pass replays the 2,000 `(r, y)` pairs from the zero state, so it calls
//! [`Step::reset`] (or the controller's own reset) before each pass over the data.
//!
//! [`offload`] is the exchange between the master and a cell that steps the controller for it (the
//! message layout and the cell's side, shared by every cell kind), as `rtcell bench control` runs it.
//!
//! # The controller
//!
//! Input `w = [r, y]` (rad), output `u` (V): the feedback part of the motor voltage (the master adds the
//! trajectory's nominal voltage feedforward, see [`sim`]). In continuous time, with `e = r - y`,
//!
//! ```text
//! u = (Kp + g0 / s + sum_{k=1..H} (a_k s + b_k w_k) / (s^2 + w_k^2)) e,     w_k = 2 pi k f0
//! ```
//!
//! realised with one integrator state and two states per harmonic (`n = 2H + 1 = 41`). `Kp` stabilises the
//! motor on its own (crossover 25 Hz on the nominal plant); each internal-model mode is then placed at
//! convergence rate `sigma` (a pole pair at `-sigma +- j w_k`; the integrator at `-sigma_0`) by exact
//! placement on the loop holding all other modes (see [`design`] for the method and why the rates cannot
//! be much higher with a static stabiliser on this plant). Discretisation: zero-order-hold equivalent at
//! `T` by the matrix exponential, so the discrete oscillators sit exactly at `e^{+-j w_k T}`.
//!
//! | parameter | default | meaning |
//! |---|---|---|
//! | `f0_hz` | 10 Hz | fundamental: one crank revolution (600 rpm) per machine cycle |
//! | `harmonics` | 20 | `H`; harmonics up to 200 Hz; 41 states |
//! | `ts` | 100 us | sampling period `T` |
//! | `crossover_hz` | 25 Hz | proportional loop crossover; gives `Kp` = 81.12 V/rad |
//! | `sigma` | 6 /s | convergence rate of each harmonic |
//! | `sigma_integrator` | 20 /s | convergence rate of the integrator (`g0` = 1391.7 V/(rad s)) |
//!
//! The shipped model ([`DEFAULT_MODEL64`], generated into `src/tables.rs` like a code generator's constant
//! tables, so a bare-metal payload needs no design code) is what [`design::design`] produces for the
//! defaults, bit for bit (tested).
//!
//! # The step
//!
//! `u = C x + D w; x = A x + B w`, dense (41 x 41, 41 x 2, 1 x 41, 1 x 2), loops in the order written in
//! [`controller`]; `n^2 + 3n + 2 = 1806` multiply-adds per step, zeros included. The step code is
//! `no_std`, allocation-free and runs unchanged in every cell kind (thread, process, KVM payload): build
//! with `default-features = false`.
//!
//! | implementation | arithmetic | check against the f64 reference data |
//! |---|---|---|
//! | [`Controller64`] | f64, no FMA, fixed order | bit-exact |
//! | [`Controller32`] | f32, model rounded from f64, same order | `max |u - u_ref| <= F32_TOLERANCE * OUTPUT_FS` |
//! | [`ControllerQ31`] | i32 Q31 coefficients and states, one power-of-two shift per matrix, i64 accumulators, round-half-up, saturation | `max |u - u_ref| <= Q31_TOLERANCE * OUTPUT_FS` |
//!
//! Q31 scaling: inputs full scale [`INPUT_FS`] = 16 rad, output [`OUTPUT_FS`] = 8 V, each state the
//! smallest power of two at least twice its peak over a 2 s closed-loop run ([`reference::default_scaling`]).
//! The row-sum rule of [`ModelQ31`] proves the accumulators cannot overflow for any input (and a test
//! recomputes every sum in i128). The shifts of the shipped model are 30 (A), 24 (B), 31 (C), 23 (D).
//!
//! Tolerances (relative to `OUTPUT_FS` = 8 V, over the 2,000 reference samples), with what was measured:
//!
//! | | tolerance | measured max | dominated by |
//! |---|---|---|---|
//! | f32 | 1e-4 (0.8 mV) | 1.7e-5 | rounding `r`, `y` (up to 9.4 rad) to f32: 1 ulp = 9.5e-7 rad, times `Kp` |
//! | Q31 | 1e-6 (8 uV) | 1.5e-7 | input resolution `16 rad / 2^31` times `Kp`, and coefficient rounding |
//!
//! # The closed loop (measured, default seed; tested in `tests/closed_loop.rs`)
//!
//! * Nominal sampled closed loop: spectral radius 0.999409, slowest time constant 0.169 s (= 1/sigma);
//!   stable with the plant inertia frozen at 0.9 x the mechanism's smallest, its smallest, mean and largest,
//!   and 1.2 x its largest inertia.
//! * Tracking error `r - theta`, RMS per 0.1 s cycle, falls by about 0.55 per cycle (`e^{-sigma 0.1 s}`)
//!   from 1.1e-2 rad in the start-up cycle to about 1e-7 rad after 2.5 s, the floor set by the
//!   encoder resolution.
//! * Over cycles 25-29 (2.5-3 s): RMS 8.1e-8 rad, peak 2.5e-7 rad with the internal model (H = 20), against
//!   RMS 1.22e-2 rad, peak 1.9e-2 rad with the same design without harmonics (H = 0): 1.5e5 times (103 dB)
//!   less. Tested criteria: H = 20 RMS at most 1e-4 of H = 0 RMS (80 dB), H = 20 peak at most one encoder
//!   count (6e-6 rad), H = 0 RMS above 5e-3 rad (so the test can fail), no voltage saturation.
//!
//! # Reference data
//!
//! `data/reference.csv` (format in [`reference`](mod@reference)): the first 2,000 periods (0.2 s) of the closed-loop
//! start-up from rest with the default seed: the reference accelerates to 600 rpm in 0.1 s, then one cruise
//! cycle. Inputs reach 9.4 rad, the output 2.1 V. Regenerate it and `src/tables.rs` with
//! `cargo run -p rtcell-control --example regenerate` (`-- --check` only compares); the library calls are
//! `reference::generate(seed)` and `ReferenceData::write_csv`. Everything (design, simulation, RNG) uses
//! only IEEE arithmetic and the portable `libm` crate, so the files regenerate identically everywhere.
//! `cargo run --release -p rtcell-control --example report` prints the figures above.
//!
//! # Example (no_std)
//!
//! ```
//! use rtcell_control::{Controller64, ControllerQ31, DEFAULT_MODEL64, DEFAULT_MODEL_Q31};
//! let mut c = Controller64::new(&DEFAULT_MODEL64);
//! let u = c.step(0.001, 0.0); // r, y in rad -> u in V
//! assert!(u > 0.0);
//! let mut q = ControllerQ31::new(&DEFAULT_MODEL_Q31);
//! let uq = q.step(q.input_to_q31(0.001), q.input_to_q31(0.0));
//! assert!((q.output_from_q31(uq) - u).abs() < 1e-5);
//! ```

#![cfg_attr(not(feature = "std"), no_std)]

pub mod controller;
pub mod model;
pub mod offload;
pub mod rng;
pub mod tables;

#[cfg(feature = "std")]
pub mod codegen;
#[cfg(feature = "std")]
pub mod design;
#[cfg(feature = "std")]
pub mod linalg;
#[cfg(feature = "std")]
pub mod plant;
#[cfg(feature = "std")]
pub mod reference;
#[cfg(feature = "std")]
pub mod sim;

pub use controller::{Controller32, Controller64, ControllerQ31, Step};
pub use model::{INPUTS, MAX_H, MAX_N, Model32, Model64, ModelError, ModelQ31, QScaling};
pub use tables::{DEFAULT_MODEL_Q31, DEFAULT_MODEL64};

/// Sampling period of the shipped model (s).
pub const SAMPLE_TIME: f64 = 100e-6;
/// Full scale of the Q31 inputs `r`, `y` (rad).
pub const INPUT_FS: f64 = 16.0;
/// Full scale of the Q31 output `u`, and the scale the tolerances are relative to (V).
pub const OUTPUT_FS: f64 = 8.0;
/// Tolerance of the f32 controller: largest `|u32 - u64| / OUTPUT_FS` over the reference data.
pub const F32_TOLERANCE: f64 = 1e-4;
/// Tolerance of the Q31 controller: largest `|uq31 - u64| / OUTPUT_FS` over the reference data.
pub const Q31_TOLERANCE: f64 = 1e-6;

/// True if an output `u` agrees with the reference `u_ref` within `tolerance` (relative to [`OUTPUT_FS`]).
pub fn within_tolerance(u: f64, u_ref: f64, tolerance: f64) -> bool {
    (u - u_ref).abs() <= tolerance * OUTPUT_FS
}
