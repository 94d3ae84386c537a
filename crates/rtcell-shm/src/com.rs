//! COM-style channels: a unidirectional channel carrying several signals, in the manner of AUTOSAR COM
//! (`Com_SendSignal`, `Com_ReceiveSignal`, signal groups, dynamic-length signals, blocking receive).
//!
//! Layout (words from the channel start): `nsignals | ngroups << 32`, `event` (futex), 6 reserved;
//! `waiters` on its own line; then 2 words per signal — `id | group << 16 | flags << 32`,
//! `offset | max_len << 32` — and 2 words per group — `id`, `slot | capacity << 32`; then the slots,
//! each cache-line aligned. A standalone signal's `offset` is the word index of its own seqlock slot; a
//! group member's is its byte offset inside the group's value. Each group has a slot (what receivers
//! read) followed by the sender's shadow (where `send_signal` on a member writes until
//! `send_signal_group` commits it), so no side needs an allocator.
//!
//! The table lives in shared memory, so it is re-checked on every lookup: a peer rewriting it later gets
//! `ServiceNotAvailable`/`NotOk`, never an out-of-bounds access. A side that must not take its bounds from
//! the peer at all (the C API: the AUTOSAR calls carry no length) copies the table out once
//! ([`ComView::pin`]) and works on a [`ComView::pinned`] view: every length and offset then comes from that
//! copy (validated when it was made), and every use checks that the live table still equals it — a table
//! changed since is `ServiceNotAvailable` until it reads as the copy again.

use crate::region::AttachError;
use crate::signal::{Freshness, SignalError, SignalView};
use crate::sync::{AtomicU64, Ordering, fence, words_for};

#[cfg(feature = "std")]
mod config;
mod receiver;

#[cfg(feature = "std")]
pub use config::ComConfig;
pub use receiver::ComReceiver;

const W_COUNTS: usize = 0;
const W_EVENT: usize = 1;
const W_WAITERS: usize = 8;
const TABLE: usize = 16;
const NO_GROUP: u64 = 0xffff;
const FLAG_DYNAMIC: u64 = 1;
/// Most signals in one COM channel.
pub const MAX_SIGNALS: usize = 1024;
/// Most groups in one COM channel.
pub const MAX_GROUPS: usize = 256;

/// AUTOSAR `Std_ReturnType` / COM codes, as the C API returns them.
pub mod code {
    pub const E_OK: u8 = 0x00;
    pub const E_NOT_OK: u8 = 0x01;
    pub const COM_SERVICE_NOT_AVAILABLE: u8 = 0x80;
    pub const COM_BUSY: u8 = 0x81;
    /// RTE-style: no data received (queued receive, or a blocking receive that timed out).
    pub const RTE_E_NO_DATA: u8 = 0x83;
    /// RTE-style overlay: data was received but earlier data was lost.
    pub const RTE_E_LOST_DATA: u8 = 0x40;
}

/// Why a COM call did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComError {
    /// Unknown signal or group id, wrong length, a buffer too small, or a corrupt table entry.
    NotOk(&'static str),
    /// The channel is not usable (e.g. its table was corrupted by the peer).
    ServiceNotAvailable,
    /// The sender was mid-update on every retry.
    Busy,
    /// A blocking receive saw no new value before its timeout.
    Timeout,
}

impl ComError {
    /// The AUTOSAR return code for this error.
    pub fn code(&self) -> u8 {
        match self {
            ComError::NotOk(_) => code::E_NOT_OK,
            ComError::ServiceNotAvailable => code::COM_SERVICE_NOT_AVAILABLE,
            ComError::Busy => code::COM_BUSY,
            ComError::Timeout => code::RTE_E_NO_DATA,
        }
    }
}

impl From<SignalError> for ComError {
    fn from(e: SignalError) -> Self {
        match e {
            SignalError::TooLarge { .. } => ComError::NotOk("value longer than the signal's maximum length"),
            SignalError::TooSmall { .. } => ComError::NotOk("buffer shorter than the signal's value"),
            SignalError::Busy => ComError::Busy,
            SignalError::Corrupt(_) => ComError::ServiceNotAvailable,
        }
    }
}

/// One signal of a COM channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalDef {
    pub id: u16,
    /// Bytes; fixed-length signals always carry exactly this many.
    pub max_len: u32,
    /// Dynamic length (0..=max_len per send). Not allowed for group members.
    pub dynamic: bool,
    /// The group this signal belongs to, by group id.
    pub group: Option<u16>,
}

/// A signal group: its members are committed and read as one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupDef {
    pub id: u16,
}

/// Where a signal lives, checked against the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Standalone { index: usize, slot: usize, max_len: usize, dynamic: bool },
    Member { index: usize, group: usize, offset: usize, len: usize },
}

/// A group, checked against the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GroupPlace {
    index: usize,
    slot: usize,
    capacity: usize,
}

/// A standalone signal looked up once ([`ComView::signal_ref`]): where its slot is, and the table entry
/// it came from. Using it re-reads just that entry (two words) to confirm the table has not changed,
/// instead of searching the table again; a changed entry falls back to a full lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalRef {
    id: u16,
    /// Index of the signal in the table (and of its `seen` word in a [`ComReceiver`]).
    pub index: usize,
    entry: (u64, u64),
    slot: usize,
    /// Bytes; fixed-length signals always carry exactly this many.
    pub max_len: usize,
    pub dynamic: bool,
}

impl SignalRef {
    /// The signal's id.
    pub fn id(&self) -> u16 {
        self.id
    }
}

/// A COM channel in shared memory.
#[derive(Clone, Copy)]
pub struct ComView<'a> {
    words: &'a [AtomicU64],
    nsig: usize,
    ngroups: usize,
    /// The table as copied out by [`ComView::pin`] (word `k` of the channel at index `k`; the header words
    /// other than the counts are not used), or `None`: the live table is used, re-checked on each use.
    pinned: Option<&'a [u64]>,
}

impl<'a> ComView<'a> {
    /// Checks the counts and every table entry.
    pub fn attach(words: &'a [AtomicU64]) -> Result<Self, AttachError> {
        let corrupt = |what| AttachError::Corrupt { channel: None, what };
        if words.len() < TABLE {
            return Err(corrupt("COM channel smaller than its header"));
        }
        let counts = words[W_COUNTS].load(Ordering::Relaxed);
        let (nsig, ngroups) = ((counts & 0xffff_ffff) as usize, (counts >> 32) as usize);
        if nsig > MAX_SIGNALS || ngroups > MAX_GROUPS {
            return Err(corrupt("COM channel declares too many signals or groups"));
        }
        if TABLE + 2 * (nsig + ngroups) > words.len() {
            return Err(corrupt("COM signal table runs past the channel"));
        }
        let view = ComView { words, nsig, ngroups, pinned: None };
        view.check_entries().map_err(corrupt)?;
        Ok(view)
    }

    /// Checks every signal and group entry against the channel.
    fn check_entries(&self) -> Result<(), &'static str> {
        for i in 0..self.nsig {
            self.place_at(i).map_err(|_| "COM signal entry out of bounds")?;
        }
        for g in 0..self.ngroups {
            self.group_at(g).map_err(|_| "COM group entry out of bounds")?;
        }
        Ok(())
    }

    /// Words [`Self::pin`] needs.
    pub fn table_words(&self) -> usize {
        self.table_end()
    }

    /// Copies the table out of shared memory into `copy` (at least [`Self::table_words`] long) and checks
    /// the copy: every length and offset a [`Self::pinned`] view of it uses is then our own, not the
    /// peer's. A table the peer changes mid-copy is refused here or noticed on use.
    pub fn pin(&self, copy: &mut [u64]) -> Result<(), ComError> {
        let n = self.table_end();
        let copy = copy.get_mut(..n).ok_or(ComError::NotOk("table copy shorter than table_words"))?;
        for (k, c) in copy.iter_mut().enumerate() {
            *c = if k == W_COUNTS || k >= TABLE { self.words[k].load(Ordering::Relaxed) } else { 0 };
        }
        let counts = copy[W_COUNTS];
        if (counts & 0xffff_ffff) as usize != self.nsig || (counts >> 32) as usize != self.ngroups {
            return Err(ComError::ServiceNotAvailable);
        }
        self.pinned(copy).check_entries().map_err(|_| ComError::ServiceNotAvailable)
    }

    /// This channel with the table `copy` made by [`Self::pin`] (of this channel): lengths and offsets
    /// come from the copy; a live table that differs from it is `ServiceNotAvailable`.
    pub fn pinned<'s>(&self, copy: &'s [u64]) -> ComView<'s>
    where
        'a: 's,
    {
        if copy.len() < self.table_end() {
            // Not a copy of this table: a view with nothing in it, never the live entries.
            return ComView { words: self.words, nsig: 0, ngroups: 0, pinned: Some(copy) };
        }
        ComView { words: self.words, nsig: self.nsig, ngroups: self.ngroups, pinned: Some(copy) }
    }

    /// Table word `k` (the counts or an entry): the pinned copy's, if the live word still equals it.
    #[inline]
    fn table_word(&self, k: usize) -> Result<u64, ComError> {
        let live = self.words[k].load(Ordering::Relaxed);
        match self.pinned {
            None => Ok(live),
            Some(p) if p[k] == live => Ok(live),
            Some(_) => Err(ComError::ServiceNotAvailable),
        }
    }

    /// Table word `k` as this view knows it, unchecked (ids for listing).
    fn known_word(&self, k: usize) -> u64 {
        match self.pinned {
            Some(p) => p[k],
            None => self.words[k].load(Ordering::Relaxed),
        }
    }

    /// With a pinned table: the live counts word still reads as the copy.
    #[inline]
    fn counts_unchanged(&self) -> Result<(), ComError> {
        if self.pinned.is_some() {
            self.table_word(W_COUNTS)?;
        }
        Ok(())
    }

    /// The signal ids in the table, in table order.
    pub fn signal_ids(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.nsig).map(|i| (self.known_word(TABLE + 2 * i) & 0xffff) as u16)
    }

    /// The group ids in the table, in table order.
    pub fn group_ids(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.ngroups).map(|g| (self.known_word(TABLE + 2 * self.nsig + 2 * g) & 0xffff) as u16)
    }

    pub fn signal_count(&self) -> usize {
        self.nsig
    }

    pub fn group_count(&self) -> usize {
        self.ngroups
    }

    fn table_end(&self) -> usize {
        TABLE + 2 * (self.nsig + self.ngroups)
    }

    /// With a pinned table ([`Self::pinned`]): whether the live table (counts and every entry) still
    /// reads as the copy, i.e. as we laid it out. Without one: whether every live entry is in bounds.
    pub fn table_intact(&self) -> Result<(), ComError> {
        if self.pinned.is_none() {
            return self.check_entries().map_err(|_| ComError::ServiceNotAvailable);
        }
        self.counts_unchanged()?;
        for k in TABLE..self.table_end() {
            self.table_word(k)?;
        }
        Ok(())
    }

    fn group_at(&self, g: usize) -> Result<GroupPlace, ComError> {
        let b = self.table_word(TABLE + 2 * self.nsig + 2 * g + 1)?;
        let (slot, capacity) = ((b & 0xffff_ffff) as usize, (b >> 32) as usize);
        let end = slot.checked_add(SignalView::words_needed(capacity) + words_for(capacity));
        if slot < self.table_end() || end.is_none_or(|end| end > self.words.len()) {
            return Err(ComError::ServiceNotAvailable);
        }
        Ok(GroupPlace { index: g, slot, capacity })
    }

    fn place_at(&self, i: usize) -> Result<Place, ComError> {
        let a = self.table_word(TABLE + 2 * i)?;
        let b = self.table_word(TABLE + 2 * i + 1)?;
        let group = (a >> 16) & 0xffff;
        let dynamic = (a >> 32) & FLAG_DYNAMIC != 0;
        let (offset, max_len) = ((b & 0xffff_ffff) as usize, (b >> 32) as usize);
        if group == NO_GROUP {
            let end = offset.checked_add(SignalView::words_needed(max_len));
            if offset < self.table_end() || end.is_none_or(|end| end > self.words.len()) {
                return Err(ComError::ServiceNotAvailable);
            }
            Ok(Place::Standalone { index: i, slot: offset, max_len, dynamic })
        } else {
            let g = group as usize;
            if g >= self.ngroups || dynamic {
                return Err(ComError::ServiceNotAvailable);
            }
            let gp = self.group_at(g)?;
            if offset.checked_add(max_len).is_none_or(|end| end > gp.capacity) {
                return Err(ComError::ServiceNotAvailable);
            }
            Ok(Place::Member { index: i, group: g, offset, len: max_len })
        }
    }

    fn place(&self, id: u16) -> Result<Place, ComError> {
        for i in 0..self.nsig {
            if self.known_word(TABLE + 2 * i) & 0xffff == id as u64 {
                self.counts_unchanged()?;
                return self.place_at(i);
            }
        }
        Err(ComError::NotOk("unknown signal id"))
    }

    fn group(&self, id: u16) -> Result<GroupPlace, ComError> {
        for g in 0..self.ngroups {
            if self.known_word(TABLE + 2 * self.nsig + 2 * g) & 0xffff == id as u64 {
                self.counts_unchanged()?;
                // The id word is part of the entry: a pinned view checks it too.
                self.table_word(TABLE + 2 * self.nsig + 2 * g)?;
                return self.group_at(g);
            }
        }
        Err(ComError::NotOk("unknown signal group id"))
    }

    fn slot(&self, slot: usize, capacity: usize) -> Result<SignalView<'a>, ComError> {
        let n = SignalView::words_needed(capacity);
        let w = self.words.get(slot..slot + n).ok_or(ComError::ServiceNotAvailable)?;
        SignalView::new(w, capacity).map_err(|_| ComError::ServiceNotAvailable)
    }

    /// Looks up standalone signal `id` once, for [`Self::send_ref`] and [`Self::receive_ref`].
    pub fn signal_ref(&self, id: u16) -> Result<SignalRef, ComError> {
        match self.place(id)? {
            Place::Standalone { index, slot, max_len, dynamic } => Ok(SignalRef {
                id,
                index,
                entry: (self.table_word(TABLE + 2 * index)?, self.table_word(TABLE + 2 * index + 1)?),
                slot,
                max_len,
                dynamic,
            }),
            Place::Member { .. } => Err(ComError::NotOk("signal belongs to a group")),
        }
    }

    /// Whether `r`'s table entry still reads as when it was looked up (`r` came from this channel, so
    /// its index is inside the table).
    fn still(&self, r: &SignalRef) -> bool {
        r.index < self.nsig
            && self.counts_unchanged().is_ok()
            && self.words[TABLE + 2 * r.index].load(Ordering::Relaxed) == r.entry.0
            && self.words[TABLE + 2 * r.index + 1].load(Ordering::Relaxed) == r.entry.1
    }

    /// [`Self::send_signal`] through a looked-up signal.
    pub fn send_ref(&self, r: &SignalRef, data: &[u8]) -> Result<(), ComError> {
        if !self.still(r) {
            return self.send_signal(r.id, data);
        }
        check_len(data.len(), r.max_len, r.dynamic)?;
        self.slot(r.slot, r.max_len)?.write(data)?;
        self.notify();
        Ok(())
    }

    /// [`Self::receive_signal`] through a looked-up signal.
    pub fn receive_ref(&self, r: &SignalRef, out: &mut [u8], seen: &mut u64) -> Result<(usize, Freshness), ComError> {
        if !self.still(r) {
            return self.receive_signal(r.id, out, seen);
        }
        read_slot(self.slot(r.slot, r.max_len)?, out, seen, !r.dynamic)
    }

    /// Maximum length of a signal, and whether it is dynamic.
    pub fn signal_len(&self, id: u16) -> Result<(usize, bool), ComError> {
        Ok(match self.place(id)? {
            Place::Standalone { max_len, dynamic, .. } => (max_len, dynamic),
            Place::Member { len, .. } => (len, false),
        })
    }

    /// Bytes a group's value takes.
    pub fn group_len(&self, id: u16) -> Result<usize, ComError> {
        Ok(self.group(id)?.capacity)
    }

    /// Sends a signal (sender side). A group member's value waits in the shadow until
    /// `send_signal_group`. Fixed-length signals take exactly their length; dynamic ones up to it.
    pub fn send_signal(&self, id: u16, data: &[u8]) -> Result<(), ComError> {
        match self.place(id)? {
            Place::Standalone { slot, max_len, dynamic, .. } => {
                check_len(data.len(), max_len, dynamic)?;
                self.slot(slot, max_len)?.write(data)?;
                self.notify();
                Ok(())
            }
            Place::Member { group, offset, len, .. } => {
                check_len(data.len(), len, false)?;
                let gp = self.group_at(group)?;
                let shadow = self.shadow(&gp)?;
                write_bytes_at(shadow, offset, data);
                Ok(())
            }
        }
    }

    fn shadow(&self, gp: &GroupPlace) -> Result<&'a [AtomicU64], ComError> {
        let start = gp.slot + SignalView::words_needed(gp.capacity);
        self.words.get(start..start + words_for(gp.capacity)).ok_or(ComError::ServiceNotAvailable)
    }

    /// Commits every member of a group written with `send_signal` as one value.
    pub fn send_signal_group(&self, id: u16) -> Result<(), ComError> {
        let gp = self.group(id)?;
        let shadow = self.shadow(&gp)?;
        self.slot(gp.slot, gp.capacity)?.write_with(gp.capacity, |dst| {
            for (d, s) in dst.iter().zip(shadow) {
                d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        })?;
        self.notify();
        Ok(())
    }

    /// Reads a standalone signal (receiver side). `seen` remembers what this receiver read last.
    /// Group members are read through [`ComReceiver`].
    pub fn receive_signal(&self, id: u16, out: &mut [u8], seen: &mut u64) -> Result<(usize, Freshness), ComError> {
        match self.place(id)? {
            Place::Standalone { slot, max_len, dynamic, .. } => {
                read_slot(self.slot(slot, max_len)?, out, seen, !dynamic)
            }
            Place::Member { .. } => Err(ComError::NotOk("signal belongs to a group: use receive_signal_group")),
        }
    }

    /// Reads a whole group's value into `out` (at least `group_len` bytes).
    pub fn receive_signal_group(&self, id: u16, out: &mut [u8], seen: &mut u64) -> Result<Freshness, ComError> {
        let gp = self.group(id)?;
        if out.len() < gp.capacity {
            return Err(ComError::NotOk("buffer shorter than the signal group"));
        }
        let (len, fresh) = read_slot(self.slot(gp.slot, gp.capacity)?, &mut out[..gp.capacity], seen, true)?;
        if len != gp.capacity && fresh != Freshness::NeverWritten {
            return Err(ComError::ServiceNotAvailable);
        }
        Ok(fresh)
    }

    fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.words[W_WAITERS].load(Ordering::Relaxed) != 0 {
            self.words[W_EVENT].fetch_add(1, Ordering::Release);
            #[cfg(all(feature = "std", not(loom)))]
            crate::futex::wake_all(&self.words[W_EVENT]);
        }
    }

    /// Blocking receive of a standalone signal: waits (futex, no busy loop) until a value this receiver
    /// has not seen arrives, or `timeout_ns` passes (`Timeout`). For sides that are allowed to sleep.
    #[cfg(all(feature = "std", not(loom)))]
    pub fn receive_signal_blocking(
        &self,
        id: u16,
        out: &mut [u8],
        seen: &mut u64,
        timeout_ns: u64,
    ) -> Result<usize, ComError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_nanos(timeout_ns);
        loop {
            self.words[W_WAITERS].fetch_add(1, Ordering::SeqCst);
            let ev = self.words[W_EVENT].load(Ordering::Acquire);
            fence(Ordering::SeqCst);
            let got = self.receive_signal(id, out, seen);
            let res = match got {
                Ok((len, Freshness::New)) => Some(Ok(len)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            };
            if res.is_none() {
                let now = std::time::Instant::now();
                if now < deadline {
                    crate::futex::wait(&self.words[W_EVENT], ev, (deadline - now).as_nanos() as u64);
                }
            }
            self.words[W_WAITERS].fetch_sub(1, Ordering::SeqCst);
            if let Some(r) = res {
                return r;
            }
            if std::time::Instant::now() >= deadline {
                return Err(ComError::Timeout);
            }
        }
    }
}

/// Reads a signal's slot into `out`; a signal never written gives length 0 and `out` all zeros (its
/// initial value), whatever `out` held before. A `fixed` (fixed-length) signal's value must fill the slot: a
/// shorter one (the peer wrote that length) is `ServiceNotAvailable` and not counted as read.
fn read_slot(
    slot: SignalView<'_>,
    out: &mut [u8],
    seen: &mut u64,
    fixed: bool,
) -> Result<(usize, Freshness), ComError> {
    let mut last = *seen;
    let (len, fresh) = slot.read(out, &mut last)?;
    if fixed && fresh != Freshness::NeverWritten && len != slot.capacity() {
        return Err(ComError::ServiceNotAvailable);
    }
    *seen = last;
    if fresh == Freshness::NeverWritten {
        out.fill(0);
        return Ok((0, fresh));
    }
    Ok((len, fresh))
}

fn check_len(len: usize, max: usize, dynamic: bool) -> Result<(), ComError> {
    if len > max {
        return Err(ComError::NotOk("value longer than the signal's maximum length"));
    }
    if !dynamic && len != max {
        return Err(ComError::NotOk("fixed-length signal sent with another length"));
    }
    Ok(())
}

/// Writes `data` into shared words at byte `offset`, read-modify-writing the partial words at the edges
/// (the shadow has one writer, so this is not a race).
fn write_bytes_at(words: &[AtomicU64], offset: usize, data: &[u8]) {
    for (k, &b) in data.iter().enumerate() {
        let pos = offset + k;
        let Some(w) = words.get(pos / 8) else { return };
        let shift = (pos % 8) * 8;
        let v = w.load(Ordering::Relaxed);
        w.store((v & !(0xff << shift)) | (b as u64) << shift, Ordering::Relaxed);
    }
}
