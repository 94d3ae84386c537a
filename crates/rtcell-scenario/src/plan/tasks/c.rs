//! C tasks (`workload = { kind = "c", ... }`): the COM channels they bind, where their code may come
//! from (the scenario's origin decides), the shared object a thread or process cell loads (with its step
//! function) or the payload ELF a kvm cell boots, and, once all tasks are known, a kvm cell's C task
//! turned into the cell's payload (it may write only the COM channels no `com_master` task writes).

use std::path::PathBuf;

use rtcell_cells::CellKind;
use rtcell_tasks::TaskWork;

use super::super::{CellRole, LINUX, PlanCell, PlanTask, Validator, limits};
use super::{Named, TaskContext, TaskUses, Work};

/// The fields of a C task's workload.
pub(super) struct CCode<'a> {
    pub library: &'a Option<String>,
    pub init: &'a Option<String>,
    pub step: &'a Option<String>,
    pub payload: &'a Option<String>,
    pub com: &'a Option<Vec<String>>,
}

impl Validator<'_> {
    /// A C task: in a cell (one the origin allows), with the file its cell kind loads.
    pub(super) fn c_work(&mut self, cx: &TaskContext, uses: &mut TaskUses, n: &Named, code: CCode) -> Work {
        let CCode { library, init, step, payload, com } = code;
        let p = &n.p;
        let com = self.c_task_com(&format!("{p}.workload.com"), com.as_ref(), cx.coms);
        let kind = cx.cell_by_name.get(n.t.cell.as_str()).map(|c| c.kind);
        self.c_code_allowed(p, kind);
        if n.t.cell == LINUX {
            self.err(
                &format!("{p}.cell"),
                "C code runs in a cell, not on the Linux side",
                "put the task in a thread, process or kvm cell",
            );
        }
        let step_name = step.clone().unwrap_or_default();
        let library = if kind == Some(CellKind::Kvm) {
            if let Some(elf) = self.code_file(cx, p, kind, "payload", payload, "build/ctrl.elf") {
                // The checks the kvm cell makes when it loads it (ELF, segments, entry, size).
                let ram = rtcell_cells::VmOptions::default().ram_mib as u64 * (1 << 20);
                if elf.is_file()
                    && let Err(e) = rtcell_kvm::payloads::validate(&elf.display().to_string(), ram)
                {
                    self.err(&format!("{p}.workload.payload"), e.to_string(), "rebuild it with the SDK's payload.mk");
                }
                uses.kvm_c.insert(n.name.to_string(), (elf, com.clone()));
            }
            String::new()
        } else {
            if step_name.is_empty() {
                self.err(
                    &format!("{p}.workload.step"),
                    "a C task names its step function",
                    "add step = \"ctrl_step\" (a `void f(void)` in the library)",
                );
            }
            let lib = self.code_file(cx, p, kind, "library", library, "build/libctrl.so");
            if let Some(l) = &lib
                && l.is_file()
                && let Some(why) = limits::shared_object_problem(l)
            {
                self.err(
                    &format!("{p}.workload.library"),
                    format!("library {:?} {why}", library.as_deref().unwrap_or_default()),
                    "name the shared object (.so) built for this machine, e.g. library = \"build/libctrl.so\"",
                );
            }
            lib.map(|l| l.display().to_string()).unwrap_or_default()
        };
        (TaskWork::C { library, init: init.clone(), step: step_name, com }, 1.0, None)
    }

    /// The file `field` of a C task names (resolved against the scenario's directory): given, allowed
    /// by the origin, and present.
    fn code_file(
        &mut self,
        cx: &TaskContext,
        p: &str,
        kind: Option<CellKind>,
        field: &str,
        f: &Option<String>,
        example: &str,
    ) -> Option<PathBuf> {
        let path = format!("{p}.workload.{field}");
        let Some(f) = f else {
            self.err(
                &path,
                format!("a C task in a {} cell needs a {field}", kind.map_or("?", |k| k.as_str())),
                format!("add {field} = \"{example}\" (relative to the scenario file)"),
            );
            return None;
        };
        let abs = cx.scenario_dir.join(f);
        let abs = abs.canonicalize().unwrap_or(abs);
        if !self.code_file_allowed(&path, &abs) {
            return None;
        }
        if !abs.is_file() {
            self.err(
                &path,
                format!("no file {}", abs.display()),
                "build it first (see examples/c-controller/README.md), or fix the path: it is relative to the scenario file",
            );
        }
        Some(abs)
    }

    /// A kvm cell runs its one C task as its payload: the task becomes the cell's role (and leaves the
    /// task list), with a note saying so.
    pub(in crate::plan) fn kvm_payloads(
        &mut self,
        cells: &mut [PlanCell],
        tasks: &mut Vec<PlanTask>,
        uses: &TaskUses,
        notes: &mut Vec<String>,
    ) {
        let mut as_payload: Vec<String> = Vec::new();
        for c in cells.iter_mut().filter(|c| c.kind == CellKind::Kvm) {
            let mine: Vec<&PlanTask> = tasks.iter().filter(|t| t.cell.as_deref() == Some(c.name.as_str())).collect();
            if mine.is_empty() {
                continue;
            }
            if mine.len() > 1 {
                self.err(
                    &format!("cells.{}", c.name),
                    format!("kvm cell {:?} has {} tasks; a kvm cell runs one C task", c.name, mine.len()),
                    "move the other tasks to a thread or process cell",
                );
                continue;
            }
            let t = mine[0];
            if !t.spec.params.is_empty() {
                self.err(
                    &format!("tasks.{}.params", t.spec.name),
                    format!(
                        "task {:?} runs as the payload of kvm cell {:?}, which cannot acknowledge params",
                        t.spec.name, c.name
                    ),
                    "give the params to a task of a thread or process cell, or to a Linux-side task",
                );
            }
            let Some((elf, com)) = uses.kvm_c.get(&t.spec.name) else { continue };
            notes.push(format!(
                "task {:?} runs as the payload of kvm cell {:?} ({}), stepped every {} us on the guest's TSC; its steps are counted in the cell's table, not as a task",
                t.spec.name,
                c.name,
                elf.display(),
                t.spec.period_ns / 1000
            ));
            // A COM channel has one direction: the payload may write only the ones no com_master task
            // writes (its `input`); the others are read-only memory slots to it.
            let written_by_others: Vec<&String> = tasks
                .iter()
                .filter_map(|o| match &o.spec.work {
                    TaskWork::ComMaster { input, .. } => Some(input),
                    _ => None,
                })
                .collect();
            c.role = CellRole::Payload {
                payload: elf.display().to_string(),
                args: format!("com={}\nperiod_ns={}\n", com.join(","), t.spec.period_ns),
                writes: com.iter().filter(|n| !written_by_others.contains(n)).cloned().collect(),
            };
            as_payload.push(t.spec.name.clone());
        }
        tasks.retain(|t| !as_payload.contains(&t.spec.name));
    }
}
