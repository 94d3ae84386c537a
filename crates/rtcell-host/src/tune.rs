//! `rtcell tune`: the run-time knobs that `rtcell check` flags for a cell CPU, changed and changed
//! back.
//!
//! Only knobs that change at run time are touched: the affinity of every device IRQ that may reach
//! the cell CPU (and the default for IRQs registered later), the cell CPU's frequency governor, RT
//! throttling, timer migration, the unbound workqueue cpumask and transparent huge pages. Boot-time
//! knobs (isolcpus=, nohz_full=, ...) are only suggested as a kernel command line ([`boot`]).
//!
//! `/dev/cpu_dma_latency` is not among them: the kernel keeps a PM QoS request only while the file
//! stays open, so a value written by `rtcell tune` would vanish when it exits. The latency suite
//! holds it at 0 for the length of its runs instead; [`DMA_LATENCY_NOTE`] says so.
//!
//! Everything goes through a [`HostRoot`], so a plan, an apply and a revert can run against a
//! writable fixture tree. An apply writes each change to the state file ([`state`]) and flushes it
//! before making it, so a revert restores exactly what was changed, byte for byte, even after an
//! apply that stopped half-way.

pub mod boot;
pub mod state;

use std::io;
use std::path::{Path, PathBuf};

use crate::check::kernel::{THP_ENABLED, WORKQUEUE_CPUMASK, has_fair_server, selected_choice};
use crate::check::{format_cpu_mask, housekeeping_cpus, irq, parse_cpu_mask};
use crate::cpu::{self, format_cpu_list, parse_cpu_list};
use crate::root::{HostRoot, ReadError, WriteError};

pub use boot::BootSuggestion;
pub use state::{Entry, Header, Journal, STATE_FILE, State, default_state_path};

/// Why `rtcell tune` does not hold `/dev/cpu_dma_latency`.
pub const DMA_LATENCY_NOTE: &str = "/dev/cpu_dma_latency: not changed. The kernel keeps a PM QoS request only while \
     the file stays open, so a value set by rtcell tune would vanish when it exits; rtcell bench latency holds it at \
     0 for the length of its runs. To hold it for another program: `exec 3> /dev/cpu_dma_latency; echo 0 >&3` in \
     the shell that starts it (released when that shell exits).";

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("CPU {cpu} is not online (online CPUs: {online}): give --cpu one of them")]
    NoSuchCpu { cpu: usize, online: String },
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(
        "a previous `rtcell tune --apply` is still in effect (state file {path}): run `rtcell tune --revert` first, \
         or remove the file if its changes were undone by other means (a reboot)"
    )]
    StateExists { path: PathBuf },
    #[error("state file {path}: {source}")]
    StateIo {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("state file {path}, line {line}: {why}; fix or remove the file")]
    StateCorrupt { path: PathBuf, line: usize, why: String },
    #[error("nothing to revert: no state file at {path}")]
    NoState { path: PathBuf },
    #[error("state file {path} holds changes under {written}, not under {given}: revert with the same root")]
    OtherRoot { path: PathBuf, written: PathBuf, given: PathBuf },
}

/// One value to change.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// For people: "IRQ 36 (virtio1-req.0) affinity".
    pub label: String,
    /// The logical host path.
    pub path: String,
    /// The file's contents now, byte for byte.
    pub before: String,
    /// What to write.
    pub after: String,
    /// What to write to get `before` back.
    pub restore: String,
}

impl Change {
    /// `before -> after` as people read it: the current value without its newline.
    pub fn arrow(&self) -> String {
        let shown = match selected_choice(&self.before) {
            Some(sel) => sel.to_string(),
            None => self.before.trim().to_string(),
        };
        format!("{shown} -> {}", self.after)
    }

    fn entry(&self) -> Entry {
        Entry {
            label: self.label.clone(),
            path: self.path.clone(),
            before: self.before.clone(),
            after: self.after.clone(),
            restore: self.restore.clone(),
        }
    }
}

/// What `rtcell tune` would do for a cell CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub cpu: usize,
    /// Where IRQs and unbound work go.
    pub housekeeping: Vec<usize>,
    pub changes: Vec<Change>,
    /// Knobs left alone, each with why (already right, not on this machine, unreadable).
    pub unchanged: Vec<String>,
    pub boot: BootSuggestion,
}

/// Reads the current values and works out the changes for a cell on `cpu`.
pub fn plan(root: &HostRoot, cpu: usize) -> Result<Plan, TuneError> {
    let online = cpu::online_cpus_in(root)?;
    if !online.contains(&cpu) {
        return Err(TuneError::NoSuchCpu { cpu, online: format_cpu_list(&online) });
    }
    let isolated = cpu::isolated_cpus_in(root).unwrap_or_default();
    let hk = housekeeping_cpus(&online, &isolated, cpu);
    let mut p = Plan {
        cpu,
        housekeeping: hk.clone(),
        changes: Vec::new(),
        unchanged: Vec::new(),
        boot: boot::suggest(root, cpu, &online, &hk),
    };
    // Keeps what a CPU set may use: its housekeeping CPUs, else all of them.
    let away = |cpus: &[usize]| -> Vec<usize> {
        let kept: Vec<usize> = cpus.iter().copied().filter(|c| hk.contains(c)).collect();
        if kept.is_empty() { hk.clone() } else { kept }
    };
    if hk.is_empty() {
        p.unchanged.push(format!(
            "IRQ affinity and workqueue cpumask: no CPU but {cpu} is online, so there is nowhere to move them"
        ));
    } else {
        plan_irqs(root, &mut p, &away);
        plan_mask(
            root,
            &mut p,
            "/proc/irq/default_smp_affinity",
            "default IRQ affinity (IRQs registered later)",
            &away,
        );
        plan_mask(root, &mut p, WORKQUEUE_CPUMASK, "unbound workqueue cpumask", &away);
    }
    plan_governor(root, &mut p);
    plan_rt_throttling(root, &mut p);
    plan_value(root, &mut p, "/proc/sys/kernel/timer_migration", "timer migration", "0");
    plan_thp(root, &mut p);
    p.unchanged.push(DMA_LATENCY_NOTE.to_string());
    Ok(p)
}

fn plan_irqs(root: &HostRoot, p: &mut Plan, away: &dyn Fn(&[usize]) -> Vec<usize>) {
    let numbers = match irq::irq_numbers(root) {
        Ok(n) => n,
        Err(e) => return p.unchanged.push(format!("IRQ affinity: {e}")),
    };
    let lines = root.read("/proc/interrupts").ok().and_then(|t| irq::parse_interrupts(&t).ok()).unwrap_or_default();
    let mut moved = 0;
    for n in numbers {
        let list = format!("/proc/irq/{n}/smp_affinity_list");
        let (path, parsed) = match root.read(&list) {
            Ok(raw) => (list, parse_cpu_list(&raw).map(|c| (raw, c, false))),
            Err(e) if e.is_not_found() => {
                let mask = format!("/proc/irq/{n}/smp_affinity");
                match root.read(&mask) {
                    Ok(raw) => (mask, parse_cpu_mask(&raw).map(|c| (raw, c, true))),
                    Err(e) => {
                        p.unchanged.push(format!("IRQ {n}: {e}"));
                        continue;
                    }
                }
            }
            Err(e) => {
                p.unchanged.push(format!("IRQ {n}: {e}"));
                continue;
            }
        };
        let (raw, cpus, is_mask) = match parsed {
            Ok(v) => v,
            Err(why) => {
                p.unchanged.push(format!("IRQ {n}: could not parse {path}: {why}"));
                continue;
            }
        };
        if !cpus.contains(&p.cpu) {
            continue;
        }
        let to = away(&cpus);
        moved += 1;
        p.changes.push(Change {
            label: format!("IRQ {n} ({}) affinity", irq::irq_name(root, lines.iter().find(|l| l.number == Some(n)), n)),
            after: if is_mask { format_cpu_mask(&to) } else { format_cpu_list(&to) },
            restore: raw.trim().to_string(),
            before: raw,
            path,
        });
    }
    if moved == 0 {
        p.unchanged.push(format!("IRQ affinity: no device IRQ may be delivered to CPU {}", p.cpu));
    }
}

/// A hex CPU mask file from which the cell CPU is to be removed.
fn plan_mask(root: &HostRoot, p: &mut Plan, path: &str, label: &str, away: &dyn Fn(&[usize]) -> Vec<usize>) {
    let raw = match root.read(path) {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return p.unchanged.push(format!("{label}: not in this kernel ({path})")),
        Err(e) => return p.unchanged.push(format!("{label}: {e}")),
    };
    match parse_cpu_mask(&raw) {
        Ok(cpus) if cpus.contains(&p.cpu) => p.changes.push(Change {
            label: label.to_string(),
            path: path.to_string(),
            after: format_cpu_mask(&away(&cpus)),
            restore: raw.trim().to_string(),
            before: raw,
        }),
        Ok(cpus) => p.unchanged.push(format!("{label}: already CPUs {} only", format_cpu_list(&cpus))),
        Err(why) => p.unchanged.push(format!("{label}: could not parse {path}: {why}")),
    }
}

fn plan_governor(root: &HostRoot, p: &mut Plan) {
    let cpu = p.cpu;
    let label = format!("CPU {cpu} frequency governor");
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq");
    let path = format!("{dir}/scaling_governor");
    let raw = match root.read(&path) {
        Ok(r) => r,
        Err(e) if e.is_not_found() => {
            return p.unchanged.push(format!(
                "{label}: no frequency scaling exposed for CPU {cpu} (in a VM the host sets the frequency)"
            ));
        }
        Err(e) => return p.unchanged.push(format!("{label}: {e}")),
    };
    if raw.trim() == "performance" {
        return p.unchanged.push(format!("{label}: already performance"));
    }
    if let Ok(available) = root.read(&format!("{dir}/scaling_available_governors")) {
        if !available.split_whitespace().any(|g| g == "performance") {
            return p.unchanged.push(format!(
                "{label}: {} (the driver offers no performance governor: {})",
                raw.trim(),
                available.trim()
            ));
        }
    }
    p.changes.push(Change { label, path, after: "performance".into(), restore: raw.trim().to_string(), before: raw });
}

fn plan_rt_throttling(root: &HostRoot, p: &mut Plan) {
    const PATH: &str = "/proc/sys/kernel/sched_rt_runtime_us";
    let label = "RT throttling (sched_rt_runtime_us)";
    let raw = match root.read(PATH) {
        Ok(r) => r,
        Err(e) => return p.unchanged.push(format!("{label}: {e}")),
    };
    let runtime: i64 = match raw.trim().parse() {
        Ok(v) => v,
        Err(_) => return p.unchanged.push(format!("{label}: could not parse {PATH}: {:?}", raw.trim())),
    };
    let period = root.read_i64("/proc/sys/kernel/sched_rt_period_us").unwrap_or(1_000_000);
    if runtime < 0 || runtime >= period {
        return p.unchanged.push(format!("{label}: already off ({runtime})"));
    }
    if has_fair_server(root) {
        p.unchanged.push(format!(
            "note on RT throttling: on this kernel (6.12+) the fair deadline server still preempts a SCHED_FIFO \
             busy-poll on CPU {cpu} whenever normal tasks (per-CPU kernel workers) are queued there, for up to its \
             runtime (50 ms a second by default), and with throttling off a polling cell no longer yields to them: \
             isolate CPU {cpu}, set /sys/kernel/debug/sched/fair_server/cpu{cpu}/runtime to 0 (debugfs), and compare \
             with --measure",
            cpu = p.cpu
        ));
    }
    p.changes.push(Change {
        label: label.into(),
        path: PATH.into(),
        after: "-1".into(),
        restore: raw.trim().to_string(),
        before: raw,
    });
}

/// A file holding one word that should read `want`.
fn plan_value(root: &HostRoot, p: &mut Plan, path: &str, label: &str, want: &str) {
    match root.read(path) {
        Ok(raw) if raw.trim() == want => p.unchanged.push(format!("{label}: already {want}")),
        Ok(raw) => p.changes.push(Change {
            label: label.into(),
            path: path.into(),
            after: want.into(),
            restore: raw.trim().to_string(),
            before: raw,
        }),
        Err(e) if e.is_not_found() => p.unchanged.push(format!("{label}: not in this kernel ({path})")),
        Err(e) => p.unchanged.push(format!("{label}: {e}")),
    }
}

fn plan_thp(root: &HostRoot, p: &mut Plan) {
    let label = "transparent huge pages";
    let raw = match root.read(THP_ENABLED) {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return p.unchanged.push(format!("{label}: not in this kernel")),
        Err(e) => return p.unchanged.push(format!("{label}: {e}")),
    };
    match selected_choice(&raw) {
        Some("always") => p.changes.push(Change {
            label: label.into(),
            path: THP_ENABLED.into(),
            after: "never".into(),
            restore: "always".into(),
            before: raw,
        }),
        Some(other) => p.unchanged.push(format!("{label}: {other} (only \"always\" is changed, to never)")),
        None => p.unchanged.push(format!("{label}: could not parse {THP_ENABLED}: {:?}", raw.trim())),
    }
}

/// What happened to one change of an apply.
#[derive(Debug)]
pub enum Outcome {
    Changed,
    /// The kernel refused the write (e.g. a managed IRQ); nothing changed.
    Refused(WriteError),
}

/// The result of [`apply`]: each change attempted, in order, and whether it was cut short.
#[derive(Debug)]
pub struct Applied {
    pub state: PathBuf,
    pub done: Vec<(Change, Outcome)>,
    /// `should_stop` asked to stop before every change was made.
    pub stopped: bool,
}

impl Applied {
    pub fn refused(&self) -> usize {
        self.done.iter().filter(|(_, o)| matches!(o, Outcome::Refused(_))).count()
    }
}

/// Makes the changes of `plan`, recording each in a new state file at `state` before making it.
///
/// A value that changed since the plan was read is recorded as it is now. A write the kernel refuses
/// is reported and the others go on. `should_stop` is asked before each change (Ctrl-C): when it
/// says yes, the apply stops and the state file covers what was changed so far. `on_change` sees
/// every change as it is made.
pub fn apply(
    root: &HostRoot,
    plan: &Plan,
    state: &Path,
    should_stop: &dyn Fn() -> bool,
    on_change: &mut dyn FnMut(&Change, &Outcome),
) -> Result<Applied, TuneError> {
    let header = Header {
        rtcell_tune: state::STATE_VERSION,
        cpu: plan.cpu,
        root: root.base().to_path_buf(),
        pid: std::process::id(),
        started_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let mut journal = Journal::create(state, &header)?;
    let mut done = Vec::new();
    for planned in &plan.changes {
        if should_stop() {
            return Ok(Applied { state: journal.path().to_path_buf(), done, stopped: true });
        }
        let mut change = planned.clone();
        if let Ok(now) = root.read(&change.path) {
            if now != change.before {
                change.restore = match selected_choice(&now) {
                    Some(sel) if change.path == THP_ENABLED => sel.to_string(),
                    _ => now.trim().to_string(),
                };
                change.before = now;
            }
        }
        journal.append(&change.entry())?;
        let outcome = match root.write(&change.path, &change.after) {
            Ok(()) => Outcome::Changed,
            Err(e) => Outcome::Refused(e),
        };
        on_change(&change, &outcome);
        done.push((change, outcome));
    }
    Ok(Applied { state: journal.path().to_path_buf(), done, stopped: false })
}

/// What a revert did to one recorded change.
#[derive(Debug)]
pub enum Restored {
    /// Written back; the file reads as before, byte for byte.
    Restored,
    /// It already read as before (the change was refused, or undone by other means).
    AlreadyAsBefore,
    /// Written back, but the file now reads something else.
    Differs {
        now: String,
    },
    Failed(String),
}

impl Restored {
    pub fn is_ok(&self) -> bool {
        matches!(self, Restored::Restored | Restored::AlreadyAsBefore)
    }
}

#[derive(Debug)]
pub struct Reverted {
    pub header: Header,
    /// Every recorded change, last first, with what the revert did.
    pub done: Vec<(Entry, Restored)>,
    /// A cut-short last record was ignored (its change was never made).
    pub torn_tail: bool,
    /// The state file was removed (everything restored); otherwise it is kept for another try.
    pub removed: bool,
}

impl Reverted {
    pub fn all_ok(&self) -> bool {
        self.done.iter().all(|(_, r)| r.is_ok())
    }
}

/// Restores every value recorded in the state file, last change first, and removes the file when
/// all of them read as before again.
pub fn revert(root: &HostRoot, state: &Path) -> Result<Reverted, TuneError> {
    let s = State::load(state)?;
    if s.header.root != root.base() {
        return Err(TuneError::OtherRoot {
            path: state.to_path_buf(),
            written: s.header.root.clone(),
            given: root.base().to_path_buf(),
        });
    }
    let mut done = Vec::new();
    for e in s.entries.into_iter().rev() {
        let result = match root.read(&e.path) {
            Ok(now) if now == e.before => Restored::AlreadyAsBefore,
            _ => match root.write(&e.path, &e.restore) {
                Err(err) => Restored::Failed(err.to_string()),
                Ok(()) => match root.read(&e.path) {
                    Ok(now) if now == e.before => Restored::Restored,
                    Ok(now) => Restored::Differs { now },
                    Err(err) => Restored::Failed(err.to_string()),
                },
            },
        };
        done.push((e, result));
    }
    let mut r = Reverted { header: s.header, done, torn_tail: s.torn_tail, removed: false };
    if r.all_ok() {
        std::fs::remove_file(state).map_err(|source| TuneError::StateIo { path: state.to_path_buf(), source })?;
        r.removed = true;
    }
    Ok(r)
}

#[cfg(test)]
mod tests;
