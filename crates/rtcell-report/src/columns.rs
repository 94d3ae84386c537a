//! One column model for the tables both the terminal and the HTML report show: a table's headers and the
//! cells of its rows, built once from the results document's series ([`Grid`]). The terminal
//! ([`crate::table::Table::of`]) and the HTML report render the same grid, so their columns, units and
//! precision cannot drift apart.

use crate::doc::{Series, Suite, Unit};

/// A table's headers and rows, every cell already formatted ("-" where a figure is missing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grid {
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

/// A value of a series in its unit, with the precision every table uses: µs and ratios with three
/// decimals, ns with one, cycles none, bytes/s as MB/s with one, counts whole (two decimals if not).
pub fn fmt_value(v: f64, unit: Unit) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let s = match unit {
        Unit::Us | Unit::Ratio => format!("{v:.3}"),
        Unit::Ns => format!("{v:.1}"),
        Unit::Cycles => format!("{v:.0}"),
        Unit::BytesPerS => format!("{:.1}", v / 1e6),
        Unit::Count if v.fract() == 0.0 => format!("{v:.0}"),
        Unit::Count => format!("{v:.2}"),
    };
    // Never a negative zero.
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => s,
    }
}

fn label<'a>(s: &'a Series, key: &str) -> Option<&'a str> {
    s.labels.get(key).map(String::as_str)
}

/// A JSON string or number as its text (`None` for null, absent or anything else).
fn plain(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        // As a label shows it: 1000, not 1000.0.
        serde_json::Value::Number(n) => {
            Some(n.as_u64().map_or_else(|| format!("{}", n.as_f64().unwrap_or(f64::NAN)), |u| u.to_string()))
        }
        _ => None,
    }
}

/// The latency suite's columns (figures in each series' unit, µs).
pub const LATENCY: [&str; 14] = [
    "tool",
    "mode",
    "cell",
    "activations",
    "min",
    "avg",
    "stddev",
    "median",
    "p99",
    "p99.9",
    "p99.99",
    "max",
    "overruns",
    "dropped",
];

/// The latency suite's table: a row per `latency` series (tool, mode, cell kind), with the overruns of
/// the `latency_overruns` series of the same labels ("-" for a tool that counts none, as cyclictest) and
/// the activations dropped from the figures (the sample log was full).
pub fn latency(lat: &[&Series], overruns: &[&Series]) -> Grid {
    let rows = lat
        .iter()
        .map(|s| {
            let st = &s.stats;
            let v = |x: f64| if st.count == 0 { "-".to_string() } else { fmt_value(x, s.unit) };
            let ov = overruns
                .iter()
                .find(|o| o.labels == s.labels)
                .map_or("-".into(), |o| fmt_value(o.stats.max, Unit::Count));
            vec![
                label(s, "tool").unwrap_or("-").into(),
                label(s, "mode").unwrap_or("-").into(),
                label(s, "cell").unwrap_or("-").into(),
                st.count.to_string(),
                v(st.min),
                v(st.mean),
                v(st.stddev),
                v(st.median),
                v(st.p99),
                v(st.p999),
                v(st.p9999),
                v(st.max),
                ov,
                s.errors.to_string(),
            ]
        })
        .collect();
    Grid { headers: LATENCY.to_vec(), rows }
}

/// A scenario's task columns (CODESYS task statistics; times in µs).
pub const TASKS: [&str; 17] = [
    "task",
    "cell",
    "cpu",
    "priority",
    "period µs",
    "cycles",
    "expected",
    "exec min",
    "exec avg",
    "exec max",
    "lat min",
    "lat avg",
    "lat max",
    "overruns",
    "longest run",
    "skipped",
    "state",
];

/// A scenario's task table: a row per task of the recorded outcome (`config.outcome.tasks`), in its
/// order, then per task that only has series, with the figures of its `task_exec_time` and
/// `task_latency` series and the counts of its labels. A task whose statistics block was scribbled has no series: its counts show as `?` and its
/// state as `scribbled` (nothing read from such a block is the task's).
pub fn tasks(suite: &Suite) -> Grid {
    let none = serde_json::Value::Null;
    let outcome = suite.config.get("outcome").and_then(|o| o.get("tasks")).and_then(|t| t.as_array());
    let find = |name: &str, task: &str| suite.series.iter().find(|s| s.name == name && label(s, "task") == Some(task));
    let name_of = |o: &serde_json::Value| o.get("name").and_then(|n| n.as_str()).map(str::to_string);
    // The outcome's tasks in its order, then any task that has series but is not in it (a document
    // without an outcome, as the schema allows, still shows every task): each with its outcome entry.
    let mut list: Vec<(String, &serde_json::Value)> =
        outcome.into_iter().flatten().map(|o| (name_of(o).unwrap_or_else(|| "-".into()), o)).collect();
    for s in suite.series.iter().filter(|s| s.name == "task_exec_time" || s.name == "task_latency") {
        if let Some(t) = label(s, "task")
            && !list.iter().any(|(n, _)| n == t)
        {
            list.push((t.to_string(), &none));
        }
    }
    let rows = list
        .iter()
        .map(|(task, o)| {
            let (task, o) = (task.as_str(), *o);
            let scribbled = o.get("statistics_block").and_then(|b| b.as_str()) == Some("scribbled");
            let (e, l) = (find("task_exec_time", task), find("task_latency", task));
            let any = e.or(l);
            // A series label, else the plan's fact kept in the outcome (a scribbled task has no series).
            let lab = |k: &str| {
                any.and_then(|s| label(s, k))
                    .map(str::to_string)
                    .or_else(|| plain(o.get(k)))
                    .unwrap_or_else(|| if scribbled { "?" } else { "-" }.to_string())
            };
            let fig = |s: Option<&Series>, f: fn(&Series) -> f64| {
                s.filter(|s| s.stats.count > 0).map_or("-".into(), |s| fmt_value(f(s), s.unit))
            };
            let expected = o.get("expected").and_then(serde_json::Value::as_u64).map_or("-".into(), |v| v.to_string());
            let state = if scribbled { "scribbled".to_string() } else { lab("state") };
            vec![
                task.to_string(),
                format!("{} ({})", lab("cell"), lab("cell_kind")),
                lab("cpu"),
                lab("priority"),
                lab("period_us"),
                lab("cycles"),
                expected,
                fig(e, |s| s.stats.min),
                fig(e, |s| s.stats.mean),
                fig(e, |s| s.stats.max),
                fig(l, |s| s.stats.min),
                fig(l, |s| s.stats.mean),
                fig(l, |s| s.stats.max),
                lab("overruns"),
                lab("longest_overrun_run"),
                lab("skipped"),
                state,
            ]
        })
        .collect();
    Grid { headers: TASKS.to_vec(), rows }
}

/// A scenario's channel columns (messages).
pub const CHANNELS: [&str; 7] = ["channel", "sent", "received", "lost", "refused", "queued at end", "per second"];

/// A scenario's channel table: a row per channel of the `channel_messages` series (by direction: sent,
/// received, lost to gaps in the sequence numbers, refused because the ring was full, still queued at
/// the end), in their order, and the messages sent per second measured (`config.measured_s`).
pub fn channels(suite: &Suite) -> Grid {
    let msgs: Vec<&Series> = suite.series.iter().filter(|s| s.name == "channel_messages").collect();
    let secs = suite.config.get("measured_s").and_then(serde_json::Value::as_f64).filter(|s| *s > 0.0);
    let mut names: Vec<&str> = Vec::new();
    for s in &msgs {
        let n = label(s, "channel").unwrap_or("-");
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let rows = names
        .into_iter()
        .map(|n| {
            let count = |d: &str| {
                msgs.iter()
                    .find(|s| label(s, "channel") == Some(n) && label(s, "direction") == Some(d))
                    .map(|s| s.stats.max)
            };
            let cell = |d: &str| count(d).map_or("-".into(), |v| fmt_value(v, Unit::Count));
            let rate = count("sent").zip(secs).map_or("-".into(), |(v, t)| format!("{:.0}", v / t));
            vec![n.to_string(), cell("sent"), cell("received"), cell("lost"), cell("refused"), cell("queued"), rate]
        })
        .collect();
    Grid { headers: CHANNELS.to_vec(), rows }
}

/// The loopback suite's columns per configuration (µs, round trip).
pub const LOOPBACK: [&str; 12] = [
    "bytes",
    "count",
    "min",
    "mean",
    "median",
    "p99",
    "p99.9",
    "max",
    "MB/s",
    "errors",
    "Jailhouse A7 mean (other platform)",
    "Jailhouse A7 max (other platform)",
];

/// The loopback table of one configuration: a row per `loopback_rtt` series (payload size) in µs, the
/// throughput of its `loopback_throughput` series, and seed 000 Table I's STM32MP157 Jailhouse A7 cell
/// under the same condition (idle, or interference when the series ran beside a load), another
/// platform, for scale only.
pub fn loopback(suite: &str, rtt: &[&Series], throughput: &[&Series]) -> Grid {
    let rows = rtt
        .iter()
        .map(|s| {
            let st = &s.stats;
            // Loopback series are in µs; tolerate ns.
            let v = |x: f64| fmt_value(if s.unit == Unit::Ns { x / 1000.0 } else { x }, Unit::Us);
            let mbps =
                throughput.iter().find(|x| x.labels == s.labels).map(|x| fmt_value(x.stats.max, Unit::BytesPerS));
            let condition = match label(s, "load") {
                None | Some("" | "none") => "idle",
                Some(_) => "interference",
            };
            let jailhouse = crate::published::rows_for_series(suite, s)
                .into_iter()
                .find(|r| r.platform.contains("Jailhouse") && r.condition == condition);
            let pubd = |f: Option<f64>| f.map_or("-".to_string(), |v| format!("{v:.2}"));
            vec![
                label(s, "bytes").unwrap_or("-").into(),
                st.count.to_string(),
                v(st.min),
                v(st.mean),
                v(st.median),
                v(st.p99),
                v(st.p999),
                v(st.max),
                mbps.unwrap_or_else(|| "-".into()),
                s.errors.to_string(),
                pubd(jailhouse.and_then(|r| r.mean)),
                pubd(jailhouse.and_then(|r| r.max)),
            ]
        })
        .collect();
    Grid { headers: LOOPBACK.to_vec(), rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::Kind;
    use std::collections::BTreeMap;

    fn labels(tool: &str, mode: &str) -> BTreeMap<String, String> {
        [("tool", tool), ("mode", mode)].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn every_latency_row_has_every_column_and_a_tool_without_overruns_shows_none() {
        let ours =
            Series::from_samples("latency", labels("rtcell", "poll"), Unit::Us, Kind::Latency, vec![1.0, 3.0], 2);
        let ov =
            Series::from_samples("latency_overruns", labels("rtcell", "poll"), Unit::Count, Kind::Count, vec![5.0], 0);
        let ct = Series::from_samples("latency", labels("cyclictest", "nanosleep"), Unit::Us, Kind::Latency, vec![], 0);
        let g = latency(&[&ours, &ct], &[&ov]);
        assert!(g.rows.iter().all(|r| r.len() == g.headers.len()));
        let col = |name: &str| g.headers.iter().position(|h| *h == name).expect("a column");
        assert_eq!(g.rows[0][col("max")], "3.000");
        assert_eq!(g.rows[0][col("overruns")], "5");
        assert_eq!(g.rows[0][col("dropped")], "2");
        assert_eq!(g.rows[1][col("overruns")], "-");
        assert_eq!(g.rows[1][col("median")], "-", "no activations: no figures");
    }

    #[test]
    fn values_never_show_a_negative_zero_nor_nan() {
        assert_eq!(fmt_value(-0.0001, Unit::Us), "0.000");
        assert_eq!(fmt_value(f64::NAN, Unit::Ns), "-");
        assert_eq!(fmt_value(2.5e6, Unit::BytesPerS), "2.5");
    }

    #[test]
    fn a_scribbled_task_keeps_its_plan_facts_and_shows_its_counts_as_unknown() {
        let l: BTreeMap<String, String> =
            [("task", "a"), ("cell", "c1"), ("cell_kind", "thread"), ("cpu", "1"), ("cycles", "10"), ("state", "done")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let exec = Series::from_samples("task_exec_time", l, Unit::Us, Kind::ExecTime, vec![2.0], 0);
        let msg = |dir: &str, v: f64| {
            let l = [("channel", "ch"), ("direction", dir)].into_iter().map(|(k, v)| (k.to_string(), v.to_string()));
            Series::from_samples("channel_messages", l.collect(), Unit::Count, Kind::Count, vec![v], 0)
        };
        let config = serde_json::json!({
            "measured_s": 2.0,
            "outcome": {"tasks": [
                {"name": "a", "expected": 10},
                {"name": "b", "statistics_block": "scribbled", "cell": "c2", "cell_kind": "kvm", "cpu": 1,
                 "period_us": 1000.0, "expected": 10, "cycles": null},
            ]},
        });
        let suite =
            Suite { suite: "scenario".into(), config, series: vec![exec, msg("sent", 100.0), msg("lost", 0.0)] };
        let g = tasks(&suite);
        let col = |name: &str| g.headers.iter().position(|h| *h == name).expect("a column");
        assert_eq!(g.rows.len(), 2);
        assert_eq!(g.rows[0][col("exec max")], "2.000");
        assert_eq!(g.rows[0][col("cycles")], "10");
        assert_eq!(g.rows[1][col("cell")], "c2 (kvm)");
        assert_eq!(g.rows[1][col("period µs")], "1000");
        assert_eq!(g.rows[1][col("cycles")], "?");
        assert_eq!(g.rows[1][col("state")], "scribbled");
        // Without an outcome (the schema does not ask for one) the task still has its row.
        let bare = Suite { config: serde_json::json!({}), ..suite.clone() };
        let g = tasks(&bare);
        assert_eq!(g.rows.len(), 1);
        assert_eq!((g.rows[0][0].as_str(), g.rows[0][col("exec max")].as_str()), ("a", "2.000"));
        assert_eq!(g.rows[0][col("expected")], "-");
        let c = channels(&suite);
        assert_eq!(c.rows, vec![vec!["ch", "100", "-", "0", "-", "-", "50"]]);
    }
}
