//! `[[loads]]`: background loads of the Linux side (memcpy, stress, ...), each on the CPUs it lists or
//! on every online CPU no cell takes; never on a cell's CPU.

use super::cpus::Cpus;
use super::{Declared, PlanLoad, Validator};

impl Validator<'_> {
    /// Every load, checked: a known kind, and CPUs that are online and no cell's.
    pub(super) fn loads(&mut self, d: &Declared, cpus: &Cpus) -> Vec<PlanLoad> {
        let online_list = &cpus.list;
        let mut loads = Vec::new();
        for (i, l) in d.raw.loads.iter().enumerate() {
            let p = format!("loads[{i}]");
            let kind = match l.kind.parse::<rtcell_loads::Load>() {
                Ok(k) => k,
                Err(e) => {
                    self.err(&format!("{p}.kind"), e, "kind = \"memcpy\"");
                    rtcell_loads::Load::None
                }
            };
            let list = match &l.cpus {
                Some(c) => c.clone(),
                None => cpus.online.iter().copied().filter(|c| !cpus.of_cells.contains(c)).collect(),
            };
            for c in &list {
                if cpus.of_cells.contains(c) {
                    self.err(
                        &format!("{p}.cpus"),
                        format!("CPU {c} belongs to a cell: loads run on the Linux side"),
                        "leave cpus out (every CPU no cell uses) or list only those",
                    );
                } else if !cpus.online.contains(c) {
                    self.err(
                        &format!("{p}.cpus"),
                        format!("CPU {c} does not exist or is offline (online: {online_list})"),
                        format!("use CPUs of {online_list}"),
                    );
                }
            }
            loads.push(PlanLoad { kind, cpus: list });
        }
        loads
    }
}
