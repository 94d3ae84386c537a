//! The gateway tests' helpers: a `rtcell serve` process, clients over the Unix socket and TCP, a
//! scenario with writable signals, a test PKI. Included by the gateway tests as `#[path = "common/gw.rs"] mod gw;`.

#![allow(dead_code)]
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rtcell_gateway::client::Connect;
use rtcell_gateway::listen::Addr;
use rtcell_gateway::pb;

/// A scenario with writable signals of each type, read by a cell task and by a Linux-side task.
pub const SCENARIO: &str = r#"
name = "gw"
duration_s = 60

[cells.plc]
kind = "thread"
cpu = 1

[signals.out]
values = 1

[signals."op.limit"]
values = 1
writable = true
min = 0.0
max = 100.0

[signals."op.enable"]
values = 1
writable = true
type = "bool"

[signals."op.count"]
values = 2
writable = true
type = "i64"
min = -10
max = 10

[tasks.high]
cell = "plc"
period_us = 1000
priority = 80
workload = { kind = "spin", us = 5 }
output = "out"
params = ["op.limit", "op.enable"]

[signals."op.slow"]
values = 1
writable = true
type = "i64"
min = -1000
max = 1000

[tasks.side]
cell = "linux"
period_us = 2000
priority = 70
workload = { kind = "spin", us = 5 }
params = ["op.count"]

# A slow reader: a write of its signal waits up to 200 ms for the acknowledgement.
[tasks.slow]
cell = "linux"
period_us = 200000
priority = 60
workload = { kind = "spin", us = 5 }
params = ["op.slow"]
"#;

/// A gateway process; killed (and waited for) on drop.
pub struct Served {
    pub child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    pub dir: tempfile::TempDir,
}

impl Served {
    /// Starts `rtcell ARGS` and waits until it announced `want` listeners.
    pub fn start(args: &[String], want: usize, dir: tempfile::TempDir) -> Served {
        let mut child = crate::common::rtcell()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rtcell starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let err = child.stderr.take().unwrap();
        let l2 = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                l2.lock().unwrap().push(line);
            }
        });
        let mut s = Served { child, lines, dir };
        let t0 = Instant::now();
        while s.announced().len() < want {
            if let Ok(Some(st)) = s.child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                panic!("rtcell exited ({st}) before serving:\n{}", s.log());
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "no gateway after 60 s:\n{}", s.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The listeners it announced (gRPC addresses and the metrics URL).
    pub fn announced(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                l.strip_prefix("gateway: gRPC on ").or_else(|| l.strip_prefix("gateway: Prometheus metrics on "))
            })
            .map(String::from)
            .collect()
    }

    pub fn grpc(&self, scheme: &str) -> Addr {
        let a = self.announced().into_iter().find(|a| a.starts_with(scheme)).expect("announced");
        Addr::parse(&a).unwrap()
    }

    pub fn metrics_url(&self) -> String {
        self.announced().into_iter().find(|a| a.starts_with("http://")).expect("metrics announced")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The gateway process's resident memory, bytes.
    /// The audit log once `done` holds for it (refusals reach it once a second, in aggregate), or as it
    /// is after 30 s.
    pub fn audit_until(&self, done: impl Fn(&str) -> bool) -> String {
        let t0 = std::time::Instant::now();
        loop {
            let a = std::fs::read_to_string(self.path("audit.log")).unwrap_or_default();
            if done(&a) || t0.elapsed() > std::time::Duration::from_secs(30) {
                return a;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn rss(&self) -> u64 {
        let statm = std::fs::read_to_string(format!("/proc/{}/statm", self.child.id())).unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        // SAFETY: sysconf only returns a value.
        pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
    }
}

/// A fresh temporary directory only we may enter.
pub fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

impl Drop for Served {
    fn drop(&mut self) {
        // SAFETY: sending SIGTERM to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

pub fn unix(addr: &Addr) -> Connect {
    Connect { addr: addr.clone(), token: None, tls: None, timeout: Duration::from_secs(5) }
}

/// `rtcell serve` on a socket in a fresh private directory, metrics on a free port; its scenario
/// directory is that directory (holding `gw.toml`: [`SCENARIO`]).
pub fn serve(extra: &[&str]) -> Served {
    let dir = private_dir();
    std::fs::write(dir.path().join("gw.toml"), SCENARIO).unwrap();
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--scenario-dir".into(),
        dir.path().display().to_string(),
        "--listen".into(),
        format!("unix:{}", dir.path().join("sock/gw.sock").display()),
        "--state-dir".into(),
        dir.path().join("state").display().to_string(),
        "--out-root".into(),
        dir.path().join("out").display().to_string(),
        "--metrics".into(),
        "127.0.0.1:0".into(),
        "--audit-log".into(),
        dir.path().join("audit.log").display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let want = 2 + extra.iter().filter(|a| a.starts_with("tcp://")).count();
    Served::start(&args, want, dir)
}

/// Starts the scenario of the scenario directory named by `path`'s stem and waits until it runs.
pub async fn start_and_wait(c: &mut rtcell_gateway::client::Client, path: &Path) -> pb::RunInfo {
    c.start_scenario(pb::StartScenarioRequest {
        path: path.file_stem().unwrap().to_string_lossy().into_owned(),
        duration: "60s".into(),
        ..Default::default()
    })
    .await
    .expect("scenario starts");
    let t0 = Instant::now();
    loop {
        let st = c.get_status(pb::GetStatusRequest {}).await.unwrap().into_inner();
        let run = st.run.unwrap();
        if run.state == "running" && run.elapsed_s > 0.2 {
            return run;
        }
        assert!(run.state == "starting" || run.state == "running", "run did not start: {run:?}");
        assert!(t0.elapsed() < Duration::from_secs(30), "run not running after 30 s: {run:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn f64v(x: f64) -> pb::Value {
    pb::Value { kind: Some(pb::value::Kind::F64(x)) }
}
pub fn i64v(x: i64) -> pb::Value {
    pb::Value { kind: Some(pb::value::Kind::I64(x)) }
}
pub fn boolv(x: bool) -> pb::Value {
    pb::Value { kind: Some(pb::value::Kind::Bool(x)) }
}

pub async fn write(
    c: &mut rtcell_gateway::client::Client,
    name: &str,
    values: Vec<pb::Value>,
) -> Result<pb::WriteAck, tonic::Status> {
    c.write_signal(pb::WriteSignalRequest { name: name.into(), values, timeout_ms: 0 }).await.map(|r| r.into_inner())
}

pub fn tcp(addr: &Addr, token: Option<&str>, tls: Option<rtcell_gateway::client::ClientTls>) -> Connect {
    Connect { addr: addr.clone(), token: token.map(String::from), tls, timeout: Duration::from_secs(5) }
}

/// A CA and certificates signed by it, written as PEM files in `dir`.
pub struct Pki {
    pub ca: PathBuf,
    pub server: (PathBuf, PathBuf),
    pub client: (PathBuf, PathBuf),
}

impl Pki {
    /// `rtcell serve` (as [`serve`]) with a TCP listener on a free loopback port that admits clients of
    /// this CA (mutual TLS), and `extra` options.
    pub fn serve(&self, extra: &[&str]) -> Served {
        let p = |x: &PathBuf| x.display().to_string();
        let (cert, key, ca) = (p(&self.server.0), p(&self.server.1), p(&self.ca));
        let mut args =
            vec!["--listen", "tcp://127.0.0.1:0", "--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &ca];
        args.extend_from_slice(extra);
        serve(&args)
    }

    /// This PKI's client certificate, for a server whose certificate `ca` signed.
    pub fn client_tls(&self, ca: &Path) -> rtcell_gateway::client::ClientTls {
        rtcell_gateway::client::ClientTls {
            ca: ca.to_path_buf(),
            cert: self.client.0.clone(),
            key: self.client.1.clone(),
            domain: Some("localhost".into()),
        }
    }
}

pub fn pki(dir: &Path, tag: &str) -> Pki {
    pki_with_role(dir, tag, None)
}

/// [`pki`] whose client certificate carries `role` as a SAN URI `urn:rtcell:role:ROLE`.
pub fn pki_with_role(dir: &Path, tag: &str, role: Option<&str>) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, format!("rtcell test CA {tag}"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>, eku: ExtendedKeyUsagePurpose, cn: &str| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        if let (Some(r), ExtendedKeyUsagePurpose::ClientAuth) = (role, &eku) {
            p.subject_alt_names.push(rcgen::SanType::URI(format!("urn:rtcell:role:{r}").try_into().unwrap()));
        }
        p.extended_key_usages = vec![eku];
        let cert = p.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let write = |name: &str, text: &str| {
        let p = dir.join(format!("{tag}-{name}"));
        std::fs::write(&p, text).unwrap();
        p
    };
    let (sc, sk) = leaf(vec!["localhost".into(), "127.0.0.1".into()], ExtendedKeyUsagePurpose::ServerAuth, "gateway");
    let (cc, ck) = leaf(vec!["operator".into()], ExtendedKeyUsagePurpose::ClientAuth, "operator");
    Pki {
        ca: write("ca.pem", &ca.pem()),
        server: (write("server.pem", &sc), write("server.key", &sk)),
        client: (write("client.pem", &cc), write("client.key", &ck)),
    }
}

/// An admin and a viewer token, as the lockout tests use them.
pub const ADMIN_TOKEN: &str = "admin-0123456789abcdef0123456789";
pub const VIEWER_TOKEN: &str = "viewer-0123456789abcdef012345678";

/// `rtcell serve` on TCP (port 0 on all loopback addresses) with [`ADMIN_TOKEN`] and [`VIEWER_TOKEN`],
/// and its gRPC address.
pub fn serve_tcp_with_roles() -> (Served, Addr, std::net::SocketAddr) {
    let dir = private_dir();
    let token = dir.path().join("tokens");
    std::fs::write(&token, format!("admin {ADMIN_TOKEN}\nviewer {VIEWER_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = serve(&["--listen", "tcp://0.0.0.0:0", "--token-file", &token.display().to_string()]);
    let Addr::Tcp(sa) = s.grpc("tcp://") else { unreachable!() };
    let sa = std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), sa.port());
    (s, Addr::Tcp(sa), sa)
}

/// The loopback address 127.0.0.N: another peer address on the same machine.
pub fn loopback(n: u8) -> std::net::IpAddr {
    std::net::Ipv4Addr::new(127, 0, 0, n).into()
}

/// A TCP connection to `to` from the local address `from`.
pub async fn tcp_from(from: std::net::IpAddr, to: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let s = tokio::net::TcpSocket::new_v4()?;
    s.bind(std::net::SocketAddr::new(from, 0))?;
    s.connect(to).await
}

/// A metric's value in a text exposition (`name{labels}` as written, or `name` alone).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Connections the gRPC listeners closed for `reason`, in a text exposition (0 if absent).
pub fn closed(text: &str, reason: &str) -> f64 {
    closed_on(text, "grpc", reason)
}

/// `rtcell_gateway_connections_closed_total{listener=LISTENER,reason=REASON}` (0 if absent).
pub fn closed_on(text: &str, listener: &str, reason: &str) -> f64 {
    metric(text, &format!("rtcell_gateway_connections_closed_total{{listener=\"{listener}\",reason=\"{reason}\"}}"))
        .unwrap_or(0.0)
}
