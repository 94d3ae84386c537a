//! The task executive that runs inside a cell (or on the Linux side): periodic tasks with a period,
//! an offset, a priority and a deadline, each a SCHED_FIFO thread on its CPU; per-task statistics in
//! shared memory (cycles, overruns and their longest run, execution time and activation latency
//! histograms); a CODESYS-style watchdog (time and sensitivity) that stops a task and writes its safe
//! output value; a missed-cycle policy (skip to the next period, or run at once).
//!
//! - [`spec`]: what a task is, as data (a process cell gets it as JSON).
//! - [`exec`]: the executive ([`run_set`]).
//! - [`stats`]: the statistics channels and the common schedule.
//! - [`params`]: writable signals a task reads and acknowledges.
//! - [`chan`]: the channels a task uses, named, corruption reported; [`work`]: the workloads of one cycle; [`cwork`]: user C code and the master talking to it; [`dynamics`]: the 6-axis inverse dynamics.

pub mod chan;
pub mod corrupt;
pub mod cwork;
pub mod dynamics;
pub mod exec;
pub mod params;
pub mod spec;
pub mod stats;
pub mod work;

pub use corrupt::StepError;
pub use exec::{SetOutcome, StopSignal, run_set, run_set_scheduled};
pub use spec::{Inject, MissedPolicy, OnCorrupt, TaskSpec, TaskWork, Watchdog};
pub use stats::{
    PrivateSchedule, Schedule, TaskCounters, TaskState, add_schedule_to_layout, add_task_to_layout, read_counters,
};
