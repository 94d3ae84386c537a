//! The processes of a host root: names, kernel threads, CPU affinity, open files.
//!
//! Processes come and go while we read: one that vanished half-way is skipped, never an error.

use crate::cpu::parse_cpu_list;
use crate::root::{HostRoot, ReadError};

/// `PF_KTHREAD` in the flags of `/proc/PID/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    /// Its name (`comm`), e.g. "ksoftirqd/1".
    pub name: String,
    pub kernel_thread: bool,
    /// CPUs it may run on; `None` when its status was unreadable.
    pub allowed: Option<Vec<usize>>,
}

/// Every process under `/proc`, by pid.
pub fn scan(root: &HostRoot) -> Result<Vec<Proc>, ReadError> {
    let mut out = Vec::new();
    for pid in pids(root)? {
        let Ok(stat) = root.read(&format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((name, flags)) = parse_stat(&stat) else {
            continue;
        };
        let allowed = root.read(&format!("/proc/{pid}/status")).ok().and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).and_then(|v| parse_cpu_list(v).ok())
        });
        out.push(Proc { pid, name, kernel_thread: flags & PF_KTHREAD != 0, allowed });
    }
    Ok(out)
}

/// Numeric entries of `/proc`, ascending.
pub fn pids(root: &HostRoot) -> Result<Vec<u32>, ReadError> {
    let mut pids: Vec<u32> = root.list_dir("/proc")?.iter().filter_map(|n| n.parse().ok()).collect();
    pids.sort_unstable();
    Ok(pids)
}

/// (comm, flags) from a `/proc/PID/stat` line. The name is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    // After the name: state, ppid, process group, sid, tty, tty process group, flags ...
    let flags = stat.get(close + 1..)?.split_whitespace().nth(6)?.parse().ok()?;
    Some((name, flags))
}

/// Who holds a file open: (pid, name) of each process with a descriptor on `target`, and how many
/// processes' descriptors could not be read (other users' processes, without root).
pub fn holders(root: &HostRoot, procs: &[Proc], target: &str) -> (Vec<(u32, String)>, usize) {
    let mut found = Vec::new();
    let mut unreadable = 0;
    for p in procs {
        let dir = format!("/proc/{}/fd", p.pid);
        let fds = match root.list_dir(&dir) {
            Ok(f) => f,
            Err(e) if e.source.kind() == std::io::ErrorKind::PermissionDenied => {
                unreadable += 1;
                continue;
            }
            Err(_) => continue,
        };
        let holds = fds.iter().any(|fd| {
            root.read_link(&format!("{dir}/{fd}")).is_ok_and(|t| t.as_os_str() == std::ffi::OsStr::new(target))
        });
        if holds {
            found.push((p.pid, p.name.clone()));
        }
    }
    (found, unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_names_may_hold_spaces_and_parentheses() {
        let s = "42 (kworker/1:0-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(s), Some(("kworker/1:0-events".to_string(), 69238880)));
        assert_eq!(69238880 & PF_KTHREAD, PF_KTHREAD);
        let odd = "7 (a (b) c) S 1 7 7 0 -1 4194560 0";
        assert_eq!(parse_stat(odd), Some(("a (b) c".to_string(), 4194560)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1"), None);
    }

    #[test]
    fn live_scan_finds_this_process() {
        let me = std::process::id();
        let procs = scan(&HostRoot::system()).unwrap();
        let p = procs.iter().find(|p| p.pid == me).expect("this process is listed");
        assert!(!p.kernel_thread);
        assert!(p.allowed.as_ref().is_some_and(|a| !a.is_empty()));
    }
}
