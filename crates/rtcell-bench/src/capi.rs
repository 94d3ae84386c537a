//! `rtcell bench capi`: what C costs against Rust, in one run on the same CPUs.
//!
//! - step: the example controller in C (`examples/c-controller/model.c`, Embedded-Coder layout, compiled
//!   into rtcell with `-O2 -ffp-contract=off`, the flags of its Makefile) and the Rust f64 step, interleaved on the cell CPU over the
//!   reference inputs; every pair of outputs compared bit for bit.
//! - COM round trip: a signal sent from the master CPU and echoed by the cell CPU on a second signal, once
//!   through the C API's AUTOSAR names (`Com_SendSignal` / `Com_ReceiveSignal`, both ends in C) and once
//!   through the Rust API (`ComView::send_signal` / `receive_signal`), in alternating rounds.

use std::ffi::c_void;

use rtcell_control::{Controller64, DEFAULT_MODEL64};
use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::{TscClock, rdtsc_ordered};
use rtcell_report::goal::Goal;
use rtcell_report::table::{Table, fmt_ns};
use rtcell_report::{Kind, Series, Suite, labels};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{ComConfig, ComView, RegionLayout, RegionView, SignalDef};

use crate::{BenchError, SuiteRun, release_thread, series_ns, stop_requested};

// The C side (src/capi/bench.c), linked into this crate by build.rs; it calls the C API of rtcell-capi.
use rtcell_capi as _;
unsafe extern "C" {
    fn rtcell_bench_c_step(r: f64, y: f64) -> f64;
    fn rtcell_bench_c_reset();
    fn rtcell_bench_c_echo(last: u64, give_up: u64) -> i32;
    fn rtcell_bench_c_ping(first: u64, n: u64, rtt: *mut u64, give_up: u64) -> i32;
}

/// Signal ids of the ping-pong region (also in bench.c).
const PING: u16 = 1;
const PONG: u16 = 2;
/// Rounds the round trips are split into, alternating C and Rust.
const ROUNDS: usize = 4;
/// Longest a round may take before its threads give up (the other side is gone or starved of its CPU).
const ROUND_BUDGET_S: u64 = 20;
/// Goal of both ratios (C / Rust, medians).
pub const GOAL: f64 = 1.1;

#[derive(Debug, Clone)]
pub struct CapiConfig {
    pub master_cpu: usize,
    pub cell_cpu: usize,
    /// Controller steps timed per implementation.
    pub steps: usize,
    /// Round trips timed per API.
    pub round_trips: usize,
    pub priority: Option<i32>,
}

struct Steps {
    c: Vec<u64>,
    rust: Vec<u64>,
    mismatches: u64,
    warnings: Vec<String>,
}

/// Both steps, interleaved (alternating which goes first) on the cell CPU.
fn measure_steps(cfg: &CapiConfig) -> Result<Steps, BenchError> {
    let data = rtcell_control::reference::shipped().map_err(|e| BenchError::Other(format!("reference data: {e}")))?;
    let req = RtRequest { cpu: Some(cfg.cell_cpu), fifo_priority: cfg.priority, lock_memory: false };
    let steps = cfg.steps;
    let h = std::thread::Builder::new()
        .name("capi-steps".into())
        .spawn(move || -> Result<Steps, String> {
            let warnings = apply_rt(&req).map_err(|e| e.to_string())?;
            let mut ctrl = Controller64::new(&DEFAULT_MODEL64);
            let (mut c, mut rust) = (Vec::with_capacity(steps), Vec::with_capacity(steps));
            let mut mismatches = 0;
            let n = data.r.len();
            for k in 0..steps {
                let i = k % n;
                if i == 0 {
                    ctrl = Controller64::new(&DEFAULT_MODEL64);
                    // SAFETY: a C function without arguments that zeroes the C model's globals; only this
                    // thread uses them.
                    unsafe { rtcell_bench_c_reset() };
                }
                let (r, y) = (data.r[i], data.y[i]);
                let time_c = || {
                    let t0 = rdtsc_ordered();
                    // SAFETY: as above: the C step on this thread's model.
                    let u = unsafe { rtcell_bench_c_step(r, y) };
                    (u, rdtsc_ordered().wrapping_sub(t0))
                };
                let (uc, tc, ur, tr) = if k % 2 == 0 {
                    let (uc, tc) = time_c();
                    let t0 = rdtsc_ordered();
                    let ur = std::hint::black_box(ctrl.step(r, y));
                    (uc, tc, ur, rdtsc_ordered().wrapping_sub(t0))
                } else {
                    let t0 = rdtsc_ordered();
                    let ur = std::hint::black_box(ctrl.step(r, y));
                    let tr = rdtsc_ordered().wrapping_sub(t0);
                    let (uc, tc) = time_c();
                    (uc, tc, ur, tr)
                };
                if uc.to_bits() != ur.to_bits() {
                    mismatches += 1;
                }
                c.push(tc);
                rust.push(tr);
                if k % 65_536 == 0 && stop_requested() {
                    break;
                }
            }
            Ok(Steps { c, rust, mismatches, warnings })
        })
        .map_err(|e| BenchError::Other(format!("cannot start the step thread: {e}")))?;
    match h.join() {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(BenchError::Other(format!("step thread on CPU {}: {e}", cfg.cell_cpu))),
        Err(_) => Err(BenchError::Other("the step thread panicked".into())),
    }
}

/// A region with COM channels `ping` (signal 1) and `pong` (signal 2), 8 bytes each.
fn pingpong_region() -> Result<SharedMemory, BenchError> {
    let e = |e: rtcell_shm::LayoutError| BenchError::Other(format!("ping-pong region: {e}"));
    let one =
        |id| ComConfig { signals: vec![SignalDef { id, max_len: 8, dynamic: false, group: None }], groups: vec![] };
    let mut l = RegionLayout::new();
    l.com("ping", one(PING)).map_err(e)?.com("pong", one(PONG)).map_err(e)?;
    let shm = SharedMemory::create_anonymous("capi-bench", l.size_bytes())
        .map_err(|e| BenchError::Other(format!("shared memory: {e}")))?;
    l.init(shm.words(), std::process::id()).map_err(e)?;
    Ok(shm)
}

/// Binds this thread's C API context to every COM channel of `shm`.
fn c_attach(shm: &SharedMemory) -> Result<(), String> {
    // SAFETY: the region stays mapped until both ping-pong threads have finished with it.
    let code =
        unsafe { rtcell_capi::com::rtcell_cell_attach(shm.as_ptr() as *mut c_void, shm.len(), std::ptr::null(), 0) };
    if code == rtcell_capi::E_OK { Ok(()) } else { Err(format!("rtcell_cell_attach returned {code:#04x}")) }
}

fn timed_out() -> String {
    format!("no answer within {ROUND_BUDGET_S} s: is another real-time program using these CPUs?")
}

/// The C API's message for this thread's last failure.
fn last_error() -> String {
    let p = rtcell_capi::rtcell_last_error();
    // SAFETY: rtcell_last_error returns a NUL-terminated string (never NULL) valid until the next call.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn rust_echo(shm: &SharedMemory, last: u64, give_up: u64) -> Result<(), String> {
    let region = RegionView::attach(shm.words()).map_err(|e| e.to_string())?;
    let (ping, pong) = (com(&region, "ping")?, com(&region, "pong")?);
    let (mut seen_word, mut seen, mut buf, mut polls) = (0u64, 0u64, [0u8; 8], 0u32);
    loop {
        polls = polls.wrapping_add(1);
        if polls % 4096 == 0 && rdtsc_ordered() > give_up {
            return Err(timed_out());
        }
        // Busy: the pinger was preempted mid-write (a vCPU the host stopped); read again.
        match ping.receive_signal(PING, &mut buf, &mut seen_word) {
            Ok(_) | Err(rtcell_shm::ComError::Busy) => {}
            Err(e) => return Err(format!("{e:?}")),
        }
        let v = u64::from_le_bytes(buf);
        if v != seen {
            seen = v;
            pong.send_signal(PONG, &buf).map_err(|e| format!("{e:?}"))?;
            if v == last {
                return Ok(());
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

fn com<'a>(region: &RegionView<'a>, name: &str) -> Result<ComView<'a>, String> {
    region.com(name).map_err(|e| format!("{name}: {e}"))
}

fn rust_ping(shm: &SharedMemory, first: u64, rtt: &mut [u64], give_up: u64) -> Result<(), String> {
    let region = RegionView::attach(shm.words()).map_err(|e| e.to_string())?;
    let (ping, pong) = (com(&region, "ping")?, com(&region, "pong")?);
    let (mut seen, mut buf) = (0u64, [0u8; 8]);
    for (i, slot) in rtt.iter_mut().enumerate() {
        let v = first + i as u64;
        let t0 = rdtsc_ordered();
        ping.send_signal(PING, &v.to_le_bytes()).map_err(|e| format!("{e:?}"))?;
        let mut polls = 0u32;
        loop {
            match pong.receive_signal(PONG, &mut buf, &mut seen) {
                Ok(_) | Err(rtcell_shm::ComError::Busy) => {}
                Err(e) => return Err(format!("{e:?}")),
            }
            if u64::from_le_bytes(buf) == v {
                break;
            }
            polls = polls.wrapping_add(1);
            if polls % 4096 == 0 && rdtsc_ordered() > give_up {
                return Err(timed_out());
            }
        }
        *slot = rdtsc_ordered().wrapping_sub(t0);
    }
    Ok(())
}

/// One round of `n` round trips through the C API (`c`) or the Rust API, values from `first`.
fn round(
    tsc: &TscClock,
    cfg: &CapiConfig,
    shm: &SharedMemory,
    c: bool,
    first: u64,
    n: usize,
) -> Result<Vec<u64>, String> {
    let last = first + n as u64 - 1;
    let give_up = rdtsc_ordered() + tsc.ns_to_ticks(ROUND_BUDGET_S as f64 * 1e9);
    let req = RtRequest { cpu: Some(cfg.cell_cpu), fifo_priority: cfg.priority, lock_memory: false };
    let ready = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let echo = s.spawn(|| -> Result<(), String> {
            let pinned = apply_rt(&req).map_err(|e| e.to_string());
            // Whatever happened, let the pinger go on (it sleeps until then: a spinning real-time pinger
            // on this thread's first CPU would keep it from ever running).
            ready.store(true, std::sync::atomic::Ordering::Release);
            pinned?;
            if c {
                c_attach(shm)?;
                // SAFETY: the C echo on this thread's context, bound just above.
                match unsafe { rtcell_bench_c_echo(last, give_up) } {
                    0 => Ok(()),
                    2 => Err(timed_out()),
                    _ => Err(format!("the C echo failed: {}", last_error())),
                }
            } else {
                rust_echo(shm, last, give_up)
            }
        });
        while !ready.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut rtt = vec![0u64; n];
        let pinged = if c {
            c_attach(shm).and_then(|()| {
                // SAFETY: rtt holds n slots; the C ping runs on this thread's context, bound just above.
                match unsafe { rtcell_bench_c_ping(first, n as u64, rtt.as_mut_ptr(), give_up) } {
                    0 => Ok(()),
                    2 => Err(timed_out()),
                    _ => Err(format!("the C ping failed: {}", last_error())),
                }
            })
        } else {
            rust_ping(shm, first, &mut rtt, give_up)
        };
        let echoed = echo.join().map_err(|_| "the echo thread panicked".to_string())?;
        // The echo's own failure explains a pinger that timed out waiting for it.
        echoed.and(pinged).map(|()| rtt)
    })
}

/// `rtcell bench capi`.
pub fn run(tsc: &TscClock, cfg: &CapiConfig) -> Result<SuiteRun, BenchError> {
    crate::progress!("capi: C and Rust controller steps on CPU {} ...", cfg.cell_cpu);
    let steps = measure_steps(cfg)?;
    crate::progress!("capi: COM round trips CPU {} <-> CPU {}, C API and Rust API ...", cfg.master_cpu, cfg.cell_cpu);
    let mut warnings = steps.warnings.clone();
    warnings.extend(apply_rt(&RtRequest {
        cpu: Some(cfg.master_cpu),
        fifo_priority: cfg.priority,
        lock_memory: false,
    })?);
    let shm = pingpong_region()?;
    let (mut c_rtt, mut rust_rtt) = (Vec::new(), Vec::new());
    let per_round = (cfg.round_trips / ROUNDS).max(1);
    let mut next = 1u64;
    let mut incomplete = false;
    for r in 0..ROUNDS * 2 {
        if stop_requested() {
            incomplete = true;
            break;
        }
        // C, Rust, Rust, C, ...: neither always goes first.
        let c = (r % 4 == 0) || (r % 4 == 3);
        let got = round(tsc, cfg, &shm, c, next, per_round);
        next += per_round as u64;
        match got {
            Ok(v) if c => c_rtt.extend(v),
            Ok(v) => rust_rtt.extend(v),
            Err(e) => {
                release_thread();
                return Err(BenchError::Other(format!("COM round trip ({} API): {e}", if c { "C" } else { "Rust" })));
            }
        }
    }
    release_thread();

    let cell = cfg.cell_cpu.to_string();
    let series = vec![
        series_ns(tsc, "capi_step_exec", labels!("impl" => "c", "cpu" => cell.clone()), Kind::ExecTime, &steps.c),
        series_ns(tsc, "capi_step_exec", labels!("impl" => "rust", "cpu" => cell.clone()), Kind::ExecTime, &steps.rust),
        series_ns(
            tsc,
            "capi_com_round_trip",
            labels!("api" => "c", "cpus" => format!("{}-{}", cfg.master_cpu, cfg.cell_cpu)),
            Kind::RoundTrip,
            &c_rtt,
        ),
        series_ns(
            tsc,
            "capi_com_round_trip",
            labels!("api" => "rust", "cpus" => format!("{}-{}", cfg.master_cpu, cfg.cell_cpu)),
            Kind::RoundTrip,
            &rust_rtt,
        ),
    ];
    let what = [
        "controller step, C (model_step), exec time",
        "controller step, Rust f64, exec time",
        "Com_SendSignal + Com_ReceiveSignal, C API, round trip",
        "send_signal + receive_signal, Rust API, round trip",
    ];
    let mut t = Table::new(&["what", "unit", "count", "min", "median", "mean", "p99", "p99.9", "max"]);
    for (s, w) in series.iter().zip(what) {
        let st = &s.stats;
        t.row(vec![
            w.into(),
            "ns".into(),
            st.count.to_string(),
            fmt_ns(st.min),
            fmt_ns(st.median),
            fmt_ns(st.mean),
            fmt_ns(st.p99),
            fmt_ns(st.p999),
            fmt_ns(st.max),
        ]);
    }
    let ratio = |a: &Series, b: &Series| if b.stats.median > 0.0 { a.stats.median / b.stats.median } else { f64::NAN };
    let (step_ratio, rtt_ratio) = (ratio(&series[0], &series[1]), ratio(&series[2], &series[3]));
    let verdict = |r: f64| Goal::AtMost(GOAL).verdict(r);
    let mut text = format!(
        "C against Rust: the controller step on CPU {} (thread, SCHED_FIFO {}, interleaved), and a COM signal round trip CPU {} <-> CPU {} (ns)\n",
        cfg.cell_cpu,
        cfg.priority.map_or("-".into(), |p| p.to_string()),
        cfg.master_cpu,
        cfg.cell_cpu
    );
    text.push_str(&t.render());
    text.push('\n');
    text.push_str(&format!(
        "Ratios of medians from this run:\n  C step / Rust step: {step_ratio:.3} x ({} / {} ns; goal <= {GOAL}: {})\n  C API round trip / Rust API round trip: {rtt_ratio:.3} x ({} / {} ns; goal <= {GOAL}: {})\n",
        fmt_ns(series[0].stats.median),
        fmt_ns(series[1].stats.median),
        verdict(step_ratio),
        fmt_ns(series[2].stats.median),
        fmt_ns(series[3].stats.median),
        verdict(rtt_ratio),
    ));
    text.push_str(&format!(
        "Outputs: {} steps compared, {} C outputs differed from Rust's (bit for bit)\n",
        steps.c.len(),
        steps.mismatches
    ));
    let config = serde_json::json!({
        "master_cpu": cfg.master_cpu, "cell_cpu": cfg.cell_cpu, "steps": cfg.steps,
        "round_trips": cfg.round_trips, "priority": cfg.priority, "rounds": ROUNDS * 2,
        "c_flags": "-O2 -ffp-contract=off", "step_ratio": step_ratio, "round_trip_ratio": rtt_ratio, "goal": GOAL,
        "step_mismatches": steps.mismatches,
    });
    let mut suite = Suite::new("capi", config);
    suite.series = series;
    Ok(SuiteRun { suite, text, warnings, incomplete, errors: steps.mismatches, failure: None })
}
