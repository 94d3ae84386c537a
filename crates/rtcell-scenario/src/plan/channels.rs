//! `[channels.NAME]`: the rings (name, capacity, frame size), and their endpoints: one producer and at
//! most one consumer each (a ring nobody in the scenario receives from is drained by the supervisor),
//! whether the endpoint is a task's `send`/`recv`, the controller service's or master's request and
//! reply, or a payload's `rx=`/`tx=` argument. The offload rings must carry the controller's messages.

use std::collections::BTreeMap;

use rtcell_tasks::spec::MIN_FRAME_BYTES;

use super::payload_args;
use super::{CellRole, Declared, OFFLOAD_BYTES, PlanCell, PlanChannel, Validator, name_problem};

/// Ring name → who uses it: (who, as in "task \"a\"", the field that says so).
pub(super) type Ends = BTreeMap<String, Vec<(String, String)>>;

/// The endpoints of each ring.
#[derive(Default)]
pub(super) struct Endpoints {
    pub producers: Ends,
    pub consumers: Ends,
}

impl Endpoints {
    /// The endpoints the cells take: the controller service's and the payloads' (`rx=NAME`, `tx=NAME`
    /// lines of their args, the same endpoints as a task's recv and send).
    pub(super) fn of_cells(cells: &[PlanCell], d: &Declared) -> Endpoints {
        let mut e = Endpoints::default();
        for c in cells {
            let p = format!("cells.{}", c.name);
            if let CellRole::Controller { request, reply, .. } = &c.role {
                e.consumers
                    .entry(request.clone())
                    .or_default()
                    .push((format!("cell {:?}", c.name), format!("{p}.service.request")));
                e.producers
                    .entry(reply.clone())
                    .or_default()
                    .push((format!("cell {:?}", c.name), format!("{p}.service.reply")));
            }
            if let CellRole::Payload { args, .. } = &c.role {
                for (key, ch) in payload_args::arg_pairs(args) {
                    let list = match key {
                        "rx" => &mut e.consumers,
                        "tx" => &mut e.producers,
                        _ => continue,
                    };
                    if d.channel_bytes.contains_key(ch) {
                        list.entry(ch.to_string())
                            .or_default()
                            .push((format!("cell {:?} (its payload's {key}=)", c.name), format!("{p}.args")));
                    }
                }
            }
        }
        e
    }
}

impl Validator<'_> {
    /// Every ring, checked: its name, capacity and frame size.
    pub(super) fn channels(&mut self, d: &Declared) -> Vec<PlanChannel> {
        let mut channels = Vec::new();
        for (n, ch) in &d.raw.channels {
            let p = format!("channels.{n}");
            if let Some(why) = name_problem(n, 32) {
                self.err(&p, why, "rename the channel");
            }
            if d.raw.signals.contains_key(n) {
                self.err(&p, format!("{n:?} is both a channel and a signal"), "give them different names");
            }
            if ch.capacity == 0 || ch.capacity > 65_536 {
                self.err(&format!("{p}.capacity"), "capacity must be 1 to 65536 frames", "capacity = 256");
            }
            if ch.frame_bytes < MIN_FRAME_BYTES || ch.frame_bytes > 65_536 {
                self.err(
                    &format!("{p}.frame_bytes"),
                    format!("frame_bytes must be {MIN_FRAME_BYTES} to 65536 (a frame carries a sequence number, a time and a value)"),
                    "frame_bytes = 64",
                );
            }
            channels.push(PlanChannel {
                name: n.clone(),
                frames: ch.capacity,
                frame_bytes: ch.frame_bytes,
                sink: false,
            });
        }
        channels
    }

    /// A ring of the offload controller (at `path`): declared, and with frames its messages fit in.
    pub(super) fn offload_channel(&mut self, path: &str, ch: &str, d: &Declared) {
        match d.channel_bytes.get(ch) {
            None => self.err(
                path,
                format!("no channel named {ch:?}"),
                format!("declare it: [channels.{ch}] capacity = 16, frame_bytes = {OFFLOAD_BYTES}"),
            ),
            Some(&b) if b < OFFLOAD_BYTES => self.err(
                path,
                format!("channel {ch:?} carries {b}-byte frames; controller messages are {OFFLOAD_BYTES} bytes"),
                format!("set [channels.{ch}] frame_bytes = {OFFLOAD_BYTES}"),
            ),
            Some(_) => {}
        }
    }

    /// One producer per ring, at most one consumer; a ring without a consumer is a sink.
    pub(super) fn check_endpoints(&mut self, channels: &mut [PlanChannel], ends: &Endpoints) {
        for ch in channels {
            let p = format!("channels.{}", ch.name);
            let prod = ends.producers.get(&ch.name).cloned().unwrap_or_default();
            let cons = ends.consumers.get(&ch.name).cloned().unwrap_or_default();
            if prod.is_empty() {
                self.err(
                    &p,
                    "nobody sends on this channel",
                    format!("set send = \"{}\" on a task, or remove the channel", ch.name),
                );
            }
            for (list, what) in [(&prod, "send on"), (&cons, "receive from")] {
                if list.len() > 1 {
                    let who: Vec<&str> = list.iter().map(|(w, _)| w.as_str()).collect();
                    self.err(
                        &list[1].1,
                        format!(
                            "{} {what} channel {:?}: a ring has one producer and one consumer",
                            who.join(" and "),
                            ch.name
                        ),
                        "give each its own channel",
                    );
                }
            }
            ch.sink = cons.is_empty();
        }
    }
}
