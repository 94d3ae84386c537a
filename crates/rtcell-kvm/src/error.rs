//! Why a kvm cell could not be started.
//!
//! Design: one typed error for the whole monitor, so callers (the cell supervisor, the CLI) match on
//! what went wrong rather than on text; a failed KVM ioctl is kept as the `io::Error` of its errno,
//! named by the step that made it.

use crate::elf::ElfError;
use crate::kvm::KvmStatus;

#[derive(Debug, thiserror::Error)]
pub enum KvmError {
    #[error("{}", .0.explain())]
    Unavailable(KvmStatus),
    #[error("payload {name:?}: {source}")]
    Elf { name: String, source: ElfError },
    #[error(
        "cell RAM of {0} bytes: use a multiple of 2 MiB between 2 MiB and 1008 MiB (above it lies the hypercall window)"
    )]
    BadRam(u64),
    #[error("payload arguments are {0} bytes, above the 3072-byte boot-info limit")]
    ArgsTooLong(usize),
    #[error("region of {0} bytes is larger than the 1 GiB window a kvm cell can map")]
    RegionTooLarge(usize),
    #[error("KVM setup failed at {what}: {source}")]
    Setup { what: &'static str, source: std::io::Error },
}

/// Maps a failed KVM ioctl to [`KvmError::Setup`] at step `what`.
pub(crate) fn setup_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> KvmError {
    move |e| KvmError::Setup { what, source: std::io::Error::from_raw_os_error(e.errno()) }
}
