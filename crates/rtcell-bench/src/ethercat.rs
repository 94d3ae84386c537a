//! The fieldbus benchmarks (seeds 003 and 004) on a simulated segment: the master's process-data round
//! trip against the floor of the same path (a raw-socket ping-pong through the same veth pair and the
//! same simulator), the master task's cycle and jitter at 1 kHz and at 20 kHz with frames sent and lost,
//! and the highest cycle rate sustained back to back. Round trips are timed with the master's side
//! sleeping until the reply arrives and busy-polling for it, against the floor waiting the same way.
//!
//! The simulator answers on the Linux side (`master_cpu`); the master runs on the cell CPU at SCHED_FIFO.

use std::time::{Duration, Instant};

use rtcell_ecat::frame::{Command, build};
use rtcell_ecat::master::Master;
use rtcell_ecat::net::{RawSocket, Veth};
use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::{TscClock, rdtsc_ordered};
use rtcell_report::goal::Goal;
use rtcell_report::table::{Table, fmt_us};
use rtcell_report::{Kind, Series, Suite, Unit, labels};

use crate::{BenchError, SuiteRun, stop_requested};
use rtcell_host::clock::{mono_ns, sleep_until};
use rtcell_loads::{Load, RunningLoad};

#[derive(Debug, Clone)]
pub struct EthercatConfig {
    /// Simulated SubDevices on the segment.
    pub devices: u16,
    /// Round trips timed for the ping-pong floor and the master (seed 004 used 1,000).
    pub samples: usize,
    /// Cycle rates of the periodic master task (Hz).
    pub rates: Vec<u32>,
    /// How long each rate runs.
    pub duration: Duration,
    /// How long the back-to-back run lasts.
    pub max_rate_for: Duration,
    pub cell_cpu: usize,
    pub master_cpu: usize,
    pub priority: i32,
    /// How long an exchange may take before its frame counts as lost.
    pub frame_timeout: Duration,
    /// The simulator busy-polls (answers like hardware) instead of sleeping on its socket.
    pub sim_busy_poll: bool,
    /// The periodic master task busy-polls for its replies instead of sleeping until they arrive.
    pub master_busy_poll: bool,
    /// Load on every CPU but the master's (the simulator's included) while everything is measured.
    pub load: Load,
}

/// How the master's side waits for a reply: both are timed.
const WAITS: [(&str, bool); 2] = [("sleeping", false), ("busy-polled", true)];

/// What one periodic run measured.
struct Periodic {
    rate: u32,
    activation_ns: Vec<f64>,
    cycle_ns: Vec<f64>,
    sent: u64,
    received: u64,
    lost: u64,
    overruns: u64,
    steal_ms: f64,
}

fn tx(e: impl std::fmt::Display) -> BenchError {
    BenchError::Other(e.to_string())
}

/// Interface names of this run (short: at most 15 characters with the suffix).
fn veth_name() -> String {
    format!("rtcb{}", std::process::id())
}

/// Removes the veth pairs of earlier runs whose process is gone (killed before it could clean up).
fn remove_stale_pairs() {
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else { return };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) =
            name.strip_prefix("rtcb").and_then(|r| r.strip_suffix("-m")).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::process::Command::new("ip").args(["link", "del", &name]).output();
        }
    }
}

pub fn run(tsc: &TscClock, cfg: &EthercatConfig) -> Result<SuiteRun, BenchError> {
    remove_stale_pairs();
    crate::progress!("ethercat: simulated segment of {} device(s) on a veth pair ...", cfg.devices);
    let veth =
        Veth::create(&veth_name(), false).map_err(|e| tx(format!("veth pair: {e} (needs root and iproute2)")))?;
    // Under a load the simulator stands for hardware a host load cannot starve: it sleeps on its socket
    // at SCHED_FIFO 50 (busy-polling at that priority would be stopped by RT throttling every second).
    let loaded = cfg.load != Load::None;
    rtcell_ecat::sim::BUSY_POLL.store(cfg.sim_busy_poll && !loaded, std::sync::atomic::Ordering::Relaxed);
    let sim = rtcell_ecat::sim::Running::start_with(
        &veth.segment,
        None,
        cfg.devices,
        Default::default(),
        Some(cfg.master_cpu),
        loaded.then_some(50),
    )
    .map_err(|e| tx(format!("simulator: {e}")))?;
    let mut load_warnings = Vec::new();
    let load = RunningLoad::start_beside_master(cfg.load, cfg.master_cpu, cfg.cell_cpu, &mut load_warnings)?;
    let result = measure(tsc, cfg, &veth);
    let load_bps = load.stop();
    let counters = sim.stop().map_err(tx)?;
    drop(veth);
    let (floor, master, periodic, max_rate, mut warnings) = result?;
    warnings.extend(load_warnings.into_iter().map(|w| w.replace("the master loop", "the simulator")));
    if counters.refused > 0 {
        warnings.push(format!("the simulator refused {} malformed frame(s)", counters.refused));
    }
    if counters.send_failed > 0 {
        warnings.push(format!("the simulator could not send {} repl(ies)", counters.send_failed));
    }
    let mut run = report(cfg, &floor, &master, &periodic, max_rate, warnings);
    if loaded {
        run.text.push_str(&format!(
            "Load: {} on every CPU but the master's (the simulator sleeping at SCHED_FIFO 50 beside it){}\n",
            cfg.load.as_str(),
            if load_bps > 0.0 { format!(", {:.1} GB/s copied", load_bps / 1e9) } else { String::new() }
        ));
    }
    if let Some(c) = run.suite.config.as_object_mut() {
        c.insert("load".into(), cfg.load.as_str().into());
        c.insert("load_bytes_per_s".into(), load_bps.into());
    }
    Ok(run)
}

/// (floor, master) round trips per way of waiting ([`WAITS`]), periodic runs, back-to-back rate.
type Measured = ([Vec<f64>; 2], [Vec<f64>; 2], Vec<Periodic>, f64, Vec<String>);

fn measure(tsc: &TscClock, cfg: &EthercatConfig, veth: &Veth) -> Result<Measured, BenchError> {
    let req = RtRequest { cpu: Some(cfg.cell_cpu), fifo_priority: Some(cfg.priority), lock_memory: true };
    let mut warnings: Vec<String> = apply_rt(&req).map_err(tx)?;
    // The floor: the same path with nothing but a raw socket on the master's side.
    let sock = RawSocket::open(&veth.master).map_err(tx)?;
    let pd_bytes = (rtcell_ecat::esc::OUTPUT_BYTES + rtcell_ecat::esc::INPUT_BYTES) as usize * cfg.devices as usize;
    let frame = build([0x10, 0x10, 0x10, 0x10, 0x10, 0x10], &[(Command::Lrw, 0, 0, &vec![0u8; pd_bytes])]);
    let mut buf = [0u8; 1536];
    let mut floor = [Vec::with_capacity(cfg.samples), Vec::with_capacity(cfg.samples)];
    for ((_, busy), samples) in WAITS.iter().zip(floor.iter_mut()) {
        let mut lost = 0u64;
        // The first tenth warms the path up (caches, wake-ups): not kept.
        let mut warm_up = cfg.samples / 10;
        while samples.len() < cfg.samples && !stop_requested() {
            let t0 = rdtsc_ordered();
            sock.send(&frame).map_err(tx)?;
            let got = if *busy {
                sock.spin_recv(&mut buf, Instant::now() + cfg.frame_timeout).map_err(tx)?
            } else if sock.wait_readable(cfg.frame_timeout).map_err(tx)? {
                sock.try_recv(&mut buf).map_err(tx)?
            } else {
                None
            };
            match got {
                Some(_) if warm_up > 0 => warm_up -= 1,
                Some(_) => samples.push(tsc.ticks_to_ns(rdtsc_ordered().wrapping_sub(t0))),
                None => lost += 1,
            }
        }
        if lost > 0 {
            warnings.push(format!("{lost} frame(s) lost during the ping-pong samples"));
        }
    }
    drop(sock);
    crate::progress!("ethercat: master bring-up to OP ...");
    let mut m = Master::bring_up(&veth.master, cfg.frame_timeout).map_err(tx)?;
    // The master's process-data exchange, back to back, waiting each way.
    let mut master = [Vec::with_capacity(cfg.samples), Vec::with_capacity(cfg.samples)];
    let mut lost = 0u64;
    for ((_, busy), samples) in WAITS.iter().zip(master.iter_mut()) {
        m.set_busy_poll(*busy);
        let mut warm_up = cfg.samples / 10;
        while samples.len() < cfg.samples && !stop_requested() {
            let t0 = rdtsc_ordered();
            match m.cycle() {
                Ok(()) if warm_up > 0 => warm_up -= 1,
                Ok(()) => samples.push(tsc.ticks_to_ns(rdtsc_ordered().wrapping_sub(t0))),
                Err(_) => lost += 1,
            }
        }
    }
    if lost > 0 {
        warnings.push(format!("{lost} frame(s) lost during the round-trip samples"));
    }
    m.set_busy_poll(cfg.master_busy_poll);
    // The periodic master task at each rate.
    let mut periodic = Vec::new();
    for &rate in &cfg.rates {
        crate::progress!("ethercat: master task at {rate} Hz for {:.0} s ...", cfg.duration.as_secs_f64());
        periodic.push(periodic_run(&mut m, tsc, rate, cfg.duration));
        if stop_requested() {
            break;
        }
    }
    // The highest rate sustained back to back: cycles per second with none lost.
    let t0 = Instant::now();
    let (mut n, mut lost) = (0u64, 0u64);
    while t0.elapsed() < cfg.max_rate_for && !stop_requested() {
        match m.cycle() {
            Ok(()) => n += 1,
            Err(_) => lost += 1,
        }
    }
    let max_rate = n as f64 / t0.elapsed().as_secs_f64();
    if lost > 0 {
        warnings.push(format!("{lost} frame(s) lost in the back-to-back run"));
    }
    crate::release_thread();
    Ok((floor, master, periodic, max_rate, warnings))
}

/// The master task: one exchange per period on absolute releases (clock_nanosleep), as a PLC task.
fn periodic_run(m: &mut Master, tsc: &TscClock, rate: u32, duration: Duration) -> Periodic {
    let period = 1_000_000_000u64 / rate as u64;
    let n = (duration.as_nanos() as u64 / period).max(1);
    let steal0 = steal_ms();
    let mut p = Periodic {
        rate,
        activation_ns: Vec::with_capacity(n as usize),
        cycle_ns: Vec::with_capacity(n as usize),
        sent: 0,
        received: 0,
        lost: 0,
        overruns: 0,
        steal_ms: 0.0,
    };
    let mut release = mono_ns() + 1_000_000;
    for _ in 0..n {
        if stop_requested() {
            break;
        }
        sleep_until(release);
        let start = mono_ns();
        p.activation_ns.push(start.saturating_sub(release) as f64);
        let t0 = rdtsc_ordered();
        p.sent += 1;
        match m.cycle() {
            Ok(()) => {
                p.received += 1;
                p.cycle_ns.push(tsc.ticks_to_ns(rdtsc_ordered().wrapping_sub(t0)));
            }
            Err(_) => p.lost += 1,
        }
        let next = release + period;
        if mono_ns() > next {
            p.overruns += 1;
            // Skip the releases already past, as the task executive does.
            let behind = (mono_ns() - next) / period + 1;
            release = next + behind * period;
        } else {
            release = next;
        }
    }
    p.steal_ms = steal_ms() - steal0;
    p
}

/// Time stolen from all CPUs so far (ms), from /proc/stat.
fn steal_ms() -> f64 {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else { return 0.0 };
    let steal: u64 = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8).and_then(|v| v.parse().ok()))
        .unwrap_or(0);
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    steal as f64 * 1000.0 / hz
}

/// The floor's goal: the master's process-data round trip at most 2 x the raw-socket ping-pong's.
const FLOOR_GOAL: Goal = Goal::AtMost(2.0);

/// The suite's series: the round trips (floor and master per wait, in [`WAITS`] order), then two per task
/// rate (activation, cycle), then the highest rate. Returns them with the number of round-trip series and
/// the count of task rates whose frames do not add up (sent != received + lost).
fn all_series(
    cfg: &EthercatConfig,
    floor: &[Vec<f64>; 2],
    master: &[Vec<f64>; 2],
    periodic: &[Periodic],
    max_rate: f64,
) -> (Vec<Series>, usize, u64) {
    let dev = cfg.devices.to_string();
    let us = |v: &[f64]| v.iter().map(|v| v / 1e3).collect::<Vec<f64>>();
    let mut series = Vec::new();
    for (i, (wait, _)) in WAITS.iter().enumerate() {
        let floor_labels = labels!("path" => "veth", "devices" => dev.as_str(), "wait" => *wait);
        series.push(Series::from_samples(
            "raw_pingpong_rtt",
            floor_labels,
            Unit::Us,
            Kind::RoundTrip,
            us(&floor[i]),
            0,
        ));
        let master_labels = labels!("master" => "ethercrab", "devices" => dev.as_str(), "wait" => *wait);
        series.push(Series::from_samples("ethercat_rtt", master_labels, Unit::Us, Kind::RoundTrip, us(&master[i]), 0));
    }
    let round_trips = series.len();
    let mut errors = 0;
    for p in periodic {
        let hz = p.rate.to_string();
        let activation = us(&p.activation_ns);
        series.push(Series::from_samples(
            "ethercat_task_activation",
            labels!("rate_hz" => hz.as_str()),
            Unit::Us,
            Kind::Latency,
            activation,
            0,
        ));
        let cycle = us(&p.cycle_ns);
        series.push(Series::from_samples(
            "ethercat_task_cycle",
            labels!("rate_hz" => hz.as_str()),
            Unit::Us,
            Kind::RoundTrip,
            cycle,
            p.lost,
        ));
        if p.sent != p.received + p.lost {
            errors += 1;
        }
    }
    series.push(Series::from_samples(
        "ethercat_max_rate",
        labels!("devices" => dev.as_str()),
        Unit::Count,
        Kind::Throughput,
        vec![max_rate],
        0,
    ));
    (series, round_trips, errors)
}

/// The round-trip table and the master-over-floor ratio per wait (with its verdict); returns the ratios
/// for the results document too.
fn round_trip_text(series: &[Series], text: &mut String) -> Vec<serde_json::Value> {
    let mut t = Table::new(&["round trip", "master side", "count", "min", "median", "p99.9", "max"]);
    let names = ["raw-socket ping-pong (the floor)", "master process data (ethercrab LRW)"];
    for (k, s) in series.iter().enumerate() {
        let st = &s.stats;
        t.row(vec![
            names[k % 2].into(),
            WAITS[k / 2].0.into(),
            st.count.to_string(),
            fmt_us(st.min * 1e3),
            fmt_us(st.median * 1e3),
            fmt_us(st.p999 * 1e3),
            fmt_us(st.max * 1e3),
        ]);
    }
    text.push_str(&t.render());
    text.push('\n');
    let mut ratios = Vec::new();
    for (k, (wait, _)) in WAITS.iter().enumerate() {
        let floor = series[2 * k].stats.median;
        let ratio = if floor > 0.0 { series[2 * k + 1].stats.median / floor } else { f64::NAN };
        text.push_str(&format!(
            "  master round trip / raw ping-pong (medians), both {wait}: {ratio:.2} x ({})\n",
            FLOOR_GOAL.judge(ratio)
        ));
        ratios.push(serde_json::json!({ "wait": wait, "ratio": ratio, "goal": FLOOR_GOAL.bound() }));
    }
    ratios
}

/// The master task's table: one row per rate, from the rate's two series.
fn task_text(cfg: &EthercatConfig, periodic: &[Periodic], series: &[Series], text: &mut String) {
    let mut t = Table::new(&[
        "task rate",
        "cycles sent",
        "received",
        "lost",
        "overruns",
        "activation median",
        "p99.9",
        "max",
        "cycle median",
        "p99.9",
        "max",
        "stolen ms",
    ]);
    for (p, pair) in periodic.iter().zip(series.chunks(2)) {
        let (a, c) = (&pair[0].stats, &pair[1].stats);
        t.row(vec![
            format!("{} Hz", p.rate),
            p.sent.to_string(),
            p.received.to_string(),
            p.lost.to_string(),
            p.overruns.to_string(),
            fmt_us(a.median * 1e3),
            fmt_us(a.p999 * 1e3),
            fmt_us(a.max * 1e3),
            fmt_us(c.median * 1e3),
            fmt_us(c.p999 * 1e3),
            fmt_us(c.max * 1e3),
            format!("{:.1}", p.steal_ms),
        ]);
    }
    text.push_str(
        "Master task (activation: release to start, one way; cycle: one process-data exchange, round trip):\n",
    );
    text.push_str(&format!(
        "  (the task {} for its replies)\n",
        if cfg.master_busy_poll { "busy-polls" } else { "sleeps" }
    ));
    text.push_str(&t.render());
    text.push('\n');
}

/// Published EtherCAT figures of other platforms, labelled as such.
fn published_text(text: &mut String) {
    let published: Vec<String> = ["ethercat_rtt", "ethercat_throughput", "ethercat_task_cycle"]
        .iter()
        .flat_map(|m| rtcell_report::published::for_metric(m))
        .map(|r| {
            let fig = |v: Option<f64>| v.map_or("-".into(), |v| v.to_string());
            format!(
                "  {} ({}), {} {}: min {} mean {} max {} {} {}",
                r.platform,
                r.source,
                r.metric,
                r.condition,
                fig(r.min),
                fig(r.mean),
                fig(r.max),
                r.unit,
                r.note
            )
        })
        .collect();
    if !published.is_empty() {
        text.push_str("Published figures, other platforms (real NICs and SubDevices):\n");
        text.push_str(&published.join("\n"));
        text.push('\n');
    }
}

fn report(
    cfg: &EthercatConfig,
    floor: &[Vec<f64>; 2],
    master: &[Vec<f64>; 2],
    periodic: &[Periodic],
    max_rate: f64,
    warnings: Vec<String>,
) -> SuiteRun {
    let (series, round_trips, errors) = all_series(cfg, floor, master, periodic, max_rate);
    let mut text = format!(
        "EtherCAT on a simulated segment of {} device(s) (veth pair; simulator on CPU {}, master on CPU {} at SCHED_FIFO {}; µs)\n",
        cfg.devices, cfg.master_cpu, cfg.cell_cpu, cfg.priority
    );
    let ratios = round_trip_text(&series[..round_trips], &mut text);
    task_text(cfg, periodic, &series[round_trips..], &mut text);
    text.push_str(&format!("  highest cycle rate back to back: {max_rate:.0} cycles/s (seed 004 RQ3: >= 20,000)\n"));
    published_text(&mut text);
    let config = serde_json::json!({
        "devices": cfg.devices, "samples": cfg.samples, "rates_hz": cfg.rates, "duration_s": cfg.duration.as_secs_f64(),
        "cell_cpu": cfg.cell_cpu, "master_cpu": cfg.master_cpu, "priority": cfg.priority,
        "frame_timeout_us": cfg.frame_timeout.as_micros() as u64,
        "ratio_master_over_floor": ratios, "master_busy_poll": cfg.master_busy_poll, "sim_busy_poll": cfg.sim_busy_poll,
        "frames": periodic.iter().map(|p| serde_json::json!({ "rate_hz": p.rate, "sent": p.sent, "received": p.received, "lost": p.lost, "overruns": p.overruns, "stolen_ms": p.steal_ms })).collect::<Vec<_>>(),
    });
    let mut suite = Suite::new("ethercat", config);
    suite.series = series;
    SuiteRun { suite, text, warnings, incomplete: stop_requested(), errors, failure: None }
}
