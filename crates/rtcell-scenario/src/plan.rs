//! Validation: the raw file becomes a [`Plan`] that can be started as it is, or a list of complaints,
//! each with its line, its field and its fix. Nothing starts before the whole file is accepted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rtcell_cells::CellKind;
use rtcell_tasks::spec::{COMMAND_VALUES, MIN_FRAME_BYTES, SETPOINT_VALUES, TORQUE_VALUES};
use rtcell_tasks::stats::MAX_TASK_NAME;
use rtcell_tasks::{Inject, MissedPolicy, OnCorrupt, TaskSpec, TaskWork, Watchdog};

use crate::file::{Diag, RawScenario, RawService, RawWork, Spans, parse};

mod com;
mod cycle;
mod limits;
mod origin;
mod payload_args;
mod region;
mod writable;
pub use com::{PlanCom, PlanComSignal};
pub use limits::{MAX_FILE_BYTES, MAX_SCENARIO_NAME, scenario_name_problem};
pub use origin::Origin;
pub use region::{MAX_REGION_BYTES, region_budget};

/// The name tasks use for the Linux side (the master CPU).
pub const LINUX: &str = "linux";
/// Most values in a signal.
pub const MAX_SIGNAL_VALUES: u32 = 64;
/// Bytes of an offload request or reply.
const OFFLOAD_BYTES: u32 = rtcell_control::offload::MESSAGE_BYTES as u32;

/// What the machine offers, as far as validation needs it (a fixture in tests).
#[derive(Debug, Clone)]
pub struct HostView {
    pub online: Vec<usize>,
    /// `None` when KVM is usable; otherwise why not.
    pub kvm_unusable: Option<String>,
    pub payloads: Vec<String>,
}

impl HostView {
    /// This machine.
    pub fn here() -> HostView {
        let kvm = rtcell_kvm::kvm_status();
        HostView {
            online: rtcell_host::cpu::online_cpus().unwrap_or_else(|_| vec![0]),
            kvm_unusable: (!kvm.is_usable()).then(|| kvm.explain()),
            payloads: rtcell_kvm::payloads::NAMES.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// What a cell runs.
#[derive(Debug, Clone, PartialEq)]
pub enum CellRole {
    /// The tasks whose `cell` is this cell.
    Tasks,
    /// The offloaded controller, serving requests.
    Controller { request: String, reply: String, precision: String },
    /// A built-in kvm payload.
    Payload { payload: String, args: String, writes: Vec<String> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanCell {
    pub name: String,
    /// The kind that will run (the fallback when KVM is not usable).
    pub kind: CellKind,
    /// The kind the file asked for.
    pub requested: CellKind,
    pub cpu: usize,
    pub priority: i32,
    pub role: CellRole,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanChannel {
    pub name: String,
    pub frames: u32,
    pub frame_bytes: u32,
    /// Nobody in the scenario receives: the supervisor drains it (and counts).
    pub sink: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanSignal {
    pub name: String,
    pub values: u32,
    /// Set when the gateway may write the signal.
    pub writable: Option<Writable>,
}

/// What a write to a writable signal must respect, and who acknowledges it.
#[derive(Debug, Clone, PartialEq)]
pub struct Writable {
    pub ty: ValueType,
    /// Inclusive bounds of every value.
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// The task that reads it each cycle and acknowledges what it saw.
    pub reader: String,
}

/// Type of the values of a writable signal (all are stored as f64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    F64,
    /// An integer within ±2^53 (exact as an f64).
    I64,
    /// 0 or 1.
    Bool,
}

impl ValueType {
    pub fn as_str(self) -> &'static str {
        match self {
            ValueType::F64 => "f64",
            ValueType::I64 => "i64",
            ValueType::Bool => "bool",
        }
    }
}

/// Largest integer a writable `i64` signal accepts: every integer up to it is exact as an f64.
pub const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

impl Writable {
    /// Checks values about to be written; the error says which value and why.
    pub fn check(&self, values: &[f64], expect: u32) -> Result<(), String> {
        if values.len() != expect as usize {
            return Err(format!("{} values given, the signal holds {expect}", values.len()));
        }
        for (i, v) in values.iter().enumerate() {
            let at = if expect == 1 { String::new() } else { format!("value {i}: ") };
            if !v.is_finite() {
                return Err(format!("{at}{v} is not a finite number"));
            }
            match self.ty {
                ValueType::Bool if *v != 0.0 && *v != 1.0 => return Err(format!("{at}{v} is not a bool (0 or 1)")),
                ValueType::I64 if v.fract() != 0.0 || v.abs() > MAX_EXACT_INT => {
                    return Err(format!("{at}{v} is not an integer within ±2^53"));
                }
                _ => {}
            }
            if let Some(min) = self.min
                && *v < min
            {
                return Err(format!("{at}{v} is below the minimum {min}"));
            }
            if let Some(max) = self.max
                && *v > max
            {
                return Err(format!("{at}{v} is above the maximum {max}"));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanTask {
    /// `None`: the Linux side.
    pub cell: Option<String>,
    pub spec: TaskSpec,
    /// Execution time assumed by the utilisation check (us).
    pub budget_us: f64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanLoad {
    pub kind: rtcell_bench::loads::Load,
    pub cpus: Vec<usize>,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub name: String,
    pub description: String,
    pub file: PathBuf,
    pub duration: Duration,
    pub master_cpu: usize,
    pub cells: Vec<PlanCell>,
    pub channels: Vec<PlanChannel>,
    pub signals: Vec<PlanSignal>,
    /// AUTOSAR-COM-style channels.
    pub coms: Vec<PlanCom>,
    /// In file order.
    pub tasks: Vec<PlanTask>,
    pub loads: Vec<PlanLoad>,
    /// The EtherCAT segment of `ethercat` tasks.
    pub ethercat: Option<PlanEthercat>,
    /// Things to know that do not stop the run (a kvm cell falling back to a thread).
    pub notes: Vec<String>,
}

/// `[ethercat]` as validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanEthercat {
    /// A real segment on this interface.
    Interface(String),
    /// Simulated devices on a veth pair made for the run (the simulator answers on the Linux side).
    Simulated { devices: u16, drop_after: Option<u64> },
}

/// Why a scenario was refused: every complaint found, each renderable as `file:line: field: what — fix`.
#[derive(Debug, Clone)]
pub struct Invalid {
    pub file: String,
    pub diags: Vec<Diag>,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = crate::shown::MAX_SHOWN;
        let mut lines: Vec<String> = self.diags.iter().take(shown).map(|d| d.render(&self.file)).collect();
        if self.diags.len() > shown {
            lines.push(format!("... and {} more problems not shown", self.diags.len() - shown));
        }
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for Invalid {}

/// Reads and validates `path`.
pub fn load(path: &Path, host: &HostView) -> Result<Plan, Invalid> {
    load_with(path, host, &[])
}

/// Reads and validates `path`, with cells' kinds overridden: `(cell, kind)` pairs (`rtcell run --kind`).
pub fn load_with(path: &Path, host: &HostView, kinds: &[(String, String)]) -> Result<Plan, Invalid> {
    load_from(path, host, kinds, &Origin::Operator)
}

/// [`load_with`] for a scenario of the given [`Origin`] (what it may load is decided by it).
pub fn load_from(path: &Path, host: &HostView, kinds: &[(String, String)], origin: &Origin) -> Result<Plan, Invalid> {
    let file = path.display().to_string();
    let text = limits::read_capped(path).map_err(|d| Invalid { file: file.clone(), diags: vec![d] })?;
    validate_text_from(&text, path, host, kinds, origin)
}

/// Validates the text of a scenario file named `path`.
pub fn validate_text(text: &str, path: &Path, host: &HostView) -> Result<Plan, Invalid> {
    validate_text_with(text, path, host, &[])
}

/// [`validate_text`] with cells' kinds overridden.
pub fn validate_text_with(
    text: &str,
    path: &Path,
    host: &HostView,
    kinds: &[(String, String)],
) -> Result<Plan, Invalid> {
    validate_text_from(text, path, host, kinds, &Origin::Operator)
}

/// [`validate_text_with`] for a scenario of the given [`Origin`].
pub fn validate_text_from(
    text: &str,
    path: &Path,
    host: &HostView,
    kinds: &[(String, String)],
    origin: &Origin,
) -> Result<Plan, Invalid> {
    let file = path.display().to_string();
    if let Some(d) = limits::too_large(text.len()) {
        return Err(Invalid { file, diags: vec![d] });
    }
    let (mut raw, spans) = parse(text).map_err(|d| Invalid { file: file.clone(), diags: vec![d] })?;
    for (cell, kind) in kinds {
        let Some(c) = raw.cells.get_mut(cell) else {
            let known: Vec<&str> = raw.cells.keys().map(String::as_str).collect();
            return Err(Invalid {
                file,
                diags: vec![Diag::new(
                    None,
                    "",
                    format!("--kind {cell}={kind}: the scenario has no cell named {cell:?}"),
                    format!("use one of: {}", known.join(", ")),
                )],
            });
        };
        c.kind = kind.clone();
        if kind != "kvm" {
            // A fallback is for a kvm cell; the cell is now asked to be something else.
            c.fallback = None;
        }
    }
    let mut v = Validator { spans: &spans, diags: Vec::new(), origin };
    let plan = v.plan(&raw, path, host);
    if v.diags.is_empty() {
        v.check_layout(&plan);
    }
    if v.diags.is_empty() {
        Ok(plan)
    } else {
        v.diags.sort_by_key(|d| d.line.unwrap_or(0));
        Err(Invalid { file, diags: v.diags })
    }
}

struct Validator<'a> {
    spans: &'a Spans,
    diags: Vec<Diag>,
    origin: &'a Origin,
}

/// A channel or signal name: what the region accepts, and no clash with the names rtcell reserves.
fn name_problem(name: &str, max: usize) -> Option<String> {
    if name.is_empty() || name.len() > max {
        return Some(format!("name {name:?} must be 1 to {max} characters"));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        return Some(format!("name {name:?} may hold only letters, digits, '_', '-' and '.'"));
    }
    if name == "sched" || name.starts_with("ctl.") || name.starts_with("task.") {
        return Some(format!("name {name:?} is reserved (sched, ctl.*, task.* are rtcell's own channels)"));
    }
    None
}

fn us_to_ns(us: u64) -> u64 {
    us.saturating_mul(1000)
}

impl Validator<'_> {
    fn err(&mut self, path: &str, message: impl Into<String>, fix: impl Into<String>) {
        let line = self.spans.line(path);
        self.diags.push(Diag::new(line, path, message, fix));
    }

    fn finite(&mut self, path: &str, v: f64) -> bool {
        if v.is_finite() {
            return true;
        }
        self.err(path, format!("{v} is not a finite number"), "give a number");
        false
    }

    fn plan(&mut self, raw: &RawScenario, path: &Path, host: &HostView) -> Plan {
        let name = raw
            .name
            .clone()
            .unwrap_or_else(|| limits::name_from_stem(&path.file_stem().unwrap_or_default().to_string_lossy()));
        if let Some(why) = limits::scenario_name_problem(&name) {
            self.err("name", why, "rename the scenario, e.g. name = \"line-3\"");
        }
        self.check_ranges(raw);
        self.check_region(raw);
        self.check_cycle_lengths(raw);
        self.check_output_files(raw);
        if !(raw.duration_s.is_finite() && raw.duration_s > 0.0) {
            self.err("duration_s", "the duration must be above 0 seconds", "set it in seconds, e.g. duration_s = 10");
        }
        let duration = Duration::from_secs_f64(if raw.duration_s.is_finite() && raw.duration_s > 0.0 {
            raw.duration_s.min(limits::MAX_DURATION_S)
        } else {
            1.0
        });
        let online = &host.online;
        let online_list = rtcell_host::cpu::format_cpu_list(online);
        let mut notes = Vec::new();

        // Cells and CPUs.
        let cell_cpus: BTreeSet<usize> = raw.cells.values().map(|c| c.cpu).collect();
        let master_cpu = match raw.master_cpu {
            Some(m) => {
                if !online.contains(&m) {
                    self.err(
                        "master_cpu",
                        format!("CPU {m} does not exist or is offline (online: {online_list})"),
                        format!("use one of {online_list}"),
                    );
                }
                m
            }
            None => online.iter().copied().find(|c| !cell_cpus.contains(c)).unwrap_or(0),
        };
        let mut cells = Vec::new();
        let mut cpu_owner: BTreeMap<usize, String> = BTreeMap::new();
        for (cname, c) in &raw.cells {
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
            let cpu_path = format!("{p}.cpu");
            if !online.contains(&c.cpu) {
                self.err(
                    &cpu_path,
                    format!("CPU {} does not exist or is offline (online: {online_list})", c.cpu),
                    format!("use one of {online_list}"),
                );
            } else if c.cpu == master_cpu {
                let other = online.iter().find(|x| **x != master_cpu && !cell_cpus.contains(x));
                self.err(
                    &cpu_path,
                    format!("CPU {} is the master's CPU (the Linux side)", c.cpu),
                    match other {
                        Some(o) => format!("give the cell a CPU of its own, e.g. cpu = {o}"),
                        None => "give the cell a CPU of its own; this machine has no CPU to spare".into(),
                    },
                );
            }
            if let Some(first) = cpu_owner.get(&c.cpu) {
                self.err(
                    &cpu_path,
                    format!("CPU {} is already cell {first:?}'s: two cells on one CPU", c.cpu),
                    "give each cell a CPU of its own",
                );
            } else {
                cpu_owner.insert(c.cpu, cname.clone());
            }
            let priority = c.priority.unwrap_or(90);
            if !(1..=99).contains(&priority) {
                self.err(&format!("{p}.priority"), format!("priority {priority} is outside 1..=99"), "priority = 90");
            }
            let fallback: Option<CellKind> = match &c.fallback {
                None => None,
                Some(f) => match f.parse::<CellKind>() {
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
                },
            };
            let role = match (&c.service, &c.payload) {
                (Some(_), Some(_)) => {
                    self.err(
                        &format!("{p}.payload"),
                        "a cell runs a service or a payload, not both",
                        "remove one of them",
                    );
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
                    self.check_payload_args(&p, payload, c.args.as_deref());
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
            };
            if c.args.is_some() && !matches!(role, CellRole::Payload { .. }) {
                self.err(&format!("{p}.args"), "args are for a kvm payload", "remove them");
            }
            let mut kind = requested.unwrap_or(CellKind::Thread);
            if kind == CellKind::Kvm
                && let Some(why) = &host.kvm_unusable
            {
                match fallback {
                    Some(f) => {
                        notes.push(format!("cell {cname:?}: KVM is not usable here ({why}): running it as a {f} cell"));
                        kind = f;
                    }
                    None => self.err(
                        &format!("{p}.kind"),
                        format!("KVM is not usable here: {why}"),
                        "run it as kind = \"thread\", or add fallback = \"thread\"",
                    ),
                }
            }
            cells.push(PlanCell {
                name: cname.clone(),
                kind,
                requested: requested.unwrap_or(kind),
                cpu: c.cpu,
                priority,
                role,
            });
        }

        // Channels and signals.
        let mut channels = Vec::new();
        for (n, ch) in &raw.channels {
            let p = format!("channels.{n}");
            if let Some(why) = name_problem(n, 32) {
                self.err(&p, why, "rename the channel");
            }
            if raw.signals.contains_key(n) {
                self.err(&p, format!("{n:?} is both a channel and a signal"), "give them different names");
            }
            if ch.capacity == 0 || ch.capacity > 65_536 {
                self.err(&format!("{p}.capacity"), "capacity must be 1 to 65536 frames", "capacity = 256");
            }
            if ch.frame_bytes < MIN_FRAME_BYTES || ch.frame_bytes > 65_536 {
                self.err(
                    &format!("{p}.frame_bytes"),
                    format!("frame_bytes must be {MIN_FRAME_BYTES} to 65536 (a frame carries a sequence number, a time and a value)"),
                    "frame_bytes = 64",
                );
            }
            channels.push(PlanChannel {
                name: n.clone(),
                frames: ch.capacity,
                frame_bytes: ch.frame_bytes,
                sink: false,
            });
        }
        let mut signals = Vec::new();
        for (n, s) in &raw.signals {
            let p = format!("signals.{n}");
            if let Some(why) = name_problem(n, 32) {
                self.err(&p, why, "rename the signal");
            }
            if s.values == 0 || s.values > MAX_SIGNAL_VALUES {
                self.err(&format!("{p}.values"), format!("values must be 1 to {MAX_SIGNAL_VALUES}"), "values = 1");
            }
            let writable = self.writable_signal(&p, n, s, raw);
            signals.push(PlanSignal { name: n.clone(), values: s.values, writable });
        }
        // Writable signal → the task that reads and acknowledges it.
        let mut param_readers: BTreeMap<String, String> = BTreeMap::new();
        let taken: BTreeSet<&str> = raw.channels.keys().chain(raw.signals.keys()).map(|k| k.as_str()).collect();
        let coms = self.com_channels(&raw.com, &taken);
        let scenario_dir = self.origin.base_dir(path);
        // C tasks of kvm cells: task name → (payload file, COM channels).
        let mut kvm_c: BTreeMap<String, (PathBuf, Vec<String>)> = BTreeMap::new();
        let signal_values: BTreeMap<&str, u32> = raw.signals.iter().map(|(k, v)| (k.as_str(), v.values)).collect();
        let channel_bytes: BTreeMap<&str, u32> =
            raw.channels.iter().map(|(k, v)| (k.as_str(), v.frame_bytes)).collect();

        // Endpoints of each ring: (producer, consumer).
        let mut producers: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        let mut consumers: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for c in &cells {
            let p = format!("cells.{}", c.name);
            if let CellRole::Controller { request, reply, .. } = &c.role {
                consumers
                    .entry(request.clone())
                    .or_default()
                    .push((format!("cell {:?}", c.name), format!("{p}.service.request")));
                producers
                    .entry(reply.clone())
                    .or_default()
                    .push((format!("cell {:?}", c.name), format!("{p}.service.reply")));
            }
            // A payload names the rings it uses in its args (`rx=NAME`, `tx=NAME`, one a line): the same
            // endpoints as a task's recv and send.
            if let CellRole::Payload { args, .. } = &c.role {
                for (key, ch) in payload_args::arg_pairs(args) {
                    let list = match key {
                        "rx" => &mut consumers,
                        "tx" => &mut producers,
                        _ => continue,
                    };
                    if channel_bytes.contains_key(ch) {
                        list.entry(ch.to_string())
                            .or_default()
                            .push((format!("cell {:?} (its payload's {key}=)", c.name), format!("{p}.args")));
                    }
                }
            }
        }

        // Tasks, in file order.
        let mut names: Vec<&String> = raw.tasks.keys().collect();
        names.sort_by_key(|n| self.spans.line(&format!("tasks.{n}")).unwrap_or(0));
        let cell_by_name: BTreeMap<&str, &PlanCell> = cells.iter().map(|c| (c.name.as_str(), c)).collect();
        let mut tasks = Vec::new();
        let mut outputs: BTreeMap<String, String> = BTreeMap::new();
        for tname in names {
            let t = &raw.tasks[tname];
            let p = format!("tasks.{tname}");
            if tname.is_empty()
                || tname.len() > MAX_TASK_NAME
                || !tname.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                self.err(
                    &p,
                    format!("task name {tname:?} must be 1 to {MAX_TASK_NAME} letters, digits, '_' or '-'"),
                    "rename the task",
                );
            }
            let cpu = if t.cell == LINUX {
                master_cpu
            } else {
                match cell_by_name.get(t.cell.as_str()) {
                    None => {
                        let known: Vec<&str> = cell_by_name.keys().copied().chain([LINUX]).collect();
                        self.err(
                            &format!("{p}.cell"),
                            format!("no cell named {:?}", t.cell),
                            format!("use one of: {}", known.join(", ")),
                        );
                        master_cpu
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
            };
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
            let watchdog = t.watchdog.as_ref().map(|w| {
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
                Watchdog { time_ns: us_to_ns(w.time_us), sensitivity: w.sensitivity.max(1) }
            });
            let check_signal =
                |v: &mut Self, field: &str, name: &str, need: Option<usize>| match signal_values.get(name) {
                    None => v.err(
                        &format!("{p}.{field}"),
                        format!("no signal named {name:?}"),
                        format!("declare it: [signals.{name}] values = {}", need.unwrap_or(1)),
                    ),
                    Some(&have) => {
                        if let Some(need) = need
                            && (have as usize) < need
                        {
                            v.err(
                                &format!("{p}.{field}"),
                                format!("signal {name:?} holds {have} values, this needs {need}"),
                                format!("set [signals.{name}] values = {need}"),
                            );
                        }
                    }
                };
            let mut needs_output: Option<usize> = None;
            let (work, estimate) = match &t.workload {
                RawWork::Spin { us, inject } => {
                    if self.finite(&format!("{p}.workload.us"), *us) && *us < 0.0 {
                        self.err(&format!("{p}.workload.us"), "spin time must be >= 0", "us = 50");
                    }
                    let inject = inject.as_ref().map(|i| {
                        self.finite(&format!("{p}.workload.inject.us"), i.us);
                        Inject { at_cycle: i.at_cycle, cycles: i.cycles, us: i.us.max(0.0) }
                    });
                    (TaskWork::Spin { us: us.max(0.0), inject }, us.max(0.0))
                }
                RawWork::Trajectory { from_deg, to_deg, move_s } => {
                    self.finite(&format!("{p}.workload.from_deg"), *from_deg);
                    self.finite(&format!("{p}.workload.to_deg"), *to_deg);
                    if !(move_s.is_finite() && *move_s > 0.0) {
                        self.err(&format!("{p}.workload.move_s"), "move time must be above 0 s", "move_s = 2");
                    }
                    needs_output = Some(SETPOINT_VALUES);
                    (TaskWork::Trajectory { from_deg: *from_deg, to_deg: *to_deg, move_s: *move_s }, 2.0)
                }
                RawWork::InverseDynamics { setpoint } => {
                    check_signal(self, "workload.setpoint", setpoint, Some(SETPOINT_VALUES));
                    needs_output = Some(TORQUE_VALUES);
                    (TaskWork::InverseDynamics { setpoint: setpoint.clone() }, 5.0)
                }
                RawWork::Drive { setpoint, torque, us } => {
                    check_signal(self, "workload.setpoint", setpoint, Some(SETPOINT_VALUES));
                    check_signal(self, "workload.torque", torque, Some(TORQUE_VALUES));
                    if self.finite(&format!("{p}.workload.us"), *us) && *us < 0.0 {
                        self.err(&format!("{p}.workload.us"), "bus time must be >= 0", "us = 20");
                    }
                    needs_output = Some(COMMAND_VALUES);
                    (
                        TaskWork::Drive { setpoint: setpoint.clone(), torque: torque.clone(), us: us.max(0.0) },
                        us.max(0.0) + 2.0,
                    )
                }
                RawWork::Log { file, signals: sigs, tasks: logged } => {
                    if t.cell != LINUX {
                        self.err(
                            &format!("{p}.cell"),
                            "a log task writes a file: it runs only on the Linux side",
                            "cell = \"linux\"",
                        );
                    }
                    for s in sigs {
                        check_signal(self, "workload.signals", s, None);
                    }
                    for lt in logged {
                        if !raw.tasks.contains_key(lt) {
                            self.err(
                                &format!("{p}.workload.tasks"),
                                format!("no task named {lt:?}"),
                                "list tasks of this scenario",
                            );
                        }
                    }
                    (
                        TaskWork::Log {
                            file: file.clone(),
                            signals: sigs.clone(),
                            tasks: logged.clone(),
                            created: None,
                        },
                        50.0,
                    )
                }
                RawWork::Master { request, reply } => {
                    for (field, ch) in [("workload.request", request), ("workload.reply", reply)] {
                        match channel_bytes.get(ch.as_str()) {
                            None => self.err(&format!("{p}.{field}"), format!("no channel named {ch:?}"), format!("declare it: [channels.{ch}] capacity = 16, frame_bytes = {OFFLOAD_BYTES}")),
                            Some(&b) if b < OFFLOAD_BYTES => self.err(
                                &format!("{p}.{field}"),
                                format!("channel {ch:?} carries {b}-byte frames; controller messages are {OFFLOAD_BYTES} bytes"),
                                format!("set [channels.{ch}] frame_bytes = {OFFLOAD_BYTES}"),
                            ),
                            Some(_) => {}
                        }
                    }
                    producers
                        .entry(request.clone())
                        .or_default()
                        .push((format!("task {tname:?}"), format!("{p}.workload.request")));
                    consumers
                        .entry(reply.clone())
                        .or_default()
                        .push((format!("task {tname:?}"), format!("{p}.workload.reply")));
                    let served = cells.iter().find_map(|c| match &c.role {
                        CellRole::Controller { request: r, reply: q, precision } if r == request && q == reply => {
                            precision.parse::<rtcell_control::offload::Precision>().ok()
                        }
                        _ => None,
                    });
                    if served.is_none() {
                        self.err(
                            &format!("{p}.workload"),
                            format!("no cell serves the controller on {request:?} / {reply:?}"),
                            format!("add a cell with service = {{ kind = \"controller\", request = \"{request}\", reply = \"{reply}\" }}"),
                        );
                    }
                    let precision = served.unwrap_or(rtcell_control::offload::Precision::F64);
                    (TaskWork::Master { request: request.clone(), reply: reply.clone(), precision }, 5.0)
                }
                RawWork::C { library, init, step, payload, com } => {
                    let com = self.c_task_com(&format!("{p}.workload.com"), com.as_ref(), &coms);
                    let kind = cell_by_name.get(t.cell.as_str()).map(|c| c.kind);
                    self.c_code_allowed(&p, kind);
                    if t.cell == LINUX {
                        self.err(
                            &format!("{p}.cell"),
                            "C code runs in a cell, not on the Linux side",
                            "put the task in a thread, process or kvm cell",
                        );
                    }
                    let file = |v: &mut Self, field: &str, f: &Option<String>, example: &str| -> Option<PathBuf> {
                        let path = format!("{p}.workload.{field}");
                        let Some(f) = f else {
                            v.err(
                                &path,
                                format!("a C task in a {} cell needs a {field}", kind.map_or("?", |k| k.as_str())),
                                format!("add {field} = \"{example}\" (relative to the scenario file)"),
                            );
                            return None;
                        };
                        let abs = scenario_dir.join(f);
                        let abs = abs.canonicalize().unwrap_or(abs);
                        if !v.code_file_allowed(&path, &abs) {
                            return None;
                        }
                        if !abs.is_file() {
                            v.err(&path, format!("no file {}", abs.display()), "build it first (see examples/c-controller/README.md), or fix the path: it is relative to the scenario file");
                        }
                        Some(abs)
                    };
                    let step_name = step.clone().unwrap_or_default();
                    let library = if kind == Some(CellKind::Kvm) {
                        if let Some(elf) = file(self, "payload", payload, "build/ctrl.elf") {
                            // The checks the kvm cell makes when it loads it (ELF, segments, entry, size).
                            let ram = rtcell_cells::VmOptions::default().ram_mib as u64 * (1 << 20);
                            if elf.is_file()
                                && let Err(e) = rtcell_kvm::payloads::validate(&elf.display().to_string(), ram)
                            {
                                self.err(
                                    &format!("{p}.workload.payload"),
                                    e.to_string(),
                                    "rebuild it with the SDK's payload.mk",
                                );
                            }
                            kvm_c.insert(tname.clone(), (elf, com.clone()));
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
                        let lib = file(self, "library", library, "build/libctrl.so");
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
                    (TaskWork::C { library, init: init.clone(), step: step_name, com }, 1.0)
                }
                RawWork::Scribble { channel, at_cycle, cycles } => {
                    let known = channel_bytes.contains_key(channel.as_str())
                        || signal_values.contains_key(channel.as_str())
                        || raw.com.contains_key(channel)
                        || channel.strip_prefix("task.").is_some_and(|t| raw.tasks.contains_key(t));
                    if !known {
                        self.err(
                            &format!("{p}.workload.channel"),
                            format!("no channel named {channel:?}"),
                            "name a [channels], [signals] or [com] channel of the scenario, or task.<task>",
                        );
                    }
                    let work = TaskWork::Scribble { channel: channel.clone(), at_cycle: *at_cycle, cycles: *cycles };
                    (work, 1.0)
                }
                RawWork::ComMaster { input, output } => {
                    let ids = self.com_master_ids(&p, input, output, &coms);
                    (TaskWork::ComMaster { input: input.clone(), output: output.clone(), ids }, 5.0)
                }
                RawWork::Ethercat { outputs } => {
                    let ec = raw.ethercat.clone().unwrap_or_else(|| {
                        self.err(
                            &format!("{p}.workload"),
                            "an ethercat task needs the scenario's [ethercat] segment",
                            "add [ethercat] simulated = 3 (or interface = \"eth1\" for a real segment)",
                        );
                        crate::file::RawEthercat {
                            interface: None,
                            simulated: None,
                            drop_after: None,
                            timeout_us: None,
                            busy_poll: None,
                        }
                    });
                    if let Some(o) = outputs {
                        check_signal(self, "workload.outputs", o, None);
                    }
                    // Two values (digital, analog) per device of a simulated segment.
                    needs_output = Some(2 * usize::from(ec.simulated.unwrap_or(1).max(1)));
                    // A frame out longer than most of the period is lost: the next cycle needs the socket.
                    let timeout_us = ec.timeout_us.unwrap_or(period_us.saturating_mul(9) / 10).max(1);
                    let interface = ec.interface.clone().unwrap_or_default();
                    let busy_poll = ec.busy_poll.unwrap_or(false);
                    (TaskWork::Ethercat { interface, outputs: outputs.clone(), timeout_us, busy_poll }, 40.0)
                }
            };
            match (&t.output, needs_output) {
                (Some(o), need) => {
                    check_signal(self, "output", o, need);
                    if let Some(prev) = outputs.insert(o.clone(), tname.clone()) {
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
            let safe_value = t.safe_value.clone().unwrap_or_default();
            if !safe_value.is_empty() {
                if t.output.is_none() {
                    self.err(
                        &format!("{p}.safe_value"),
                        "a safe value needs an output signal to be written to",
                        "add output = \"<signal>\" or remove safe_value",
                    );
                }
                if safe_value.iter().any(|v| !v.is_finite()) {
                    self.err(
                        &format!("{p}.safe_value"),
                        "safe values must be finite numbers",
                        "e.g. safe_value = [0.0]",
                    );
                }
                if let Some(o) = &t.output
                    && let Some(&n) = signal_values.get(o.as_str())
                    && safe_value.len() > n as usize
                {
                    self.err(
                        &format!("{p}.safe_value"),
                        format!("{} values, but signal {o:?} holds {n}", safe_value.len()),
                        format!("give at most {n} values"),
                    );
                }
            }
            for (i, param) in t.params.iter().enumerate() {
                let f = format!("{p}.params[{i}]");
                match raw.signals.get(param) {
                    None => self.err(
                        &f,
                        format!("no signal named {param:?}"),
                        format!("declare it: [signals.{param}] values = 1, writable = true"),
                    ),
                    Some(sig) if !sig.writable => self.err(
                        &f,
                        format!(
                            "signal {param:?} is not writable: params are the writable signals a task acknowledges"
                        ),
                        format!("add writable = true to [signals.{param}]"),
                    ),
                    Some(_) => {
                        if let Some(prev) = param_readers.insert(param.clone(), tname.clone()) {
                            self.err(
                                &f,
                                format!("task {prev:?} already reads signal {param:?} (one task acknowledges a writable signal)"),
                                "name it in the params of one task only",
                            );
                        }
                    }
                }
            }
            if t.safe_value.is_some() && t.watchdog.is_none() {
                self.err(
                    &format!("{p}.safe_value"),
                    "a safe value is written when the watchdog trips, and this task has none",
                    "add watchdog = { time_us = ..., sensitivity = ... }",
                );
            }
            for (field, ch, list) in [("send", &t.send, &mut producers), ("recv", &t.recv, &mut consumers)] {
                if let Some(ch) = ch {
                    if !channel_bytes.contains_key(ch.as_str()) {
                        self.err(
                            &format!("{p}.{field}"),
                            format!("no channel named {ch:?}"),
                            format!("declare it: [channels.{ch}] capacity = 256, frame_bytes = 64"),
                        );
                    }
                    list.entry(ch.clone()).or_default().push((format!("task {tname:?}"), format!("{p}.{field}")));
                }
            }
            let budget_us = match t.budget_us {
                Some(b) if b.is_finite() && b >= 0.0 => b,
                Some(_) => {
                    self.err(&format!("{p}.budget_us"), "budget must be a number >= 0", "budget_us = 50");
                    estimate
                }
                None => estimate,
            };
            let frame_bytes =
                t.send.as_ref().and_then(|c| channel_bytes.get(c.as_str()).copied()).unwrap_or(MIN_FRAME_BYTES);
            tasks.push(PlanTask {
                cell: (t.cell != LINUX).then(|| t.cell.clone()),
                budget_us,
                spec: TaskSpec {
                    name: tname.clone(),
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
            });
        }

        // A kvm cell runs its C task as a payload: the task becomes the cell's role.
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
            let Some((elf, com)) = kvm_c.get(&t.spec.name) else { continue };
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

        // Channel endpoints: one producer, at most one consumer (the supervisor drains the rest).
        for ch in &mut channels {
            let p = format!("channels.{}", ch.name);
            let prod = producers.get(&ch.name).cloned().unwrap_or_default();
            let cons = consumers.get(&ch.name).cloned().unwrap_or_default();
            if prod.is_empty() {
                self.err(
                    &p,
                    "nobody sends on this channel",
                    format!("set send = \"{}\" on a task, or remove the channel", ch.name),
                );
            }
            for (list, what) in [(&prod, "send on"), (&cons, "receive from")] {
                if list.len() > 1 {
                    let who: Vec<&str> = list.iter().map(|(w, _)| w.as_str()).collect();
                    self.err(
                        &list[1].1,
                        format!(
                            "{} {what} channel {:?}: a ring has one producer and one consumer",
                            who.join(" and "),
                            ch.name
                        ),
                        "give each its own channel",
                    );
                }
            }
            ch.sink = cons.is_empty();
        }
        for c in &cells {
            if let CellRole::Controller { request, reply, .. } = &c.role {
                for (field, ch) in [("request", request), ("reply", reply)] {
                    match channel_bytes.get(ch.as_str()) {
                        None => self.err(
                            &format!("cells.{}.service.{field}", c.name),
                            format!("no channel named {ch:?}"),
                            format!("declare it: [channels.{ch}] capacity = 16, frame_bytes = {OFFLOAD_BYTES}"),
                        ),
                        Some(&b) if b < OFFLOAD_BYTES => self.err(
                            &format!("cells.{}.service.{field}", c.name),
                            format!(
                                "channel {ch:?} carries {b}-byte frames; controller messages are {OFFLOAD_BYTES} bytes"
                            ),
                            format!("set [channels.{ch}] frame_bytes = {OFFLOAD_BYTES}"),
                        ),
                        Some(_) => {}
                    }
                }
            }
            if let CellRole::Payload { writes, .. } = &c.role {
                for w in writes {
                    if !channel_bytes.contains_key(w.as_str())
                        && !signal_values.contains_key(w.as_str())
                        && !raw.com.contains_key(w.as_str())
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

        // Utilisation per CPU.
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

        // Loads.
        let mut loads = Vec::new();
        for (i, l) in raw.loads.iter().enumerate() {
            let p = format!("loads[{i}]");
            let kind = match l.kind.parse::<rtcell_bench::loads::Load>() {
                Ok(k) => k,
                Err(e) => {
                    self.err(&format!("{p}.kind"), e, "kind = \"memcpy\"");
                    rtcell_bench::loads::Load::None
                }
            };
            let cpus = match &l.cpus {
                Some(c) => c.clone(),
                None => online.iter().copied().filter(|c| !cell_cpus.contains(c)).collect(),
            };
            for c in &cpus {
                if cell_cpus.contains(c) {
                    self.err(
                        &format!("{p}.cpus"),
                        format!("CPU {c} belongs to a cell: loads run on the Linux side"),
                        "leave cpus out (every CPU no cell uses) or list only those",
                    );
                } else if !online.contains(c) {
                    self.err(
                        &format!("{p}.cpus"),
                        format!("CPU {c} does not exist or is offline (online: {online_list})"),
                        format!("use CPUs of {online_list}"),
                    );
                }
            }
            loads.push(PlanLoad { kind, cpus });
        }

        for s in &mut signals {
            let Some(w) = &mut s.writable else { continue };
            if let Some(writer) = outputs.get(&s.name) {
                self.err(
                    &format!("signals.{}.writable", s.name),
                    format!(
                        "task {writer:?} writes signal {:?}: a writable signal has one writer, the gateway",
                        s.name
                    ),
                    "write the task's output to another signal",
                );
            }
            match param_readers.get(&s.name) {
                Some(task) => w.reader = task.clone(),
                None => self.err(
                    &format!("signals.{}.writable", s.name),
                    format!("no task reads writable signal {:?}, so no write to it could be acknowledged", s.name),
                    format!("add params = [\"{}\"] to the task that uses it", s.name),
                ),
            }
        }

        let ethercat = raw.ethercat.as_ref().and_then(|e| match (&e.interface, e.simulated) {
            (Some(i), None) if e.drop_after.is_none() => Some(PlanEthercat::Interface(i.clone())),
            (None, Some(n)) if (1..=16).contains(&n) => {
                Some(PlanEthercat::Simulated { devices: n, drop_after: e.drop_after })
            }
            (None, Some(_)) => {
                self.err("ethercat.simulated", "a simulated segment has 1 to 16 devices", "simulated = 3");
                None
            }
            (Some(_), None) => {
                self.err(
                    "ethercat.drop_after",
                    "drop_after is for a simulated segment",
                    "remove it, or use simulated = N",
                );
                None
            }
            _ => {
                self.err(
                    "ethercat",
                    "give the segment's interface, or simulated = N, not both or neither",
                    "simulated = 3",
                );
                None
            }
        });

        Plan {
            name,
            description: raw.description.clone().unwrap_or_default(),
            file: path.to_path_buf(),
            duration,
            master_cpu,
            cells,
            channels,
            signals,
            coms,
            tasks,
            loads,
            ethercat,
            notes,
        }
    }
}

impl Plan {
    /// The same plan running for `d` instead.
    pub fn with_duration(mut self, d: Duration) -> Plan {
        self.duration = d;
        self
    }

    /// The log files the run will write, relative to its results directory: (task, file).
    pub fn log_files(&self) -> Vec<(&str, &str)> {
        self.tasks
            .iter()
            .filter_map(|t| match &t.spec.work {
                TaskWork::Log { file, .. } => Some((t.spec.name.as_str(), file.as_str())),
                _ => None,
            })
            .collect()
    }
}

/// Parses a duration: `2s`, `500ms`, `1.5s`, `2m`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("{s:?} is not a duration: use e.g. 2s, 500ms, 1m"))?;
    let secs = v * scale;
    if !(secs.is_finite() && (limits::MIN_DURATION_S..=limits::MAX_DURATION_S).contains(&secs)) {
        let shown = crate::shown::cut(s);
        return Err(format!("{shown:?}: a duration must be 1 ms to 30 days (2592000 s), e.g. 2s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Whether a task uses a channel whose corruption its `on_corrupt` handles: a ring it sends or receives
/// on, its output signal, a signal or ring its workload reads or writes.
fn uses_channels(t: &crate::file::RawTask) -> bool {
    use crate::file::RawWork;
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
