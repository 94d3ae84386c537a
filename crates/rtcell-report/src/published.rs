//! Published reference figures (papers, vendor benchmarks) that rtcell's own results are set beside.
//!
//! The table is `reference/published.csv` at the workspace root, embedded at build time so that a report
//! needs no file next to the binary. Columns: source, platform, metric, condition, payload_bytes, unit,
//! min, mean, max, stddev, note; an empty cell means the source did not give that figure.

use std::sync::OnceLock;

use serde::Deserialize;

use crate::doc::{Series, Suite};
use crate::error::ReportError;

/// The embedded CSV text.
pub const PUBLISHED_CSV: &str = include_str!("../../../reference/published.csv");

/// One published figure set. Figures are in `unit`, as the source quoted them (not converted).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PublishedRow {
    /// Where the figures come from, e.g. "seed 000 Table I".
    pub source: String,
    pub platform: String,
    /// What was measured, e.g. `loopback_rtt`, `timer_latency`; matches a series name where rtcell
    /// measures the same thing.
    pub metric: String,
    pub condition: String,
    pub payload_bytes: Option<u32>,
    pub unit: String,
    pub min: Option<f64>,
    pub mean: Option<f64>,
    pub max: Option<f64>,
    pub stddev: Option<f64>,
    pub note: String,
}

/// Parses a table in the layout of `reference/published.csv`.
pub fn parse(text: &str) -> Result<Vec<PublishedRow>, ReportError> {
    csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes())
        .deserialize()
        .collect::<Result<Vec<PublishedRow>, csv::Error>>()
        .map_err(|e| ReportError::Published(e.to_string()))
}

fn parsed() -> &'static Result<Vec<PublishedRow>, ReportError> {
    static ROWS: OnceLock<Result<Vec<PublishedRow>, ReportError>> = OnceLock::new();
    ROWS.get_or_init(|| parse(PUBLISHED_CSV))
}

/// All published rows, parsed once, or the parse error of the embedded table.
pub fn try_rows() -> Result<&'static [PublishedRow], &'static ReportError> {
    parsed().as_ref().map(Vec::as_slice)
}

/// All published rows, parsed once.
///
/// The embedded table is part of the source, and this crate's tests parse it, so it cannot fail in a
/// tested build. Should it fail anyway, reports lose only their reference column: this returns an empty
/// slice rather than stopping a benchmark run, and [`try_rows`] gives the error for whoever wants to show it.
pub fn rows() -> &'static [PublishedRow] {
    try_rows().unwrap_or(&[])
}

/// The published rows for one metric, in file order.
pub fn for_metric(metric: &str) -> Vec<&'static PublishedRow> {
    rows().iter().filter(|r| r.metric == metric).collect()
}

// Which published rows belong beside a series: a row belongs when its metric is what the series measures
// and, where the row gives a payload size, the sizes agree. Most series are named like the metric
// (`loopback_rtt`, `c2c_one_way`); the others are mapped here.

/// The published metrics a series compares with.
fn metrics_of(suite: &str, s: &Series) -> Vec<String> {
    let mut m = vec![s.name.clone()];
    match (suite, s.name.as_str()) {
        ("latency", "latency") => m.push("timer_latency".into()),
        ("itc", _) => {
            if let Some(mech) = s.labels.get("mechanism") {
                m.push(format!("itc_{mech}"));
            }
        }
        ("scenario", "task_exec_time") => {
            // seed 003 names its CODESYS tasks' cycle times after the task: ethercat_task_cycle,
            // high_prio_task_cycle.
            if let Some(task) = s.labels.get("task") {
                m.push(format!("{task}_task_cycle"));
                m.push(format!("{task}_prio_task_cycle"));
            }
        }
        _ => {}
    }
    m
}

fn matches(row: &PublishedRow, suite: &str, s: &Series) -> bool {
    if !metrics_of(suite, s).contains(&row.metric) {
        return false;
    }
    match row.payload_bytes {
        None => true,
        Some(b) => s.labels.get("bytes").and_then(|v| v.parse::<u32>().ok()) == Some(b),
    }
}

/// The published rows that some series of `suite` compares with, in file order.
pub fn rows_for(suite: &Suite) -> Vec<&'static PublishedRow> {
    rows().iter().filter(|r| suite.series.iter().any(|s| matches(r, &suite.suite, s))).collect()
}

/// The published rows for one series.
pub fn rows_for_series(suite: &str, s: &Series) -> Vec<&'static PublishedRow> {
    rows().iter().filter(|r| matches(r, suite, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_table_parses() {
        let rows = try_rows().unwrap_or_else(|e| panic!("{e}"));
        assert!(rows.len() >= 40, "{} rows", rows.len());
        assert_eq!(rows.len(), PUBLISHED_CSV.lines().count() - 1);
        assert!(rows.iter().all(|r| !r.metric.is_empty() && !r.unit.is_empty()));
    }

    #[test]
    fn seed_000_loopback_rows() {
        let loopback = for_metric("loopback_rtt");
        let zero = loopback
            .iter()
            .find(|r| {
                r.source == "seed 000 Table I"
                    && r.payload_bytes == Some(0)
                    && r.condition == "idle"
                    && r.platform.contains("Jailhouse")
            })
            .expect("seed 000 Table I loopback, 0 bytes");
        assert_eq!(zero.mean, Some(1.01));
        assert_eq!((zero.min, zero.max, zero.stddev), (Some(0.91), Some(1.07), None));
        assert_eq!(zero.unit, "us");
        assert!(loopback.iter().any(|r| r.payload_bytes == Some(1024)));
        assert!(loopback.iter().all(|r| r.metric == "loopback_rtt"));
        // Empty cells are absent figures, not zeros.
        let c2c = for_metric("c2c_one_way");
        assert!(c2c.iter().all(|r| r.min.is_none() && r.mean.is_some() && r.payload_bytes.is_none()));
        assert!(for_metric("no_such_metric").is_empty());
    }

    #[test]
    fn bad_table_is_an_error() {
        let bad = "source,platform,metric,condition,payload_bytes,unit,min,mean,max,stddev,note\n\
                   s,p,m,c,notanumber,us,1,2,3,,\n";
        let e = parse(bad).unwrap_err().to_string();
        assert!(e.contains("published.csv"), "{e}");
    }
}
