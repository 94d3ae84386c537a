//! Prometheus metrics: the run's task, channel and cell figures read at each scrape, and the gateway's
//! own request counters, in the text exposition format (`prometheus-client`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::pb;

/// Upper bounds (s) of the exported latency and execution-time histogram buckets.
const BOUNDS_S: [f64; 14] =
    [1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 100e-3];

/// The gateway's own counters.
#[derive(Default)]
pub struct GatewayCounters {
    /// (method, gRPC code name) → requests.
    pub requests: Mutex<BTreeMap<(String, String), u64>>,
    /// Connections closed at once because too many were open.
    pub connections_refused: std::sync::Arc<AtomicU64>,
    /// (signal, result) → writes.
    pub writes: Mutex<BTreeMap<(String, String), u64>>,
    pub deploys: AtomicU64,
    /// Connections closed by the gateway's gRPC listeners, by reason.
    pub closed: std::sync::Arc<crate::conn::ClosedCounters>,
    /// Connections closed by the `/metrics` listener, by reason.
    pub metrics_closed: std::sync::Arc<crate::conn::ClosedCounters>,
    /// Statistics streams: open, dropped samples, ended.
    pub streams: crate::streams::StreamCounters,
    /// Bytes held for clients' requests and replies ([`crate::budget`]).
    pub budget: std::sync::Arc<crate::budget::Budget>,
}

/// The bytes held for clients above which no new statistics stream is opened: three quarters of the
/// gateway's budget ([`crate::budget::TOTAL_BYTES`]), counted, never the resident set (which an allocator
/// may keep long after a burst).
pub const STREAMS_BELOW_BYTES: u64 = (crate::budget::TOTAL_BYTES as u64) / 4 * 3;

/// The resident set of this process, bytes (`/proc/self/statm`); 0 if unknown.
pub fn resident_bytes() -> u64 {
    resident_bytes_of(None).unwrap_or(0)
}

/// The resident set of process `pid` (this one for `None`), bytes, from `/proc/PID/statm`.
pub fn resident_bytes_of(pid: Option<u32>) -> Option<u64> {
    let proc = pid.map_or_else(|| "self".to_string(), |p| p.to_string());
    let text = std::fs::read_to_string(format!("/proc/{proc}/statm")).ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only returns a value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages.saturating_mul(u64::try_from(page).ok().filter(|p| *p > 0)?))
}

/// The gateway's own limits as one scrape shows them.
#[derive(Debug, Default)]
pub struct Limits {
    pub resident_bytes: u64,
    /// Bytes held for clients now ([`crate::budget`]).
    pub held_bytes: u64,
    /// (listener: `grpc` or `metrics`, reason, connections closed).
    pub closed: Vec<(&'static str, &'static str, u64)>,
    pub streams_open: u64,
    pub dropped_samples: u64,
    pub streams_ended_stalled: u64,
    pub streams_refused: u64,
    /// The audit log file can no longer be written: calls that change anything are refused.
    pub audit_log_failed: bool,
}

impl GatewayCounters {
    /// The limits' figures now.
    pub fn limits(&self) -> Limits {
        let s = &self.streams;
        Limits {
            resident_bytes: resident_bytes(),
            held_bytes: self.budget.held() as u64,
            closed: [("grpc", &self.closed), ("metrics", &self.metrics_closed)]
                .into_iter()
                .flat_map(|(l, c)| c.rows().into_iter().map(move |(r, n)| (l, r, n)))
                .collect(),
            streams_open: s.open(),
            dropped_samples: s.dropped_samples.load(std::sync::atomic::Ordering::Relaxed),
            streams_ended_stalled: s.ended_stalled.load(std::sync::atomic::Ordering::Relaxed),
            streams_refused: s.refused.load(std::sync::atomic::Ordering::Relaxed),
            audit_log_failed: false,
        }
    }

    pub fn request(&self, method: &str, code: tonic::Code) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((method.to_string(), code_name(code).to_string())).or_default() += 1;
        }
    }

    /// Counts a write of `signal` (a declared signal's name, or the one bucket of unknown names). Signal
    /// names outlive their run (a counter never goes back), and an operator may start scenarios with
    /// new names without end: past [`MAX_WRITE_SIGNALS`] names, a new one is counted as [`OTHER_SIGNAL`].
    pub fn write(&self, signal: &str, result: &str) {
        if let Ok(mut m) = self.writes.lock() {
            let known = m.keys().any(|(s, _)| s == signal);
            let names = || m.keys().map(|(s, _)| s.as_str()).collect::<std::collections::BTreeSet<_>>().len();
            let signal =
                if known || signal == UNKNOWN_SIGNAL || names() < MAX_WRITE_SIGNALS { signal } else { OTHER_SIGNAL };
            *m.entry((signal.to_string(), result.to_string())).or_default() += 1;
        }
    }

    /// Requests refused (any code but OK), by reason.
    pub fn rejected(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        if let Ok(m) = self.requests.lock() {
            for ((_, code), n) in m.iter().filter(|((_, c), _)| c != "ok") {
                *out.entry(code.clone()).or_default() += n;
            }
        }
        out
    }
}

/// Signal names `rtcell_gateway_signal_writes_total` keeps as labels, over the gateway's life.
pub const MAX_WRITE_SIGNALS: usize = 256;
/// The label of writes to signals beyond [`MAX_WRITE_SIGNALS`] (writes to undeclared names are
/// `(unknown)`, whatever the cap).
pub const OTHER_SIGNAL: &str = "(past the cap)";
/// The label of writes to names no running scenario declares (a client could make those unbounded).
pub const UNKNOWN_SIGNAL: &str = "(unknown)";

pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "ok",
        Cancelled => "cancelled",
        Unknown => "unknown",
        InvalidArgument => "invalid_argument",
        DeadlineExceeded => "deadline_exceeded",
        NotFound => "not_found",
        AlreadyExists => "already_exists",
        PermissionDenied => "permission_denied",
        ResourceExhausted => "resource_exhausted",
        FailedPrecondition => "failed_precondition",
        Aborted => "aborted",
        OutOfRange => "out_of_range",
        Unimplemented => "unimplemented",
        Internal => "internal",
        Unavailable => "unavailable",
        DataLoss => "data_loss",
        Unauthenticated => "unauthenticated",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    task: String,
    cell: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabels {
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CellLabels {
    cell: String,
    kind: String,
    cpu: String,
    origin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExitLabels {
    cell: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    task: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    signal: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClosedLabels {
    listener: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    run_id: String,
    scenario: String,
    state: String,
}

/// Everything one scrape shows.
#[derive(Debug, Default)]
pub struct Scrape {
    pub stats: pb::Stats,
    pub run: Option<pb::RunInfo>,
    pub requests: BTreeMap<(String, String), u64>,
    pub writes: BTreeMap<(String, String), u64>,
    pub connections_refused: u64,
    pub deploys: u64,
    pub limits: Limits,
}

/// `(upper bound s, cumulative count)` of the export buckets, from a fixed-width ns histogram.
fn cumulative(h: &pb::Histogram) -> Vec<(f64, u64)> {
    let mut out = Vec::with_capacity(BOUNDS_S.len() + 1);
    let (mut acc, mut i) = (0u64, 0usize);
    for &b in &BOUNDS_S {
        let limit_ns = (b * 1e9).round() as u64;
        // Bucket i holds [i w, (i+1) w): whole when its upper edge is within the bound.
        while i < h.buckets.len() && (i as u64 + 1) * h.bucket_ns <= limit_ns {
            acc += h.buckets[i];
            i += 1;
        }
        out.push((b, acc));
    }
    out.push((f64::INFINITY, h.count));
    out
}

fn counter<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in rows {
        ConstCounter::new(v).encode(m.encode_family(&l)?)?;
    }
    Ok(())
}

fn gauge<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, i64)>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (l, v) in rows {
        ConstGauge::new(v).encode(m.encode_family(&l)?)?;
    }
    Ok(())
}

fn histogram(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(TaskLabels, &pb::Histogram)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (l, h) in rows {
        let mut f = m.encode_family(l)?;
        f.encode_histogram::<NoLabelSet>(h.sum_ns as f64 / 1e9, h.count, &cumulative(h), None)?;
    }
    Ok(())
}

impl prometheus_client::collector::Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let tl = |t: &pb::TaskStats| TaskLabels { task: t.name.clone(), cell: t.cell.clone() };
        let tasks = &self.stats.tasks;
        counter(&mut enc, "rtcell_task_cycles", "Cycles the task completed.", tasks.iter().map(|t| (tl(t), t.cycles)))?;
        counter(
            &mut enc,
            "rtcell_task_overruns",
            "Cycles that ended after their deadline.",
            tasks.iter().map(|t| (tl(t), t.overruns)),
        )?;
        counter(
            &mut enc,
            "rtcell_task_skipped",
            "Releases skipped after an overrun.",
            tasks.iter().map(|t| (tl(t), t.skipped)),
        )?;
        counter(
            &mut enc,
            "rtcell_task_errors",
            "Replies that did not match the reference output.",
            tasks.iter().map(|t| (tl(t), t.errors)),
        )?;
        gauge(
            &mut enc,
            "rtcell_task_state",
            "1 for the task's current state (starting, ready, running, done, stopped, tripped, faulted).",
            tasks.iter().map(|t| (StateLabels { task: t.name.clone(), state: t.state.clone() }, 1)),
        )?;
        let lat: Vec<_> = tasks.iter().filter_map(|t| t.latency.as_ref().map(|h| (tl(t), h))).collect();
        histogram(&mut enc, "rtcell_task_activation_latency", "Release to start of the cycle.", &lat)?;
        let exec: Vec<_> = tasks.iter().filter_map(|t| t.exec.as_ref().map(|h| (tl(t), h))).collect();
        histogram(&mut enc, "rtcell_task_execution_time", "Execution time of a cycle.", &exec)?;

        let chl = |c: &pb::ChannelStats| ChannelLabels { channel: c.name.clone() };
        let chans = &self.stats.channels;
        counter(&mut enc, "rtcell_channel_sent", "Messages sent on the ring.", chans.iter().map(|c| (chl(c), c.sent)))?;
        counter(
            &mut enc,
            "rtcell_channel_received",
            "Messages received from the ring.",
            chans.iter().map(|c| (chl(c), c.received)),
        )?;
        counter(
            &mut enc,
            "rtcell_channel_lost",
            "Messages lost (ring full at the sender, or a gap at the receiver).",
            chans.iter().map(|c| (chl(c), c.lost)),
        )?;

        let cl = |c: &pb::CellState| CellLabels {
            cell: c.name.clone(),
            kind: c.kind.clone(),
            cpu: c.cpu.to_string(),
            origin: c.origin.clone(),
        };
        let cells = &self.stats.cells;
        gauge(
            &mut enc,
            "rtcell_cell_up",
            "1 while the cell runs, 0 once it has ended.",
            cells.iter().map(|c| (cl(c), i64::from(!c.finished))),
        )?;
        // The cell's own claim: a sample only while it is possible (see `CellState.handled`); an
        // impossible one is left out here and flagged by `rtcell_cell_handled_impossible`.
        counter(
            &mut enc,
            "rtcell_cell_handled",
            "Messages or steps the cell CLAIMS it handled (its control block's count, written by the cell, not \
             measured); no sample while the claim is over what the cell can have handled (see \
             rtcell_cell_handled_impossible).",
            cells.iter().filter_map(|c| c.handled.map(|n| (cl(c), n))),
        )?;
        gauge(
            &mut enc,
            "rtcell_cell_handled_impossible",
            "1 when the count the cell claims it handled is over what it can have handled in the time it ran (its \
             control block was scribbled; the count is unknown and not shown), else 0.",
            cells.iter().map(|c| (cl(c), i64::from(c.handled.is_none()))),
        )?;
        counter(
            &mut enc,
            "rtcell_cell_vm_exits",
            "VM exits of a kvm cell, by reason.",
            cells.iter().flat_map(|c| {
                c.vm_exits.iter().map(|(r, n)| (ExitLabels { cell: c.name.clone(), reason: r.clone() }, *n))
            }),
        )?;
        if let Some(r) = &self.run {
            gauge(
                &mut enc,
                "rtcell_run_info",
                "The run this gateway serves (1).",
                [(RunLabels { run_id: r.run_id.clone(), scenario: r.scenario.clone(), state: r.state.clone() }, 1)],
            )?;
            let m = enc.encode_descriptor(
                "rtcell_run_elapsed",
                "Time since the tasks were first released.",
                Some(&Unit::Seconds),
                MetricType::Gauge,
            )?;
            ConstGauge::new(r.elapsed_s).encode(m)?;
        }
        counter(
            &mut enc,
            "rtcell_gateway_requests",
            "gRPC requests by method (the API's own; any other path is (other)) and status code (codes other than ok were refused or failed).",
            self.requests.iter().map(|((m, c), n)| (RequestLabels { method: m.clone(), code: c.clone() }, *n)),
        )?;
        counter(
            &mut enc,
            "rtcell_gateway_signal_writes",
            "Signal writes by signal and result.",
            self.writes.iter().map(|((s, r), n)| (WriteLabels { signal: s.clone(), result: r.clone() }, *n)),
        )?;
        let m = enc.encode_descriptor(
            "rtcell_gateway_connections_refused",
            "Connections closed at once because too many were open.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(self.connections_refused).encode(m)?;
        let m = enc.encode_descriptor(
            "rtcell_gateway_deploys",
            "Payloads deployed into new kvm cells.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(self.deploys).encode(m)?;
        encode_limits(&mut enc, &self.limits)
    }
}

/// One value without labels.
fn single(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    v: u64,
) -> std::fmt::Result {
    let m = enc.encode_descriptor(name, help, unit, kind)?;
    match kind {
        MetricType::Counter => ConstCounter::new(v).encode(m),
        _ => ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(m),
    }
}

fn encode_limits(enc: &mut DescriptorEncoder, l: &Limits) -> std::fmt::Result {
    counter(
        enc,
        "rtcell_gateway_connections_closed",
        "Connections the gateway closed, by listener (grpc, metrics) and reason: listener_full, address_full and preauth_full at accept, \
         address_role_full (its role's most connections from its address), preauth_evicted (unauthenticated, or on metrics not yet answered, its place given to a newer connection of an address \
         holding fewer or of its own address, those that sent nothing first), no_request (no authenticated request, or on metrics no request, within the deadline), identity_full (its identity's most connections), role_full (its role's clients' most connections), idle \
         (no request in flight for the idle timeout), auth_failures (too many failed authentications), \
         stalled_stream (a stream its client did not read).",
        l.closed.iter().map(|(l, r, n)| (ClosedLabels { listener: (*l).to_string(), reason: (*r).to_string() }, *n)),
    )?;
    let bytes = Some(&Unit::Bytes);
    single(
        enc,
        "rtcell_gateway_resident_memory",
        "Resident memory of the gateway's process.",
        bytes,
        MetricType::Gauge,
        l.resident_bytes,
    )?;
    single(
        enc,
        "rtcell_gateway_memory_budget",
        "Bytes the gateway holds at most for all clients' requests and replies in flight.",
        bytes,
        MetricType::Gauge,
        crate::budget::TOTAL_BYTES as u64,
    )?;
    single(
        enc,
        "rtcell_gateway_held",
        "Bytes held now for clients' requests and replies in flight (above 3/4 of the budget, no new statistics streams).",
        bytes,
        MetricType::Gauge,
        l.held_bytes,
    )?;
    single(
        enc,
        "rtcell_gateway_audit_log_failed",
        "1 once the audit log file could not be written (a rotation or a write failed): no more lines go to it \
         and calls that change anything are refused until the gateway is restarted; else 0.",
        None,
        MetricType::Gauge,
        u64::from(l.audit_log_failed),
    )?;
    single(
        enc,
        "rtcell_gateway_streams_open",
        "Statistics streams open now.",
        None,
        MetricType::Gauge,
        l.streams_open,
    )?;
    single(
        enc,
        "rtcell_gateway_stream_dropped_samples",
        "Statistics snapshots not sent because their client did not read in time.",
        None,
        MetricType::Counter,
        l.dropped_samples,
    )?;
    counter(
        enc,
        "rtcell_gateway_streams_ended",
        "Statistics streams the gateway ended, by reason (stalled: no progress within the deadline).",
        [(ReasonLabels { reason: "stalled".into() }, l.streams_ended_stalled)],
    )?;
    single(
        enc,
        "rtcell_gateway_streams_refused",
        "Statistics streams refused (too many open, or the process above its memory budget).",
        None,
        MetricType::Counter,
        l.streams_refused,
    )
}

/// The text exposition of one scrape.
pub fn render(scrape: Scrape) -> Result<String, String> {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(scrape));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).map_err(|e| format!("metrics encoding: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_accumulate_to_their_bounds() {
        // 1 µs buckets: 3 samples in [0,1) µs, 2 in [4,5) µs, 1 in [30,31) µs.
        let mut buckets = vec![0u64; 40];
        buckets[0] = 3;
        buckets[4] = 2;
        buckets[30] = 1;
        let h = pb::Histogram { count: 7, bucket_ns: 1000, buckets, overflow: 1, ..Default::default() };
        let c = cumulative(&h);
        assert_eq!(c[0], (1e-6, 3));
        assert_eq!(c[1], (2e-6, 3));
        assert_eq!(c[2], (5e-6, 5));
        assert_eq!(c[4], (20e-6, 5));
        assert_eq!(c[5], (50e-6, 6));
        assert_eq!(c.last().copied(), Some((f64::INFINITY, 7)), "+Inf holds the overflow too");
    }

    #[test]
    fn signal_names_past_the_cap_share_one_label() {
        let c = GatewayCounters::default();
        for i in 0..MAX_WRITE_SIGNALS + 10 {
            c.write(&format!("s{i}"), "permission_denied");
        }
        c.write("s0", "ok");
        c.write(UNKNOWN_SIGNAL, "not_found");
        let m = c.writes.lock().expect("writes");
        let names: std::collections::BTreeSet<&str> = m.keys().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names.len(), MAX_WRITE_SIGNALS + 2, "the cap, the one past it and (unknown)");
        assert_eq!(m.get(&(OTHER_SIGNAL.to_string(), "permission_denied".to_string())), Some(&10));
        assert_eq!(m.get(&("s0".to_string(), "ok".to_string())), Some(&1), "a kept name keeps counting");
        assert_eq!(m.get(&(UNKNOWN_SIGNAL.to_string(), "not_found".to_string())), Some(&1), "undeclared names apart");
    }
}
