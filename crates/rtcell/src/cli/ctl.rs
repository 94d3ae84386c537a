//! `rtcell ctl`: the command-line client of the gateway's gRPC API.
//!
//! Exit status: 0 done; 1 the gateway refused or failed (its gRPC status is printed) or cannot be
//! reached; 2 bad input here (a value that does not parse, a file that cannot be read).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use rtcell_gateway::client::{ClientTls, Connect, connect};
use rtcell_gateway::listen::{Addr, default_socket};
use rtcell_gateway::pb;
use rtcell_report::table::Table;

use super::EXIT_USAGE;

pub const CTL_HELP: &str = "Examples:
  rtcell ctl status
  rtcell ctl stats --watch 2
  rtcell ctl get plc.limit
  rtcell ctl set plc.limit=42.5
  rtcell ctl start offload --duration 30s         # a scenario of the gateway's --scenario-dir
  rtcell ctl start --file my-line.toml            # send a scenario's text
  rtcell ctl deploy ctrl.elf --cpu 1
  rtcell ctl results > results.json
  rtcell ctl --connect tcp://rt-box:7447 --token-file ~/.rtcell-token stats

The gateway is --connect ADDR if given, else $RTCELL_GATEWAY, else the default Unix socket of `rtcell serve`.
What a client may do depends on its role (viewer, operator, admin: see `rtcell serve --help`); a call above
it is refused with permission_denied, naming the role it needs.";

#[derive(Args)]
pub struct CtlArgs {
    /// The gateway: unix:PATH, a socket path, or tcp://HOST:PORT.
    #[arg(long, value_name = "ADDR", env = "RTCELL_GATEWAY")]
    connect: Option<String>,
    /// Bearer token file (TCP).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// CA of the gateway's certificate (TCP with mutual TLS).
    #[arg(long, value_name = "PEM", requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// Our client certificate (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// Our client key (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_ca")]
    tls_key: Option<PathBuf>,
    /// The name in the gateway's certificate (default: the address's IP).
    #[arg(long, value_name = "NAME")]
    tls_domain: Option<String>,
    /// Print the answer as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: CtlCmd,
}

#[derive(Subcommand)]
enum CtlCmd {
    /// The run, its cells, tasks and signals, and the deployed cells.
    Status,
    /// Task, channel and cell statistics (activation latency and execution time in µs).
    Stats {
        /// Print a new snapshot this many times per second until the run ends.
        #[arg(long, value_name = "HZ")]
        watch: Option<f64>,
        /// With --watch: stop after N snapshots.
        #[arg(long, default_value_t = 0)]
        count: u32,
    },
    /// Read a signal's current value.
    Get { signal: String },
    /// Write a writable signal (SIGNAL=V or SIGNAL=V1,V2,...) and print what its task saw.
    Set {
        assignment: String,
        /// How long to wait for the task's acknowledgement (ms; default: 10 of its periods + 100 ms).
        #[arg(long, default_value_t = 0)]
        timeout_ms: u32,
    },
    /// Start a scenario on the gateway (`rtcell serve`): one of its --scenario-dir by NAME, or the text of
    /// a file of yours (--file). C tasks of those run only in process or kvm cells, with libraries from the
    /// gateway's --library-dir (relative paths in a sent file resolve there).
    #[command(group = clap::ArgGroup::new("scenario").required(true).args(["name", "file"]))]
    Start {
        /// The scenario's name on the gateway (the file NAME.toml of its --scenario-dir).
        name: Option<String>,
        /// Send this scenario file's text instead.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        #[arg(long)]
        duration: Option<String>,
        #[arg(long = "kind", value_name = "CELL=KIND")]
        kinds: Vec<String>,
    },
    /// Stop the current run (or RUN) early; its results are written, marked incomplete.
    Stop { run: Option<String> },
    /// Deploy a payload ELF into a new kvm cell.
    Deploy {
        elf: PathBuf,
        #[arg(long)]
        cpu: u32,
        #[arg(long)]
        name: Option<String>,
        /// key=value arguments for the payload, comma-separated (e.g. period_ns=100000).
        #[arg(long, default_value = "")]
        args: String,
    },
    /// Stop a deployed cell.
    StopCell { name: String },
    /// Print the results document (results.json) of the latest run (or RUN).
    Results { run: Option<String> },
    /// Print the Prometheus metrics.
    Metrics,
}

pub fn main(a: CtlArgs) -> i32 {
    let addr = match a.connect.as_deref() {
        Some(s) => match Addr::parse(s) {
            Ok(x) => x,
            Err(e) => return usage(format!("--connect {e}")),
        },
        None => Addr::Unix(default_socket()),
    };
    let token = match &a.token_file {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some(t.trim().to_string()),
            Err(e) => return usage(format!("--token-file {}: {e}", p.display())),
        },
        None => None,
    };
    let tls = match (&a.tls_ca, &a.tls_cert, &a.tls_key) {
        (Some(ca), Some(cert), Some(key)) => {
            Some(ClientTls { ca: ca.clone(), cert: cert.clone(), key: key.clone(), domain: a.tls_domain.clone() })
        }
        _ => None,
    };
    let conn = Connect { addr: addr.clone(), token, tls, timeout: Duration::from_secs(5) };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        let mut c = match connect(&conn).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        };
        match run(&mut c, a.cmd, a.json).await {
            Ok(code) => code,
            Err(Fail::Usage(m)) => usage(m),
            Err(Fail::Status(s)) => {
                eprintln!("error: {}: {}", rtcell_gateway::metrics::code_name(s.code()), s.message());
                1
            }
        }
    })
}

fn usage(m: String) -> i32 {
    eprintln!("error: {m}");
    EXIT_USAGE
}

enum Fail {
    Usage(String),
    Status(tonic::Status),
}

impl From<tonic::Status> for Fail {
    fn from(s: tonic::Status) -> Fail {
        Fail::Status(s)
    }
}

/// A scenario file's text, capped as the scenario reader caps files.
fn read_scenario(f: &std::path::Path) -> Result<String, Fail> {
    let max = rtcell_scenario::plan::MAX_FILE_BYTES;
    let meta = std::fs::metadata(f).map_err(|e| Fail::Usage(format!("{}: {e}", f.display())))?;
    if !meta.is_file() || meta.len() > max as u64 {
        return Err(Fail::Usage(format!("{}: not a scenario file of at most {max} bytes", f.display())));
    }
    std::fs::read_to_string(f).map_err(|e| Fail::Usage(format!("{}: {e}", f.display())))
}

async fn run(c: &mut rtcell_gateway::client::Client, cmd: CtlCmd, json: bool) -> Result<i32, Fail> {
    match cmd {
        CtlCmd::Status => {
            let s = c.get_status(pb::GetStatusRequest {}).await?.into_inner();
            if json {
                outln!("{}", status_json(&s));
            } else {
                out!("{}", status_text(&s));
            }
        }
        CtlCmd::Stats { watch: None, .. } => {
            let s = c.get_stats(pb::GetStatsRequest { buckets: false }).await?.into_inner();
            print_stats(&s, json);
        }
        CtlCmd::Stats { watch: Some(hz), count } => {
            let mut stream =
                c.stream_stats(pb::StreamStatsRequest { rate_hz: hz, count, buckets: false }).await?.into_inner();
            // Until the stream ends, or nobody reads what is printed (`| head`).
            while let Some(s) = stream.message().await? {
                print_stats(&s, json);
                if crate::out::gone() {
                    break;
                }
            }
        }
        CtlCmd::Get { signal } => {
            let v = c.read_signal(pb::ReadSignalRequest { name: signal }).await?.into_inner();
            if json {
                outln!("{}", serde_json::json!({ "name": v.name, "values": v.values, "seq": v.seq }));
            } else {
                let vals: Vec<String> = v.values.iter().map(|x| x.to_string()).collect();
                let info = v.info.unwrap_or_default();
                outln!(
                    "{} = {}  (seq {}{})",
                    v.name,
                    if vals.is_empty() { "(never written)".into() } else { vals.join(", ") },
                    v.seq,
                    if info.writable {
                        format!(", writable {}, read by task {:?}", info.r#type, info.reader)
                    } else {
                        ", read-only".into()
                    }
                );
            }
        }
        CtlCmd::Set { assignment, timeout_ms } => {
            let Some((name, text)) = assignment.split_once('=') else {
                return Err(Fail::Usage(format!("{assignment:?}: give SIGNAL=VALUE, e.g. plc.limit=42.5")));
            };
            // The signal's declared type decides how the text is read.
            let sv = c.read_signal(pb::ReadSignalRequest { name: name.to_string() }).await?.into_inner();
            let ty = sv.info.map(|i| i.r#type).unwrap_or_default();
            let values = text
                .split(',')
                .map(|t| parse_value(t.trim(), &ty))
                .collect::<Result<Vec<_>, _>>()
                .map_err(Fail::Usage)?;
            let ack = c
                .write_signal(pb::WriteSignalRequest { name: name.to_string(), values, timeout_ms })
                .await?
                .into_inner();
            if json {
                outln!(
                    "{}",
                    serde_json::json!({ "name": ack.name, "seq": ack.seq, "seen": ack.seen, "task": ack.task, "ack_ns": ack.ack_ns })
                );
            } else {
                let seen: Vec<String> = ack.seen.iter().map(|x| x.to_string()).collect();
                outln!(
                    "{} = {}: seen by task {:?} (seq {}), {:.3} ms after the write",
                    ack.name,
                    seen.join(", "),
                    ack.task,
                    ack.seq,
                    ack.ack_ns as f64 / 1e6
                );
            }
        }
        CtlCmd::Start { name, file, duration, kinds } => {
            let mut req =
                pb::StartScenarioRequest { duration: duration.unwrap_or_default(), kinds, ..Default::default() };
            match (name, file) {
                (Some(n), _) if n.contains('/') => {
                    return Err(Fail::Usage(format!(
                        "{n:?} is a path: give a scenario name of the gateway's --scenario-dir, or --file {n} to send its text"
                    )));
                }
                (Some(n), _) => req.path = n,
                (None, Some(f)) => {
                    req.toml = read_scenario(&f)?;
                }
                (None, None) => return Err(Fail::Usage("give a scenario NAME or --file FILE".into())),
            }
            let r = c.start_scenario(req).await?.into_inner();
            outln!("run {} ({}) {}: results will be in {}", r.run_id, r.scenario, r.state, r.out_dir);
        }
        CtlCmd::Stop { run } => {
            let r = c.stop_scenario(pb::StopScenarioRequest { run_id: run.unwrap_or_default() }).await?.into_inner();
            outln!("run {}: stop requested; its results will be in {}", r.run_id, r.out_dir);
        }
        CtlCmd::Deploy { elf, cpu, name, args } => {
            let bytes = std::fs::read(&elf).map_err(|e| Fail::Usage(format!("{}: {e}", elf.display())))?;
            let args = args.split(',').filter(|s| !s.is_empty()).map(|s| format!("{s}\n")).collect::<String>();
            let d = c
                .deploy_payload(pb::DeployPayloadRequest { elf: bytes, cpu, name: name.unwrap_or_default(), args })
                .await?
                .into_inner();
            outln!(
                "cell {} on CPU {}: {} (sha256 {}, {} bytes, stored at {})",
                d.name,
                d.cpu,
                d.status,
                d.sha256,
                d.size_bytes,
                d.stored_at
            );
        }
        CtlCmd::StopCell { name } => {
            let d = c.stop_cell(pb::StopCellRequest { name }).await?.into_inner();
            // The daemon escapes guest text; what reaches this terminal is checked again all the same.
            let line = |s: &str| rtcell_host::printable_line(s, rtcell_host::PEER_TEXT_CAP);
            let name = line(&d.name);
            outln!("cell \"{name}\": {}", line(&d.status));
            for l in d.log {
                outln!("  cell \"{name}\" log: {}", line(&l));
            }
        }
        CtlCmd::Results { run } => {
            let r = c.get_results(pb::GetResultsRequest { run_id: run.unwrap_or_default() }).await?.into_inner();
            outln!("{}", r.json.trim_end());
        }
        CtlCmd::Metrics => {
            let m = c.get_metrics(pb::GetMetricsRequest {}).await?.into_inner();
            out!("{}", m.text);
        }
    }
    Ok(0)
}

/// A value as the signal's type reads it.
fn parse_value(t: &str, ty: &str) -> Result<pb::Value, String> {
    use pb::value::Kind;
    let kind = match ty {
        "i64" => Kind::I64(t.parse().map_err(|_| format!("{t:?} is not an integer (the signal is i64)"))?),
        "bool" => Kind::Bool(match t {
            "1" | "true" | "on" => true,
            "0" | "false" | "off" => false,
            _ => return Err(format!("{t:?} is not a bool: give true/false, on/off or 1/0")),
        }),
        _ => Kind::F64(t.parse().map_err(|_| format!("{t:?} is not a number"))?),
    };
    Ok(pb::Value { kind: Some(kind) })
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

fn print_stats(s: &pb::Stats, json: bool) {
    if json {
        outln!("{}", stats_json(s));
        return;
    }
    outln!("run {}: {:.1} s since release{}", s.run_id, s.elapsed_s, if s.finished { " (finished)" } else { "" });
    let mut t = Table::new(&[
        "task",
        "cell",
        "state",
        "cycles",
        "overruns",
        "lat p50 µs",
        "lat p99.9 µs",
        "lat max µs",
        "exec p50 µs",
        "exec max µs",
    ]);
    for x in &s.tasks {
        let (l, e) = (x.latency.clone().unwrap_or_default(), x.exec.clone().unwrap_or_default());
        t.row(vec![
            x.name.clone(),
            x.cell.clone(),
            x.state.clone(),
            x.cycles.to_string(),
            x.overruns.to_string(),
            us(l.p50_ns),
            us(l.p999_ns),
            us(l.max_ns),
            us(e.p50_ns),
            us(e.max_ns),
        ]);
    }
    outln!("{t}");
    outln!(
        "(lat: activation latency, release to start of cycle, one-way; exec: execution time; percentiles are bucket upper edges)"
    );
    if !s.channels.is_empty() {
        let mut t = Table::new(&["channel", "sent", "received", "lost", "queued"]);
        for c in &s.channels {
            t.row(vec![
                c.name.clone(),
                c.sent.to_string(),
                c.received.to_string(),
                c.lost.to_string(),
                c.queued.to_string(),
            ]);
        }
        outln!("{t}");
    }
    print_cells(&s.cells);
}

fn print_cells(cells: &[pb::CellState]) {
    if let Some(t) = cells_table(cells, true) {
        outln!("{t}");
    }
}

/// The cells table of `ctl status` and `ctl stats`: one row per cell, with a kvm cell's VM exits and, when
/// `handled` (statistics: status carries no claim), the handled count the gateway serves (unknown when
/// the cell's claim is impossible). `None` without cells.
fn cells_table(cells: &[pb::CellState], handled: bool) -> Option<Table> {
    if cells.is_empty() {
        return None;
    }
    let mut heads = vec!["cell", "kind", "CPU", "origin", "status", "handled", "VM exits"];
    if !handled {
        heads.remove(5);
    }
    let mut t = Table::new(&heads);
    for c in cells {
        let exits: u64 = c.vm_exits.values().sum();
        let mut row = vec![
            c.name.clone(),
            c.kind.clone(),
            c.cpu.to_string(),
            c.origin.clone(),
            c.status.clone(),
            c.handled.map_or("unknown (impossible claim)".into(), |n| n.to_string()),
            if c.kind == "kvm" { exits.to_string() } else { "-".into() },
        ];
        if !handled {
            row.remove(5);
        }
        t.row(row);
    }
    Some(t)
}

fn status_text(s: &pb::Status) -> String {
    let mut out = String::new();
    if let Some(h) = &s.host {
        out.push_str(&format!(
            "gateway {} on {} ({} CPUs, preemption {}, {})\n",
            s.server_version,
            h.hostname,
            h.cpus,
            h.preemption,
            if h.hypervisor.is_empty() { "bare metal".to_string() } else { format!("VM under {}", h.hypervisor) }
        ));
    }
    match &s.run {
        Some(r) => out.push_str(&format!(
            "run {} ({}): {}, {:.1} of {:.1} s{}\n",
            r.run_id,
            r.scenario,
            r.state,
            r.elapsed_s,
            r.duration_s,
            if r.error.is_empty() { String::new() } else { format!(", {}", r.error) }
        )),
        None => out.push_str("no run yet\n"),
    }
    if !s.tasks.is_empty() {
        let mut t = Table::new(&["task", "cell", "kind", "CPU", "period µs", "prio", "workload", "state", "params"]);
        for x in &s.tasks {
            t.row(vec![
                x.name.clone(),
                x.cell.clone(),
                x.cell_kind.clone(),
                x.cpu.to_string(),
                us(x.period_ns),
                x.priority.to_string(),
                x.workload.clone(),
                x.state.clone(),
                x.params.join(","),
            ]);
        }
        out.push_str(&format!("{t}\n"));
    }
    if !s.signals.is_empty() {
        let mut t = Table::new(&["signal", "values", "access", "type", "range", "acknowledged by"]);
        for x in &s.signals {
            let range = match (x.min, x.max) {
                (None, None) => "-".to_string(),
                (lo, hi) => format!(
                    "{} .. {}",
                    lo.map_or("-∞".into(), |v| v.to_string()),
                    hi.map_or("∞".into(), |v| v.to_string())
                ),
            };
            t.row(vec![
                x.name.clone(),
                x.values.to_string(),
                if x.writable { "writable".into() } else { "read-only".into() },
                x.r#type.clone(),
                range,
                x.reader.clone(),
            ]);
        }
        out.push_str(&format!("{t}\n"));
    }
    let mut cells = s.cells.clone();
    cells.extend(s.deployed.iter().map(|d| pb::CellState {
        name: d.name.clone(),
        kind: "kvm".into(),
        cpu: d.cpu,
        status: d.status.clone(),
        vm_exits: d.vm_exits.clone(),
        origin: format!("deployed {}", &d.sha256[..d.sha256.len().min(12)]),
        ..Default::default()
    }));
    let mut buf = Vec::new();
    if let Some(t) = cells_table(&cells, false) {
        buf.push(format!("{t}\n"));
    }
    out.push_str(&buf.concat());
    out
}

fn hist_json(h: &Option<pb::Histogram>) -> serde_json::Value {
    let h = h.clone().unwrap_or_default();
    serde_json::json!({ "count": h.count, "min_ns": h.min_ns, "p50_ns": h.p50_ns, "p99_ns": h.p99_ns, "p999_ns": h.p999_ns, "max_ns": h.max_ns, "sum_ns": h.sum_ns })
}

fn cells_json(cells: &[pb::CellState]) -> serde_json::Value {
    cells
        .iter()
        .map(|c| serde_json::json!({ "name": c.name, "kind": c.kind, "cpu": c.cpu, "status": c.status, "finished": c.finished, "handled": c.handled, "handled_is": "the cell's claim", "vm_exits": c.vm_exits, "origin": c.origin }))
        .collect()
}

fn stats_json(s: &pb::Stats) -> serde_json::Value {
    serde_json::json!({
        "run_id": s.run_id,
        "elapsed_s": s.elapsed_s,
        "finished": s.finished,
        "tasks": s.tasks.iter().map(|t| serde_json::json!({
            "name": t.name, "cell": t.cell, "state": t.state, "cycles": t.cycles, "overruns": t.overruns,
            "skipped": t.skipped, "errors": t.errors, "latency": hist_json(&t.latency), "exec": hist_json(&t.exec),
        })).collect::<Vec<_>>(),
        "channels": s.channels.iter().map(|c| serde_json::json!({ "name": c.name, "sent": c.sent, "received": c.received, "lost": c.lost, "queued": c.queued })).collect::<Vec<_>>(),
        "cells": cells_json(&s.cells),
    })
}

fn status_json(s: &pb::Status) -> serde_json::Value {
    serde_json::json!({
        "server_version": s.server_version,
        "run": s.run.as_ref().map(|r| serde_json::json!({ "run_id": r.run_id, "scenario": r.scenario, "state": r.state, "elapsed_s": r.elapsed_s, "duration_s": r.duration_s, "out_dir": r.out_dir, "error": r.error, "exit_code": r.exit_code })),
        "tasks": s.tasks.iter().map(|t| serde_json::json!({ "name": t.name, "cell": t.cell, "cell_kind": t.cell_kind, "cpu": t.cpu, "period_ns": t.period_ns, "state": t.state, "params": t.params, "workload": t.workload })).collect::<Vec<_>>(),
        "signals": s.signals.iter().map(|x| serde_json::json!({ "name": x.name, "values": x.values, "writable": x.writable, "type": x.r#type, "min": x.min, "max": x.max, "reader": x.reader })).collect::<Vec<_>>(),
        "cells": cells_json(&s.cells),
        "deployed": s.deployed.iter().map(|d| serde_json::json!({ "name": d.name, "cpu": d.cpu, "sha256": d.sha256, "size_bytes": d.size_bytes, "stored_at": d.stored_at, "status": d.status })).collect::<Vec<_>>(),
    })
}
