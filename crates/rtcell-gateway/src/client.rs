//! Connecting to a gateway as `rtcell ctl` does: over its Unix socket, or over TCP with a bearer token
//! and/or mutual TLS.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::listen::Addr;
use crate::pb::gateway_client::GatewayClient;

/// How to reach and prove ourselves to a gateway.
#[derive(Debug, Clone)]
pub struct Connect {
    pub addr: Addr,
    pub token: Option<String>,
    pub tls: Option<ClientTls>,
    pub timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct ClientTls {
    /// The CA that signed the gateway's certificate.
    pub ca: PathBuf,
    /// Our certificate and key.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The name in the gateway's certificate (default: the host of the address).
    pub domain: Option<String>,
}

/// Adds the bearer token to every request.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// The header for `token` (none without one); an error if the token cannot be a header value.
    pub fn new(token: Option<&str>) -> Result<Bearer, String> {
        let value = token
            .map(|t| format!("Bearer {t}").parse())
            .transpose()
            .map_err(|_| "the token holds characters a header cannot carry".to_string())?;
        Ok(Bearer(value))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

pub type Client = GatewayClient<InterceptedService<Channel, Bearer>>;

/// Connects; errors say where and why.
pub async fn connect(c: &Connect) -> Result<Client, String> {
    let channel = match &c.addr {
        Addr::Unix(path) => {
            let p = path.clone();
            // The URI is not used for a Unix socket; the connector below makes the connection.
            Endpoint::try_from("http://[::1]:50051")
                .map_err(|e| e.to_string())?
                .connect_timeout(c.timeout)
                .connect_with_connector(tower::service_fn(move |_: http::Uri| {
                    let p = p.clone();
                    async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
                }))
                .await
                .map_err(|e| {
                    format!(
                        "cannot connect to {}: {} (is a gateway running? rtcell serve / rtcell run --serve)",
                        c.addr,
                        source_text(&e)
                    )
                })?
        }
        Addr::Tcp(a) => {
            let scheme = if c.tls.is_some() { "https" } else { "http" };
            let mut ep = Endpoint::try_from(format!("{scheme}://{a}"))
                .map_err(|e| e.to_string())?
                .connect_timeout(c.timeout)
                .tcp_nodelay(true);
            if let Some(t) = &c.tls {
                let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
                let mut cfg = ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(read(&t.ca)?))
                    .identity(Identity::from_pem(read(&t.cert)?, read(&t.key)?));
                cfg = cfg.domain_name(t.domain.clone().unwrap_or_else(|| a.ip().to_string()));
                ep = ep.tls_config(cfg).map_err(|e| format!("TLS: {e}"))?;
            }
            ep.connect().await.map_err(|e| format!("cannot connect to {}: {}", c.addr, source_text(&e)))?
        }
    };
    with_token(channel, c)
}

/// [`connect`] over plain TCP from the local address `source` (a multi-homed host's chosen address).
pub async fn connect_from(c: &Connect, source: std::net::IpAddr) -> Result<Client, String> {
    let Addr::Tcp(a) = c.addr else { return Err(format!("{}: not a TCP address", c.addr)) };
    let channel = Endpoint::try_from(format!("http://{a}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(c.timeout)
        .connect_with_connector(tower::service_fn(move |_: http::Uri| async move {
            let s = if a.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
            s.bind(std::net::SocketAddr::new(source, 0))?;
            let t = s.connect(a).await?;
            t.set_nodelay(true)?;
            Ok::<_, std::io::Error>(TokioIo::new(t))
        }))
        .await
        .map_err(|e| format!("cannot connect to {} from {source}: {}", c.addr, source_text(&e)))?;
    with_token(channel, c)
}

/// [`connect`] over plain TCP on the one connection `io` the caller opened: the connection preface is
/// written before it returns, and once the gateway closes `io` every call fails (no reconnecting).
pub async fn connect_over(c: &Connect, io: tokio::net::TcpStream) -> Result<Client, String> {
    let Addr::Tcp(a) = c.addr else { return Err(format!("{}: not a TCP address", c.addr)) };
    let mut once = Some(io);
    let channel = Endpoint::try_from(format!("http://{a}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(c.timeout)
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let io = once.take().ok_or_else(|| std::io::Error::other("its one connection is closed"));
            async move { io.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| format!("cannot connect to {}: {}", c.addr, source_text(&e)))?;
    with_token(channel, c)
}

/// The client of a channel, sending `c`'s bearer token with each request.
fn with_token(channel: Channel, c: &Connect) -> Result<Client, String> {
    let bearer = Bearer::new(c.token.as_deref())?;
    Ok(GatewayClient::with_interceptor(channel, bearer).max_decoding_message_size(16 << 20))
}

/// An error with its causes, which tonic keeps in its source chain.
fn source_text(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
