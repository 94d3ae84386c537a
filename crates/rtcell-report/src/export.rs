//! Plain files beside `results.json` for people who plot with their own tools: a CSV per series (its
//! histogram), a `summary.csv` with every series' statistics, and a gnuplot script that draws each
//! histogram with a log count axis (seed 000 Fig. 3/4 style).
//!
//! Layout under the run directory:
//!
//! ```text
//! csv/summary.csv                     one row per series: suite, name, labels, unit, kind, stats, file
//! csv/<suite>/<n>-<name>-<labels>.csv  bucket_low, bucket_high, count (the series' unit)
//! plot.gp                             gnuplot plot.gp  ->  plots/<same names>.svg
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{ReportError, Results, Series};

/// What [`write_exports`] wrote, relative to the run directory.
#[derive(Debug, Default)]
pub struct Exported {
    pub summary: PathBuf,
    pub series_csvs: Vec<PathBuf>,
    pub gnuplot: PathBuf,
}

/// Writes `csv/summary.csv`, one histogram CSV per series that has a histogram, and `plot.gp`.
pub fn write_exports(results: &Results, dir: &Path) -> Result<Exported, ReportError> {
    let io = |p: &Path, e: std::io::Error| ReportError::Io { action: "write", path: p.to_path_buf(), source: e };
    let csv_err =
        |p: &Path, e: csv::Error| ReportError::Io { action: "write", path: p.to_path_buf(), source: e.into() };
    // Every file is created relative to the run directory's descriptor, never through a symbolic link
    // (a `--out` that already holds one at an output's name or on its path).
    let run = rtcell_host::outdir::RunDir::create(dir).map_err(|e| io(dir, e))?;
    let create = |rel: &Path| -> Result<(PathBuf, std::fs::File), ReportError> {
        let text = rel.to_str().ok_or_else(|| io(rel, std::io::Error::other("not UTF-8")))?;
        run.create_own(text).map_err(|e| io(&dir.join(rel), e))
    };
    let mut out = Exported { summary: PathBuf::from("csv/summary.csv"), ..Default::default() };
    let (summary_path, file) = create(&out.summary)?;
    let mut summary = csv::Writer::from_writer(file);
    summary
        .write_record([
            "suite",
            "series",
            "labels",
            "unit",
            "kind",
            "count",
            "min",
            "mean",
            "median",
            "p90",
            "p99",
            "p99.9",
            "p99.99",
            "max",
            "stddev",
            "errors",
            "histogram_file",
        ])
        .map_err(|e| csv_err(&summary_path, e))?;
    let mut plots = Vec::new();
    let mut taken: BTreeMap<PathBuf, usize> = BTreeMap::new();
    for suite in &results.suites {
        for (i, s) in suite.series.iter().enumerate() {
            let file = match &s.histogram {
                Some(h) if !h.counts.is_empty() => {
                    let rel = unique(&mut taken, Path::new("csv").join(slug(&suite.suite)).join(series_file(i, s)));
                    let (path, file) = create(&rel)?;
                    let mut w = csv::Writer::from_writer(file);
                    let unit = s.unit.as_str();
                    w.write_record([format!("bucket_low_{unit}"), format!("bucket_high_{unit}"), "count".into()])
                        .map_err(|e| csv_err(&path, e))?;
                    for (k, c) in h.counts.iter().enumerate() {
                        let lo = k as f64 * h.bucket_width;
                        w.write_record([fmt(lo), fmt(lo + h.bucket_width), c.to_string()])
                            .map_err(|e| csv_err(&path, e))?;
                    }
                    if h.overflows > 0 {
                        let lo = h.counts.len() as f64 * h.bucket_width;
                        w.write_record([fmt(lo), "inf".into(), h.overflows.to_string()])
                            .map_err(|e| csv_err(&path, e))?;
                    }
                    w.flush().map_err(|e| io(&path, e))?;
                    plots.push((rel.clone(), title(&suite.suite, s), format!("{} ({unit})", s.kind.as_str())));
                    out.series_csvs.push(rel.clone());
                    rel.display().to_string()
                }
                _ => String::new(),
            };
            let st = &s.stats;
            summary
                .write_record([
                    suite.suite.clone(),
                    s.name.clone(),
                    label_text(&s.labels),
                    s.unit.as_str().into(),
                    s.kind.as_str().into(),
                    st.count.to_string(),
                    fmt(st.min),
                    fmt(st.mean),
                    fmt(st.median),
                    fmt(st.p90),
                    fmt(st.p99),
                    fmt(st.p999),
                    fmt(st.p9999),
                    fmt(st.max),
                    fmt(st.stddev),
                    s.errors.to_string(),
                    file,
                ])
                .map_err(|e| csv_err(&summary_path, e))?;
        }
    }
    summary.flush().map_err(|e| io(&summary_path, e))?;
    out.gnuplot = PathBuf::from("plot.gp");
    let (gp_path, mut gp) = create(&out.gnuplot)?;
    gp.write_all(gnuplot_script(&plots).as_bytes()).map_err(|e| io(&gp_path, e))?;
    Ok(out)
}

/// A gnuplot script drawing each histogram CSV as steps with a log count axis, one SVG each.
fn gnuplot_script(plots: &[(PathBuf, String, String)]) -> String {
    let mut s = String::from(
        "# Histograms of this run, one SVG per series: gnuplot plot.gp  (writes plots/*.svg)\n\
         # Each CSV: bucket_low, bucket_high, count; the count axis is logarithmic, as in the seeds' figures.\n\
         set datafile separator ','\n\
         set terminal svg size 900,500 dynamic background '#ffffff'\n\
         set logscale y\n\
         set grid\n\
         set key off\n\
         set ylabel 'count (log)'\n\
         system 'mkdir -p plots'\n",
    );
    for (csv, title, xlabel) in plots {
        let stem = csv.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let suite =
            csv.parent().and_then(|p| p.file_name()).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let path = csv.display().to_string().replace('\'', "");
        s.push_str(&format!(
            "set output 'plots/{suite}-{stem}.svg'\nset title '{}' noenhanced\nset xlabel '{}' noenhanced\n\
             plot '{path}' every ::1 using 1:($3 > 0 ? $3 : 1/0) with steps lw 1.5\n",
            title.replace('\'', ""),
            xlabel.replace('\'', ""),
        ));
    }
    s.push_str("unset output\n");
    s
}

fn title(suite: &str, s: &Series) -> String {
    let labels = label_text(&s.labels);
    format!(
        "{suite}: {} ({}, {}){}",
        s.name,
        s.kind.as_str(),
        s.unit.as_str(),
        if labels.is_empty() { String::new() } else { format!(" {labels}") }
    )
}

fn label_text(labels: &BTreeMap<String, String>) -> String {
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

fn series_file(i: usize, s: &Series) -> String {
    let mut name = format!("{i:03}-{}", slug(&s.name));
    for (k, v) in &s.labels {
        name.push('-');
        name.push_str(&slug(&format!("{k}_{v}")));
    }
    name.truncate(120);
    name + ".csv"
}

/// A name safe in file names on every system: ASCII alphanumerics, `-`, `_`, `.`.
fn slug(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect()
}

/// Makes `p` unique among the files already written (a truncated name could repeat).
fn unique(taken: &mut BTreeMap<PathBuf, usize>, p: PathBuf) -> PathBuf {
    let n = taken.entry(p.clone()).or_insert(0);
    *n += 1;
    if *n == 1 {
        return p;
    }
    let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    p.with_file_name(format!("{stem}-{n}.csv"))
}

/// Shortest round-trip text of a float (CSV readers parse it exactly).
fn fmt(v: f64) -> String {
    format!("{v}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Histogram, Kind, Stats, Suite, Unit, labels};

    fn doc() -> Results {
        let host = rtcell_host::facts::HostFacts::collect(None);
        let mut r = Results::new("0.0.0", None, None, host);
        let mut lat = Series::from_samples(
            "latency",
            labels!("mode" => "poll", "cpu" => 1),
            Unit::Us,
            Kind::Latency,
            vec![1.0, 2.0, 2.5],
            0,
        );
        lat.histogram = Some(Histogram { bucket_width: 1.0, counts: vec![0, 1, 2], overflows: 1 });
        let plain = Series {
            name: "bytes/s".into(),
            labels: labels!("load" => "memcpy, 20 MiB"),
            unit: Unit::BytesPerS,
            kind: Kind::Throughput,
            stats: Stats { count: 1, ..Default::default() },
            histogram: None,
            errors: 0,
        };
        let mut s = Suite::new("latency", serde_json::json!({}));
        s.series = vec![lat.clone(), plain, lat];
        r.suites.push(s);
        r
    }

    #[test]
    fn every_series_gets_a_summary_row_and_each_histogram_a_csv_and_a_plot() {
        let dir = tempfile::tempdir().unwrap();
        let out = write_exports(&doc(), dir.path()).unwrap();
        let mut rd = csv::Reader::from_path(dir.path().join(&out.summary)).unwrap();
        let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(&rows[0][2], "cpu=1 mode=poll");
        assert_eq!(&rows[1][16], "", "no histogram, no file");
        // Two series with the same name and labels get two files.
        assert_eq!(out.series_csvs.len(), 2);
        assert_ne!(out.series_csvs[0], out.series_csvs[1]);
        assert_eq!(&rows[0][16], out.series_csvs[0].display().to_string());
        let h = std::fs::read_to_string(dir.path().join(&out.series_csvs[0])).unwrap();
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines[0], "bucket_low_us,bucket_high_us,count");
        assert_eq!(lines[2], "1,2,1");
        assert_eq!(lines[4], "3,inf,1", "overflows are the last row");
        let gp = std::fs::read_to_string(dir.path().join(&out.gnuplot)).unwrap();
        for f in &out.series_csvs {
            assert!(gp.contains(&format!("plot '{}'", f.display())), "{gp}");
        }
        assert!(gp.contains("set logscale y"));
    }

    #[test]
    fn links_already_in_the_directory_are_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = elsewhere.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("plot.gp")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("csv")).unwrap();
        assert!(write_exports(&doc(), dir.path()).is_err(), "a symlinked csv/ is refused");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 1, "nothing written into the link's target");
        std::fs::remove_file(dir.path().join("csv")).unwrap();
        write_exports(&doc(), dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep", "plot.gp written through its link");
        assert!(std::fs::read_to_string(dir.path().join("plot.gp")).unwrap().contains("gnuplot"));
    }

    #[test]
    fn the_gnuplot_script_draws_every_histogram() {
        // gnuplot comes with scripts/setup; in CI its absence is a failure, elsewhere a skip.
        let have = std::process::Command::new("gnuplot").arg("--version").output().is_ok();
        rtcell_testkit::require!(have, "gnuplot is not installed (scripts/setup installs gnuplot-nox)");
        let dir = tempfile::tempdir().unwrap();
        let out = write_exports(&doc(), dir.path()).unwrap();
        let o = std::process::Command::new("gnuplot").arg("plot.gp").current_dir(dir.path()).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let svgs: Vec<_> = std::fs::read_dir(dir.path().join("plots")).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(svgs.len(), out.series_csvs.len(), "{svgs:?}");
        for svg in svgs {
            let text = std::fs::read_to_string(&svg).unwrap();
            assert!(text.contains("<svg") && text.contains("<path"), "{}", svg.display());
        }
    }
}
