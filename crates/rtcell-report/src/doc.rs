//! The results document, `rtcell.results/1`: one per run, written as `results.json`.
//!
//! The types here mirror `schema/results.schema.json` field for field; the schema test in this crate
//! validates a serialised document against that file, so the two cannot drift apart silently. Reading goes
//! through [`Results::load`], which checks the schema id before anything else so that a document of
//! another layout is refused, never misread.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rtcell_host::facts::HostFacts;
use serde::{Deserialize, Serialize};

use crate::error::ReportError;

/// The schema id this crate writes and the only one it reads. Bump it with any change of layout.
pub const SCHEMA_ID: &str = "rtcell.results/1";

/// File name of the document inside a results directory.
pub const RESULTS_FILE: &str = "results.json";

/// Allowed values of `host.preempt` and `host.kvm`; `HostFacts` holds them as strings.
const PREEMPT_MODELS: &[&str] = &["none", "voluntary", "full", "dynamic", "rt", "unknown"];
const KVM_KINDS: &[&str] = &["hardware", "nested", "absent", "denied"];

/// One run's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// Always [`SCHEMA_ID`]; [`Results::load`] refuses anything else.
    pub schema: String,
    pub rtcell: ToolInfo,
    /// When the run started, RFC 3339 in UTC.
    pub started_at: String,
    /// Wall-clock length of the run; absent until [`Results::finish`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// The command line that produced the document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub host: HostFacts,
    /// Things a reader must know to judge the figures (e.g. "running under a hypervisor").
    pub warnings: Vec<String>,
    pub suites: Vec<Suite>,
    /// `true` when the run was cut short (e.g. Ctrl-C): the series hold what was measured until then.
    /// Always written, so a reader never has to guess; absent in a document means `false`.
    #[serde(default)]
    pub incomplete: bool,
}

/// The rtcell build that wrote a document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub version: String,
    /// Git revision of the build, `None` when built outside a checkout.
    #[serde(default)]
    pub git: Option<String>,
}

/// One suite (or scenario) run: its configuration and what it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suite {
    /// c2c, loopback, latency, itc, control, membench, plc, scenario, ...
    pub suite: String,
    /// The suite's full configuration, so the run can be repeated; must be a JSON object.
    pub config: serde_json::Value,
    pub series: Vec<Series>,
}

/// One measured quantity under one set of conditions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    /// Conditions, e.g. `cell=kvm`, `bytes=64`, `load=stress-ng`, `tool=cyclictest`.
    pub labels: BTreeMap<String, String>,
    pub unit: Unit,
    pub kind: Kind,
    pub stats: Stats,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<Histogram>,
    /// Payload mismatches, lost messages, invalid samples...; 0 when none.
    #[serde(default)]
    pub errors: u64,
}

/// Unit of a series' values (and of its histogram's bucket width).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Ns,
    Us,
    Cycles,
    BytesPerS,
    Count,
    Ratio,
}

impl Unit {
    /// The name used in the document, e.g. `"bytes_per_s"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Us => "us",
            Unit::Cycles => "cycles",
            Unit::BytesPerS => "bytes_per_s",
            Unit::Count => "count",
            Unit::Ratio => "ratio",
        }
    }
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a series measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    RoundTrip,
    OneWay,
    Latency,
    ExecTime,
    Period,
    Throughput,
    Count,
}

impl Kind {
    /// The name used in the document, e.g. `"round_trip"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::RoundTrip => "round_trip",
            Kind::OneWay => "one_way",
            Kind::Latency => "latency",
            Kind::ExecTime => "exec_time",
            Kind::Period => "period",
            Kind::Throughput => "throughput",
            Kind::Count => "count",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Summary statistics of a series, in the series' unit. See [`Stats::from_samples`] for how they are
/// computed. A series without samples has `count == 0` and every other field 0 (never NaN, which JSON
/// cannot hold).
///
/// Reading requires every field, including those the schema leaves optional (p90, p9999, stddev): this
/// crate always writes them, and inventing a value for a missing one would be a misreading.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Stats {
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    pub stddev: f64,
}

/// A fixed-width histogram: bucket `i` counts values in `[i * bucket_width, (i + 1) * bucket_width)`,
/// in the series' unit; values at or above `counts.len() * bucket_width` are counted in `overflows`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub bucket_width: f64,
    pub counts: Vec<u64>,
    pub overflows: u64,
}

impl Results {
    /// Starts a document for a run beginning now.
    pub fn new(version: impl Into<String>, git: Option<String>, command: Option<String>, host: HostFacts) -> Results {
        Results {
            schema: SCHEMA_ID.to_owned(),
            rtcell: ToolInfo { version: version.into(), git },
            started_at: rfc3339_utc(SystemTime::now()),
            duration_s: None,
            command,
            host,
            warnings: Vec::new(),
            suites: Vec::new(),
            incomplete: false,
        }
    }

    /// Records the run's duration, measured from `started` (taken when the run began).
    pub fn finish(&mut self, started: Instant) {
        self.duration_s = Some(started.elapsed().as_secs_f64());
    }

    /// Checks the rules of the schema that the types alone do not enforce: the schema id, that every
    /// number is finite (serde_json would write NaN as `null`, making the document unreadable), that
    /// suite configurations are objects, and the enumerated host fields.
    pub fn validate(&self) -> Result<(), ReportError> {
        let invalid = |what: String| Err(ReportError::Invalid { what });
        if self.schema != SCHEMA_ID {
            return invalid(format!("schema is {:?}, expected {SCHEMA_ID:?}", self.schema));
        }
        if let Some(d) = self.duration_s
            && !d.is_finite()
        {
            return invalid(format!("duration_s is {d}"));
        }
        if !PREEMPT_MODELS.contains(&self.host.preempt.as_str()) {
            return invalid(format!("host.preempt is {:?}, expected one of {PREEMPT_MODELS:?}", self.host.preempt));
        }
        if !KVM_KINDS.contains(&self.host.kvm.as_str()) {
            return invalid(format!("host.kvm is {:?}, expected one of {KVM_KINDS:?}", self.host.kvm));
        }
        if let Some(s) = self.host.steal_pct
            && !s.is_finite()
        {
            return invalid(format!("host.steal_pct is {s}"));
        }
        for suite in &self.suites {
            if !suite.config.is_object() {
                return invalid(format!(
                    "suite {:?}: config must be a JSON object, found {}",
                    suite.suite, suite.config
                ));
            }
            for series in &suite.series {
                let where_ = || format!("suite {:?}, series {:?}", suite.suite, series.name);
                let s = &series.stats;
                let fields = [
                    ("min", s.min),
                    ("mean", s.mean),
                    ("median", s.median),
                    ("p90", s.p90),
                    ("p99", s.p99),
                    ("p999", s.p999),
                    ("p9999", s.p9999),
                    ("max", s.max),
                    ("stddev", s.stddev),
                ];
                if let Some((name, v)) = fields.iter().find(|(_, v)| !v.is_finite()) {
                    return invalid(format!("{}: stats.{name} is {v}", where_()));
                }
                if let Some(h) = &series.histogram
                    && !(h.bucket_width.is_finite() && h.bucket_width > 0.0)
                {
                    return invalid(format!("{}: histogram bucket_width is {}", where_(), h.bucket_width));
                }
            }
        }
        Ok(())
    }

    /// The document as pretty-printed JSON, after [`Results::validate`].
    pub fn to_json_pretty(&self) -> Result<String, ReportError> {
        self.validate()?;
        serde_json::to_string_pretty(self).map_err(ReportError::Serialize)
    }

    /// Writes `dir/results.json`, creating `dir` and its parents, and returns the file's path.
    ///
    /// The write is atomic: the document goes to a temporary file in the same directory, is synced to
    /// disk, then renamed over `results.json`, so a reader (or a crash) never sees half a document and an
    /// older `results.json` survives a failed write.
    pub fn write_to_dir(&self, dir: &Path) -> Result<PathBuf, ReportError> {
        let mut text = self.to_json_pretty()?;
        text.push('\n');
        fs::create_dir_all(dir).map_err(|source| ReportError::Io {
            action: "create the results directory",
            path: dir.to_owned(),
            source,
        })?;
        let target = dir.join(RESULTS_FILE);
        let temp = dir.join(temp_name());
        if let Err(e) = write_synced(&temp, text.as_bytes()) {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        if let Err(source) = fs::rename(&temp, &target) {
            let _ = fs::remove_file(&temp);
            return Err(ReportError::Io { action: "rename the temporary results file onto", path: target, source });
        }
        // Make the rename itself durable. Some file systems refuse fsync on a directory; the data is
        // already synced and the rename is atomic either way, so that refusal is not worth failing a run.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(target)
    }

    /// Reads a results document.
    ///
    /// The `schema` field is checked before the rest is interpreted: a document of another schema
    /// version, or one without a schema id, is refused with [`ReportError::UnsupportedSchema`] naming
    /// what was found.
    pub fn load(path: impl AsRef<Path>) -> Result<Results, ReportError> {
        let path = path.as_ref();
        let text = fs::read_to_string(path).map_err(|source| ReportError::Io {
            action: "read the results file",
            path: path.to_owned(),
            source,
        })?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| ReportError::NotJson { path: path.to_owned(), source })?;
        match value.get("schema") {
            Some(serde_json::Value::String(s)) if s == SCHEMA_ID => {}
            found => {
                return Err(ReportError::UnsupportedSchema {
                    path: path.to_owned(),
                    found: found.map(|v| v.to_string()),
                });
            }
        }
        let results: Results =
            serde_json::from_value(value).map_err(|source| ReportError::Malformed { path: path.to_owned(), source })?;
        Ok(results)
    }
}

impl Suite {
    /// A suite with no series yet. `config` should be a JSON object (checked when writing).
    pub fn new(suite: impl Into<String>, config: serde_json::Value) -> Suite {
        Suite { suite: suite.into(), config, series: Vec::new() }
    }
}

/// A temporary file name unique to this process and moment, hidden so `ls` does not show leftovers.
fn temp_name() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!(".{RESULTS_FILE}.{}.{nanos}.tmp", std::process::id())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    let io = |action: &'static str| move |source| ReportError::Io { action, path: path.to_owned(), source };
    let mut file =
        OpenOptions::new().write(true).create_new(true).open(path).map_err(io("create the temporary results file"))?;
    file.write_all(bytes).map_err(io("write the temporary results file"))?;
    file.sync_all().map_err(io("sync the temporary results file"))?;
    Ok(())
}

pub use rtcell_host::utc::rfc3339_utc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_kinds_serialise_as_schema_names() {
        for u in [Unit::Ns, Unit::Us, Unit::Cycles, Unit::BytesPerS, Unit::Count, Unit::Ratio] {
            assert_eq!(serde_json::to_value(u).unwrap(), serde_json::json!(u.as_str()));
        }
        for k in
            [Kind::RoundTrip, Kind::OneWay, Kind::Latency, Kind::ExecTime, Kind::Period, Kind::Throughput, Kind::Count]
        {
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::json!(k.as_str()));
        }
    }
}
