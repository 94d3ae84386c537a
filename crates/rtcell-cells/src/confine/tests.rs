use super::*;

/// In a forked child (the filter stays there): threads work, no kind of fork does.
#[test]
fn a_filtered_process_makes_threads_but_no_process() {
    let filter = Filter::no_fork();
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

/// In a forked child: after the lockdown, no exec, no change of the death signal, no ptrace, no
/// namespace or mount, no limit set on another process; other prctl options and its own limits still
/// work.
#[test]
fn a_locked_down_process_cannot_exec_or_drop_its_death_signal() {
    let filter = Filter::lockdown();
    let path = std::ffi::CString::new("/bin/true").unwrap();
    let argv = [path.as_ptr(), std::ptr::null()];
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: the child only runs the checks below and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: prctl, execv and ptrace with valid arguments; execv never returns on success.
        let code = unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || filter.install().is_err() {
                20
            } else if libc::prctl(libc::PR_SET_PDEATHSIG, 0) != -1 || *libc::__errno_location() != libc::EPERM {
                21
            } else if libc::execv(path.as_ptr(), argv.as_ptr()) != -1 || *libc::__errno_location() != libc::EPERM {
                22
            } else if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != -1 {
                23
            } else if libc::syscall(libc::SYS_setfsuid, 65534) != -1 || libc::setresuid(0, 0, 0) != -1 {
                25
            } else if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != -1
                || *libc::__errno_location() != libc::EPERM
            {
                26
            } else if libc::syscall(libc::SYS_fsopen, c"fuse".as_ptr(), 0) != -1
                || libc::mount(c"none".as_ptr(), c"/tmp".as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) != -1
            {
                27
            } else if libc::prlimit(libc::getppid(), libc::RLIMIT_FSIZE, std::ptr::null(), &mut limit) != -1
                || *libc::__errno_location() != libc::EPERM
            {
                28
            } else if libc::setrlimit(libc::RLIMIT_CORE, &limit) != 0
                || libc::prlimit(0, libc::RLIMIT_FSIZE, std::ptr::null(), &mut limit) != 0
            {
                29
            } else if libc::prctl(libc::PR_SET_DUMPABLE, 1) != -1
                || libc::ioctl(0, libc::TIOCSTI, c"x".as_ptr()) != -1
                || *libc::__errno_location() != libc::EPERM
            {
                30
            } else {
                let mut sig = 0;
                if libc::prctl(libc::PR_GET_PDEATHSIG, &mut sig as *mut i32) != 0 || sig != libc::SIGKILL {
                    24
                } else {
                    0
                }
            }
        };
        // SAFETY: leaving the forked child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child we forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "see the return codes in the child");
}

/// In a forked child: after the lockdown and [`Filter::no_new_code`], nothing becomes executable and
/// nothing measures the harness's time falsely; data mappings, `mprotect` without `PROT_EXEC` and an
/// `mremap` that lets the kernel choose still work.
#[test]
fn a_sealed_process_makes_nothing_executable_and_traps_no_clock() {
    let (lockdown, sealed) = (Filter::lockdown(), Filter::no_new_code());
    // SAFETY: the child only runs the checks below and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: system calls on memory the child maps itself; nothing here is dereferenced.
        let code = unsafe { sealed_checks(&lockdown, &sealed) };
        // SAFETY: leaving the forked child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child we forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "see the return codes in `sealed_checks`");
}

/// Whether the last call failed with `EPERM`.
fn eperm() -> bool {
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The checks of [`a_sealed_process_makes_nothing_executable_and_traps_no_clock`], in the child: 0
/// when all hold.
///
/// # Safety
/// Only in a forked child, which it confines for good.
unsafe fn sealed_checks(lockdown: &Filter, sealed: &Filter) -> i32 {
    // SAFETY: the caller's contract; every call below is on memory the child maps itself or has
    // integer arguments only.
    unsafe {
        if lockdown.install().is_err() || sealed.install_on_all_threads().is_err() {
            return 40;
        }
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let page = libc::mmap(std::ptr::null_mut(), 8192, rw, anon, -1, 0);
        if page == libc::MAP_FAILED {
            return 41;
        }
        if libc::mprotect(page, 4096, rw | libc::PROT_EXEC) != -1 || !eperm() {
            return 42;
        }
        if libc::mprotect(page, 4096, libc::PROT_READ) != 0 {
            return 43;
        }
        if libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_EXEC, anon, -1, 0) != libc::MAP_FAILED
            || !eperm()
        {
            return 44;
        }
        if libc::syscall(libc::SYS_pkey_mprotect, page, 4096, libc::PROT_EXEC, -1) != -1 || !eperm() {
            return 45;
        }
        let target = (page as *mut u8).add(4096) as *mut libc::c_void;
        let fixed = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
        if libc::mremap(page, 4096, 4096, fixed, target) != libc::MAP_FAILED || !eperm() {
            return 46;
        }
        if libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV) != -1 || !eperm() {
            return 47;
        }
        // 0x0400000: READ_IMPLIES_EXEC.
        if libc::personality(0x040_0000) != -1 || !eperm() {
            return 60;
        }
        if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_STRICT) != -1 || !eperm() {
            return 48;
        }
        if libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_STRICT, 0, 0) != -1 || !eperm() {
            return 49;
        }
        let mut params = [0u8; 120];
        if libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) != -1 || !eperm() {
            return 50;
        }
        if libc::shmat(-1, std::ptr::null(), libc::SHM_EXEC) as isize != -1 || !eperm() {
            return 51;
        }
        // Still allowed: its own limits, reading the timestamp mode, a move the kernel places.
        let mut mode = 0;
        if libc::prctl(libc::PR_GET_TSC, &mut mode as *mut i32) != 0 || mode != libc::PR_TSC_ENABLE {
            return 52;
        }
        if libc::mremap(page, 4096, 8192, libc::MREMAP_MAYMOVE, 0) == libc::MAP_FAILED {
            return 53;
        }
        0
    }
}
