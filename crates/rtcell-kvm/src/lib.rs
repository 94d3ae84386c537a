//! The KVM micro-VM monitor: a `kvm` cell runs a bare-metal payload on one vCPU pinned to the cell CPU,
//! with guest RAM and the channel region as the only memory it can touch. No QEMU, no hypervisor to
//! install: `/dev/kvm` and rust-vmm's `kvm-ioctls`.

pub mod elf;
pub mod layout;
pub mod payloads;
pub mod sdk;
pub mod stats;
pub mod vm;

pub use vm::{KvmCell, KvmConfig, KvmError, KvmStatus, VmEnd, kvm_status};
