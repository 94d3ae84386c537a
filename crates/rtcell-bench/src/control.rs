//! `rtcell bench control` — seed 000 section V (Fig. 3/4) on this machine: the master sends the
//! controller's inputs (reference and measured position) to a cell, the cell steps the 41-state
//! internal-model controller and sends the output back, and the master checks every output against the
//! reference data. The 2,000 reference inputs are looped (the controller state reset at the start of each
//! pass) for the requested number of steps, per arithmetic (f64, f32, Q31) and per placement:
//!
//! - `local`: the master steps the controller itself (execution time only);
//! - `thread`, `process`, `kvm`: the step is offloaded through a ring pair, and two times are kept per
//!   step: the execution time in the cell excluding communication (the cell times the step alone with its
//!   TSC and reports it in the reply), and the round trip including it (the master's TSC, from just
//!   before sending the request to just after receiving the reply).
//!
//! The same run also measures the loopback round trip of a message of the same size through the same
//! cell kind, so that the offloaded round trip can be compared with its parts: cell execution +
//! loopback.
//!
//! # What is checked
//!
//! Every output, warm-up included ([`Expected::check_output`]): f64 must equal a local f64 step of the
//! same inputs bit for bit (the documented contract of `rtcell_control`; the shipped reference `u` is
//! that too, which is verified before the run); f32 and Q31 must lie within
//! [`F32_TOLERANCE`] and [`Q31_TOLERANCE`] (relative to [`OUTPUT_FS`]) of the f64 reference. A reply must
//! also answer the request just sent (its sequence number) and be the cell's next step (its step count).
//! Each failure is one error; a run with errors fails.

use std::collections::BTreeMap;

use rtcell_cells::{Cell, CellKind, WorkloadSpec};
use rtcell_control::offload::{MESSAGE_BYTES, OffloadController, Precision, Reply, Request};
use rtcell_control::reference::{REFERENCE_SAMPLES, shipped};
use rtcell_control::{Controller64, DEFAULT_MODEL64, F32_TOLERANCE, OUTPUT_FS, Q31_TOLERANCE, Step};
use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::{TscClock, rdtsc_ordered};
use rtcell_report::table::{Table, fmt_us};
use rtcell_report::{Kind, Series, Suite, Unit, labels};
use rtcell_shm::{RegionView, RingConfig};

use crate::{BenchError, SuiteRun, loopback, release_thread, rig, series_us, stop_requested};
use rtcell_loads::{Load, RunningLoad};

mod figures;
use figures::{RunFigures, figures, report_text};

/// Steps per precision and placement: seed 000's 2 million.
pub const DEFAULT_ITERATIONS: usize = 2_000_000;
/// Steps with `--quick`.
pub const QUICK_ITERATIONS: usize = 100_000;
/// Steps before measuring: one pass over the reference data (checked, not timed).
pub const WARMUP: usize = REFERENCE_SAMPLES;
/// Most loopback round trips measured for the comparison (per cell kind).
pub const LOOPBACK_ITERATIONS: usize = 200_000;
/// A probe (an empty timed region, no step) follows every `PROBE_EVERY`-th measured step: its reported
/// time is the clock's own cost in the cell, and its round trip is the loopback of a control-sized
/// message through the very same cell and rings, interleaved with the steps (so it sees the same CPU
/// placement, which a nested VM's outer hypervisor may change between phases of a run).
pub const PROBE_EVERY: usize = 4;
/// Sequence numbers of probes have this bit set.
const PROBE_SEQ: u64 = 1 << 63;

/// The probe that follows step `i`.
fn probe_request(i: usize) -> Request {
    Request::probe(PROBE_SEQ | i as u64)
}

/// Where the controller runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The master loop steps it itself.
    Local,
    /// Offloaded to a cell.
    Cell(CellKind),
}

impl Placement {
    pub fn as_str(&self) -> &'static str {
        match self {
            Placement::Local => "local",
            Placement::Cell(k) => k.as_str(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ControlConfig {
    pub master_cpu: usize,
    pub cell_cpu: usize,
    /// Measured steps per precision and placement (after [`WARMUP`]).
    pub iterations: usize,
    pub precisions: Vec<Precision>,
    /// Cell kinds to offload to; `local` is always measured too.
    pub cells: Vec<CellKind>,
    pub load: Load,
    pub master_priority: Option<i32>,
    pub cell_priority: Option<i32>,
}

impl ControlConfig {
    /// Loopback round trips measured per cell kind for the comparison.
    pub fn loopback_iterations(&self) -> usize {
        self.iterations.min(LOOPBACK_ITERATIONS)
    }
}

/// The inputs the master sends and what it checks the outputs against: the shipped reference data.
pub struct Expected {
    r: Vec<f64>,
    y: Vec<f64>,
    /// The reference output (f64, V).
    u_ref: Vec<f64>,
    /// A local f64 step of each input, from the zero state at sample 0.
    u_local64: Vec<f64>,
}

impl Expected {
    /// The shipped reference data, with the local f64 replay of its inputs; refuses data the local f64
    /// controller does not reproduce bit for bit (a stale reference file or a changed step).
    pub fn shipped() -> Result<Expected, BenchError> {
        let data = shipped().map_err(|e| BenchError::Other(format!("shipped reference data: {e}")))?;
        if data.r.len() != REFERENCE_SAMPLES || data.y.len() != REFERENCE_SAMPLES || data.u.len() != REFERENCE_SAMPLES {
            return Err(BenchError::Other(format!(
                "shipped reference data has {} samples, expected {REFERENCE_SAMPLES}",
                data.r.len()
            )));
        }
        let mut c = Box::new(Controller64::new(&DEFAULT_MODEL64));
        let u_local64 = data.replay(c.as_mut() as &mut dyn Step);
        if let Some(k) = u_local64.iter().zip(&data.u).position(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(BenchError::Other(format!(
                "the local f64 controller does not reproduce the shipped reference data bit for bit (sample {k}: {:e} V, reference {:e} V); regenerate it with `rtcell control reference`",
                u_local64[k], data.u[k]
            )));
        }
        Ok(Expected { r: data.r, y: data.y, u_ref: data.u, u_local64 })
    }

    /// Samples in one pass.
    pub fn len(&self) -> usize {
        self.r.len()
    }

    pub fn is_empty(&self) -> bool {
        self.r.is_empty()
    }

    /// The request of step `i` (sample `i % len`; the first sample of each pass resets the state).
    pub fn request(&self, i: usize) -> Request {
        let k = i % self.len();
        Request { seq: i as u64, reset: k == 0, probe: false, r: self.r[k], y: self.y[k] }
    }

    /// Checks output word `u` (as a reply carries it) of `precision` for sample `k`: `Ok` with its
    /// distance from the f64 reference relative to [`OUTPUT_FS`], or `Err` saying what is wrong. f64 must
    /// equal the local f64 step bit for bit; f32 and Q31 must be within their tolerance.
    pub fn check_output(&self, precision: Precision, k: usize, u: u64) -> Result<f64, String> {
        let Some(u_ref) = self.u_ref.get(k).copied() else {
            return Err(format!("sample {k} is past the reference data"));
        };
        // f64 must equal the local f64 step bit for bit; f32 and Q31 are judged against the reference.
        let expected = if precision == Precision::F64 { self.u_local64[k] } else { u_ref };
        precision.check_output(u, expected).map_err(|e| format!("sample {k}: {e}"))
    }
}

/// What one precision x placement run measured.
struct Run {
    precision: Precision,
    placement: Placement,
    exec_ticks: Vec<u64>,
    /// Empty for `local`.
    rtt_ticks: Vec<u64>,
    /// Probes: the clock's own cost.
    clock_ticks: Vec<u64>,
    /// Probes: their round trips (empty for `local`).
    probe_rtt_ticks: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
    max_rel_err: f64,
    exits: Option<BTreeMap<String, u64>>,
}

impl Run {
    fn new(precision: Precision, placement: Placement, iterations: usize) -> Run {
        let rtt = if placement == Placement::Local { 0 } else { iterations };
        Run {
            precision,
            placement,
            exec_ticks: Vec::with_capacity(iterations),
            rtt_ticks: Vec::with_capacity(rtt),
            clock_ticks: Vec::with_capacity(iterations / PROBE_EVERY + 1),
            probe_rtt_ticks: Vec::with_capacity(rtt / PROBE_EVERY + 1),
            errors: 0,
            first_error: None,
            max_rel_err: 0.0,
            exits: None,
        }
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }

    fn check(&mut self, expected: &Expected, i: usize, u: u64) {
        match expected.check_output(self.precision, i % expected.len(), u) {
            Ok(rel) => self.max_rel_err = self.max_rel_err.max(rel),
            Err(e) => self.error(format!("step {i}: {e}")),
        }
    }
}

/// The master steps the controller itself.
fn run_local(expected: &Expected, precision: Precision, iterations: usize) -> (Run, bool) {
    let mut run = Run::new(precision, Placement::Local, iterations);
    let mut ctrl = Box::new(OffloadController::new(precision));
    for i in 0..WARMUP + iterations {
        if i % 1024 == 0 && stop_requested() {
            return (run, true);
        }
        let rep = ctrl.serve(&expected.request(i), rdtsc_ordered);
        run.check(expected, i, rep.u);
        if i >= WARMUP {
            run.exec_ticks.push(rep.exec_ticks);
            if (i - WARMUP) % PROBE_EVERY == 0 {
                let rep = ctrl.serve(&probe_request(i), rdtsc_ordered);
                run.clock_ticks.push(rep.exec_ticks);
            }
        }
    }
    (run, false)
}

/// The offloaded steps through a running cell.
fn measure_cell(
    expected: &Expected,
    run: &mut Run,
    region: &RegionView<'_>,
    cell: &mut Cell,
    iterations: usize,
    tsc: &TscClock,
) -> Result<bool, BenchError> {
    let ring_err = |e: rtcell_shm::AttachError| BenchError::Other(format!("control region: {e}"));
    let mut tx = region.ring(rig::M2C).map_err(ring_err)?.producer();
    let mut rx = region.ring(rig::C2M).map_err(ring_err)?.consumer();
    let mut buf = vec![0u8; RING_FRAME as usize];
    let timeout_ticks = tsc.ns_to_ticks(rig::ANSWER_TIMEOUT.as_nanos() as f64);
    let precision = run.precision;
    let mut exits_before = None;
    let what = || format!("the {precision} controller steps");
    for i in 0..WARMUP + iterations {
        if i % 1024 == 0 && stop_requested() {
            return Ok(true);
        }
        if i == WARMUP {
            exits_before = cell.vm_exits();
        }
        let msg = expected.request(i).encode();
        let t0 = rdtsc_ordered();
        if !rig::send(&mut tx, &msg, cell, what)? {
            return Ok(true);
        }
        let Some(n) = rig::await_reply(&mut rx, &mut buf, cell, t0, timeout_ticks, false, what)? else {
            return Ok(true);
        };
        let t1 = rdtsc_ordered();
        match Reply::decode(&buf[..n]) {
            None => run.error(format!("step {i}: a {n}-byte reply, expected {MESSAGE_BYTES} bytes")),
            Some(rep) if rep.seq != i as u64 => {
                run.error(format!("step {i}: the reply answers request {} instead", rep.seq));
            }
            Some(rep) if rep.steps != i as u64 + 1 => {
                run.error(format!("step {i}: the cell counts {} steps, expected {}", rep.steps, i + 1));
            }
            Some(rep) => {
                run.check(expected, i, rep.u);
                if i >= WARMUP {
                    run.exec_ticks.push(rep.exec_ticks);
                }
            }
        }
        if i >= WARMUP {
            run.rtt_ticks.push(t1.wrapping_sub(t0));
            if (i - WARMUP) % PROBE_EVERY == 0 {
                let msg = probe_request(i).encode();
                let t0 = rdtsc_ordered();
                if !rig::send(&mut tx, &msg, cell, what)? {
                    return Ok(true);
                }
                let Some(n) = rig::await_reply(&mut rx, &mut buf, cell, t0, timeout_ticks, false, what)? else {
                    return Ok(true);
                };
                let t1 = rdtsc_ordered();
                match Reply::decode(&buf[..n]) {
                    Some(rep) if rep.seq == PROBE_SEQ | i as u64 && rep.steps == i as u64 + 1 && rep.u == 0 => {
                        run.clock_ticks.push(rep.exec_ticks);
                        run.probe_rtt_ticks.push(t1.wrapping_sub(t0));
                    }
                    other => run.error(format!("probe after step {i}: wrong reply {other:?}")),
                }
            }
        }
    }
    run.exits = match (exits_before, cell.vm_exits()) {
        (Some(b), Some(a)) => Some(rtcell_kvm::stats::exit_delta(&b, &a)),
        _ => None,
    };
    Ok(false)
}

/// Largest frame of the control rings: the loopback suite's ring, so both exchanges use the same channel.
const RING_FRAME: u32 = 4096;

/// Starts a control cell of `precision` and measures the offloaded steps. Returns what was measured,
/// whether it stopped early, and the error that broke it off, if any.
fn run_cell(
    cfg: &ControlConfig,
    expected: &Expected,
    precision: Precision,
    kind: CellKind,
    tsc: &TscClock,
    warnings: &mut Vec<String>,
) -> Result<(Run, bool, Option<BenchError>), BenchError> {
    let workload =
        WorkloadSpec::Control { rx: rig::M2C.into(), tx: rig::C2M.into(), precision: precision.as_str().into() };
    let rig::RingCell { shm, mut cell, .. } = rig::start(
        "control",
        kind,
        &format!("control-{precision}-{kind}"),
        RingConfig::for_frames(RING_FRAME, 4),
        workload,
        cfg.cell_cpu,
        cfg.cell_priority,
        tsc,
        warnings,
    )?;
    let region = rig::region(&shm)?;
    let mut run = Run::new(precision, Placement::Cell(kind), cfg.iterations);
    crate::progress!("control: {precision} on a {kind} cell, {} steps ...", cfg.iterations);
    let (stopped, broke_off) = match measure_cell(expected, &mut run, &region, &mut cell, cfg.iterations, tsc) {
        Ok(s) => (s, None),
        Err(e) => (true, Some(e)),
    };
    rig::stop(cell, warnings);
    Ok((run, stopped, broke_off))
}

/// The bare loopback round trip of a `kind` cell (the ring, polled, [`MESSAGE_BYTES`]), the floor under
/// its offloaded controller: its series and its wrong echoes.
fn loopback_series(
    tsc: &TscClock,
    cfg: &ControlConfig,
    kind: CellKind,
    warnings: &mut Vec<String>,
) -> Result<(Series, u64), BenchError> {
    let n = cfg.loopback_iterations();
    let lb = loopback::cell_round_trips(
        tsc,
        kind,
        cfg.master_cpu,
        cfg.cell_cpu,
        cfg.cell_priority,
        MESSAGE_BYTES,
        n,
        warnings,
    )?;
    let s = series_us(
        tsc,
        "loopback_rtt",
        labels!(
            "cell" => kind,
            "transport" => "ring",
            "notify" => "poll",
            "bytes" => MESSAGE_BYTES,
            "load" => cfg.load.as_str(),
            "master_cpu" => cfg.master_cpu,
            "cell_cpu" => cfg.cell_cpu,
        ),
        Kind::RoundTrip,
        &lb.ticks,
        lb.errors,
    );
    Ok((s, lb.errors))
}

/// Runs the whole suite.
pub fn run(tsc: &TscClock, cfg: &ControlConfig) -> Result<SuiteRun, BenchError> {
    let expected = Expected::shipped()?;
    let mut warnings = Vec::new();
    let load = RunningLoad::start_beside_master(cfg.load, cfg.master_cpu, cfg.cell_cpu, &mut warnings)?;
    warnings.extend(apply_rt(&RtRequest {
        cpu: Some(cfg.master_cpu),
        fifo_priority: cfg.master_priority,
        lock_memory: true,
    })?);

    let mut series = Vec::new();
    let mut runs: Vec<RunFigures> = Vec::new();
    let mut loopbacks: Vec<(CellKind, Series)> = Vec::new();
    let mut total_errors = 0u64;
    let mut incomplete = false;
    let mut failure: Option<BenchError> = None;
    let mut keep = |run: Run, series: &mut Vec<Series>, total_errors: &mut u64, warnings: &mut Vec<String>| {
        *total_errors += run.errors;
        if let Some(e) = &run.first_error {
            warnings.push(format!(
                "{} on {}: {} wrong outputs; the first: {e}",
                run.precision,
                run.placement.as_str(),
                run.errors
            ));
        }
        let f = figures(tsc, cfg, run);
        series.push(f.exec.clone());
        if let Some(r) = &f.rtt {
            series.push(r.clone());
        }
        series.push(f.clock.clone());
        if let Some(p) = &f.probe_rtt {
            series.push(p.clone());
        }
        if let Some(e) = &f.exits {
            series.push(e.clone());
        }
        runs.push(f);
    };

    'outer: for placement in std::iter::once(Placement::Local).chain(cfg.cells.iter().map(|&k| Placement::Cell(k))) {
        if let Placement::Cell(kind) = placement {
            match loopback_series(tsc, cfg, kind, &mut warnings) {
                Ok((s, errors)) => {
                    total_errors += errors;
                    loopbacks.push((kind, s.clone()));
                    series.push(s);
                }
                Err(e) => {
                    failure = Some(e);
                    break 'outer;
                }
            }
            if stop_requested() {
                incomplete = true;
                break 'outer;
            }
        }
        for &precision in &cfg.precisions {
            match placement {
                Placement::Local => {
                    crate::progress!("control: {precision} locally on the master, {} steps ...", cfg.iterations);
                    let (run, stopped) = run_local(&expected, precision, cfg.iterations);
                    keep(run, &mut series, &mut total_errors, &mut warnings);
                    if stopped {
                        incomplete = true;
                        break 'outer;
                    }
                }
                Placement::Cell(kind) => match run_cell(cfg, &expected, precision, kind, tsc, &mut warnings) {
                    Ok((run, stopped, broke_off)) => {
                        keep(run, &mut series, &mut total_errors, &mut warnings);
                        if let Some(e) = broke_off {
                            failure = Some(e);
                            break 'outer;
                        }
                        if stopped {
                            incomplete = true;
                            break 'outer;
                        }
                    }
                    Err(e) => {
                        failure = Some(e);
                        break 'outer;
                    }
                },
            }
        }
    }
    release_thread();
    let load_bps = load.stop();
    let failure = failure.map(|e| e.to_string());
    if failure.is_some() {
        incomplete = true;
    }
    let text = report_text(cfg, &runs, &loopbacks, load_bps);
    if total_errors > 0 {
        warnings.push(format!("{total_errors} outputs or echoes were wrong: this run FAILED"));
    }
    if let Some(f) = &failure {
        warnings.push(format!("run broke off: {f}"));
    }
    let config = serde_json::json!({
        "master_cpu": cfg.master_cpu,
        "cell_cpu": cfg.cell_cpu,
        "iterations": cfg.iterations,
        "warmup": WARMUP,
        "reference_samples": expected.len(),
        "reference_seed": rtcell_control::reference::DEFAULT_SEED,
        "states": DEFAULT_MODEL64.n,
        "precisions": cfg.precisions.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "cells": std::iter::once("local").chain(cfg.cells.iter().map(|c| c.as_str())).collect::<Vec<_>>(),
        "load": cfg.load.as_str(),
        "load_bytes_per_s": load_bps,
        "message_bytes": MESSAGE_BYTES,
        "loopback_iterations": cfg.loopback_iterations(),
        "f32_tolerance": F32_TOLERANCE,
        "q31_tolerance": Q31_TOLERANCE,
        "output_fs_v": OUTPUT_FS,
        "master_priority": cfg.master_priority,
        "cell_priority": cfg.cell_priority,
        "tsc_khz": tsc.khz(),
    });
    let mut suite = Suite::new("control", config);
    suite.series = series;
    Ok(SuiteRun { suite, text, warnings, incomplete, errors: total_errors, failure })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_output_is_a_mismatch_and_a_right_one_is_not() {
        let e = Expected::shipped().unwrap();
        let k = 1234;
        // f64: bit-exact or wrong, even by one ulp.
        let good = e.u_local64[k];
        assert_eq!(e.check_output(Precision::F64, k, good.to_bits()), Ok((good - e.u_ref[k]).abs() / OUTPUT_FS));
        assert!(e.check_output(Precision::F64, k, good.to_bits() + 1).is_err());
        assert!(e.check_output(Precision::F64, k, f64::NAN.to_bits()).is_err());
        // f32: within the tolerance passes, beyond it fails.
        let near = (e.u_ref[k] as f32) as f64;
        assert!(e.check_output(Precision::F32, k, near.to_bits()).is_ok());
        let far = ((e.u_ref[k] + 2.0 * F32_TOLERANCE * OUTPUT_FS) as f32) as f64;
        assert!(e.check_output(Precision::F32, k, far.to_bits()).is_err());
        // Q31: the raw word; 100 LSB of 8 V is 3.7e-7 V, far within 1e-6 of FS; 10^4 LSB is not.
        let q = rtcell_control::model::to_q31(e.u_ref[k], OUTPUT_FS) as i64;
        assert!(e.check_output(Precision::Q31, k, (q + 100) as u64).is_ok());
        assert!(e.check_output(Precision::Q31, k, (q + 10_000) as u64).is_err());
        assert!(e.check_output(Precision::Q31, k, 1u64 << 40).is_err(), "not an i32");
        assert!(e.check_output(Precision::F64, REFERENCE_SAMPLES, good.to_bits()).is_err());
    }

    #[test]
    fn a_run_counts_every_wrong_output() {
        let e = Expected::shipped().unwrap();
        let mut run = Run::new(Precision::F64, Placement::Local, 4);
        let mut c = OffloadController::new(Precision::F64);
        for i in 0..4 {
            let rep = c.serve(&e.request(i), || 0);
            run.check(&e, i, if i == 2 { rep.u ^ 1 } else { rep.u });
        }
        assert_eq!(run.errors, 1);
        assert!(run.first_error.as_deref().unwrap().contains("step 2"), "{:?}", run.first_error);
    }

    #[test]
    fn every_precision_passes_its_own_check_over_two_passes() {
        let e = Expected::shipped().unwrap();
        for p in Precision::ALL {
            let (run, stopped) = run_local(&e, p, e.len() + 10);
            assert!(!stopped);
            assert_eq!(run.errors, 0, "{p}: {:?}", run.first_error);
            assert_eq!(run.exec_ticks.len(), e.len() + 10);
        }
    }
}
