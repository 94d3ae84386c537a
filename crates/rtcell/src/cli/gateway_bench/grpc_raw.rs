//! A bare HTTP/2 gRPC client for the misbehaving clients: it sends what the real client never would
//! (a wrong token, messages that do not decode) from a loopback address of its own, and opens streams
//! whose flow-control window it never gives back (the gateway sees a client that does not read).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::net::{TcpSocket, TcpStream};

/// Every connect, handshake and answer waits at most this long.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// One HTTP/2 connection: requests are sent through it, its driver runs in a task of its own.
pub struct H2 {
    send: SendRequest<Bytes>,
    driver: tokio::task::JoinHandle<()>,
    to: SocketAddr,
}

impl Drop for H2 {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A TCP connection from `from` (port chosen by the kernel) to `to`.
pub async fn tcp_from(from: IpAddr, to: SocketAddr) -> Result<TcpStream, String> {
    let s =
        if from.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }.map_err(|e| format!("socket: {e}"))?;
    s.bind(SocketAddr::new(from, 0)).map_err(|e| format!("cannot bind {from}: {e}"))?;
    match tokio::time::timeout(TIMEOUT, s.connect(to)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("connect to {to}: {e}")),
        Err(_) => Err(format!("connect to {to}: no answer in {} s", TIMEOUT.as_secs())),
    }
}

impl H2 {
    /// Connects from `from` and makes the HTTP/2 handshake (the client's default windows: 64 KiB).
    pub async fn connect(from: IpAddr, to: SocketAddr) -> Result<H2, String> {
        let tcp = tcp_from(from, to).await?;
        let _ = tcp.set_nodelay(true);
        let (send, conn) = tokio::time::timeout(TIMEOUT, h2::client::handshake(tcp))
            .await
            .map_err(|_| "HTTP/2 handshake: no answer".to_string())?
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(H2 { send, driver, to })
    }

    /// Sends one request of gRPC method `path` carrying `msg` (an encoded message) with the bearer
    /// `token`; returns the response head and its body.
    pub async fn open(
        &mut self,
        path: &str,
        token: &str,
        msg: &[u8],
    ) -> Result<http::Response<h2::RecvStream>, String> {
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{}{path}", self.to))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .map_err(|e| format!("request: {e}"))?;
        let exchange = async {
            let mut send = self.send.clone().ready().await.map_err(|e| format!("connection: {e}"))?;
            let (resp, mut body) = send.send_request(req, false).map_err(|e| format!("request: {e}"))?;
            body.send_data(frame(msg), true).map_err(|e| format!("request body: {e}"))?;
            resp.await.map_err(|e| format!("response: {e}"))
        };
        tokio::time::timeout(TIMEOUT, exchange).await.map_err(|_| "no answer".to_string())?
    }

    /// A unary call: the gRPC status the gateway answered with.
    pub async fn unary(&mut self, path: &str, token: &str, msg: &[u8]) -> Result<tonic::Code, String> {
        let resp = self.open(path, token, msg).await?;
        if let Some(c) = grpc_status(resp.headers()) {
            return Ok(c);
        }
        if resp.status() != http::StatusCode::OK {
            return Err(format!("HTTP status {}", resp.status()));
        }
        let mut body = resp.into_body();
        let rest = async {
            while let Some(d) = body.data().await {
                let d = d.map_err(|e| format!("response body: {e}"))?;
                let _ = body.flow_control().release_capacity(d.len());
            }
            let t = body.trailers().await.map_err(|e| format!("trailers: {e}"))?;
            t.as_ref().and_then(grpc_status).ok_or_else(|| "an answer without grpc-status".to_string())
        };
        tokio::time::timeout(TIMEOUT, rest).await.map_err(|_| "no trailers".to_string())?
    }
}

/// The status of a trailers-only answer, or of the trailers.
pub fn grpc_status(h: &http::HeaderMap) -> Option<tonic::Code> {
    h.get("grpc-status")?.to_str().ok()?.parse::<i32>().ok().map(tonic::Code::from_i32)
}

/// One gRPC message, uncompressed: flag, length (big-endian), bytes.
fn frame(msg: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(msg.len() + 5);
    v.push(0);
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    Bytes::from(v)
}
