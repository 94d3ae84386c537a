//! Speed goals: a ratio of two figures measured in the same run, set against a bound, with its verdict.
//!
//! Every benchmark line that states a goal prints the ratio, the bound and **met** or **missed** through
//! [`Goal::judge`], so no goal is printed without saying whether this run reached it. A ratio that could not
//! be computed (a missing or zero figure) is "not measured", never met.

/// A bound on a ratio: at most (lower is better) or at least (higher is better).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

impl Goal {
    /// Whether `ratio` reaches the goal; `None` when the ratio is not a finite number.
    pub fn met(self, ratio: f64) -> Option<bool> {
        if !ratio.is_finite() {
            return None;
        }
        Some(match self {
            Goal::AtMost(b) => ratio <= b,
            Goal::AtLeast(b) => ratio >= b,
        })
    }

    /// `"met"`, `"missed"` or `"not measured"`.
    pub fn verdict(self, ratio: f64) -> &'static str {
        match self.met(ratio) {
            Some(true) => "met",
            Some(false) => "missed",
            None => "not measured",
        }
    }

    /// `"goal <= 1.5: missed"`: the bound and the verdict, for the end of a ratio line.
    pub fn judge(self, ratio: f64) -> String {
        let (op, b) = match self {
            Goal::AtMost(b) => ("<=", b),
            Goal::AtLeast(b) => (">=", b),
        };
        format!("goal {op} {b}: {}", self.verdict(ratio))
    }

    /// The bound, for a results document.
    pub fn bound(self) -> f64 {
        match self {
            Goal::AtMost(b) | Goal::AtLeast(b) => b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_direction_of_the_bound() {
        assert_eq!(Goal::AtMost(1.5).judge(1.56), "goal <= 1.5: missed");
        assert_eq!(Goal::AtMost(1.5).judge(1.5), "goal <= 1.5: met");
        assert_eq!(Goal::AtLeast(20.0).judge(90.0), "goal >= 20: met");
        assert_eq!(Goal::AtLeast(20.0).judge(3.0), "goal >= 20: missed");
        assert_eq!(Goal::AtMost(2.0).judge(f64::NAN), "goal <= 2: not measured");
        assert_eq!(Goal::AtMost(2.0).judge(f64::INFINITY), "goal <= 2: not measured");
    }
}
