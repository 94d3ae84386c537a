//! What the SQLite file and the PostgreSQL database share: the [`Store`] trait (a backend answers a few
//! queries; finding a run by reference, its figures and its document are written once, here), the mapping
//! between rows and [`RunSummary`] / [`SeriesFigures`] (through [`Columns`]), and the values a recorded run
//! stores ([`NewRun`]).

use std::io::{Read, Write};
use std::path::Path;

use serde::Serialize;

use super::compare::{RunFigures, SeriesFigures};
use super::headline::{Headline, headlines};
use super::{HistoryError, RunId, RunRef};
use crate::doc::{RESULTS_FILE, Results, SCHEMA_ID};

/// How stored documents are encoded.
pub(super) const ENCODING: &str = "zlib";

/// The columns of a run row, in this order, in both backends.
pub(super) const RUN_COLUMNS: &str = "seq, id, started_at, recorded_at, hostname, cpu_model, kernel, hypervisor, \
                                      suites, command, results_path, incomplete, rtcell_version, git, headline";

/// The columns of a series row, in this order, in both backends.
pub(super) const SERIES_COLUMNS: &str =
    "suite, name, labels, unit, kind, count, median, p90, p99, p999, max, stddev, errors";

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

/// A stored results document as its row holds it.
pub struct StoredDocument {
    pub schema: String,
    pub encoding: String,
    pub data: Vec<u8>,
}

/// An open history: the local SQLite file ([`super::History`]) or a shared PostgreSQL database
/// ([`super::pg::PgHistory`]). Open one with [`super::open`] or [`super::open_read`].
///
/// A backend answers the queries below; everything built on them is a provided method, the same for every
/// backend.
pub trait Store {
    /// The file, or the URL without its password.
    fn path(&self) -> &Path;

    /// Records a run: its document (stored whole), host, headlines and per-series figures. Returns the
    /// run's new id. `results_path` is where its results.json was written.
    fn record(&mut self, results: &Results, results_path: Option<&Path>) -> Result<RunId, HistoryError>;

    /// The most recent runs first (by start time), at most `limit`, only those with `suite` if given.
    fn list(&self, limit: usize, suite: Option<&str>) -> Result<Vec<RunSummary>, HistoryError>;

    /// How many runs are recorded (with `suite`, if given).
    fn count(&self, suite: Option<&str>) -> Result<u64, HistoryError>;

    /// The `n`-th most recent run (0: the latest), if there are that many.
    fn nth_latest(&self, n: usize) -> Result<Option<RunSummary>, HistoryError>;

    /// At most [`PREFIX_LOOKUP`] runs whose ids start with `prefix`, in id order.
    fn with_prefix(&self, prefix: &str) -> Result<Vec<RunSummary>, HistoryError>;

    /// A run's series rows in their recorded order: the figures, and the labels as stored (JSON).
    fn series_rows(&self, run: &RunSummary) -> Result<Vec<(SeriesFigures, String)>, HistoryError>;

    /// A run's stored document.
    fn document_row(&self, run: &RunSummary) -> Result<StoredDocument, HistoryError>;

    /// The run that `given` names: `latest`, `latest~N`, an id or a unique prefix of one.
    fn find(&self, given: &str) -> Result<RunSummary, HistoryError> {
        match RunRef::parse(given)? {
            RunRef::Latest(n) => match self.nth_latest(n)? {
                Some(r) => Ok(r),
                None => Err(HistoryError::NotThatManyRuns {
                    given: given.to_owned(),
                    have: self.count(None)?,
                    path: self.path().to_owned(),
                }),
            },
            RunRef::Id(prefix) => {
                let found = self.with_prefix(&prefix)?;
                pick(given, &prefix, found, self.path())
            }
            RunRef::Path(p) => Err(HistoryError::BadRunRef {
                given: p.display().to_string(),
                why: "a path names a results.json, not a recorded run".to_owned(),
            }),
        }
    }

    /// The figures of a run for a comparison: a recorded run (`latest`, `latest~N`, id, prefix) from the
    /// history's series table, or a results.json (or the directory holding one) read from disk.
    fn figures(&self, given: &str) -> Result<RunFigures, HistoryError> {
        if let RunRef::Path(p) = RunRef::parse(given)? {
            return figures_of_file(&p);
        }
        let run = self.find(given)?;
        let rows = self.series_rows(&run)?;
        run_figures(run, rows, self.path())
    }

    /// The stored results document of a run, as the text of its results.json (byte for byte).
    fn document_text(&self, given: &str) -> Result<(RunSummary, String), HistoryError> {
        let run = self.find(given)?;
        let doc = self.document_row(&run)?;
        let text = decode_document(&run, &doc, self.path())?;
        Ok((run, text))
    }

    /// The stored results document of a run, read with the same schema check as [`Results::load`].
    fn results(&self, given: &str) -> Result<Results, HistoryError> {
        let (run, text) = self.document_text(given)?;
        serde_json::from_str(&text).map_err(|e| HistoryError::BadStoredDocument {
            id: run.id,
            why: format!("does not follow {SCHEMA_ID} ({e})"),
            path: self.path().to_owned(),
        })
    }
}

/// How many runs a prefix lookup reads: enough to list 5 candidates and say there are more.
pub const PREFIX_LOOKUP: i64 = 6;

/// The figures of a results.json on disk (a directory means the results.json in it), read with the
/// schema check of [`Results::load`].
pub fn figures_of_file(p: &Path) -> Result<RunFigures, HistoryError> {
    let file = if p.is_dir() { p.join(RESULTS_FILE) } else { p.to_owned() };
    let results = Results::load(&file)?;
    Ok(RunFigures::from_results(file.display().to_string(), &results))
}

/// A row as either backend returns it, read by column index: lets one function map a row of either.
pub(super) trait Columns {
    type Error;
    fn text(&self, i: usize) -> Result<String, Self::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    fn int(&self, i: usize) -> Result<i64, Self::Error>;
    fn real(&self, i: usize) -> Result<f64, Self::Error>;
    fn flag(&self, i: usize) -> Result<bool, Self::Error>;
}

/// A run row ([`RUN_COLUMNS`]) as a summary.
pub(super) fn summary_from_row<R: Columns>(r: &R) -> Result<RunSummary, R::Error> {
    // Both JSON columns are written by `record` from typed values; text that does not parse (a damaged
    // row) shows as nothing rather than hiding the whole history.
    let suites = r.text(8)?;
    let headline = r.text(14)?;
    Ok(RunSummary {
        seq: r.int(0)?,
        id: r.text(1)?,
        started_at: r.text(2)?,
        recorded_at: r.text(3)?,
        hostname: r.text(4)?,
        cpu_model: r.text(5)?,
        kernel: r.text(6)?,
        hypervisor: r.opt_text(7)?,
        suites: serde_json::from_str(&suites).unwrap_or_default(),
        command: r.opt_text(9)?,
        results_path: r.opt_text(10)?,
        incomplete: r.flag(11)?,
        rtcell_version: r.text(12)?,
        git: r.opt_text(13)?,
        headline: serde_json::from_str(&headline).unwrap_or_default(),
    })
}

/// A series row ([`SERIES_COLUMNS`]) as figures, with its labels as stored (JSON).
pub(super) fn series_from_row<R: Columns>(r: &R) -> Result<(SeriesFigures, String), R::Error> {
    Ok((
        SeriesFigures {
            suite: r.text(0)?,
            name: r.text(1)?,
            labels: Default::default(),
            unit: r.text(3)?,
            kind: r.text(4)?,
            count: r.int(5)?.max(0) as u64,
            median: r.real(6)?,
            p90: r.real(7)?,
            p99: r.real(8)?,
            p999: r.real(9)?,
            max: r.real(10)?,
            stddev: r.real(11)?,
            errors: r.int(12)?.max(0) as u64,
        },
        r.text(2)?,
    ))
}

/// What recording a run stores: the same for every backend.
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
    pub hostname: String,
    /// Every series of every suite in document order, with its labels as JSON.
    pub series: Vec<(SeriesFigures, String)>,
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
        let series = results
            .suites
            .iter()
            .flat_map(|su| su.series.iter().map(move |s| (su, s)))
            .map(|(su, s)| {
                let labels = serde_json::to_string(&s.labels).unwrap_or_else(|_| "{}".into());
                (SeriesFigures::of(&su.suite, s), labels)
            })
            .collect();
        Ok(NewRun {
            document,
            suites,
            suites_json,
            headline,
            results_path,
            recorded_at,
            hostname: rtcell_host::facts::hostname(),
            series,
        })
    }
}

/// A count or size as a database integer (both backends store signed 64-bit), saturating.
pub(super) fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The run among those whose ids start with `prefix` (at most [`PREFIX_LOOKUP`] looked up): the exact id,
/// the only one, or an error listing the candidates.
fn pick(given: &str, prefix: &str, mut found: Vec<RunSummary>, history: &Path) -> Result<RunSummary, HistoryError> {
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
fn run_figures(
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
fn decode_document(run: &RunSummary, doc: &StoredDocument, history: &Path) -> Result<String, HistoryError> {
    let bad = |why: String| HistoryError::BadStoredDocument { id: run.id.clone(), why, path: history.to_owned() };
    if doc.encoding != ENCODING {
        return Err(bad(format!("is encoded as {:?}, which this rtcell does not read", doc.encoding)));
    }
    if doc.schema != SCHEMA_ID {
        return Err(bad(format!("is schema {:?}; this rtcell reads only {SCHEMA_ID:?}", doc.schema)));
    }
    let text = inflate(&doc.data, MAX_DOCUMENT_BYTES).map_err(|e| bad(format!("does not decompress ({e})")))?;
    if !terminal_safe(&text) {
        return Err(bad("holds control or text-direction characters, which no document rtcell writes holds".into()));
    }
    Ok(text)
}

/// Whether `text` holds nothing a terminal acts on but line breaks and tabs. A stored document goes to a
/// terminal (`history --document`) and to reports, and a history file made by someone else may hold
/// anything; a document rtcell wrote never holds such characters (JSON escapes controls).
fn terminal_safe(text: &str) -> bool {
    !text.chars().any(|c| rtcell_host::peer_text::needs_escape(c) && !matches!(c, '\n' | '\r' | '\t'))
}

/// The most a stored document may decompress to (a results document is a few MiB at most; a small
/// compressed bomb in a history file made by someone else must not fill the memory).
pub const MAX_DOCUMENT_BYTES: u64 = 256 << 20;

fn deflate(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes)?;
    enc.finish()
}

/// The text `bytes` decompress to, if it is at most `max` bytes.
fn inflate(bytes: &[u8], max: u64) -> std::io::Result<String> {
    let mut text = String::new();
    flate2::read::ZlibDecoder::new(bytes).take(max.saturating_add(1)).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(std::io::Error::other(format!("to more than {max} bytes")));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_document_that_decompresses_past_the_bound_is_refused() {
        let z = deflate(&[b' '; 4096]).expect("deflate");
        assert!(inflate(&z, 1024).is_err());
        assert_eq!(inflate(&z, 4096).expect("within the bound").len(), 4096);
    }

    #[test]
    fn what_a_terminal_acts_on_is_not_a_document() {
        assert!(!terminal_safe("{\"a\": \"\u{1b}[2J\"}"));
        assert!(!terminal_safe("{\"a\": \"\u{202e}txt\"}"));
        assert!(terminal_safe("{\n\t\"a\": \"µs\"\r\n}"));
    }
}
