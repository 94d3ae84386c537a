//! Each accepted connection under guard: the deadline for its first authenticated request, the caps on
//! connections per peer address, per identity and before authentication, the idle timeout of an
//! authenticated connection, failed authentications, and a handle by which the gateway closes it (a
//! client that stopped reading its streams).
//!
//! Per peer address, connections not yet authenticated count against [`MAX_CONNECTIONS_PER_ADDRESS`] at
//! accept; once authenticated, a connection gives that place back and counts against the address's
//! places *for its role* (as many again per role), so one role's connections from an address (a viewer's
//! dashboard behind the operators' NAT) never shut another role's out of it.
//!
//! TCP only (the Unix socket's peers are the server's own user): connections not yet authenticated
//! ("pending"; on the `/metrics` listener, which authenticates nobody, all of them, see
//! [`Conns::answered`]) hold at most [`MAX_PREAUTH`] of the listener's places, so authenticated clients
//! always have the other half; when those are taken a new connection takes the place of the oldest
//! unauthenticated one of the address holding the most (so addresses that hold many cannot keep out one
//! that holds few), or, if its own address holds as many as any, of one of its own address's (or, when each of
//! its own has sent something, of a silent one of an address holding as many). Within an address,
//! the connection that makes room is the oldest that has sent nothing yet (a byte read, or one waiting
//! in its socket), so a client that has written its first request outlives sockets opened after it in
//! silence, however fast; only if each has sent something is the oldest closed.
//!
//! The guard wraps the accepted socket *below* TLS, so a TLS handshake that never ends runs into the
//! same deadline as a connection that never sends a byte. A connection is admitted when its first
//! request has passed authentication ([`Conns::admit`], called by `access::Authorized` once the caller is identified;
//! on mutual TLS the handshake checked the certificate; on the Unix socket the socket's mode did).

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::share::{Share, Shares};

mod pending;
use pending::Pending;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo, UdsConnectInfo};

/// From accept until the connection's first request has passed authentication (TLS handshake
/// included); a connection that has not by then is closed.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(5);
/// Most connections not yet authenticated (TCP, and every `/metrics` connection) open at once from one
/// peer address, below the listener's cap, so that one peer's idle sockets never lock the others out;
/// and most authenticated connections of one role from one peer address (each role has its own).
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 16;
/// Most TCP connections of a listener not yet authenticated: half its places.
pub const MAX_PREAUTH: usize = crate::server::MAX_CONNECTIONS / 2;
/// Most authenticated TCP connections of one identity (token, certificate) per listener.
pub const MAX_CONNECTIONS_PER_IDENTITY: usize = 16;
/// Most authenticated TCP connections of all viewers together, per listener: operators and admins
/// always find the rest of the authenticated places (viewer credentials are the ones handed out most).
pub const MAX_VIEWER_CONNECTIONS: usize = 48;
/// Most authenticated TCP connections of viewers and operators together, per listener: admins always
/// find at least `MAX_CONNECTIONS - MAX_PREAUTH - MAX_BELOW_ADMIN_CONNECTIONS` (8) places.
pub const MAX_BELOW_ADMIN_CONNECTIONS: usize = 56;
/// An authenticated TCP connection with no request in flight for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Failed authentications after which a connection is closed.
pub const MAX_AUTH_FAILURES: u32 = 8;
/// A connection refused after a request is closed this long after it, so that the refusal reaches
/// the client first.
const CLOSE_AFTER_REFUSAL: Duration = Duration::from_millis(500);

/// Connections the gateway closed, by reason.
#[derive(Default, Debug)]
pub struct ClosedCounters {
    /// At accept: the listener already had its most connections open.
    pub listener_full: AtomicU64,
    /// At accept: the peer address already had [`MAX_CONNECTIONS_PER_ADDRESS`] not yet authenticated.
    pub address_full: AtomicU64,
    /// At its first request: its role's clients already had [`MAX_CONNECTIONS_PER_ADDRESS`] connections
    /// from its address.
    pub address_role_full: AtomicU64,
    /// No authenticated request within [`AUTH_DEADLINE`].
    pub no_request: AtomicU64,
    /// A statistics stream on it made no progress within its deadline (the client does not read).
    pub stalled_stream: AtomicU64,
    /// At accept: [`MAX_PREAUTH`] unauthenticated connections open, none of its address's among them, and no
    /// address holding more (or none of theirs could be closed).
    pub preauth_full: AtomicU64,
    /// Unauthenticated, and its place taken by a new connection of an address holding fewer, or of its own
    /// address (see [`Conns::evict_oldest`]).
    pub preauth_evicted: AtomicU64,
    /// Its identity already had [`MAX_CONNECTIONS_PER_IDENTITY`] connections.
    pub identity_full: AtomicU64,
    /// At its first request: its role's clients already had their most ([`MAX_VIEWER_CONNECTIONS`],
    /// [`MAX_BELOW_ADMIN_CONNECTIONS`]).
    pub role_full: AtomicU64,
    /// Authenticated, and no request in flight for [`IDLE_TIMEOUT`].
    pub idle: AtomicU64,
    /// [`MAX_AUTH_FAILURES`] failed authentications on it.
    pub auth_failures: AtomicU64,
}

impl ClosedCounters {
    /// `(reason label, count)` for the metrics.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("listener_full", l(&self.listener_full)),
            ("address_full", l(&self.address_full)),
            ("address_role_full", l(&self.address_role_full)),
            ("no_request", l(&self.no_request)),
            ("stalled_stream", l(&self.stalled_stream)),
            ("preauth_full", l(&self.preauth_full)),
            ("preauth_evicted", l(&self.preauth_evicted)),
            ("identity_full", l(&self.identity_full)),
            ("role_full", l(&self.role_full)),
            ("idle", l(&self.idle)),
            ("auth_failures", l(&self.auth_failures)),
        ]
    }
}

/// An authenticated connection's places: among its identity's, its role's, and its role's at its address.
struct Places {
    _identity: Share<String>,
    _roles: Vec<Share<()>>,
    _address: Share<(IpAddr, crate::access::Role)>,
}

/// Why an authenticated connection finds no place (see [`Conns::places`]).
enum NoPlace {
    Identity,
    Role(usize),
    Address,
}

#[derive(Default)]
struct State {
    admitted: AtomicBool,
    closing: AtomicBool,
    /// Among the listener's unauthenticated connections.
    pending: AtomicBool,
    /// The peer has sent at least one byte that the gateway read (see [`Conn::has_spoken`]).
    spoke: AtomicBool,
    /// The accepted socket (TCP), valid while the connection is among the pending ones: its guard
    /// leaves them before it closes the socket (see the field order of [`Guarded`]).
    fd: std::sync::atomic::AtomicI32,
    /// Requests in flight (their responses not yet sent to their end).
    in_flight: AtomicUsize,
    /// Requests started, ever: a change restarts the idle timeout.
    started: AtomicU64,
    /// Failed authentications on it.
    failures: AtomicU32,
    /// The connection's place among its identity's (TCP), once authenticated, among its role's
    /// ([`MAX_VIEWER_CONNECTIONS`], [`MAX_BELOW_ADMIN_CONNECTIONS`]) and its role's at its address.
    identity: Mutex<Option<Places>>,
    /// Its place among its address's unauthenticated connections (TCP), until it is authenticated.
    preauth: Mutex<Option<Share<IpAddr>>>,
    /// The task driving the connection's socket, woken when the gateway closes it.
    waker: Mutex<Option<Waker>>,
}

/// One connection, as the request path sees it (in the request's extensions once admitted).
#[derive(Clone, Default)]
pub struct Conn(Arc<State>);

impl Conn {
    /// The same connection (not another one of the same address).
    fn is(&self, other: &Conn) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether the peer has sent anything yet: a byte the gateway has read, or one waiting in the
    /// socket's receive queue (a client that has written its first request, not yet read). Call it only
    /// while the connection is among the pending ones, under their lock (its socket is open then).
    fn has_spoken(&self) -> bool {
        if self.0.spoke.load(Ordering::Acquire) {
            return true;
        }
        let fd = self.0.fd.load(Ordering::Acquire);
        if fd < 0 {
            return false;
        }
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int through the pointer, which points at a live local; `fd` is
        // the connection's socket, still open while the connection is pending (see `State::fd`), and the
        // ioctl only reads the size of its receive queue.
        let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut queued) };
        r == 0 && queued > 0
    }

    fn admit(&self) {
        self.0.admitted.store(true, Ordering::Release);
    }

    pub fn is_admitted(&self) -> bool {
        self.0.admitted.load(Ordering::Acquire)
    }

    /// A request on it starts; it is in flight until the returned guard is dropped.
    pub fn request(&self) -> InFlight {
        self.0.started.fetch_add(1, Ordering::Relaxed);
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Closes the connection a little later, once a refusal sent on it has reached the client.
    pub fn close_soon(&self) {
        let c = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(CLOSE_AFTER_REFUSAL).await;
            c.close();
        });
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

/// A request in flight on a connection (see [`Conn::request`]).
pub struct InFlight(Conn);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Ok(mut w) = self.0.0.waker.lock()
            && let Some(w) = w.take()
        {
            // The connection's task restarts its idle timeout.
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

/// The connection information of a guarded TCP connection: the socket's own, and the guard. A request
/// so carries its own connection; no table keyed by addresses and ports, which another connection of the
/// same four (a port reused while a request of the old one is still being dispatched) could stand for.
#[derive(Clone)]
pub struct TcpConn {
    pub tcp: TcpConnectInfo,
    pub conn: Conn,
    /// The peer's address as accepted (what its places are counted by; the socket may be reset since).
    pub ip: Option<IpAddr>,
}

/// The connections of one listener.
pub struct Conns {
    /// Unauthenticated connections per address.
    per_ip: Arc<Shares<IpAddr>>,
    /// Authenticated connections per address and role.
    per_ip_role: Arc<Shares<(IpAddr, crate::access::Role)>>,
    per_identity: Arc<Shares<String>>,
    viewers: Arc<Shares<()>>,
    below_admin: Arc<Shares<()>>,
    pending: Mutex<Pending>,
    pub closed: Arc<ClosedCounters>,
}

impl Conns {
    pub fn new(closed: Arc<ClosedCounters>) -> Arc<Conns> {
        Arc::new(Conns {
            per_ip: Shares::new(MAX_CONNECTIONS_PER_ADDRESS),
            per_ip_role: Shares::new(MAX_CONNECTIONS_PER_ADDRESS),
            per_identity: Shares::new(MAX_CONNECTIONS_PER_IDENTITY),
            viewers: Shares::new(MAX_VIEWER_CONNECTIONS),
            below_admin: Shares::new(MAX_BELOW_ADMIN_CONNECTIONS),
            pending: Mutex::default(),
            closed,
        })
    }

    /// Guards an accepted connection, or `None` (counted) if no place can be made for it. When its
    /// address's unauthenticated places are all taken, it takes the place of one of the address's
    /// unauthenticated connections (closed; see [`Conns::evict_oldest`]): whoever else shares the address
    /// cannot keep a client of it out by holding connections open without authenticating.
    pub fn guard<S: std::os::fd::AsRawFd>(
        self: &Arc<Self>,
        io: S,
        peer: Option<IpAddr>,
        permit: OwnedSemaphorePermit,
    ) -> Option<Guarded<S>> {
        let conn = Conn::default();
        conn.0.fd.store(io.as_raw_fd(), Ordering::Release);
        if let Some(ip) = peer {
            let place = self.per_ip.take(ip).or_else(|| {
                let mut pending = self.pending.lock().ok()?;
                self.evict_oldest(&mut pending, ip)
            });
            let Some(s) = place else {
                self.closed.address_full.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            if let Ok(mut pre) = conn.0.preauth.lock() {
                *pre = Some(s);
            }
            if !self.enter_pending(ip, &conn) {
                self.closed.preauth_full.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        Some(Guarded {
            slot: Slot { conns: Arc::clone(self), peer, conn: conn.clone() },
            io,
            deadline: Some(Box::pin(tokio::time::sleep(AUTH_DEADLINE))),
            idle: None,
            seen: 0,
            conn,
            _permit: permit,
        })
    }

    /// A request on `conn` was answered on a listener that authenticates nobody (`/metrics`): its
    /// first-request deadline is lifted, but it stays among the pending connections for its whole life
    /// (there is no identity to cap it by), so that a newcomer from an address holding fewer always
    /// finds a place: answered keep-alive connections of a few addresses cannot fill the listener.
    pub fn answered(&self, conn: &Conn) {
        conn.admit();
    }

    /// The connection a request came on.
    pub fn conn_of(&self, ext: &http::Extensions) -> Option<Conn> {
        match ext.get::<UnixConn>() {
            Some(u) => Some(u.conn.clone()),
            None => tcp_conn_of(ext).map(|t| t.conn.clone()),
        }
    }

    /// A request failed authentication: counted on its connection, which is closed after
    /// [`MAX_AUTH_FAILURES`] (once the last refusal has reached the client) and at once on any
    /// further request.
    pub fn auth_failed(&self, ext: &http::Extensions) {
        let Some(c) = self.conn_of(ext) else { return };
        let n = c.0.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if n == MAX_AUTH_FAILURES {
            self.closed.auth_failures.fetch_add(1, Ordering::Relaxed);
            c.close_soon();
        } else if n > MAX_AUTH_FAILURES {
            c.close();
        }
    }

    /// Admits the connection a request came on (call it once the request has passed authentication)
    /// and puts the connection's [`Conn`] into the request for the handlers.
    /// On TCP the connection counts against `identity`'s [`MAX_CONNECTIONS_PER_IDENTITY`] from then
    /// on; one beyond is refused (RESOURCE_EXHAUSTED) and closed.
    pub fn admit(
        &self,
        ext: &mut http::Extensions,
        identity: &str,
        role: crate::access::Role,
    ) -> Result<(), tonic::Status> {
        let Some(c) = self.conn_of(ext) else { return Ok(()) };
        if let Some(ip) = tcp_conn_of(ext).and_then(|t| t.ip) {
            let Ok(mut held) = c.0.identity.lock() else {
                return Err(tonic::Status::internal("connection state poisoned"));
            };
            if held.is_none() {
                let shares = self.places(identity, role, ip);
                let shares = match shares {
                    Ok(s) => s,
                    Err(why) => {
                        drop(held);
                        return Err(self.no_place(&c, why, role));
                    }
                };
                *held = Some(shares);
                // No longer among its address's unauthenticated connections.
                if let Ok(mut pre) = c.0.preauth.lock() {
                    pre.take();
                }
            }
            drop(held);
            self.leave_pending(ip, &c);
        }
        c.admit();
        ext.insert(c);
        Ok(())
    }
}

impl Conns {
    /// A place for a connection of `identity` with `role` from `ip`: among the identity's, its role's,
    /// and its role's at its address.
    fn places(&self, identity: &str, role: crate::access::Role, ip: IpAddr) -> Result<Places, NoPlace> {
        use crate::access::Role;
        let mine = self.per_identity.take(identity.to_string()).ok_or(NoPlace::Identity)?;
        let mut roles = Vec::new();
        if role < Role::Admin {
            roles.push(self.below_admin.take(()).ok_or(NoPlace::Role(MAX_BELOW_ADMIN_CONNECTIONS))?);
        }
        if role < Role::Operator {
            roles.push(self.viewers.take(()).ok_or(NoPlace::Role(MAX_VIEWER_CONNECTIONS))?);
        }
        let address = self.per_ip_role.take((ip, role)).ok_or(NoPlace::Address)?;
        Ok(Places { _identity: mine, _roles: roles, _address: address })
    }

    /// Refuses an authenticated connection that found no place (counted; closed once the refusal is sent).
    fn no_place(&self, c: &Conn, why: NoPlace, role: crate::access::Role) -> tonic::Status {
        let counter = match why {
            NoPlace::Identity => &self.closed.identity_full,
            NoPlace::Role(_) => &self.closed.role_full,
            NoPlace::Address => &self.closed.address_role_full,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        c.close_soon();
        tonic::Status::resource_exhausted(match why {
            NoPlace::Identity => format!(
                "this client's identity already has {MAX_CONNECTIONS_PER_IDENTITY} connections open, its most: use \
                 those, or close one; this connection is closed"
            ),
            NoPlace::Role(n) => format!(
                "the {role} role's clients together already have {n} connections open, their most (the other places \
                 are kept for higher roles): use those, or close one; this connection is closed"
            ),
            NoPlace::Address => format!(
                "the {role} role's clients already have {MAX_CONNECTIONS_PER_ADDRESS} connections open from this \
                 address, their most: use those, or close one; this connection is closed"
            ),
        })
    }
}

/// The guarded TCP connection of a request (with or without TLS).
fn tcp_conn_of(ext: &http::Extensions) -> Option<&TcpConn> {
    ext.get::<TcpConn>().or_else(|| ext.get::<TlsConnectInfo<TcpConn>>().map(TlsConnectInfo::get_ref))
}

/// The peer address of a TCP request (with or without TLS).
pub(crate) fn peer_of(ext: &http::Extensions) -> Option<SocketAddr> {
    tcp_conn_of(ext).and_then(|i| i.tcp.remote_addr())
}

/// Frees a connection's places when the connection goes.
struct Slot {
    conns: Arc<Conns>,
    peer: Option<IpAddr>,
    conn: Conn,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(ip) = self.peer else { return };
        self.conns.leave_pending(ip, &self.conn);
        if let Ok(mut held) = self.conn.0.identity.lock() {
            held.take();
        }
        if let Ok(mut pre) = self.conn.0.preauth.lock() {
            pre.take();
        }
    }
}

/// An accepted connection holding its place among the allowed open connections, under its deadline.
pub struct Guarded<S> {
    /// Declared (so dropped) before `io`: the connection leaves the pending ones before its socket closes.
    slot: Slot,
    io: S,
    /// Until the first authenticated request; `None` once admitted.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Authenticated TCP connection with no request in flight: until it is closed as idle.
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    /// [`State::started`] when the idle timeout was last (re)started.
    seen: u64,
    conn: Conn,
    _permit: OwnedSemaphorePermit,
}

impl<S> Guarded<S> {
    /// The guarded connection.
    pub fn conn(&self) -> Conn {
        self.conn.clone()
    }

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
            if let Some(e) = self.idle_check(cx) {
                return Some(e);
            }
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

    /// The idle timeout of an authenticated TCP connection: running while no request is in flight,
    /// restarted by each request.
    fn idle_check(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        self.slot.peer?;
        let started = self.conn.0.started.load(Ordering::Relaxed);
        if self.conn.0.in_flight.load(Ordering::Acquire) > 0 || started != self.seen {
            self.seen = started;
            self.idle = None;
            if self.conn.0.in_flight.load(Ordering::Acquire) > 0 {
                return None;
            }
        }
        let idle = self.idle.get_or_insert_with(|| Box::pin(tokio::time::sleep(IDLE_TIMEOUT)));
        if idle.as_mut().poll(cx).is_ready() {
            self.idle = None;
            self.slot.conns.closed.idle.fetch_add(1, Ordering::Relaxed);
            self.conn.close();
            return Some(std::io::Error::new(std::io::ErrorKind::TimedOut, "idle"));
        }
        None
    }
}

use std::future::Future as _;

impl Connected for Guarded<tokio::net::TcpStream> {
    type ConnectInfo = TcpConn;
    fn connect_info(&self) -> Self::ConnectInfo {
        TcpConn { tcp: self.io.connect_info(), conn: self.conn.clone(), ip: self.slot.peer }
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
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before && !self.conn.is_admitted() {
            self.conn.0.spoke.store(true, Ordering::Release);
        }
        r
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
