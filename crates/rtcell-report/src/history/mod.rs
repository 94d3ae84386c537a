//! The run history: every `rtcell bench` and `rtcell run` is recorded in an SQLite database, so runs can
//! be listed (`rtcell history`) and compared (`rtcell compare`) long after their directories are gone.
//!
//! Where it lives: `--history PATH` if given, else `$RTCELL_HOME/history.sqlite`, else
//! `$XDG_DATA_HOME/rtcell/history.sqlite`, else `~/.local/share/rtcell/history.sqlite` ([`location`]).
//!
//! Where it is kept: an SQLite file ([`store`]) or a PostgreSQL database ([`pg`]), both behind the
//! [`Store`] trait ([`backend`]), opened with [`open`] or [`open_read`].
//!
//! What a run keeps: its id ([`RunId`], e.g. `20261122-064300-k3xq`: the run's start in UTC
//! and four random letters), times, host (hostname, CPU model, kernel, hypervisor), suites, command line,
//! the path of its results.json, the whole document (deflate-compressed), a headline per suite
//! ([`headline`]), and per series the figures [`compare`] needs, in a table indexed by run.
//!
//! The file is checked before anything is written to it: a file that is not SQLite, an SQLite database of
//! another application, or a history of a newer schema version is refused with an error naming the file
//! and nothing in it changes. Writers take the database lock for their whole transaction (WAL mode, a busy
//! timeout), so runs recorded at the same moment by several processes are all kept.

pub mod backend;
pub mod compare;
pub mod headline;
pub mod pg;
pub mod store;

use std::path::{Path, PathBuf};

pub use backend::{RunSummary, Store, StoredDocument, figures_of_file};
pub use compare::{Comparison, RunFigures, SeriesFigures, Verdict};
pub use headline::Headline;
pub use store::History;

/// File name of the database inside `$RTCELL_HOME` or the data directory.
pub const DB_FILE: &str = "history.sqlite";

/// Environment variable naming a directory that holds the history (and overrides the XDG location).
pub const HOME_ENV: &str = "RTCELL_HOME";

/// Environment variable naming the history (a file or a `postgres://` URL), below `--history` and above
/// every default.
pub const HISTORY_ENV: &str = "RTCELL_HISTORY";

/// The history to use: `explicit` (from `--history PATH|URL`) if given, else `$RTCELL_HISTORY`, else the
/// default file.
///
/// Fails only when no location can be derived at all (no `RTCELL_HOME`, `XDG_DATA_HOME` nor `HOME`).
pub fn location(explicit: Option<&Path>) -> Result<PathBuf, HistoryError> {
    if let Some(p) = explicit {
        return Ok(p.to_owned());
    }
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(h) = var(HISTORY_ENV) {
        return Ok(h);
    }
    if let Some(home) = var(HOME_ENV) {
        return Ok(home.join(DB_FILE));
    }
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(data) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Ok(data.join("rtcell").join(DB_FILE));
    }
    if let Some(home) = var("HOME") {
        return Ok(home.join(".local/share/rtcell").join(DB_FILE));
    }
    Err(HistoryError::NoLocation)
}

/// A run's id: `YYYYMMDD-HHMMSS-xxxx`, the run's start in UTC and four random characters from an
/// alphabet without look-alikes (no 0/o, 1/l/i), so it can be read aloud and typed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct RunId(pub String);

/// Characters of an id's random part.
const ID_ALPHABET: &[u8] = b"23456789abcdefghjkmnpqrstuvwxyz";

impl RunId {
    /// A fresh id for a run that started at `started_at` (RFC 3339, as in the results document); the
    /// current time when that does not parse.
    pub fn generate(started_at: &str) -> RunId {
        let stamp = id_stamp(started_at)
            .unwrap_or_else(|| id_stamp(&crate::doc::rfc3339_utc(std::time::SystemTime::now())).unwrap_or_default());
        let suffix: String =
            (0..4).map(|_| char::from(ID_ALPHABET[rand::random_range(0..ID_ALPHABET.len())])).collect();
        RunId(format!("{stamp}-{suffix}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for text that can be (a prefix of) an id: lower-case letters, digits and `-`.
    pub fn could_prefix(s: &str) -> bool {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `2026-11-22T06:43:00.123Z` -> `20261122-064300`.
fn id_stamp(rfc3339: &str) -> Option<String> {
    let b = rfc3339.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        let s = rfc3339.get(r)?;
        s.bytes().all(|c| c.is_ascii_digit()).then_some(s)
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    Some(format!(
        "{}{}{}-{}{}{}",
        digits(0..4)?,
        digits(5..7)?,
        digits(8..10)?,
        digits(11..13)?,
        digits(14..16)?,
        digits(17..19)?
    ))
}

/// How a command line names a run: `latest`, `latest~N`, an id or a unique prefix of one, or a path to a
/// results.json (or to the directory holding it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunRef {
    /// The N-th run before the latest (0 = the latest), in order of start time.
    Latest(usize),
    /// An id or a prefix of one.
    Id(String),
    /// A results document on disk.
    Path(PathBuf),
}

impl RunRef {
    /// Reads a run reference. Text that contains `/`, ends in `.json` or names an existing file or
    /// directory (and is not id-like) is a path; `latest~N` needs a number.
    pub fn parse(s: &str) -> Result<RunRef, HistoryError> {
        if s == "latest" {
            return Ok(RunRef::Latest(0));
        }
        if let Some(n) = s.strip_prefix("latest~") {
            return n.parse().map(RunRef::Latest).map_err(|_| HistoryError::BadRunRef {
                given: s.to_owned(),
                why: format!(
                    "{n:?} after `latest~` is not a number; write e.g. latest~1 for the run before the latest"
                ),
            });
        }
        let path = Path::new(s);
        if s.contains('/') || s.ends_with(".json") || (!RunId::could_prefix(s) && path.exists()) {
            return Ok(RunRef::Path(path.to_owned()));
        }
        if RunId::could_prefix(s) {
            return Ok(RunRef::Id(s.to_owned()));
        }
        Err(HistoryError::BadRunRef {
            given: s.to_owned(),
            why: "it is not a run id (e.g. 20261122-064300-k3xq, or a unique prefix of one), `latest`, \
                  `latest~N`, or the path of a results.json"
                .to_owned(),
        })
    }
}

/// Anything that can go wrong with the history. [`HistoryError::is_usage`] tells a caller which of them
/// are the user's input (a wrong file or run name) rather than a failure of the system.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error(
        "no place for the run history: none of {HOME_ENV}, XDG_DATA_HOME or HOME is set; \
         set {HOME_ENV}=DIR or give --history PATH"
    )]
    NoLocation,

    #[error("could not {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{} is not an SQLite database (its first bytes are not the SQLite header), so it is not an rtcell \
         history; it was left untouched: give another file with --history PATH (or {HOME_ENV}=DIR), or move \
         this one away",
        path.display()
    )]
    NotSqlite { path: PathBuf },

    #[error(
        "{} is an SQLite database of another application ({detail}), not an rtcell history; it was left \
         untouched: give another file with --history PATH (or {HOME_ENV}=DIR)",
        path.display()
    )]
    Foreign { path: PathBuf, detail: String },

    #[error(
        "{} is an rtcell history of schema version {found}, newer than this rtcell reads (version {supported}); \
         it was left untouched: use the newer rtcell that wrote it, or another file with --history PATH",
        path.display()
    )]
    NewerSchema { path: PathBuf, found: i64, supported: i64 },

    #[error(
        "{} is damaged or unreadable as SQLite ({source}); it was left untouched: move it away (a new history \
         starts in its place) or give another file with --history PATH",
        path.display()
    )]
    Damaged {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error("history {}: could not {action}: {source}{}", path.display(), sqlite_hint(source))]
    Sqlite {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: rusqlite::Error,
    },

    #[error("{given:?} does not name a run: {why}")]
    BadRunRef { given: String, why: String },

    #[error(
        "no run {given:?} in the history {}: `rtcell history` lists the recorded runs and their ids",
        path.display()
    )]
    UnknownRun { given: String, path: PathBuf },

    #[error(
        "{given:?} is the start of {} run ids ({}); type more of the id to pick one",
        candidates.len(),
        candidates.join(", ")
    )]
    AmbiguousRun { given: String, candidates: Vec<String> },

    #[error(
        "{given:?}: the history {} holds {have} run(s), so there is no such run; `rtcell history` lists them",
        path.display()
    )]
    NotThatManyRuns { given: String, have: u64, path: PathBuf },

    #[error("run {id}: its stored results document {why}; the history {} may be damaged", path.display())]
    BadStoredDocument { id: String, why: String, path: PathBuf },

    #[error("history {url}: could not {action}: {}", pg_text(source))]
    Postgres {
        /// The URL without its password.
        url: String,
        action: &'static str,
        #[source]
        source: postgres::Error,
    },

    #[error(
        "{url} holds tables named like an rtcell history that are not one ({detail}); they were left \
         untouched: give another database with --history postgres://..."
    )]
    PgForeign { url: String, detail: String },

    #[error("history {url}: {why}")]
    PgUnsupported { url: String, why: String },

    #[error(transparent)]
    Results(#[from] crate::ReportError),
}

/// A PostgreSQL error with the server's message and the hint that helps most.
fn pg_text(e: &postgres::Error) -> String {
    let mut s = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut t = e.to_string();
            let mut cur = std::error::Error::source(e);
            while let Some(c) = cur {
                t.push_str(": ");
                t.push_str(&c.to_string());
                cur = c.source();
            }
            t
        }
    };
    if e.as_db_error().is_none() && (s.contains("connect") || s.contains("refused") || s.contains("timed out")) {
        s.push_str(
            " (is the server running and reachable, and the URL right? e.g. postgres://rtcell@db.example/rtcell)",
        );
    }
    s
}

/// Opens the history at `location` (a path or a `postgres://` URL) for recording, creating what is missing.
pub fn open(location: &Path) -> Result<Box<dyn Store>, HistoryError> {
    Ok(match location.to_str().filter(|l| pg::is_url(l)) {
        Some(url) => Box::new(pg::PgHistory::open(url, true)?),
        None => Box::new(History::open(location)?),
    })
}

/// Opens the history at `location` for reading; creates nothing.
pub fn open_read(location: &Path) -> Result<Box<dyn Store>, HistoryError> {
    Ok(match location.to_str().filter(|l| pg::is_url(l)) {
        Some(url) => Box::new(pg::PgHistory::open(url, false)?),
        None => Box::new(History::open_read(location)?),
    })
}

impl HistoryError {
    /// True when the error is about what the user gave (a file that is not a history, a run that does not
    /// exist, a document of another schema): a command line should exit with status 2.
    pub fn is_usage(&self) -> bool {
        use crate::ReportError as R;
        match self {
            HistoryError::NotSqlite { .. }
            | HistoryError::Foreign { .. }
            | HistoryError::NewerSchema { .. }
            | HistoryError::Damaged { .. }
            | HistoryError::BadRunRef { .. }
            | HistoryError::UnknownRun { .. }
            | HistoryError::AmbiguousRun { .. }
            | HistoryError::NotThatManyRuns { .. }
            | HistoryError::PgForeign { .. }
            | HistoryError::PgUnsupported { .. }
            | HistoryError::NoLocation => true,
            HistoryError::Results(r) => {
                matches!(r, R::NotJson { .. } | R::UnsupportedSchema { .. } | R::Malformed { .. })
                    || matches!(r, R::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
            }
            HistoryError::Io { .. }
            | HistoryError::Sqlite { .. }
            | HistoryError::Postgres { .. }
            | HistoryError::BadStoredDocument { .. } => false,
        }
    }
}

fn sqlite_hint(e: &rusqlite::Error) -> &'static str {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DatabaseBusy | C::DatabaseLocked) => " (another process held the database for too long; try again)",
        Some(C::ReadOnly | C::CannotOpen | C::PermissionDenied) => {
            " (this user may not write there: choose another file with --history PATH or fix the permissions)"
        }
        Some(C::DiskFull) => " (the disk is full)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_the_start_time_and_a_random_tail() {
        let id = RunId::generate("2026-11-22T06:43:00.123Z");
        assert!(id.0.starts_with("20261122-064300-"), "{id}");
        assert_eq!(id.0.len(), 20);
        assert!(RunId::could_prefix(id.as_str()));
        // A broken time falls back to now, still well-formed.
        let id = RunId::generate("yesterday");
        assert_eq!(id.0.len(), 20, "{id}");
        assert!(id_stamp(&id.0[..0]).is_none());
    }

    #[test]
    fn run_refs() {
        assert_eq!(RunRef::parse("latest").unwrap(), RunRef::Latest(0));
        assert_eq!(RunRef::parse("latest~3").unwrap(), RunRef::Latest(3));
        assert!(matches!(RunRef::parse("latest~x"), Err(HistoryError::BadRunRef { .. })));
        assert_eq!(RunRef::parse("20261122-06").unwrap(), RunRef::Id("20261122-06".into()));
        assert_eq!(RunRef::parse("out/results.json").unwrap(), RunRef::Path("out/results.json".into()));
        assert_eq!(RunRef::parse("r.json").unwrap(), RunRef::Path("r.json".into()));
        assert!(matches!(RunRef::parse("Not An Id"), Err(HistoryError::BadRunRef { .. })));
    }

    #[test]
    fn location_precedence() {
        // Only the explicit path is tested here: the environment is shared by the test threads.
        assert_eq!(location(Some(Path::new("x/h.sqlite"))).unwrap(), PathBuf::from("x/h.sqlite"));
    }
}
