//! The KVM micro-VM monitor: a `kvm` cell runs a bare-metal payload on one vCPU pinned to the cell CPU,
//! with guest RAM and the channel region as the only memory it can touch. No QEMU, no hypervisor to
//! install: `/dev/kvm` and rust-vmm's `kvm-ioctls`.
//!
//! A newcomer reads [`vm`] first (a cell's lifecycle); the modules it uses each own one concern.

pub mod elf;
mod error;
mod fault;
pub mod guest_log;
mod kick;
pub mod kvm;
pub mod layout;
mod memory;
pub mod payloads;
pub mod sdk;
pub mod stats;
mod vcpu;
pub mod vm;
mod watchdog;

pub use error::KvmError;
pub use kvm::{KVM_DEVICE_ENV, KvmStatus, kvm_status};
pub use vm::{KvmCell, KvmConfig, VmEnd};
