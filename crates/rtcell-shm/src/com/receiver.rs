//! A receiver with AUTOSAR semantics for group members, on the caller's storage.

use super::{ComError, ComView, Place, TABLE, read_slot};
use crate::signal::Freshness;

/// Receiver with AUTOSAR semantics for group members: `receive_signal_group` copies the group into the
/// receiver's shadow, `receive_signal` of a member then reads from that shadow. Storage is the caller's
/// (`shadow`: at least the largest group's length; `seen`: one word per signal and group).
pub struct ComReceiver<'a, 'b> {
    view: ComView<'a>,
    shadow: &'b mut [u8],
    seen: &'b mut [u64],
    /// Which group the shadow currently holds.
    shadow_group: Option<u16>,
}

impl<'a, 'b> ComReceiver<'a, 'b> {
    /// Storage a receiver needs: (shadow bytes, seen words).
    pub fn storage_needed(view: &ComView<'a>) -> (usize, usize) {
        let mut shadow = 0;
        for g in 0..view.ngroups {
            if let Ok(gp) = view.group_at(g) {
                shadow = shadow.max(gp.capacity);
            }
        }
        (shadow, view.nsig + view.ngroups)
    }

    pub fn new(view: ComView<'a>, shadow: &'b mut [u8], seen: &'b mut [u64]) -> Result<Self, ComError> {
        let (need_shadow, need_seen) = Self::storage_needed(&view);
        if shadow.len() < need_shadow || seen.len() < need_seen {
            return Err(ComError::NotOk("receiver storage smaller than storage_needed"));
        }
        Ok(ComReceiver { view, shadow, seen, shadow_group: None })
    }

    /// A receiver over storage a previous one used: `shadow_group` is what [`Self::shadow_group`] said
    /// then (for callers that keep the storage but not the receiver, e.g. across C calls).
    pub fn resume(
        view: ComView<'a>,
        shadow: &'b mut [u8],
        seen: &'b mut [u64],
        shadow_group: Option<u16>,
    ) -> Result<Self, ComError> {
        let mut r = Self::new(view, shadow, seen)?;
        r.shadow_group = shadow_group;
        Ok(r)
    }

    /// Which group's value the shadow holds.
    pub fn shadow_group(&self) -> Option<u16> {
        self.shadow_group
    }

    pub fn view(&self) -> &ComView<'a> {
        &self.view
    }

    /// Blocking receive of a standalone signal this receiver has not read yet (see
    /// [`ComView::receive_signal_blocking`]).
    #[cfg(all(feature = "std", not(loom)))]
    pub fn receive_signal_blocking(&mut self, id: u16, out: &mut [u8], timeout_ns: u64) -> Result<usize, ComError> {
        match self.view.place(id)? {
            Place::Standalone { index, .. } => {
                self.view.receive_signal_blocking(id, out, &mut self.seen[index], timeout_ns)
            }
            Place::Member { .. } => Err(ComError::NotOk("a group member is read with receive_signal_group")),
        }
    }

    /// Reads a signal: standalone from the channel, a group member from the shadow of the last
    /// `receive_signal_group` of its group.
    pub fn receive_signal(&mut self, id: u16, out: &mut [u8]) -> Result<(usize, Freshness), ComError> {
        match self.view.place(id)? {
            // The place just looked up, read directly (not looked up again by `ComView::receive_signal`).
            Place::Standalone { index, slot, max_len, dynamic } => {
                read_slot(self.view.slot(slot, max_len)?, out, &mut self.seen[index], !dynamic)
            }
            Place::Member { index, group, offset, len } => {
                let gid = (self.view.table_word(TABLE + 2 * self.view.nsig + 2 * group)? & 0xffff) as u16;
                if self.shadow_group != Some(gid) {
                    return Err(ComError::NotOk("call receive_signal_group for this signal's group first"));
                }
                if out.len() < len {
                    return Err(ComError::NotOk("buffer shorter than the signal"));
                }
                // The table is re-read from shared memory: a peer may have grown the group past the shadow
                // this receiver was sized for.
                let src = self.shadow.get(offset..offset + len).ok_or(ComError::ServiceNotAvailable)?;
                out[..len].copy_from_slice(src);
                let gseen = self.seen[self.view.nsig + group];
                let fresh = if gseen == 0 {
                    Freshness::NeverWritten
                } else if self.seen[index] == gseen {
                    Freshness::Old
                } else {
                    self.seen[index] = gseen;
                    Freshness::New
                };
                Ok((len, fresh))
            }
        }
    }

    /// Copies a group's current value into the shadow.
    /// On failure the shadow may hold part of a refused value: no member reads it until a group receive
    /// succeeds again.
    pub fn receive_signal_group(&mut self, id: u16) -> Result<Freshness, ComError> {
        let gp = self.view.group(id)?;
        self.shadow_group = None;
        let fresh = self.view.receive_signal_group(id, self.shadow, &mut self.seen[self.view.nsig + gp.index])?;
        self.shadow_group = Some(id);
        Ok(fresh)
    }
}
