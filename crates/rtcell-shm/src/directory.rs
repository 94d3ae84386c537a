//! The creator's private copy of a region's directory (header and channel table).
//!
//! Whoever can write the region can rewrite its table: point one channel's entry at another channel,
//! change a size, clear the magic. The Linux side therefore locates every channel from the copy the run
//! computed before the region existed ([`crate::RegionLayout::directory`]), never from the live table, and
//! compares the live table with that copy to find out (and put back) what a cell changed.

use std::string::String;
use std::vec::Vec;

use crate::AttachError;
use crate::region::{ChannelEntry, ENTRY_WORDS, HEADER_WORDS, RegionView, check_header, parse_entry};
use crate::sync::{AtomicU64, Ordering};

/// A region's header and table as its creator wrote them, every entry validated against the creator's
/// own size.
#[derive(Debug, Clone)]
pub struct Directory {
    /// Header and table words, magic included.
    table: Vec<u64>,
    entries: Vec<ChannelEntry>,
    /// Bytes of the region.
    total: usize,
}

/// One difference between the live table and the private copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirectoryChange {
    /// Header word `word` holds `found` where the creator wrote `ours`.
    Header { word: usize, found: u64, ours: u64 },
    /// Table entry `index` (the creator's channel `name`) no longer holds what the creator wrote; `now`
    /// says what it holds instead (peer text, escaped).
    Entry { index: usize, name: String, now: String },
}

impl core::fmt::Display for DirectoryChange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DirectoryChange::Header { word, found, ours } => {
                write!(f, "region header word {word} holds {found:#x} where the run wrote {ours:#x}")
            }
            DirectoryChange::Entry { index, name, now } => {
                write!(f, "directory entry #{index} {name:?} was rewritten: {now}")
            }
        }
    }
}

impl Directory {
    /// A directory from header and table words (as the creator writes them) for a region of `total`
    /// bytes, checked as [`RegionView::attach`] checks a live one.
    pub fn from_table(table: Vec<u64>, total: usize) -> Result<Directory, AttachError> {
        let load = |k: usize| table.get(k).copied().unwrap_or(0);
        let (count, claimed) = check_header(&load, total as u64)?;
        if claimed != total as u64 || table.len() != HEADER_WORDS + count * ENTRY_WORDS {
            return Err(AttachError::Corrupt { channel: None, what: "table does not match the region's size" });
        }
        let entries = (0..count)
            .map(|i| {
                let base = HEADER_WORDS + i * ENTRY_WORDS;
                parse_entry(i, count, claimed, &|k| load(base + k))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Directory { table, entries, total })
    }

    /// A copy of the live table at `words`, validated as [`RegionView::attach`] validates it: for a
    /// region whose creator kept no copy, taken before anyone else could write it.
    pub fn of_live(words: &[AtomicU64]) -> Result<Directory, AttachError> {
        let view = RegionView::attach(words)?;
        let n = HEADER_WORDS + view.len() * ENTRY_WORDS;
        Directory::from_table((0..n).map(|k| live_word(words, k)).collect(), view.size())
    }

    /// A view of the region mapped at `words` that locates channels from this copy only.
    pub fn view<'a>(&'a self, words: &'a [AtomicU64]) -> RegionView<'a> {
        RegionView::from_private(words, self.total, &self.entries)
    }

    /// Bytes of the region.
    pub fn total_bytes(&self) -> usize {
        self.total
    }

    pub fn entries(&self) -> &[ChannelEntry] {
        &self.entries
    }

    /// What the live header and table at `words` hold that differs from this copy (header words
    /// first, then one item per changed entry).
    pub fn changes(&self, words: &[AtomicU64]) -> Vec<DirectoryChange> {
        let live: Vec<u64> = self.table.iter().enumerate().map(|(k, _)| live_word(words, k)).collect();
        if live == self.table {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (word, (&found, &ours)) in live.iter().zip(&self.table).enumerate().take(HEADER_WORDS) {
            if found != ours {
                out.push(DirectoryChange::Header { word, found, ours });
            }
        }
        for (index, ours) in self.entries.iter().enumerate() {
            let base = HEADER_WORDS + index * ENTRY_WORDS;
            if live[base..base + ENTRY_WORDS] == self.table[base..base + ENTRY_WORDS] {
                continue;
            }
            let now = match parse_entry(index, self.entries.len(), self.total as u64, &|k| live[base + k]) {
                Ok(e) if e.name() == ours.name() => format!(
                    "it now says {:?} at offset {}, {} bytes, where the run laid it out at offset {}, {} bytes",
                    e.kind, e.offset, e.size, ours.offset, ours.size
                ),
                Ok(e) => format!(
                    "it now names {:?} ({:?} at offset {}, {} bytes)",
                    e.name().escape_default().to_string(),
                    e.kind,
                    e.offset,
                    e.size
                ),
                Err(e) => format!("it no longer holds a valid entry ({e})"),
            };
            out.push(DirectoryChange::Entry { index, name: ours.name().into(), now });
        }
        out
    }

    /// Puts the creator's header and table back at `words` (magic last).
    pub fn restore(&self, words: &[AtomicU64]) {
        for (w, &v) in words.iter().zip(&self.table).skip(1) {
            w.store(v, Ordering::Relaxed);
        }
        if let (Some(w), Some(&magic)) = (words.first(), self.table.first()) {
            w.store(magic, Ordering::Release);
        }
    }
}

/// Live word `k`, or 0 past a (too short) mapping.
fn live_word(words: &[AtomicU64], k: usize) -> u64 {
    words.get(k).map_or(0, |w| w.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegionLayout;
    use crate::mapping::SharedMemory;

    fn region() -> (SharedMemory, Directory) {
        let mut l = RegionLayout::new();
        l.signal("s", 8).unwrap();
        l.signal("t", 8).unwrap();
        let shm = SharedMemory::create_anonymous("dir-test", l.size_bytes()).unwrap();
        l.init(shm.words(), 7).unwrap();
        let dir = l.directory(7).unwrap();
        (shm, dir)
    }

    #[test]
    fn a_rewritten_entry_is_found_named_ignored_and_put_back() {
        let (shm, dir) = region();
        let w = shm.words();
        assert!(dir.changes(w).is_empty(), "the copy is what init wrote");
        let view = dir.view(w);
        let (s, t) = (view.find("s").unwrap(), view.find("t").unwrap());
        // Entry "s" (index 0) pointed at "t"'s channel, the magic cleared.
        for k in 5..8 {
            let v = w[HEADER_WORDS + ENTRY_WORDS + k].load(Ordering::Relaxed);
            w[HEADER_WORDS + k].store(v, Ordering::Relaxed);
        }
        assert_eq!(RegionView::attach(w).unwrap().find("s").unwrap().offset, t.offset, "the live table lies");
        w[0].store(0, Ordering::Relaxed);
        assert_eq!(view.find("s").unwrap(), s, "the private view does not read the live table");
        let ch = dir.changes(w);
        assert_eq!(ch.len(), 2, "{ch:?}");
        assert!(matches!(ch[0], DirectoryChange::Header { word: 0, found: 0, .. }));
        assert!(ch[1].to_string().contains("directory entry #0 \"s\" was rewritten"), "{}", ch[1]);
        dir.restore(w);
        assert!(dir.changes(w).is_empty());
        assert_eq!(RegionView::attach(w).unwrap().find("s").unwrap(), s);
    }

    #[test]
    fn a_short_mapping_holds_no_channels() {
        let (_shm, dir) = region();
        let short: Vec<AtomicU64> = (0..16).map(|_| AtomicU64::new(0)).collect();
        assert_eq!(dir.view(&short).find("s"), Err(AttachError::NotFound));
    }
}
