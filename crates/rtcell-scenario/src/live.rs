//! A running scenario as an observer (the gateway) sees it, without ever making the real-time side wait:
//! task statistics, histograms, ring counters and signals are read straight from the shared region
//! (lock-free, the same reads the report does); the cells' states come from a snapshot the supervisor
//! replaces every few ticks (an atomic pointer swap, never a lock the supervisor could block on).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{Directory, DirectoryChange, RegionView};

use crate::plan::Plan;

/// One cell's state at the last supervision tick.
#[derive(Debug, Clone, PartialEq)]
pub struct CellSnapshot {
    pub name: String,
    /// thread, process or kvm.
    pub kind: String,
    pub cpu: usize,
    /// `running`, `done (exit 0)`, `killed by signal 11 (SIGSEGV)` ...
    pub status: String,
    pub finished: bool,
    /// Messages or steps the cell claims it handled (its control block's count, which the cell writes),
    /// checked by [`crate::run::possible_claim`]; `None` when the claim is impossible (unknown).
    pub handled: Option<u64>,
    /// VM exits by reason (kvm cells).
    pub vm_exits: BTreeMap<String, u64>,
}

/// The run's region with the run's own copy of its directory, made from the layout before the region
/// existed: every Linux-side reader (supervisor, Linux-side tasks, report, gateway) locates channels
/// from it, so a cell that rewrites the live table cannot redirect any of them.
pub struct RunRegion {
    shm: Arc<SharedMemory>,
    dir: Directory,
}

impl RunRegion {
    pub(crate) fn new(shm: Arc<SharedMemory>, dir: Directory) -> RunRegion {
        RunRegion { shm, dir }
    }

    /// The region, channels located from the run's directory (never from the live table).
    pub fn view(&self) -> RegionView<'_> {
        self.dir.view(self.shm.words())
    }

    /// The run's own copy of the table.
    pub fn directory(&self) -> &Directory {
        &self.dir
    }

    pub fn shm(&self) -> &Arc<SharedMemory> {
        &self.shm
    }

    /// How the live header and table differ from the run's copy (a cell's doing).
    pub fn directory_changes(&self) -> Vec<DirectoryChange> {
        self.dir.changes(self.shm.words())
    }

    /// Puts the run's header and table back.
    pub(crate) fn restore_directory(&self) {
        self.dir.restore(self.shm.words());
    }
}

/// What the runner shares with observers for the length of one run.
pub struct Live {
    pub plan: Plan,
    pub tsc_khz: u64,
    region: Arc<RunRegion>,
    cells: ArcSwap<Vec<CellSnapshot>>,
    /// CLOCK_MONOTONIC ns of the first release and of the end (0 until the go).
    start_ns: AtomicU64,
    end_ns: AtomicU64,
    finished: AtomicBool,
    stop: AtomicBool,
}

impl Live {
    pub(crate) fn new(plan: Plan, tsc_khz: u64, region: Arc<RunRegion>) -> Live {
        Live {
            plan,
            tsc_khz,
            region,
            cells: ArcSwap::from_pointee(Vec::new()),
            start_ns: AtomicU64::new(0),
            end_ns: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    /// The run's shared region (statistics, rings, signals), channels located from the run's own
    /// directory: what a cell writes into the live table never moves a read or a write.
    pub fn region(&self) -> RegionView<'_> {
        self.region.view()
    }

    pub fn cells(&self) -> Arc<Vec<CellSnapshot>> {
        self.cells.load_full()
    }

    pub(crate) fn set_cells(&self, cells: Vec<CellSnapshot>) {
        self.cells.store(Arc::new(cells));
    }

    pub(crate) fn set_window(&self, start_ns: u64, end_ns: u64) {
        self.start_ns.store(start_ns, Ordering::Release);
        self.end_ns.store(end_ns, Ordering::Release);
    }

    /// `(start, end)` on CLOCK_MONOTONIC, once the tasks have been released.
    pub fn window(&self) -> Option<(u64, u64)> {
        let s = self.start_ns.load(Ordering::Acquire);
        (s != 0).then(|| (s, self.end_ns.load(Ordering::Acquire)))
    }

    pub(crate) fn set_finished(&self) {
        self.finished.store(true, Ordering::Release);
    }

    /// The run has ended (its results are being written or are written).
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Asks the run to stop early (as Ctrl-C does): what was measured is kept, marked incomplete.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}
