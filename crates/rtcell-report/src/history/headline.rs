//! The headline of a suite: the one figure `rtcell history` shows per suite and run, always a median
//! (robust on a virtual machine, where maxima are the outer host's).
//!
//! The rule, per suite:
//! - `loopback`: `loopback_rtt` of the thread cell over the ring at 0 bytes (poll, no load preferred);
//!   failing that, the ring round trip of the smallest size of any cell.
//! - `control`: `control_exec` in f64, executed in a thread cell (else locally, else any cell).
//! - `c2c`: `c2c_round_trip`.
//! - `scenario`: `task_latency` of the first task (its activation latency).
//! - any other suite: its first series of a timing kind (round trip, one way, latency, execution time),
//!   else its first series; only series with samples count.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::doc::{Kind, Series, Suite};

/// One suite's headline figure in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    pub suite: String,
    pub series: String,
    pub labels: BTreeMap<String, String>,
    /// The statistic shown: always "median".
    pub stat: String,
    pub value: f64,
    pub unit: String,
    /// E.g. "loopback thread 0 B rtt 0.180 us".
    pub text: String,
}

/// The headline of each suite that has one, in the document's order.
pub fn headlines(suites: &[Suite]) -> Vec<Headline> {
    suites.iter().filter_map(headline).collect()
}

/// The headline of one suite, per the rule in the module documentation.
pub fn headline(suite: &Suite) -> Option<Headline> {
    let (s, what) = pick(suite)?;
    Some(Headline {
        suite: suite.suite.clone(),
        series: s.name.clone(),
        labels: s.labels.clone(),
        stat: "median".to_owned(),
        value: s.stats.median,
        unit: s.unit.as_str().to_owned(),
        text: format!("{} {what} {} {}", suite.suite, fmt_value(s.stats.median), s.unit),
    })
}

/// A value with as many decimals as a headline needs: 0.180, 33.81, 100.1.
pub fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn label<'a>(s: &'a Series, key: &str) -> Option<&'a str> {
    s.labels.get(key).map(String::as_str)
}

/// The series and a short description of it.
fn pick(suite: &Suite) -> Option<(&Series, String)> {
    let measured = || suite.series.iter().filter(|s| s.stats.count > 0);
    let named = |name: &'static str| measured().filter(move |s| s.name == name);
    match suite.suite.as_str() {
        "loopback" => {
            let ring = || named("loopback_rtt").filter(|s| label(s, "transport") == Some("ring"));
            let bytes = |s: &Series| label(s, "bytes").and_then(|b| b.parse::<u64>().ok()).unwrap_or(u64::MAX);
            // Lowest score wins: thread cell, 0 B, poll, no load.
            let score = |s: &Series| {
                (
                    label(s, "cell") != Some("thread"),
                    bytes(s),
                    label(s, "notify").is_some_and(|n| n != "poll"),
                    label(s, "load").is_some_and(|l| l != "none"),
                )
            };
            let s = ring().min_by_key(|s| score(s))?;
            Some((s, format!("{} {} B rtt", label(s, "cell").unwrap_or("?"), bytes(s))))
        }
        "control" => {
            let f64_exec = || named("control_exec").filter(|s| label(s, "precision") == Some("f64"));
            let s = f64_exec()
                .find(|s| label(s, "cell") == Some("thread"))
                .or_else(|| f64_exec().find(|s| label(s, "cell") == Some("local")))
                .or_else(|| f64_exec().next())?;
            Some((s, format!("f64 exec ({})", label(s, "cell").unwrap_or("?"))))
        }
        "c2c" => named("c2c_round_trip").next().map(|s| (s, "rtt".to_owned())),
        "scenario" => {
            named("task_latency").next().map(|s| (s, format!("{} latency", label(s, "task").unwrap_or("task"))))
        }
        _ => {
            let timing =
                |s: &&Series| matches!(s.kind, Kind::RoundTrip | Kind::OneWay | Kind::Latency | Kind::ExecTime);
            let s = measured().find(timing).or_else(|| measured().next())?;
            Some((s, s.name.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::{Stats, Unit};
    use crate::labels;

    fn series(name: &str, labels: BTreeMap<String, String>, kind: Kind, median: f64) -> Series {
        Series {
            name: name.into(),
            labels,
            unit: Unit::Us,
            kind,
            stats: Stats { count: 10, median, ..Stats::default() },
            histogram: None,
            errors: 0,
        }
    }

    fn suite(name: &str, series: Vec<Series>) -> Suite {
        Suite { suite: name.into(), config: serde_json::json!({}), series }
    }

    #[test]
    fn loopback_prefers_thread_ring_zero_bytes_poll() {
        let rtt = |cell, transport, bytes, notify, m| {
            series(
                "loopback_rtt",
                labels!(
                    "cell" => cell, "transport" => transport, "bytes" => bytes, "notify" => notify, "load" => "none"
                ),
                Kind::RoundTrip,
                m,
            )
        };
        let s = suite(
            "loopback",
            vec![
                rtt("kvm", "ring", 0, "poll", 9.0),
                rtt("thread", "pipe", 0, "poll", 8.0),
                rtt("thread", "ring", 64, "poll", 7.0),
                rtt("thread", "ring", 0, "futex", 6.0),
                rtt("thread", "ring", 0, "poll", 0.18),
            ],
        );
        let h = headline(&s).unwrap();
        assert_eq!(h.value, 0.18);
        assert_eq!(h.text, "loopback thread 0 B rtt 0.180 us");
        // Without a thread cell: the smallest ring size of another cell.
        let s = suite("loopback", vec![rtt("kvm", "ring", 64, "poll", 2.0), rtt("kvm", "ring", 8, "poll", 1.5)]);
        assert_eq!(headline(&s).unwrap().text, "loopback kvm 8 B rtt 1.500 us");
    }

    #[test]
    fn control_and_generic_rules() {
        let exec = |p, cell, m| series("control_exec", labels!("precision" => p, "cell" => cell), Kind::ExecTime, m);
        let s =
            suite("control", vec![exec("f32", "thread", 1.0), exec("f64", "local", 2.0), exec("f64", "thread", 3.0)]);
        assert_eq!(headline(&s).unwrap().text, "control f64 exec (thread) 3.000 us");
        let s = suite(
            "membench",
            vec![series("n", labels!(), Kind::Count, 5.0), series("read_latency", labels!(), Kind::Latency, 123.45)],
        );
        assert_eq!(headline(&s).unwrap().text, "membench read_latency 123.5 us");
        let mut empty = series("x", labels!(), Kind::Latency, 0.0);
        empty.stats.count = 0;
        assert!(headline(&suite("other", vec![empty])).is_none());
    }
}
