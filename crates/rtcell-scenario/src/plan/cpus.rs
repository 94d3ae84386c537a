//! The CPUs of a scenario: which are online, which the cells take, the master's (the Linux side: the
//! first online CPU no cell takes, unless `master_cpu` names one), and how busy each CPU's periodic
//! tasks would keep it (the utilisation check, with `budget_us` as the assumed execution time).

use std::collections::{BTreeMap, BTreeSet};

use crate::file::RawScenario;

use super::{HostView, PlanTask, Validator};

/// The CPUs as validation sees them.
pub(super) struct Cpus<'h> {
    pub online: &'h [usize],
    /// `online` as a CPU list (`0-1,3`), for messages.
    pub list: String,
    /// The CPUs the cells ask for.
    pub of_cells: BTreeSet<usize>,
    /// The master's CPU.
    pub master: usize,
}

impl Validator<'_> {
    /// The online CPUs, the cells' CPUs and the master's, checked (`master_cpu` must be online).
    pub(super) fn cpus<'h>(&mut self, raw: &RawScenario, host: &'h HostView) -> Cpus<'h> {
        let online = &host.online;
        let list = rtcell_host::cpu::format_cpu_list(online);
        let of_cells: BTreeSet<usize> = raw.cells.values().map(|c| c.cpu).collect();
        let master = match raw.master_cpu {
            Some(m) => {
                if !online.contains(&m) {
                    self.err(
                        "master_cpu",
                        format!("CPU {m} does not exist or is offline (online: {list})"),
                        format!("use one of {list}"),
                    );
                }
                m
            }
            None => online.iter().copied().find(|c| !of_cells.contains(c)).unwrap_or(0),
        };
        Cpus { online, list, of_cells, master }
    }

    /// Utilisation per CPU of the periodic tasks: above 100% is refused, naming the busiest task.
    pub(super) fn check_utilisation(&mut self, raw: &RawScenario, tasks: &[PlanTask]) {
        let mut per_cpu: BTreeMap<usize, Vec<(&str, f64)>> = BTreeMap::new();
        for t in tasks.iter().filter(|t| raw.tasks.get(&t.spec.name).is_some_and(|r| r.period_us > 0)) {
            let u = t.budget_us / (t.spec.period_ns as f64 / 1000.0).max(1e-9);
            per_cpu.entry(t.spec.cpu).or_default().push((&t.spec.name, u));
        }
        for (cpu, list) in &per_cpu {
            let total: f64 = list.iter().map(|(_, u)| u).sum();
            if total > 1.0 {
                let parts: Vec<String> = list.iter().map(|(n, u)| format!("{n} {:.0}%", u * 100.0)).collect();
                let first = list.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|(n, _)| *n).unwrap_or("");
                self.err(
                    &format!("tasks.{first}"),
                    format!("CPU {cpu} would be {:.0}% utilised ({})", total * 100.0, parts.join(", ")),
                    "lengthen periods, shorten workloads, or move a task to another CPU (budget_us sets the assumed execution time)",
                );
            }
        }
    }
}
