//! Virtualisation and platform items: the hypervisor and the time it steals, KVM for kvm cells,
//! cache allocation (resctrl), and the privileges real-time scheduling needs.

use std::collections::BTreeSet;

use super::{Ctx, Verdict};
use crate::facts::{self, steal_percent};
use crate::sched::{CAP_IPC_LOCK, CAP_SYS_NICE, capability_in_status};

pub(super) fn check_hypervisor(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "hypervisor";
    let cpuinfo = match &ctx.cpuinfo {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    let Some(hv) = facts::hypervisor_in(ctx.root, cpuinfo) else {
        return out.push(Verdict::ok(ITEM, "no hypervisor: bare metal"));
    };
    let steal = ctx.opts.steal_pct.map(|p| (p, None)).or_else(|| {
        let w = ctx.stat_window()?;
        let (a, b) = w.times(None)?;
        steal_percent(&a, &b).map(|p| (p, Some(w.elapsed)))
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

pub(super) fn check_kvm(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "kvm";
    let in_vm = ctx.cpuinfo.as_deref().is_ok_and(|c| facts::hypervisor_in(ctx.root, c).is_some());
    let v = match facts::kvm_kind_in(ctx.root, in_vm) {
        "hardware" => Verdict::ok(ITEM, "/dev/kvm opens and KVM runs on the hardware"),
        "nested" => Verdict::warn(
            ITEM,
            "/dev/kvm opens, but this machine is itself a guest: KVM is nested, so every VM exit and the \
             guest's ring-0 code cost far more than on bare metal",
        )
        .with_fix("for kvm-cell figures that hold on bare metal, run on a host with hardware virtualisation"),
        "absent" => Verdict::warn(ITEM, "no /dev/kvm: kvm cells cannot run here")
            .with_fix("modprobe kvm_intel (or kvm_amd); check the firmware's virtualisation setting"),
        _ => Verdict::warn(ITEM, "/dev/kvm exists but cannot be opened: kvm cells cannot run as this user")
            .with_fix("run as root, or add the user to the kvm group"),
    };
    out.push(v);
}

pub(super) fn check_resctrl(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "resctrl";
    let cell = ctx.cell;
    let cpuinfo = match &ctx.cpuinfo {
        Ok(c) => c,
        Err(e) => return out.push(Verdict::unreadable(ITEM, e)),
    };
    let flags: Vec<&str> =
        ["cat_l3", "cat_l2", "cdp_l3", "mba"].into_iter().filter(|f| facts::cpuinfo_has_flag(cpuinfo, f)).collect();
    if flags.iter().all(|f| !f.starts_with("cat_")) {
        return out.push(
            Verdict::warn(ITEM, "no cache allocation (CAT): the CPU, or the hypervisor, does not offer it").with_fix(
                "for a reserved L3 share, run on a CPU with Intel RDT or AMD PQoS cache allocation; without it, \
                 keep the cell's working set within its private caches",
            ),
        );
    }
    let have = flags.join(", ");
    if ctx.root.exists("/sys/fs/resctrl/info") {
        return out.push(Verdict::ok(
            ITEM,
            format!(
                "cache allocation available ({have}) and resctrl mounted: give CPU {cell} its own L3 ways with \
                 a group under /sys/fs/resctrl (cpus_list {cell}, an L3 line in schemata)"
            ),
        ));
    }
    let in_kernel = ctx.root.read("/proc/filesystems").is_ok_and(|f| f.split_whitespace().any(|w| w == "resctrl"));
    let v = if in_kernel {
        Verdict::warn(ITEM, format!("cache allocation available ({have}), but resctrl is not mounted"))
            .with_fix("mount -t resctrl resctrl /sys/fs/resctrl")
    } else {
        Verdict::warn(ITEM, format!("the CPU offers cache allocation ({have}), but the kernel has no resctrl"))
            .with_fix("boot a kernel built with CONFIG_X86_CPU_RESCTRL")
    };
    out.push(v);
}

pub(super) fn check_privileges(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    let root = ctx.root;
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
            return out
                .push(Verdict::warn(ITEM, "could not find the effective uid in /proc/self/status").not_checked());
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
