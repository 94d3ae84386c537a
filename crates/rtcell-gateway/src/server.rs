//! Putting a gateway on the air: its listeners (Unix socket, TCP with token and/or mutual TLS), the
//! request limits, the per-request accounting, and `/metrics` over HTTP. Everything runs on a small
//! tokio runtime whose threads are pinned to the CPUs no cell uses, at normal priority.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::access::{Access, Authorized, Listener};
use crate::conn::{Conns, UnixConn};
use crate::listen::{Addr, bind_unix, capped};
use crate::pb::gateway_server::GatewayServer;
use crate::service::{Gateway, Service};

/// Largest request message of any method (DeployPayload's: a payload ELF fits, with room); each
/// method's own, smaller for most, is refused earlier, from the message's length prefix
/// ([`crate::budget::request_limit`]).
pub const MAX_REQUEST_BYTES: usize = crate::deploy::MAX_PAYLOAD_BYTES + 64 * 1024;
/// Most connections open at once per listener.
pub const MAX_CONNECTIONS: usize = 128;
/// Most requests in flight per connection.
const MAX_STREAMS: u32 = 32;
/// Largest HTTP/2 frame a client may send us (the protocol's least).
const MAX_FRAME_BYTES: u32 = 16 * 1024;
/// HTTP/2 receive windows (per stream and per connection): how much a client may send ahead.
const RECEIVE_WINDOW_BYTES: u32 = 1024 * 1024;

/// How clients on TCP prove who they are, and which role they get (see [`crate::access`]).
#[derive(Debug, Clone, Default)]
pub struct TcpAuth {
    /// Bearer tokens with their roles (already read from the token file).
    pub token: Option<crate::access::Tokens>,
    /// `--tls-role CN=ROLE`: roles of client certificates by subject common name.
    pub tls_roles: Vec<(String, crate::access::Role)>,
    /// Server certificate and key (PEM), and the CA that signs client certificates: mutual TLS.
    pub tls: Option<TlsFiles>,
}

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// A gateway's listeners.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: Vec<Addr>,
    pub tcp_auth: TcpAuth,
    /// Plain HTTP `/metrics` for Prometheus (read-only).
    pub metrics: Option<SocketAddr>,
    /// CPUs the runtime's threads may use (empty: any).
    pub cpus: Vec<usize>,
}

/// A running gateway; dropping it stops the listeners.
pub struct Running {
    rt: Option<tokio::runtime::Runtime>,
    /// For the last flush of the refusals counted (the audit log).
    gateway: Arc<Gateway>,
    shutdown: tokio::sync::watch::Sender<bool>,
    /// The addresses really bound (TCP port 0 resolved).
    pub bound: Vec<Addr>,
    pub metrics_bound: Option<SocketAddr>,
}

impl Running {
    /// Stops the listeners and waits briefly for the in-flight requests.
    pub fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
        self.gateway.audit.flush_refusals();
        for a in &self.bound {
            if let Addr::Unix(p) = a {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        self.gateway.audit.flush_refusals();
    }
}

/// Checks the options and starts serving in the background. Errors name the listener and the fix.
pub fn start(gateway: Arc<Gateway>, opts: &ServeOptions) -> Result<Running, String> {
    let has_tcp = opts.listen.iter().any(|a| matches!(a, Addr::Tcp(_)));
    if has_tcp && opts.tcp_auth.token.is_none() && opts.tcp_auth.tls.is_none() {
        return Err("TCP needs authentication: give --token-file FILE, or --tls-cert, --tls-key and --tls-client-ca (mutual TLS), or both".into());
    }
    let tls = match &opts.tcp_auth.tls {
        Some(f) => Some(tls_config(f)?),
        None => None,
    };
    let cpus = opts.cpus.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .thread_name("rtcell-gateway")
        .enable_all()
        .on_thread_start(move || {
            // Every thread of the runtime (workers and blocking ones) time-shares, whatever the thread
            // that starts the gateway runs at.
            let _ = rtcell_host::sched::set_normal();
            if !cpus.is_empty() {
                let _ = rtcell_host::cpu::pin_current_thread_to(&cpus);
            }
        })
        .build()
        .map_err(|e| format!("gateway runtime: {e}"))?;
    let access = Arc::new(Access {
        tokens: opts.tcp_auth.token.clone(),
        tls: opts.tcp_auth.tls.is_some(),
        cn_roles: opts.tcp_auth.tls_roles.clone(),
    });
    let (shutdown, rx) = tokio::sync::watch::channel(false);
    let mut bound = Vec::new();
    let mut metrics_bound = None;
    rt.block_on(async {
        // Every request passes here first: its caller and role, decided once (crate::access).
        // It also admits the request's connection (lifts its first-request deadline, crate::conn).
        let authorized = |inner, on, conns: &Arc<Conns>| Authorized {
            inner,
            access: Arc::clone(&access),
            gateway: Arc::clone(&gateway),
            on,
            conns: Arc::clone(conns),
        };
        for a in &opts.listen {
            let conns = Conns::new(Arc::clone(&gateway.counters.closed));
            let svc = GatewayServer::new(Service(Arc::clone(&gateway)))
                .max_decoding_message_size(MAX_REQUEST_BYTES)
                .max_encoding_message_size(16 << 20);
            let counted = tower::layer::layer_fn({
                let g = Arc::clone(&gateway);
                move |inner| Counted { inner, gateway: Arc::clone(&g) }
            });
            let mut builder = Server::builder()
                .max_concurrent_streams(Some(MAX_STREAMS))
                .concurrency_limit_per_connection(MAX_STREAMS as usize)
                .http2_keepalive_interval(Some(Duration::from_secs(30)))
                .http2_keepalive_timeout(Some(Duration::from_secs(10)))
                .max_frame_size(Some(MAX_FRAME_BYTES))
                .initial_stream_window_size(Some(RECEIVE_WINDOW_BYTES))
                .initial_connection_window_size(Some(RECEIVE_WINDOW_BYTES))
                .tcp_nodelay(true);
            let refused = Arc::clone(&gateway.counters.connections_refused);
            let mut stop = rx.clone();
            let until = async move {
                let _ = stop.wait_for(|v| *v).await;
            };
            match a {
                Addr::Unix(p) => {
                    let l = bind_unix(p)?;
                    let incoming = capped(l, MAX_CONNECTIONS, refused, Arc::clone(&conns));
                    let svc = authorized(svc, Listener::Unix, &conns);
                    let router = builder.layer(counted).add_service(svc);
                    tokio::spawn(router.serve_with_incoming_shutdown(incoming, until));
                    bound.push(a.clone());
                }
                Addr::Tcp(addr) => {
                    let l = tokio::net::TcpListener::bind(addr)
                        .await
                        .map_err(|e| format!("cannot listen on tcp://{addr}: {e}"))?;
                    let local = l.local_addr().map_err(|e| format!("tcp://{addr}: {e}"))?;
                    if let Some(t) = &tls {
                        builder = builder.tls_config(t.clone()).map_err(|e| format!("TLS: {e}"))?;
                    }
                    let incoming = capped(l, MAX_CONNECTIONS, refused, Arc::clone(&conns));
                    let svc = authorized(svc, Listener::Tcp, &conns);
                    let router = builder.layer(counted).add_service(svc);
                    tokio::spawn(router.serve_with_incoming_shutdown(incoming, until));
                    bound.push(Addr::Tcp(local));
                }
            }
        }
        if let Some(m) = opts.metrics {
            let l = tokio::net::TcpListener::bind(m).await.map_err(|e| format!("cannot serve /metrics on {m}: {e}"))?;
            metrics_bound = Some(l.local_addr().map_err(|e| format!("{m}: {e}"))?);
            tokio::spawn(crate::metrics_http::serve(l, Arc::clone(&gateway), rx.clone()));
        }
        // Refusals a client can repeat (wrong token, a call above its role) go to the audit log in
        // aggregate, once a second (crate::tally).
        let (g, mut stop) = (Arc::clone(&gateway), rx.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(crate::tally::FLUSH_EVERY);
            loop {
                tokio::select! {
                    _ = every.tick() => g.audit.flush_refusals(),
                    _ = stop.wait_for(|v| *v) => break,
                }
            }
        });
        Ok::<(), String>(())
    })?;
    Ok(Running { rt: Some(rt), gateway, shutdown, bound, metrics_bound })
}

fn tls_config(f: &TlsFiles) -> Result<ServerTlsConfig, String> {
    let read = |p: &PathBuf, what: &str| std::fs::read(p).map_err(|e| format!("{what} {}: {e}", p.display()));
    let cert = read(&f.cert, "--tls-cert")?;
    let key = read(&f.key, "--tls-key")?;
    let ca = read(&f.client_ca, "--tls-client-ca")?;
    for (bytes, flag, p) in
        [(&cert, "--tls-cert", &f.cert), (&key, "--tls-key", &f.key), (&ca, "--tls-client-ca", &f.client_ca)]
    {
        if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(format!("{flag} {}: not a PEM file", p.display()));
        }
    }
    Ok(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)).client_ca_root(Certificate::from_pem(ca)))
}

/// Counts every request by method and gRPC status (the status of a refusal before the service, such as
/// a missing token or an undecodable message, is in the response headers).
#[derive(Clone)]
struct Counted<S> {
    inner: S,
    gateway: Arc<Gateway>,
}

impl<S, B, RB> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>> + Send,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        // A guarded Unix connection's information carries the guard; identity checks look for the
        // socket's own information, as on an unguarded socket.
        if let Some(u) = req.extensions().get::<UnixConn>().map(|u| u.uds.clone()) {
            req.extensions_mut().insert(u);
        }
        let path = req.uri().path().to_string();
        // A call outside the gateway's service never reaches `access::Authorized`: audited here, by
        // address (nobody identified it), as a refusal like an unknown method of the service.
        let outside = !path.starts_with("/rtcell.v1.Gateway/");
        let client =
            crate::conn::peer_of(req.extensions()).map_or_else(|| "unix".to_string(), |p| format!("tcp {}", p.ip()));
        let fut = self.inner.call(req);
        let g = Arc::clone(&self.gateway);
        Box::pin(async move {
            let r = fut.await;
            if let Ok(resp) = &r {
                let code = resp
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map_or(tonic::Code::Ok, tonic::Code::from_i32);
                // Method names come from clients: only the API's own are labels.
                let method = crate::access::method_of(&path);
                g.counters.request(method, code);
                if outside && code != tonic::Code::Ok {
                    let status = tonic::Status::new(code, "no such service");
                    g.audit.refused_unauthenticated(&client, "refused", serde_json::json!({ "method": path }), &status);
                }
            }
            r
        })
    }
}
