//! `rtcell bench loopback` — Table I of seed 000 on this machine. The master writes a random payload of
//! S bytes into a ring, the cell copies it into its own memory and sends it back, the master checks every
//! byte and times the round trip with the TSC. The same exchange over a pair of pipes is the Linux
//! baseline, and a cache-line ping-pong between the same CPUs is the floor.

use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rtcell_cells::{Cell, CellKind, WorkloadSpec};
use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::{TscClock, rdtsc_ordered};
use rtcell_report::table::{Table, fmt_us};
use rtcell_report::{Kind, Series, Stats, Suite, Unit, labels};
use rtcell_shm::{RegionView, RingConfig};

use crate::c2c::{self, C2cConfig};
use crate::pipe::PipeEcho;
use crate::{BenchError, SuiteRun, release_thread, rig, series_us, stop_requested};
use rtcell_loads::{Load, RunningLoad};

mod report;
use report::build;

/// Largest payload the loopback rings carry.
pub const MAX_PAYLOAD: usize = 65536;
/// Payload sizes of seed 000's Table I.
pub const DEFAULT_SIZES: [usize; 10] = [0, 1, 8, 16, 32, 64, 128, 256, 512, 1024];
/// Round trips before measuring, per size (caches, branch predictors, page faults).
const WARMUP: usize = 1000;

/// How the idle side waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// Busy-poll shared memory: no system call, no sleep.
    Poll,
    /// Sleep in a futex wait; the sender wakes the receiver.
    Futex,
}

impl Notify {
    pub fn as_str(&self) -> &'static str {
        match self {
            Notify::Poll => "poll",
            Notify::Futex => "futex",
        }
    }
}

impl std::str::FromStr for Notify {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "poll" => Ok(Notify::Poll),
            "futex" => Ok(Notify::Futex),
            other => Err(format!("unknown notify mode {other:?}: use poll or futex")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoopbackConfig {
    pub master_cpu: usize,
    pub cell_cpu: usize,
    pub sizes: Vec<usize>,
    pub iterations: usize,
    pub cells: Vec<CellKind>,
    pub notify: Vec<Notify>,
    pub load: Load,
    /// Also run the pipe baseline.
    pub pipe_baseline: bool,
    /// Also measure the c2c floor between the same CPUs.
    pub c2c_floor: bool,
    pub master_priority: Option<i32>,
    pub cell_priority: Option<i32>,
    /// Seed of the random payloads.
    pub seed: u64,
}

/// Measured round trips of one transport at one size.
struct SizeRun {
    size: usize,
    ticks: Vec<u64>,
    errors: u64,
    elapsed_ticks: u64,
    /// VM exits of a kvm cell's vCPU during the measured round trips, by reason.
    exits: Option<std::collections::BTreeMap<String, u64>>,
}

struct TransportRun {
    /// "thread", "process" or "pipe".
    cell: String,
    transport: &'static str,
    notify: Option<Notify>,
    sizes: Vec<SizeRun>,
    start_time: Option<Duration>,
}

/// Random bytes to take payloads from: each iteration uses a different window, so a stale echo of an
/// earlier message cannot pass the check.
fn payload_pool(seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; 1 << 20];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn window(i: usize, size: usize, pool: &[u8]) -> &[u8] {
    let span = pool.len() - size;
    let off = (i.wrapping_mul(7919)) % span.max(1);
    &pool[off..off + size]
}

/// Runs one size through a ring pair with a running cell.
fn measure_cell_size(
    cfg: &LoopbackConfig,
    notify: Notify,
    region: &RegionView<'_>,
    cell: &mut Cell,
    size: usize,
    pool: &[u8],
    tsc: &TscClock,
) -> Result<(SizeRun, bool), BenchError> {
    let ring_err = |e: rtcell_shm::AttachError| BenchError::Other(format!("loopback region: {e}"));
    let mut tx = region.ring(rig::M2C).map_err(ring_err)?.producer();
    let mut rx = region.ring(rig::C2M).map_err(ring_err)?.consumer();
    let mut reply = vec![0u8; MAX_PAYLOAD];
    let mut ticks = Vec::with_capacity(cfg.iterations);
    let mut errors = 0u64;
    let timeout_ticks = tsc.ns_to_ticks(rig::ANSWER_TIMEOUT.as_nanos() as f64);
    let mut incomplete = false;
    let run_start = rdtsc_ordered();
    let mut exits_before = None;
    for i in 0..WARMUP + cfg.iterations {
        if i == WARMUP {
            exits_before = cell.vm_exits();
        }
        if i % 1024 == 0 && stop_requested() {
            incomplete = true;
            break;
        }
        let payload = window(i, size, pool);
        let t0 = rdtsc_ordered();
        let what = || format!("the {size}-byte round trips");
        if !rig::send(&mut tx, payload, cell, what)? {
            return Ok((SizeRun { size, ticks, errors, elapsed_ticks: 0, exits: None }, true));
        }
        let futex = notify == Notify::Futex;
        let Some(n) = rig::await_reply(&mut rx, &mut reply, cell, t0, timeout_ticks, futex, what)? else {
            return Ok((SizeRun { size, ticks, errors, elapsed_ticks: 0, exits: None }, true));
        };
        let t1 = rdtsc_ordered();
        if n != size || reply[..n] != *payload {
            errors += 1;
        }
        if i >= WARMUP {
            ticks.push(t1.wrapping_sub(t0));
        }
    }
    let elapsed_ticks = rdtsc_ordered().wrapping_sub(run_start);
    let exits = match (exits_before, cell.vm_exits()) {
        (Some(b), Some(a)) => Some(rtcell_kvm::stats::exit_delta(&b, &a)),
        _ => None,
    };
    Ok((SizeRun { size, ticks, errors, elapsed_ticks, exits }, incomplete))
}

fn run_cell(
    cfg: &LoopbackConfig,
    kind: CellKind,
    notify: Notify,
    pool: &[u8],
    tsc: &TscClock,
    warnings: &mut Vec<String>,
) -> Result<(TransportRun, bool, Option<BenchError>), BenchError> {
    let max_size = cfg.sizes.iter().copied().max().unwrap_or(0).max(4096);
    let mut ring = RingConfig::for_frames(max_size as u32, 4);
    ring.notify = notify == Notify::Futex;
    let workload =
        WorkloadSpec::Echo { rx: rig::M2C.into(), tx: rig::C2M.into(), max_frame: max_size, notify: ring.notify };
    let rig::RingCell { shm, mut cell, start_time } = rig::start(
        "loopback",
        kind,
        &format!("echo-{kind}"),
        ring,
        workload,
        cfg.cell_cpu,
        cfg.cell_priority,
        tsc,
        warnings,
    )?;
    let region = rig::region(&shm)?;

    let mut sizes = Vec::new();
    let mut incomplete = false;
    let mut broke_off = None;
    for &size in &cfg.sizes {
        crate::progress!("loopback: {kind} cell, notify {}, {size} B x {} ...", notify.as_str(), cfg.iterations);
        match measure_cell_size(cfg, notify, &region, &mut cell, size, pool, tsc) {
            Ok((run, stopped)) => {
                sizes.push(run);
                if stopped {
                    incomplete = true;
                    break;
                }
            }
            Err(e) => {
                broke_off = Some(e);
                incomplete = true;
                break;
            }
        }
    }
    rig::stop(cell, warnings);
    let cell_name = kind.as_str().to_string();
    Ok((
        TransportRun { cell: cell_name, transport: "ring", notify: Some(notify), sizes, start_time: Some(start_time) },
        incomplete,
        broke_off,
    ))
}

/// Round trips of one payload size through one cell, as [`cell_round_trips`] measures them.
pub struct CellRoundTrips {
    /// Each measured round trip, TSC ticks.
    pub ticks: Vec<u64>,
    /// Round trips whose echo differed from what was sent.
    pub errors: u64,
    /// Stopped early (Ctrl-C).
    pub incomplete: bool,
}

/// Round trips of `size`-byte payloads through a fresh `kind` cell on `cell_cpu` that busy-polls its
/// ring, measured by this suite's own loop (same rings, same warm-up, every byte checked), from the
/// calling thread: for suites that set their exchange beside the loopback round trip of the same size in
/// the same run.
#[allow(clippy::too_many_arguments)]
pub fn cell_round_trips(
    tsc: &TscClock,
    kind: CellKind,
    master_cpu: usize,
    cell_cpu: usize,
    cell_priority: Option<i32>,
    size: usize,
    iterations: usize,
    warnings: &mut Vec<String>,
) -> Result<CellRoundTrips, BenchError> {
    let seed = 0x5eed_0000_0000_0001;
    let cfg = LoopbackConfig {
        master_cpu,
        cell_cpu,
        sizes: vec![size],
        iterations,
        cells: vec![kind],
        notify: vec![Notify::Poll],
        load: Load::None,
        pipe_baseline: false,
        c2c_floor: false,
        master_priority: None,
        cell_priority,
        seed,
    };
    let pool = payload_pool(seed);
    let (run, incomplete, broke_off) = run_cell(&cfg, kind, Notify::Poll, &pool, tsc, warnings)?;
    if let Some(e) = broke_off {
        return Err(e);
    }
    let (ticks, errors) = run.sizes.into_iter().next().map_or((Vec::new(), 0), |s| (s.ticks, s.errors));
    Ok(CellRoundTrips { ticks, errors, incomplete })
}

fn run_pipe(cfg: &LoopbackConfig, pool: &[u8], warnings: &mut Vec<String>) -> Result<(TransportRun, bool), BenchError> {
    let max_size = cfg.sizes.iter().copied().max().unwrap_or(0);
    let mut echo = PipeEcho::start(cfg.cell_cpu, cfg.cell_priority, max_size)?;
    let mut reply = vec![0u8; max_size.max(1)];
    let mut sizes = Vec::new();
    let mut incomplete = false;
    'sizes: for &size in &cfg.sizes {
        crate::progress!("loopback: pipe baseline, {size} B x {} ...", cfg.iterations);
        let mut ticks = Vec::with_capacity(cfg.iterations);
        let mut errors = 0;
        let start = rdtsc_ordered();
        for i in 0..WARMUP + cfg.iterations {
            if i % 1024 == 0 && stop_requested() {
                incomplete = true;
                sizes.push(SizeRun { size, ticks, errors, elapsed_ticks: 0, exits: None });
                break 'sizes;
            }
            let payload = window(i, size, pool);
            let t0 = rdtsc_ordered();
            let n =
                echo.round_trip(payload, &mut reply).map_err(|e| BenchError::Other(format!("pipe baseline: {e}")))?;
            let t1 = rdtsc_ordered();
            if n != size || reply[..n] != *payload {
                errors += 1;
            }
            if i >= WARMUP {
                ticks.push(t1.wrapping_sub(t0));
            }
        }
        sizes.push(SizeRun { size, ticks, errors, elapsed_ticks: rdtsc_ordered().wrapping_sub(start), exits: None });
    }
    warnings.extend(echo.finish()?);
    Ok((TransportRun { cell: "thread".into(), transport: "pipe", notify: None, sizes, start_time: None }, incomplete))
}

/// Runs the whole suite.
pub fn run(tsc: &TscClock, cfg: &LoopbackConfig) -> Result<SuiteRun, BenchError> {
    let mut warnings = Vec::new();
    let load = RunningLoad::start_beside_master(cfg.load, cfg.master_cpu, cfg.cell_cpu, &mut warnings)?;

    let mut incomplete = false;
    // The floor first, right before the thread cell it is compared with: the outer hypervisor may move our
    // vCPUs between physical cores during a run, and adjacent phases see the same placement.
    let mut floor = None;
    if cfg.c2c_floor {
        let c2c_cfg = C2cConfig {
            cpu_a: cfg.master_cpu,
            cpu_b: cfg.cell_cpu,
            samples: cfg.iterations.min(200_000),
            batches: 200,
            batch: 1000,
            priority: cfg.master_priority,
        };
        crate::progress!("loopback: c2c floor between CPU {} and CPU {} ...", cfg.master_cpu, cfg.cell_cpu);
        let m = c2c::measure(&c2c_cfg)?;
        incomplete |= m.incomplete;
        floor = Some((c2c_cfg, m));
    }
    // The master loop: pinned, real-time, memory locked.
    warnings.extend(apply_rt(&RtRequest {
        cpu: Some(cfg.master_cpu),
        fifo_priority: cfg.master_priority,
        lock_memory: true,
    })?);
    let pool = payload_pool(cfg.seed);
    let mut runs = Vec::new();
    let mut outcome: Result<(), BenchError> = Ok(());
    'outer: for &kind in &cfg.cells {
        for &notify in &cfg.notify {
            if kind == CellKind::Kvm && notify == Notify::Futex {
                warnings.push(
                    "kvm cell with notify futex skipped: a payload cannot wake a host futex without a VM exit, so kvm cells always poll".into(),
                );
                continue;
            }
            match run_cell(cfg, kind, notify, &pool, tsc, &mut warnings) {
                Ok((r, stopped, broke_off)) => {
                    runs.push(r);
                    if let Some(e) = broke_off {
                        outcome = Err(e);
                        break 'outer;
                    }
                    if stopped {
                        incomplete = true;
                        break 'outer;
                    }
                }
                Err(e) => {
                    outcome = Err(e);
                    break 'outer;
                }
            }
        }
    }
    if outcome.is_ok() && !incomplete && cfg.pipe_baseline {
        match run_pipe(cfg, &pool, &mut warnings) {
            Ok((r, stopped)) => {
                runs.push(r);
                incomplete |= stopped;
            }
            Err(e) => outcome = Err(e),
        }
    }
    release_thread();
    let load_bps = load.stop();
    // A run that broke off still reports what it measured, marked incomplete and failed.
    let failure = outcome.err().map(|e| e.to_string());
    if failure.is_some() {
        incomplete = true;
    }
    let mut run = build(tsc, cfg, runs, floor, load_bps, warnings, incomplete);
    if let Some(f) = &failure {
        run.warnings.push(format!("run broke off: {f}"));
    }
    run.failure = failure;
    Ok(run)
}

fn labels_for(cfg: &LoopbackConfig, r: &TransportRun, size: usize) -> std::collections::BTreeMap<String, String> {
    let mut l = labels!(
        "cell" => r.cell,
        "transport" => r.transport,
        "bytes" => size,
        "load" => cfg.load.as_str(),
        "master_cpu" => cfg.master_cpu,
        "cell_cpu" => cfg.cell_cpu,
    );
    if let Some(n) = r.notify {
        l.insert("notify".into(), n.as_str().into());
    }
    l
}
