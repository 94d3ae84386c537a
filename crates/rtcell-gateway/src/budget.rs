//! The bytes the gateway holds for its clients, under a budget per identity and one for all: request
//! bodies received but not yet handled (a unary request is buffered whole before it is decoded) and
//! reply frames produced but not yet taken by the connection (a client that does not read).
//!
//! Every request body and every reply body passes through a [`Metered`] body: a request's data frames
//! are counted as they arrive and given back when the body is dropped (decoded or abandoned); a reply's
//! last data frame is counted until the connection asks for the next frame (it does once HTTP/2 flow
//! control let the frame out) or drops the body. A request frame that would take its identity or the
//! gateway over budget ends the request with RESOURCE_EXHAUSTED before the frame is kept; a reply frame
//! likewise ends its reply with RESOURCE_EXHAUSTED (trailers only) in place of the frame.
//!
//! Not counted here, and bounded otherwise: what HTTP/2 holds below the service (at most each
//! connection's receive window, [`crate::server`]), and a decoded request while its handler runs (no
//! larger than the request that was counted).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tonic::Status;

/// Bytes held at once for one identity's requests and replies (over all its connections).
pub const PER_IDENTITY_BYTES: usize = 32 << 20;
/// Bytes held at once for all clients together.
pub const TOTAL_BYTES: usize = 128 << 20;

/// The budget: bytes held per identity and in all.
#[derive(Default)]
pub struct Budget {
    total: AtomicUsize,
    per: Mutex<HashMap<String, usize>>,
}

impl Budget {
    pub fn new() -> Arc<Budget> {
        Arc::new(Budget::default())
    }

    /// Bytes held now, in all.
    pub fn held(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Takes `n` bytes for `key`, or `Err` naming the budget it would go over.
    fn take(&self, key: &str, n: usize) -> Result<(), Status> {
        let Ok(mut per) = self.per.lock() else { return Err(Status::internal("budget poisoned")) };
        let mine = per.get(key).copied().unwrap_or(0);
        if mine + n > PER_IDENTITY_BYTES {
            return Err(Status::resource_exhausted(format!(
                "this client's identity already has {} KiB of requests and replies in flight, its most is {} MiB: \
                 wait for those to finish, then retry",
                mine >> 10,
                PER_IDENTITY_BYTES >> 20
            )));
        }
        let total = self.total.load(Ordering::Acquire);
        if total + n > TOTAL_BYTES {
            return Err(Status::resource_exhausted(format!(
                "the gateway holds {} MiB of requests and replies in flight, its most is {} MiB: retry later",
                total >> 20,
                TOTAL_BYTES >> 20
            )));
        }
        per.insert(key.to_string(), mine + n);
        self.total.fetch_add(n, Ordering::AcqRel);
        Ok(())
    }

    fn give(&self, key: &str, n: usize) {
        if n == 0 {
            return;
        }
        if let Ok(mut per) = self.per.lock() {
            if let Some(m) = per.get_mut(key) {
                *m = m.saturating_sub(n);
                if *m == 0 {
                    per.remove(key);
                }
            }
            self.total.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// Which way a [`Metered`] body goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// A request body: its frames are held until the body is dropped.
    Request,
    /// A reply body: its last data frame is held until the next frame is asked for.
    Reply,
}

/// Called with each frame's trailers (and the reply's own refusal), e.g. to audit a failed status.
pub type OnTrailers = Box<dyn Fn(&http::HeaderMap) + Send + Sync>;

/// A body whose bytes count against a [`Budget`] (see the module).
pub struct Metered {
    inner: tonic::body::Body,
    budget: Arc<Budget>,
    key: String,
    way: Way,
    held: usize,
    done: bool,
    on_trailers: Option<OnTrailers>,
    /// Kept as long as the body (e.g. the request's place among its connection's in-flight ones).
    _keep: Option<Box<dyn Send + Sync>>,
}

impl Metered {
    pub fn new(inner: tonic::body::Body, budget: Arc<Budget>, key: String, way: Way) -> Metered {
        Metered { inner, budget, key, way, held: 0, done: false, on_trailers: None, _keep: None }
    }

    /// Calls `f` with the reply's trailers.
    pub fn on_trailers(mut self, f: OnTrailers) -> Metered {
        self.on_trailers = Some(f);
        self
    }

    /// Keeps `k` until the body is dropped.
    pub fn keep(mut self, k: Box<dyn Send + Sync>) -> Metered {
        self._keep = Some(k);
        self
    }

    fn release(&mut self) {
        self.budget.give(&self.key, std::mem::take(&mut self.held));
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.release();
    }
}

impl Body for Metered {
    type Data = bytes_of::Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.way == Way::Reply {
            // The connection asks for the next frame: the one before has left.
            self.release();
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => f,
            other => return other,
        };
        if let Some(d) = frame.data_ref() {
            let n = d.len();
            if let Err(status) = self.budget.take(&self.key, n) {
                self.done = true;
                return Poll::Ready(match self.way {
                    Way::Request => Some(Err(status)),
                    Way::Reply => {
                        let all = status.into_http::<tonic::body::Body>().into_parts().0.headers;
                        let mut t = http::HeaderMap::new();
                        for name in ["grpc-status", "grpc-message"] {
                            if let Some(v) = all.get(name) {
                                t.insert(name, v.clone());
                            }
                        }
                        if let Some(f) = &self.on_trailers {
                            f(&t);
                        }
                        Some(Ok(Frame::trailers(t)))
                    }
                });
            }
            self.held += n;
        } else if let (Some(t), Some(f)) = (frame.trailers_ref(), &self.on_trailers) {
            f(t);
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The bytes type of tonic's bodies.
mod bytes_of {
    pub use tonic::codegen::Bytes;
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// A request body that sends `frames` frames of 16 KiB and then never ends (an unfinished upload).
    fn unfinished(frames: usize) -> tonic::body::Body {
        let chunk = tonic::codegen::Bytes::from(vec![0u8; 16 * 1024]);
        let data = (0..frames).map(move |_| Ok::<_, Status>(Frame::data(chunk.clone())));
        let s = tokio_stream::StreamExt::chain(tokio_stream::iter(data), tokio_stream::pending());
        tonic::body::Body::new(http_body_util::StreamBody::new(s))
    }

    #[test]
    fn many_unfinished_requests_of_one_viewer_never_hold_more_than_its_budget_and_leave_room() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let b = Budget::new();
            // 16 connections x 32 streams of a 2 MiB request each: 1 GiB asked for, never finished.
            let mut bodies = Vec::new();
            let mut refused = 0;
            for _ in 0..16 * 32 {
                let mut body = Metered::new(unfinished(128), Arc::clone(&b), "viewer".into(), Way::Request);
                loop {
                    match tokio::time::timeout(std::time::Duration::from_millis(1), body.frame()).await {
                        Ok(Some(Ok(_))) => assert!(b.held() <= PER_IDENTITY_BYTES, "{}", b.held()),
                        Ok(Some(Err(e))) => {
                            assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
                            refused += 1;
                            break;
                        }
                        Ok(None) | Err(_) => break,
                    }
                }
                bodies.push(body);
            }
            assert!(refused > 0);
            assert!(b.held() <= PER_IDENTITY_BYTES, "{}", b.held());
            // Another client's reply (a statistics snapshot) still passes.
            let mut reply = Metered::new(unfinished(1), Arc::clone(&b), "admin".into(), Way::Reply);
            assert!(matches!(reply.frame().await, Some(Ok(f)) if f.is_data()));
            // The viewer goes: nothing is held any more.
            drop(bodies);
            drop(reply);
            assert_eq!(b.held(), 0);
        });
    }

    #[test]
    fn takes_stop_at_the_identity_and_the_total_and_come_back() {
        let b = Budget::new();
        assert!(b.take("a", PER_IDENTITY_BYTES).is_ok());
        assert_eq!(b.take("a", 1).unwrap_err().code(), tonic::Code::ResourceExhausted);
        for k in ["b", "c", "d"] {
            b.take(k, PER_IDENTITY_BYTES).unwrap();
        }
        assert_eq!(b.held(), TOTAL_BYTES);
        assert_eq!(b.take("e", 1).unwrap_err().code(), tonic::Code::ResourceExhausted);
        b.give("a", PER_IDENTITY_BYTES);
        assert!(b.take("e", 1).is_ok());
    }
}
