//! A comparison as text: both runs, the rules, the table of matched series, and what only one run has.

use super::*;

/// `key=value,key=value`.
pub fn labels_text(labels: &BTreeMap<String, String>) -> String {
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn side_text(side: &str, r: &RunFigures) -> String {
    format!(
        "{side}: {}  started {}  host {} ({}, {})  suites {}{}",
        r.name,
        r.started_at,
        r.hostname.as_deref().unwrap_or("?"),
        r.cpu_model,
        r.hypervisor.as_ref().map_or("bare metal".to_owned(), |h| format!("VM: {h}")),
        r.suites.join(","),
        if r.incomplete { "  [incomplete run]" } else { "" }
    )
}

impl Comparison {
    /// The comparison as text: both runs, the rules, a table of the matched series, the added and
    /// removed series, and the summary line.
    pub fn render_text(&self) -> String {
        let mut out = Vec::new();
        out.push(side_text("A", &self.a));
        out.push(side_text("B", &self.b));
        out.push(format!("noise: {}", self.rules.noise));
        out.push(format!("direction: {}", self.rules.direction));
        out.push(format!("verdict: {}", self.rules.verdict));
        out.push(format!("matching: {}", self.rules.matching));
        if !self.series.is_empty() {
            let max_head = if self.max_judged { "max Δ" } else { "max Δ (shown)" };
            let mut t = Table::new(&[
                "suite",
                "series",
                "labels",
                "unit",
                "median A",
                "median B",
                "median Δ",
                "p99.9 Δ",
                max_head,
                "verdict",
            ]);
            for s in &self.series {
                let verdict = if s.because.is_empty() {
                    s.verdict.as_str().to_owned()
                } else {
                    format!("{} ({})", s.verdict.as_str(), s.because.join(", "))
                };
                t.row(vec![
                    s.suite.clone(),
                    s.name.clone(),
                    labels_text(&s.labels),
                    s.unit.clone(),
                    crate::history::headline::fmt_value(s.median.a),
                    crate::history::headline::fmt_value(s.median.b),
                    s.median.text(),
                    s.p999.text(),
                    s.max.text(),
                    verdict,
                ]);
            }
            for col in 6..=8 {
                t.right_align(col);
            }
            out.push(t.render());
        }
        for (what, list) in [("added (only in B)", &self.added), ("removed (only in A)", &self.removed)] {
            if !list.is_empty() {
                out.push(format!("{what}:"));
                for s in list {
                    out.push(format!(
                        "  {} {} {} (median {} {})",
                        s.suite,
                        s.name,
                        labels_text(&s.labels),
                        crate::history::headline::fmt_value(s.median),
                        s.unit
                    ));
                }
            }
        }
        let s = &self.summary;
        out.push(format!(
            "summary: {} better, {} worse, {} within noise, {} changed, {} no data, {} added, {} removed",
            s.better, s.worse, s.within_noise, s.changed, s.no_data, s.added, s.removed
        ));
        out.join("\n")
    }
}
