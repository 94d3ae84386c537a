//! Refusals audited in aggregate: a client that is refused in a loop (a wrong token, a call above its
//! role, a write over its rate or out of range) adds to a count, and the counts are written once per [`FLUSH_EVERY`], at most [`MAX_LINES`]
//! lines (the largest counts), the rest in one line for all other clients. Nothing is held back for
//! later, so every refusal is in the log within a second, and a flood of refusals from any number of
//! clients writes at most [`MAX_LINES`] + 1 lines a second.

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

/// (client, action, what as JSON text).
type Key = (String, String, String);

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
    /// One refusal of `client` (text of ours: an address or an identity), for `action`, `what`.
    pub fn add(&self, client: &str, action: &str, what: serde_json::Value, result: &Status) {
        let Ok(mut c) = self.counts.lock() else { return };
        let key = (client.to_string(), action.to_string(), what.to_string());
        if let Some(e) = c.by_key.get_mut(&key) {
            e.n += 1;
        } else if c.by_key.len() < MAX_KEYS {
            c.by_key.insert(key, Count { n: 1, what, result: result.clone() });
        } else {
            c.unkeyed += 1;
        }
    }

    /// Takes the counts since the last flush as lines: the [`MAX_LINES`] largest, then one
    /// `("(other clients)", "refused", {"count": N, "clients": K})` for the rest, if any.
    pub fn take(&self) -> Vec<Line> {
        let Ok(mut c) = self.counts.lock() else { return Vec::new() };
        let unkeyed = std::mem::take(&mut c.unkeyed);
        let mut all: Vec<(Key, Count)> = c.by_key.drain().collect();
        drop(c);
        all.sort_by(|a, b| b.1.n.cmp(&a.1.n).then_with(|| a.0.cmp(&b.0)));
        let rest = all.split_off(all.len().min(MAX_LINES));
        let mut lines: Vec<Line> = all
            .into_iter()
            .map(|((client, action, _), mut c)| {
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
            let codes: serde_json::Map<String, serde_json::Value> =
                codes.into_iter().map(|(n, name)| (name.to_string(), n.into())).collect();
            lines.push((
                "(other clients)".into(),
                "refused".into(),
                serde_json::json!({ "count": others, "clients": rest.len(), "codes": codes }),
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
                t.add(&format!("tcp 10.0.0.{a}"), "unauthenticated", serde_json::json!({ "method": "GetStatus" }), &no);
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
        assert!(t.take().is_empty(), "nothing held back for the next flush");
    }

    #[test]
    fn keys_beyond_the_cap_are_counted_in_the_sum_line() {
        let t = Tally::default();
        let no = Status::permission_denied("x");
        for k in 0..MAX_KEYS as u64 + 10 {
            t.add("tcp 10.0.0.1", "denied", serde_json::json!({ "k": k }), &no);
        }
        let lines = t.take();
        let total: u64 = lines.iter().map(|l| l.2["count"].as_u64().unwrap()).sum();
        assert_eq!(total, MAX_KEYS as u64 + 10);
    }
}
