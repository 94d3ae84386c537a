//! Fixture tests: a fake /proc, /sys and /dev tree per case (see `crate::fixture`).

use std::path::Path;

use super::kernel::kernel_version;
use super::*;
use crate::fixture::{open_fd, process, tuned, untuned, write, write_bytes};

fn run(base: &Path, cpu: usize) -> Vec<Verdict> {
    let opts = CheckOptions { steal_pct: None, steal_sample: Duration::ZERO };
    check_cell_cpu_with(&HostRoot::at(base), cpu, &opts)
}

fn find<'a>(vs: &'a [Verdict], item: &str) -> &'a Verdict {
    vs.iter().find(|v| v.item == item).unwrap_or_else(|| panic!("no {item} verdict in {vs:#?}"))
}

fn fix(v: &Verdict) -> &str {
    v.fix.as_deref().unwrap_or_else(|| panic!("no fix in {v:?}"))
}

#[test]
fn untuned_machine_gets_warnings_with_fixes() {
    let dir = tempfile::tempdir().unwrap();
    untuned(dir.path());
    let vs = run(dir.path(), 1);

    assert_eq!(find(&vs, "cpu").level, Level::Ok);
    assert!(find(&vs, "housekeeping").detail.contains("housekeeping CPUs 0 "));
    let iso = find(&vs, "isolation");
    assert_eq!(iso.level, Level::Warn);
    assert!(fix(iso).contains("isolcpus=domain,managed_irq,1 nohz_full=1 rcu_nocbs=1"), "{}", fix(iso));
    assert!(fix(find(&vs, "isolcpus")).contains("isolcpus=domain,managed_irq,1"));
    // nohz_full file missing: its own finding, not a panic.
    let nohz = find(&vs, "nohz_full");
    assert_eq!(nohz.level, Level::Warn);
    assert!(nohz.detail.contains("no /sys/devices/system/cpu/nohz_full"), "{}", nohz.detail);
    assert_eq!(find(&vs, "rcu_nocbs").level, Level::Warn);

    let irqs = find(&vs, "irqs");
    assert_eq!(irqs.level, Level::Warn);
    assert!(irqs.detail.contains("36 (virtio1-req.0, 31445 there so far)"), "{}", irqs.detail);
    assert!(irqs.detail.contains("41 (virtio3-rx)"), "{}", irqs.detail);
    assert!(!irqs.detail.contains("24 ("), "{}", irqs.detail);
    let f = fix(irqs);
    assert!(f.contains("for i in 36 41; do echo 0 > /proc/irq/$i/smp_affinity_list"), "{f}");
    assert!(f.contains("echo 1 > /proc/irq/default_smp_affinity"), "{f}");
    assert!(f.contains("stop irqbalance first"), "{f}");
    let per_cpu = find(&vs, "per-cpu irqs");
    assert!(per_cpu.detail.contains("LOC 9656"), "{}", per_cpu.detail);
    assert!(!per_cpu.detail.contains("NMI"), "{}", per_cpu.detail);
    let balance = find(&vs, "irqbalance");
    assert_eq!(balance.level, Level::Warn);
    assert!(balance.detail.contains("pid 500"), "{}", balance.detail);
    assert_eq!(find(&vs, "irqaffinity").level, Level::Warn);
    assert!(fix(find(&vs, "irqaffinity")).contains("`irqaffinity=0`"));

    let gov = find(&vs, "governor");
    assert_eq!(gov.level, Level::Warn);
    assert!(gov.detail.contains("CPU 1 powersave 800-3500 MHz"), "{}", gov.detail);
    assert!(gov.detail.contains("other CPUs: CPU 0 powersave"), "{}", gov.detail);
    assert!(fix(gov).contains("echo performance > /sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"));
    let idle = find(&vs, "idle states");
    assert_eq!(idle.level, Level::Warn);
    assert!(fix(idle).contains("cpu1/cpuidle/state2/disable"));
    let qos = find(&vs, "pm qos");
    assert_eq!(qos.level, Level::Warn);
    assert!(qos.detail.contains("C6 (133 us to wake)"), "{}", qos.detail);
    assert!(fix(qos).contains("exec 3> /dev/cpu_dma_latency; echo 0 >&3"));
    assert!(fix(find(&vs, "c-states")).contains("processor.max_cstate=1 intel_idle.max_cstate=0"));

    let rt = find(&vs, "rt throttling");
    assert_eq!(rt.level, Level::Warn);
    assert!(rt.detail.contains("throttled for 50 ms every second"), "{}", rt.detail);
    assert!(fix(rt).starts_with("echo -1 > /proc/sys/kernel/sched_rt_runtime_us"));
    assert_eq!(
        fix(find(&vs, "timer migration")),
        "echo 0 > /proc/sys/kernel/timer_migration (rtcell tune --cpu 1 --apply does this)"
    );
    assert!(fix(find(&vs, "nmi watchdog")).starts_with("echo 0 > /proc/sys/kernel/nmi_watchdog"));
    assert!(fix(find(&vs, "softlockup")).starts_with("echo 0 > /proc/sys/kernel/watchdog_cpumask"));
    assert!(fix(find(&vs, "thp")).starts_with("echo never > /sys/kernel/mm/transparent_hugepage/enabled"));
    assert!(find(&vs, "swap").detail.contains("/dev/vda2 (8191 MiB, 12 MiB used), vm.swappiness 60"));
    assert!(fix(find(&vs, "ksm")).starts_with("echo 2 > /sys/kernel/mm/ksm/run"));
    assert!(fix(find(&vs, "workqueue")).starts_with("echo 1 > /sys/devices/virtual/workqueue/cpumask"));
    let cs = find(&vs, "clocksource");
    assert!(cs.detail.contains("hpet"), "{}", cs.detail);
    assert_eq!(fix(cs), "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource");
    // Not the TSC: tsc=reliable would change nothing.
    assert_eq!(find(&vs, "tsc").level, Level::Ok);
    assert!(fix(find(&vs, "skew_tick")).contains("`skew_tick=1`"));
    let kt = find(&vs, "kernel threads");
    assert_eq!(kt.level, Level::Warn);
    assert!(kt.detail.contains("bound to CPU 1 (per-CPU, cannot move): ksoftirqd/1, migration/1"), "{}", kt.detail);
    assert!(kt.detail.contains("2 unbound kernel threads may run there too: kthreadd, kworker/u4:1"), "{}", kt.detail);
    assert!(!kt.detail.contains("irqbalance") && !kt.detail.contains("init"), "{}", kt.detail);
    assert!(fix(kt).contains("taskset -pc 0 $p"));

    let pre = find(&vs, "preemption");
    assert_eq!(pre.level, Level::Warn);
    assert!(fix(pre).contains("`preempt=full`"), "{}", fix(pre));
    assert!(fix(pre).contains("linux-image-rt-amd64"));
    let mit = find(&vs, "mitigations");
    assert!(mit.detail.contains("mitigated here: spectre_v2"), "{}", mit.detail);
    assert!(!mit.detail.contains("meltdown"), "{}", mit.detail);

    assert_eq!(find(&vs, "smt").level, Level::Ok);
    assert_eq!(find(&vs, "hypervisor").level, Level::Ok);
    let kvm = find(&vs, "kvm");
    assert_eq!(kvm.level, Level::Warn);
    assert!(kvm.detail.contains("no /dev/kvm"));
    assert_eq!(find(&vs, "resctrl").level, Level::Warn);
    let privs = find(&vs, "privileges");
    assert_eq!(privs.level, Level::Warn);
    assert!(privs.detail.contains("CAP_SYS_NICE"));
    // 6.1 has no fair server: no finding about it.
    assert!(vs.iter().all(|v| v.item != "fair server"));
    assert_eq!(worst(&vs), Level::Warn);

    // Every finding says why it matters for this CPU, and carries its weight.
    for v in &vs {
        assert!(!v.why.is_empty() && (1..=3).contains(&v.weight), "{v:?}");
        assert!(v.level == Level::Ok || v.fix.is_some(), "a warning without a fix: {v:?}");
    }
    let summary = score::Summary::of(&vs);
    let top: Vec<&str> = summary.top.iter().map(|t| t.item.as_str()).collect();
    assert_eq!(top, ["isolation", "irqs", "rt throttling"]);
    assert!(summary.score < 70, "{}", summary.score);
}

#[test]
fn tuned_machine_is_all_ok() {
    let dir = tempfile::tempdir().unwrap();
    tuned(dir.path());
    let vs = run(dir.path(), 1);
    for v in &vs {
        assert_eq!(v.level, Level::Ok, "{v:?}");
        assert!(!v.unknown, "{v:?}");
    }
    assert!(find(&vs, "irqs").detail.contains("IRQs 36 (virtio1-req.0) fired on CPU 1 earlier"));
    assert!(find(&vs, "rt throttling").detail.contains("off"));
    assert!(find(&vs, "isolation").detail.contains("is isolated"));
    assert!(find(&vs, "isolcpus").detail.contains("flags: managed_irq, domain"));
    assert!(find(&vs, "kernel threads").detail.contains("no unbound kernel thread may run there"));
    assert!(find(&vs, "preemption").detail.starts_with("PREEMPT_RT kernel 6.1.0-18-amd64"));
    assert_eq!(find(&vs, "kvm").detail, "/dev/kvm opens and KVM runs on the hardware");
    let summary = score::Summary::of(&vs);
    assert_eq!(summary.score, 100);
    assert!(summary.top.is_empty());
}

#[test]
fn isolcpus_flags_and_housekeeping() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    tuned(b);
    let isolcpus = |value: &str| {
        write(b, "proc/cmdline", &format!("isolcpus={value} nohz_full=1\n"));
        find(&run(b, 1), "isolcpus").clone()
    };
    let v = isolcpus("1");
    assert_eq!(v.level, Level::Warn);
    assert!(v.detail.contains("lacks managed_irq"), "{}", v.detail);
    assert!(fix(&v).contains("isolcpus=domain,managed_irq,1"));
    let v = isolcpus("nohz,managed_irq,1");
    assert!(v.detail.contains("lacks the domain flag"), "{}", v.detail);
    assert!(fix(&v).contains("isolcpus=nohz,domain,managed_irq,1"), "{}", fix(&v));
    let v = isolcpus("domain,managed_irq,2-3");
    assert!(v.detail.contains("does not include CPU 1"), "{}", v.detail);
    assert!(fix(&v).contains("isolcpus=domain,managed_irq,1-3"), "{}", fix(&v));
    assert_eq!(isolcpus("managed_irq,domain,nohz,0-1").level, Level::Ok);
    assert!(isolcpus("nohz,1-x").unknown);

    // Every other CPU isolated as well: no housekeeping CPU left.
    write(b, "sys/devices/system/cpu/online", "0-2\n");
    write(b, "sys/devices/system/cpu/isolated", "0-2\n");
    let vs = run(b, 1);
    let hk = find(&vs, "housekeeping");
    assert_eq!(hk.level, Level::Warn);
    assert!(hk.detail.contains("every other online CPU (0,2) is isolated too"), "{}", hk.detail);
    // nohz_full= on a kernel without CONFIG_NO_HZ_FULL is reported as ignored.
    std::fs::remove_file(b.join("sys/devices/system/cpu/nohz_full")).unwrap();
    let nohz = find(&run(b, 1), "nohz_full").clone();
    assert!(nohz.detail.contains("nohz_full=1 on the command line is ignored"), "{}", nohz.detail);
}

#[test]
fn irqs_are_found_under_proc_irq_with_masks_and_effective_affinity() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    tuned(b);
    // IRQ 36 delivered to CPU 1 now; IRQ 50 has no handler (not in /proc/interrupts) and only a hex
    // mask; IRQ 7's affinity cannot be read.
    write(b, "proc/irq/36/smp_affinity_list", "0-1\n");
    write(b, "proc/irq/36/effective_affinity_list", "1\n");
    write(b, "proc/irq/50/smp_affinity", "2\n");
    std::fs::create_dir_all(b.join("proc/irq/7/smp_affinity_list")).unwrap();
    let vs = run(b, 1);
    let irqs: Vec<&Verdict> = vs.iter().filter(|v| v.item == "irqs").collect();
    assert_eq!(irqs.len(), 2, "{irqs:#?}");
    assert!(irqs[0].unknown && irqs[0].detail.starts_with("could not read the affinity of IRQ 7: "));
    let v = irqs[1];
    assert_eq!(v.level, Level::Warn);
    assert!(v.detail.starts_with("2 device IRQs may be delivered to CPU 1: "), "{}", v.detail);
    assert!(v.detail.contains("36 (virtio1-req.0, delivered to CPU 1 now, 31445 there so far)"), "{}", v.detail);
    assert!(v.detail.contains("50 (no handler)"), "{}", v.detail);
    assert!(fix(v).contains("for i in 36 50; do echo 0 >"), "{}", fix(v));
    // No irqbalance in the tuned machine: the fix does not mention it.
    assert!(!fix(v).contains("irqbalance"), "{}", fix(v));
}

#[test]
fn governors_per_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    tuned(b);
    write(b, "sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq", "2000000\n");
    write(b, "sys/devices/system/cpu/cpufreq/boost", "1\n");
    let gov = find(&run(b, 1), "governor").clone();
    assert_eq!(gov.level, Level::Ok);
    assert!(
        gov.detail.starts_with("CPU 1 performance 800-2000 MHz (capped below the 3500 MHz maximum)"),
        "{}",
        gov.detail
    );
    assert!(gov.detail.contains("other CPUs: CPU 0 powersave 800-3500 MHz"), "{}", gov.detail);
    assert!(gov.detail.contains("boost (turbo) is on"), "{}", gov.detail);
    // Bare metal without cpufreq: firmware decides.
    std::fs::remove_dir_all(b.join("sys/devices/system/cpu/cpu1/cpufreq")).unwrap();
    let gov = find(&run(b, 1), "governor").clone();
    assert_eq!(gov.level, Level::Warn);
    assert!(fix(&gov).contains("BIOS"));
}

#[test]
fn preemption_models() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    tuned(b);
    let pre = |version: &str| {
        write(b, "proc/sys/kernel/version", version);
        find(&run(b, 1), "preemption").clone()
    };
    assert_eq!(pre("#1 SMP PREEMPT_RT Debian 6.1.76-1\n").level, Level::Ok);
    let full = pre("#1 SMP PREEMPT Debian 6.1.76-1\n");
    assert_eq!(full.level, Level::Warn);
    assert!(full.detail.contains("preemption model is full"), "{}", full.detail);
    assert!(!fix(&full).contains("preempt=full"));
    write(b, "proc/cmdline", "preempt=voluntary\n");
    let dynamic = pre("#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1\n");
    assert!(dynamic.detail.contains("preemption model is voluntary"), "{}", dynamic.detail);
    assert!(fix(&dynamic).contains("`preempt=full`"));
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
    write(b, "dev/kvm", "");
    std::fs::remove_dir_all(b.join("sys/devices/system/cpu/cpu1/cpufreq")).unwrap();
    let opts = CheckOptions { steal_pct: Some(1.25), steal_sample: Duration::ZERO };
    let vs = check_cell_cpu_with(&HostRoot::at(b), 1, &opts);
    let smt = find(&vs, "smt");
    assert_eq!(smt.level, Level::Warn);
    assert!(smt.detail.contains("CPU 3"), "{}", smt.detail);
    assert!(fix(smt).contains("isolcpus=1,3"));
    let hv = find(&vs, "hypervisor");
    assert_eq!(hv.level, Level::Warn);
    assert!(hv.detail.contains("Xen") && hv.detail.contains("steal 1.2%"), "{}", hv.detail);
    assert!(hv.detail.contains("maxima of several ms are expected"));
    let gov = find(&vs, "governor");
    assert_eq!(gov.level, Level::Ok);
    assert!(gov.detail.contains("typical in a VM"));
    // IRQs routed to 0-3 leave housekeeping CPUs 0,2-3 in the fix.
    let irqs = find(&vs, "irqs");
    assert!(fix(irqs).contains("echo 0,2-3 > /proc/irq/$i/smp_affinity_list"));
    let kvm = find(&vs, "kvm");
    assert_eq!(kvm.level, Level::Warn);
    assert!(kvm.detail.contains("KVM is nested"), "{}", kvm.detail);
}

/// The sibling's load and the steal come from two `/proc/stat` readings; here they are given.
#[test]
fn sampled_sibling_load_and_steal() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    untuned(b);
    write(b, "sys/devices/system/cpu/online", "0-3\n");
    write(b, "sys/devices/system/cpu/isolated", "1,3\n");
    write(b, "sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "1,3\n");
    write(b, "proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu tsc hypervisor\n");
    let root = HostRoot::at(b);
    let opts = CheckOptions { steal_pct: None, steal_sample: Duration::ZERO };
    let with_window = |cpu3_end: &str| {
        let ctx = Ctx::new(&root, 1, &opts);
        ctx.sample.borrow_mut().done = Some(Some(StatWindow {
            start: "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu3 10 0 10 100 0 0 0 0 0 0\n".into(),
            end: format!("cpu  150 0 100 1040 0 0 0 10 0 0\n{cpu3_end}"),
            elapsed: Duration::from_millis(200),
        }));
        let mut out = Vec::new();
        cpus::check_smt(&mut out, &ctx);
        virt::check_hypervisor(&mut out, &ctx);
        out
    };
    // Sibling isolated and idle (1 of 100 jiffies busy).
    let vs = with_window("cpu3 11 0 10 199 0 0 0 0 0 0\n");
    assert_eq!(vs[0].level, Level::Ok, "{:?}", vs[0]);
    assert!(vs[0].detail.contains("isolated and idle over 200 ms: CPU 3 1% busy"), "{}", vs[0].detail);
    assert!(vs[1].detail.contains("steal 10.0% over 200 ms"), "{}", vs[1].detail);
    // Sibling isolated but busy (60 of 100).
    let vs = with_window("cpu3 70 0 10 140 0 0 0 0 0 0\n");
    assert_eq!(vs[0].level, Level::Warn);
    assert!(vs[0].detail.contains("which is isolated but busy"), "{}", vs[0].detail);
    assert!(vs[0].detail.contains("CPU 3 60% busy"), "{}", vs[0].detail);
}

#[test]
fn pm_qos_holders_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    untuned(b);
    process(b, 700, "cyclictest", false, "0-1");
    open_fd(b, 700, 3, "/dev/cpu_dma_latency");
    open_fd(b, 700, 4, "/dev/null");
    write_bytes(b, "dev/cpu_dma_latency", &0i32.to_ne_bytes());
    let v = find(&run(b, 1), "pm qos").clone();
    assert_eq!(v.level, Level::Ok);
    assert_eq!(v.detail, "/dev/cpu_dma_latency is held at 0 us, open in cyclictest (pid 700)");
    // A value of the wrong size is a finding, not a crash.
    write(b, "dev/cpu_dma_latency", "0\n");
    let v = find(&run(b, 1), "pm qos").clone();
    assert!(v.unknown && v.detail.contains("expected 4 bytes, read 2"), "{v:?}");
    std::fs::remove_file(b.join("dev/cpu_dma_latency")).unwrap();
    assert_eq!(find(&run(b, 1), "pm qos").level, Level::Ok);
}

#[test]
fn cmdline_items() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    tuned(b);
    let item = |cmdline: &str, item: &str| {
        write(b, "proc/cmdline", cmdline);
        find(&run(b, 1), item).clone()
    };
    let v = item("irqaffinity=0-1", "irqaffinity");
    assert_eq!(v.level, Level::Warn);
    assert!(v.detail.contains("irqaffinity=0-1 includes CPU 1"));
    assert!(item("idle=poll", "c-states").detail.contains("idle=poll: idle CPUs spin"));
    assert_eq!(item("intel_idle.max_cstate=0", "c-states").level, Level::Ok);
    assert_eq!(item("quiet", "tsc").level, Level::Warn);
    assert_eq!(item("tsc=nowatchdog,reliable", "tsc").level, Level::Ok);
    assert_eq!(item("skew_tick=0", "skew_tick").level, Level::Warn);
    let v = item("mitigations=auto", "mitigations");
    assert!(v.detail.contains("(mitigations=auto)"), "{}", v.detail);
    // nosoftlockup, or a watchdog mask without the cell CPU.
    assert_eq!(item("quiet", "softlockup").level, Level::Warn);
    write(b, "proc/sys/kernel/watchdog_cpumask", "0\n");
    assert_eq!(item("quiet", "softlockup").level, Level::Ok);
    // Parameters after `--` belong to init.
    assert_eq!(item("quiet -- skew_tick=1", "skew_tick").level, Level::Warn);
}

#[test]
fn resctrl_and_kvm_variants() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    tuned(b);
    assert_eq!(find(&run(b, 1), "resctrl").level, Level::Ok);
    std::fs::remove_dir_all(b.join("sys/fs/resctrl")).unwrap();
    let v = find(&run(b, 1), "resctrl").clone();
    assert_eq!(fix(&v), "boot a kernel built with CONFIG_X86_CPU_RESCTRL");
    write(b, "proc/filesystems", "nodev\tsysfs\nnodev\tresctrl\n");
    let v = find(&run(b, 1), "resctrl").clone();
    assert_eq!(fix(&v), "mount -t resctrl resctrl /sys/fs/resctrl");
    std::fs::remove_file(b.join("dev/kvm")).unwrap();
    assert!(find(&run(b, 1), "kvm").detail.contains("no /dev/kvm"));
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
    assert!(fs.unknown);
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
fn missing_cpu_is_bad_and_offline_cpu_has_a_fix() {
    let dir = tempfile::tempdir().unwrap();
    untuned(dir.path());
    let vs = run(dir.path(), 7);
    let c = find(&vs, "cpu");
    assert_eq!(c.level, Level::Bad);
    assert!(c.detail.contains("does not exist"));
    // Per-CPU findings are skipped; host-wide ones remain.
    assert!(vs.iter().all(|v| v.item != "isolation" && v.item != "kernel threads"));
    assert!(vs.iter().any(|v| v.item == "rt throttling"));
    assert_eq!(worst(&vs), Level::Bad);

    std::fs::create_dir_all(dir.path().join("sys/devices/system/cpu/cpu7")).unwrap();
    let vs = run(dir.path(), 7);
    assert!(fix(find(&vs, "cpu")).contains("cpu7/online"));
}

#[test]
fn empty_root_reports_unreadable_files_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let vs = run(dir.path(), 1);
    assert!(vs.iter().any(|v| { v.detail.starts_with("could not read /sys/devices/system/cpu/online") }));
    assert!(vs.iter().any(|v| v.detail.starts_with("could not read /proc/interrupts")));
    assert!(vs.iter().any(|v| { v.detail.starts_with("could not read /proc/sys/kernel/sched_rt_runtime_us") }));
    assert!(vs.iter().any(|v| v.detail.starts_with("could not read /proc/cmdline")));
    assert!(vs.iter().all(|v| v.level != Level::Bad));
    for v in vs.iter().filter(|v| v.detail.starts_with("could not read")) {
        assert!(v.unknown, "{v:?}");
    }
    // Nothing could be checked that counts: no changes are proposed from guesses.
    let summary = score::Summary::of(&vs);
    assert!(summary.top.iter().all(|t| !t.fix.contains("could not")), "{:?}", summary.top);
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
    // Groups are 32 CPUs each whether or not the kernel padded them.
    assert_eq!(parse_cpu_mask("1,1").unwrap(), vec![0, 32]);
    assert_eq!(parse_cpu_mask("00000000,00000003").unwrap(), vec![0, 1]);
    assert!(parse_cpu_mask("xyz").is_err());
    assert!(parse_cpu_mask("+3").is_err());
    assert!(parse_cpu_mask("1,,2").is_err());
    assert!(parse_cpu_mask("123456789").is_err());
    assert_eq!(format_cpu_mask(&[0, 2]), "5");
    assert_eq!(format_cpu_mask(&[0, 33]), "2,00000001");
    assert_eq!(parse_cpu_mask(&format_cpu_mask(&[1, 5, 40])).unwrap(), vec![1, 5, 40]);
    let cmd = "BOOT_IMAGE=/vmlinuz isolcpus=nohz,domain,managed_irq,2-3 rcu_nocbs=all -- isolcpus=9";
    assert_eq!(cmdline_param(cmd, "isolcpus"), Some("nohz,domain,managed_irq,2-3"));
    assert_eq!(cmdline_cpus("nohz,domain,managed_irq,2-3", &[]).unwrap(), vec![2, 3]);
    assert_eq!(cmdline_cpus("all", &[0, 1]).unwrap(), vec![0, 1]);
    assert_eq!(cmdline_param(cmd, "nohz_full"), None);
    assert_eq!(cmdline_param("quiet nosoftlockup", "nosoftlockup"), Some(""));
    assert_eq!(cmdline::isolcpus_flags("nohz,managed_irq,2-3"), ["nohz", "managed_irq"]);
    assert_eq!(cmdline::isolcpus_value(&["managed_irq"], &[1, 2]), "domain,managed_irq,1-2");
    assert_eq!(kernel_version("6.12.9-amd64"), Some((6, 12)));
    assert_eq!(kernel_version("junk"), None);
}

/// A real check of this machine's CPU 1 (or its last CPU on a single-CPU machine): structure only.
#[test]
fn live_check_on_cpu_1() {
    let online = cpu::online_cpus().unwrap();
    let cell = if online.contains(&1) { 1 } else { *online.last().unwrap() };
    let vs = check_cell_cpu(&HostRoot::system(), cell);
    assert_eq!(vs[0].item, "cpu");
    assert_ne!(vs[0].level, Level::Bad, "{:?}", vs[0]);
    for (item, _, _) in about::ITEMS.iter().filter(|(i, _, _)| !["fair server", "stale region"].contains(i)) {
        find(&vs, item);
    }
    for v in &vs {
        assert!(!v.item.is_empty() && !v.detail.is_empty(), "{v:?}");
        assert!(v.fix.as_ref().is_none_or(|f| !f.is_empty()), "{v:?}");
        assert!(!v.why.is_empty(), "{v:?}");
    }
    let text = render_text(&vs);
    assert!(text.lines().any(|l| l.starts_with("summary: ")));
    assert_eq!(text.lines().filter(|l| l.starts_with('[')).count(), vs.len());
}

#[test]
fn render_text_aligns_and_summarises() {
    let mut vs = vec![
        Verdict::ok("cpu", "CPU 1 is online"),
        Verdict::warn("rt throttling", "throttled").with_fix("echo -1 > /proc/sys/kernel/sched_rt_runtime_us"),
        Verdict::bad("x", "broken"),
    ];
    for v in &mut vs {
        v.annotate(1);
    }
    let text = render_text(&vs);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "[ ok ] cpu:           CPU 1 is online");
    assert_eq!(lines[1], "[warn] rt throttling: throttled");
    assert!(lines[2].starts_with("                      why: throttling stops every SCHED_FIFO task on CPU 1"));
    assert_eq!(lines[3], "                      fix: echo -1 > /proc/sys/kernel/sched_rt_runtime_us");
    assert_eq!(lines[4], "[bad ] x:             broken");
    assert_eq!(lines[5], "summary: 1 ok, 1 warn, 1 bad; score 64/100");
    assert_eq!(lines[6], "changes that would help most:");
    assert_eq!(lines[7], "  1. rt throttling: echo -1 > /proc/sys/kernel/sched_rt_runtime_us");
    assert_eq!(lines.len(), 8);
    let json = serde_json::to_string(&vs[1]).unwrap();
    assert!(json.contains(r#""level":"warn""#), "{json}");
    assert!(json.contains(r#""fix":"echo -1"#), "{json}");
    assert!(json.contains(r#""weight":3"#), "{json}");
    assert!(serde_json::to_string(&vs[0]).unwrap().contains(r#""fix":null"#));
}
