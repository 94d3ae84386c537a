//! Published figures of other platforms (the embedded `reference/published.csv`) beside our series:
//! which row belongs beside which series is [`crate::published::rows_for_series`].

use maud::Markup;

use super::Page;
use super::tables::Table;
use crate::doc::Suite;
use crate::published::{PublishedRow, rows_for};

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
    use crate::doc::{Kind, Series, Unit};
    use crate::published::rows_for_series;

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
