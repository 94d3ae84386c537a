//! The offloaded step: what the master sends a cell that computes the controller for it, what the cell
//! sends back, and the cell's side of the exchange (shared, unchanged, by the host cells and the KVM
//! payload). `no_std`, allocation-free.
//!
//! # Messages
//!
//! Both directions carry one fixed-size, little-endian message of [`MESSAGE_BYTES`] bytes:
//!
//! | bytes | request (master -> cell) | reply (cell -> master) |
//! |---|---|---|
//! | 0..8 | `seq` (u64): the request's sequence number | `seq` of the request answered |
//! | 8..16 | `flags` (u64): bit 0 [`FLAG_RESET`] zeroes the state before the step, bit 1 [`FLAG_PROBE`] asks for a probe instead of a step | `u`: the output, see below (0 for a probe) |
//! | 16..24 | `r` (f64 bits, rad) | `exec_ticks` (u64): TSC ticks of the step alone |
//! | 24..32 | `y` (f64 bits, rad) | `steps` (u64): steps the cell has computed, this one included (a probe is no step) |
//!
//! The inputs always travel as f64; the cell converts them to its arithmetic as the controller does
//! ([`Step::step_f64`](crate::Step::step_f64)): `as f32` for [`Precision::F32`], [`to_q31`] of
//! [`INPUT_FS`](crate::INPUT_FS) for [`Precision::Q31`]. The output `u` is the f64 bits of the result for
//! F64, the f32 result widened to f64 (exact) for F32, and the raw Q31 result sign-extended to 64 bits
//! for Q31 (Q31 of [`OUTPUT_FS`](crate::OUTPUT_FS)): nothing is rounded on the way back, so the master
//! sees exactly what the cell computed. [`Precision::output_volts`] turns it into volts.
//!
//! # Timing
//!
//! [`OffloadController::serve`] reads the caller's clock immediately before and after the step itself:
//! the input conversion, the reset and the messaging are outside `exec_ticks`. Cells pass an ordered
//! TSC read (`lfence; rdtsc`), so the second read is taken after the step's instructions completed.
//!
//! A probe ([`FLAG_PROBE`]) times an empty region the same way and steps nothing: its `exec_ticks` is
//! what the clock itself adds to every measured step in that cell. It is small on a host, but reading
//! the TSC from a nested VM's guest can cost far more (the outer hypervisor may intercept it), so the
//! benchmark reports it beside the execution times.

use crate::controller::{Controller32, Controller64, ControllerQ31};
use crate::model::{Model32, from_q31, to_q31};
use crate::tables::{DEFAULT_MODEL_Q31, DEFAULT_MODEL64};

/// Size of a request and of a reply (bytes).
pub const MESSAGE_BYTES: usize = 32;
/// Request flag: zero the controller state before this step (the start of a pass over the data).
pub const FLAG_RESET: u64 = 1;
/// Request flag: time an empty region instead of stepping (inputs ignored, state untouched).
pub const FLAG_PROBE: u64 = 2;

/// The controller's arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "lowercase"))]
pub enum Precision {
    /// [`Controller64`].
    F64,
    /// [`Controller32`].
    F32,
    /// [`ControllerQ31`].
    Q31,
}

impl Precision {
    /// All three, in the order reports list them.
    pub const ALL: [Precision; 3] = [Precision::F64, Precision::F32, Precision::Q31];

    /// `"f64"`, `"f32"` or `"q31"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Precision::F64 => "f64",
            Precision::F32 => "f32",
            Precision::Q31 => "q31",
        }
    }

    /// The output `u` of a reply in volts; `None` if the word cannot be an output of this arithmetic (a
    /// non-finite float, an f32 result that is not an f32, a Q31 word outside the i32 range).
    pub fn output_volts(&self, u: u64) -> Option<f64> {
        match self {
            Precision::F64 => Some(f64::from_bits(u)).filter(|v| v.is_finite()),
            Precision::F32 => {
                let v = f64::from_bits(u);
                (v.is_finite() && (v as f32) as f64 == v).then_some(v)
            }
            Precision::Q31 => {
                let q = i32::try_from(u as i64).ok()?;
                Some(from_q31(q, DEFAULT_MODEL_Q31.scaling.output_fs))
            }
        }
    }
}

impl Precision {
    /// How far an output of this arithmetic may be from the f64 reference, relative to
    /// [`OUTPUT_FS`](crate::OUTPUT_FS); 0 for f64, which must be bit-exact.
    pub fn tolerance(&self) -> f64 {
        match self {
            Precision::F64 => 0.0,
            Precision::F32 => crate::F32_TOLERANCE,
            Precision::Q31 => crate::Q31_TOLERANCE,
        }
    }

    /// Checks output word `u` (as a reply carries it) against `expected` (V): f64 must equal it bit for
    /// bit; f32 and Q31 must be within [`Precision::tolerance`]. Returns the distance relative to
    /// [`OUTPUT_FS`](crate::OUTPUT_FS).
    pub fn check_output(&self, u: u64, expected: f64) -> Result<f64, OutputMismatch> {
        let got = self.output_volts(u).ok_or(OutputMismatch::NotAValue { word: u, precision: *self })?;
        let rel = (got - expected).abs() / crate::OUTPUT_FS;
        match self {
            Precision::F64 if got.to_bits() != expected.to_bits() => Err(OutputMismatch::NotBitExact { got, expected }),
            Precision::F64 => Ok(rel),
            // Written so that NaN fails too.
            _ if rel <= self.tolerance() => Ok(rel),
            _ => Err(OutputMismatch::OutOfTolerance {
                precision: *self,
                got,
                expected,
                rel,
                tolerance: self.tolerance(),
            }),
        }
    }
}

/// Why an offloaded output failed [`Precision::check_output`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OutputMismatch {
    /// The word cannot be an output of this arithmetic.
    NotAValue { word: u64, precision: Precision },
    /// f64: not bit for bit the expected output.
    NotBitExact { got: f64, expected: f64 },
    /// f32, Q31: farther from the reference than the tolerance.
    OutOfTolerance { precision: Precision, got: f64, expected: f64, rel: f64, tolerance: f64 },
}

impl core::fmt::Display for OutputMismatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OutputMismatch::NotAValue { word, precision } => {
                write!(f, "output word {word:#018x} is not a {precision} value")
            }
            OutputMismatch::NotBitExact { got, expected } => {
                write!(f, "f64 output {got:e} V differs from the local f64 step {expected:e} V")
            }
            OutputMismatch::OutOfTolerance { precision, got, expected, rel, tolerance } => write!(
                f,
                "{precision} output {got:e} V is {rel:.2e} of full scale from the reference {expected:e} V (tolerance {tolerance:e})"
            ),
        }
    }
}

impl core::fmt::Display for Precision {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::str::FromStr for Precision {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f64" => Ok(Precision::F64),
            "f32" => Ok(Precision::F32),
            "q31" => Ok(Precision::Q31),
            _ => Err("unknown precision: use f64, f32 or q31"),
        }
    }
}

/// Master -> cell: one step's inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    pub seq: u64,
    /// Zero the state before the step ([`FLAG_RESET`]).
    pub reset: bool,
    /// Time an empty region instead of stepping ([`FLAG_PROBE`]); `reset`, `r` and `y` are then ignored.
    pub probe: bool,
    /// Reference position (rad).
    pub r: f64,
    /// Measured position (rad).
    pub y: f64,
}

/// Cell -> master: one step's output and how long the step took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub seq: u64,
    /// The output as the module documentation describes, per precision.
    pub u: u64,
    /// TSC ticks of the step alone.
    pub exec_ticks: u64,
    /// Steps computed by the cell so far, this one included.
    pub steps: u64,
}

fn put(buf: &mut [u8; MESSAGE_BYTES], words: [u64; 4]) {
    for (chunk, w) in buf.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
}

/// The four words of a message, or `None` if it is not exactly [`MESSAGE_BYTES`] long.
fn words(msg: &[u8]) -> Option<[u64; 4]> {
    if msg.len() != MESSAGE_BYTES {
        return None;
    }
    let mut w = [0u64; 4];
    for (slot, chunk) in w.iter_mut().zip(msg.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *slot = u64::from_le_bytes(b);
    }
    Some(w)
}

impl Request {
    pub fn encode(&self) -> [u8; MESSAGE_BYTES] {
        let mut buf = [0u8; MESSAGE_BYTES];
        let flags = if self.reset { FLAG_RESET } else { 0 } | if self.probe { FLAG_PROBE } else { 0 };
        put(&mut buf, [self.seq, flags, self.r.to_bits(), self.y.to_bits()]);
        buf
    }

    /// A probe: times an empty region in the cell, steps nothing.
    pub fn probe(seq: u64) -> Request {
        Request { seq, reset: false, probe: true, r: 0.0, y: 0.0 }
    }

    /// Decodes a request; `None` if the length is wrong or unknown flags are set.
    pub fn decode(msg: &[u8]) -> Option<Request> {
        let [seq, flags, r, y] = words(msg)?;
        if flags & !(FLAG_RESET | FLAG_PROBE) != 0 {
            return None;
        }
        Some(Request {
            seq,
            reset: flags & FLAG_RESET != 0,
            probe: flags & FLAG_PROBE != 0,
            r: f64::from_bits(r),
            y: f64::from_bits(y),
        })
    }
}

impl Reply {
    pub fn encode(&self) -> [u8; MESSAGE_BYTES] {
        let mut buf = [0u8; MESSAGE_BYTES];
        put(&mut buf, [self.seq, self.u, self.exec_ticks, self.steps]);
        buf
    }

    /// Decodes a reply; `None` if the length is wrong.
    pub fn decode(msg: &[u8]) -> Option<Reply> {
        let [seq, u, exec_ticks, steps] = words(msg)?;
        Some(Reply { seq, u, exec_ticks, steps })
    }
}

/// The f32 rounding of [`DEFAULT_MODEL64`], built at compile time.
pub static DEFAULT_MODEL32: Model32 = Model32::from_f64(&DEFAULT_MODEL64);

/// A controller that can serve a request: each arithmetic's conversions and timed step.
pub trait OffloadStep {
    /// The arithmetic.
    const PRECISION: Precision;

    /// Zeroes the state if the request asks, converts the inputs, and steps, reading `clock` right
    /// before and right after the step. Returns the reply's output word and the ticks between the reads.
    fn serve_step(&mut self, req: &Request, clock: impl Fn() -> u64) -> (u64, u64);
}

impl OffloadStep for Controller64 {
    const PRECISION: Precision = Precision::F64;

    #[inline]
    fn serve_step(&mut self, req: &Request, clock: impl Fn() -> u64) -> (u64, u64) {
        if req.reset {
            crate::Step::reset(self);
        }
        let t0 = clock();
        let u = self.step(req.r, req.y);
        let t1 = clock();
        (u.to_bits(), t1.wrapping_sub(t0))
    }
}

impl OffloadStep for Controller32 {
    const PRECISION: Precision = Precision::F32;

    #[inline]
    fn serve_step(&mut self, req: &Request, clock: impl Fn() -> u64) -> (u64, u64) {
        if req.reset {
            crate::Step::reset(self);
        }
        let (r, y) = (req.r as f32, req.y as f32);
        let t0 = clock();
        let u = self.step(r, y);
        let t1 = clock();
        ((u as f64).to_bits(), t1.wrapping_sub(t0))
    }
}

impl OffloadStep for ControllerQ31 {
    const PRECISION: Precision = Precision::Q31;

    #[inline]
    fn serve_step(&mut self, req: &Request, clock: impl Fn() -> u64) -> (u64, u64) {
        if req.reset {
            crate::Step::reset(self);
        }
        let fs = self.model().scaling.input_fs;
        let (r, y) = (to_q31(req.r, fs), to_q31(req.y, fs));
        let t0 = clock();
        let u = self.step(r, y);
        let t1 = clock();
        (u as i64 as u64, t1.wrapping_sub(t0))
    }
}

/// Serves one request with `ctrl`: a step ([`OffloadStep::serve_step`], counted in `steps`), or a probe
/// (an empty region timed with `clock`; no step, state untouched). The reply to send back.
#[inline]
pub fn serve<C: OffloadStep>(ctrl: &mut C, steps: &mut u64, req: &Request, clock: impl Fn() -> u64) -> Reply {
    if req.probe {
        let t0 = clock();
        let t1 = clock();
        return Reply { seq: req.seq, u: 0, exec_ticks: t1.wrapping_sub(t0), steps: *steps };
    }
    let (u, exec_ticks) = ctrl.serve_step(req, clock);
    *steps = steps.wrapping_add(1);
    Reply { seq: req.seq, u, exec_ticks, steps: *steps }
}

/// The controllers of the shipped model, zero state: [`DEFAULT_MODEL64`] in f64, [`DEFAULT_MODEL32`],
/// [`DEFAULT_MODEL_Q31`]. `const`, so a payload can keep them in statics (each is tens of KiB, too much
/// to build on a small stack).
pub const fn default_controller64() -> Controller64 {
    Controller64::new(&DEFAULT_MODEL64)
}

/// See [`default_controller64`].
pub const fn default_controller32() -> Controller32 {
    Controller32::new(&DEFAULT_MODEL32)
}

/// See [`default_controller64`].
pub const fn default_controller_q31() -> ControllerQ31 {
    ControllerQ31::new(&DEFAULT_MODEL_Q31)
}

/// One of the three controllers of the shipped model. The variants differ in size (the f64 model is the
/// largest), but boxing them would need an allocator, which the `no_std` build has none of; hosts keep an
/// [`OffloadController`] in a `Box` themselves.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Arith {
    F64(Controller64),
    F32(Controller32),
    Q31(ControllerQ31),
}

/// The cell's side of the exchange: the controller of one precision and its step count.
#[derive(Clone, Debug)]
pub struct OffloadController {
    arith: Arith,
    steps: u64,
}

impl OffloadController {
    /// The shipped model in `precision`, zero state.
    pub fn new(precision: Precision) -> Self {
        let arith = match precision {
            Precision::F64 => Arith::F64(default_controller64()),
            Precision::F32 => Arith::F32(default_controller32()),
            Precision::Q31 => Arith::Q31(default_controller_q31()),
        };
        OffloadController { arith, steps: 0 }
    }

    pub fn precision(&self) -> Precision {
        match self.arith {
            Arith::F64(_) => Precision::F64,
            Arith::F32(_) => Precision::F32,
            Arith::Q31(_) => Precision::Q31,
        }
    }

    /// Steps served so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Serves one request ([`serve`]).
    #[inline]
    pub fn serve(&mut self, req: &Request, clock: impl Fn() -> u64) -> Reply {
        match &mut self.arith {
            Arith::F64(c) => serve(c, &mut self.steps, req, clock),
            Arith::F32(c) => serve(c, &mut self.steps, req, clock),
            Arith::Q31(c) => serve(c, &mut self.steps, req, clock),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Step;

    #[test]
    fn messages_round_trip_and_bad_ones_are_refused() {
        let q = Request { seq: 7, reset: true, probe: false, r: 1.25, y: -0.5 };
        assert_eq!(Request::decode(&q.encode()), Some(q));
        let probe = Request::probe(8);
        assert_eq!(Request::decode(&probe.encode()), Some(probe));
        let p = Reply { seq: 9, u: 0x8000_0000_0000_0001, exec_ticks: 1234, steps: 10 };
        assert_eq!(Reply::decode(&p.encode()), Some(p));
        assert_eq!(Request::decode(&[0u8; 31]), None);
        assert_eq!(Reply::decode(&[0u8; 33]), None);
        let mut bad = q.encode();
        bad[8] = 4; // unknown flag
        assert_eq!(Request::decode(&bad), None);
    }

    #[test]
    fn served_outputs_equal_the_controllers_own_steps() {
        let inputs = [(0.001, 0.0), (0.002, 0.0005), (0.004, 0.001)];
        for p in Precision::ALL {
            let mut served = OffloadController::new(p);
            let mut direct: Box<dyn Step> = match p {
                Precision::F64 => Box::new(Controller64::new(&DEFAULT_MODEL64)),
                Precision::F32 => Box::new(Controller32::from_f64(&DEFAULT_MODEL64)),
                Precision::Q31 => Box::new(ControllerQ31::new(&DEFAULT_MODEL_Q31)),
            };
            for pass in 0..2 {
                direct.reset();
                for (k, &(r, y)) in inputs.iter().enumerate() {
                    let rep = served.serve(&Request { seq: k as u64, reset: k == 0, probe: false, r, y }, || 5);
                    // A probe in between changes nothing.
                    let pr = served.serve(&Request::probe(99), || 5);
                    assert_eq!((pr.seq, pr.u, pr.exec_ticks, pr.steps), (99, 0, 0, rep.steps));
                    let want = direct.step_f64(r, y);
                    let got = p.output_volts(rep.u).unwrap();
                    assert_eq!(got.to_bits(), want.to_bits(), "{p} pass {pass} step {k}");
                    assert_eq!(rep.exec_ticks, 0);
                    assert_eq!(rep.seq, k as u64);
                }
            }
            assert_eq!(served.steps(), 6);
        }
    }

    #[test]
    fn impossible_outputs_are_refused() {
        assert_eq!(Precision::F64.output_volts(f64::NAN.to_bits()), None);
        assert_eq!(Precision::F32.output_volts(0.1f64.to_bits()), None, "0.1 is not an f32");
        assert!(Precision::F32.output_volts((0.1f32 as f64).to_bits()).is_some());
        assert_eq!(Precision::Q31.output_volts(1u64 << 40), None);
        assert_eq!(Precision::Q31.output_volts(-(1i64 << 30) as u64), Some(-4.0));
        assert_eq!("q31".parse::<Precision>(), Ok(Precision::Q31));
        assert!("f16".parse::<Precision>().is_err());
    }
}
