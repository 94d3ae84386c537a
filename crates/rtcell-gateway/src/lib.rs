//! The gateway: a gRPC API (`proto/rtcell/v1/*.proto`) and Prometheus metrics over a running
//! scenario, on the Linux side of the machine.
//!
//! - [`snapshot`]: statistics read lock-free from the run's shared memory;
//! - [`write`]: writes to `writable` signals, confirmed by the acknowledgement of the task reading them;
//! - [`deploy`]: payload ELFs checked, stored under their hash and started in new kvm cells;
//! - [`access`]: who calls (Unix uid, bearer token, client certificate) and its role;
//! - [`security`]: rate limits per identity, client text capped, the audit log;
//! - [`listen`]: the Unix socket (0600, private directory) and TCP listeners, the connection caps;
//! - [`conn`]: each connection's guard (first-request deadline, caps per address, per identity and before
//!   authentication, idle timeout, failed authentications);
//! - [`budget`], [`metered`]: the bytes held for clients (declared requests, unsent replies) under a
//!   budget per identity, per role and in all;
//! - [`share`]: shares of a capped resource per key (address, identity);
//! - [`streams`]: statistics streams with bounded memory (dropped samples, stall deadline, cap);
//! - [`metrics`]: the Prometheus text exposition;
//! - [`server`]: listeners, TLS and limits put together; [`client`]: connecting as `rtcell ctl` does.

pub mod access;
pub mod budget;
pub mod client;
pub mod conn;
pub mod deploy;
pub mod listen;
pub mod metered;
pub mod metrics;
mod metrics_http;
pub mod runs;
pub mod security;
pub mod server;
pub mod service;
pub mod share;
pub mod snapshot;
pub mod start;
pub mod state;
pub mod streams;
pub mod tally;
pub mod write;

/// The generated messages and services of package `rtcell.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    tonic::include_proto!("rtcell.v1");
}

pub use runs::{Refusal, RunOutcome, RunSlot, Runner, StartRequest};
pub use service::{Gateway, GatewayOptions};
