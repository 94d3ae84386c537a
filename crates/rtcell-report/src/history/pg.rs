//! The run history in a shared PostgreSQL database (`--history postgres://user@host/db`), so the runs
//! of a fleet of machines can be listed and compared in one place.
//!
//! The same tables as the SQLite file, prefixed `rtcell_` (the database may hold other things), and a
//! `rtcell_meta` table with our mark and schema version. Before anything is written the database is
//! checked: tables of ours at a newer schema version, or an `rtcell_runs` table without our mark, are
//! refused and left as they are. The tables are created once, under a transaction-scoped advisory lock,
//! so machines starting at the same moment do not race; each run is recorded in one transaction.
//!
//! TLS to the database is not supported yet: a URL asking for it (`sslmode=require`, `verify-ca`,
//! `verify-full`) is refused rather than connected in clear.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use postgres::{Client, NoTls};

use super::backend::{
    Columns, ENCODING, NewRun, PREFIX_LOOKUP, RUN_COLUMNS, RunSummary, SERIES_COLUMNS, Store, StoredDocument, sat_i64,
    series_from_row, summary_from_row,
};
use super::compare::SeriesFigures;
use super::{HistoryError, RunId};
use crate::doc::Results;

/// Our mark in `rtcell_meta`.
const APPLICATION: &str = "rtcell-history";
/// Version of the tables below. Bump it, with a migration, on any change.
pub const SCHEMA_VERSION: i64 = 1;
/// Key of the advisory lock taken while the tables are created ("rtcH").
const LOCK_KEY: i64 = 0x7274_6348;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA_SQL: &str = "
CREATE TABLE rtcell_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE rtcell_runs (
    seq BIGSERIAL PRIMARY KEY,
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
    incomplete BOOLEAN NOT NULL,
    rtcell_version TEXT NOT NULL,
    git TEXT,
    headline TEXT NOT NULL
);
CREATE INDEX rtcell_runs_by_start ON rtcell_runs (started_at, seq);
CREATE TABLE rtcell_run_suites (
    suite TEXT NOT NULL,
    run_seq BIGINT NOT NULL REFERENCES rtcell_runs (seq),
    PRIMARY KEY (suite, run_seq)
);
CREATE TABLE rtcell_series (
    run_seq BIGINT NOT NULL REFERENCES rtcell_runs (seq),
    ord BIGINT NOT NULL,
    suite TEXT NOT NULL,
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    unit TEXT NOT NULL,
    kind TEXT NOT NULL,
    count BIGINT NOT NULL,
    median DOUBLE PRECISION NOT NULL,
    p90 DOUBLE PRECISION NOT NULL,
    p99 DOUBLE PRECISION NOT NULL,
    p999 DOUBLE PRECISION NOT NULL,
    max DOUBLE PRECISION NOT NULL,
    stddev DOUBLE PRECISION NOT NULL,
    errors BIGINT NOT NULL,
    PRIMARY KEY (run_seq, ord)
);
CREATE INDEX rtcell_series_by_key ON rtcell_series (suite, name, labels);
CREATE TABLE rtcell_documents (
    run_seq BIGINT PRIMARY KEY REFERENCES rtcell_runs (seq),
    schema TEXT NOT NULL,
    encoding TEXT NOT NULL,
    data BYTEA NOT NULL
);
";

/// Whether a history location is a PostgreSQL URL.
pub fn is_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// The URL without its password, for every message.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((a, h)) => (a, h),
        None => return url.to_owned(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// An open history in PostgreSQL.
pub struct PgHistory {
    client: RefCell<Client>,
    /// The redacted URL, standing for the history in messages.
    shown: PathBuf,
}

fn pg(shown: &Path, action: &'static str) -> impl FnOnce(postgres::Error) -> HistoryError {
    let shown = shown.to_owned();
    move |source| HistoryError::Postgres { url: shown.display().to_string(), action, source }
}

impl PgHistory {
    /// Connects; with `create`, makes the tables if the database has none of ours.
    pub fn open(url: &str, create: bool) -> Result<PgHistory, HistoryError> {
        let shown = PathBuf::from(redact(url));
        let lower = url.to_ascii_lowercase();
        if ["sslmode=require", "sslmode=verify-ca", "sslmode=verify-full"].iter().any(|m| lower.contains(m)) {
            return Err(HistoryError::PgUnsupported {
                url: shown.display().to_string(),
                why: "TLS to the database is not supported yet; use a connection the network already protects \
                      (a Unix socket, loopback, a VPN) and sslmode=disable or prefer"
                    .into(),
            });
        }
        let mut config: postgres::Config = url.parse().map_err(pg(&shown, "read the URL"))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("rtcell");
        }
        let mut client = config.connect(NoTls).map_err(pg(&shown, "connect"))?;
        let mut tx = client.transaction().map_err(pg(&shown, "start a transaction"))?;
        if create {
            // Serialises the first use by several machines: the check and the creation under one lock.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).map_err(pg(&shown, "lock the tables"))?;
        }
        match identity(&mut tx, &shown)? {
            Some(()) => {}
            None if create => {
                tx.batch_execute(SCHEMA_SQL).map_err(pg(&shown, "create the tables"))?;
                tx.execute(
                    "INSERT INTO rtcell_meta (key, value) VALUES ('application', $1), ('schema_version', $2)",
                    &[&APPLICATION, &SCHEMA_VERSION.to_string()],
                )
                .map_err(pg(&shown, "mark the tables"))?;
            }
            None => {}
        }
        tx.commit().map_err(pg(&shown, "commit"))?;
        Ok(PgHistory { client: RefCell::new(client), shown })
    }

    fn has_tables(&self) -> Result<bool, HistoryError> {
        let row = self
            .client
            .borrow_mut()
            .query_one("SELECT to_regclass('rtcell_runs') IS NOT NULL", &[])
            .map_err(pg(&self.shown, "look for the tables"))?;
        Ok(row.get(0))
    }

    /// The run rows a query returns; none while the database has no tables of ours.
    fn runs(
        &self,
        q: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
        action: &'static str,
    ) -> Result<Vec<RunSummary>, HistoryError> {
        if !self.has_tables()? {
            return Ok(Vec::new());
        }
        let rows = self.client.borrow_mut().query(q, params).map_err(pg(&self.shown, action))?;
        rows.iter().map(|r| summary_from_row(r).map_err(pg(&self.shown, action))).collect()
    }
}

impl Store for PgHistory {
    fn path(&self) -> &Path {
        &self.shown
    }

    fn record(&mut self, results: &Results, results_path: Option<&Path>) -> Result<RunId, HistoryError> {
        let n = NewRun::of(results, results_path, &self.shown)?;
        let shown = self.shown.clone();
        let mut client = self.client.borrow_mut();
        let mut tx = client.transaction().map_err(pg(&shown, "start a transaction"))?;
        let (id, seq) = loop {
            let id = RunId::generate(&results.started_at);
            let row = tx
                .query_opt(
                    "INSERT INTO rtcell_runs (id, started_at, recorded_at, hostname, cpu_model, kernel, hypervisor, \
                     suites, command, results_path, incomplete, rtcell_version, git, headline) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
                     ON CONFLICT (id) DO NOTHING RETURNING seq",
                    &[
                        &id.as_str(),
                        &results.started_at,
                        &n.recorded_at,
                        &n.hostname,
                        &results.host.cpu_model,
                        &results.host.kernel,
                        &results.host.hypervisor,
                        &n.suites_json,
                        &results.command,
                        &n.results_path,
                        &results.incomplete,
                        &results.rtcell.version,
                        &results.rtcell.git,
                        &n.headline,
                    ],
                )
                .map_err(pg(&shown, "record the run"))?;
            // An id already taken (another machine's run started the same second): draw another.
            if let Some(r) = row {
                break (id, r.get::<_, i64>(0));
            }
        };
        for suite in &n.suites {
            tx.execute("INSERT INTO rtcell_run_suites (suite, run_seq) VALUES ($1, $2)", &[suite, &seq])
                .map_err(pg(&shown, "record the run's suites"))?;
        }
        let insert = tx
            .prepare(&format!(
                "INSERT INTO rtcell_series (run_seq, ord, {SERIES_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
            ))
            .map_err(pg(&shown, "record the series"))?;
        for (ord, (s, labels)) in n.series.iter().enumerate() {
            tx.execute(
                &insert,
                &[
                    &seq,
                    &(ord as i64),
                    &s.suite,
                    &s.name,
                    labels,
                    &s.unit,
                    &s.kind,
                    &sat_i64(s.count),
                    &s.median,
                    &s.p90,
                    &s.p99,
                    &s.p999,
                    &s.max,
                    &s.stddev,
                    &sat_i64(s.errors),
                ],
            )
            .map_err(pg(&shown, "record the series"))?;
        }
        tx.execute(
            "INSERT INTO rtcell_documents (run_seq, schema, encoding, data) VALUES ($1, $2, $3, $4)",
            &[&seq, &results.schema, &ENCODING, &n.document],
        )
        .map_err(pg(&shown, "store the results document"))?;
        tx.commit().map_err(pg(&shown, "commit the run"))?;
        Ok(id)
    }

    fn list(&self, limit: usize, suite: Option<&str>) -> Result<Vec<RunSummary>, HistoryError> {
        let q = format!(
            "SELECT {RUN_COLUMNS} FROM rtcell_runs \
             WHERE $1::TEXT IS NULL OR seq IN (SELECT run_seq FROM rtcell_run_suites WHERE suite = $1) \
             ORDER BY started_at DESC, seq DESC LIMIT $2"
        );
        self.runs(&q, &[&suite, &sat_i64(limit as u64)], "list the runs")
    }

    fn count(&self, suite: Option<&str>) -> Result<u64, HistoryError> {
        if !self.has_tables()? {
            return Ok(0);
        }
        let row = self
            .client
            .borrow_mut()
            .query_one(
                "SELECT count(*) FROM rtcell_runs \
                 WHERE $1::TEXT IS NULL OR seq IN (SELECT run_seq FROM rtcell_run_suites WHERE suite = $1)",
                &[&suite],
            )
            .map_err(pg(&self.shown, "count the runs"))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    fn nth_latest(&self, n: usize) -> Result<Option<RunSummary>, HistoryError> {
        let q = format!("SELECT {RUN_COLUMNS} FROM rtcell_runs ORDER BY started_at DESC, seq DESC LIMIT 1 OFFSET $1");
        Ok(self.runs(&q, &[&sat_i64(n as u64)], "look up the run")?.pop())
    }

    fn with_prefix(&self, prefix: &str) -> Result<Vec<RunSummary>, HistoryError> {
        // Ids are made of [0-9a-z-], all below '~': [prefix, prefix + "~") is every id it starts.
        let q = format!("SELECT {RUN_COLUMNS} FROM rtcell_runs WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3");
        self.runs(&q, &[&prefix, &format!("{prefix}~"), &PREFIX_LOOKUP], "look up the run")
    }

    fn series_rows(&self, run: &RunSummary) -> Result<Vec<(SeriesFigures, String)>, HistoryError> {
        let action = "read the run's series";
        let rows = self
            .client
            .borrow_mut()
            .query(&format!("SELECT {SERIES_COLUMNS} FROM rtcell_series WHERE run_seq = $1 ORDER BY ord"), &[&run.seq])
            .map_err(pg(&self.shown, action))?;
        rows.iter().map(|r| series_from_row(r).map_err(pg(&self.shown, action))).collect()
    }

    fn document_row(&self, run: &RunSummary) -> Result<StoredDocument, HistoryError> {
        let row = self
            .client
            .borrow_mut()
            .query_one("SELECT schema, encoding, data FROM rtcell_documents WHERE run_seq = $1", &[&run.seq])
            .map_err(pg(&self.shown, "read the stored document"))?;
        let doc = (|| -> Result<StoredDocument, postgres::Error> {
            Ok(StoredDocument { schema: row.try_get(0)?, encoding: row.try_get(1)?, data: row.try_get(2)? })
        })();
        doc.map_err(pg(&self.shown, "read the stored document"))
    }
}

/// `Some` when the tables are ours at our version, `None` when there are none of ours; refuses the rest.
fn identity(tx: &mut postgres::Transaction<'_>, shown: &Path) -> Result<Option<()>, HistoryError> {
    let url = shown.display().to_string();
    let row = tx
        .query_one("SELECT to_regclass('rtcell_meta') IS NOT NULL, to_regclass('rtcell_runs') IS NOT NULL", &[])
        .map_err(pg(shown, "look for the tables"))?;
    let (meta, runs): (bool, bool) = (row.get(0), row.get(1));
    if !meta {
        if runs {
            return Err(HistoryError::PgForeign { url, detail: "an rtcell_runs table without rtcell_meta".into() });
        }
        return Ok(None);
    }
    let rows = tx.query("SELECT key, value FROM rtcell_meta", &[]).map_err(pg(shown, "read rtcell_meta"))?;
    let get = |k: &str| rows.iter().find(|r| r.get::<_, String>(0) == k).map(|r| r.get::<_, String>(1));
    if get("application").as_deref() != Some(APPLICATION) {
        return Err(HistoryError::PgForeign {
            url,
            detail: format!("rtcell_meta says application {:?}", get("application")),
        });
    }
    match get("schema_version").and_then(|v| v.parse::<i64>().ok()) {
        Some(SCHEMA_VERSION) => Ok(Some(())),
        Some(v) if v > SCHEMA_VERSION => {
            Err(HistoryError::NewerSchema { path: shown.to_owned(), found: v, supported: SCHEMA_VERSION })
        }
        v => Err(HistoryError::PgForeign { url, detail: format!("rtcell_meta holds schema version {v:?}") }),
    }
}

impl Columns for postgres::Row {
    type Error = postgres::Error;
    fn text(&self, i: usize) -> Result<String, postgres::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, postgres::Error> {
        self.try_get(i)
    }
    fn int(&self, i: usize) -> Result<i64, postgres::Error> {
        self.try_get(i)
    }
    fn real(&self, i: usize) -> Result<f64, postgres::Error> {
        self.try_get(i)
    }
    fn flag(&self, i: usize) -> Result<bool, postgres::Error> {
        self.try_get(i)
    }
}
