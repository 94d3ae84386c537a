//! The gRPC service: what each call reads or does, and the precise status of each refusal.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rtcell_shm::SignalError;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::access::caller;
use crate::deploy::Deployer;
use crate::metrics::{GatewayCounters, Scrape};
use crate::pb;
use crate::pb::gateway_server::Gateway as GatewayApi;
use crate::runs::{RunSlot, Runner};
use crate::security::{Audit, RateLimit, quoted};
use crate::snapshot;
use crate::start::ScenarioSources;
use crate::state::StateDir;

/// Starts, stops, deploys and cell stops per second per identity (bursts of [`CONTROL_BURST`]).
pub const CONTROL_RATE: f64 = 2.0;
pub const CONTROL_BURST: f64 = 10.0;
/// Runs kept for GetResults (the oldest finished ones are forgotten first).
const KEEP_RUNS: usize = 32;

/// What the gateway serves, shared by every listener.
pub struct Gateway {
    runs: Mutex<Vec<Arc<RunSlot>>>,
    pub(crate) runner: Option<Arc<dyn Runner>>,
    deployer: Option<Deployer>,
    /// Where received payloads and scenario texts are kept, within a budget.
    pub(crate) state: Option<Arc<StateDir>>,
    pub(crate) sources: ScenarioSources,
    /// CPUs never deployed onto: the gateway's and the Linux side's.
    master_cpus: Vec<usize>,
    pub counters: GatewayCounters,
    /// Writes in flight: one per identity, one per signal ([`crate::write::Writes`]).
    writes: crate::write::Writes,
    /// Writes per identity.
    limit: RateLimit,
    /// Starts, stops, deploys and cell stops per identity.
    control: RateLimit,
    pub(crate) audit: Audit,
    host: pb::HostInfo,
}

/// How a gateway is set up.
pub struct GatewayOptions {
    /// Starts scenarios (`rtcell serve`); `None`: StartScenario is refused (`rtcell run --serve`).
    pub runner: Option<Arc<dyn Runner>>,
    /// Private directory for stored payloads and received scenarios; `None`: DeployPayload is refused.
    pub state_dir: Option<PathBuf>,
    /// Writes per second per identity, and burst.
    pub write_rate: f64,
    pub write_burst: f64,
    pub audit: Audit,
    /// Where StartScenario finds scenarios by name, and C code.
    pub sources: ScenarioSources,
    /// CPUs deploys never use (the gateway's own and the Linux side's; e.g. `[0]`).
    pub master_cpus: Vec<usize>,
}

impl Gateway {
    pub fn new(opts: GatewayOptions) -> Result<Gateway, String> {
        let state = opts.state_dir.as_deref().map(StateDir::open).transpose()?.map(Arc::new);
        let deployer = state.as_ref().map(|s| Deployer::new(Arc::clone(s)));
        let facts = rtcell_host::facts::HostFacts::collect(None);
        Ok(Gateway {
            runs: Mutex::new(Vec::new()),
            runner: opts.runner,
            deployer,
            state,
            sources: opts.sources,
            master_cpus: opts.master_cpus,
            counters: GatewayCounters::default(),
            writes: crate::write::Writes::default(),
            limit: RateLimit::new("writes", opts.write_rate, opts.write_burst),
            control: RateLimit::new("starts, stops and deploys", CONTROL_RATE, CONTROL_BURST),
            audit: opts.audit,
            host: pb::HostInfo {
                hostname: rtcell_host::facts::hostname(),
                hypervisor: facts.hypervisor.clone().unwrap_or_default(),
                preemption: facts.preempt.clone(),
                cpus: facts.cpus,
            },
        })
    }

    /// Adds a run (the one `rtcell run --serve` runs, or one the runner started).
    pub fn add_run(&self, slot: Arc<RunSlot>) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.push(slot);
            while runs.len() > KEEP_RUNS {
                match runs.iter().position(|r| r.outcome().is_some()) {
                    Some(i) => {
                        runs.remove(i);
                    }
                    None => break,
                }
            }
        }
    }

    /// The files of the state directory that running cells and runs use.
    pub(crate) fn in_use(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.deployer.as_ref().map(|d| d.stored()).unwrap_or_default();
        if let Ok(runs) = self.runs.lock() {
            v.extend(runs.iter().filter_map(|r| r.spooled()));
        }
        v
    }

    /// The latest run.
    pub fn current(&self) -> Option<Arc<RunSlot>> {
        self.runs.lock().ok().and_then(|r| r.last().cloned())
    }

    fn find(&self, id: &str) -> Result<Arc<RunSlot>, Status> {
        let runs = self.runs.lock().map_err(|_| Status::internal("runs poisoned"))?;
        if id.is_empty() {
            return runs
                .last()
                .cloned()
                .ok_or_else(|| Status::not_found("no run yet: start one (rtcell ctl start SCENARIO)"));
        }
        runs.iter().find(|r| r.id == id).cloned().ok_or_else(|| {
            let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
            Status::not_found(format!(
                "no run {} here (known: {})",
                quoted(id),
                if ids.is_empty() { "none".into() } else { ids.join(", ") }
            ))
        })
    }

    fn running(&self) -> Result<(Arc<RunSlot>, Arc<rtcell_scenario::Live>), Status> {
        let slot = self.find("")?;
        let live = slot
            .live()
            .cloned()
            .ok_or_else(|| Status::unavailable(format!("run {} is {}: its cells are not up", slot.id, slot.state())))?;
        Ok((slot, live))
    }

    /// Everything a scrape shows now.
    pub fn scrape(&self) -> Scrape {
        let slot = self.current();
        let mut stats = slot.as_deref().map(|s| snapshot::stats(s, true)).unwrap_or_default();
        if let Some(d) = &self.deployer {
            stats.cells.extend(d.cell_states());
        }
        let c = &self.counters;
        Scrape {
            stats,
            run: slot.as_deref().map(snapshot::run_info),
            requests: c.requests.lock().map(|m| m.clone()).unwrap_or_default(),
            writes: c.writes.lock().map(|m| m.clone()).unwrap_or_default(),
            connections_refused: c.connections_refused.load(std::sync::atomic::Ordering::Relaxed),
            deploys: c.deploys.load(std::sync::atomic::Ordering::Relaxed),
            limits: crate::metrics::Limits { audit_log_failed: self.audit.failed(), ..c.limits() },
        }
    }

    pub fn metrics_text(&self) -> Result<String, String> {
        crate::metrics::render(self.scrape())
    }

    pub(crate) fn stats_now(&self, buckets: bool) -> pb::Stats {
        let mut s = self.current().map(|r| snapshot::stats(&r, buckets)).unwrap_or_default();
        if let Some(d) = &self.deployer {
            s.cells.extend(d.cell_states());
        }
        s
    }

    /// Stops what the gateway started itself (the daemon is going away).
    pub fn shutdown(&self) {
        if let Some(r) = self.current()
            && r.outcome().is_none()
        {
            r.request_stop();
        }
        if let Some(d) = &self.deployer {
            d.stop_all();
        }
    }
}

/// The tonic service over a shared [`Gateway`].
#[derive(Clone)]
pub struct Service(pub Arc<Gateway>);

type StatsStream = Pin<Box<dyn Stream<Item = Result<pb::Stats, Status>> + Send>>;

#[tonic::async_trait]
impl GatewayApi for Service {
    async fn get_status(&self, _req: Request<pb::GetStatusRequest>) -> Result<Response<pb::Status>, Status> {
        let g = &self.0;
        let mut st = pb::Status {
            host: Some(g.host.clone()),
            server_version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        };
        if let Some(slot) = g.current() {
            st.run = Some(snapshot::run_info(&slot));
            if let Some(live) = slot.live() {
                let region = live.region();
                st.cells = snapshot::cell_states(live);
                st.tasks = snapshot::task_infos(&live.plan, &region);
                st.signals = live.plan.signals.iter().map(snapshot::signal_info).collect();
            }
        }
        if let Some(d) = &g.deployer {
            st.deployed = d.list();
        }
        Ok(Response::new(st))
    }

    async fn get_stats(&self, req: Request<pb::GetStatsRequest>) -> Result<Response<pb::Stats>, Status> {
        Ok(Response::new(self.0.stats_now(req.get_ref().buckets)))
    }

    type StreamStatsStream = StatsStream;

    async fn stream_stats(&self, req: Request<pb::StreamStatsRequest>) -> Result<Response<StatsStream>, Status> {
        crate::streams::stream_stats(Arc::clone(&self.0), req).map(Response::new)
    }

    async fn read_signal(&self, req: Request<pb::ReadSignalRequest>) -> Result<Response<pb::SignalValue>, Status> {
        let (_, live) = self.0.running()?;
        let name = &req.get_ref().name;
        let sig = live.plan.signals.iter().find(|s| &s.name == name).ok_or_else(|| {
            let known: Vec<&str> = live.plan.signals.iter().map(|s| s.name.as_str()).collect();
            Status::not_found(format!(
                "no signal {} (signals: {})",
                quoted(name),
                if known.is_empty() { "none".into() } else { known.join(", ") }
            ))
        })?;
        let region = live.region();
        let view = region.signal(&sig.name).map_err(|e| Status::internal(format!("signal {name:?}: {e}")))?;
        let mut values = vec![0.0; sig.values as usize];
        // Busy: the writer was preempted mid-update on every retry of the read; give it a moment and
        // read again a few times before telling the client to.
        let mut tries = 0;
        let n = loop {
            match rtcell_tasks::work::try_read_f64s(&view, &mut values) {
                Ok(n) => break n,
                Err(SignalError::Busy) if tries < 10 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(SignalError::Busy) => {
                    return Err(Status::unavailable(format!(
                        "signal {name:?} was mid-update on every read; try again"
                    )));
                }
                Err(e) => return Err(Status::data_loss(format!("signal {name:?}: {e:?}"))),
            }
        };
        values.truncate(n);
        let seq = view.seq_word().load(std::sync::atomic::Ordering::Acquire);
        Ok(Response::new(pb::SignalValue {
            name: sig.name.clone(),
            values,
            seq,
            info: Some(snapshot::signal_info(sig)),
        }))
    }

    async fn write_signal(&self, req: Request<pb::WriteSignalRequest>) -> Result<Response<pb::WriteAck>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        // The write, its audit line and its count go on if the client goes away (a cancelled call drops
        // this future): a value written is always audited and counted.
        detached(self.clone().write_audited(who, r)).await.map(Response::new)
    }

    async fn start_scenario(&self, req: Request<pb::StartScenarioRequest>) -> Result<Response<pb::RunInfo>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        let what = serde_json::json!({ "path": r.path, "toml_bytes": r.toml.len(), "base_dir": r.base_dir, "duration": r.duration, "kinds": r.kinds });
        let res = self.0.control.take(&who.key, &who.id).and_then(|()| self.0.start_scenario(r));
        self.0.audit.log(&who, "start", what, &res.as_ref().map(|i| format!("run {}", i.run_id)).map_err(Clone::clone));
        res.map(Response::new)
    }

    async fn stop_scenario(&self, req: Request<pb::StopScenarioRequest>) -> Result<Response<pb::RunInfo>, Status> {
        let who = caller(&req)?;
        let run_id = req.get_ref().run_id.clone();
        let res = self.0.control.take(&who.key, &who.id).and_then(|()| {
            let slot = self.0.find(&run_id)?;
            if slot.outcome().is_some() {
                return Err(Status::failed_precondition(format!(
                    "run {} has already ended ({})",
                    slot.id,
                    slot.state()
                )));
            }
            slot.request_stop();
            Ok(snapshot::run_info(&slot))
        });
        self.0.audit.log(
            &who,
            "stop",
            serde_json::json!({ "run": run_id }),
            &res.as_ref().map(|_| "stop requested".to_string()).map_err(Clone::clone),
        );
        res.map(Response::new)
    }

    async fn deploy_payload(
        &self,
        req: Request<pb::DeployPayloadRequest>,
    ) -> Result<Response<pb::DeployedCell>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        let sha = crate::security::hex(&<sha2::Sha256 as sha2::Digest>::digest(&r.elf));
        let what = serde_json::json!({ "bytes": r.elf.len(), "sha256": sha, "cpu": r.cpu, "name": r.name });
        if let Err(e) = self.0.control.take(&who.key, &who.id) {
            self.0.audit.log(&who, "deploy", what, &Err(e.clone()));
            return Err(e);
        }
        let g = Arc::clone(&self.0);
        let g2 = Arc::clone(&self.0);
        // Deployed, audited and counted even if the client goes away meanwhile.
        detached(async move {
            let res = tokio::task::spawn_blocking(move || {
                let Some(d) = &g.deployer else {
                    return Err(Status::failed_precondition(
                        "this gateway does not deploy payloads: run `rtcell serve`",
                    ));
                };
                let mut busy: Vec<(usize, String)> = g
                    .master_cpus
                    .iter()
                    .map(|c| (*c, "the gateway and the Linux side (the master CPU)".to_string()))
                    .collect();
                if let Some(l) = g.current().filter(|s| s.outcome().is_none()).and_then(|s| s.live().cloned()) {
                    busy.extend(
                        l.plan.cells.iter().map(|c| (c.cpu, format!("cell {:?} of the running scenario", c.name))),
                    );
                    busy.push((l.plan.master_cpu, "the running scenario's Linux-side tasks".to_string()));
                }
                d.deploy(&r, &busy, &g.in_use())
            })
            .await
            .map_err(|e| Status::internal(format!("deploy task: {e}")))?;
            if res.is_ok() {
                g2.counters.deploys.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            g2.audit.log(
                &who,
                "deploy",
                what,
                &res.as_ref()
                    .map(|c| format!("cell {:?} on CPU {} ({})", c.name, c.cpu, c.stored_at))
                    .map_err(Clone::clone),
            );
            res
        })
        .await
        .map(Response::new)
    }

    async fn stop_cell(&self, req: Request<pb::StopCellRequest>) -> Result<Response<pb::DeployedCell>, Status> {
        let who = caller(&req)?;
        let name = req.into_inner().name;
        if let Err(e) = self.0.control.take(&who.key, &who.id) {
            self.0.audit.log(&who, "stop-cell", serde_json::json!({ "cell": name }), &Err(e.clone()));
            return Err(e);
        }
        let g = Arc::clone(&self.0);
        let n2 = name.clone();
        let g2 = Arc::clone(&self.0);
        // Stopped, audited and counted even if the client goes away meanwhile.
        detached(async move {
            let res = tokio::task::spawn_blocking(move || match &g.deployer {
                Some(d) => d.stop(&n2),
                None => Err(Status::failed_precondition("this gateway deploys no cells")),
            })
            .await
            .map_err(|e| Status::internal(format!("stop task: {e}")))?;
            g2.audit.log(
                &who,
                "stop-cell",
                serde_json::json!({ "cell": name }),
                &res.as_ref().map(|c| c.status.clone()).map_err(Clone::clone),
            );
            res
        })
        .await
        .map(Response::new)
    }

    async fn get_results(&self, req: Request<pb::GetResultsRequest>) -> Result<Response<pb::ResultsDocument>, Status> {
        let slot = self.0.find(&req.get_ref().run_id)?;
        let Some(o) = slot.outcome() else {
            return Err(Status::unavailable(format!(
                "run {} is {}: its results are written when it ends",
                slot.id,
                slot.state()
            )));
        };
        let Some(path) = &o.results_path else {
            return Err(Status::not_found(format!(
                "run {} wrote no results: {}",
                slot.id,
                o.error.clone().unwrap_or_default()
            )));
        };
        let json = std::fs::read_to_string(path).map_err(|e| Status::not_found(format!("{}: {e}", path.display())))?;
        Ok(Response::new(pb::ResultsDocument { run_id: slot.id.clone(), json, path: path.display().to_string() }))
    }

    async fn get_metrics(&self, _req: Request<pb::GetMetricsRequest>) -> Result<Response<pb::MetricsText>, Status> {
        let text = self.0.metrics_text().map_err(Status::internal)?;
        Ok(Response::new(pb::MetricsText { text }))
    }
}

/// Runs `work` in a task of its own and waits for it: if the call is cancelled (the client went away,
/// its deadline passed), the work still ends, and audits and counts what it did.
async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T, Status>> + Send + 'static,
) -> Result<T, Status> {
    tokio::spawn(work).await.map_err(|e| Status::internal(format!("request task: {e}")))?
}

impl Service {
    /// A write, its audit line and its count (see [`GatewayApi::write_signal`]).
    async fn write_audited(
        self,
        who: crate::access::Caller,
        r: pb::WriteSignalRequest,
    ) -> Result<pb::WriteAck, Status> {
        let what =
            serde_json::json!({ "signal": r.name, "values": r.values.iter().map(value_json).collect::<Vec<_>>() });
        let res = self.write(&who, &r).await;
        self.0.audit.log(
            &who,
            "write",
            what,
            &res.as_ref()
                .map(|a| format!("seq {} seen {:?} by task {:?}", a.seq, a.seen, a.task))
                .map_err(Clone::clone),
        );
        let result = match &res {
            Ok(_) => "acknowledged",
            Err(s) => crate::metrics::code_name(s.code()),
        };
        // Names of signals that do not exist are not used as labels: a client could make them unbounded.
        let label = match self.0.running() {
            Ok((_, live)) if live.plan.signals.iter().any(|s| s.name == r.name) => r.name.clone(),
            _ => crate::metrics::UNKNOWN_SIGNAL.into(),
        };
        self.0.counters.write(&label, result);
        res
    }

    async fn write(&self, who: &crate::access::Caller, r: &pb::WriteSignalRequest) -> Result<pb::WriteAck, Status> {
        // One write in flight per client: a second is refused at once, never queued.
        let _mine = self.0.writes.enter(&who.key, &who.client)?;
        self.0.limit.take(&who.key, &who.id)?;
        let (_, live) = self.0.running()?;
        let (sig, values) = crate::write::check(&live.plan, r)?;
        let wait = crate::write::ack_wait(&live, sig, r.timeout_ms);
        // One write at a time per signal: each acknowledgement then answers exactly one write. Waited
        // for no longer than the write's own acknowledgement.
        let _signal = self.0.writes.signal(&sig.name, wait).await?;
        crate::write::write_and_confirm(&live, sig, &values, wait).await
    }
}

/// A written value as the audit log shows it (typed as the client sent it).
fn value_json(v: &pb::Value) -> serde_json::Value {
    use pb::value::Kind;
    match v.kind {
        Some(Kind::F64(x)) => serde_json::json!({ "f64": x }),
        Some(Kind::I64(x)) => serde_json::json!({ "i64": x }),
        Some(Kind::Bool(b)) => serde_json::json!({ "bool": b }),
        None => serde_json::Value::Null,
    }
}
