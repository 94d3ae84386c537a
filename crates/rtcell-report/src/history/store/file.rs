//! The history file itself: its header and identity checks, WAL mode and SQL error mapping.

use std::io::Read;

use super::*;

/// Refuses a file that exists, is not empty, and does not start with the SQLite header. Returns whether
/// there is a non-empty file.
pub(super) fn check_header(path: &Path) -> Result<bool, HistoryError> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(HistoryError::Io { action: "open the history", path: path.to_owned(), source }),
    };
    let mut head = Vec::with_capacity(SQLITE_MAGIC.len());
    (&mut file).take(SQLITE_MAGIC.len() as u64).read_to_end(&mut head).map_err(|source| HistoryError::Io {
        action: "read the history",
        path: path.to_owned(),
        source,
    })?;
    if head.is_empty() {
        return Ok(false);
    }
    if head != SQLITE_MAGIC {
        return Err(HistoryError::NotSqlite { path: path.to_owned() });
    }
    Ok(true)
}

/// [`identity`] read in one read transaction: its three reads must see the same state of the file, not
/// one from before and one from after another process initialised it.
pub(super) fn identity_snapshot(conn: &Connection, path: &Path) -> Result<Identity, HistoryError> {
    let tx = conn.unchecked_transaction().map_err(sql(path, "read the database header"))?;
    let identity = identity(&tx, path);
    // A read-only transaction: ending it cannot lose anything.
    let _ = tx.rollback();
    identity
}

/// Tells our history from a new file and refuses everything else. Reads only; call it inside a
/// transaction.
pub(super) fn identity(conn: &Connection, path: &Path) -> Result<Identity, HistoryError> {
    let damaged = |source: rusqlite::Error| match source.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            HistoryError::Damaged { path: path.to_owned(), source }
        }
        _ => HistoryError::Sqlite { path: path.to_owned(), action: "read the database header", source },
    };
    let app: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0)).map_err(damaged)?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(damaged)?;
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name LIMIT 6")
        .map_err(damaged)?;
    let tables: Vec<String> = stmt.query_map([], |r| r.get(0)).and_then(|rows| rows.collect()).map_err(damaged)?;
    if app == APPLICATION_ID {
        return match version {
            SCHEMA_VERSION => Ok(Identity::Ours),
            v if v > SCHEMA_VERSION => {
                Err(HistoryError::NewerSchema { path: path.to_owned(), found: v, supported: SCHEMA_VERSION })
            }
            v => Err(HistoryError::Foreign {
                path: path.to_owned(),
                detail: format!("rtcell's mark, but schema version {v}, which no rtcell has written"),
            }),
        };
    }
    if app == 0 && version == 0 && tables.is_empty() {
        return Ok(Identity::New);
    }
    let mut detail = format!("application_id {app:#x}, user_version {version}");
    if !tables.is_empty() {
        detail += &format!(", tables {}", tables.join(", "));
    }
    Err(HistoryError::Foreign { path: path.to_owned(), detail })
}

/// Switches to WAL mode and says whether the database is in it. A failure (another connection holding
/// the file) leaves rollback journaling, which is as safe, only slower; a later open switches.
pub(super) fn set_wal(conn: &Connection) -> bool {
    let is_wal = |m: rusqlite::Result<String>| m.is_ok_and(|m| m.eq_ignore_ascii_case("wal"));
    is_wal(conn.pragma_query_value(None, "journal_mode", |r| r.get(0)))
        || is_wal(conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)))
}

pub(super) fn sql(path: &Path, action: &'static str) -> impl FnOnce(rusqlite::Error) -> HistoryError {
    let path = path.to_owned();
    move |source| HistoryError::Sqlite { path, action, source }
}
