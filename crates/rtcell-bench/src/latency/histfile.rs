//! cyclictest's output layouts, so that scripts written for cyclictest (OSADL's latency plots, gnuplot
//! recipes, CI checks) read rtcell's figures unchanged, and the reading side of both for cyclictest's own
//! output.
//!
//! The histogram text is what `cyclictest -h N` prints: `# Histogram`, then one line per microsecond
//! bucket, `%06d` bucket followed by the `%06lu` count of each thread separated by tabs; then the trailer
//! lines `# Total:` (`%09llu` per thread), `# Min Latencies:`, `# Avg Latencies:`, `# Max Latencies:`,
//! `# Histogram Overflows:` (`%05lu` per thread), `# Histogram Overflow at cycle number:` and one
//! `# Thread N:` line listing the cycle numbers of the first N overflows (`# %05lu others` for the rest),
//! and an empty line. Values are whole microseconds, truncated, as cyclictest counts them; a value of N
//! microseconds or more is an overflow. The JSON is the layout of `cyclictest --json=FILE`.

use std::collections::BTreeMap;
use std::io::{self, Write};

/// What cyclictest keeps per measuring thread; here, per measured series.
#[derive(Debug, Clone, PartialEq)]
pub struct HistColumn {
    /// What the column is (e.g. "poll thread cell"); the JSON carries it as an extra `label` key.
    pub label: String,
    /// Count per microsecond, `nbuckets` of them.
    pub buckets: Vec<u64>,
    pub overflows: u64,
    /// Cycle numbers (0-based activation numbers) of the first `nbuckets` overflows.
    pub overflow_cycles: Vec<u64>,
    pub cycles: u64,
    /// Whole microseconds (truncated), as cyclictest reports them.
    pub min_us: u64,
    pub max_us: u64,
    /// Mean of the truncated microsecond values.
    pub avg_us: f64,
    pub cpu: usize,
}

impl HistColumn {
    /// Counts latencies given in ns into `nbuckets` one-microsecond buckets, each value truncated to whole
    /// microseconds as cyclictest does; the i-th value is cycle i.
    pub fn from_ns(label: impl Into<String>, samples_ns: &[u64], nbuckets: usize, cpu: usize) -> HistColumn {
        let mut buckets = vec![0u64; nbuckets];
        let (mut overflows, mut overflow_cycles) = (0u64, Vec::new());
        let (mut min_us, mut max_us, mut sum) = (u64::MAX, 0u64, 0u128);
        for (cycle, &ns) in samples_ns.iter().enumerate() {
            let us = ns / 1000;
            match buckets.get_mut(us as usize) {
                Some(b) => *b += 1,
                None => {
                    overflows += 1;
                    if overflow_cycles.len() < nbuckets {
                        overflow_cycles.push(cycle as u64);
                    }
                }
            }
            min_us = min_us.min(us);
            max_us = max_us.max(us);
            sum += u128::from(us);
        }
        let cycles = samples_ns.len() as u64;
        HistColumn {
            label: label.into(),
            buckets,
            overflows,
            overflow_cycles,
            cycles,
            min_us: if cycles == 0 { 0 } else { min_us },
            max_us,
            avg_us: if cycles == 0 { 0.0 } else { sum as f64 / cycles as f64 },
            cpu,
        }
    }
}

/// Writes `columns` in the layout of `cyclictest -h N` (N = the longest column's bucket count), after
/// the `#` comment lines of `header`.
pub fn write_hist(w: &mut impl Write, header: &[String], columns: &[HistColumn]) -> io::Result<()> {
    for h in header {
        writeln!(w, "# {h}")?;
    }
    writeln!(w, "# Histogram")?;
    let nbuckets = columns.iter().map(|c| c.buckets.len()).max().unwrap_or(0);
    for i in 0..nbuckets {
        let counts: Vec<String> =
            columns.iter().map(|c| format!("{:06}", c.buckets.get(i).copied().unwrap_or(0))).collect();
        writeln!(w, "{i:06} {}", counts.join("\t"))?;
    }
    let line = |w: &mut dyn Write, name: &str, values: Vec<String>| writeln!(w, "# {name}:{}", values.concat());
    line(w, "Total", columns.iter().map(|c| format!(" {:09}", c.buckets.iter().sum::<u64>())).collect())?;
    line(w, "Min Latencies", columns.iter().map(|c| format!(" {:05}", c.min_us)).collect())?;
    // cyclictest prints the mean truncated to an integer.
    line(w, "Avg Latencies", columns.iter().map(|c| format!(" {:05}", c.avg_us as u64)).collect())?;
    line(w, "Max Latencies", columns.iter().map(|c| format!(" {:05}", c.max_us)).collect())?;
    line(w, "Histogram Overflows", columns.iter().map(|c| format!(" {:05}", c.overflows)).collect())?;
    writeln!(w, "# Histogram Overflow at cycle number:")?;
    for (t, c) in columns.iter().enumerate() {
        write!(w, "# Thread {t}:")?;
        for cycle in &c.overflow_cycles {
            write!(w, " {cycle:05}")?;
        }
        if (c.overflow_cycles.len() as u64) < c.overflows {
            write!(w, " # {:05} others", c.overflows - c.overflow_cycles.len() as u64)?;
        }
        writeln!(w)?;
    }
    writeln!(w)
}

/// Facts about the run that cyclictest's JSON carries beside the figures.
pub struct JsonRun<'a> {
    pub cmdline: &'a str,
    pub version: &'a str,
    /// RFC 2822 times, as cyclictest writes them.
    pub start_time: &'a str,
    pub end_time: &'a str,
}

/// The document `cyclictest --json=FILE` writes, one "thread" per column (with an extra `label` key).
pub fn json(run: &JsonRun<'_>, columns: &[HistColumn]) -> serde_json::Value {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let threads: serde_json::Map<String, serde_json::Value> = columns
        .iter()
        .enumerate()
        .map(|(t, c)| {
            let hist: serde_json::Map<String, serde_json::Value> = c
                .buckets
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(us, n)| (us.to_string(), serde_json::json!(n)))
                .collect();
            let avg = (c.avg_us * 100.0).round() / 100.0;
            (
                t.to_string(),
                serde_json::json!({
                    "histogram": hist, "cycles": c.cycles, "min": c.min_us, "max": c.max_us, "avg": avg,
                    "cpu": c.cpu, "node": 0, "label": c.label,
                }),
            )
        })
        .collect();
    // The keys with a colon are cyclictest's own spelling.
    serde_json::json!({
        "file_version": 1,
        "cmdline:": run.cmdline,
        "rt_test_version:": run.version,
        "start_time": run.start_time,
        "end_time": run.end_time,
        "return_code": 0,
        "sysinfo": {
            "sysname": read("/proc/sys/kernel/ostype"),
            "nodename": read("/proc/sys/kernel/hostname"),
            "release": read("/proc/sys/kernel/osrelease"),
            "version": read("/proc/sys/kernel/version"),
            "machine": std::env::consts::ARCH,
            "realtime": i32::from(std::path::Path::new("/sys/kernel/realtime").exists()),
        },
        "num_threads": columns.len(),
        "resolution_in_ns": 0,
        "thread": threads,
    })
}

/// A time as RFC 2822 in UTC, e.g. "Sun, 22 Nov 2026 07:22:18 +0000" (cyclictest's `start_time`).
pub fn rfc2822_utc(t: std::time::SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    // The date part of the RFC 3339 form the results document uses: "YYYY-MM-DDThh:mm:ss...".
    let iso = rtcell_report::doc::rfc3339_utc(t);
    let field = |a: usize, b: usize| iso.get(a..b).and_then(|s| s.parse::<usize>().ok()).unwrap_or(0);
    let (year, month, day) = (field(0, 4), field(5, 7), field(8, 10));
    let rem = secs % 86_400;
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} +0000",
        DAYS[(secs / 86_400 % 7) as usize],
        MONTHS[month.clamp(1, 12) - 1],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// One thread of a histogram file as [`parse_hist`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedColumn {
    pub buckets: Vec<u64>,
    pub total: u64,
    pub min_us: u64,
    pub avg_us: u64,
    pub max_us: u64,
    pub overflows: u64,
}

/// Reads a histogram file in the layout of `cyclictest -h N` (its own or [`write_hist`]'s): every bucket
/// line, and the trailer's totals, which are checked against the buckets.
pub fn parse_hist(text: &str) -> Result<Vec<ParsedColumn>, String> {
    let mut rows: Vec<Vec<u64>> = Vec::new();
    let mut trailer: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            for key in ["Total", "Min Latencies", "Avg Latencies", "Max Latencies", "Histogram Overflows"] {
                if let Some(values) = rest.strip_prefix(key).and_then(|r| r.strip_prefix(':')) {
                    let v: Result<Vec<u64>, _> = values.split_whitespace().map(str::parse).collect();
                    trailer.insert(key, v.map_err(|_| bad("not a list of counts"))?);
                }
            }
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let bucket: u64 = fields.next().and_then(|b| b.parse().ok()).ok_or_else(|| bad("no bucket number"))?;
        if bucket != rows.len() as u64 {
            return Err(bad(&format!("bucket {bucket} where {} was expected", rows.len())));
        }
        let counts: Result<Vec<u64>, _> = fields.map(str::parse).collect();
        rows.push(counts.map_err(|_| bad("counts are not numbers"))?);
    }
    let threads = rows.first().map_or(0, Vec::len);
    if threads == 0 {
        return Err("no histogram lines".into());
    }
    if let Some(r) = rows.iter().position(|r| r.len() != threads) {
        return Err(format!("bucket {r} has {} counts, bucket 0 has {threads}", rows[r].len()));
    }
    let get = |key: &str, t: usize| -> Result<u64, String> {
        trailer.get(key).and_then(|v| v.get(t)).copied().ok_or_else(|| format!("no \"# {key}:\" value for thread {t}"))
    };
    (0..threads)
        .map(|t| {
            let buckets: Vec<u64> = rows.iter().map(|r| r[t]).collect();
            let total = get("Total", t)?;
            if total != buckets.iter().sum::<u64>() {
                return Err(format!("thread {t}: \"# Total:\" {total} is not the sum of its buckets"));
            }
            Ok(ParsedColumn {
                buckets,
                total,
                min_us: get("Min Latencies", t)?,
                avg_us: get("Avg Latencies", t)?,
                max_us: get("Max Latencies", t)?,
                overflows: get("Histogram Overflows", t)?,
            })
        })
        .collect()
}

/// One thread of a cyclictest JSON document.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonThread {
    pub cycles: u64,
    pub min_us: u64,
    pub max_us: u64,
    pub avg_us: f64,
    /// Non-empty buckets: microseconds -> count.
    pub histogram: BTreeMap<u64, u64>,
}

/// Reads the threads of a document in the layout of `cyclictest --json=FILE`, in thread order.
pub fn parse_json(text: &str) -> Result<Vec<JsonThread>, String> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let threads = doc["thread"].as_object().ok_or("no \"thread\" object")?;
    let mut out: Vec<(u64, JsonThread)> = Vec::new();
    for (key, t) in threads {
        let n: u64 = key.parse().map_err(|_| format!("thread key {key:?} is not a number"))?;
        let num = |k: &str| t[k].as_u64().ok_or_else(|| format!("thread {key}: no whole number {k:?}"));
        let mut histogram = BTreeMap::new();
        if let Some(h) = t["histogram"].as_object() {
            for (us, c) in h {
                let us: u64 = us.parse().map_err(|_| format!("thread {key}: histogram key {us:?}"))?;
                histogram.insert(us, c.as_u64().ok_or_else(|| format!("thread {key}: histogram count {c}"))?);
            }
        }
        let avg_us = t["avg"].as_f64().ok_or_else(|| format!("thread {key}: no number \"avg\""))?;
        out.push((
            n,
            JsonThread { cycles: num("cycles")?, min_us: num("min")?, max_us: num("max")?, avg_us, histogram },
        ));
    }
    out.sort_by_key(|(n, _)| *n);
    Ok(out.into_iter().map(|(_, t)| t).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_truncated_microseconds_and_overflows() {
        let c = HistColumn::from_ns("x", &[999, 1000, 1999, 2500, 9000, 12_000], 3, 1);
        assert_eq!(c.buckets, vec![1, 2, 1]);
        assert_eq!((c.overflows, c.overflow_cycles.clone()), (2, vec![4, 5]));
        assert_eq!((c.min_us, c.max_us, c.cycles), (0, 12, 6));
        assert!((c.avg_us - 25.0 / 6.0).abs() < 1e-12, "0+1+1+2+9+12 us");
        let empty = HistColumn::from_ns("e", &[], 2, 0);
        assert_eq!((empty.min_us, empty.avg_us, empty.cycles), (0, 0.0, 0));
    }

    #[test]
    fn written_histogram_reads_back_in_cyclictest_layout() {
        let a = HistColumn::from_ns("a", &[0, 1500, 1500, 7000], 4, 1);
        let b = HistColumn::from_ns("b", &[3200; 5], 4, 1);
        let mut text = Vec::new();
        write_hist(&mut text, &["made by a test".into()], &[a.clone(), b]).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("# Histogram\n000000 000001\t000000\n000001 000002\t000000\n"), "{text}");
        assert!(text.contains("\n# Total: 000000003 000000005\n# Min Latencies: 00000 00003\n"), "{text}");
        assert!(text.contains("# Histogram Overflow at cycle number:\n# Thread 0: 00003\n# Thread 1:\n\n"), "{text}");
        let cols = parse_hist(&text).unwrap();
        assert_eq!(cols.len(), 2);
        assert_eq!(cols[0].buckets, a.buckets);
        assert_eq!((cols[0].total, cols[0].overflows, cols[0].max_us, cols[0].avg_us), (3, 1, 7, 2));
        assert_eq!((cols[1].total, cols[1].min_us), (5, 3));
    }

    #[test]
    fn overflow_cycles_are_capped_at_the_bucket_count() {
        let c = HistColumn::from_ns("x", &[5000; 4], 2, 0);
        let mut text = Vec::new();
        write_hist(&mut text, &[], &[c]).unwrap();
        assert!(String::from_utf8(text).unwrap().contains("# Thread 0: 00000 00001 # 00002 others\n"));
    }

    #[test]
    fn parser_refuses_broken_files() {
        assert!(parse_hist("").is_err());
        assert!(parse_hist("# Histogram\n000000 000001\n000002 000001\n").is_err(), "gap in buckets");
        assert!(parse_hist("000000 000001\n# Total: 000000002\n").is_err(), "total disagrees");
        assert!(parse_hist("000000 000001\n# Total: 000000001\n").is_err(), "no min line");
    }

    #[test]
    fn json_round_trip() {
        let c = HistColumn::from_ns("poll", &[14_200, 15_000, 15_900], 20, 1);
        let run = JsonRun { cmdline: "rtcell bench latency", version: "rtcell 0", start_time: "x", end_time: "y" };
        let doc = json(&run, &[c]);
        assert_eq!(doc["thread"]["0"]["histogram"]["15"], 2);
        assert_eq!(doc["thread"]["0"]["avg"], 14.67);
        let t = parse_json(&doc.to_string()).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].cycles, t[0].min_us, t[0].max_us), (3, 14, 15));
        assert_eq!(t[0].histogram.get(&14), Some(&1));
        assert!(parse_json("{}").is_err());
    }

    #[test]
    fn rfc2822_dates() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_331_338);
        assert_eq!(rfc2822_utc(t), "Sun, 22 Nov 2026 07:08:58 +0000");
        assert_eq!(rfc2822_utc(std::time::UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 +0000");
    }
}
