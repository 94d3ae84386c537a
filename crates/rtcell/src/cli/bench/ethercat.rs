//! `rtcell bench ethercat`: its options, checked whole before anything starts.

use clap::Args;

use super::*;

#[derive(Args, Clone)]
pub struct EthercatArgs {
    /// Simulated SubDevices on the segment.
    #[arg(long, default_value_t = 3)]
    devices: u16,
    /// Round trips timed for the floor and for the master (default 10,000; --quick 1,000).
    #[arg(long)]
    samples: Option<usize>,
    /// Cycle rates of the master task, Hz.
    #[arg(long, value_delimiter = ',', default_value = "1000,20000")]
    rates: Vec<u32>,
    /// How long the master task runs at each rate (default 10s; --quick 2s).
    #[arg(long)]
    duration: Option<String>,
    /// The master's CPU (default: the last online CPU).
    #[arg(long)]
    cpu: Option<usize>,
    /// The simulator's CPU (default: the first online CPU that is not the master's).
    #[arg(long)]
    master_cpu: Option<usize>,
    /// Let the simulator sleep on its socket instead of busy-polling it (then its own wake-up adds
    /// to every round trip).
    #[arg(long)]
    sim_sleeps: bool,
    /// Let the master task busy-poll for each reply instead of sleeping until it arrives (the
    /// round trips are timed both ways regardless).
    #[arg(long)]
    master_busy_poll: bool,
    #[arg(long, default_value = "none", help = rtcell_loads::LOAD_HELP)]
    load: String,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(args: EthercatArgs) -> Result<(&'static str, Common, Plan), Usage> {
    let EthercatArgs { devices, samples, rates, duration, cpu, master_cpu, sim_sleeps, master_busy_poll, load, common } =
        args;
    let (sim_cpu, cell_cpu) = pick_cpus(master_cpu, cpu)?;
    let samples = samples.unwrap_or(if common.quick { 1_000 } else { 10_000 });
    let duration = match duration {
        Some(d) => rtcell_scenario::parse_duration(&d).map_err(|e| Usage(format!("--duration {e}")))?,
        None if common.quick => std::time::Duration::from_secs(2),
        None => std::time::Duration::from_secs(10),
    };
    if !(1..=rtcell_ecat::master::MAX_DEVICES as u16).contains(&devices) {
        return usage(format!("--devices must be 1 to {}", rtcell_ecat::master::MAX_DEVICES));
    }
    if samples == 0 || rates.is_empty() || rates.iter().any(|r| !(1..=100_000).contains(r)) {
        return usage("--samples must be at least 1 and every --rates value 1 to 100000 Hz");
    }
    // SAFETY: getuid only reads the process's user id.
    if unsafe { libc::getuid() } != 0 {
        return usage("bench ethercat creates a veth pair and opens raw sockets: run it as root");
    }
    let cfg = rtcell_bench::ethercat::EthercatConfig {
        devices,
        samples,
        rates,
        duration,
        max_rate_for: std::time::Duration::from_secs(if common.quick { 1 } else { 3 }),
        cell_cpu,
        master_cpu: sim_cpu,
        priority: 80,
        frame_timeout: std::time::Duration::from_millis(10),
        sim_busy_poll: !sim_sleeps,
        master_busy_poll,
        load: load.parse().map_err(|e| Usage(format!("--load: {e}")))?,
    };
    Ok(("ethercat", common, Plan::Ethercat(cfg)))
}
