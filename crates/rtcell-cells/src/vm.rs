//! Starting a kvm cell: its payload resolved and its VM configured from the cell's spec.

use std::sync::Arc;
use std::time::Duration;

use rtcell_shm::mapping::SharedMemory;

use crate::{CellError, CellSpec};

static TSC_KHZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Hands kvm cells a TSC calibration the caller already has, so starting a cell does not calibrate again.
pub fn set_tsc_khz(khz: u64) {
    let _ = TSC_KHZ.set(khz);
}

/// TSC calibration shared by every kvm cell of the process (calibrating takes ~50 ms, once).
fn tsc_khz() -> u64 {
    *TSC_KHZ.get_or_init(|| rtcell_host::tsc::TscClock::calibrate().map(|t| t.khz()).unwrap_or(0))
}

pub(crate) fn start_kvm(spec: &CellSpec, shm: &Arc<SharedMemory>) -> Result<rtcell_kvm::KvmCell, CellError> {
    let (payload, args, guest_writable) = spec.workload.kvm_payload(&spec.name);
    let ram_size = spec.vm.ram_mib as u64 * (1 << 20);
    // A built-in payload by name, or a payload ELF file by path, checked before anything starts.
    let elf = rtcell_kvm::payloads::resolve(&payload, ram_size).map_err(|e| match e {
        rtcell_kvm::payloads::PayloadError::Unknown(_) => CellError::NoPayload {
            cell: spec.name.clone(),
            payload: payload.clone(),
            known: rtcell_kvm::payloads::NAMES.join(", "),
        },
        rtcell_kvm::payloads::PayloadError::File(source) => CellError::PayloadFile { cell: spec.name.clone(), source },
    })?;
    let cfg = rtcell_kvm::KvmConfig {
        name: spec.name.clone(),
        payload_name: payload,
        payload: elf,
        args,
        cpu: spec.cpu,
        priority: spec.priority,
        lock_memory: spec.lock_memory,
        ram_size,
        region: Arc::clone(shm),
        guest_writable,
        exception_handlers: spec.vm.exception_handlers,
        tsc_khz: tsc_khz(),
        watchdog: spec.vm.watchdog_ms.map(Duration::from_millis),
    };
    rtcell_kvm::KvmCell::start(cfg).map_err(|source| CellError::Kvm { cell: spec.name.clone(), source })
}
