//! The gateway end to end: `rtcell serve` and `rtcell run --serve` answered over the Unix socket, over
//! TCP with a bearer token and with mutual TLS; refusals with their precise gRPC status; writes
//! acknowledged by the task that reads them; metrics that a Prometheus parser reads; payload deploys;
//! bad input that never disturbs the running cells.
//!
//! Over 600 lines on purpose: each test is one end-to-end session against one served run (starting one
//! costs seconds on the cell CPU), so the checks of one transport stay together rather than spread over
//! files that would each start their own.

mod common;
#[path = "common/gw.rs"]
mod gw;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gw::*;
use rtcell_gateway::client::connect;
use rtcell_gateway::listen::Addr;
use rtcell_gateway::pb;
use tonic::Code;

#[test]
fn the_api_over_the_unix_socket_monitors_writes_and_reports() {
    let _g = common::serial();
    let s = serve(&[]);
    // The socket is 0600 in a 0700 directory.
    let sock = s.path("sock/gw.sock");
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(s.path("sock")).unwrap().permissions().mode() & 0o777, 0o700);
    let addr = s.grpc("unix:");
    let cancelled = rt().block_on(async {
        let mut c = connect(&unix(&addr)).await.expect("connects");
        // Nothing runs yet: statistics are empty, results say so.
        let st = c.get_status(pb::GetStatusRequest {}).await.unwrap().into_inner();
        assert!(st.run.is_none());
        assert_eq!(c.get_results(pb::GetResultsRequest::default()).await.unwrap_err().code(), Code::NotFound);
        // A scenario that does not validate is refused with its problems.
        let bad = s.path("bad.toml");
        std::fs::write(&bad, "name = \"x\"\nduration_s = 0\n").unwrap();
        let e =
            c.start_scenario(pb::StartScenarioRequest { path: "bad".into(), ..Default::default() }).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("nothing was started"), "{e:?}");
        // Named as the client named it, never by a path of the server's (its scenario or state directory).
        let server_dir = s.dir.path().display().to_string();
        assert!(e.message().contains("\"bad\"") && !e.message().contains(&server_dir), "{e:?}");
        let e = c
            .start_scenario(pb::StartScenarioRequest {
                toml: "name = \"x\"\nduration_s = 0\n".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("(scenario text)") && !e.message().contains(&server_dir), "{e:?}");

        let run = start_and_wait(&mut c, &s.path("gw.toml")).await;
        // A second start while one runs is refused.
        let e =
            c.start_scenario(pb::StartScenarioRequest { path: "gw".into(), ..Default::default() }).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");

        let st = c.get_status(pb::GetStatusRequest {}).await.unwrap().into_inner();
        assert_eq!(st.cells.len(), 1);
        assert_eq!(st.cells[0].name, "plc");
        assert_eq!(st.tasks.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["high", "side", "slow"]);
        let limit = st.signals.iter().find(|x| x.name == "op.limit").unwrap();
        assert!(limit.writable && limit.reader == "high" && limit.max == Some(100.0));
        assert!(!st.signals.iter().find(|x| x.name == "out").unwrap().writable);

        // Statistics move.
        let a = c.get_stats(pb::GetStatsRequest { buckets: true }).await.unwrap().into_inner();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let b = c.get_stats(pb::GetStatsRequest { buckets: false }).await.unwrap().into_inner();
        let high = |s: &pb::Stats| s.tasks.iter().find(|t| t.name == "high").unwrap().clone();
        assert!(high(&b).cycles > high(&a).cycles, "cycles do not move: {:?} {:?}", high(&a), high(&b));
        let lat = high(&a).latency.unwrap();
        // Read while the task records: the buckets may hold a sample or two more than the count read first.
        let in_buckets = lat.buckets.iter().sum::<u64>() + lat.overflow;
        assert!(!lat.buckets.is_empty() && in_buckets.abs_diff(lat.count) <= 2, "{lat:?}");
        assert!(high(&b).latency.unwrap().buckets.is_empty(), "buckets only when asked for");

        // A stream at 20 Hz, 3 snapshots, then it ends.
        let mut stream = c
            .stream_stats(pb::StreamStatsRequest { rate_hz: 20.0, count: 3, buckets: false })
            .await
            .unwrap()
            .into_inner();
        let mut n = 0;
        while let Some(x) = stream.message().await.unwrap() {
            assert_eq!(x.run_id, run.run_id);
            n += 1;
        }
        assert_eq!(n, 3);
        let e = c.stream_stats(pb::StreamStatsRequest { rate_hz: 1000.0, ..Default::default() }).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        // A client that leaves mid-stream changes nothing.
        let mut stream = c
            .stream_stats(pb::StreamStatsRequest { rate_hz: 50.0, count: 0, buckets: true })
            .await
            .unwrap()
            .into_inner();
        assert!(stream.message().await.unwrap().is_some());
        drop(stream);

        // Writes: acknowledged with what the task saw, of every type.
        let ack = write(&mut c, "op.limit", vec![f64v(42.5)]).await.unwrap();
        assert_eq!((ack.seen.clone(), ack.task.as_str()), (vec![42.5], "high"));
        let ack2 = write(&mut c, "op.limit", vec![f64v(7.25)]).await.unwrap();
        assert!(ack2.seq > ack.seq);
        assert_eq!(write(&mut c, "op.enable", vec![boolv(true)]).await.unwrap().seen, vec![1.0]);
        let ack = write(&mut c, "op.count", vec![i64v(-3), i64v(10)]).await.unwrap();
        assert_eq!((ack.seen, ack.task.as_str()), (vec![-3.0, 10.0], "side"));
        let r = c.read_signal(pb::ReadSignalRequest { name: "op.limit".into() }).await.unwrap().into_inner();
        assert_eq!((r.values, r.seq), (vec![7.25], ack2.seq));
        let cancelled = cancelled_while_waiting_for_ack(&mut c).await;

        // Refusals, each with its status; none reaches the cell.
        let cases: Vec<(&str, Vec<pb::Value>, Code)> = vec![
            ("op.limit", vec![f64v(100.5)], Code::OutOfRange),
            ("op.limit", vec![f64v(-0.1)], Code::OutOfRange),
            ("op.limit", vec![f64v(f64::NAN)], Code::OutOfRange),
            ("op.limit", vec![i64v(5)], Code::InvalidArgument),
            ("op.limit", vec![pb::Value { kind: None }], Code::InvalidArgument),
            ("op.limit", vec![f64v(1.0), f64v(2.0)], Code::InvalidArgument),
            ("op.limit", vec![], Code::InvalidArgument),
            ("op.enable", vec![f64v(1.0)], Code::InvalidArgument),
            ("op.count", vec![i64v(11), i64v(0)], Code::OutOfRange),
            ("op.count", vec![i64v(i64::MAX), i64v(0)], Code::OutOfRange),
            ("out", vec![f64v(1.0)], Code::PermissionDenied),
            ("nope", vec![f64v(1.0)], Code::NotFound),
        ];
        for (name, vals, code) in cases {
            let e = write(&mut c, name, vals.clone()).await.unwrap_err();
            assert_eq!(e.code(), code, "{name} {vals:?}: {e:?}");
        }
        let r = c.read_signal(pb::ReadSignalRequest { name: "op.limit".into() }).await.unwrap().into_inner();
        assert_eq!((r.values, r.seq), (vec![7.25], ack2.seq), "a refused write changed the signal");
        assert_eq!(
            c.read_signal(pb::ReadSignalRequest { name: "zzz".into() }).await.unwrap_err().code(),
            Code::NotFound
        );
        // No deploy without a payload, and none onto the master CPU.
        let e = c
            .deploy_payload(pb::DeployPayloadRequest { elf: Vec::new(), cpu: 1, ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        let e = c
            .deploy_payload(pb::DeployPayloadRequest { elf: b"\x7fELF garbage".to_vec(), cpu: 0, ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("master CPU"), "{e:?}");

        // Metrics, parsed by a Prometheus text-format parser.
        let text = http_get(&s.metrics_url());
        let m = parse_metrics(&text);
        let cycles = value(&m, "rtcell_task_cycles_total", &[("task", "high"), ("cell", "plc")]).expect("cycles");
        assert!(cycles > 0.0);
        assert!(value(&m, "rtcell_task_overruns_total", &[("task", "side"), ("cell", "linux")]).is_some());
        assert!(value(&m, "rtcell_cell_up", &[("cell", "plc")]) == Some(1.0));
        assert!(
            value(&m, "rtcell_gateway_signal_writes_total", &[("signal", "op.limit"), ("result", "out_of_range")])
                >= Some(3.0)
        );
        assert!(
            value(&m, "rtcell_gateway_requests_total", &[("method", "WriteSignal"), ("code", "permission_denied")])
                >= Some(1.0)
        );
        assert!(
            m.samples.iter().any(|x| x.metric == "rtcell_task_activation_latency_seconds"
                || x.metric.starts_with("rtcell_task_activation_latency_seconds")),
            "histogram exported"
        );
        let grpc_text = c.get_metrics(pb::GetMetricsRequest {}).await.unwrap().into_inner().text;
        assert!(grpc_text.contains("rtcell_task_cycles_total{"), "{grpc_text}");

        // Stop: the results document arrives, marked incomplete.
        c.stop_scenario(pb::StopScenarioRequest::default()).await.unwrap();
        let t0 = Instant::now();
        let doc = loop {
            match c.get_results(pb::GetResultsRequest { run_id: run.run_id.clone() }).await {
                Ok(d) => break d.into_inner(),
                Err(e) => {
                    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                    assert!(t0.elapsed() < Duration::from_secs(30), "no results 30 s after the stop");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let v: serde_json::Value = serde_json::from_str(&doc.json).unwrap();
        assert_eq!(v["incomplete"], true);
        let st = c.get_status(pb::GetStatusRequest {}).await.unwrap().into_inner();
        assert_eq!(st.run.unwrap().state, "stopped");
        // Writes after the end are refused.
        assert_eq!(write(&mut c, "op.limit", vec![f64v(1.0)]).await.unwrap_err().code(), Code::FailedPrecondition);
        cancelled
    });
    // Every write is in the audit log with who did it (refusals within a second, in aggregate).
    let audit = s.audit_until(|a| a.lines().any(|l| l.contains("\"action\":\"write\"") && l.contains("\"ok\":false")));
    // The write whose client gave up after its value was written is in the log, as done.
    let cancelled = cancelled.expect("in 10 tries, no write was cancelled while it waited for its acknowledgement");
    let line = format!("\"signal\":\"op.slow\",\"values\":[{{\"i64\":{cancelled}}}]");
    assert!(
        audit.lines().any(|l| l.contains("\"action\":\"write\"") && l.contains(&line) && l.contains("\"ok\":true")),
        "no audit line for the cancelled write {line}:\n{audit}"
    );
    let lines: Vec<serde_json::Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(
        lines.iter().any(|l| l["action"] == "write"
            && l["ok"] == true
            && l["client"].as_str().unwrap().starts_with("unix uid"))
    );
    assert!(lines.iter().any(|l| l["action"] == "write" && l["ok"] == false));
    assert!(lines.iter().any(|l| l["action"] == "start" && l["ok"] == true));
}

/// A write whose client goes away while the write waits for its acknowledgement: the value is written
/// just after a release of the slow reader (200 ms period), the call's deadline (50 ms) passes long
/// before its next release acknowledges it, and the reader's cycle count read after the cancel shows it
/// had not acknowledged yet. Returns the value written so, or `None` if no try did.
async fn cancelled_while_waiting_for_ack(c: &mut rtcell_gateway::client::Client) -> Option<i64> {
    let slow_cycles = |s: pb::Stats| s.tasks.iter().find(|t| t.name == "slow").map_or(0, |t| t.cycles);
    for i in 0..10i64 {
        let v = 100 + i;
        // Just after a release of the reader.
        let first = slow_cycles(c.get_stats(pb::GetStatsRequest::default()).await.unwrap().into_inner());
        let at = loop {
            let n = slow_cycles(c.get_stats(pb::GetStatsRequest::default()).await.unwrap().into_inner());
            if n != first {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        // The deadline goes with the call (grpc-timeout): the server drops the call when it passes.
        let mut req = tonic::Request::new(pb::WriteSignalRequest {
            name: "op.slow".into(),
            values: vec![i64v(v)],
            timeout_ms: 0,
        });
        req.set_timeout(Duration::from_millis(50));
        let cancelled = matches!(c.write_signal(req).await, Err(e) if e.code() == Code::Cancelled || e.code() == Code::DeadlineExceeded);
        let after = slow_cycles(c.get_stats(pb::GetStatsRequest::default()).await.unwrap().into_inner());
        let r = c.read_signal(pb::ReadSignalRequest { name: "op.slow".into() }).await.unwrap().into_inner();
        // The detached write ends (acknowledged) before the next try needs the identity's write place.
        tokio::time::sleep(Duration::from_millis(450)).await;
        if cancelled && after == at && r.values == vec![v as f64] {
            return Some(v);
        }
    }
    None
}

fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(s, "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
    body.to_string()
}

fn parse_metrics(text: &str) -> prometheus_parse::Scrape {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).expect("the text exposition parses")
}

fn value(m: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m.samples.iter().find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))).and_then(
        |s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        },
    )
}

#[test]
fn tcp_needs_a_token_that_is_not_world_readable() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    // World-readable: refused, nothing served.
    let o = common::run(&["serve", "--listen", "tcp://127.0.0.1:0", "--token-file", token.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", common::text(&o));
    assert!(common::text(&o).contains("world-readable"), "{}", common::text(&o));
    // TCP without any authentication: refused.
    let o = common::run(&["serve", "--listen", "tcp://127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2), "{}", common::text(&o));
    assert!(common::text(&o).contains("TCP needs authentication"), "{}", common::text(&o));

    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = serve(&["--listen", "tcp://127.0.0.1:0", "--token-file", token.to_str().unwrap()]);
    let addr = s.grpc("tcp://");
    rt().block_on(async {
        for (t, why) in [(None, "no bearer token"), (Some("0123456789abcdef0123456789abcdeX"), "wrong bearer token")] {
            let mut c = connect(&tcp(&addr, t, None)).await.unwrap();
            let e = c.get_status(pb::GetStatusRequest {}).await.unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
            assert!(e.message().contains(why), "{e:?}");
        }
        let mut c = connect(&tcp(&addr, Some("0123456789abcdef0123456789abcdef"), None)).await.unwrap();
        c.get_status(pb::GetStatusRequest {}).await.expect("the right token is let in");
        // The refusals were counted.
        let text = c.get_metrics(pb::GetMetricsRequest {}).await.unwrap().into_inner().text;
        let m = parse_metrics(&text);
        assert!(
            value(&m, "rtcell_gateway_requests_total", &[("method", "GetStatus"), ("code", "unauthenticated")])
                >= Some(2.0),
            "{text}"
        );
    });
}

#[test]
fn tcp_with_mutual_tls_admits_only_clients_of_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let good = pki(dir.path(), "good");
    let other = pki(dir.path(), "other");
    let s = good.serve(&[]);
    let addr = s.grpc("tcp://");
    let tls = |pk: &Pki| pk.client_tls(&good.ca);
    rt().block_on(async {
        let mut c = connect(&tcp(&addr, None, Some(tls(&good)))).await.expect("a client of the CA connects");
        c.get_status(pb::GetStatusRequest {}).await.expect("and is answered");
        // A certificate from another CA: the handshake fails, nothing is answered.
        let refused = match connect(&tcp(&addr, None, Some(tls(&other)))).await {
            Err(_) => true,
            Ok(mut c) => c.get_status(pb::GetStatusRequest {}).await.is_err(),
        };
        assert!(refused, "a certificate of another CA was let in");
        // Plain text on the TLS port: refused.
        let refused = match connect(&tcp(&addr, None, None)).await {
            Err(_) => true,
            Ok(mut c) => c.get_status(pb::GetStatusRequest {}).await.is_err(),
        };
        assert!(refused, "a plain-text client was let in");
    });
    // The audit log names the certificate of a caller; here, the start of a scenario, refused: a
    // certificate without a role is a viewer.
    rt().block_on(async {
        let mut c = connect(&tcp(&addr, None, Some(tls(&good)))).await.unwrap();
        let e =
            c.start_scenario(pb::StartScenarioRequest { path: "gw".into(), ..Default::default() }).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    });
    // Refusals are counted per client: its identity and address, not its connection (no port).
    let audit = s.audit_until(|a| a.contains("\"action\":\"denied\""));
    assert!(audit.contains("\"client\":\"tls 127.0.0.1 cert sha256:"), "{audit}");
}

#[test]
fn malformed_requests_and_connection_floods_leave_the_run_untouched() {
    let _g = common::serial();
    let s = serve(&[]);
    let addr = s.grpc("unix:");
    let Addr::Unix(sock) = addr.clone() else { unreachable!() };
    rt().block_on(async {
        let mut c = connect(&unix(&addr)).await.unwrap();
        start_and_wait(&mut c, &s.path("gw.toml")).await;
        let before = c.get_stats(pb::GetStatsRequest::default()).await.unwrap().into_inner();

        // Garbage bodies for every method: each answered with a status, none crashes the daemon.
        for method in ["WriteSignal", "GetStats", "StartScenario", "DeployPayload", "ReadSignal", "Nope"] {
            for body in [vec![0xffu8; 64], vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f], b"\x12\x05abc".to_vec(), vec![]] {
                let code = raw_call(&sock, method, &body).await;
                assert!(code.is_some(), "{method}: no gRPC status");
            }
        }
        assert_eq!(raw_call(&sock, "Nope", &[]).await, Some(Code::Unimplemented as i32));
        // A request above its method's limit: refused before it is decoded.
        let big = vec![0u8; rtcell_gateway::server::MAX_REQUEST_BYTES + 1024];
        let code = raw_call(&sock, "DeployPayload", &big).await;
        assert_eq!(code, Some(Code::ResourceExhausted as i32));
        // Each of these refusals (no handler saw them) is in the audit log, as `refused` with its method.
        let refused = |a: &str, method: &str, code: &str| {
            a.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).any(|l| {
                l["action"] == "refused"
                    && l["what"]["method"] == method
                    && l["client"].as_str().is_some_and(|c| c.starts_with("unix uid "))
                    && l["result"].as_str().is_some_and(|r| r.starts_with(code))
            })
        };
        // A method the API does not have is audited as `(other)`: a client cannot add names.
        let all = |a: &str| {
            refused(a, "(other)", "Unimplemented")
                && refused(a, "DeployPayload", "ResourceExhausted")
                && refused(a, "WriteSignal", "Internal")
        };
        let audit = s.audit_until(all);
        assert!(all(&audit), "{audit}");

        // A flood of connections: those above the cap are closed at once, and the gateway answers again
        // as soon as they go.
        let flood: Vec<std::os::unix::net::UnixStream> = (0..rtcell_gateway::server::MAX_CONNECTIONS + 40)
            .filter_map(|_| std::os::unix::net::UnixStream::connect(&sock).ok())
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(flood);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut c = connect(&unix(&addr)).await.expect("connects after the flood");
        let after = c.get_stats(pb::GetStatsRequest::default()).await.unwrap().into_inner();
        let text = c.get_metrics(pb::GetMetricsRequest {}).await.unwrap().into_inner().text;
        let m = parse_metrics(&text);
        assert!(value(&m, "rtcell_gateway_connections_refused_total", &[]) >= Some(1.0), "{text}");
        // The cell and its tasks went on.
        let cyc = |s: &pb::Stats| s.tasks.iter().find(|t| t.name == "high").unwrap().cycles;
        assert!(cyc(&after) > cyc(&before));
        assert!(after.tasks.iter().all(|t| t.state == "running"), "{:?}", after.tasks);
        assert!(after.cells.iter().all(|c| !c.finished), "{:?}", after.cells);
    });
}

/// One gRPC call with `body` as the message bytes, straight over HTTP/2; returns its grpc-status.
async fn raw_call(sock: &Path, method: &str, body: &[u8]) -> Option<i32> {
    use http_body_util::BodyExt;
    let io = tokio::net::UnixStream::connect(sock).await.ok()?;
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(io))
            .await
            .ok()?;
    tokio::spawn(conn);
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(body);
    let req = http::Request::post(format!("http://gw/rtcell.v1.Gateway/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::Full::new(hyper::body::Bytes::from(framed)))
        .ok()?;
    let resp = send.send_request(req).await.ok()?;
    let from_headers = resp.headers().get("grpc-status").and_then(|v| v.to_str().ok()?.parse().ok());
    let collected = resp.into_body().collect().await.ok()?;
    from_headers.or_else(|| collected.trailers()?.get("grpc-status")?.to_str().ok()?.parse().ok())
}

/// A tiny C payload built with the payload kit: counts its steps.
fn tick_payload(dir: &Path) -> PathBuf {
    let prefix = dir.join("sdk");
    common::install_sdk(&prefix);
    let src = dir.join("tick");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("tick.c"), "static volatile unsigned long ticks;\nvoid tick_init(void) { ticks = 0; }\nvoid tick_step(void) { ticks++; }\n").unwrap();
    let out = dir.join("tick.elf");
    let o = std::process::Command::new("make")
        .arg("-s")
        .arg("-f")
        .arg(prefix.join("share/rtcell/payload.mk"))
        .arg(format!("SRC={}", src.display()))
        .arg("INIT=tick_init")
        .arg("STEP=tick_step")
        .arg(format!("OUT={}", out.display()))
        .output()
        .expect("make runs");
    assert!(o.status.success(), "payload build: {}", common::text(&o));
    out
}

#[test]
fn a_payload_is_validated_stored_by_hash_and_deployed_into_a_new_kvm_cell() {
    let kvm = rtcell_kvm::kvm_status();
    rtcell_testkit::require!(kvm.is_usable(), "{}", kvm.explain());
    let _g = common::serial();
    let s = serve(&[]);
    let elf = tick_payload(s.dir.path());
    let sock = s.grpc("unix:").to_string();
    let ctl = |args: &[&str]| {
        let mut a = vec!["ctl", "--connect", sock.as_str()];
        a.extend_from_slice(args);
        common::run(&a)
    };
    // Malformed ELFs: refused with what is wrong, nothing started.
    let junk = s.path("junk.elf");
    std::fs::write(&junk, b"not an elf at all").unwrap();
    let o = ctl(&["deploy", junk.to_str().unwrap(), "--cpu", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", common::text(&o));
    assert!(common::text(&o).contains("invalid_argument: not a payload this cell can run"), "{}", common::text(&o));
    let mut bytes = std::fs::read(&elf).unwrap();
    bytes.truncate(200);
    std::fs::write(&junk, &bytes).unwrap();
    let o = ctl(&["deploy", junk.to_str().unwrap(), "--cpu", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", common::text(&o));
    let o = ctl(&["deploy", elf.to_str().unwrap(), "--cpu", "99"]);
    assert!(common::text(&o).contains("CPU 99 does not exist"), "{}", common::text(&o));

    let o = ctl(&["deploy", elf.to_str().unwrap(), "--cpu", "1", "--name", "tick", "--args", "period_ns=100000"]);
    let t = common::text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("cell tick on CPU 1: running"), "{t}");
    let sha = sha256_hex(&std::fs::read(&elf).unwrap());
    assert!(t.contains(&sha), "stored under its hash: {t}");
    assert!(s.path(&format!("state/payloads/{sha}.elf")).exists());
    // The same name again, or the same CPU: refused.
    let o = ctl(&["deploy", elf.to_str().unwrap(), "--cpu", "1", "--name", "tick"]);
    assert!(common::text(&o).contains("already_exists"), "{}", common::text(&o));
    std::thread::sleep(Duration::from_millis(500));
    let o = ctl(&["stats", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cell = v["cells"].as_array().unwrap().iter().find(|c| c["name"] == "tick").expect("listed").clone();
    assert_eq!(cell["origin"], "deployed");
    assert!(cell["handled"].as_u64().unwrap() > 1000, "steps every 100 µs are counted: {cell}");
    let o = ctl(&["stop-cell", "tick"]);
    assert!(o.status.success() && common::text(&o).contains("cell \"tick\": stopped"), "{}", common::text(&o));
    let o = ctl(&["stop-cell", "tick"]);
    assert!(common::text(&o).contains("not_found"), "{}", common::text(&o));
    let audit = std::fs::read_to_string(s.path("audit.log")).unwrap();
    assert!(audit.contains("\"action\":\"deploy\"") && audit.contains(&sha), "{audit}");
}

fn sha256_hex(b: &[u8]) -> String {
    let o = std::process::Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    let mut o = o;
    o.stdin.take().unwrap().write_all(b).unwrap();
    let out = o.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

#[test]
fn run_serve_and_ctl_show_and_steer_a_run_from_the_command_line() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = dir.path().join("gw.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let sock = dir.path().join("gw.sock");
    let args: Vec<String> = [
        "run",
        file.to_str().unwrap(),
        "--duration",
        "4s",
        "--out",
        dir.path().join("out").to_str().unwrap(),
        "--serve",
        sock.to_str().unwrap(),
        "--linger",
        "20s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let s = Served::start(&args, 1, tempfile::tempdir().unwrap());
    let c = format!("unix:{}", sock.display());
    let ctl = |a: &[&str]| {
        let mut v = vec!["ctl", "--connect", c.as_str()];
        v.extend_from_slice(a);
        common::run(&v)
    };
    // Wait for the release.
    let t0 = Instant::now();
    loop {
        let o = ctl(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if v["run"]["state"] == "running" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{}", common::text(&o));
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = ctl(&["set", "op.limit=12.5"]);
    assert!(o.status.success(), "{}", common::text(&o));
    assert!(common::text(&o).contains("op.limit = 12.5: seen by task \"high\""), "{}", common::text(&o));
    let o = ctl(&["set", "op.enable=on"]);
    assert!(common::text(&o).contains("seen by task"), "{}", common::text(&o));
    let o = ctl(&["set", "op.enable=maybe"]);
    assert_eq!(o.status.code(), Some(2), "{}", common::text(&o));
    let o = ctl(&["set", "op.limit=1e9"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(common::text(&o).contains("out_of_range"), "{}", common::text(&o));
    let o = ctl(&["get", "op.limit"]);
    assert!(common::text(&o).contains("op.limit = 12.5"), "{}", common::text(&o));
    let o = ctl(&["stats"]);
    let t = common::text(&o);
    assert!(t.contains("high") && t.contains("lat p99.9 µs") && t.contains("one-way"), "{t}");
    let o = ctl(&["start", "gw"]);
    assert!(common::text(&o).contains("serves one run"), "{}", common::text(&o));
    let o = ctl(&["metrics"]);
    assert!(common::text(&o).contains("rtcell_task_cycles_total{task=\"high\",cell=\"plc\"}"), "{}", common::text(&o));
    // After the run: the results, served while it lingers.
    let t0 = Instant::now();
    let doc = loop {
        let o = ctl(&["results"]);
        if o.status.success() {
            break serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap();
        }
        assert!(common::text(&o).contains("unavailable"), "{}", common::text(&o));
        assert!(t0.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(doc["incomplete"], false);
    assert!(dir.path().join("out/results.json").exists());
    drop(s);
    assert!(!sock.exists(), "the socket is removed when the gateway ends");
    let o = ctl(&["status"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(common::text(&o).contains("is a gateway running?"), "{}", common::text(&o));
}

#[test]
fn the_python_client_generated_from_the_proto_reads_and_writes() {
    // scripts/setup puts the packages in a virtual environment of the checkout when python3 lacks them.
    let venv = common::repo().join("target/python-client-venv/bin/python3");
    let python = if venv.exists() { venv } else { PathBuf::from("python3") };
    let have = std::process::Command::new(&python)
        .args(["-c", "import grpc, grpc_tools"])
        .output()
        .is_ok_and(|o| o.status.success());
    rtcell_testkit::require!(
        have,
        "python3 with grpcio and grpcio-tools is missing: scripts/setup installs them (pip install -r examples/python-client/requirements.txt)"
    );
    let _g = common::serial();
    let s = serve(&[]);
    let addr = s.grpc("unix:");
    rt().block_on(async {
        let mut c = connect(&unix(&addr)).await.unwrap();
        start_and_wait(&mut c, &s.path("gw.toml")).await;
    });
    let client = common::repo().join("examples/python-client/rtcell_client.py");
    let py = |args: &[&str]| {
        let o = std::process::Command::new(&python)
            .arg(&client)
            .arg("--connect")
            .arg(addr.to_string())
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (code, out, err) = py(&["status"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["run"]["scenario"], "gw");
    assert!(v["signals"].as_array().unwrap().iter().any(|x| x["name"] == "op.limit" && x["writable"] == true));
    let (code, out, err) = py(&["set", "op.count", "4", "-2"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["seen"], serde_json::json!([4.0, -2.0]));
    assert_eq!(v["task"], "side");
    let (code, out, _) = py(&["get", "op.count"]);
    assert_eq!(code, Some(0));
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["values"], serde_json::json!([4.0, -2.0]));
    let (code, _, err) = py(&["set", "op.limit", "1000"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("out_of_range"), "{err}");
    let (code, out, err) = py(&["watch", "--rate", "10", "--count", "3"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let snaps = v.as_array().unwrap();
    assert_eq!(snaps.len(), 3);
    assert!(snaps[2]["tasks"][0]["cycles"].as_u64() > snaps[0]["tasks"][0]["cycles"].as_u64());
}

#[test]
fn writes_beyond_the_per_client_rate_are_refused() {
    let s = serve(&["--write-rate", "3"]);
    let addr = s.grpc("unix:");
    rt().block_on(async {
        let mut c = connect(&unix(&addr)).await.unwrap();
        let mut codes = Vec::new();
        for _ in 0..10 {
            codes.push(write(&mut c, "op.limit", vec![f64v(1.0)]).await.unwrap_err().code());
        }
        // The first three pass the limit (and find no run); the rest are refused by it.
        assert_eq!(&codes[..3], &[Code::NotFound; 3], "{codes:?}");
        assert!(codes[3..].iter().all(|c| *c == Code::ResourceExhausted), "{codes:?}");
        // Reads are not limited.
        for _ in 0..20 {
            c.get_stats(pb::GetStatsRequest::default()).await.unwrap();
        }
    });
}
