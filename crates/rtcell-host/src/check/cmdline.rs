//! Kernel command line items: `isolcpus=` and its flags, `irqaffinity=`, `idle=` and the C-state
//! limits, `tsc=reliable`, `skew_tick=`, `mitigations=`. `nohz_full=` and `rcu_nocbs=` are read
//! with the isolation items in [`super::cpus`]; `nosoftlockup` with the watchdogs.

use super::{Ctx, Verdict, power};
use crate::cpu::{format_cpu_list, parse_cpu_list};
use crate::facts;

/// Value of the last `key=` parameter on a kernel command line (arguments after `--` go to init).
/// A bare `key` gives `Some("")`.
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

/// The flag words of an `isolcpus=` value (`nohz`, `domain`, `managed_irq`); without any, the
/// kernel implies `domain`.
pub fn isolcpus_flags(value: &str) -> Vec<&str> {
    value.split(',').filter(|p| p.chars().next().is_some_and(|c| c.is_ascii_alphabetic())).collect()
}

/// The `isolcpus=` value that keeps `flags` (adding `domain` and `managed_irq`) and isolates `cpus`.
pub fn isolcpus_value(flags: &[&str], cpus: &[usize]) -> String {
    let mut all: Vec<&str> = Vec::new();
    for f in ["nohz", "domain", "managed_irq"] {
        if f != "nohz" || flags.contains(&"nohz") {
            all.push(f);
        }
    }
    for f in flags {
        if !all.contains(f) {
            all.push(f);
        }
    }
    format!("{},{}", all.join(","), format_cpu_list(cpus))
}

/// "add `param` to the kernel command line and reboot".
pub fn boot_fix(param: &str) -> String {
    format!("add `{param}` to the kernel command line and reboot (rtcell tune prints the whole line)")
}

pub(super) fn check_isolcpus(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "isolcpus";
    let cell = ctx.cell;
    let cmdline = match &ctx.cmdline {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    let isolated = ctx.isolated_list();
    let Some(value) = cmdline_param(cmdline, "isolcpus") else {
        if isolated.contains(&cell) {
            return out.push(Verdict::ok(
                ITEM,
                format!("no isolcpus= on the kernel command line; CPU {cell} is isolated by a cpuset partition"),
            ));
        }
        let mut cpus = isolated.to_vec();
        cpus.push(cell);
        return out.push(
            Verdict::warn(ITEM, "no isolcpus= on the kernel command line")
                .with_fix(boot_fix(&format!("isolcpus={}", isolcpus_value(&[], &cpus)))),
        );
    };
    let cpus = match cmdline_cpus(value, ctx.online_list()) {
        Ok(c) => c,
        Err(why) => {
            return out.push(Verdict::warn(ITEM, format!("could not parse isolcpus={value}: {why}")).not_checked());
        }
    };
    let flags = isolcpus_flags(value);
    let mut want = cpus.clone();
    if !want.contains(&cell) {
        want.push(cell);
    }
    let fix = boot_fix(&format!("isolcpus={}", isolcpus_value(&flags, &want)));
    if !cpus.contains(&cell) {
        return out.push(Verdict::warn(ITEM, format!("isolcpus={value} does not include CPU {cell}")).with_fix(fix));
    }
    let domain = flags.is_empty() || flags.contains(&"domain");
    let managed = flags.contains(&"managed_irq");
    let shown = if flags.is_empty() { "none: domain implied".to_string() } else { flags.join(", ") };
    match (domain, managed) {
        (true, true) => out.push(Verdict::ok(ITEM, format!("isolcpus={value} isolates CPU {cell} (flags: {shown})"))),
        (false, _) => out.push(
            Verdict::warn(
                ITEM,
                format!("isolcpus={value} lacks the domain flag: the scheduler still balances tasks onto CPU {cell}"),
            )
            .with_fix(fix),
        ),
        (true, false) => out.push(
            Verdict::warn(
                ITEM,
                format!(
                    "isolcpus={value} (flags: {shown}) lacks managed_irq: managed IRQs of multi-queue devices \
                     may still be delivered to CPU {cell}"
                ),
            )
            .with_fix(fix),
        ),
    }
}

pub(super) fn check_irqaffinity(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "irqaffinity";
    let cell = ctx.cell;
    let cmdline = match &ctx.cmdline {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    let fix = boot_fix(&format!("irqaffinity={}", ctx.hk_text()));
    match cmdline_param(cmdline, "irqaffinity").map(parse_cpu_list) {
        None => out.push(
            Verdict::warn(ITEM, format!("no irqaffinity=: IRQs set up at boot may go to every CPU, CPU {cell} too"))
                .with_fix(fix),
        ),
        Some(Ok(list)) if list.contains(&cell) => out.push(
            Verdict::warn(ITEM, format!("irqaffinity={} includes CPU {cell}", format_cpu_list(&list))).with_fix(fix),
        ),
        Some(Ok(list)) => out.push(Verdict::ok(
            ITEM,
            format!("irqaffinity={} keeps IRQs set up at boot off CPU {cell}", format_cpu_list(&list)),
        )),
        Some(Err(why)) => out.push(Verdict::warn(ITEM, format!("could not parse irqaffinity=: {why}")).not_checked()),
    }
}

pub(super) fn check_cstates(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "c-states";
    let cmdline = match &ctx.cmdline {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    let set: Vec<String> = ["idle", "processor.max_cstate", "intel_idle.max_cstate"]
        .iter()
        .filter_map(|k| cmdline_param(cmdline, k).map(|v| format!("{k}={v}")))
        .collect();
    if !set.is_empty() {
        let poll = if cmdline_param(cmdline, "idle") == Some("poll") {
            " (idle=poll: idle CPUs spin, which costs power and, in a VM, a host CPU per vCPU)"
        } else {
            ""
        };
        return out.push(Verdict::ok(ITEM, format!("idle states limited at boot: {}{poll}", set.join(" "))));
    }
    match power::deepest_enabled_latency(ctx.root, ctx.cell) {
        Some((name, lat)) if lat > power::IDLE_LATENCY_LIMIT_US as i64 => out.push(
            Verdict::warn(
                ITEM,
                format!("no idle= or max_cstate= limit, and CPU {} may enter {name} ({lat} us to wake)", ctx.cell),
            )
            .with_fix(boot_fix("processor.max_cstate=1 intel_idle.max_cstate=0")),
        ),
        Some((name, lat)) => out.push(Verdict::ok(
            ITEM,
            format!("no idle= or max_cstate= limit; none needed: the deepest enabled idle state is {name} ({lat} us)"),
        )),
        None => out.push(Verdict::ok(ITEM, "no idle= or max_cstate= limit; no cpuidle states are exposed")),
    }
}

pub(super) fn check_tsc_reliable(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "tsc";
    let cmdline = match &ctx.cmdline {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    if let Some(v) = cmdline_param(cmdline, "tsc") {
        if v.split(',').any(|f| f == "reliable") {
            return out.push(Verdict::ok(ITEM, "tsc=reliable: the clocksource watchdog leaves the TSC alone"));
        }
    }
    let current = ctx.root.read_trimmed("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    if current.as_deref().is_ok_and(|c| c != "tsc") {
        let c = current.unwrap_or_default();
        return out.push(Verdict::ok(ITEM, format!("no tsc=reliable; the clocksource is {c}, not the TSC")));
    }
    let cpuinfo = ctx.cpuinfo.as_deref().unwrap_or_default();
    let stable = ["constant_tsc", "nonstop_tsc"].iter().all(|f| facts::cpuinfo_has_flag(cpuinfo, f));
    if stable {
        out.push(
            Verdict::warn(ITEM, "no tsc=reliable: the clocksource watchdog keeps checking the TSC on every CPU")
                .with_fix(boot_fix("tsc=reliable")),
        );
    } else {
        out.push(Verdict::ok(
            ITEM,
            "no tsc=reliable, and rightly so: the CPU flags do not promise a constant, nonstop TSC \
             (constant_tsc, nonstop_tsc)",
        ));
    }
}

pub(super) fn check_skew_tick(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "skew_tick";
    let cmdline = match &ctx.cmdline {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    match cmdline_param(cmdline, "skew_tick") {
        Some(v) if v != "0" && !v.is_empty() => out.push(Verdict::ok(ITEM, format!("skew_tick={v}"))),
        _ => out.push(
            Verdict::warn(ITEM, "no skew_tick=1: every CPU's tick fires at the same instant")
                .with_fix(boot_fix("skew_tick=1")),
        ),
    }
}

pub(super) fn check_mitigations(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "mitigations";
    let cmdline = match &ctx.cmdline {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    let value = cmdline_param(cmdline, "mitigations");
    if value == Some("off") {
        return out.push(Verdict::ok(ITEM, "mitigations=off: no CPU vulnerability mitigations on kernel entry"));
    }
    const DIR: &str = "/sys/devices/system/cpu/vulnerabilities";
    let mitigated: Vec<String> = ctx
        .root
        .list_dir(DIR)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| ctx.root.read_trimmed(&format!("{DIR}/{n}")).is_ok_and(|s| s.starts_with("Mitigation")))
        .collect();
    let setting = value.map_or("the default (auto)".to_string(), |v| format!("mitigations={v}"));
    let active =
        if mitigated.is_empty() { String::new() } else { format!("; mitigated here: {}", mitigated.join(", ")) };
    out.push(
        Verdict::warn(ITEM, format!("CPU vulnerability mitigations are on ({setting}){active}"))
            .with_fix(format!("only where every program on the machine is trusted: {}", boot_fix("mitigations=off"))),
    );
}
