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
    #[command(flatten)]
    cpus: CellCpus,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(args: CapiArgs) -> Result<(&'static str, Common, Plan), Usage> {
    let CapiArgs { steps, round_trips, cpus, common } = args;
    let (master, cell_cpu) = cpus.pick()?;
    let steps = steps.unwrap_or(if common.quick { 100_000 } else { 1_000_000 });
    let round_trips = round_trips.unwrap_or(if common.quick { 40_000 } else { 400_000 });
    if steps == 0 || round_trips < 8 {
        return usage("--steps must be at least 1 and --round-trips at least 8");
    }
    let cfg = rtcell_bench::capi::CapiConfig { master_cpu: master, cell_cpu, steps, round_trips, priority: Some(80) };
    Ok(("capi", common, Plan::Capi(cfg)))
}
