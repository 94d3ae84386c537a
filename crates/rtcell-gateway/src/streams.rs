//! Statistics streams with bounded memory: a client that does not read costs the gateway (and the
//! real-time side beside it) next to nothing.
//!
//! - A stream builds its next snapshot only when the transport asks for it, so each stream holds at
//!   most [`QUEUE_SNAPSHOTS`] snapshot beyond what HTTP/2 flow control lets out; the snapshots whose time
//!   passed while the client was not reading are dropped and counted (`dropped_samples` in each
//!   message, and `rtcell_gateway_stream_dropped_samples_total`).
//! - A stream the transport has not asked for anything for [`STALL_DEADLINE`] is ended: its connection
//!   is closed (the client is not reading, so a status could not reach it), and counted.
//! - At most [`MAX_OPEN_STREAMS`] streams are open gateway-wide, none is opened while the bytes held
//!   for clients are above [three quarters of their budget](crate::metrics::STREAMS_BELOW_BYTES): beyond, RESOURCE_EXHAUSTED. A TCP
//!   client's identity (token, certificate) holds at most [`MAX_STREAMS_PER_IDENTITY`] of them.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::{Request, Status};

use crate::conn::Conn;
use crate::pb;
use crate::service::Gateway;
use crate::share::{Share, Shares};

/// Most statistics streams open at once, gateway-wide.
pub const MAX_OPEN_STREAMS: usize = 256;
/// Most statistics streams one identity of a TCP client holds open (its share of [`MAX_OPEN_STREAMS`]).
pub const MAX_STREAMS_PER_IDENTITY: usize = MAX_OPEN_STREAMS / 4;
/// A stream that the transport has not asked for a snapshot for this long (beyond its period) is ended.
pub const STALL_DEADLINE: Duration = Duration::from_secs(10);
/// Snapshots a stream holds beyond what the transport took: the one being built when asked.
pub const QUEUE_SNAPSHOTS: usize = 1;

/// The streams' figures and the gateway-wide cap.
pub struct StreamCounters {
    open: Arc<Semaphore>,
    per_identity: Arc<Shares<String>>,
    /// Snapshots not sent because the client did not read in time.
    pub dropped_samples: AtomicU64,
    /// Streams ended because they made no progress within [`STALL_DEADLINE`].
    pub ended_stalled: AtomicU64,
    /// Streams refused: [`MAX_OPEN_STREAMS`] open, or the process above its memory budget.
    pub refused: AtomicU64,
}

impl Default for StreamCounters {
    fn default() -> Self {
        StreamCounters {
            open: Arc::new(Semaphore::new(MAX_OPEN_STREAMS)),
            per_identity: Shares::new(MAX_STREAMS_PER_IDENTITY),
            dropped_samples: AtomicU64::new(0),
            ended_stalled: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }
}

impl StreamCounters {
    /// Streams open now.
    pub fn open(&self) -> u64 {
        MAX_OPEN_STREAMS.saturating_sub(self.open.available_permits()) as u64
    }
}

/// The stream StreamStats answers with.
pub type StatsStream = Pin<Box<dyn Stream<Item = Result<pb::Stats, Status>> + Send>>;

/// The StreamStats call: checks the request and the caps, and returns the stream.
pub fn stream_stats(g: Arc<Gateway>, req: Request<pb::StreamStatsRequest>) -> Result<StatsStream, Status> {
    let conn = req.extensions().get::<Conn>().cloned();
    let caller = crate::access::caller(&req)?;
    let r = req.into_inner();
    let rate = if r.rate_hz == 0.0 { 1.0 } else { r.rate_hz };
    if !(0.1..=100.0).contains(&rate) {
        return Err(Status::invalid_argument(format!("rate_hz {rate}: give 0.1 to 100 snapshots per second")));
    }
    let counters = &g.counters.streams;
    let held = g.counters.budget.held() as u64;
    if held > crate::metrics::STREAMS_BELOW_BYTES {
        counters.refused.fetch_add(1, Ordering::Relaxed);
        return Err(Status::resource_exhausted(format!(
            "the gateway holds {} MiB for clients' requests and replies, above {} MiB: no new streams until it is below; retry later",
            held >> 20,
            crate::metrics::STREAMS_BELOW_BYTES >> 20
        )));
    }
    let share = match caller.listener {
        crate::access::Listener::Unix => None,
        crate::access::Listener::Tcp => match counters.per_identity.take(caller.key.clone()) {
            Some(s) => Some(s),
            None => {
                counters.refused.fetch_add(1, Ordering::Relaxed);
                return Err(Status::resource_exhausted(format!(
                    "this client's identity has {MAX_STREAMS_PER_IDENTITY} statistics streams open, its most \
                     (of {MAX_OPEN_STREAMS} on this gateway): close one or retry later"
                )));
            }
        },
    };
    let Ok(permit) = Arc::clone(&counters.open).try_acquire_owned() else {
        counters.refused.fetch_add(1, Ordering::Relaxed);
        return Err(Status::resource_exhausted(format!(
            "{MAX_OPEN_STREAMS} statistics streams are open on this gateway, its most: close one or retry later"
        )));
    };
    let period = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let shared = Arc::new(Shared { start, last_poll_ms: AtomicU64::new(0), gone: Notify::new() });
    tokio::spawn(watchdog(Arc::clone(&g), Arc::clone(&shared), period, conn));
    let mut tick = tokio::time::interval_at(start, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    Ok(Box::pin(Snapshots {
        g,
        buckets: r.buckets,
        count: r.count,
        sent: 0,
        period,
        tick,
        next_index: 0,
        dropped: 0,
        done: false,
        shared,
        _permit: permit,
        _share: share,
    }))
}

/// What a stream and its watchdog share.
struct Shared {
    start: Instant,
    /// When the transport last asked for a snapshot, ms since `start`.
    last_poll_ms: AtomicU64,
    /// The stream is gone (dropped).
    gone: Notify,
}

impl Shared {
    fn last_poll(&self) -> Instant {
        self.start + Duration::from_millis(self.last_poll_ms.load(Ordering::Relaxed))
    }
}

/// Ends a stream the transport stopped asking for: closes its connection (which drops the stream and
/// whatever HTTP/2 had buffered for it).
async fn watchdog(g: Arc<Gateway>, shared: Arc<Shared>, period: Duration, conn: Option<Conn>) {
    loop {
        let due = shared.last_poll() + period + STALL_DEADLINE;
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = shared.gone.notified() => return,
        }
        if shared.last_poll() + period + STALL_DEADLINE > Instant::now() {
            continue;
        }
        g.counters.streams.ended_stalled.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = &conn {
            c.close();
            g.counters.closed.stalled_stream.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
}

/// Snapshots at a rate, built when the transport asks for the next.
struct Snapshots {
    g: Arc<Gateway>,
    buckets: bool,
    count: u32,
    sent: u32,
    period: Duration,
    tick: tokio::time::Interval,
    /// The index (since the start, in periods) of the next snapshot due.
    next_index: u64,
    dropped: u64,
    done: bool,
    shared: Arc<Shared>,
    _permit: OwnedSemaphorePermit,
    _share: Option<Share<String>>,
}

impl Stream for Snapshots {
    type Item = Result<pb::Stats, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let now = Instant::now();
        let ms = now.duration_since(self.shared.start).as_millis().min(u128::from(u64::MAX)) as u64;
        self.shared.last_poll_ms.store(ms, Ordering::Relaxed);
        if self.done {
            return Poll::Ready(None);
        }
        if self.tick.poll_tick(cx).is_pending() {
            return Poll::Pending;
        }
        // Every period that passed since the last snapshot sent, but this one, was a snapshot the client
        // did not take in time.
        let index = (now.duration_since(self.shared.start).as_nanos() / self.period.as_nanos().max(1)) as u64;
        if index > self.next_index {
            let missed = index - self.next_index;
            self.dropped += missed;
            self.g.counters.streams.dropped_samples.fetch_add(missed, Ordering::Relaxed);
        }
        self.next_index = index + 1;
        let mut s = self.g.stats_now(self.buckets);
        s.dropped_samples = self.dropped;
        self.sent += 1;
        self.done = s.finished || (self.count > 0 && self.sent >= self.count);
        Poll::Ready(Some(Ok(s)))
    }
}

impl Drop for Snapshots {
    fn drop(&mut self) {
        // Ended before its last snapshot (the client left, or its connection was closed): the snapshots
        // due since it was last asked were not sent either.
        if !self.done {
            let due =
                (Instant::now().duration_since(self.shared.start).as_nanos() / self.period.as_nanos().max(1)) as u64;
            let missed = due.saturating_sub(self.next_index);
            self.g.counters.streams.dropped_samples.fetch_add(missed, Ordering::Relaxed);
        }
        self.shared.gone.notify_one();
    }
}
