//! Human-readable tables for the terminal.
//!
//! A thin wrapper over `comfy-table` (built without its terminal feature): it never asks the terminal for
//! its width, so rows are never wrapped or cut — a results table pasted into an issue or a log must carry
//! every digit. Columns whose cells are all numbers are right-aligned so that digits line up.

use comfy_table::{CellAlignment, ContentArrangement, presets};

/// A table with a header row. Build it with [`Table::row`], print [`Table::render`].
///
/// ```
/// use rtcell_report::table::{Table, fmt_us};
/// let mut t = Table::new(&["series", "median us"]);
/// t.row(vec!["loopback_rtt".into(), fmt_us(81.0)]);
/// assert!(t.render().contains("0.081"));
/// ```
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    forced_right: Vec<usize>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table { headers: headers.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new(), forced_right: Vec::new() }
    }

    /// The table of a [`Grid`](crate::columns::Grid) (the columns the HTML report shows too).
    pub fn of(grid: &crate::columns::Grid) -> Table {
        let mut t = Table::new(&grid.headers);
        for r in &grid.rows {
            t.row(r.clone());
        }
        t
    }

    /// Appends a row. Missing cells are left blank; extra cells get a column without a header.
    pub fn row(&mut self, cells: Vec<String>) -> &mut Table {
        self.rows.push(cells);
        self
    }

    /// Right-aligns column `col` even if not every cell in it is a plain number (e.g. "1.2 ms").
    pub fn right_align(&mut self, col: usize) -> &mut Table {
        self.forced_right.push(col);
        self
    }

    /// Number of rows, header excluded.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, lines separated by `\n`, without a trailing newline.
    pub fn render(&self) -> String {
        let mut t = comfy_table::Table::new();
        t.load_preset(presets::UTF8_BORDERS_ONLY)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(self.headers.clone());
        for row in &self.rows {
            t.add_row(row.clone());
        }
        let columns = self.rows.iter().map(Vec::len).chain([self.headers.len()]).max().unwrap_or(0);
        for col in 0..columns {
            if (self.forced_right.contains(&col) || self.is_numeric_column(col))
                && let Some(c) = t.column_mut(col)
            {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        t.to_string()
    }

    /// A column is numeric when it has at least one number and every other cell is blank or a
    /// placeholder "-".
    fn is_numeric_column(&self, col: usize) -> bool {
        let mut any = false;
        for cell in self.rows.iter().filter_map(|r| r.get(col)) {
            let cell = cell.trim();
            if is_number(cell) {
                any = true;
            } else if !(cell.is_empty() || cell == "-") {
                return false;
            }
        }
        any
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

/// "12", "-3.5", "1.2e3", "45%" and "2.5x" count as numbers (a percentage or a ratio is still a number
/// to line up).
fn is_number(cell: &str) -> bool {
    let core = cell.strip_suffix('%').or_else(|| cell.strip_suffix('x')).unwrap_or(cell);
    !core.is_empty()
        && core.parse::<f64>().is_ok_and(f64::is_finite)
        && core.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+' || c == '.')
}

/// Nanoseconds shown as microseconds with three decimals: `fmt_us(1234.0) == "1.234"`.
/// Non-finite values (no data) show as "-".
pub fn fmt_us(ns: f64) -> String {
    fixed(ns / 1000.0, 3)
}

/// Nanoseconds with one decimal: `fmt_ns(81.25) == "81.2"`. Non-finite values show as "-".
pub fn fmt_ns(ns: f64) -> String {
    fixed(ns, 1)
}

/// Fixed-point formatting that never prints "NaN" or a negative zero ("-0.000").
fn fixed(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "-".to_owned();
    }
    let s = format!("{v:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_owned(),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_us(1234.0), "1.234");
        assert_eq!(fmt_us(1234.5678), "1.235");
        assert_eq!(fmt_us(80.0), "0.080");
        assert_eq!(fmt_us(-0.1), "0.000");
        assert_eq!(fmt_us(f64::NAN), "-");
        assert_eq!(fmt_ns(81.25), "81.2");
        assert_eq!(fmt_ns(1_000_000.0), "1000000.0");
        assert_eq!(fmt_ns(-12.34), "-12.3");
    }

    #[test]
    fn numeric_columns_are_right_aligned_and_nothing_is_cut() {
        let mut t = Table::new(&["series", "median us", "p99 us"]);
        t.row(vec!["thread rtt".into(), fmt_us(81.0), fmt_us(123.0)]);
        t.row(vec!["kvm rtt with a rather long name".into(), fmt_us(95_000.0), "-".into()]);
        let long = "x".repeat(300);
        t.row(vec![long.clone(), fmt_us(1.0), fmt_us(1_234_567.0)]);
        let out = t.render();
        assert!(out.contains(&long), "no truncation");
        let line = out.lines().find(|l| l.contains("thread rtt")).unwrap();
        // Right alignment: the short number is padded on the left, so it ends where the long one does.
        let other = out.lines().find(|l| l.contains("kvm rtt")).unwrap();
        assert_eq!(line.find("0.081").unwrap() + 5, other.find("95.000").unwrap() + 6);
        // The text column is left-aligned.
        assert!(line.contains("│ thread rtt "), "{out}");
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn number_detection() {
        for s in ["1", "-3.5", "1.2e3", "45%", "2.5x", ".5"] {
            assert!(is_number(s), "{s}");
        }
        for s in ["", "x", "%", "inf", "NaN", "thread", "1.2 ms"] {
            assert!(!is_number(s), "{s}");
        }
    }
}
