//! A process cell makes no processes: a seccomp filter, installed in the child before it executes the
//! cell (or the trial of a C task, `cprobe`), refuses every system call that would create one.
//!
//! Why a filter rather than cleaning up afterwards: a process the cell forks can `setsid()`, escape the
//! death signal (it is not inherited across fork) and keep the cell's SCHED_FIFO priority, CPU and
//! descriptors after the run. Refusing the fork itself needs neither root nor a cgroup v2 mount, and leaves
//! nothing to find and kill, even when rtcell itself is killed with SIGKILL (the cell process then dies
//! of its death signal, and it is the only process there is).
//!
//! What is refused (and what the C code sees):
//! - `fork`, `vfork`, and `clone` without `CLONE_THREAD`: `EPERM` (so `fork()`, `system()`, `popen()`,
//!   `posix_spawn()` fail);
//! - `clone3`: `ENOSYS`, its arguments are behind a pointer the filter cannot read; glibc then falls back
//!   to `clone`, so `pthread_create` keeps working (threads die with the cell);
//! - any system call of another ABI (32-bit `int 0x80`, x32): `EPERM`.
//!
//! Filters are inherited by threads and kept across `execve`, and cannot be removed; `PR_SET_NO_NEW_PRIVS`
//! (required to install one without CAP_SYS_ADMIN) also keeps a set-user-ID program from lifting it.
//! A kernel without seccomp filters makes starting a process cell fail, never run unfiltered.

/// `AUDIT_ARCH_*` of the ABI the filter lets through.
#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xC000_00B7;

/// System calls that only make processes (besides `clone`, checked by flag, and `clone3`).
#[cfg(target_arch = "x86_64")]
const FORKS: &[libc::c_long] = &[libc::SYS_fork, libc::SYS_vfork];
#[cfg(target_arch = "aarch64")]
const FORKS: &[libc::c_long] = &[];

/// Offsets in `struct seccomp_data`: the call number, the ABI, the low half of the first argument.
const NR: u32 = 0;
const AUDIT_ARCH: u32 = 4;
const ARG0_LOW: u32 = 16;
/// x32 system calls carry this bit in their number.
const X32_BIT: u32 = 0x4000_0000;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

fn jump(op: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: (libc::BPF_JMP | op | libc::BPF_K) as u16, jt, jf, k }
}

fn load(offset: u32) -> libc::sock_filter {
    stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset)
}

fn ret(action: u32) -> libc::sock_filter {
    stmt(libc::BPF_RET | libc::BPF_K, action)
}

fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// The filter program, built before the fork (installing it must not allocate).
pub struct NoFork {
    program: Vec<libc::sock_filter>,
}

impl NoFork {
    pub fn new() -> NoFork {
        let eperm = errno(libc::EPERM);
        let mut p = vec![load(AUDIT_ARCH), jump(libc::BPF_JEQ, ARCH, 1, 0), ret(eperm), load(NR)];
        p.extend([jump(libc::BPF_JGE, X32_BIT, 0, 1), ret(eperm)]);
        for nr in FORKS {
            p.extend([jump(libc::BPF_JEQ, *nr as u32, 0, 1), ret(eperm)]);
        }
        p.extend([jump(libc::BPF_JEQ, libc::SYS_clone3 as u32, 0, 1), ret(errno(libc::ENOSYS))]);
        // clone: a thread of this process (CLONE_THREAD) is allowed, anything else refused.
        p.extend([
            jump(libc::BPF_JEQ, libc::SYS_clone as u32, 0, 3),
            load(ARG0_LOW),
            jump(libc::BPF_JSET, libc::CLONE_THREAD as u32, 1, 0),
            ret(eperm),
            ret(libc::SECCOMP_RET_ALLOW),
        ]);
        NoFork { program: p }
    }

    /// Installs the filter on the calling thread (and what it executes and creates from then on).
    /// Async-signal-safe: fit for a `pre_exec` closure.
    pub fn install(&self) -> std::io::Result<()> {
        let prog = libc::sock_fprog {
            len: self.program.len() as libc::c_ushort,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `prog` points at our program, alive for the call; the kernel copies it.
        let r = unsafe {
            libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &prog as *const libc::sock_fprog)
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Default for NoFork {
    fn default() -> Self {
        NoFork::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child (the filter stays there): threads work, no kind of fork does.
    #[test]
    fn a_filtered_process_makes_threads_but_no_process() {
        let filter = NoFork::new();
        // SAFETY: the child only runs the checks below and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                if filter.install().is_err() {
                    return 10;
                }
                if std::thread::spawn(|| 7).join().ok() != Some(7) {
                    return 11;
                }
                // SAFETY: fork/vfork-like calls that the filter refuses; nothing runs in a child.
                unsafe {
                    if libc::fork() != -1 || *libc::__errno_location() != libc::EPERM {
                        return 12;
                    }
                    if libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) != -1 {
                        return 13;
                    }
                    if libc::syscall(libc::SYS_clone3, 0, 0) != -1 || *libc::__errno_location() != libc::ENOSYS {
                        return 14;
                    }
                }
                if std::process::Command::new("true").status().is_ok() {
                    return 15;
                }
                0
            })();
            // SAFETY: leaving the forked child without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child we forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "see the return codes in the child");
    }
}
