//! Who may talk to the gateway, and how much.
//!
//! - Unix socket (the default): the socket file is created 0600 in a directory only its owner can
//!   enter, so the kernel's permission check is the authentication; the peer's uid and pid (SO_PEERCRED)
//!   name the client in the audit log.
//! - TCP: only with a bearer token read from a file that is not world-readable, or mutual TLS (a client
//!   certificate signed by the given CA), or both. A request without them is refused (UNAUTHENTICATED)
//!   and counted; it never reaches the service.
//! - Writes are rate-limited per client (a token bucket), and every write and deploy is logged with who
//!   and what.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use sha2::{Digest, Sha256};
use tonic::Status;
use tonic::transport::server::{TcpConnectInfo, UdsConnectInfo};

/// Shortest bearer token accepted (characters).
pub const MIN_TOKEN_LEN: usize = 16;

/// Reads a bearer token file: refused if anyone but its owner's group may read it, or if it is short.
pub fn read_token_file(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o004 != 0 {
        return Err(format!(
            "token file {} is world-readable (mode {mode:03o}): anyone on this machine could use it; run chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    let token = text.trim().to_string();
    if token.len() < MIN_TOKEN_LEN || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "token file {}: the token must be one word of at least {MIN_TOKEN_LEN} characters (e.g. `head -c 32 /dev/urandom | base64 > {}`)",
            path.display(),
            path.display()
        ));
    }
    Ok(token)
}

/// Compares in time independent of where the strings differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The interceptor of a TCP listener with a token: `authorization: Bearer <token>` or UNAUTHENTICATED.
pub fn check_bearer(token: &str, req: &tonic::Request<()>) -> Result<(), Status> {
    let Some(v) = req.metadata().get("authorization") else {
        return Err(Status::unauthenticated("no bearer token: send metadata `authorization: Bearer <token>`"));
    };
    let v = v.to_str().map_err(|_| Status::unauthenticated("malformed authorization header"))?;
    let given =
        v.strip_prefix("Bearer ").ok_or_else(|| Status::unauthenticated("authorization is not `Bearer <token>`"))?;
    if same(given.as_bytes(), token.as_bytes()) { Ok(()) } else { Err(Status::unauthenticated("wrong bearer token")) }
}

/// Who sent a request, for the audit log and the per-client rate limit.
pub fn client_of<T>(req: &tonic::Request<T>) -> String {
    if let Some(certs) = req.peer_certs()
        && let Some(first) = certs.first()
    {
        let addr = req.remote_addr().map(|a| a.to_string()).unwrap_or_default();
        return format!("tls {addr} cert sha256:{}", &hex(&Sha256::digest(first.as_ref()))[..16]);
    }
    if let Some(info) = req.extensions().get::<UdsConnectInfo>()
        && let Some(cred) = &info.peer_cred
    {
        return format!("unix uid {} pid {}", cred.uid(), cred.pid().map_or("?".into(), |p| p.to_string()));
    }
    if let Some(info) = req.extensions().get::<TcpConnectInfo>()
        && let Some(a) = info.remote_addr()
    {
        return format!("tcp {}", a.ip());
    }
    match req.remote_addr() {
        Some(a) => format!("tcp {}", a.ip()),
        None => "unix".into(),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Token bucket per client: `rate` writes per second, bursts of up to `burst`.
pub struct RateLimit {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimit {
    pub fn new(rate: f64, burst: f64) -> RateLimit {
        RateLimit { rate, burst: burst.max(1.0), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one token for `client`, or says how long until one is there.
    pub fn take(&self, client: &str) -> Result<(), Status> {
        let now = Instant::now();
        let mut b = self.buckets.lock().map_err(|_| Status::internal("rate limiter poisoned"))?;
        // A client key is its address or uid: the map stays small, but never let it grow without bound.
        if b.len() > 10_000 {
            b.clear();
        }
        let (tokens, at) = b.entry(client.to_string()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Status::resource_exhausted(format!(
                "more than {} writes/s from {client}: retry in {:.0} ms",
                self.rate,
                (1.0 - *tokens) / self.rate * 1e3
            )))
        }
    }
}

/// The audit log: one JSON line per write and deploy (who, what, result), to a file and to stderr.
pub struct Audit {
    file: Option<Mutex<std::fs::File>>,
    path: Option<PathBuf>,
}

impl Audit {
    pub fn open(path: Option<&Path>) -> Result<Audit, String> {
        let Some(p) = path else {
            return Ok(Audit { file: None, path: None });
        };
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| format!("audit log {}: {e}", p.display()))?;
        Ok(Audit { file: Some(Mutex::new(f)), path: Some(p.to_owned()) })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn log(&self, client: &str, action: &str, what: serde_json::Value, result: &Result<String, Status>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d.clone()),
            Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
        };
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
