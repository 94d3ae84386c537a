//! Published figures of other platforms (the embedded `reference/published.csv`) matched to our series.
//!
//! A published row belongs beside a series when its metric is what the series measures and, where the
//! row gives a payload size, the sizes agree. Most series are named like the metric (`loopback_rtt`,
//! `c2c_one_way`); the others are mapped here.

use maud::Markup;

use super::Page;
use super::tables::Table;
use crate::doc::{Series, Suite};
use crate::published::{self, PublishedRow};

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
pub(super) fn rows_for(suite: &Suite) -> Vec<&'static PublishedRow> {
    published::rows().iter().filter(|r| suite.series.iter().any(|s| matches(r, &suite.suite, s))).collect()
}

/// The published rows for one series.
pub(super) fn rows_for_series(suite: &str, s: &Series) -> Vec<&'static PublishedRow> {
    published::rows().iter().filter(|r| matches(r, suite, s)).collect()
}

/// "source, platform, condition (other platform)": how a published figure is labelled everywhere.
pub(super) fn row_label(r: &PublishedRow) -> String {
    let cond = if r.condition.is_empty() { String::new() } else { format!(", {}", r.condition) };
    format!("{}, {}{cond} (other platform)", r.source, r.platform)
}

/// The table of a suite's published figures, or `None` when no row matches.
pub(super) fn table(suite: &Suite, id: &str, page: &mut Page) -> Option<Markup> {
    let rows = rows_for(suite);
    if rows.is_empty() {
        return None;
    }
    let mut t = Table::new(
        id,
        "Published figures of other platforms, beside which the series above can be read. Quoted from their \
         sources, in the sources' units; not measured here, and not the same hardware.",
        &["source", "platform", "metric", "condition", "bytes", "unit", "min", "mean", "max", "stddev", "note"],
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| v.to_string());
    for r in rows {
        t.other_row(vec![
            r.source.clone(),
            format!("{} (other platform)", r.platform),
            r.metric.clone(),
            r.condition.clone(),
            r.payload_bytes.map_or(String::new(), |b| b.to_string()),
            r.unit.clone(),
            f(r.min),
            f(r.mean),
            f(r.max),
            f(r.stddev),
            r.note.clone(),
        ]);
    }
    Some(t.render(page))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::{Kind, Unit};

    fn series(name: &str, labels: &[(&str, &str)]) -> Series {
        Series::from_samples(name, crate::labels(labels), Unit::Us, Kind::RoundTrip, vec![1.0], 0)
    }

    #[test]
    fn rows_match_by_metric_and_size() {
        let s0 = series("loopback_rtt", &[("bytes", "0"), ("cell", "thread")]);
        let rows = rows_for_series("loopback", &s0);
        assert!(!rows.is_empty());
        assert!(rows.iter().all(|r| r.metric == "loopback_rtt" && r.payload_bytes == Some(0)));
        let unknown_size = series("loopback_rtt", &[("bytes", "3")]);
        assert!(rows_for_series("loopback", &unknown_size).is_empty());
        let lat = series("latency", &[("tool", "rtcell")]);
        assert!(rows_for_series("latency", &lat).iter().any(|r| r.metric == "timer_latency"));
        let sem = series("itc_rtt", &[("mechanism", "semaphore")]);
        assert!(rows_for_series("itc", &sem).iter().all(|r| r.metric == "itc_semaphore"));
        let task = series("task_exec_time", &[("task", "ethercat")]);
        assert!(rows_for_series("scenario", &task).iter().any(|r| r.metric == "ethercat_task_cycle"));
        assert!(rows_for_series("mystery", &series("frobs", &[])).is_empty());
        let label = row_label(rows[0]);
        assert!(label.contains("seed 000 Table I") && label.ends_with("(other platform)"), "{label}");
    }
}
