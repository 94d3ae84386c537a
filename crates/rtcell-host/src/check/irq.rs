//! Interrupts: device IRQs whose affinity includes the cell CPU (what the seed's
//! `check_smp_affinity` script looked for, done right: every IRQ under `/proc/irq`, masks of any
//! width, numeric order, names, where each is delivered now and how often it fired on the cell
//! CPU), the per-CPU interrupts nothing can move, and irqbalance.

use std::fmt::Write as _;

use super::{Ctx, Level, Verdict};
use crate::cpu::{self, format_cpu_list};
use crate::root::{HostRoot, ReadError};

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

/// Parses a kernel hex CPU mask (`3`, `ff,ffffffff`) into CPU numbers. Each comma-separated group
/// holds 32 CPUs, the last group the lowest ones.
pub fn parse_cpu_mask(text: &str) -> Result<Vec<usize>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty CPU mask".to_string());
    }
    let mut cpus = Vec::new();
    for (g, group) in text.rsplit(',').enumerate() {
        let bad = || format!("bad CPU mask {text:?}");
        if group.is_empty() || group.len() > 8 || !group.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let word = u32::from_str_radix(group, 16).map_err(|_| bad())?;
        cpus.extend((0..32).filter(|b| word & (1 << b) != 0).map(|b| g * 32 + b));
    }
    cpus.sort_unstable();
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

/// Device IRQ numbers: the numeric directories of `/proc/irq`, in numeric order.
pub fn irq_numbers(root: &HostRoot) -> Result<Vec<u32>, ReadError> {
    let mut n: Vec<u32> = root.list_subdirs("/proc/irq")?.iter().filter_map(|d| d.parse().ok()).collect();
    n.sort_unstable();
    Ok(n)
}

/// The CPUs IRQ `n` may be delivered to: `smp_affinity_list`, else the hex `smp_affinity` mask.
pub fn irq_affinity(root: &HostRoot, n: u32) -> Result<Vec<usize>, ReadError> {
    let list = format!("/proc/irq/{n}/smp_affinity_list");
    match cpu::read_cpu_list(root, &list) {
        Err(e) if e.is_not_found() => {
            let mask = format!("/proc/irq/{n}/smp_affinity");
            let text = root.read(&mask)?;
            parse_cpu_mask(&text).map_err(|why| ReadError::invalid(mask, why))
        }
        other => other,
    }
}

/// The device name of IRQ `n`: the kernel makes a directory per handler under `/proc/irq/N`; else
/// the last word of its `/proc/interrupts` line.
pub fn irq_name(root: &HostRoot, line: Option<&IrqLine>, n: u32) -> String {
    if let Ok(dirs) = root.list_subdirs(&format!("/proc/irq/{n}")) {
        if !dirs.is_empty() {
            return dirs.join(", ");
        }
    }
    line.and_then(|l| l.description.split_whitespace().last()).unwrap_or("no handler").to_string()
}

struct Routed {
    n: u32,
    name: String,
    /// The CPU(s) it is delivered to now include the cell (`effective_affinity_list`), if known.
    delivered_here: Option<bool>,
    count: u64,
}

pub(super) fn check_irqs(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "irqs";
    let (root, cell, hk) = (ctx.root, ctx.cell, &ctx.housekeeping);
    let lines = match root.read("/proc/interrupts") {
        Ok(text) => match parse_interrupts(&text) {
            Ok(l) => l,
            Err(why) => {
                out.push(Verdict::warn(ITEM, format!("could not parse /proc/interrupts: {why}")).not_checked());
                Vec::new()
            }
        },
        Err(e) => {
            out.push(Verdict::unreadable(ITEM, &e));
            Vec::new()
        }
    };
    let mut numbers: Vec<u32> = lines.iter().filter_map(|l| l.number).collect();
    match irq_numbers(root) {
        Ok(n) => numbers.extend(n),
        Err(e) if lines.is_empty() => return out.push(Verdict::unreadable(ITEM, &e)),
        Err(_) => {}
    }
    numbers.sort_unstable();
    numbers.dedup();
    let line_of = |n: u32| lines.iter().find(|l| l.number == Some(n));
    let mut routed = Vec::new();
    let mut fired_before = Vec::new();
    let mut unreadable: Vec<u32> = Vec::new();
    let mut first_error = None;
    for &n in &numbers {
        let line = line_of(n);
        let on_cell = line.and_then(|l| l.count_on(cell)).unwrap_or(0);
        match irq_affinity(root, n) {
            Ok(aff) if aff.contains(&cell) => {
                let delivered_here = cpu::read_cpu_list(root, &format!("/proc/irq/{n}/effective_affinity_list"))
                    .ok()
                    .map(|eff| eff.contains(&cell));
                routed.push(Routed { n, name: irq_name(root, line, n), delivered_here, count: on_cell });
            }
            Ok(_) => {
                if on_cell > 0 {
                    fired_before.push(format!("{n} ({})", irq_name(root, line, n)));
                }
            }
            Err(e) => {
                unreadable.push(n);
                first_error.get_or_insert(e);
                if on_cell > 0 {
                    routed.push(Routed { n, name: irq_name(root, line, n), delivered_here: None, count: on_cell });
                }
            }
        }
    }
    if let Some(e) = first_error {
        let list: Vec<String> = unreadable.iter().map(u32::to_string).collect();
        out.push(
            Verdict::warn(ITEM, format!("could not read the affinity of IRQ {}: {e}", list.join(", "))).not_checked(),
        );
    }
    let hk_list = ctx.hk_text();
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
            Err(why) => out.push(
                Verdict::warn(ITEM, format!("could not parse /proc/irq/default_smp_affinity: {why}")).not_checked(),
            ),
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
    let tune = format!(" (rtcell tune --cpu {cell} --apply does this)");
    if routed.is_empty() {
        let level = if default_note.is_empty() { Level::Ok } else { Level::Warn };
        let mut v = Verdict::new(ITEM, level, format!("no device IRQ is routed to CPU {cell}{before}{default_note}"));
        if !default_fix.is_empty() {
            v = v.with_fix(format!("{}{tune}", default_fix.trim_start_matches("; ")));
        }
        return out.push(v);
    }
    let listed: Vec<String> = routed
        .iter()
        .map(|r| {
            let mut s = format!("{} ({}", r.n, r.name);
            if r.delivered_here == Some(true) {
                let _ = write!(s, ", delivered to CPU {cell} now");
            }
            if r.count > 0 {
                let _ = write!(s, ", {} there so far", r.count);
            }
            s.push(')');
            s
        })
        .collect();
    let numbers: Vec<String> = routed.iter().map(|r| r.n.to_string()).collect();
    let irqbalance = if irqbalance_pids(ctx).is_empty() {
        ""
    } else {
        "; stop irqbalance first (systemctl stop irqbalance) or it moves them back"
    };
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
            "for i in {}; do echo {hk_list} > /proc/irq/$i/smp_affinity_list; done{default_fix}{tune}{irqbalance}; \
             managed IRQs of multi-queue devices refuse the write: boot with isolcpus=managed_irq,domain,{cell}",
            numbers.join(" ")
        )),
    );
}

pub(super) fn check_per_cpu_irqs(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "per-cpu irqs";
    let cell = ctx.cell;
    let Ok(lines) = ctx.root.read("/proc/interrupts").map(|t| parse_interrupts(&t).unwrap_or_default()) else {
        return; // Reported under "irqs".
    };
    let per_cpu: Vec<String> = lines
        .iter()
        .filter(|l| l.number.is_none())
        .filter_map(|l| {
            let n = l.count_on(cell).unwrap_or(0);
            (n > 0).then(|| format!("{} {n} ({})", l.label, l.description))
        })
        .collect();
    let detail = if per_cpu.is_empty() {
        format!("no per-CPU interrupts have fired on CPU {cell}")
    } else {
        format!("per-CPU interrupts cannot be moved; on CPU {cell} since boot: {}", per_cpu.join(", "))
    };
    out.push(Verdict::ok(ITEM, detail));
}

/// Pids of running irqbalance daemons.
fn irqbalance_pids(ctx: &Ctx<'_>) -> Vec<u32> {
    match ctx.procs() {
        Ok(p) => p.iter().filter(|p| !p.kernel_thread && p.name == "irqbalance").map(|p| p.pid).collect(),
        Err(_) => Vec::new(),
    }
}

pub(super) fn check_irqbalance(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "irqbalance";
    if let Err(e) = ctx.procs() {
        return out.push(Verdict::unreadable(ITEM, e));
    }
    let pids = irqbalance_pids(ctx);
    if pids.is_empty() {
        return out.push(Verdict::ok(ITEM, "irqbalance is not running"));
    }
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    out.push(
        Verdict::warn(
            ITEM,
            format!("irqbalance is running (pid {}): it moves IRQs back onto CPU {}", list.join(", "), ctx.cell),
        )
        .with_fix(format!(
            "systemctl disable --now irqbalance (or keep it and exclude the cell: IRQBALANCE_BANNED_CPULIST={} in \
             /etc/default/irqbalance, then systemctl restart irqbalance)",
            ctx.cell
        )),
    );
}
