//! Scenarios: a TOML file declares cells, channels, signals, periodic tasks and loads; rtcell checks it
//! whole before anything starts ([`plan`]), runs it ([`run`]) with a live line per task, and reports per
//! task the table known from CODESYS task statistics and per channel the messages sent, received and
//! lost ([`report`]), in the results document as suite `scenario`.
//!
//! The file format is described in the README ("Scenarios"); [`file`] holds its structures.

pub mod file;
pub mod integrity;
pub mod live;
pub mod plan;
pub mod report;
pub mod run;
mod shown;

pub use file::Diag;
pub use live::{CellSnapshot, Live, RunRegion};
pub use plan::{
    HostView, Invalid, Origin, Plan, load, load_from, load_with, parse_duration, validate_text, validate_text_from,
    validate_text_with,
};
pub use run::{RunResult, StartError, run, run_observed};
