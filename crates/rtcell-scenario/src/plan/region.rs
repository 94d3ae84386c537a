//! The shared-memory region a scenario needs, checked at validation: every ring's size computed without
//! wrapping, the channel count against what one region holds, and the region's total size against a
//! stated budget, so that a run never fails (or silently shrinks a ring) at start for these.

use rtcell_shm::RingConfig;
use rtcell_shm::com::{MAX_GROUPS, MAX_SIGNALS};
use rtcell_shm::region::MAX_CHANNELS;

use crate::file::RawScenario;

use super::{Plan, Validator};

/// Most bytes a run's shared memory may take: 1 GiB (and at most half of the memory available at
/// validation, see [`region_budget`]). The region is locked in memory for the whole run.
pub const MAX_REGION_BYTES: u64 = 1 << 30;

/// The region budget on this machine: `min(1 GiB, MemAvailable / 2)`, with how it was found.
pub fn region_budget() -> (u64, String) {
    let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    });
    match available {
        Some(a) if a / 2 < MAX_REGION_BYTES => (a / 2, format!("half of the {} MiB available now", a >> 20)),
        _ => (MAX_REGION_BYTES, "1 GiB, the most a run's shared memory may take".to_string()),
    }
}

fn mib(b: u64) -> String {
    if b >= 1 << 20 { format!("{} MiB", b >> 20) } else { format!("{b} bytes") }
}

impl Validator<'_> {
    /// Each ring's size (no wrap), their sum against the budget, and COM channels' signal counts.
    pub(super) fn check_region(&mut self, raw: &RawScenario) {
        // One ring against the fixed limit (the same message on every machine); the sum against this
        // machine's budget.
        let (budget, why) = region_budget();
        let mut total: u64 = 0;
        for (n, ch) in &raw.channels {
            let p = format!("channels.{n}.capacity");
            let (frames, bytes) = (ch.capacity, ch.frame_bytes);
            let ring = RingConfig::try_for_frames(bytes, frames).map(|c| c.channel_bytes() as u64);
            match ring {
                Some(r) if r <= MAX_REGION_BYTES => total = total.saturating_add(r),
                _ => {
                    let need = (u64::from(bytes) + 31) * u64::from(frames);
                    self.err(
                        &p,
                        format!(
                            "a ring of {frames} frames of {bytes} bytes needs about {}, above the 1 GiB a run's shared \
                             memory may take",
                            mib(need)
                        ),
                        "use fewer frames or smaller frames, e.g. capacity = 256",
                    );
                }
            }
        }
        if total > budget {
            self.err(
                "channels",
                format!(
                    "the channels' rings take {} together, above the region budget of {} ({why})",
                    mib(total),
                    mib(budget)
                ),
                "use fewer or smaller channels (capacity x frame_bytes)",
            );
        }
        for (n, c) in &raw.com {
            if c.signals.len() > MAX_SIGNALS {
                self.err(
                    &format!("com.{n}.signals"),
                    format!("{} signals: a COM channel holds at most {MAX_SIGNALS}", c.signals.len()),
                    "split the signals over several COM channels",
                );
            }
            if c.groups.len() > MAX_GROUPS {
                self.err(
                    &format!("com.{n}.groups"),
                    format!("{} groups: a COM channel holds at most {MAX_GROUPS}", c.groups.len()),
                    "split the groups over several COM channels",
                );
            }
        }
    }

    /// The region of a plan that is otherwise valid: laid out as the run will lay it out, so that what
    /// the run would refuse at start is refused here with the field to change.
    pub(super) fn check_layout(&mut self, plan: &Plan) {
        let fixed = 1 + plan.cells.len();
        let others = plan.channels.len()
            + plan.coms.len()
            + plan.signals.iter().map(|s| if s.writable.is_some() { 2 } else { 1 }).sum::<usize>();
        let needed = fixed + 3 * plan.tasks.len() + others;
        if needed > MAX_CHANNELS {
            let most = MAX_CHANNELS.saturating_sub(fixed + others) / 3;
            let (fit, fix) = if most == 0 {
                (
                    format!("the cells, channels, signals and COM channels alone take {}", fixed + others),
                    "use fewer channels, signals or cells, or split the scenario".to_string(),
                )
            } else {
                (
                    format!("with these channels at most {most} tasks fit"),
                    format!("use at most {most} tasks, or split the scenario"),
                )
            };
            self.err(
                "tasks",
                format!(
                    "the scenario needs {needed} shared-memory channels, more than the {MAX_CHANNELS} one region holds \
                     (each task takes 3, each cell 1, each channel, signal and COM channel 1, a writable signal 2): \
                     {fit}, the file has {} tasks",
                    plan.tasks.len()
                ),
                fix,
            );
            return;
        }
        match crate::run::layout(plan) {
            Err(e) => self.err("", format!("the shared-memory region cannot be laid out: {e}"), "see the README"),
            Ok(l) => {
                let (budget, why) = region_budget();
                let size = l.size_bytes() as u64;
                if size > budget {
                    self.err(
                        "channels",
                        format!(
                            "the shared-memory region takes {}, above the budget of {} ({why})",
                            mib(size),
                            mib(budget)
                        ),
                        "use fewer or smaller channels",
                    );
                }
            }
        }
    }
}
