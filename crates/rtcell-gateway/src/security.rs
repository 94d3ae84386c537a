//! Who may talk to the gateway, and how much.
//!
//! - Unix socket (the default): the socket file is created 0600 in a directory only its owner can
//!   enter, so the kernel's permission check is the authentication; the peer's uid and pid (SO_PEERCRED)
//!   name the client in the audit log.
//! - TCP: only with a bearer token read from a file that is not world-readable, or mutual TLS (a client
//!   certificate signed by the given CA), or both. A request without them is refused (UNAUTHENTICATED)
//!   and counted; it never reaches the service.
//! - Who the caller is and what it may do: [`crate::access`].
//! - Writes, and starts, stops and deploys, are rate-limited per identity (token buckets keyed by the
//!   caller's uid, certificate or token, never its connection), and every write, start, stop, deploy
//!   and refused call is logged with who and what, client text capped and escaped.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use tonic::Status;

use crate::access::Caller;

/// Bytes of a client's text (a name, a path, a message) shown at most in the audit log, stderr or an
/// error message; longer text is cut and marked (escaped by `rtcell_host::peer_text` in any case).
pub const CLIENT_TEXT_CAP: usize = 128;
/// Entries of a client's list (e.g. the values of a write) shown at most in the audit log.
const CLIENT_LIST_CAP: usize = 16;

/// A client's text made safe to echo: capped at [`CLIENT_TEXT_CAP`] bytes and escaped.
pub fn client_text(s: &str) -> String {
    rtcell_host::peer_text::peer_str(s, CLIENT_TEXT_CAP)
}

/// [`client_text`] in quotes, as `{:?}` would show it.
pub fn quoted(s: &str) -> String {
    format!("\"{}\"", client_text(s))
}

/// A JSON value of the audit log with every string capped and escaped and every list shortened.
fn bounded(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(client_text(&s)),
        Value::Array(a) => {
            let n = a.len();
            let mut out: Vec<Value> = a.into_iter().take(CLIENT_LIST_CAP).map(bounded).collect();
            if n > CLIENT_LIST_CAP {
                out.push(Value::String(format!("…[{} more]", n - CLIENT_LIST_CAP)));
            }
            Value::Array(out)
        }
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (client_text(&k), bounded(v))).collect()),
        x => x,
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Token bucket per identity: `rate` requests per second, bursts of up to `burst`.
pub struct RateLimit {
    what: &'static str,
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimit {
    /// `what` names the requests counted, for the refusal (e.g. "writes").
    pub fn new(what: &'static str, rate: f64, burst: f64) -> RateLimit {
        RateLimit { what, rate, burst: burst.max(1.0), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one token for the identity `key` (shown as `who`), or says how long until one is there.
    pub fn take(&self, key: &str, who: &str) -> Result<(), Status> {
        let now = Instant::now();
        let mut b = self.buckets.lock().map_err(|_| Status::internal("rate limiter poisoned"))?;
        // A key is a uid, a certificate or a token: the map stays small, but never let it grow without bound.
        if b.len() > 10_000 {
            b.clear();
        }
        let (tokens, at) = b.entry(key.to_string()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Status::resource_exhausted(format!(
                "more than {} {}/s from {who}: retry in {:.0} ms",
                self.rate,
                self.what,
                (1.0 - *tokens) / self.rate * 1e3
            )))
        }
    }
}

/// Size of the audit log file at which it is rotated: renamed to `FILE.1` (replacing the one before)
/// and started anew, so that at most twice this is on disk.
pub const AUDIT_ROTATE_BYTES: u64 = 64 << 20;

/// The audit log: one JSON line per write and deploy (who, what, result), to a file and to stderr.
pub struct Audit {
    file: Option<Mutex<AuditFile>>,
    path: Option<PathBuf>,
    /// Refusals a client can repeat in a loop, written in aggregate ([`crate::tally`]).
    refusals: crate::tally::Tally,
    /// Tests: run between a rotation's rename and its reopening (to plant something there).
    #[cfg(test)]
    between: Mutex<Option<BetweenHook>>,
}

/// Tests: what runs between a rotation's rename and its reopening.
#[cfg(test)]
type BetweenHook = Box<dyn FnOnce(&Path) + Send>;

/// The open audit log file, its size, the size at which it is rotated, and why it can no longer be
/// written (see [`Audit::writable`]).
struct AuditFile {
    file: std::fs::File,
    len: u64,
    rotate_at: u64,
    failed: Option<String>,
}

/// Opens the audit log for appending: created 0600 (it names who did what), never through a link
/// (O_NOFOLLOW: a link planted where the file goes is refused, not followed), and only a regular file.
fn open_append(p: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => format!(
                "audit log {}: is a symbolic link; give the path of a regular file (links are not followed)",
                p.display()
            ),
            _ => format!("audit log {}: {e}", p.display()),
        })?;
    let meta = f.metadata().map_err(|e| format!("audit log {}: {e}", p.display()))?;
    if !meta.file_type().is_file() {
        return Err(format!("audit log {}: not a regular file", p.display()));
    }
    // A file someone else owns, or can write, is not ours to trust: they could edit or truncate it.
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "audit log {}: owned by uid {} with mode {:o}; it must be this user's (uid {me}) and writable by no one \
             else: remove it, or `chmod go-w` it",
            p.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(f)
}

impl Audit {
    pub fn open(path: Option<&Path>) -> Result<Audit, String> {
        Audit::open_rotating(path, AUDIT_ROTATE_BYTES)
    }

    /// [`Audit::open`] rotating at `rotate_at` bytes instead of [`AUDIT_ROTATE_BYTES`].
    pub fn open_rotating(path: Option<&Path>, rotate_at: u64) -> Result<Audit, String> {
        let Some(p) = path else {
            return Ok(Audit {
                file: None,
                path: None,
                refusals: Default::default(),
                #[cfg(test)]
                between: Mutex::new(None),
            });
        };
        let file = open_append(p)?;
        let len = file.metadata().map_err(|e| format!("audit log {}: {e}", p.display()))?.len();
        Ok(Audit {
            file: Some(Mutex::new(AuditFile { file, len, rotate_at, failed: None })),
            path: Some(p.to_owned()),
            refusals: Default::default(),
            #[cfg(test)]
            between: Mutex::new(None),
        })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// A refusal (any call that failed) of an authenticated client: a client can repeat one in a loop,
    /// so it is counted, and written with the others of the last second by [`Audit::flush_refusals`]
    /// ([`crate::tally`]), always on a line naming the client.
    pub fn refused(&self, client: &str, action: &str, what: serde_json::Value, result: &Status) {
        self.refusals.add(client, true, action, bounded(what), result);
    }

    /// A refusal of a client nobody identified (`address`): counted as [`Audit::refused`], but only the
    /// largest counts of such addresses get lines of their own.
    pub fn refused_unauthenticated(&self, address: &str, action: &str, what: serde_json::Value, result: &Status) {
        self.refusals.add(address, false, action, bounded(what), result);
    }

    /// Writes the refusals counted since the last call (the gateway calls it every
    /// [`crate::tally::FLUSH_EVERY`] and when it stops).
    pub fn flush_refusals(&self) {
        for (client, action, what, result) in self.refusals.take() {
            // `what` was bounded when the refusal was counted.
            self.line(&client, &action, what, &Err(result));
        }
    }

    /// An action of `who` and its result, audited by its handler (so not again as a failed call, see
    /// `access::Authorized`): a success is written at once (successes are rate-limited per identity)
    /// naming the connection, a refusal counted per client ([`Audit::refused`]).
    pub fn log(&self, who: &Caller, action: &str, what: serde_json::Value, result: &Result<String, Status>) {
        who.audited();
        match result {
            Ok(_) => self.line(&who.id, action, bounded(what), result),
            Err(s) => self.refused(&who.client, action, what, s),
        }
    }

    /// One line; `what` already [`bounded`] (once: a bounded list's "[N more]" counts the client's list).
    fn line(&self, client: &str, action: &str, what: serde_json::Value, result: &Result<String, Status>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d.clone()),
            Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
        };
        // Client text is capped and escaped here, whatever the caller passed.
        let detail = rtcell_host::peer_text::printable_line(&detail, 4 * CLIENT_TEXT_CAP);
        let line = serde_json::json!({
            "time": rtcell_report::doc::rfc3339_utc(std::time::SystemTime::now()),
            "client": client,
            "action": action,
            "what": what,
            "ok": ok,
            "result": detail,
        });
        eprintln!("audit: {line}");
        if let Some(f) = &self.file
            && let Ok(mut f) = f.lock()
        {
            if f.failed.is_some() {
                return;
            }
            let text = format!("{line}\n");
            if f.len > 0
                && f.len + text.len() as u64 > f.rotate_at
                && let Err(e) = self.rotate(&mut f)
            {
                fail(&mut f, e);
                return;
            }
            match f.file.write_all(text.as_bytes()) {
                Ok(()) => f.len += text.len() as u64,
                Err(e) => fail(&mut f, format!("writing it: {e}")),
            }
        }
    }

    /// Renames the file to `FILE.1` (replacing the one before) and opens a new one at `FILE`; what
    /// stops either (e.g. a directory at `FILE.1`, a link planted at `FILE`) is an error: the file is
    /// then never written again ([`Audit::writable`]), so its size bound holds whatever is planted.
    fn rotate(&self, f: &mut AuditFile) -> Result<(), String> {
        let Some(p) = &self.path else { return Ok(()) };
        let mut old = p.clone().into_os_string();
        old.push(".1");
        std::fs::rename(p, &old)
            .map_err(|e| format!("cannot rotate {} to {}: {e}", p.display(), PathBuf::from(&old).display()))?;
        #[cfg(test)]
        if let Some(plant) = self.between.lock().ok().and_then(|mut b| b.take()) {
            plant(p);
        }
        f.file = open_append(p)?;
        f.len = 0;
        Ok(())
    }

    /// `Ok` while the audit log can be written (or there is none). Once a line could not be written to
    /// the file (a rotation or a write failed), no more lines go to it (stderr still has every line) and
    /// this is FAILED_PRECONDITION, which the gateway answers to every call that changes anything
    /// (writes, starts, stops, deploys, cell stops) until it is restarted with a log it can write: an
    /// action is never carried out unaudited. Reads go on.
    pub fn writable(&self) -> Result<(), Status> {
        let Some(f) = &self.file else { return Ok(()) };
        let f = f.lock().map_err(|_| Status::internal("audit log poisoned"))?;
        match &f.failed {
            None => Ok(()),
            Some(why) => Err(Status::failed_precondition(format!(
                "the audit log cannot be written ({}): calls that change anything are refused until the gateway \
                 is restarted with an audit log it can write; reads still work",
                rtcell_host::peer_text::printable_line(why, 4 * CLIENT_TEXT_CAP)
            ))),
        }
    }

    /// The audit log file can no longer be written (see [`Audit::writable`]).
    pub fn failed(&self) -> bool {
        self.writable().is_err()
    }
}

/// Marks the audit log as no longer written, saying so once on stderr.
fn fail(f: &mut AuditFile, why: String) {
    eprintln!(
        "audit: the audit log cannot be written: {why}; no more lines go to it (they still go to stderr), and \
         calls that change anything are refused until the gateway is restarted with a log it can write"
    );
    f.failed = Some(why);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_log_is_rotated_to_one_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.log");
        let limit = 2000;
        let a = Audit::open_rotating(Some(&p), limit).unwrap();
        for i in 0..100 {
            a.line("unix uid 0", "write", serde_json::json!({ "n": i }), &Ok("ok".into()));
        }
        let now = std::fs::read_to_string(&p).unwrap();
        let old = std::fs::read_to_string(dir.path().join("audit.log.1")).unwrap();
        assert!(now.len() as u64 <= limit && old.len() as u64 <= limit, "{} and {} bytes", now.len(), old.len());
        assert!(now.lines().last().unwrap().contains("\"n\":99"), "the newest line is in the file: {now}");
        let first_now: serde_json::Value = serde_json::from_str(now.lines().next().unwrap()).unwrap();
        let last_old: serde_json::Value = serde_json::from_str(old.lines().last().unwrap()).unwrap();
        assert_eq!(last_old["what"]["n"].as_u64().unwrap() + 1, first_now["what"]["n"].as_u64().unwrap());
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(files.len(), 2, "one old file kept: {files:?}");
        // Reopened, it goes on counting from the file's size.
        drop(a);
        let a = Audit::open_rotating(Some(&p), limit).unwrap();
        let mut last = std::fs::metadata(&p).unwrap().len();
        let mut rotated = false;
        for i in 0..20 {
            a.line("unix uid 0", "write", serde_json::json!({ "again": i }), &Ok("ok".into()));
            let len = std::fs::metadata(&p).unwrap().len();
            assert!(len <= limit, "{len} bytes");
            rotated |= len < last;
            last = len;
        }
        assert!(rotated, "the size of the reopened file was counted");
    }

    /// Writes lines until the file would have been rotated a few times.
    fn fill(a: &Audit, from: usize) {
        for i in from..from + 100 {
            a.line("unix uid 0", "write", serde_json::json!({ "n": i }), &Ok("ok".into()));
        }
    }

    #[test]
    fn a_directory_planted_at_the_old_file_stops_the_log_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.log");
        let limit = 2000;
        std::fs::create_dir(dir.path().join("audit.log.1")).unwrap();
        std::fs::write(dir.path().join("audit.log.1/x"), "x").unwrap();
        let a = Audit::open_rotating(Some(&p), limit).unwrap();
        assert!(a.writable().is_ok());
        fill(&a, 0);
        let len = std::fs::metadata(&p).unwrap().len();
        assert!(len <= limit, "the size bound holds: {len} bytes");
        let e = a.writable().unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(e.message().contains("cannot rotate") && e.message().contains("refused"), "{}", e.message());
        assert!(a.failed());
        assert!(dir.path().join("audit.log.1").is_dir());
    }

    #[test]
    fn a_link_planted_between_rename_and_reopen_stops_the_log_and_moves_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.log");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "").unwrap();
        let limit = 2000;
        let a = Audit::open_rotating(Some(&p), limit).unwrap();
        let target = victim.clone();
        *a.between.lock().unwrap() = Some(Box::new(move |at: &Path| std::os::unix::fs::symlink(&target, at).unwrap()));
        fill(&a, 0);
        let e = a.writable().unwrap_err();
        assert!(e.message().contains("symbolic link"), "{}", e.message());
        // Nothing went through the link, and no later line moved it over the old file.
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "");
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_symlink());
        let old = dir.path().join("audit.log.1");
        assert!(std::fs::symlink_metadata(&old).unwrap().file_type().is_file());
        let before = std::fs::read_to_string(&old).unwrap();
        assert!(before.len() as u64 <= limit, "{} bytes", before.len());
        fill(&a, 100);
        assert_eq!(std::fs::read_to_string(&old).unwrap(), before, "nothing written after the failure");
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_symlink());
    }
}
