//! Interference loads that run on the non-cell CPUs for the whole of a measurement.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

/// Which load to run beside the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    None,
    /// A memcpy loop over a 20 MiB buffer on each non-cell CPU (seed 004, section V-A).
    Memcpy,
}

impl Load {
    pub fn as_str(&self) -> &'static str {
        match self {
            Load::None => "none",
            Load::Memcpy => "memcpy",
        }
    }
}

impl std::str::FromStr for Load {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Load::None),
            "memcpy" => Ok(Load::Memcpy),
            other => Err(format!("unknown load {other:?}: use none or memcpy")),
        }
    }
}

/// Buffer the memcpy load copies across (two halves of 10 MiB).
pub const MEMCPY_BUFFER: usize = 20 << 20;

/// A running load; stops (and joins its threads) when dropped, also on error paths and Ctrl-C.
pub struct RunningLoad {
    kind: Load,
    cpus: Vec<usize>,
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
    started: Instant,
}

impl RunningLoad {
    /// Starts `kind` on each CPU in `cpus` (normal scheduling policy, so real-time threads preempt it).
    pub fn start(kind: Load, cpus: &[usize]) -> std::io::Result<RunningLoad> {
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        if kind == Load::Memcpy {
            for &cpu in cpus {
                let (stop, bytes) = (Arc::clone(&stop), Arc::clone(&bytes));
                let h = std::thread::Builder::new().name(format!("load-memcpy-{cpu}")).spawn(move || {
                    let _ = rtcell_host::cpu::pin_current_thread(cpu);
                    let mut buf = vec![0x5au8; MEMCPY_BUFFER];
                    let half = MEMCPY_BUFFER / 2;
                    while !stop.load(Ordering::Relaxed) {
                        let (a, b) = buf.split_at_mut(half);
                        b.copy_from_slice(a);
                        std::hint::black_box(&mut buf);
                        bytes.fetch_add(half as u64, Ordering::Relaxed);
                    }
                })?;
                threads.push(h);
            }
        }
        Ok(RunningLoad { kind, cpus: cpus.to_vec(), stop, bytes, threads, started: Instant::now() })
    }

    /// Starts `kind` on every online CPU but the cell's. On a machine whose only such CPU is the master's,
    /// says in `warnings` that the load shares it with the SCHED_FIFO master loop.
    pub fn start_beside_master(
        kind: Load,
        master_cpu: usize,
        cell_cpu: usize,
        warnings: &mut Vec<String>,
    ) -> Result<RunningLoad, crate::BenchError> {
        let online =
            rtcell_host::cpu::online_cpus().map_err(|e| crate::BenchError::Other(format!("online CPUs: {e}")))?;
        let load_cpus: Vec<usize> = online.iter().copied().filter(|&c| c != cell_cpu).collect();
        if kind != Load::None && load_cpus.contains(&master_cpu) {
            warnings.push(format!(
                "the {} load shares CPU {} with the master loop (no other non-cell CPU on this machine); the master runs SCHED_FIFO, so the load runs only when the master is throttled or waiting",
                kind.as_str(),
                master_cpu
            ));
        }
        RunningLoad::start(kind, &load_cpus)
            .map_err(|e| crate::BenchError::Other(format!("cannot start the load: {e}")))
    }

    pub fn kind(&self) -> Load {
        self.kind
    }

    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Stops the load; returns the bytes it copied per second (proof it ran, and how hard).
    pub fn stop(mut self) -> f64 {
        self.halt()
    }

    fn halt(&mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let secs = self.started.elapsed().as_secs_f64();
        if secs > 0.0 { self.bytes.load(Ordering::Relaxed) as f64 / secs } else { 0.0 }
    }
}

impl Drop for RunningLoad {
    fn drop(&mut self) {
        self.halt();
    }
}
