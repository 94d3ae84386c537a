//! A KVM cell's lifecycle: one VM with one vCPU, running a payload on a pinned, real-time host thread.
//!
//! [`KvmCell::start`] checks the configuration and the payload before anything is created, then builds
//! the VM in a fixed order (guest memory, vCPU, statistics) and starts the vCPU thread and, with a budget,
//! the watchdog; [`KvmCell::stop`] and `Drop` end it and join both threads. Design: this file is only the
//! lifecycle and what the supervisor can ask of a running cell; how each part works lives in its own
//! module — the device ([`crate::kvm`]), guest memory ([`crate::memory`]), the vCPU and its run loop
//! ([`crate::vcpu`]), kicks ([`crate::kick`]), the watchdog ([`crate::watchdog`]), the guest's text
//! ([`crate::guest_log`]) and errors ([`crate::error`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtcell_guest::abi::HYPERCALL_GPA;
use rtcell_shm::mapping::SharedMemory;

use crate::error::{KvmError, setup_err};
use crate::guest_log::GuestLog;
use crate::kick::{self, Kicker, Reason};
use crate::kvm::{has_readonly_mem, open_kvm};
use crate::memory::{GuestRam, GuestRegion};
use crate::stats::VcpuStats;
use crate::vcpu::{self, Machine, Placement};
use crate::{elf, layout, watchdog};

const TWO_MIB: u64 = 2 << 20;

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

/// What the supervisor shares with the vCPU thread (and the watchdog).
pub(crate) struct Shared {
    pub(crate) kick: Kicker,
    pub(crate) watchdog: watchdog::Verdict,
    /// How the VM ended, and when the monitor saw it end (CLOCK_MONOTONIC ns).
    pub(crate) end: Mutex<Option<(VmEnd, u64)>>,
    pub(crate) log: GuestLog,
    pub(crate) finished: AtomicBool,
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
        if cfg.lock_memory
            && let Err(e) = ram.lock()
        {
            warnings.push(format!("cell {:?}: guest RAM not locked ({e})", cfg.name));
        }
        ram.load(&image, &cfg.payload, cfg.region.len() as u64, cfg.exception_handlers, &boot);
        ram.map_into(&vm)?;
        let region =
            GuestRegion::map(&vm, &cfg.region, has_readonly_mem(&kvm), &cfg.guest_writable, &cfg.name, &mut warnings)?;
        let vcpu = vcpu::create(&kvm, &vm, image.entry, cfg.ram_size, cfg.exception_handlers)?;
        let stats = match VcpuStats::open(&vcpu) {
            Ok(s) => Some(s),
            Err(e) => {
                warnings.push(format!("cell {:?}: no VM-exit statistics ({e})", cfg.name));
                None
            }
        };

        kick::install_handler();
        let shared = Arc::new(Shared {
            kick: Kicker::new(),
            watchdog: watchdog::Verdict::default(),
            end: Mutex::new(None),
            log: GuestLog::default(),
            finished: AtomicBool::new(false),
        });
        let machine = Machine { vcpu, _vm: vm, ram, region };
        let placement = Placement { cpu: cfg.cpu, priority: cfg.priority, lock_memory: cfg.lock_memory };
        let vcpu_thread = vcpu::spawn(machine, Arc::clone(&shared), cfg.name.clone(), placement)
            .map_err(|source| KvmError::Setup { what: "vCPU thread", source })?;

        let watchdog = match cfg.watchdog {
            Some(budget) => Some(
                watchdog::spawn(Arc::clone(&shared), Arc::clone(&cfg.region), cfg.name.clone(), budget)
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
        self.shared.end.lock().ok().and_then(|e| e.as_ref().map(|(end, _)| end.clone()))
    }

    /// When the monitor saw the VM end (its vCPU left the run loop; CLOCK_MONOTONIC ns), once it has.
    pub fn ended_ns(&self) -> Option<u64> {
        self.shared.end.lock().ok().and_then(|e| e.as_ref().map(|(_, at)| *at))
    }

    /// Lines the payload logged: the guest's text, each capped and escaped (one printable line); show
    /// them labelled as the guest's.
    pub fn logs(&self) -> Vec<String> {
        self.shared.log.lines()
    }

    /// Log hypercalls not kept: over the rate limit ([`LOG_PER_SECOND`](crate::guest_log::LOG_PER_SECOND),
    /// bursts of [`LOG_BURST`](crate::guest_log::LOG_BURST)) or past the 1000 lines kept per cell.
    pub fn logs_suppressed(&self) -> u64 {
        self.shared.log.suppressed()
    }

    /// The monitor's note on a log storm, if the guest logged more than it may.
    pub fn log_storm(&self) -> Option<String> {
        self.shared.log.storm()
    }

    /// VM-exit counters of the vCPU, by reason.
    pub fn exit_counts(&self) -> Option<BTreeMap<String, u64>> {
        self.stats.as_ref().and_then(|s| s.exits().ok())
    }

    /// Stops the vCPU now (immediate exit + signal), whatever the payload is doing.
    pub fn kick(&self) {
        self.shared.kick.kick(Reason::Stop);
    }

    /// Waits up to `timeout` for the VM to end on its own (after a stop request in the control block),
    /// then kicks it; joins the threads. Returns how it ended.
    pub fn stop(mut self, timeout: Duration) -> VmEnd {
        let t0 = Instant::now();
        while !self.shared.finished.load(Ordering::Acquire) && t0.elapsed() < timeout {
            std::thread::sleep(Duration::from_micros(200));
        }
        if !self.shared.finished.load(Ordering::Acquire) {
            self.shared.kick.kick(Reason::Stop);
        }
        self.join();
        self.end().unwrap_or(VmEnd::Stopped)
    }

    fn join(&mut self) {
        // The vCPU may be blocked in KVM_RUN: keep kicking until it is out.
        if let Some(h) = self.vcpu.take() {
            while !h.is_finished() {
                if let Some(reason) = self.shared.kick.pending() {
                    self.shared.kick.kick(reason);
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
            self.shared.kick.kick(Reason::Stop);
        }
        self.join();
    }
}
