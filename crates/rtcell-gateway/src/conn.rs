//! Each accepted connection under guard: the deadline for its first authenticated request, the cap on
//! connections per peer address, and a handle by which the gateway closes it (a client that stopped
//! reading its streams).
//!
//! The guard wraps the accepted socket *below* TLS, so a TLS handshake that never ends runs into the
//! same deadline as a connection that never sends a byte. A connection is admitted when its first
//! request has passed authentication (the [`Conns::admitter`] interceptor runs after the token check;
//! on mutual TLS the handshake checked the certificate; on the Unix socket the socket's mode did).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tonic::transport::server::{Connected, TcpConnectInfo, UdsConnectInfo};

/// From accept until the connection's first request has passed authentication (TLS handshake
/// included); a connection that has not by then is closed.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(5);
/// Most connections open at once from one peer address (TCP), below the listener's cap, so that one
/// peer's idle sockets never lock the others out.
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 16;

/// Connections the gateway closed, by reason.
#[derive(Default, Debug)]
pub struct ClosedCounters {
    /// At accept: the listener already had its most connections open.
    pub listener_full: AtomicU64,
    /// At accept: the peer address already had [`MAX_CONNECTIONS_PER_ADDRESS`] open.
    pub address_full: AtomicU64,
    /// No authenticated request within [`AUTH_DEADLINE`].
    pub no_request: AtomicU64,
    /// A statistics stream on it made no progress within its deadline (the client does not read).
    pub stalled_stream: AtomicU64,
}

impl ClosedCounters {
    /// `(reason label, count)` for the metrics.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("listener_full", l(&self.listener_full)),
            ("address_full", l(&self.address_full)),
            ("no_request", l(&self.no_request)),
            ("stalled_stream", l(&self.stalled_stream)),
        ]
    }
}

#[derive(Default)]
struct State {
    admitted: AtomicBool,
    closing: AtomicBool,
    /// The task driving the connection's socket, woken when the gateway closes it.
    waker: Mutex<Option<Waker>>,
}

/// One connection, as the request path sees it (in the request's extensions once admitted).
#[derive(Clone, Default)]
pub struct Conn(Arc<State>);

impl Conn {
    fn admit(&self) {
        self.0.admitted.store(true, Ordering::Release);
    }

    pub fn is_admitted(&self) -> bool {
        self.0.admitted.load(Ordering::Acquire)
    }

    /// Closes the connection: its socket fails on the next read or write, which ends every stream on it.
    pub fn close(&self) {
        self.0.closing.store(true, Ordering::Release);
        if let Ok(mut w) = self.0.waker.lock()
            && let Some(w) = w.take()
        {
            w.wake();
        }
    }
}

/// The connection information of a guarded Unix-socket connection. The gateway's request layer puts
/// the inner [`UdsConnectInfo`] into each request as well, so that identity checks find it as usual.
#[derive(Clone)]
pub struct UnixConn {
    pub uds: UdsConnectInfo,
    pub conn: Conn,
}

/// The connections of one listener.
#[derive(Default)]
pub struct Conns {
    /// Open TCP connections by peer address (ip, port): how the admitter finds a request's connection.
    by_peer: Mutex<HashMap<SocketAddr, Conn>>,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    pub closed: Arc<ClosedCounters>,
}

impl Conns {
    pub fn new(closed: Arc<ClosedCounters>) -> Arc<Conns> {
        Arc::new(Conns { closed, ..Default::default() })
    }

    /// Guards an accepted connection, or `None` (counted) if its address already has the most open.
    pub fn guard<S>(
        self: &Arc<Self>,
        io: S,
        peer: Option<SocketAddr>,
        permit: OwnedSemaphorePermit,
    ) -> Option<Guarded<S>> {
        let conn = Conn::default();
        if let Some(p) = peer {
            let mut per_ip = self.per_ip.lock().ok()?;
            let n = per_ip.entry(p.ip()).or_default();
            if *n >= MAX_CONNECTIONS_PER_ADDRESS {
                self.closed.address_full.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            *n += 1;
            drop(per_ip);
            if let Ok(mut m) = self.by_peer.lock() {
                m.insert(p, conn.clone());
            }
        }
        Some(Guarded {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(AUTH_DEADLINE))),
            conn,
            slot: Slot { conns: Arc::clone(self), peer },
            _permit: permit,
        })
    }

    /// Admits the connection a request came on (call it once the request has passed authentication)
    /// and puts the connection's [`Conn`] into the request for the handlers.
    pub fn admit(&self, ext: &mut http::Extensions) {
        let conn = match ext.get::<UnixConn>() {
            Some(u) => Some(u.conn.clone()),
            None => ext
                .get::<TcpConnectInfo>()
                .and_then(|i| i.remote_addr())
                .or_else(|| {
                    ext.get::<tonic::transport::server::TlsConnectInfo<TcpConnectInfo>>()
                        .and_then(|i| i.get_ref().remote_addr())
                })
                .and_then(|a| self.by_peer.lock().ok().and_then(|m| m.get(&a).cloned())),
        };
        if let Some(c) = conn {
            c.admit();
            ext.insert(c);
        }
    }
}

/// Frees a connection's place among its address's when the connection goes.
struct Slot {
    conns: Arc<Conns>,
    peer: Option<SocketAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(p) = self.peer else { return };
        if let Ok(mut m) = self.conns.per_ip.lock()
            && let Some(n) = m.get_mut(&p.ip())
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&p.ip());
            }
        }
        if let Ok(mut m) = self.conns.by_peer.lock() {
            m.remove(&p);
        }
    }
}

/// An accepted connection holding its place among the allowed open connections, under its deadline.
pub struct Guarded<S> {
    io: S,
    /// Until the first authenticated request; `None` once admitted.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    conn: Conn,
    slot: Slot,
    _permit: OwnedSemaphorePermit,
}

impl<S> Guarded<S> {
    /// `Some(error)` when the connection must end now: closed by the gateway, or not admitted in time.
    fn check(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        if let Ok(mut w) = self.conn.0.waker.lock() {
            match &mut *w {
                Some(old) if old.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
        }
        if self.conn.0.closing.load(Ordering::Acquire) {
            return Some(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "closed by the gateway"));
        }
        if self.conn.is_admitted() {
            self.deadline = None;
        } else if let Some(d) = &mut self.deadline
            && d.as_mut().poll(cx).is_ready()
        {
            self.deadline = None;
            self.slot.conns.closed.no_request.fetch_add(1, Ordering::Relaxed);
            self.conn.close();
            return Some(std::io::Error::new(std::io::ErrorKind::TimedOut, "no authenticated request in time"));
        }
        None
    }
}

use std::future::Future as _;

impl Connected for Guarded<tokio::net::TcpStream> {
    type ConnectInfo = TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl Connected for Guarded<tokio::net::UnixStream> {
    type ConnectInfo = UnixConn;
    fn connect_info(&self) -> Self::ConnectInfo {
        UnixConn { uds: self.io.connect_info(), conn: self.conn.clone() }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if let Some(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if let Some(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if let Some(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
