//! The state file of `rtcell tune --apply`: a journal of every value it changes, written before the
//! change and flushed to disk, so that `--revert` can restore exactly what was changed even when the
//! apply stopped half-way (Ctrl-C, an error, a crash).
//!
//! Layout: JSON lines. The first line is a [`Header`]; each further line an [`Entry`]. The file is
//! created exclusively (one apply at a time) and removed by a revert that restored everything. A
//! last line cut short by a crash while it was written is ignored: its change was never made, since
//! changes happen only after their entry is on disk.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::TuneError;

/// Version of the state file layout.
pub const STATE_VERSION: u32 = 1;

/// File name of the state file inside its directory.
pub const STATE_FILE: &str = "tune-state.json";

/// Where the state file goes: `RTCELL_HOME`, else `$XDG_STATE_HOME/rtcell`, else `/var/lib/rtcell`
/// (`env` looks up environment variables; empty values count as unset).
pub fn default_state_path(env: impl Fn(&str) -> Option<String>) -> PathBuf {
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(home) = var("RTCELL_HOME") {
        return home.join(STATE_FILE);
    }
    if let Some(state) = var("XDG_STATE_HOME") {
        return state.join("rtcell").join(STATE_FILE);
    }
    PathBuf::from("/var/lib/rtcell").join(STATE_FILE)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// [`STATE_VERSION`].
    pub rtcell_tune: u32,
    /// The cell CPU the changes were made for.
    pub cpu: usize,
    /// The host root the paths are under ("/" for the live system).
    pub root: PathBuf,
    /// The process that applied them.
    pub pid: u32,
    /// When, in seconds since the Unix epoch.
    pub started_at: u64,
}

/// One value about to be changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// What it is, for people: "IRQ 36 (virtio1-req.0) affinity".
    pub label: String,
    /// The logical host path.
    pub path: String,
    /// The file's contents before the change, byte for byte.
    pub before: String,
    /// What is written to change it.
    pub after: String,
    /// What is written to restore `before`.
    pub restore: String,
}

/// A state file being written by an apply.
pub struct Journal {
    path: PathBuf,
    file: File,
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> TuneError + '_ {
    move |source| TuneError::StateIo { path: path.to_path_buf(), source }
}

impl Journal {
    /// Creates the state file (and its directory), refusing when one exists already: a second apply
    /// would record the first one's values as the "before" and lose the originals.
    pub fn create(path: &Path, header: &Header) -> Result<Journal, TuneError> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let file = match OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(TuneError::StateExists { path: path.to_path_buf() });
            }
            Err(e) => return Err(io_err(path)(e)),
        };
        // The new directory entry must survive a crash too.
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))?;
        let mut j = Journal { path: path.to_path_buf(), file };
        j.append(header)?;
        Ok(j)
    }

    /// Appends one line and flushes it to disk before returning.
    pub fn append(&mut self, record: &impl Serialize) -> Result<(), TuneError> {
        let mut line = serde_json::to_string(record)
            .map_err(|e| io_err(&self.path)(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        line.push('\n');
        self.file.write_all(line.as_bytes()).map_err(io_err(&self.path))?;
        self.file.sync_data().map_err(io_err(&self.path))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A state file as read back for a revert.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub header: Header,
    pub entries: Vec<Entry>,
    /// A last line cut short (a crash while it was written): ignored, its change was never made.
    pub torn_tail: bool,
}

impl State {
    pub fn load(path: &Path) -> Result<State, TuneError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(TuneError::NoState { path: path.to_path_buf() });
            }
            Err(e) => return Err(io_err(path)(e)),
        };
        State::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<State, TuneError> {
        let corrupt = |line: usize, why: String| TuneError::StateCorrupt { path: path.to_path_buf(), line, why };
        let complete = text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        let mut torn_tail = false;
        let mut header = None;
        let mut entries = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let last = i + 1 == lines.len();
            if i == 0 {
                match serde_json::from_str::<Header>(line) {
                    Ok(h) => header = Some(h),
                    Err(e) => return Err(corrupt(1, format!("not an rtcell tune state file ({e})"))),
                }
                continue;
            }
            match serde_json::from_str::<Entry>(line) {
                Ok(e) => entries.push(e),
                Err(_) if last && !complete => torn_tail = true,
                Err(e) => return Err(corrupt(i + 1, e.to_string())),
            }
        }
        let header = header.ok_or_else(|| corrupt(1, "the file is empty".to_string()))?;
        if header.rtcell_tune != STATE_VERSION {
            return Err(corrupt(
                1,
                format!("layout version {} (this rtcell reads version {STATE_VERSION})", header.rtcell_tune),
            ));
        }
        Ok(State { header, entries, torn_tail })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header { rtcell_tune: STATE_VERSION, cpu: 1, root: "/".into(), pid: 7, started_at: 1 }
    }

    fn entry(path: &str) -> Entry {
        Entry { label: "x".into(), path: path.into(), before: "1\n".into(), after: "0".into(), restore: "1".into() }
    }

    #[test]
    fn default_paths() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(default_state_path(env(&[])), PathBuf::from("/var/lib/rtcell/tune-state.json"));
        assert_eq!(default_state_path(env(&[("XDG_STATE_HOME", "/s")])), PathBuf::from("/s/rtcell/tune-state.json"));
        assert_eq!(
            default_state_path(env(&[("XDG_STATE_HOME", "/s"), ("RTCELL_HOME", "/r")])),
            PathBuf::from("/r/tune-state.json")
        );
        assert_eq!(default_state_path(env(&[("RTCELL_HOME", "")])), PathBuf::from("/var/lib/rtcell/tune-state.json"));
    }

    #[test]
    fn journal_round_trip_and_exclusive_creation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/state.json");
        let mut j = Journal::create(&path, &header()).unwrap();
        j.append(&entry("/a")).unwrap();
        j.append(&entry("/b")).unwrap();
        let s = State::load(&path).unwrap();
        assert_eq!(s.header, header());
        assert_eq!(s.entries, vec![entry("/a"), entry("/b")]);
        assert!(!s.torn_tail);
        assert!(matches!(Journal::create(&path, &header()), Err(TuneError::StateExists { .. })));
    }

    #[test]
    fn a_torn_last_line_is_ignored_but_damage_elsewhere_is_an_error() {
        let p = Path::new("state.json");
        let h = serde_json::to_string(&header()).unwrap();
        let e = serde_json::to_string(&entry("/a")).unwrap();
        let torn = format!("{h}\n{e}\n{}", &e[..e.len() / 2]);
        let s = State::parse(p, &torn).unwrap();
        assert_eq!(s.entries.len(), 1);
        assert!(s.torn_tail);
        let damaged = format!("{h}\n{}\n{e}\n", &e[..e.len() / 2]);
        let err = State::parse(p, &damaged).unwrap_err().to_string();
        assert!(err.starts_with("state file state.json, line 2: "), "{err}");
        assert!(State::parse(p, "").unwrap_err().to_string().contains("empty"));
        let other = State::parse(p, "{\"hello\": 1}\n").unwrap_err().to_string();
        assert!(other.contains("not an rtcell tune state file"), "{other}");
        let newer = h.replace("\"rtcell_tune\":1", "\"rtcell_tune\":9");
        assert!(State::parse(p, &format!("{newer}\n")).unwrap_err().to_string().contains("layout version 9"));
        assert!(matches!(State::load(Path::new("/nonexistent/x")), Err(TuneError::NoState { .. })));
    }
}
