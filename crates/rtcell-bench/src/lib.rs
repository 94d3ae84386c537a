//! Benchmark suites. Each takes a configuration, runs on the CPUs it is given, and returns a results
//! `Suite` plus a human report. Timing uses the TSC on the measured path; statistics are computed after.

pub mod c2c;
pub mod capi;
pub mod control;
pub mod ethercat;
pub mod itc;
pub mod latency;
pub mod loopback;
pub mod membench;
pub mod pipe;
pub mod rig;

use rtcell_host::tsc::TscClock;
/// Where suites say what they are doing (`progress!`, `progress::set_sink`): presentation, kept in
/// rtcell-report, re-exported for the suites.
pub use rtcell_report::progress;
use rtcell_report::{Kind, Series, Unit};

/// The process's stop request (Ctrl-C), checked by every suite.
pub use rtcell_host::stop::{request_stop, stop_requested};

/// What a suite produced.
pub struct SuiteRun {
    pub suite: rtcell_report::Suite,
    /// Human-readable tables, ready to print.
    pub text: String,
    /// Things that change how to read the figures.
    pub warnings: Vec<String>,
    /// Stopped early (Ctrl-C): figures cover only what ran.
    pub incomplete: bool,
    /// Measurement errors (payload mismatches, lost messages): a run with any is a failed run.
    pub errors: u64,
    /// The run broke off (a cell died, a channel was corrupted): what, where. What was measured before
    /// is kept in `suite`.
    pub failure: Option<String>,
}

impl SuiteRun {
    /// Puts the reports of the loads that ran during this run into it (see
    /// [`rtcell_loads::attach_reports_to`]).
    pub fn attach_load_reports(&mut self) {
        rtcell_loads::attach_reports_to(&mut self.suite, &mut self.warnings, &mut self.text);
    }

    /// A run stopped early (Ctrl-C, a failure) keeps what was measured, never a series that had not yet
    /// taken its first sample: such a series is left out, and a warning says which and why. Error counts
    /// are kept (an empty series with errors is a measurement, not an interruption). Returns how many
    /// were left out.
    pub fn drop_unmeasured_series(&mut self) -> usize {
        if !self.incomplete && self.failure.is_none() {
            return 0;
        }
        let (kept, dropped): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.suite.series).into_iter().partition(|s| s.stats.count > 0 || s.errors > 0);
        self.suite.series = kept;
        for s in &dropped {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            self.warnings.push(format!(
                "{} series {} ({}) was stopped before its first sample and is left out",
                self.suite.suite,
                s.name,
                labels.join(", ")
            ));
        }
        dropped.len()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Host(#[from] rtcell_host::error::HostError),
    #[error("cell: {0}")]
    Cell(#[from] rtcell_cells::CellError),
    #[error("{0}")]
    Load(#[from] rtcell_loads::LoadError),
    #[error("{0}")]
    Other(String),
}

/// Converts TSC tick samples into a series in microseconds.
pub fn series_us(
    tsc: &TscClock,
    name: &str,
    labels: std::collections::BTreeMap<String, String>,
    kind: Kind,
    ticks: &[u64],
    errors: u64,
) -> Series {
    let samples: Vec<f64> = ticks.iter().map(|&t| tsc.ticks_to_ns(t) / 1000.0).collect();
    Series::from_samples(name, labels, Unit::Us, kind, samples, errors)
}

/// Converts TSC tick samples into a series in nanoseconds.
pub fn series_ns(
    tsc: &TscClock,
    name: &str,
    labels: std::collections::BTreeMap<String, String>,
    kind: Kind,
    ticks: &[u64],
) -> Series {
    let samples: Vec<f64> = ticks.iter().map(|&t| tsc.ticks_to_ns(t)).collect();
    Series::from_samples(name, labels, Unit::Ns, kind, samples, 0)
}

/// Puts the calling thread back to the normal policy on every CPU (after a measured phase).
pub fn release_thread() {
    let _ = rtcell_host::sched::set_normal();
    if let Ok(all) = rtcell_host::cpu::online_cpus() {
        let _ = rtcell_host::cpu::pin_current_thread_to(&all);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtcell_report::{Kind, Series, Suite, Unit};

    fn run_with(samples: &[&[f64]], incomplete: bool) -> SuiteRun {
        let series = samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let labels = [("n".to_string(), i.to_string())].into_iter().collect();
                Series::from_samples("x", labels, Unit::Ns, Kind::Latency, s.to_vec(), 0)
            })
            .collect();
        let suite = Suite { suite: "t".into(), config: serde_json::json!({}), series };
        SuiteRun { suite, text: String::new(), warnings: vec![], incomplete, errors: 0, failure: None }
    }

    #[test]
    fn an_interrupted_run_leaves_out_only_series_without_a_sample() {
        let mut run = run_with(&[&[1.0, 2.0], &[]], true);
        assert_eq!(run.drop_unmeasured_series(), 1);
        assert_eq!(run.suite.series.len(), 1);
        assert!(run.warnings[0].contains("series x (n=1) was stopped before its first sample"), "{:?}", run.warnings);
        // A complete run is left as it is: an empty series there is a finding, not an interruption.
        let mut run = run_with(&[&[1.0], &[]], false);
        assert_eq!(run.drop_unmeasured_series(), 0);
        assert_eq!(run.suite.series.len(), 2);
    }
}
