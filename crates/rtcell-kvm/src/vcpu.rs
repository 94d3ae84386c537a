//! The vCPU: its initial state, its thread, and the run loop that turns each VM exit into "go on" or
//! "the VM ended, this way".
//!
//! The vCPU starts directly in 64-bit ring 3 (`KVM_SET_SREGS`/`KVM_SET_REGS`, IOPL 0): no boot code. Its
//! thread is pinned and real-time like any cell's. Design: the vCPU thread owns everything the VM maps
//! ([`Machine`]) and is the only one that reads guest memory, always while the vCPU is stopped in an
//! exit; the supervisor and the watchdog reach it only through [`Shared`]: a kick, the recorded end.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_bindings::{KVM_MAX_CPUID_ENTRIES, kvm_fpu, kvm_regs, kvm_segment};
use kvm_ioctls::{Kvm, VcpuExit, VcpuFd, VmFd};
use rtcell_guest::abi::{HC_DONE, HC_FAULT, HC_LOG, HC_PANIC, HC_SLEEP, HYPERCALL_GPA};
use rtcell_host::peer_text::LogLimiter;
use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_shm::RegionView;
use rtcell_shm::control::{CellState, ControlBlock};

use crate::error::{KvmError, setup_err};
use crate::fault::exception_report;
use crate::guest_log::{self, message};
use crate::kick::{Kicker, Reason};
use crate::kvm::has_avx;
use crate::layout;
use crate::memory::{GuestRam, GuestRegion};
use crate::vm::{Shared, VmEnd};

/// Everything the vCPU thread owns. Field order matters for drop: vCPU and VM close before the RAM
/// they map is unmapped (and before the region's mapping may go).
pub(crate) struct Machine {
    pub(crate) vcpu: VcpuFd,
    pub(crate) _vm: VmFd,
    pub(crate) ram: GuestRam,
    pub(crate) region: GuestRegion,
}

/// How the vCPU thread runs: its CPU, real-time priority and memory locking.
pub(crate) struct Placement {
    pub(crate) cpu: usize,
    pub(crate) priority: Option<i32>,
    pub(crate) lock_memory: bool,
}

/// Creates vCPU 0 of `vm`, ready to run the payload at `entry` in 64-bit ring 3 with its stack at the
/// top of `ram_size` bytes of RAM; `handlers` when the IDT of exception stubs is installed.
pub(crate) fn create(kvm: &Kvm, vm: &VmFd, entry: u64, ram_size: u64, handlers: bool) -> Result<VcpuFd, KvmError> {
    let vcpu = vm.create_vcpu(0).map_err(setup_err("KVM_CREATE_VCPU"))?;
    let cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).map_err(setup_err("KVM_GET_SUPPORTED_CPUID"))?;
    vcpu.set_cpuid2(&cpuid).map_err(setup_err("KVM_SET_CPUID2"))?;
    // AVX for payloads where the CPU and KVM offer it (XSAVE + XCRS); SSE always.
    let avx = has_avx(kvm, &cpuid);
    set_long_mode_ring3(&vcpu, handlers, avx)?;
    if avx {
        let mut xcrs = kvm_bindings::kvm_xcrs { nr_xcrs: 1, ..Default::default() };
        xcrs.xcrs[0].xcr = 0;
        xcrs.xcrs[0].value = 0x7; // x87 | SSE | AVX state
        vcpu.set_xcrs(&xcrs).map_err(setup_err("KVM_SET_XCRS"))?;
    }
    let regs = kvm_regs {
        rip: entry,
        // As if `_start` had been called: RSP + 8 is 16-byte aligned.
        rsp: ram_size - 8,
        rflags: 0x2, // IOPL 0 (no port I/O), interrupts off, reserved bit 1
        ..Default::default()
    };
    vcpu.set_regs(&regs).map_err(setup_err("KVM_SET_REGS"))?;
    let fpu = kvm_fpu { fcw: 0x37f, mxcsr: 0x1f80, ..Default::default() };
    vcpu.set_fpu(&fpu).map_err(setup_err("KVM_SET_FPU"))?;
    Ok(vcpu)
}

fn segment(selector: u16, code: bool, dpl: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: if code { 11 } else { 3 },
        present: 1,
        dpl,
        db: if code { 0 } else { 1 },
        s: 1,
        l: if code { 1 } else { 0 },
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// 64-bit long mode, paging on, SSE on, CPL 3 — set directly, no boot code.
fn set_long_mode_ring3(vcpu: &VcpuFd, handlers: bool, avx: bool) -> Result<(), KvmError> {
    let mut s = vcpu.get_sregs().map_err(setup_err("KVM_GET_SREGS"))?;
    s.cs = segment(layout::SEL_USER_CODE, true, 3);
    let data = segment(layout::SEL_USER_DATA, false, 3);
    s.ds = data;
    s.es = data;
    s.fs = data;
    s.gs = data;
    s.ss = data;
    s.tr = kvm_segment {
        base: layout::TSS_GPA,
        limit: layout::TSS_LIMIT,
        selector: layout::SEL_TSS,
        type_: 11, // busy 64-bit TSS
        present: 1,
        ..Default::default()
    };
    s.ldt = kvm_segment { type_: 2, present: 1, unusable: 1, ..Default::default() };
    s.gdt.base = layout::GDT_GPA;
    s.gdt.limit = layout::GDT_LIMIT;
    s.idt.base = layout::IDT_GPA;
    s.idt.limit = if handlers { layout::IDT_LIMIT } else { 0 };
    s.cr3 = layout::PML4_GPA;
    // CR0: PE, MP, ET, NE, WP, PG (EM clear: SSE allowed).
    s.cr0 = 1 | 2 | 0x10 | 0x20 | 0x1_0000 | 0x8000_0000;
    // CR4: PAE, OSFXSR, OSXMMEXCPT, and OSXSAVE when AVX is enabled through XCR0.
    s.cr4 = 0x20 | 0x200 | 0x400 | if avx { 1 << 18 } else { 0 };
    // EFER: LME, LMA, NXE (the page tables' execute-disable bits apply).
    s.efer = 0x100 | 0x400 | 0x800;
    vcpu.set_sregs(&s).map_err(setup_err("KVM_SET_SREGS"))
}

/// Makes the vCPU kickable and starts its thread `vcpu-<name>`, which runs the VM to its end and
/// records it in `shared` and in the cell's control block.
pub(crate) fn spawn(
    mut m: Machine,
    shared: Arc<Shared>,
    name: String,
    placement: Placement,
) -> std::io::Result<JoinHandle<()>> {
    shared.kick.set_run(m.vcpu.get_kvm_run());
    std::thread::Builder::new().name(format!("vcpu-{name}")).spawn(move || vcpu_main(m, shared, &name, placement))
}

fn vcpu_main(mut m: Machine, shared: Arc<Shared>, name: &str, placement: Placement) {
    // Clears the kick target before `m` (a parameter, so dropped after this local) unmaps `kvm_run`,
    // also if the loop panics.
    let target = shared.kick.attach_current_thread();
    let rt =
        RtRequest { cpu: Some(placement.cpu), fifo_priority: placement.priority, lock_memory: placement.lock_memory };
    let end = match apply_rt(&rt) {
        Err(e) => VmEnd::Fault(format!("real-time setup of the vCPU thread failed: {e}")),
        Ok(_) if shared.kick.pending().is_some() => VmEnd::Stopped,
        Ok(_) => run_loop(&mut m, &shared),
    };
    record_end(&m, &shared, name, end);
    drop(target);
    shared.finished.store(true, Ordering::Release);
    // Back to normal scheduling before the fds close (closing may take time on a nested host).
    let _ = rtcell_host::sched::set_normal();
}

fn run_loop(m: &mut Machine, shared: &Shared) -> VmEnd {
    let mut limiter = guest_log::limiter();
    loop {
        if let Some(end) = run_once(m, shared, &mut limiter) {
            return end;
        }
        match shared.kick.pending() {
            Some(Reason::Stop) => return VmEnd::Stopped,
            Some(Reason::Watchdog) => return shared.watchdog.end(),
            None => m.vcpu.set_kvm_immediate_exit(0),
        }
    }
}

/// Runs the vCPU until its next exit; how the VM ended if that exit ends it.
fn run_once(m: &mut Machine, shared: &Shared, limiter: &mut LogLimiter) -> Option<VmEnd> {
    let fault = |text: String| Some(VmEnd::Fault(text));
    match m.vcpu.run() {
        Ok(VcpuExit::MmioWrite(addr, data)) if (HYPERCALL_GPA..HYPERCALL_GPA + 4096).contains(&addr) => {
            let v = io_value(data);
            hypercall(m, shared, limiter, ((addr - HYPERCALL_GPA) / 8) as u16, v)
        }
        Ok(VcpuExit::IoOut(port, _)) => fault(format!("output to I/O port {port:#x}")),
        Ok(VcpuExit::IoIn(port, _)) => fault(format!("input from I/O port {port:#x}")),
        Ok(VcpuExit::MmioWrite(addr, _)) => fault(m.region.describe_access(addr, "write")),
        Ok(VcpuExit::MmioRead(addr, _)) => fault(m.region.describe_access(addr, "read")),
        Ok(VcpuExit::Shutdown) => fault(
            "triple fault (KVM_EXIT_SHUTDOWN): the payload crashed and no exception handler could report it".into(),
        ),
        Ok(VcpuExit::Hlt) => fault("the payload halted (HLT)".into()),
        Ok(VcpuExit::FailEntry(reason, _)) => {
            fault(format!("VM entry failed (hardware reason {reason:#x}): invalid vCPU state"))
        }
        Ok(VcpuExit::InternalError) => fault("KVM internal error (KVM_EXIT_INTERNAL_ERROR)".into()),
        Ok(VcpuExit::Intr) => None,
        Ok(other) => fault(format!("unexpected VM exit {other:?}")),
        Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => None,
        Err(e) => fault(format!("KVM_RUN failed: {e}")),
    }
}

/// The guest's hypercall `nr` with argument `v`; how the VM ended if the call ends it.
fn hypercall(m: &Machine, shared: &Shared, limiter: &mut LogLimiter, nr: u16, v: u64) -> Option<VmEnd> {
    match nr {
        HC_LOG => shared.log.record(limiter, &m.ram, v),
        HC_SLEEP => sleep_unless_kicked(&shared.kick, Duration::from_nanos(v as u32 as u64)),
        HC_DONE => return Some(VmEnd::Done(v as u32 as i32)),
        HC_PANIC => return Some(VmEnd::Panic(message(&m.ram, v))),
        HC_FAULT => return Some(VmEnd::Fault(exception_report(&m.vcpu, &m.ram, v))),
        other => return Some(VmEnd::Fault(format!("unknown hypercall {other}"))),
    }
    None
}

fn io_value(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(b)
}

/// The guest's `HC_SLEEP`: sleeps `total` in slices, so a stop or watchdog kick (whose signal a sleep
/// would otherwise outlast) ends it within a slice.
fn sleep_unless_kicked(kick: &Kicker, total: Duration) {
    const SLICE: Duration = Duration::from_millis(10);
    let end = Instant::now() + total;
    while kick.pending().is_none() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(SLICE));
    }
}

/// Writes the monitor's verdict into the cell's control block, over whatever the payload wrote there for
/// anything but a clean end.
fn record_end(m: &Machine, shared: &Shared, name: &str, end: VmEnd) {
    if let Ok(view) = RegionView::attach(m.region.shm.words()) {
        if let Ok(ctl) = ControlBlock::attach(&view, name) {
            match &end {
                VmEnd::Done(code) => {
                    if !matches!(ctl.state(), Ok(CellState::Stopped | CellState::Done | CellState::Faulted)) {
                        ctl.finish(CellState::Done, *code, "");
                    }
                }
                VmEnd::Stopped => {
                    if !matches!(ctl.state(), Ok(CellState::Faulted)) {
                        ctl.finish(CellState::Stopped, 0, "");
                    }
                }
                other => ctl.finish(CellState::Faulted, 1, &other.reason()),
            }
        }
    }
    if let Ok(mut e) = shared.end.lock() {
        *e = Some((end, rtcell_host::clock::mono_ns()));
    }
}
