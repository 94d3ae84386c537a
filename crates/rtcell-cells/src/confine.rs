//! What a process cell may not do, enforced by the kernel: three seccomp filters and a smaller capability
//! bounding set, and rtcell itself made non-dumpable.
//!
//! 1. **No process of its own** ([`Filter::no_fork`], installed in the child before it executes the cell, or the
//!    trial of a C task, `cprobe`): a process the cell forked could `setsid()`, escape the death signal
//!    (it is not inherited across fork) and keep the cell's SCHED_FIFO priority, CPU and descriptors after
//!    the run. Refused: `fork`, `vfork`, and `clone` without `CLONE_THREAD` (`EPERM`, so `fork()`,
//!    `system()`, `popen()`, `posix_spawn()` fail); `clone3` (`ENOSYS`: its flags are behind a pointer the
//!    filter cannot read; glibc then falls back to `clone`, so `pthread_create` keeps working); any system
//!    call of another ABI (32-bit `int 0x80`, x32: `EPERM`).
//! 2. **No way out of its death signal or into another process** ([`Filter::lockdown`], installed by the cell
//!    process itself once it runs, before any user code is loaded): `execve` and `execveat` (an exec from
//!    a thread other than the main one drops the death signal, which belongs to the main thread),
//!    `prctl(PR_SET_PDEATHSIG, ...)` and every change of user, group or capabilities (`set*id`,
//!    `setfs*id`, `setgroups`, `capset`: the kernel clears the death signal when the effective or
//!    file-system ids change), `ptrace`, `process_vm_readv`, `process_vm_writev`, `perf_event_open` and
//!    `bpf` (which would let it read or act inside rtcell), namespaces and mounts (`unshare`, `setns`,
//!    `mount`, `umount2`, `pivot_root` and the new mount API: in a user namespace of its own a cell
//!    mounted a FUSE file system it served itself and then blocked in the kernel beyond SIGKILL's reach),
//!    `userfaultfd`, and `prlimit64` on any process but itself are `EPERM`.
//!    Also refused (`EPERM`), because they let a cell make its harness measure false times (a cell
//!    patched the vDSO's `clock_gettime` and trapped the harness's `rdtsc`, hiding 40 overruns and a
//!    watchdog trip): `prctl(PR_SET_TSC, ...)` (makes `rdtsc` trap to a signal handler of the cell, which
//!    then chooses the harness's execution times); `prctl(PR_SET_SECCOMP, ...)` (a filter of its own
//!    with `SECCOMP_RET_TRAP` would let a signal handler of the cell answer the system calls the harness
//!    makes; the `seccomp` call itself is refused by filter 3); `io_uring_setup`, `io_uring_enter` and
//!    `io_uring_register` (the calls an io_uring carries out are not seen by seccomp filters);
//!    `mremap` with `MREMAP_FIXED` (would move a page of the cell's code over the harness's code or
//!    the vDSO); `shmat` with `SHM_EXEC` (a new executable mapping).
//! 3. **No new code once the C libraries are loaded** ([`Filter::no_new_code`], installed by the cell
//!    process once it has loaded every C library its tasks name, before any task thread starts, any
//!    init or step runs): `mmap`, `mprotect` and `pkey_mprotect` with `PROT_EXEC` in their protection,
//!    and `seccomp` (no filter of its own, see above). Nothing may become executable: no patched vDSO or
//!    harness code made executable again, no code of the cell's own mapped where the harness runs. The
//!    harness needs no executable mapping after that point (thread stacks are not executable; the
//!    libraries stay loaded, `RTLD_NODELETE`, so the task threads' own `dlopen` of the same file only
//!    finds them). Constructors of the libraries run before it, under filter 2 only; before installing
//!    it (on every thread) the cell checks that they added no filter of their own and wrote over no code
//!    ([`patched_code`]: a private page in an executable mapping), and it checks the code again at the
//!    end of the run.
//!    Not refused: opening files for writing. `/proc/self/mem` can write over read-only and executable
//!    pages of the cell's own process, but the path is behind a pointer a filter cannot read, and C
//!    tasks legitimately write files (logs, notes), so a refusal of every write-open would break them:
//!    this stays a stated limit (see the README).
//! 4. **No way into rtcell's memory through /proc**: the capabilities in [`DROPPED_CAPS`] (`CAP_SYS_PTRACE`
//!    among them) leave the bounding set of the cell before it executes, and rtcell makes itself
//!    non-dumpable ([`protect_parent`]), so `/proc/<rtcell>/mem` and its descriptors need a capability the
//!    cell no longer has.
//!
//! Filters are inherited by threads and kept across `execve`, and cannot be removed; `PR_SET_NO_NEW_PRIVS`
//! (required to install one without CAP_SYS_ADMIN) also keeps a set-user-ID program from lifting them.
//! A kernel without seccomp filters makes starting a process cell fail, never run unfiltered.
//! Arguments: `struct seccomp_data` holds each argument as a 64-bit word, at 16 + 8 * i; on a
//! little-endian machine (x86_64, aarch64) its low 32 bits are at that offset (the `ARG*_LOW`
//! constants). Every argument checked here (a `prctl` option, `prot`, `flags`, `shmflg`, a pid) is a C
//! `int` or its bits are all in the low half, so the filters look at the low half alone.
//! What stays: a cell runs as rtcell's user, with that user's files and signals (see the README).
//! Why hand-written BPF rather than a crate (seccompiler): the programs are a few dozen instructions, need
//! two different errnos in one filter, and must be installed between fork and exec without allocating.

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

/// Offsets in `struct seccomp_data`: the call number, the ABI, the low halves of the first four
/// arguments (argument i is a 64-bit word at 16 + 8 * i; little-endian: its low half comes first).
const NR: u32 = 0;
const AUDIT_ARCH: u32 = 4;
const ARG0_LOW: u32 = 16;
/// `READ_IMPLIES_EXEC` of `<linux/personality.h>` (not in the libc crate).
const READ_IMPLIES_EXEC: u32 = 0x040_0000;
const ARG1_LOW: u32 = 24;
const ARG2_LOW: u32 = 32;
const ARG3_LOW: u32 = 40;
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

/// The start of every program: a call of another ABI is refused, and the call number is loaded.
fn prologue() -> Vec<libc::sock_filter> {
    let eperm = errno(libc::EPERM);
    vec![
        load(AUDIT_ARCH),
        jump(libc::BPF_JEQ, ARCH, 1, 0),
        ret(eperm),
        load(NR),
        jump(libc::BPF_JGE, X32_BIT, 0, 1),
        ret(eperm),
    ]
}

/// Refuses call `nr` with `e` (the call number loaded).
fn refuse(nr: libc::c_long, e: i32) -> [libc::sock_filter; 2] {
    [jump(libc::BPF_JEQ, nr as u32, 0, 1), ret(errno(e))]
}

/// Refuses call `nr` (the call number loaded) with `EPERM` when the low half of its first argument is
/// `value` (`refuse_equal`) or is not `value` (`!refuse_equal`); anything else goes on to the next check
/// with the call number loaded again (so several checks of one call can follow each other).
fn on_arg0(nr: libc::c_long, value: u32, refuse_equal: bool) -> [libc::sock_filter; 5] {
    on_arg(nr, ARG0_LOW, value, refuse_equal)
}

/// [`on_arg0`] for the argument at `offset` in `struct seccomp_data`.
fn on_arg(nr: libc::c_long, offset: u32, value: u32, refuse_equal: bool) -> [libc::sock_filter; 5] {
    let (jt, jf) = if refuse_equal { (0, 1) } else { (1, 0) };
    [
        jump(libc::BPF_JEQ, nr as u32, 0, 3),
        load(offset),
        jump(libc::BPF_JEQ, value, jt, jf),
        ret(errno(libc::EPERM)),
        load(NR),
    ]
}

/// Refuses call `nr` (the call number loaded) with `EPERM` when the low half of the argument at `offset`
/// has any bit of `mask` set; anything else goes on with the call number loaded again.
fn on_arg_bits(nr: libc::c_long, offset: u32, mask: u32) -> [libc::sock_filter; 5] {
    [
        jump(libc::BPF_JEQ, nr as u32, 0, 3),
        load(offset),
        jump(libc::BPF_JSET, mask, 0, 1),
        ret(errno(libc::EPERM)),
        load(NR),
    ]
}

/// A filter program, built before the fork (installing it must not allocate).
pub struct Filter {
    program: Vec<libc::sock_filter>,
}

impl Filter {
    /// Filter 1: no process of its own (see the module's documentation).
    pub fn no_fork() -> Filter {
        let mut p = prologue();
        for nr in FORKS {
            p.extend(refuse(*nr, libc::EPERM));
        }
        p.extend(refuse(libc::SYS_clone3, libc::ENOSYS));
        // clone: a thread of this process (CLONE_THREAD) is allowed, anything else refused.
        p.extend([
            jump(libc::BPF_JEQ, libc::SYS_clone as u32, 0, 3),
            load(ARG0_LOW),
            jump(libc::BPF_JSET, libc::CLONE_THREAD as u32, 1, 0),
            ret(errno(libc::EPERM)),
            ret(libc::SECCOMP_RET_ALLOW),
        ]);
        Filter { program: p }
    }

    /// Filter 2: no exec, no change of the death signal, no reach into another process.
    pub fn lockdown() -> Filter {
        let mut p = prologue();
        for nr in [
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            // A change of (effective or file-system) user or group clears the death signal.
            libc::SYS_setuid,
            libc::SYS_setgid,
            libc::SYS_setreuid,
            libc::SYS_setregid,
            libc::SYS_setresuid,
            libc::SYS_setresgid,
            libc::SYS_setfsuid,
            libc::SYS_setfsgid,
            libc::SYS_setgroups,
            libc::SYS_capset,
            // Reading other processes' memory by sampling or probes.
            libc::SYS_perf_event_open,
            libc::SYS_bpf,
            // A namespace of its own (a user namespace gives it every capability there) and mounts: a
            // FUSE file system served by the cell itself left it in an uninterruptible sleep that
            // SIGKILL does not end.
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_open_tree,
            libc::SYS_move_mount,
            libc::SYS_fsopen,
            libc::SYS_fsconfig,
            libc::SYS_fsmount,
            libc::SYS_fspick,
            libc::SYS_mount_setattr,
            // Page faults served by the cell itself.
            libc::SYS_userfaultfd,
            // System calls carried out by the kernel from a ring, unseen by seccomp.
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ] {
            p.extend(refuse(nr, libc::EPERM));
        }
        // prctl: PR_SET_PDEATHSIG refused (the option is an int: the low half of the argument).
        p.extend(on_arg0(libc::SYS_prctl, libc::PR_SET_PDEATHSIG as u32, true));
        // prctl: PR_SET_DUMPABLE refused (made non-dumpable by `lock_down`: a dump of a root cell would run
        // the core_pattern helper, which it can set, as a process outside its run).
        p.extend(on_arg0(libc::SYS_prctl, libc::PR_SET_DUMPABLE as u32, true));
        // prctl: PR_SET_TSC refused (rdtsc trapped to the cell's handler: false execution times), and
        // PR_SET_SECCOMP (a filter of its own that traps the harness's system calls).
        p.extend(on_arg0(libc::SYS_prctl, libc::PR_SET_TSC as u32, true));
        p.extend(on_arg0(libc::SYS_prctl, libc::PR_SET_SECCOMP as u32, true));
        // mremap with MREMAP_FIXED (flags, the fourth argument): a page moved over the harness's code.
        p.extend(on_arg_bits(libc::SYS_mremap, ARG3_LOW, libc::MREMAP_FIXED as u32));
        // personality with READ_IMPLIES_EXEC (the persona, the first argument): the kernel would then make
        // every readable mapping executable, behind a PROT_EXEC check.
        p.extend(on_arg_bits(libc::SYS_personality, ARG0_LOW, READ_IMPLIES_EXEC));
        // shmat with SHM_EXEC (shmflg, the third argument): a new executable mapping.
        p.extend(on_arg_bits(libc::SYS_shmat, ARG2_LOW, libc::SHM_EXEC as u32));
        // ioctl: typing into a terminal (TIOCSTI) or the console (TIOCLINUX): a cell that reached rtcell's
        // terminal typed a command line the shell ran after the run.
        p.extend(on_arg(libc::SYS_ioctl, ARG1_LOW, libc::TIOCSTI as u32, true));
        p.extend(on_arg(libc::SYS_ioctl, ARG1_LOW, libc::TIOCLINUX as u32, true));
        // prlimit64 on another process (rtcell: a 4 KiB RLIMIT_FSIZE killed it with SIGXFSZ while it wrote
        // the results); pid 0, the caller itself, is what glibc's setrlimit passes.
        p.extend(on_arg0(libc::SYS_prlimit64, 0, false));
        p.push(ret(libc::SECCOMP_RET_ALLOW));
        Filter { program: p }
    }

    /// Filter 3: nothing becomes executable any more, and no filter of the cell's own.
    pub fn no_new_code() -> Filter {
        let mut p = prologue();
        p.extend(refuse(libc::SYS_seccomp, libc::EPERM));
        // prot is the third argument of all three.
        for nr in [libc::SYS_mmap, libc::SYS_mprotect, libc::SYS_pkey_mprotect] {
            p.extend(on_arg_bits(nr, ARG2_LOW, libc::PROT_EXEC as u32));
        }
        p.push(ret(libc::SECCOMP_RET_ALLOW));
        Filter { program: p }
    }

    /// Installs the filter on the calling thread (and what it executes and creates from then on).
    /// Async-signal-safe: fit for a `pre_exec` closure.
    pub fn install(&self) -> std::io::Result<()> {
        self.install_with(0)
    }

    /// Installs the filter on every thread of the process (`SECCOMP_FILTER_FLAG_TSYNC`): a thread a
    /// library's constructor left running gets it too, and one with a filter of its own makes it fail.
    pub fn install_on_all_threads(&self) -> std::io::Result<()> {
        self.install_with(libc::SECCOMP_FILTER_FLAG_TSYNC)
    }

    fn install_with(&self, flags: libc::c_ulong) -> std::io::Result<()> {
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
            libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, flags, &prog as *const libc::sock_fprog)
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if r > 0 {
            // TSYNC: thread `r` has a filter that is not one of ours.
            return Err(std::io::Error::other(format!("thread {r} has a seccomp filter of its own")));
        }
        Ok(())
    }
}

/// What a cell process (or a C task's trial) does to itself once it runs, before any user code is
/// loaded: made non-dumpable (no core dump, so no core_pattern helper run on its behalf), then
/// [`Filter::lockdown`].
pub fn lock_down() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Filter::lockdown().install()
}

/// The number of seccomp filters on the calling thread (`Seccomp_filters` in its status), if the kernel
/// says.
pub fn filter_count() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Seccomp_filters:"))?;
    line.trim().parse().ok()
}

/// Executable code that is not what was mapped from its file: a mapping of this process that is
/// executable and has a page of its own (`Anonymous` in `/proc/self/smaps`: code or vDSO written over after
/// `mprotect` or through `/proc/self/mem`, or a library with text relocations), is shared (`s`: writable
/// through another mapping of the same memory), or is backed by a memfd or a deleted file (code that can
/// change under it); or no `[vdso]` left (mapped over). `Ok(None)`: none of these.
pub fn patched_code() -> std::io::Result<Option<String>> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut exec: Option<&str> = None;
    let mut vdso = false;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        if first.contains('-') && !first.ends_with(':') {
            let perms = words.next().unwrap_or_default();
            vdso |= line.ends_with("[vdso]");
            exec = perms.contains('x').then_some(line);
            let backing = line.split_whitespace().nth(5).unwrap_or_default();
            if perms.contains('x')
                && (perms.contains('s') || backing.starts_with("/memfd:") || line.ends_with("(deleted)"))
            {
                return Ok(Some(line.to_string()));
            }
        } else if let (Some(mapping), "Anonymous:") = (exec, first) {
            if words.next().is_some_and(|kb| kb != "0") {
                return Ok(Some(mapping.to_string()));
            }
        }
    }
    if !vdso {
        return Ok(Some("no [vdso] mapping left (mapped over)".into()));
    }
    Ok(None)
}

/// What a process cell does once it loaded its C libraries (`filters`: [`filter_count`] before them),
/// before any of their code runs in a task: checks that their constructors added no filter of their own
/// and wrote over no code, then installs [`Filter::no_new_code`] on every thread.
pub fn seal_code(filters: Option<u64>) -> Result<(), String> {
    if filter_count() != filters {
        return Err("a C library's constructor installed a seccomp filter of its own".into());
    }
    match patched_code() {
        Ok(None) => {}
        Ok(Some(m)) if m.split_whitespace().nth(1).is_some_and(|perms| perms.starts_with("rwx")) => {
            return Err(format!(
                "memory both writable and executable after the C libraries loaded (a library that needs an \
                 executable stack: its GNU_STACK segment is RWX, e.g. a nested function whose address is taken), \
                 which a process cell refuses: {m}; build it with -z noexecstack, or run it in a thread cell"
            ));
        }
        Ok(Some(m)) => return Err(format!("code was written over while the C libraries loaded: {m}")),
        Err(e) => return Err(format!("cannot read the cell's mappings: {e}")),
    }
    Filter::no_new_code().install_on_all_threads().map_err(|e| format!("cannot confine the cell (seccomp): {e}"))
}

/// Capabilities a process cell never has (dropped from its bounding set before it executes): tracing
/// and reading other processes, administration (mounts, namespaces, and a stand-in for BPF and perf),
/// kernel modules, raw I/O, reboot, BPF, perf, security modules.
pub const DROPPED_CAPS: &[u32] = &[
    19, // CAP_SYS_PTRACE
    21, // CAP_SYS_ADMIN (also stands in for CAP_BPF and CAP_PERFMON)
    16, // CAP_SYS_MODULE
    17, // CAP_SYS_RAWIO
    22, // CAP_SYS_BOOT
    32, // CAP_MAC_OVERRIDE
    33, // CAP_MAC_ADMIN
    38, // CAP_PERFMON
    39, // CAP_BPF
];

/// Drops [`DROPPED_CAPS`] from the calling thread's bounding set. Async-signal-safe (a `pre_exec`
/// closure). A capability this kernel does not know (`EINVAL`) is not there to drop; without
/// `CAP_SETPCAP` (`EPERM`, rtcell not root) the cell gets no capabilities from exec anyway.
pub fn drop_capabilities() -> std::io::Result<()> {
    for &cap in DROPPED_CAPS {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let e = std::io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EPERM)) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Makes this process (rtcell) non-dumpable, so that a process cell without `CAP_SYS_PTRACE` cannot
/// open its `/proc/<pid>/mem`, descriptors or maps, even as the same user. Done once, before the first
/// process cell starts; an exec (a cell's) makes the new program dumpable again.
pub fn protect_parent() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
