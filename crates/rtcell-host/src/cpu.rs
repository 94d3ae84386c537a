//! CPU sets: which CPUs exist, pinning threads to them, and their SMT topology.

use std::io;

use crate::root::{HostRoot, ReadError};

/// Highest CPU number accepted in a list; far above any real `NR_CPUS` (8192), low enough that a
/// corrupt list cannot make us allocate gigabytes.
pub const MAX_CPU: usize = 1 << 16;

/// Parses a kernel CPU list such as `0-3,5`, `1,3-4` or `0-15:2/4` (range:used/group, as accepted
/// by the kernel for `isolcpus=` and friends). An empty (or whitespace-only) list is valid and
/// empty, as in `/sys/devices/system/cpu/isolated` on a machine without isolation; `(null)` is what
/// some kernels print for an empty `nohz_full` mask. The result is sorted and without duplicates.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let text = text.trim();
    if text.is_empty() || text == "(null)" {
        return Ok(Vec::new());
    }
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!("empty element in CPU list {text:?}"));
        }
        let (range, stride) = match part.split_once(':') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (parse_cpu(a, text)?, parse_cpu(b, text)?),
            None => {
                let c = parse_cpu(range, text)?;
                (c, c)
            }
        };
        if last < first {
            return Err(format!("descending range {part:?} in CPU list {text:?}"));
        }
        let (used, group) = match stride {
            None => (1, 1),
            Some(s) => {
                let (u, g) = s
                    .split_once('/')
                    .ok_or_else(|| format!("bad group {part:?} in CPU list {text:?}, expected a-b:used/size"))?;
                let u: usize = u.trim().parse().map_err(|_| format!("bad group {part:?} in CPU list {text:?}"))?;
                let g: usize = g.trim().parse().map_err(|_| format!("bad group {part:?} in CPU list {text:?}"))?;
                if u == 0 || g == 0 || u > g {
                    return Err(format!("bad group {part:?} in CPU list {text:?}"));
                }
                (u, g)
            }
        };
        for cpu in first..=last {
            if (cpu - first) % group < used {
                cpus.push(cpu);
            }
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn parse_cpu(s: &str, whole: &str) -> Result<usize, String> {
    let s = s.trim();
    let cpu: usize = s.parse().map_err(|_| format!("{s:?} is not a CPU number in CPU list {whole:?}"))?;
    if cpu > MAX_CPU {
        return Err(format!("CPU {cpu} in CPU list {whole:?} is beyond {MAX_CPU}"));
    }
    Ok(cpu)
}

/// Formats CPUs in the kernel's list syntax (`0-3,5`), the form `smp_affinity_list` and
/// `isolcpus=` expect. Input need not be sorted.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// Reads and parses a CPU-list file such as `/sys/devices/system/cpu/online`.
pub fn read_cpu_list(root: &HostRoot, logical: &str) -> Result<Vec<usize>, ReadError> {
    let text = root.read(logical)?;
    parse_cpu_list(&text).map_err(|why| ReadError::invalid(logical, why))
}

/// CPUs currently online, from `/sys/devices/system/cpu/online`.
pub fn online_cpus() -> io::Result<Vec<usize>> {
    online_cpus_in(&HostRoot::system()).map_err(io::Error::from)
}

/// [`online_cpus`] under another root.
pub fn online_cpus_in(root: &HostRoot) -> Result<Vec<usize>, ReadError> {
    read_cpu_list(root, "/sys/devices/system/cpu/online")
}

/// CPUs isolated from the scheduler's load balancing (`isolcpus=` or an isolated cpuset partition).
///
/// Reads `/sys/devices/system/cpu/isolated` (boot-time isolation) and adds
/// `/sys/fs/cgroup/cpuset.cpus.isolated` (isolated cgroup v2 partitions) when the kernel has it.
pub fn isolated_cpus_in(root: &HostRoot) -> Result<Vec<usize>, ReadError> {
    let mut cpus = read_cpu_list(root, "/sys/devices/system/cpu/isolated")?;
    const CGROUP: &str = "/sys/fs/cgroup/cpuset.cpus.isolated";
    if let Ok(Some(text)) = root.read_optional(CGROUP) {
        if let Ok(more) = parse_cpu_list(&text) {
            cpus.extend(more);
            cpus.sort_unstable();
            cpus.dedup();
        }
    }
    Ok(cpus)
}

/// The other hardware threads sharing `cpu`'s core (not including `cpu` itself); empty when SMT is
/// off, absent or the topology is not readable.
pub fn smt_siblings(cpu: usize) -> Vec<usize> {
    smt_siblings_in(&HostRoot::system(), cpu).unwrap_or_default()
}

/// [`smt_siblings`] under another root, with the read error kept for reporting.
pub fn smt_siblings_in(root: &HostRoot, cpu: usize) -> Result<Vec<usize>, ReadError> {
    let primary = format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list");
    let list = match read_cpu_list(root, &primary) {
        Ok(list) => list,
        Err(e) if e.is_not_found() => {
            // Newer name of the same mask; older kernels only have the one above.
            let alt = format!("/sys/devices/system/cpu/cpu{cpu}/topology/core_cpus_list");
            read_cpu_list(root, &alt).map_err(|_| e)?
        }
        Err(e) => return Err(e),
    };
    Ok(list.into_iter().filter(|&c| c != cpu).collect())
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    pin_current_thread_to(&[cpu])
}

/// Restricts the calling thread to a set of CPUs.
///
/// Uses the raw syscall with a mask sized to the largest CPU, so CPUs beyond glibc's fixed
/// `cpu_set_t` (1024) work too. A CPU that does not exist or is offline gives `EINVAL`.
pub fn pin_current_thread_to(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty CPU set"));
    }
    let mask = cpu_mask(cpus)?;
    let bytes = std::mem::size_of_val(mask.as_slice());
    // SAFETY: `mask` is a live, initialised buffer of exactly `bytes` bytes that the kernel only
    // reads; pid 0 means the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setaffinity, 0 as libc::pid_t, bytes, mask.as_ptr()) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The CPUs the calling thread may run on.
pub fn current_affinity() -> io::Result<Vec<usize>> {
    let word_bits = 8 * std::mem::size_of::<libc::c_ulong>();
    let mut words = 1024 / word_bits;
    loop {
        let mut mask: Vec<libc::c_ulong> = vec![0; words];
        let bytes = std::mem::size_of_val(mask.as_slice());
        // SAFETY: `mask` is a writable buffer of exactly `bytes` bytes; the kernel writes at most
        // that many and returns how many it wrote. pid 0 means the calling thread.
        let rc = unsafe { libc::syscall(libc::SYS_sched_getaffinity, 0 as libc::pid_t, bytes, mask.as_mut_ptr()) };
        if rc >= 0 {
            let mut cpus = Vec::new();
            for (w, &word) in mask.iter().enumerate() {
                for b in 0..word_bits {
                    if word & (1 << b) != 0 {
                        cpus.push(w * word_bits + b);
                    }
                }
            }
            return Ok(cpus);
        }
        let err = io::Error::last_os_error();
        // EINVAL: our mask is smaller than the kernel's nr_cpu_ids; grow it.
        if err.raw_os_error() == Some(libc::EINVAL) && words * word_bits < MAX_CPU {
            words *= 2;
            continue;
        }
        return Err(err);
    }
}

fn cpu_mask(cpus: &[usize]) -> io::Result<Vec<libc::c_ulong>> {
    let word_bits = 8 * std::mem::size_of::<libc::c_ulong>();
    let max = cpus.iter().copied().max().unwrap_or(0);
    if max > MAX_CPU {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {max} is beyond {MAX_CPU}")));
    }
    let mut mask: Vec<libc::c_ulong> = vec![0; max / word_bits + 1];
    for &c in cpus {
        mask[c / word_bits] |= 1 << (c % word_bits);
    }
    Ok(mask)
}

/// The CPU the calling thread is running on right now (it may move unless pinned).
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and only returns a value.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5").unwrap(), vec![0, 1, 2, 3, 5]);
        assert_eq!(parse_cpu_list("1\n").unwrap(), vec![1]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpu_list("\n").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpu_list("(null)\n").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpu_list("5,1-2,2").unwrap(), vec![1, 2, 5]);
        assert_eq!(parse_cpu_list("0-15:2/4").unwrap(), vec![0, 1, 4, 5, 8, 9, 12, 13]);
        assert_eq!(parse_cpu_list(" 2 - 3 ").unwrap(), vec![2, 3]);
    }

    #[test]
    fn rejects_malformed_cpu_lists() {
        for bad in ["a", "1-", "3-1", "1,,2", "-1", "0-99999999", "0-3:0/4", "0-3:5/4", "0-3:1"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn formats_cpu_lists() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 5]), "0-3,5");
        assert_eq!(format_cpu_list(&[5, 1]), "1,5");
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(format_cpu_list(&[7, 6, 7]), "6-7");
        for list in ["0-3,5", "1", "0,2,4-9"] {
            assert_eq!(format_cpu_list(&parse_cpu_list(list).unwrap()), list);
        }
    }

    #[test]
    fn online_cpus_are_listed_and_pinnable() {
        let online = online_cpus().unwrap();
        assert!(!online.is_empty());
        let last = *online.last().unwrap();
        // In a thread of its own: the affinity must not leak into other tests.
        std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            assert_eq!(current_cpu(), Some(last));
            assert_eq!(current_affinity().unwrap(), vec![last]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pinning_to_a_missing_cpu_fails() {
        std::thread::spawn(|| {
            let e = pin_current_thread(MAX_CPU).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
            assert!(pin_current_thread(MAX_CPU + 1).is_err());
            assert!(pin_current_thread_to(&[]).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn smt_siblings_exclude_the_cpu_itself() {
        for cpu in online_cpus().unwrap() {
            assert!(!smt_siblings(cpu).contains(&cpu));
        }
    }
}
