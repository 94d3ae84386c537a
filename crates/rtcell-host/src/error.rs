//! Errors of the host layer that callers must act on (as opposed to warnings).

use std::io;

use crate::root::ReadError;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A cell was assigned a CPU the machine does not have (or has offline).
    #[error("CPU {cpu} does not exist or is offline (online CPUs: {online})")]
    NoSuchCpu { cpu: usize, online: String },
    /// SCHED_FIFO priorities are bounded by the kernel; outside the range is a configuration error.
    #[error("SCHED_FIFO priority {priority} is outside {min}..={max}")]
    InvalidPriority { priority: i32, min: i32, max: i32 },
    #[error("could not pin the thread to CPU {cpus}: {source}")]
    Pin {
        cpus: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Read(#[from] ReadError),
}
