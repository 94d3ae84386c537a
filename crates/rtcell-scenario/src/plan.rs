//! Validation: the raw file becomes a [`Plan`] that can be started as it is, or a list of complaints,
//! each with its line, its field and its fix. Nothing starts before the whole file is accepted.
//!
//! `Validator::plan` checks the file concern by concern, each in its module: the limits of the whole
//! file (`limits`, `region`, `cycle`), the CPUs (`cpus`), the cells (`cells`, `payload_args`), the rings
//! (`channels`), the signals (`signals`, `writable`), the COM channels (`com`), the tasks (`tasks`, their
//! workloads in `tasks/work`, C code in `tasks/c` and `origin`), then what needs all of them (endpoints,
//! the cells' uses, utilisation, writable signals' readers), the loads (`loads`) and the EtherCAT segment
//! (`ethercat`). Complaints are sorted by line; on one line they keep the order they were found in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rtcell_cells::CellKind;
use rtcell_tasks::{TaskSpec, TaskWork};

use crate::file::{Diag, RawScenario, Spans, parse};

mod cells;
mod channels;
mod com;
mod cpus;
mod cycle;
mod ethercat;
mod limits;
mod loads;
mod origin;
pub(crate) mod payload_args;
mod region;
mod signals;
mod tasks;
#[cfg(test)]
mod tests;
mod writable;
use channels::Endpoints;
pub use com::{PlanCom, PlanComSignal};
pub use limits::{MAX_FILE_BYTES, MAX_SCENARIO_NAME, scenario_name_problem};
pub use origin::Origin;
pub use region::{MAX_REGION_BYTES, region_budget};
use tasks::{TaskContext, TaskUses};

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
    pub kind: rtcell_loads::Load,
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
            // The override may come from a client: echoed capped (128 bytes) and escaped.
            let (cell, kind) =
                (rtcell_host::peer_text::peer_str(cell, 128), rtcell_host::peer_text::peer_str(kind, 128));
            return Err(Invalid {
                file,
                diags: vec![Diag::new(
                    None,
                    "",
                    format!("--kind {cell}={kind}: the scenario has no cell named \"{cell}\""),
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

    /// The plan of `raw`, complaints in `self.diags` (the plan is used only when there are none).
    fn plan(&mut self, raw: &RawScenario, path: &Path, host: &HostView) -> Plan {
        let (name, duration) = self.name_and_duration(raw, path);
        let d = Declared::of(raw);
        let mut notes = Vec::new();
        let cpus = self.cpus(raw, host);
        let mut cells = self.cells(&d, host, &cpus, &mut notes);
        let mut channels = self.channels(&d);
        let mut signals = self.signals(&d);
        let taken: BTreeSet<&str> = raw.channels.keys().chain(raw.signals.keys()).map(|k| k.as_str()).collect();
        let coms = self.com_channels(&raw.com, &taken);
        let mut uses = TaskUses::new(Endpoints::of_cells(&cells, &d));
        let mut tasks = {
            let cx = TaskContext {
                d: &d,
                cells: &cells,
                cell_by_name: cells.iter().map(|c| (c.name.as_str(), c)).collect(),
                master_cpu: cpus.master,
                coms: &coms,
                scenario_dir: self.origin.base_dir(path),
            };
            self.tasks(&cx, &mut uses)
        };
        self.kvm_payloads(&mut cells, &mut tasks, &uses, &mut notes);
        self.check_endpoints(&mut channels, &uses.ends);
        self.check_cell_uses(&d, &cells, &tasks);
        self.check_utilisation(raw, &tasks);
        let loads = self.loads(&d, &cpus);
        self.writable_readers(&mut signals, &uses.outputs, &uses.param_readers);
        let ethercat = self.ethercat(&d);
        Plan {
            name,
            description: raw.description.clone().unwrap_or_default(),
            file: path.to_path_buf(),
            duration,
            master_cpu: cpus.master,
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

    /// The scenario's name (the file's stem when it gives none) and duration, and the limits that apply
    /// to the whole file: number ranges, the region's size, cycle lengths, the files it writes.
    fn name_and_duration(&mut self, raw: &RawScenario, path: &Path) -> (String, Duration) {
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
        (name, duration)
    }
}

/// What the file declares, by name, for the checks of what refers to it.
struct Declared<'a> {
    raw: &'a RawScenario,
    /// Ring → its frame size.
    channel_bytes: BTreeMap<&'a str, u32>,
    /// Signal → its count of values.
    signal_values: BTreeMap<&'a str, u32>,
}

impl<'a> Declared<'a> {
    fn of(raw: &'a RawScenario) -> Declared<'a> {
        Declared {
            raw,
            channel_bytes: raw.channels.iter().map(|(k, v)| (k.as_str(), v.frame_bytes)).collect(),
            signal_values: raw.signals.iter().map(|(k, v)| (k.as_str(), v.values)).collect(),
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
