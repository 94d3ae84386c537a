//! Where a run writes: the one place that decides every output path inside a run directory.
//!
//! A run directory holds rtcell's own outputs (results.json, report.html, ...) and files a scenario
//! names (a log task's file). [`check_relative`] says whether a name a file gives may be used (checked
//! at validation, so a bad one is refused before anything starts); [`RunDir`] creates the files,
//! relative to the directory's descriptor, never following a symbolic link: a scenario's file must be
//! new ([`RunDir::create_new`]), rtcell's own exports replace what has their name
//! ([`RunDir::create_own`]), rtcell's own subdirectories are made or reused, never a link
//! ([`RunDir::create_own_dir`]).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Names rtcell writes into a run directory itself (first path component): a scenario's file may not
/// take one of them.
pub const RESERVED: &[&str] = &[
    "results.json",
    "report.html",
    "csv",
    "plot.gp",
    "latency.hist",
    "latency.json",
    "history.sqlite",
    "tune-state.json",
];

/// Longest relative path a scenario may name inside a run directory.
pub const MAX_RELATIVE: usize = 200;

/// Why `rel` may not name a file inside a run directory (`None`: it may). Relative, at most
/// [`MAX_RELATIVE`] bytes, components of letters, digits, '_', '-' and '.' (not `.` or `..`, not
/// starting with '.'), and not one of rtcell's own outputs ([`RESERVED`]).
pub fn check_relative(rel: &str) -> Option<String> {
    if rel.is_empty() || rel.len() > MAX_RELATIVE {
        return Some(format!("must be a relative path of 1 to {MAX_RELATIVE} characters"));
    }
    if rel.starts_with('/') {
        return Some("must be a relative path inside the results directory, not an absolute one".into());
    }
    let parts: Vec<&str> = rel.split('/').collect();
    for p in &parts {
        if p.is_empty() || p.starts_with('.') {
            return Some(format!(
                "path component {p:?} is empty or starts with '.' (no '.', '..', hidden files or trailing '/')"
            ));
        }
        if !p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
            return Some(format!("path component {p:?} may hold only letters, digits, '_', '-' and '.'"));
        }
    }
    if let Some(r) = RESERVED.iter().find(|r| r.eq_ignore_ascii_case(parts[0])) {
        return Some(format!("{r:?} is one of rtcell's own outputs in the results directory"));
    }
    None
}

/// An open run directory: every file is created relative to its descriptor.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    fd: OwnedFd,
}

fn cstr(s: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// `openat(dir, name, flags)` as an owned descriptor.
fn openat(dir: &OwnedFd, name: &CString, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated string, both live for the call.
    let fd = check(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl RunDir {
    /// Creates `path` (and its parents) if need be and opens it. The directory is the caller's (a
    /// command-line `--out` or a default under rtcell-results/): it is taken as given.
    pub fn create(path: &Path) -> io::Result<RunDir> {
        std::fs::create_dir_all(path)?;
        let c = cstr(path.as_os_str())?;
        // SAFETY: `c` is a NUL-terminated path living for the call.
        let fd = check(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) })?;
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        Ok(RunDir { path: path.to_owned(), fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor (e.g. to hand the directory itself, never its path, to a child).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Creates the new file `rel` (checked with [`check_relative`]) inside the directory, making its
    /// parent directories; no component may be a symbolic link, and the file must not exist yet.
    /// Returns the file's full path and the file open for writing.
    pub fn create_new(&self, rel: &str) -> io::Result<(PathBuf, File)> {
        if let Some(why) = check_relative(rel) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{rel:?}: {why}")));
        }
        self.create_file(rel, false)
    }

    /// Creates rtcell's own output `rel` (e.g. `csv/summary.csv`, no `.` or `..` component) inside the
    /// directory, replacing a file of that name: making its parent directories, no component followed
    /// if it is a symbolic link (a link at the file's name is removed, never written through).
    pub fn create_own(&self, rel: &str) -> io::Result<(PathBuf, File)> {
        let bad = Path::new(rel).components().any(|c| !matches!(c, Component::Normal(_)));
        if rel.is_empty() || bad {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{rel:?}: not a plain relative path")));
        }
        self.create_file(rel, true)
    }

    /// Makes rtcell's own subdirectory `name` (one plain name) inside the directory, relative to its
    /// descriptor, and opens it; an existing directory of that name is used. A symbolic link (or
    /// anything else but a directory) at the name is an error, never followed.
    pub fn create_own_dir(&self, name: &str) -> io::Result<RunDir> {
        let one = Path::new(name).components().collect::<Vec<_>>();
        if !matches!(one.as_slice(), [Component::Normal(_)]) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name:?}: not one plain name")));
        }
        let c = cstr(std::ffi::OsStr::new(name))?;
        // SAFETY: `self.fd` is open and `c` NUL-terminated, both live for the call; EEXIST is handled below.
        if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o777) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(io::Error::new(e.kind(), format!("{}: {e}", self.path.join(name).display())));
            }
        }
        let fd = openat(&self.fd, &c, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: {e} (a symbolic link or not a directory: never followed)", self.path.join(name).display()),
            )
        })?;
        Ok(RunDir { path: self.path.join(name), fd })
    }

    fn create_file(&self, rel: &str, replace: bool) -> io::Result<(PathBuf, File)> {
        let mut dir = self.fd.try_clone()?;
        let comps: Vec<Component> = Path::new(rel).components().collect();
        let Some((last, parents)) = comps.split_last() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty path"));
        };
        for c in parents {
            let name = cstr(c.as_os_str())?;
            // SAFETY: `dir` is open and `name` NUL-terminated; EEXIST is expected and handled below.
            let made = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o777) };
            if made < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
            dir = openat(&dir, &name, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)?;
        }
        let name = cstr(last.as_os_str())?;
        if replace {
            // SAFETY: `dir` is open and `name` NUL-terminated; unlinkat removes a link itself, never
            // its target. A file that is not there is fine; one that comes back makes O_EXCL fail.
            if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(e);
                }
            }
        }
        let fd = openat(&dir, &name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o666)?;
        Ok((self.path.join(rel), File::from(fd)))
    }
}

/// Writes rtcell's own output `rel` with `bytes` into the directory `dir` ([`RunDir::create_own`]: a
/// file, link or FIFO of that name is replaced, never written through). Returns the file's path.
pub fn write_own(dir: &Path, rel: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    let (path, mut f) = RunDir::create(dir)?.create_own(rel)?;
    io::Write::write_all(&mut f, bytes)?;
    Ok(path)
}

/// Removes what is at `path` before a program of another (cyclictest) writes its output there by
/// name: a link or a FIFO left at that name is removed, never followed or opened.
pub fn clear_for_output(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_names() {
        for ok in ["motion.log", "logs/a.csv", "a-b_c.1"] {
            assert_eq!(check_relative(ok), None, "{ok}");
        }
        for bad in ["", ".", "..", "../x", "a/../b", "/etc/x", "a//b", "a/", "results.json", "CSV/x", ".hidden", "a b"]
        {
            assert!(check_relative(bad).is_some(), "{bad:?}");
        }
        assert!(check_relative(&"a".repeat(MAX_RELATIVE + 1)).is_some());
    }

    #[test]
    fn creates_new_files_without_following_links() {
        let tmp = tempfile::tempdir().unwrap();
        let d = RunDir::create(&tmp.path().join("run")).unwrap();
        let (p, _) = d.create_new("logs/a.log").unwrap();
        assert!(p.ends_with("run/logs/a.log") && p.is_file());
        assert!(d.create_new("logs/a.log").is_err(), "an existing file is reused");
        std::os::unix::fs::symlink(tmp.path().join("victim"), tmp.path().join("run/b.log")).unwrap();
        assert!(d.create_new("b.log").is_err(), "a symlink was followed");
        assert!(!tmp.path().join("victim").exists());
        std::os::unix::fs::symlink(tmp.path(), tmp.path().join("run/sub")).unwrap();
        assert!(d.create_new("sub/c.log").is_err(), "a symlinked directory was followed");
        assert!(!tmp.path().join("c.log").exists());
    }

    #[test]
    fn own_outputs_replace_files_and_links_without_following_them() {
        let tmp = tempfile::tempdir().unwrap();
        let d = RunDir::create(&tmp.path().join("run")).unwrap();
        let (p, mut f) = d.create_own("csv/summary.csv").unwrap();
        std::io::Write::write_all(&mut f, b"old").unwrap();
        let (_, mut f) = d.create_own("csv/summary.csv").unwrap();
        std::io::Write::write_all(&mut f, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new", "an existing output is replaced");
        std::fs::write(tmp.path().join("victim"), "keep").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("victim"), tmp.path().join("run/plot.gp")).unwrap();
        d.create_own("plot.gp").unwrap();
        assert_eq!(std::fs::read_to_string(tmp.path().join("victim")).unwrap(), "keep", "written through a link");
        std::os::unix::fs::symlink(tmp.path(), tmp.path().join("run/other")).unwrap();
        assert!(d.create_own("other/x.csv").is_err(), "a symlinked directory was followed");
        assert!(d.create_own("../x.csv").is_err() && d.create_own("/x.csv").is_err());
    }

    #[test]
    fn own_directories_are_made_or_reused_and_a_link_at_their_name_is_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = RunDir::create(&tmp.path().join("run")).unwrap();
        let sub = d.create_own_dir("gateway-run").unwrap();
        assert!(sub.path().ends_with("run/gateway-run") && sub.path().is_dir());
        let inner = sub.create_own_dir("scenario").unwrap();
        inner.create_own("results.json").unwrap();
        assert!(tmp.path().join("run/gateway-run/scenario/results.json").is_file());
        d.create_own_dir("gateway-run").expect("an existing directory is used");
        // A link at the name: an error, and its target stays untouched.
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, tmp.path().join("run/linked")).unwrap();
        let e = d.create_own_dir("linked").unwrap_err();
        assert!(e.to_string().contains("never followed"), "{e}");
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "the link's target was written into");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), tmp.path().join("run/dangling")).unwrap();
        assert!(d.create_own_dir("dangling").is_err());
        assert!(!tmp.path().join("nowhere").exists(), "a dangling link was followed");
        std::fs::write(tmp.path().join("run/file"), "x").unwrap();
        assert!(d.create_own_dir("file").is_err());
        for bad in ["", "a/b", "..", "/abs"] {
            assert!(d.create_own_dir(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn own_outputs_replace_a_fifo_instead_of_blocking_on_it() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = CString::new(tmp.path().join("latency.hist").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path living for the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let p = write_own(tmp.path(), "latency.hist", b"h").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"h");
        std::os::unix::fs::symlink(tmp.path().join("victim"), tmp.path().join("round.json")).unwrap();
        clear_for_output(&tmp.path().join("round.json")).unwrap();
        assert!(std::fs::symlink_metadata(tmp.path().join("round.json")).is_err(), "the link is gone");
    }
}
