//! Shared memory that backs a region: an anonymous memfd (handed to a child process or a VM by file
//! descriptor, gone when the last user exits) or a named file in /dev/shm (for peers started separately,
//! with detection of stale regions left by a killed run).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::string::{String, ToString};

use crate::region::RegionView;
use crate::sync::AtomicU64;

/// Directory of named regions.
pub const SHM_DIR: &str = "/dev/shm";
/// File-name prefix of named regions.
pub const NAME_PREFIX: &str = "rtcell.";

/// A shared mapping of `len` bytes, 4 KiB-aligned, zero-filled when created.
pub struct SharedMemory {
    ptr: *mut u8,
    len: usize,
    fd: OwnedFd,
    /// Path to unlink on drop (named regions we created).
    unlink: Option<String>,
    /// Set when the file can shrink under the mapping (not a sealed memfd): see [`crate::truncation`].
    guard: Option<crate::truncation::Guard>,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics; the pointer stays valid
// until drop, wherever the owner moves.
unsafe impl Send for SharedMemory {}
// SAFETY: all access goes through `&[AtomicU64]`, which is Sync.
unsafe impl Sync for SharedMemory {}

fn map_fd(fd: &OwnedFd, len: usize) -> io::Result<*mut u8> {
    // SAFETY: mapping a file descriptor we own with a length it has; the kernel picks the address.
    let p = unsafe {
        libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

fn fd_size(fd: RawFd) -> io::Result<usize> {
    // SAFETY: fstat writes into the zeroed stat buffer we own.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: valid fd and a valid out pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as usize)
}

/// Whether `fd` is a memfd sealed against shrinking (`F_SEAL_SHRINK`); any other file can be cut short
/// by whoever else has it open for writing.
fn sealed_against_shrinking(fd: RawFd) -> bool {
    // SAFETY: F_GET_SEALS on a descriptor we own; no pointers.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}

fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl SharedMemory {
    /// A new anonymous region of `len` bytes (rounded up to 4 KiB), shareable with children by fd.
    pub fn create_anonymous(debug_name: &str, len: usize) -> io::Result<SharedMemory> {
        let len = len.div_ceil(4096).max(1) * 4096;
        let cname = CString::new(debug_name).map_err(|_| io::Error::other("region name contains NUL"))?;
        // SAFETY: memfd_create reads the NUL-terminated name; returns a new fd or -1.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: resizing our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // The size is final: a peer given the descriptor (a process cell) must not shrink the file under our
        // mapping (every access to the cut-off pages would be a SIGBUS here), grow it, or add seals of its own.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: F_ADD_SEALS on our own memfd, created with sealing allowed; no pointers involved.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let ptr = map_fd(&fd, len)?;
        Ok(SharedMemory { ptr, len, fd, unlink: None, guard: None })
    }

    /// Maps a region received by file descriptor (a child's side). Takes ownership of `fd`. A file that
    /// is not sealed against shrinking (a /dev/shm file, not our memfd) is guarded against a peer's
    /// truncation ([`crate::truncation`]).
    pub fn from_fd(fd: OwnedFd) -> io::Result<SharedMemory> {
        let len = fd_size(fd.as_raw_fd())?;
        if len == 0 || len % 8 != 0 {
            return Err(io::Error::other(format!("shared region has an unusable size of {len} bytes")));
        }
        let ptr = map_fd(&fd, len)?;
        let mut m = SharedMemory { ptr, len, fd, unlink: None, guard: None };
        if !sealed_against_shrinking(m.fd.as_raw_fd()) {
            m.guard = Some(crate::truncation::guard(m.ptr, m.len, m.fd.as_raw_fd())?);
        }
        Ok(m)
    }

    fn named_path(name: &str) -> io::Result<String> {
        if name.is_empty()
            || name.len() > 64
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("region name {name:?}: use 1-64 characters of A-Z a-z 0-9 - _"),
            ));
        }
        Ok(format!("{SHM_DIR}/{NAME_PREFIX}{name}"))
    }

    /// Creates the named region `name` in /dev/shm. If a region of that name exists and its creator is
    /// dead (a killed run), it is removed and its creator's PID returned as `Some(pid)`; if its creator is
    /// alive, creation fails. The file is removed when this mapping is dropped.
    pub fn create_named(name: &str, len: usize) -> io::Result<(SharedMemory, Option<u32>)> {
        let path = Self::named_path(name)?;
        let mut stale = None;
        if std::path::Path::new(&path).exists() {
            match Self::open_named(name) {
                Ok(old) => {
                    let pid = RegionView::attach(old.words()).map(|r| r.creator_pid()).unwrap_or(0);
                    if pid_alive(pid) {
                        return Err(io::Error::new(
                            io::ErrorKind::AddrInUse,
                            format!("region {path} is in use by running process {pid}; stop it or pick another name"),
                        ));
                    }
                    stale = Some(pid);
                }
                Err(_) => stale = Some(0),
            }
            std::fs::remove_file(&path)?;
        }
        let len = len.div_ceil(4096).max(1) * 4096;
        let cpath = CString::new(path.clone()).map_err(|_| io::Error::other("path contains NUL"))?;
        // SAFETY: open with a valid NUL-terminated path; O_EXCL so we never share a half-made file.
        let raw =
            unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o600) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: resizing our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            let e = io::Error::last_os_error();
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        let ptr = map_fd(&fd, len)?;
        let mut m = SharedMemory { ptr, len, fd, unlink: Some(path), guard: None };
        m.guard = Some(crate::truncation::guard(m.ptr, m.len, m.fd.as_raw_fd())?);
        Ok((m, stale))
    }

    /// Maps an existing named region.
    pub fn open_named(name: &str) -> io::Result<SharedMemory> {
        let path = Self::named_path(name)?;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path)?;
        SharedMemory::from_fd(OwnedFd::from(file))
    }

    /// Named regions in /dev/shm whose creator is no longer running: (name, creator pid).
    pub fn stale_named() -> std::vec::Vec<(String, u32)> {
        let mut out = std::vec::Vec::new();
        let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
            return out;
        };
        for ent in dir.flatten() {
            let fname = ent.file_name().to_string_lossy().to_string();
            let Some(name) = fname.strip_prefix(NAME_PREFIX) else {
                continue;
            };
            if let Ok(m) = Self::open_named(name) {
                let pid = RegionView::attach(m.words()).map(|r| r.creator_pid()).unwrap_or(0);
                if !pid_alive(pid) {
                    out.push((name.to_string(), pid));
                }
            }
        }
        out
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The memory as shared words.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned, `len` bytes long, alive as long as `self`, and every access
        // to it is atomic, which is sound however other processes touch the same memory.
        unsafe { core::slice::from_raw_parts(self.ptr as *const AtomicU64, self.len / 8) }
    }

    /// Base address (for handing to a VM as a memory slot).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // Unguarded first: the mapping and its descriptor go next.
        drop(self.guard.take());
        // SAFETY: unmapping exactly the mapping we made; nothing borrows it past `self`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
        if let Some(p) = &self.unlink {
            let _ = std::fs::remove_file(p);
        }
    }
}
