//! The kvm payload kit of the SDK: what it takes, besides a C compiler and `include/rtcell.h`, to build
//! a kvm cell payload from C sources. Embedded at build time, written out by `rtcell sdk payload-kit`:
//!
//! - `lib/rtcell/librtcell_payload.a`: the payload runtime (`guest/c-runtime`): `_start`, the step loop,
//!   the no_std C API, the C memory functions, panic and fault reporting;
//! - `share/rtcell/payload.ld`: the linker script of every payload (`guest/payload.ld`);
//! - `share/rtcell/payload.mk`: the GNU make recipe
//!   (`make -f P/share/rtcell/payload.mk SRC=dir INIT=ctrl_init STEP=ctrl_step OUT=ctrl.elf`);
//! - `share/rtcell/payload-toolchain.cmake`: a CMake toolchain file with the same flags.

use std::io;
use std::path::{Path, PathBuf};

/// Bytes aligned like `A` (see `payloads.rs`): the archive is written out as is, but an aligned copy
/// costs nothing.
#[repr(C)]
struct AlignedAs<A, B: ?Sized> {
    _align: [A; 0],
    bytes: B,
}

static RUNTIME: &AlignedAs<u64, [u8]> =
    &AlignedAs { _align: [], bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/librtcell_payload.a")) };

/// The payload runtime archive, `librtcell_payload.a`.
pub fn runtime_archive() -> &'static [u8] {
    &RUNTIME.bytes
}

/// The payload linker script (the one the built-in payloads are linked with).
pub const LINKER_SCRIPT: &str = include_str!("../../../guest/payload.ld");

/// The GNU make recipe.
pub const PAYLOAD_MK: &str = include_str!("../sdk/payload.mk");

/// The CMake toolchain file.
pub const TOOLCHAIN_CMAKE: &str = include_str!("../sdk/payload-toolchain.cmake");

/// The files of the kit, as (path relative to the prefix, contents).
pub fn files() -> [(&'static str, &'static [u8]); 4] {
    [
        ("lib/rtcell/librtcell_payload.a", runtime_archive()),
        ("share/rtcell/payload.ld", LINKER_SCRIPT.as_bytes()),
        ("share/rtcell/payload.mk", PAYLOAD_MK.as_bytes()),
        ("share/rtcell/payload-toolchain.cmake", TOOLCHAIN_CMAKE.as_bytes()),
    ]
}

/// Writes the kit under `prefix` (creating directories as needed, replacing older files) and returns
/// the paths written. `include/rtcell.h`, which the recipe also needs, comes with the C API.
pub fn write_payload_kit(prefix: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (rel, bytes) in files() {
        let path = prefix.join(rel);
        let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(with_path)?;
        }
        // Through a temporary file and a rename, so a build reading the kit never sees half a file.
        let tmp = path.with_extension("tmp-write");
        std::fs::write(&tmp, bytes).map_err(with_path)?;
        std::fs::rename(&tmp, &path).map_err(with_path)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_is_an_archive_with_the_entry_point_and_the_c_api() {
        let a = runtime_archive();
        assert!(a.starts_with(b"!<arch>\n"), "not an ar archive");
        let has = |sym: &[u8]| a.windows(sym.len()).any(|w| w == sym);
        for sym in [&b"_start"[..], b"rtcell_cell_attach", b"Com_SendSignal", b"memcpy", b"rtcell_payload_no_init"] {
            assert!(has(sym), "{} missing", String::from_utf8_lossy(sym));
        }
    }

    #[test]
    fn the_kit_is_written_under_the_prefix() {
        let dir = std::env::temp_dir().join(format!("rtcell-kit-test-{}", std::process::id()));
        let paths = write_payload_kit(&dir).unwrap();
        assert_eq!(paths.len(), 4);
        assert_eq!(std::fs::read(dir.join("share/rtcell/payload.ld")).unwrap(), LINKER_SCRIPT.as_bytes());
        assert_eq!(std::fs::read(dir.join("lib/rtcell/librtcell_payload.a")).unwrap(), runtime_archive());
        // Twice: replaces what is there.
        write_payload_kit(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
