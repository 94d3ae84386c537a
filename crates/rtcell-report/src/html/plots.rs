//! SVG plots drawn with `plotters`' SVG backend.
//!
//! Without the `ttf` feature plotters writes text as SVG `<text>` elements and leaves the font to the
//! browser, so nothing here needs a font file. Log and categorical axes are drawn on a linear coordinate
//! of the transformed value (log10, log2, category index) with tick positions and labels chosen here:
//! one chart type then serves every figure, and ticks fall on values a reader expects (decades, powers of
//! two bytes, the measured payload sizes). The legend has its own area right of the plot, so it never
//! hides data.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::ReportError;

/// Plot size in pixels (the page scales it down to the column width).
const WIDTH: u32 = 1000;
const HEIGHT: u32 = 430;
/// Width of the legend area right of the plot.
const LEGEND_WIDTH: u32 = 290;
/// Legend text is wrapped at this many characters.
const LEGEND_WRAP: usize = 40;

/// Colour-blind-safe colours (Okabe and Ito), darkest first; the last two are for a seventh and eighth line.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(150, 130, 20),
];

/// The colour of line `i` (colours repeat after eight lines; callers keep charts below that).
pub(super) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// How an axis maps values to positions.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Scale {
    Linear,
    /// Decades; values must be > 0.
    Log10,
    /// Powers of two, labelled as byte sizes (4K, 1M); values must be > 0.
    Log2Bytes,
    /// Evenly spaced categories; a value is the category's index.
    Categories(Vec<String>),
}

#[derive(Debug, Clone)]
pub(super) struct Axis {
    /// Axis title: quantity and unit.
    pub desc: String,
    pub scale: Scale,
    /// Range in data units (ignored for categories).
    pub lo: f64,
    pub hi: f64,
}

impl Axis {
    /// Position of a data value on the drawing coordinate; `None` where the scale has no place for it.
    fn t(&self, v: f64) -> Option<f64> {
        let p = match self.scale {
            Scale::Linear | Scale::Categories(_) => v,
            Scale::Log10 if v > 0.0 => v.log10(),
            Scale::Log2Bytes if v > 0.0 => v.log2(),
            _ => return None,
        };
        p.is_finite().then_some(p)
    }

    fn range(&self) -> (f64, f64) {
        if let Scale::Categories(c) = &self.scale {
            return (-0.5, c.len().max(1) as f64 - 0.5);
        }
        let (lo, hi) = (self.t(self.lo).unwrap_or(0.0), self.t(self.hi).unwrap_or(1.0));
        if hi > lo { (lo, hi) } else { (lo - 0.5, lo + 0.5) }
    }

    /// Tick positions on the drawing coordinate.
    fn ticks(&self) -> Vec<f64> {
        let (lo, hi) = self.range();
        match &self.scale {
            Scale::Categories(c) => (0..c.len()).map(|i| i as f64).collect(),
            Scale::Linear => {
                let step = nice_step((hi - lo) / 8.0);
                let first = (lo / step).ceil() as i64;
                let last = (hi / step).floor() as i64;
                (first..=last).map(|k| k as f64 * step).collect()
            }
            Scale::Log10 => {
                let decades: Vec<f64> = (lo.ceil() as i64..=hi.floor() as i64).map(|k| k as f64).collect();
                if decades.len() >= 4 {
                    return decades;
                }
                // Few decades: 1, 2, 5 of each.
                let mut t = Vec::new();
                for k in (lo.floor() as i64)..=(hi.ceil() as i64) {
                    for m in [1.0f64, 2.0, 5.0] {
                        let p = k as f64 + m.log10();
                        if p >= lo - 1e-9 && p <= hi + 1e-9 {
                            t.push(p);
                        }
                    }
                }
                t
            }
            Scale::Log2Bytes => {
                let (a, b) = (lo.ceil() as i64, hi.floor() as i64);
                let step = ((b - a) / 12 + 1).max(1);
                // Even exponents first (1K, 4K, 16K...) read better than odd ones.
                let start = if step % 2 == 0 && a % 2 != 0 { a + 1 } else { a };
                (start..=b).step_by(step as usize).map(|k| k as f64).collect()
            }
        }
    }

    /// The label of a tick at drawing position `p`.
    fn tick_label(&self, p: f64) -> String {
        match &self.scale {
            Scale::Categories(c) => {
                let i = p.round();
                if (p - i).abs() < 1e-6 && i >= 0.0 {
                    c.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
            Scale::Linear => trim_number(p),
            Scale::Log10 => compact(10f64.powf(p)),
            Scale::Log2Bytes => bytes_label(2f64.powf(p).round()),
        }
    }
}

/// The smallest 1-2-5 step at least `raw` (> 0).
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let e = raw.log10().floor();
    let base = 10f64.powf(e);
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * base).find(|&s| s >= raw * (1.0 - 1e-9)).unwrap_or(10.0 * base)
}

/// A number with at most six significant digits and no trailing zeros: 0.05, 12.5, 2000.
fn trim_number(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let digits = (5 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    let s = format!("{v:.digits$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if s == "-0" { "0".into() } else { s }
}

/// Log-axis labels: 0.01, 0.5, 20, 1000, 1e5.
fn compact(v: f64) -> String {
    if v >= 1e5 {
        let e = v.log10();
        if (e - e.round()).abs() < 1e-9 {
            return format!("1e{}", e.round());
        }
        let m = v / 10f64.powf(e.floor());
        return format!("{}e{}", trim_number(m), e.floor());
    }
    trim_number(v)
}

/// Byte sizes in powers of 1024: 512, 4K, 1M, 96M.
pub(super) fn bytes_label(v: f64) -> String {
    const UNITS: [(f64, &str); 3] = [(1024.0 * 1024.0 * 1024.0, "G"), (1024.0 * 1024.0, "M"), (1024.0, "K")];
    for (size, suffix) in UNITS {
        if v >= size {
            return format!("{}{suffix}", trim_number(v / size));
        }
    }
    trim_number(v)
}

/// One line of a chart. Points are in data units.
pub(super) struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    pub dashed: bool,
    pub markers: bool,
}

/// Single points of another platform, drawn as crosses.
pub(super) struct Marks {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
}

/// A labelled vertical marker (e.g. a cache size).
pub(super) struct Marker {
    pub x: f64,
    pub label: String,
}

pub(super) struct Chart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub lines: Vec<Line>,
    pub marks: Vec<Marks>,
    pub markers: Vec<Marker>,
}

fn plot_error<E: std::fmt::Display>(title: &str) -> impl Fn(E) -> ReportError + '_ {
    move |e| ReportError::Plot { figure: title.to_string(), detail: e.to_string() }
}

/// Draws `chart` as an SVG document (to be inlined in the page).
pub(super) fn render(chart: &Chart) -> Result<String, ReportError> {
    let err = plot_error(&chart.title);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(&err)?;
        let (plot_area, legend_area) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let (xr, yr) = (chart.x.range(), chart.y.range());
        let x_label = |p: &f64| chart.x.tick_label(*p);
        let y_label = |p: &f64| chart.y.tick_label(*p);
        let mut ctx = ChartBuilder::on(&plot_area)
            .caption(&chart.title, ("sans-serif", 17))
            .margin(8)
            .margin_right(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(Ticked::new(xr, chart.x.ticks()), Ticked::new(yr, chart.y.ticks()))
            .map_err(&err)?;
        ctx.configure_mesh()
            .x_desc(chart.x.desc.as_str())
            .y_desc(chart.y.desc.as_str())
            .x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(&err)?;

        let clamp_y = |y: f64| y.clamp(yr.0, yr.1);
        for m in &chart.markers {
            let Some(x) = chart.x.t(m.x).filter(|x| (xr.0..=xr.1).contains(x)) else { continue };
            let grey = RGBColor(120, 120, 120);
            ctx.draw_series(DashedLineSeries::new([(x, yr.0), (x, yr.1)], 6, 4, grey.stroke_width(1))).map_err(&err)?;
            let style = TextStyle::from(("sans-serif", 12).into_font())
                .color(&grey)
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Right, VPos::Bottom));
            // Just left of the line, reading upwards from below the top of the plot.
            let label = EmptyElement::at((x, yr.1)) + Text::new(m.label.clone(), (-3, 4), style);
            ctx.draw_series(std::iter::once(label)).map_err(&err)?;
        }
        for line in &chart.lines {
            let pts: Vec<(f64, f64)> = line
                .points
                .iter()
                .filter_map(|&(x, y)| Some((chart.x.t(x)?, clamp_y(chart.y.t(y)?))))
                .filter(|(x, _)| *x >= xr.0 && *x <= xr.1)
                .collect();
            let style = line.color.stroke_width(2);
            if line.dashed {
                ctx.draw_series(DashedLineSeries::new(pts.clone(), 7, 5, style)).map_err(&err)?;
            } else {
                ctx.draw_series(LineSeries::new(pts.clone(), style)).map_err(&err)?;
            }
            if line.markers {
                ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 3, line.color.filled()))).map_err(&err)?;
            }
        }
        for m in &chart.marks {
            let pts: Vec<(f64, f64)> =
                m.points.iter().filter_map(|&(x, y)| Some((chart.x.t(x)?, chart.y.t(y)?))).collect();
            ctx.draw_series(pts.iter().map(|&p| Cross::new(p, 6, m.color.stroke_width(2)))).map_err(&err)?;
        }
        legend(&legend_area, chart).map_err(&err)?;
        root.present().map_err(&err)?;
    }
    Ok(svg)
}

/// A linear coordinate with the tick positions given (plotters' own `WithKeyPoints` over `f64` has no
/// label formatting hook).
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ticked {
    fn new((lo, hi): (f64, f64), ticks: Vec<f64>) -> Ticked {
        Ticked { lo, hi, ticks }
    }
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, (a, b): (i32, i32)) -> i32 {
        let f = (v - self.lo) / (self.hi - self.lo);
        let f = if f.is_finite() { f.clamp(-1.0, 2.0) } else { 0.5 };
        a + (f64::from(b - a) * f).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Grid lines only at the ticks: no light lines in between.
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// The legend, in its own area: a swatch per line (solid or dashed, with its marker) and per set of marks.
fn legend(area: &Area<'_>, chart: &Chart) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let text = TextStyle::from(("sans-serif", 13).into_font()).color(&BLACK);
    let mut y = 40;
    let x0 = 6;
    let line_height = 16;
    let entries = chart.lines.iter().map(|l| (l.label.as_str(), l.color, Swatch::Line(l.dashed, l.markers)));
    let entries = entries.chain(chart.marks.iter().map(|m| (m.label.as_str(), m.color, Swatch::Cross)));
    for (label, color, swatch) in entries {
        if y > HEIGHT as i32 - line_height {
            area.draw(&Text::new("… (more in the table)", (x0, y), text.clone()))?;
            break;
        }
        let mid = y + 7;
        match swatch {
            Swatch::Line(dashed, markers) => {
                let style = color.stroke_width(2);
                if dashed {
                    area.draw(&PathElement::new(vec![(x0, mid), (x0 + 9, mid)], style))?;
                    area.draw(&PathElement::new(vec![(x0 + 15, mid), (x0 + 24, mid)], style))?;
                } else {
                    area.draw(&PathElement::new(vec![(x0, mid), (x0 + 24, mid)], style))?;
                }
                if markers {
                    area.draw(&Circle::new((x0 + 12, mid), 3, color.filled()))?;
                }
            }
            Swatch::Cross => area.draw(&Cross::new((x0 + 12, mid), 5, color.stroke_width(2)))?,
        }
        for part in wrap(label, LEGEND_WRAP) {
            area.draw(&Text::new(part, (x0 + 30, y), text.clone()))?;
            y += line_height;
        }
        y += 5;
    }
    Ok(())
}

enum Swatch {
    Line(bool, bool),
    Cross,
}

/// Splits `s` at spaces into lines of at most `width` characters (a longer word gets its own line).
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in s.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(scale: Scale, lo: f64, hi: f64) -> Axis {
        Axis { desc: "x".into(), scale, lo, hi }
    }

    #[test]
    fn log_ticks_fall_on_decades_and_label_back() {
        let a = axis(Scale::Log10, 0.5, 2e5);
        let t = a.ticks();
        assert_eq!(t, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let labels: Vec<String> = t.iter().map(|&p| a.tick_label(p)).collect();
        assert_eq!(labels, ["1", "10", "100", "1000", "10000", "1e5"]);
        // Less than three decades: 1, 2, 5.
        let narrow = axis(Scale::Log10, 0.1, 3.0);
        let l: Vec<String> = narrow.ticks().iter().map(|&p| narrow.tick_label(p)).collect();
        assert_eq!(l, ["0.1", "0.2", "0.5", "1", "2"]);
        assert_eq!(a.t(0.0), None);
        assert_eq!(a.t(-1.0), None);
    }

    #[test]
    fn byte_axis_and_categories() {
        let a = axis(Scale::Log2Bytes, 1024.0, 96.0 * 1024.0 * 1024.0);
        let labels: Vec<String> = a.ticks().iter().map(|&p| a.tick_label(p)).collect();
        assert_eq!(labels.first().map(String::as_str), Some("1K"));
        assert!(labels.contains(&"64M".to_string()) || labels.contains(&"16M".to_string()), "{labels:?}");
        assert!(labels.len() <= 14, "{labels:?}");
        let c = axis(Scale::Categories(vec!["0".into(), "64".into(), "1024".into()]), 0.0, 0.0);
        assert_eq!(c.range(), (-0.5, 2.5));
        assert_eq!(c.ticks(), vec![0.0, 1.0, 2.0]);
        assert_eq!(c.tick_label(2.0), "1024");
        assert_eq!(c.tick_label(1.5), "");
        assert_eq!(bytes_label(49152.0), "48K");
        assert_eq!(bytes_label(100.0), "100");
    }

    #[test]
    fn linear_ticks_are_round() {
        let a = axis(Scale::Linear, 0.0, 0.73);
        let t = a.ticks();
        assert_eq!(t.first(), Some(&0.0));
        assert!(t.len() >= 5 && t.len() <= 10, "{t:?}");
        let labels: Vec<String> = t.iter().map(|&p| a.tick_label(p)).collect();
        assert_eq!(labels[1], "0.1");
        assert_eq!(nice_step(0.07), 0.1);
        assert_eq!(nice_step(3.0), 5.0);
    }

    #[test]
    fn wraps_at_spaces() {
        assert_eq!(
            wrap("seed 000 Table I, STM32MP157 Jailhouse A7 cell", 20),
            ["seed 000 Table I,", "STM32MP157 Jailhouse", "A7 cell"]
        );
        assert_eq!(wrap("", 10), [""]);
    }

    #[test]
    fn renders_lines_marks_and_markers_as_svg_text() {
        let chart = Chart {
            title: "round trip & <size>".into(),
            x: axis(Scale::Categories(vec!["0".into(), "64".into()]), 0.0, 0.0),
            y: axis(Scale::Log10, 0.1, 200.0),
            lines: vec![Line {
                label: "thread median".into(),
                points: vec![(0.0, 0.18), (1.0, 0.2)],
                color: color(0),
                dashed: false,
                markers: true,
            }],
            marks: vec![Marks { label: "other platform".into(), points: vec![(0.0, 1.01)], color: color(1) }],
            markers: vec![Marker { x: 1.0, label: "L1d 48K".into() }],
        };
        let svg = render(&chart).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains("round trip &amp; &lt;size&gt;"));
        assert!(svg.contains("thread median") && svg.contains("other platform") && svg.contains("L1d 48K"));
        assert!(svg.contains("<polyline"), "the line is drawn");
        assert!(svg.contains("font-family=\"sans-serif\""), "text left to the browser's fonts");
    }
}
