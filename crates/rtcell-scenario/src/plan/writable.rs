//! `writable = true` signals: what the gateway may write (type and range), checked here once so a write
//! at run time only has to compare numbers.

use super::{MAX_EXACT_INT, Validator, ValueType, Writable};
use crate::file::{RawScenario, RawSignal};

impl Validator<'_> {
    /// The write rules of signal `n` (declared at `p`), or `None` when it is not writable. The reader is
    /// filled in once the tasks are known.
    pub(super) fn writable_signal(&mut self, p: &str, n: &str, s: &RawSignal, raw: &RawScenario) -> Option<Writable> {
        if !s.writable {
            for (field, given) in [("type", s.ty.is_some()), ("min", s.min.is_some()), ("max", s.max.is_some())] {
                if given {
                    self.err(
                        &format!("{p}.{field}"),
                        format!("{field} bounds the writes to a writable signal, and {n:?} is not writable"),
                        "add writable = true, or remove it",
                    );
                }
            }
            return None;
        }
        let ty = match s.ty.as_deref() {
            None | Some("f64") => ValueType::F64,
            Some("i64") => ValueType::I64,
            Some("bool") => ValueType::Bool,
            Some(o) => {
                self.err(&format!("{p}.type"), format!("unknown type {o:?}"), "type = \"f64\", \"i64\" or \"bool\"");
                ValueType::F64
            }
        };
        for (field, v) in [("min", s.min), ("max", s.max)] {
            let Some(v) = v else { continue };
            let at = format!("{p}.{field}");
            if !self.finite(&at, v) {
                continue;
            }
            match ty {
                ValueType::Bool => {
                    self.err(&at, "a bool signal takes 0 or 1: it has no range", format!("remove {field}"))
                }
                ValueType::I64 if v.fract() != 0.0 || v.abs() > MAX_EXACT_INT => {
                    self.err(&at, format!("{v} is not an integer within ±2^53"), "give a whole number")
                }
                _ => {}
            }
        }
        if let (Some(lo), Some(hi)) = (s.min, s.max)
            && lo > hi
        {
            self.err(&format!("{p}.min"), format!("min {lo} is above max {hi}"), "swap them");
        }
        let ack = rtcell_tasks::params::ack_name(n);
        if ack.len() > rtcell_shm::region::MAX_NAME {
            self.err(
                &format!("{p}.writable"),
                format!(
                    "a writable signal's name is at most {} characters (its acknowledgement is {ack:?})",
                    rtcell_shm::region::MAX_NAME - 4
                ),
                "shorten the name",
            );
        }
        if raw.signals.contains_key(&ack) || raw.channels.contains_key(&ack) {
            self.err(
                &format!("{p}.writable"),
                format!("{ack:?} is taken: rtcell names the acknowledgement of writable signal {n:?} so"),
                format!("rename {ack:?}"),
            );
        }
        Some(Writable { ty, min: s.min, max: s.max, reader: String::new() })
    }
}
