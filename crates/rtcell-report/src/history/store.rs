//! The history database: opening it safely, recording runs, listing them, and reading one back.
//!
//! The file carries our SQLite `application_id` and a schema version (`user_version`). Before anything
//! is written, [`History::open`] checks the SQLite header bytes itself, then the application id, the
//! version and the tables: only a file that is new (absent, empty, or an SQLite database without any
//! table) is initialised; anything else that is not our history is refused and left byte for byte as it
//! was. Each run is recorded in one `BEGIN IMMEDIATE` transaction; with WAL mode and a busy timeout,
//! concurrent writers wait for each other instead of failing.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;

use super::compare::{RunFigures, SeriesFigures};
use super::headline::{Headline, headlines};
use super::{HistoryError, RunId, RunRef};
use crate::doc::{RESULTS_FILE, Results, SCHEMA_ID};

mod file;
use file::{check_header, deflate, identity, identity_snapshot, inflate, sat_i64, set_wal, sql};

/// Our mark in the SQLite header (`PRAGMA application_id`): "rtcH".
pub const APPLICATION_ID: i32 = 0x7274_6348;
/// Version of the tables below (`PRAGMA user_version`). Bump it, with a migration, on any change.
pub const SCHEMA_VERSION: i64 = 1;
/// How long a writer waits for another one before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// How stored documents are encoded.
pub(super) const ENCODING: &str = "zlib";

const SCHEMA_SQL: &str = "
CREATE TABLE runs (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    started_at TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    hostname TEXT NOT NULL,
    cpu_model TEXT NOT NULL,
    kernel TEXT NOT NULL,
    hypervisor TEXT,
    suites TEXT NOT NULL,
    command TEXT,
    results_path TEXT,
    incomplete INTEGER NOT NULL,
    rtcell_version TEXT NOT NULL,
    git TEXT,
    headline TEXT NOT NULL
) STRICT;
CREATE INDEX runs_by_start ON runs (started_at, seq);
CREATE TABLE run_suites (
    suite TEXT NOT NULL,
    run_seq INTEGER NOT NULL REFERENCES runs (seq),
    PRIMARY KEY (suite, run_seq)
) STRICT, WITHOUT ROWID;
CREATE TABLE series (
    run_seq INTEGER NOT NULL REFERENCES runs (seq),
    ord INTEGER NOT NULL,
    suite TEXT NOT NULL,
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    unit TEXT NOT NULL,
    kind TEXT NOT NULL,
    count INTEGER NOT NULL,
    median REAL NOT NULL,
    p90 REAL NOT NULL,
    p99 REAL NOT NULL,
    p999 REAL NOT NULL,
    max REAL NOT NULL,
    stddev REAL NOT NULL,
    errors INTEGER NOT NULL,
    PRIMARY KEY (run_seq, ord)
) STRICT, WITHOUT ROWID;
CREATE INDEX series_by_key ON series (suite, name, labels);
CREATE TABLE documents (
    run_seq INTEGER PRIMARY KEY REFERENCES runs (seq),
    schema TEXT NOT NULL,
    encoding TEXT NOT NULL,
    data BLOB NOT NULL
) STRICT;
";

const RUN_COLUMNS: &str = "seq, id, started_at, recorded_at, hostname, cpu_model, kernel, hypervisor, suites, \
                           command, results_path, incomplete, rtcell_version, git, headline";

/// A recorded run, as `rtcell history` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub id: String,
    /// When the run started (RFC 3339, UTC), from its results document.
    pub started_at: String,
    pub recorded_at: String,
    pub hostname: String,
    pub cpu_model: String,
    pub kernel: String,
    /// The hypervisor the run ran under; `None` on bare metal.
    pub hypervisor: Option<String>,
    pub suites: Vec<String>,
    pub command: Option<String>,
    /// Where its results.json was written (it may since have been deleted: the history keeps a copy).
    pub results_path: Option<String>,
    pub incomplete: bool,
    pub rtcell_version: String,
    pub git: Option<String>,
    pub headline: Vec<Headline>,
    #[serde(skip)]
    pub(super) seq: i64,
}

/// An open history database.
pub struct History {
    conn: Connection,
    path: PathBuf,
}

/// What the file at the path is.
enum Identity {
    /// No tables, no mark: ours to initialise.
    New,
    Ours,
}

impl History {
    /// Opens the history at `path` for recording, creating the file (and its directory) if needed.
    pub fn open(path: &Path) -> Result<History, HistoryError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| HistoryError::Io {
                action: "create the history's directory",
                path: dir.to_owned(),
                source,
            })?;
        }
        check_header(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(sql(path, "open the database"))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql(path, "set the busy timeout"))?;
        if let Identity::New = identity_snapshot(&conn, path)? {
            // Switch to WAL before the first table exists; a concurrent opener may hold the file, in which
            // case the switch happens on a later open (rollback journaling is just as safe, only slower).
            let _ = set_wal(&conn);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql(path, "lock the database"))?;
            // Checked again under the lock: another process may have initialised the file meanwhile.
            if let Identity::New = identity(&tx, path)? {
                tx.execute_batch(SCHEMA_SQL).map_err(sql(path, "create the tables"))?;
                tx.pragma_update(None, "application_id", APPLICATION_ID).map_err(sql(path, "mark the database"))?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(sql(path, "mark the database"))?;
            }
            tx.commit().map_err(sql(path, "create the tables"))?;
        }
        if set_wal(&conn) {
            // In WAL mode NORMAL keeps the database consistent through a crash; only the last commits before
            // a power loss may be lost, which a benchmark history can afford for much faster recording.
            conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql(path, "set synchronous mode"))?;
        }
        Ok(History { conn, path: path.to_owned() })
    }

    /// Opens the history at `path` for reading. Creates nothing: where there is no file yet, the history
    /// is empty.
    pub fn open_read(path: &Path) -> Result<History, HistoryError> {
        if !check_header(path)? {
            return History::empty(path);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match Connection::open_with_flags(path, flags) {
            Ok(c) => c,
            // Without write permission a read-only connection still reads.
            Err(_) => {
                Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                    .map_err(sql(path, "open the database"))?
            }
        };
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql(path, "set the busy timeout"))?;
        match identity_snapshot(&conn, path)? {
            Identity::Ours => Ok(History { conn, path: path.to_owned() }),
            Identity::New => History::empty(path),
        }
    }

    /// An empty history in memory, standing for a file not written yet.
    fn empty(path: &Path) -> Result<History, HistoryError> {
        let conn = Connection::open_in_memory().map_err(sql(path, "open an empty history"))?;
        conn.execute_batch(SCHEMA_SQL).map_err(sql(path, "open an empty history"))?;
        Ok(History { conn, path: path.to_owned() })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a run: its document (stored whole), host, headlines and per-series figures. Returns the
    /// run's new id. `results_path` is where its results.json was written.
    pub fn record(&mut self, results: &Results, results_path: Option<&Path>) -> Result<RunId, HistoryError> {
        let NewRun { document, suites, suites_json, headline, results_path, recorded_at } =
            NewRun::of(results, results_path, &self.path)?;
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql(&path, "lock the database"))?;
        let id = loop {
            let id = RunId::generate(&results.started_at);
            let taken = tx
                .query_row("SELECT 1 FROM runs WHERE id = ?1", [id.as_str()], |_| Ok(()))
                .optional()
                .map_err(sql(&path, "look up run ids"))?;
            if taken.is_none() {
                break id;
            }
        };
        tx.execute(
            "INSERT INTO runs (id, started_at, recorded_at, hostname, cpu_model, kernel, hypervisor, suites, command, \
             results_path, incomplete, rtcell_version, git, headline) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            params![
                id.as_str(),
                results.started_at,
                recorded_at,
                rtcell_host::facts::hostname(),
                results.host.cpu_model,
                results.host.kernel,
                results.host.hypervisor,
                suites_json,
                results.command,
                results_path,
                results.incomplete,
                results.rtcell.version,
                results.rtcell.git,
                headline,
            ],
        )
        .map_err(sql(&path, "record the run"))?;
        let seq = tx.last_insert_rowid();
        for suite in &suites {
            tx.execute("INSERT INTO run_suites (suite, run_seq) VALUES (?1, ?2)", params![suite, seq])
                .map_err(sql(&path, "record the run's suites"))?;
        }
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO series (run_seq, ord, suite, name, labels, unit, kind, count, median, p90, p99, \
                     p999, max, stddev, errors) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                )
                .map_err(sql(&path, "record the series"))?;
            let all = results.suites.iter().flat_map(|su| su.series.iter().map(move |s| (su, s)));
            for (ord, (suite, s)) in all.enumerate() {
                let labels = serde_json::to_string(&s.labels).unwrap_or_else(|_| "{}".into());
                insert
                    .execute(params![
                        seq,
                        ord as i64,
                        suite.suite,
                        s.name,
                        labels,
                        s.unit.as_str(),
                        s.kind.as_str(),
                        sat_i64(s.stats.count),
                        s.stats.median,
                        s.stats.p90,
                        s.stats.p99,
                        s.stats.p999,
                        s.stats.max,
                        s.stats.stddev,
                        sat_i64(s.errors),
                    ])
                    .map_err(sql(&path, "record the series"))?;
            }
        }
        tx.execute(
            "INSERT INTO documents (run_seq, schema, encoding, data) VALUES (?1, ?2, ?3, ?4)",
            params![seq, results.schema, ENCODING, document],
        )
        .map_err(sql(&path, "store the results document"))?;
        tx.commit().map_err(sql(&path, "commit the run"))?;
        Ok(id)
    }

    /// The most recent runs first (by start time), at most `limit`, only those with `suite` if given.
    pub fn list(&self, limit: usize, suite: Option<&str>) -> Result<Vec<RunSummary>, HistoryError> {
        let q = format!(
            "SELECT {RUN_COLUMNS} FROM runs \
             WHERE ?1 IS NULL OR seq IN (SELECT run_seq FROM run_suites WHERE suite = ?1) \
             ORDER BY started_at DESC, seq DESC LIMIT ?2"
        );
        let mut stmt = self.conn.prepare(&q).map_err(sql(&self.path, "list the runs"))?;
        let rows = stmt
            .query_map(params![suite, sat_i64(limit as u64)], summary_from_row)
            .map_err(sql(&self.path, "list the runs"))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql(&self.path, "list the runs"))
    }

    /// How many runs are recorded (with `suite`, if given).
    pub fn count(&self, suite: Option<&str>) -> Result<u64, HistoryError> {
        self.conn
            .query_row(
                "SELECT count(*) FROM runs \
                 WHERE ?1 IS NULL OR seq IN (SELECT run_seq FROM run_suites WHERE suite = ?1)",
                [suite],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
            .map_err(sql(&self.path, "count the runs"))
    }

    /// The run that `given` names: `latest`, `latest~N`, an id or a unique prefix of one.
    pub fn find(&self, given: &str) -> Result<RunSummary, HistoryError> {
        match RunRef::parse(given)? {
            RunRef::Latest(n) => {
                let q = format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY started_at DESC, seq DESC LIMIT 1 OFFSET ?1");
                let found = self
                    .conn
                    .query_row(&q, [sat_i64(n as u64)], summary_from_row)
                    .optional()
                    .map_err(sql(&self.path, "look up the run"))?;
                match found {
                    Some(r) => Ok(r),
                    None => Err(HistoryError::NotThatManyRuns {
                        given: given.to_owned(),
                        have: self.count(None)?,
                        path: self.path.clone(),
                    }),
                }
            }
            RunRef::Id(prefix) => {
                // Ids are made of [0-9a-z-], all below '~': [prefix, prefix + "~") is every id it starts.
                let q = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 6");
                let mut stmt = self.conn.prepare(&q).map_err(sql(&self.path, "look up the run"))?;
                let found: Vec<RunSummary> = stmt
                    .query_map(params![prefix, format!("{prefix}~")], summary_from_row)
                    .and_then(|rows| rows.collect())
                    .map_err(sql(&self.path, "look up the run"))?;
                pick(given, &prefix, found, &self.path)
            }
            RunRef::Path(p) => Err(HistoryError::BadRunRef {
                given: p.display().to_string(),
                why: "a path names a results.json, not a recorded run".to_owned(),
            }),
        }
    }

    /// The figures of a run for a comparison: a recorded run (`latest`, `latest~N`, id, prefix) from the
    /// history's series table, or a results.json (or the directory holding one) read from disk.
    pub fn figures(&self, given: &str) -> Result<RunFigures, HistoryError> {
        if let RunRef::Path(p) = RunRef::parse(given)? {
            return figures_of_file(&p);
        }
        let run = self.find(given)?;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT suite, name, labels, unit, kind, count, median, p90, p99, p999, max, stddev, errors \
                 FROM series WHERE run_seq = ?1 ORDER BY ord",
            )
            .map_err(sql(&self.path, "read the run's series"))?;
        let rows = stmt
            .query_map([run.seq], |r| {
                Ok((
                    SeriesFigures {
                        suite: r.get(0)?,
                        name: r.get(1)?,
                        labels: Default::default(),
                        unit: r.get(3)?,
                        kind: r.get(4)?,
                        count: r.get::<_, i64>(5)?.max(0) as u64,
                        median: r.get(6)?,
                        p90: r.get(7)?,
                        p99: r.get(8)?,
                        p999: r.get(9)?,
                        max: r.get(10)?,
                        stddev: r.get(11)?,
                        errors: r.get::<_, i64>(12)?.max(0) as u64,
                    },
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(sql(&self.path, "read the run's series"))?;
        let rows = rows.collect::<Result<Vec<_>, _>>().map_err(sql(&self.path, "read the run's series"))?;
        run_figures(run, rows, &self.path)
    }

    /// The stored results document of a run, as the text of its results.json (byte for byte).
    pub fn document_text(&self, given: &str) -> Result<(RunSummary, String), HistoryError> {
        let run = self.find(given)?;
        let (schema, encoding, data): (String, String, Vec<u8>) = self
            .conn
            .query_row("SELECT schema, encoding, data FROM documents WHERE run_seq = ?1", [run.seq], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(sql(&self.path, "read the stored document"))?;
        let text = decode_document(&run, &schema, &encoding, &data, &self.path)?;
        Ok((run, text))
    }

    /// The stored results document of a run, read with the same schema check as [`Results::load`].
    pub fn results(&self, given: &str) -> Result<Results, HistoryError> {
        let (run, text) = self.document_text(given)?;
        serde_json::from_str(&text).map_err(|e| HistoryError::BadStoredDocument {
            id: run.id,
            why: format!("does not follow {SCHEMA_ID} ({e})"),
            path: self.path.clone(),
        })
    }
}

/// The figures of a results.json on disk (a directory means the results.json in it), read with the
/// schema check of [`Results::load`].
pub fn figures_of_file(p: &Path) -> Result<RunFigures, HistoryError> {
    let file = if p.is_dir() { p.join(RESULTS_FILE) } else { p.to_owned() };
    let results = Results::load(&file)?;
    Ok(RunFigures::from_results(file.display().to_string(), &results))
}

/// What recording a run stores besides its rows' ids: the same for every backend.
pub(super) struct NewRun {
    /// The results document, deflate-compressed.
    pub document: Vec<u8>,
    /// Sorted, without repeats.
    pub suites: Vec<String>,
    /// In the document's order, as JSON.
    pub suites_json: String,
    pub headline: String,
    pub results_path: Option<String>,
    pub recorded_at: String,
}

impl NewRun {
    pub fn of(results: &Results, results_path: Option<&Path>, history: &Path) -> Result<NewRun, HistoryError> {
        let mut text = results.to_json_pretty()?;
        text.push('\n');
        let document = deflate(text.as_bytes()).map_err(|source| HistoryError::Io {
            action: "compress the results document for",
            path: history.to_owned(),
            source,
        })?;
        let mut suites: Vec<String> = results.suites.iter().map(|s| s.suite.clone()).collect();
        let headline = serde_json::to_string(&headlines(&results.suites)).unwrap_or_else(|_| "[]".into());
        let suites_json = serde_json::to_string(&suites).unwrap_or_else(|_| "[]".into());
        suites.sort();
        suites.dedup();
        // Canonical (sorted, absolute) so the path still means the same file from another directory.
        let results_path =
            results_path.map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned()).display().to_string());
        let recorded_at = crate::doc::rfc3339_utc(std::time::SystemTime::now());
        Ok(NewRun { document, suites, suites_json, headline, results_path, recorded_at })
    }
}

/// The run among those whose ids start with `prefix` (at most 6 looked up): the exact id, the only one,
/// or an error listing the candidates.
pub(super) fn pick(
    given: &str,
    prefix: &str,
    mut found: Vec<RunSummary>,
    history: &Path,
) -> Result<RunSummary, HistoryError> {
    if let Some(exact) = found.iter().position(|r| r.id == prefix) {
        return Ok(found.swap_remove(exact));
    }
    match found.len() {
        0 => Err(HistoryError::UnknownRun { given: given.to_owned(), path: history.to_owned() }),
        1 => Ok(found.remove(0)),
        n => {
            let mut candidates: Vec<String> = found.into_iter().take(5).map(|r| r.id).collect();
            if n > 5 {
                candidates.push("...".into());
            }
            Err(HistoryError::AmbiguousRun { given: given.to_owned(), candidates })
        }
    }
}

/// A run's figures from its stored series rows (figures, labels as JSON).
pub(super) fn run_figures(
    run: RunSummary,
    rows: Vec<(SeriesFigures, String)>,
    history: &Path,
) -> Result<RunFigures, HistoryError> {
    let mut series = Vec::new();
    for (mut s, labels) in rows {
        s.labels = serde_json::from_str(&labels).map_err(|e| HistoryError::BadStoredDocument {
            id: run.id.clone(),
            why: format!("has series labels that are not a JSON object of strings ({e})"),
            path: history.to_owned(),
        })?;
        series.push(s);
    }
    Ok(RunFigures {
        name: run.id,
        started_at: run.started_at,
        hostname: Some(run.hostname),
        cpu_model: run.cpu_model,
        hypervisor: run.hypervisor,
        suites: run.suites,
        incomplete: run.incomplete,
        series,
    })
}

/// The text of a stored document, checked: our encoding, our schema.
pub(super) fn decode_document(
    run: &RunSummary,
    schema: &str,
    encoding: &str,
    data: &[u8],
    history: &Path,
) -> Result<String, HistoryError> {
    let bad = |why: String| HistoryError::BadStoredDocument { id: run.id.clone(), why, path: history.to_owned() };
    if encoding != ENCODING {
        return Err(bad(format!("is encoded as {encoding:?}, which this rtcell does not read")));
    }
    let text = inflate(data).map_err(|e| bad(format!("does not decompress ({e})")))?;
    if schema != SCHEMA_ID {
        return Err(bad(format!("is schema {schema:?}; this rtcell reads only {SCHEMA_ID:?}")));
    }
    Ok(text)
}

fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunSummary> {
    // Both JSON columns are written by `record` from typed values; text that does not parse (a damaged
    // row) shows as nothing rather than hiding the whole history.
    let suites: String = r.get(8)?;
    let headline: String = r.get(14)?;
    Ok(RunSummary {
        seq: r.get(0)?,
        id: r.get(1)?,
        started_at: r.get(2)?,
        recorded_at: r.get(3)?,
        hostname: r.get(4)?,
        cpu_model: r.get(5)?,
        kernel: r.get(6)?,
        hypervisor: r.get(7)?,
        suites: serde_json::from_str(&suites).unwrap_or_default(),
        command: r.get(9)?,
        results_path: r.get(10)?,
        incomplete: r.get(11)?,
        rtcell_version: r.get(12)?,
        git: r.get(13)?,
        headline: serde_json::from_str(&headline).unwrap_or_default(),
    })
}
