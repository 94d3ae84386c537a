//! Kernel items: preemption model, RT throttling and the fair server, timer migration, the
//! watchdogs, memory management (THP, swap, KSM), unbound workqueues and the clocksource.

use super::cmdline::cmdline_param;
use super::{Ctx, Verdict, format_cpu_mask, parse_cpu_mask};
use crate::cpu::{format_cpu_list, parse_cpu_list};
use crate::facts::preempt_model_in;
use crate::root::HostRoot;

/// (major, minor) of a kernel release such as "6.12.9-amd64".
pub(super) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether the kernel (6.12+) runs the fair deadline server, which preempts SCHED_FIFO tasks for
/// normal ones even with RT throttling off.
pub fn has_fair_server(root: &HostRoot) -> bool {
    root.read_trimmed("/proc/sys/kernel/osrelease").ok().and_then(|r| kernel_version(&r)).is_some_and(|v| v >= (6, 12))
}

pub(super) fn check_rt_throttling(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    let (root, cell) = (ctx.root, ctx.cell);
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
        .with_fix(format!(
            "echo -1 > /proc/sys/kernel/sched_rt_runtime_us (rtcell tune --cpu {cell} --apply does this){}",
            if has_fair_server(root) {
                "; on this kernel the fair server then still preempts a polling cell for normal tasks queued on \
                 its CPU, and the cell no longer yields to them: isolate the CPU and turn the fair server off too"
            } else {
                ""
            }
        )),
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

pub(super) fn check_fair_server(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    let (root, cell) = (ctx.root, ctx.cell);
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
                Ok(_) => Verdict::warn(ITEM, format!("{e} (this kernel has no fair server controls)")).not_checked(),
                Err(m) if m.kind() == std::io::ErrorKind::PermissionDenied => {
                    Verdict::warn(ITEM, format!("{e} (debugfs is readable by root only)"))
                        .with_fix("run the check as root")
                        .not_checked()
                }
                Err(_) => Verdict::warn(ITEM, format!("{e} (debugfs is not mounted)"))
                    .with_fix("mount -t debugfs none /sys/kernel/debug, then run the check again")
                    .not_checked(),
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

pub(super) fn check_preemption(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "preemption";
    let root = ctx.root;
    let model = preempt_model_in(root);
    let kernel = root.read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|_| "unknown".into());
    let version = root.read_trimmed("/proc/sys/kernel/version").unwrap_or_default();
    let rt = "boot a PREEMPT_RT kernel (Debian: linux-image-rt-amd64)";
    let dynamic = version.split_whitespace().any(|t| t == "PREEMPT_DYNAMIC");
    let build = if version.is_empty() { String::new() } else { format!(", {version}") };
    match model {
        "rt" => out.push(Verdict::ok(ITEM, format!("PREEMPT_RT kernel {kernel}{build}"))),
        "unknown" => out.push(
            Verdict::warn(ITEM, format!("could not determine the preemption model of kernel {kernel}{build}"))
                .with_fix(rt),
        ),
        m => {
            let fix = if dynamic && m != "full" {
                format!(
                    "this kernel is built PREEMPT_DYNAMIC, so `preempt=full` on the kernel command line gives full \
                     preemption without a new kernel (rtcell tune prints the whole line); or {rt}"
                )
            } else {
                rt.to_string()
            };
            out.push(
                Verdict::warn(
                    ITEM,
                    format!(
                        "preemption model is {m} (kernel {kernel}{build}), not PREEMPT_RT: non-preemptible kernel \
                         sections delay the cell's wake-ups"
                    ),
                )
                .with_fix(fix),
            )
        }
    }
}

/// A 0/1 sysctl: `Ok(None)` when the kernel does not have it.
fn flag(root: &HostRoot, path: &str) -> Result<Option<i64>, crate::root::ReadError> {
    match root.read_i64(path) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) fn check_timer_migration(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "timer migration";
    const PATH: &str = "/proc/sys/kernel/timer_migration";
    match flag(ctx.root, PATH) {
        Ok(None) => out.push(Verdict::ok(ITEM, "no timer migration in this kernel: timers stay where they were armed")),
        Ok(Some(0)) => out.push(Verdict::ok(ITEM, "timer migration is off: timers stay on the CPU that armed them")),
        Ok(Some(_)) => out.push(
            Verdict::warn(ITEM, format!("timer migration is on ({PATH} = 1)"))
                .with_fix(format!("echo 0 > {PATH} (rtcell tune --cpu {} --apply does this)", ctx.cell)),
        ),
        Err(e) => out.push(Verdict::unreadable(ITEM, &e)),
    }
}

pub(super) fn check_nmi_watchdog(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "nmi watchdog";
    const PATH: &str = "/proc/sys/kernel/nmi_watchdog";
    match flag(ctx.root, PATH) {
        Ok(None) => out.push(Verdict::ok(ITEM, "no NMI watchdog in this kernel")),
        Ok(Some(0)) => out.push(Verdict::ok(ITEM, "the NMI watchdog is off")),
        Ok(Some(_)) => out.push(
            Verdict::warn(ITEM, format!("the NMI watchdog is on ({PATH} = 1)"))
                .with_fix(format!("echo 0 > {PATH} (at boot: nmi_watchdog=0)")),
        ),
        Err(e) => out.push(Verdict::unreadable(ITEM, &e)),
    }
}

pub(super) fn check_softlockup(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "softlockup";
    let (root, cell) = (ctx.root, ctx.cell);
    if let Ok(c) = &ctx.cmdline {
        if cmdline_param(c, "nosoftlockup").is_some() {
            return out.push(Verdict::ok(ITEM, "nosoftlockup: the soft-lockup watchdog is off"));
        }
    }
    match flag(root, "/proc/sys/kernel/soft_watchdog") {
        Ok(None) => return out.push(Verdict::ok(ITEM, "no soft-lockup watchdog in this kernel")),
        Ok(Some(0)) => {
            return out.push(Verdict::ok(ITEM, "the soft-lockup watchdog is off (kernel.soft_watchdog = 0)"));
        }
        Ok(Some(_)) => {}
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    }
    const MASK: &str = "/proc/sys/kernel/watchdog_cpumask";
    let fix = format!(
        "echo {} > {MASK} (at boot: nosoftlockup, or rely on nohz_full={cell}, which leaves the cell CPU out)",
        ctx.hk_text()
    );
    match root.read_optional(MASK).map(|t| t.map(|t| parse_cpu_list(&t))) {
        Ok(Some(Ok(cpus))) if !cpus.contains(&cell) => out.push(Verdict::ok(
            ITEM,
            format!("the soft-lockup watchdog runs on CPUs {} only, not on CPU {cell}", format_cpu_list(&cpus)),
        )),
        Ok(Some(Ok(cpus))) => out.push(
            Verdict::warn(
                ITEM,
                format!("the soft-lockup watchdog runs on CPU {cell} (watchdog_cpumask {})", format_cpu_list(&cpus)),
            )
            .with_fix(fix),
        ),
        Ok(_) => out.push(Verdict::warn(ITEM, format!("the soft-lockup watchdog runs on CPU {cell}")).with_fix(fix)),
        Err(e) => out.push(Verdict::unreadable(ITEM, &e)),
    }
}

/// The selected word of a sysfs choice file such as `always [madvise] never`.
pub fn selected_choice(text: &str) -> Option<&str> {
    text.split_whitespace().find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
}

pub const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

pub(super) fn check_thp(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "thp";
    let text = match ctx.root.read_optional(THP_ENABLED) {
        Ok(Some(t)) => t,
        Ok(None) => return out.push(Verdict::ok(ITEM, "no transparent huge pages in this kernel")),
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    match selected_choice(&text) {
        Some("always") => {
            out.push(Verdict::warn(ITEM, "transparent huge pages: always (every process's memory)").with_fix(format!(
                "echo never > {THP_ENABLED} (at boot: transparent_hugepage=never; rtcell tune --cpu {} --apply does \
                 the first)",
                ctx.cell
            )))
        }
        Some("madvise") => out.push(Verdict::ok(
            ITEM,
            "transparent huge pages: madvise (only memory that asks for them; rtcell's does not)",
        )),
        Some(other) => out.push(Verdict::ok(ITEM, format!("transparent huge pages: {other}"))),
        None => {
            out.push(Verdict::warn(ITEM, format!("could not parse {THP_ENABLED}: {:?}", text.trim())).not_checked())
        }
    }
}

pub(super) fn check_swap(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "swap";
    let text = match ctx.root.read("/proc/swaps") {
        Ok(t) => t,
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    let areas: Vec<String> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let kib = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            (!f.is_empty()).then(|| format!("{} ({} MiB, {} MiB used)", f[0], kib(2) / 1024, kib(3) / 1024))
        })
        .collect();
    if areas.is_empty() {
        return out.push(Verdict::ok(ITEM, "no swap area is active"));
    }
    let swappiness =
        ctx.root.read_trimmed("/proc/sys/vm/swappiness").map(|s| format!(", vm.swappiness {s}")).unwrap_or_default();
    out.push(
        Verdict::warn(ITEM, format!("swap is active: {}{swappiness}", areas.join(", ")))
            .with_fix("swapoff -a (and take the swap areas out of /etc/fstab)"),
    );
}

pub(super) fn check_ksm(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "ksm";
    const PATH: &str = "/sys/kernel/mm/ksm/run";
    match flag(ctx.root, PATH) {
        Ok(None) => out.push(Verdict::ok(ITEM, "no KSM in this kernel")),
        Ok(Some(1)) => out.push(
            Verdict::warn(ITEM, "KSM is merging pages (ksmd running)")
                .with_fix(format!("echo 2 > {PATH} (stops ksmd and unmerges the shared pages)")),
        ),
        Ok(Some(_)) => out.push(Verdict::ok(ITEM, "KSM is stopped")),
        Err(e) => out.push(Verdict::unreadable(ITEM, &e)),
    }
}

pub const WORKQUEUE_CPUMASK: &str = "/sys/devices/virtual/workqueue/cpumask";

pub(super) fn check_workqueue(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "workqueue";
    let cell = ctx.cell;
    let text = match ctx.root.read_optional(WORKQUEUE_CPUMASK) {
        Ok(Some(t)) => t,
        Ok(None) => return out.push(Verdict::ok(ITEM, format!("{WORKQUEUE_CPUMASK} does not exist in this kernel"))),
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    match parse_cpu_mask(&text) {
        Ok(cpus) if cpus.contains(&cell) => {
            let mut v = Verdict::warn(
                ITEM,
                format!("unbound workqueues may run on CPU {cell} (cpumask {})", format_cpu_list(&cpus)),
            );
            if !ctx.housekeeping.is_empty() {
                v = v.with_fix(format!(
                    "echo {} > {WORKQUEUE_CPUMASK} (rtcell tune --cpu {cell} --apply does this)",
                    format_cpu_mask(&ctx.housekeeping)
                ));
            }
            out.push(v)
        }
        Ok(cpus) => out.push(Verdict::ok(
            ITEM,
            format!("unbound workqueues run on CPUs {} only, not on CPU {cell}", format_cpu_list(&cpus)),
        )),
        Err(why) => out.push(Verdict::warn(ITEM, format!("could not parse {WORKQUEUE_CPUMASK}: {why}")).not_checked()),
    }
}

pub(super) fn check_clocksource(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "clocksource";
    const DIR: &str = "/sys/devices/system/clocksource/clocksource0";
    let current = match ctx.root.read_trimmed(&format!("{DIR}/current_clocksource")) {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    let available = ctx.root.read_trimmed(&format!("{DIR}/available_clocksource")).unwrap_or_default();
    if current == "tsc" {
        return out.push(Verdict::ok(ITEM, "the clocksource is the TSC"));
    }
    let offered = available.split_whitespace().any(|c| c == "tsc");
    let fix = if offered {
        format!("echo tsc > {DIR}/current_clocksource")
    } else {
        "the kernel does not offer the TSC (marked unstable? see `dmesg | grep -i tsc`); tsc=reliable at boot \
         forces it, only where the TSC is constant and synchronised"
            .to_string()
    };
    out.push(
        Verdict::warn(
            ITEM,
            format!(
                "the clocksource is {current} (available: {}); rtcell times with the TSC itself, but timers and \
                 clock_gettime use {current}",
                if available.is_empty() { "unknown" } else { &available }
            ),
        )
        .with_fix(fix),
    );
}
