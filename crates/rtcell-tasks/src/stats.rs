//! Per-task statistics in shared memory, and the schedule channel every task starts from.
//!
//! Each task owns three `Raw` channels: `task.<name>` (the counters below and a message), and two
//! fixed-bucket histograms (`rtcell_shm::histogram`), `task.<name>.lat` (activation latency: actual start
//! minus intended release) and `task.<name>.exec` (execution time: end minus start), which also hold the
//! min / sum / max / count of their values. The task is the only writer; the supervisor reads the words
//! as untrusted input whenever it likes (a live line twice a second, the final table at the end).
//!
//! Counter words of `task.<name>`: see the `W_*` constants. Words 32.. hold a message of up to
//! [`MAX_MESSAGE`] bytes (why the task stopped: a watchdog trip, a fault).

use rtcell_shm::sync::{AtomicU64, Ordering, copy_to_words};
use rtcell_shm::{AttachError, RegionView};

/// Lifecycle of a task as it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Starting = 0,
    /// Initialised, waiting for the common start.
    Ready = 1,
    Running = 2,
    /// Reached the end of the scenario's duration.
    Done = 3,
    /// Stopped on request before the end (Ctrl-C).
    Stopped = 4,
    /// Its watchdog tripped: it stopped and wrote its safe value.
    Tripped = 5,
    /// Could not run (a channel missing, a file that cannot be written...).
    Faulted = 6,
}

impl TaskState {
    pub fn from_u64(v: u64) -> Option<TaskState> {
        Some(match v {
            0 => TaskState::Starting,
            1 => TaskState::Ready,
            2 => TaskState::Running,
            3 => TaskState::Done,
            4 => TaskState::Stopped,
            5 => TaskState::Tripped,
            6 => TaskState::Faulted,
            _ => return None,
        })
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            TaskState::Starting => "starting",
            TaskState::Ready => "ready",
            TaskState::Running => "running",
            TaskState::Done => "done",
            TaskState::Stopped => "stopped",
            TaskState::Tripped => "tripped",
            TaskState::Faulted => "faulted",
        }
    }

    /// No longer running (and never will again).
    pub fn is_final(&self) -> bool {
        matches!(self, TaskState::Done | TaskState::Stopped | TaskState::Tripped | TaskState::Faulted)
    }
}

pub const W_STATE: usize = 0;
/// Cycles run.
pub const W_CYCLES: usize = 1;
/// Cycles that completed after their deadline.
pub const W_OVERRUNS: usize = 2;
/// Consecutive overruns up to the last cycle.
pub const W_CONSEC: usize = 3;
/// Longest run of consecutive overruns.
pub const W_LONGEST: usize = 4;
/// Releases skipped (missed-cycle policy `skip`).
pub const W_SKIPPED: usize = 5;
/// Frames or requests sent.
pub const W_SENT: usize = 6;
/// Frames that could not be sent (ring full): lost.
pub const W_SEND_FAIL: usize = 7;
/// Frames or replies received.
pub const W_RECEIVED: usize = 8;
/// Frames found missing by the receiver (sequence gaps), or replies that did not come by the deadline.
pub const W_RECV_LOST: usize = 9;
/// Replies that did not match the reference output (offload master).
pub const W_ERRORS: usize = 10;
/// Replies that came after their deadline (discarded).
pub const W_LATE: usize = 11;
/// The cycle at which the watchdog tripped (cycles + 1; 0 = never).
pub const W_TRIP_CYCLE: usize = 12;
/// Cycles whose execution time exceeded the watchdog time.
pub const W_WATCHDOG_OVER: usize = 13;
/// Replies that could not be checked (offload master: a request of their pass was never delivered,
/// so the cell's controller state no longer follows the reference until the next pass).
pub const W_UNCHECKED: usize = 14;
/// Steps that found a channel corrupted by a peer (see [`crate::corrupt`]).
pub const W_CORRUPT: usize = 15;
/// Check word over the final block (state, counters, message), written with the final state: a reader
/// tells a block a peer scribbled after the task ended from the task's own.
const W_CHECK: usize = 30;
const W_MSG_LEN: usize = 31;
const W_MSG: usize = 32;
/// Longest message a task can leave.
pub const MAX_MESSAGE: usize = 256;
const WORDS: usize = W_MSG + MAX_MESSAGE / 8;
/// Bytes of a task's counter block.
pub const STATS_BYTES: usize = WORDS * 8;

/// Width of a histogram bucket (ns).
pub const BUCKET_NS: u64 = 500;
/// Buckets per histogram: 10 ms of range; longer values land in the overflow (their max is still exact).
pub const BUCKETS: usize = 20_000;

/// Longest task name (so that `task.<name>.exec` fits the 32-byte channel name).
pub const MAX_TASK_NAME: usize = 22;

pub fn stats_channel(task: &str) -> String {
    format!("task.{task}")
}

pub fn latency_channel(task: &str) -> String {
    format!("task.{task}.lat")
}

pub fn exec_channel(task: &str) -> String {
    format!("task.{task}.exec")
}

/// Name of the schedule channel.
pub const SCHEDULE_CHANNEL: &str = "sched";
const S_GO: usize = 0;
const S_START: usize = 1;
const S_END: usize = 2;
const SCHEDULE_BYTES: usize = 64;

/// Adds a task's three channels to a region layout.
pub fn add_task_to_layout(layout: &mut rtcell_shm::RegionLayout, task: &str) -> Result<(), rtcell_shm::LayoutError> {
    layout.raw(&stats_channel(task), STATS_BYTES)?;
    layout.raw(&latency_channel(task), rtcell_shm::histogram::bytes_for(BUCKETS))?;
    layout.raw(&exec_channel(task), rtcell_shm::histogram::bytes_for(BUCKETS))?;
    Ok(())
}

/// Adds the schedule channel to a region layout.
pub fn add_schedule_to_layout(layout: &mut rtcell_shm::RegionLayout) -> Result<(), rtcell_shm::LayoutError> {
    layout.raw(SCHEDULE_CHANNEL, SCHEDULE_BYTES)?;
    Ok(())
}

/// The common time base: every task's first release is `start_ns + offset`, and no release at or after
/// `end_ns` runs. CLOCK_MONOTONIC ns, shared by every process on the machine.
#[derive(Clone, Copy)]
pub struct Schedule<'a> {
    w: &'a [AtomicU64],
}

impl<'a> Schedule<'a> {
    pub fn attach(region: &RegionView<'a>) -> Result<Self, AttachError> {
        let w = region.raw(SCHEDULE_CHANNEL)?;
        if w.len() < 3 {
            return Err(AttachError::Corrupt { channel: None, what: "schedule channel too small" });
        }
        Ok(Schedule { w })
    }

    /// Supervisor: sets the start and the end and lets every task go.
    pub fn go(&self, start_ns: u64, end_ns: u64) {
        self.w[S_START].store(start_ns, Ordering::Relaxed);
        self.w[S_END].store(end_ns, Ordering::Relaxed);
        self.w[S_GO].store(1, Ordering::Release);
    }

    /// Supervisor: brings the end forward (a stop) so that tasks finish their current cycle and end.
    pub fn end_now(&self, now_ns: u64) {
        let end = self.w[S_END].load(Ordering::Relaxed);
        if now_ns < end {
            self.w[S_END].store(now_ns, Ordering::Relaxed);
        }
    }

    /// `(start, end)` once the supervisor said go.
    pub fn started(&self) -> Option<(u64, u64)> {
        (self.w[S_GO].load(Ordering::Acquire) == 1)
            .then(|| (self.w[S_START].load(Ordering::Relaxed), self.w[S_END].load(Ordering::Relaxed)))
    }

    /// The current end (it moves forward on a stop).
    pub fn end(&self) -> u64 {
        self.w[S_END].load(Ordering::Relaxed)
    }

    /// The block's words (go, start, end), to compare a copy with.
    pub fn words(&self) -> [u64; 3] {
        [S_GO, S_START, S_END].map(|i| self.w[i].load(Ordering::Acquire))
    }

    /// Makes this block hold `words` again (a copy a peer changed), go last.
    pub fn restore(&self, words: [u64; 3]) {
        self.w[S_START].store(words[S_START], Ordering::Relaxed);
        self.w[S_END].store(words[S_END], Ordering::Relaxed);
        self.w[S_GO].store(words[S_GO], Ordering::Release);
    }
}

/// A schedule in the supervisor's own memory: what Linux-side tasks follow, so that nothing a cell
/// writes into the region's schedule block can end them early or keep them running. The region's block
/// is a copy for the cells; the supervisor compares it with this one.
#[derive(Default)]
pub struct PrivateSchedule {
    w: [AtomicU64; 3],
}

impl PrivateSchedule {
    pub fn schedule(&self) -> Schedule<'_> {
        Schedule { w: &self.w }
    }
}

/// The task's own view of its counters (single writer: plain stores, no read-modify-write on shared
/// words).
pub struct StatsWriter<'a> {
    w: &'a [AtomicU64],
    pub cycles: u64,
    pub overruns: u64,
    pub consec: u64,
    pub longest: u64,
    pub skipped: u64,
    pub sent: u64,
    pub send_fail: u64,
    pub received: u64,
    pub recv_lost: u64,
    pub errors: u64,
    pub late: u64,
    pub watchdog_over: u64,
    pub unchecked: u64,
    pub corrupt: u64,
    /// Our own copy of what is published (the shared block is the peer-visible one).
    state: Option<TaskState>,
    trip_cycle: Option<u64>,
    message: String,
}

fn stats_words<'a>(region: &RegionView<'a>, task: &str) -> Result<&'a [AtomicU64], AttachError> {
    let w = region.raw(&stats_channel(task))?;
    if w.len() < WORDS {
        return Err(AttachError::Corrupt { channel: None, what: "task statistics channel too small" });
    }
    Ok(w)
}

impl<'a> StatsWriter<'a> {
    /// Attaches and zeroes the counters.
    pub fn attach(region: &RegionView<'a>, task: &str) -> Result<Self, AttachError> {
        let w = stats_words(region, task)?;
        for x in &w[..WORDS] {
            x.store(0, Ordering::Relaxed);
        }
        Ok(StatsWriter {
            w,
            cycles: 0,
            overruns: 0,
            consec: 0,
            longest: 0,
            skipped: 0,
            sent: 0,
            send_fail: 0,
            received: 0,
            recv_lost: 0,
            errors: 0,
            late: 0,
            watchdog_over: 0,
            unchecked: 0,
            corrupt: 0,
            state: Some(TaskState::Starting),
            trip_cycle: None,
            message: String::new(),
        })
    }

    /// Stores every counter (after each cycle).
    #[inline]
    pub fn publish(&self) {
        let s = |i: usize, v: u64| self.w[i].store(v, Ordering::Relaxed);
        s(W_OVERRUNS, self.overruns);
        s(W_CONSEC, self.consec);
        s(W_LONGEST, self.longest);
        s(W_SKIPPED, self.skipped);
        s(W_SENT, self.sent);
        s(W_SEND_FAIL, self.send_fail);
        s(W_RECEIVED, self.received);
        s(W_RECV_LOST, self.recv_lost);
        s(W_ERRORS, self.errors);
        s(W_LATE, self.late);
        s(W_WATCHDOG_OVER, self.watchdog_over);
        s(W_UNCHECKED, self.unchecked);
        s(W_CORRUPT, self.corrupt);
        self.w[W_CYCLES].store(self.cycles, Ordering::Release);
    }

    /// Counts one cycle's deadline verdict.
    #[inline]
    pub fn deadline(&mut self, overrun: bool) {
        if overrun {
            self.overruns += 1;
            self.consec += 1;
            self.longest = self.longest.max(self.consec);
        } else {
            self.consec = 0;
        }
    }

    pub fn set_state(&mut self, s: TaskState) {
        self.state = Some(s);
        self.w[W_STATE].store(s as u64, Ordering::Release);
    }

    /// Leaves a message (truncated to [`MAX_MESSAGE`] bytes at a character boundary) without ending.
    pub fn set_message(&mut self, message: &str) {
        let mut n = message.len().min(MAX_MESSAGE);
        while !message.is_char_boundary(n) {
            n -= 1;
        }
        self.message = message[..n].to_string();
        copy_to_words(self.message.as_bytes(), &self.w[W_MSG..]);
        self.w[W_MSG_LEN].store(n as u64, Ordering::Relaxed);
    }

    /// Final state with a message; an empty message keeps the one left before (a corrupt channel the
    /// task resynced from, with the count of corrupt steps).
    pub fn finish(&mut self, s: TaskState, message: &str) {
        if !message.is_empty() {
            self.set_message(message);
        } else if self.corrupt > 0 {
            let m = format!("{} ({} corrupt steps in all)", self.message, self.corrupt);
            self.set_message(&m);
        }
        self.publish();
        self.set_state(s);
        let words = self.w[..WORDS].iter().map(|x| x.load(Ordering::Relaxed));
        self.w[W_CHECK].store(check_word(words), Ordering::Release);
    }

    pub fn set_trip_cycle(&mut self, cycle: u64) {
        self.trip_cycle = Some(cycle);
        self.w[W_TRIP_CYCLE].store(cycle + 1, Ordering::Relaxed);
    }

    /// The task's own record of its counters, whatever a peer wrote into the shared block.
    pub fn own(&self) -> TaskCounters {
        TaskCounters {
            state: self.state,
            cycles: self.cycles,
            overruns: self.overruns,
            consec: self.consec,
            longest: self.longest,
            skipped: self.skipped,
            sent: self.sent,
            send_fail: self.send_fail,
            received: self.received,
            recv_lost: self.recv_lost,
            errors: self.errors,
            late: self.late,
            trip_cycle: self.trip_cycle,
            watchdog_over: self.watchdog_over,
            unchecked: self.unchecked,
            corrupt: self.corrupt,
            message: self.message.clone(),
        }
    }
}

/// FNV-1a over every word of a counter block but the check word itself.
fn check_word(words: impl Iterator<Item = u64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, x) in words.enumerate() {
        if i != W_CHECK {
            h = (h ^ x).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h | 1
}

/// A task's counter block read once (its words copied), so that what is checked and what is shown
/// are the same reading: a peer cannot change the block between the check and the use.
pub struct BlockReading {
    block: String,
    w: [u64; WORDS],
}

impl BlockReading {
    /// Copies task `task`'s block: every word but the cycles, then the cycles, which the task publishes
    /// last (so a count read is at most one cycle ahead of them, as [`check_live`] allows).
    pub fn read(region: &RegionView<'_>, task: &str) -> Result<BlockReading, AttachError> {
        let src = stats_words(region, task)?;
        let mut w = [0u64; WORDS];
        for (i, x) in src[..WORDS].iter().enumerate() {
            if i != W_CYCLES {
                w[i] = x.load(Ordering::Acquire);
            }
        }
        w[W_CYCLES] = src[W_CYCLES].load(Ordering::Acquire);
        Ok(BlockReading { block: stats_channel(task), w })
    }

    /// [`check_live`] on this reading.
    pub fn check_live(&self, max_releases: &dyn Fn() -> u64) -> Result<(), String> {
        check_words(&|i| self.w.get(i).copied().unwrap_or(0), max_releases)
    }

    /// The counters of this reading (untrusted: states checked, the message length clamped).
    pub fn counters(&self) -> TaskCounters {
        let r = |i: usize| self.w[i];
        let n = (r(W_MSG_LEN) as usize).min(MAX_MESSAGE);
        let mut buf = [0u8; MAX_MESSAGE];
        for (chunk, word) in buf.chunks_mut(8).zip(&self.w[W_MSG..]) {
            chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
        }
        TaskCounters {
            state: TaskState::from_u64(r(W_STATE)),
            cycles: r(W_CYCLES),
            overruns: r(W_OVERRUNS),
            consec: r(W_CONSEC),
            longest: r(W_LONGEST),
            skipped: r(W_SKIPPED),
            sent: r(W_SENT),
            send_fail: r(W_SEND_FAIL),
            received: r(W_RECEIVED),
            recv_lost: r(W_RECV_LOST),
            errors: r(W_ERRORS),
            late: r(W_LATE),
            trip_cycle: r(W_TRIP_CYCLE).checked_sub(1),
            watchdog_over: r(W_WATCHDOG_OVER),
            unchecked: r(W_UNCHECKED),
            corrupt: r(W_CORRUPT),
            // Read from shared memory: the peer's text, capped and escaped by the one sanitiser.
            message: rtcell_host::peer_text::peer_text(&buf[..n], rtcell_host::peer_text::PEER_TEXT_CAP),
        }
    }

    /// Checks this reading as a final block: the check word written with the final state must match
    /// its contents. `Err` says what is wrong (a peer scribbled the block after the task ended, or the
    /// state is impossible); a block whose task has not ended gives its counters.
    pub fn checked(&self) -> Result<TaskCounters, String> {
        let (block, state) = (&self.block, self.w[W_STATE]);
        match TaskState::from_u64(state) {
            None => {
                return Err(format!(
                    "statistics block {block:?} was scribbled: it holds an impossible state ({state:#x})"
                ));
            }
            Some(s) if !s.is_final() => return Ok(self.counters()),
            Some(_) => {}
        }
        let (want, got) = (check_word(self.w.iter().copied()), self.w[W_CHECK]);
        if want != got {
            return Err(format!(
                "statistics block {block:?} was scribbled after its task ended (check word {got:#x}, contents give {want:#x})"
            ));
        }
        Ok(self.counters())
    }
}

/// A task's statistics block, resolved once (while the region still holds the layout we made), so
/// that later checks read within bounds of our own.
pub fn stats_block<'a>(region: &RegionView<'a>, task: &str) -> Result<&'a [AtomicU64], AttachError> {
    stats_words(region, task)
}

/// Checks a live block (from [`stats_block`]) against what its task can have written by now, having
/// had at most `max_releases()` releases (asked once the block is read): a known state, a message that fits, counts no task can reach.
/// Holds at any moment of an honest run (the counts are read before the cycles, which the task
/// publishes last). `Err` says what is impossible.
pub fn check_live(w: &[AtomicU64], max_releases: &dyn Fn() -> u64) -> Result<(), String> {
    check_words(&|i| w.get(i).map_or(0, |x| x.load(Ordering::Acquire)), max_releases)
}

/// [`check_live`] on words read by `r` (the counts before the cycles).
fn check_words(r: &dyn Fn(usize) -> u64, max_releases: &dyn Fn() -> u64) -> Result<(), String> {
    let state = r(W_STATE);
    if TaskState::from_u64(state).is_none() {
        return Err(format!("it holds an impossible state ({state:#x})"));
    }
    let msg_len = r(W_MSG_LEN);
    if msg_len > MAX_MESSAGE as u64 {
        return Err(format!("its message claims {msg_len} bytes (at most {MAX_MESSAGE})"));
    }
    let per_cycle = [
        ("overruns", r(W_OVERRUNS)),
        ("consecutive overruns", r(W_CONSEC)),
        ("longest overrun run", r(W_LONGEST)),
        ("watchdog overs", r(W_WATCHDOG_OVER)),
        ("corrupt steps", r(W_CORRUPT)),
    ];
    let (skipped, trip) = (r(W_SKIPPED), r(W_TRIP_CYCLE));
    let cycles = r(W_CYCLES);
    let max_releases = max_releases();
    if cycles.saturating_add(skipped) > max_releases || trip > max_releases.saturating_add(1) {
        return Err(format!(
            "it counts {cycles} cycles and {skipped} skipped releases (trip word {trip}) where at most {max_releases} \
             releases were due"
        ));
    }
    for (what, v) in per_cycle {
        if v > cycles.saturating_add(1) {
            return Err(format!("it counts {v} {what} in {cycles} cycles"));
        }
    }
    Ok(())
}

/// A snapshot of a task's counters, as read by the supervisor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskCounters {
    /// `None` when the task wrote an impossible state.
    pub state: Option<TaskState>,
    pub cycles: u64,
    pub overruns: u64,
    pub consec: u64,
    pub longest: u64,
    pub skipped: u64,
    pub sent: u64,
    pub send_fail: u64,
    pub received: u64,
    pub recv_lost: u64,
    pub errors: u64,
    pub late: u64,
    /// The cycle (0-based) at which the watchdog tripped.
    pub trip_cycle: Option<u64>,
    pub watchdog_over: u64,
    pub unchecked: u64,
    /// Steps that found a channel corrupted by a peer.
    pub corrupt: u64,
    pub message: String,
}

/// Reads a task's counters (untrusted: states checked, the message length clamped).
pub fn read_counters(region: &RegionView<'_>, task: &str) -> Result<TaskCounters, AttachError> {
    Ok(BlockReading::read(region, task)?.counters())
}

/// Reads one of a task's histograms.
pub fn read_histogram<'a>(
    region: &RegionView<'a>,
    channel: &str,
) -> Result<rtcell_shm::histogram::HistogramReader<'a>, String> {
    let w = region.raw(channel).map_err(|e| format!("{channel}: {e}"))?;
    rtcell_shm::histogram::HistogramReader::read(w).map_err(|e| format!("{channel}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_block_is_checked_against_what_its_task_can_have_counted() {
        let w: Vec<AtomicU64> = (0..WORDS).map(|_| AtomicU64::new(0)).collect();
        assert_eq!(check_live(&w, &|| 0), Ok(()));
        w[W_STATE].store(TaskState::Running as u64, Ordering::Relaxed);
        w[W_CYCLES].store(10, Ordering::Relaxed);
        w[W_OVERRUNS].store(11, Ordering::Relaxed);
        w[W_CORRUPT].store(3, Ordering::Relaxed);
        assert_eq!(check_live(&w, &|| 12), Ok(()), "one count ahead of the cycles is a publish in flight");
        assert!(check_live(&w, &|| 9).unwrap_err().contains("at most 9 releases"));
        w[W_CONSEC].store(12, Ordering::Relaxed);
        assert!(check_live(&w, &|| 12).unwrap_err().contains("12 consecutive overruns in 10 cycles"));
        w[W_CONSEC].store(0, Ordering::Relaxed);
        w[W_MSG_LEN].store(MAX_MESSAGE as u64 + 1, Ordering::Relaxed);
        assert!(check_live(&w, &|| 12).unwrap_err().contains("its message claims"));
        w[W_MSG_LEN].store(0, Ordering::Relaxed);
        w[W_STATE].store(0x8000_0000_8000_0001, Ordering::Relaxed);
        assert!(check_live(&w, &|| 12).unwrap_err().contains("impossible state"));
    }
}
