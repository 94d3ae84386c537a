//! The bytes the gateway holds for its clients, under a budget per identity, per role and for all:
//! the messages a request declares (counted from the moment their length prefix arrives, before the
//! bytes come, until the request body is dropped: decoded or abandoned), and reply frames until the
//! connection has written them to the socket (a client that does not read holds them, counted). The
//! [`Metered`](crate::metered::Metered) body does the counting; this module keeps the figures.
//!
//! Shares per role, as for connections ([`crate::conn`]): viewers together hold at most
//! [`VIEWER_BYTES`], viewers and operators together at most [`BELOW_ADMIN_BYTES`] of the
//! [`TOTAL_BYTES`], so operators always find [`BELOW_ADMIN_BYTES`] - [`VIEWER_BYTES`] and admins
//! [`TOTAL_BYTES`] - [`BELOW_ADMIN_BYTES`] whatever the roles below them hold.
//!
//! Each method's request messages have a limit ([`request_limit`]): a prefix that declares more is
//! refused before anything is kept.
//!
//! Not counted here, and bounded otherwise: what HTTP/2 holds below the service (at most each
//! connection's receive window, [`crate::server`]), a decoded request while its handler runs (no larger
//! than the request that was counted), and the frame headers and trailers HTTP/2 queues.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tonic::Status;

use crate::access::Role;

/// Bytes held at once for one identity's requests and replies (over all its connections).
pub const PER_IDENTITY_BYTES: usize = 32 << 20;
/// Bytes held at once for all clients together.
pub const TOTAL_BYTES: usize = 128 << 20;
/// Bytes held at once for all viewers together: operators and admins always find the rest.
pub const VIEWER_BYTES: usize = 64 << 20;
/// Bytes held at once for viewers and operators together: admins always find the rest (32 MiB).
pub const BELOW_ADMIN_BYTES: usize = 96 << 20;

/// Largest request message of DeployPayload: a payload ELF and room for the other fields.
pub const DEPLOY_REQUEST_BYTES: usize = crate::server::MAX_REQUEST_BYTES;
/// Largest request message of StartScenario: a scenario text and room for the other fields.
pub const START_REQUEST_BYTES: usize = crate::start::MAX_SCENARIO_BYTES + 64 * 1024;
/// Largest request message of every other method: names, up to 64 signal values, flags.
pub const SMALL_REQUEST_BYTES: usize = 16 * 1024;

/// The most a request body of `method` may declare in all (its messages' lengths, without their
/// 5-byte prefixes).
pub fn request_limit(method: &str) -> usize {
    match method {
        "DeployPayload" => DEPLOY_REQUEST_BYTES,
        "StartScenario" => START_REQUEST_BYTES,
        _ => SMALL_REQUEST_BYTES,
    }
}

/// What is held, per identity and per role share.
#[derive(Default)]
struct Held {
    per: HashMap<String, usize>,
    viewers: usize,
    below_admin: usize,
}

/// The budget: bytes held per identity, per role share and in all.
#[derive(Default)]
pub struct Budget {
    total: AtomicUsize,
    held: Mutex<Held>,
}

impl Budget {
    pub fn new() -> Arc<Budget> {
        Arc::new(Budget::default())
    }

    /// Bytes held now, in all.
    pub fn held(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Takes `n` bytes for `key` of `role`, or `Err` naming the budget it would go over.
    fn take(&self, key: &str, role: Role, n: usize) -> Result<(), Status> {
        let Ok(mut h) = self.held.lock() else { return Err(Status::internal("budget poisoned")) };
        let mine = h.per.get(key).copied().unwrap_or(0);
        if mine + n > PER_IDENTITY_BYTES {
            return Err(Status::resource_exhausted(format!(
                "this client's identity already has {} KiB of requests and replies in flight, its most is {} MiB: \
                 wait for those to finish, then retry",
                mine >> 10,
                PER_IDENTITY_BYTES >> 20
            )));
        }
        let share = |held: usize, most: usize, whose: &str| {
            Status::resource_exhausted(format!(
                "{whose} together hold {} MiB of requests and replies in flight, their most is {} MiB (the rest is \
                 kept for higher roles): retry later",
                held >> 20,
                most >> 20
            ))
        };
        if role < Role::Operator && h.viewers + n > VIEWER_BYTES {
            return Err(share(h.viewers, VIEWER_BYTES, "the viewer role's clients"));
        }
        if role < Role::Admin && h.below_admin + n > BELOW_ADMIN_BYTES {
            return Err(share(h.below_admin, BELOW_ADMIN_BYTES, "the viewer and operator roles' clients"));
        }
        let total = self.total.load(Ordering::Acquire);
        if total + n > TOTAL_BYTES {
            return Err(Status::resource_exhausted(format!(
                "the gateway holds {} MiB of requests and replies in flight, its most is {} MiB: retry later",
                total >> 20,
                TOTAL_BYTES >> 20
            )));
        }
        h.per.insert(key.to_string(), mine + n);
        if role < Role::Operator {
            h.viewers += n;
        }
        if role < Role::Admin {
            h.below_admin += n;
        }
        self.total.fetch_add(n, Ordering::AcqRel);
        Ok(())
    }

    fn give(&self, key: &str, role: Role, n: usize) {
        if n == 0 {
            return;
        }
        if let Ok(mut h) = self.held.lock() {
            if let Some(m) = h.per.get_mut(key) {
                *m = m.saturating_sub(n);
                if *m == 0 {
                    h.per.remove(key);
                }
            }
            if role < Role::Operator {
                h.viewers = h.viewers.saturating_sub(n);
            }
            if role < Role::Admin {
                h.below_admin = h.below_admin.saturating_sub(n);
            }
            self.total.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// One caller's account in the budget: its identity and role.
pub struct Account {
    budget: Arc<Budget>,
    key: String,
    role: Role,
}

impl Account {
    pub fn new(budget: Arc<Budget>, key: String, role: Role) -> Arc<Account> {
        Arc::new(Account { budget, key, role })
    }

    /// Takes `n` bytes, or `Err` (RESOURCE_EXHAUSTED) naming the budget it would go over.
    pub fn take(&self, n: usize) -> Result<(), Status> {
        self.budget.take(&self.key, self.role, n)
    }

    /// Gives back `n` bytes taken before.
    pub fn give(&self, n: usize) {
        self.budget.give(&self.key, self.role, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_stop_at_the_identity_and_the_total_and_come_back() {
        let b = Budget::new();
        assert!(b.take("a", Role::Admin, PER_IDENTITY_BYTES).is_ok());
        assert_eq!(b.take("a", Role::Admin, 1).unwrap_err().code(), tonic::Code::ResourceExhausted);
        for k in ["b", "c", "d"] {
            b.take(k, Role::Admin, PER_IDENTITY_BYTES).unwrap();
        }
        assert_eq!(b.held(), TOTAL_BYTES);
        assert_eq!(b.take("e", Role::Admin, 1).unwrap_err().code(), tonic::Code::ResourceExhausted);
        b.give("a", Role::Admin, PER_IDENTITY_BYTES);
        assert!(b.take("e", Role::Admin, 1).is_ok());
    }

    #[test]
    fn viewers_and_operators_leave_their_shares_to_the_roles_above() {
        let b = Budget::new();
        // Viewer identities take all they can: their role's share, no more.
        let mut v = 0;
        while b.take(&format!("v{v}"), Role::Viewer, PER_IDENTITY_BYTES / 2).is_ok() {
            v += 1;
        }
        assert_eq!(b.held(), VIEWER_BYTES);
        let e = b.take("v-new", Role::Viewer, 1).unwrap_err();
        assert!(e.message().contains("viewer role"), "{e}");
        // Operators find the rest of theirs, then stop too.
        let mut o = 0;
        while b.take(&format!("o{o}"), Role::Operator, 1 << 20).is_ok() {
            o += 1;
        }
        assert_eq!(b.held(), BELOW_ADMIN_BYTES);
        assert_eq!(o << 20, BELOW_ADMIN_BYTES - VIEWER_BYTES);
        // An admin still finds the last share, whole.
        assert!(b.take("admin", Role::Admin, TOTAL_BYTES - BELOW_ADMIN_BYTES).is_ok());
        assert_eq!(b.held(), TOTAL_BYTES);
        // What viewers give back is theirs again (and only theirs is counted in their share).
        b.give("v0", Role::Viewer, PER_IDENTITY_BYTES / 2);
        b.give("admin", Role::Admin, 1 << 20);
        assert!(b.take("v-new", Role::Viewer, PER_IDENTITY_BYTES / 2).is_ok());
        assert!(b.take("o-new", Role::Operator, 1 << 20).is_err());
    }

    #[test]
    fn each_method_has_a_request_limit_and_only_two_take_large_ones() {
        assert_eq!(request_limit("DeployPayload"), crate::deploy::MAX_PAYLOAD_BYTES + 64 * 1024);
        assert!(request_limit("StartScenario") > crate::start::MAX_SCENARIO_BYTES);
        for m in ["GetStatus", "GetStats", "StreamStats", "ReadSignal", "WriteSignal", "StopScenario", "StopCell"] {
            assert_eq!(request_limit(m), SMALL_REQUEST_BYTES, "{m}");
        }
        assert_eq!(request_limit("(other)"), SMALL_REQUEST_BYTES);
    }
}
