//! What the supervisor checks of the region a cell can write: the schedule block (the Linux side
//! follows the supervisor's own copy; a changed block is a cell's doing, reported and put back), and
//! every channel and task statistics block ([`RegionWatch`]).

use std::sync::Arc;

use rtcell_host::clock::mono_ns;
use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{ComView, RegionView, RingView, SignalError, SignalView};
use rtcell_tasks::stats::{BlockReading, SCHEDULE_CHANNEL};
use rtcell_tasks::{OnCorrupt, PrivateSchedule, Schedule, TaskCounters, TaskSpec, TaskState};

use crate::live::RunRegion;
use crate::plan::Plan;

/// The region's header and channel table beside the run's own copy: every tick, a difference is a
/// cell's doing, named (once per entry) as an error of the run and put back. The Linux side never
/// reads the live table, so nothing it reads or writes moved meanwhile.
pub struct DirectoryGuard<'a> {
    region: &'a RunRegion,
    reported: Vec<String>,
}

impl<'a> DirectoryGuard<'a> {
    pub fn new(region: &'a RunRegion) -> DirectoryGuard<'a> {
        DirectoryGuard { region, reported: Vec::new() }
    }

    pub fn check(&mut self, errors: &mut Vec<String>) {
        let changes = self.region.directory_changes();
        if changes.is_empty() {
            return;
        }
        self.region.restore_directory();
        for c in changes {
            let key = match &c {
                rtcell_shm::DirectoryChange::Header { word, .. } => format!("(header word {word})"),
                rtcell_shm::DirectoryChange::Entry { name, .. } => name.clone(),
            };
            if self.reported.contains(&key) {
                continue;
            }
            self.reported.push(key);
            let msg = format!(
                "corrupt region: {c}, by a cell; the Linux side kept the run's own directory (no read or write \
                 went elsewhere) and the table was put back"
            );
            eprintln!("error: {msg}");
            errors.push(msg);
        }
    }
}

/// The region's schedule block (for the cells) beside the supervisor's own (for the Linux side and the
/// end of the run).
pub struct ScheduleGuard<'a> {
    region: Schedule<'a>,
    own: Arc<PrivateSchedule>,
    reported: bool,
}

impl<'a> ScheduleGuard<'a> {
    pub fn new(region: Schedule<'a>) -> ScheduleGuard<'a> {
        ScheduleGuard { region, own: Arc::new(PrivateSchedule::default()), reported: false }
    }

    /// The supervisor's own schedule, for the Linux-side tasks.
    pub fn own(&self) -> Arc<PrivateSchedule> {
        Arc::clone(&self.own)
    }

    pub fn go(&self, start_ns: u64, end_ns: u64) {
        self.own.schedule().go(start_ns, end_ns);
        self.region.go(start_ns, end_ns);
    }

    pub fn end_now(&self, now_ns: u64) {
        self.own.schedule().end_now(now_ns);
        self.region.end_now(now_ns);
    }

    /// Compares the region's block with ours: a difference is an error of the run (named once, printed
    /// at once) and the block is put back, so the cells' tasks follow the supervisor's schedule again.
    pub fn check(&mut self, errors: &mut Vec<String>) {
        let ours = self.own.schedule().words();
        let theirs = self.region.words();
        if theirs == ours {
            return;
        }
        self.region.restore(ours);
        if self.reported {
            return;
        }
        self.reported = true;
        let start = ours[1];
        let rel = |v: u64| format!("{:+.3} s", (v as i128 - start as i128) as f64 / 1e9);
        let msg = format!(
            "schedule block {SCHEDULE_CHANNEL:?} was changed by a cell: it held go {}, start {}, end {} (from the \
             start) where the supervisor set go {}, start {}, end {}; the Linux side kept the supervisor's schedule \
             and the block was put back, but a cell's tasks may have ended early",
            theirs[0],
            rel(theirs[1]),
            rel(theirs[2]),
            ours[0],
            rel(ours[1]),
            rel(ours[2]),
        );
        eprintln!("error: {msg}");
        errors.push(msg);
    }
}

/// Every channel and statistics block of the region, resolved once right after we laid the region out
/// (so every later read is bounded by our own layout, never by the live header), checked on every
/// supervision tick and at the end. A channel or block found corrupted at any time is an error of the
/// run naming it (printed once, at once).
pub struct RegionWatch<'a> {
    rings: Vec<(String, RingView<'a>)>,
    signals: Vec<(String, SignalView<'a>, Vec<u8>)>,
    /// COM channels with the table as we laid it out.
    coms: Vec<(String, ComView<'a>, Vec<u64>)>,
    /// Task statistics blocks: (task, block name, words, period, offset).
    blocks: Vec<(String, String, &'a [AtomicU64], u64, u64)>,
    /// What was found, by channel or block name.
    found: Vec<String>,
    /// Per task, the most each counter that only grows has read so far (see [`RegionWatch::counters_ok`]).
    floors: std::collections::HashMap<String, TaskCounters>,
}

impl<'a> RegionWatch<'a> {
    /// Resolves the plan's channels and blocks in `region`, which must be the region just laid out.
    pub fn new(plan: &Plan, region: &RegionView<'a>) -> Result<RegionWatch<'a>, String> {
        let e = |name: &str, e: rtcell_shm::AttachError| format!("{name:?}: {e}");
        let mut w = RegionWatch {
            rings: vec![],
            signals: vec![],
            coms: vec![],
            blocks: vec![],
            found: vec![],
            floors: Default::default(),
        };
        for ch in &plan.channels {
            w.rings.push((ch.name.clone(), region.ring(&ch.name).map_err(|x| e(&ch.name, x))?));
        }
        for s in &plan.signals {
            let v = region.signal(&s.name).map_err(|x| e(&s.name, x))?;
            w.signals.push((s.name.clone(), v, vec![0u8; v.capacity()]));
            if s.writable.is_some() {
                let ack = rtcell_tasks::params::ack_name(&s.name);
                let v = region.signal(&ack).map_err(|x| e(&ack, x))?;
                w.signals.push((ack, v, vec![0u8; v.capacity()]));
            }
        }
        for c in &plan.coms {
            let v = region.com(&c.name).map_err(|x| e(&c.name, x))?;
            let mut copy = vec![0u64; v.table_words()];
            v.pin(&mut copy).map_err(|x| format!("{:?}: {x:?}", c.name))?;
            w.coms.push((c.name.clone(), v, copy));
        }
        for t in &plan.tasks {
            let name = &t.spec.name;
            let block = rtcell_tasks::stats::stats_channel(name);
            let words = rtcell_tasks::stats::stats_block(region, name).map_err(|x| e(&block, x))?;
            w.blocks.push((name.clone(), block, words, t.spec.period_ns.max(1), t.spec.offset_ns));
        }
        Ok(w)
    }

    /// Whether `reading`, just taken of the block of task `spec`, holds what that task can have
    /// written (what a task can have written by now, never below what was read before, no trip that
    /// task cannot make): its counters when it holds the task's figures, `None` when the block is
    /// found scribbled, now or before. The counters returned are that reading's, never read again.
    pub fn counters_ok(
        &mut self,
        spec: &TaskSpec,
        reading: &BlockReading,
        start_ns: u64,
        errors: &mut Vec<String>,
    ) -> Option<TaskCounters> {
        let seen = reading.counters();
        let floor = self.floors.entry(spec.name.clone()).or_default();
        let what = impossible_trip(spec, &seen).or_else(|| went_back(floor, &seen));
        raise(floor, &seen);
        let i = self.blocks.iter().position(|(t, ..)| *t == spec.name)?;
        let what = what.or_else(|| reading.check_live(&|| self.due(i, start_ns)).err());
        let block = self.blocks[i].1.clone();
        if let Some(what) = what {
            let msg = format!(
                "statistics block {block:?} was scribbled: {what} (task {:?}'s live figures were not shown from \
                 then on)",
                spec.name
            );
            self.report(&block, msg, errors);
        }
        (!self.found.contains(&block)).then_some(seen)
    }

    /// Marks task `task`'s block as not holding its task's figures (`why`: e.g. its cell ended early):
    /// reported once, and nothing read from it is shown from then on.
    pub fn disown(&mut self, task: &str, why: &str, errors: &mut Vec<String>) {
        if let Some((_, block, ..)) = self.blocks.iter().find(|(t, ..)| t == task) {
            let block = block.clone();
            let msg = format!("statistics block {block:?} does not hold task {task:?}'s figures: {why} (not shown)");
            self.report(&block, msg, errors);
        }
    }

    /// The most releases block `i`'s task can have had by now (one of slack either side of the clock
    /// read); 0 before the start.
    fn due(&self, i: usize, start_ns: u64) -> u64 {
        let (_, _, _, period, offset) = &self.blocks[i];
        if start_ns == 0 {
            return 0;
        }
        let first = start_ns.saturating_add(*offset);
        let now = mono_ns();
        if now < first { 1 } else { (now - first) / period + 2 }
    }

    /// Block `i` checked: `Some((block, message))` when it is impossible.
    fn check_block(&self, i: usize, start_ns: u64) -> Option<(String, String)> {
        let (task, block, words, ..) = &self.blocks[i];
        let what = rtcell_tasks::stats::check_live(words, &|| self.due(i, start_ns)).err()?;
        Some((
            block.clone(),
            format!(
                "statistics block {block:?} was scribbled: {what} (task {task:?}'s live figures were not shown from \
                 then on)"
            ),
        ))
    }

    fn report(&mut self, name: &str, msg: String, errors: &mut Vec<String>) {
        if self.found.iter().any(|f| f == name) {
            return;
        }
        self.found.push(name.to_string());
        eprintln!("error: {msg}");
        errors.push(msg);
    }

    /// Checks everything once. `start_ns` is the supervisor's start of the schedule (0 before go).
    pub fn check(&mut self, start_ns: u64, errors: &mut Vec<String>) {
        let mut bad: Vec<(String, String)> = Vec::new();
        for (name, r) in &self.rings {
            if let Err(what) = r.check_shared() {
                bad.push((name.clone(), format!("corrupt channel {name:?} (ring), found by the supervisor: {what}")));
            }
        }
        for (name, v, buf) in &mut self.signals {
            let mut seen = 0;
            match v.read(buf, &mut seen) {
                Ok(_) | Err(SignalError::Busy) => {}
                Err(e) => {
                    let what = match e {
                        SignalError::Corrupt(w) => w.to_string(),
                        SignalError::TooSmall { len } => {
                            format!("it claims a value of {len} bytes, more than it holds")
                        }
                        SignalError::TooLarge { .. } | SignalError::Busy => continue,
                    };
                    bad.push((
                        name.clone(),
                        format!("corrupt channel {name:?} (signal), found by the supervisor: {what}"),
                    ));
                }
            }
        }
        for (name, v, copy) in &self.coms {
            if v.pinned(copy).table_intact().is_err() {
                bad.push((
                    name.clone(),
                    format!(
                        "corrupt channel {name:?} (COM), found by the supervisor: its table no longer matches its layout"
                    ),
                ));
            }
        }
        for i in 0..self.blocks.len() {
            bad.extend(self.check_block(i, start_ns));
        }
        for (name, msg) in bad {
            self.report(&name, msg, errors);
        }
    }
}

/// Where a count lives in a reading.
type Count = fn(&mut TaskCounters) -> &mut u64;

/// Every count a task only ever raises (the consecutive-overrun count, which falls back to 0, is not
/// one): the one list [`went_back`] checks and [`raise`] keeps.
const GROWS: [(&str, Count); 13] = [
    ("cycles", |c| &mut c.cycles),
    ("overruns", |c| &mut c.overruns),
    ("longest overrun run", |c| &mut c.longest),
    ("skipped releases", |c| &mut c.skipped),
    ("frames sent", |c| &mut c.sent),
    ("frames not sent", |c| &mut c.send_fail),
    ("frames received", |c| &mut c.received),
    ("frames lost", |c| &mut c.recv_lost),
    ("reference errors", |c| &mut c.errors),
    ("late replies", |c| &mut c.late),
    ("watchdog overruns", |c| &mut c.watchdog_over),
    ("unchecked replies", |c| &mut c.unchecked),
    ("corrupt-channel steps", |c| &mut c.corrupt),
];

/// What in `seen` is below what the same block read before (`floor`): a counter that only grows went
/// back, a final state changed (a trip, a fault or an end is final), or a trip seen before is gone.
/// The task itself never does that; a cell that rewrites its own block (e.g. after the task's last
/// step, to hide its overruns or its watchdog trip) does.
fn went_back(floor: &TaskCounters, seen: &TaskCounters) -> Option<String> {
    let (mut before, mut now) = (floor.clone(), seen.clone());
    for (what, count) in GROWS {
        let (b, n) = (*count(&mut before), *count(&mut now));
        if n < b {
            return Some(format!("its {what} went from {b} to {n} (they only grow)"));
        }
    }
    if let (Some(b), n) = (floor.state.filter(|s| s.is_final()), seen.state)
        && n != Some(b)
    {
        return Some(format!(
            "its state went from {} to {} (a final state is final)",
            b.as_str(),
            n.map_or("?", |s| s.as_str())
        ));
    }
    // The state and the trip cycle are two words the task writes one after the other: a read between
    // them sees one without the other, so only a trip that vanished or a cycle that changed counts.
    let moved = matches!((floor.trip_cycle, seen.trip_cycle), (Some(a), Some(b)) if a != b);
    (tripped(floor) && (!tripped(seen) || moved)).then(|| {
        format!(
            "a watchdog trip read before (cycle {}) is gone or moved (a trip is final)",
            floor.trip_cycle.map_or("?".into(), |k| k.to_string())
        )
    })
}

fn tripped(c: &TaskCounters) -> bool {
    c.state == Some(TaskState::Tripped) || c.trip_cycle.is_some()
}

/// `floor` raised to what `seen` shows (a final state and a trip, once read, are kept).
fn raise(floor: &mut TaskCounters, seen: &TaskCounters) {
    let mut now = seen.clone();
    for (_, count) in GROWS {
        let n = *count(&mut now);
        let b = count(floor);
        *b = (*b).max(n);
    }
    if floor.state.is_none_or(|s| !s.is_final()) && seen.state.is_some_and(|s| s.is_final()) {
        floor.state = seen.state;
    }
    // A trip cycle read before the state it goes with counts as a trip (see `tripped`).
    floor.trip_cycle = floor.trip_cycle.or(seen.trip_cycle);
}

/// A trip no task of this spec can make: it has no watchdog and does not stop on a corrupt channel.
pub fn impossible_trip(spec: &TaskSpec, c: &TaskCounters) -> Option<String> {
    let claimed = c.trip_cycle.is_some() || c.state == Some(TaskState::Tripped);
    (claimed && spec.watchdog.is_none() && spec.on_corrupt != OnCorrupt::Trip).then(|| {
        format!(
            "it claims a trip{} where task {:?} has no watchdog and does not stop on a corrupt channel",
            c.trip_cycle.map_or(String::new(), |k| format!(" at cycle {k}")),
            spec.name
        )
    })
}
