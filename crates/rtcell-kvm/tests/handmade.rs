//! Boots hand-assembled payloads (no guest toolchain involved) to check the monitor itself.

use std::sync::Arc;
use std::time::Duration;

use rtcell_kvm::{KvmCell, KvmConfig, VmEnd};
use rtcell_shm::RegionLayout;
use rtcell_shm::control;
use rtcell_shm::mapping::SharedMemory;

/// A minimal static ELF: one RWX PT_LOAD at 0x100000 holding `code`, entry at its start.
fn tiny_elf(code: &[u8]) -> Vec<u8> {
    let vaddr: u64 = 0x10_0000;
    let mut f = vec![0u8; 120];
    f[0..4].copy_from_slice(b"\x7fELF");
    f[4] = 2;
    f[5] = 1;
    f[6] = 1;
    f[16..18].copy_from_slice(&2u16.to_le_bytes());
    f[18..20].copy_from_slice(&62u16.to_le_bytes());
    f[20..24].copy_from_slice(&1u32.to_le_bytes());
    f[24..32].copy_from_slice(&vaddr.to_le_bytes());
    f[32..40].copy_from_slice(&64u64.to_le_bytes());
    f[52..54].copy_from_slice(&64u16.to_le_bytes());
    f[54..56].copy_from_slice(&56u16.to_le_bytes());
    f[56..58].copy_from_slice(&1u16.to_le_bytes());
    f[64..68].copy_from_slice(&1u32.to_le_bytes());
    f[68..72].copy_from_slice(&7u32.to_le_bytes());
    f[72..80].copy_from_slice(&120u64.to_le_bytes());
    f[80..88].copy_from_slice(&vaddr.to_le_bytes());
    f[88..96].copy_from_slice(&vaddr.to_le_bytes());
    f[96..104].copy_from_slice(&(code.len() as u64).to_le_bytes());
    f[104..112].copy_from_slice(&(code.len() as u64).to_le_bytes());
    f.extend_from_slice(code);
    f
}

fn region() -> Arc<SharedMemory> {
    let mut layout = RegionLayout::new();
    control::add_to_layout(&mut layout, "hm").unwrap();
    let shm = SharedMemory::create_anonymous("t", layout.size_bytes()).unwrap();
    layout.init(shm.words(), std::process::id()).unwrap();
    Arc::new(shm)
}

fn boot(code: &[u8], handlers: bool) -> VmEnd {
    let _cpu = rtcell_testkit::cell_cpu();
    let cfg = KvmConfig { exception_handlers: handlers, ..config(code) };
    let cell = KvmCell::start(cfg).unwrap();
    wait_finished(&cell);
    cell.stop(Duration::from_secs(1))
}

/// Waits up to 10 s for the VM to end on its own.
fn wait_finished(cell: &KvmCell) {
    let t0 = std::time::Instant::now();
    while !cell.is_finished() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// mov eax, 42; mov [hypercall_gpa(HC_DONE)], eax; jmp $
fn done_42() -> Vec<u8> {
    let mut code = vec![0xB8, 42, 0, 0, 0, 0xA3];
    code.extend_from_slice(&rtcell_guest::abi::hypercall_gpa(rtcell_guest::abi::HC_DONE).to_le_bytes());
    code.extend_from_slice(&[0xEB, 0xFE]);
    code
}

#[test]
fn done_hypercall_returns_the_exit_code() {
    assert_eq!(boot(&done_42(), true), VmEnd::Done(42));
}

#[test]
fn port_io_is_refused_in_ring_3() {
    // mov dx, 0x80; out dx, eax
    let e = boot(&[0x66, 0xBA, 0x80, 0x00, 0xEF, 0xEB, 0xFE], true);
    assert!(matches!(&e, VmEnd::Fault(m) if m.contains("general protection")), "{e:?}");
}

#[test]
fn ud2_is_reported_by_the_handler_or_as_a_triple_fault_without_it() {
    let e = boot(&[0x0F, 0x0B], true);
    assert!(matches!(&e, VmEnd::Fault(m) if m.contains("invalid opcode") && m.contains("0x100000")), "{e:?}");
    let e = boot(&[0x0F, 0x0B], false);
    assert!(matches!(&e, VmEnd::Fault(m) if m.contains("triple fault")), "{e:?}");
}

#[test]
fn write_outside_memory_is_an_mmio_fault_with_the_address() {
    // mov rax, 0x30000000; mov [rax], eax
    let e = boot(&[0x48, 0xB8, 0, 0, 0, 0x30, 0, 0, 0, 0, 0x89, 0x00], true);
    assert!(matches!(&e, VmEnd::Fault(m) if m.contains("0x30000000") && m.contains("outside its memory")), "{e:?}");
}

#[test]
fn write_to_boot_info_is_a_page_fault() {
    // mov rax, 0x1000; mov [rax], eax
    let e = boot(&[0x48, 0xB8, 0, 0x10, 0, 0, 0, 0, 0, 0, 0x89, 0x00], true);
    assert!(matches!(&e, VmEnd::Fault(m) if m.contains("page fault") && m.contains("0x1000")), "{e:?}");
}

fn config(code: &[u8]) -> KvmConfig {
    KvmConfig {
        name: "hm".into(),
        payload_name: "handmade".into(),
        payload: tiny_elf(code).into(),
        args: String::new(),
        cpu: 1,
        priority: None,
        lock_memory: false,
        ram_size: 2 << 20,
        region: region(),
        guest_writable: vec![],
        exception_handlers: true,
        tsc_khz: 1_000_000,
        watchdog: None,
    }
}

/// Kicks (stop requests, watchdog trips) can come while the vCPU thread ends and closes its vCPU: a kick
/// must then neither write the unmapped `kvm_run` nor signal the gone thread (that was a SIGSEGV).
#[test]
fn kicks_while_and_after_the_vm_ends_are_harmless() {
    let code = done_42();
    let _cpu = rtcell_testkit::cell_cpu();
    for round in 0..30 {
        let cell = KvmCell::start(config(&code)).unwrap();
        let ended = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !ended.load(std::sync::atomic::Ordering::Relaxed) {
                    cell.kick();
                    // As often as a supervisor's stop loop kicks, without flooding the thread with signals.
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
            wait_finished(&cell);
            // Past `finished` the thread closes the vCPU and unmaps kvm_run; keep kicking through that.
            std::thread::sleep(Duration::from_millis(20));
            ended.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        cell.kick();
        let end = cell.stop(Duration::from_secs(1));
        assert!(matches!(end, VmEnd::Done(42) | VmEnd::Stopped), "round {round}: {end:?}");
    }
}
