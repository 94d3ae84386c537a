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
    /// The client as its first refusal of this second named it (with its address, for an identity).
    client: String,
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
        // An authenticated client is its identity, from whichever address it comes (the number of
        // identities is bounded by the token file and the CA, so their keys are never capped); an
        // unauthenticated one is its address. Either way one key per action and code, whatever varies in
        // `what` (a path outside the service, a method): the first refusal's `what` is the one written.
        let who = if authenticated { identity(client) } else { client.to_string() };
        let key = (authenticated, who, action.to_string(), String::new(), result.code());
        if let Some(e) = c.by_key.get_mut(&key) {
            e.n += 1;
        } else if authenticated || c.by_key.len() < MAX_KEYS {
            c.by_key.insert(key, Count { n: 1, client: client.to_string(), what, result: result.clone() });
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
            .map(|((_, _, action, _, _), mut c)| {
                if let serde_json::Value::Object(o) = &mut c.what {
                    o.insert("count".into(), c.n.into());
                } else {
                    c.what = serde_json::json!({ "count": c.n, "what": c.what });
                }
                (c.client, action, c.what, c.result)
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

/// An authenticated client's name without its address: `"tcp 10.0.0.7 token:ab12"` is
/// `"tcp token:ab12"` (the second word, when it is an IP address, is left out).
fn identity(client: &str) -> String {
    let words: Vec<&str> = client.split(' ').collect();
    match words.as_slice() {
        [scheme, ip, rest @ ..] if ip.parse::<std::net::IpAddr>().is_ok() => {
            std::iter::once(*scheme).chain(rest.iter().copied()).collect::<Vec<_>>().join(" ")
        }
        _ => client.to_string(),
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
        for k in 0..MAX_KEYS as u32 + 10 {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + k);
            t.add(&format!("tcp {ip}"), false, "denied", serde_json::json!({ "k": k }), &no);
        }
        let lines = t.take();
        let total: u64 = lines.iter().map(|l| l.2["count"].as_u64().unwrap()).sum();
        assert_eq!(total, MAX_KEYS as u64 + 10);
    }

    #[test]
    fn neither_many_addresses_nor_many_paths_make_many_lines() {
        let t = Tally::default();
        let denied = Status::permission_denied("needs the operator role");
        // One viewer token from a new address each time: one line, named by the token and its first address.
        for a in 0..5000u32 {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + a);
            t.add(&format!("tcp {ip} token sha256:ab"), true, "denied", serde_json::json!({ "m": "Start" }), &denied);
        }
        // Unique paths outside the service from one address: one line, and no key taken from others.
        let gone = Status::unimplemented("no such method");
        for p in 0..(2 * MAX_KEYS) {
            t.add("tcp 10.9.0.1", false, "refused", serde_json::json!({ "path": format!("/x/{p}") }), &gone);
        }
        t.add("tcp 10.8.0.1 token sha256:cd", true, "denied", serde_json::json!({ "m": "Deploy" }), &denied);
        let lines = t.take();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!((lines[0].0.as_str(), lines[0].2["count"].as_u64()), ("tcp 10.0.0.0 token sha256:ab", Some(5000)));
        assert_eq!(lines[1].0, "tcp 10.8.0.1 token sha256:cd");
        assert_eq!((lines[2].0.as_str(), lines[2].2["count"].as_u64()), ("tcp 10.9.0.1", Some(2 * MAX_KEYS as u64)));
    }
}
