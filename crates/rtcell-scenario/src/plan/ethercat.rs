//! `[ethercat]`: the EtherCAT segment of `ethercat` tasks: a real interface, or a simulated segment of
//! 1 to 16 devices on a veth pair made for the run (which alone may disappear after `drop_after` frames).

use super::{Declared, PlanEthercat, Validator};

impl Validator<'_> {
    /// The segment, if the file declares one: an interface or a simulated segment, not both or neither.
    pub(super) fn ethercat(&mut self, d: &Declared) -> Option<PlanEthercat> {
        let e = d.raw.ethercat.as_ref()?;
        match (&e.interface, e.simulated) {
            (Some(i), None) if e.drop_after.is_none() => Some(PlanEthercat::Interface(i.clone())),
            (None, Some(n)) if (1..=16).contains(&n) => {
                Some(PlanEthercat::Simulated { devices: n, drop_after: e.drop_after })
            }
            (None, Some(_)) => {
                self.err("ethercat.simulated", "a simulated segment has 1 to 16 devices", "simulated = 3");
                None
            }
            (Some(_), None) => {
                self.err(
                    "ethercat.drop_after",
                    "drop_after is for a simulated segment",
                    "remove it, or use simulated = N",
                );
                None
            }
            _ => {
                self.err(
                    "ethercat",
                    "give the segment's interface, or simulated = N, not both or neither",
                    "simulated = 3",
                );
                None
            }
        }
    }
}
