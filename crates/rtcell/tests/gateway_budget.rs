//! The gateway's byte budget against clients that hold memory: a message's declared length is
//! counted (or refused) when its prefix arrives, before its bytes come; operators and viewers filling
//! their shares leave room for an admin; replies a client does not read are counted until they are
//! written (each test is an attack that worked on an earlier gateway).

mod common;
#[path = "common/gw.rs"]
mod gw;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gw::{ADMIN_TOKEN, VIEWER_TOKEN, loopback, metric, rt, serve, tcp, tcp_from, unix};
use rtcell_gateway::budget::{BELOW_ADMIN_BYTES, PER_IDENTITY_BYTES, SMALL_REQUEST_BYTES, START_REQUEST_BYTES};
use rtcell_gateway::client::{Client, connect};
use rtcell_gateway::listen::Addr;
use rtcell_gateway::pb;

/// A bound against hanging for what must happen at once, far above it.
const PATIENCE: Duration = Duration::from_secs(40);
/// Operator tokens, beside [`ADMIN_TOKEN`] and [`VIEWER_TOKEN`].
const OPERATORS: [&str; 4] = [
    "operator-0-0123456789abcdef01234",
    "operator-1-0123456789abcdef01234",
    "operator-2-0123456789abcdef01234",
    "operator-3-0123456789abcdef01234",
];

/// `rtcell serve` on TCP with an admin, a viewer and [`OPERATORS`], and its gRPC address.
fn serve_with_operators() -> (gw::Served, Addr, std::net::SocketAddr) {
    let dir = gw::private_dir();
    let token = dir.path().join("tokens");
    let mut text = format!("admin {ADMIN_TOKEN}\nviewer {VIEWER_TOKEN}\n");
    for o in OPERATORS {
        text.push_str(&format!("operator {o}\n"));
    }
    std::fs::write(&token, text).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = serve(&["--listen", "tcp://0.0.0.0:0", "--token-file", &token.display().to_string()]);
    let Addr::Tcp(sa) = s.grpc("tcp://") else { unreachable!() };
    let sa = std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), sa.port());
    (s, Addr::Tcp(sa), sa)
}

/// The 5-byte gRPC prefix of a message of `len` bytes.
fn prefix(len: usize) -> Bytes {
    let mut p = vec![0u8];
    p.extend_from_slice(&(len as u32).to_be_bytes());
    Bytes::from(p)
}

/// An HTTP/2 connection from `from`; with `window`, each stream's receive window (never given back
/// unless the caller reads: a client that does not read its replies).
async fn h2_from(
    from: std::net::IpAddr,
    to: std::net::SocketAddr,
    window: Option<u32>,
) -> h2::client::SendRequest<Bytes> {
    let io = tcp_from(from, to).await.expect("connects");
    let mut b = h2::client::Builder::new();
    if let Some(w) = window {
        b.initial_window_size(w);
    }
    let (send, conn) = b.handshake(io).await.expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// Opens a call of `method` with `token`; its request body is sent through the returned stream.
async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    method: &str,
    token: &str,
) -> (h2::SendStream<Bytes>, h2::client::ResponseFuture) {
    let ready = send.clone().ready().await.expect("the connection takes a stream");
    *send = ready;
    let req = http::Request::post(format!("http://gw/rtcell.v1.Gateway/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap();
    let (resp, body) = send.send_request(req, false).expect("a stream");
    (body, resp)
}

/// The gRPC status code and message of a response (trailers-only, or in its trailers after its data).
async fn status_of(resp: http::Response<h2::RecvStream>) -> (Option<i32>, String) {
    let get = |h: &http::HeaderMap| {
        let code = h.get("grpc-status").and_then(|v| v.to_str().ok()?.parse().ok());
        // (Percent-encoded on the wire; the spaces are enough to read it.)
        let msg = h.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or("").replace("%20", " ");
        (code, msg)
    };
    let (code, msg) = get(resp.headers());
    if code.is_some() {
        return (code, msg);
    }
    let mut body = resp.into_body();
    while let Some(Ok(d)) = body.data().await {
        let _ = body.flow_control().release_capacity(d.len());
    }
    match body.trailers().await {
        Ok(Some(t)) => get(&t),
        _ => (None, String::new()),
    }
}

/// The gateway's `rtcell_gateway_held_bytes`, asked over the Unix socket.
async fn held(c: &mut Client) -> f64 {
    let text = c.get_metrics(pb::GetMetricsRequest {}).await.expect("metrics").into_inner().text;
    metric(&text, "rtcell_gateway_held_bytes").expect("held bytes in the metrics")
}

/// The answer to a call, within [`PATIENCE`] (it must come without the rest of the request).
async fn answer(resp: h2::client::ResponseFuture) -> (Option<i32>, String) {
    let r = tokio::time::timeout(PATIENCE, resp).await.expect("answered without the rest of the request");
    status_of(r.expect("a response")).await
}

#[test]
fn a_request_declaring_more_than_its_methods_limit_is_refused_before_its_bytes_come() {
    let (s, _addr, sa) = serve_with_operators();
    rt().block_on(async {
        // A viewer's ReadSignal whose prefix declares 2 MiB; 2 bytes of it come, then nothing.
        let mut viewer = h2_from(loopback(1), sa, None).await;
        let (mut body, resp) = call(&mut viewer, "ReadSignal", VIEWER_TOKEN).await;
        let mut first = prefix(2 << 20).to_vec();
        first.extend_from_slice(b"\x0a\x05");
        body.send_data(Bytes::from(first), false).unwrap();
        let (code, msg) = answer(resp).await;
        assert_eq!(code, Some(tonic::Code::ResourceExhausted as i32), "{msg}");
        assert!(msg.contains(&SMALL_REQUEST_BYTES.to_string()), "{msg}");
        // An operator's StartScenario over its limit likewise (a scenario text is at most 1 MiB).
        let mut operator = h2_from(loopback(1), sa, None).await;
        let (mut body2, resp) = call(&mut operator, "StartScenario", OPERATORS[0]).await;
        body2.send_data(prefix(START_REQUEST_BYTES + 1), false).unwrap();
        let (code, msg) = answer(resp).await;
        assert_eq!(code, Some(tonic::Code::ResourceExhausted as i32), "{msg}");
        drop((body, body2));
    });
    let refused = |a: &str, m: &str| a.lines().any(|l| l.contains(m) && l.contains("ResourceExhausted"));
    let audit = s.audit_until(|a| refused(a, "ReadSignal") && refused(a, "StartScenario"));
    assert!(refused(&audit, "ReadSignal") && refused(&audit, "StartScenario"), "{audit}");
}

#[test]
fn operators_filling_their_share_leave_room_for_an_admins_deploy_and_status() {
    let (s, addr, sa) = serve_with_operators();
    let local = s.grpc("unix:");
    rt().block_on(async {
        let mut watch = connect(&unix(&local)).await.unwrap();
        // Each operator identity, on a connection of its own, opens 32 StartScenario requests of 1 MiB
        // and sends all of each but its last byte: 4 x 32 MiB asked for, more than every share below
        // the admins'.
        let msg = 1usize << 20;
        let filler = Bytes::from(vec![b'#'; msg - 1]);
        let mut conns = Vec::new();
        let mut open = Vec::new();
        for (i, token) in OPERATORS.iter().enumerate() {
            let mut send = h2_from(loopback(20 + i as u8), sa, None).await;
            for _ in 0..32 {
                let (mut body, resp) = call(&mut send, "StartScenario", token).await;
                // Queued in the client, sent as flow control lets it out.
                let _ = body.send_data(prefix(msg), false);
                let _ = body.send_data(filler.clone(), false);
                open.push((body, tokio::spawn(resp)));
            }
            conns.push(send);
        }
        // Until the operators hold what they can (the answers to the others come at once).
        let t0 = Instant::now();
        let full = (BELOW_ADMIN_BYTES - 2 * PER_IDENTITY_BYTES / 32) as f64;
        loop {
            let h = held(&mut watch).await;
            if h >= full {
                break;
            }
            assert!(t0.elapsed() < PATIENCE, "the operators' requests hold only {h} bytes");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The admin: a 1.5 MiB deploy is received whole (then refused for its CPU, a handler's answer),
        // and its status is answered.
        let mut admin = connect(&tcp(&addr, Some(ADMIN_TOKEN), None)).await.expect("the admin connects");
        let elf = [b"\x7fELF".as_slice(), &vec![0u8; 1536 * 1024]].concat();
        let e = admin
            .deploy_payload(pb::DeployPayloadRequest { elf, cpu: 0, name: "x".into(), args: String::new() })
            .await
            .expect_err("CPU 0 is the gateway's");
        assert_ne!(e.code(), tonic::Code::ResourceExhausted, "the admin's deploy was refused for memory: {e}");
        admin.get_status(pb::GetStatusRequest {}).await.expect("the admin's status is answered");
        // The operators' requests beyond their share were refused, naming it.
        let mut refused = Vec::new();
        for (_, resp) in open.iter_mut() {
            if resp.is_finished()
                && let Ok(Ok(r)) = resp.await
            {
                refused.push(status_of(r).await);
            }
        }
        assert!(
            refused
                .iter()
                .any(|(c, m)| *c == Some(tonic::Code::ResourceExhausted as i32) && m.contains("higher roles")),
            "{refused:?}"
        );
        // (Beside them at most the admin's last reply, until its connection's next write.)
        let h = held(&mut watch).await;
        assert!(h <= (BELOW_ADMIN_BYTES + (1 << 20)) as f64, "the operators hold {h} bytes, more than their share");
        drop(open);
        drop(conns);
    });
}

#[test]
fn replies_a_viewer_does_not_read_are_counted_until_they_are_written() {
    let (s, _addr, sa) = serve_with_operators();
    let local = s.grpc("unix:");
    rt().block_on(async {
        let mut watch = connect(&unix(&local)).await.unwrap();
        let one = watch.get_metrics(pb::GetMetricsRequest {}).await.unwrap().into_inner().text.len();
        // A viewer whose connection gives each stream a window of 1 byte, and never more: 32 replies of
        // the metrics text wait in the gateway.
        let mut send = h2_from(loopback(2), sa, Some(1)).await;
        let mut unread = Vec::new();
        for _ in 0..32 {
            let (mut body, resp) = call(&mut send, "GetMetrics", VIEWER_TOKEN).await;
            body.send_data(prefix(0), true).unwrap();
            let r = tokio::time::timeout(PATIENCE, resp).await.expect("headers").expect("a response");
            unread.push(r);
        }
        let t0 = Instant::now();
        let want = (32 * one / 2) as f64;
        loop {
            let h = held(&mut watch).await;
            if h >= want {
                break;
            }
            assert!(t0.elapsed() < PATIENCE, "32 unread replies of about {one} bytes hold only {h} bytes");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The viewer goes: what it held is given back.
        drop(unread);
        drop(send);
        let t0 = Instant::now();
        while held(&mut watch).await > 0.0 {
            assert!(t0.elapsed() < PATIENCE, "the unread replies stay counted after the viewer left");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}
