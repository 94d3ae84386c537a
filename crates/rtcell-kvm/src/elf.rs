//! Payload ELF loading. The file is untrusted input (it may come over the network later): every header
//! field is checked before a byte is copied, and nothing outside the payload area of guest RAM is touched.

use std::io::Read;
use std::path::{Path, PathBuf};

use object::Endianness;
use object::elf::{EM_X86_64, ET_EXEC, FileHeader64, PF_W, PF_X, PT_DYNAMIC, PT_INTERP, PT_LOAD};
use object::read::elf::{FileHeader, ProgramHeader};
use rtcell_guest::abi::{MONITOR_END, STACK_SIZE};

/// Largest payload file accepted.
pub const MAX_ELF_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElfError {
    #[error("payload is {0} bytes, above the {MAX_ELF_BYTES}-byte limit")]
    TooLarge(usize),
    #[error("not a 64-bit little-endian ELF file ({0})")]
    NotElf(NotElf),
    #[error("ELF machine {0} is not x86-64")]
    WrongMachine(u16),
    #[error("ELF type {0} is not a static executable (ET_EXEC): build the payload with -static -no-pie")]
    NotExecutable(u16),
    #[error("payload needs a dynamic loader (PT_INTERP / PT_DYNAMIC): link it with -static -nostdlib")]
    Dynamic,
    #[error("payload has no loadable segment")]
    NoSegments,
    #[error("segment {index} at {vaddr:#x}: {why}")]
    BadSegment { index: usize, vaddr: u64, why: SegmentError },
    #[error("segments {a} and {b} overlap")]
    Overlap { a: usize, b: usize },
    #[error("entry point {0:#x} is not inside an executable segment")]
    BadEntry(u64),
}

/// Why a file is not an ELF file the monitor can read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotElf {
    /// The ELF parser's reason (header or program headers unreadable).
    #[error("{0}")]
    Parse(object::read::Error),
    #[error("big-endian")]
    BigEndian,
}

/// What is wrong with one loadable segment.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SegmentError {
    #[error("physical address {0:#x} differs from its virtual address")]
    PhysicalAddress(u64),
    #[error("file size above memory size")]
    FileAboveMemory,
    #[error("file range overflows")]
    FileRangeOverflows,
    #[error("file range {start:#x}..{end:#x} runs past the {file_len}-byte file")]
    PastFileEnd { start: u64, end: u64, file_len: usize },
    #[error("address range overflows")]
    AddressOverflows,
    #[error("overlaps the monitor's pages (below {MONITOR_END:#x}): link payloads at {MONITOR_END:#x} or above")]
    MonitorPages,
    #[error(
        "ends at {end:#x}, past the payload area (RAM {ram_size:#x} minus a {STACK_SIZE:#x}-byte stack): give the cell more RAM"
    )]
    PastPayloadArea { end: u64, ram_size: u64 },
}

/// One segment to copy into guest RAM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub gpa: u64,
    /// Bytes from the file (the rest up to `mem_size` is zero).
    pub file_range: core::ops::Range<usize>,
    pub mem_size: u64,
    pub executable: bool,
    pub writable: bool,
}

/// A checked payload image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub entry: u64,
    pub segments: Vec<Segment>,
}

/// Parses and checks `data` for a guest with `ram_size` bytes of RAM: segments must lie between the
/// monitor's pages and the stack at the top of RAM, must not overlap, and the entry must be in code.
pub fn parse(data: &[u8], ram_size: u64) -> Result<Image, ElfError> {
    if data.len() > MAX_ELF_BYTES {
        return Err(ElfError::TooLarge(data.len()));
    }
    let not_elf = |e: object::read::Error| ElfError::NotElf(NotElf::Parse(e));
    let hdr = FileHeader64::<Endianness>::parse(data).map_err(not_elf)?;
    let endian = hdr.endian().map_err(not_elf)?;
    if endian != Endianness::Little {
        return Err(ElfError::NotElf(NotElf::BigEndian));
    }
    if hdr.e_machine(endian) != EM_X86_64 {
        return Err(ElfError::WrongMachine(hdr.e_machine(endian)));
    }
    if hdr.e_type(endian) != ET_EXEC {
        return Err(ElfError::NotExecutable(hdr.e_type(endian)));
    }
    let phdrs = hdr.program_headers(endian, data).map_err(not_elf)?;
    let limit = ram_size.saturating_sub(STACK_SIZE);
    let mut segments = Vec::new();
    for (index, ph) in phdrs.iter().enumerate() {
        let p_type = ph.p_type(endian);
        if p_type == PT_INTERP || p_type == PT_DYNAMIC {
            return Err(ElfError::Dynamic);
        }
        if p_type != PT_LOAD || ph.p_memsz(endian) == 0 {
            continue;
        }
        let vaddr = ph.p_vaddr(endian);
        let bad = |why: SegmentError| ElfError::BadSegment { index, vaddr, why };
        let (off, filesz, memsz) = (ph.p_offset(endian), ph.p_filesz(endian), ph.p_memsz(endian));
        if ph.p_paddr(endian) != vaddr {
            return Err(bad(SegmentError::PhysicalAddress(ph.p_paddr(endian))));
        }
        if filesz > memsz {
            return Err(bad(SegmentError::FileAboveMemory));
        }
        let file_end = off.checked_add(filesz).ok_or_else(|| bad(SegmentError::FileRangeOverflows))?;
        if file_end > data.len() as u64 {
            return Err(bad(SegmentError::PastFileEnd { start: off, end: file_end, file_len: data.len() }));
        }
        let end = vaddr.checked_add(memsz).ok_or_else(|| bad(SegmentError::AddressOverflows))?;
        if vaddr < MONITOR_END {
            return Err(bad(SegmentError::MonitorPages));
        }
        if end > limit {
            return Err(bad(SegmentError::PastPayloadArea { end, ram_size }));
        }
        segments.push(Segment {
            gpa: vaddr,
            file_range: off as usize..file_end as usize,
            mem_size: memsz,
            executable: ph.p_flags(endian) & PF_X != 0,
            writable: ph.p_flags(endian) & PF_W != 0,
        });
    }
    if segments.is_empty() {
        return Err(ElfError::NoSegments);
    }
    for a in 0..segments.len() {
        for b in a + 1..segments.len() {
            let (sa, sb) = (&segments[a], &segments[b]);
            if sa.gpa < sb.gpa + sb.mem_size && sb.gpa < sa.gpa + sa.mem_size {
                return Err(ElfError::Overlap { a, b });
            }
        }
    }
    let entry = hdr.e_entry(endian);
    if !segments.iter().any(|s| s.executable && entry >= s.gpa && entry < s.gpa + s.mem_size) {
        return Err(ElfError::BadEntry(entry));
    }
    Ok(Image { entry, segments })
}

/// Checks `data` as a payload for a guest with `ram_size` bytes of RAM, as [`parse`] does when the cell
/// starts: for refusing a payload before anything starts.
pub fn validate(data: &[u8], ram_size: u64) -> Result<(), ElfError> {
    parse(data, ram_size).map(|_| ())
}

/// Why a payload file was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("payload file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("payload file {} is not a usable payload: {source}", path.display())]
    Elf { path: PathBuf, source: ElfError },
}

/// Reads the payload ELF file at `path` and checks it for a guest with `ram_size` bytes of RAM.
pub fn read_file(path: &Path, ram_size: u64) -> Result<Vec<u8>, FileError> {
    let read_err = |source| FileError::Read { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(read_err(std::io::Error::other("not a regular file")));
    }
    if meta.len() > MAX_ELF_BYTES as u64 {
        return Err(FileError::Elf {
            path: path.to_path_buf(),
            source: ElfError::TooLarge(usize::try_from(meta.len()).unwrap_or(usize::MAX)),
        });
    }
    // One byte more than the limit, in case the file grew since its size was read.
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_ELF_BYTES as u64 + 1).read_to_end(&mut data).map_err(read_err)?;
    validate(&data, ram_size).map_err(|source| FileError::Elf { path: path.to_path_buf(), source })?;
    Ok(data)
}

/// Checks the payload ELF file at `path` for a guest with `ram_size` bytes of RAM (see [`read_file`]).
pub fn validate_file(path: &Path, ram_size: u64) -> Result<(), FileError> {
    read_file(path, ram_size).map(|_| ())
}

impl Image {
    /// Copies the segments into guest RAM (`ram` is guest physical address 0..len); zero-fills the rest of
    /// each segment. `parse` has checked every range against the RAM size.
    pub fn load(&self, data: &[u8], ram: &mut [u8]) {
        for s in &self.segments {
            let start = s.gpa as usize;
            let file = &data[s.file_range.clone()];
            ram[start..start + file.len()].copy_from_slice(file);
            ram[start + file.len()..start + s.mem_size as usize].fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal valid ELF: one PT_LOAD at `vaddr` with `code`, entry at its start.
    pub fn tiny_elf(vaddr: u64, code: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 64 + 56];
        f[0..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // 64-bit
        f[5] = 1; // little-endian
        f[6] = 1; // version
        f[16..18].copy_from_slice(&ET_EXEC.to_le_bytes());
        f[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        f[20..24].copy_from_slice(&1u32.to_le_bytes());
        f[24..32].copy_from_slice(&vaddr.to_le_bytes()); // entry
        f[32..40].copy_from_slice(&64u64.to_le_bytes()); // phoff
        f[52..54].copy_from_slice(&64u16.to_le_bytes()); // ehsize
        f[54..56].copy_from_slice(&56u16.to_le_bytes()); // phentsize
        f[56..58].copy_from_slice(&1u16.to_le_bytes()); // phnum
        let ph = 64;
        f[ph..ph + 4].copy_from_slice(&PT_LOAD.to_le_bytes());
        f[ph + 4..ph + 8].copy_from_slice(&(PF_X | 4).to_le_bytes());
        f[ph + 8..ph + 16].copy_from_slice(&120u64.to_le_bytes()); // offset
        f[ph + 16..ph + 24].copy_from_slice(&vaddr.to_le_bytes());
        f[ph + 24..ph + 32].copy_from_slice(&vaddr.to_le_bytes());
        f[ph + 32..ph + 40].copy_from_slice(&(code.len() as u64).to_le_bytes());
        f[ph + 40..ph + 48].copy_from_slice(&(code.len() as u64 + 64).to_le_bytes());
        f.extend_from_slice(code);
        f
    }

    const RAM: u64 = 2 << 20;

    #[test]
    fn a_valid_image_loads_and_zero_fills() {
        let elf = tiny_elf(0x10_0000, &[0x90, 0xc3]);
        let img = parse(&elf, RAM).unwrap();
        assert_eq!(img.entry, 0x10_0000);
        let mut ram = vec![0xffu8; RAM as usize];
        img.load(&elf, &mut ram);
        assert_eq!(&ram[0x10_0000..0x10_0002], &[0x90, 0xc3]);
        assert!(ram[0x10_0002..0x10_0042].iter().all(|&b| b == 0));
        assert_eq!(ram[0x10_0042], 0xff);
    }

    #[test]
    fn malformed_truncated_oversized_and_overlapping_files_are_refused() {
        let good = tiny_elf(0x10_0000, &[0x90; 16]);
        assert!(matches!(parse(&good[..40], RAM), Err(ElfError::NotElf(_))));
        assert!(matches!(
            parse(b"MZ not an elf at all, just some bytes here........................", RAM),
            Err(ElfError::NotElf(_))
        ));
        assert_eq!(parse(&vec![0u8; MAX_ELF_BYTES + 1], RAM), Err(ElfError::TooLarge(MAX_ELF_BYTES + 1)));
        // Truncated: the segment's file range runs past the end.
        let cut = &good[..good.len() - 4];
        assert!(matches!(parse(cut, RAM), Err(ElfError::BadSegment { .. })));
        // Over the monitor's pages.
        let low = tiny_elf(0x3000, &[0x90]);
        let e = parse(&low, RAM).unwrap_err();
        assert!(e.to_string().contains("monitor's pages"), "{e}");
        // Past RAM minus the stack.
        let high = tiny_elf(RAM - 0x100, &[0x90]);
        assert!(parse(&high, RAM).unwrap_err().to_string().contains("payload area"));
        // Wrong machine, wrong type.
        let mut m = good.clone();
        m[18] = 0x28; // ARM
        assert!(matches!(parse(&m, RAM), Err(ElfError::WrongMachine(0x28))));
        let mut t = good.clone();
        t[16] = 3; // ET_DYN
        assert!(matches!(parse(&t, RAM), Err(ElfError::NotExecutable(3))));
        // Entry outside code.
        let mut en = good.clone();
        en[24..32].copy_from_slice(&0x20_0000u64.to_le_bytes());
        assert!(matches!(parse(&en, RAM), Err(ElfError::BadEntry(_))));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let good = tiny_elf(0x10_0000, &[0x90; 32]);
        for _ in 0..20_000 {
            let mut f = good.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % f.len();
                f[i] = (x >> 32) as u8;
            }
            if let Ok(img) = parse(&f, RAM) {
                let mut ram = vec![0u8; RAM as usize];
                img.load(&f, &mut ram);
            }
        }
    }
}
