//! Why each item matters for a cell, and how much it weighs in the score.

/// (weight 1..=3, why) of an item; `{cpu}` stands for the cell CPU. Unknown items weigh 1 and say
/// nothing.
pub(super) fn about(item: &str) -> (u8, &'static str) {
    ITEMS.iter().find(|(name, _, _)| *name == item).map(|(_, w, why)| (*w, *why)).unwrap_or((1, ""))
}

/// Every item `rtcell check` reports (the CLI adds "stale region").
pub(super) const ITEMS: &[(&str, u8, &str)] = &[
    ("cpu", 3, "the cell needs CPU {cpu} online and to itself, and the Linux side needs at least one other CPU"),
    (
        "housekeeping",
        2,
        "the housekeeping CPUs take the IRQs, kernel threads, timers and unbound work moved off CPU {cpu}; \
         without one, nothing can be moved",
    ),
    (
        "isolation",
        3,
        "on an isolated CPU {cpu} no load balancing brings other tasks in: the cell runs alone unless something \
         is pinned there",
    ),
    (
        "isolcpus",
        1,
        "isolcpus= flags decide what stays off CPU {cpu}: domain (the scheduler's load balancing), nohz (the \
         tick) and managed_irq (multi-queue device IRQs, which no run-time write can move)",
    ),
    (
        "nohz_full",
        2,
        "with nohz_full the periodic scheduler tick (every 1-4 ms) stops interrupting CPU {cpu} while the cell is \
         its only task",
    ),
    (
        "rcu_nocbs",
        1,
        "RCU callbacks run in softirq context on the CPU that queued them unless offloaded to kernel threads on \
         the housekeeping CPUs",
    ),
    (
        "smt",
        2,
        "an SMT sibling shares CPU {cpu}'s core (caches, execution units): work there slows the cell and varies its times",
    ),
    (
        "irqs",
        3,
        "every device interrupt delivered to CPU {cpu} stops the cell for its handler: microseconds each, more \
         in a VM",
    ),
    (
        "per-cpu irqs",
        1,
        "the local timer, rescheduling and function-call interrupts target CPU {cpu} itself: isolation and \
         nohz_full make them rare, nothing moves them",
    ),
    ("irqbalance", 2, "irqbalance rewrites IRQ affinities every few seconds and undoes any move away from CPU {cpu}"),
    ("irqaffinity", 1, "irqaffinity= keeps IRQs off CPU {cpu} from boot on, before anything can move them"),
    (
        "governor",
        2,
        "a CPU that changes frequency changes the cell's execution times, and ramping up after idle adds latency",
    ),
    (
        "idle states",
        2,
        "waking CPU {cpu} from a deep idle state takes that state's exit latency, added to every wake-up of a \
         cell that sleeps between periods",
    ),
    (
        "pm qos",
        1,
        "a process holding /dev/cpu_dma_latency at 0 keeps every CPU out of idle states with an exit latency, \
         for as long as it keeps the file open",
    ),
    (
        "c-states",
        1,
        "idle= and max_cstate= limit idle states from boot on, for every program, without a process holding \
         /dev/cpu_dma_latency",
    ),
    (
        "rt throttling",
        3,
        "throttling stops every SCHED_FIFO task on CPU {cpu} for the rest of the period once it has used its \
         runtime: a busy-polling cell is stopped for tens of ms every second",
    ),
    (
        "fair server",
        2,
        "the fair deadline server (Linux 6.12+) runs normal tasks on CPU {cpu} ahead of SCHED_FIFO for its \
         runtime every period",
    ),
    (
        "timer migration",
        1,
        "with timer migration on, the kernel moves timers of idle CPUs onto busy ones: a busy-polling CPU {cpu} \
         looks busy and collects them",
    ),
    (
        "nmi watchdog",
        1,
        "the NMI watchdog interrupts every CPU, CPU {cpu} included, with a performance-counter NMI every few \
         seconds",
    ),
    ("softlockup", 1, "the soft-lockup watchdog runs a timer and a stopper thread on CPU {cpu} every few seconds"),
    (
        "thp",
        1,
        "with transparent huge pages always on, page faults anywhere may stall on compaction and khugepaged \
         rewrites page tables in the background, flushing TLBs with interrupts to the CPUs involved",
    ),
    (
        "swap",
        1,
        "swapping wakes kswapd and stalls any task that touches a swapped-out page; rtcell locks its own memory, \
         the processes it talks to may not",
    ),
    ("ksm", 1, "ksmd scans and merges memory pages; a write to a merged page takes a copy-on-write fault"),
    (
        "workqueue",
        2,
        "unbound kernel work (writeback, crypto, ...) runs on any CPU of the workqueue cpumask, CPU {cpu} \
         included unless it is left out",
    ),
    (
        "clocksource",
        1,
        "clock_gettime and timers read the clocksource: the TSC is read in user space in nanoseconds, other \
         clocks cost a system call or a slow device read",
    ),
    (
        "tsc",
        1,
        "without tsc=reliable the clocksource watchdog compares the TSC with another clock from a timer that \
         visits every CPU in turn, and may switch to a slow clocksource",
    ),
    (
        "skew_tick",
        1,
        "skew_tick=1 offsets the CPUs' ticks so they do not all contend for the same kernel locks at the same \
         instant",
    ),
    (
        "kernel threads",
        1,
        "kernel threads allowed on CPU {cpu} preempt the cell when woken: per-CPU ones cannot move, unbound ones \
         can",
    ),
    (
        "preemption",
        3,
        "without a fully preemptible kernel, a wake-up of the cell waits until the running kernel code reaches a \
         preemption point, up to milliseconds",
    ),
    (
        "mitigations",
        1,
        "CPU vulnerability mitigations add work to every kernel entry and exit: system calls, interrupts, VM \
         exits",
    ),
    (
        "hypervisor",
        2,
        "an outer hypervisor preempts this machine's vCPUs at will: no setting inside the guest removes those \
         delays",
    ),
    ("kvm", 1, "kvm cells need a usable /dev/kvm; nested KVM makes every VM exit far slower than on hardware"),
    (
        "resctrl",
        1,
        "cache allocation (Intel RDT / AMD PQoS) reserves L3 ways for CPU {cpu}, so other CPUs' memory traffic \
         cannot evict the cell's working set",
    ),
    (
        "privileges",
        3,
        "SCHED_FIFO and mlockall need root or CAP_SYS_NICE and CAP_IPC_LOCK; without them the cell runs as a \
         normal task and may page",
    ),
    ("stale region", 1, "a shared-memory region left by a dead run holds memory until it is removed"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_has_a_weight_and_a_reason() {
        for (name, weight, why) in ITEMS {
            assert!((1..=3).contains(weight), "{name}");
            assert!(!why.is_empty() && !why.ends_with('.'), "{name}");
        }
        assert_eq!(about("nothing such"), (1, ""));
        let mut names: Vec<&str> = ITEMS.iter().map(|(n, _, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ITEMS.len(), "duplicate item");
    }
}
