//! `/metrics` over plain HTTP/1.1 for Prometheus (read-only: it shows figures, it changes nothing).

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::service::Gateway;

/// The content type of the text exposition format 0.0.4.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn serve(l: tokio::net::TcpListener, gateway: Arc<Gateway>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let open = Arc::new(tokio::sync::Semaphore::new(crate::server::MAX_CONNECTIONS));
    loop {
        let (io, _) = tokio::select! {
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
            gateway.counters.connections_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            continue;
        };
        let g = Arc::clone(&gateway);
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| answer(Arc::clone(&g), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .max_buf_size(16 * 1024)
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(io), svc);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(60), conn).await;
            drop(permit);
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
