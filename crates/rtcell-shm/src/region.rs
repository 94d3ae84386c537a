//! The region: a header and a table of named channels at the start of a shared memory block.
//!
//! Header (words): `magic`, `version | channel_count << 32`, `total_size`, `creator_pid`, 4 reserved;
//! then `channel_count` table entries of 8 words: name (32 bytes, UTF-8, NUL-padded),
//! `kind | flags << 32`, `offset` (bytes), `size` (bytes), `param0 | param1 << 32`.
//! The creator writes everything and stores `magic` last with release ordering, so a peer that attaches
//! never sees a half-written table. Attaching checks every field against the memory it was given.

use crate::com::ComView;
use crate::ring::{Overflow, RingConfig, RingView};
use crate::signal::SignalView;
use crate::sync::{AtomicU64, Ordering};

/// "RTCELLRG" in little-endian bytes.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RTCELLRG");
/// Layout version; a region of another version is refused.
pub const LAYOUT_VERSION: u32 = 1;
/// Words before the channel table.
pub const HEADER_WORDS: usize = 8;
/// Words per channel table entry.
pub const ENTRY_WORDS: usize = 8;
/// Longest channel name in bytes.
pub const MAX_NAME: usize = 32;
/// Most channels one region may hold.
pub const MAX_CHANNELS: usize = 256;

/// What a channel is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    Ring = 1,
    Signal = 2,
    Com = 3,
    /// Opaque words whose layout the user defines (cell control blocks, histograms).
    Raw = 4,
}

impl ChannelKind {
    fn from_u32(v: u32) -> Option<ChannelKind> {
        match v {
            1 => Some(ChannelKind::Ring),
            2 => Some(ChannelKind::Signal),
            3 => Some(ChannelKind::Com),
            4 => Some(ChannelKind::Raw),
            _ => None,
        }
    }
}

const RING_FLAG_OVERWRITE: u32 = 1;
const RING_FLAG_NOTIFY: u32 = 2;

/// Why a region or one of its channels could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachError {
    /// Fewer bytes than the header says (or than a header needs).
    Truncated { need: u64, have: u64 },
    /// Not an rtcell region (or not initialised yet).
    BadMagic { found: u64 },
    /// An rtcell region of another layout version.
    Version { found: u32, supported: u32 },
    /// A header or table field is impossible.
    Corrupt { channel: Option<usize>, what: &'static str },
    /// No channel of that name.
    NotFound,
    /// The channel exists but is of another kind.
    WrongKind { found: ChannelKind, wanted: ChannelKind },
}

impl core::fmt::Display for AttachError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AttachError::Truncated { need, have } => {
                write!(f, "region truncated: header needs {need} bytes, the mapping has {have}")
            }
            AttachError::BadMagic { found } => {
                write!(f, "not an rtcell region (magic {found:#018x}); was it created by rtcell and fully initialised?")
            }
            AttachError::Version { found, supported } => write!(
                f,
                "region layout version {found}, this build supports {supported}: run both sides from the same rtcell version"
            ),
            AttachError::Corrupt { channel: Some(i), what } => write!(f, "corrupt region: channel #{i}: {what}"),
            AttachError::Corrupt { channel: None, what } => write!(f, "corrupt region header: {what}"),
            AttachError::NotFound => write!(f, "no channel of that name in the region"),
            AttachError::WrongKind { found, wanted } => {
                write!(f, "channel is a {found:?}, not a {wanted:?}")
            }
        }
    }
}

/// One validated channel table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelEntry {
    name: [u8; MAX_NAME],
    name_len: usize,
    pub kind: ChannelKind,
    pub flags: u32,
    /// Byte offset from the start of the region (8-aligned).
    pub offset: usize,
    /// Bytes (a multiple of 8).
    pub size: usize,
    pub param0: u32,
    pub param1: u32,
}

impl ChannelEntry {
    pub fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..self.name_len]).unwrap_or("?")
    }

    /// The ring shape this entry describes (for `Ring` entries).
    pub fn ring_config(&self) -> RingConfig {
        RingConfig {
            capacity: self.param0,
            max_frame: self.param1,
            overflow: if self.flags & RING_FLAG_OVERWRITE != 0 { Overflow::OverwriteOldest } else { Overflow::Reject },
            notify: self.flags & RING_FLAG_NOTIFY != 0,
        }
    }
}

/// A region someone created, checked and ready to hand out channels.
#[derive(Clone, Copy)]
pub struct RegionView<'a> {
    words: &'a [AtomicU64],
    count: usize,
    /// The creator's private copy of the table (see `Directory`): when set, channels are located from
    /// it and the live table is never read.
    private: Option<&'a [ChannelEntry]>,
}

/// Checks the header words (`load(k)` is word `k`) against a mapping of `have` bytes:
/// `(channel count, total bytes)`.
pub(crate) fn check_header(load: &dyn Fn(usize) -> u64, have: u64) -> Result<(usize, u64), AttachError> {
    let magic = load(0);
    if magic != MAGIC {
        return Err(AttachError::BadMagic { found: magic });
    }
    let w1 = load(1);
    let version = w1 as u32;
    if version != LAYOUT_VERSION {
        return Err(AttachError::Version { found: version, supported: LAYOUT_VERSION });
    }
    let count = (w1 >> 32) as usize;
    if count > MAX_CHANNELS {
        return Err(AttachError::Corrupt { channel: None, what: "more than 256 channels" });
    }
    let total = load(2);
    if total > have {
        return Err(AttachError::Truncated { need: total, have });
    }
    if total % 8 != 0 {
        return Err(AttachError::Corrupt { channel: None, what: "total size not a multiple of 8" });
    }
    let table_end = HEADER_WORDS + count * ENTRY_WORDS;
    if (table_end * 8) as u64 > total {
        return Err(AttachError::Corrupt { channel: None, what: "channel table runs past the region" });
    }
    Ok((count, total))
}

/// Entry `i` of a table of `count` entries in a region of `total` bytes, validated; `w(k)` is the
/// entry's word `k`.
pub(crate) fn parse_entry(
    i: usize,
    count: usize,
    total: u64,
    w: &dyn Fn(usize) -> u64,
) -> Result<ChannelEntry, AttachError> {
    let corrupt = |what| AttachError::Corrupt { channel: Some(i), what };
    let mut name = [0u8; MAX_NAME];
    for k in 0..4 {
        name[k * 8..k * 8 + 8].copy_from_slice(&w(k).to_le_bytes());
    }
    let name_len = name.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
    if name_len == 0 || core::str::from_utf8(&name[..name_len]).is_err() {
        return Err(corrupt("name empty or not UTF-8"));
    }
    let kind = ChannelKind::from_u32(w(4) as u32).ok_or(corrupt("unknown channel kind"))?;
    let flags = (w(4) >> 32) as u32;
    let (offset, size) = (w(5), w(6));
    let table_end = ((HEADER_WORDS + count * ENTRY_WORDS) * 8) as u64;
    if offset % 8 != 0 || size % 8 != 0 {
        return Err(corrupt("offset or size not 8-aligned"));
    }
    match offset.checked_add(size) {
        Some(end) if offset >= table_end && end <= total => {}
        _ => return Err(corrupt("channel lies outside the region")),
    }
    let entry = ChannelEntry {
        name,
        name_len,
        kind,
        flags,
        offset: offset as usize,
        size: size as usize,
        param0: w(7) as u32,
        param1: (w(7) >> 32) as u32,
    };
    // Shape checks per kind, so that later accessors cannot fail on sizes.
    match kind {
        ChannelKind::Ring => {
            let cfg = entry.ring_config();
            cfg.validate().map_err(corrupt)?;
            if cfg.channel_bytes() != entry.size {
                return Err(corrupt("ring size does not match its capacity"));
            }
        }
        ChannelKind::Signal => {
            if SignalView::words_needed(entry.param0 as usize) * 8 != entry.size {
                return Err(corrupt("signal size does not match its capacity"));
            }
        }
        ChannelKind::Com | ChannelKind::Raw => {}
    }
    Ok(entry)
}

impl<'a> RegionView<'a> {
    /// Checks the header and every table entry against the memory given.
    pub fn attach(words: &'a [AtomicU64]) -> Result<Self, AttachError> {
        let have = (words.len() * 8) as u64;
        if words.len() < HEADER_WORDS {
            return Err(AttachError::Truncated { need: (HEADER_WORDS * 8) as u64, have });
        }
        let (count, total) =
            check_header(&|k| words[k].load(if k == 0 { Ordering::Acquire } else { Ordering::Relaxed }), have)?;
        let view = RegionView { words: &words[..(total / 8) as usize], count, private: None };
        for i in 0..count {
            view.entry(i)?;
        }
        Ok(view)
    }

    /// Number of channels.
    /// The whole region's words (for handing the region to code that attaches on its own, e.g. C).
    pub fn words(&self) -> &'a [AtomicU64] {
        self.words
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Total bytes of the region.
    pub fn size(&self) -> usize {
        self.words.len() * 8
    }

    /// PID of the process that created the region.
    pub fn creator_pid(&self) -> u32 {
        self.words[3].load(Ordering::Relaxed) as u32
    }

    /// Entry `i`, validated.
    pub fn entry(&self, i: usize) -> Result<ChannelEntry, AttachError> {
        if i >= self.count {
            return Err(AttachError::NotFound);
        }
        if let Some(private) = self.private {
            return private.get(i).copied().ok_or(AttachError::NotFound);
        }
        let base = HEADER_WORDS + i * ENTRY_WORDS;
        parse_entry(i, self.count, self.size() as u64, &|k| self.words[base + k].load(Ordering::Relaxed))
    }

    /// A view of `words` whose channels are located from `entries` (a private copy of the table,
    /// each entry validated against `total` bytes), never from the live table. A mapping shorter than
    /// `total` holds no channels.
    #[cfg(all(feature = "std", not(loom)))]
    pub(crate) fn from_private(words: &'a [AtomicU64], total: usize, entries: &'a [ChannelEntry]) -> RegionView<'a> {
        if words.len() * 8 < total {
            return RegionView { words, count: 0, private: Some(&[]) };
        }
        RegionView { words: &words[..total / 8], count: entries.len(), private: Some(entries) }
    }

    /// Finds a channel by name.
    pub fn find(&self, name: &str) -> Result<ChannelEntry, AttachError> {
        for i in 0..self.count {
            let e = self.entry(i)?;
            if e.name() == name {
                return Ok(e);
            }
        }
        Err(AttachError::NotFound)
    }

    fn find_kind(&self, name: &str, wanted: ChannelKind) -> Result<ChannelEntry, AttachError> {
        let e = self.find(name)?;
        if e.kind != wanted {
            return Err(AttachError::WrongKind { found: e.kind, wanted });
        }
        Ok(e)
    }

    /// The words of a validated entry.
    pub fn channel_words(&self, e: &ChannelEntry) -> &'a [AtomicU64] {
        &self.words[e.offset / 8..(e.offset + e.size) / 8]
    }

    pub fn ring(&self, name: &str) -> Result<RingView<'a>, AttachError> {
        let e = self.find_kind(name, ChannelKind::Ring)?;
        RingView::new(self.channel_words(&e), e.ring_config())
            .map_err(|what| AttachError::Corrupt { channel: None, what })
    }

    pub fn signal(&self, name: &str) -> Result<SignalView<'a>, AttachError> {
        let e = self.find_kind(name, ChannelKind::Signal)?;
        SignalView::new(self.channel_words(&e), e.param0 as usize)
            .map_err(|what| AttachError::Corrupt { channel: None, what })
    }

    pub fn com(&self, name: &str) -> Result<ComView<'a>, AttachError> {
        let e = self.find_kind(name, ChannelKind::Com)?;
        ComView::attach(self.channel_words(&e))
    }

    pub fn raw(&self, name: &str) -> Result<&'a [AtomicU64], AttachError> {
        let e = self.find_kind(name, ChannelKind::Raw)?;
        Ok(self.channel_words(&e))
    }
}

/// Building a region: the creator's side. Needs an allocator, so only on the Linux side.
#[cfg(feature = "std")]
pub mod layout {
    use super::*;
    use crate::com::ComConfig;
    use std::string::String;
    use std::vec::Vec;

    struct Planned {
        name: String,
        kind: ChannelKind,
        flags: u32,
        size: usize,
        param0: u32,
        param1: u32,
        com: Option<ComConfig>,
    }

    /// The channels a region will hold, in order.
    #[derive(Default)]
    pub struct RegionLayout {
        planned: Vec<Planned>,
        /// Place every channel (and the end of the header) on a 4 KiB page boundary.
        page_aligned: bool,
    }

    /// Why a layout was refused.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LayoutError(pub String);

    impl core::fmt::Display for LayoutError {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for LayoutError {}

    impl RegionLayout {
        pub fn new() -> Self {
            Self::default()
        }

        fn push(&mut self, p: Planned) -> Result<&mut Self, LayoutError> {
            if p.name.is_empty() || p.name.len() > MAX_NAME || p.name.as_bytes().contains(&0) {
                return Err(LayoutError(format!(
                    "channel name {:?}: must be 1..={MAX_NAME} bytes without NUL",
                    p.name
                )));
            }
            if self.planned.iter().any(|q| q.name == p.name) {
                return Err(LayoutError(format!("channel name {:?} used twice", p.name)));
            }
            if self.planned.len() == MAX_CHANNELS {
                return Err(LayoutError(format!("more than {MAX_CHANNELS} channels")));
            }
            self.planned.push(p);
            Ok(self)
        }

        pub fn ring(&mut self, name: &str, cfg: RingConfig) -> Result<&mut Self, LayoutError> {
            cfg.validate().map_err(|e| LayoutError(format!("ring {name:?}: {e}")))?;
            let mut flags = 0;
            if cfg.overflow == Overflow::OverwriteOldest {
                flags |= RING_FLAG_OVERWRITE;
            }
            if cfg.notify {
                flags |= RING_FLAG_NOTIFY;
            }
            self.push(Planned {
                name: name.into(),
                kind: ChannelKind::Ring,
                flags,
                size: cfg.channel_bytes(),
                param0: cfg.capacity,
                param1: cfg.max_frame,
                com: None,
            })
        }

        pub fn signal(&mut self, name: &str, capacity: u32) -> Result<&mut Self, LayoutError> {
            self.push(Planned {
                name: name.into(),
                kind: ChannelKind::Signal,
                flags: 0,
                size: SignalView::words_needed(capacity as usize) * 8,
                param0: capacity,
                param1: 0,
                com: None,
            })
        }

        pub fn com(&mut self, name: &str, cfg: ComConfig) -> Result<&mut Self, LayoutError> {
            let words = cfg.words_needed().map_err(|e| LayoutError(format!("COM channel {name:?}: {e}")))?;
            self.push(Planned {
                name: name.into(),
                kind: ChannelKind::Com,
                flags: 0,
                size: words * 8,
                param0: cfg.signals.len() as u32,
                param1: cfg.groups.len() as u32,
                com: Some(cfg),
            })
        }

        pub fn raw(&mut self, name: &str, bytes: usize) -> Result<&mut Self, LayoutError> {
            self.push(Planned {
                name: name.into(),
                kind: ChannelKind::Raw,
                flags: 0,
                size: bytes.div_ceil(64) * 64,
                param0: 0,
                param1: 0,
                com: None,
            })
        }

        /// Puts each channel on its own pages, so a VM can be given some of them read-only.
        pub fn page_aligned(&mut self) -> &mut Self {
            self.page_aligned = true;
            self
        }

        /// Byte offsets of each channel (cache-line or page aligned) and the total size.
        fn place(&self) -> (Vec<usize>, usize) {
            let align = if self.page_aligned { 4096 } else { 64 };
            let mut off = ((HEADER_WORDS + self.planned.len() * ENTRY_WORDS) * 8).div_ceil(align) * align;
            let mut offsets = Vec::with_capacity(self.planned.len());
            for p in &self.planned {
                offsets.push(off);
                off += p.size.div_ceil(align) * align;
            }
            (offsets, off)
        }

        /// Bytes the region needs.
        pub fn size_bytes(&self) -> usize {
            self.place().1
        }

        /// The header and table words as `init` writes them (magic included), with each channel's
        /// offset and the total size.
        fn table(&self, creator_pid: u32) -> (Vec<u64>, Vec<usize>, usize) {
            let (offsets, total) = self.place();
            let mut t = vec![0u64; HEADER_WORDS + self.planned.len() * ENTRY_WORDS];
            t[0] = MAGIC;
            t[1] = LAYOUT_VERSION as u64 | (self.planned.len() as u64) << 32;
            t[2] = total as u64;
            t[3] = creator_pid as u64;
            for (i, (p, &off)) in self.planned.iter().zip(&offsets).enumerate() {
                let base = HEADER_WORDS + i * ENTRY_WORDS;
                let mut name = [0u8; MAX_NAME];
                name[..p.name.len()].copy_from_slice(p.name.as_bytes());
                for k in 0..4 {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&name[k * 8..k * 8 + 8]);
                    t[base + k] = u64::from_le_bytes(b);
                }
                t[base + 4] = p.kind as u64 | (p.flags as u64) << 32;
                t[base + 5] = off as u64;
                t[base + 6] = p.size as u64;
                t[base + 7] = p.param0 as u64 | (p.param1 as u64) << 32;
            }
            (t, offsets, total)
        }

        /// The run's own copy of the directory `init` writes (for `creator_pid`): the Linux side locates
        /// every channel from it, never from the live table a cell can rewrite.
        #[cfg(not(loom))]
        pub fn directory(&self, creator_pid: u32) -> Result<crate::directory::Directory, LayoutError> {
            let (table, _, total) = self.table(creator_pid);
            crate::directory::Directory::from_table(table, total).map_err(|e| LayoutError(e.to_string()))
        }

        /// Writes the header, the table and every channel's initial state into `words` (zeroed or not).
        /// Nobody may be attached yet; `magic` is stored last.
        pub fn init(&self, words: &[AtomicU64], creator_pid: u32) -> Result<(), LayoutError> {
            let (table, offsets, total) = self.table(creator_pid);
            if words.len() * 8 < total {
                return Err(LayoutError(format!(
                    "region of {} bytes is too small for its channels ({total} bytes)",
                    words.len() * 8
                )));
            }
            words[0].store(0, Ordering::Relaxed);
            for w in &words[1..total / 8] {
                w.store(0, Ordering::Relaxed);
            }
            for (w, &v) in words.iter().zip(&table).skip(1) {
                w.store(v, Ordering::Relaxed);
            }
            for (p, &off) in self.planned.iter().zip(&offsets) {
                let ch = &words[off / 8..(off + p.size) / 8];
                match p.kind {
                    ChannelKind::Ring => {
                        let cfg = RingConfig {
                            capacity: p.param0,
                            max_frame: p.param1,
                            overflow: if p.flags & RING_FLAG_OVERWRITE != 0 {
                                Overflow::OverwriteOldest
                            } else {
                                Overflow::Reject
                            },
                            notify: p.flags & RING_FLAG_NOTIFY != 0,
                        };
                        RingView::new(ch, cfg).map_err(|e| LayoutError(e.into()))?.init();
                    }
                    ChannelKind::Com => {
                        if let Some(cfg) = &p.com {
                            cfg.write_table(ch);
                        }
                    }
                    ChannelKind::Signal | ChannelKind::Raw => {}
                }
            }
            words[0].store(MAGIC, Ordering::Release);
            Ok(())
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AttachError {}
