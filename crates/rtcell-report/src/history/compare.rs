//! Comparing two runs series by series: the change of median, p99.9 and max, and a verdict.
//!
//! Series are matched by suite, series name and labels, leaving out the labels that report an outcome of
//! the run rather than a condition of the measurement ([`OUTCOME_LABELS`]). A series found in one run
//! only is listed as added or removed.
//!
//! The rules, also printed with every comparison ([`Comparison::rules`]):
//! - Noise. A median moves within noise up to ±[`MEDIAN_NOISE`], or up to the larger of the two runs' own
//!   spread when that is wider: σ / median, with σ estimated as (p90 − median) / 1.28 (where p90 lies
//!   for a normal distribution). The standard deviation would not do: on a virtual machine a few
//!   preemptions of milliseconds inflate it a thousandfold. This spread also covers the clock's
//!   quantisation (medians of 0.14 and 0.15 us one tick apart). p99.9: ±[`P999_NOISE`], or the median's
//!   threshold if wider. Maxima are one sample each and on a virtual machine they are the outer host's
//!   preemptions: they are judged (±[`MAX_NOISE`]) only when neither run ran under a hypervisor, and
//!   otherwise only shown. So is p99.9 of fewer than 1,000 samples, which is the maximum.
//! - Direction. Lower is better for round trips, one-way times, latencies and execution times; higher
//!   for throughput (kind `throughput` or unit `bytes_per_s`). Other kinds (count, period) have no
//!   direction: a change beyond noise is reported as `changed`.
//! - More errors in B than in A is worse, fewer is better.
//! - A series is worse when any judged figure is worse; better when at least one is better and none is
//!   worse; changed when a figure without direction moved; otherwise within noise. A series without
//!   samples in either run has no verdict (`no_data`).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::doc::{Results, Series};
use crate::table::Table;

mod text;
pub use text::labels_text;

/// A median within ±5% is noise.
pub const MEDIAN_NOISE: f64 = 0.05;
/// A p99.9 within ±10% is noise.
pub const P999_NOISE: f64 = 0.10;
/// A maximum within ±25% is noise (judged on bare metal only).
pub const MAX_NOISE: f64 = 0.25;

/// Labels that carry a result of the run (the scenario suite's task counters and final state), not a
/// condition of the measurement: left out when matching series, or no two runs would ever match.
pub const OUTCOME_LABELS: &[&str] = &["cycles", "overruns", "longest_overrun_run", "skipped", "state"];
/// Label prefixes of the same nature: VM exits by reason (`exits.io_exits`, ...).
pub const OUTCOME_LABEL_PREFIXES: &[&str] = &["exits."];

/// What the history keeps of a series, and all a comparison needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesFigures {
    pub suite: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub unit: String,
    pub kind: String,
    pub count: u64,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub stddev: f64,
    pub errors: u64,
}

impl SeriesFigures {
    pub fn of(suite: &str, s: &Series) -> SeriesFigures {
        SeriesFigures {
            suite: suite.to_owned(),
            name: s.name.clone(),
            labels: s.labels.clone(),
            unit: s.unit.as_str().to_owned(),
            kind: s.kind.as_str().to_owned(),
            count: s.stats.count,
            median: s.stats.median,
            p90: s.stats.p90,
            p99: s.stats.p99,
            p999: s.stats.p999,
            max: s.stats.max,
            stddev: s.stats.stddev,
            errors: s.errors,
        }
    }

    /// The labels that identify the series across runs (without [`OUTCOME_LABELS`]).
    pub fn identity_labels(&self) -> BTreeMap<String, String> {
        self.labels
            .iter()
            .filter(|(k, _)| {
                !OUTCOME_LABELS.contains(&k.as_str()) && !OUTCOME_LABEL_PREFIXES.iter().any(|p| k.starts_with(p))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The run's own spread relative to its median: σ / median with σ = (p90 − median) / 1.2816 (the
    /// distance of p90 from the median of a normal distribution), which a few huge outliers leave alone.
    pub fn rel_spread(&self) -> f64 {
        if self.count == 0 || self.median == 0.0 {
            return 0.0;
        }
        ((self.p90 - self.median) / 1.2816).max(0.0) / self.median.abs()
    }
}

/// One side of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFigures {
    /// The run's id, or the path of its results.json.
    pub name: String,
    pub started_at: String,
    /// Host name where known (the history records it; a results.json does not hold it).
    pub hostname: Option<String>,
    pub cpu_model: String,
    /// The hypervisor the run ran under, `None` on bare metal.
    pub hypervisor: Option<String>,
    pub suites: Vec<String>,
    pub incomplete: bool,
    #[serde(skip)]
    pub series: Vec<SeriesFigures>,
}

impl RunFigures {
    /// The figures of a results document (e.g. a results.json given by path).
    pub fn from_results(name: impl Into<String>, r: &Results) -> RunFigures {
        RunFigures {
            name: name.into(),
            started_at: r.started_at.clone(),
            hostname: None,
            cpu_model: r.host.cpu_model.clone(),
            hypervisor: r.host.hypervisor.clone(),
            suites: r.suites.iter().map(|s| s.suite.clone()).collect(),
            incomplete: r.incomplete,
            series: r.suites.iter().flat_map(|su| su.series.iter().map(|s| SeriesFigures::of(&su.suite, s))).collect(),
        }
    }
}

/// Which way is better for a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    LowerIsBetter,
    HigherIsBetter,
    None,
}

impl Direction {
    /// From the series' kind and unit, as the module documentation says.
    pub fn of(kind: &str, unit: &str) -> Direction {
        match kind {
            "round_trip" | "one_way" | "latency" | "exec_time" => Direction::LowerIsBetter,
            "throughput" => Direction::HigherIsBetter,
            _ if unit == "bytes_per_s" => Direction::HigherIsBetter,
            _ => Direction::None,
        }
    }
}

/// The verdict on a figure or a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Better,
    Worse,
    WithinNoise,
    /// Moved beyond noise, but the series has no better direction.
    Changed,
    /// No samples in one of the runs.
    NoData,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::WithinNoise => "within noise",
            Verdict::Changed => "changed",
            Verdict::NoData => "no data",
        }
    }
}

/// One figure (median, p99.9, max) in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureChange {
    pub a: f64,
    pub b: f64,
    /// (b - a) / |a|; `None` when a is 0 and b is not (an infinite change).
    pub change: Option<f64>,
    /// The relative change allowed as noise; `None` when the figure is not judged.
    pub threshold: Option<f64>,
    /// `None` when not judged.
    pub verdict: Option<Verdict>,
}

impl FigureChange {
    fn new(a: f64, b: f64, threshold: Option<f64>, direction: Direction) -> FigureChange {
        let change = if a == 0.0 { (b == 0.0).then_some(0.0) } else { Some((b - a) / a.abs()) };
        let verdict = threshold.map(|t| {
            let beyond = change.is_none_or(|c| c.abs() > t);
            match (beyond, direction) {
                (false, _) => Verdict::WithinNoise,
                (true, Direction::None) => Verdict::Changed,
                (true, Direction::LowerIsBetter) if b < a => Verdict::Better,
                (true, Direction::HigherIsBetter) if b > a => Verdict::Better,
                (true, _) => Verdict::Worse,
            }
        });
        FigureChange { a, b, change, threshold, verdict }
    }

    /// "+12.3%", "-4.0%", "from 0".
    fn text(&self) -> String {
        match self.change {
            Some(c) => format!("{:+.1}%", c * 100.0),
            None => "from 0".to_owned(),
        }
    }
}

/// A series present in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesChange {
    pub suite: String,
    pub name: String,
    /// The identifying labels (outcome labels left out).
    pub labels: BTreeMap<String, String>,
    pub unit: String,
    pub kind: String,
    pub direction: Direction,
    pub count: [u64; 2],
    pub median: FigureChange,
    pub p999: FigureChange,
    pub max: FigureChange,
    pub errors: [u64; 2],
    pub verdict: Verdict,
    /// The figures beyond noise that decided the verdict: "median", "p99.9", "max", "errors", "unit".
    pub because: Vec<&'static str>,
}

/// A series found in one run only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesOnly {
    pub suite: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub unit: String,
    pub median: f64,
}

/// How many series got each verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub better: usize,
    pub worse: usize,
    pub within_noise: usize,
    pub changed: usize,
    pub no_data: usize,
    pub added: usize,
    pub removed: usize,
}

/// The rules a comparison applied, in words (printed with it, and in its JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rules {
    pub noise: String,
    pub direction: String,
    pub verdict: String,
    pub matching: String,
}

/// Run A against run B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub a: RunFigures,
    pub b: RunFigures,
    /// False when either run ran under a hypervisor: maxima are then shown, not judged.
    pub max_judged: bool,
    pub rules: Rules,
    pub series: Vec<SeriesChange>,
    /// Only in B.
    pub added: Vec<SeriesOnly>,
    /// Only in A.
    pub removed: Vec<SeriesOnly>,
    pub summary: Summary,
}

type Key = (String, String, String, usize);

/// Matching keys of a run's series, in order; a key seen twice gets an occurrence number.
fn keys(series: &[SeriesFigures]) -> Vec<Key> {
    let mut seen: HashMap<(String, String, String), usize> = HashMap::new();
    series
        .iter()
        .map(|s| {
            let labels = serde_json::to_string(&s.identity_labels()).unwrap_or_default();
            let k = (s.suite.clone(), s.name.clone(), labels);
            let n = seen.entry(k.clone()).or_insert(0);
            *n += 1;
            (k.0, k.1, k.2, *n)
        })
        .collect()
}

fn only(s: &SeriesFigures) -> SeriesOnly {
    SeriesOnly {
        suite: s.suite.clone(),
        name: s.name.clone(),
        labels: s.identity_labels(),
        unit: s.unit.clone(),
        median: s.median,
    }
}

/// Compares run A (the reference) with run B.
pub fn compare(a: RunFigures, b: RunFigures) -> Comparison {
    let max_judged = a.hypervisor.is_none() && b.hypervisor.is_none();
    let a_keys = keys(&a.series);
    let b_keys = keys(&b.series);
    let index: HashMap<&Key, usize> = a_keys.iter().enumerate().map(|(i, k)| (k, i)).collect();
    let mut matched = vec![false; a.series.len()];
    let mut series = Vec::new();
    let mut added = Vec::new();
    for (sb, kb) in b.series.iter().zip(&b_keys) {
        match index.get(kb) {
            Some(&i) => {
                matched[i] = true;
                series.push(change(&a.series[i], sb, max_judged));
            }
            None => added.push(only(sb)),
        }
    }
    let removed: Vec<SeriesOnly> = a.series.iter().zip(&matched).filter(|(_, m)| !**m).map(|(s, _)| only(s)).collect();
    let mut summary = Summary { added: added.len(), removed: removed.len(), ..Summary::default() };
    for s in &series {
        match s.verdict {
            Verdict::Better => summary.better += 1,
            Verdict::Worse => summary.worse += 1,
            Verdict::WithinNoise => summary.within_noise += 1,
            Verdict::Changed => summary.changed += 1,
            Verdict::NoData => summary.no_data += 1,
        }
    }
    let rules = rules(&a, &b, max_judged);
    Comparison { a, b, max_judged, rules, series, added, removed, summary }
}

fn change(a: &SeriesFigures, b: &SeriesFigures, max_judged: bool) -> SeriesChange {
    let direction = Direction::of(&b.kind, &b.unit);
    let median_t = MEDIAN_NOISE.max(a.rel_spread()).max(b.rel_spread());
    let median = FigureChange::new(a.median, b.median, Some(median_t), direction);
    let max_t = max_judged.then_some(MAX_NOISE);
    // With fewer than 1,000 samples p99.9 is the maximum (nearest rank), and as noisy.
    let p999_t = if a.count.min(b.count) >= 1000 { Some(P999_NOISE.max(median_t)) } else { max_t };
    let p999 = FigureChange::new(a.p999, b.p999, p999_t, direction);
    let max = FigureChange::new(a.max, b.max, max_t, direction);
    let mut because = Vec::new();
    let verdict = if a.count == 0 || b.count == 0 {
        Verdict::NoData
    } else if a.unit != b.unit || a.kind != b.kind {
        because.push("unit");
        Verdict::Changed
    } else {
        let errors = match b.errors.cmp(&a.errors) {
            std::cmp::Ordering::Greater => Some(Verdict::Worse),
            std::cmp::Ordering::Less => Some(Verdict::Better),
            std::cmp::Ordering::Equal => None,
        };
        let figures = [("median", median.verdict), ("p99.9", p999.verdict), ("max", max.verdict), ("errors", errors)];
        for (name, v) in figures {
            if matches!(v, Some(Verdict::Better | Verdict::Worse | Verdict::Changed)) {
                because.push(name);
            }
        }
        let any = |want: Verdict| figures.iter().any(|(_, v)| *v == Some(want));
        if any(Verdict::Worse) {
            Verdict::Worse
        } else if any(Verdict::Better) {
            Verdict::Better
        } else if any(Verdict::Changed) {
            Verdict::Changed
        } else {
            Verdict::WithinNoise
        }
    };
    SeriesChange {
        suite: b.suite.clone(),
        name: b.name.clone(),
        labels: b.identity_labels(),
        unit: b.unit.clone(),
        kind: b.kind.clone(),
        direction,
        count: [a.count, b.count],
        median,
        p999,
        max,
        errors: [a.errors, b.errors],
        verdict,
        because,
    }
}

fn rules(a: &RunFigures, b: &RunFigures, max_judged: bool) -> Rules {
    let vm = |r: &RunFigures, side: &str| r.hypervisor.as_ref().map(|h| format!("{side} ran on {h}"));
    let max_rule = if max_judged {
        format!("max ±{:.0}% (both runs on bare metal)", MAX_NOISE * 100.0)
    } else {
        let why: Vec<String> = [vm(a, "A"), vm(b, "B")].into_iter().flatten().collect();
        format!(
            "max shown, not judged: on a virtual machine maxima are the outer host's preemptions ({})",
            why.join(", ")
        )
    };
    Rules {
        noise: format!(
            "median ±{:.0}%, or the larger of the two runs' own spread σ/median if wider (σ = (p90 − median)/1.28); \
             p99.9 ±{:.0}%, or the median's threshold if wider (of fewer than 1000 samples: as max); {max_rule}",
            MEDIAN_NOISE * 100.0,
            P999_NOISE * 100.0
        ),
        direction: "lower is better for round_trip, one_way, latency and exec_time series; higher for throughput \
                    (and unit bytes_per_s); other kinds (count, period) have no direction: a move beyond noise \
                    is \"changed\"; more errors is worse"
            .to_owned(),
        verdict: "a series is worse when any judged figure is worse, better when one is better and none worse"
            .to_owned(),
        matching: format!(
            "series matched by suite, name and labels (outcome labels {} and {}* left out)",
            OUTCOME_LABELS.join(", "),
            OUTCOME_LABEL_PREFIXES.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(name: &str, kind: &str, median: f64) -> SeriesFigures {
        SeriesFigures {
            suite: "s".into(),
            name: name.into(),
            labels: crate::labels!("cell" => "thread"),
            unit: "us".into(),
            kind: kind.into(),
            count: 1000,
            median,
            p90: median,
            p99: median,
            p999: median,
            max: median,
            stddev: 0.0,
            errors: 0,
        }
    }

    fn run(series: Vec<SeriesFigures>, vm: bool) -> RunFigures {
        RunFigures {
            name: "r".into(),
            started_at: "t".into(),
            hostname: None,
            cpu_model: "cpu".into(),
            hypervisor: vm.then(|| "KVM".into()),
            suites: vec!["s".into()],
            incomplete: false,
            series,
        }
    }

    #[test]
    fn verdicts_follow_direction_and_noise() {
        let a = run(
            vec![
                fig("lat", "latency", 100.0),
                fig("rtt", "round_trip", 100.0),
                fig("same", "exec_time", 100.0),
                fig("tp", "throughput", 100.0),
                fig("n", "count", 100.0),
            ],
            true,
        );
        let b = run(
            vec![
                fig("lat", "latency", 110.0),
                fig("rtt", "round_trip", 90.0),
                fig("same", "exec_time", 104.0),
                fig("tp", "throughput", 110.0),
                fig("n", "count", 120.0),
            ],
            true,
        );
        let c = compare(a, b);
        let v: Vec<Verdict> = c.series.iter().map(|s| s.verdict).collect();
        assert_eq!(v, [Verdict::Worse, Verdict::Better, Verdict::WithinNoise, Verdict::Better, Verdict::Changed]);
        assert!(!c.max_judged);
        assert_eq!(c.series[0].max.verdict, None, "max not judged on a VM");
        assert_eq!(c.summary, Summary { better: 2, worse: 1, within_noise: 1, changed: 1, ..Summary::default() });
    }

    #[test]
    fn spread_widens_the_median_threshold_and_max_counts_on_bare_metal() {
        let mut a = fig("lat", "latency", 100.0);
        // σ = (132.04 − 100) / 1.2816 = 25, a spread of 25%: a 20% move is noise.
        a.p90 = 132.04;
        // The standard deviation plays no part.
        a.stddev = 1e9;
        let mut b = fig("lat", "latency", 120.0);
        b.p999 = 100.0;
        b.max = 100.0;
        let c = compare(run(vec![a.clone()], false), run(vec![b], false));
        let t = c.series[0].median.threshold.unwrap();
        assert!((t - 0.25).abs() < 0.001, "{t}");
        assert_eq!(c.series[0].verdict, Verdict::WithinNoise);
        // On bare metal, the max alone can decide.
        let mut b = a.clone();
        b.max = 200.0;
        let c = compare(run(vec![a], false), run(vec![b], false));
        assert_eq!(c.series[0].verdict, Verdict::Worse);
        assert_eq!(c.series[0].because, ["max"]);
    }

    #[test]
    fn matching_ignores_outcome_labels_and_lists_added_and_removed() {
        let mut a1 = fig("task_latency", "latency", 10.0);
        a1.labels.insert("cycles".into(), "1000".into());
        a1.labels.insert("exits.io".into(), "3".into());
        let mut b1 = a1.clone();
        b1.labels.insert("cycles".into(), "999".into());
        b1.errors = 2;
        let c =
            compare(run(vec![a1, fig("gone", "latency", 1.0)], true), run(vec![b1, fig("new", "latency", 1.0)], true));
        assert_eq!(c.series.len(), 1);
        assert_eq!(c.series[0].verdict, Verdict::Worse);
        assert_eq!(c.series[0].because, ["errors"]);
        assert_eq!(c.added[0].name, "new");
        assert_eq!(c.removed[0].name, "gone");
        let text = c.render_text();
        assert!(
            text.contains("summary: 0 better, 1 worse, 0 within noise, 0 changed, 0 no data, 1 added, 1 removed"),
            "{text}"
        );
        assert!(text.contains("max shown, not judged"), "{text}");
    }

    #[test]
    fn p999_of_few_samples_is_judged_like_the_max() {
        let mut a = fig("x", "latency", 100.0);
        a.count = 500;
        let mut b = a.clone();
        b.p999 = 300.0;
        let c = compare(run(vec![a.clone()], true), run(vec![b.clone()], true));
        assert_eq!(c.series[0].p999.verdict, None);
        assert_eq!(c.series[0].verdict, Verdict::WithinNoise);
        let c = compare(run(vec![a], false), run(vec![b], false));
        assert_eq!(c.series[0].p999.threshold, Some(MAX_NOISE));
        assert_eq!(c.series[0].verdict, Verdict::Worse);
        assert_eq!(c.series[0].because, ["p99.9"]);
    }

    #[test]
    fn zero_reference_is_an_infinite_change() {
        let a = fig("n", "latency", 0.0);
        let mut b = a.clone();
        b.median = 1.0;
        let c = compare(run(vec![a], true), run(vec![b], true));
        assert_eq!(c.series[0].median.change, None);
        assert_eq!(c.series[0].median.verdict, Some(Verdict::Worse));
        assert_eq!(c.series[0].median.text(), "from 0");
    }
}
