//! The misbehaving phase: hostile clients against the gateway's TCP listener, each kind from a
//! loopback address of its own (127.0.0.2-4; the good clients use 127.0.0.1, so a per-address limit
//! meets the hostile ones only):
//!
//! - idle sockets: as many as the gateway's connection cap, never sending a byte; each is opened again
//!   [`REOPEN_AFTER`] after the gateway closes it;
//! - unread streams: connections each opening many StreamStats at 100 Hz with every bucket, whose
//!   flow-control window is never given back (the gateway sees clients that do not read); a connection
//!   whose streams the gateway ended is replaced by a new one;
//! - refused requests at a steady rate: a wrong token, a message that does not decode, an unknown
//!   signal, an out-of-range write, in turn.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prost::Message;
use rtcell_gateway::metrics::code_name;
use rtcell_gateway::pb;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::grpc_raw::{H2, grpc_status, tcp_from};

/// The hostile clients' sources (loopback: any 127/8 address reaches 127.0.0.1's listener).
pub const IDLE_FROM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
pub const STREAMS_FROM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
pub const REFUSED_FROM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4));
/// An idle socket the gateway closed (or refused) is opened again after this pause.
pub const REOPEN_AFTER: Duration = Duration::from_millis(500);

/// How many of each.
#[derive(Debug, Clone)]
pub struct Hostile {
    pub idle_sockets: usize,
    pub stream_conns: usize,
    pub streams_per_conn: usize,
    pub stream_hz: f64,
    pub refused_per_s: u32,
}

impl Default for Hostile {
    fn default() -> Self {
        Hostile {
            idle_sockets: rtcell_gateway::server::MAX_CONNECTIONS,
            stream_conns: 4,
            streams_per_conn: 32,
            stream_hz: 100.0,
            refused_per_s: 50,
        }
    }
}

/// Whom they attack and with what.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// The right token (for the requests refused for what they ask, not for who asks).
    pub token: String,
    /// A writable signal and a value beyond its range.
    pub signal: String,
    pub out_of_range: f64,
}

/// What the hostile clients did and saw.
#[derive(Default)]
pub struct Tally {
    pub idle_opened: AtomicU64,
    /// Closed by the gateway (or refused at once: accepted, then closed).
    pub idle_closed: AtomicU64,
    pub idle_connect_failed: AtomicU64,
    pub stream_conns: AtomicU64,
    /// Answered with a 200 head (the stream runs).
    pub streams_opened: AtomicU64,
    /// Refused with a gRPC status, or not opened at all (no answer, connection gone).
    pub streams_refused: AtomicU64,
    /// Ended by the gateway during the phase (trailers, reset, connection closed).
    pub streams_ended: AtomicU64,
    /// Bytes that reached the unread streams (bounded by the window never given back).
    pub stream_bytes: AtomicU64,
    /// Refused requests by the gRPC status answered (`ok`: accepted, which should not happen).
    pub refused: Mutex<BTreeMap<&'static str, u64>>,
    /// Refused requests without a gRPC answer (transport errors, timeouts).
    pub refused_no_answer: AtomicU64,
    pub first_error: Mutex<Option<String>>,
}

impl Tally {
    fn error(&self, e: String) {
        if let Ok(mut f) = self.first_error.lock()
            && f.is_none()
        {
            *f = Some(e);
        }
    }

    fn code(&self, c: tonic::Code) {
        if let Ok(mut m) = self.refused.lock() {
            *m.entry(code_name(c)).or_default() += 1;
        }
    }

    pub fn refused_total(&self) -> u64 {
        self.refused.lock().map(|m| m.values().sum()).unwrap_or(0) + self.refused_no_answer.load(Ordering::Relaxed)
    }
}

/// Runs the hostile clients until `end`, then closes all they hold.
pub async fn misbehave(h: &Hostile, target: &Target, end: Instant, t: Arc<Tally>) -> Result<(), String> {
    // A source address that cannot be bound (no 127/8 on lo) is a setup error, said at once.
    for from in [IDLE_FROM, STREAMS_FROM, REFUSED_FROM] {
        let s = tokio::net::TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
        s.bind(SocketAddr::new(from, 0)).map_err(|e| format!("the misbehaving clients need {from} on lo: {e}"))?;
    }
    let mut tasks = tokio::task::JoinSet::new();
    // Streams first: their connections must exist before the idle sockets take every place.
    for _ in 0..h.stream_conns {
        tasks.spawn(unread_streams(h.clone(), target.addr, target.token.clone(), end, Arc::clone(&t)));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    tasks.spawn(refused(h.refused_per_s, target.clone(), end, Arc::clone(&t)));
    for _ in 0..h.idle_sockets {
        tasks.spawn(idle_socket(target.addr, end, Arc::clone(&t)));
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| format!("misbehaving client: {e}"))?;
    }
    Ok(())
}

/// One place among the idle sockets, kept filled until `end`.
async fn idle_socket(to: SocketAddr, end: Instant, t: Arc<Tally>) {
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        match tokio::time::timeout_at(end, tcp_from(IDLE_FROM, to)).await {
            Err(_) => return,
            Ok(Err(_)) => {
                t.idle_connect_failed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok(mut s)) => {
                t.idle_opened.fetch_add(1, Ordering::Relaxed);
                // Never a byte sent; what the gateway sends is read and dropped, to see it close.
                let closed = async {
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                };
                if tokio::time::timeout_at(end, closed).await.is_err() {
                    return;
                }
                t.idle_closed.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep_until((Instant::now() + REOPEN_AFTER).min(end)).await;
    }
}

/// Connections each opening `streams_per_conn` StreamStats it never reads, one after the other: when
/// the gateway has ended all the streams of one (or closed it), the next [`REOPEN_AFTER`] later.
async fn unread_streams(h: Hostile, to: SocketAddr, token: String, end: Instant, t: Arc<Tally>) {
    while Instant::now() < end {
        if let Err(e) = stream_conn(&h, to, &token, end, &t).await {
            t.error(format!("unread streams: {e}"));
        }
        tokio::time::sleep_until((Instant::now() + REOPEN_AFTER).min(end)).await;
    }
}

/// One connection of unread streams, until its streams have ended or the phase has.
async fn stream_conn(h: &Hostile, to: SocketAddr, token: &str, end: Instant, t: &Arc<Tally>) -> Result<(), String> {
    let mut c = H2::connect(STREAMS_FROM, to).await.inspect_err(|_| {
        t.streams_refused.fetch_add(h.streams_per_conn as u64, Ordering::Relaxed);
    })?;
    t.stream_conns.fetch_add(1, Ordering::Relaxed);
    let req = pb::StreamStatsRequest { rate_hz: h.stream_hz, count: 0, buckets: true }.encode_to_vec();
    let mut watchers = tokio::task::JoinSet::new();
    let mut failed = None;
    for _ in 0..h.streams_per_conn {
        if Instant::now() >= end {
            break;
        }
        let resp = match c.open("/rtcell.v1.Gateway/StreamStats", token, &req).await {
            Ok(r) => r,
            Err(e) => {
                // The connection is gone or full: no more streams on it.
                t.streams_refused.fetch_add(1, Ordering::Relaxed);
                failed = Some(e);
                break;
            }
        };
        if resp.status() != http::StatusCode::OK || grpc_status(resp.headers()).is_some() {
            t.streams_refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        t.streams_opened.fetch_add(1, Ordering::Relaxed);
        let mut body = resp.into_body();
        let t2 = Arc::clone(t);
        watchers.spawn(async move {
            // Data frames are taken from the connection only to see the end; their window (and the
            // connection's, 64 KiB) is never released, so the gateway soon can send nothing more.
            while let Some(Ok(d)) = body.data().await {
                t2.stream_bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
            }
            t2.streams_ended.fetch_add(1, Ordering::Relaxed);
        });
    }
    // Until every stream has ended or the phase has; then the streams and the connection are dropped.
    let _ = tokio::time::timeout_at(end, async { while watchers.join_next().await.is_some() {} }).await;
    watchers.abort_all();
    drop(c);
    failed.map_or(Ok(()), Err)
}

/// Requests the gateway must refuse, at `per_s`, in turn.
async fn refused(per_s: u32, target: Target, end: Instant, t: Arc<Tally>) {
    let wrong_token = "0".repeat(target.token.len().max(16));
    let write = |name: &str, v: f64| {
        pb::WriteSignalRequest {
            name: name.to_string(),
            values: vec![pb::Value { kind: Some(pb::value::Kind::F64(v)) }],
            timeout_ms: 0,
        }
        .encode_to_vec()
    };
    // Field 1 (the signal's name, a string) holding bytes that are not UTF-8: the message does not decode.
    let malformed: Vec<u8> = vec![0x0a, 0x04, 0xff, 0xfe, 0xc0, 0x80];
    let unknown = write("no.such.signal", 0.0);
    let beyond = write(&target.signal, target.out_of_range);
    let status = pb::GetStatusRequest {}.encode_to_vec();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_s.max(1) as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut conn: Option<H2> = None;
    let mut k: u64 = 0;
    while Instant::now() < end {
        tick.tick().await;
        if conn.is_none() {
            match H2::connect(REFUSED_FROM, target.addr).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    t.refused_no_answer.fetch_add(1, Ordering::Relaxed);
                    t.error(format!("refused requests: {e}"));
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let (path, token, msg) = match k % 4 {
            0 => ("/rtcell.v1.Gateway/GetStatus", wrong_token.as_str(), status.as_slice()),
            1 => ("/rtcell.v1.Gateway/WriteSignal", target.token.as_str(), malformed.as_slice()),
            2 => ("/rtcell.v1.Gateway/WriteSignal", target.token.as_str(), unknown.as_slice()),
            _ => ("/rtcell.v1.Gateway/WriteSignal", target.token.as_str(), beyond.as_slice()),
        };
        k += 1;
        match c.unary(path, token, msg).await {
            Ok(code) => t.code(code),
            Err(e) => {
                t.refused_no_answer.fetch_add(1, Ordering::Relaxed);
                t.error(format!("refused requests: {e}"));
                // The connection may be gone: a new one for the next request.
                conn = None;
            }
        }
    }
}
