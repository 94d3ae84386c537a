//! CPU time counters of /proc/stat: busy and steal percentages over an interval, and the sampler a run keeps.

use super::*;

/// Aggregate CPU time counters of `/proc/stat`, in jiffies (USER_HZ).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
    /// Included in `user` already; kept for completeness.
    pub guest: u64,
    /// Included in `nice` already.
    pub guest_nice: u64,
}

impl CpuTimes {
    /// Parses the aggregate `cpu` line of a `/proc/stat` text (older kernels have fewer columns;
    /// missing ones are zero).
    pub fn parse_proc_stat(stat: &str) -> Option<CpuTimes> {
        CpuTimes::parse_proc_stat_line(stat, "cpu")
    }

    /// One CPU's line (`cpu3`) of a `/proc/stat` text.
    pub fn parse_proc_stat_cpu(stat: &str, cpu: usize) -> Option<CpuTimes> {
        CpuTimes::parse_proc_stat_line(stat, &format!("cpu{cpu}"))
    }

    fn parse_proc_stat_line(stat: &str, label: &str) -> Option<CpuTimes> {
        let line = stat.lines().find(|l| l.split_whitespace().next() == Some(label))?;
        let nums: Vec<u64> =
            line.split_whitespace().skip(1).map(|t| t.parse::<u64>()).collect::<Result<_, _>>().ok()?;
        if nums.len() < 4 {
            return None;
        }
        let at = |i: usize| nums.get(i).copied().unwrap_or(0);
        Some(CpuTimes {
            user: at(0),
            nice: at(1),
            system: at(2),
            idle: at(3),
            iowait: at(4),
            irq: at(5),
            softirq: at(6),
            steal: at(7),
            guest: at(8),
            guest_nice: at(9),
        })
    }

    /// All time accounted, without double counting guest time.
    pub fn total(&self) -> u64 {
        self.user
            .saturating_add(self.nice)
            .saturating_add(self.system)
            .saturating_add(self.idle)
            .saturating_add(self.iowait)
            .saturating_add(self.irq)
            .saturating_add(self.softirq)
            .saturating_add(self.steal)
    }
}

/// Share of time a CPU was busy (neither idle nor waiting for I/O) between two samples of its
/// `/proc/stat` line, in percent; `None` when no time elapsed or the counters went backwards.
pub fn busy_percent(start: &CpuTimes, end: &CpuTimes) -> Option<f64> {
    let total = end.total().checked_sub(start.total())?;
    let idle = end.idle.saturating_add(end.iowait).checked_sub(start.idle.saturating_add(start.iowait))?;
    if total == 0 || idle > total {
        return None;
    }
    Some((total - idle) as f64 * 100.0 / total as f64)
}

/// Steal between two samples as a percentage of all CPU time elapsed; `None` if no time elapsed
/// (or the counters went backwards, e.g. after CPU hotplug).
pub fn steal_percent(start: &CpuTimes, end: &CpuTimes) -> Option<f64> {
    let total = end.total().checked_sub(start.total())?;
    let steal = end.steal.checked_sub(start.steal)?;
    if total == 0 {
        return None;
    }
    Some(steal as f64 * 100.0 / total as f64)
}

/// Measures how much CPU time an outer hypervisor steals while something runs.
#[derive(Debug, Clone)]
pub struct StealSampler {
    root: HostRoot,
    start: Option<CpuTimes>,
}

impl StealSampler {
    /// Takes the starting sample from the live `/proc/stat`.
    pub fn start() -> StealSampler {
        StealSampler::start_in(&HostRoot::system())
    }

    pub fn start_in(root: &HostRoot) -> StealSampler {
        let start = read_cpu_times(root);
        StealSampler { root: root.clone(), start }
    }

    /// Steal since [`start`](Self::start) in percent of all CPU time; `None` when `/proc/stat` was
    /// unreadable or less than a jiffy elapsed.
    pub fn finish(&self) -> Option<f64> {
        let start = self.start?;
        let end = read_cpu_times(&self.root)?;
        steal_percent(&start, &end)
    }
}

fn read_cpu_times(root: &HostRoot) -> Option<CpuTimes> {
    CpuTimes::parse_proc_stat(&root.read("/proc/stat").ok()?)
}
