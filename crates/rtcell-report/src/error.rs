//! Errors of this crate. Each message says what went wrong, with which file, and what to do about it,
//! because they end up in front of someone reading a terminal, not a debugger.

use std::path::PathBuf;

use crate::doc::SCHEMA_ID;

/// Anything that can go wrong while writing, reading or checking results.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file system operation failed.
    #[error("could not {action} {}: {source}{}", path.display(), io_hint(source))]
    Io {
        /// What was being done, e.g. "create the results directory".
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file is not JSON at all (truncated, or not a results file).
    #[error(
        "{} is not valid JSON: {source}; a results file is written whole by `rtcell bench --out DIR`, \
         so this one is truncated or is some other file",
        path.display()
    )]
    NotJson {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// The document carries another schema id, or none: reading it with this model would misread it.
    #[error("{}", unsupported_schema_message(path, found.as_deref()))]
    UnsupportedSchema {
        path: PathBuf,
        /// The `schema` value found, as JSON text (`"rtcell.results/0"`, `42`), or `None` if absent.
        found: Option<String>,
    },

    /// The document claims our schema but does not follow it.
    #[error(
        "{} says it is {SCHEMA_ID} but does not follow that schema: {source}; \
         check the file against schema/results.schema.json",
        path.display()
    )]
    Malformed {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// A document built in memory breaks a rule of the schema (e.g. a NaN statistic, which JSON cannot
    /// hold). This is a bug in the code that built it, so it is refused rather than written.
    #[error("refusing to write an invalid results document: {what}; this is a bug in the suite that built it")]
    Invalid { what: String },

    /// Serialising the document failed (only possible with a broken `Serialize` impl).
    #[error("could not serialise the results document: {0}")]
    Serialize(#[source] serde_json::Error),

    /// The embedded table of published figures does not parse (a bug caught by this crate's tests).
    #[error("the embedded reference/published.csv does not parse: {0}; fix the file and run the rtcell-report tests")]
    Published(String),

    /// A figure of the HTML report could not be drawn (a bug in the report code, not in the document).
    #[error("could not draw the report's figure {figure:?}: {detail}; this is a bug in the HTML report")]
    Plot { figure: String, detail: String },
}

fn unsupported_schema_message(path: &std::path::Path, found: Option<&str>) -> String {
    let path = path.display();
    match found {
        None => format!(
            "{path} has no `schema` field, so it is not an rtcell results document \
             (this rtcell reads schema \"{SCHEMA_ID}\"); give the results.json written by `rtcell bench --out DIR`"
        ),
        Some(found) => format!(
            "{path} is schema {found}, but this rtcell reads only \"{SCHEMA_ID}\"; \
             use the rtcell version that wrote it, or re-run the benchmark with this one"
        ),
    }
}

/// What to do about the common I/O failures.
fn io_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => " (check the path)",
        std::io::ErrorKind::PermissionDenied => {
            " (this user may not access it: choose another directory or fix its permissions)"
        }
        std::io::ErrorKind::StorageFull => " (the disk is full: free space or choose another directory)",
        std::io::ErrorKind::ReadOnlyFilesystem => " (the file system is read-only: choose another directory)",
        _ => "",
    }
}
