//! Writes to writable signals: checked against the scenario's declaration, published on the signal,
//! and confirmed by the acknowledgement of the task that reads it (see `rtcell_tasks::params`).
//!
//! [`Writes`] decides which writes may go on: one in flight per identity (a second one is refused at
//! once, never queued), one at a time per signal (so an acknowledgement answers exactly one write),
//! and a write waits for its signal no longer than it would wait for its acknowledgement. No client can
//! hold another's writes to other signals, nor for longer than one write of its own.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rtcell_scenario::Live;
use rtcell_scenario::plan::{Plan, PlanSignal, ValueType};
use rtcell_tasks::params::{ack_name, publish, read_ack};
use tonic::Status;

use crate::pb;
use crate::snapshot::mono_ns;

/// Longest wait for an acknowledgement a client may ask for.
pub const MAX_ACK_WAIT: Duration = Duration::from_secs(10);
/// How often the acknowledgement is looked at while waiting.
const ACK_POLL: Duration = Duration::from_micros(200);

/// The signal and its values as f64, or the precise reason the write is refused.
pub fn check<'p>(plan: &'p Plan, req: &pb::WriteSignalRequest) -> Result<(&'p PlanSignal, Vec<f64>), Status> {
    let sig = plan.signals.iter().find(|s| s.name == req.name).ok_or_else(|| {
        let known: Vec<&str> = plan.signals.iter().filter(|s| s.writable.is_some()).map(|s| s.name.as_str()).collect();
        Status::not_found(format!(
            "no signal {} in scenario {:?} (writable: {})",
            crate::security::quoted(&req.name),
            plan.name,
            list(&known)
        ))
    })?;
    let Some(w) = &sig.writable else {
        return Err(Status::permission_denied(format!(
            "signal {:?} is read-only: the scenario does not declare it writable",
            sig.name
        )));
    };
    let mut values = Vec::with_capacity(req.values.len());
    for (i, v) in req.values.iter().enumerate() {
        use pb::value::Kind;
        let f = match (w.ty, v.kind) {
            (ValueType::F64, Some(Kind::F64(x))) => x,
            (ValueType::I64, Some(Kind::I64(x))) => x as f64,
            (ValueType::Bool, Some(Kind::Bool(b))) => f64::from(u8::from(b)),
            (ty, got) => {
                let got = match got {
                    Some(Kind::F64(_)) => "f64",
                    Some(Kind::I64(_)) => "i64",
                    Some(Kind::Bool(_)) => "bool",
                    None => "no value",
                };
                return Err(Status::invalid_argument(format!(
                    "signal {:?} takes {} values; value {i} is {got}",
                    sig.name,
                    ty.as_str()
                )));
            }
        };
        // An i64 beyond ±2^53 does not survive the f64 store: refuse rather than round.
        if w.ty == ValueType::I64
            && let Some(Kind::I64(x)) = v.kind
            && (x as f64) as i64 != x
        {
            return Err(Status::out_of_range(format!("signal {:?}: value {i} ({x}) is beyond ±2^53", sig.name)));
        }
        values.push(f);
    }
    w.check(&values, sig.values).map_err(|e| {
        if values.len() == sig.values as usize {
            Status::out_of_range(format!("signal {:?}: {e}", sig.name))
        } else {
            Status::invalid_argument(format!("signal {:?}: {e}", sig.name))
        }
    })?;
    Ok((sig, values))
}

fn list(v: &[&str]) -> String {
    if v.is_empty() { "none".into() } else { v.join(", ") }
}

/// How long to wait for the reading task: what the client asked for, else ten of its periods + 100 ms.
pub fn ack_wait(live: &Live, sig: &PlanSignal, asked_ms: u32) -> Duration {
    if asked_ms > 0 {
        return Duration::from_millis(asked_ms as u64).min(MAX_ACK_WAIT);
    }
    let reader = sig.writable.as_ref().map(|w| w.reader.as_str()).unwrap_or_default();
    let period = live.plan.tasks.iter().find(|t| t.spec.name == reader).map_or(0, |t| t.spec.period_ns);
    (Duration::from_nanos(period.saturating_mul(10)) + Duration::from_millis(100)).min(MAX_ACK_WAIT)
}

/// Publishes `values` and waits (asynchronously: the real-time side never waits for us) until the
/// reading task acknowledges that sequence number. The caller serialises writes.
pub async fn write_and_confirm(
    live: &Live,
    sig: &PlanSignal,
    values: &[f64],
    wait: Duration,
) -> Result<pb::WriteAck, Status> {
    let reader = sig.writable.as_ref().map(|w| w.reader.clone()).unwrap_or_default();
    if live.finished() || live.window().is_some_and(|(_, end)| mono_ns() >= end) {
        return Err(Status::failed_precondition(format!(
            "the run has ended: task {reader:?} no longer reads {:?}",
            sig.name
        )));
    }
    let region = live.region();
    let view = region.signal(&sig.name).map_err(|e| Status::internal(format!("signal {:?}: {e}", sig.name)))?;
    let ack_n = ack_name(&sig.name);
    let ack = region.signal(&ack_n).map_err(|e| Status::internal(format!("signal {ack_n:?}: {e}")))?;
    let t0 = mono_ns();
    let seq = publish(&view, values).map_err(Status::internal)?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match read_ack(&ack) {
            Ok(Some((s, seen))) if s == seq => {
                if seen.len() != values.len() || seen.iter().zip(values).any(|(a, b)| a.to_bits() != b.to_bits()) {
                    return Err(Status::data_loss(format!(
                        "signal {:?}: task {reader:?} saw {seen:?} for write {seq}, not the {values:?} written",
                        sig.name
                    )));
                }
                return Ok(pb::WriteAck {
                    name: sig.name.clone(),
                    seq,
                    seen,
                    task: reader,
                    ack_ns: mono_ns().saturating_sub(t0),
                });
            }
            Ok(Some((s, _))) if s > seq => {
                return Err(Status::aborted(format!(
                    "signal {:?}: overwritten (value {s}) before task {reader:?} saw write {seq}",
                    sig.name
                )));
            }
            Ok(_) => {}
            Err(e) => return Err(Status::data_loss(format!("signal {:?}: {e}", sig.name))),
        }
        if live.finished() || live.stop_requested() {
            // Nobody will acknowledge: give up at once, and the signal with it.
            return Err(Status::failed_precondition(format!(
                "signal {:?}: value written (seq {seq}) but the run was stopped before task {reader:?} acknowledged it",
                sig.name
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Status::deadline_exceeded(format!(
                "signal {:?}: value written (seq {seq}) but task {reader:?} did not acknowledge it within {} ms; \
                 is it running? (rtcell ctl status)",
                sig.name,
                wait.as_millis()
            )));
        }
        tokio::time::sleep(ACK_POLL).await;
    }
}

/// The writes in flight: per identity and per signal.
#[derive(Default)]
pub struct Writes {
    /// Identities (rate-limit keys) with a write in flight.
    busy: Mutex<HashSet<String>>,
    /// One lock per signal name, taken for a write's publication and acknowledgement.
    signals: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// An identity's write in flight; the identity may write again once it is dropped.
pub struct InFlight<'w> {
    writes: &'w Writes,
    key: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Ok(mut b) = self.writes.busy.lock() {
            b.remove(&self.key);
        }
    }
}

impl Writes {
    /// The write of identity `key` (shown as `who`) starts, or RESOURCE_EXHAUSTED at once if one of
    /// its writes is still in flight.
    pub fn enter(&self, key: &str, who: &str) -> Result<InFlight<'_>, Status> {
        let mut b = self.busy.lock().map_err(|_| Status::internal("writes poisoned"))?;
        if !b.insert(key.to_string()) {
            return Err(Status::resource_exhausted(format!(
                "a write of {who} is already in flight: one write at a time per client; send the next once it \
                 is acknowledged"
            )));
        }
        Ok(InFlight { writes: self, key: key.to_string() })
    }

    /// The signal `name` for one write, waited for at most `wait` (then DEADLINE_EXCEEDED: nothing was
    /// written).
    pub async fn signal(&self, name: &str, wait: Duration) -> Result<tokio::sync::OwnedMutexGuard<()>, Status> {
        let lock = {
            let mut m = self.signals.lock().map_err(|_| Status::internal("writes poisoned"))?;
            // Locks nobody holds or waits for go: the map holds the signals written now, not every
            // name of every run.
            m.retain(|_, l| Arc::strong_count(l) > 1);
            Arc::clone(m.entry(name.to_string()).or_default())
        };
        tokio::time::timeout(wait, lock.lock_owned()).await.map_err(|_| {
            Status::deadline_exceeded(format!(
                "signal {name:?}: another write to it was still waiting for its acknowledgement after {} ms; \
                 nothing was written",
                wait.as_millis()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_write_per_identity_and_per_signal_and_a_bounded_wait() {
        let w = Writes::default();
        let a = w.enter("cert:a", "client a").unwrap();
        let e = w.enter("cert:a", "client a").err().unwrap();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("already in flight"), "{e:?}");
        let b = w.enter("cert:b", "client b").expect("another identity writes");
        drop(a);
        let _a = w.enter("cert:a", "client a").expect("again once the first is done");
        drop(b);

        let held = w.signal("s", Duration::from_secs(1)).await.unwrap();
        w.signal("t", Duration::from_millis(10)).await.expect("another signal is free");
        let e = w.signal("s", Duration::from_millis(50)).await.err().unwrap();
        assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
        drop(held);
        w.signal("s", Duration::from_millis(50)).await.expect("free again");
        assert!(w.signals.lock().unwrap().len() <= 1, "unused locks are dropped");
    }
}
