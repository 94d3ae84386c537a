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

fn build(
    tsc: &TscClock,
    cfg: &LoopbackConfig,
    runs: Vec<TransportRun>,
    floor: Option<(C2cConfig, c2c::C2cMeasurement)>,
    load_bps: f64,
    mut warnings: Vec<String>,
    incomplete: bool,
) -> SuiteRun {
    let mut series = Vec::new();
    let mut text = String::new();
    let mut total_errors = 0;
    let published = rtcell_report::published::for_metric("loopback_rtt");
    let jailhouse = |size: usize| {
        published
            .iter()
            .find(|r| r.payload_bytes == Some(size as u32) && r.condition == "idle" && r.platform.contains("Jailhouse"))
    };
    // Medians for the speed summary: (cell, transport, notify, size) -> median us.
    let mut medians: Vec<(String, &'static str, Option<Notify>, usize, f64)> = Vec::new();
    for r in &runs {
        let what = match r.notify {
            Some(n) => format!("{} cell, ring, notify {}", r.cell, n.as_str()),
            None => "Linux baseline: pipe pair, echo thread".to_string(),
        };
        text.push_str(&format!(
            "\nLoopback round trip: {what}; master CPU {}, cell CPU {}, load {} (us, round trip, {} per size)\n",
            cfg.master_cpu,
            cfg.cell_cpu,
            cfg.load.as_str(),
            cfg.iterations
        ));
        let mut t = Table::new(&[
            "bytes",
            "min",
            "mean",
            "median",
            "p99",
            "p99.9",
            "max",
            "MB/s",
            "errors",
            "Jailhouse A7 mean",
            "Jailhouse A7 max",
        ]);
        for s in &r.sizes {
            let ser = series_us(tsc, "loopback_rtt", labels_for(cfg, r, s.size), Kind::RoundTrip, &s.ticks, s.errors);
            total_errors += s.errors;
            let st: Stats = ser.stats;
            let secs = tsc.ticks_to_ns(s.elapsed_ticks) / 1e9;
            // Payload bytes moved per second, both directions, over the whole timed loop.
            let mbps = if secs > 0.0 { (2 * s.size * (s.ticks.len() + WARMUP)) as f64 / secs / 1e6 } else { 0.0 };
            if secs > 0.0 && !s.ticks.is_empty() {
                let mut thr = Series::from_samples(
                    "loopback_throughput",
                    labels_for(cfg, r, s.size),
                    Unit::BytesPerS,
                    Kind::Throughput,
                    vec![mbps * 1e6],
                    0,
                );
                thr.histogram = None;
                series.push(thr);
            }
            let pubd = jailhouse(s.size);
            t.row(vec![
                s.size.to_string(),
                fmt_us(st.min * 1000.0),
                fmt_us(st.mean * 1000.0),
                fmt_us(st.median * 1000.0),
                fmt_us(st.p99 * 1000.0),
                fmt_us(st.p999 * 1000.0),
                fmt_us(st.max * 1000.0),
                format!("{mbps:.1}"),
                s.errors.to_string(),
                pubd.and_then(|p| p.mean).map_or("-".into(), |v| format!("{v:.2}")),
                pubd.and_then(|p| p.max).map_or("-".into(), |v| format!("{v:.2}")),
            ]);
            medians.push((r.cell.clone(), r.transport, r.notify, s.size, st.median));
            series.push(ser);
        }
        text.push_str(&t.render());
        text.push('\n');
        let exit_lines: Vec<String> = r
            .sizes
            .iter()
            .filter_map(|s| s.exits.as_ref().map(|e| (s.size, e)))
            .map(|(size, e)| {
                let total = e.get("exits").copied().unwrap_or(0);
                let detail: Vec<String> =
                    e.iter().filter(|(k, _)| k.as_str() != "exits").map(|(k, v)| format!("{k} {v}")).collect();
                format!(
                    "  {size} B: {total} exits{}",
                    if detail.is_empty() { String::new() } else { format!(" ({})", detail.join(", ")) }
                )
            })
            .collect();
        if !exit_lines.is_empty() {
            text.push_str("VM exits of the kvm cell's vCPU during the measured round trips (goal: 0):\n");
            text.push_str(&exit_lines.join("\n"));
            text.push('\n');
            if r.sizes.iter().any(|s| s.exits.as_ref().is_some_and(|e| e.get("irq_exits").is_some_and(|&v| v > 0))) {
                text.push_str(
                    "  irq_exits are host interrupts (the timer tick) taken while the guest ran: the payload made no exit; \
                     isolcpus + nohz_full on the cell CPU removes them\n",
                );
            }
            for s in &r.sizes {
                if let Some(e) = &s.exits {
                    let mut ser = Series::from_samples(
                        "vm_exits",
                        labels_for(cfg, r, s.size),
                        Unit::Count,
                        Kind::Count,
                        vec![e.get("exits").copied().unwrap_or(0) as f64],
                        0,
                    );
                    ser.histogram = None;
                    for (k, v) in e {
                        ser.labels.insert(format!("exits.{k}"), v.to_string());
                    }
                    series.push(ser);
                }
            }
        }
        if let Some(st) = r.start_time {
            text.push_str(&format!(
                "{} cell start (spawn to first heartbeat): {:.3} ms\n",
                r.cell,
                st.as_secs_f64() * 1e3
            ));
            let mut s = Series::from_samples(
                "cell_start",
                labels!("cell" => r.cell, "cpu" => cfg.cell_cpu),
                Unit::Us,
                Kind::Latency,
                vec![st.as_secs_f64() * 1e6],
                0,
            );
            s.histogram = None;
            series.push(s);
        }
    }
    text.push_str(
        "Jailhouse A7 columns: seed 000 Table I, STM32MP157 Cortex-A7 cell under Jailhouse, idle, mean/max in us — another platform, for scale only.\n",
    );

    let mut floor_rtt = None;
    if let Some((c, m)) = &floor {
        let s = c2c::series(tsc, c, m);
        floor_rtt = s.first().map(|x| x.stats.median);
        text.push_str(&format!(
            "c2c floor, CPU {} <-> CPU {}: round trip median {:.1} ns (each timed), one way median {:.1} ns (batch RTT / 2)\n",
            c.cpu_a,
            c.cpu_b,
            s.first().map_or(f64::NAN, |x| x.stats.median),
            s.get(1).map_or(f64::NAN, |x| x.stats.median),
        ));
        series.extend(s);
    }
    text.push_str(&speed_summary(&medians, floor_rtt));
    if cfg.load == Load::Memcpy {
        text.push_str(&format!(
            "load {} on CPUs {:?}: {:.2} GB/s copied while measuring\n",
            cfg.load.as_str(),
            cfg.cell_cpu_complement(),
            load_bps / 1e9
        ));
    }
    if total_errors > 0 {
        warnings.push(format!("{total_errors} round trips came back with a wrong payload: this run FAILED"));
    }
    let config = serde_json::json!({
        "master_cpu": cfg.master_cpu,
        "cell_cpu": cfg.cell_cpu,
        "sizes": cfg.sizes,
        "iterations": cfg.iterations,
        "warmup": WARMUP,
        "cells": cfg.cells.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        "notify": cfg.notify.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        "load": cfg.load.as_str(),
        "load_bytes_per_s": load_bps,
        "pipe_baseline": cfg.pipe_baseline,
        "master_priority": cfg.master_priority,
        "cell_priority": cfg.cell_priority,
        "seed": cfg.seed,
        "tsc_khz": tsc.khz(),
    });
    let mut suite = Suite::new("loopback", config);
    suite.series = series;
    SuiteRun { suite, text, warnings, incomplete, errors: total_errors, failure: None }
}

impl LoopbackConfig {
    fn cell_cpu_complement(&self) -> Vec<usize> {
        rtcell_host::cpu::online_cpus().unwrap_or_default().into_iter().filter(|&c| c != self.cell_cpu).collect()
    }
}

/// The speed goals as ratios of medians measured in this run.
fn speed_summary(medians: &[(String, &'static str, Option<Notify>, usize, f64)], floor_rtt_ns: Option<f64>) -> String {
    let find = |cell: &str, transport: &str, notify: Option<Notify>, size: usize| {
        medians.iter().find(|m| m.0 == cell && m.1 == transport && m.2 == notify && m.3 == size).map(|m| m.4)
    };
    let mut out = String::from("\nRatios of medians from this run:\n");
    let mut any = false;
    if let Some(t0) = find("thread", "ring", Some(Notify::Poll), 0) {
        if let Some(f) = floor_rtt_ns {
            out.push_str(&format!(
                "  thread cell 0 B round trip / c2c round trip: {:.2} x ({} us / {} us; goal <= 1.5)\n",
                t0 * 1000.0 / f,
                fmt_us(t0 * 1000.0),
                fmt_us(f)
            ));
            any = true;
        }
        if let Some(p0) = find("thread", "pipe", None, 0) {
            out.push_str(&format!(
                "  pipe 0 B round trip / thread cell 0 B round trip: {:.1} x faster (goal >= 20)\n",
                p0 / t0
            ));
            any = true;
        }
        if let Some(t1k) = find("thread", "ring", Some(Notify::Poll), 1024) {
            out.push_str(&format!("  thread cell 1024 B / 0 B round trip: {:.2} x (goal <= 3)\n", t1k / t0));
            any = true;
        }
        if let Some(p) = find("process", "ring", Some(Notify::Poll), 0) {
            out.push_str(&format!("  process cell 0 B / thread cell 0 B round trip: {:.2} x\n", p / t0));
            any = true;
        }
        if let Some(k) = find("kvm", "ring", Some(Notify::Poll), 0) {
            out.push_str(&format!("  kvm cell 0 B / thread cell 0 B round trip: {:.2} x (goal <= 1.15)\n", k / t0));
            any = true;
        }
    }
    if any { out } else { String::new() }
}
