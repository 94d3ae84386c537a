//! `rtcell bench itc`: its options, checked whole before anything starts.

use clap::Args;
use rtcell_bench::itc::{self, ItcConfig, Mechanism, Placement, Trigger};
use rtcell_loads::{LOAD_HELP, Load};

use super::{Common, Plan, Usage, check_cpu, online, pick_cpus, usage};

pub const AFTER_HELP: &str = "Examples:
  rtcell bench itc --quick
  rtcell bench itc --mechanism pipe,mqueue,semaphore,ring-poll --sizes 4,3072
  rtcell bench itc --trigger periodic --periodic-iterations 1000 --load stress-ng
  rtcell bench itc --placement cross-cpu --cpus 0,1 --iterations 100000 --out itc-run

What is measured (seed 002, section 5.1, on this Linux): two SCHED_FIFO threads, the requester at
priority 95 and the responder at 90, on one CPU (same-cpu) or on two (cross-cpu), exchange a
payload. The requester sends S random bytes, the responder receives them into its own buffer and
sends them back, the requester checks every byte and times the round trip (request -> reply) with
the TSC. Back to back, or periodic: one exchange per period (seed 002: every 10 ms), both threads
asleep in between.

Payloads: pipe, fifo, mqueue, unix-stream and unix-dgram carry the payload through the kernel (two
pipes, two FIFOs, two message queues: one per direction; one socket pair). semaphore, mutex,
condvar, futex and eventfd only signal: each guards a shared buffer per direction that holds the
payload (written before the signal, read after the wake-up), so every mechanism moves the same
bytes at every size and every reply is checked. mutex is three priority-inheritance mutexes handed
over in rotation, each unlocked only by its owner. ring-futex and ring-poll are rtcell rings, the
receiver asleep in a futex wait or busy-polling.

Output: per placement and trigger a table of median round trips in us (rows mechanism, columns
payload bytes) with the worst p99.9 and max; every statistic of every cell (min, median, p99,
p99.9, max, ...) in results.json, series itc_rtt. ring-poll on one CPU is not applicable (a polled
channel needs its own CPU: the higher-priority side would spin forever) and shows n/a. A watchdog
stops a measurement in which no exchange completes for 2 s (or two periods + 1 s), counts it as an
error and goes on. The last lines give the speed goal: the best kernel mechanism's median over the
polled ring's, cross-CPU and back to back, at 4 and 3072 bytes (goal >= 20 x).

A full run (12 mechanisms x 11 sizes x 2 placements x 2 triggers) takes about 10 minutes, mostly
the periodic cells (200 x 10 ms each); --quick about 1 minute.

Exit status: 0 done, every reply correct; 1 a reply was wrong or a measurement was stopped
(everything is still written); 2 bad input (nothing started); 130 Ctrl-C (what was measured is
written, marked incomplete).";

#[derive(Args, Clone)]
pub struct ItcArgs {
    /// Mechanisms, or all: pipe, fifo, mqueue, unix-stream, unix-dgram (payload through the kernel);
    /// semaphore, mutex (pthread, priority inheritance), condvar, futex, eventfd (signal only: each guards
    /// a shared payload buffer); ring-futex, ring-poll (rtcell rings).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    mechanism: Vec<String>,
    /// Payload sizes in bytes, 1..=65536 (default 4,8,16,32,64,128,256,512,1024,2048,3072, as seed 002).
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    /// Where the two threads run: same-cpu (both on the requester's CPU), cross-cpu (one CPU each).
    #[arg(long, value_delimiter = ',', default_value = "same-cpu,cross-cpu")]
    placement: Vec<String>,
    /// When the requester starts an exchange: back-to-back (right after the reply), periodic (once per
    /// --period-us).
    #[arg(long, value_delimiter = ',', default_value = "back-to-back,periodic")]
    trigger: Vec<String>,
    /// Measured exchanges per mechanism, size and placement, back to back (default 10,000; --quick
    /// 1,000), after 1,000 warm-up exchanges.
    #[arg(long)]
    iterations: Option<usize>,
    /// Measured exchanges per mechanism, size and placement, periodic (default 200; --quick 20), after 2
    /// warm-up exchanges.
    #[arg(long)]
    periodic_iterations: Option<usize>,
    /// Period of the periodic trigger in us, 100..=10000000 (default 10000: seed 002's 10 ms).
    #[arg(long, default_value_t = itc::DEFAULT_PERIOD_US)]
    period_us: u64,
    #[arg(long, default_value = "none", help = LOAD_HELP)]
    load: String,
    /// The requester's CPU and the responder's for cross-cpu, e.g. 0,1 (default: the first online CPU and
    /// the last). same-cpu runs both threads on the first; one CPU is enough for same-cpu alone.
    #[arg(long, value_delimiter = ',')]
    cpus: Option<Vec<usize>>,
    #[command(flatten)]
    common: Common,
}

/// Parses a list option, keeping the first occurrence of each value.
fn parse_list<T: std::str::FromStr<Err = String> + PartialEq>(
    values: &[String],
    option: &str,
) -> Result<Vec<T>, Usage> {
    let mut out = Vec::new();
    for v in values {
        let x: T = v.trim().parse().map_err(|e| Usage(format!("{option}: {e}")))?;
        if !out.contains(&x) {
            out.push(x);
        }
    }
    if out.is_empty() {
        return usage(format!("{option} is empty: give at least one value"));
    }
    Ok(out)
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(a: ItcArgs) -> Result<(&'static str, Common, Plan), Usage> {
    let mechanisms: Vec<Mechanism> = if a.mechanism.iter().any(|m| m.trim() == "all") {
        Mechanism::ALL.to_vec()
    } else {
        parse_list(&a.mechanism, "--mechanism")?
    };
    let sizes = a.sizes.unwrap_or_else(|| itc::DEFAULT_SIZES.to_vec());
    if sizes.is_empty() {
        return usage("--sizes is empty: give at least one payload size in bytes, e.g. --sizes 4,3072");
    }
    if sizes.contains(&0) {
        return usage(format!(
            "--sizes: 0 bytes: every mechanism carries a payload (the signalling ones in a shared buffer they guard); give sizes from 1 to {}",
            itc::MAX_SIZE
        ));
    }
    if let Some(&s) = sizes.iter().find(|&&s| s > itc::MAX_SIZE) {
        return usage(format!(
            "--sizes: {s} bytes is above the maximum payload of {} bytes; use sizes from 1 to {}",
            itc::MAX_SIZE,
            itc::MAX_SIZE
        ));
    }
    let placements: Vec<Placement> = parse_list(&a.placement, "--placement")?;
    let triggers: Vec<Trigger> = parse_list(&a.trigger, "--trigger")?;
    let quick = a.common.quick;
    let iterations = a.iterations.unwrap_or(if quick { itc::QUICK_ITERATIONS } else { itc::DEFAULT_ITERATIONS });
    if iterations == 0 {
        return usage("--iterations 0: give at least 1 exchange per cell");
    }
    let periodic_iterations = a.periodic_iterations.unwrap_or(if quick {
        itc::QUICK_PERIODIC_ITERATIONS
    } else {
        itc::DEFAULT_PERIODIC_ITERATIONS
    });
    if periodic_iterations == 0 {
        return usage("--periodic-iterations 0: give at least 1 exchange per cell");
    }
    if !(100..=10_000_000).contains(&a.period_us) {
        return usage(format!(
            "--period-us {}: give a period from 100 us to 10000000 us (10 s); seed 002 used 10000",
            a.period_us
        ));
    }
    let load: Load = a.load.parse().map_err(|e| Usage(format!("--load: {e}")))?;
    let cross = placements.contains(&Placement::CrossCpu);
    let (requester_cpu, responder_cpu) = match a.cpus.as_deref() {
        Some([r]) => {
            let r = check_cpu(*r, "requester (--cpus)", &online())?;
            if cross {
                return usage(format!(
                    "--cpus {r}: cross-cpu needs a second CPU for the responder, e.g. --cpus {r},N (or --placement same-cpu)"
                ));
            }
            (r, r)
        }
        Some([r, s]) => {
            let online = online();
            let (r, s) = (check_cpu(*r, "requester (--cpus)", &online)?, check_cpu(*s, "responder (--cpus)", &online)?);
            if cross && r == s {
                return usage(format!("--cpus {r},{s}: cross-cpu needs two different CPUs, e.g. --cpus 0,1"));
            }
            (r, s)
        }
        Some(other) => {
            return usage(format!(
                "--cpus takes the requester's CPU and the responder's, e.g. 0,1 (got {} values)",
                other.len()
            ));
        }
        None if cross => pick_cpus(None, None)?,
        None => {
            let first = online().first().copied().unwrap_or(0);
            (first, first)
        }
    };
    let cfg = ItcConfig {
        requester_cpu,
        responder_cpu,
        mechanisms,
        sizes,
        placements,
        triggers,
        iterations,
        periodic_iterations,
        period_us: a.period_us,
        load,
        seed: 0x5eed_0000_0000_0002,
    };
    Ok(("itc", a.common, Plan::Itc(cfg)))
}
