//! The membench suite (seed 004 Fig. 5): read latency against working-set size on a log axis, one curve
//! per access pattern and interference, with the cache sizes of the configuration marked.
//!
//! Tolerant by design: a series without a `wss_bytes` label is left to the generic table, curves are
//! formed from whatever labels the series carry, and cache sizes are drawn only where the configuration
//! names them.

use maud::{Markup, html};

use super::plots::{self, Axis, Chart, Line, Marker, Scale, bytes_label};
use super::suites::{Ctx, Picker};
use super::tables::Table;
use super::{figure, fmt_value, label, label_num, labels_text, unit_text};
use crate::doc::Series;
use crate::error::ReportError;

/// Labels that vary from point to point of one curve, not from curve to curve.
const POINT_LABELS: [&str; 5] = ["wss_bytes", "fits", "plateau", "accesses", "accesses_per_sample"];

struct Curve<'a> {
    name: String,
    points: Vec<(f64, &'a Series)>,
}

/// The labels that identify a curve.
type CurveKey<'a> = Vec<(&'a String, &'a String)>;

fn curve_key(s: &Series) -> CurveKey<'_> {
    s.labels.iter().filter(|(k, _)| !POINT_LABELS.contains(&k.as_str())).collect()
}

/// A curve's name from the labels that tell curves apart: "random, 1 interferer", or key=value pairs.
fn curve_name(key: &[(&String, &String)], varying: &[&String]) -> String {
    let get = |k: &str| key.iter().find(|(kk, _)| kk.as_str() == k).map(|(_, v)| v.as_str());
    let mut parts = Vec::new();
    if let Some(p) = get("pattern") {
        parts.push(p.to_string());
    }
    if let Some(n) = get("interferers") {
        parts.push(format!("{n} interferer{}", if n == "1" { "" } else { "s" }));
    }
    let rest = labels_text(
        key.iter().filter(|(k, _)| varying.contains(k) && !matches!(k.as_str(), "pattern" | "interferers")).copied(),
    );
    if !rest.is_empty() {
        parts.push(rest);
    }
    if parts.is_empty() { "read latency".into() } else { parts.join(", ") }
}

/// (name, size in bytes) of the data and unified caches in the configuration, if it lists them.
fn caches(config: &serde_json::Value) -> Vec<(String, f64)> {
    let Some(list) = config.get("caches").and_then(|c| c.as_array()) else { return Vec::new() };
    let mut out: Vec<(String, f64)> = list
        .iter()
        .filter(|c| c.get("type").and_then(|t| t.as_str()) != Some("Instruction"))
        .filter_map(|c| {
            let size = c.get("size_bytes")?.as_f64().filter(|s| *s > 0.0)?;
            let name = c
                .get("name")
                .and_then(|n| n.as_str())
                .map_or_else(|| c.get("level").map_or("cache".to_string(), |l| format!("L{l}")), str::to_string);
            Some((name, size))
        })
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

pub(super) fn render(ctx: &mut Ctx<'_, '_>, pick: &mut Picker<'_>) -> Result<Markup, ReportError> {
    let series = pick.take_if(|s| label_num(s, "wss_bytes").is_some_and(|b| b > 0.0) && s.stats.count > 0);
    if series.is_empty() {
        return Ok(html! {});
    }
    let unit = series[0].unit;
    let mut keys: Vec<(CurveKey, Vec<(f64, &Series)>)> = Vec::new();
    for s in series.iter().filter(|s| s.unit == unit) {
        let key = curve_key(s);
        let wss = label_num(s, "wss_bytes").unwrap_or(0.0);
        match keys.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push((wss, s)),
            None => keys.push((key, vec![(wss, s)])),
        }
    }
    // Labels whose value differs between curves name them.
    fn value<'k>(k: &[(&String, &'k String)], key: &String) -> Option<&'k String> {
        k.iter().find(|(kk, _)| *kk == key).map(|(_, v)| *v)
    }
    let all: std::collections::BTreeSet<&String> = keys.iter().flat_map(|(k, _)| k.iter().map(|(kk, _)| *kk)).collect();
    let varying: Vec<&String> =
        all.into_iter().filter(|key| keys.iter().any(|(k, _)| value(k, key) != value(&keys[0].0, key))).collect();
    let mut curves: Vec<Curve> = keys
        .iter()
        .map(|(k, pts)| {
            let mut points = pts.clone();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Curve { name: curve_name(k, &varying), points }
        })
        .collect();
    curves.truncate(super::hist::MAX_OVERLAYS);
    let caches = caches(&ctx.suite.config);
    let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (f64::INFINITY, 0.0f64, f64::INFINITY, 0.0f64);
    for c in &curves {
        for (x, s) in &c.points {
            x_lo = x_lo.min(*x);
            x_hi = x_hi.max(*x);
            if s.stats.median > 0.0 {
                y_lo = y_lo.min(s.stats.median);
                y_hi = y_hi.max(s.stats.median);
            }
        }
    }
    if y_hi <= 0.0 {
        (y_lo, y_hi) = (1.0, 10.0);
    }
    let lines = curves
        .iter()
        .enumerate()
        .map(|(i, c)| Line {
            label: c.name.clone(),
            points: c.points.iter().map(|(x, s)| (*x, s.stats.median)).collect(),
            color: plots::color(i),
            dashed: false,
            markers: true,
        })
        .collect();
    let markers = caches
        .iter()
        .filter(|(_, size)| *size >= x_lo && *size <= x_hi)
        .map(|(name, size)| Marker { x: *size, label: format!("{name} {}", bytes_label(*size)) })
        .collect();
    let u = unit_text(unit);
    let chart = Chart {
        title: format!("Read latency against working-set size (median, {u} per read)"),
        x: Axis { desc: "working-set size (bytes, log)".into(), scale: Scale::Log2Bytes, lo: x_lo, hi: x_hi },
        y: Axis {
            desc: format!("median read latency ({u}, log)"),
            scale: Scale::Log10,
            lo: y_lo / 1.3,
            hi: y_hi * 1.3,
        },
        lines,
        marks: Vec::new(),
        markers,
    };
    let svg = plots::render(&chart)?;
    let n = ctx.page.next_figure();
    let common = super::common_labels(&series);
    let common: Vec<_> = common.into_iter().filter(|(k, _)| !POINT_LABELS.contains(&k.as_str())).collect();
    let fig = figure(
        &format!("{}-wss", ctx.id),
        n,
        svg,
        html! {
            "Read latency against working-set size (seed 004 Fig. 5): the median time of one dependent read, in " (u)
            ", of each working set's samples (a sample times " (ctx.config_text("accesses_per_sample")) " reads with the TSC), \
            one curve per access pattern and number of memcpy interferers; both axes log. "
            @if !common.is_empty() { "All curves: " (labels_text(common.iter().copied())) ". " }
            @if caches.is_empty() { "The configuration names no cache sizes." }
            @else { "Dashed grey lines: the cache sizes sysfs lists for the measured CPU." }
        },
    );
    Ok(html! {
        (fig)
        (pivot_table(ctx, &curves, u))
        @if let Some(t) = plateau_table(ctx) { (t) }
    })
}

/// Rows: working-set sizes; columns: the curves' medians.
fn pivot_table(ctx: &mut Ctx<'_, '_>, curves: &[Curve], unit: &str) -> Markup {
    let mut sizes: Vec<f64> = curves.iter().flat_map(|c| c.points.iter().map(|(x, _)| *x)).collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    let mut headers: Vec<String> = vec!["working set".into(), "bytes".into(), "fits".into()];
    headers.extend(curves.iter().map(|c| format!("{} median {unit}", c.name)));
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new(
        format!("{}-table", ctx.id),
        format!(
            "Median read latency ({unit} per read) per working-set size and curve; fits: the smallest cache that holds the set."
        ),
        &header_refs,
    );
    for size in sizes {
        fn at<'c>(c: &Curve<'c>, size: f64) -> Option<&'c Series> {
            c.points.iter().find(|(x, _)| *x == size).map(|(_, s)| *s)
        }
        let fits = curves.iter().find_map(|c| at(c, size).and_then(|s| label(s, "fits"))).unwrap_or("-");
        let mut row = vec![bytes_label(size), format!("{size:.0}"), fits.to_string()];
        row.extend(curves.iter().map(|c| at(c, size).map_or("-".into(), |s| fmt_value(s.stats.median, s.unit))));
        t.row(row);
    }
    t.render(ctx.page)
}

/// The plateaus the suite found (configuration `plateaus`), when it lists them.
fn plateau_table(ctx: &mut Ctx<'_, '_>) -> Option<Markup> {
    let list = ctx.suite.config.get("plateaus")?.as_array()?;
    if list.is_empty() {
        return None;
    }
    let mut t = Table::new(
        format!("{}-plateaus", ctx.id),
        "Plateaus: runs of working-set sizes with about the same latency, named after the cache that holds them.",
        &["pattern", "interferers", "plateau", "from", "to", "median ns"],
    );
    let text = |v: &serde_json::Value, k: &str| match v.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => "-".into(),
        Some(x) => x.to_string(),
    };
    for p in list {
        let size = |k: &str| p.get(k).and_then(|v| v.as_f64()).map_or("-".into(), bytes_label);
        let ns = p.get("median_ns").and_then(|v| v.as_f64()).map_or("-".into(), |v| format!("{v:.2}"));
        t.row(vec![
            text(p, "pattern"),
            text(p, "interferers"),
            text(p, "label"),
            size("from_bytes"),
            size("to_bytes"),
            ns,
        ]);
    }
    Some(t.render(ctx.page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_from_config_tolerate_missing_fields() {
        let cfg = serde_json::json!({"caches": [
            {"name": "L1i", "type": "Instruction", "size_bytes": 32768},
            {"name": "L2", "size_bytes": 1048576},
            {"level": 1, "size_bytes": 49152},
            {"name": "bad", "size_bytes": "big"},
            {"name": "zero", "size_bytes": 0},
        ]});
        assert_eq!(caches(&cfg), vec![("L1".to_string(), 49152.0), ("L2".to_string(), 1048576.0)]);
        assert!(caches(&serde_json::json!({})).is_empty());
        assert!(caches(&serde_json::json!({"caches": 3})).is_empty());
    }

    #[test]
    fn curve_names() {
        let (p, i, l) = ("pattern".to_string(), "interferers".to_string(), "load".to_string());
        let (seq, one, none) = ("seq".to_string(), "1".to_string(), "none".to_string());
        assert_eq!(curve_name(&[(&i, &one), (&l, &none), (&p, &seq)], &[&p, &i]), "seq, 1 interferer");
        assert_eq!(curve_name(&[(&l, &none)], &[&l]), "load=none");
        assert_eq!(curve_name(&[], &[]), "read latency");
    }
}
