//! What a task is, as data: a process cell receives its task set as JSON on its command line, so every
//! field here is plain and serialisable. The scenario layer builds these from a validated scenario file;
//! nothing here re-validates beyond what the executive needs to stay in bounds.

use serde::{Deserialize, Serialize};

/// One task: when it runs, at what priority, what it does, and what happens when it runs late.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Unique within the scenario; names the task's statistics channels (`task.<name>` ...).
    pub name: String,
    /// Release period in ns (above 0).
    pub period_ns: u64,
    /// First release at `start + offset_ns`.
    pub offset_ns: u64,
    /// A cycle that completes later than `release + deadline_ns` is an overrun.
    pub deadline_ns: u64,
    /// SCHED_FIFO priority (1..=99): a higher-priority task preempts a lower one on the same CPU.
    pub priority: i32,
    /// The CPU the task's thread is pinned to.
    pub cpu: usize,
    /// What to do when a cycle ends after the next release.
    pub missed: MissedPolicy,
    /// CODESYS-style watchdog; `None` disables it.
    pub watchdog: Option<Watchdog>,
    /// The work done in each cycle.
    pub work: TaskWork,
    /// Ring the task sends one frame to per cycle (counted as sent, or lost when the ring is full).
    pub send: Option<String>,
    /// Ring the task drains each cycle (frames counted as received; gaps in their sequence as lost).
    pub recv: Option<String>,
    /// Bytes of each frame sent on `send` (at least 24: sequence number, send time, value).
    pub frame_bytes: u32,
    /// Signal the task writes its output to (and its safe value to, when its watchdog trips).
    pub output: Option<String>,
    /// Values written to `output` when the watchdog trips.
    pub safe_value: Vec<f64>,
    /// TSC frequency (kHz) for converting execution times; 0 = calibrate in the task.
    pub tsc_khz: u64,
    /// Writable signals the task reads at the start of each cycle; each new value it sees is copied, with
    /// its sequence number, to the signal's acknowledgement (`<name>.ack`, see [`crate::params`]).
    #[serde(default)]
    pub params: Vec<String>,
    /// What the task does when a channel it reads was corrupted by a peer.
    #[serde(default)]
    pub on_corrupt: OnCorrupt,
}

/// What a task does when a peer corrupted a channel it reads (a table that no longer matches the
/// layout, a slot that cannot be read): either way the step is counted and reported by channel name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCorrupt {
    /// The default: the step's work is skipped (nothing computed from corrupt data, the output keeps
    /// its last value), the task stays on its schedule and resumes when the peer's data is valid again.
    #[default]
    Resync,
    /// The task stops as on a watchdog trip and writes its safe value (when it has one).
    Trip,
}

impl OnCorrupt {
    pub fn as_str(&self) -> &'static str {
        match self {
            OnCorrupt::Resync => "resync",
            OnCorrupt::Trip => "trip",
        }
    }
}

// Every float in a spec is finite (the scenario layer refuses NaN and infinities), so equality is an
// equivalence; cells compare specs with `Eq`.
impl Eq for TaskSpec {}

/// CODESYS task watchdog: `time_ns` and `sensitivity`. It trips after `sensitivity` consecutive cycles
/// whose execution time exceeds `time_ns`, or at once when one cycle exceeds `time_ns * sensitivity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watchdog {
    pub time_ns: u64,
    pub sensitivity: u32,
}

impl Watchdog {
    /// Whether a cycle of `exec_ns` after `over_before` consecutive cycles above `time_ns` trips the
    /// watchdog; returns the new consecutive count and the verdict.
    pub fn judge(&self, over_before: u32, exec_ns: u64) -> (u32, Option<String>) {
        let sens = self.sensitivity.max(1);
        if exec_ns <= self.time_ns {
            return (0, None);
        }
        let over = over_before.saturating_add(1);
        let limit = self.time_ns.saturating_mul(sens as u64);
        if exec_ns > limit {
            return (
                over,
                Some(format!(
                    "watchdog: one cycle ran {:.1} us, above time x sensitivity = {:.1} us",
                    exec_ns as f64 / 1e3,
                    limit as f64 / 1e3
                )),
            );
        }
        if over >= sens {
            return (
                over,
                Some(format!(
                    "watchdog: {over} consecutive cycles above {:.1} us (last {:.1} us; sensitivity {sens})",
                    self.time_ns as f64 / 1e3,
                    exec_ns as f64 / 1e3
                )),
            );
        }
        (over, None)
    }
}

/// What a periodic task does when a cycle ends after its next release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissedPolicy {
    /// Skip every release already past and wait for the next one still ahead (the skipped releases
    /// are counted).
    Skip,
    /// Run the missed release at once (back to back), keeping the release grid.
    RunAtOnce,
}

impl MissedPolicy {
    pub fn as_str(&self) -> &'static str {
        match self {
            MissedPolicy::Skip => "skip",
            MissedPolicy::RunAtOnce => "run_at_once",
        }
    }
}

/// Fault injection for a `spin` task: from cycle `at_cycle` on (0-based), `cycles` cycles spin `us`
/// instead of the normal length. Used to show the watchdog and the missed-cycle policies at work.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Inject {
    pub at_cycle: u64,
    pub cycles: u64,
    pub us: f64,
}

/// The work of one cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskWork {
    /// Busy work of a calibrated length (`us` microseconds when not preempted): a PLC program. With
    /// an output signal, writes the cycle count to it.
    Spin { us: f64, inject: Option<Inject> },
    /// Joint setpoints of a 6-axis arm moving every joint from `from_deg` to `to_deg` and back, each
    /// way in `move_s` seconds (a smooth quintic profile): writes `[q; 6], [qd; 6], [qdd; 6]` (rad,
    /// rad/s, rad/s^2) to the output signal.
    Trajectory { from_deg: f64, to_deg: f64, move_s: f64 },
    /// Rigid-body inverse dynamics (recursive Newton-Euler, PUMA 560 parameters, see
    /// [`crate::dynamics`]) of the setpoint read from signal `setpoint`: writes the 6 joint torques
    /// (N m) to the output signal.
    InverseDynamics { setpoint: String },
    /// A drive exchange: reads the setpoint and torque signals, spends `us` on the (simulated)
    /// fieldbus frame, and writes `[q; 6], [tau; 6]` to the output signal.
    Drive { setpoint: String, torque: String, us: f64 },
    /// Appends one CSV line per cycle to `file`: the time, the values of `signals`, and for each task in
    /// `tasks` its cycles, overruns and worst latency so far. Only on the Linux side. `created` is the
    /// (device, inode) of the file the run made new for it: the task writes only to that file, so a
    /// directory swapped for a symbolic link between the two opens cannot redirect it.
    Log {
        file: String,
        signals: Vec<String>,
        tasks: Vec<String>,
        #[serde(default)]
        created: Option<(u64, u64)>,
    },
    /// The 10 kHz master of the offload: each cycle sends the next reference sample `(r, y)` on ring
    /// `request` (`rtcell_control::offload` messages) to a cell serving the controller in `precision`,
    /// waits for the answer on ring `reply` until 90% of the deadline, and checks it against the reference
    /// output (f64 bit for bit, f32 and Q31 within their tolerances). Replies that do not come in time are
    /// lost; mismatches are errors.
    Master { request: String, reply: String, precision: rtcell_control::offload::Precision },
    /// User C code from the shared object `library` (an absolute path): `init` once before the first
    /// release, `step` every cycle, the task thread's COM context bound to COM channels `com` (all the
    /// region's when empty) through the library's own librtcell.
    C { library: String, init: Option<String>, step: String, com: Vec<String> },
    /// The master of the C offload over COM signals: each cycle writes the next reference sample
    /// (seq, reset, r, y) as a signal group on `input`, waits for the group (seq, u) with the same seq
    /// on `output` until 90% of the deadline, and checks u bit for bit against the reference output. A
    /// sample not answered in its cycle is held (no new one is sent) until its answer comes.
    ComMaster { input: String, output: String, ids: crate::cwork::ComMasterIds },
    /// The EtherCAT master's cycle (`rtcell_ecat::master`): brings the segment on `interface` to OP before
    /// the first release, then each cycle sends the digital outputs read from signal `outputs` (value i
    /// to device i; a signal of fewer values repeats its last) and writes the inputs to the output signal (per device: the digital inputs, the analog
    /// input). A frame not back within `timeout_us` is lost (counted), and the cycle lasts that long, so a
    /// lost segment trips the task's watchdog.
    /// `busy_poll`: the master spins for each reply instead of sleeping until it arrives.
    Ethercat {
        interface: String,
        outputs: Option<String>,
        timeout_us: u64,
        #[serde(default)]
        busy_poll: bool,
    },
    /// Fault injection (a hostile peer, for tests and demonstrations): from cycle `at_cycle` on
    /// (0-based), for `cycles` cycles, overwrites the first words of `channel` (its header and table,
    /// or a task's statistics block) with garbage every cycle; then puts back the words it found there.
    Scribble { channel: String, at_cycle: u64, cycles: u64 },
}

impl TaskWork {
    /// The workload's name as scenario files spell it.
    pub fn kind(&self) -> &'static str {
        match self {
            TaskWork::Spin { .. } => "spin",
            TaskWork::Trajectory { .. } => "trajectory",
            TaskWork::InverseDynamics { .. } => "inverse_dynamics",
            TaskWork::Drive { .. } => "drive",
            TaskWork::Log { .. } => "log",
            TaskWork::Master { .. } => "master",
            TaskWork::C { .. } => "c",
            TaskWork::ComMaster { .. } => "com_master",
            TaskWork::Ethercat { .. } => "ethercat",
            TaskWork::Scribble { .. } => "scribble",
        }
    }
}

/// Values in the trajectory setpoint signal: q, qd, qdd of 6 joints.
pub const SETPOINT_VALUES: usize = 18;
/// Values in the torque signal.
pub const TORQUE_VALUES: usize = 6;
/// Values in the drive command signal: q and tau of 6 joints.
pub const COMMAND_VALUES: usize = 12;
/// Smallest frame a task sends: sequence number, send time, value.
pub const MIN_FRAME_BYTES: u32 = 24;
