//! One owner per cell CPU across processes.
//!
//! Two runs that both pin SCHED_FIFO busy-pollers to one CPU starve each other. Every run therefore takes
//! an exclusive lock per cell CPU before its first cell starts: an advisory `flock` on `cpuN.lock` in the
//! runtime directory ([`runtime_dir`]). The kernel releases it when the holder's last descriptor closes,
//! so a crashed or killed run never leaves its CPU taken. The file records who holds it (pid, command
//! line, since when) for the refusal message of the next run and for `rtcell check`.
//!
//! The directory is private (0700, ours, not a symlink) and the lock files are opened without
//! following symlinks, 0600. Runs of different users use different directories: they do not see each
//! other's locks (without privileges, a user cannot run SCHED_FIFO cells anyway).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Overrides the runtime directory (a private directory for the lock files).
pub const RUNTIME_DIR_ENV: &str = "RTCELL_RUNTIME_DIR";

/// The longest command line recorded (bytes, before escaping).
const COMMAND_CAP: usize = 256;
/// The most read of a lock file (ours, but read as untrusted all the same).
const RECORD_CAP: u64 = 4096;

/// Who holds a cell CPU, as its lock file records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// The holder's command line, capped and escaped (printable).
    pub command: String,
    /// When it took the CPU, seconds since the Unix epoch.
    pub since_unix: u64,
}

impl Holder {
    fn me() -> Holder {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let since_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Holder { pid: std::process::id(), command: crate::peer_text::peer_str(&command, COMMAND_CAP), since_unix }
    }

    /// `pid 123 (rtcell run plc.toml), since 2026-01-02T03:04:05Z`: every field made printable again
    /// (the record is a file, read as untrusted).
    pub fn describe(&self) -> String {
        format!("pid {} ({}), since {}", self.pid, self.command_text(), self.since(),)
    }

    /// The recorded command line, capped and escaped again.
    pub fn command_text(&self) -> String {
        crate::peer_text::printable_line(&self.command, COMMAND_CAP * 4)
    }

    /// When it took the CPU, as `YYYY-MM-DDTHH:MM:SSZ`.
    pub fn since(&self) -> String {
        crate::utc::rfc3339_utc(std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.since_unix))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CpuLockError {
    #[error("{}", held_message(*cpu, holder.as_ref()))]
    Held { cpu: usize, holder: Option<Holder> },
    /// A CPU this run wants for its Linux side or loads is another run's cell CPU.
    #[error("{}", cell_of_other_message(*cpu, holder.as_ref()))]
    CellOfOther { cpu: usize, holder: Option<Holder> },
    #[error(
        "the runtime directory {path} is unsafe: {why} (remove it, or set {RUNTIME_DIR_ENV} to a private directory)"
    )]
    UnsafeDir { path: PathBuf, why: String },
    #[error("the lock file {path} is unsafe: {why} (remove it)")]
    UnsafeFile { path: PathBuf, why: String },
    #[error("cannot lock CPU {cpu} ({path}): {source}")]
    Io {
        cpu: usize,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CpuLockError {
    /// The refusal as a remote client may see it: which CPU and the holder's pid and start time, never its
    /// command line or this machine's paths (those go to the server's own log).
    pub fn client_message(&self) -> String {
        let who = |h: &Option<Holder>| {
            h.as_ref().map_or_else(
                || "its record is unreadable".to_string(),
                |h| format!("pid {}, since {}", h.pid, h.since()),
            )
        };
        match self {
            CpuLockError::Held { cpu, holder } => {
                format!("CPU {cpu} is in use by another rtcell run ({})", who(holder))
            }
            CpuLockError::CellOfOther { cpu, holder } => {
                format!("CPU {cpu} is a cell CPU of another rtcell run ({})", who(holder))
            }
            CpuLockError::UnsafeDir { .. } | CpuLockError::UnsafeFile { .. } | CpuLockError::Io { .. } => {
                "the server could not take the CPU lock (see its log)".into()
            }
        }
    }

    /// Whether another run holds what was asked for (as opposed to the lock failing).
    pub fn is_busy(&self) -> bool {
        matches!(self, CpuLockError::Held { .. } | CpuLockError::CellOfOther { .. })
    }
}

fn held_message(cpu: usize, holder: Option<&Holder>) -> String {
    match holder {
        Some(h) => format!(
            "CPU {cpu} is in use by another rtcell run: {}; wait for it to end, stop it (kill {}), or give this \
             run another cell CPU",
            h.describe(),
            h.pid
        ),
        None => format!(
            "CPU {cpu} is in use by another rtcell run (its record is unreadable); wait for it to end, or give \
             this run another cell CPU"
        ),
    }
}

fn cell_of_other_message(cpu: usize, holder: Option<&Holder>) -> String {
    let who = holder.map_or_else(|| "its record is unreadable".to_string(), Holder::describe);
    format!(
        "CPU {cpu} is a cell CPU of another rtcell run ({who}); this run would put its Linux side (master_cpu) or a \
         load there, beside that run's real-time cell: give this run another master_cpu or load CPUs, or wait for it \
         to end"
    )
}

/// The cell CPUs this process holds; dropping it releases them.
#[derive(Debug, Default)]
pub struct CpuLocks {
    held: Vec<(usize, File)>,
}

impl CpuLocks {
    /// The CPUs held, in the order taken.
    pub fn cpus(&self) -> Vec<usize> {
        self.held.iter().map(|(c, _)| *c).collect()
    }
}

/// The runtime directory: `$RTCELL_RUNTIME_DIR`, else `/run/rtcell` for root, else
/// `$XDG_RUNTIME_DIR/rtcell`, else `/tmp/rtcell-UID`.
pub fn runtime_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|d| !d.is_empty()).map(PathBuf::from).filter(|d| d.is_absolute());
    if let Some(d) = env(RUNTIME_DIR_ENV) {
        return d;
    }
    // SAFETY: geteuid cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/rtcell");
    }
    if let Some(d) = env("XDG_RUNTIME_DIR") {
        return d.join("rtcell");
    }
    std::env::temp_dir().join(format!("rtcell-{uid}"))
}

fn lock_path(dir: &Path, cpu: usize) -> PathBuf {
    dir.join(format!("cpu{cpu}.lock"))
}

/// Takes every CPU of `cpus` (duplicates once) for this process, or none: the first held one is refused
/// with its holder.
pub fn lock_cpus(cpus: &[usize]) -> Result<CpuLocks, CpuLockError> {
    lock_cpus_in(&runtime_dir(), cpus)
}

/// [`lock_cpus`] with the lock files in `dir`.
pub fn lock_cpus_in(dir: &Path, cpus: &[usize]) -> Result<CpuLocks, CpuLockError> {
    lock_run_cpus_in(dir, cpus, &[])
}

/// Takes a run's CPUs: `cells` exclusively (one owner per cell CPU), `shared` (its Linux side and loads)
/// with a shared lock, so that runs may share a Linux CPU with each other but never put their Linux side
/// or loads on another run's cell CPU, nor a cell on a CPU another run uses for its Linux side. A CPU in
/// both lists is taken exclusively.
pub fn lock_run_cpus(cells: &[usize], shared: &[usize]) -> Result<CpuLocks, CpuLockError> {
    lock_run_cpus_in(&runtime_dir(), cells, shared)
}

/// [`lock_run_cpus`] with the lock files in `dir`.
pub fn lock_run_cpus_in(dir: &Path, cells: &[usize], shared: &[usize]) -> Result<CpuLocks, CpuLockError> {
    private_dir(dir)?;
    let mut wanted: Vec<(usize, bool)> = cells.iter().map(|&c| (c, true)).collect();
    wanted.extend(shared.iter().filter(|c| !cells.contains(c)).map(|&c| (c, false)));
    wanted.sort_unstable();
    wanted.dedup();
    let mut locks = CpuLocks::default();
    for (cpu, exclusive) in wanted {
        let file = lock_one(dir, cpu, exclusive)?;
        locks.held.push((cpu, file));
    }
    Ok(locks)
}

fn lock_one(dir: &Path, cpu: usize, exclusive: bool) -> Result<File, CpuLockError> {
    let path = lock_path(dir, cpu);
    let io = |source| CpuLockError::Io { cpu, path: path.clone(), source };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => CpuLockError::UnsafeFile { path: path.clone(), why: "it is a symbolic link".into() },
            _ => io(e),
        })?;
    check_file(&file, &path)?;
    let mode = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
    // SAFETY: flock on a descriptor we own; LOCK_NB makes it return at once.
    if unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let holder = read_holder(&path);
            return Err(if exclusive {
                CpuLockError::Held { cpu, holder }
            } else {
                CpuLockError::CellOfOther { cpu, holder }
            });
        }
        return Err(io(e));
    }
    if !exclusive {
        // Shared holders do not write the record: it names the cell CPU's owner, or the last one that had it.
        return Ok(file);
    }
    let record = serde_json::to_string(&Holder::me()).unwrap_or_default();
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    file.write_all(record.as_bytes()).and_then(|()| file.flush()).map_err(io)?;
    Ok(file)
}

/// A lock file must be a regular file of ours that only we can write.
fn check_file(file: &File, path: &Path) -> Result<(), CpuLockError> {
    let m = file.metadata().map_err(|e| CpuLockError::UnsafeFile { path: path.into(), why: e.to_string() })?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    let why = if !m.file_type().is_file() {
        "not a regular file"
    } else if m.uid() != uid {
        "owned by another user"
    } else if m.mode() & 0o022 != 0 {
        "writable by others"
    } else {
        return Ok(());
    };
    Err(CpuLockError::UnsafeFile { path: path.into(), why: why.into() })
}

/// Makes `dir` (mode 0700) or checks it: a directory, not a symlink, ours, closed to others.
fn private_dir(dir: &Path) -> Result<(), CpuLockError> {
    let unsafe_dir = |why: String| CpuLockError::UnsafeDir { path: dir.into(), why };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(unsafe_dir(format!("cannot create it: {e}"))),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| unsafe_dir(e.to_string()))?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if !m.file_type().is_dir() {
        return Err(unsafe_dir("not a directory (a symbolic link or a file)".into()));
    }
    if m.uid() != uid {
        return Err(unsafe_dir(format!("owned by uid {}, not by us (uid {uid})", m.uid())));
    }
    if m.mode() & 0o077 != 0 {
        return Err(unsafe_dir(format!("mode {:o} lets others in; it must be 0700", m.mode() & 0o777)));
    }
    Ok(())
}

/// The holder recorded in a lock file; retried briefly, since the holder writes its record just after
/// it took the lock.
fn read_holder(path: &Path) -> Option<Holder> {
    let t0 = Instant::now();
    loop {
        let rec =
            OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path).ok().and_then(
                |f| {
                    let mut s = String::new();
                    f.take(RECORD_CAP).read_to_string(&mut s).ok()?;
                    serde_json::from_str::<Holder>(&s).ok()
                },
            );
        if rec.is_some() || t0.elapsed() > Duration::from_millis(300) {
            return rec;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A held cell CPU, for `rtcell check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCpu {
    pub cpu: usize,
    pub holder: Option<Holder>,
}

/// The cell CPUs held now, by any process (lowest CPU first). Reads the kernel's lock table
/// (`/proc/locks`) rather than trying the locks, so that looking never makes a starting run fail.
pub fn held_cpus() -> Vec<HeldCpu> {
    held_cpus_in(&runtime_dir())
}

/// [`held_cpus`] of the lock files in `dir`.
pub fn held_cpus_in(dir: &Path) -> Vec<HeldCpu> {
    let table = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut held = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(cpu) = name.to_str().and_then(|n| n.strip_prefix("cpu")?.strip_suffix(".lock")?.parse::<usize>().ok())
        else {
            continue;
        };
        let Ok(m) = std::fs::symlink_metadata(e.path()) else { continue };
        if m.file_type().is_file() && flocked(&table, m.dev(), m.ino()) {
            held.push(HeldCpu { cpu, holder: read_holder(&e.path()) });
        }
    }
    held.sort_by_key(|h| h.cpu);
    held
}

/// Whether `/proc/locks` (`table`) has a granted FLOCK on the file `dev`/`ino`. Lines look like
/// `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`; waiters (`1: -> FLOCK ...`) do not count.
fn flocked(table: &str, dev: u64, ino: u64) -> bool {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    table.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // A shared lock (READ) is a Linux side or a load, not a cell.
        f.get(1) == Some(&"FLOCK") && f.get(3) == Some(&"WRITE") && f.get(5).is_some_and(|d| *d == want)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_named_and_a_drop_releases() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("rt");
        let first = lock_cpus_in(&d, &[1, 1]).unwrap();
        assert_eq!(first.cpus(), vec![1]);
        let err = lock_cpus_in(&d, &[0, 1]).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, CpuLockError::Held { cpu: 1, .. }), "{msg}");
        assert!(msg.contains(&format!("pid {}", std::process::id())), "{msg}");
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(lock_path(&d, 1)).unwrap().mode() & 0o777, 0o600);
        let held = held_cpus_in(&d);
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].holder.as_ref().map(|h| h.pid), Some(std::process::id()));
        drop(first);
        assert!(held_cpus_in(&d).is_empty());
        lock_cpus_in(&d, &[1]).unwrap();
    }

    #[test]
    fn linux_sides_share_a_cpu_but_never_sit_on_another_runs_cell_cpu() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("rt");
        // Run A: cell CPU 1, Linux side on 0.
        let a = lock_run_cpus_in(&d, &[1], &[0]).unwrap();
        // Run B: its Linux side on 0 too (shared), a cell on 2: fine.
        let b = lock_run_cpus_in(&d, &[2], &[0]).unwrap();
        // Run C: its Linux side or a load on A's cell CPU: refused, A named.
        let err = lock_run_cpus_in(&d, &[3], &[1]).unwrap_err();
        assert!(matches!(err, CpuLockError::CellOfOther { cpu: 1, .. }), "{err}");
        assert!(err.to_string().contains(&format!("pid {}", std::process::id())), "{err}");
        // Run D: a cell on the CPU A and B use for their Linux side: refused.
        assert!(matches!(lock_run_cpus_in(&d, &[0], &[]), Err(CpuLockError::Held { cpu: 0, .. })));
        // Only cell CPUs are listed as held.
        assert_eq!(held_cpus_in(&d).iter().map(|h| h.cpu).collect::<Vec<_>>(), vec![1, 2]);
        drop((a, b));
        lock_run_cpus_in(&d, &[0], &[1]).unwrap();
    }

    #[test]
    fn symlinks_and_open_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("rt");
        lock_cpus_in(&d, &[]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", lock_path(&d, 3)).unwrap();
        assert!(matches!(lock_cpus_in(&d, &[3]), Err(CpuLockError::UnsafeFile { .. })));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(matches!(lock_cpus_in(&link, &[1]), Err(CpuLockError::UnsafeDir { .. })));
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(matches!(lock_cpus_in(&d, &[1]), Err(CpuLockError::UnsafeDir { .. })));
    }

    #[test]
    fn records_are_printable_and_times_are_utc() {
        let shown = crate::peer_text::peer_str("a\x1b[2Jb\n", 100);
        assert!(!shown.contains('\x1b') && !shown.contains('\n'), "{shown}");
        let table = "1: FLOCK  ADVISORY  WRITE 42 08:01:77 0 EOF\n2: -> FLOCK  ADVISORY  WRITE 43 08:01:78 0 EOF\n";
        let dev = libc::makedev(8, 1);
        assert!(flocked(table, dev, 77));
        assert!(!flocked(table, dev, 78));
    }
}
