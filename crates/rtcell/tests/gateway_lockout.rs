//! Nobody holds the gateway: idle sockets from many addresses before authentication, one identity's
//! many connections or streams after it, `/metrics` sockets, and clients guessing tokens never lock
//! another client out (each test is an attack that worked on an earlier gateway).

mod common;
#[path = "common/gw.rs"]
mod gw;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gw::{ADMIN_TOKEN, VIEWER_TOKEN, closed, loopback, rt, serve_tcp_with_roles, tcp, tcp_from};
use rtcell_gateway::client::{Client, connect, connect_from, connect_over};
use rtcell_gateway::conn::{MAX_AUTH_FAILURES, MAX_CONNECTIONS_PER_ADDRESS, MAX_CONNECTIONS_PER_IDENTITY};
use rtcell_gateway::listen::Addr;
use rtcell_gateway::pb;
use rtcell_gateway::streams::MAX_STREAMS_PER_IDENTITY;
use tokio::io::AsyncReadExt;

/// A bound against hanging for what must happen after a deadline, far above it.
const PATIENCE: Duration = Duration::from_secs(40);
/// A good client's connection and first answer: milliseconds unloaded; 3 s is a generous bound a
/// loaded machine still meets (the earlier gateway never answered: it closed the connection).
const ANSWER_BOUND: Duration = Duration::from_secs(3);

async fn metrics_of(c: &mut Client) -> String {
    c.get_metrics(pb::GetMetricsRequest {}).await.expect("metrics").into_inner().text
}

/// The admin connects from 127.0.0.1 and is answered within [`ANSWER_BOUND`].
async fn admin_answered(addr: &Addr) -> Client {
    let t0 = Instant::now();
    let attempt = async {
        let mut c = connect(&tcp(addr, Some(ADMIN_TOKEN), None)).await?;
        c.get_status(pb::GetStatusRequest {}).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(c)
    };
    match tokio::time::timeout(ANSWER_BOUND, attempt).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("the admin was refused: {e}"),
        Err(_) => panic!("the admin was not answered within {ANSWER_BOUND:?} ({:?})", t0.elapsed()),
    }
}

/// Holds a connection from `from` that never sends a byte (or, with `ask`, sends `GET /x` over HTTP/1.1
/// every second and reads the answers, as a keep-alive client), making a new one as soon as the gateway
/// closes it, until `stop`.
async fn hold_idle(from: std::net::IpAddr, to: std::net::SocketAddr, stop: Arc<AtomicBool>, ask: bool) {
    use tokio::io::AsyncWriteExt;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = tcp_from(from, to).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let mut buf = [0u8; 4096];
        let mut last = Instant::now() - Duration::from_secs(1);
        while !stop.load(Ordering::Relaxed) {
            if ask && last.elapsed() >= Duration::from_secs(1) {
                last = Instant::now();
                if s.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n").await.is_err() {
                    break;
                }
            }
            match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                _ => {}
            }
        }
    }
}

/// Runs `probe` every 500 ms for 7 s (more than the first-request deadline, so that reconnecting sockets
/// meet it too) beside 8 addresses x their 16 connections to `to`: as many as a listener's places, each
/// idle and reconnecting as soon as the gateway closes it. Returns the number of probes.
async fn beside_flood<F: std::future::Future<Output = ()>>(
    to: std::net::SocketAddr,
    ask: bool,
    mut probe: impl FnMut(usize) -> F,
) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let mut idle = Vec::new();
    for a in 2..=9 {
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            idle.push(tokio::spawn(hold_idle(loopback(a), to, Arc::clone(&stop), ask)));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    let mut n = 0;
    while t0.elapsed() < Duration::from_secs(7) {
        probe(n).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in idle {
        let _ = t.await;
    }
    n
}

#[test]
fn idle_sockets_from_eight_addresses_reconnecting_never_lock_a_client_with_a_token_out() {
    let (s, addr, sa) = serve_tcp_with_roles();
    rt().block_on(async {
        let n = beside_flood(sa, false, |_| async {
            admin_answered(&addr).await;
        })
        .await;
        let text = metrics_of(&mut admin_answered(&addr).await).await;
        assert!(closed(&text, "preauth_full") + closed(&text, "preauth_evicted") >= 1.0, "{text}");
        eprintln!("admin answered {n} of {n} times beside 128 reconnecting idle sockets");
    });
    drop(s);
}

#[test]
fn one_viewer_token_holds_at_most_its_connections_and_never_locks_the_admin_out() {
    let (_s, addr, _) = serve_tcp_with_roles();
    rt().block_on(async {
        let viewer = tcp(&addr, Some(VIEWER_TOKEN), None);
        let mut held = Vec::new();
        // The viewer's connections from several addresses (each under its address's cap).
        for i in 0..MAX_CONNECTIONS_PER_IDENTITY {
            let from = loopback(2 + (i / 8) as u8);
            let mut c = connect_from(&viewer, from).await.expect("connects");
            c.get_status(pb::GetStatusRequest {}).await.expect("a connection within the identity's share");
            held.push(c);
        }
        let mut extra = connect_from(&viewer, loopback(9)).await.expect("connects");
        let e = extra.get_status(pb::GetStatusRequest {}).await.expect_err("one connection beyond the share");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
        assert!(e.message().contains(&MAX_CONNECTIONS_PER_IDENTITY.to_string()), "{e}");
        let mut admin = admin_answered(&addr).await;
        let text = metrics_of(&mut admin).await;
        assert!(closed(&text, "identity_full") >= 1.0, "{text}");
        // The connections within the share still answer.
        held[0].get_status(pb::GetStatusRequest {}).await.expect("held connection answers");
    });
}

#[test]
fn a_viewer_s_connections_from_the_admin_s_address_never_lock_the_admin_out() {
    let (_s, addr, _) = serve_tcp_with_roles();
    rt().block_on(async {
        let viewer = tcp(&addr, Some(VIEWER_TOKEN), None);
        // As many authenticated connections as an address had places, all from the admin's 127.0.0.1.
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            let mut c = connect_from(&viewer, loopback(1)).await.expect("connects");
            c.get_status(pb::GetStatusRequest {}).await.expect("a viewer connection within its places");
            held.push(c);
        }
        // The admin's new connections from the same address find places of their own.
        let mut admin = admin_answered(&addr).await;
        let _second = admin_answered(&addr).await;
        let text = metrics_of(&mut admin).await;
        assert_eq!(closed(&text, "address_full"), 0.0, "{text}");
        assert_eq!(closed(&text, "address_role_full"), 0.0, "{text}");
        held[0].get_status(pb::GetStatusRequest {}).await.expect("the viewer's connections still answer");
    });
}

#[test]
fn silent_sockets_from_the_admin_s_address_never_lock_the_admin_out() {
    let (_s, addr, sa) = serve_tcp_with_roles();
    rt().block_on(async {
        // As many connections as an address has unauthenticated places, from the admin's 127.0.0.1,
        // held open without a byte sent (no credential needed).
        let mut silent = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            silent.push(tcp_from(loopback(1), sa).await.expect("connects"));
        }
        let mut admin = admin_answered(&addr).await;
        let text = metrics_of(&mut admin).await;
        assert_eq!(closed(&text, "address_full"), 0.0, "{text}");
        assert!(closed(&text, "preauth_evicted") >= 1.0, "the oldest silent one made room: {text}");
        drop(silent);
    });
}

#[test]
fn one_silent_socket_from_the_admin_s_address_among_the_listener_s_unauthenticated_share_never_locks_it_out() {
    use rtcell_gateway::conn::MAX_PREAUTH;
    let (_s, addr, sa) = serve_tcp_with_roles();
    rt().block_on(async {
        // The listener's unauthenticated share, one silent socket per address, one of them from the
        // admin's 127.0.0.1: its address holds as many as any. The earlier gateway closed the admin's
        // new connection at once (preauth_full).
        let mut silent = vec![tcp_from(loopback(1), sa).await.expect("connects")];
        for i in 1..MAX_PREAUTH {
            let from = std::net::Ipv4Addr::new(127, 40, (i / 250) as u8, (i % 250 + 1) as u8).into();
            silent.push(tcp_from(from, sa).await.expect("connects"));
        }
        let mut admin = admin_answered(&addr).await;
        let _second = admin_answered(&addr).await;
        let text = metrics_of(&mut admin).await;
        assert_eq!(closed(&text, "preauth_full"), 0.0, "{text}");
        assert!(closed(&text, "preauth_evicted") >= 1.0, "a silent one of its own address made room: {text}");
        drop(silent);
    });
}

#[test]
fn a_client_that_has_spoken_outlives_silent_sockets_opened_after_it_from_its_address() {
    let (_s, addr, sa) = serve_tcp_with_roles();
    rt().block_on(async {
        // The address's unauthenticated places, all taken by silent sockets.
        let mut silent = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            silent.push(tcp_from(loopback(1), sa).await.expect("connects"));
        }
        // A client from the same address takes the oldest's place and writes its preface; it has not
        // made a request yet, so it is not authenticated.
        let io = tcp_from(loopback(1), sa).await.expect("connects");
        let mut client = connect_over(&tcp(&addr, Some(ADMIN_TOKEN), None), io).await.expect("handshake");
        // As many new silent sockets again: each takes the place of the oldest silent one. The earlier
        // gateway closed the oldest, whatever it had sent, so the client's turn came at the last.
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            silent.push(tcp_from(loopback(1), sa).await.expect("connects"));
        }
        let mut watcher = connect_from(&tcp(&addr, Some(ADMIN_TOKEN), None), loopback(2)).await.expect("connects");
        let t0 = Instant::now();
        let want = 1.0 + MAX_CONNECTIONS_PER_ADDRESS as f64;
        loop {
            let text = metrics_of(&mut watcher).await;
            if closed(&text, "preauth_evicted") >= want {
                break;
            }
            assert!(t0.elapsed() < PATIENCE, "the gateway never took in the new sockets: {text}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        client.get_status(pb::GetStatusRequest {}).await.expect("the client that had spoken keeps its connection");
        let text = metrics_of(&mut watcher).await;
        assert_eq!(closed(&text, "preauth_evicted"), want, "{text}");
        drop(silent);
    });
}

#[test]
fn a_client_that_has_spoken_outlives_a_silent_socket_from_its_address_when_every_address_holds_one() {
    use rtcell_gateway::conn::MAX_PREAUTH;
    let (s, addr, sa) = serve_tcp_with_roles();
    let url = s.metrics_url();
    rt().block_on(async {
        // The listener's unauthenticated share, one place per address: a client from 127.0.0.1 that has
        // written its preface (no request yet, so not authenticated), and a silent socket from each of the
        // others.
        let io = tcp_from(loopback(1), sa).await.expect("connects");
        let mut client = connect_over(&tcp(&addr, Some(ADMIN_TOKEN), None), io).await.expect("handshake");
        let mut silent = Vec::new();
        for i in 1..MAX_PREAUTH {
            let from = std::net::Ipv4Addr::new(127, 40, (i / 250) as u8, (i % 250 + 1) as u8).into();
            silent.push(tcp_from(from, sa).await.expect("connects"));
        }
        // A silent socket from the client's address, which then holds as many as any. The earlier gateway
        // made room among that address's own, and the client was the only one there.
        silent.push(tcp_from(loopback(1), sa).await.expect("connects"));
        // Watched on the /metrics listener, whose connections do not count on the gRPC one.
        let t0 = Instant::now();
        loop {
            let u = url.clone();
            let text = tokio::task::spawn_blocking(move || page(&u)).await.unwrap().expect("metrics page");
            if closed(&text, "preauth_evicted") >= 1.0 {
                break;
            }
            assert!(t0.elapsed() < PATIENCE, "the gateway never took in the last socket: {text}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        client.get_status(pb::GetStatusRequest {}).await.expect("the client that had spoken keeps its connection");
        drop(silent);
    });
}

/// A TCP connection to `to` from exactly `local` (SO_REUSEADDR: a port another connected socket holds).
async fn tcp_bound(local: std::net::SocketAddr, to: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let s = tokio::net::TcpSocket::new_v4()?;
    s.set_reuseaddr(true)?;
    s.bind(local)?;
    s.connect(to).await
}

#[test]
fn a_connection_from_the_same_source_port_to_another_local_address_never_stands_for_a_client_s() {
    use rtcell_gateway::conn::AUTH_DEADLINE;
    use tokio::io::AsyncWriteExt;
    let (_s, addr, sa) = serve_tcp_with_roles();
    rt().block_on(async {
        // The client: one connection from 127.0.0.1:X, handshake done, no request yet.
        let io = tcp_bound((loopback(1), 0).into(), sa).await.expect("connects");
        let from = io.local_addr().unwrap();
        let mut client = connect_over(&tcp(&addr, Some(ADMIN_TOKEN), None), io).await.expect("handshake");
        // Another connection from the very same address and port, to the listener's other local address
        // (it listens on 0.0.0.0): the same peer, other ends. It speaks HTTP/2 and waits for the server's
        // settings, so the gateway has taken it in; then it sends nothing more.
        let mut other = tcp_bound(from, std::net::SocketAddr::new(loopback(2), sa.port())).await.expect("connects");
        other.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(PATIENCE, other.read(&mut buf)).await.expect("settings in time").unwrap();
        assert!(n > 0, "the gateway closed the other connection at once");
        // The client's requests admit its own connection, which so outlives the deadline for a first
        // request. The earlier gateway found connections by the peer's address and port: the client's first
        // request admitted the other connection, and the client's was closed at the deadline however busy.
        let t0 = Instant::now();
        let mut calls = 0;
        while t0.elapsed() < AUTH_DEADLINE + Duration::from_secs(2) {
            client.get_status(pb::GetStatusRequest {}).await.unwrap_or_else(|e| {
                panic!("call {calls} at {:?}: the client's connection was closed: {e}", t0.elapsed())
            });
            calls += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(other);
    });
}

#[test]
fn one_viewer_token_holds_at_most_its_share_of_the_statistics_streams() {
    let (_s, addr, _) = serve_tcp_with_roles();
    rt().block_on(async {
        let viewer = tcp(&addr, Some(VIEWER_TOKEN), None);
        let req = || pb::StreamStatsRequest { rate_hz: 0.1, count: 0, buckets: false };
        let mut streams = Vec::new();
        let mut conns = Vec::new();
        // 32 streams to a connection (its most requests in flight).
        for _ in 0..MAX_STREAMS_PER_IDENTITY.div_ceil(32) {
            let mut c = connect(&viewer).await.unwrap();
            for _ in 0..32.min(MAX_STREAMS_PER_IDENTITY - streams.len()) {
                streams.push(c.stream_stats(req()).await.expect("a stream within the share").into_inner());
            }
            conns.push(c);
        }
        let mut c = connect(&viewer).await.unwrap();
        let e = c.stream_stats(req()).await.expect_err("a stream beyond the identity's share");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
        assert!(e.message().contains(&MAX_STREAMS_PER_IDENTITY.to_string()), "{e}");
        let mut admin = admin_answered(&addr).await;
        admin.stream_stats(req()).await.expect("the admin's stream opens beside the viewer's");
        drop(streams);
    });
}

/// One GET /metrics from 127.0.0.1: the status line, or the error.
/// The status line of a `GET /metrics` at `url`.
fn scrape(url: &str) -> Result<String, String> {
    page(url).map(|p| p.lines().next().unwrap_or("").to_string())
}

/// The whole answer (status line, headers, body) to a `GET /metrics` at `url`.
fn page(url: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let mut c = std::net::TcpStream::connect(&host).map_err(|e| e.to_string())?;
    c.set_read_timeout(Some(ANSWER_BOUND)).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut out = String::new();
    c.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

#[test]
fn idle_sockets_of_one_address_never_lock_a_scraper_out_of_metrics() {
    let (s, _, _) = serve_tcp_with_roles();
    let url = s.metrics_url();
    let host: std::net::SocketAddr = url.trim_start_matches("http://").split('/').next().unwrap().parse().unwrap();
    rt().block_on(async {
        // As many idle sockets as the listener takes, from one address.
        let mut idle = Vec::new();
        for _ in 0..rtcell_gateway::server::MAX_CONNECTIONS {
            idle.push(tcp_from(loopback(2), host).await.expect("connects"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let u = url.clone();
        let got = tokio::task::spawn_blocking(move || scrape(&u)).await.unwrap();
        assert!(got.as_deref().is_ok_and(|l| l.starts_with("HTTP/1.1 200")), "scrape beside idle sockets: {got:?}");
        // The ones it kept are closed after the deadline for their request.
        let t0 = Instant::now();
        for mut s in idle {
            let mut buf = [0u8; 64];
            let left = PATIENCE.saturating_sub(t0.elapsed());
            let r = tokio::time::timeout(left, s.read(&mut buf)).await;
            assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "an idle /metrics socket still open after {PATIENCE:?}");
        }
    });
}

/// A scraper beside 8 addresses x 16 connections to `/metrics` that never send a byte, or (`ask`) that
/// ask for a page every second and keep their connections.
fn metrics_beside_eight_addresses(ask: bool) {
    let (s, addr, _) = serve_tcp_with_roles();
    let url = s.metrics_url();
    let host: std::net::SocketAddr = url.trim_start_matches("http://").split('/').next().unwrap().parse().unwrap();
    rt().block_on(async {
        let n = beside_flood(host, ask, |n| {
            let u = url.clone();
            async move {
                let got = tokio::task::spawn_blocking(move || scrape(&u)).await.unwrap();
                assert!(
                    got.as_deref().is_ok_and(|l| l.starts_with("HTTP/1.1 200")),
                    "scrape {n} beside 128 reconnecting sockets (asking: {ask}): {got:?}"
                );
            }
        })
        .await;
        let text = metrics_of(&mut admin_answered(&addr).await).await;
        let evicted =
            gw::closed_on(&text, "metrics", "preauth_full") + gw::closed_on(&text, "metrics", "preauth_evicted");
        assert!(evicted >= 1.0, "the sockets met the pending share of /metrics: {text}");
        eprintln!("scraper answered {n} of {n} times beside 128 reconnecting sockets (asking: {ask})");
    });
}

#[test]
fn idle_sockets_from_eight_addresses_reconnecting_never_lock_a_scraper_out_of_metrics() {
    metrics_beside_eight_addresses(false);
}

#[test]
fn keep_alive_clients_from_eight_addresses_never_lock_a_scraper_out_of_metrics() {
    metrics_beside_eight_addresses(true);
}

/// The `unauthenticated` lines of the audit log: (lines, failures they count).
fn unauthenticated_in(audit: &str) -> (Vec<serde_json::Value>, u64) {
    let lines: Vec<serde_json::Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["action"] == "unauthenticated")
        .collect();
    let n = lines.iter().map(|v| v["what"]["count"].as_u64().unwrap_or(0)).sum();
    (lines, n)
}

#[test]
fn failed_authentications_are_audited_in_aggregate_and_close_their_connection() {
    let (s, addr, _) = serve_tcp_with_roles();
    let wrong = "wrong-0123456789abcdef0123456789";
    rt().block_on(async {
        let t0 = Instant::now();
        let mut c = connect(&tcp(&addr, Some(wrong), None)).await.unwrap();
        let tries = 200;
        for _ in 0..tries {
            let e = c.get_status(pb::GetStatusRequest {}).await.expect_err("a wrong token");
            assert_ne!(e.code(), tonic::Code::Ok);
        }
        // One more after a second: in the next second's line.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let _ = c.get_status(pb::GetStatusRequest {}).await;
        let mut admin = admin_answered(&addr).await;
        let text = metrics_of(&mut admin).await;
        assert!(
            closed(&text, "auth_failures") >= 1.0,
            "no connection closed after {MAX_AUTH_FAILURES} failures: {text}"
        );
        let refused = gw::metric(&text, "rtcell_gateway_requests_total{method=\"GetStatus\",code=\"unauthenticated\"}")
            .unwrap_or(0.0) as u64;
        assert!(refused >= 2 && refused <= tries + 1, "{refused} refusals counted of {}: {text}", tries + 1);
        // Every refusal the gateway counted is in the audit log within its flush period (once a second).
        let (lines, counted) = unauthenticated_in(&s.audit_until(|a| unauthenticated_in(a).1 >= refused));
        assert_eq!(counted, refused, "the audit log counts every refusal: {lines:?}");
        // Aggregated: one line per client and second, whatever the number of refusals.
        let secs = t0.elapsed().as_secs_f64();
        assert!(lines.len() >= 2 && lines.len() as f64 <= secs.ceil() + 1.0, "{} lines in {secs:.1} s", lines.len());
        for v in &lines {
            assert_eq!(v["client"], "tcp 127.0.0.1", "{v}");
        }
    });
}

#[test]
fn refusals_from_many_addresses_write_a_bounded_audit_log_and_lose_no_count() {
    let (s, addr, _) = serve_tcp_with_roles();
    let wrong = "wrong-0123456789abcdef0123456789";
    rt().block_on(async {
        let t0 = Instant::now();
        // 40 addresses, 6 refusals each (under the per-connection close), all within about a second.
        let mut tasks = Vec::new();
        for a in 2..42u8 {
            let target = tcp(&addr, Some(wrong), None);
            tasks.push(tokio::spawn(async move {
                let Ok(mut c) = connect_from(&target, loopback(a)).await else { return 0u64 };
                let mut n = 0;
                for _ in 0..6 {
                    if c.get_status(pb::GetStatusRequest {}).await.is_err() {
                        n += 1;
                    }
                }
                n
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        let text = metrics_of(&mut admin_answered(&addr).await).await;
        let refused = gw::metric(&text, "rtcell_gateway_requests_total{method=\"GetStatus\",code=\"unauthenticated\"}")
            .unwrap_or(0.0) as u64;
        assert!(refused >= 40, "{refused} refusals counted: {text}");
        let others_in = |audit: &str| -> u64 {
            audit
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v["client"] == "(other clients)")
                .map(|v| v["what"]["count"].as_u64().unwrap_or(0))
                .sum()
        };
        let audit = s.audit_until(|a| unauthenticated_in(a).1 + others_in(a) >= refused);
        let ((lines, counted), others) = (unauthenticated_in(&audit), others_in(&audit));
        assert_eq!(counted + others, refused, "every refusal is in a line of its own client or of the others");
        // At most 16 client lines per flush, one flush a second.
        let flushes = t0.elapsed().as_secs_f64().ceil() + 1.0;
        assert!(
            lines.len() as f64 <= flushes * rtcell_gateway::tally::MAX_LINES as f64,
            "{} lines for {flushes} flushes",
            lines.len()
        );
    });
    drop(s);
}

#[test]
fn an_authenticated_connection_with_no_request_in_flight_is_closed_after_the_idle_timeout() {
    use rtcell_gateway::conn::IDLE_TIMEOUT;
    let (_s, addr, _) = serve_tcp_with_roles();
    rt().block_on(async {
        let viewer = tcp(&addr, Some(VIEWER_TOKEN), None);
        // Authenticated once, then only HTTP/2 pings (the client's transport answers them).
        let mut idle = connect_from(&viewer, loopback(2)).await.unwrap();
        idle.get_status(pb::GetStatusRequest {}).await.expect("authenticated");
        // A connection with a stream in flight is not idle.
        let mut busy = connect_from(&viewer, loopback(3)).await.unwrap();
        let mut stream = busy
            .stream_stats(pb::StreamStatsRequest { rate_hz: 0.2, count: 0, buckets: false })
            .await
            .expect("stream opens")
            .into_inner();
        let reader = tokio::spawn(async move {
            let mut n = 0;
            while let Ok(Some(_)) = stream.message().await {
                n += 1;
            }
            n
        });
        // Past the timeout, with a margin for a loaded machine.
        tokio::time::sleep(IDLE_TIMEOUT + Duration::from_secs(8)).await;
        let text = metrics_of(&mut admin_answered(&addr).await).await;
        assert!(closed(&text, "idle") >= 1.0, "an idle authenticated connection still open: {text}");
        assert!(!reader.is_finished(), "a connection with a stream in flight was closed as idle");
        reader.abort();
    });
}

#[test]
fn viewers_together_never_take_the_places_of_higher_roles() {
    use rtcell_gateway::conn::MAX_VIEWER_CONNECTIONS;
    use std::os::unix::fs::PermissionsExt;
    let dir = gw::private_dir();
    let tokens: Vec<String> = (0..4).map(|i| format!("viewer-{i}-0123456789abcdef0123456789")).collect();
    let mut text = format!("admin {ADMIN_TOKEN}\n");
    for t in &tokens {
        text.push_str(&format!("viewer {t}\n"));
    }
    let file = dir.path().join("tokens");
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = gw::serve(&["--listen", "tcp://127.0.0.1:0", "--token-file", &file.display().to_string()]);
    let addr = s.grpc("tcp://");
    rt().block_on(async {
        let mut held = Vec::new();
        let mut refused = None;
        // Four viewer identities, each within its own share, from addresses within theirs.
        'all: for (i, t) in tokens.iter().enumerate() {
            for j in 0..MAX_CONNECTIONS_PER_IDENTITY {
                let from = loopback(2 + ((i * MAX_CONNECTIONS_PER_IDENTITY + j) / 8) as u8);
                let mut c = connect_from(&tcp(&addr, Some(t), None), from).await.expect("connects");
                match c.get_status(pb::GetStatusRequest {}).await {
                    Ok(_) => held.push(c),
                    Err(e) => {
                        refused = Some(e);
                        break 'all;
                    }
                }
            }
        }
        assert_eq!(held.len(), MAX_VIEWER_CONNECTIONS);
        let e = refused.expect("a viewer connection beyond the viewers' places");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
        assert!(e.message().contains("viewer role"), "{e}");
        // The admin still finds a place, and the refusal is counted.
        let mut admin = admin_answered(&addr).await;
        let text = metrics_of(&mut admin).await;
        assert!(closed(&text, "role_full") >= 1.0, "{text}");
    });
}
