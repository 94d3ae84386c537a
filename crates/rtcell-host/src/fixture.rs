//! Fake `/proc`, `/sys` and `/dev` trees for tests: a two-CPU machine with a cell on CPU 1, set up
//! badly ([`untuned`]) or well ([`tuned`]).

use std::path::Path;

pub const INTERRUPTS: &str = "           CPU0       CPU1       \n  \
 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n  \
 36:          0      31445 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n  \
 41:       1447          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx\n\
NMI:          0          0   Non-maskable interrupts\n\
LOC:       8730       9656   Local timer interrupts\n\
ERR:          0\n";

/// Writes `text` to `base/rel`, creating directories.
pub fn write(base: &Path, rel: &str, text: &str) {
    write_bytes(base, rel, text.as_bytes());
}

pub fn write_bytes(base: &Path, rel: &str, bytes: &[u8]) {
    let p = base.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

pub fn read(base: &Path, rel: &str) -> String {
    std::fs::read_to_string(base.join(rel)).unwrap()
}

/// A process: `/proc/PID/stat` (with PF_KTHREAD for kernel threads) and `/proc/PID/status`.
pub fn process(base: &Path, pid: u32, name: &str, kernel_thread: bool, allowed: &str) {
    let flags = if kernel_thread { 0x0020_8040u32 } else { 0x0040_0100 };
    write(base, &format!("proc/{pid}/stat"), &format!("{pid} ({name}) S 2 0 0 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1\n"));
    write(base, &format!("proc/{pid}/status"), &format!("Name:\t{name}\nCpus_allowed_list:\t{allowed}\n"));
    std::fs::create_dir_all(base.join(format!("proc/{pid}/fd"))).unwrap();
}

/// Makes process `pid` hold `target` open as descriptor `fd`.
pub fn open_fd(base: &Path, pid: u32, fd: u32, target: &str) {
    std::os::unix::fs::symlink(target, base.join(format!("proc/{pid}/fd/{fd}"))).unwrap();
}

/// A two-CPU machine, cell on CPU 1, every knob set badly.
pub fn untuned(base: &Path) {
    write(base, "proc/cpuinfo", "processor\t: 0\nmodel name\t: Test\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n");
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
    for cpu in 0..2 {
        let dir = format!("sys/devices/system/cpu/cpu{cpu}/cpufreq");
        write(base, &format!("{dir}/scaling_governor"), "powersave\n");
        write(base, &format!("{dir}/scaling_available_governors"), "performance powersave\n");
        write(base, &format!("{dir}/scaling_min_freq"), "800000\n");
        write(base, &format!("{dir}/scaling_max_freq"), "3500000\n");
        write(base, &format!("{dir}/cpuinfo_max_freq"), "3500000\n");
    }
    write(base, "proc/sys/kernel/sched_rt_runtime_us", "950000\n");
    write(base, "proc/sys/kernel/sched_rt_period_us", "1000000\n");
    write(base, "proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
    write(base, "proc/sys/kernel/version", "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1\n");
    write(base, "proc/sys/kernel/timer_migration", "1\n");
    write(base, "proc/sys/kernel/nmi_watchdog", "1\n");
    write(base, "proc/sys/kernel/soft_watchdog", "1\n");
    write(base, "proc/sys/kernel/watchdog_cpumask", "0-1\n");
    write(base, "sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n");
    write(base, "proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/dev/vda2 partition\t8388604\t12288\t-2\n");
    write(base, "proc/sys/vm/swappiness", "60\n");
    write(base, "sys/kernel/mm/ksm/run", "1\n");
    write(base, "sys/devices/virtual/workqueue/cpumask", "3\n");
    write(base, "sys/devices/system/clocksource/clocksource0/current_clocksource", "hpet\n");
    write(base, "sys/devices/system/clocksource/clocksource0/available_clocksource", "tsc hpet acpi_pm \n");
    write(base, "sys/devices/system/cpu/vulnerabilities/spectre_v2", "Mitigation: Retpolines\n");
    write(base, "sys/devices/system/cpu/vulnerabilities/meltdown", "Not affected\n");
    write_bytes(base, "dev/cpu_dma_latency", &2_000_000_000i32.to_ne_bytes());
    let idle = "sys/devices/system/cpu/cpu1/cpuidle";
    for (i, name, lat) in [(0, "POLL", "0"), (1, "C1", "2"), (2, "C6", "133")] {
        write(base, &format!("{idle}/state{i}/name"), &format!("{name}\n"));
        write(base, &format!("{idle}/state{i}/latency"), &format!("{lat}\n"));
        write(base, &format!("{idle}/state{i}/disable"), "0\n");
    }
    process(base, 1, "init", false, "0-1");
    process(base, 2, "kthreadd", true, "0-1");
    process(base, 20, "ksoftirqd/1", true, "1");
    process(base, 21, "migration/1", true, "1");
    process(base, 30, "kworker/u4:1-events_unbound", true, "0-1");
    process(base, 500, "irqbalance", false, "0-1");
    write(base, "proc/self/status", "Name:\trtcell\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n");
    write(base, "proc/stat", "cpu  1 0 1 10 0 0 0 0 0 0\n");
}

/// The same machine tuned for a cell on CPU 1: every item of the check is ok.
pub fn tuned(base: &Path) {
    untuned(base);
    write(
        base,
        "proc/cpuinfo",
        "processor\t: 0\nmodel name\t: Test\nflags\t\t: fpu tsc constant_tsc nonstop_tsc rdt_a cat_l3\n",
    );
    std::fs::create_dir_all(base.join("sys/fs/resctrl/info")).unwrap();
    write(base, "dev/kvm", "");
    write(base, "sys/devices/system/cpu/isolated", "1\n");
    write(base, "sys/devices/system/cpu/nohz_full", "1\n");
    write(
        base,
        "proc/cmdline",
        "BOOT_IMAGE=/vmlinuz isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1 irqaffinity=0 skew_tick=1 \
         tsc=reliable nosoftlockup mitigations=off -- single\n",
    );
    write(base, "proc/irq/36/smp_affinity_list", "0\n");
    write(base, "proc/irq/41/smp_affinity_list", "0\n");
    write(base, "proc/irq/default_smp_affinity", "1\n");
    write(base, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "performance\n");
    write(base, "proc/sys/kernel/sched_rt_runtime_us", "-1\n");
    write(base, "proc/sys/kernel/version", "#1 SMP PREEMPT_RT Debian 6.1.76-1\n");
    write(base, "proc/sys/kernel/timer_migration", "0\n");
    write(base, "proc/sys/kernel/nmi_watchdog", "0\n");
    write(base, "sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    write(base, "proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
    write(base, "sys/kernel/mm/ksm/run", "0\n");
    write(base, "sys/devices/virtual/workqueue/cpumask", "1\n");
    write(base, "sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc\n");
    write(base, "sys/devices/system/cpu/cpu1/cpuidle/state2/disable", "1\n");
    process(base, 2, "kthreadd", true, "0");
    process(base, 30, "kworker/u4:1-events_unbound", true, "0");
    std::fs::remove_dir_all(base.join("proc/500")).unwrap();
    write(base, "proc/self/status", "Name:\trtcell\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n");
}
