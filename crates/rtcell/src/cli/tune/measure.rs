//! `rtcell tune --measure`: a short benchmark on the cell CPU before and after the changes, and the comparison of the two.

use super::*;

/// The short benchmark of `--measure`: latency (nanosleep and a polling thread cell) and a loopback
/// round trip through a thread cell, on the cell CPU.
pub(super) struct Measure {
    pub(super) tsc: TscClock,
    pub(super) cell: usize,
    pub(super) master: usize,
    pub(super) duration: Duration,
    pub(super) out: PathBuf,
    /// The cell CPU, held while measuring.
    pub(super) _cpu_locks: rtcell_host::cpulock::CpuLocks,
}

/// A suite to run, ready to go.
type SuiteFn<'a> = dyn Fn() -> Result<SuiteRun, BenchError> + 'a;

/// One side's results document.
pub(super) struct Measured {
    pub(super) path: PathBuf,
    pub(super) results: Results,
}

impl Measure {
    pub(super) fn prepare(cell: usize, duration: Duration, out: Option<PathBuf>) -> Result<Measure, i32> {
        let online = crate::cli::online();
        let Some(master) = online.iter().copied().find(|&c| c != cell) else {
            return Err(usage("--measure needs a second online CPU for the master side of the loopback"));
        };
        let out = out.unwrap_or_else(|| default_out("tune"));
        for side in ["before", "after"] {
            if out.join(side).join(rtcell_report::doc::RESULTS_FILE).exists() {
                return Err(usage(format_args!(
                    "--out {}: it already holds results; pick another directory or remove it",
                    out.display()
                )));
            }
        }
        let cpu_locks = crate::cli::cpus::take(&[cell]).map_err(|(msg, code)| {
            eprintln!("{msg}");
            code
        })?;
        let tsc = TscClock::calibrate().map_err(|e| {
            eprintln!("error: {e}");
            1
        })?;
        Ok(Measure { tsc, cell, master, duration, out, _cpu_locks: cpu_locks })
    }

    fn latency_config(&self, dir: &Path) -> LatencyConfig {
        LatencyConfig {
            cpu: self.cell,
            modes: vec![Mode::Nanosleep, Mode::Poll(CellKind::Thread)],
            period_us: 1000,
            duration: self.duration,
            priority: 95,
            load: Load::None,
            load_cpus: crate::cli::online().into_iter().filter(|&c| c != self.cell).collect(),
            cyclictest: None,
            out_dir: dir.to_path_buf(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
        }
    }

    fn loopback_config(&self) -> LoopbackConfig {
        LoopbackConfig {
            master_cpu: self.master,
            cell_cpu: self.cell,
            sizes: vec![0, 64, 1024],
            iterations: 100_000,
            cells: vec![CellKind::Thread],
            notify: vec![Notify::Poll],
            load: Load::None,
            pipe_baseline: false,
            c2c_floor: false,
            master_priority: Some(80),
            cell_priority: Some(90),
            seed: 0x5eed_0000_0000_0001,
        }
    }

    /// Runs both suites and writes `out/<side>/results.json`.
    pub(super) fn run(&self, side: &str) -> Result<Measured, i32> {
        let dir = self.out.join(side);
        let lat = self.latency_config(&dir);
        if let Err(e) = lat.check() {
            return Err(usage(format_args!("--duration: {e}")));
        }
        eprintln!(
            "measuring {side} the changes: latency on CPU {} and loopback CPU {} <-> {} ...",
            self.cell, self.master, self.cell
        );
        let mut session = crate::cli::session::Session::start(&self.tsc);
        let suites: [&SuiteFn<'_>; 2] =
            [&|| rtcell_bench::latency::run(&self.tsc, &lat), &|| loopback::run(&self.tsc, &self.loopback_config())];
        for suite in suites {
            let run = match suite() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: measuring {side}: {e}");
                    return Err(1);
                }
            };
            session.results.warnings.extend(run.warnings.iter().map(|w| format!("{}: {w}", run.suite.suite)));
            session.results.incomplete |= run.incomplete;
            let failure = run.failure.clone();
            session.results.suites.push(run.suite);
            if let Some(f) = failure {
                eprintln!("error: measuring {side}: {f}");
                return Err(1);
            }
            if run.incomplete {
                break;
            }
        }
        let results = session.finish(self.cell);
        let path = results.write_to_dir(&dir).map_err(|e| {
            eprintln!("error: could not write the {side} results: {e}");
            1
        })?;
        if results.incomplete {
            eprintln!("interrupted while measuring {side}: {} holds what was measured", path.display());
            return Err(EXIT_INTERRUPTED);
        }
        Ok(Measured { path, results })
    }
}

/// A series `compare` shows: its row name, suite, series name, and labels that must match.
struct Compared {
    pub(super) row: &'static str,
    pub(super) suite: &'static str,
    pub(super) name: &'static str,
    pub(super) labels: &'static [(&'static str, &'static str)],
}

const COMPARED: &[Compared] = &[
    Compared {
        row: "latency, nanosleep",
        suite: "latency",
        name: "latency",
        labels: &[("tool", "rtcell"), ("mode", "nanosleep")],
    },
    Compared {
        row: "latency, poll (thread cell)",
        suite: "latency",
        name: "latency",
        labels: &[("tool", "rtcell"), ("mode", "poll")],
    },
    Compared {
        row: "loopback 0 B",
        suite: "loopback",
        name: "loopback_rtt",
        labels: &[("cell", "thread"), ("bytes", "0")],
    },
    Compared {
        row: "loopback 64 B",
        suite: "loopback",
        name: "loopback_rtt",
        labels: &[("cell", "thread"), ("bytes", "64")],
    },
    Compared {
        row: "loopback 1024 B",
        suite: "loopback",
        name: "loopback_rtt",
        labels: &[("cell", "thread"), ("bytes", "1024")],
    },
];

fn find_series<'a>(r: &'a Results, suite: &str, name: &str, labels: &[(&str, &str)]) -> Option<&'a Series> {
    r.suites
        .iter()
        .filter(|s| s.suite == suite)
        .flat_map(|s| &s.series)
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
}

fn change_pct(before: f64, after: f64) -> String {
    if before > 0.0 && before.is_finite() && after.is_finite() {
        format!("{:+.1}%", (after - before) / before * 100.0)
    } else {
        "-".into()
    }
}

/// Before and after side by side: median, p99, p99.9 and max of each compared series, in us.
pub(super) fn compare(before: &Measured, after: &Measured) -> String {
    let mut t = Table::new(&[
        "us",
        "median before",
        "after",
        "change",
        "p99 before",
        "after",
        "change",
        "p99.9 before",
        "after",
        "change",
        "max before",
        "after",
        "change",
    ]);
    for c in COMPARED {
        let (Some(b), Some(a)) = (
            find_series(&before.results, c.suite, c.name, c.labels),
            find_series(&after.results, c.suite, c.name, c.labels),
        ) else {
            continue;
        };
        let mut cells = vec![c.row.to_string()];
        for (x, y) in [
            (b.stats.median, a.stats.median),
            (b.stats.p99, a.stats.p99),
            (b.stats.p999, a.stats.p999),
            (b.stats.max, a.stats.max),
        ] {
            cells.extend([format!("{x:.3}"), format!("{y:.3}"), change_pct(x, y)]);
        }
        t.row(cells);
    }
    let steal = |r: &Results| r.host.steal_pct.map_or("-".to_string(), |s| format!("{s:.2}%"));
    format!(
        "Before and after the changes (one run each; a VM's outer host adds its own noise, steal {} before, {} after):\n{}",
        steal(&before.results),
        steal(&after.results),
        t.render()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_signed_percentages() {
        assert_eq!(change_pct(2.0, 1.0), "-50.0%");
        assert_eq!(change_pct(1.0, 1.5), "+50.0%");
        assert_eq!(change_pct(0.0, 1.0), "-");
        assert_eq!(change_pct(1.0, f64::NAN), "-");
    }
}
