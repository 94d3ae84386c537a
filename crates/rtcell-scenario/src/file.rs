//! The scenario file as written: TOML read into plain structures that refuse unknown keys, and an index
//! of where every key is in the text, so that each complaint names the file, the line and the field.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One complaint about a scenario file: where, what, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diag {
    /// 1-based line in the file; `None` when the problem is not on one line (e.g. an empty file).
    pub line: Option<usize>,
    /// Dotted path of the field, e.g. `tasks.fast.period_us`.
    pub path: String,
    pub message: String,
    /// What to change.
    pub fix: String,
}

impl Diag {
    pub fn new(
        line: Option<usize>,
        path: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Diag {
        Diag { line, path: path.into(), message: message.into(), fix: fix.into() }
    }

    /// `file:line: path: message — fix`, one line of printable text: every part is escaped and capped
    /// (a key or a message may come from the file: control characters, megabytes).
    pub fn render(&self, file: &str) -> String {
        use crate::shown::{FIELD_CAP, PIECE_CAP, line};
        let file = line(file, 2 * PIECE_CAP);
        let at = match self.line {
            Some(l) => format!("{file}:{l}"),
            None => file,
        };
        let path = if self.path.is_empty() { String::new() } else { format!(" {}:", line(&self.path, 2 * PIECE_CAP)) };
        format!("{at}:{path} {} — {}", line(&self.message, FIELD_CAP), line(&self.fix, FIELD_CAP))
    }
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: Option<String>,
    pub description: Option<String>,
    pub duration_s: f64,
    pub master_cpu: Option<usize>,
    #[serde(default)]
    pub cells: BTreeMap<String, RawCell>,
    #[serde(default)]
    pub channels: BTreeMap<String, RawChannel>,
    #[serde(default)]
    pub signals: BTreeMap<String, RawSignal>,
    /// AUTOSAR-COM-style channels: signals and signal groups, for C code and the `com_master` task.
    #[serde(default)]
    pub com: BTreeMap<String, RawCom>,
    #[serde(default)]
    pub tasks: BTreeMap<String, RawTask>,
    #[serde(default)]
    pub loads: Vec<RawLoad>,
    /// An EtherCAT segment for `ethercat` tasks.
    pub ethercat: Option<RawEthercat>,
}

/// `[ethercat]`: a real interface, or a simulated segment of N devices on a veth pair made for the run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEthercat {
    pub interface: Option<String>,
    pub simulated: Option<u16>,
    /// Simulated segment only: it disappears after answering this many frames.
    pub drop_after: Option<u64>,
    /// How long a frame may be out before it counts as lost (default: 90% of the task's period).
    pub timeout_us: Option<u64>,
    /// The master busy-polls for each reply instead of sleeping until it arrives (default false).
    pub busy_poll: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCell {
    pub kind: String,
    pub cpu: usize,
    pub priority: Option<i32>,
    /// kvm only: the kind to use instead when KVM is not usable on this machine.
    pub fallback: Option<String>,
    /// A cell that serves requests instead of running tasks.
    pub service: Option<RawService>,
    /// kvm only: a built-in payload to run.
    pub payload: Option<String>,
    /// Arguments of the payload (`key=value` lines).
    pub args: Option<String>,
    /// Channels the payload writes (the rest of the region is read-only to it).
    #[serde(default)]
    pub writes: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawService {
    /// The offloaded internal-model controller (`rtcell_control::offload`).
    Controller { request: String, reply: String, precision: Option<String> },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChannel {
    /// Frames the ring holds at least.
    pub capacity: u32,
    /// Largest frame in bytes.
    pub frame_bytes: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignal {
    /// Number of f64 values.
    pub values: u32,
    /// Whether the gateway may write it (`rtcell ctl set`): then `type`, `min` and `max` bound the writes
    /// and a task must name it in its `params` (the task that reads and acknowledges it).
    #[serde(default)]
    pub writable: bool,
    /// Type of each value of a writable signal: `f64` (default), `i64` or `bool`.
    #[serde(rename = "type")]
    pub ty: Option<String>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// A COM channel: one direction, several signals, optionally grouped.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCom {
    #[serde(default)]
    pub groups: Vec<RawComGroup>,
    pub signals: Vec<RawComSignal>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawComGroup {
    pub id: u16,
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawComSignal {
    pub id: u16,
    pub name: String,
    /// AUTOSAR type: uint8 .. uint64, sint8 .. sint64, float32, float64, boolean; or leave it out and
    /// give `bytes` (an opaque byte array).
    #[serde(rename = "type")]
    pub ty: Option<String>,
    pub bytes: Option<u32>,
    /// Dynamic length (0..=bytes per send); not for group members.
    #[serde(default)]
    pub dynamic: bool,
    /// The id of the group the signal belongs to.
    pub group: Option<u16>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTask {
    pub cell: String,
    pub period_us: u64,
    #[serde(default)]
    pub offset_us: u64,
    pub deadline_us: Option<u64>,
    pub priority: i32,
    pub workload: RawWork,
    pub watchdog: Option<RawWatchdog>,
    pub on_overrun: Option<String>,
    pub send: Option<String>,
    pub recv: Option<String>,
    pub output: Option<String>,
    pub safe_value: Option<Vec<f64>>,
    /// Execution time budgeted for the utilisation check (default: the workload's estimate).
    pub budget_us: Option<f64>,
    /// Writable signals this task reads at the start of every cycle and acknowledges (the value it saw).
    #[serde(default)]
    pub params: Vec<String>,
    /// What the task does when a peer corrupted a channel it uses: "resync" (default) or "trip".
    pub on_corrupt: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWatchdog {
    pub time_us: u64,
    pub sensitivity: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInject {
    pub at_cycle: u64,
    #[serde(default = "one")]
    pub cycles: u64,
    pub us: f64,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawWork {
    Spin {
        us: f64,
        inject: Option<RawInject>,
    },
    Trajectory {
        from_deg: f64,
        to_deg: f64,
        move_s: f64,
    },
    InverseDynamics {
        setpoint: String,
    },
    Drive {
        setpoint: String,
        torque: String,
        us: f64,
    },
    Log {
        file: String,
        #[serde(default)]
        signals: Vec<String>,
        #[serde(default)]
        tasks: Vec<String>,
    },
    Master {
        request: String,
        reply: String,
    },
    /// C code: `step` from a shared object (thread and process cells) or a payload ELF (kvm cells).
    C {
        library: Option<String>,
        init: Option<String>,
        step: Option<String>,
        payload: Option<String>,
        com: Option<Vec<String>>,
    },
    /// The master of the C offload over COM signals.
    ComMaster {
        input: String,
        output: String,
    },
    /// The EtherCAT master's cycle on the scenario's `[ethercat]` segment.
    Ethercat {
        outputs: Option<String>,
    },
    /// Fault injection: a hostile peer that scribbles `channel` for `cycles` cycles from `at_cycle` on.
    Scribble {
        channel: String,
        at_cycle: u64,
        #[serde(default = "one")]
        cycles: u64,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLoad {
    pub kind: String,
    /// CPUs to load (default: every CPU no cell uses).
    pub cpus: Option<Vec<usize>>,
}

/// Where each key of the file is: dotted path → (line of the key, byte range of its value).
#[derive(Debug, Default, Clone)]
pub struct Spans {
    keys: BTreeMap<String, (usize, std::ops::Range<usize>)>,
    text_lines: Vec<usize>,
}

impl Spans {
    /// Indexes `text` (which must parse as TOML).
    pub fn index(text: &str) -> Spans {
        let mut s = Spans { keys: BTreeMap::new(), text_lines: line_starts(text) };
        if let Ok(doc) = toml::de::DeTable::parse(text) {
            s.walk_table("", doc.get_ref());
        }
        s
    }

    fn walk_table(&mut self, prefix: &str, t: &toml::de::DeTable<'_>) {
        for (k, v) in t.iter() {
            let path = if prefix.is_empty() { k.get_ref().to_string() } else { format!("{prefix}.{}", k.get_ref()) };
            let line = self.line_of(k.span().start);
            self.keys.entry(path.clone()).or_insert((line, v.span()));
            self.walk_value(&path, v.get_ref());
        }
    }

    fn walk_value(&mut self, path: &str, v: &toml::de::DeValue<'_>) {
        match v {
            toml::de::DeValue::Table(t) => self.walk_table(path, t),
            toml::de::DeValue::Array(a) => {
                for (i, item) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    let line = self.line_of(item.span().start);
                    self.keys.entry(p.clone()).or_insert((line, item.span()));
                    self.walk_value(&p, item.get_ref());
                }
            }
            _ => {}
        }
    }

    /// 1-based line of byte offset `off`.
    pub fn line_of(&self, off: usize) -> usize {
        match self.text_lines.binary_search(&off) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Line of `path`, or of its closest ancestor that is in the file.
    pub fn line(&self, path: &str) -> Option<usize> {
        let mut p = path.to_string();
        loop {
            if let Some((l, _)) = self.keys.get(&p) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '['])?;
            p.truncate(cut);
        }
    }

    /// The deepest path whose value contains byte offset `off`.
    pub fn path_at(&self, off: usize) -> Option<String> {
        self.keys
            .iter()
            .filter(|(_, (_, r))| r.start <= off && off < r.end.max(r.start + 1))
            .min_by_key(|(_, (_, r))| r.end - r.start)
            .map(|(p, _)| p.clone())
    }
}

fn line_starts(text: &str) -> Vec<usize> {
    let mut v = vec![0];
    v.extend(text.match_indices('\n').map(|(i, _)| i + 1));
    v
}

/// Examples for fields a user may leave out by mistake.
fn example_for(field: &str) -> &'static str {
    match field {
        "duration_s" => "duration_s = 10",
        "kind" => "kind = \"thread\" (cells), kind = \"spin\" (workloads), kind = \"memcpy\" (loads)",
        "cpu" => "cpu = 1",
        "cell" => "cell = \"plc\" (a cell's name, or \"linux\" for the Linux side)",
        "period_us" => "period_us = 1000",
        "priority" => "priority = 80",
        "workload" => "workload = { kind = \"spin\", us = 50 }",
        "capacity" => "capacity = 256",
        "frame_bytes" => "frame_bytes = 64",
        "values" => "values = 1",
        "time_us" => "time_us = 1000",
        "sensitivity" => "sensitivity = 3",
        "us" => "us = 50",
        "at_cycle" => "at_cycle = 100",
        "setpoint" => "setpoint = \"robot.setpoint\"",
        "torque" => "torque = \"robot.torque\"",
        "file" => "file = \"motion.log\"",
        "request" => "request = \"ctrl.request\"",
        "reply" => "reply = \"ctrl.reply\"",
        "from_deg" => "from_deg = 0",
        "to_deg" => "to_deg = 90",
        "move_s" => "move_s = 2",
        "signals" => "signals = [{ id = 1, name = \"seq\", type = \"uint32\" }]",
        "id" => "id = 1",
        "name" => "name = \"seq\"",
        "input" => "input = \"ctrl.in\"",
        "output" => "output = \"ctrl.out\"",
        _ => "",
    }
}

/// Turns a TOML or serde error into a complaint with a line, a path and a fix.
pub fn diag_from_toml(err: &toml::de::Error, spans: &Spans, text: &str) -> Diag {
    let msg = cut_quoted(err.message().trim());
    let off = err.span().map(|r| r.start);
    let line = off.map(|o| spans.line_of(o.min(text.len())));
    let path = off.and_then(|o| spans.path_at(o)).unwrap_or_default();
    let between = |s: &str, a: char, b: char| -> Option<String> {
        let i = s.find(a)?;
        let j = s[i + 1..].find(b)?;
        Some(s[i + 1..i + 1 + j].to_string())
    };
    if msg.starts_with("unknown field") {
        let full = between(err.message(), '`', '`').unwrap_or_default();
        let field = crate::shown::cut(&full);
        let known = msg.split_once("expected").map(|(_, k)| k.trim().to_string()).unwrap_or_default();
        // The key itself is in the index: the path of the key of that name on that line.
        let path = line
            .and_then(|l| {
                spans.keys.iter().find(|(p, (kl, _))| *kl == l && (p.ends_with(&format!(".{full}")) || **p == full))
            })
            .map(|(p, _)| p.clone())
            .unwrap_or(if path.is_empty() { field.clone() } else { format!("{path}.{field}") });
        return Diag::new(
            line,
            path,
            format!("unknown key `{field}`"),
            format!("remove it or fix its spelling (expected {known})"),
        );
    }
    if msg.starts_with("missing field") {
        let field = between(&msg, '`', '`').unwrap_or_default();
        let ex = example_for(&field);
        let fix = if ex.is_empty() { format!("add `{field}`") } else { format!("add it, e.g. {ex}") };
        return Diag::new(line, path, format!("missing field `{field}`"), fix);
    }
    if msg.starts_with("unknown variant") {
        return Diag::new(line, path, msg.clone(), "use one of the values listed");
    }
    if msg.starts_with("invalid type") || msg.starts_with("invalid value") {
        // serde names our structures ("internally tagged enum RawWork"): say what the file must hold.
        if let Some((head, _)) = msg.split_once(", expected internally tagged enum") {
            return Diag::new(
                line,
                path,
                format!("{head}, expected a table with a `kind` (e.g. {{ kind = \"spin\", us = 50 }})"),
                "write it as a table with a kind, e.g. workload = { kind = \"spin\", us = 50 }",
            );
        }
        return Diag::new(line, path, msg.clone(), "give a value of the type expected");
    }
    if err.span().is_some() && spans.keys.is_empty() {
        // The text itself is not TOML.
        return Diag::new(
            line,
            "",
            format!("syntax error: {}", msg.replace('\n', " ")),
            "fix the TOML syntax at that line",
        );
    }
    Diag::new(line, path, msg.replace('\n', " "), "see the scenario format in the README")
}

/// `msg` with each piece quoted in backticks (a key, a value from the file) cut to a short length.
fn cut_quoted(msg: &str) -> String {
    msg.split('`')
        .enumerate()
        .map(|(i, p)| if i % 2 == 1 { crate::shown::cut(p) } else { p.to_string() })
        .collect::<Vec<_>>()
        .join("`")
}

/// Reads the file's text into its raw structures; on failure one complaint (serde stops at the first).
pub fn parse(text: &str) -> Result<(RawScenario, Spans), Diag> {
    if let Err(e) = toml::de::DeTable::parse(text) {
        let off = e.span().map(|r| r.start.min(text.len()));
        let lines = line_starts(text);
        let line = off.map(|o| match lines.binary_search(&o) {
            Ok(i) => i + 1,
            Err(i) => i,
        });
        if let Some(d) = line.and_then(|l| bare_word(text, l)) {
            return Err(d);
        }
        let first = e.message().lines().next().unwrap_or("").trim().to_string();
        if line.is_none() && first.contains("recursion") {
            // The parser gives no place: the first line nested that deep.
            return Err(Diag::new(
                deepest_line(text),
                "",
                format!("syntax error: nested too deeply ({first}): tables, arrays or dotted keys"),
                "a scenario needs a few levels at most: flatten the nesting",
            ));
        }
        return Err(Diag::new(line, "", format!("syntax error: {first}"), "fix the TOML syntax at that line"));
    }
    let spans = Spans::index(text);
    match toml::from_str::<RawScenario>(text) {
        Ok(raw) => Ok((raw, spans)),
        Err(e) => Err(diag_from_toml(&e, &spans, text)),
    }
}

/// The first line with the most nesting (brackets, braces or dots in a key), for a parser error that has
/// no place.
fn deepest_line(text: &str) -> Option<usize> {
    let (mut depth, mut best) = (0usize, (0usize, None));
    for (i, l) in text.lines().enumerate() {
        let key_dots = l.split('=').next().map_or(0, |k| k.matches('.').count());
        for c in l.chars() {
            match c {
                '[' | '{' => depth += 1,
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        let here = depth.max(key_dots);
        if here > best.0 {
            best = (here, Some(i + 1));
        }
    }
    best.1
}

/// A `key = word` line whose value is an unquoted word (`period_us = fast`): the complaint for it.
fn bare_word(text: &str, line: usize) -> Option<Diag> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let (key, value) = l.split_once('=')?;
    let (key, value) = (key.trim(), value.split('#').next().unwrap_or("").trim());
    let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !word(key) || !word(value) || !value.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    if matches!(value, "true" | "false" | "inf" | "nan") {
        return None;
    }
    let shown: String = value.chars().take(40).collect();
    let key = crate::shown::cut(key);
    let numeric = key.ends_with("_us")
        || key.ends_with("_s")
        || key.ends_with("_deg")
        || matches!(
            key.as_str(),
            "priority"
                | "cpu"
                | "master_cpu"
                | "capacity"
                | "frame_bytes"
                | "values"
                | "sensitivity"
                | "at_cycle"
                | "cycles"
                | "id"
                | "bytes"
                | "simulated"
                | "drop_after"
                | "min"
                | "max"
                | "us"
        );
    if !numeric {
        // A key whose value is text (`cell = linux`): the quotes are missing.
        return Some(Diag::new(
            Some(line),
            key.clone(),
            format!("{shown} is a bare word: a string needs quotes"),
            format!("quote it: {key} = \"{shown}\""),
        ));
    }
    Some(Diag::new(
        Some(line),
        key.clone(),
        format!("{shown} is a bare word: expected a number (or true/false); strings need quotes"),
        format!("write a number, e.g. {key} = 1000, or quote a string: {key} = \"{shown}\""),
    ))
}
