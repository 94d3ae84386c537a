//! The watchdog: the monitor's own judgement of progress.
//!
//! The heartbeat counter in the cell's control block must advance within the budget, from the moment the
//! vCPU is started and whatever state the guest claims there (a guest that writes `Starting` or `Done`
//! and spins is stopped like any other). Design: the guest's control block is guest-writable memory, so
//! only the counter moving counts as progress; the claimed state is kept only to be reported beside the
//! verdict, as the guest's claim. The watchdog runs on its own thread and ends the VM with a kick.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtcell_host::peer_text::{PEER_TEXT_CAP, peer_text};
use rtcell_shm::RegionView;
use rtcell_shm::control::{CellState, ControlBlock};
use rtcell_shm::mapping::SharedMemory;

use crate::kick::Reason;
use crate::vm::{Shared, VmEnd};

/// What the watchdog saw when it tripped, for the vCPU thread's report.
#[derive(Default)]
pub(crate) struct Verdict {
    /// Heartbeat silence that tripped the watchdog, ns.
    silent_ns: AtomicU64,
    /// What the guest's control block claimed when the watchdog tripped (escaped).
    claim: Mutex<String>,
}

impl Verdict {
    /// How the VM ended, once the watchdog kicked it.
    pub(crate) fn end(&self) -> VmEnd {
        VmEnd::Watchdog {
            silent: Duration::from_nanos(self.silent_ns.load(Ordering::Relaxed)),
            claim: self.claim.lock().map(|c| c.clone()).unwrap_or_default(),
        }
    }
}

/// Starts the watchdog of cell `name`: it kicks the vCPU when the heartbeat stands still for `budget`,
/// and ends when the VM has.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    region: Arc<SharedMemory>,
    name: String,
    budget: Duration,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(format!("watchdog-{name}")).spawn(move || watch(&shared, &region, &name, budget))
}

fn watch(shared: &Shared, region: &SharedMemory, name: &str, budget: Duration) {
    let poll = (budget / 8).clamp(Duration::from_millis(1), Duration::from_millis(50));
    let mut last: Option<(u64, Instant)> = None;
    while !shared.finished.load(Ordering::Acquire) {
        std::thread::sleep(poll);
        let Ok(view) = RegionView::attach(region.words()) else { return };
        let Ok(ctl) = ControlBlock::attach(&view, name) else { return };
        let hb = ctl.heartbeat();
        let since = match last {
            Some((prev, at)) if prev == hb => at,
            _ => {
                last = Some((hb, Instant::now()));
                continue;
            }
        };
        if since.elapsed() > budget {
            if let Ok(mut c) = shared.watchdog.claim.lock() {
                *c = claimed_state(&ctl);
            }
            shared.watchdog.silent_ns.store(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
            shared.kick.kick(Reason::Watchdog);
            return;
        }
    }
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
