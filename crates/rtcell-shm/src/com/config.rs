//! A COM channel's configuration and its layout in words, for the side that creates the channel (it needs
//! an allocator).

use super::{FLAG_DYNAMIC, GroupDef, MAX_GROUPS, MAX_SIGNALS, NO_GROUP, SignalDef, TABLE, W_COUNTS};
use crate::signal::SignalView;
use crate::sync::{AtomicU64, Ordering, words_for};

/// A COM channel's configuration, for the creator (needs an allocator).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComConfig {
    pub signals: std::vec::Vec<SignalDef>,
    pub groups: std::vec::Vec<GroupDef>,
}

/// Word layout of a COM channel: signal offsets, group (slot, capacity), total words.
type ComPlan = (std::vec::Vec<usize>, std::vec::Vec<(usize, usize)>, usize);

impl ComConfig {
    /// Word layout: (signal offsets, group slots, total words). Checks ids and lengths.
    fn plan(&self) -> Result<ComPlan, &'static str> {
        use std::vec::Vec;
        if self.signals.len() > MAX_SIGNALS || self.groups.len() > MAX_GROUPS {
            return Err("too many signals or groups");
        }
        for (i, s) in self.signals.iter().enumerate() {
            if self.signals[..i].iter().any(|t| t.id == s.id) {
                return Err("signal id used twice");
            }
            if s.group.is_some() && s.dynamic {
                return Err("a group member cannot be dynamic-length");
            }
            if let Some(g) = s.group {
                if !self.groups.iter().any(|gd| gd.id == g) {
                    return Err("signal names a group that is not declared");
                }
            }
        }
        for (i, g) in self.groups.iter().enumerate() {
            if self.groups[..i].iter().any(|h| h.id == g.id) {
                return Err("group id used twice");
            }
        }
        let align = |w: usize| w.div_ceil(8) * 8;
        let mut next = align(TABLE + 2 * (self.signals.len() + self.groups.len()));
        // Group capacities: members packed in declaration order.
        let mut member_off = Vec::with_capacity(self.signals.len());
        let mut caps = std::vec![0usize; self.groups.len()];
        for s in &self.signals {
            match s.group {
                Some(g) => {
                    let gi = self.groups.iter().position(|gd| gd.id == g).unwrap_or(0);
                    member_off.push(caps[gi]);
                    caps[gi] += s.max_len as usize;
                }
                None => member_off.push(0),
            }
        }
        let mut offsets = Vec::with_capacity(self.signals.len());
        for (s, &moff) in self.signals.iter().zip(&member_off) {
            if s.group.is_some() {
                offsets.push(moff);
            } else {
                offsets.push(next);
                next = align(next + SignalView::words_needed(s.max_len as usize));
            }
        }
        let mut groups = Vec::with_capacity(self.groups.len());
        for &cap in &caps {
            groups.push((next, cap));
            next = align(next + SignalView::words_needed(cap) + words_for(cap));
        }
        if next > u32::MAX as usize {
            return Err("COM channel too large");
        }
        Ok((offsets, groups, next))
    }

    /// Words the channel needs.
    pub fn words_needed(&self) -> Result<usize, &'static str> {
        Ok(self.plan()?.2)
    }

    /// Writes the table into a zeroed channel (creator only).
    pub(crate) fn write_table(&self, words: &[AtomicU64]) {
        let Ok((offsets, groups, _)) = self.plan() else {
            return;
        };
        words[W_COUNTS].store(self.signals.len() as u64 | (self.groups.len() as u64) << 32, Ordering::Relaxed);
        for (i, (s, &off)) in self.signals.iter().zip(&offsets).enumerate() {
            let g = match s.group {
                Some(g) => self.groups.iter().position(|gd| gd.id == g).map_or(NO_GROUP, |p| p as u64),
                None => NO_GROUP,
            };
            let flags = if s.dynamic { FLAG_DYNAMIC } else { 0 };
            words[TABLE + 2 * i].store(s.id as u64 | g << 16 | flags << 32, Ordering::Relaxed);
            words[TABLE + 2 * i + 1].store(off as u64 | (s.max_len as u64) << 32, Ordering::Relaxed);
        }
        let base = TABLE + 2 * self.signals.len();
        for (g, (gd, &(slot, cap))) in self.groups.iter().zip(&groups).enumerate() {
            words[base + 2 * g].store(gd.id as u64, Ordering::Relaxed);
            words[base + 2 * g + 1].store(slot as u64 | (cap as u64) << 32, Ordering::Relaxed);
        }
    }
}
