//! `/metrics` over plain HTTP/1.1 for Prometheus (read-only: it shows figures, it changes nothing).
//! The same limits as the gRPC listeners: [`MAX_CONNECTIONS`](crate::server::MAX_CONNECTIONS) open,
//! [`MAX_CONNECTIONS_PER_ADDRESS`](crate::conn::MAX_CONNECTIONS_PER_ADDRESS) per address, and a
//! request's headers within [`AUTH_DEADLINE`](crate::conn::AUTH_DEADLINE) of accept or of the previous
//! answer. Every connection is "pending" (nobody authenticates here): they hold at most
//! [`MAX_PREAUTH`](crate::conn::MAX_PREAUTH) places, and when those are taken a new connection takes
//! the place of the oldest one of the address holding the most, as unauthenticated connections on the
//! gRPC listeners (the same [`Conns`]). Closed connections are counted apart from the gRPC listeners'.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::conn::Conns;
use crate::service::Gateway;

/// The content type of the text exposition format 0.0.4.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn serve(l: tokio::net::TcpListener, gateway: Arc<Gateway>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let open = Arc::new(tokio::sync::Semaphore::new(crate::server::MAX_CONNECTIONS));
    // The gRPC listeners' guard: the per-address cap, the deadline, and the pending connections' share
    // of the listener with the eviction of the oldest of the address holding the most.
    let conns = Conns::new(Arc::clone(&gateway.counters.metrics_closed));
    loop {
        let (io, peer) = tokio::select! {
            r = l.accept() => match r {
                Ok(c) => c,
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() {
                    return;
                }
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            gateway.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
            conns.closed.listener_full.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let Some(guarded) = conns.guard(io, Some(peer.ip()), permit) else {
            gateway.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let g = Arc::clone(&gateway);
        let cs = Arc::clone(&conns);
        let conn = guarded.conn();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let (g, cs, conn) = (Arc::clone(&g), Arc::clone(&cs), conn.clone());
                async move {
                    let r = answer(g, req).await;
                    cs.answered(&conn);
                    r
                }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .max_buf_size(16 * 1024)
                .header_read_timeout(crate::conn::AUTH_DEADLINE)
                .serve_connection(TokioIo::new(guarded), svc);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(60), served).await;
        });
    }
}

async fn answer(g: Arc<Gateway>, req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |code: StatusCode, ctype: &str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = code;
        if let Ok(v) = ctype.parse() {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        Ok(r)
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => match tokio::task::spawn_blocking(move || g.metrics_text()).await {
            Ok(Ok(text)) => reply(StatusCode::OK, TEXT_FORMAT, text),
            Ok(Err(e)) => reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{e}\n")),
            Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{e}\n")),
        },
        (_, "/metrics") => reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n".into()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "rtcell gateway: Prometheus metrics are at /metrics\n".into()),
    }
}
