//! Where the gateway listens: a Unix socket (default) or TCP, and the caps on open connections.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Semaphore;

use crate::conn::{Conns, Guarded};

/// A listening address as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Unix(p) => write!(f, "unix:{}", p.display()),
            Addr::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

impl Addr {
    /// `unix:PATH`, a path (starting with `/` or `.`), `tcp://HOST:PORT` or `HOST:PORT`.
    pub fn parse(s: &str) -> Result<Addr, String> {
        let s = s.trim();
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Addr::Unix(PathBuf::from(p)));
        }
        if s.starts_with('/') || s.starts_with('.') {
            return Ok(Addr::Unix(PathBuf::from(s)));
        }
        let hostport = s.strip_prefix("tcp://").unwrap_or(s);
        use std::net::ToSocketAddrs;
        let mut addrs = hostport.to_socket_addrs().map_err(|e| {
            format!("{s:?} is not an address: give unix:/path/to.sock, /path/to.sock or tcp://host:port ({e})")
        })?;
        addrs.next().map(Addr::Tcp).ok_or_else(|| format!("{s:?} resolves to no address"))
    }
}

/// The default socket: `$XDG_RUNTIME_DIR/rtcell/gateway.sock`, else `/run/rtcell/gateway.sock` for root,
/// else `/tmp/rtcell-<uid>/gateway.sock`.
pub fn default_socket() -> PathBuf {
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()).map(PathBuf::from)
        && d.is_absolute()
    {
        return d.join("rtcell").join("gateway.sock");
    }
    if uid == 0 {
        return PathBuf::from("/run/rtcell/gateway.sock");
    }
    PathBuf::from(format!("/tmp/rtcell-{uid}/gateway.sock"))
}

/// Makes (or checks) the private directory of a socket: ours, and closed to everyone else.
pub fn private_dir(dir: &Path) -> Result<(), String> {
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
            Ok(())
        }
        Err(e) => Err(format!("{}: {e}", dir.display())),
        Ok(m) if !m.is_dir() => Err(format!("{} is not a directory", dir.display())),
        Ok(m) if m.uid() != uid => Err(format!(
            "{} belongs to uid {}, not to us (uid {uid}): someone else could replace the socket; pick another --listen path",
            dir.display(),
            m.uid()
        )),
        Ok(m) if m.mode() & 0o077 != 0 => Err(format!(
            "{} is open to others (mode {:03o}): run chmod 700 {} or pick another --listen path",
            dir.display(),
            m.mode() & 0o777,
            dir.display()
        )),
        Ok(_) => Ok(()),
    }
}

/// Binds a Unix socket at `path`, mode 0600 from its creation, in a private directory. A socket left
/// by a gateway that is gone is replaced; one a live gateway answers on is not.
pub fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    private_dir(dir)?;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !m.file_type().is_socket() {
            return Err(format!("{} exists and is not a socket: remove it or pick another path", path.display()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!(
                "another gateway is listening on {}: stop it or pick another --listen path",
                path.display()
            ));
        }
        std::fs::remove_file(path).map_err(|e| format!("cannot remove the stale socket {}: {e}", path.display()))?;
    }
    // The umask makes the socket 0600 from the start: no window in which others could connect.
    // SAFETY: umask only swaps the process's file-creation mask.
    let old = unsafe { libc::umask(0o177) };
    let l = tokio::net::UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let l = l.map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
    Ok(l)
}

/// A listener the connection cap can drive.
pub trait Accept: Send + 'static {
    type Io: Send + std::os::fd::AsRawFd + 'static;
    /// A connection and its peer's address (TCP; `None` for a Unix socket).
    fn accept_one(&self) -> impl std::future::Future<Output = std::io::Result<(Self::Io, Option<IpAddr>)>> + Send;
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept_one(&self) -> std::io::Result<(Self::Io, Option<IpAddr>)> {
        self.accept().await.map(|(s, _)| (s, None))
    }
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept_one(&self) -> std::io::Result<(Self::Io, Option<IpAddr>)> {
        let (s, peer) = self.accept().await?;
        let _ = s.set_nodelay(true);
        Ok((s, Some(peer.ip())))
    }
}

/// Accepts connections from `l` while fewer than `max` are open, and fewer than
/// [`MAX_CONNECTIONS_PER_ADDRESS`](crate::conn::MAX_CONNECTIONS_PER_ADDRESS) from the peer's address;
/// beyond that a new connection is closed at once and counted in `refused` and by reason (a flood of
/// connections cannot exhaust the daemon). Each connection is [guarded](crate::conn::Guarded).
pub fn capped<L: Accept>(
    l: L,
    max: usize,
    refused: Arc<AtomicU64>,
    conns: Arc<Conns>,
) -> impl tokio_stream::Stream<Item = std::io::Result<Guarded<L::Io>>> {
    let sem = Arc::new(Semaphore::new(max));
    async_stream(move |tx| async move {
        loop {
            let (io, peer) = match l.accept_one().await {
                Ok(c) => c,
                // A failed accept (EMFILE, a reset before accept) must not end the server.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&sem).try_acquire_owned() else {
                refused.fetch_add(1, Ordering::Relaxed);
                conns.closed.listener_full.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let Some(guarded) = conns.guard(io, peer, permit) else {
                refused.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if tx.send(Ok(guarded)).await.is_err() {
                return;
            }
        }
    })
}

/// A stream fed by a task through a small channel.
fn async_stream<T, F, Fut>(body: F) -> tokio_stream::wrappers::ReceiverStream<T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(body(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
