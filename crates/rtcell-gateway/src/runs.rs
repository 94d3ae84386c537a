//! Runs the gateway knows: the one `rtcell run --serve` is running, or those `rtcell serve` started.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rtcell_scenario::Live;

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// What `rtcell run` would exit with: 0 ok, 1 errors (or could not start), 130 stopped early.
    pub exit_code: i32,
    /// Its results.json, when written.
    pub results_path: Option<PathBuf>,
    /// Why it failed to start or to write its results.
    pub error: Option<String>,
}

/// One run: created before it starts, filled in as it goes.
pub struct RunSlot {
    pub id: String,
    pub scenario: String,
    pub duration: Duration,
    pub out_dir: PathBuf,
    live: OnceLock<Arc<Live>>,
    outcome: OnceLock<RunOutcome>,
    stop: AtomicBool,
    /// A file kept for this run only (a scenario text received by the gateway), removed when it ends.
    spooled: Mutex<Option<PathBuf>>,
}

impl RunSlot {
    pub fn new(id: String, scenario: String, duration: Duration, out_dir: PathBuf) -> RunSlot {
        RunSlot {
            id,
            scenario,
            duration,
            out_dir,
            live: OnceLock::new(),
            outcome: OnceLock::new(),
            stop: AtomicBool::new(false),
            spooled: Mutex::new(None),
        }
    }

    /// Called by the runner once the cells have started (the observer of `run_observed`).
    pub fn attach(&self, live: Arc<Live>) {
        if self.stop.load(Ordering::Acquire) {
            live.request_stop();
        }
        let _ = self.live.set(live);
    }

    pub fn live(&self) -> Option<&Arc<Live>> {
        self.live.get()
    }

    /// Called by the runner when the run is over and its results are written (or failed).
    pub fn finish(&self, outcome: RunOutcome) {
        let _ = self.outcome.set(outcome);
        if let Ok(mut s) = self.spooled.lock()
            && let Some(p) = s.take()
        {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Removes `file` when the run ends (at once if it has ended already).
    pub fn remove_when_done(&self, file: PathBuf) {
        if let Ok(mut s) = self.spooled.lock() {
            if self.outcome.get().is_some() {
                let _ = std::fs::remove_file(&file);
            } else {
                *s = Some(file);
            }
        }
    }

    /// The file kept for this run, while it runs.
    pub fn spooled(&self) -> Option<PathBuf> {
        self.spooled.lock().ok().and_then(|s| s.clone())
    }

    pub fn outcome(&self) -> Option<&RunOutcome> {
        self.outcome.get()
    }

    /// Asks the run to stop early, whether its cells have started yet or not.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(l) = self.live.get() {
            l.request_stop();
        }
    }

    /// For the runner's stop check before the cells are up.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// starting, running, finished, failed or stopped.
    pub fn state(&self) -> &'static str {
        match (self.outcome.get(), self.live.get()) {
            (Some(o), _) if o.exit_code == 130 => "stopped",
            (Some(o), _) if o.exit_code == 0 => "finished",
            (Some(_), _) => "failed",
            (None, Some(l)) if l.finished() => "finishing",
            (None, Some(_)) => "running",
            (None, None) => "starting",
        }
    }
}

/// Starts scenarios for `rtcell serve` (the command-line crate implements it with the same code as
/// `rtcell run`).
pub trait Runner: Send + Sync {
    /// Validates the scenario and starts it in the background; returns at once with its slot, or with
    /// why it was refused (invalid scenario: every problem, file:line: field: what — fix).
    fn start(&self, req: StartRequest) -> Result<Arc<RunSlot>, Refusal>;
}

/// Why a runner did not start a scenario; each has its own gRPC status.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    /// The scenario is invalid (INVALID_ARGUMENT): every problem, file:line: field: what — fix.
    #[error("{0}")]
    Invalid(String),
    /// A CPU it needs is another run's (FAILED_PRECONDITION); the text names the CPU and the holder's pid,
    /// never its command line.
    #[error("{0}")]
    Busy(String),
    /// The server could not start it (INTERNAL); the details are in the server's log.
    #[error("{0}")]
    Failed(String),
}

/// A scenario to start.
#[derive(Debug, Clone, Default)]
pub struct StartRequest {
    /// The scenario file (of the scenario directory, or the TOML text a client sent, kept in the state
    /// directory).
    pub path: PathBuf,
    pub duration: Option<String>,
    pub kinds: Vec<String>,
    /// What the scenario may load: validation applies it ([`rtcell_scenario::Origin`]).
    pub origin: rtcell_scenario::Origin,
}
