//! HTML tables: a small builder, and the generic table of series that every suite can fall back on.

use maud::{Markup, html};

use super::{Page, distinct_labels, fmt_value, kind_text, labels_text, unit_text};
use crate::doc::Series;

/// A table with a header row; numeric cells are right-aligned so digits line up.
pub(super) struct Table {
    id: String,
    caption: String,
    headers: Vec<String>,
    rows: Vec<(Vec<String>, bool)>,
}

impl Table {
    pub(super) fn new(id: impl Into<String>, caption: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            id: id.into(),
            caption: caption.into(),
            headers: headers.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push((cells, false));
    }

    /// A row of figures from another platform, set apart in colour.
    pub(super) fn other_row(&mut self, cells: Vec<String>) {
        self.rows.push((cells, true));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub(super) fn render(&self, page: &mut Page) -> Markup {
        let number = page.next_table();
        html! {
            div.wide {
                // The caption as a paragraph, not <caption>: a narrow table would squeeze it into its width.
                p.caption { b { "Table " (number) ". " } (self.caption) }
                table id=(self.id) {
                    tr { @for h in &self.headers { th { (h) } } }
                    @for (cells, other) in &self.rows {
                        tr class=[other.then_some("other")] {
                            @for c in cells {
                                td class=[is_number(c).then_some("n")] { (c) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// "12", "-3.5", "1.2e3", "45%", "2.5x" and the "-" of a missing figure are numeric cells.
fn is_number(cell: &str) -> bool {
    let c = cell.trim();
    let core = c.strip_suffix('%').or_else(|| c.strip_suffix('x')).unwrap_or(c).trim_end();
    c == "-"
        || (!core.is_empty()
            && core.parse::<f64>().is_ok_and(f64::is_finite)
            && core.chars().next().is_some_and(|ch| ch.is_ascii_digit() || ch == '-' || ch == '+' || ch == '.'))
}

/// Every series as one row: name, labels, unit, kind, count and the summary figures. Labels common to all
/// rows go into the caption, so each row shows only what sets it apart.
pub(super) fn series_table(id: &str, what: &str, series: &[&Series], page: &mut Page) -> Markup {
    let common = super::common_labels(series);
    let caption = if common.is_empty() || series.len() < 2 {
        format!("{what}: figures in each series' unit.")
    } else {
        format!("{what}: figures in each series' unit; all rows: {}.", labels_text(common.iter().copied()))
    };
    let mut t = Table::new(
        id,
        caption,
        &["series", "labels", "unit", "kind", "count", "min", "median", "mean", "p99", "p99.9", "max", "errors"],
    );
    for s in series {
        let st = &s.stats;
        let v = |x: f64| if st.count == 0 { "-".to_string() } else { fmt_value(x, s.unit) };
        let own = distinct_labels(s, &common);
        t.row(vec![
            s.name.clone(),
            if own == s.name { String::new() } else { own },
            unit_text(s.unit).into(),
            kind_text(s.kind).into(),
            st.count.to_string(),
            v(st.min),
            v(st.median),
            v(st.mean),
            v(st.p99),
            v(st.p999),
            v(st.max),
            s.errors.to_string(),
        ]);
    }
    t.render(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_cells() {
        for s in ["1", "-3.5", "1.2e3", "45%", "2.5x", "-", "0.180"] {
            assert!(is_number(s), "{s}");
        }
        for s in ["", "thread", "cell=kvm", "inf", "NaN", "1.2 ms"] {
            assert!(!is_number(s), "{s}");
        }
    }

    #[test]
    fn table_escapes_and_aligns() {
        let mut t = Table::new("t", "a <caption>", &["name", "value"]);
        t.row(vec!["<script>".into(), "1.5".into()]);
        t.other_row(vec!["published".into(), "2".into()]);
        let html = t.render(&mut Page::default()).into_string();
        assert!(html.contains("&lt;script&gt;") && !html.contains("<script>"), "{html}");
        assert!(html.contains(r#"<td class="n">1.5</td>"#), "{html}");
        assert!(html.contains(r#"<tr class="other">"#), "{html}");
        assert!(html.contains("Table 1. "), "{html}");
    }
}
