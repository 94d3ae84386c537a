//! `rtcell check`: is this machine set up to give a cell CPU real-time behaviour?
//!
//! Each finding is a [`Verdict`] with a level, what was seen, why it matters for a cell on the
//! checked CPU, and (when something can be done) the command or boot parameter that fixes it.
//! Unreadable files are findings too, never panics: a check that cannot look is itself worth
//! knowing about, and is marked `unknown` so it moves neither the score nor the ranking.
//!
//! The items, by module: [`cpus`] (the CPU, housekeeping, isolation, nohz_full, RCU, SMT, kernel
//! threads), [`irq`] (device and per-CPU interrupts, irqbalance, `irqaffinity=`), [`power`]
//! (governors, idle states, `/dev/cpu_dma_latency`, C-state limits), [`kernel`] (preemption, RT
//! throttling, the fair server, timer migration, watchdogs, memory, workqueues, clocksource, boot
//! parameters), [`virt`] (hypervisor and steal, KVM, cache allocation, privileges). [`score`] turns
//! them into a score and the changes that would help most.

mod about;
pub mod cmdline;
pub mod cpus;
pub mod irq;
pub mod kernel;
pub mod power;
pub mod procs;
pub mod score;
pub mod virt;

#[cfg(test)]
mod tests;

use std::cell::{OnceCell, RefCell};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use cmdline::{cmdline_cpus, cmdline_param};
pub use irq::{IrqLine, format_cpu_mask, parse_cpu_mask, parse_interrupts};
pub use score::{HostCheck, TopChange};

use crate::cpu;
use crate::facts::CpuTimes;
use crate::root::{HostRoot, ReadError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// As good as this machine can be for the item.
    Ok,
    /// Runs work, but figures will be worse than they could be (or the item could not be checked).
    Warn,
    /// The cell cannot run as configured.
    Bad,
}

impl Level {
    /// Fixed-width tag for text output.
    pub fn tag(self) -> &'static str {
        match self {
            Level::Ok => "[ ok ]",
            Level::Warn => "[warn]",
            Level::Bad => "[bad ]",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Short name of what was checked, e.g. "isolation".
    pub item: String,
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// Why the item matters for a cell on the checked CPU (filled in from the item's name).
    #[serde(default)]
    pub why: String,
    /// How to improve it, when there is something to do.
    pub fix: Option<String>,
    /// How much the item counts in the score and the ranking of changes: 1 (minor) to 3 (major).
    #[serde(default)]
    pub weight: u8,
    /// The item could not be checked (a file was unreadable): it counts neither way.
    #[serde(default)]
    pub unknown: bool,
}

impl Verdict {
    pub fn new(item: &str, level: Level, detail: impl Into<String>) -> Verdict {
        Verdict {
            item: item.to_string(),
            level,
            detail: detail.into(),
            why: String::new(),
            fix: None,
            weight: 0,
            unknown: false,
        }
    }

    pub fn ok(item: &str, detail: impl Into<String>) -> Verdict {
        Verdict::new(item, Level::Ok, detail)
    }

    pub fn warn(item: &str, detail: impl Into<String>) -> Verdict {
        Verdict::new(item, Level::Warn, detail)
    }

    pub fn bad(item: &str, detail: impl Into<String>) -> Verdict {
        Verdict::new(item, Level::Bad, detail)
    }

    pub fn with_fix(mut self, fix: impl Into<String>) -> Verdict {
        self.fix = Some(fix.into());
        self
    }

    /// Marks the verdict as "could not be checked".
    pub fn not_checked(mut self) -> Verdict {
        self.unknown = true;
        self
    }

    /// An unreadable file, reported under the item that needed it.
    pub fn unreadable(item: &str, err: &ReadError) -> Verdict {
        let why = if err.source.kind() == std::io::ErrorKind::PermissionDenied {
            " (readable by root only: run the check as root to see it)"
        } else {
            ""
        };
        Verdict::warn(item, format!("{err}{why}")).not_checked()
    }

    /// Fills in `why` and `weight` from the item's name where the finding left them empty; the
    /// reason is phrased for a cell on `cpu`.
    pub fn annotate(&mut self, cpu: usize) {
        let (weight, why) = about::about(&self.item);
        if self.why.is_empty() {
            self.why = why.replace("{cpu}", &cpu.to_string());
        }
        if self.weight == 0 {
            self.weight = weight;
        }
    }
}

/// The worst level among `verdicts` (`Ok` for none).
pub fn worst(verdicts: &[Verdict]) -> Level {
    verdicts.iter().map(|v| v.level).max().unwrap_or(Level::Ok)
}

/// Knobs for [`check_cell_cpu_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    /// Steal already measured (e.g. over a benchmark run); when `None` it is sampled for
    /// `steal_sample` if a hypervisor is present.
    pub steal_pct: Option<f64>,
    /// How long to sample `/proc/stat` for steal and for the load on the SMT sibling; zero skips
    /// sampling.
    pub steal_sample: Duration,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { steal_pct: None, steal_sample: Duration::from_millis(200) }
    }
}

/// Checks everything that matters for a cell on `cell_cpu`, sampling `/proc/stat` for ~200 ms
/// when under a hypervisor or beside an SMT sibling.
pub fn check_cell_cpu(root: &HostRoot, cell_cpu: usize) -> Vec<Verdict> {
    check_cell_cpu_with(root, cell_cpu, &CheckOptions::default())
}

/// [`check_cell_cpu`] with explicit options. Every verdict comes back annotated (`why`, `weight`).
pub fn check_cell_cpu_with(root: &HostRoot, cell_cpu: usize, opts: &CheckOptions) -> Vec<Verdict> {
    let ctx = Ctx::new(root, cell_cpu, opts);
    let mut out = Vec::new();
    let cpu_exists = cpus::check_exists(&mut out, &ctx);
    if cpu_exists {
        cpus::check_housekeeping(&mut out, &ctx);
        cpus::check_isolation(&mut out, &ctx);
        cmdline::check_isolcpus(&mut out, &ctx);
        let nohz = cpus::check_nohz_full(&mut out, &ctx);
        cpus::check_rcu_nocbs(&mut out, &ctx, &nohz);
        cpus::check_smt(&mut out, &ctx);
        irq::check_irqs(&mut out, &ctx);
        irq::check_per_cpu_irqs(&mut out, &ctx);
    }
    irq::check_irqbalance(&mut out, &ctx);
    cmdline::check_irqaffinity(&mut out, &ctx);
    if cpu_exists {
        power::check_governor(&mut out, &ctx);
        power::check_idle_states(&mut out, &ctx);
    }
    power::check_pm_qos(&mut out, &ctx);
    cmdline::check_cstates(&mut out, &ctx);
    kernel::check_rt_throttling(&mut out, &ctx);
    if cpu_exists {
        kernel::check_fair_server(&mut out, &ctx);
    }
    kernel::check_timer_migration(&mut out, &ctx);
    kernel::check_nmi_watchdog(&mut out, &ctx);
    kernel::check_softlockup(&mut out, &ctx);
    kernel::check_thp(&mut out, &ctx);
    kernel::check_swap(&mut out, &ctx);
    kernel::check_ksm(&mut out, &ctx);
    kernel::check_workqueue(&mut out, &ctx);
    kernel::check_clocksource(&mut out, &ctx);
    cmdline::check_tsc_reliable(&mut out, &ctx);
    cmdline::check_skew_tick(&mut out, &ctx);
    if cpu_exists {
        cpus::check_kernel_threads(&mut out, &ctx);
    }
    kernel::check_preemption(&mut out, &ctx);
    cmdline::check_mitigations(&mut out, &ctx);
    virt::check_hypervisor(&mut out, &ctx);
    virt::check_kvm(&mut out, &ctx);
    virt::check_resctrl(&mut out, &ctx);
    virt::check_privileges(&mut out, &ctx);
    for v in &mut out {
        v.annotate(cell_cpu);
    }
    out
}

/// What every item may need, read once.
pub(crate) struct Ctx<'a> {
    pub root: &'a HostRoot,
    pub cell: usize,
    pub opts: &'a CheckOptions,
    pub online: Result<Vec<usize>, ReadError>,
    pub isolated: Result<Vec<usize>, ReadError>,
    pub cmdline: Result<String, ReadError>,
    pub cpuinfo: Result<String, ReadError>,
    /// CPUs left for the Linux side: online, not isolated, not the cell.
    pub housekeeping: Vec<usize>,
    procs: OnceCell<Result<Vec<procs::Proc>, ReadError>>,
    sample: RefCell<Sample>,
}

impl<'a> Ctx<'a> {
    pub fn new(root: &'a HostRoot, cell: usize, opts: &'a CheckOptions) -> Ctx<'a> {
        let sample = Sample::start(root, opts.steal_sample);
        let online = cpu::online_cpus_in(root);
        let isolated = cpu::isolated_cpus_in(root);
        let housekeeping =
            housekeeping_cpus(online.as_deref().unwrap_or_default(), isolated.as_deref().unwrap_or_default(), cell);
        Ctx {
            root,
            cell,
            opts,
            online,
            isolated,
            cmdline: root.read_trimmed("/proc/cmdline"),
            cpuinfo: root.read("/proc/cpuinfo"),
            housekeeping,
            procs: OnceCell::new(),
            sample: RefCell::new(sample),
        }
    }

    pub fn online_list(&self) -> &[usize] {
        self.online.as_deref().unwrap_or_default()
    }

    pub fn isolated_list(&self) -> &[usize] {
        self.isolated.as_deref().unwrap_or_default()
    }

    /// The kernel command line, empty when unreadable (the items that need it report that).
    pub fn cmdline_text(&self) -> &str {
        self.cmdline.as_deref().unwrap_or_default()
    }

    /// The processes of the system, scanned once.
    pub fn procs(&self) -> &Result<Vec<procs::Proc>, ReadError> {
        self.procs.get_or_init(|| procs::scan(self.root))
    }

    /// `/proc/stat` at the start of the check and after the sampling time (waiting out what is
    /// left of it); `None` when sampling is off or `/proc/stat` is unreadable.
    pub fn stat_window(&self) -> Option<StatWindow> {
        self.sample.borrow_mut().finish(self.root)
    }

    /// The housekeeping CPUs as a list, or a placeholder when there are none.
    pub fn hk_text(&self) -> String {
        if self.housekeeping.is_empty() {
            "<housekeeping CPUs>".to_string()
        } else {
            cpu::format_cpu_list(&self.housekeeping)
        }
    }
}

/// CPUs left for the Linux side: online, not isolated, not the cell. Falls back to "every other
/// online CPU" when isolation would leave nothing.
pub fn housekeeping_cpus(online: &[usize], isolated: &[usize], cell: usize) -> Vec<usize> {
    let hk: Vec<usize> = online.iter().copied().filter(|c| *c != cell && !isolated.contains(c)).collect();
    if hk.is_empty() { online.iter().copied().filter(|c| *c != cell).collect() } else { hk }
}

/// Two readings of `/proc/stat` and the time between them.
#[derive(Debug, Clone)]
pub(crate) struct StatWindow {
    pub start: String,
    pub end: String,
    pub elapsed: Duration,
}

impl StatWindow {
    /// (start, end) counters of one CPU, or of all (`None`).
    pub fn times(&self, cpu: Option<usize>) -> Option<(CpuTimes, CpuTimes)> {
        let parse = |t: &str| match cpu {
            Some(c) => CpuTimes::parse_proc_stat_cpu(t, c),
            None => CpuTimes::parse_proc_stat(t),
        };
        Some((parse(&self.start)?, parse(&self.end)?))
    }
}

/// A `/proc/stat` sample started with the check and finished by the first item that needs it, so
/// the wait overlaps the other reads.
struct Sample {
    started: Instant,
    length: Duration,
    start: Option<String>,
    done: Option<Option<StatWindow>>,
}

impl Sample {
    fn start(root: &HostRoot, length: Duration) -> Sample {
        let start = if length.is_zero() { None } else { root.read("/proc/stat").ok() };
        Sample { started: Instant::now(), length, start, done: None }
    }

    fn finish(&mut self, root: &HostRoot) -> Option<StatWindow> {
        if let Some(done) = &self.done {
            return done.clone();
        }
        let window = self.start.take().and_then(|start| {
            std::thread::sleep(self.length.saturating_sub(self.started.elapsed()));
            let end = root.read("/proc/stat").ok()?;
            Some(StatWindow { start, end, elapsed: self.started.elapsed() })
        });
        self.done = Some(window.clone());
        window
    }
}

/// Renders verdicts as an aligned list, with why and the fix under each finding that is not ok,
/// then the score and the changes that would help most:
///
/// ```text
/// [ ok ] cpu:        CPU 1 is online (online CPUs: 0-1)
/// [warn] isolation:  CPU 1 is not isolated (...)
///                    why: an isolated CPU 1 runs no other task ...
///                    fix: add `isolcpus=1 ...`
/// summary: 1 ok, 1 warn, 0 bad; score 75/100
/// ```
pub fn render_text(verdicts: &[Verdict]) -> String {
    let width = verdicts.iter().map(|v| v.item.chars().count() + 1).max().unwrap_or(0);
    let indent = " ".repeat(Level::Ok.tag().len() + 1 + width + 1);
    let mut out = String::new();
    for v in verdicts {
        let label = format!("{}:", v.item);
        let _ = writeln!(out, "{} {label:<width$} {}", v.level.tag(), v.detail);
        if v.level != Level::Ok && !v.why.is_empty() && !v.unknown {
            let _ = writeln!(out, "{indent}why: {}", v.why);
        }
        if let Some(fix) = &v.fix {
            let _ = writeln!(out, "{indent}fix: {fix}");
        }
    }
    let summary = score::Summary::of(verdicts);
    let _ = writeln!(out, "summary: {}", summary.line());
    if !summary.top.is_empty() {
        let _ = writeln!(out, "changes that would help most:");
        for (i, t) in summary.top.iter().enumerate() {
            let _ = writeln!(out, "  {}. {}: {}", i + 1, t.item, t.fix);
        }
    }
    out
}
