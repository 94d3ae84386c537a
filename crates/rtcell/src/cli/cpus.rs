//! One owner per cell CPU: every run path takes its cell CPUs after validating its input and before its
//! first cell starts, and holds them until it ends (the kernel releases them if it dies).

use rtcell_host::cpulock::{CpuLockError, CpuLocks, HeldCpu};

use super::{EXIT_USAGE, Plan};

/// Takes `cpus` for this run. `Err`: the message to print and the exit status (2 when another run
/// holds one of them: nothing was started).
pub fn take(cpus: &[usize]) -> Result<CpuLocks, (String, i32)> {
    take_run(cpus, &[])
}

/// Takes a run's `cells` CPUs exclusively and the CPUs of its Linux side and loads (`shared`) shared:
/// see [`rtcell_host::cpulock::lock_run_cpus`].
pub fn take_run(cells: &[usize], shared: &[usize]) -> Result<CpuLocks, (String, i32)> {
    rtcell_host::cpulock::lock_run_cpus(cells, shared).map_err(|e| {
        let code = match e {
            CpuLockError::Held { .. }
            | CpuLockError::CellOfOther { .. }
            | CpuLockError::UnsafeDir { .. }
            | CpuLockError::UnsafeFile { .. } => EXIT_USAGE,
            CpuLockError::Io { .. } => 1,
        };
        (format!("error: {e}; nothing was started"), code)
    })
}

/// The CPUs a bench plan busy-polls or pins real-time threads to as its cell side.
pub fn plan_cpus(plan: &Plan) -> Vec<usize> {
    match plan {
        // Both ends of the ping-pong spin.
        Plan::C2c(c) => vec![c.cpu_a, c.cpu_b],
        // Its scenario runs in a child `rtcell run`, which takes the scenario's CPUs itself.
        Plan::Gateway(_) => Vec::new(),
        Plan::Ethercat(c) => vec![c.cell_cpu],
        p => vec![super::tune::plan_cell_cpu(p)],
    }
}

/// `rtcell check`'s lines on the held cell CPUs.
pub fn held_text(held: &[HeldCpu]) -> String {
    if held.is_empty() {
        return "Cell CPUs held by rtcell runs: none\n".into();
    }
    let mut s = String::from("Cell CPUs held by rtcell runs (another run asking for one is refused):\n");
    for h in held {
        let who = h.holder.as_ref().map_or_else(|| "holder unknown (record unreadable)".into(), |x| x.describe());
        s.push_str(&format!("  CPU {}: {who}\n", h.cpu));
    }
    s
}

/// The same as JSON: `[{"cpu": 1, "pid": 123, "command": "...", "since_unix": 1700000000}]`.
pub fn held_json(held: &[HeldCpu]) -> serde_json::Value {
    held.iter()
        .map(|h| {
            let mut v = serde_json::json!({ "cpu": h.cpu });
            if let Some(x) = &h.holder {
                v["pid"] = x.pid.into();
                v["command"] = x.command_text().into();
                v["since_unix"] = x.since_unix.into();
                v["since"] = x.since().into();
            }
            v
        })
        .collect()
}
