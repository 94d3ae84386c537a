//! `[cells.NAME]`: each cell's name, kind (and the fallback of a kvm cell where KVM is not usable), CPU
//! (online, not the master's, one cell per CPU), priority and role (tasks, the offload controller
//! service, or a built-in kvm payload); and, once the tasks are known, what each cell uses: the
//! controller's rings, the channels a payload writes, and at least one task in a cell that runs tasks.

use std::collections::BTreeMap;

use rtcell_cells::CellKind;

use crate::file::{RawCell, RawService};

use super::cpus::Cpus;
use super::{CellRole, Declared, HostView, PlanCell, PlanTask, Validator, name_problem};

impl Validator<'_> {
    /// Every cell, checked; a note for each kvm cell that falls back to a host cell here.
    pub(super) fn cells(
        &mut self,
        d: &Declared,
        host: &HostView,
        cpus: &Cpus,
        notes: &mut Vec<String>,
    ) -> Vec<PlanCell> {
        let mut cells = Vec::new();
        let mut cpu_owner: BTreeMap<usize, String> = BTreeMap::new();
        for (cname, c) in &d.raw.cells {
            let p = format!("cells.{cname}");
            if let Some(why) = name_problem(cname, 24) {
                self.err(&p, why, "rename the cell");
            }
            let requested: Option<CellKind> = match c.kind.parse() {
                Ok(k) => Some(k),
                Err(e) => {
                    self.err(&format!("{p}.kind"), e, "kind = \"thread\", \"process\" or \"kvm\"");
                    None
                }
            };
            self.cell_cpu(&p, cname, c.cpu, cpus, &mut cpu_owner);
            let priority = c.priority.unwrap_or(90);
            if !(1..=99).contains(&priority) {
                self.err(&format!("{p}.priority"), format!("priority {priority} is outside 1..=99"), "priority = 90");
            }
            let fallback = self.cell_fallback(&p, c, requested);
            let role = self.cell_role(&p, c, requested, fallback, host);
            if c.args.is_some() && !matches!(role, CellRole::Payload { .. }) {
                self.err(&format!("{p}.args"), "args are for a kvm payload", "remove them");
            }
            let kind = self.running_kind(&p, cname, requested, fallback, host, notes);
            cells.push(PlanCell {
                name: cname.clone(),
                kind,
                requested: requested.unwrap_or(kind),
                cpu: c.cpu,
                priority,
                role,
            });
        }
        cells
    }

    /// The cell's CPU: online, not the master's, and no other cell's (`owner` records the first).
    fn cell_cpu(&mut self, p: &str, cname: &str, cpu: usize, cpus: &Cpus, owner: &mut BTreeMap<usize, String>) {
        let cpu_path = format!("{p}.cpu");
        let online_list = &cpus.list;
        if !cpus.online.contains(&cpu) {
            self.err(
                &cpu_path,
                format!("CPU {cpu} does not exist or is offline (online: {online_list})"),
                format!("use one of {online_list}"),
            );
        } else if cpu == cpus.master {
            let other = cpus.online.iter().find(|x| **x != cpus.master && !cpus.of_cells.contains(x));
            self.err(
                &cpu_path,
                format!("CPU {cpu} is the master's CPU (the Linux side)"),
                match other {
                    Some(o) => format!("give the cell a CPU of its own, e.g. cpu = {o}"),
                    None => "give the cell a CPU of its own; this machine has no CPU to spare".into(),
                },
            );
        }
        if let Some(first) = owner.get(&cpu) {
            self.err(
                &cpu_path,
                format!("CPU {cpu} is already cell {first:?}'s: two cells on one CPU"),
                "give each cell a CPU of its own",
            );
        } else {
            owner.insert(cpu, cname.to_string());
        }
    }

    /// The host kind a kvm cell falls back to: thread or process, and only for a kvm cell.
    fn cell_fallback(&mut self, p: &str, c: &RawCell, requested: Option<CellKind>) -> Option<CellKind> {
        let f = c.fallback.as_ref()?;
        match f.parse::<CellKind>() {
            Ok(CellKind::Kvm) | Err(_) => {
                self.err(
                    &format!("{p}.fallback"),
                    format!("fallback {f:?} is not a host cell kind"),
                    "fallback = \"thread\" or \"process\"",
                );
                None
            }
            Ok(k) => {
                if requested != Some(CellKind::Kvm) {
                    self.err(
                        &format!("{p}.fallback"),
                        "a fallback applies only to a kvm cell",
                        "remove it, or make the cell kind = \"kvm\"",
                    );
                }
                Some(k)
            }
        }
    }

    /// What the cell runs: its tasks, the controller service, or a built-in payload (kvm cells only).
    fn cell_role(
        &mut self,
        p: &str,
        c: &RawCell,
        requested: Option<CellKind>,
        fallback: Option<CellKind>,
        host: &HostView,
    ) -> CellRole {
        match (&c.service, &c.payload) {
            (Some(_), Some(_)) => {
                self.err(&format!("{p}.payload"), "a cell runs a service or a payload, not both", "remove one of them");
                CellRole::Tasks
            }
            (Some(RawService::Controller { request, reply, precision }), None) => {
                let precision = precision.clone().unwrap_or_else(|| "f64".into());
                if precision.parse::<rtcell_control::offload::Precision>().is_err() {
                    self.err(
                        &format!("{p}.service.precision"),
                        format!("unknown precision {precision:?}"),
                        "precision = \"f64\", \"f32\" or \"q31\"",
                    );
                }
                CellRole::Controller { request: request.clone(), reply: reply.clone(), precision }
            }
            (None, Some(payload)) => {
                self.check_payload_args(p, payload, c.args.as_deref());
                if requested.is_some() && requested != Some(CellKind::Kvm) {
                    self.err(
                        &format!("{p}.payload"),
                        "payloads run only in kvm cells",
                        "make the cell kind = \"kvm\", or give it tasks",
                    );
                }
                if !host.payloads.iter().any(|x| x == payload) {
                    self.err(
                        &format!("{p}.payload"),
                        format!("no payload named {payload:?}"),
                        format!("use one of the built-in payloads: {}", host.payloads.join(", ")),
                    );
                }
                if fallback.is_some() {
                    self.err(
                        &format!("{p}.fallback"),
                        "a payload cannot fall back to a host cell",
                        "remove the fallback",
                    );
                }
                CellRole::Payload {
                    payload: payload.clone(),
                    args: c.args.clone().unwrap_or_default(),
                    writes: c.writes.clone(),
                }
            }
            (None, None) => CellRole::Tasks,
        }
    }

    /// The kind that will run: the requested one, or its fallback (with a note) where KVM is not usable.
    fn running_kind(
        &mut self,
        p: &str,
        cname: &str,
        requested: Option<CellKind>,
        fallback: Option<CellKind>,
        host: &HostView,
        notes: &mut Vec<String>,
    ) -> CellKind {
        let kind = requested.unwrap_or(CellKind::Thread);
        if kind == CellKind::Kvm
            && let Some(why) = &host.kvm_unusable
        {
            match fallback {
                Some(f) => {
                    notes.push(format!("cell {cname:?}: KVM is not usable here ({why}): running it as a {f} cell"));
                    return f;
                }
                None => self.err(
                    &format!("{p}.kind"),
                    format!("KVM is not usable here: {why}"),
                    "run it as kind = \"thread\", or add fallback = \"thread\"",
                ),
            }
        }
        kind
    }

    /// What each cell uses, once the tasks are known: the controller's rings exist and carry its
    /// messages, a payload writes only declared channels, and a cell of tasks has at least one.
    pub(super) fn check_cell_uses(&mut self, d: &Declared, cells: &[PlanCell], tasks: &[PlanTask]) {
        for c in cells {
            if let CellRole::Controller { request, reply, .. } = &c.role {
                for (field, ch) in [("request", request), ("reply", reply)] {
                    self.offload_channel(&format!("cells.{}.service.{field}", c.name), ch, d);
                }
            }
            if let CellRole::Payload { writes, .. } = &c.role {
                for w in writes {
                    if !d.channel_bytes.contains_key(w.as_str())
                        && !d.signal_values.contains_key(w.as_str())
                        && !d.raw.com.contains_key(w.as_str())
                    {
                        self.err(
                            &format!("cells.{}.writes", c.name),
                            format!("no channel or signal named {w:?}"),
                            "list channels of this scenario",
                        );
                    }
                }
            }
            if c.role == CellRole::Tasks && !tasks.iter().any(|t| t.cell.as_deref() == Some(c.name.as_str())) {
                self.err(
                    &format!("cells.{}", c.name),
                    "the cell has no tasks, no service and no payload",
                    format!("put a task in it (cell = \"{}\") or remove it", c.name),
                );
            }
        }
    }
}
