//! The history database: opening it safely, recording runs, listing them, and reading one back.
//!
//! The file carries our SQLite `application_id` and a schema version (`user_version`). Before anything
//! is written, [`History::open`] checks the SQLite header bytes itself, then the application id, the
//! version and the tables: only a file that is new (absent, empty, or an SQLite database without any
//! table) is initialised; anything else that is not our history is refused and left byte for byte as it
//! was. Each run is recorded in one `BEGIN IMMEDIATE` transaction; with WAL mode and a busy timeout,
//! concurrent writers wait for each other instead of failing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};

use super::backend::{
    Columns, ENCODING, NewRun, PREFIX_LOOKUP, RUN_COLUMNS, RunSummary, SERIES_COLUMNS, Store, StoredDocument, sat_i64,
    series_from_row, summary_from_row,
};
use super::compare::SeriesFigures;
use super::{HistoryError, RunId};
use crate::doc::Results;

mod file;
use file::{check_header, identity, identity_snapshot, set_wal, sql};

/// Our mark in the SQLite header (`PRAGMA application_id`): "rtcH".
pub const APPLICATION_ID: i32 = 0x7274_6348;
/// Version of the tables below (`PRAGMA user_version`). Bump it, with a migration, on any change.
pub const SCHEMA_VERSION: i64 = 1;
/// How long a writer waits for another one before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

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

/// An open history database file (SQLite).
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
}

impl Store for History {
    fn path(&self) -> &Path {
        &self.path
    }

    fn record(&mut self, results: &Results, results_path: Option<&Path>) -> Result<RunId, HistoryError> {
        let run = NewRun::of(results, results_path, &self.path)?;
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
                run.recorded_at,
                run.hostname,
                results.host.cpu_model,
                results.host.kernel,
                results.host.hypervisor,
                run.suites_json,
                results.command,
                run.results_path,
                results.incomplete,
                results.rtcell.version,
                results.rtcell.git,
                run.headline,
            ],
        )
        .map_err(sql(&path, "record the run"))?;
        let seq = tx.last_insert_rowid();
        for suite in &run.suites {
            tx.execute("INSERT INTO run_suites (suite, run_seq) VALUES (?1, ?2)", params![suite, seq])
                .map_err(sql(&path, "record the run's suites"))?;
        }
        {
            let mut insert = tx
                .prepare(&format!(
                    "INSERT INTO series (run_seq, ord, {SERIES_COLUMNS}) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
                ))
                .map_err(sql(&path, "record the series"))?;
            for (ord, (s, labels)) in run.series.iter().enumerate() {
                insert
                    .execute(params![
                        seq,
                        ord as i64,
                        s.suite,
                        s.name,
                        labels,
                        s.unit,
                        s.kind,
                        sat_i64(s.count),
                        s.median,
                        s.p90,
                        s.p99,
                        s.p999,
                        s.max,
                        s.stddev,
                        sat_i64(s.errors),
                    ])
                    .map_err(sql(&path, "record the series"))?;
            }
        }
        tx.execute(
            "INSERT INTO documents (run_seq, schema, encoding, data) VALUES (?1, ?2, ?3, ?4)",
            params![seq, results.schema, ENCODING, run.document],
        )
        .map_err(sql(&path, "store the results document"))?;
        tx.commit().map_err(sql(&path, "commit the run"))?;
        Ok(id)
    }

    fn list(&self, limit: usize, suite: Option<&str>) -> Result<Vec<RunSummary>, HistoryError> {
        let q = format!(
            "SELECT {RUN_COLUMNS} FROM runs \
             WHERE ?1 IS NULL OR seq IN (SELECT run_seq FROM run_suites WHERE suite = ?1) \
             ORDER BY started_at DESC, seq DESC LIMIT ?2"
        );
        self.runs(&q, params![suite, sat_i64(limit as u64)], "list the runs")
    }

    fn count(&self, suite: Option<&str>) -> Result<u64, HistoryError> {
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

    fn nth_latest(&self, n: usize) -> Result<Option<RunSummary>, HistoryError> {
        let q = format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY started_at DESC, seq DESC LIMIT 1 OFFSET ?1");
        Ok(self.runs(&q, [sat_i64(n as u64)], "look up the run")?.pop())
    }

    fn with_prefix(&self, prefix: &str) -> Result<Vec<RunSummary>, HistoryError> {
        // Ids are made of [0-9a-z-], all below '~': [prefix, prefix + "~") is every id it starts.
        let q = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3");
        self.runs(&q, params![prefix, format!("{prefix}~"), PREFIX_LOOKUP], "look up the run")
    }

    fn series_rows(&self, run: &RunSummary) -> Result<Vec<(SeriesFigures, String)>, HistoryError> {
        let action = "read the run's series";
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {SERIES_COLUMNS} FROM series WHERE run_seq = ?1 ORDER BY ord"))
            .map_err(sql(&self.path, action))?;
        let rows = stmt.query_map([run.seq], |r| series_from_row(r)).map_err(sql(&self.path, action))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql(&self.path, action))
    }

    fn document_row(&self, run: &RunSummary) -> Result<StoredDocument, HistoryError> {
        self.conn
            .query_row("SELECT schema, encoding, data FROM documents WHERE run_seq = ?1", [run.seq], |r| {
                Ok(StoredDocument { schema: r.get(0)?, encoding: r.get(1)?, data: r.get(2)? })
            })
            .map_err(sql(&self.path, "read the stored document"))
    }
}

impl History {
    /// The run rows a query returns.
    fn runs(
        &self,
        q: &str,
        params: impl rusqlite::Params,
        action: &'static str,
    ) -> Result<Vec<RunSummary>, HistoryError> {
        let mut stmt = self.conn.prepare(q).map_err(sql(&self.path, action))?;
        let rows = stmt.query_map(params, |r| summary_from_row(r)).map_err(sql(&self.path, action))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql(&self.path, action))
    }
}

impl Columns for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }
    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }
    fn real(&self, i: usize) -> rusqlite::Result<f64> {
        self.get(i)
    }
    fn flag(&self, i: usize) -> rusqlite::Result<bool> {
        self.get(i)
    }
}
