//! `rtcell bench loopback`: its options, checked whole before anything starts.

use clap::Args;

use super::*;

#[derive(Args, Clone)]
pub struct LoopbackArgs {
    /// Payload sizes in bytes (default 0,1,8,16,32,64,128,256,512,1024; at most 65536).
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    /// Round trips per size (default 1,000,000; --quick 100,000).
    #[arg(long)]
    iterations: Option<usize>,
    /// Cell kinds to measure: thread, process, kvm, or auto (thread, process, and kvm when /dev/kvm is
    /// usable).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    cell: Vec<String>,
    /// How the idle side waits: poll (busy-poll shared memory) or futex (sleep until woken).
    #[arg(long, value_delimiter = ',', default_value = "poll")]
    notify: Vec<String>,
    #[arg(long, default_value = "none", help = rtcell_loads::LOAD_HELP)]
    load: String,
    #[command(flatten)]
    cpus: CellCpus,
    /// Skip the pipe baseline.
    #[arg(long)]
    no_baseline: bool,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(args: LoopbackArgs, pre_warnings: &mut Vec<String>) -> Result<(&'static str, Common, Plan), Usage> {
    let LoopbackArgs { sizes, iterations, cell, notify, load, cpus, no_baseline, common } = args;
    let (master, cell_cpu) = cpus.pick()?;
    let sizes = sizes.unwrap_or_else(|| loopback_suite::DEFAULT_SIZES.to_vec());
    if sizes.is_empty() {
        return usage("--sizes is empty: give at least one payload size");
    }
    if let Some(&s) = sizes.iter().find(|&&s| s > loopback_suite::MAX_PAYLOAD) {
        return usage(format!(
            "--sizes: {s} bytes is above the maximum frame of {} bytes; use sizes up to {}",
            loopback_suite::MAX_PAYLOAD,
            loopback_suite::MAX_PAYLOAD
        ));
    }
    let iterations = iterations.unwrap_or(if common.quick { 100_000 } else { 1_000_000 });
    if iterations == 0 {
        return usage("--iterations 0: give at least 1 round trip per size");
    }
    let cells = parse_cells(&cell, pre_warnings)?;
    let mut notifies = Vec::new();
    for n in &notify {
        let k: Notify = n.parse().map_err(|e| Usage(format!("--notify: {e}")))?;
        if !notifies.contains(&k) {
            notifies.push(k);
        }
    }
    let load: Load = load.parse().map_err(|e| Usage(format!("--load: {e}")))?;
    let cfg = LoopbackConfig {
        master_cpu: master,
        cell_cpu,
        sizes,
        iterations,
        cells,
        notify: notifies,
        load,
        pipe_baseline: !no_baseline,
        c2c_floor: true,
        master_priority: Some(80),
        cell_priority: Some(90),
        seed: 0x5eed_0000_0000_0001,
    };
    Ok(("loopback", common, Plan::Loopback(cfg)))
}
