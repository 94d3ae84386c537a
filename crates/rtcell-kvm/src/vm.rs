//! A KVM cell: one VM with one vCPU, running a payload on a pinned, real-time host thread.
//!
//! The vCPU starts directly in 64-bit ring 3 (`KVM_SET_SREGS`/`KVM_SET_REGS`, IOPL=3): no boot code.
//! Guest RAM is an anonymous mapping private to the VM; the channel region is the very memfd mapping the
//! host side uses, given to the guest as memory slots at `REGION_GPA` — read-only slots for the pages the
//! guest must not write (the header and channels it only reads), when the layout is page-aligned.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_bindings::{KVM_MAX_CPUID_ENTRIES, kvm_fpu, kvm_regs, kvm_segment, kvm_userspace_memory_region};
use kvm_ioctls::{Cap, Kvm, VcpuExit, VcpuFd, VmFd};
use rtcell_guest::abi::{
    FaultInfo, HC_DONE, HC_FAULT, HC_LOG, HC_PANIC, HC_SLEEP, HYPERCALL_GPA, MSG_GPA, MSG_SIZE, REGION_GPA, vector_name,
};
use rtcell_host::peer_text::{LogLimiter, PEER_TEXT_CAP, peer_str, peer_text};
use rtcell_host::sched::{RtRequest, apply_rt};
use rtcell_shm::RegionView;
use rtcell_shm::control::{CellState, ControlBlock};
use rtcell_shm::mapping::SharedMemory;

use crate::elf::{self, ElfError};
use crate::layout;
use crate::stats::VcpuStats;

/// Environment variable naming the KVM device (default `/dev/kvm`), e.g. to test a machine without it.
pub const KVM_DEVICE_ENV: &str = "RTCELL_KVM_DEVICE";
const KVM_MEM_READONLY: u32 = 2;
const PAGE: u64 = 4096;
const TWO_MIB: u64 = 2 << 20;
/// Log lines kept per cell; later ones are counted as suppressed.
const MAX_LOG_LINES: usize = 1000;
/// Log hypercalls kept per second per cell (after a burst of [`LOG_BURST`]); the rest are counted.
pub const LOG_PER_SECOND: u32 = 100;
/// Log hypercalls a cell may make at once before [`LOG_PER_SECOND`] applies.
pub const LOG_BURST: u32 = 200;

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

fn open_kvm() -> Result<Kvm, KvmStatus> {
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

/// How a VM ended, as the monitor saw it (the payload's own control block is only advisory: it is
/// guest-writable memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmEnd {
    /// The payload reported done (hypercall) with this exit code.
    Done(i32),
    /// The payload panicked; its message (the guest's text, capped and escaped).
    Panic(String),
    /// A fault: exception, access outside its memory, triple fault, failed entry, KVM error.
    Fault(String),
    /// Stopped by the supervisor (the payload did not stop on request in time).
    Stopped,
    /// The watchdog saw the heartbeat counter stand still for longer than the budget, whatever state the
    /// guest claimed in its control block (`claim`, the guest's words, escaped).
    Watchdog { silent: Duration, claim: String },
}

impl VmEnd {
    /// Why a VM that did not end cleanly ended, without a status prefix (for "faulted: ..." reports).
    pub fn reason(&self) -> String {
        match self {
            VmEnd::Fault(m) => m.clone(),
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for VmEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmEnd::Done(c) => write!(f, "done (exit code {c})"),
            VmEnd::Panic(m) => write!(f, "payload panicked; the guest's message: {m}"),
            VmEnd::Fault(m) => write!(f, "faulted: {m}"),
            VmEnd::Stopped => write!(f, "stopped by the supervisor"),
            VmEnd::Watchdog { silent, claim } => write!(
                f,
                "watchdog: no heartbeat for {} ms; vCPU stopped (the guest's control block claimed {claim})",
                silent.as_millis()
            ),
        }
    }
}

/// What to run.
#[derive(Clone)]
pub struct KvmConfig {
    pub name: String,
    /// Name of the payload (for messages).
    pub payload_name: String,
    pub payload: Arc<[u8]>,
    /// `key=value` lines for the payload.
    pub args: String,
    pub cpu: usize,
    pub priority: Option<i32>,
    pub lock_memory: bool,
    pub ram_size: u64,
    pub region: Arc<SharedMemory>,
    /// Channels the guest may write; every other page of the region is read-only to it (when the layout
    /// is page-aligned and KVM supports read-only memory).
    pub guest_writable: Vec<String>,
    /// Install the IDT whose handlers report exceptions precisely; without it an exception is a triple
    /// fault (reported as such).
    pub exception_handlers: bool,
    pub tsc_khz: u64,
    /// Stop the vCPU when the heartbeat in the cell's control block does not move for this long.
    pub watchdog: Option<Duration>,
}

/// Why the vCPU thread was kicked.
const KICK_NONE: u8 = 0;
const KICK_STOP: u8 = 1;
const KICK_WATCHDOG: u8 = 2;

/// What the supervisor shares with the vCPU thread.
struct Shared {
    /// What a kick may touch while the vCPU thread is alive; both cleared under the lock before the
    /// thread unmaps `kvm_run` and exits, so a kick never writes freed memory or signals a dead thread.
    target: Mutex<KickTarget>,
    kick: AtomicU8,
    /// Heartbeat silence that tripped the watchdog, ns.
    watchdog_ns: AtomicU64,
    end: Mutex<Option<VmEnd>>,
    logs: Mutex<Vec<String>>,
    /// Log hypercalls over the rate limit or past `MAX_LOG_LINES`: counted, not kept.
    logs_suppressed: AtomicU64,
    /// What the guest's control block claimed when the watchdog tripped (escaped).
    watchdog_claim: Mutex<String>,
    finished: AtomicBool,
}

/// The vCPU thread's `kvm_run` address (for `immediate_exit`) and pthread_t; 0 when not (or no longer) there.
#[derive(Default)]
struct KickTarget {
    run: usize,
    tid: usize,
}

/// A running KVM cell.
pub struct KvmCell {
    name: String,
    shared: Arc<Shared>,
    vcpu: Option<JoinHandle<()>>,
    watchdog: Option<JoinHandle<()>>,
    stats: Option<VcpuStats>,
    warnings: Vec<String>,
}

/// Guest RAM: an anonymous mapping, unmapped on drop.
struct GuestRam {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by exactly one GuestRam and only moves with it (into the vCPU thread).
unsafe impl Send for GuestRam {}

impl GuestRam {
    fn new(len: usize) -> std::io::Result<GuestRam> {
        // SAFETY: anonymous private mapping; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(GuestRam { ptr: p as *mut u8, len })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is len bytes, readable and writable, and exclusively ours.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let start = (gpa as usize).min(self.len);
        let end = start.saturating_add(len).min(self.len);
        // SAFETY: the range is clamped to the mapping; the guest may be writing it concurrently only while
        // the vCPU runs, and we read it only while the vCPU is stopped in an exit.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) }.to_vec()
    }
}

impl Drop for GuestRam {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly our mapping; KVM's memory slot died with the VM fd before this.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// Everything the vCPU thread owns. Field order matters for drop: vCPU and VM close before the RAM
/// they map is unmapped.
struct Machine {
    vcpu: VcpuFd,
    _vm: VmFd,
    ram: GuestRam,
    region: Arc<SharedMemory>,
    /// Read-only page runs of the region, for messages: (gpa start, gpa end).
    readonly: Vec<(u64, u64)>,
}

fn kick_signal() -> i32 {
    libc::SIGRTMIN() + 2
}

extern "C" fn on_kick(_: libc::c_int) {}

/// Installs the no-op handler whose only job is to make KVM_RUN return EINTR.
fn install_kick_handler() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: a zeroed sigaction with a valid handler and an empty mask; no SA_RESTART, so the
        // interrupted ioctl returns EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_kick as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(kick_signal(), &sa, std::ptr::null_mut());
        }
    });
}

fn setup_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> KvmError {
    move |e| KvmError::Setup { what, source: std::io::Error::from_raw_os_error(e.errno()) }
}

/// Page runs of the region with their access for the guest: (offset, len, read_only). `None` when the
/// layout is not page-aligned (then the whole region is writable).
fn region_runs(region: &SharedMemory, writable: &[String]) -> Option<Vec<(u64, u64, bool)>> {
    let view = RegionView::attach(region.words()).ok()?;
    let pages = (region.len() as u64).div_ceil(PAGE);
    let mut ro = vec![true; pages as usize];
    for i in 0..view.len() {
        let e = view.entry(i).ok()?;
        if e.offset as u64 % PAGE != 0 {
            return None;
        }
        if writable.iter().any(|w| w == e.name()) {
            let first = e.offset as u64 / PAGE;
            let last = (e.offset + e.size) as u64;
            for p in first..last.div_ceil(PAGE) {
                ro[p as usize] = false;
            }
        }
    }
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    for (p, &r) in ro.iter().enumerate() {
        match runs.last_mut() {
            Some(last) if last.2 == r => last.1 += PAGE,
            _ => runs.push((p as u64 * PAGE, PAGE, r)),
        }
    }
    Some(runs)
}

impl KvmCell {
    /// Validates the payload, builds the VM and starts its vCPU thread. Nothing is started if the payload
    /// or the configuration is invalid.
    pub fn start(cfg: KvmConfig) -> Result<KvmCell, KvmError> {
        // RAM ends below the hypercall window: a hypercall must be an MMIO exit, never a store into RAM.
        if cfg.ram_size < TWO_MIB || cfg.ram_size % TWO_MIB != 0 || cfg.ram_size > HYPERCALL_GPA {
            return Err(KvmError::BadRam(cfg.ram_size));
        }
        let image = elf::parse(&cfg.payload, cfg.ram_size)
            .map_err(|source| KvmError::Elf { name: cfg.payload_name.clone(), source })?;
        if cfg.region.len() as u64 > (1 << 30) {
            return Err(KvmError::RegionTooLarge(cfg.region.len()));
        }
        let boot = layout::boot_info(cfg.tsc_khz, cfg.cpu as u32, cfg.region.len() as u64, cfg.ram_size, &cfg.args)
            .ok_or(KvmError::ArgsTooLong(cfg.args.len()))?;
        let kvm = open_kvm().map_err(KvmError::Unavailable)?;
        let mut warnings = Vec::new();

        let vm = kvm.create_vm().map_err(setup_err("KVM_CREATE_VM"))?;
        let mut ram = GuestRam::new(cfg.ram_size as usize)
            .map_err(|source| KvmError::Setup { what: "guest RAM mmap", source })?;
        if cfg.lock_memory {
            // SAFETY: locking our own mapping.
            if unsafe { libc::mlock(ram.ptr as *const libc::c_void, ram.len) } != 0 {
                warnings.push(format!(
                    "cell {:?}: guest RAM not locked ({})",
                    cfg.name,
                    std::io::Error::last_os_error()
                ));
            }
        }
        {
            let bytes = ram.bytes();
            let exec: Vec<std::ops::Range<u64>> =
                image.segments.iter().filter(|s| s.executable).map(|s| s.gpa..s.gpa + s.mem_size).collect();
            let data: Vec<std::ops::Range<u64>> =
                image.segments.iter().filter(|s| s.writable).map(|s| s.gpa..s.gpa + s.mem_size).collect();
            layout::build(bytes, cfg.region.len() as u64, cfg.exception_handlers, &exec, &data);
            layout::write_boot_info(bytes, &boot);
            image.load(&cfg.payload, bytes);
        }
        let slot0 = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: cfg.ram_size,
            userspace_addr: ram.ptr as u64,
        };
        // SAFETY: the RAM mapping outlives the VM: both move into `Machine`, where the VM drops first.
        unsafe { vm.set_user_memory_region(slot0) }.map_err(setup_err("guest RAM memory slot"))?;

        // The region, page runs read-only where the guest must not write.
        let readonly_ok = kvm.check_extension(Cap::ReadonlyMem);
        let runs = match region_runs(&cfg.region, &cfg.guest_writable) {
            Some(r) if readonly_ok => r,
            Some(_) => {
                warnings.push(format!(
                    "cell {:?}: KVM lacks read-only memory; the whole region is writable by the guest",
                    cfg.name
                ));
                vec![(0, cfg.region.len() as u64, false)]
            }
            None => {
                warnings.push(format!(
                    "cell {:?}: region channels are not page-aligned; the whole region is writable by the guest",
                    cfg.name
                ));
                vec![(0, cfg.region.len() as u64, false)]
            }
        };
        let mut readonly = Vec::new();
        for (i, &(off, len, ro)) in runs.iter().enumerate() {
            let slot = kvm_userspace_memory_region {
                slot: 1 + i as u32,
                flags: if ro { KVM_MEM_READONLY } else { 0 },
                guest_phys_addr: REGION_GPA + off,
                memory_size: len,
                // SAFETY (pointer arithmetic): off + len lies within the region mapping.
                userspace_addr: cfg.region.as_ptr() as u64 + off,
            };
            // SAFETY: the region mapping is kept alive by the Arc in `Machine` for as long as the VM.
            unsafe { vm.set_user_memory_region(slot) }.map_err(setup_err("region memory slot"))?;
            if ro {
                readonly.push((REGION_GPA + off, REGION_GPA + off + len));
            }
        }

        let vcpu = vm.create_vcpu(0).map_err(setup_err("KVM_CREATE_VCPU"))?;
        let cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).map_err(setup_err("KVM_GET_SUPPORTED_CPUID"))?;
        vcpu.set_cpuid2(&cpuid).map_err(setup_err("KVM_SET_CPUID2"))?;
        // AVX for payloads where the CPU and KVM offer it (XSAVE + XCRS); SSE always.
        let leaf1 = cpuid.as_slice().iter().find(|e| e.function == 1).map_or(0, |e| e.ecx);
        let avx = kvm.check_extension(Cap::Xcrs) && leaf1 & (1 << 26) != 0 && leaf1 & (1 << 28) != 0;
        set_long_mode_ring3(&vcpu, cfg.exception_handlers, avx)?;
        if avx {
            let mut xcrs = kvm_bindings::kvm_xcrs { nr_xcrs: 1, ..Default::default() };
            xcrs.xcrs[0].xcr = 0;
            xcrs.xcrs[0].value = 0x7; // x87 | SSE | AVX state
            vcpu.set_xcrs(&xcrs).map_err(setup_err("KVM_SET_XCRS"))?;
        }
        let regs = kvm_regs {
            rip: image.entry,
            // As if `_start` had been called: RSP + 8 is 16-byte aligned.
            rsp: cfg.ram_size - 8,
            rflags: 0x2, // IOPL 0 (no port I/O), interrupts off, reserved bit 1
            ..Default::default()
        };
        vcpu.set_regs(&regs).map_err(setup_err("KVM_SET_REGS"))?;
        let fpu = kvm_fpu { fcw: 0x37f, mxcsr: 0x1f80, ..Default::default() };
        vcpu.set_fpu(&fpu).map_err(setup_err("KVM_SET_FPU"))?;
        let stats = match VcpuStats::open(&vcpu) {
            Ok(s) => Some(s),
            Err(e) => {
                warnings.push(format!("cell {:?}: no VM-exit statistics ({e})", cfg.name));
                None
            }
        };

        install_kick_handler();
        let shared = Arc::new(Shared {
            target: Mutex::new(KickTarget::default()),
            kick: AtomicU8::new(KICK_NONE),
            watchdog_ns: AtomicU64::new(0),
            end: Mutex::new(None),
            logs: Mutex::new(Vec::new()),
            logs_suppressed: AtomicU64::new(0),
            watchdog_claim: Mutex::new(String::new()),
            finished: AtomicBool::new(false),
        });
        let mut machine = Machine { vcpu, _vm: vm, ram, region: Arc::clone(&cfg.region), readonly };
        lock_target(&shared).run = machine.vcpu.get_kvm_run() as *mut _ as usize;
        let sh = Arc::clone(&shared);
        let (name, cpu, priority, lock) = (cfg.name.clone(), cfg.cpu, cfg.priority, cfg.lock_memory);
        let vcpu_thread = std::thread::Builder::new()
            .name(format!("vcpu-{}", cfg.name))
            .spawn(move || vcpu_main(machine, sh, &name, cpu, priority, lock))
            .map_err(|source| KvmError::Setup { what: "vCPU thread", source })?;

        let watchdog = match cfg.watchdog {
            Some(budget) => Some(
                spawn_watchdog(Arc::clone(&shared), Arc::clone(&cfg.region), cfg.name.clone(), budget)
                    .map_err(|source| KvmError::Setup { what: "watchdog thread", source })?,
            ),
            None => None,
        };
        Ok(KvmCell { name: cfg.name, shared, vcpu: Some(vcpu_thread), watchdog, stats, warnings })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Setup warnings (memory not locked, region not protected, no statistics).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// How the VM ended, once it has.
    pub fn end(&self) -> Option<VmEnd> {
        self.shared.end.lock().ok().and_then(|e| e.clone())
    }

    /// Lines the payload logged: the guest's text, each capped and escaped (one printable line); show
    /// them labelled as the guest's.
    pub fn logs(&self) -> Vec<String> {
        self.shared.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Log hypercalls not kept: over the rate limit ([`LOG_PER_SECOND`], bursts of [`LOG_BURST`]) or
    /// past the 1000 lines kept per cell.
    pub fn logs_suppressed(&self) -> u64 {
        self.shared.logs_suppressed.load(Ordering::Relaxed)
    }

    /// The monitor's note on a log storm, if the guest logged more than it may.
    pub fn log_storm(&self) -> Option<String> {
        let n = self.logs_suppressed();
        (n > 0).then(|| {
            format!(
                "log storm: {n} log messages of the guest suppressed (limit {LOG_PER_SECOND} per second, bursts of {LOG_BURST}, {MAX_LOG_LINES} kept)"
            )
        })
    }

    /// VM-exit counters of the vCPU, by reason.
    pub fn exit_counts(&self) -> Option<BTreeMap<String, u64>> {
        self.stats.as_ref().and_then(|s| s.exits().ok())
    }

    /// Stops the vCPU now (immediate exit + signal), whatever the payload is doing.
    pub fn kick(&self) {
        kick(&self.shared, KICK_STOP);
    }

    /// Waits up to `timeout` for the VM to end on its own (after a stop request in the control block),
    /// then kicks it; joins the threads. Returns how it ended.
    pub fn stop(mut self, timeout: Duration) -> VmEnd {
        let t0 = Instant::now();
        while !self.shared.finished.load(Ordering::Acquire) && t0.elapsed() < timeout {
            std::thread::sleep(Duration::from_micros(200));
        }
        if !self.shared.finished.load(Ordering::Acquire) {
            kick(&self.shared, KICK_STOP);
        }
        self.join();
        self.end().unwrap_or(VmEnd::Stopped)
    }

    fn join(&mut self) {
        // The vCPU may be blocked in KVM_RUN: keep kicking until it is out.
        if let Some(h) = self.vcpu.take() {
            while !h.is_finished() {
                if self.shared.kick.load(Ordering::Relaxed) != KICK_NONE {
                    kick(&self.shared, self.shared.kick.load(Ordering::Relaxed));
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            let _ = h.join();
        }
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
    }

    pub fn is_finished(&self) -> bool {
        self.shared.finished.load(Ordering::Acquire)
    }
}

impl Drop for KvmCell {
    fn drop(&mut self) {
        if !self.shared.finished.load(Ordering::Acquire) {
            kick(&self.shared, KICK_STOP);
        }
        self.join();
    }
}

/// The kick target, also after a panic elsewhere poisoned the lock (the two words stay consistent).
fn lock_target(shared: &Shared) -> std::sync::MutexGuard<'_, KickTarget> {
    shared.target.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn kick(shared: &Shared, reason: u8) {
    let _ = shared.kick.compare_exchange(KICK_NONE, reason, Ordering::AcqRel, Ordering::Acquire);
    // Held across both writes: the vCPU thread clears the target under this lock before it unmaps
    // `kvm_run` and exits, so neither can vanish in between.
    let target = lock_target(shared);
    let run = target.run as *mut kvm_bindings::kvm_run;
    if !run.is_null() {
        // SAFETY: `run` is the vCPU's kvm_run mapping, still mapped because the target is non-zero under
        // the lock; KVM documents `immediate_exit` as written by other threads to stop KVM_RUN.
        unsafe { std::ptr::addr_of_mut!((*run).immediate_exit).write_volatile(1) };
    }
    if target.tid != 0 {
        // SAFETY: tid is the vCPU thread's pthread_t, alive because it is non-zero under the lock.
        unsafe { libc::pthread_kill(target.tid as libc::pthread_t, kick_signal()) };
    }
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

/// Text the payload left in the message buffer: the claimed length `len` is bounded by the buffer and
/// the peer-text cap before anything is read, then the text is escaped (see `rtcell_host::peer_text`).
fn message(ram: &GuestRam, len: u64) -> String {
    let cap = MSG_SIZE.min(PEER_TEXT_CAP);
    let n = usize::try_from(len).unwrap_or(usize::MAX).min(cap);
    let bytes = ram.read(MSG_GPA, n);
    let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
    let mut text = peer_text(&bytes[..end], cap);
    if len > cap as u64 {
        text.push_str(&format!("…[the guest claimed {len} bytes; {cap} read]"));
    }
    text
}

fn io_value(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(b)
}

fn fault_report(ram: &GuestRam, vector: u64) -> String {
    let raw = ram.read(MSG_GPA, core::mem::size_of::<FaultInfo>());
    let w = |i: usize| raw.get(i * 8..i * 8 + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let (error, rip, rsp, cr2) = (w(1), w(2), w(3), w(4));
    let mut s = format!("{} at RIP {rip:#x} (RSP {rsp:#x})", vector_name(vector));
    if vector == 14 {
        let what = match error {
            e if e & 16 != 0 => "instruction fetch",
            e if e & 2 != 0 => "write",
            _ => "read",
        };
        let why = match error {
            e if e & 16 != 0 && e & 1 != 0 => "the page is not executable (NX)",
            e if e & 1 != 0 => "protection violation",
            _ => "page not mapped",
        };
        s.push_str(&format!(": {what} of address {cr2:#x}, {why}"));
        if layout::stack_guard(ram.len as u64).contains(&cr2) {
            s.push_str(" (stack overflow: the guard page under the stack)");
        } else if cr2 >= REGION_GPA && error & 16 != 0 {
            s.push_str(" (the channel region is never executable)");
        }
    } else if error != 0 {
        s.push_str(&format!(", error code {error:#x}"));
    }
    s
}

/// The report of an exception the ring-0 stubs caught. Only they run in ring 0: the same hypercall made
/// from ring 3 is the payload's own forgery, reported as such and never as an exception it did not have.
fn exception_report(m: &Machine, vector: u64) -> String {
    match m.vcpu.get_sregs() {
        Ok(s) if s.cs.dpl == 0 => fault_report(&m.ram, vector),
        Ok(s) => format!(
            "forged exception report: the payload made the exception-report hypercall itself (ring {}, vector {vector}); the monitor saw no exception",
            s.cs.dpl
        ),
        Err(e) => format!("exception-report hypercall, but the vCPU's privilege level is unknown (KVM_GET_SREGS: {e})"),
    }
}

fn vcpu_main(mut m: Machine, shared: Arc<Shared>, name: &str, cpu: usize, priority: Option<i32>, lock: bool) {
    // SAFETY: pthread_self has no preconditions.
    lock_target(&shared).tid = unsafe { libc::pthread_self() } as usize;
    // Clears the kick target before `m` (a parameter, so dropped after this local) unmaps `kvm_run`,
    // also if the loop panics.
    let target = ClearOnDrop(&shared);
    let end = match apply_rt(&RtRequest { cpu: Some(cpu), fifo_priority: priority, lock_memory: lock }) {
        Err(e) => VmEnd::Fault(format!("real-time setup of the vCPU thread failed: {e}")),
        Ok(_) if shared.kick.load(Ordering::Acquire) != KICK_NONE => VmEnd::Stopped,
        Ok(_) => run_loop(&mut m, &shared),
    };
    record_end(&m, &shared, name, end);
    drop(target);
    shared.finished.store(true, Ordering::Release);
    // Back to normal scheduling before the fds close (closing may take time on a nested host).
    let _ = rtcell_host::sched::set_normal();
}

/// Empties the kick target when dropped: from then on no kick touches `kvm_run` or the vCPU thread.
struct ClearOnDrop<'a>(&'a Shared);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        *lock_target(self.0) = KickTarget::default();
    }
}

fn run_loop(m: &mut Machine, shared: &Shared) -> VmEnd {
    let mut limiter = LogLimiter::new(LOG_PER_SECOND, LOG_BURST);
    loop {
        let exit = m.vcpu.run();
        match exit {
            Ok(VcpuExit::MmioWrite(addr, data)) if (HYPERCALL_GPA..HYPERCALL_GPA + 4096).contains(&addr) => {
                let v = io_value(data);
                match ((addr - HYPERCALL_GPA) / 8) as u16 {
                    HC_LOG => {
                        // Over the limit: counted, and the guest memory is not even read.
                        let kept = limiter.allow()
                            && shared.logs.lock().is_ok_and(|mut l| {
                                l.len() < MAX_LOG_LINES && {
                                    l.push(message(&m.ram, v));
                                    true
                                }
                            });
                        if !kept {
                            shared.logs_suppressed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    HC_SLEEP => sleep_unless_kicked(shared, Duration::from_nanos(v as u32 as u64)),
                    HC_DONE => return VmEnd::Done(v as u32 as i32),
                    HC_PANIC => return VmEnd::Panic(message(&m.ram, v)),
                    HC_FAULT => return VmEnd::Fault(exception_report(m, v)),
                    other => return VmEnd::Fault(format!("unknown hypercall {other}")),
                }
            }
            Ok(VcpuExit::IoOut(port, _)) => return VmEnd::Fault(format!("output to I/O port {port:#x}")),
            Ok(VcpuExit::IoIn(port, _)) => return VmEnd::Fault(format!("input from I/O port {port:#x}")),
            Ok(VcpuExit::MmioWrite(addr, _)) => return VmEnd::Fault(describe_access(m, addr, "write")),
            Ok(VcpuExit::MmioRead(addr, _)) => return VmEnd::Fault(describe_access(m, addr, "read")),
            Ok(VcpuExit::Shutdown) => {
                return VmEnd::Fault(
                    "triple fault (KVM_EXIT_SHUTDOWN): the payload crashed and no exception handler could report it"
                        .into(),
                );
            }
            Ok(VcpuExit::Hlt) => return VmEnd::Fault("the payload halted (HLT)".into()),
            Ok(VcpuExit::FailEntry(reason, _)) => {
                return VmEnd::Fault(format!("VM entry failed (hardware reason {reason:#x}): invalid vCPU state"));
            }
            Ok(VcpuExit::InternalError) => return VmEnd::Fault("KVM internal error (KVM_EXIT_INTERNAL_ERROR)".into()),
            Ok(VcpuExit::Intr) => {}
            Ok(other) => return VmEnd::Fault(format!("unexpected VM exit {other:?}")),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {}
            Err(e) => return VmEnd::Fault(format!("KVM_RUN failed: {e}")),
        }
        match shared.kick.load(Ordering::Acquire) {
            KICK_STOP => return VmEnd::Stopped,
            KICK_WATCHDOG => {
                return VmEnd::Watchdog {
                    silent: Duration::from_nanos(shared.watchdog_ns.load(Ordering::Relaxed)),
                    claim: shared.watchdog_claim.lock().map(|c| c.clone()).unwrap_or_default(),
                };
            }
            _ => m.vcpu.set_kvm_immediate_exit(0),
        }
    }
}

/// The guest's `HC_SLEEP`: sleeps `total` in slices, so a stop or watchdog kick (whose signal a sleep
/// would otherwise outlast) ends it within a slice.
fn sleep_unless_kicked(shared: &Shared, total: Duration) {
    const SLICE: Duration = Duration::from_millis(10);
    let end = Instant::now() + total;
    while shared.kick.load(Ordering::Acquire) == KICK_NONE {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(SLICE));
    }
}

fn describe_access(m: &Machine, addr: u64, what: &str) -> String {
    if let Some(&(a, b)) = m.readonly.iter().find(|&&(a, b)| addr >= a && addr < b) {
        let off = addr - REGION_GPA;
        let chan = RegionView::attach(m.region.words()).ok().and_then(|v| {
            (0..v.len())
                .filter_map(|i| v.entry(i).ok())
                .find(|e| (e.offset as u64..(e.offset + e.size) as u64).contains(&off))
                .map(|e| peer_str(e.name(), 64))
        });
        return match chan {
            Some(c) => {
                format!("{what} to read-only channel {c:?} at guest address {addr:#x} (the guest may only read it)")
            }
            None => format!("{what} to the read-only region header at guest address {addr:#x} (pages {a:#x}..{b:#x})"),
        };
    }
    format!("{what} outside its memory at guest address {addr:#x} (neither RAM nor the channel region)")
}

/// Writes the monitor's verdict into the cell's control block, over whatever the payload wrote there for
/// anything but a clean end.
fn record_end(m: &Machine, shared: &Shared, name: &str, end: VmEnd) {
    if let Ok(view) = RegionView::attach(m.region.words()) {
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
        *e = Some(end);
    }
}

/// The watchdog: the monitor's own judgement of progress. The heartbeat counter in the cell's control
/// block must advance within `budget`, from the moment the vCPU is started and whatever state the guest
/// claims there (a guest that writes `Starting` or `Done` and spins is stopped like any other). The
/// claimed state is kept only to be reported beside the verdict, as the guest's claim.
fn spawn_watchdog(
    shared: Arc<Shared>,
    region: Arc<SharedMemory>,
    name: String,
    budget: Duration,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(format!("watchdog-{name}")).spawn(move || {
        let poll = (budget / 8).clamp(Duration::from_millis(1), Duration::from_millis(50));
        let mut last: Option<(u64, Instant)> = None;
        while !shared.finished.load(Ordering::Acquire) {
            std::thread::sleep(poll);
            let Ok(view) = RegionView::attach(region.words()) else { return };
            let Ok(ctl) = ControlBlock::attach(&view, &name) else { return };
            let hb = ctl.heartbeat();
            let since = match last {
                Some((prev, at)) if prev == hb => at,
                _ => {
                    last = Some((hb, Instant::now()));
                    continue;
                }
            };
            if since.elapsed() > budget {
                if let Ok(mut c) = shared.watchdog_claim.lock() {
                    *c = claimed_state(&ctl);
                }
                shared.watchdog_ns.store(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
                kick(&shared, KICK_WATCHDOG);
                return;
            }
        }
    })
}

/// What the guest's control block claims, escaped, for reports: `"done" (exit code 0)`.
fn claimed_state(ctl: &ControlBlock<'_>) -> String {
    match ctl.state() {
        Ok(CellState::Starting) => "\"starting\"".into(),
        Ok(CellState::Running) => "\"running\"".into(),
        Ok(CellState::Stopped) => "\"stopped\"".into(),
        Ok(CellState::Done) => format!("\"done\" (exit code {})", ctl.exit_code()),
        Ok(CellState::Faulted) => {
            let mut buf = [0u8; rtcell_shm::control::MAX_MESSAGE];
            format!("\"faulted\" ({})", peer_text(ctl.message_into(&mut buf), PEER_TEXT_CAP))
        }
        Err(v) => format!("an impossible state {v}"),
    }
}
