//! `rtcell bench gateway`: its options, checked whole before anything starts.

use clap::Args;

use super::*;

#[derive(Args, Clone)]
pub struct GatewayArgs {
    /// The scenario (it must have the task and the writable signal below).
    #[arg(long, default_value = "examples/offload.toml")]
    scenario: PathBuf,
    /// The task whose activation latency and overruns are judged.
    #[arg(long, default_value = "master")]
    task: String,
    /// The writable signal written during the load.
    #[arg(long, default_value = "master.trim")]
    signal: String,
    /// Length of each phase (default 60s; --quick 5s).
    #[arg(long)]
    phase: Option<String>,
    /// Statistics reads per second during the load.
    #[arg(long, default_value_t = 1000)]
    reads: u32,
    /// Signal writes per second during the load.
    #[arg(long, default_value_t = 100)]
    writes: u32,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(args: GatewayArgs) -> Result<(&'static str, Common, Plan), Usage> {
    let GatewayArgs { scenario, task, signal, phase, reads, writes, common } = args;
    let phase = match phase {
        Some(p) => rtcell_scenario::parse_duration(&p).map_err(|e| Usage(format!("--phase {e}")))?,
        None if common.quick => std::time::Duration::from_secs(5),
        None => std::time::Duration::from_secs(60),
    };
    if phase < std::time::Duration::from_secs(1) {
        return usage("--phase must be at least 1s");
    }
    if !(1..=20_000).contains(&reads) || !(1..=1_000).contains(&writes) {
        return usage("--reads must be 1 to 20000 per second and --writes 1 to 1000");
    }
    if let Err((m, _)) = run::load_plan(&scenario, None, &[]) {
        return usage(format!("--scenario {}:\n{m}", scenario.display()));
    }
    let cfg = gateway_bench::GatewayBenchConfig {
        scenario,
        task,
        signal,
        phase,
        reads_per_s: reads,
        writes_per_s: writes,
        scrape_every: std::time::Duration::from_secs(1),
        history: common.history.path.clone(),
        hostile: Default::default(),
    };
    Ok(("gateway", common, Plan::Gateway(cfg)))
}
