//! `rtcell bench control`: its options, checked whole before anything starts.

use clap::Args;

use super::*;

#[derive(Args, Clone)]
pub struct ControlArgs {
    /// Controller steps per precision and cell kind: the 2,000 reference inputs looped (default
    /// 2,000,000; --quick 100,000).
    #[arg(long)]
    iterations: Option<usize>,
    /// Arithmetic of the controller: f64, f32, q31.
    #[arg(long, value_delimiter = ',', default_value = "f64,f32,q31")]
    precision: Vec<String>,
    /// Cell kinds to offload to: thread, process, kvm, or auto (thread, process, and kvm when /dev/kvm
    /// is usable). The master's own local step is always measured too.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    cell: Vec<String>,
    #[arg(long, default_value = "none", help = rtcell_loads::LOAD_HELP)]
    load: String,
    #[command(flatten)]
    cpus: CellCpus,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(args: ControlArgs, pre_warnings: &mut Vec<String>) -> Result<(&'static str, Common, Plan), Usage> {
    let ControlArgs { iterations, precision, cell, load, cpus, common } = args;
    let (master, cell_cpu) = cpus.pick()?;
    let iterations = iterations.unwrap_or(if common.quick {
        control_suite::QUICK_ITERATIONS
    } else {
        control_suite::DEFAULT_ITERATIONS
    });
    if iterations == 0 {
        return usage("--iterations 0: give at least 1 controller step");
    }
    let mut precisions = Vec::new();
    for p in &precision {
        let p: Precision = p.parse().map_err(|e| Usage(format!("--precision {p:?}: {e}")))?;
        if !precisions.contains(&p) {
            precisions.push(p);
        }
    }
    let cells = parse_cells(&cell, pre_warnings)?;
    let load: Load = load.parse().map_err(|e| Usage(format!("--load: {e}")))?;
    let cfg = ControlConfig {
        master_cpu: master,
        cell_cpu,
        iterations,
        precisions,
        cells,
        load,
        master_priority: Some(80),
        cell_priority: Some(90),
    };
    Ok(("control", common, Plan::Control(cfg)))
}
