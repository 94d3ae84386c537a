//! Refusals audited in aggregate: a client that is refused in a loop (a wrong token, a call above its
//! role, a write over its rate or out of range) adds to a count, and the counts are written once per
//! [`FLUSH_EVERY`]. Refusals of authenticated clients come first: every such client has a line of its
//! own (their number is bounded by the tokens and certificates the gateway accepts), with up to
//! [`MAX_LINES`] more for their other counts, so no amount of noise without a credential hides who
//! made a refused call. Unauthenticated addresses get at most [`MAX_LINES`] lines (the largest counts);
//! the rest is one line for all other clients. Nothing is held back for later, so every refusal is in
//! the log within a second.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tonic::Status;

/// How often the counts are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Lines per flush for single clients; the rest are summed into one more line.
pub const MAX_LINES: usize = 16;
/// Distinct (client, action, what) counted between two flushes; refusals beyond go to the sum line.
const MAX_KEYS: usize = 4096;

/// (authenticated, client, action, what as JSON text, refusal code).
type Key = (bool, String, String, String, tonic::Code);

/// One key's refusals since the last flush.
struct Count {
    n: u64,
    what: serde_json::Value,
    result: Status,
}

#[derive(Default)]
pub struct Tally {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    by_key: HashMap<Key, Count>,
    /// Refusals whose key did not fit ([`MAX_KEYS`]).
    unkeyed: u64,
}

/// A line of a flush: (client, action, what with its `count`, the refusal).
pub type Line = (String, String, serde_json::Value, Status);

impl Tally {
    /// One refusal of `client` (text of ours: an identity when `authenticated`, else an address), for
    /// `action`, `what`.
    pub fn add(&self, client: &str, authenticated: bool, action: &str, what: serde_json::Value, result: &Status) {
        let Ok(mut c) = self.counts.lock() else { return };
        let key = (authenticated, client.to_string(), action.to_string(), what.to_string(), result.code());
        if let Some(e) = c.by_key.get_mut(&key) {
            e.n += 1;
        } else if c.by_key.len() < MAX_KEYS {
            c.by_key.insert(key, Count { n: 1, what, result: result.clone() });
        } else {
            c.unkeyed += 1;
        }
    }

    /// Takes the counts since the last flush as lines: authenticated clients first (the largest count
    /// of each, then their [`MAX_LINES`] largest others), then the [`MAX_LINES`] largest of unauthenticated
    /// addresses, then one `("(other clients)", "refused", {"count": N, "clients": K})` for the rest, if any.
    pub fn take(&self) -> Vec<Line> {
        let Ok(mut c) = self.counts.lock() else { return Vec::new() };
        let unkeyed = std::mem::take(&mut c.unkeyed);
        let mut all: Vec<(Key, Count)> = c.by_key.drain().collect();
        drop(c);
        all.sort_by(|a, b| {
            let key = |k: &Key| (k.1.clone(), k.2.clone(), k.3.clone(), k.4 as i32);
            b.0.0.cmp(&a.0.0).then_with(|| b.1.n.cmp(&a.1.n)).then_with(|| key(&a.0).cmp(&key(&b.0)))
        });
        let (mut named, mut rest) = (Vec::new(), Vec::new());
        let (mut seen, mut more, mut unauthenticated) = (std::collections::HashSet::new(), 0, 0);
        for (k, c) in all {
            let name = if k.0 {
                let first = seen.insert(k.1.clone());
                more += usize::from(!first);
                first || more <= MAX_LINES
            } else {
                unauthenticated += 1;
                unauthenticated <= MAX_LINES
            };
            if name { named.push((k, c)) } else { rest.push((k, c)) }
        }
        let mut lines: Vec<Line> = named
            .into_iter()
            .map(|((_, client, action, _, _), mut c)| {
                if let serde_json::Value::Object(o) = &mut c.what {
                    o.insert("count".into(), c.n.into());
                } else {
                    c.what = serde_json::json!({ "count": c.n, "what": c.what });
                }
                (client, action, c.what, c.result)
            })
            .collect();
        let others = rest.iter().map(|(_, c)| c.n).sum::<u64>() + unkeyed;
        if others > 0 {
            // The codes of the refusals summed, most frequent first.
            let mut codes: Vec<(u64, &'static str)> = Vec::new();
            for (_, c) in &rest {
                let name = crate::metrics::code_name(c.result.code());
                match codes.iter_mut().find(|(_, n)| *n == name) {
                    Some(e) => e.0 += c.n,
                    None => codes.push((c.n, name)),
                }
            }
            codes.sort_by(|a, b| b.cmp(a));
            if unkeyed > 0 {
                codes.push((unkeyed, "(more requests than counted apart)"));
            }
            let codes: serde_json::Map<String, serde_json::Value> =
                codes.into_iter().map(|(n, name)| (name.to_string(), n.into())).collect();
            let clients = rest.iter().map(|(k, _)| k.1.as_str()).collect::<std::collections::BTreeSet<_>>().len();
            lines.push((
                "(other clients)".into(),
                "refused".into(),
                serde_json::json!({ "count": others, "clients": clients, "lines": rest.len(), "codes": codes }),
                Status::unknown("refusals of more clients than this second's lines; their codes are in `what`"),
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_summed_per_client_capped_per_flush_and_none_is_lost() {
        let t = Tally::default();
        let no = Status::unauthenticated("wrong bearer token");
        for a in 0..100u32 {
            for _ in 0..=a {
                t.add(
                    &format!("tcp 10.0.0.{a}"),
                    false,
                    "unauthenticated",
                    serde_json::json!({ "method": "GetStatus" }),
                    &no,
                );
            }
        }
        let lines = t.take();
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert_eq!(lines[0].0, "tcp 10.0.0.99", "the largest count first");
        assert_eq!(lines[0].2["count"], 100);
        assert_eq!(lines[0].2["method"], "GetStatus");
        let total: u64 = lines.iter().map(|l| l.2["count"].as_u64().unwrap()).sum();
        assert_eq!(total, (1..=100).sum::<u64>(), "every refusal is in a line");
        assert_eq!(lines[MAX_LINES].2["clients"], 100 - MAX_LINES);
        assert_eq!(
            lines[MAX_LINES].2["codes"]["unauthenticated"],
            total - (100 + 99 + 98 + 97 + 96 + 95 + 94 + 93 + 92 + 91 + 90 + 89 + 88 + 87 + 86 + 85)
        );
        assert!(t.take().is_empty(), "nothing held back for the next flush");
    }

    #[test]
    fn an_authenticated_client_s_refusal_is_named_whatever_the_noise_without_a_credential() {
        let t = Tally::default();
        let no = Status::unauthenticated("wrong bearer token");
        for a in 0..40u32 {
            for _ in 0..10 {
                t.add(&format!("tcp 10.9.0.{a}"), false, "unauthenticated", serde_json::json!({ "m": "x" }), &no);
            }
        }
        let denied = Status::permission_denied("needs the operator role");
        t.add("tcp 10.8.0.1 token sha256:ab", true, "denied", serde_json::json!({ "m": "StartScenario" }), &denied);
        let lines = t.take();
        assert_eq!(lines.len(), MAX_LINES + 2);
        assert_eq!(lines[0].0, "tcp 10.8.0.1 token sha256:ab", "authenticated refusals first");
        assert_eq!(lines[0].3.code(), tonic::Code::PermissionDenied);
        assert_eq!(lines[MAX_LINES + 1].2["clients"], 40 - MAX_LINES);
    }

    #[test]
    fn each_refusal_keeps_its_own_code() {
        let t = Tally::default();
        let what = || serde_json::json!({ "signal": "s" });
        t.add("uid 0", true, "write", what(), &Status::not_found("no run"));
        for _ in 0..3 {
            t.add("uid 0", true, "write", what(), &Status::resource_exhausted("rate"));
        }
        let lines = t.take();
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].3.code(), lines[0].2["count"].as_u64()), (tonic::Code::ResourceExhausted, Some(3)));
        assert_eq!((lines[1].3.code(), lines[1].2["count"].as_u64()), (tonic::Code::NotFound, Some(1)));
    }

    #[test]
    fn keys_beyond_the_cap_are_counted_in_the_sum_line() {
        let t = Tally::default();
        let no = Status::permission_denied("x");
        for k in 0..MAX_KEYS as u64 + 10 {
            t.add("tcp 10.0.0.1", true, "denied", serde_json::json!({ "k": k }), &no);
        }
        let lines = t.take();
        let total: u64 = lines.iter().map(|l| l.2["count"].as_u64().unwrap()).sum();
        assert_eq!(total, MAX_KEYS as u64 + 10);
    }
}
