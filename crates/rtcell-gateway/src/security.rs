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

/// The audit log: one JSON line per write and deploy (who, what, result), to a file and to stderr.
pub struct Audit {
    file: Option<Mutex<std::fs::File>>,
    path: Option<PathBuf>,
    /// Refusals a client can repeat in a loop, written in aggregate ([`crate::tally`]).
    refusals: crate::tally::Tally,
}

impl Audit {
    pub fn open(path: Option<&Path>) -> Result<Audit, String> {
        let Some(p) = path else {
            return Ok(Audit { file: None, path: None, refusals: Default::default() });
        };
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| format!("audit log {}: {e}", p.display()))?;
        Ok(Audit { file: Some(Mutex::new(f)), path: Some(p.to_owned()), refusals: Default::default() })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// A refusal (any call that failed): a client can repeat one in a loop, so it is counted, and
    /// written with the others of the last second by [`Audit::flush_refusals`] ([`crate::tally`]).
    pub fn refused(&self, client: &str, action: &str, what: serde_json::Value, result: &Status) {
        self.refusals.add(client, action, bounded(what), result);
    }

    /// Writes the refusals counted since the last call (the gateway calls it every
    /// [`crate::tally::FLUSH_EVERY`] and when it stops).
    pub fn flush_refusals(&self) {
        for (client, action, what, result) in self.refusals.take() {
            self.line(&client, &action, what, &Err(result));
        }
    }

    /// An action and its result: a success is written at once (successes are rate-limited per
    /// identity), a refusal counted ([`Audit::refused`]).
    pub fn log(&self, client: &str, action: &str, what: serde_json::Value, result: &Result<String, Status>) {
        match result {
            Ok(_) => self.line(client, action, what, result),
            Err(s) => self.refused(client, action, what, s),
        }
    }

    fn line(&self, client: &str, action: &str, what: serde_json::Value, result: &Result<String, Status>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d.clone()),
            Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
        };
        // Client text is capped and escaped here, whatever the caller passed.
        let detail = rtcell_host::peer_text::printable_line(&detail, 4 * CLIENT_TEXT_CAP);
        let what = bounded(what);
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
            let _ = writeln!(f, "{line}");
        }
    }
}
