//! `[tasks.NAME]`: each task, in file order, becomes a [`PlanTask`]: its name, its cell and so its CPU,
//! its timing (period, offset, deadline, priority), its policies (missed cycles, corrupted channels,
//! watchdog), its output signal and safe value, the writable signals it acknowledges (`params`), the
//! rings it sends and receives on, and the budget the utilisation check assumes. What a task runs is in
//! `tasks/work` (C code in `tasks/c`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use rtcell_cells::CellKind;
use rtcell_tasks::spec::MIN_FRAME_BYTES;
use rtcell_tasks::stats::MAX_TASK_NAME;
use rtcell_tasks::{MissedPolicy, OnCorrupt, TaskSpec, TaskWork, Watchdog};

use crate::file::{RawTask, RawWork};

use super::channels::Endpoints;
use super::{CellRole, Declared, LINUX, PlanCell, PlanCom, PlanTask, Validator, us_to_ns};

mod c;
mod work;

/// What every task is checked against.
pub(super) struct TaskContext<'a> {
    pub d: &'a Declared<'a>,
    pub cells: &'a [PlanCell],
    pub cell_by_name: BTreeMap<&'a str, &'a PlanCell>,
    pub master_cpu: usize,
    pub coms: &'a [PlanCom],
    /// Where relative file names of C tasks resolve.
    pub scenario_dir: PathBuf,
}

/// What the tasks take, gathered for the checks that follow them.
pub(super) struct TaskUses {
    /// The rings' endpoints (the cells' already in).
    pub ends: Endpoints,
    /// Signal → the task that writes it (its `output`).
    pub outputs: BTreeMap<String, String>,
    /// Writable signal → the task that reads and acknowledges it.
    pub param_readers: BTreeMap<String, String>,
    /// C tasks of kvm cells: task name → (payload file, COM channels).
    pub kvm_c: BTreeMap<String, (PathBuf, Vec<String>)>,
}

impl TaskUses {
    pub(super) fn new(ends: Endpoints) -> TaskUses {
        TaskUses { ends, outputs: BTreeMap::new(), param_readers: BTreeMap::new(), kvm_c: BTreeMap::new() }
    }
}

/// What a workload needs of its task: the work, its estimated execution time (us), and the count of
/// values its output signal must hold (`None`: no output needed).
pub(super) type Work = (TaskWork, f64, Option<usize>);

/// A task being checked: its name, its table, and the table's path (`tasks.NAME`).
pub(super) struct Named<'a> {
    pub name: &'a str,
    pub t: &'a RawTask,
    pub p: String,
}

impl Validator<'_> {
    /// Every task, in file order.
    pub(super) fn tasks(&mut self, cx: &TaskContext, uses: &mut TaskUses) -> Vec<PlanTask> {
        let mut names: Vec<&String> = cx.d.raw.tasks.keys().collect();
        names.sort_by_key(|n| self.spans.line(&format!("tasks.{n}")).unwrap_or(0));
        let mut tasks = Vec::new();
        for tname in names {
            tasks.push(self.task(cx, uses, tname));
        }
        tasks
    }

    fn task(&mut self, cx: &TaskContext, uses: &mut TaskUses, tname: &str) -> PlanTask {
        let t = &cx.d.raw.tasks[tname];
        let n = Named { name: tname, t, p: format!("tasks.{tname}") };
        let p = &n.p;
        self.task_name(p, tname);
        let cpu = self.task_cpu(cx, p, t);
        let (period_us, deadline_us) = self.task_timing(p, t);
        let (missed, on_corrupt) = self.task_policies(p, tname, t);
        let watchdog = self.task_watchdog(p, t);
        let (work, estimate, needs_output) = self.work(cx, uses, &n, period_us);
        self.task_output(cx, uses, &n, needs_output, &work);
        let safe_value = self.task_safe_value(cx, p, t);
        self.task_params(cx, uses, &n);
        if t.safe_value.is_some() && t.watchdog.is_none() {
            self.err(
                &format!("{p}.safe_value"),
                "a safe value is written when the watchdog trips, and this task has none",
                "add watchdog = { time_us = ..., sensitivity = ... }",
            );
        }
        self.task_rings(cx, uses, &n);
        let budget_us = match t.budget_us {
            Some(b) if b.is_finite() && b >= 0.0 => b,
            Some(_) => {
                self.err(&format!("{p}.budget_us"), "budget must be a number >= 0", "budget_us = 50");
                estimate
            }
            None => estimate,
        };
        let frame_bytes =
            t.send.as_ref().and_then(|c| cx.d.channel_bytes.get(c.as_str()).copied()).unwrap_or(MIN_FRAME_BYTES);
        PlanTask {
            cell: (t.cell != LINUX).then(|| t.cell.clone()),
            budget_us,
            spec: TaskSpec {
                name: tname.to_string(),
                period_ns: us_to_ns(period_us),
                offset_ns: us_to_ns(t.offset_us),
                deadline_ns: us_to_ns(deadline_us.max(1)),
                priority: t.priority,
                cpu,
                missed,
                watchdog,
                work,
                send: t.send.clone(),
                recv: t.recv.clone(),
                frame_bytes: frame_bytes.max(MIN_FRAME_BYTES),
                output: t.output.clone(),
                safe_value,
                tsc_khz: 0,
                params: t.params.clone(),
                on_corrupt,
            },
        }
    }

    fn task_name(&mut self, p: &str, tname: &str) {
        if tname.is_empty()
            || tname.len() > MAX_TASK_NAME
            || !tname.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.err(
                p,
                format!("task name {tname:?} must be 1 to {MAX_TASK_NAME} letters, digits, '_' or '-'"),
                "rename the task",
            );
        }
    }

    /// The task's CPU: the master's for a Linux-side task, else its cell's, which must run tasks (a kvm
    /// cell only its one C task).
    fn task_cpu(&mut self, cx: &TaskContext, p: &str, t: &RawTask) -> usize {
        if t.cell == LINUX {
            return cx.master_cpu;
        }
        match cx.cell_by_name.get(t.cell.as_str()) {
            None => {
                let known: Vec<&str> = cx.cell_by_name.keys().copied().chain([LINUX]).collect();
                self.err(
                    &format!("{p}.cell"),
                    format!("no cell named {:?}", t.cell),
                    format!("use one of: {}", known.join(", ")),
                );
                cx.master_cpu
            }
            Some(c) => {
                if c.requested == CellKind::Kvm && !matches!(t.workload, RawWork::C { .. }) {
                    self.err(
                        &format!("{p}.cell"),
                        format!("cell {:?} is a kvm cell: a kvm cell runs one C task (workload kind = \"c\" with a payload), no other tasks", t.cell),
                        "put the task in a thread or process cell, or on the Linux side (cell = \"linux\")",
                    );
                } else if c.role != CellRole::Tasks {
                    self.err(
                        &format!("{p}.cell"),
                        format!("cell {:?} runs a service or a payload, not tasks", t.cell),
                        "put the task in another cell",
                    );
                }
                c.cpu
            }
        }
    }

    /// Period, offset, deadline and priority: (period, deadline) in us, each at least 1.
    fn task_timing(&mut self, p: &str, t: &RawTask) -> (u64, u64) {
        if t.period_us == 0 {
            self.err(
                &format!("{p}.period_us"),
                "period must be > 0",
                "set a period in microseconds, e.g. period_us = 1000",
            );
        }
        let period_us = t.period_us.max(1);
        if t.offset_us >= period_us && t.period_us > 0 {
            self.err(
                &format!("{p}.offset_us"),
                format!("offset {} us is not below the period {period_us} us", t.offset_us),
                "use an offset between 0 and the period",
            );
        }
        let deadline_us = t.deadline_us.unwrap_or(period_us);
        if deadline_us == 0 {
            self.err(
                &format!("{p}.deadline_us"),
                "deadline must be > 0",
                "leave it out (deadline = period) or set deadline_us > 0",
            );
        } else if deadline_us > period_us {
            self.err(
                &format!("{p}.deadline_us"),
                format!("deadline {deadline_us} us is above the period {period_us} us"),
                format!("use a deadline of at most the period, e.g. deadline_us = {period_us}, or leave it out"),
            );
        }
        if !(1..=99).contains(&t.priority) {
            self.err(
                &format!("{p}.priority"),
                format!("priority {} is outside 1..=99 (SCHED_FIFO)", t.priority),
                "priority = 80",
            );
        }
        (period_us, deadline_us)
    }

    /// What the task does with a missed cycle and with a corrupted channel (only for a task that uses one).
    fn task_policies(&mut self, p: &str, tname: &str, t: &RawTask) -> (MissedPolicy, OnCorrupt) {
        let missed = match t.on_overrun.as_deref() {
            None | Some("skip") => MissedPolicy::Skip,
            Some("run_at_once") => MissedPolicy::RunAtOnce,
            Some(o) => {
                self.err(
                    &format!("{p}.on_overrun"),
                    format!("unknown policy {o:?}"),
                    "on_overrun = \"skip\" or \"run_at_once\"",
                );
                MissedPolicy::Skip
            }
        };
        let on_corrupt = match t.on_corrupt.as_deref() {
            None | Some("resync") => OnCorrupt::Resync,
            Some("trip") => OnCorrupt::Trip,
            Some(o) => {
                self.err(
                    &format!("{p}.on_corrupt"),
                    format!("unknown choice {o:?}"),
                    "on_corrupt = \"resync\" (skip the step and go on when the data is valid again) or \"trip\" (stop with the safe value)",
                );
                OnCorrupt::Resync
            }
        };
        if t.on_corrupt.is_some() && !uses_channels(t) {
            self.err(
                &format!("{p}.on_corrupt"),
                format!(
                    "task {tname:?} reads and writes no channel whose corruption it handles: on_corrupt would never \
                     apply (a C task sees COM_SERVICE_NOT_AVAILABLE and decides itself; a scribble task is the \
                     hostile peer)"
                ),
                "remove on_corrupt, or put it on a task that sends, receives, reads or writes a channel",
            );
        }
        (missed, on_corrupt)
    }

    fn task_watchdog(&mut self, p: &str, t: &RawTask) -> Option<Watchdog> {
        let w = t.watchdog.as_ref()?;
        if w.time_us == 0 {
            self.err(
                &format!("{p}.watchdog.time_us"),
                "watchdog time must be > 0",
                "time_us = the period, e.g. time_us = 1000",
            );
        }
        if w.sensitivity == 0 {
            self.err(&format!("{p}.watchdog.sensitivity"), "sensitivity must be at least 1", "sensitivity = 3");
        }
        Some(Watchdog { time_ns: us_to_ns(w.time_us), sensitivity: w.sensitivity.max(1) })
    }

    /// The output signal: declared, big enough for the workload, written by this task alone; required
    /// when the workload has a result.
    fn task_output(
        &mut self,
        cx: &TaskContext,
        uses: &mut TaskUses,
        n: &Named,
        needs_output: Option<usize>,
        work: &TaskWork,
    ) {
        let (p, tname, t) = (&n.p, n.name, n.t);
        match (&t.output, needs_output) {
            (Some(o), need) => {
                self.check_signal(&format!("{p}.output"), o, need, cx.d);
                if let Some(prev) = uses.outputs.insert(o.clone(), tname.to_string()) {
                    self.err(
                        &format!("{p}.output"),
                        format!("task {prev:?} already writes signal {o:?} (a signal has one writer)"),
                        "give each task its own output signal",
                    );
                }
            }
            (None, Some(n)) => self.err(
                &format!("{p}.output"),
                format!("a {} task writes its result to an output signal", work.kind()),
                format!("add output = \"<signal of {n} values>\""),
            ),
            (None, None) => {}
        }
    }

    /// The values written to the output when the watchdog trips: finite, and no more than it holds.
    fn task_safe_value(&mut self, cx: &TaskContext, p: &str, t: &RawTask) -> Vec<f64> {
        let safe_value = t.safe_value.clone().unwrap_or_default();
        if safe_value.is_empty() {
            return safe_value;
        }
        if t.output.is_none() {
            self.err(
                &format!("{p}.safe_value"),
                "a safe value needs an output signal to be written to",
                "add output = \"<signal>\" or remove safe_value",
            );
        }
        if safe_value.iter().any(|v| !v.is_finite()) {
            self.err(&format!("{p}.safe_value"), "safe values must be finite numbers", "e.g. safe_value = [0.0]");
        }
        if let Some(o) = &t.output
            && let Some(&n) = cx.d.signal_values.get(o.as_str())
            && safe_value.len() > n as usize
        {
            self.err(
                &format!("{p}.safe_value"),
                format!("{} values, but signal {o:?} holds {n}", safe_value.len()),
                format!("give at most {n} values"),
            );
        }
        safe_value
    }

    /// `params`: writable signals, each acknowledged by one task only.
    fn task_params(&mut self, cx: &TaskContext, uses: &mut TaskUses, n: &Named) {
        let (p, tname, t) = (&n.p, n.name, n.t);
        for (i, param) in t.params.iter().enumerate() {
            let f = format!("{p}.params[{i}]");
            match cx.d.raw.signals.get(param) {
                None => self.err(
                    &f,
                    format!("no signal named {param:?}"),
                    format!("declare it: [signals.{param}] values = 1, writable = true"),
                ),
                Some(sig) if !sig.writable => self.err(
                    &f,
                    format!("signal {param:?} is not writable: params are the writable signals a task acknowledges"),
                    format!("add writable = true to [signals.{param}]"),
                ),
                Some(_) => {
                    if let Some(prev) = uses.param_readers.insert(param.clone(), tname.to_string()) {
                        self.err(
                            &f,
                            format!(
                                "task {prev:?} already reads signal {param:?} (one task acknowledges a writable signal)"
                            ),
                            "name it in the params of one task only",
                        );
                    }
                }
            }
        }
    }

    /// `send` and `recv`: declared rings; the task becomes one of their endpoints.
    fn task_rings(&mut self, cx: &TaskContext, uses: &mut TaskUses, n: &Named) {
        let (p, tname, t) = (&n.p, n.name, n.t);
        let ends = &mut uses.ends;
        for (field, ch, list) in [("send", &t.send, &mut ends.producers), ("recv", &t.recv, &mut ends.consumers)] {
            if let Some(ch) = ch {
                if !cx.d.channel_bytes.contains_key(ch.as_str()) {
                    self.err(
                        &format!("{p}.{field}"),
                        format!("no channel named {ch:?}"),
                        format!("declare it: [channels.{ch}] capacity = 256, frame_bytes = 64"),
                    );
                }
                list.entry(ch.clone()).or_default().push((format!("task {tname:?}"), format!("{p}.{field}")));
            }
        }
    }
}

/// Whether a task uses a channel whose corruption its `on_corrupt` handles: a ring it sends or receives
/// on, its output signal, a signal or ring its workload reads or writes.
fn uses_channels(t: &RawTask) -> bool {
    t.send.is_some()
        || t.recv.is_some()
        || t.output.is_some()
        || match &t.workload {
            RawWork::InverseDynamics { .. }
            | RawWork::Drive { .. }
            | RawWork::Master { .. }
            | RawWork::ComMaster { .. } => true,
            RawWork::Log { signals, .. } => !signals.is_empty(),
            _ => false,
        }
}
