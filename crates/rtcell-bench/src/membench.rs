//! `rtcell bench membench` — seed 004 Fig. 5 on this machine: the time of one read against the size of
//! the working set (1 KiB .. 96 MiB by default), in sequential and random order, on the cell CPU
//! (SCHED_FIFO, pinned, memory locked), without and with memcpy interferers on the other CPUs. The
//! curve's plateaus are found and named after the CPU's caches as sysfs gives them. See [`chase`] for
//! what is timed, [`plateau`] for how plateaus are found.

pub mod chase;
pub mod plateau;

use rtcell_host::cache::{Cache, caches_of, level_holding};
use rtcell_host::root::HostRoot;
use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_host::tsc::TscClock;
use rtcell_report::table::Table;
use rtcell_report::{Kind, Series, Suite, Unit, labels};

use crate::{BenchError, SuiteRun, release_thread, stop_requested};
use chase::{BATCH, Buffer, LINE};
use rtcell_loads::{Load, MEMCPY_BUFFER, RunningLoad};

mod report;
use report::report_text;

/// Smallest and largest working sets of the default sweep (seed 004's range).
pub const DEFAULT_MIN: usize = 1 << 10;
pub const DEFAULT_MAX: usize = 96 << 20;
/// Steps per octave of the default sweep, and with `--quick`.
pub const DEFAULT_PER_OCTAVE: u32 = 4;
pub const QUICK_PER_OCTAVE: u32 = 1;
/// Timed reads per working set at least (a larger set is read whole), and with `--quick`.
pub const DEFAULT_ACCESSES: u64 = 4_000_000;
pub const QUICK_ACCESSES: u64 = 1_000_000;
/// Largest working set accepted.
pub const MAX_WSS: usize = 1 << 30;
/// How long interferers run before the first measurement, to be at full speed.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

/// Name of the series: one per pattern, interferer count and working set.
pub const SERIES: &str = "membench_read_latency";

/// Order of the reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Seq,
    Random,
}

impl Pattern {
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Random => "random",
        }
    }
}

impl std::str::FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "seq" => Ok(Pattern::Seq),
            "random" => Ok(Pattern::Random),
            other => Err(format!("unknown pattern {other:?}: use seq, random or both (seq,random)")),
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct MembenchConfig {
    /// The cell CPU: where the reads run.
    pub cpu: usize,
    /// Working-set sizes in bytes, ascending, multiples of 64.
    pub sizes: Vec<usize>,
    pub patterns: Vec<Pattern>,
    /// Interferer counts to measure with, ascending (0 = none).
    pub interferers: Vec<usize>,
    /// The CPUs interferers run on: count k uses the first k.
    pub interferer_cpus: Vec<usize>,
    /// The suite-wide `--load`, on every non-cell CPU.
    pub load: Load,
    /// Timed reads per working set, at least.
    pub min_accesses: u64,
    pub priority: Option<i32>,
    /// Seed of the random orders.
    pub seed: u64,
}

impl MembenchConfig {
    /// Timed samples (of [`BATCH`] reads each) for a working set of `bytes`: enough for
    /// `min_accesses` reads and for one whole pass over the set.
    pub fn samples_for(&self, bytes: usize) -> u64 {
        self.min_accesses.max((bytes / LINE) as u64).div_ceil(BATCH).max(1)
    }
}

/// A size such as `4096`, `48K`, `1M`, `96MiB`, `1G` (K, M, G are powers of 1024), rounded up to whole
/// 64-byte lines.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let (digits, scale) = [
        ("kib", 1usize << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
        ("b", 1),
    ]
    .iter()
    .find_map(|(suffix, scale)| lower.strip_suffix(suffix).map(|d| (d.trim().to_string(), *scale)))
    .unwrap_or((lower.clone(), 1));
    let bad = || format!("{t:?} is not a size: give bytes or a K, M or G suffix, e.g. 4K, 1M, 96M");
    let n: usize = digits.parse().map_err(|_| bad())?;
    let bytes = n.checked_mul(scale).ok_or_else(bad)?;
    if bytes == 0 {
        return Err(format!("{t:?}: a working set needs at least one 64-byte line"));
    }
    if bytes > MAX_WSS {
        return Err(format!("{t:?} is above the largest working set, {}", fmt_bytes(MAX_WSS)));
    }
    Ok(bytes.next_multiple_of(LINE))
}

/// Sizes from `min` to `max` in `per_octave` geometric steps per doubling (rounded to whole lines),
/// `max` included.
pub fn sweep(min: usize, max: usize, per_octave: u32) -> Vec<usize> {
    let mut sizes = Vec::new();
    for k in 0.. {
        let s = (min as f64 * 2f64.powf(k as f64 / per_octave as f64)).round() as usize;
        let s = (s.div_ceil(LINE) * LINE).max(LINE);
        if s >= max {
            break;
        }
        sizes.push(s);
    }
    sizes.push(max.next_multiple_of(LINE));
    sizes.dedup();
    sizes
}

/// `1 KiB`, `1.19 KiB`, `45.3 KiB`, `96 MiB`.
pub fn fmt_bytes(b: usize) -> String {
    let (v, unit) = match b {
        b if b >= 1 << 30 => (b as f64 / (1u64 << 30) as f64, "GiB"),
        b if b >= 1 << 20 => (b as f64 / (1u64 << 20) as f64, "MiB"),
        b if b >= 1 << 10 => (b as f64 / 1024.0, "KiB"),
        b => return format!("{b} B"),
    };
    if v.fract() == 0.0 {
        format!("{v:.0} {unit}")
    } else if v < 10.0 {
        format!("{v:.2} {unit}")
    } else if v < 100.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

/// One measured working set.
struct Point {
    pattern: Pattern,
    interferers: usize,
    bytes: usize,
    /// ns per read of each sample.
    ns: Vec<f64>,
}

/// `rtcell bench membench`.
pub fn run(tsc: &TscClock, cfg: &MembenchConfig) -> Result<SuiteRun, BenchError> {
    let mut warnings = Vec::new();
    let caches = match caches_of(&HostRoot::system(), cfg.cpu) {
        Ok(c) => c,
        Err(e) => {
            warnings.push(format!("cache sizes unknown ({e}): plateaus are numbered, not named"));
            Vec::new()
        }
    };
    if caches.is_empty() && warnings.is_empty() {
        warnings.push(format!(
            "sysfs gives no cache sizes for CPU {cpu} (no /sys/devices/system/cpu/cpu{cpu}/cache): plateaus are \
             numbered, not named",
            cpu = cfg.cpu
        ));
    }
    let online = rtcell_host::cpu::online_cpus().map_err(|e| BenchError::Other(format!("online CPUs: {e}")))?;
    let load_cpus: Vec<usize> = online.iter().copied().filter(|&c| c != cfg.cpu).collect();
    let load = RunningLoad::start(cfg.load, &load_cpus)
        .map_err(|e| BenchError::Other(format!("cannot start the {} load: {e}", cfg.load.as_str())))?;

    let largest = cfg.sizes.iter().copied().max().unwrap_or(LINE);
    crate::progress!("membench: preparing a {} buffer ...", fmt_bytes(largest.next_multiple_of(2 << 20)));
    // Before the memory is locked: see Buffer::new.
    let mut buf =
        Buffer::new(largest).map_err(|e| BenchError::Other(format!("cannot map {}: {e}", fmt_bytes(largest))))?;
    let rt = apply_rt(&RtRequest { cpu: Some(cfg.cpu), fifo_priority: cfg.priority, lock_memory: true });
    let mut points = Vec::new();
    let mut interferer_rates = Vec::new();
    let measured = rt.map_err(BenchError::from).and_then(|w| {
        warnings.extend(w);
        measure_all(tsc, cfg, &mut buf, &mut points, &mut interferer_rates)
    });
    release_thread();
    // A run that broke off still reports what it measured, marked incomplete and failed.
    let (incomplete, failure) = match measured {
        Ok(stopped) => (stopped, None),
        Err(e) => (true, Some(e.to_string())),
    };
    let ctx = Context { caches, huge: buf.huge.clone(), interferer_rates, tsc_khz: tsc.khz() };
    drop(buf);
    // Its report (which CPUs, whether it stayed alive) goes with the run's (see SuiteRun::attach_load_reports).
    load.stop();
    let mut run = build(cfg, &ctx, points, warnings, incomplete);
    if let Some(f) = &failure {
        run.warnings.push(format!("run broke off: {f}"));
    }
    run.failure = failure;
    Ok(run)
}

/// Every curve, interferer count by interferer count, on the calling (real-time) thread. Returns whether
/// it stopped early (Ctrl-C).
fn measure_all(
    tsc: &TscClock,
    cfg: &MembenchConfig,
    buf: &mut Buffer,
    points: &mut Vec<Point>,
    interferer_rates: &mut Vec<(usize, f64)>,
) -> Result<bool, BenchError> {
    let total = cfg.interferers.len() * cfg.patterns.len() * cfg.sizes.len();
    for &k in &cfg.interferers {
        // Started from this real-time thread: the memcpy threads leave its policy and CPU at once, while
        // it sleeps.
        let kind = if k > 0 { Load::Memcpy } else { Load::None };
        let inter = RunningLoad::start_unlisted(kind, &cfg.interferer_cpus[..k])
            .map_err(|e| BenchError::Other(format!("cannot start {k} memcpy interferers: {e}")))?;
        if k > 0 {
            std::thread::sleep(SETTLE);
        }
        for &pattern in &cfg.patterns {
            for &bytes in &cfg.sizes {
                if stop_requested() {
                    return Ok(true);
                }
                let chain = buf.link(bytes / LINE, pattern == Pattern::Random, cfg.seed ^ bytes as u64);
                let (ticks, stopped) = chase::measure(buf, chain, cfg.samples_for(bytes), &stop_requested);
                if ticks.is_empty() {
                    // Stopped before this size's first batch: no point, rather than one with no reads.
                    return Ok(true);
                }
                let ns: Vec<f64> = ticks.iter().map(|&t| tsc.ticks_to_ns(t) / BATCH as f64).collect();
                let mut sorted = ns.clone();
                sorted.sort_by(f64::total_cmp);
                let median = sorted.get(sorted.len().saturating_sub(1) / 2).copied().unwrap_or(f64::NAN);
                crate::progress!(
                    "membench [{:>3}/{total}] {}, {}, {}: {median:.2} ns per read (median)",
                    points.len() + 1,
                    pattern.as_str(),
                    interferers(k),
                    fmt_bytes(bytes)
                );
                points.push(Point { pattern, interferers: k, bytes, ns });
                if stopped {
                    return Ok(true);
                }
            }
        }
        if k > 0 {
            interferer_rates.push((k, inter.stop()));
        }
    }
    Ok(false)
}

/// What a run found besides its points.
struct Context {
    caches: Vec<Cache>,
    huge: chase::HugePages,
    /// Bytes per second the interferers copied, per interferer count.
    interferer_rates: Vec<(usize, f64)>,
    tsc_khz: u64,
}

/// One curve: a pattern under a number of interferers.
struct Curve<'a> {
    pattern: Pattern,
    interferers: usize,
    points: Vec<&'a Point>,
    medians: Vec<f64>,
    plateaus: Vec<plateau::Plateau>,
}

impl Curve<'_> {
    fn median_at(&self, bytes: usize) -> Option<f64> {
        self.points.iter().position(|p| p.bytes == bytes).map(|i| self.medians[i])
    }

    fn label_at(&self, bytes: usize) -> Option<&str> {
        let i = self.points.iter().position(|p| p.bytes == bytes)?;
        self.plateaus.iter().find(|p| (p.first..=p.last).contains(&i)).map(|p| p.label.as_str())
    }

    fn name(&self) -> String {
        format!("{}, {}", self.pattern.as_str(), interferers(self.interferers))
    }
}

fn interferers(k: usize) -> String {
    format!("{k} interferer{}", if k == 1 { "" } else { "s" })
}

fn build(cfg: &MembenchConfig, ctx: &Context, points: Vec<Point>, warnings: Vec<String>, incomplete: bool) -> SuiteRun {
    let mut series = Vec::new();
    let mut curves: Vec<Curve> = Vec::new();
    for &k in &cfg.interferers {
        for &pattern in &cfg.patterns {
            let pts: Vec<&Point> = points.iter().filter(|p| p.pattern == pattern && p.interferers == k).collect();
            if pts.is_empty() {
                continue;
            }
            let stats: Vec<Series> = pts
                .iter()
                .map(|p| Series::from_samples(SERIES, labels!(), Unit::Ns, Kind::Latency, p.ns.clone(), 0))
                .collect();
            let medians: Vec<f64> =
                stats.iter().map(|s| if s.stats.count > 0 { s.stats.median } else { f64::NAN }).collect();
            let sizes: Vec<usize> = pts.iter().map(|p| p.bytes).collect();
            let plateaus = plateau::plateaus(&sizes, &medians, &ctx.caches);
            let point_labels = plateau::point_labels(pts.len(), &plateaus);
            for ((p, mut s), label) in pts.iter().zip(stats).zip(point_labels) {
                s.labels = labels!(
                    "pattern" => pattern.as_str(),
                    "wss_bytes" => p.bytes,
                    "interferers" => k,
                    "load" => cfg.load.as_str(),
                    "cpu" => cfg.cpu,
                    "fits" => level_holding(&ctx.caches, p.bytes as u64),
                    "plateau" => label.unwrap_or("transition"),
                    "accesses" => cfg.samples_for(p.bytes) * BATCH,
                    "accesses_per_sample" => BATCH,
                );
                series.push(s);
            }
            curves.push(Curve { pattern, interferers: k, points: pts, medians, plateaus });
        }
    }
    let text = report_text(cfg, ctx, &curves);
    let plateaus: Vec<serde_json::Value> = curves
        .iter()
        .flat_map(|c| {
            c.plateaus.iter().map(move |p| {
                serde_json::json!({
                    "pattern": c.pattern.as_str(),
                    "interferers": c.interferers,
                    "label": p.label,
                    "from_bytes": c.points[p.first].bytes,
                    "to_bytes": c.points[p.last].bytes,
                    "median_ns": p.ns,
                })
            })
        })
        .collect();
    let caches: Vec<serde_json::Value> = ctx
        .caches
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name(),
                "level": c.level,
                "type": c.kind,
                "size_bytes": c.size_bytes,
                "shared_with": c.shared_with,
            })
        })
        .collect();
    let config = serde_json::json!({
        "cpu": cfg.cpu,
        "sizes": cfg.sizes,
        "patterns": cfg.patterns.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "seq": "pointer chase through the 64-byte lines in address order",
        "random": "pointer chase through the 64-byte lines in a random cyclic order (Sattolo's shuffle)",
        "interferers": cfg.interferers,
        "interferer_cpus": cfg.interferer_cpus,
        "interferer": format!("memcpy across a {} MiB buffer, one thread per CPU", MEMCPY_BUFFER >> 20),
        "interferer_bytes_per_s": ctx.interferer_rates.iter()
            .map(|(k, r)| serde_json::json!({"interferers": k, "bytes_per_s": r}))
            .collect::<Vec<_>>(),
        "load": cfg.load.as_str(),
        "min_accesses": cfg.min_accesses,
        "accesses_per_sample": BATCH,
        "node_bytes": LINE,
        "seed": cfg.seed,
        "priority": cfg.priority,
        "huge_pages": ctx.huge.to_json(),
        "caches": caches,
        "plateau_tolerance": plateau::TOLERANCE,
        "plateaus": plateaus,
        "tsc_khz": ctx.tsc_khz,
    });
    let mut suite = Suite::new("membench", config);
    suite.series = series;
    SuiteRun { suite, text, warnings, incomplete, errors: 0, failure: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes_and_round_up_to_lines() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("48K"), Ok(48 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("96MiB"), Ok(96 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("100"), Ok(128), "whole 64-byte lines");
        assert!(parse_size("0").unwrap_err().contains("at least one"));
        assert!(parse_size("2G").unwrap_err().contains("above the largest"));
        assert!(parse_size("4Q").unwrap_err().contains("not a size"));
        assert!(parse_size("").is_err());
    }

    #[test]
    fn the_sweep_is_geometric_and_ends_at_the_maximum() {
        let quick = sweep(1 << 10, 96 << 20, 1);
        assert_eq!(quick.len(), 18);
        assert_eq!((quick[0], quick[16], quick[17]), (1 << 10, 64 << 20, 96 << 20));
        let full = sweep(1 << 10, 96 << 20, 4);
        assert_eq!(full.len(), 68);
        assert!(full.windows(2).all(|w| w[0] < w[1] && w[1] as f64 / w[0] as f64 <= 1.25));
        assert!(full.iter().all(|s| s % LINE == 0));
        assert_eq!(sweep(4096, 4096, 4), [4096]);
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(1024), "1 KiB");
        assert_eq!(fmt_bytes(1216), "1.19 KiB");
        assert_eq!(fmt_bytes(46336), "45.2 KiB");
        assert_eq!(fmt_bytes(96 << 20), "96 MiB");
    }

    #[test]
    fn samples_cover_the_minimum_and_a_whole_pass() {
        let cfg = MembenchConfig {
            cpu: 1,
            sizes: vec![],
            patterns: vec![],
            interferers: vec![0],
            interferer_cpus: vec![],
            load: Load::None,
            min_accesses: 10_000,
            priority: None,
            seed: 0,
        };
        assert_eq!(cfg.samples_for(1024), 3, "10,000 reads in batches of 4096");
        assert_eq!(cfg.samples_for(64 << 20), (1 << 20) / BATCH, "one read per line of 64 MiB");
    }
}
