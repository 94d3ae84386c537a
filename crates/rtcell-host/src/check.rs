//! `rtcell check`: is this machine set up to give a cell CPU real-time behaviour?
//!
//! Each finding is a [`Verdict`] with a level, what was seen, and (when something can be done) the
//! command or boot parameter that fixes it. Unreadable files are findings too, never panics: a
//! check that cannot look is itself worth knowing about.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::cpu::{self, format_cpu_list, parse_cpu_list};
use crate::facts::{self, CpuTimes, preempt_model_in, steal_percent};
use crate::root::{HostRoot, ReadError};
use crate::sched::{CAP_IPC_LOCK, CAP_SYS_NICE, capability_in_status};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// Short name of what was checked, e.g. "isolation".
    pub item: String,
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// How to improve it, when there is something to do.
    pub fix: Option<String>,
}

impl Verdict {
    pub fn new(item: &str, level: Level, detail: impl Into<String>) -> Verdict {
        Verdict { item: item.to_string(), level, detail: detail.into(), fix: None }
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

    /// An unreadable file, reported under the item that needed it.
    pub fn unreadable(item: &str, err: &ReadError) -> Verdict {
        Verdict::warn(item, err.to_string())
    }
}

/// The worst level among `verdicts` (`Ok` for none): the exit status of `rtcell check`.
pub fn worst(verdicts: &[Verdict]) -> Level {
    verdicts.iter().map(|v| v.level).max().unwrap_or(Level::Ok)
}

/// Knobs for [`check_cell_cpu_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    /// Steal already measured (e.g. over a benchmark run); when `None` it is sampled for
    /// `steal_sample` if a hypervisor is present.
    pub steal_pct: Option<f64>,
    /// How long to sample `/proc/stat` for steal; zero skips sampling.
    pub steal_sample: Duration,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { steal_pct: None, steal_sample: Duration::from_millis(200) }
    }
}

/// Checks everything that matters for a cell on `cell_cpu`, sampling steal for ~200 ms if under a
/// hypervisor.
pub fn check_cell_cpu(root: &HostRoot, cell_cpu: usize) -> Vec<Verdict> {
    check_cell_cpu_with(root, cell_cpu, &CheckOptions::default())
}

/// [`check_cell_cpu`] with explicit options.
pub fn check_cell_cpu_with(root: &HostRoot, cell_cpu: usize, opts: &CheckOptions) -> Vec<Verdict> {
    let mut out = Vec::new();
    let online = cpu::online_cpus_in(root);
    let isolated = cpu::isolated_cpus_in(root);
    let cmdline = root.read_trimmed("/proc/cmdline");

    let cpu_exists = check_exists(&mut out, root, cell_cpu, &online);
    if cpu_exists {
        let online_list = online.as_ref().map(Vec::clone).unwrap_or_default();
        let isolated_list = isolated.as_ref().map(Vec::clone).unwrap_or_default();
        let housekeeping = housekeeping_cpus(&online_list, &isolated_list, cell_cpu);
        check_isolation(&mut out, cell_cpu, &isolated);
        let nohz = check_nohz_full(&mut out, root, cell_cpu);
        check_rcu_nocbs(&mut out, cell_cpu, &cmdline, &nohz, &online_list);
        check_irqs(&mut out, root, cell_cpu, &housekeeping);
        check_governor(&mut out, root, cell_cpu);
        check_idle_states(&mut out, root, cell_cpu);
        check_smt(&mut out, root, cell_cpu, &online_list, &isolated_list);
        check_fair_server(&mut out, root, cell_cpu);
    }
    check_rt_throttling(&mut out, root, cell_cpu);
    check_preemption(&mut out, root);
    check_hypervisor(&mut out, root, opts);
    check_privileges(&mut out, root);
    out
}

/// CPUs left for the Linux side: online, not isolated, not the cell. Falls back to "every other
/// online CPU" when isolation would leave nothing.
fn housekeeping_cpus(online: &[usize], isolated: &[usize], cell: usize) -> Vec<usize> {
    let hk: Vec<usize> = online.iter().copied().filter(|c| *c != cell && !isolated.contains(c)).collect();
    if hk.is_empty() { online.iter().copied().filter(|c| *c != cell).collect() } else { hk }
}

fn hk_text(hk: &[usize]) -> String {
    if hk.is_empty() { "<housekeeping CPUs>".to_string() } else { format_cpu_list(hk) }
}

fn check_exists(out: &mut Vec<Verdict>, root: &HostRoot, cell: usize, online: &Result<Vec<usize>, ReadError>) -> bool {
    const ITEM: &str = "cpu";
    match online {
        Ok(list) if list.contains(&cell) => {
            if list.len() == 1 {
                out.push(
                    Verdict::warn(
                        ITEM,
                        format!("CPU {cell} is the only online CPU: nothing is left for the Linux side"),
                    )
                    .with_fix("use a machine (or VM) with at least two CPUs"),
                );
            } else {
                out.push(Verdict::ok(ITEM, format!("CPU {cell} is online (online CPUs: {})", format_cpu_list(list))));
            }
            true
        }
        Ok(list) => {
            let present = root.exists(&format!("/sys/devices/system/cpu/cpu{cell}"));
            let v = if present {
                Verdict::bad(ITEM, format!("CPU {cell} is offline (online CPUs: {})", format_cpu_list(list)))
                    .with_fix(format!("echo 1 > /sys/devices/system/cpu/cpu{cell}/online"))
            } else {
                Verdict::bad(ITEM, format!("CPU {cell} does not exist (online CPUs: {})", format_cpu_list(list)))
                    .with_fix(format!("choose a cell CPU among {}", format_cpu_list(list)))
            };
            out.push(v);
            false
        }
        Err(e) => {
            // Cannot tell; carry on so the other findings are still reported.
            out.push(Verdict::unreadable(ITEM, e));
            true
        }
    }
}

/// Boot parameters isolating `cell` in addition to CPUs already isolated.
fn isolcpus_fix(cell: usize, already: &[usize]) -> String {
    let mut all = already.to_vec();
    all.push(cell);
    let list = format_cpu_list(&all);
    format!(
        "add `isolcpus={list} nohz_full={list} rcu_nocbs={list}` to the kernel command line and reboot \
         (or make CPU {cell} an isolated cpuset partition: cpuset.cpus.partition=isolated)"
    )
}

fn check_isolation(out: &mut Vec<Verdict>, cell: usize, isolated: &Result<Vec<usize>, ReadError>) {
    const ITEM: &str = "isolation";
    match isolated {
        Ok(list) if list.contains(&cell) => out.push(Verdict::ok(
            ITEM,
            format!("CPU {cell} is isolated from load balancing (isolated CPUs: {})", format_cpu_list(list)),
        )),
        Ok(list) => {
            let others = if list.is_empty() {
                "no CPU is isolated".to_string()
            } else {
                format!("isolated CPUs: {}", format_cpu_list(list))
            };
            out.push(
                Verdict::warn(
                    ITEM,
                    format!("CPU {cell} is not isolated ({others}): the scheduler may run other tasks on it"),
                )
                .with_fix(isolcpus_fix(cell, list)),
            );
        }
        Err(e) => out.push(Verdict::unreadable(ITEM, e)),
    }
}

/// Returns the nohz_full CPUs when known (they are also RCU-callback-free).
fn check_nohz_full(out: &mut Vec<Verdict>, root: &HostRoot, cell: usize) -> Option<Vec<usize>> {
    const ITEM: &str = "nohz_full";
    match cpu::read_cpu_list(root, "/sys/devices/system/cpu/nohz_full") {
        Ok(list) if list.contains(&cell) => {
            out.push(Verdict::ok(ITEM, format!("the scheduler tick stops on CPU {cell} while it runs a single task")));
            Some(list)
        }
        Ok(list) => {
            out.push(
                Verdict::warn(
                    ITEM,
                    format!("the periodic scheduler tick still interrupts CPU {cell} (not in nohz_full)"),
                )
                .with_fix(format!("add `nohz_full={cell}` to the kernel command line and reboot")),
            );
            Some(list)
        }
        Err(e) if e.is_not_found() => {
            out.push(
                Verdict::warn(ITEM, format!("{e} (the kernel is built without CONFIG_NO_HZ_FULL)"))
                    .with_fix("boot a kernel built with CONFIG_NO_HZ_FULL to stop the tick on the cell CPU"),
            );
            None
        }
        Err(e) => {
            out.push(Verdict::unreadable(ITEM, &e));
            None
        }
    }
}

/// Value of the last `key=` parameter on a kernel command line (arguments after `--` go to init).
pub fn cmdline_param<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_whitespace()
        .take_while(|t| *t != "--")
        .filter_map(|t| {
            let (k, v) = t.split_once('=').unwrap_or((t, ""));
            (k == key).then_some(v)
        })
        .last()
}

/// CPUs named by `isolcpus=` / `rcu_nocbs=` style values, which may start with flag words
/// (`isolcpus=nohz,domain,managed_irq,2-3`) or say `all`.
pub fn cmdline_cpus(value: &str, online: &[usize]) -> Result<Vec<usize>, String> {
    if value.trim() == "all" {
        return Ok(online.to_vec());
    }
    let list: Vec<&str> =
        value.split(',').filter(|p| !p.chars().next().is_some_and(|c| c.is_ascii_alphabetic())).collect();
    parse_cpu_list(&list.join(","))
}

fn check_rcu_nocbs(
    out: &mut Vec<Verdict>,
    cell: usize,
    cmdline: &Result<String, ReadError>,
    nohz: &Option<Vec<usize>>,
    online: &[usize],
) {
    const ITEM: &str = "rcu_nocbs";
    let cmdline = match cmdline {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    // nohz_full CPUs are offloaded implicitly.
    if nohz.as_ref().is_some_and(|l| l.contains(&cell)) {
        return out
            .push(Verdict::ok(ITEM, format!("RCU callbacks are offloaded from CPU {cell} (implied by nohz_full)")));
    }
    let offloaded = cmdline_param(cmdline, "rcu_nocbs").map(|v| cmdline_cpus(v, online)).transpose();
    match offloaded {
        Ok(Some(list)) if list.contains(&cell) => {
            out.push(Verdict::ok(ITEM, format!("RCU callbacks are offloaded from CPU {cell} (rcu_nocbs=)")));
        }
        Ok(_) => out.push(
            Verdict::warn(ITEM, format!("RCU callbacks may run on CPU {cell} (not in rcu_nocbs=)"))
                .with_fix(format!("add `rcu_nocbs={cell}` to the kernel command line and reboot")),
        ),
        Err(why) => out.push(Verdict::warn(ITEM, format!("could not parse rcu_nocbs= on /proc/cmdline: {why}"))),
    }
}

/// One line of `/proc/interrupts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqLine {
    /// "36" for a device IRQ, "LOC", "NMI", ... for per-CPU interrupts.
    pub label: String,
    /// The IRQ number of a device IRQ (those have `/proc/irq/N`).
    pub number: Option<u32>,
    /// (CPU, count since boot) for each CPU column present on the line.
    pub counts: Vec<(usize, u64)>,
    /// Everything after the counts: chip, hardware IRQ and device names, or a description.
    pub description: String,
}

impl IrqLine {
    pub fn count_on(&self, cpu: usize) -> Option<u64> {
        self.counts.iter().find(|(c, _)| *c == cpu).map(|(_, n)| *n)
    }
}

/// Parses `/proc/interrupts`: the header names the CPU of each column (offline CPUs are left out,
/// so columns are not CPU numbers).
pub fn parse_interrupts(text: &str) -> Result<Vec<IrqLine>, String> {
    let mut lines = text.lines();
    let header = lines.next().ok_or("empty /proc/interrupts")?;
    let cpus: Vec<usize> = header
        .split_whitespace()
        .map(|t| {
            t.strip_prefix("CPU")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("unexpected /proc/interrupts header {header:?}"))
        })
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for line in lines {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let label = label.trim();
        if label.is_empty() {
            continue;
        }
        let mut tokens = rest.split_whitespace().peekable();
        let mut counts = Vec::new();
        for &cpu in &cpus {
            match tokens.peek().and_then(|t| t.parse::<u64>().ok()) {
                Some(n) => {
                    counts.push((cpu, n));
                    tokens.next();
                }
                None => break,
            }
        }
        out.push(IrqLine {
            label: label.to_string(),
            number: label.parse().ok(),
            counts,
            description: tokens.collect::<Vec<_>>().join(" "),
        });
    }
    Ok(out)
}

/// Parses a kernel hex CPU mask (`3`, `ff,ffffffff`) into CPU numbers.
pub fn parse_cpu_mask(text: &str) -> Result<Vec<usize>, String> {
    let digits: Vec<char> = text.trim().chars().filter(|c| *c != ',').collect();
    if digits.is_empty() {
        return Err("empty CPU mask".to_string());
    }
    let mut cpus = Vec::new();
    for (i, c) in digits.iter().rev().enumerate() {
        let v = c.to_digit(16).ok_or_else(|| format!("bad CPU mask {text:?}"))?;
        for b in 0..4 {
            if v & (1 << b) != 0 {
                cpus.push(i * 4 + b);
            }
        }
    }
    Ok(cpus)
}

/// Formats CPUs as a kernel hex mask (32-bit groups separated by commas), for
/// `/proc/irq/default_smp_affinity`.
pub fn format_cpu_mask(cpus: &[usize]) -> String {
    let max = cpus.iter().copied().max().unwrap_or(0);
    let mut words = vec![0u32; max / 32 + 1];
    for &c in cpus {
        words[c / 32] |= 1 << (c % 32);
    }
    let mut out = String::new();
    for (i, w) in words.iter().rev().enumerate() {
        if i == 0 {
            let _ = write!(out, "{w:x}");
        } else {
            let _ = write!(out, ",{w:08x}");
        }
    }
    out
}

fn irq_name(root: &HostRoot, line: &IrqLine, n: u32) -> String {
    // The kernel makes a directory per handler under /proc/irq/N; its name is the device's.
    if let Ok(dirs) = root.list_subdirs(&format!("/proc/irq/{n}")) {
        if !dirs.is_empty() {
            return dirs.join(", ");
        }
    }
    line.description.split_whitespace().last().unwrap_or("?").to_string()
}

fn check_irqs(out: &mut Vec<Verdict>, root: &HostRoot, cell: usize, hk: &[usize]) {
    const ITEM: &str = "irqs";
    let lines = match root.read("/proc/interrupts") {
        Ok(text) => match parse_interrupts(&text) {
            Ok(l) => l,
            Err(why) => {
                return out.push(Verdict::warn(ITEM, format!("could not parse /proc/interrupts: {why}")));
            }
        },
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    let mut routed = Vec::new();
    let mut fired_before = Vec::new();
    let mut per_cpu = Vec::new();
    for line in &lines {
        let on_cell = line.count_on(cell).unwrap_or(0);
        let Some(n) = line.number else {
            if on_cell > 0 {
                per_cpu.push(format!("{} {on_cell} ({})", line.label, line.description));
            }
            continue;
        };
        let path = format!("/proc/irq/{n}/smp_affinity_list");
        let affinity = cpu::read_cpu_list(root, &path);
        match affinity {
            Ok(aff) if aff.contains(&cell) => {
                let name = irq_name(root, line, n);
                routed.push((n, name, on_cell));
            }
            Ok(_) => {
                if on_cell > 0 {
                    fired_before.push(format!("{n} ({})", irq_name(root, line, n)));
                }
            }
            Err(e) => {
                out.push(Verdict::unreadable(ITEM, &e));
                if on_cell > 0 {
                    routed.push((n, irq_name(root, line, n), on_cell));
                }
            }
        }
    }
    let hk_list = hk_text(hk);
    // Where IRQs registered later will go.
    let mut default_note = String::new();
    let mut default_fix = String::new();
    match root.read_optional("/proc/irq/default_smp_affinity") {
        Ok(Some(text)) => match parse_cpu_mask(&text) {
            Ok(mask) if mask.contains(&cell) => {
                default_note = format!("; IRQs registered later default to CPUs {}", format_cpu_list(&mask));
                if !hk.is_empty() {
                    default_fix = format!("; echo {} > /proc/irq/default_smp_affinity", format_cpu_mask(hk));
                }
            }
            Ok(_) => {}
            Err(why) => out.push(Verdict::warn(ITEM, format!("could not parse /proc/irq/default_smp_affinity: {why}"))),
        },
        Ok(None) => {}
        Err(e) => out.push(Verdict::unreadable(ITEM, &e)),
    }
    let before = if fired_before.is_empty() {
        String::new()
    } else {
        format!(
            "; IRQs {} fired on CPU {cell} earlier but are routed elsewhere now (counts are since boot)",
            fired_before.join(", ")
        )
    };
    if routed.is_empty() {
        let level = if default_note.is_empty() { Level::Ok } else { Level::Warn };
        let mut v = Verdict::new(ITEM, level, format!("no device IRQ is routed to CPU {cell}{before}{default_note}"));
        if !default_fix.is_empty() {
            v = v.with_fix(default_fix.trim_start_matches("; ").to_string());
        }
        out.push(v);
    } else {
        let listed: Vec<String> = routed
            .iter()
            .map(
                |(n, name, count)| {
                    if *count > 0 { format!("{n} ({name}, {count} there so far)") } else { format!("{n} ({name})") }
                },
            )
            .collect();
        let numbers: Vec<String> = routed.iter().map(|(n, _, _)| n.to_string()).collect();
        out.push(
            Verdict::warn(
                ITEM,
                format!(
                    "{} device IRQ{} may be delivered to CPU {cell}: {}{before}{default_note}",
                    routed.len(),
                    if routed.len() == 1 { "" } else { "s" },
                    listed.join(", ")
                ),
            )
            .with_fix(format!(
                "for i in {}; do echo {hk_list} > /proc/irq/$i/smp_affinity_list; done{default_fix}; \
                 stop irqbalance (systemctl stop irqbalance) so it does not move them back; \
                 managed IRQs of multi-queue devices refuse the write: boot with isolcpus=managed_irq,domain,{cell}",
                numbers.join(" ")
            )),
        );
    }
    let per_cpu_detail = if per_cpu.is_empty() {
        format!("no per-CPU interrupts have fired on CPU {cell}")
    } else {
        format!("per-CPU interrupts cannot be moved; on CPU {cell} since boot: {}", per_cpu.join(", "))
    };
    out.push(Verdict::ok("per-cpu irqs", per_cpu_detail));
}

fn check_governor(out: &mut Vec<Verdict>, root: &HostRoot, cell: usize) {
    const ITEM: &str = "governor";
    let dir = format!("/sys/devices/system/cpu/cpu{cell}/cpufreq");
    if !root.exists(&dir) {
        // Under a hypervisor the host owns frequency; on bare metal a missing driver means the
        // firmware may still change it behind the kernel's back.
        let in_vm = root.read("/proc/cpuinfo").is_ok_and(|c| facts::cpuinfo_has_flag(&c, "hypervisor"));
        let v = if in_vm {
            Verdict::ok(ITEM, "no frequency scaling exposed (typical in a VM)")
        } else {
            Verdict::warn(
                ITEM,
                "no frequency scaling exposed: no cpufreq driver, so firmware may still vary the frequency",
            )
            .with_fix("set the firmware (BIOS) power profile to maximum performance")
        };
        return out.push(v);
    }
    let path = format!("{dir}/scaling_governor");
    match root.read_trimmed(&path) {
        Ok(g) if g == "performance" => out.push(Verdict::ok(ITEM, format!("CPU {cell} uses the performance governor"))),
        Ok(g) => out.push(
            Verdict::warn(
                ITEM,
                format!("CPU {cell} uses the {g} governor: frequency changes add latency and vary execution times"),
            )
            .with_fix(format!("echo performance > {path} (or cpupower -c {cell} frequency-set -g performance)")),
        ),
        Err(e) => out.push(Verdict::unreadable(ITEM, &e)),
    }
}

/// Exit latency above which an idle state is worth disabling for a cell that sleeps between periods.
const IDLE_LATENCY_LIMIT_US: u64 = 10;

fn check_idle_states(out: &mut Vec<Verdict>, root: &HostRoot, cell: usize) {
    const ITEM: &str = "idle states";
    let dir = format!("/sys/devices/system/cpu/cpu{cell}/cpuidle");
    let states = match root.list_subdirs(&dir) {
        Ok(s) => s,
        Err(e) if e.is_not_found() => {
            return out.push(Verdict::ok(ITEM, format!("no cpuidle states exposed for CPU {cell}")));
        }
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    let mut enabled = Vec::new();
    let mut deep = Vec::new();
    for s in states.iter().filter(|s| s.starts_with("state")) {
        let base = format!("{dir}/{s}");
        let (name, latency, disabled) = match (
            root.read_trimmed(&format!("{base}/name")),
            root.read_i64(&format!("{base}/latency")),
            root.read_i64(&format!("{base}/disable")),
        ) {
            (Ok(n), Ok(l), Ok(d)) => (n, l, d != 0),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                out.push(Verdict::unreadable(ITEM, &e));
                continue;
            }
        };
        if disabled {
            continue;
        }
        enabled.push(format!("{name} ({latency} us)"));
        if latency > IDLE_LATENCY_LIMIT_US as i64 {
            deep.push(format!("{base}/disable"));
        }
    }
    let list = if enabled.is_empty() { "none".to_string() } else { enabled.join(", ") };
    if deep.is_empty() {
        out.push(Verdict::ok(ITEM, format!("enabled idle states on CPU {cell}: {list}")));
    } else {
        out.push(
            Verdict::warn(
                ITEM,
                format!(
                    "enabled idle states on CPU {cell}: {list}; waking from those above \
                     {IDLE_LATENCY_LIMIT_US} us delays cells that sleep between periods"
                ),
            )
            .with_fix(format!(
                "for f in {}; do echo 1 > $f; done (or hold /dev/cpu_dma_latency at 0 during runs)",
                deep.join(" ")
            )),
        );
    }
}

fn check_smt(out: &mut Vec<Verdict>, root: &HostRoot, cell: usize, online: &[usize], isolated: &[usize]) {
    const ITEM: &str = "smt";
    let siblings = match cpu::smt_siblings_in(root, cell) {
        Ok(s) => s,
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    if siblings.is_empty() {
        return out.push(Verdict::ok(ITEM, format!("CPU {cell} has no SMT sibling")));
    }
    let busy: Vec<usize> = siblings.iter().copied().filter(|s| online.contains(s) && !isolated.contains(s)).collect();
    if busy.is_empty() {
        out.push(Verdict::ok(
            ITEM,
            format!(
                "CPU {cell}'s SMT sibling{} {} offline or isolated",
                if siblings.len() == 1 { "" } else { "s" },
                format_cpu_list(&siblings)
            ),
        ));
    } else {
        let list = format_cpu_list(&busy);
        let mut all = busy.clone();
        all.push(cell);
        let offline: Vec<String> =
            busy.iter().map(|s| format!("echo 0 > /sys/devices/system/cpu/cpu{s}/online")).collect();
        out.push(
            Verdict::warn(
                ITEM,
                format!(
                    "CPU {cell} shares its core with CPU {list}, which is online and not isolated: \
                     work there slows the cell down"
                ),
            )
            .with_fix(format!(
                "take the sibling offline ({}), boot with `nosmt`, or isolate it too (isolcpus={})",
                offline.join("; "),
                format_cpu_list(&all)
            )),
        );
    }
}

/// (major, minor) of a kernel release such as "6.12.9-amd64".
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn has_fair_server(root: &HostRoot) -> bool {
    root.read_trimmed("/proc/sys/kernel/osrelease").ok().and_then(|r| kernel_version(&r)).is_some_and(|v| v >= (6, 12))
}

fn check_rt_throttling(out: &mut Vec<Verdict>, root: &HostRoot, cell: usize) {
    const ITEM: &str = "rt throttling";
    let runtime = match root.read_i64("/proc/sys/kernel/sched_rt_runtime_us") {
        Ok(r) => r,
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    let fair_note = if has_fair_server(root) {
        format!(
            "; on this kernel the fair deadline server (/sys/kernel/debug/sched/fair_server/cpu{cell}/runtime) \
             also preempts SCHED_FIFO tasks"
        )
    } else {
        String::new()
    };
    if runtime < 0 {
        return out
            .push(Verdict::ok(ITEM, format!("real-time throttling is off (sched_rt_runtime_us = -1){fair_note}")));
    }
    let period = match root.read_i64("/proc/sys/kernel/sched_rt_period_us") {
        Ok(p) => p,
        Err(e) => {
            out.push(Verdict::unreadable(ITEM, &e));
            1_000_000
        }
    };
    if runtime >= period {
        return out.push(Verdict::ok(
            ITEM,
            format!("sched_rt_runtime_us ({runtime}) covers the whole period ({period} us){fair_note}"),
        ));
    }
    out.push(
        Verdict::warn(
            ITEM,
            format!(
                "a SCHED_FIFO busy-poll is throttled for {} every {} (sched_rt_runtime_us = {runtime}){fair_note}",
                us_text(period - runtime),
                us_text(period)
            ),
        )
        .with_fix("echo -1 > /proc/sys/kernel/sched_rt_runtime_us"),
    );
}

fn us_text(us: i64) -> String {
    if us == 1_000_000 {
        "second".to_string()
    } else if us % 1000 == 0 {
        format!("{} ms", us / 1000)
    } else {
        format!("{us} us")
    }
}

fn check_fair_server(out: &mut Vec<Verdict>, root: &HostRoot, cell: usize) {
    const ITEM: &str = "fair server";
    let dir = format!("/sys/kernel/debug/sched/fair_server/cpu{cell}");
    let runtime_path = format!("{dir}/runtime");
    if !root.exists(&dir) {
        if has_fair_server(root) {
            let e = root
                .read(&runtime_path)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| format!("could not read {runtime_path}"));
            let v = match std::fs::metadata(root.path("/sys/kernel/debug/sched")) {
                Ok(_) => Verdict::warn(ITEM, format!("{e} (this kernel has no fair server controls)")),
                Err(m) if m.kind() == std::io::ErrorKind::PermissionDenied => {
                    Verdict::warn(ITEM, format!("{e} (debugfs is readable by root only)"))
                        .with_fix("run the check as root")
                }
                Err(_) => Verdict::warn(ITEM, format!("{e} (debugfs is not mounted)"))
                    .with_fix("mount -t debugfs none /sys/kernel/debug, then run the check again"),
            };
            out.push(v);
        }
        return;
    }
    let runtime = match root.read_i64(&runtime_path) {
        Ok(r) => r,
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    if runtime == 0 {
        return out.push(Verdict::ok(ITEM, format!("the fair deadline server is off on CPU {cell}")));
    }
    let period = root.read_i64(&format!("{dir}/period")).ok();
    let every = period.map(|p| format!(" every {p} ns")).unwrap_or_default();
    out.push(
        Verdict::warn(
            ITEM,
            format!(
                "the fair deadline server reserves {runtime} ns{every} on CPU {cell} for normal tasks: \
                 when any are runnable there they preempt a SCHED_FIFO busy-poll"
            ),
        )
        .with_fix(format!("echo 0 > {runtime_path}")),
    );
}

fn check_preemption(out: &mut Vec<Verdict>, root: &HostRoot) {
    const ITEM: &str = "preemption";
    let model = preempt_model_in(root);
    let kernel = root.read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|_| "unknown".into());
    let fix = "boot a PREEMPT_RT kernel (Debian: linux-image-rt-amd64)";
    match model {
        "rt" => out.push(Verdict::ok(ITEM, format!("PREEMPT_RT kernel ({kernel})"))),
        "unknown" => out.push(
            Verdict::warn(ITEM, format!("could not determine the preemption model of kernel {kernel}")).with_fix(fix),
        ),
        m => out.push(
            Verdict::warn(
                ITEM,
                format!(
                    "preemption model is {m} (kernel {kernel}), not PREEMPT_RT: non-preemptible kernel \
                     sections delay the cell's wake-ups"
                ),
            )
            .with_fix(fix),
        ),
    }
}

fn check_hypervisor(out: &mut Vec<Verdict>, root: &HostRoot, opts: &CheckOptions) {
    const ITEM: &str = "hypervisor";
    let cpuinfo = match root.read("/proc/cpuinfo") {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    let Some(hv) = facts::hypervisor_in(root, &cpuinfo) else {
        return out.push(Verdict::ok(ITEM, "no hypervisor: bare metal"));
    };
    let steal = opts.steal_pct.map(|p| (p, None)).or_else(|| {
        if opts.steal_sample.is_zero() {
            return None;
        }
        let read = || CpuTimes::parse_proc_stat(&root.read("/proc/stat").ok()?);
        let a = read()?;
        std::thread::sleep(opts.steal_sample);
        let b = read()?;
        steal_percent(&a, &b).map(|p| (p, Some(opts.steal_sample)))
    });
    let steal_text = match steal {
        Some((p, Some(d))) => format!("steal {p:.1}% over {} ms", d.as_millis()),
        Some((p, None)) => format!("steal {p:.1}%"),
        None => "steal not measured".to_string(),
    };
    out.push(
        Verdict::warn(
            ITEM,
            format!(
                "running under {hv} ({steal_text}): figures include the outer hypervisor's preemption; \
                 maxima of several ms are expected"
            ),
        )
        .with_fix("compare tools side by side in one run; for worst-case figures run on bare metal"),
    );
}

fn check_privileges(out: &mut Vec<Verdict>, root: &HostRoot) {
    const ITEM: &str = "privileges";
    let status = match root.read("/proc/self/status") {
        Ok(s) => s,
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u32>().ok());
    let euid = match euid {
        Some(u) => u,
        None if root.is_system() => u32::from(!facts::is_root()),
        None => {
            return out.push(Verdict::warn(ITEM, "could not find the effective uid in /proc/self/status"));
        }
    };
    if euid == 0 {
        return out.push(Verdict::ok(ITEM, "running as root: SCHED_FIFO and mlockall are available"));
    }
    let missing: BTreeSet<&str> = [(CAP_SYS_NICE, "CAP_SYS_NICE"), (CAP_IPC_LOCK, "CAP_IPC_LOCK")]
        .into_iter()
        .filter(|(cap, _)| capability_in_status(&status, *cap) != Some(true))
        .map(|(_, name)| name)
        .collect();
    if missing.is_empty() {
        return out.push(Verdict::ok(
            ITEM,
            "not root, but CAP_SYS_NICE and CAP_IPC_LOCK are held: SCHED_FIFO and mlockall are available",
        ));
    }
    let names: Vec<&str> = missing.into_iter().collect();
    out.push(
        Verdict::warn(
            ITEM,
            format!(
                "not root and without {}: SCHED_FIFO and mlockall may be refused (unless RLIMIT_RTPRIO and \
                 RLIMIT_MEMLOCK allow them)",
                names.join(" and ")
            ),
        )
        .with_fix("run as root, or grant the capabilities: setcap cap_sys_nice,cap_ipc_lock+ep <rtcell binary>"),
    );
}

/// Renders verdicts as an aligned list with fixes under their finding and a summary line:
///
/// ```text
/// [ ok ] cpu:        CPU 1 is online (online CPUs: 0-1)
/// [warn] isolation:  CPU 1 is not isolated (...)
///                    fix: add `isolcpus=1 ...`
/// summary: 1 ok, 1 warn, 0 bad
/// ```
pub fn render_text(verdicts: &[Verdict]) -> String {
    let width = verdicts.iter().map(|v| v.item.chars().count() + 1).max().unwrap_or(0);
    let indent = " ".repeat(Level::Ok.tag().len() + 1 + width + 1);
    let mut out = String::new();
    for v in verdicts {
        let label = format!("{}:", v.item);
        let _ = writeln!(out, "{} {label:<width$} {}", v.level.tag(), v.detail);
        if let Some(fix) = &v.fix {
            let _ = writeln!(out, "{indent}fix: {fix}");
        }
    }
    let count = |l: Level| verdicts.iter().filter(|v| v.level == l).count();
    let _ = writeln!(out, "summary: {} ok, {} warn, {} bad", count(Level::Ok), count(Level::Warn), count(Level::Bad));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(base: &Path, rel: &str, text: &str) {
        let p = base.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    const INTERRUPTS: &str = "           CPU0       CPU1       \n  \
 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n  \
 36:          0      31445 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n  \
 41:       1447          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx\n\
NMI:          0          0   Non-maskable interrupts\n\
LOC:       8730       9656   Local timer interrupts\n\
ERR:          0\n";

    /// A two-CPU machine, cell on CPU 1, every knob set badly.
    fn untuned(base: &Path) {
        write(
            base,
            "proc/cpuinfo",
            "processor\t: 0\nmodel name\t: Test\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n",
        );
        write(base, "sys/devices/system/cpu/online", "0-1\n");
        write(base, "sys/devices/system/cpu/isolated", "\n");
        write(base, "sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "1\n");
        write(base, "proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet\n");
        write(base, "proc/interrupts", INTERRUPTS);
        write(base, "proc/irq/24/smp_affinity_list", "0\n");
        write(base, "proc/irq/36/smp_affinity_list", "0-1\n");
        std::fs::create_dir_all(base.join("proc/irq/36/virtio1-req.0")).unwrap();
        write(base, "proc/irq/41/smp_affinity_list", "0-1\n");
        write(base, "proc/irq/default_smp_affinity", "3\n");
        write(base, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n");
        write(base, "proc/sys/kernel/sched_rt_runtime_us", "950000\n");
        write(base, "proc/sys/kernel/sched_rt_period_us", "1000000\n");
        write(base, "proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
        write(base, "proc/sys/kernel/version", "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1\n");
        write(base, "proc/self/status", "Name:\trtcell\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n");
        write(base, "proc/stat", "cpu  1 0 1 10 0 0 0 0 0 0\n");
    }

    /// The same machine tuned for a cell on CPU 1.
    fn tuned(base: &Path) {
        untuned(base);
        write(base, "sys/devices/system/cpu/isolated", "1\n");
        write(base, "sys/devices/system/cpu/nohz_full", "1\n");
        write(base, "proc/cmdline", "isolcpus=1 nohz_full=1 rcu_nocbs=1\n");
        write(base, "proc/irq/36/smp_affinity_list", "0\n");
        write(base, "proc/irq/41/smp_affinity_list", "0\n");
        write(base, "proc/irq/default_smp_affinity", "1\n");
        write(base, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "performance\n");
        write(base, "proc/sys/kernel/sched_rt_runtime_us", "-1\n");
        write(base, "proc/sys/kernel/version", "#1 SMP PREEMPT_RT Debian 6.1.76-1\n");
        write(base, "proc/self/status", "Name:\trtcell\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n");
    }

    fn run(base: &Path, cpu: usize) -> Vec<Verdict> {
        let opts = CheckOptions { steal_pct: None, steal_sample: Duration::ZERO };
        check_cell_cpu_with(&HostRoot::at(base), cpu, &opts)
    }

    fn find<'a>(vs: &'a [Verdict], item: &str) -> &'a Verdict {
        vs.iter().find(|v| v.item == item).unwrap_or_else(|| panic!("no {item} verdict in {vs:#?}"))
    }

    #[test]
    fn untuned_machine_gets_warnings_with_fixes() {
        let dir = tempfile::tempdir().unwrap();
        untuned(dir.path());
        let vs = run(dir.path(), 1);

        assert_eq!(find(&vs, "cpu").level, Level::Ok);
        let iso = find(&vs, "isolation");
        assert_eq!(iso.level, Level::Warn);
        assert!(iso.fix.as_deref().unwrap().contains("isolcpus=1 nohz_full=1 rcu_nocbs=1"));
        // nohz_full file missing: its own finding, not a panic.
        let nohz = find(&vs, "nohz_full");
        assert_eq!(nohz.level, Level::Warn);
        assert!(nohz.detail.contains("could not read /sys/devices/system/cpu/nohz_full"), "{}", nohz.detail);
        assert_eq!(find(&vs, "rcu_nocbs").level, Level::Warn);

        let irqs = find(&vs, "irqs");
        assert_eq!(irqs.level, Level::Warn);
        assert!(irqs.detail.contains("36 (virtio1-req.0, 31445 there so far)"), "{}", irqs.detail);
        assert!(irqs.detail.contains("41 (virtio3-rx)"), "{}", irqs.detail);
        assert!(!irqs.detail.contains("24 ("), "{}", irqs.detail);
        let fix = irqs.fix.as_deref().unwrap();
        assert!(fix.contains("for i in 36 41; do echo 0 > /proc/irq/$i/smp_affinity_list"), "{fix}");
        assert!(fix.contains("echo 1 > /proc/irq/default_smp_affinity"), "{fix}");
        assert!(fix.contains("irqbalance"), "{fix}");
        let per_cpu = find(&vs, "per-cpu irqs");
        assert!(per_cpu.detail.contains("LOC 9656"), "{}", per_cpu.detail);
        assert!(!per_cpu.detail.contains("NMI"), "{}", per_cpu.detail);

        let gov = find(&vs, "governor");
        assert_eq!(gov.level, Level::Warn);
        assert!(gov.detail.contains("powersave"));
        assert!(
            gov.fix
                .as_deref()
                .unwrap()
                .contains("echo performance > /sys/devices/system/cpu/cpu1/cpufreq/scaling_governor")
        );

        let rt = find(&vs, "rt throttling");
        assert_eq!(rt.level, Level::Warn);
        assert!(rt.detail.contains("throttled for 50 ms every second"), "{}", rt.detail);
        assert_eq!(rt.fix.as_deref(), Some("echo -1 > /proc/sys/kernel/sched_rt_runtime_us"));

        let pre = find(&vs, "preemption");
        assert_eq!(pre.level, Level::Warn);
        assert!(pre.fix.as_deref().unwrap().contains("linux-image-rt-amd64"));

        assert_eq!(find(&vs, "smt").level, Level::Ok);
        assert_eq!(find(&vs, "hypervisor").level, Level::Ok);
        let privs = find(&vs, "privileges");
        assert_eq!(privs.level, Level::Warn);
        assert!(privs.detail.contains("CAP_SYS_NICE"));
        // 6.1 has no fair server: no finding about it.
        assert!(vs.iter().all(|v| v.item != "fair server"));
        assert_eq!(worst(&vs), Level::Warn);
    }

    #[test]
    fn tuned_machine_is_all_ok() {
        let dir = tempfile::tempdir().unwrap();
        tuned(dir.path());
        let vs = run(dir.path(), 1);
        for v in &vs {
            assert_eq!(v.level, Level::Ok, "{v:?}");
        }
        assert!(find(&vs, "irqs").detail.contains("IRQs 36 (virtio1-req.0) fired on CPU 1 earlier"));
        assert!(find(&vs, "rt throttling").detail.contains("off"));
        assert!(find(&vs, "isolation").detail.contains("is isolated"));
    }

    #[test]
    fn missing_cpu_is_bad_and_offline_cpu_has_a_fix() {
        let dir = tempfile::tempdir().unwrap();
        untuned(dir.path());
        let vs = run(dir.path(), 7);
        let c = find(&vs, "cpu");
        assert_eq!(c.level, Level::Bad);
        assert!(c.detail.contains("does not exist"));
        // Per-CPU findings are skipped; host-wide ones remain.
        assert!(vs.iter().all(|v| v.item != "isolation"));
        assert!(vs.iter().any(|v| v.item == "rt throttling"));
        assert_eq!(worst(&vs), Level::Bad);

        std::fs::create_dir_all(dir.path().join("sys/devices/system/cpu/cpu7")).unwrap();
        let vs = run(dir.path(), 7);
        assert!(find(&vs, "cpu").fix.as_deref().unwrap().contains("cpu7/online"));
    }

    #[test]
    fn smt_sibling_and_vm_findings() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path();
        untuned(b);
        write(b, "sys/devices/system/cpu/online", "0-3\n");
        write(b, "sys/devices/system/cpu/isolated", "1\n");
        write(b, "sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "1,3\n");
        write(b, "proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu tsc hypervisor\n");
        write(b, "sys/hypervisor/type", "xen\n");
        std::fs::remove_dir_all(b.join("sys/devices/system/cpu/cpu1/cpufreq")).unwrap();
        let opts = CheckOptions { steal_pct: Some(1.25), steal_sample: Duration::ZERO };
        let vs = check_cell_cpu_with(&HostRoot::at(b), 1, &opts);
        let smt = find(&vs, "smt");
        assert_eq!(smt.level, Level::Warn);
        assert!(smt.detail.contains("CPU 3"), "{}", smt.detail);
        assert!(smt.fix.as_deref().unwrap().contains("isolcpus=1,3"));
        let hv = find(&vs, "hypervisor");
        assert_eq!(hv.level, Level::Warn);
        assert!(hv.detail.contains("Xen") && hv.detail.contains("steal 1.2%"), "{}", hv.detail);
        assert!(hv.detail.contains("maxima of several ms are expected"));
        let gov = find(&vs, "governor");
        assert_eq!(gov.level, Level::Ok);
        assert!(gov.detail.contains("typical in a VM"));
        // IRQs routed to 0-3 leave housekeeping CPUs 0,2-3 in the fix.
        let irqs = find(&vs, "irqs");
        assert!(irqs.fix.as_deref().unwrap().contains("echo 0,2-3 > /proc/irq/$i/smp_affinity_list"));
    }

    #[test]
    fn fair_server_on_new_kernels() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path();
        tuned(b);
        write(b, "proc/sys/kernel/osrelease", "6.12.9-rt-amd64\n");
        let vs = run(b, 1);
        let fs = find(&vs, "fair server");
        assert_eq!(fs.level, Level::Warn);
        assert!(fs.detail.contains("could not read /sys/kernel/debug/sched/fair_server/cpu1/runtime"));
        assert!(find(&vs, "rt throttling").detail.contains("fair deadline server"));

        write(b, "sys/kernel/debug/sched/fair_server/cpu1/runtime", "50000000\n");
        write(b, "sys/kernel/debug/sched/fair_server/cpu1/period", "1000000000\n");
        let vs = run(b, 1);
        let fs = find(&vs, "fair server");
        assert_eq!(fs.level, Level::Warn);
        assert_eq!(fs.fix.as_deref(), Some("echo 0 > /sys/kernel/debug/sched/fair_server/cpu1/runtime"));
        write(b, "sys/kernel/debug/sched/fair_server/cpu1/runtime", "0\n");
        assert_eq!(find(&run(b, 1), "fair server").level, Level::Ok);
    }

    #[test]
    fn idle_states_with_deep_exit_latency_warn() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path();
        tuned(b);
        let idle = "sys/devices/system/cpu/cpu1/cpuidle";
        for (i, name, lat, dis) in [(0, "POLL", "0", "0"), (1, "C1", "2", "0"), (2, "C6", "133", "0")] {
            write(b, &format!("{idle}/state{i}/name"), &format!("{name}\n"));
            write(b, &format!("{idle}/state{i}/latency"), &format!("{lat}\n"));
            write(b, &format!("{idle}/state{i}/disable"), &format!("{dis}\n"));
        }
        let v = find(&run(b, 1), "idle states").clone();
        assert_eq!(v.level, Level::Warn);
        assert!(v.fix.as_deref().unwrap().contains("cpu1/cpuidle/state2/disable"));
        write(b, &format!("{idle}/state2/disable"), "1\n");
        assert_eq!(find(&run(b, 1), "idle states").level, Level::Ok);
    }

    #[test]
    fn empty_root_reports_unreadable_files_without_panicking() {
        let dir = tempfile::tempdir().unwrap();
        let vs = run(dir.path(), 1);
        assert!(vs.iter().any(|v| { v.detail.starts_with("could not read /sys/devices/system/cpu/online") }));
        assert!(vs.iter().any(|v| v.detail.starts_with("could not read /proc/interrupts")));
        assert!(vs.iter().any(|v| { v.detail.starts_with("could not read /proc/sys/kernel/sched_rt_runtime_us") }));
        assert!(vs.iter().all(|v| v.level != Level::Bad));
    }

    #[test]
    fn interrupts_parsing_maps_columns_to_cpus() {
        // CPU 1 offline: the columns are CPU0 and CPU2.
        let text =
            "           CPU0       CPU2\n  5:  3  4  IO-APIC 5-edge  eth0\nLOC: 10 20 Local timer interrupts\nERR: 0\n";
        let lines = parse_interrupts(text).unwrap();
        assert_eq!(lines[0].number, Some(5));
        assert_eq!(lines[0].count_on(2), Some(4));
        assert_eq!(lines[0].count_on(1), None);
        assert_eq!(lines[0].description, "IO-APIC 5-edge eth0");
        assert_eq!(lines[1].label, "LOC");
        assert_eq!(lines[1].description, "Local timer interrupts");
        assert_eq!(lines[2].counts, vec![(0, 0)]);
        assert!(parse_interrupts("garbage header\n").is_err());
    }

    #[test]
    fn cpu_masks_and_cmdline_values() {
        assert_eq!(parse_cpu_mask("3\n").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpu_mask("1,00000000").unwrap(), vec![32]);
        assert!(parse_cpu_mask("xyz").is_err());
        assert_eq!(format_cpu_mask(&[0, 2]), "5");
        assert_eq!(format_cpu_mask(&[0, 33]), "2,00000001");
        assert_eq!(parse_cpu_mask(&format_cpu_mask(&[1, 5, 40])).unwrap(), vec![1, 5, 40]);
        let cmd = "BOOT_IMAGE=/vmlinuz isolcpus=nohz,domain,managed_irq,2-3 rcu_nocbs=all -- isolcpus=9";
        assert_eq!(cmdline_param(cmd, "isolcpus"), Some("nohz,domain,managed_irq,2-3"));
        assert_eq!(cmdline_cpus("nohz,domain,managed_irq,2-3", &[]).unwrap(), vec![2, 3]);
        assert_eq!(cmdline_cpus("all", &[0, 1]).unwrap(), vec![0, 1]);
        assert_eq!(cmdline_param(cmd, "nohz_full"), None);
        assert_eq!(kernel_version("6.12.9-amd64"), Some((6, 12)));
        assert_eq!(kernel_version("junk"), None);
    }

    /// Smoke test on this machine's CPU 1 (or its last CPU on a single-CPU machine): structure only.
    #[test]
    fn live_check_on_cpu_1() {
        let online = cpu::online_cpus().unwrap();
        let cell = if online.contains(&1) { 1 } else { *online.last().unwrap() };
        let vs = check_cell_cpu(&HostRoot::system(), cell);
        assert_eq!(vs[0].item, "cpu");
        assert_ne!(vs[0].level, Level::Bad, "{:?}", vs[0]);
        for item in ["isolation", "irqs", "governor", "smt", "rt throttling", "preemption", "hypervisor", "privileges"]
        {
            find(&vs, item);
        }
        for v in &vs {
            assert!(!v.item.is_empty() && !v.detail.is_empty(), "{v:?}");
            assert!(v.fix.as_ref().is_none_or(|f| !f.is_empty()), "{v:?}");
        }
        let text = render_text(&vs);
        assert!(text.lines().last().unwrap().starts_with("summary: "));
        assert_eq!(text.lines().filter(|l| l.starts_with('[')).count(), vs.len());
    }

    #[test]
    fn render_text_aligns_and_summarises() {
        let vs = vec![
            Verdict::ok("cpu", "CPU 1 is online"),
            Verdict::warn("rt throttling", "throttled").with_fix("echo -1 > /proc/sys/kernel/sched_rt_runtime_us"),
            Verdict::bad("x", "broken"),
        ];
        let text = render_text(&vs);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "[ ok ] cpu:           CPU 1 is online");
        assert_eq!(lines[1], "[warn] rt throttling: throttled");
        assert_eq!(lines[2], "                      fix: echo -1 > /proc/sys/kernel/sched_rt_runtime_us");
        assert_eq!(lines[3], "[bad ] x:             broken");
        assert_eq!(lines[4], "summary: 1 ok, 1 warn, 1 bad");
        let json = serde_json::to_string(&vs[1]).unwrap();
        assert!(json.contains(r#""level":"warn""#), "{json}");
        assert!(json.contains(r#""fix":"echo -1"#), "{json}");
        assert!(serde_json::to_string(&vs[0]).unwrap().contains(r#""fix":null"#));
    }
}
