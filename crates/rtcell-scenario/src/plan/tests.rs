//! Unit tests of validation, one module per concern: each concern's accepted case, and each refusal
//! with its line, field, message and fix.

use std::path::Path;

use super::{HostView, Invalid, Origin, Plan, validate_text_from};
use crate::file::Diag;

mod cells;
mod channels;
mod cpus;
mod ethercat;
mod loads;
mod signals;
mod tasks;
mod work;

/// A two-CPU machine with KVM and the usual payloads.
pub(super) fn host() -> HostView {
    HostView {
        online: vec![0, 1],
        kvm_unusable: None,
        payloads: ["echo", "control", "spin", "faults"].map(String::from).to_vec(),
    }
}

pub(super) fn validate_on(text: &str, host: &HostView, origin: &Origin) -> Result<Plan, Invalid> {
    validate_text_from(text, Path::new("t.toml"), host, &[], origin)
}

/// The plan of a text that must be accepted.
pub(super) fn accepted(text: &str) -> Plan {
    validate_on(text, &host(), &Origin::Operator).unwrap_or_else(|e| panic!("refused:\n{e}\n---\n{text}"))
}

/// Every complaint about a text that must be refused.
pub(super) fn refused_on(text: &str, host: &HostView, origin: &Origin) -> Vec<Diag> {
    match validate_on(text, host, origin) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.diags,
    }
}

/// The 1-based line of the first line of `text` that starts with `needle` (after its indentation).
pub(super) fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.trim_start().starts_with(needle)).unwrap_or_else(|| panic!("no line holds {needle:?}"))
        + 1
}

/// Asserts that `text` is refused with a complaint at `path`, on the line starting with `at`, whose message
/// and fix hold `message` and `fix`; returns it.
pub(super) fn refusal(text: &str, path: &str, at: &str, message: &str, fix: &str) -> Diag {
    refusal_on(text, &host(), &Origin::Operator, path, at, message, fix)
}

/// [`refusal`] on `host`, for a scenario of `origin`.
pub(super) fn refusal_on(
    text: &str,
    host: &HostView,
    origin: &Origin,
    path: &str,
    at: &str,
    message: &str,
    fix: &str,
) -> Diag {
    let diags = refused_on(text, host, origin);
    let Some(d) = diags.iter().find(|d| d.path == path && d.message.contains(message)) else {
        panic!("no complaint at {path} saying {message:?}; got:\n{diags:#?}")
    };
    assert_eq!(d.line, Some(line_of(text, at)), "{d:?}");
    assert!(d.fix.contains(fix), "fix of {d:?} does not hold {fix:?}");
    d.clone()
}

/// A Linux-side task `a` with `extra` lines and `work`, then `rest` (more tables).
pub(super) fn linux(extra: &str, work: &str, rest: &str) -> String {
    format!(
        "duration_s = 1\n[tasks.a]\ncell = \"linux\"\nperiod_us = 1000\npriority = 50\n{extra}workload = {work}\n{rest}"
    )
}

/// A thread cell `c` on CPU 1 running task `a` with `extra` lines and `work`, then `rest`.
pub(super) fn in_cell(kind: &str, extra: &str, work: &str, rest: &str) -> String {
    format!(
        "duration_s = 1\n[cells.c]\nkind = \"{kind}\"\ncpu = 1\n[tasks.a]\ncell = \"c\"\nperiod_us = 1000\n\
         priority = 50\n{extra}workload = {work}\n{rest}"
    )
}

pub(super) const SPIN: &str = "{ kind = \"spin\", us = 5 }";
