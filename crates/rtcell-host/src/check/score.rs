//! The score of a check and the changes that would help most; [`HostCheck`] is what a results
//! document records.

use serde::{Deserialize, Serialize};

use super::{CheckOptions, Level, Verdict, check_cell_cpu_with};
use crate::root::HostRoot;

/// How many changes [`Summary::top`] names.
pub const TOP_CHANGES: usize = 3;

/// One of the changes that would help most.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopChange {
    pub item: String,
    pub fix: String,
}

/// Counts, score and top changes of a list of verdicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// 0 (nothing as it should be) to 100 (everything ok): the weighted share of items that are ok,
    /// a warning counting half. Items that could not be checked are left out.
    pub score: u32,
    pub ok: usize,
    pub warn: usize,
    pub bad: usize,
    /// Items that could not be checked (counted in `warn` too).
    pub unknown: usize,
    /// The fixes of the heaviest items that are not ok, heaviest (and worst) first.
    pub top: Vec<TopChange>,
}

impl Summary {
    pub fn of(verdicts: &[Verdict]) -> Summary {
        let count = |l: Level| verdicts.iter().filter(|v| v.level == l).count();
        Summary {
            score: score(verdicts),
            ok: count(Level::Ok),
            warn: count(Level::Warn),
            bad: count(Level::Bad),
            unknown: verdicts.iter().filter(|v| v.unknown).count(),
            top: top_changes(verdicts, TOP_CHANGES),
        }
    }

    /// "3 ok, 2 warn (1 not checked), 0 bad; score 70/100".
    pub fn line(&self) -> String {
        let unknown = if self.unknown > 0 { format!(" ({} not checked)", self.unknown) } else { String::new() };
        format!("{} ok, {} warn{unknown}, {} bad; score {}/100", self.ok, self.warn, self.bad, self.score)
    }
}

/// Weighted share of good items, 0..=100: ok counts 1, warn 1/2, bad 0, each times its weight;
/// unchecked items are left out. 0 when nothing could be checked.
pub fn score(verdicts: &[Verdict]) -> u32 {
    let (mut got, mut total) = (0u32, 0u32);
    for v in verdicts.iter().filter(|v| !v.unknown) {
        let w = u32::from(v.weight.max(1));
        total += 2 * w;
        got += match v.level {
            Level::Ok => 2 * w,
            Level::Warn => w,
            Level::Bad => 0,
        };
    }
    (100 * got + total / 2).checked_div(total).unwrap_or(0)
}

/// Up to `n` fixes of checked items that are not ok, by weight, then level (bad first), then the
/// order of the check.
pub fn top_changes(verdicts: &[Verdict], n: usize) -> Vec<TopChange> {
    let mut candidates: Vec<(usize, &Verdict, &String)> = verdicts
        .iter()
        .enumerate()
        .filter(|(_, v)| v.level != Level::Ok && !v.unknown)
        .filter_map(|(i, v)| v.fix.as_ref().map(|f| (i, v, f)))
        .collect();
    candidates.sort_by(|a, b| b.1.weight.cmp(&a.1.weight).then(b.1.level.cmp(&a.1.level)).then(a.0.cmp(&b.0)));
    candidates.into_iter().take(n).map(|(_, v, f)| TopChange { item: v.item.clone(), fix: f.clone() }).collect()
}

/// A check as a results document records it (`host.check`): the CPU checked, the summary, and
/// every verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostCheck {
    pub cpu: usize,
    #[serde(flatten)]
    pub summary: Summary,
    pub verdicts: Vec<Verdict>,
}

impl HostCheck {
    /// Annotates `verdicts` (items added after [`check_cell_cpu_with`] get their reason and weight
    /// too) and summarises them.
    pub fn from_verdicts(cpu: usize, mut verdicts: Vec<Verdict>) -> HostCheck {
        for v in &mut verdicts {
            v.annotate(cpu);
        }
        HostCheck { cpu, summary: Summary::of(&verdicts), verdicts }
    }

    /// Runs the check for `cpu` under `root`.
    pub fn run(root: &HostRoot, cpu: usize, opts: &CheckOptions) -> HostCheck {
        HostCheck::from_verdicts(cpu, check_cell_cpu_with(root, cpu, opts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(item: &str, level: Level, weight: u8, fix: Option<&str>) -> Verdict {
        let mut v = Verdict::new(item, level, "d");
        v.weight = weight;
        v.fix = fix.map(str::to_string);
        v
    }

    #[test]
    fn score_weighs_items_and_skips_unchecked_ones() {
        assert_eq!(score(&[]), 0);
        assert_eq!(score(&[v("a", Level::Ok, 3, None)]), 100);
        assert_eq!(score(&[v("a", Level::Bad, 3, None)]), 0);
        // 3 ok of weight 1, one warn of weight 3: (3*2 + 3) / (3*2 + 6) = 75%.
        let vs = [
            v("a", Level::Ok, 1, None),
            v("b", Level::Ok, 1, None),
            v("c", Level::Ok, 1, None),
            v("d", Level::Warn, 3, Some("x")),
        ];
        assert_eq!(score(&vs), 75);
        let mut with_unknown = vs.to_vec();
        with_unknown.push(v("e", Level::Warn, 3, None).not_checked());
        assert_eq!(score(&with_unknown), 75);
        assert_eq!(Summary::of(&with_unknown).line(), "3 ok, 2 warn (1 not checked), 0 bad; score 75/100");
    }

    #[test]
    fn top_changes_rank_by_weight_then_level_then_order() {
        let vs = [
            v("light", Level::Warn, 1, Some("l")),
            v("heavy warn", Level::Warn, 3, Some("hw")),
            v("no fix", Level::Bad, 3, None),
            v("heavy bad", Level::Bad, 3, Some("hb")),
            v("unchecked", Level::Warn, 3, Some("u")).not_checked(),
            v("fine", Level::Ok, 3, Some("f")),
            v("medium", Level::Warn, 2, Some("m")),
            v("medium 2", Level::Warn, 2, Some("m2")),
        ];
        let top: Vec<String> = top_changes(&vs, 3).into_iter().map(|t| t.item).collect();
        assert_eq!(top, ["heavy bad", "heavy warn", "medium"]);
        assert_eq!(top_changes(&vs, 10).len(), 5);
    }

    #[test]
    fn host_check_round_trips_through_json() {
        let hc = HostCheck::from_verdicts(
            1,
            vec![
                Verdict::warn("rt throttling", "on").with_fix("echo -1 > /proc/sys/kernel/sched_rt_runtime_us"),
                Verdict::ok("cpu", "online"),
            ],
        );
        assert_eq!(hc.verdicts[0].weight, 3);
        assert!(hc.verdicts[0].why.contains("SCHED_FIFO task on CPU 1"), "{}", hc.verdicts[0].why);
        assert_eq!(hc.summary.top[0].item, "rt throttling");
        let json = serde_json::to_value(&hc).unwrap();
        assert_eq!(json["score"], 75);
        assert_eq!(json["verdicts"][0]["level"], "warn");
        assert_eq!(json["top"][0]["fix"], "echo -1 > /proc/sys/kernel/sched_rt_runtime_us");
        let back: HostCheck = serde_json::from_value(json).unwrap();
        assert_eq!(back, hc);
    }
}
