//! Request and reply bodies counted against the [budget](crate::budget).
//!
//! A request body is read as the gRPC messages it carries (each a 5-byte prefix: a flag and the
//! message's length, big-endian, then the message): when a prefix is complete, the length it declares
//! (and the prefix) is taken from the caller's budget before the frame goes on, so the decoder, which
//! sets aside a buffer of the declared length as soon as it sees the prefix, never sets aside anything
//! uncounted. A prefix over the method's [limit](crate::budget::request_limit), or over the budget,
//! ends the request with RESOURCE_EXHAUSTED before the frame is kept. What was taken is given back when
//! the body is dropped (decoded or abandoned).
//!
//! A reply's data frame is taken from the budget when it is produced and handed to the connection as
//! bytes (a copy of its own length) that give it back when they are dropped, which the HTTP/2
//! connection does once it has written them to the socket (or the stream is gone): a client that does
//! not read holds its unread replies under its budget. A frame that would go over ends its reply with RESOURCE_EXHAUSTED (trailers only)
//! in place of the frame.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tonic::Status;

use crate::budget::{Account, request_limit};

/// The length prefix of a gRPC message: a compression flag and a big-endian `u32`.
const PREFIX_BYTES: usize = 5;

/// Called with each frame's trailers (and the reply's own refusal), e.g. to audit a failed status.
pub type OnTrailers = Box<dyn Fn(&http::HeaderMap) + Send + Sync>;

/// Which way a [`Metered`] body goes, and what it needs for that.
enum Way {
    /// A request body of a method whose messages may declare `limit` bytes in all.
    Request { method: String, limit: usize, messages: Messages },
    /// A reply body.
    Reply,
}

/// Where a request body is among its messages.
#[derive(Default)]
struct Messages {
    /// The prefix read so far, and how many of its bytes.
    prefix: [u8; PREFIX_BYTES],
    have: usize,
    /// Bytes of the current message still to come.
    left: usize,
    /// Bytes the body's messages declared, in all.
    declared: usize,
}

impl Messages {
    /// Walks `d`, calling `declare` with the length of each message whose prefix completes in it and
    /// what the body's messages declared before it.
    fn scan(
        &mut self,
        mut d: &[u8],
        mut declare: impl FnMut(usize, usize) -> Result<(), Status>,
    ) -> Result<(), Status> {
        while !d.is_empty() {
            if self.left > 0 {
                let k = self.left.min(d.len());
                self.left -= k;
                d = &d[k..];
                continue;
            }
            let k = (PREFIX_BYTES - self.have).min(d.len());
            self.prefix[self.have..self.have + k].copy_from_slice(&d[..k]);
            self.have += k;
            d = &d[k..];
            if self.have == PREFIX_BYTES {
                self.have = 0;
                let [_, a, b, c, e] = self.prefix;
                let len = u32::from_be_bytes([a, b, c, e]) as usize;
                declare(len, self.declared)?;
                self.declared = self.declared.saturating_add(len);
                self.left = len;
            }
        }
        Ok(())
    }
}

/// A body whose bytes count against its caller's [`Account`] (see the module).
pub struct Metered {
    inner: tonic::body::Body,
    account: Arc<Account>,
    way: Way,
    /// Bytes taken for a request body, given back on drop.
    held: usize,
    done: bool,
    on_trailers: Option<OnTrailers>,
    /// Kept as long as the body (e.g. the request's place among its connection's in-flight ones).
    _keep: Option<Box<dyn Send + Sync>>,
}

impl Metered {
    /// The request body of a call of `method`.
    pub fn request(inner: tonic::body::Body, account: Arc<Account>, method: &str) -> Metered {
        let way =
            Way::Request { method: method.to_string(), limit: request_limit(method), messages: Messages::default() };
        Metered { inner, account, way, held: 0, done: false, on_trailers: None, _keep: None }
    }

    /// A reply body.
    pub fn reply(inner: tonic::body::Body, account: Arc<Account>) -> Metered {
        Metered { inner, account, way: Way::Reply, held: 0, done: false, on_trailers: None, _keep: None }
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

    /// Counts a request's data frame: the messages whose prefixes complete in it.
    fn count_request(&mut self, d: &[u8]) -> Result<(), Status> {
        let Way::Request { method, limit, messages } = &mut self.way else { return Ok(()) };
        let (account, held) = (&self.account, &mut self.held);
        messages.scan(d, |len, before| {
            let all = before.saturating_add(len);
            if all > *limit {
                return Err(Status::resource_exhausted(format!(
                    "{method} takes requests of at most {limit} bytes; this one declares {all}"
                )));
            }
            account.take(PREFIX_BYTES + len)?;
            *held += PREFIX_BYTES + len;
            Ok(())
        })
    }

    /// A reply's data frame, counted until the connection drops it; or the refusal in its place.
    fn count_reply(&mut self, d: Bytes) -> Result<Bytes, Status> {
        let n = d.len();
        if n == 0 {
            return Ok(d);
        }
        self.account.take(n)?;
        // Copied into a buffer of its own length: the encoder's buffer, which may be up to twice as
        // large, goes with the encoder, and what stays queued is what is counted.
        Ok(Bytes::from_owner(Sending { data: d.to_vec(), account: Arc::clone(&self.account) }))
    }

    /// The reply's refusal as its trailers (`grpc-status`, `grpc-message`).
    fn refusal_trailers(&self, status: Status) -> http::HeaderMap {
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
        t
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.account.give(std::mem::take(&mut self.held));
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => f,
            other => return other,
        };
        let frame = match frame.into_data() {
            Ok(d) => d,
            Err(frame) => {
                if let (Some(t), Some(f)) = (frame.trailers_ref(), &self.on_trailers) {
                    f(t);
                }
                return Poll::Ready(Some(Ok(frame)));
            }
        };
        let counted = match self.way {
            Way::Request { .. } => self.count_request(&frame).map(|()| frame),
            Way::Reply => self.count_reply(frame),
        };
        Poll::Ready(Some(match counted {
            Ok(d) => Ok(Frame::data(d)),
            Err(status) => {
                self.done = true;
                match self.way {
                    Way::Request { .. } => Err(status),
                    Way::Reply => Ok(Frame::trailers(self.refusal_trailers(status))),
                }
            }
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A reply frame on its way out: its bytes stay taken from the budget until the connection drops it.
struct Sending {
    data: Vec<u8>,
    account: Arc<Account>,
}

impl AsRef<[u8]> for Sending {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        self.account.give(self.data.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Role;
    use crate::budget::{Budget, PER_IDENTITY_BYTES};
    use http_body_util::BodyExt as _;

    /// A body that sends `frames` and then never ends (an unfinished upload).
    fn unfinished(frames: Vec<Vec<u8>>) -> tonic::body::Body {
        let data = frames.into_iter().map(|f| Ok::<_, Status>(Frame::data(Bytes::from(f))));
        let s = tokio_stream::StreamExt::chain(tokio_stream::iter(data), tokio_stream::pending());
        tonic::body::Body::new(http_body_util::StreamBody::new(s))
    }

    fn prefix(len: usize) -> Vec<u8> {
        let mut p = vec![0u8];
        p.extend_from_slice(&(len as u32).to_be_bytes());
        p
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    /// The next frame, or `None` if the body has none ready (it waits for bytes that never come).
    async fn next(b: &mut Metered) -> Option<Result<Frame<Bytes>, Status>> {
        tokio::time::timeout(std::time::Duration::from_millis(5), b.frame()).await.ok().flatten()
    }

    #[test]
    fn a_prefix_declaring_more_than_the_methods_limit_is_refused_before_its_bytes_come() {
        rt().block_on(async {
            let b = Budget::new();
            let viewer = Account::new(Arc::clone(&b), "v".into(), Role::Viewer);
            let mut first = prefix(2 << 20);
            first.extend_from_slice(b"\x0a\x05");
            let mut body = Metered::request(unfinished(vec![first]), viewer, "ReadSignal");
            let e = next(&mut body).await.expect("answered at once").unwrap_err();
            assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
            assert!(e.message().contains("ReadSignal") && e.message().contains("16384"), "{e}");
            assert_eq!(b.held(), 0);
            // Two messages of one body count together.
            let admin = Account::new(Arc::clone(&b), "a".into(), Role::Admin);
            let mut two = prefix(10_000);
            two.extend(vec![0u8; 10_000]);
            two.extend(prefix(10_000));
            let mut body = Metered::request(unfinished(vec![two]), admin, "GetStatus");
            assert_eq!(next(&mut body).await.unwrap().unwrap_err().code(), tonic::Code::ResourceExhausted);
        });
    }

    #[test]
    fn a_declared_length_is_taken_when_its_prefix_arrives_and_given_back_when_the_body_goes() {
        rt().block_on(async {
            let b = Budget::new();
            let a = Account::new(Arc::clone(&b), "a".into(), Role::Admin);
            // The prefix arrives in two frames, then a little of the message.
            let p = prefix(1 << 20);
            let frames = vec![p[..3].to_vec(), p[3..].to_vec(), vec![7u8; 100]];
            let mut body = Metered::request(unfinished(frames), a, "DeployPayload");
            assert!(next(&mut body).await.unwrap().is_ok());
            assert_eq!(b.held(), 0, "half a prefix declares nothing yet");
            assert!(next(&mut body).await.unwrap().is_ok());
            assert_eq!(b.held(), (1 << 20) + PREFIX_BYTES, "the whole declared message, before its bytes");
            assert!(next(&mut body).await.unwrap().is_ok());
            assert_eq!(b.held(), (1 << 20) + PREFIX_BYTES);
            assert!(next(&mut body).await.is_none(), "waits for the rest");
            drop(body);
            assert_eq!(b.held(), 0);
        });
    }

    #[test]
    fn many_unfinished_requests_of_one_identity_never_declare_more_than_its_budget() {
        rt().block_on(async {
            let b = Budget::new();
            let a = Account::new(Arc::clone(&b), "a".into(), Role::Admin);
            // 512 unfinished requests each declaring a 2 MiB payload (1 GiB asked for), 16 KiB sent.
            let mut bodies = Vec::new();
            let mut refused = 0;
            for _ in 0..512 {
                let mut first = prefix(2 << 20);
                first.extend(vec![0u8; 16 * 1024]);
                let mut body = Metered::request(unfinished(vec![first]), Arc::clone(&a), "DeployPayload");
                if let Some(Err(e)) = next(&mut body).await {
                    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
                    refused += 1;
                }
                assert!(b.held() <= PER_IDENTITY_BYTES, "{}", b.held());
                bodies.push(body);
            }
            assert_eq!(512 - refused, PER_IDENTITY_BYTES / ((2 << 20) + PREFIX_BYTES));
            drop(bodies);
            assert_eq!(b.held(), 0);
        });
    }

    #[test]
    fn a_reply_frame_counts_until_the_connection_drops_it_and_one_over_the_budget_is_refused() {
        rt().block_on(async {
            let b = Budget::new();
            let v = Account::new(Arc::clone(&b), "v".into(), Role::Viewer);
            let mut reply = Metered::reply(unfinished(vec![vec![1u8; 64 * 1024]]), Arc::clone(&v));
            let frame = next(&mut reply).await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(frame.len(), 64 * 1024);
            assert!(next(&mut reply).await.is_none());
            // The connection asked for the next frame and the body is gone: the bytes are still queued.
            drop(reply);
            assert_eq!(b.held(), 64 * 1024);
            drop(frame);
            assert_eq!(b.held(), 0);
            // A frame over the identity's budget: the reply ends with RESOURCE_EXHAUSTED in its place.
            v.take(PER_IDENTITY_BYTES - 1000).unwrap();
            let mut reply = Metered::reply(unfinished(vec![vec![1u8; 4096]]), Arc::clone(&v));
            let t = next(&mut reply).await.unwrap().unwrap().into_trailers().unwrap();
            assert_eq!(t.get("grpc-status").unwrap(), "8");
            assert!(reply.is_end_stream());
        });
    }
}
