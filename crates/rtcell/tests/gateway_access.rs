//! The gateway as an attack surface: what a client may do (roles), what it may load (no native code
//! in the daemon, C code only from --library-dir), what it may write (nothing outside the state
//! directory), how often (per identity, not per connection or process), and how much of its text
//! reaches the audit log.

mod common;
#[path = "common/gw.rs"]
mod gw;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use gw::*;
use rtcell_gateway::client::connect;
use rtcell_gateway::pb;
use tonic::Code;

/// A scenario whose C task runs `step` of `library` in a cell of `kind` on CPU 1.
fn c_scenario(kind: &str, library: &str, step: &str) -> String {
    format!(
        r#"
name = "c-{kind}"
duration_s = 5

[cells.ctrl]
kind = "{kind}"
cpu = 1

[tasks.step]
cell = "ctrl"
period_us = 1000
priority = 80
workload = {{ kind = "c", library = "{library}", step = "{step}" }}
"#
    )
}

fn start_text(toml: String) -> pb::StartScenarioRequest {
    pb::StartScenarioRequest { toml, duration: "2s".into(), ..Default::default() }
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_thread_cell_c_task_that_aborts_is_refused_and_the_daemon_keeps_answering() {
    let _g = common::serial();
    let s = serve(&[]);
    let lib = common::artifacts().join("librtcell.so");
    assert!(lib.exists(), "{} is built with the binary", lib.display());
    let text = c_scenario("thread", &lib.display().to_string(), "abort");
    // The same file in the scenario directory, started by name.
    std::fs::write(s.path("abort.toml"), &text).unwrap();
    let addr = s.grpc("unix:");
    rt().block_on(async {
        let mut c = connect(&unix(&addr)).await.expect("connects");
        for req in [start_text(text.clone()), pb::StartScenarioRequest { path: "abort".into(), ..Default::default() }] {
            let e = c.start_scenario(req).await.unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
            assert!(e.message().contains("thread cell runs inside the gateway's own process"), "{e:?}");
            // Whatever it was asked, the daemon is still there.
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.get_status(pb::GetStatusRequest {}).await.expect("the daemon still answers");
        }
        // In a process cell: C code only from --library-dir, which this gateway has not.
        let e = c.start_scenario(start_text(c_scenario("process", &lib.display().to_string(), "abort"))).await;
        let e = e.unwrap_err();
        assert!(e.message().contains("started without --library-dir"), "{e:?}");
    });
    // The refused texts are not kept.
    assert_eq!(files_in(&s.path("state/scenarios")), Vec::<String>::new());
}

#[test]
fn c_code_of_a_process_cell_must_come_from_the_library_dir() {
    let dir = tempfile::tempdir().unwrap();
    let libs = dir.path().join("libs");
    std::fs::create_dir(&libs).unwrap();
    let lib = common::artifacts().join("librtcell.so");
    std::fs::copy(&lib, libs.join("libctrl.so")).unwrap();
    let s = serve(&["--library-dir", libs.to_str().unwrap()]);
    let addr = s.grpc("unix:");
    rt().block_on(async {
        let mut c = connect(&unix(&addr)).await.unwrap();
        // Outside the library directory, by an absolute path or by climbing out of it.
        for l in [lib.display().to_string(), "../libs/../../etc/passwd".to_string()] {
            let e = c.start_scenario(start_text(c_scenario("process", &l, "ctrl_step"))).await.unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
            assert!(e.message().contains("outside the gateway's library directory"), "{l}: {e:?}");
        }
    });
}

#[test]
fn base_dir_and_paths_are_refused_and_nothing_is_written_outside_the_state_dir() {
    let s = serve(&[]);
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path().join("x.toml"), s.path("link.toml")).unwrap();
    std::fs::write(outside.path().join("x.toml"), SCENARIO).unwrap();
    let addr = s.grpc("unix:");
    rt().block_on(async {
        let mut c = connect(&unix(&addr)).await.unwrap();
        let e = c
            .start_scenario(pb::StartScenarioRequest {
                toml: SCENARIO.into(),
                base_dir: outside.path().display().to_string(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("base_dir is gone"), "{e:?}");
        for p in ["../../../etc/passwd", "/etc/passwd", "..", "sub/gw"] {
            let e =
                c.start_scenario(pb::StartScenarioRequest { path: p.into(), ..Default::default() }).await.unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{p}: {e:?}");
            assert!(e.message().contains("not a scenario name"), "{p}: {e:?}");
        }
        // A symlink of the scenario directory that leads out of it.
        let e =
            c.start_scenario(pb::StartScenarioRequest { path: "link".into(), ..Default::default() }).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        let e =
            c.start_scenario(pb::StartScenarioRequest { path: "nope".into(), ..Default::default() }).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert!(e.message().contains("gw"), "the known scenarios are listed: {e:?}");
    });
    assert_eq!(files_in(outside.path()), ["x.toml"], "nothing written outside the state directory");
}

fn token_file(dir: &Path, text: &str) -> String {
    let p = dir.join("tokens");
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.display().to_string()
}

const VIEWER: &str = "viewer-0123456789abcdef";
const OPERATOR: &str = "operator-0123456789abcdef";
const ADMIN: &str = "admin-0123456789abcdef";

#[test]
fn roles_from_tokens_and_certificates_refuse_calls_above_them() {
    let dir = tempfile::tempdir().unwrap();
    // Duplicate tokens: refused at start, with file:line.
    let dup = token_file(dir.path(), &format!("viewer {VIEWER}\nadmin {VIEWER}\n"));
    let o = common::run(&["serve", "--listen", "tcp://127.0.0.1:0", "--token-file", &dup]);
    assert_eq!(o.status.code(), Some(2), "{}", common::text(&o));
    assert!(common::text(&o).contains("tokens:2: the same token as line 1"), "{}", common::text(&o));

    let tokens = token_file(dir.path(), &format!("# roles\nviewer {VIEWER}\noperator {OPERATOR}\nadmin {ADMIN}\n"));
    let s = serve(&["--listen", "tcp://127.0.0.1:0", "--token-file", &tokens]);
    let addr = s.grpc("tcp://");
    rt().block_on(async {
        let mut viewer = connect(&tcp(&addr, Some(VIEWER), None)).await.unwrap();
        viewer.get_status(pb::GetStatusRequest {}).await.expect("a viewer reads");
        let e = write(&mut viewer, "op.limit", vec![f64v(1.0)]).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(
            e.message().contains("WriteSignal needs the operator role") && e.message().contains("has the viewer role"),
            "{e:?}"
        );
        assert!(!e.message().contains(VIEWER), "the token is never echoed: {e:?}");

        let mut operator = connect(&tcp(&addr, Some(OPERATOR), None)).await.unwrap();
        // Past the role check: no run to write to.
        assert_eq!(write(&mut operator, "op.limit", vec![f64v(1.0)]).await.unwrap_err().code(), Code::NotFound);
        // CPU 0 is the gateway's: refused after the role check, without touching the cell CPU.
        let deploy = pb::DeployPayloadRequest { elf: b"not an elf".to_vec(), cpu: 0, ..Default::default() };
        let e = operator.deploy_payload(deploy.clone()).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("DeployPayload needs the admin role"), "{e:?}");

        let mut admin = connect(&tcp(&addr, Some(ADMIN), None)).await.unwrap();
        let e = admin.deploy_payload(deploy).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "an admin gets past the role check: {e:?}");
    });
    let metrics = rt().block_on(async {
        let mut c = connect(&unix(&s.grpc("unix:"))).await.unwrap();
        c.get_metrics(pb::GetMetricsRequest {}).await.unwrap().into_inner().text
    });
    let denied: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("rtcell_gateway_requests_total{") && l.contains("code=\"permission_denied\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(denied, 2.0, "{metrics}");
    // Refusals reach the audit log in aggregate, once a second: one line each (two clients).
    let denied_lines = |a: &str| a.lines().filter(|l| l.contains("\"action\":\"denied\"")).count();
    let audit = s.audit_until(|a| denied_lines(a) >= 2);
    assert_eq!(denied_lines(&audit), 2, "{audit}");
    assert!(audit.contains("\"count\":1"), "{audit}");
    assert!(!audit.contains(VIEWER) && !audit.contains(OPERATOR), "{audit}");
}

#[test]
fn a_client_certificate_carries_its_role() {
    let dir = tempfile::tempdir().unwrap();
    let op = pki_with_role(dir.path(), "op", Some("operator"));
    let s = op.serve(&[]);
    let addr = s.grpc("tcp://");
    let tls = op.client_tls(&op.ca);
    rt().block_on(async {
        let mut c = connect(&tcp(&addr, None, Some(tls))).await.unwrap();
        assert_eq!(write(&mut c, "op.limit", vec![f64v(1.0)]).await.unwrap_err().code(), Code::NotFound);
        let e = c.stop_cell(pb::StopCellRequest { name: "x".into() }).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(
            e.message().contains("StopCell needs the admin role") && e.message().contains("has the operator role"),
            "{e:?}"
        );
    });
}

#[test]
fn the_rate_limit_counts_per_identity_across_connections_and_processes() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let op = pki_with_role(dir.path(), "rl", Some("operator"));
    // One write per 10 s, bursts of 1: whatever the test's pace, at most 2 pass.
    let s = op.serve(&["--write-rate", "0.1"]);
    let addr = s.grpc("tcp://");
    let tls = op.client_tls(&op.ca);
    let passed = rt().block_on(async {
        // A run whose signals take the writes (started over the Unix socket: another identity).
        let mut admin = connect(&unix(&s.grpc("unix:"))).await.unwrap();
        start_and_wait(&mut admin, &s.path("gw.toml")).await;
        let mut passed = 0;
        // Four connections with one certificate.
        for _ in 0..4 {
            let mut c = connect(&tcp(&addr, None, Some(tls.clone()))).await.unwrap();
            for _ in 0..3 {
                match write(&mut c, "op.limit", vec![f64v(1.0)]).await {
                    Ok(_) => passed += 1,
                    Err(e) => assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}"),
                }
            }
        }
        passed
    });
    assert!((1..=2).contains(&passed), "{passed} writes of one certificate over 4 connections passed a limit of 1");
    // Four processes of one user on the Unix socket.
    let sock = s.grpc("unix:").to_string();
    let mut passed = 0;
    for _ in 0..4 {
        let o = common::run(&["ctl", "--connect", &sock, "set", "op.limit=1"]);
        let t = common::text(&o);
        assert!(o.status.success() || t.contains("resource_exhausted"), "{t}");
        passed += usize::from(o.status.success());
    }
    assert!((1..=2).contains(&passed), "{passed} writes of one uid from 4 processes passed a limit of 1");
}

#[test]
fn long_signal_names_are_capped_in_the_audit_log_and_the_answer_and_two_megabytes_refused_unread() {
    let s = serve(&[]);
    let addr = s.grpc("unix:");
    // The longest a WriteSignal request may be (its method's limit) reaches the handler.
    let name = format!("\u{1b}[2J{}", "n".repeat(rtcell_gateway::budget::SMALL_REQUEST_BYTES - 64));
    rt().block_on(async {
        let mut c = connect(&unix(&addr)).await.unwrap();
        let e = write(&mut c, &name, vec![f64v(1.0)]).await.unwrap_err();
        assert!(e.message().len() < 1024, "{} bytes of answer", e.message().len());
        // 2 MB is refused from its length prefix, before the bytes are kept.
        let e = write(&mut c, &"n".repeat(2_000_000), vec![f64v(1.0)]).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(e.message().len() < 1024, "{} bytes of answer", e.message().len());
    });
    let audit = s.audit_until(|a| a.contains("\"action\":\"write\""));
    let line = audit.lines().find(|l| l.contains("\"action\":\"write\"")).expect("the write is audited");
    assert!(line.len() < 1024, "{} bytes in the audit log", line.len());
    assert!(line.contains("truncated") && !line.contains('\u{1b}'), "{line}");
    // And on stderr.
    std::thread::sleep(Duration::from_millis(200));
    assert!(s.log().len() < 64 * 1024, "{} bytes on stderr", s.log().len());
}

#[test]
fn deploys_never_go_onto_the_master_cpu_or_a_cpu_another_run_holds() {
    let _g = common::serial();
    let s = serve(&[]);
    let sock = s.grpc("unix:").to_string();
    let junk = s.path("junk.elf");
    std::fs::write(&junk, b"not an elf at all").unwrap();
    let ctl = |cpu: &str| {
        common::text(&common::run(&["ctl", "--connect", &sock, "deploy", junk.to_str().unwrap(), "--cpu", cpu]))
    };
    let t = ctl("0");
    assert!(t.contains("failed_precondition") && t.contains("CPU 0 is taken by the gateway"), "{t}");
    // Another run holds CPU 1 (this test process, as `rtcell run` would).
    let held = rtcell_host::cpulock::lock_cpus(&[1]).expect("CPU 1's lock");
    let t = ctl("1");
    assert!(t.contains("failed_precondition") && t.contains(&format!("pid {}", std::process::id())), "{t}");
    drop(held);
    // Free again: the payload itself is what is refused now, and nothing is kept.
    let t = ctl("1");
    assert!(t.contains("invalid_argument: not a payload"), "{t}");
    assert_eq!(files_in(&s.path("state/payloads")), Vec::<String>::new());
}

/// A run whose signal `op.slow` is read (and acknowledged) every 200 ms, and `op.limit` every 1 ms.
const SLOW_READER: &str = r#"
name = "slow"
duration_s = 60

[cells.plc]
kind = "thread"
cpu = 1

[signals."op.limit"]
values = 1
writable = true
min = 0.0
max = 100.0

[signals."op.slow"]
values = 1
writable = true
min = 0.0
max = 100.0

[tasks.high]
cell = "plc"
period_us = 1000
priority = 80
workload = { kind = "spin", us = 5 }
params = ["op.limit"]

[tasks.slow]
cell = "linux"
period_us = 200000
priority = 70
workload = { kind = "spin", us = 5 }
params = ["op.slow"]
"#;

#[test]
fn one_client_has_one_write_in_flight_and_never_holds_another_clients_writes() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let op = pki_with_role(dir.path(), "wf", Some("operator"));
    let s = op.serve(&[]);
    std::fs::write(s.path("slow.toml"), SLOW_READER).unwrap();
    let addr = s.grpc("tcp://");
    let tls = op.client_tls(&op.ca);
    rt().block_on(async {
        let mut admin = connect(&unix(&s.grpc("unix:"))).await.unwrap();
        start_and_wait(&mut admin, &s.path("slow.toml")).await;
        let c = connect(&tcp(&addr, None, Some(tls))).await.unwrap();
        // Eight writes of one certificate at once, to the slowly read signal.
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..8 {
            let mut c = c.clone();
            tasks.spawn(async move { write(&mut c, "op.slow", vec![f64v(f64::from(i))]).await });
        }
        // Meanwhile a client of its own (the Unix socket) writes: acknowledged, not queued behind them.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ack = write(&mut admin, "op.limit", vec![f64v(5.0)]).await.expect("another client's write");
        assert_eq!(ack.seen, vec![5.0]);
        let (mut acked, mut refused) = (0, 0);
        while let Some(r) = tasks.join_next().await {
            match r.unwrap() {
                Ok(_) => acked += 1,
                Err(e) => {
                    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                    assert!(e.message().contains("already in flight"), "{e:?}");
                    refused += 1;
                }
            }
        }
        assert!(acked >= 1 && refused >= 1, "{acked} acknowledged, {refused} refused of 8 writes at once");
        // The same slow signal from the other client: it waits for the write before it, then is acknowledged.
        write(&mut admin, "op.slow", vec![f64v(9.0)]).await.expect("a write of the slow signal");
    });
}

#[test]
fn the_audit_log_is_private_and_never_written_through_a_link() {
    use std::os::unix::fs::PermissionsExt;
    // Created 0600: it names who did what.
    let s = gw::serve(&[]);
    let mode = std::fs::metadata(s.path("audit.log")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    drop(s);
    // A link planted where the log goes is refused at start (exit 2), its target untouched.
    let dir = gw::private_dir();
    let precious = dir.path().join("precious");
    std::fs::write(&precious, "mine\n").unwrap();
    std::os::unix::fs::symlink(&precious, dir.path().join("audit.log")).unwrap();
    let serve = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rtcell"))
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix:{}", dir.path().join("sock/gw.sock").display()))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--audit-log")
            .arg(dir.path().join("audit.log"))
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = serve();
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "mine\n");
    // A log file others can write (they could edit or truncate what it says) is refused too.
    std::fs::remove_file(dir.path().join("audit.log")).unwrap();
    std::fs::write(dir.path().join("audit.log"), "forged\n").unwrap();
    std::fs::set_permissions(dir.path().join("audit.log"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, err) = serve();
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("writable by no one else"), "{err}");
}
