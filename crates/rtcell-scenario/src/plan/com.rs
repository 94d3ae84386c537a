//! `[com.NAME]` declarations: AUTOSAR-COM-style channels (signals with ids, types and groups) that C
//! code reaches through `Com_SendSignal` / `Com_ReceiveSignal`, and the ids the `com_master` task uses.

use std::collections::{BTreeMap, BTreeSet};

use rtcell_shm::{ComConfig, GroupDef, SignalDef};
use rtcell_tasks::cwork::ComMasterIds;

use super::{Validator, name_problem};
use crate::file::RawCom;

/// Most bytes one COM signal may carry.
const MAX_SIGNAL_BYTES: u32 = 4096;

/// One declared signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanComSignal {
    pub id: u16,
    pub name: String,
    /// The AUTOSAR type, or `bytes` for an opaque array.
    pub ty: String,
    pub bytes: u32,
    pub dynamic: bool,
    pub group: Option<u16>,
}

/// A validated COM channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanCom {
    pub name: String,
    pub signals: Vec<PlanComSignal>,
    /// (id, name)
    pub groups: Vec<(u16, String)>,
}

impl PlanCom {
    /// The channel as the region lays it out.
    pub fn config(&self) -> ComConfig {
        ComConfig {
            signals: self
                .signals
                .iter()
                .map(|s| SignalDef { id: s.id, max_len: s.bytes, dynamic: s.dynamic, group: s.group })
                .collect(),
            groups: self.groups.iter().map(|(id, _)| GroupDef { id: *id }).collect(),
        }
    }

    fn signal(&self, name: &str) -> Option<&PlanComSignal> {
        self.signals.iter().find(|s| s.name == name)
    }
}

/// Bytes of an AUTOSAR signal type.
fn type_bytes(ty: &str) -> Option<u32> {
    Some(match ty {
        "boolean" | "uint8" | "sint8" => 1,
        "uint16" | "sint16" => 2,
        "uint32" | "sint32" | "float32" => 4,
        "uint64" | "sint64" | "float64" => 8,
        _ => return None,
    })
}

/// Signals the `com_master` exchange needs: (name, bytes, type).
type Needed = &'static [(&'static str, u32, &'static str)];
const MASTER_INPUT: Needed = &[("seq", 4, "uint32"), ("reset", 1, "uint8"), ("r", 8, "float64"), ("y", 8, "float64")];
const MASTER_OUTPUT: Needed = &[("seq", 4, "uint32"), ("u", 8, "float64")];

const TYPES: &str = "boolean, uint8, sint8, uint16, sint16, uint32, sint32, uint64, sint64, float32, float64";

impl Validator<'_> {
    /// Checks every `[com.NAME]` table; `taken` holds the names rings and signals already use.
    pub(super) fn com_channels(&mut self, raw: &BTreeMap<String, RawCom>, taken: &BTreeSet<&str>) -> Vec<PlanCom> {
        let mut out = Vec::new();
        for (name, c) in raw {
            let p = format!("com.{name}");
            if let Some(why) = name_problem(name, 32) {
                self.err(&p, why, "rename the COM channel");
            }
            if taken.contains(name.as_str()) {
                self.err(&p, format!("{name:?} is also a channel or signal name"), "give it a name of its own");
            }
            if c.signals.is_empty() {
                self.err(&format!("{p}.signals"), "a COM channel needs at least one signal", "add signals = [...]");
            }
            let mut groups = Vec::new();
            for (i, g) in c.groups.iter().enumerate() {
                let gp = format!("{p}.groups[{i}]");
                if c.groups[..i].iter().any(|h| h.id == g.id) {
                    self.err(&gp, format!("group id {} is used twice", g.id), "give each group its own id");
                }
                if c.groups[..i].iter().any(|h| h.name == g.name) {
                    self.err(&gp, format!("group name {:?} is used twice", g.name), "give each group its own name");
                }
                groups.push((g.id, g.name.clone()));
            }
            let mut signals = Vec::new();
            for (i, s) in c.signals.iter().enumerate() {
                let sp = format!("{p}.signals[{i}]");
                if c.signals[..i].iter().any(|t| t.id == s.id) {
                    self.err(&sp, format!("signal id {} is used twice", s.id), "give each signal its own id");
                }
                if c.signals[..i].iter().any(|t| t.name == s.name) {
                    self.err(&sp, format!("signal name {:?} is used twice", s.name), "give each signal its own name");
                }
                let bytes = match (&s.ty, s.bytes) {
                    (Some(ty), None) => match type_bytes(ty) {
                        Some(b) => b,
                        None => {
                            self.err(&sp, format!("unknown type {ty:?}"), format!("use one of {TYPES}, or bytes = N"));
                            1
                        }
                    },
                    (None, Some(b)) => {
                        if b == 0 || b > MAX_SIGNAL_BYTES {
                            self.err(&sp, format!("bytes must be 1 to {MAX_SIGNAL_BYTES}"), "e.g. bytes = 64");
                        }
                        b.clamp(1, MAX_SIGNAL_BYTES)
                    }
                    (Some(_), Some(_)) => {
                        self.err(&sp, "give a type or a byte count, not both", "remove one of type / bytes");
                        1
                    }
                    (None, None) => {
                        self.err(&sp, "the signal has no type", "add type = \"float64\" (or bytes = N)");
                        1
                    }
                };
                if s.dynamic && s.ty.is_some() {
                    self.err(&sp, "a typed signal has a fixed length", "use bytes = N with dynamic = true");
                }
                if let Some(g) = s.group {
                    if s.dynamic {
                        self.err(&sp, "a group member cannot be dynamic-length", "remove dynamic or the group");
                    }
                    if !c.groups.iter().any(|h| h.id == g) {
                        self.err(
                            &sp,
                            format!("no group with id {g} in this channel"),
                            format!("declare it: groups = [{{ id = {g}, name = \"...\" }}]"),
                        );
                    }
                }
                signals.push(PlanComSignal {
                    id: s.id,
                    name: s.name.clone(),
                    ty: s.ty.clone().unwrap_or_else(|| "bytes".into()),
                    bytes,
                    dynamic: s.dynamic,
                    group: s.group,
                });
            }
            for (i, g) in c.groups.iter().enumerate() {
                if !c.signals.iter().any(|s| s.group == Some(g.id)) {
                    self.err(
                        &format!("{p}.groups[{i}]"),
                        "the group has no signals",
                        "add group = <id> to its signals",
                    );
                }
            }
            out.push(PlanCom { name: name.clone(), signals, groups });
        }
        out
    }

    /// The COM channels a C task binds (`None`: all), checked; ids must be unique across them.
    pub(super) fn c_task_com(&mut self, field: &str, com: Option<&Vec<String>>, coms: &[PlanCom]) -> Vec<String> {
        let names: Vec<String> = match com {
            Some(list) => list.clone(),
            None => coms.iter().map(|c| c.name.clone()).collect(),
        };
        let mut ids: BTreeMap<u16, &str> = BTreeMap::new();
        let mut gids: BTreeMap<u16, &str> = BTreeMap::new();
        for n in &names {
            let Some(c) = coms.iter().find(|c| &c.name == n) else {
                let known: Vec<&str> = coms.iter().map(|c| c.name.as_str()).collect();
                self.err(
                    field,
                    format!("no COM channel named {n:?}"),
                    if known.is_empty() {
                        format!("declare it: [com.\"{n}\"] signals = [...]")
                    } else {
                        format!("use one of: {}", known.join(", "))
                    },
                );
                continue;
            };
            for s in &c.signals {
                if let Some(other) = ids.insert(s.id, &c.name) {
                    self.err(
                        field,
                        format!("signal id {} is in COM channels {other:?} and {:?}", s.id, c.name),
                        "C code names signals by id alone: make ids unique across the channels it uses",
                    );
                }
            }
            for (g, _) in &c.groups {
                if let Some(other) = gids.insert(*g, &c.name) {
                    self.err(
                        field,
                        format!("group id {g} is in COM channels {other:?} and {:?}", c.name),
                        "make group ids unique across the channels a C task uses",
                    );
                }
            }
        }
        names
    }

    /// Signal ids of the `com_master` task: `input` holds seq, reset, r, y and `output` seq, u, each set
    /// in one group, with the types the controller exchange uses.
    pub(super) fn com_master_ids(&mut self, p: &str, input: &str, output: &str, coms: &[PlanCom]) -> ComMasterIds {
        let mut ids = ComMasterIds { in_group: 0, seq: 0, reset: 0, r: 0, y: 0, out_group: 0, out_seq: 0, u: 0 };
        let wanted = [("input", input, MASTER_INPUT), ("output", output, MASTER_OUTPUT)];
        for (field, ch, sigs) in wanted {
            let path = format!("{p}.workload.{field}");
            let Some(c) = coms.iter().find(|c| c.name == ch) else {
                self.err(&path, format!("no COM channel named {ch:?}"), format!("declare it: [com.\"{ch}\"]"));
                continue;
            };
            let mut group: Option<u16> = None;
            let mut found = Vec::new();
            for (name, bytes, ty) in sigs {
                match c.signal(name) {
                    None => {
                        self.err(
                            &path,
                            format!("COM channel {ch:?} has no signal named {name:?}"),
                            format!("add {{ id = ..., name = \"{name}\", type = \"{ty}\", group = ... }}"),
                        );
                        found.push(0);
                    }
                    Some(s) => {
                        if s.bytes != *bytes || s.dynamic {
                            self.err(
                                &path,
                                format!("signal {name:?} of {ch:?} is {} bytes; the master needs a {ty}", s.bytes),
                                format!("declare it type = \"{ty}\""),
                            );
                        }
                        match (s.group, group) {
                            (None, _) => self.err(
                                &path,
                                format!("signal {name:?} of {ch:?} is not in a group"),
                                "the master exchanges one sample as one signal group: put them in one group",
                            ),
                            (Some(g), None) => group = Some(g),
                            (Some(g), Some(h)) if g != h => self.err(
                                &path,
                                format!("signals of {ch:?} are in groups {h} and {g}"),
                                "put them in one group",
                            ),
                            _ => {}
                        }
                        found.push(s.id);
                    }
                }
            }
            let g = group.unwrap_or(0);
            if field == "input" {
                (ids.in_group, ids.seq, ids.reset, ids.r, ids.y) = (g, found[0], found[1], found[2], found[3]);
            } else {
                (ids.out_group, ids.out_seq, ids.u) = (g, found[0], found[1]);
            }
        }
        if input == output {
            self.err(&format!("{p}.workload.output"), "input and output are the same COM channel", "use two channels");
        }
        ids
    }
}
