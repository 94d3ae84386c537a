//! Histogram figures: the recorded histograms of several series overlaid, count per bucket on a log axis
//! (seed 000 Fig. 3/4), so that the rare slow values of the tail stay visible next to the body.

use maud::{Markup, html};

use super::plots::{self, Axis, Chart, Line, Scale};
use super::{Page, common_labels, distinct_labels, figure, fmt_value, kind_text, labels_text, unit_text};
use crate::doc::{Histogram, Series};
use crate::error::ReportError;

/// At most this many buckets are drawn per series; finer histograms are merged (summed) to fit.
const MAX_DRAWN_BUCKETS: usize = 300;
/// At most this many series are overlaid in one figure.
pub(super) const MAX_OVERLAYS: usize = 8;
/// Bottom of the log count axis; empty buckets are drawn on it.
const COUNT_FLOOR: f64 = 0.7;

/// The part of a histogram that a figure shows: the x axis ends at twice the p99.9 (or the last non-empty
/// bucket, if sooner), so the body and the near tail stay readable on a linear axis; the rarest values
/// beyond it (on a virtual host, preemptions of milliseconds) are counted in the caption, with the maximum.
fn visible_end(s: &Series, h: &Histogram) -> f64 {
    let last = h.counts.iter().rposition(|&c| c > 0).map_or(0.0, |i| (i + 1) as f64 * h.bucket_width);
    let tail = 2.0 * s.stats.p999 + h.bucket_width;
    if s.stats.p999 > 0.0 { last.min(tail) } else { last }
}

/// Buckets up to `x_end`, merged in groups so that at most [`MAX_DRAWN_BUCKETS`] remain: (width, counts).
fn drawn_buckets(h: &Histogram, x_end: f64) -> (f64, Vec<u64>) {
    let n = ((x_end / h.bucket_width).ceil() as usize).min(h.counts.len());
    let group = n.div_ceil(MAX_DRAWN_BUCKETS).max(1);
    let counts = h.counts[..n].chunks(group).map(|c| c.iter().sum()).collect();
    (h.bucket_width * group as f64, counts)
}

/// The outline of a histogram as a step line.
fn step_points(width: f64, counts: &[u64]) -> Vec<(f64, f64)> {
    let mut pts = Vec::with_capacity(counts.len() * 2 + 2);
    for (i, &c) in counts.iter().enumerate() {
        let y = (c as f64).max(COUNT_FLOOR);
        pts.push((i as f64 * width, y));
        pts.push(((i + 1) as f64 * width, y));
    }
    pts
}

/// Values a figure leaves out (beyond its x axis, or beyond the histogram itself).
fn beyond(h: &Histogram, x_end: f64) -> u64 {
    let n = ((x_end / h.bucket_width).ceil() as usize).min(h.counts.len());
    h.counts[n..].iter().sum::<u64>() + h.overflows
}

/// A figure overlaying the histograms of `series` of the first one's unit and kind (others, and those
/// without a histogram, are left out). `title` heads the plot (keep it short); `what` names the quantity
/// and its conditions in the caption.
/// `what` names the quantity for the title and caption, e.g. "Execution time of one controller step, f64".
/// `None` when no series has a histogram with counts.
///
/// Each line is named by the labels in `legend_keys` (`key=value`), or, when that is empty, by the labels
/// that set the series apart from the others.
pub(super) fn figure_of(
    id: &str,
    title: &str,
    what: &str,
    series: &[&Series],
    legend_keys: &[&str],
    page: &mut Page,
) -> Result<Option<Markup>, ReportError> {
    let Some((unit, kind)) = series.first().map(|s| (s.unit, s.kind)) else { return Ok(None) };
    let with: Vec<(&Series, &Histogram)> = series
        .iter()
        .filter(|s| s.unit == unit && s.kind == kind)
        .filter_map(|s| s.histogram.as_ref().filter(|h| h.counts.iter().any(|&c| c > 0)).map(|h| (*s, h)))
        .take(MAX_OVERLAYS)
        .collect();
    if with.is_empty() {
        return Ok(None);
    }
    let x_end = with.iter().map(|(s, h)| visible_end(s, h)).fold(0.0, f64::max);
    let x_end = if x_end > 0.0 { x_end } else { with[0].1.bucket_width };
    let shown: Vec<&Series> = with.iter().map(|(s, _)| *s).collect();
    let common = common_labels(&shown);
    let mut lines = Vec::new();
    let mut y_max: f64 = 1.0;
    let mut widths = Vec::new();
    let mut cut = Vec::new();
    for (i, (s, h)) in with.iter().enumerate() {
        let (w, counts) = drawn_buckets(h, x_end);
        y_max = y_max.max(counts.iter().copied().max().unwrap_or(0) as f64);
        widths.push(w);
        let label = if legend_keys.is_empty() {
            distinct_labels(s, &common)
        } else {
            labels_text(s.labels.iter().filter(|(k, _)| legend_keys.contains(&k.as_str())))
        };
        let out = beyond(h, x_end);
        if out > 0 {
            cut.push(format!("{label}: {out} (max {} {})", fmt_value(s.stats.max, s.unit), unit_text(s.unit)));
        }
        lines.push(Line {
            label: format!("{label} (n={})", s.stats.count),
            points: step_points(w, &counts),
            color: plots::color(i),
            dashed: false,
            markers: false,
        });
    }
    let kind = kind_text(kind);
    let chart = Chart {
        title: format!("{title} ({}, {})", kind, unit_text(unit)),
        x: Axis { desc: format!("{kind} ({})", unit_text(unit)), scale: Scale::Linear, lo: 0.0, hi: x_end },
        y: Axis { desc: "count per bucket (log)".into(), scale: Scale::Log10, lo: COUNT_FLOOR, hi: y_max * 2.0 },
        lines,
        marks: Vec::new(),
        markers: Vec::new(),
    };
    let svg = plots::render(&chart)?;
    let uniform = widths.windows(2).all(|w| (w[0] - w[1]).abs() <= 1e-12 * w[0].abs());
    let bucket = if uniform {
        format!("{} {}", fmt_width(widths[0]), unit_text(unit))
    } else {
        "as listed per series".to_string()
    };
    let n = page.next_figure();
    let left_out = series.len() - with.len();
    Ok(Some(figure(
        id,
        n,
        svg,
        html! {
            (what) ": histogram of every measured value, one line per series; " (kind) " in " (unit_text(unit))
            " on the x axis, the count of values per bucket (" (bucket) ") on a log axis, empty buckets on its floor."
            @if !common.is_empty() { " All series: " (labels_text(common.iter().copied())) "." }
            @if cut.is_empty() {
                " Every value lies within the x axis."
            } @else {
                " Beyond the x axis (2 x p99.9): " (cut.join("; ")) "."
            }
            @if left_out > 0 { " " (left_out) " series without a histogram, of another unit or kind, or beyond " (MAX_OVERLAYS) " per figure, are in the tables only." }
        },
    )))
}

/// A bucket width without float noise: 0.05, 0.5, 10.
fn fmt_width(w: f64) -> String {
    let s = format!("{w:.9}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Figures for series that no special view took: per series name and unit, one overlay when it holds at
/// most [`MAX_OVERLAYS`] histograms, else one per value of a label that splits it into such groups (at
/// most `max_figures` of them). Larger sets are left to the table, and the note says so.
pub(super) fn generic_figures(
    id: &str,
    series: &[&Series],
    max_figures: usize,
    page: &mut Page,
) -> Result<Markup, ReportError> {
    let mut groups: Vec<(String, Vec<&Series>)> = Vec::new();
    for s in series.iter().filter(|s| s.histogram.is_some() && s.stats.count > 0) {
        let key = format!("{} ({})", s.name, s.unit);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(s),
            None => groups.push((key, vec![s])),
        }
    }
    let mut parts = Vec::new();
    let mut skipped = Vec::new();
    let mut made = 0;
    for (gi, (_, group)) in groups.iter().enumerate() {
        let name = &group[0].name;
        let facets =
            if group.len() <= MAX_OVERLAYS { Some(vec![(String::new(), group.clone())]) } else { facet(group) };
        match facets {
            Some(f) if made + f.len() <= max_figures => {
                for (fi, (facet_label, members)) in f.iter().enumerate() {
                    let what = if facet_label.is_empty() { name.clone() } else { format!("{name}, {facet_label}") };
                    if let Some(m) = figure_of(&format!("{id}-hist-{gi}-{fi}"), &what, &what, members, &[], page)? {
                        parts.push(m);
                        made += 1;
                    }
                }
            }
            _ => skipped.push(format!("{name} ({} series)", group.len())),
        }
    }
    Ok(html! {
        @for p in &parts { (p) }
        @if !skipped.is_empty() {
            p.note { "Histograms not drawn, too many series to overlay: " (skipped.join(", ")) "; their figures are in the table." }
        }
    })
}

/// Splits a group by the label whose values give groups of at most [`MAX_OVERLAYS`], with the fewest
/// groups; `None` when no label does.
fn facet<'a>(group: &[&'a Series]) -> Option<Vec<(String, Vec<&'a Series>)>> {
    let keys: Vec<&String> = group[0].labels.keys().collect();
    let mut best: Option<Vec<(String, Vec<&Series>)>> = None;
    for key in keys {
        let mut split: Vec<(String, Vec<&Series>)> = Vec::new();
        for s in group {
            let v = s.labels.get(key).cloned().unwrap_or_default();
            let label = format!("{key}={v}");
            match split.iter_mut().find(|(k, _)| *k == label) {
                Some((_, m)) => m.push(s),
                None => split.push((label, vec![s])),
            }
        }
        let fits = split.len() > 1 && split.iter().all(|(_, m)| m.len() <= MAX_OVERLAYS);
        if fits && best.as_ref().is_none_or(|b| split.len() < b.len()) {
            best = Some(split);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::{Kind, Unit};

    fn series(name: &str, labels: &[(&str, &str)], samples: Vec<f64>) -> Series {
        Series::from_samples(name, crate::labels(labels), Unit::Us, Kind::Latency, samples, 0)
    }

    #[test]
    fn buckets_are_merged_to_a_drawable_number_and_nothing_is_lost() {
        let h = Histogram { bucket_width: 0.01, counts: vec![1; 2000], overflows: 3 };
        let (w, counts) = drawn_buckets(&h, 20.0);
        assert!(counts.len() <= MAX_DRAWN_BUCKETS);
        assert!((w - 0.07).abs() < 1e-12, "{w}");
        assert_eq!(counts.iter().sum::<u64>(), 2000);
        assert_eq!(beyond(&h, 20.0), 3);
        let (_, part) = drawn_buckets(&h, 5.0);
        assert_eq!(part.iter().sum::<u64>() + beyond(&h, 5.0), 2003);
    }

    #[test]
    fn figure_names_what_lies_beyond_the_axis() {
        let mut body: Vec<f64> = (0..10_000).map(|i| 10.0 + (i % 100) as f64 * 0.01).collect();
        body.push(5000.0);
        let a = series("latency", &[("mode", "poll"), ("cpu", "1")], body);
        let b = series("latency", &[("mode", "nanosleep"), ("cpu", "1")], vec![50.0, 51.0, 52.0]);
        let none = Series { histogram: None, ..series("latency", &[("mode", "x"), ("cpu", "1")], vec![1.0]) };
        let mut page = Page::default();
        let m = figure_of("f", "Latency", "Activation latency", &[&a, &b, &none], &[], &mut page)
            .unwrap()
            .unwrap()
            .into_string();
        assert!(m.contains("Fig. 1."), "{m}");
        assert!(m.contains("mode=poll (n=10001)") && m.contains("mode=nanosleep (n=3)"));
        assert!(m.contains("All series: cpu=1."), "{m}");
        assert!(m.contains("mode=poll: 1 (max 5000.000 µs)"), "{m}");
        assert!(m.contains("1 series without a histogram"), "{m}");
        assert!(figure_of("g", "x", "x", &[&none], &["mode"], &mut page).unwrap().is_none());
    }

    #[test]
    fn large_groups_are_split_by_a_label_or_left_to_the_table() {
        let many: Vec<Series> = (0..12)
            .map(|i| {
                let p = if i % 2 == 0 { "same-cpu" } else { "cross-cpu" };
                series("itc_rtt", &[("placement", p), ("mechanism", &format!("m{}", i / 2))], vec![1.0, 2.0])
            })
            .collect();
        let refs: Vec<&Series> = many.iter().collect();
        let f = facet(&refs).unwrap();
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|(k, m)| k.starts_with("placement=") && m.len() == 6));
        let mut page = Page::default();
        let m = generic_figures("s", &refs, 6, &mut page).unwrap().into_string();
        assert_eq!(page.figures, 2, "{m}");
        let m = generic_figures("s", &refs, 1, &mut page).unwrap().into_string();
        assert!(m.contains("too many series to overlay: itc_rtt (12 series)"), "{m}");
    }
}
