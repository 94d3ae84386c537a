//! Deploying a payload ELF into a new kvm cell (seed 004's generated-code pipeline): the ELF is checked
//! (size, ELF header, segments inside guest RAM, entry inside a segment) before anything starts, stored
//! under its SHA-256 in the state directory (within its budget), and started on the CPU asked for —
//! never the master CPU, and only after taking that CPU's lock (`rtcell_host::cpulock`), held for the
//! cell's lifetime, so no run and no other deploy shares it. A refused deploy leaves nothing on disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rtcell_cells::{Cell, CellKind, CellSpec, VmOptions, WorkloadSpec};
use rtcell_scenario::run::{payload_handled_bound, possible_claim};
use rtcell_shm::RegionLayout;
use rtcell_shm::mapping::SharedMemory;
use sha2::{Digest, Sha256};
use tonic::Status;

use crate::pb;
use crate::security::hex;

/// Largest payload accepted: the guest's RAM.
pub const MAX_PAYLOAD_BYTES: usize = rtcell_guest::abi::DEFAULT_RAM as usize;
/// How long a new cell gets to report running.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Most deployed cells at once.
const MAX_DEPLOYED: usize = 16;

struct Deployed {
    cell: Cell,
    /// The cell CPU's lock, released when the cell is stopped (dropped after it).
    _cpu: rtcell_host::cpulock::CpuLocks,
    sha256: String,
    size: u64,
    stored_at: PathBuf,
    /// The region holding its control block: it must outlive the cell.
    _shm: Arc<SharedMemory>,
    /// Its args: a `period_ns` there bounds what it can have handled in the time it ran.
    args: String,
}

impl Deployed {
    /// What the cell claims it handled, if possible in the time it has run (`None`: impossible, unknown).
    fn handled(&mut self) -> Option<u64> {
        let claim = self.cell.progress().1;
        // The bound is taken after the claim was read: never smaller than when the cell wrote it.
        possible_claim(claim, payload_handled_bound(&self.args, self.cell.ran_for()))
    }
}

/// The payload store and the cells started from it.
pub struct Deployer {
    state: Arc<crate::state::StateDir>,
    cells: Mutex<BTreeMap<String, Deployed>>,
    /// One deploy at a time; `cells` itself is locked only briefly, so statistics and status keep
    /// answering while a VM starts.
    deploying: Mutex<()>,
}

impl Deployer {
    /// Payloads are stored in the state directory's `payloads/`.
    pub fn new(state: Arc<crate::state::StateDir>) -> Deployer {
        Deployer { state, cells: Mutex::new(BTreeMap::new()), deploying: Mutex::new(()) }
    }

    /// The stored payloads deployed cells use.
    pub fn stored(&self) -> Vec<PathBuf> {
        self.cells.lock().map(|c| c.values().map(|d| d.stored_at.clone()).collect()).unwrap_or_default()
    }

    /// Checks, stores and starts. `busy` lists the CPUs the run uses, and by what; `in_use` the state
    /// directory's files that running cells and runs still read (never removed to make room). Blocking
    /// (starts a VM).
    pub fn deploy(
        &self,
        req: &pb::DeployPayloadRequest,
        busy: &[(usize, String)],
        in_use: &[PathBuf],
    ) -> Result<pb::DeployedCell, Status> {
        if req.elf.is_empty() {
            return Err(Status::invalid_argument("no payload: `elf` is empty"));
        }
        if req.elf.len() > MAX_PAYLOAD_BYTES {
            return Err(Status::invalid_argument(format!(
                "payload of {} bytes: larger than the guest's {} bytes of RAM",
                req.elf.len(),
                MAX_PAYLOAD_BYTES
            )));
        }
        let sha = hex(&Sha256::digest(&req.elf));
        let name = if req.name.is_empty() { format!("payload-{}", &sha[..8]) } else { req.name.clone() };
        if name.len() > 24 || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
            return Err(Status::invalid_argument(format!(
                "cell name {}: 1 to 24 letters, digits, '_', '-' or '.'",
                crate::security::quoted(&name)
            )));
        }
        if req.args.len() > 1024 || req.args.contains('\0') {
            return Err(Status::invalid_argument("args: at most 1024 bytes of key=value lines, no NUL"));
        }
        let cpu = req.cpu as usize;
        let online = rtcell_host::cpu::online_cpus().map_err(|e| Status::internal(format!("online CPUs: {e}")))?;
        if !online.contains(&cpu) {
            return Err(Status::invalid_argument(format!(
                "CPU {cpu} does not exist or is offline (online: {online:?})"
            )));
        }
        if let Some((_, what)) = busy.iter().find(|(c, _)| *c == cpu) {
            return Err(Status::failed_precondition(format!("CPU {cpu} is taken by {what}: pick another")));
        }
        let _one = self.deploying.lock().map_err(|_| Status::internal("deploy lock poisoned"))?;
        {
            let mut cells = self.cells.lock().map_err(|_| Status::internal("deployed cells poisoned"))?;
            cells.retain(|_, d| !d.cell.status().is_finished() || d.cell.name() == name);
            if cells.contains_key(&name) {
                return Err(Status::already_exists(format!(
                    "a deployed cell is named {name:?}: stop it first (rtcell ctl stop-cell {name})"
                )));
            }
            if let Some(d) = cells.values().find(|d| d.cell.cpu() == cpu) {
                return Err(Status::failed_precondition(format!(
                    "CPU {cpu} runs deployed cell {:?}: pick another",
                    d.cell.name()
                )));
            }
            if cells.len() >= MAX_DEPLOYED {
                return Err(Status::resource_exhausted(format!("{MAX_DEPLOYED} deployed cells run already")));
            }
        }

        // The CPU's lock for the cell's lifetime: refused if a run (of this process or another) holds it.
        let cpu_lock = rtcell_host::cpulock::lock_cpus(&[cpu]).map_err(|e| {
            eprintln!("gateway: deploy onto CPU {cpu} refused: {e}");
            Status::failed_precondition(format!("cannot deploy onto CPU {cpu}: {}", e.client_message()))
        })?;
        // Store under the hash (written aside first, so a half-written file never has the final name),
        // then validate the stored file: what is checked is exactly what will be loaded.
        let dir = &self.state.payloads;
        let stored = dir.join(format!("{sha}.elf"));
        let tmp = dir.join(format!(".{sha}.{}.part", std::process::id()));
        self.state.make_room(req.elf.len() as u64, in_use)?;
        write_private(&tmp, &req.elf).map_err(|e| Status::internal(format!("storing the payload: {e}")))?;
        let path_text = tmp.display().to_string();
        if let Err(e) = rtcell_kvm::payloads::validate(&path_text, rtcell_guest::abi::DEFAULT_RAM) {
            let _ = std::fs::remove_file(&tmp);
            return Err(Status::invalid_argument(
                format!("not a payload this cell can run: {e}").replace(&path_text, "payload"),
            ));
        }
        std::fs::rename(&tmp, &stored).map_err(|e| Status::internal(format!("storing the payload: {e}")))?;

        // A refused start leaves nothing behind (unless another deployed cell runs the same bytes).
        let forget = |why: Status| {
            if !self.stored().contains(&stored) {
                let _ = std::fs::remove_file(&stored);
            }
            why
        };
        let mut layout = RegionLayout::new();
        layout.page_aligned();
        rtcell_shm::control::add_to_layout(&mut layout, &name)
            .map_err(|e| forget(Status::internal(format!("region: {e}"))))?;
        let shm = SharedMemory::create_anonymous(&format!("deploy-{name}"), layout.size_bytes())
            .map_err(|e| forget(Status::internal(format!("shared memory: {e}"))))?;
        layout.init(shm.words(), std::process::id()).map_err(|e| forget(Status::internal(format!("region: {e}"))))?;
        let shm = Arc::new(shm);
        let spec = CellSpec {
            name: name.clone(),
            kind: CellKind::Kvm,
            cpu,
            priority: Some(80),
            lock_memory: true,
            workload: WorkloadSpec::Payload {
                payload: stored.display().to_string(),
                args: req.args.clone(),
                guest_writes: Vec::new(),
            },
            vm: VmOptions::default(),
        };
        let mut cell = Cell::start(spec, Arc::clone(&shm))
            .map_err(|e| forget(Status::failed_precondition(format!("cell {name:?}: {e}"))))?;
        if let Err(e) = cell.wait_running(START_TIMEOUT) {
            let rep = cell.stop(Duration::from_secs(2));
            return Err(forget(Status::aborted(format!("cell {name:?} did not start: {e} ({})", rep.status))));
        }
        let d = Deployed {
            cell,
            _cpu: cpu_lock,
            sha256: sha,
            size: req.elf.len() as u64,
            stored_at: stored,
            _shm: shm,
            args: req.args.clone(),
        };
        let info = describe(&name, &d, None);
        self.cells.lock().map_err(|_| Status::internal("deployed cells poisoned"))?.insert(name, d);
        Ok(info)
    }

    /// Stops a deployed cell and forgets it.
    pub fn stop(&self, name: &str) -> Result<pb::DeployedCell, Status> {
        let d = {
            let mut cells = self.cells.lock().map_err(|_| Status::internal("deployed cells poisoned"))?;
            cells.remove(name).ok_or_else(|| {
                let known: Vec<String> = cells.keys().cloned().collect();
                Status::not_found(format!(
                    "no deployed cell {} (deployed: {})",
                    crate::security::quoted(name),
                    if known.is_empty() { "none".into() } else { known.join(", ") }
                ))
            })?
        };
        let logs = d.cell.log_tail();
        let storm = d.cell.log_storm();
        let exits = d.cell.vm_exits();
        let (sha, size, at) = (d.sha256.clone(), d.size, d.stored_at.clone());
        let cpu = d.cell.cpu();
        let rep = d.cell.stop(Duration::from_secs(3));
        // The CPU is free again once the cell is stopped.
        drop(d._cpu);
        Ok(pb::DeployedCell {
            name: name.to_string(),
            cpu: cpu as u32,
            sha256: sha,
            size_bytes: size,
            stored_at: at.display().to_string(),
            // The monitor's verdict, then its note on a log storm; the guest's own lines are in `log`.
            status: match storm {
                Some(n) => format!("{}; {n}", rep.status),
                None => rep.status.to_string(),
            },
            vm_exits: exits.unwrap_or_default().into_iter().collect(),
            log: logs,
        })
    }

    /// Every deployed cell now.
    pub fn list(&self) -> Vec<pb::DeployedCell> {
        let Ok(mut cells) = self.cells.lock() else { return Vec::new() };
        cells
            .iter_mut()
            .map(|(n, d)| {
                let st = d.cell.status().to_string();
                describe(n, d, Some(st))
            })
            .collect()
    }

    /// The CPUs deployed cells use.
    pub fn cpus(&self) -> Vec<usize> {
        self.cells.lock().map(|c| c.values().map(|d| d.cell.cpu()).collect()).unwrap_or_default()
    }

    /// The deployed cells as statistics rows.
    pub fn cell_states(&self) -> Vec<pb::CellState> {
        let Ok(mut cells) = self.cells.lock() else { return Vec::new() };
        cells
            .iter_mut()
            .map(|(n, d)| {
                let st = d.cell.status();
                pb::CellState {
                    name: n.clone(),
                    kind: "kvm".into(),
                    cpu: d.cell.cpu() as u32,
                    status: st.to_string(),
                    finished: st.is_finished(),
                    handled: d.handled(),
                    vm_exits: d.cell.vm_exits().unwrap_or_default().into_iter().collect(),
                    origin: "deployed".into(),
                }
            })
            .collect()
    }

    /// Stops every deployed cell (the daemon is going away).
    pub fn stop_all(&self) {
        let all: Vec<Deployed> = match self.cells.lock() {
            Ok(mut c) => std::mem::take(&mut *c).into_values().collect(),
            Err(_) => return,
        };
        for d in all {
            d.cell.stop(Duration::from_secs(3));
        }
    }
}

fn describe(name: &str, d: &Deployed, status: Option<String>) -> pb::DeployedCell {
    pb::DeployedCell {
        name: name.to_string(),
        cpu: d.cell.cpu() as u32,
        sha256: d.sha256.clone(),
        size_bytes: d.size,
        stored_at: d.stored_at.display().to_string(),
        status: status.unwrap_or_else(|| "running".into()),
        vm_exits: d.cell.vm_exits().unwrap_or_default().into_iter().collect(),
        log: d.cell.log_tail(),
    }
}

/// Writes a file only its owner may read (0600), replacing none: a client's bytes in the state directory.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(bytes)
}
