//! CPU items: the cell CPU itself, housekeeping CPUs, isolation, the tick, RCU callbacks, the SMT
//! sibling, and the kernel threads that may run on the cell CPU.

use super::cmdline::{boot_fix, cmdline_cpus, cmdline_param, isolcpus_value};
use super::{Ctx, Verdict};
use crate::cpu::{self, format_cpu_list};
use crate::facts::busy_percent;

/// Above this share of busy time during the sample, the SMT sibling counts as busy.
const SIBLING_BUSY_PCT: f64 = 5.0;

pub(super) fn check_exists(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) -> bool {
    const ITEM: &str = "cpu";
    let cell = ctx.cell;
    match &ctx.online {
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
            let present = ctx.root.exists(&format!("/sys/devices/system/cpu/cpu{cell}"));
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

pub(super) fn check_housekeeping(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "housekeeping";
    let cell = ctx.cell;
    if ctx.online.is_err() {
        return; // Reported under "cpu".
    }
    let plain: Vec<usize> =
        ctx.online_list().iter().copied().filter(|c| *c != cell && !ctx.isolated_list().contains(c)).collect();
    if plain.is_empty() && ctx.housekeeping.is_empty() {
        return out.push(
            Verdict::bad(ITEM, format!("no CPU but {cell} is online: the Linux side has nowhere to run"))
                .with_fix("use a machine (or VM) with at least two CPUs"),
        );
    }
    if plain.is_empty() {
        return out.push(
            Verdict::warn(
                ITEM,
                format!(
                    "every other online CPU ({}) is isolated too: the Linux side's IRQs, kernel threads and \
                     unbound work have no housekeeping CPU to go to",
                    format_cpu_list(&ctx.housekeeping)
                ),
            )
            .with_fix("leave at least one CPU out of isolcpus= and nohz_full="),
        );
    }
    out.push(Verdict::ok(
        ITEM,
        format!(
            "housekeeping CPUs {} (online, not isolated, not the cell) take the Linux side: IRQs, kernel threads, \
             timers, the master loop",
            format_cpu_list(&plain)
        ),
    ));
}

/// Boot parameters isolating `cell` in addition to CPUs already isolated.
fn isolcpus_fix(cell: usize, already: &[usize]) -> String {
    let mut all = already.to_vec();
    all.push(cell);
    let list = format_cpu_list(&all);
    format!(
        "add `isolcpus={} nohz_full={list} rcu_nocbs={list}` to the kernel command line and reboot \
         (or make CPU {cell} an isolated cpuset partition: cpuset.cpus.partition=isolated)",
        isolcpus_value(&[], &all)
    )
}

pub(super) fn check_isolation(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "isolation";
    let cell = ctx.cell;
    match &ctx.isolated {
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
pub(super) fn check_nohz_full(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) -> Option<Vec<usize>> {
    const ITEM: &str = "nohz_full";
    let cell = ctx.cell;
    let on_cmdline = cmdline_param(ctx.cmdline_text(), "nohz_full");
    match cpu::read_cpu_list(ctx.root, "/sys/devices/system/cpu/nohz_full") {
        Ok(list) if list.contains(&cell) => {
            out.push(Verdict::ok(ITEM, format!("the scheduler tick stops on CPU {cell} while it runs a single task")));
            Some(list)
        }
        Ok(list) => {
            let seen = match on_cmdline {
                Some(v) => format!(" (nohz_full={v})"),
                None => String::new(),
            };
            out.push(
                Verdict::warn(
                    ITEM,
                    format!("the periodic scheduler tick still interrupts CPU {cell} (not in nohz_full){seen}"),
                )
                .with_fix(boot_fix(&format!("nohz_full={cell}"))),
            );
            Some(list)
        }
        Err(e) if e.is_not_found() => {
            let ignored = match on_cmdline {
                Some(v) => format!("; nohz_full={v} on the command line is ignored"),
                None => String::new(),
            };
            out.push(
                Verdict::warn(
                    ITEM,
                    format!(
                        "this kernel cannot stop the tick: no /sys/devices/system/cpu/nohz_full (built without \
                         CONFIG_NO_HZ_FULL{ignored})"
                    ),
                )
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

pub(super) fn check_rcu_nocbs(out: &mut Vec<Verdict>, ctx: &Ctx<'_>, nohz: &Option<Vec<usize>>) {
    const ITEM: &str = "rcu_nocbs";
    let cell = ctx.cell;
    let cmdline = match &ctx.cmdline {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    // nohz_full CPUs are offloaded implicitly.
    if nohz.as_ref().is_some_and(|l| l.contains(&cell)) {
        return out
            .push(Verdict::ok(ITEM, format!("RCU callbacks are offloaded from CPU {cell} (implied by nohz_full)")));
    }
    let offloaded = cmdline_param(cmdline, "rcu_nocbs").map(|v| cmdline_cpus(v, ctx.online_list())).transpose();
    match offloaded {
        Ok(Some(list)) if list.contains(&cell) => {
            out.push(Verdict::ok(ITEM, format!("RCU callbacks are offloaded from CPU {cell} (rcu_nocbs=)")));
        }
        Ok(_) => out.push(
            Verdict::warn(ITEM, format!("RCU callbacks may run on CPU {cell} (not in rcu_nocbs=)"))
                .with_fix(boot_fix(&format!("rcu_nocbs={cell}"))),
        ),
        Err(why) => {
            out.push(Verdict::warn(ITEM, format!("could not parse rcu_nocbs= on /proc/cmdline: {why}")).not_checked())
        }
    }
}

pub(super) fn check_smt(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "smt";
    let cell = ctx.cell;
    let siblings = match cpu::smt_siblings_in(ctx.root, cell) {
        Ok(s) => s,
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    if siblings.is_empty() {
        return out.push(Verdict::ok(ITEM, format!("CPU {cell} has no SMT sibling")));
    }
    let online = ctx.online_list();
    let isolated = ctx.isolated_list();
    let active: Vec<usize> = siblings.iter().copied().filter(|s| online.contains(s)).collect();
    if active.is_empty() {
        return out.push(Verdict::ok(
            ITEM,
            format!(
                "CPU {cell}'s SMT sibling{} {} offline",
                if siblings.len() == 1 { "" } else { "s" },
                format_cpu_list(&siblings)
            ),
        ));
    }
    // How busy each online sibling was while we looked.
    let window = ctx.stat_window();
    let mut load = Vec::new();
    let mut busy = Vec::new();
    for &s in &active {
        let pct = window.as_ref().and_then(|w| w.times(Some(s))).and_then(|(a, b)| busy_percent(&a, &b));
        match pct {
            Some(p) => {
                load.push(format!("CPU {s} {p:.0}% busy"));
                if p > SIBLING_BUSY_PCT {
                    busy.push(s);
                }
            }
            None => load.push(format!("CPU {s} load not sampled")),
        }
    }
    let sampled = match &window {
        Some(w) => format!(" over {} ms: {}", w.elapsed.as_millis(), load.join(", ")),
        None => String::new(),
    };
    let list = format_cpu_list(&active);
    let shared: Vec<usize> = active.iter().copied().filter(|s| !isolated.contains(s)).collect();
    if shared.is_empty() && busy.is_empty() {
        return out.push(Verdict::ok(ITEM, format!("CPU {cell}'s SMT sibling {list} is isolated and idle{sampled}")));
    }
    let mut all = active.clone();
    all.push(cell);
    let offline: Vec<String> =
        active.iter().map(|s| format!("echo 0 > /sys/devices/system/cpu/cpu{s}/online")).collect();
    let state = if shared.is_empty() { "isolated but busy" } else { "online and not isolated" };
    out.push(
        Verdict::warn(
            ITEM,
            format!(
                "CPU {cell} shares its core with CPU {list}, which is {state}: work there slows the cell down{sampled}"
            ),
        )
        .with_fix(format!(
            "take the sibling offline ({}), boot with `nosmt`, or isolate it too (isolcpus={}) and run nothing there",
            offline.join("; "),
            format_cpu_list(&all)
        )),
    );
}

pub(super) fn check_kernel_threads(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "kernel threads";
    let cell = ctx.cell;
    let procs = match ctx.procs() {
        Ok(p) => p,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    let mut bound = Vec::new();
    let mut unbound = Vec::new();
    for p in procs.iter().filter(|p| p.kernel_thread) {
        match &p.allowed {
            Some(a) if a.as_slice() == [cell] => bound.push(p.name.as_str()),
            Some(a) if a.contains(&cell) => unbound.push(p.name.as_str()),
            _ => {}
        }
    }
    let bound_text = if bound.is_empty() {
        format!("none bound to CPU {cell}")
    } else {
        format!("bound to CPU {cell} (per-CPU, cannot move): {}", bound.join(", "))
    };
    if unbound.is_empty() {
        return out.push(Verdict::ok(ITEM, format!("{bound_text}; no unbound kernel thread may run there")));
    }
    const SHOWN: usize = 6;
    let more = if unbound.len() > SHOWN { format!(", ... ({} in all)", unbound.len()) } else { String::new() };
    let names: Vec<&str> = unbound.iter().take(SHOWN).copied().collect();
    out.push(
        Verdict::warn(
            ITEM,
            format!(
                "{bound_text}; {} unbound kernel thread{} may run there too: {}{more}",
                unbound.len(),
                if unbound.len() == 1 { "" } else { "s" },
                names.join(", ")
            ),
        )
        .with_fix(format!(
            "for p in $(pgrep -P 2); do taskset -pc {} $p >/dev/null 2>&1; done (per-CPU threads refuse; \
             threads started later are kept off CPU {cell} only with nohz_full={cell} on the kernel command line)",
            ctx.hk_text()
        )),
    );
}
