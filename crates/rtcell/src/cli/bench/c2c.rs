//! `rtcell bench c2c`: its options, checked whole before anything starts.

use clap::Args;

use super::*;

#[derive(Args, Clone)]
pub struct C2cArgs {
    /// The two CPUs, e.g. 0,1 (default: the first and the last online CPU).
    #[arg(long, value_delimiter = ',')]
    cpus: Option<Vec<usize>>,
    /// Individually timed round trips (default 1,000,000; --quick 100,000).
    #[arg(long)]
    samples: Option<usize>,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(args: C2cArgs) -> Result<(&'static str, Common, Plan), Usage> {
    let C2cArgs { cpus, samples, common } = args;
    let (a, b) = match cpus.as_deref() {
        Some([a, b]) => {
            let online = online();
            (check_cpu(*a, "first (--cpus)", &online)?, check_cpu(*b, "second (--cpus)", &online)?)
        }
        Some(other) => {
            return usage(format!("--cpus takes exactly two CPUs, e.g. 0,1 (got {} values)", other.len()));
        }
        None => pick_cpus(None, None)?,
    };
    if a == b {
        return usage(format!("--cpus {a},{b}: give two different CPUs"));
    }
    let samples = samples.unwrap_or(if common.quick { 100_000 } else { 1_000_000 });
    if samples == 0 {
        return usage("--samples 0: give at least 1");
    }
    let cfg = C2cConfig {
        cpu_a: a,
        cpu_b: b,
        samples,
        batches: if common.quick { 100 } else { 1000 },
        batch: 1000,
        priority: Some(80),
    };
    Ok(("c2c", common, Plan::C2c(cfg)))
}
