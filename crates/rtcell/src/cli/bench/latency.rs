//! `rtcell bench latency`: its options, checked whole before anything starts.

use clap::Args;
use rtcell_bench::latency::{self, LatencyConfig, Mode};
use rtcell_cells::CellKind;
use rtcell_loads::{LOAD_HELP, Load};

use super::{Common, Plan, Usage, default_out, pick_cpus, usage};

pub const AFTER_HELP: &str = "Examples:
  rtcell bench latency --quick
  rtcell bench latency --mode poll --vs cyclictest --load memcpy --duration 60s
  rtcell bench latency --mode nanosleep,poll --cell thread,process --period 500 --out lat-run

Every figure is the lateness of one activation (actual start - intended release), one way, in us: \
min, avg, stddev, median, p99, p99.9, p99.99, max, and the overruns (releases skipped because an \
activation came more than a period late). Beside results.json: latency.hist (cyclictest -h layout, \
one column per mode) and latency.json (cyclictest --json layout); with --vs cyclictest, cyclictest's \
own cyclictest-roundN.hist/.json. --vs cyclictest needs Debian's rt-tests (apt-get install rt-tests, \
or scripts/setup).

Exit status: 0 done; 1 a measurement failed (what ran is written, marked incomplete); 2 bad input \
(nothing started); 130 Ctrl-C (what was measured is written, marked incomplete).";

#[derive(Args, Clone)]
pub struct LatencyArgs {
    /// How the activity waits for its release: nanosleep (clock_nanosleep on a SCHED_FIFO thread, the
    /// cyclictest method), poll (a cell busy-polls the TSC), kvm (the same in a kvm cell), or auto (all
    /// three; kvm only where /dev/kvm is usable).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    mode: Vec<String>,
    /// Cell kinds of the poll mode: thread, process.
    #[arg(long, value_delimiter = ',', default_value = "thread")]
    cell: Vec<String>,
    /// The CPU to measure on (default: the last online CPU); the load runs on the others.
    #[arg(long)]
    cpu: Option<usize>,
    /// Activation period in us: nanosleep and --vs cyclictest at least 50, poll and kvm at least 10, at
    /// most 1000000.
    #[arg(long, default_value_t = 1000)]
    period: u64,
    /// Measured time per mode (and for cyclictest), e.g. 60s, 500ms, 2m (default 60s; --quick 10s).
    #[arg(long)]
    duration: Option<String>,
    /// SCHED_FIFO priority of the measuring thread, cell or vCPU, and of cyclictest (1..=99).
    #[arg(long, default_value_t = 95)]
    priority: i32,
    #[arg(long, default_value = "none", help = LOAD_HELP)]
    load: String,
    /// Run this tool too, on the same CPU with the same period and priority, in rounds alternating with
    /// rtcell's own (4 rounds each of duration / 4), and set the two side by side: cyclictest.
    #[arg(long)]
    vs: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options (with the run directory fixed: the suite writes files into it) and
/// plan, or what is wrong with the options.
pub fn plan(a: LatencyArgs) -> Result<(&'static str, Common, Plan), Usage> {
    let kvm = rtcell_kvm::kvm_status();
    let mut cells = Vec::new();
    for c in &a.cell {
        match c.parse::<CellKind>() {
            Ok(k @ (CellKind::Thread | CellKind::Process)) => {
                if !cells.contains(&k) {
                    cells.push(k);
                }
            }
            Ok(CellKind::Kvm) => return usage("--cell kvm: the kvm cell is its own mode: use --mode kvm"),
            Err(e) => return usage(format!("--cell: {e}")),
        }
    }
    let mut modes = Vec::new();
    let add = |m: Mode, modes: &mut Vec<Mode>| {
        if !modes.contains(&m) {
            modes.push(m);
        }
    };
    for m in &a.mode {
        match m.as_str() {
            "nanosleep" => add(Mode::Nanosleep, &mut modes),
            "poll" => cells.iter().for_each(|&k| add(Mode::Poll(k), &mut modes)),
            "kvm" if !kvm.is_usable() => return usage(format!("--mode kvm: {}", kvm.explain())),
            "kvm" => add(Mode::Poll(CellKind::Kvm), &mut modes),
            "auto" => {
                add(Mode::Nanosleep, &mut modes);
                cells.iter().for_each(|&k| add(Mode::Poll(k), &mut modes));
                if kvm.is_usable() {
                    add(Mode::Poll(CellKind::Kvm), &mut modes);
                } else {
                    eprintln!("latency: kvm mode skipped: {}", kvm.explain());
                }
            }
            other => return usage(format!("--mode: unknown mode {other:?}: use nanosleep, poll, kvm or auto")),
        }
    }
    let (master, cpu) = pick_cpus(None, a.cpu)?;
    let duration = match &a.duration {
        Some(d) => rtcell_scenario::parse_duration(d).map_err(|e| Usage(format!("--duration {e}")))?,
        None if a.common.quick => latency::QUICK_DURATION,
        None => latency::DEFAULT_DURATION,
    };
    let (lo, hi) = rtcell_host::sched::fifo_priority_range();
    if !(lo..=hi).contains(&a.priority) {
        return usage(format!("--priority {}: SCHED_FIFO priorities are {lo}..={hi}", a.priority));
    }
    let load: Load = a.load.parse().map_err(|e| Usage(format!("--load: {e}")))?;
    let cyclictest = match a.vs.as_deref() {
        None => None,
        Some("cyclictest") => Some(rtcell_bench::latency::cyclictest::find().map_err(Usage)?),
        Some(other) => return usage(format!("--vs {other:?}: the tool to compare with can be cyclictest")),
    };
    let mut common = a.common;
    let out = common.out.clone().unwrap_or_else(|| default_out("latency"));
    common.out = Some(out.clone());
    let online = rtcell_host::cpu::online_cpus().unwrap_or_else(|_| vec![master, cpu]);
    let cfg = LatencyConfig {
        cpu,
        modes,
        period_us: a.period,
        duration,
        priority: a.priority,
        load,
        load_cpus: online.into_iter().filter(|&c| c != cpu).collect(),
        cyclictest,
        out_dir: out,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    cfg.check().map_err(Usage)?;
    Ok(("latency", common, Plan::Latency(cfg)))
}
