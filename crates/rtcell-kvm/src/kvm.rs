//! The KVM device: where it is, whether it can be used here, and the capabilities a cell depends on.
//!
//! Design: everything that asks the host "is KVM there and what can it do" lives here, so the probe the
//! CLI and the planner show the user (`kvm_status`) and the device a cell opens are the same code path,
//! and a test can point both at a missing device through [`KVM_DEVICE_ENV`].

use kvm_bindings::CpuId;
use kvm_ioctls::{Cap, Kvm};

/// Environment variable naming the KVM device (default `/dev/kvm`), e.g. to test a machine without it.
pub const KVM_DEVICE_ENV: &str = "RTCELL_KVM_DEVICE";

/// Whether KVM can be used here, and what kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvmStatus {
    /// Usable; `nested` when this machine is itself a VM.
    Usable {
        nested: bool,
    },
    Absent {
        path: String,
    },
    Denied {
        path: String,
        reason: String,
    },
    Broken {
        path: String,
        reason: String,
    },
}

impl KvmStatus {
    pub fn is_usable(&self) -> bool {
        matches!(self, KvmStatus::Usable { .. })
    }

    /// The schema's word for it: hardware, nested, absent, denied.
    pub fn kind(&self) -> &'static str {
        match self {
            KvmStatus::Usable { nested: false } => "hardware",
            KvmStatus::Usable { nested: true } => "nested",
            KvmStatus::Absent { .. } => "absent",
            KvmStatus::Denied { .. } | KvmStatus::Broken { .. } => "denied",
        }
    }

    /// What it means for the user, in one sentence.
    pub fn explain(&self) -> String {
        match self {
            KvmStatus::Usable { nested: false } => "KVM is usable with hardware virtualisation: kvm cells run their payloads natively".into(),
            KvmStatus::Usable { nested: true } => "KVM is usable, nested inside another hypervisor: ring-3 payloads run natively, but every VM exit and the guest's ring-0 code (exception reports) cost far more than on bare metal".into(),
            KvmStatus::Absent { path } => format!("{path} does not exist: kvm cells are unavailable (load kvm_intel or kvm_amd, or enable virtualisation in the BIOS); thread and process cells still work"),
            KvmStatus::Denied { path, reason } => format!("{path} cannot be opened ({reason}): kvm cells are unavailable; add the user to the kvm group or run as root; thread and process cells still work"),
            KvmStatus::Broken { path, reason } => format!("{path} opened but KVM is not usable ({reason}); thread and process cells still work"),
        }
    }
}

fn kvm_path() -> String {
    std::env::var(KVM_DEVICE_ENV).unwrap_or_else(|_| "/dev/kvm".into())
}

/// Opens the KVM device; why not, as a status, when it cannot be.
pub(crate) fn open_kvm() -> Result<Kvm, KvmStatus> {
    let path = kvm_path();
    let cpath = std::ffi::CString::new(path.clone())
        .map_err(|_| KvmStatus::Broken { path: path.clone(), reason: "path contains NUL".into() })?;
    match Kvm::new_with_path(&cpath) {
        Ok(k) => Ok(k),
        Err(e) if e.errno() == libc::ENOENT => Err(KvmStatus::Absent { path }),
        Err(e) if e.errno() == libc::EACCES || e.errno() == libc::EPERM => {
            Err(KvmStatus::Denied { path, reason: e.to_string() })
        }
        Err(e) => Err(KvmStatus::Broken { path, reason: e.to_string() }),
    }
}

fn running_nested() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .is_ok_and(|c| c.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor")))
}

/// Probes KVM: opens the device and creates (and drops) a VM.
pub fn kvm_status() -> KvmStatus {
    let kvm = match open_kvm() {
        Ok(k) => k,
        Err(s) => return s,
    };
    if kvm.get_api_version() != 12 {
        return KvmStatus::Broken { path: kvm_path(), reason: format!("API version {}", kvm.get_api_version()) };
    }
    match kvm.create_vm() {
        Ok(_) => KvmStatus::Usable { nested: running_nested() },
        Err(e) => KvmStatus::Broken { path: kvm_path(), reason: format!("KVM_CREATE_VM: {e}") },
    }
}

/// Whether KVM can map memory read-only to the guest (`KVM_CAP_READONLY_MEM`).
pub(crate) fn has_readonly_mem(kvm: &Kvm) -> bool {
    kvm.check_extension(Cap::ReadonlyMem)
}

/// Whether payloads may use AVX: the CPU offers XSAVE and AVX (CPUID leaf 1, ECX bits 26 and 28) and
/// KVM can set XCR0 (`KVM_CAP_XCRS`). SSE is always on.
pub(crate) fn has_avx(kvm: &Kvm, cpuid: &CpuId) -> bool {
    let leaf1 = cpuid.as_slice().iter().find(|e| e.function == 1).map_or(0, |e| e.ecx);
    kvm.check_extension(Cap::Xcrs) && leaf1 & (1 << 26) != 0 && leaf1 & (1 << 28) != 0
}
