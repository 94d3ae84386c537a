//! Real-time scheduling and memory residency for the calling thread.
//!
//! Each call here affects the calling thread only (Linux applies `sched_setscheduler(0, ..)` and
//! `sched_setattr(0, ..)` to the caller's thread), except [`lock_memory`], which covers the process.
//! [`apply_rt`] bundles the usual sequence and turns a missing privilege into a warning instead of a
//! failure: a run without SCHED_FIFO still produces figures, only worse ones, and says so.

use std::hint::black_box;
use std::io;

use crate::cpu;
use crate::error::HostError;

/// Symbolic name of an errno value, for messages people search for.
pub fn errno_name(code: i32) -> String {
    let name = match code {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::EBUSY => "EBUSY",
        libc::ENOMEM => "ENOMEM",
        libc::EAGAIN => "EAGAIN",
        libc::ESRCH => "ESRCH",
        libc::E2BIG => "E2BIG",
        libc::ENOSYS => "ENOSYS",
        libc::EFAULT => "EFAULT",
        _ => return format!("errno {code}"),
    };
    name.to_string()
}

fn io_errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => errno_name(code),
        None => format!("{:?}", e.kind()),
    }
}

/// Why the kernel refused, in the terms that decide what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Missing privilege (EPERM/EACCES): run as root or grant a capability; never fatal for a run.
    NotPermitted,
    /// Admission control or a resource limit said no (EBUSY for SCHED_DEADLINE bandwidth,
    /// ENOMEM/EAGAIN for mlock limits).
    NoCapacity,
    /// The request itself is wrong (a priority out of range, runtime > deadline, ...).
    Invalid,
    /// Anything else the kernel returned.
    Other,
}

/// A scheduling or memory-locking request the kernel refused.
#[derive(Debug, thiserror::Error)]
#[error("{op} refused ({errno}): {reason}")]
pub struct SchedError {
    /// What was asked, e.g. "SCHED_FIFO 90".
    pub op: String,
    /// Symbolic errno, e.g. "EPERM".
    pub errno: String,
    /// Likely cause, phrased for the person running the tool.
    pub reason: String,
    pub refusal: Refusal,
    #[source]
    pub source: io::Error,
}

impl SchedError {
    fn from_os(op: impl Into<String>, source: io::Error, reason: String) -> Self {
        let refusal = match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Refusal::NotPermitted,
            Some(libc::EBUSY) | Some(libc::ENOMEM) | Some(libc::EAGAIN) => Refusal::NoCapacity,
            Some(libc::EINVAL) | Some(libc::E2BIG) => Refusal::Invalid,
            _ => Refusal::Other,
        };
        SchedError { op: op.into(), errno: io_errno_name(&source), reason, refusal, source }
    }

    fn invalid(op: impl Into<String>, reason: impl Into<String>) -> Self {
        SchedError {
            op: op.into(),
            errno: "EINVAL".to_string(),
            reason: reason.into(),
            refusal: Refusal::Invalid,
            source: io::Error::from_raw_os_error(libc::EINVAL),
        }
    }

    pub fn is_not_permitted(&self) -> bool {
        self.refusal == Refusal::NotPermitted
    }
}

pub use crate::facts::is_root;

/// Capability numbers from `<linux/capability.h>` that real-time setup depends on.
pub const CAP_IPC_LOCK: u32 = 14;
pub const CAP_SYS_NICE: u32 = 23;

/// Whether the calling process holds a capability in its effective set (from `/proc/self/status`).
/// `None` when that cannot be determined.
pub fn has_capability(cap: u32) -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    capability_in_status(&status, cap)
}

/// Looks a capability up in the `CapEff:` line of a `/proc/<pid>/status` text.
pub fn capability_in_status(status: &str, cap: u32) -> Option<bool> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(cap < 64 && mask & (1u64 << cap) != 0)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
type RlimitResource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type RlimitResource = libc::c_int;

fn rlimit(resource: RlimitResource) -> Option<libc::rlim_t> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit the call fills in.
    let rc = unsafe { libc::getrlimit(resource, &mut lim) };
    (rc == 0).then_some(lim.rlim_cur)
}

fn privilege_reason(cap: u32, cap_name: &str, rlimit_note: Option<String>) -> String {
    if is_root() {
        // Root and still refused: a cgroup without real-time budget (cgroup v1 cpu.rt_runtime_us = 0,
        // common in containers) or a security module.
        return format!(
            "refused although running as root: a cgroup without real-time runtime (cpu.rt_runtime_us) \
             or a security policy forbids it; check the cgroup or run outside the container{}",
            rlimit_note.map(|n| format!(" ({n})")).unwrap_or_default()
        );
    }
    let cap_state = match has_capability(cap) {
        Some(true) => format!("{cap_name} is held but not enough"),
        Some(false) | None => format!("not root and no {cap_name}"),
    };
    match rlimit_note {
        Some(n) => format!("{cap_state}, {n}; run as root or grant {cap_name}"),
        None => format!("{cap_state}; run as root or grant {cap_name}"),
    }
}

/// Valid SCHED_FIFO priorities (1..=99 on Linux).
pub fn fifo_priority_range() -> (i32, i32) {
    // SAFETY: both calls take a policy constant and only return a value.
    let (min, max) =
        unsafe { (libc::sched_get_priority_min(libc::SCHED_FIFO), libc::sched_get_priority_max(libc::SCHED_FIFO)) };
    if min < 0 || max < 0 { (1, 99) } else { (min, max) }
}

/// Makes the calling thread SCHED_FIFO at `priority`.
pub fn set_fifo(priority: i32) -> Result<(), SchedError> {
    let op = format!("SCHED_FIFO {priority}");
    let (min, max) = fifo_priority_range();
    if priority < min || priority > max {
        return Err(SchedError::invalid(op, format!("priority must be within {min}..={max}")));
    }
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    let reason = match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            let note = rlimit(libc::RLIMIT_RTPRIO).map(|r| format!("RLIMIT_RTPRIO is {r}"));
            privilege_reason(CAP_SYS_NICE, "CAP_SYS_NICE", note)
        }
        _ => err.to_string(),
    };
    Err(SchedError::from_os(op, err, reason))
}

/// Returns the calling thread to SCHED_OTHER (normal time sharing).
pub fn set_normal() -> Result<(), SchedError> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    let reason = err.to_string();
    Err(SchedError::from_os("SCHED_OTHER", err, reason))
}

/// The current policy of the calling thread (`libc::SCHED_*`, possibly with SCHED_RESET_ON_FORK).
pub fn current_policy() -> io::Result<i32> {
    // SAFETY: pid 0 is the calling thread; the call only returns a value.
    let p = unsafe { libc::sched_getscheduler(0) };
    if p < 0 { Err(io::Error::last_os_error()) } else { Ok(p) }
}

/// `struct sched_attr` of `<linux/sched/types.h>`, first version (48 bytes); newer kernels accept
/// it because `size` says which version we speak.
#[repr(C)]
#[derive(Debug, Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

const SCHED_DEADLINE: u32 = 6;
/// The kernel rejects runtimes below 2^DL_SCALE ns.
const DL_MIN_RUNTIME_NS: u64 = 1 << 10;

/// Makes the calling thread SCHED_DEADLINE: `runtime_ns` of CPU every `period_ns`, to be finished
/// within `deadline_ns` of each period's start. `period_ns == 0` means "same as the deadline".
///
/// The kernel runs admission control (EBUSY when the bandwidth does not fit) and refuses the policy
/// for a thread whose affinity is narrower than its root domain, so a thread pinned to one CPU needs
/// an exclusive cpuset partition for that CPU first.
pub fn set_deadline(runtime_ns: u64, deadline_ns: u64, period_ns: u64) -> Result<(), SchedError> {
    let op = format!("SCHED_DEADLINE runtime {runtime_ns} ns / deadline {deadline_ns} ns / period {period_ns} ns");
    let period = if period_ns == 0 { deadline_ns } else { period_ns };
    if runtime_ns < DL_MIN_RUNTIME_NS || runtime_ns > deadline_ns || deadline_ns > period {
        return Err(SchedError::invalid(op, format!("need {DL_MIN_RUNTIME_NS} <= runtime <= deadline <= period")));
    }
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: SCHED_DEADLINE,
        sched_runtime: runtime_ns,
        sched_deadline: deadline_ns,
        sched_period: period,
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a fully initialised repr(C) sched_attr whose `size` field matches its
    // length; the kernel only reads it. pid 0 is the calling thread, flags must be 0.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0 as libc::pid_t, &attr as *const SchedAttr, 0u32) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    let reason = match err.raw_os_error() {
        Some(libc::EBUSY) => "admission control: the requested bandwidth does not fit in the \
            deadline budget (see /proc/sys/kernel/sched_rt_runtime_us and other deadline tasks)"
            .to_string(),
        Some(libc::EPERM) if is_root() => "the thread's CPU affinity is narrower than its root \
            domain; pin it through an exclusive cpuset partition (cpuset.cpus.partition=root) \
            instead of sched_setaffinity, or leave it unpinned"
            .to_string(),
        Some(libc::EPERM) | Some(libc::EACCES) => privilege_reason(CAP_SYS_NICE, "CAP_SYS_NICE", None),
        _ => err.to_string(),
    };
    Err(SchedError::from_os(op, err, reason))
}

/// Locks all current and future pages of the process in RAM (`mlockall(MCL_CURRENT | MCL_FUTURE)`),
/// so the real-time path never takes a major page fault.
///
/// Without CAP_IPC_LOCK the locked total is capped by RLIMIT_MEMLOCK, and with `MCL_FUTURE` every
/// later mapping past the cap fails (thread creation included); [`apply_rt`] therefore skips
/// locking in that situation (see [`memlock_cap`]).
pub fn lock_memory() -> Result<(), SchedError> {
    // SAFETY: mlockall takes only flags.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    let reason = match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::ENOMEM) | Some(libc::EAGAIN) => {
            let note = rlimit(libc::RLIMIT_MEMLOCK).map(|r| {
                if r == libc::RLIM_INFINITY {
                    "RLIMIT_MEMLOCK is unlimited".to_string()
                } else {
                    format!("RLIMIT_MEMLOCK is {} KiB", r / 1024)
                }
            });
            let base = privilege_reason(CAP_IPC_LOCK, "CAP_IPC_LOCK", note);
            format!("{base}, or raise RLIMIT_MEMLOCK (ulimit -l unlimited)")
        }
        _ => err.to_string(),
    };
    Err(SchedError::from_os("mlockall", err, reason))
}

/// RLIMIT_MEMLOCK in bytes when it caps this process's locked memory: not root, no CAP_IPC_LOCK,
/// and a finite limit. `None` when locking is unbounded.
pub fn memlock_cap() -> Option<u64> {
    if is_root() || has_capability(CAP_IPC_LOCK) == Some(true) {
        return None;
    }
    match rlimit(libc::RLIMIT_MEMLOCK) {
        // rlim_t is narrower than u64 on some 32-bit targets.
        #[allow(clippy::unnecessary_cast)]
        Some(r) if r != libc::RLIM_INFINITY => Some(r as u64),
        _ => None,
    }
}

/// Undoes [`lock_memory`].
pub fn unlock_memory() -> io::Result<()> {
    // SAFETY: munlockall has no arguments.
    let rc = unsafe { libc::munlockall() };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Stack kept free below the prefaulted region, so prefaulting can never reach the guard page.
const STACK_MARGIN: usize = 64 * 1024;
const STACK_CHUNK: usize = 4096;
/// Upper bound of per-frame overhead beyond the chunk itself (return address, saved registers).
const FRAME_OVERHEAD: usize = 256;

/// Makes `bytes` of the calling thread's stack resident by writing to it, so the first deep call
/// on the real-time path does not page-fault. Clamped to the room the thread's stack actually has
/// (minus a safety margin); returns the number of bytes touched.
pub fn prefault_stack(bytes: usize) -> usize {
    let usable = match stack_headroom() {
        Some(room) => {
            let room = room.saturating_sub(STACK_MARGIN);
            let max_chunks = room / (STACK_CHUNK + FRAME_OVERHEAD);
            bytes.min(max_chunks * STACK_CHUNK)
        }
        // Unknown stack bounds: stay modest rather than risk the guard page.
        None => bytes.min(64 * 1024),
    };
    let chunks = usable.div_ceil(STACK_CHUNK);
    if chunks > 0 {
        touch_stack(chunks);
    }
    chunks * STACK_CHUNK
}

/// One frame with a chunk of zeroed stack per level of recursion. The chunk is passed to
/// `black_box` before and after the recursive call, so it must exist in memory, is written, and
/// the frame cannot be reused by a tail call.
#[inline(never)]
fn touch_stack(chunks: usize) {
    let mut chunk = [0u8; STACK_CHUNK];
    black_box(&mut chunk);
    if chunks > 1 {
        touch_stack(chunks - 1);
    }
    black_box(&chunk);
}

/// Bytes of stack between the current stack pointer and the lowest address of this thread's stack.
fn stack_headroom() -> Option<usize> {
    let marker = 0u8;
    let sp = black_box(&marker) as *const u8 as usize;
    // SAFETY: an all-zero pthread_attr_t is a valid destination for pthread_getattr_np, which
    // initialises it; it is destroyed below on success and not used after a failure.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: pthread_self() is the calling thread and `attr` is writable.
    let rc = unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) };
    if rc != 0 {
        return None;
    }
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: `attr` was initialised by pthread_getattr_np; `addr` and `size` are writable.
    let rc = unsafe { libc::pthread_attr_getstack(&attr, &mut addr, &mut size) };
    // SAFETY: `attr` was initialised above and is not used after this.
    unsafe { libc::pthread_attr_destroy(&mut attr) };
    if rc != 0 {
        return None;
    }
    let low = addr as usize;
    (sp > low && sp - low <= size).then(|| sp - low)
}

/// Sets the calling thread's timer slack (`prctl(PR_SET_TIMERSLACK)`), the time the kernel may
/// delay its timer expiries to batch wake-ups. 0 would mean "back to the default", so 1 ns is the
/// tightest. (SCHED_FIFO threads get zero slack anyway; this helps non-RT sleepers.)
pub fn set_timer_slack_ns(ns: u64) -> Result<(), SchedError> {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long argument; the rest are ignored.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    let reason = err.to_string();
    Err(SchedError::from_os(format!("timer slack {ns} ns"), err, reason))
}

/// What [`apply_rt`] should set up for the calling thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RtRequest {
    /// Pin to this CPU; an absent or offline CPU is a hard error.
    pub cpu: Option<usize>,
    /// Run SCHED_FIFO at this priority (1..=99); refusal is a warning.
    pub fifo_priority: Option<i32>,
    /// mlockall and prefault the stack; refusal is a warning.
    pub lock_memory: bool,
}

/// Stack prefaulted by [`apply_rt`] when memory locking is requested.
pub const RT_STACK_PREFAULT: usize = 256 * 1024;

/// Applies `req` to the calling thread, in the order pin → lock memory → prefault stack → timer
/// slack → SCHED_FIFO (so the page-faulting work is done before the thread can monopolise its CPU).
///
/// Returns one human-readable warning per guarantee that could not be obtained. Errors only for
/// requests that cannot be right on any machine: a CPU that does not exist or is offline, or a
/// priority out of range.
pub fn apply_rt(req: &RtRequest) -> Result<Vec<String>, HostError> {
    let mut warnings = Vec::new();
    if let Some(p) = req.fifo_priority {
        let (min, max) = fifo_priority_range();
        if p < min || p > max {
            return Err(HostError::InvalidPriority { priority: p, min, max });
        }
    }
    if let Some(c) = req.cpu {
        match cpu::online_cpus() {
            Ok(online) if !online.contains(&c) => {
                return Err(HostError::NoSuchCpu { cpu: c, online: cpu::format_cpu_list(&online) });
            }
            _ => {}
        }
        if let Err(e) = cpu::pin_current_thread(c) {
            return Err(if e.raw_os_error() == Some(libc::EINVAL) {
                HostError::NoSuchCpu {
                    cpu: c,
                    online: cpu::online_cpus()
                        .map(|o| cpu::format_cpu_list(&o))
                        .unwrap_or_else(|_| "unknown".to_string()),
                }
            } else {
                HostError::Pin { cpus: c.to_string(), source: e }
            });
        }
    }
    let where_ = match req.cpu.or_else(cpu::current_cpu) {
        Some(c) => format!(" on CPU {c}"),
        None => String::new(),
    };
    if req.lock_memory {
        if let Some(cap) = memlock_cap() {
            warnings.push(format!(
                "mlockall skipped{where_}: not root and no CAP_IPC_LOCK, so RLIMIT_MEMLOCK ({} KiB) \
                 would make every allocation past it fail; run as root, grant CAP_IPC_LOCK or raise \
                 RLIMIT_MEMLOCK (ulimit -l unlimited); page faults may add latency spikes",
                cap / 1024
            ));
        } else if let Err(e) = lock_memory() {
            warnings.push(format!(
                "{} refused{where_} ({}): {}; page faults may add latency spikes",
                e.op, e.errno, e.reason
            ));
        }
        prefault_stack(RT_STACK_PREFAULT);
    }
    if let Err(e) = set_timer_slack_ns(1) {
        warnings.push(format!("{}; timer wake-ups may be late by up to 50 us", e));
    }
    if let Some(p) = req.fifo_priority {
        if let Err(e) = set_fifo(p) {
            warnings.push(format!(
                "{} refused{where_} ({}): {}; timing figures will include preemption by normal tasks",
                e.op, e.errno, e.reason
            ));
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_lookup_reads_cap_eff() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t0000000000800000\n";
        assert_eq!(capability_in_status(status, CAP_SYS_NICE), Some(true));
        assert_eq!(capability_in_status(status, CAP_IPC_LOCK), Some(false));
        assert_eq!(capability_in_status("Name:\tx\n", CAP_SYS_NICE), None);
    }

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(libc::EPERM), "EPERM");
        assert_eq!(errno_name(9999), "errno 9999");
    }

    #[test]
    fn fifo_rejects_out_of_range_priorities() {
        let e = set_fifo(0).unwrap_err();
        assert_eq!(e.refusal, Refusal::Invalid);
        assert!(set_fifo(1000).is_err());
    }

    #[test]
    fn fifo_then_normal_on_a_scratch_thread() {
        std::thread::spawn(|| match set_fifo(10) {
            Ok(()) => {
                assert_eq!(current_policy().unwrap() & !libc::SCHED_RESET_ON_FORK, libc::SCHED_FIFO);
                set_normal().unwrap();
                assert_eq!(current_policy().unwrap(), libc::SCHED_OTHER);
            }
            Err(e) => {
                assert!(!is_root() || e.refusal == Refusal::NotPermitted, "{e}");
                assert!(e.to_string().contains("SCHED_FIFO 10 refused"), "{e}");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn deadline_validates_and_reverts() {
        assert_eq!(set_deadline(10, 1_000_000, 0).unwrap_err().refusal, Refusal::Invalid);
        assert_eq!(set_deadline(2_000_000, 1_000_000, 0).unwrap_err().refusal, Refusal::Invalid);
        assert_eq!(set_deadline(100_000, 2_000_000, 1_000_000).unwrap_err().refusal, Refusal::Invalid);
        std::thread::spawn(|| match set_deadline(100_000, 10_000_000, 10_000_000) {
            Ok(()) => {
                assert_eq!(current_policy().unwrap() & !libc::SCHED_RESET_ON_FORK, SCHED_DEADLINE as i32);
                set_normal().unwrap();
            }
            // Refusal depends on the machine (privilege, admission control); the message must say why.
            Err(e) => assert!(!e.reason.is_empty()),
        })
        .join()
        .unwrap();
    }

    #[test]
    fn timer_slack_and_stack_prefault() {
        std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(|| {
                set_timer_slack_ns(1).unwrap();
                // SAFETY: PR_GET_TIMERSLACK takes no further arguments and returns the value.
                let slack = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
                assert_eq!(slack, 1);
                let touched = prefault_stack(128 * 1024);
                assert_eq!(touched, 128 * 1024);
                // More than the thread has: clamped to its stack (which the C library may have
                // given more room than asked for by reusing a cached stack), not a crash.
                let room = stack_headroom().unwrap();
                let touched = prefault_stack(64 << 20);
                assert!(touched > 0 && touched < room, "{touched} of {room}");
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn lock_memory_then_unlock() {
        match lock_memory() {
            Ok(()) => unlock_memory().unwrap(),
            Err(e) => assert!(!is_root() || e.refusal != Refusal::NotPermitted, "{e}"),
        }
    }

    #[test]
    fn apply_rt_hard_errors_and_warnings() {
        std::thread::spawn(|| {
            let missing = RtRequest { cpu: Some(cpu::MAX_CPU), ..RtRequest::default() };
            assert!(matches!(apply_rt(&missing), Err(HostError::NoSuchCpu { .. })));
            let bad_prio = RtRequest { fifo_priority: Some(0), ..RtRequest::default() };
            assert!(matches!(apply_rt(&bad_prio), Err(HostError::InvalidPriority { .. })));

            let online = cpu::online_cpus().unwrap();
            let last = *online.last().unwrap();
            let req = RtRequest { cpu: Some(last), fifo_priority: Some(5), lock_memory: false };
            let warnings = apply_rt(&req).unwrap();
            assert_eq!(cpu::current_cpu(), Some(last));
            // Whether SCHED_FIFO is granted depends on the machine; a refusal must be explained.
            for w in &warnings {
                assert!(w.contains("refused"), "{w}");
            }
            let _ = set_normal();
        })
        .join()
        .unwrap();
    }
}
