//! `rtcell sdk`: write the parts of the C SDK that ship inside the rtcell binary.

use std::path::PathBuf;

use clap::Subcommand;

pub const PAYLOAD_KIT_HELP: &str = concat!(
    "Writes, under the prefix:\n",
    "  lib/rtcell/librtcell_payload.a          the kvm payload runtime (_start, step loop, C API, memcpy...)\n",
    "  share/rtcell/payload.ld                 the payload linker script\n",
    "  share/rtcell/payload.mk                 the GNU make recipe\n",
    "  share/rtcell/payload-toolchain.cmake    a CMake toolchain file with the same flags\n",
    "\n",
    "The recipe also needs P/include/rtcell.h (scripts/install-sdk installs both). Build a payload:\n",
    "  make -f P/share/rtcell/payload.mk SRC=ctrl/ INIT=ctrl_init STEP=ctrl_step OUT=ctrl.elf\n",
    "and run it in a kvm cell: payload = \"ctrl.elf\" (a path containing '/' or ending in .elf).\n",
    "\n",
    "Exit status: 0 written; 1 a file could not be written."
);

#[derive(Subcommand)]
pub enum SdkCmd {
    /// Write the kvm payload kit (runtime archive, linker script, make recipe, CMake toolchain file)
    /// under a prefix, for building kvm cell payloads from C.
    #[command(after_help = PAYLOAD_KIT_HELP)]
    PayloadKit {
        /// Installation prefix (e.g. /usr/local, or the SDK directory of scripts/install-sdk).
        #[arg(long)]
        prefix: PathBuf,
    },
}

pub fn main(cmd: SdkCmd) -> i32 {
    match cmd {
        SdkCmd::PayloadKit { prefix } => match rtcell_kvm::sdk::write_payload_kit(&prefix) {
            Ok(paths) => {
                for p in paths {
                    outln!("wrote {}", p.display());
                }
                0
            }
            Err(e) => {
                eprintln!("error: writing the payload kit under {}: {e}", prefix.display());
                1
            }
        },
    }
}
