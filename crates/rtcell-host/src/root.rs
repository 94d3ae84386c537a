//! Where host files are read from.
//!
//! Every reader in this crate goes through a [`HostRoot`] so that tests (and offline analysis of a
//! captured `/proc` + `/sys` tree) can point it at a fixture directory instead of the live system.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// A file under a [`HostRoot`] could not be read (or did not have the expected form).
///
/// `path` is the logical host path (e.g. `/proc/cmdline`), not the path under a fixture root, so
/// messages read the same in tests and on a real machine.
#[derive(Debug, thiserror::Error)]
#[error("could not read {path}: {source}")]
pub struct ReadError {
    pub path: String,
    #[source]
    pub source: io::Error,
}

impl ReadError {
    pub fn new(path: impl Into<String>, source: io::Error) -> Self {
        ReadError { path: path.into(), source }
    }

    /// A file that was read but whose contents could not be parsed.
    pub fn invalid(path: impl Into<String>, why: impl Into<String>) -> Self {
        ReadError::new(path, io::Error::new(io::ErrorKind::InvalidData, why.into()))
    }

    /// True when the file simply does not exist (often meaning "feature not built into this kernel").
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == io::ErrorKind::NotFound
    }
}

impl From<ReadError> for io::Error {
    fn from(e: ReadError) -> io::Error {
        let kind = e.source.kind();
        io::Error::new(kind, e.to_string())
    }
}

/// A value could not be written to a file under a [`HostRoot`].
#[derive(Debug, thiserror::Error)]
#[error("could not write {value:?} to {path}: {source}")]
pub struct WriteError {
    /// The logical host path, as in [`ReadError`].
    pub path: String,
    pub value: String,
    #[source]
    pub source: io::Error,
}

impl WriteError {
    pub fn new(path: impl Into<String>, value: impl Into<String>, source: io::Error) -> Self {
        WriteError { path: path.into(), value: value.into(), source }
    }
}

/// Base directory under which `/proc`, `/sys`, `/dev` and `/boot` are looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    base: PathBuf,
}

impl Default for HostRoot {
    fn default() -> Self {
        HostRoot::system()
    }
}

/// Most records read from the kernel log; a bound so a flooded log cannot stall the caller.
const KMSG_MAX_BYTES: usize = 8 << 20;

impl HostRoot {
    /// The live system (`/`).
    pub fn system() -> Self {
        HostRoot { base: PathBuf::from("/") }
    }

    /// A fixture tree laid out like `/` (with `proc/...`, `sys/...` below `base`).
    pub fn at(base: impl Into<PathBuf>) -> Self {
        HostRoot { base: base.into() }
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// True for the live system: only then do CPUID, uname and the calling process describe the
    /// same machine as the files.
    pub fn is_system(&self) -> bool {
        self.base == Path::new("/")
    }

    /// The real path of a logical host path such as `/proc/cmdline`.
    pub fn path(&self, logical: &str) -> PathBuf {
        self.base.join(logical.trim_start_matches('/'))
    }

    pub fn exists(&self, logical: &str) -> bool {
        self.path(logical).exists()
    }

    /// Whole file as text.
    pub fn read(&self, logical: &str) -> Result<String, ReadError> {
        std::fs::read_to_string(self.path(logical)).map_err(|e| ReadError::new(logical, e))
    }

    /// File contents with surrounding whitespace removed (sysfs values end in a newline).
    pub fn read_trimmed(&self, logical: &str) -> Result<String, ReadError> {
        self.read(logical).map(|s| s.trim().to_string())
    }

    /// Like [`read`](Self::read), but a missing file is `Ok(None)`: for optional kernel features.
    pub fn read_optional(&self, logical: &str) -> Result<Option<String>, ReadError> {
        match self.read(logical) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A file holding one integer (e.g. `/proc/sys/kernel/sched_rt_runtime_us`).
    pub fn read_i64(&self, logical: &str) -> Result<i64, ReadError> {
        let text = self.read_trimmed(logical)?;
        text.parse::<i64>().map_err(|_| ReadError::invalid(logical, format!("expected an integer, found {text:?}")))
    }

    /// Names of the entries of a directory, sorted.
    pub fn list_dir(&self, logical: &str) -> Result<Vec<String>, ReadError> {
        let rd = std::fs::read_dir(self.path(logical)).map_err(|e| ReadError::new(logical, e))?;
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| ReadError::new(logical, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// Names of the subdirectories of a directory, sorted.
    pub fn list_subdirs(&self, logical: &str) -> Result<Vec<String>, ReadError> {
        let mut names = self.list_dir(logical)?;
        let base = self.path(logical);
        names.retain(|n| base.join(n).is_dir());
        Ok(names)
    }

    /// Raw bytes of a file (e.g. the binary value `/dev/cpu_dma_latency` returns).
    pub fn read_bytes(&self, logical: &str) -> Result<Vec<u8>, ReadError> {
        std::fs::read(self.path(logical)).map_err(|e| ReadError::new(logical, e))
    }

    /// Target of a symbolic link, e.g. `/proc/123/fd/4` -> `/dev/cpu_dma_latency`.
    pub fn read_link(&self, logical: &str) -> Result<PathBuf, ReadError> {
        std::fs::read_link(self.path(logical)).map_err(|e| ReadError::new(logical, e))
    }

    /// Writes `value` and a newline to an existing kernel file in one `write(2)`, exactly as
    /// `echo value > file` does (sysfs and procfs take one value per write, and every kernel knob
    /// accepts the newline). The file is never created: a knob that does not exist is an error, not a
    /// new file. A short write is an error too.
    pub fn write(&self, logical: &str, value: &str) -> Result<(), WriteError> {
        use std::io::Write as _;
        let line = format!("{value}\n");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.path(logical))
            .map_err(|e| WriteError::new(logical, value, e))?;
        match file.write(line.as_bytes()) {
            Ok(n) if n == line.len() => Ok(()),
            Ok(n) => Err(WriteError::new(
                logical,
                value,
                io::Error::new(io::ErrorKind::WriteZero, format!("only {n} of {} bytes taken", line.len())),
            )),
            Err(e) => Err(WriteError::new(logical, value, e)),
        }
    }

    /// Messages of the kernel log (`/dev/kmsg`), without their `level,seq,time,flags;` prefix.
    ///
    /// Used to recover boot-time facts the kernel exposes nowhere else (its TSC frequency, the
    /// preemption model chosen at boot). Reading needs root where `dmesg_restrict` is set, and
    /// old records may already have been overwritten, so callers treat it as best effort.
    pub fn kernel_log(&self) -> Result<Vec<String>, ReadError> {
        const LOGICAL: &str = "/dev/kmsg";
        let mut file = open_nonblocking(&self.path(LOGICAL)).map_err(|e| ReadError::new(LOGICAL, e))?;
        // /dev/kmsg returns one record per read() and EINVAL when the buffer is too small for it,
        // so read with a buffer larger than any record (the kernel limit is 1 KiB + dict).
        let mut buf = vec![0u8; 16 * 1024];
        let mut raw = Vec::new();
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    raw.extend_from_slice(&buf[..n]);
                    if !raw.ends_with(b"\n") {
                        raw.push(b'\n');
                    }
                    if raw.len() > KMSG_MAX_BYTES {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // EPIPE: the record we were about to read was overwritten; the next read resumes.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(e) => return Err(ReadError::new(LOGICAL, e)),
            }
        }
        let text = String::from_utf8_lossy(&raw);
        Ok(text
            .lines()
            // Continuation lines (" KEY=value") carry device metadata, not messages.
            .filter(|l| !l.starts_with(' ') && !l.is_empty())
            .map(|l| match l.split_once(';') {
                Some((_, msg)) => msg.to_string(),
                None => l.to_string(),
            })
            .collect())
    }
}

fn open_nonblocking(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_paths_map_under_base() {
        let r = HostRoot::at("/some/fixture");
        assert_eq!(r.path("/proc/cmdline"), PathBuf::from("/some/fixture/proc/cmdline"));
        assert!(!r.is_system());
        assert!(HostRoot::system().is_system());
        assert_eq!(HostRoot::system().path("/proc/stat"), PathBuf::from("/proc/stat"));
    }

    #[test]
    fn read_errors_name_the_logical_path() {
        let dir = tempfile::tempdir().unwrap();
        let r = HostRoot::at(dir.path());
        let e = r.read("/proc/nothing").unwrap_err();
        assert!(e.is_not_found());
        assert!(e.to_string().starts_with("could not read /proc/nothing: "), "{e}");
        assert!(r.read_optional("/proc/nothing").unwrap().is_none());
    }

    #[test]
    fn writes_replace_existing_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let r = HostRoot::at(dir.path());
        std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
        std::fs::write(dir.path().join("proc/sys/kernel/timer_migration"), "1\n").unwrap();
        r.write("/proc/sys/kernel/timer_migration", "0").unwrap();
        assert_eq!(r.read("/proc/sys/kernel/timer_migration").unwrap(), "0\n");
        let e = r.write("/proc/sys/kernel/nothing", "0").unwrap_err();
        assert_eq!(e.source.kind(), io::ErrorKind::NotFound);
        assert!(!dir.path().join("proc/sys/kernel/nothing").exists());
        assert!(e.to_string().starts_with("could not write \"0\" to /proc/sys/kernel/nothing: "), "{e}");
        std::os::unix::fs::symlink("/dev/cpu_dma_latency", dir.path().join("proc/sys/link")).unwrap();
        assert_eq!(r.read_link("/proc/sys/link").unwrap(), PathBuf::from("/dev/cpu_dma_latency"));
        assert_eq!(r.read_bytes("/proc/sys/kernel/timer_migration").unwrap(), b"0\n");
    }

    #[test]
    fn kernel_log_strips_record_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dev")).unwrap();
        std::fs::write(
            dir.path().join("dev/kmsg"),
            "6,1,0,-;tsc: Detected 2596.122 MHz processor\n SUBSYSTEM=cpu\n5,2,1,-;Dynamic Preempt: none\n",
        )
        .unwrap();
        let log = HostRoot::at(dir.path()).kernel_log().unwrap();
        assert_eq!(log, vec!["tsc: Detected 2596.122 MHz processor", "Dynamic Preempt: none"]);
    }
}
