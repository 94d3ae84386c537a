//! The gateway's limits against misbehaving clients: idle sockets (silent, an HTTP/2 preface, half a TLS
//! handshake) never lock a good client out, and are closed after the deadline; statistics streams that
//! are never read keep the gateway's memory bounded, are counted and ended, and a normal client is
//! still answered.

mod common;
#[path = "common/gw.rs"]
mod gw;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use rtcell_gateway::client::{Client, Connect, connect};
use rtcell_gateway::conn::MAX_CONNECTIONS_PER_ADDRESS;
use rtcell_gateway::listen::Addr;
use rtcell_gateway::pb;
use rtcell_gateway::server::MAX_CONNECTIONS;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
/// The HTTP/2 client preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The start of a TLS record carrying a ClientHello that never comes.
const HALF_HELLO: &[u8] = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
/// How long a test waits for what must happen after the deadline: a bound against hanging, far above it.
const PATIENCE: Duration = Duration::from_secs(40);

use gw::{Served, metric, private_dir, rt, serve, tcp as client};

async fn metrics_of(c: &mut Client) -> String {
    c.get_metrics(pb::GetMetricsRequest {}).await.expect("metrics").into_inner().text
}

/// Connections to a TCP gateway from 127.0.0.2 (another peer than the good client on 127.0.0.1) that
/// each send `hello` (maybe nothing) and then nothing more. Those the gateway refused at once are
/// closed already; the test only needs the sockets.
async fn idle_tcp(to: std::net::SocketAddr, n: usize, hello: &[&[u8]]) -> Vec<tokio::net::TcpStream> {
    let mut out = Vec::new();
    for i in 0..n {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut c = s.connect(to).await.expect("connects");
        let h = hello[i % hello.len()];
        if !h.is_empty() {
            let _ = c.write_all(h).await;
        }
        out.push(c);
    }
    out
}

/// Waits until the gateway has closed each socket (end of stream or an error while reading); panics
/// if one is still open after [`PATIENCE`].
async fn all_closed_by_the_gateway<S: tokio::io::AsyncRead + Unpin>(socks: Vec<S>) {
    let t0 = Instant::now();
    for (i, mut s) in socks.into_iter().enumerate() {
        let mut buf = [0u8; 4096];
        loop {
            let left = PATIENCE.saturating_sub(t0.elapsed());
            match tokio::time::timeout(left, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(_)) => continue,
                Err(_) => panic!("idle connection {i} still open {PATIENCE:?} after it was made"),
            }
        }
    }
}

/// The good client's answer, while idle sockets of another peer fill the listener: within 3 s (an
/// unloaded answer takes milliseconds; 3 s is a generous bound that a loaded machine still meets, and
/// the old gateway never answered at all: it refused the connection).
async fn answered_beside_idle_peers(good: &Connect) -> Client {
    let t0 = Instant::now();
    let mut c = connect(good).await.expect("the good client connects beside the idle peers");
    c.get_status(pb::GetStatusRequest {}).await.expect("and is answered");
    assert!(t0.elapsed() < Duration::from_secs(3), "answered only after {:?}", t0.elapsed());
    c
}

#[test]
fn idle_tcp_peers_never_lock_a_client_with_a_token_out_and_are_closed_after_the_deadline() {
    let dir = private_dir();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = serve(&["--listen", "tcp://127.0.0.1:0", "--token-file", &token.display().to_string()]);
    let addr = s.grpc("tcp://");
    let Addr::Tcp(sa) = addr else { unreachable!() };
    rt().block_on(async {
        // As many idle connections as the listener takes, silent or with only the HTTP/2 preface.
        let idle = idle_tcp(sa, MAX_CONNECTIONS, &[b"", PREFACE]).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut c = answered_beside_idle_peers(&client(&addr, Some(TOKEN), None)).await;
        // A client with a wrong token is no better than an idle one: closed after the deadline too.
        let mut wrong = connect(&client(&addr, Some("0123456789abcdef0123456789abcdeX"), None)).await.unwrap();
        assert_eq!(wrong.get_status(pb::GetStatusRequest {}).await.unwrap_err().code(), tonic::Code::Unauthenticated);
        all_closed_by_the_gateway(idle).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let text = metrics_of(&mut c).await;
        let closed = |r: &str| Some(gw::closed(&text, r));
        // Beyond its address's cap, each new connection closed the address's oldest unauthenticated one at
        // once (the good and the wrong client's connections, of the same address, did too); the idle ones
        // still open then were closed at the deadline. Every idle connection was closed, for one reason.
        let kept = MAX_CONNECTIONS_PER_ADDRESS as f64;
        let evicted = gw::closed(&text, "preauth_evicted") + gw::closed(&text, "address_full");
        assert!(evicted >= MAX_CONNECTIONS as f64 - kept, "{text}");
        assert!(closed("no_request") >= Some(kept - 2.0), "{text}");
        assert!(evicted + gw::closed(&text, "no_request") >= MAX_CONNECTIONS as f64, "{text}");
        // The good client's connection was admitted: it was not closed, and still answers.
        c.get_status(pb::GetStatusRequest {}).await.expect("the good client is answered after the deadline");
    });
}

#[test]
fn half_finished_tls_handshakes_never_lock_a_client_of_the_ca_out_and_are_closed_after_the_deadline() {
    let dir = private_dir();
    let pki = gw::pki(dir.path(), "limits");
    let s = pki.serve(&[]);
    let addr = s.grpc("tcp://");
    let Addr::Tcp(sa) = addr else { unreachable!() };
    let tls = pki.client_tls(&pki.ca);
    rt().block_on(async {
        let idle = idle_tcp(sa, MAX_CONNECTIONS, &[HALF_HELLO, b""]).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut c = answered_beside_idle_peers(&client(&addr, None, Some(tls))).await;
        all_closed_by_the_gateway(idle).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let text = metrics_of(&mut c).await;
        let series = "rtcell_gateway_connections_closed_total{listener=\"grpc\",reason=\"no_request\"}";
        assert!(metric(&text, series) >= Some(MAX_CONNECTIONS_PER_ADDRESS as f64), "{text}");
    });
}

#[test]
fn idle_unix_connections_are_closed_after_the_deadline_and_a_client_is_then_served() {
    // All peers of the Unix socket are one uid, so no per-peer cap applies: the deadline alone frees
    // the listener.
    let s = serve(&[]);
    let addr = s.grpc("unix:");
    let Addr::Unix(sock) = addr.clone() else { unreachable!() };
    rt().block_on(async {
        let mut idle = Vec::new();
        for i in 0..MAX_CONNECTIONS {
            let mut u = tokio::net::UnixStream::connect(&sock).await.expect("connects");
            if i % 2 == 1 {
                u.write_all(PREFACE).await.unwrap();
            }
            idle.push(u);
        }
        let t0 = Instant::now();
        // The listener is full; once the deadline has closed the idle connections a client is served.
        let mut c = loop {
            let attempt = async {
                let mut c = connect(&client(&addr, None, None)).await.ok()?;
                c.get_status(pb::GetStatusRequest {}).await.ok()?;
                Some(c)
            };
            if let Ok(Some(c)) = tokio::time::timeout(Duration::from_secs(2), attempt).await {
                break c;
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "no answer {PATIENCE:?} after the listener was filled with idle connections"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        all_closed_by_the_gateway(idle).await;
        let text = metrics_of(&mut c).await;
        let closed = |r: &str| Some(gw::closed(&text, r));
        assert!(closed("no_request") >= Some(MAX_CONNECTIONS as f64), "{text}");
        assert!(closed("listener_full") >= Some(1.0), "the client's first tries found the listener full: {text}");
    });
}

/// A cell task at 1 kHz and a Linux-side task: histograms with buckets to stream.
const SCENARIO: &str = r#"
name = "limits"
duration_s = 120

[cells.plc]
kind = "thread"
cpu = 1

[signals.out]
values = 1

[tasks.high]
cell = "plc"
period_us = 1000
priority = 80
workload = { kind = "spin", us = 5 }
output = "out"

[tasks.side]
cell = "linux"
period_us = 2000
priority = 70
workload = { kind = "spin", us = 5 }
"#;

/// Bound on the gateway's resident memory growth with every stream the caps allow open and unread:
/// the old gateway grew by about 1.7 MB per such stream.
const UNREAD_GROWTH_BOUND: u64 = 64 << 20;

#[test]
fn unread_statistics_streams_keep_the_gateways_memory_bounded_and_are_ended() {
    use rtcell_gateway::streams::{MAX_OPEN_STREAMS, STALL_DEADLINE};
    let _cpu = common::serial();
    let dir = private_dir();
    let file = dir.path().join("limits.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let sock = dir.path().join("gw.sock");
    let args: Vec<String> = [
        "run",
        file.to_str().unwrap(),
        "--out",
        dir.path().join("out").to_str().unwrap(),
        "--serve",
        sock.to_str().unwrap(),
        "--linger",
        "1s",
        "--metrics",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let s = Served::start(&args, 1, dir);
    let addr = s.grpc("unix:");
    rt().block_on(async {
        let mut c = connect(&client(&addr, None, None)).await.unwrap();
        let t0 = Instant::now();
        let one = loop {
            let st = c.get_stats(pb::GetStatsRequest { buckets: true }).await.unwrap().into_inner();
            if st.elapsed_s > 0.5 {
                break st;
            }
            assert!(t0.elapsed() < PATIENCE, "the run did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let buckets: usize = one
            .tasks
            .iter()
            .flat_map(|t| [&t.latency, &t.exec])
            .map(|h| h.as_ref().map_or(0, |h| h.buckets.len()))
            .sum();
        let rss0 = s.rss();
        // Every stream the caps allow, 32 to a connection, at 100 Hz with buckets, never read.
        let per_conn = 32;
        let mut unread = Vec::new();
        let mut conns = Vec::new();
        for _ in 0..MAX_OPEN_STREAMS / per_conn {
            let mut u = connect(&client(&addr, None, None)).await.unwrap();
            for _ in 0..per_conn {
                let req = pb::StreamStatsRequest { rate_hz: 100.0, count: 0, buckets: true };
                unread.push(u.stream_stats(req).await.expect("a stream within the caps opens").into_inner());
            }
            conns.push(u);
        }
        // One more is refused, on a connection of its own.
        let mut extra = connect(&client(&addr, None, None)).await.unwrap();
        let e = extra.stream_stats(pb::StreamStatsRequest { rate_hz: 100.0, count: 0, buckets: true }).await;
        assert_eq!(e.err().map(|e| e.code()), Some(tonic::Code::ResourceExhausted), "stream {} beyond the cap", MAX_OPEN_STREAMS + 1);
        // Hold them past the stall deadline, watching the gateway's memory; a normal client is answered.
        let mut peak = rss0;
        let hold = STALL_DEADLINE + Duration::from_secs(5);
        let t0 = Instant::now();
        while t0.elapsed() < hold {
            peak = peak.max(s.rss());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        c.get_status(pb::GetStatusRequest {}).await.expect("a normal client is answered");
        let mut read = c
            .stream_stats(pb::StreamStatsRequest { rate_hz: 20.0, count: 3, buckets: true })
            .await
            .expect("a stream opens once the unread ones are ended")
            .into_inner();
        let mut n = 0;
        while let Some(x) = read.message().await.unwrap() {
            assert_eq!(x.dropped_samples, 0, "a client that reads loses nothing");
            n += 1;
        }
        assert_eq!(n, 3);
        // A client that pauses (its flow-control window fills within the pause) loses snapshots and is
        // told how many in the messages after it.
        let mut slow = c
            .stream_stats(pb::StreamStatsRequest { rate_hz: 100.0, count: 0, buckets: true })
            .await
            .unwrap()
            .into_inner();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut told = 0;
        for _ in 0..400 {
            told = slow.message().await.unwrap().expect("the stream goes on").dropped_samples;
            if told > 0 {
                break;
            }
        }
        assert!(told > 0, "a client that paused for 2 s at 100 Hz was not told of dropped snapshots");
        drop(slow);
        let text = metrics_of(&mut c).await;
        let growth = peak.saturating_sub(rss0);
        eprintln!(
            "{} unread streams of snapshots with {buckets} buckets at 100 Hz for {hold:?}: gateway RSS {} MiB -> peak {} MiB (+{} MiB)",
            unread.len(),
            rss0 >> 20,
            peak >> 20,
            growth >> 20
        );
        assert!(growth < UNREAD_GROWTH_BOUND, "the gateway grew by {} MiB with unread streams", growth >> 20);
        let v = |series: &str| metric(&text, series).unwrap_or(0.0);
        assert!(v("rtcell_gateway_streams_ended_total{reason=\"stalled\"}") >= 1.0, "{text}");
        assert!(v("rtcell_gateway_connections_closed_total{listener=\"grpc\",reason=\"stalled_stream\"}") >= 1.0, "{text}");
        assert!(v("rtcell_gateway_stream_dropped_samples_total") >= 1.0, "{text}");
        assert!(v("rtcell_gateway_streams_refused_total") >= 1.0, "{text}");
        assert!(v("rtcell_gateway_memory_budget_bytes") > 0.0, "{text}");
        assert!(v("rtcell_gateway_resident_memory_bytes") > 0.0, "{text}");
        drop(unread);
        drop(conns);
    });
    // /metrics over HTTP runs on a blocking thread of the gateway's runtime: then every thread of it
    // (workers and blocking ones) time-shares, on CPUs other than the cell's.
    http_metrics(&s);
    let threads = gateway_threads(s.child.id());
    assert!(threads.len() >= 3, "the runtime's workers and a blocking thread: {threads:?}");
    for (tid, policy, cpus) in &threads {
        assert_eq!(*policy, libc::SCHED_OTHER as u32, "gateway thread {tid} is not at normal priority");
        assert!(!cpus.contains(&1), "gateway thread {tid} may run on the cell's CPU 1: {cpus:?}");
    }
}

/// One GET of the gateway's `/metrics`.
fn http_metrics(s: &Served) {
    use std::io::{Read, Write};
    let url = {
        let lines = s.lines.lock().unwrap();
        lines.iter().find_map(|l| l.strip_prefix("gateway: Prometheus metrics on http://").map(String::from))
    };
    let url = url.expect("metrics announced");
    let host = url.split('/').next().unwrap();
    let mut c = std::net::TcpStream::connect(host).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

/// (thread id, scheduling policy, allowed CPUs) of each thread of `pid` named `rtcell-gateway`.
fn gateway_threads(pid: u32) -> Vec<(String, u32, Vec<usize>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().map_while(Result::ok) {
        let dir = e.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "rtcell-gateway" {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // Fields after the command's closing parenthesis; the policy is field 41 of the whole line.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let policy: u32 = rest.split_whitespace().nth(41 - 3).unwrap().parse().unwrap();
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
        out.push((e.file_name().to_string_lossy().into_owned(), policy, cpu_list(&list)));
    }
    out
}

/// `0-2,5` as [0, 1, 2, 5].
fn cpu_list(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}
