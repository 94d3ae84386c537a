//! The HTML report of a results document: one self-contained page, `report.html`.
//!
//! Everything is inline — the CSS, the SVG plots — and there is no script and no external resource, so the
//! page reads the same offline, archived with the results, or printed (a print stylesheet drops the
//! navigation and keeps figures whole on a page). Host facts and warnings come first, because they change
//! how every figure must be read; then each suite: its tables in the shape of the seed papers, its plots,
//! the published figures of other platforms beside ours, and a generic table for whatever series no
//! special view took, so a suite or series this code does not know is still shown in full.

mod control;
mod hist;
mod host;
mod loopback;
mod membench;
mod plots;
mod reference;
mod suites;
mod tables;
mod timing;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::doc::{Kind, Results, Series, Unit};
use crate::error::ReportError;

/// File name of the report inside a results directory, beside `results.json`.
pub const REPORT_FILE: &str = "report.html";

/// The report of `results` as a complete HTML document.
pub fn render_html(results: &Results) -> Result<String, ReportError> {
    let mut page = Page::default();
    let mut bodies = Vec::with_capacity(results.suites.len());
    let mut ids: Vec<String> = Vec::new();
    for suite in &results.suites {
        let id = unique_id(&mut ids, &format!("suite-{}", slug(&suite.suite)));
        bodies.push((id.clone(), suites::render(suite, &id, &mut page)?));
    }
    let title = title(results);
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(CSS)) }
            }
            body {
                header id="top" {
                    h1 { (title) }
                    @if results.incomplete {
                        p.incomplete id="incomplete" {
                            "Incomplete run: it was cut short (Ctrl-C or a failure). Every figure covers only what was \
                             measured until then."
                        }
                    }
                    nav {
                        a href="#host" { "Host and warnings" }
                        @for (id, (suite, _)) in ids.iter().zip(results.suites.iter().zip(&bodies)) {
                            " · " a href={ "#" (id) } { (suite.suite) }
                        }
                    }
                }
                (host::render(results))
                @for (_, body) in &bodies { (body) }
                footer {
                    "Written by rtcell " (results.rtcell.version)
                    @if let Some(g) = &results.rtcell.git { " (" (g) ")" }
                    " from a " (crate::doc::SCHEMA_ID) " document. Figures of other platforms are quoted from \
                     their publications (reference/published.csv) and were not measured here."
                }
            }
        }
    };
    Ok(markup.into_string())
}

/// Renders the report and writes it to `dir/report.html`; returns the file's path.
pub fn write_report(results: &Results, dir: &Path) -> Result<PathBuf, ReportError> {
    let path = dir.join(REPORT_FILE);
    write_report_file(results, &path)?;
    Ok(path)
}

/// Renders the report and writes it to `path`, atomically: a reader never sees half a page, and an older
/// page survives a failed write.
pub fn write_report_file(results: &Results, path: &Path) -> Result<(), ReportError> {
    let text = render_html(results)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let io = |action: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| ReportError::Io { action, path, source }
    };
    // Readable as any new file would be (0666 less the umask), not tempfile's private 0600.
    let mut temp = tempfile::Builder::new()
        .prefix(".report.")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(io("create a temporary report file in", dir))?;
    temp.write_all(text.as_bytes()).map_err(io("write the temporary report file in", dir))?;
    temp.as_file().sync_all().map_err(io("sync the temporary report file in", dir))?;
    temp.persist(path).map_err(|e| ReportError::Io {
        action: "rename the temporary report file onto",
        path: path.to_owned(),
        source: e.error,
    })?;
    Ok(())
}

/// Running numbers of the page's figures and tables.
#[derive(Default)]
struct Page {
    figures: usize,
    tables: usize,
}

impl Page {
    fn next_figure(&mut self) -> usize {
        self.figures += 1;
        self.figures
    }

    fn next_table(&mut self) -> usize {
        self.tables += 1;
        self.tables
    }
}

fn title(results: &Results) -> String {
    let names: Vec<&str> = results.suites.iter().map(|s| s.suite.as_str()).collect();
    let what = if names.is_empty() { "no suites".to_string() } else { names.join(", ") };
    format!("rtcell results: {what} ({})", results.started_at)
}

/// A name reduced to characters that are safe in an HTML id: ASCII letters, digits and '-'.
fn slug(s: &str) -> String {
    let s: String = s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    if s.is_empty() { "x".into() } else { s }
}

/// `base`, or `base-2`, `base-3`... when already taken (a document may hold the same suite twice).
fn unique_id(taken: &mut Vec<String>, base: &str) -> String {
    let mut id = base.to_string();
    let mut n = 1;
    while taken.contains(&id) {
        n += 1;
        id = format!("{base}-{n}");
    }
    taken.push(id.clone());
    id
}

/// A unit as shown on the page.
fn unit_text(unit: Unit) -> &'static str {
    match unit {
        Unit::Ns => "ns",
        Unit::Us => "µs",
        Unit::Cycles => "cycles",
        Unit::BytesPerS => "MB/s",
        Unit::Count => "count",
        Unit::Ratio => "ratio",
    }
}

/// What a kind of series measures, in words.
fn kind_text(kind: Kind) -> &'static str {
    match kind {
        Kind::RoundTrip => "round trip",
        Kind::OneWay => "one way",
        Kind::Latency => "latency (one way)",
        Kind::ExecTime => "execution time",
        Kind::Period => "period",
        Kind::Throughput => "throughput",
        Kind::Count => "count",
    }
}

use crate::columns::fmt_value;

/// A series' value of label `key`.
fn label<'a>(s: &'a Series, key: &str) -> Option<&'a str> {
    s.labels.get(key).map(String::as_str)
}

/// A series' label parsed as a number.
fn label_num(s: &Series, key: &str) -> Option<f64> {
    label(s, key).and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| v.is_finite())
}

/// `key=value` pairs, comma-separated.
fn labels_text<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> String {
    pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// Labels whose value is the same in every series (the conditions a figure or table shares).
fn common_labels<'a>(series: &[&'a Series]) -> Vec<(&'a String, &'a String)> {
    let Some(first) = series.first() else { return Vec::new() };
    first.labels.iter().filter(|(k, v)| series.iter().all(|s| s.labels.get(*k) == Some(*v))).collect()
}

/// What tells `s` apart from the other series: its labels that are not common to all, or its name.
fn distinct_labels(s: &Series, common: &[(&String, &String)]) -> String {
    let own = labels_text(s.labels.iter().filter(|(k, _)| !common.iter().any(|(ck, _)| ck == k)));
    if own.is_empty() { s.name.clone() } else { own }
}

/// A figure: the SVG and a caption that says what it shows.
fn figure(id: &str, number: usize, svg: String, caption: Markup) -> Markup {
    html! {
        figure id=(id) {
            (PreEscaped(svg))
            figcaption { b { "Fig. " (number) ". " } (caption) }
        }
    }
}

const CSS: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; margin: 0 auto; max-width: 1180px;
  padding: 0 16px 32px; color: #1b1b1b; background: #fff; line-height: 1.4; }
h1 { font-size: 1.5em; margin: 0.6em 0 0.3em; }
h2 { font-size: 1.25em; border-bottom: 2px solid #3d5a80; padding-bottom: 2px; margin-top: 1.6em; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.4em; }
nav { font-size: 0.95em; margin-bottom: 0.6em; }
nav a, a { color: #1a4f8a; }
table { border-collapse: collapse; margin: 0 0 1em; font-size: 0.88em; }
p.caption { font-size: 0.88em; margin: 0.8em 0 0.2em; color: #333; }
th, td { border: 1px solid #c8c8c8; padding: 2px 6px; vertical-align: top; }
th { background: #eef3f8; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.l { font-size: 0.92em; color: #333; }
tr.other td { color: #6a4a00; background: #fffaf0; }
.wide { overflow-x: auto; }
figure { margin: 1em 0 1.4em; }
figure svg { width: 100%; height: auto; display: block; border: 1px solid #e2e2e2; }
figcaption { font-size: 0.9em; color: #333; margin-top: 4px; }
.warnings { border: 2px solid #d55e00; background: #fff4ec; padding: 6px 12px; margin: 0.6em 0 1em; }
.warnings h2 { border: 0; margin: 0.2em 0; color: #a33f00; }
.warnings li { margin: 0.2em 0; }
.incomplete { border: 2px solid #b00020; background: #ffecee; padding: 6px 12px; font-weight: 600; }
.flag { color: #a33f00; font-weight: 600; }
.note { font-size: 0.9em; color: #444; }
code { font-size: 0.9em; word-break: break-all; }
footer { margin-top: 2em; font-size: 0.85em; color: #555; border-top: 1px solid #ccc; padding-top: 6px; }
@media print {
  @page { margin: 14mm; }
  body { max-width: none; padding: 0; font-size: 10pt; }
  nav { display: none; }
  a { color: inherit; text-decoration: none; }
  h2 { break-after: avoid; page-break-after: avoid; }
  h3 { break-after: avoid; page-break-after: avoid; }
  figure, .warnings { break-inside: avoid; page-break-inside: avoid; }
  p.caption { break-after: avoid; page-break-after: avoid; }
  tr { break-inside: avoid; page-break-inside: avoid; }
  figure svg { border: 0; }
  .wide { overflow: visible; }
  th { background: #eee !important; -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_safe_and_unique() {
        assert_eq!(slug("loopback"), "loopback");
        assert_eq!(slug("My Suite/<x>"), "my-suite--x-");
        assert_eq!(slug(""), "x");
        let mut taken = Vec::new();
        assert_eq!(unique_id(&mut taken, "suite-c2c"), "suite-c2c");
        assert_eq!(unique_id(&mut taken, "suite-c2c"), "suite-c2c-2");
        assert_eq!(unique_id(&mut taken, "suite-c2c"), "suite-c2c-3");
    }

    #[test]
    fn values_format_per_unit() {
        assert_eq!(fmt_value(0.18, Unit::Us), "0.180");
        assert_eq!(fmt_value(29.44, Unit::Ns), "29.4");
        assert_eq!(fmt_value(517.1e6, Unit::BytesPerS), "517.1");
        assert_eq!(fmt_value(12.0, Unit::Count), "12");
        assert_eq!(fmt_value(-0.0001, Unit::Us), "0.000");
        assert_eq!(fmt_value(f64::NAN, Unit::Us), "-");
    }
}
