//! `rtcell bench capi`: its options, checked whole before anything starts.

use clap::Args;

use super::*;

#[derive(Args, Clone)]
pub struct CapiArgs {
    /// Controller steps timed per implementation (default 1,000,000; --quick 100,000).
    #[arg(long)]
    steps: Option<usize>,
    /// Signal round trips timed per API (default 400,000; --quick 40,000).
    #[arg(long)]
    round_trips: Option<usize>,
    /// The cell CPU (default: the last online CPU).
    #[arg(long)]
    cpu: Option<usize>,
    /// The master's CPU (default: the first online CPU that is not the cell's).
    #[arg(long)]
    master_cpu: Option<usize>,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(args: CapiArgs) -> Result<(&'static str, Common, Plan), Usage> {
    let CapiArgs { steps, round_trips, cpu, master_cpu, common } = args;
    let (master, cell_cpu) = pick_cpus(master_cpu, cpu)?;
    let steps = steps.unwrap_or(if common.quick { 100_000 } else { 1_000_000 });
    let round_trips = round_trips.unwrap_or(if common.quick { 40_000 } else { 400_000 });
    if steps == 0 || round_trips < 8 {
        return usage("--steps must be at least 1 and --round-trips at least 8");
    }
    let cfg = rtcell_bench::capi::CapiConfig { master_cpu: master, cell_cpu, steps, round_trips, priority: Some(80) };
    Ok(("capi", common, Plan::Capi(cfg)))
}
