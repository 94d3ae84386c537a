//! Who is calling, and what they may do: the one place where a request's identity and role are
//! decided ([`Authorized`], in front of the service), before any handler runs.
//!
//! - Roles: `viewer` reads (status, statistics, streams, signals, results, metrics); `operator` also
//!   writes writable signals and starts and stops scenarios; `admin` also deploys payloads and stops
//!   deployed cells. A call above the caller's role is PERMISSION_DENIED (naming both roles), counted
//!   by its code and audited.
//! - Unix socket: the socket is 0600 in a private directory, so every peer is the server's own user
//!   or root: admin. Its identity (rate limits) is the peer's uid.
//! - Bearer token: the token file holds `ROLE TOKEN` lines (a file with one bare token means admin).
//!   The identity is the token's SHA-256 (the token itself is never logged).
//! - Mutual TLS: the role is in the client certificate, a SAN URI `urn:rtcell:role:ROLE`, or mapped
//!   from its subject CN by the server (`--tls-role CN=ROLE`); a certificate with neither is a viewer.
//!   The identity is the certificate's SHA-256. With a token as well, the lower of the two roles.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use sha2::{Digest, Sha256};
use tonic::Status;
use tonic::transport::server::{TlsConnectInfo, UdsConnectInfo};

use crate::security::hex;
use crate::service::Gateway;

/// Shortest bearer token accepted (characters).
pub const MIN_TOKEN_LEN: usize = 16;
/// Most tokens in a token file.
const MAX_TOKENS: usize = 1024;
/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 256 * 1024;
/// The SAN URI prefix that carries a role in a client certificate.
pub const ROLE_URI: &str = "urn:rtcell:role:";

/// What a caller may do; each role may do everything the ones below it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The role a gRPC method needs (by its name in `rtcell.v1.Gateway`); anything unknown needs admin.
    pub fn needed_for(method: &str) -> Role {
        METHODS.iter().find(|(m, _)| *m == method).map_or(Role::Admin, |(_, r)| *r)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The caller of one request, decided once by [`Authorized`] and put into the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// For the audit log's successes: the connection, e.g. `unix uid 1000 pid 42`,
    /// `tls 10.0.0.5:51234 cert sha256:…`.
    pub id: String,
    /// For the audit log's refusals, which are counted per client: the identity and the address
    /// without the port or the process, e.g. `unix uid 1000`, `tls 10.0.0.5 cert sha256:…`, so that a
    /// client's refusals over many connections are one count.
    pub client: String,
    /// The identity rate limits count against: the uid, the certificate, the token — never the
    /// connection or the address.
    pub key: String,
    pub role: Role,
    /// Where it called: per-identity shares apply on TCP (the Unix socket's peers are the server's user).
    pub listener: Listener,
    /// Set once a handler has audited the request itself ([`Caller::audited`]); [`Authorized`] audits
    /// every other failed call.
    pub audited: Audited,
}

impl Caller {
    /// The handler has written this request's audit entry (success or refusal): [`Authorized`] does not
    /// audit its failure again.
    pub fn audited(&self) {
        self.audited.0.store(true, Ordering::Release);
    }
}

/// Whether a request's handler audited it; shared by the clones of its [`Caller`] (equal whatever its
/// state: it is no part of who calls).
#[derive(Debug, Clone, Default)]
pub struct Audited(Arc<AtomicBool>);

impl Audited {
    fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl PartialEq for Audited {
    fn eq(&self, _: &Audited) -> bool {
        true
    }
}

impl Eq for Audited {}

/// The caller of a request that passed [`Authorized`].
pub fn caller<T>(req: &tonic::Request<T>) -> Result<Caller, Status> {
    req.extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("the request was not authorized (no caller): a gateway bug"))
}

/// The bearer tokens of a token file, each with its role.
#[derive(Clone, Default)]
pub struct Tokens {
    entries: Vec<(String, Role)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        write!(f, "Tokens({} tokens)", self.entries.len())
    }
}

impl Tokens {
    /// The role of `given`, compared in time independent of where the strings differ.
    fn role_of(&self, given: &str) -> Option<Role> {
        let mut found = None;
        for (t, r) in &self.entries {
            if same(given.as_bytes(), t.as_bytes()) {
                found = Some(*r);
            }
        }
        found
    }
}

/// Reads a token file: `ROLE TOKEN` lines, `#` comments, or one bare token (admin). Refused if anyone
/// but its owner's group may read it, if a token is short or appears twice (with file:line).
pub fn read_token_file(path: &Path) -> Result<Tokens, String> {
    let p = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("token file {p}: {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o004 != 0 {
        return Err(format!(
            "token file {p} is world-readable (mode {mode:03o}): anyone on this machine could use it; run chmod 600 {p}"
        ));
    }
    if meta.len() > MAX_TOKEN_FILE_BYTES {
        return Err(format!("token file {p}: {} bytes, at most {MAX_TOKEN_FILE_BYTES}", meta.len()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("token file {p}: {e}"))?;
    parse_tokens(&text, &p.to_string())
}

fn parse_tokens(text: &str, file: &str) -> Result<Tokens, String> {
    let how = format!(
        "write `ROLE TOKEN` lines (ROLE: viewer, operator or admin; TOKEN: one word of at least {MIN_TOKEN_LEN} characters, e.g. from `head -c 32 /dev/urandom | base64`)"
    );
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if lines.is_empty() {
        return Err(format!("token file {file}: no token; {how}"));
    }
    if lines.len() > MAX_TOKENS {
        return Err(format!("token file {file}: {} tokens, at most {MAX_TOKENS}", lines.len()));
    }
    let mut entries: Vec<(String, Role, usize)> = Vec::new();
    for (n, l) in &lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        let (role, token) = match words.as_slice() {
            // One bare token, alone in its file: the admin's (the format before roles).
            [t] if lines.len() == 1 => (Role::Admin, *t),
            [r, t] => match Role::parse(r) {
                Some(role) => (role, *t),
                None => {
                    return Err(format!(
                        "token file {file}:{n}: unknown role {}: give viewer, operator or admin",
                        rtcell_host::peer_text::peer_str(r, 32)
                    ));
                }
            },
            _ => return Err(format!("token file {file}:{n}: {how}")),
        };
        if token.len() < MIN_TOKEN_LEN || token.chars().any(|c| c.is_control()) {
            return Err(format!("token file {file}:{n}: the token is shorter than {MIN_TOKEN_LEN} characters; {how}"));
        }
        if let Some((_, _, first)) = entries.iter().find(|(t, _, _)| t == token) {
            return Err(format!(
                "token file {file}:{n}: the same token as line {first}: each token names one role; make a new one"
            ));
        }
        entries.push((token.to_string(), role, *n));
    }
    Ok(Tokens { entries: entries.into_iter().map(|(t, r, _)| (t, r)).collect() })
}

/// Parses a `--tls-role CN=ROLE` flag.
pub fn parse_tls_role(s: &str) -> Result<(String, Role), String> {
    let Some((cn, role)) = s.rsplit_once('=') else {
        return Err(format!("--tls-role {s:?}: give CN=ROLE, e.g. --tls-role ops-console=operator"));
    };
    let role = Role::parse(role)
        .ok_or_else(|| format!("--tls-role {s:?}: unknown role {role:?}; give viewer, operator or admin"))?;
    if cn.is_empty() {
        return Err(format!("--tls-role {s:?}: the certificate's common name is empty"));
    }
    Ok((cn.to_string(), role))
}

/// Compares in time independent of where the strings differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The role a client certificate (DER) carries: its SAN URI, else its CN mapped by `cn_roles`, else
/// viewer.
pub fn certificate_role(der: &[u8], cn_roles: &[(String, Role)]) -> Role {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else { return Role::Viewer };
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let roles: Vec<Role> = san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::URI(u) => u.strip_prefix(ROLE_URI).and_then(Role::parse),
                _ => None,
            })
            .collect();
        // Two roles in one certificate: the lower one.
        if let Some(r) = roles.into_iter().min() {
            return r;
        }
    }
    let cn = cert.subject().iter_common_name().next().and_then(|a| a.as_str().ok());
    cn.and_then(|cn| cn_roles.iter().find(|(c, _)| c == cn).map(|(_, r)| *r)).unwrap_or(Role::Viewer)
}

/// What kind of listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Unix,
    Tcp,
}

/// How callers are identified: the tokens and the certificate roles of TCP listeners.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub tokens: Option<Tokens>,
    /// Mutual TLS is on: a TCP caller has a client certificate.
    pub tls: bool,
    /// `--tls-role CN=ROLE` mappings.
    pub cn_roles: Vec<(String, Role)>,
}

impl Access {
    /// The caller of a request (UNAUTHENTICATED if it proves nothing).
    pub fn identify(&self, on: Listener, headers: &http::HeaderMap, ext: &http::Extensions) -> Result<Caller, Status> {
        if on == Listener::Unix {
            return Ok(match ext.get::<UdsConnectInfo>().and_then(|i| i.peer_cred) {
                Some(c) => Caller {
                    id: format!("unix uid {} pid {}", c.uid(), c.pid().map_or("?".into(), |p| p.to_string())),
                    client: format!("unix uid {}", c.uid()),
                    key: format!("uid:{}", c.uid()),
                    role: Role::Admin,
                    listener: Listener::Unix,
                    audited: Audited::default(),
                },
                None => Caller {
                    id: "unix".into(),
                    client: "unix".into(),
                    key: "unix".into(),
                    role: Role::Admin,
                    listener: Listener::Unix,
                    audited: Audited::default(),
                },
            });
        }
        let tls_info = ext.get::<TlsConnectInfo<crate::conn::TcpConn>>();
        let peer = crate::conn::peer_of(ext);
        let addr = peer.map_or_else(|| "?".into(), |a| a.to_string());
        let ip = peer.map_or_else(|| "?".into(), |a| a.ip().to_string());
        let mut ids = Vec::new();
        let mut keys = Vec::new();
        let mut role = Role::Admin;
        let mut proven = false;
        if let Some(tokens) = &self.tokens {
            let given = bearer(headers)?;
            let r = tokens.role_of(given).ok_or_else(|| Status::unauthenticated("wrong bearer token"))?;
            let fp = &hex(&Sha256::digest(given.as_bytes()))[..16];
            ids.push(format!("token sha256:{fp}"));
            keys.push(format!("token:{fp}"));
            role = role.min(r);
            proven = true;
        }
        if self.tls {
            let certs = tls_info.and_then(|i| i.peer_certs());
            let Some(leaf) = certs.as_ref().and_then(|c| c.first()) else {
                return Err(Status::unauthenticated("no client certificate"));
            };
            let fp = &hex(&Sha256::digest(leaf.as_ref()))[..16];
            ids.push(format!("cert sha256:{fp}"));
            keys.push(format!("cert:{fp}"));
            role = role.min(certificate_role(leaf.as_ref(), &self.cn_roles));
            proven = true;
        }
        if !proven {
            return Err(Status::unauthenticated("this listener has no way to authenticate clients"));
        }
        let scheme = if self.tls { "tls" } else { "tcp" };
        Ok(Caller {
            id: format!("{scheme} {addr} {}", ids.join(" ")),
            client: format!("{scheme} {ip} {}", ids.join(" ")),
            key: keys.join(" "),
            role,
            listener: Listener::Tcp,
            audited: Audited::default(),
        })
    }
}

/// The bearer token of `authorization: Bearer <token>`, or UNAUTHENTICATED.
fn bearer(headers: &http::HeaderMap) -> Result<&str, Status> {
    let Some(v) = headers.get("authorization") else {
        return Err(Status::unauthenticated("no bearer token: send metadata `authorization: Bearer <token>`"));
    };
    let v = v.to_str().map_err(|_| Status::unauthenticated("malformed authorization header"))?;
    v.strip_prefix("Bearer ").ok_or_else(|| Status::unauthenticated("authorization is not `Bearer <token>`"))
}

/// The methods of `rtcell.v1.Gateway` (proto/rtcell/v1/gateway.proto) and the role each needs.
pub const METHODS: [(&str, Role); 11] = [
    ("GetStatus", Role::Viewer),
    ("GetStats", Role::Viewer),
    ("StreamStats", Role::Viewer),
    ("ReadSignal", Role::Viewer),
    ("WriteSignal", Role::Operator),
    ("StartScenario", Role::Operator),
    ("StopScenario", Role::Operator),
    ("DeployPayload", Role::Admin),
    ("StopCell", Role::Admin),
    ("GetResults", Role::Viewer),
    ("GetMetrics", Role::Viewer),
];

/// The gRPC method of a request path: one of the API's own names ([`METHODS`]), else `(other)`. Paths
/// come from clients: only these few names ever become a metrics label or an audit key.
pub fn method_of(path: &str) -> &'static str {
    path.strip_prefix("/rtcell.v1.Gateway/")
        .and_then(|m| METHODS.iter().find(|(name, _)| *name == m))
        .map_or("(other)", |(name, _)| name)
}

/// In front of the service: identifies the caller, checks the method's role, and hands the [`Caller`]
/// to the handler (request extensions). Every failed call is audited: its own refusals (no identity, a
/// role too low, a connection over its identity's limit) here, the handlers' where they audit them
/// ([`Caller::audited`]), and every other failed answer here too, as `refused` with its method.
#[derive(Clone)]
pub struct Authorized<S> {
    pub inner: S,
    pub access: Arc<Access>,
    pub gateway: Arc<Gateway>,
    pub on: Listener,
    /// The listener's connections: one is admitted (its first-request deadline lifted) once a request on
    /// it is identified.
    pub conns: Arc<crate::conn::Conns>,
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Authorized<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<tonic::body::Body>> for Authorized<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>> + Send,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<tonic::body::Body>) -> Self::Future {
        let method = method_of(req.uri().path()).to_string();
        let refused = match self.access.identify(self.on, req.headers(), req.extensions()) {
            Err(status) => {
                // Counted per connection (closed after a few) and audited in aggregate.
                self.conns.auth_failed(req.extensions());
                let client = crate::conn::peer_of(req.extensions())
                    .map_or_else(|| format!("{:?}", self.on).to_lowercase(), |p| format!("tcp {}", p.ip()));
                self.gateway.audit.refused_unauthenticated(
                    &client,
                    "unauthenticated",
                    serde_json::json!({ "method": method }),
                    &status,
                );
                status
            }
            Ok(caller) => match self.conns.admit(req.extensions_mut(), &caller.key, caller.role) {
                Err(status) => {
                    // Admission (the connections of its identity): refused before any handler.
                    let what = serde_json::json!({ "method": method });
                    self.gateway.audit.refused(&caller.client, "refused", what, &status);
                    status
                }
                Ok(()) => return self.serve(caller, method, req),
            },
        };
        Box::pin(async move { Ok(refused.into_http()) })
    }
}

/// The future of an answer.
type Answer<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S> Authorized<S> {
    /// An identified request: the service's answer if the caller's role allows the method (the
    /// request in flight on its connection until the answer's end), else PERMISSION_DENIED, audited.
    /// A failed answer that no handler audited (an undecodable or oversized message, an unknown method,
    /// NOT_FOUND of a read, a stream over its limit, ...) is audited here, as `refused`.
    fn serve(
        &mut self,
        caller: Caller,
        method: String,
        req: http::Request<tonic::body::Body>,
    ) -> Answer<S::Response, S::Error>
    where
        S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>> + Send,
        S::Future: Send + 'static,
    {
        use crate::metered::Metered;
        let need = Role::needed_for(&method);
        // A call that changes anything is never carried out unaudited: refused while the audit log
        // cannot be written (`Audit::writable`).
        if caller.role >= need
            && need > Role::Viewer
            && let Err(status) = self.gateway.audit.writable()
        {
            let what = serde_json::json!({ "method": method });
            self.gateway.audit.refused(&caller.client, "refused", what, &status);
            return Box::pin(async move { Ok(status.into_http()) });
        }
        if caller.role >= need {
            let in_flight = req.extensions().get::<crate::conn::Conn>().map(|c| c.request());
            let account =
                crate::budget::Account::new(Arc::clone(&self.gateway.counters.budget), caller.key.clone(), caller.role);
            // The request's messages count against its caller's budget from their length prefixes on.
            let mut req = req.map(|b| tonic::body::Body::new(Metered::request(b, Arc::clone(&account), &method)));
            let failed = Arc::new(Unaudited {
                gateway: Arc::clone(&self.gateway),
                client: caller.client.clone(),
                method,
                audited: caller.audited.clone(),
            });
            req.extensions_mut().insert(caller);
            let fut = self.inner.call(req);
            return Box::pin(async move {
                let resp = fut.await?;
                // A trailers-only answer (every refusal of a unary call) has its status in the headers;
                // a stream's is in its trailers.
                failed.check(resp.headers());
                Ok(resp.map(|b| {
                    let f = Arc::clone(&failed);
                    let body = Metered::reply(b, account).on_trailers(Box::new(move |t| f.check(t)));
                    tonic::body::Body::new(match in_flight {
                        Some(i) => body.keep(Box::new(i)),
                        None => body,
                    })
                }))
            });
        }
        let status = Status::permission_denied(format!(
            "{method} needs the {need} role; this client ({}) has the {} role",
            caller.id, caller.role
        ));
        self.gateway.audit.refused(
            &caller.client,
            "denied",
            serde_json::json!({ "method": method, "role": caller.role.as_str(), "needs": need.as_str() }),
            &status,
        );
        Box::pin(async move { Ok(status.into_http()) })
    }
}

/// Audits the failure of an answer whose handler did not audit it.
struct Unaudited {
    gateway: Arc<Gateway>,
    client: String,
    method: String,
    audited: Audited,
}

impl Unaudited {
    /// `headers` (response headers or trailers): if they carry a failed `grpc-status` and nothing audited
    /// the request yet, audits it as `refused` (once).
    fn check(&self, headers: &http::HeaderMap) {
        if self.audited.is_set() {
            return;
        }
        let Some(status) = status_of(headers) else { return };
        if status.code() == tonic::Code::Ok || self.audited.0.swap(true, Ordering::AcqRel) {
            return;
        }
        self.gateway.audit.refused(&self.client, "refused", serde_json::json!({ "method": self.method }), &status);
    }
}

/// The gRPC status in `headers` (`grpc-status` and `grpc-message` only), if any.
fn status_of(headers: &http::HeaderMap) -> Option<Status> {
    let mut only = http::HeaderMap::new();
    for name in ["grpc-status", "grpc-message"] {
        if let Some(v) = headers.get(name) {
            only.insert(name, v.clone());
        }
    }
    Status::from_header_map(&only)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_api_s_own_method_names_become_labels() {
        assert_eq!(method_of("/rtcell.v1.Gateway/GetStatus"), "GetStatus");
        assert_eq!(method_of("/rtcell.v1.Gateway/StopCell"), "StopCell");
        // Names a client makes up are one label, however many it sends.
        for made_up in ["NoSuchMethod", "A1", "GetStatus2", "getstatus", "", "GetStatus/x"] {
            assert_eq!(method_of(&format!("/rtcell.v1.Gateway/{made_up}")), "(other)", "{made_up:?}");
        }
        assert_eq!(method_of("/other.Service/GetStatus"), "(other)");
        assert_eq!(Role::needed_for("StartScenario"), Role::Operator);
        assert_eq!(Role::needed_for("GetResults"), Role::Viewer);
        assert_eq!(Role::needed_for("NoSuchMethod"), Role::Admin);
        let served: Vec<&str> = METHODS.iter().map(|(m, _)| *m).collect();
        let proto = include_str!("../../../proto/rtcell/v1/gateway.proto");
        let declared: Vec<&str> = proto
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .filter_map(|l| l.split('(').next())
            .map(str::trim)
            .collect();
        assert_eq!(served, declared, "METHODS lists the proto's methods in its order");
    }

    #[test]
    fn token_files_give_roles_and_refuse_duplicates_with_their_line() {
        let t = parse_tokens("# ops\nviewer aaaaaaaaaaaaaaaaaaaa\n\noperator bbbbbbbbbbbbbbbbbbbb\n", "f").unwrap();
        assert_eq!(t.role_of("aaaaaaaaaaaaaaaaaaaa"), Some(Role::Viewer));
        assert_eq!(t.role_of("bbbbbbbbbbbbbbbbbbbb"), Some(Role::Operator));
        assert_eq!(t.role_of("cccccccccccccccccccc"), None);
        let bare = parse_tokens("cccccccccccccccccccc\n", "f").unwrap();
        assert_eq!(bare.role_of("cccccccccccccccccccc"), Some(Role::Admin));
        let e = parse_tokens("viewer aaaaaaaaaaaaaaaaaaaa\nadmin aaaaaaaaaaaaaaaaaaaa\n", "f").unwrap_err();
        assert!(e.contains("f:2") && e.contains("line 1"), "{e}");
        let e = parse_tokens("root aaaaaaaaaaaaaaaaaaaa\n", "f").unwrap_err();
        assert!(e.contains("f:1: unknown role"), "{e}");
        let e = parse_tokens("viewer short\n", "f").unwrap_err();
        assert!(e.contains("f:1") && e.contains("shorter"), "{e}");
        // Two bare words: not one bare token any more.
        assert!(parse_tokens("aaaaaaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbbbb\n", "f").is_err());
    }

    #[test]
    fn methods_need_their_roles() {
        assert_eq!(Role::needed_for("GetStats"), Role::Viewer);
        assert_eq!(Role::needed_for("WriteSignal"), Role::Operator);
        assert_eq!(Role::needed_for("DeployPayload"), Role::Admin);
        assert_eq!(Role::needed_for("(other)"), Role::Admin);
        assert!(Role::Admin > Role::Operator && Role::Operator > Role::Viewer);
        assert_eq!(parse_tls_role("ops=operator").unwrap(), ("ops".to_string(), Role::Operator));
        assert!(parse_tls_role("ops=root").is_err());
    }
}
