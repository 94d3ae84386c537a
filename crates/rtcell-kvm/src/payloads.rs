//! The built-in payloads, built from `guest/` by this crate's build script and embedded in the monitor:
//!
//! - `echo`: the loopback responder (the guest twin of the host `echo` workload).
//! - `control`: the offloaded internal-model controller (the guest twin of the host `control` workload).
//! - `spin`: a TSC-polled periodic activation that records its lateness in a histogram.
//! - `faults`: misbehaves on purpose (`mode=ud|oob|spin|garbage|panic|ro|done`), for fault-handling tests.

/// Names of the built-in payloads.
pub const NAMES: &[&str] = &["echo", "control", "spin", "faults"];

/// Bytes aligned like `A`: `include_bytes!` alone gives no alignment, and ELF headers are read in
/// place as 8-byte-aligned structures.
#[repr(C)]
struct AlignedAs<A, B: ?Sized> {
    _align: [A; 0],
    bytes: B,
}

macro_rules! include_payload {
    ($name:literal) => {{
        static ALIGNED: &AlignedAs<u64, [u8]> =
            &AlignedAs { _align: [], bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/", $name)) };
        &ALIGNED.bytes
    }};
}

/// The ELF file of payload `name` (8-byte aligned), if it is one of [`NAMES`].
pub fn payload(name: &str) -> Option<&'static [u8]> {
    match name {
        "echo" => Some(include_payload!("echo")),
        "control" => Some(include_payload!("control")),
        "spin" => Some(include_payload!("spin")),
        "faults" => Some(include_payload!("faults")),
        _ => None,
    }
}

/// Whether `payload` names a payload ELF file rather than a built-in payload: it contains a `/` or ends
/// in `.elf` (e.g. `./ctrl.elf`, `build/ctrl.elf`, `ctrl.elf`).
pub fn is_file(payload: &str) -> bool {
    payload.contains('/') || payload.ends_with(".elf")
}

/// Why a payload could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error(
        "no payload named {0:?} (built-in payloads: {names}; a payload file is a path containing '/' or ending in .elf)",
        names = NAMES.join(", ")
    )]
    Unknown(String),
    #[error(transparent)]
    File(#[from] crate::elf::FileError),
}

/// The ELF bytes of `payload`: a built-in payload by name, or (see [`is_file`]) a payload file, read and
/// checked for a guest with `ram_size` bytes of RAM.
pub fn resolve(payload: &str, ram_size: u64) -> Result<std::sync::Arc<[u8]>, PayloadError> {
    if is_file(payload) {
        return Ok(crate::elf::read_file(std::path::Path::new(payload), ram_size)?.into());
    }
    self::payload(payload).map(Into::into).ok_or_else(|| PayloadError::Unknown(payload.into()))
}

/// Checks `payload` (as [`resolve`] gets it) for a guest with `ram_size` bytes of RAM, without keeping it:
/// a scenario refuses a missing or malformed payload before anything starts.
pub fn validate(payload: &str, ram_size: u64) -> Result<(), PayloadError> {
    let elf = resolve(payload, ram_size)?;
    crate::elf::validate(&elf, ram_size)
        .map_err(|source| crate::elf::FileError::Elf { path: std::path::PathBuf::from(payload), source }.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtcell_guest::abi::{DEFAULT_RAM, PAYLOAD_BASE, STACK_SIZE};

    fn u16_at(f: &[u8], off: usize) -> u16 {
        u16::from_le_bytes(f[off..off + 2].try_into().unwrap())
    }
    fn u32_at(f: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(f[off..off + 4].try_into().unwrap())
    }
    fn u64_at(f: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(f[off..off + 8].try_into().unwrap())
    }

    const ET_EXEC: u16 = 2;
    const EM_X86_64: u16 = 62;
    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    const PF_X: u32 = 1;
    const SHT_SYMTAB: u32 = 2;
    const SHT_DYNSYM: u32 = 11;

    /// Checks by hand (independently of the monitor's loader) that `f` is what the monitor expects: a
    /// static, non-PIE x86-64 executable whose loadable segments lie, page-aligned, between
    /// PAYLOAD_BASE and the stack at the top of the default RAM, with the entry in code and no
    /// undefined symbol.
    fn check(name: &str, f: &[u8]) {
        assert_eq!(&f[..4], b"\x7fELF", "{name}: not ELF");
        assert_eq!((f[4], f[5]), (2, 1), "{name}: not 64-bit little-endian");
        assert_eq!(u16_at(f, 16), ET_EXEC, "{name}: not ET_EXEC");
        assert_eq!(u16_at(f, 18), EM_X86_64, "{name}: not x86-64");
        let entry = u64_at(f, 24);
        let (phoff, phentsize, phnum) = (u64_at(f, 32) as usize, u16_at(f, 54) as usize, u16_at(f, 56));
        assert_eq!(phentsize, 56, "{name}");
        let limit = PAYLOAD_BASE + (1 << 20);
        assert!(limit >= DEFAULT_RAM - STACK_SIZE);
        let mut loads = 0;
        let mut entry_in_code = false;
        for i in 0..phnum as usize {
            let ph = &f[phoff + i * phentsize..][..phentsize];
            let p_type = u32_at(ph, 0);
            assert!(p_type != PT_INTERP && p_type != PT_DYNAMIC, "{name}: dynamic segment {p_type}");
            if p_type != PT_LOAD {
                continue;
            }
            loads += 1;
            let (flags, off, vaddr, paddr) = (u32_at(ph, 4), u64_at(ph, 8), u64_at(ph, 16), u64_at(ph, 24));
            let (filesz, memsz) = (u64_at(ph, 32), u64_at(ph, 40));
            assert_eq!(vaddr, paddr, "{name}: segment {i}");
            assert_eq!(vaddr % 4096, 0, "{name}: segment {i} at {vaddr:#x} not page-aligned");
            assert!(vaddr >= PAYLOAD_BASE, "{name}: segment {i} at {vaddr:#x} below PAYLOAD_BASE");
            assert!(
                vaddr + memsz <= DEFAULT_RAM - STACK_SIZE,
                "{name}: segment {i} ends at {:#x}, in the stack or past the default RAM",
                vaddr + memsz
            );
            assert!(filesz <= memsz && off + filesz <= f.len() as u64, "{name}: segment {i}");
            if flags & PF_X != 0 && (vaddr..vaddr + memsz).contains(&entry) {
                entry_in_code = true;
            }
        }
        assert!(loads >= 2, "{name}: {loads} loadable segments");
        assert!(entry_in_code, "{name}: entry {entry:#x} not in an executable segment");

        let (shoff, shentsize, shnum) = (u64_at(f, 40) as usize, u16_at(f, 58) as usize, u16_at(f, 60));
        let mut symtabs = 0;
        for i in 0..shnum as usize {
            let sh = &f[shoff + i * shentsize..][..shentsize];
            let sh_type = u32_at(sh, 4);
            assert_ne!(sh_type, SHT_DYNSYM, "{name}: dynamic symbols");
            if sh_type != SHT_SYMTAB {
                continue;
            }
            symtabs += 1;
            let (off, size, entsize) = (u64_at(sh, 24) as usize, u64_at(sh, 32) as usize, u64_at(sh, 56) as usize);
            assert_eq!(entsize, 24);
            // Entry 0 is the null symbol; any other with section index 0 is undefined.
            for s in (entsize..size).step_by(entsize) {
                let sym = &f[off + s..][..entsize];
                let (st_name, st_shndx) = (u32_at(sym, 0), u16_at(sym, 6));
                assert!(st_name == 0 || st_shndx != 0, "{name}: undefined symbol #{}", s / entsize);
            }
        }
        assert_eq!(symtabs, 1, "{name}: symbol table");
    }

    #[test]
    fn every_payload_is_a_static_executable_in_the_payload_area() {
        for name in NAMES {
            let f = payload(name).unwrap();
            assert_eq!(f.as_ptr() as usize % 8, 0, "{name}: embedded bytes not 8-byte aligned");
            check(name, f);
        }
        assert!(payload("nope").is_none());
    }

    #[test]
    fn names_and_paths() {
        assert!(!is_file("echo"));
        assert!(is_file("ctrl.elf"));
        assert!(is_file("./echo"));
        assert!(is_file("/tmp/x"));
        assert!(resolve("echo", DEFAULT_RAM).is_ok());
        assert!(validate("spin", DEFAULT_RAM).is_ok());
        let e = resolve("nope", DEFAULT_RAM).unwrap_err().to_string();
        assert!(e.contains("no payload named \"nope\"") && e.contains("echo, control"), "{e}");
        let e = validate("/nonexistent/x.elf", DEFAULT_RAM).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/x.elf") && e.contains("No such file"), "{e}");
    }

    #[test]
    fn the_check_refuses_a_position_independent_executable() {
        let mut f = payload("echo").unwrap().to_vec();
        f[16] = 3; // ET_DYN
        assert!(std::panic::catch_unwind(|| check("pie", &f)).is_err());
    }

    #[test]
    fn the_monitor_loader_accepts_every_payload() {
        for name in NAMES {
            let img = crate::elf::parse(payload(name).unwrap(), DEFAULT_RAM).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(img.entry >= PAYLOAD_BASE, "{name}");
        }
    }
}
