//! What every run does around its measurement, in one place (`rtcell bench`, `rtcell run` and
//! `rtcell tune --measure`): the results document begun with the host's facts, the command line and this
//! build's version; the wall time and the CPU time the host stole over the run; and at the end the check
//! of the run's cell CPU, recorded in the document.

use std::time::Instant;

use rtcell_host::facts::{HostFacts, StealSampler};
use rtcell_host::tsc::TscClock;
use rtcell_report::Results;

/// A run between its start and the end of its measurement.
pub struct Session {
    /// The run's results document, filled by the run.
    pub results: Results,
    started: Instant,
    steal: StealSampler,
}

impl Session {
    /// Begins a run's results: the host's facts (with the TSC rate), the command line, this build.
    pub fn start(tsc: &TscClock) -> Session {
        let git = Some(env!("RTCELL_GIT").to_string()).filter(|s| !s.is_empty());
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let facts = HostFacts::collect(Some(tsc.khz()));
        let results = Results::new(env!("CARGO_PKG_VERSION"), git, Some(command), facts);
        Session { results, started: Instant::now(), steal: StealSampler::start() }
    }

    /// Ends the measurement: the CPU time stolen over the run, the check of `cell_cpu` (with that steal),
    /// the run's duration.
    pub fn finish(self, cell_cpu: usize) -> Results {
        let Session { mut results, started, steal } = self;
        results.host.steal_pct = steal.finish();
        super::tune::record_check(&mut results.host, cell_cpu);
        results.finish(started);
        results
    }
}
