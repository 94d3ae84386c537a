//! The reference data set: what the benchmark feeds the offloaded controller and checks its outputs
//! against (the counterpart of the seed's 2,000 Simulink samples).
//!
//! [`generate`] simulates the closed loop ([`crate::sim`]) of the default design from rest for
//! [`REFERENCE_SAMPLES`] periods (0.2 s: the start-up acceleration and the first cruise cycle, so every
//! mode of the controller is excited) and records, per period, the controller's inputs and its f64
//! output. The controller starts from the zero state; replaying the recorded `(r, y)` through
//! [`crate::Controller64`] from the zero state reproduces `u` bit for bit.
//!
//! # File format (`data/reference.csv`)
//!
//! UTF-8 text. Lines starting with `#` are comments; the first of them states the seed and the period
//! as `# seed=<u64> ts=<f64>`. Then the header `k,t_s,r_rad,y_rad,u_V` and one row per sample:
//! sample index, time `k*T` (s), reference position (rad), measured position (rad), controller output
//! (V). Numbers are written in the shortest decimal form that reads back to the identical f64 (Rust's
//! `{:e}`; any correctly rounded parser, e.g. C's `strtod`, recovers the exact bits).

use std::io::{BufRead, Write};

use crate::controller::{Controller64, Step};
use crate::design::{DesignParams, design};
use crate::model::{MAX_N, QScaling};
use crate::sim::{SimParams, simulate};
use crate::{INPUT_FS, OUTPUT_FS};

/// Samples in the reference data.
pub const REFERENCE_SAMPLES: usize = 2000;
/// Seed of the shipped reference data.
pub const DEFAULT_SEED: u64 = 0;
/// The shipped reference data file, `data/reference.csv` ([`generate`]`(DEFAULT_SEED)`, written by
/// [`ReferenceData::write_csv`]).
pub const SHIPPED_CSV: &str = include_str!("../data/reference.csv");

/// The shipped reference data, parsed.
pub fn shipped() -> Result<ReferenceData, CsvError> {
    ReferenceData::read_csv(SHIPPED_CSV.as_bytes())
}
/// Length of the simulation the Q31 state scaling is taken from (2 s: 20 machine cycles).
pub const SCALING_STEPS: usize = 20_000;
/// Headroom of the Q31 state full scales over the largest value seen (at least this factor).
pub const STATE_HEADROOM: f64 = 2.0;

/// Controller inputs and expected outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceData {
    /// Seed of the process-load phases.
    pub seed: u64,
    /// Sampling period (s).
    pub ts: f64,
    /// Reference position (rad).
    pub r: Vec<f64>,
    /// Measured position (rad).
    pub y: Vec<f64>,
    /// Expected controller output (V).
    pub u: Vec<f64>,
}

/// Why a reference file could not be read.
#[derive(Debug)]
pub enum CsvError {
    /// Reading failed.
    Io(std::io::Error),
    /// Line `line` (1-based) is malformed.
    Parse {
        /// Line number.
        line: usize,
        /// What is wrong.
        what: String,
    },
}

impl core::fmt::Display for CsvError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CsvError::Io(e) => write!(f, "reading reference data: {e}"),
            CsvError::Parse { line, what } => write!(f, "reference data line {line}: {what}"),
        }
    }
}

impl std::error::Error for CsvError {}

impl From<std::io::Error> for CsvError {
    fn from(e: std::io::Error) -> Self {
        CsvError::Io(e)
    }
}

/// The simulation set-up of the reference data for `seed`.
pub fn sim_params(seed: u64) -> SimParams {
    SimParams { seed, ..SimParams::default() }
}

/// Generates the reference data for `seed` (deterministic: same seed, same bits, on every platform).
pub fn generate(seed: u64) -> ReferenceData {
    let sp = sim_params(seed);
    let model = design(&sp.design).expect("the default design is valid");
    let mut ctrl = Controller64::new(&model);
    let tr = simulate(&sp, &mut ctrl, REFERENCE_SAMPLES);
    ReferenceData { seed, ts: tr.ts, r: tr.r, y: tr.y, u: tr.u }
}

impl ReferenceData {
    /// Writes the CSV file (see the module documentation).
    pub fn write_csv(&self, mut w: impl Write) -> std::io::Result<()> {
        writeln!(w, "# seed={} ts={:e}", self.seed, self.ts)?;
        writeln!(
            w,
            "# rtcell-control reference data: internal-model servo controller, closed-loop start-up of the reference plant"
        )?;
        writeln!(
            w,
            "# controller inputs r (reference position, rad) and y (measured position, rad), output u (V); zero initial state"
        )?;
        writeln!(w, "k,t_s,r_rad,y_rad,u_V")?;
        for k in 0..self.r.len() {
            writeln!(w, "{},{:e},{:e},{:e},{:e}", k, k as f64 * self.ts, self.r[k], self.y[k], self.u[k])?;
        }
        Ok(())
    }

    /// The CSV file as a string.
    pub fn to_csv_string(&self) -> String {
        let mut buf = Vec::new();
        self.write_csv(&mut buf).expect("writing to memory");
        String::from_utf8(buf).expect("ASCII")
    }

    /// Reads a CSV file written by [`ReferenceData::write_csv`].
    pub fn read_csv(r: impl BufRead) -> Result<Self, CsvError> {
        let mut data = ReferenceData { seed: 0, ts: 0.0, r: Vec::new(), y: Vec::new(), u: Vec::new() };
        let mut have_meta = false;
        let mut have_header = false;
        for (idx, line) in r.lines().enumerate() {
            let line = line?;
            let no = idx + 1;
            let err = |what: String| CsvError::Parse { line: no, what };
            let line = line.trim_end();
            if let Some(c) = line.strip_prefix('#') {
                if !have_meta {
                    for kv in c.split_whitespace() {
                        match kv.split_once('=') {
                            Some(("seed", v)) => data.seed = v.parse().map_err(|e| err(format!("seed: {e}")))?,
                            Some(("ts", v)) => data.ts = v.parse().map_err(|e| err(format!("ts: {e}")))?,
                            _ => {}
                        }
                    }
                    have_meta = data.ts > 0.0;
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            if !have_header {
                if line != "k,t_s,r_rad,y_rad,u_V" {
                    return Err(err(format!("expected header k,t_s,r_rad,y_rad,u_V, found {line:?}")));
                }
                have_header = true;
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != 5 {
                return Err(err(format!("expected 5 fields, found {}", f.len())));
            }
            let k: usize = f[0].parse().map_err(|e| err(format!("k: {e}")))?;
            if k != data.r.len() {
                return Err(err(format!("sample {k} out of sequence (expected {})", data.r.len())));
            }
            let num = |s: &str, name: &str| s.parse::<f64>().map_err(|e| err(format!("{name}: {e}")));
            data.r.push(num(f[2], "r_rad")?);
            data.y.push(num(f[3], "y_rad")?);
            data.u.push(num(f[4], "u_V")?);
        }
        if !have_meta {
            return Err(CsvError::Parse { line: 1, what: "missing '# seed=.. ts=..' line".into() });
        }
        if !have_header {
            return Err(CsvError::Parse { line: 1, what: "missing header".into() });
        }
        Ok(data)
    }

    /// Replays the inputs through `ctrl` (after resetting it) and returns its outputs.
    pub fn replay(&self, ctrl: &mut dyn Step) -> Vec<f64> {
        ctrl.reset();
        self.r.iter().zip(&self.y).map(|(&r, &y)| ctrl.step_f64(r, y)).collect()
    }
}

/// Largest `|out - reference|` relative to [`OUTPUT_FS`].
pub fn max_relative_error(out: &[f64], reference: &[f64]) -> f64 {
    out.iter().zip(reference).map(|(a, b)| (a - b).abs() / OUTPUT_FS).fold(0.0, f64::max)
}

/// Records the largest magnitude of every state of an f64 controller.
struct PeakProbe {
    ctrl: Controller64,
    peak: [f64; MAX_N],
}

impl Step for PeakProbe {
    fn step_f64(&mut self, r: f64, y: f64) -> f64 {
        let u = self.ctrl.step(r, y);
        for (p, x) in self.peak.iter_mut().zip(self.ctrl.state()) {
            *p = p.max(x.abs());
        }
        u
    }
    fn reset(&mut self) {
        self.ctrl.reset();
    }
}

/// The Q31 scaling of the shipped model: inputs [`INPUT_FS`], output [`OUTPUT_FS`], and each state's full
/// scale the smallest power of two at least [`STATE_HEADROOM`] times the largest magnitude the state
/// reaches in the default closed loop (seed [`DEFAULT_SEED`], [`SCALING_STEPS`] periods from rest).
pub fn default_scaling() -> QScaling {
    let sp = sim_params(DEFAULT_SEED);
    scaling_for(&sp.design, &sp)
}

/// The Q31 scaling of the design `d`, from a closed-loop run of `sp`.
pub fn scaling_for(d: &DesignParams, sp: &SimParams) -> QScaling {
    let model = design(d).expect("valid design");
    let mut probe = PeakProbe { ctrl: Controller64::new(&model), peak: [0.0; MAX_N] };
    simulate(sp, &mut probe, SCALING_STEPS);
    let mut state_fs = [1.0; MAX_N];
    for (fs, &p) in state_fs.iter_mut().zip(&probe.peak).take(model.n) {
        let want = (p * STATE_HEADROOM).max(f64::MIN_POSITIVE);
        let mut s = 1.0f64;
        while s < want {
            s *= 2.0;
        }
        while s / 2.0 >= want {
            s /= 2.0;
        }
        *fs = s;
    }
    QScaling { input_fs: INPUT_FS, output_fs: OUTPUT_FS, state_fs }
}
