//! Cycles that cannot be meant: work longer than the task's period (every cycle overruns, whatever
//! `budget_us` says), or one injected cycle longer than the whole run. An injection longer than the
//! period is what `inject` is for (to show the watchdog and the overrun policies), so only that is allowed
//! past the period.

use crate::file::{RawScenario, RawWork};

use super::Validator;

impl Validator<'_> {
    pub(super) fn check_cycle_lengths(&mut self, raw: &RawScenario) {
        let run_us = raw.duration_s * 1e6;
        for (tname, t) in &raw.tasks {
            let p = format!("tasks.{tname}.workload");
            let (us, inject) = match &t.workload {
                RawWork::Spin { us, inject } => (*us, inject.as_ref()),
                RawWork::Drive { us, .. } => (*us, None),
                _ => continue,
            };
            let period = t.period_us as f64;
            if us.is_finite() && t.period_us > 0 && us > period {
                self.err(
                    &format!("{p}.us"),
                    format!(
                        "{us} us of work in every cycle of a {} us period: every cycle overruns (budget_us does not \
                         change that)",
                        t.period_us
                    ),
                    format!(
                        "make the work shorter than the period (us < {}), or use inject = {{ at_cycle, us }} for \
                         a few long cycles",
                        t.period_us
                    ),
                );
            }
            if let Some(i) = inject
                && i.us.is_finite()
                && run_us.is_finite()
                && run_us > 0.0
                && i.us > run_us
            {
                self.err(
                    &format!("{p}.inject.us"),
                    format!("an injected cycle of {} us is longer than the whole run ({} s)", i.us, raw.duration_s),
                    "inject a cycle shorter than the run, e.g. us = 5 x the period",
                );
            }
        }
    }
}
