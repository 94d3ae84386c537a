//! What the supervisor checks of the region a cell can write: the schedule block (the Linux side
//! follows the supervisor's own copy; a changed block is a cell's doing, reported and put back), and
//! every channel and task statistics block ([`RegionWatch`]).

use std::sync::Arc;

use rtcell_shm::sync::AtomicU64;
use rtcell_shm::{ComView, RegionView, RingView, SignalError, SignalView};
use rtcell_tasks::clock::mono_ns;
use rtcell_tasks::stats::SCHEDULE_CHANNEL;
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

    /// Whether task `task`'s statistics block holds what a task can have written, checked now (after
    /// the caller read it): a block found scribbled, now or before, is reported and its live figures
    /// must not be shown as the task's.
    pub fn block_ok(&mut self, task: &str, start_ns: u64, errors: &mut Vec<String>) -> bool {
        let Some(i) = self.blocks.iter().position(|(t, ..)| t == task) else { return true };
        if let Some((name, msg)) = self.check_block(i, start_ns) {
            self.report(&name, msg, errors);
        }
        !self.found.contains(&self.blocks[i].1)
    }

    /// As [`RegionWatch::block_ok`], for counters `seen` just read from the block of task `spec`: a trip
    /// that task cannot make ([`impossible_trip`]) is found as a scribble too.
    pub fn counters_ok(
        &mut self,
        spec: &TaskSpec,
        seen: &TaskCounters,
        start_ns: u64,
        errors: &mut Vec<String>,
    ) -> bool {
        let floor = self.floors.entry(spec.name.clone()).or_default();
        let what = impossible_trip(spec, seen).or_else(|| went_back(floor, seen));
        raise(floor, seen);
        if let (Some(what), Some(i)) = (what, self.blocks.iter().position(|(t, ..)| *t == spec.name)) {
            let block = self.blocks[i].1.clone();
            let msg = format!(
                "statistics block {block:?} was scribbled: {what} (task {:?}'s live figures were not shown from \
                 then on)",
                spec.name
            );
            self.report(&block, msg, errors);
        }
        self.block_ok(&spec.name, start_ns, errors)
    }

    /// Block `i` checked: `Some((block, message))` when it is impossible.
    fn check_block(&self, i: usize, start_ns: u64) -> Option<(String, String)> {
        let (task, block, words, period, offset) = &self.blocks[i];
        let due = || {
            if start_ns == 0 {
                return 0;
            }
            let first = start_ns.saturating_add(*offset);
            let now = mono_ns();
            // One release of slack either side of the clock read.
            if now < first { 1 } else { (now - first) / period + 2 }
        };
        let what = rtcell_tasks::stats::check_live(words, &due).err()?;
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

/// What in `seen` is below what the same block read before (`floor`): a counter that only grows went
/// back, or a trip seen before is gone. The task itself never does that; a cell that rewrites its own
/// block (e.g. after the task's last step, to hide its overruns or its watchdog trip) does.
fn went_back(floor: &TaskCounters, seen: &TaskCounters) -> Option<String> {
    let grows = [
        ("cycles", floor.cycles, seen.cycles),
        ("overruns", floor.overruns, seen.overruns),
        ("longest overrun run", floor.longest, seen.longest),
        ("watchdog overruns", floor.watchdog_over, seen.watchdog_over),
        ("corrupt-channel steps", floor.corrupt, seen.corrupt),
        ("reference errors", floor.errors, seen.errors),
    ];
    if let Some((what, before, now)) = grows.iter().find(|(_, before, now)| now < before) {
        return Some(format!("its {what} went from {before} to {now} (they only grow)"));
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

/// `floor` raised to what `seen` shows (a trip, once read, is kept).
fn raise(floor: &mut TaskCounters, seen: &TaskCounters) {
    floor.cycles = floor.cycles.max(seen.cycles);
    floor.overruns = floor.overruns.max(seen.overruns);
    floor.longest = floor.longest.max(seen.longest);
    floor.watchdog_over = floor.watchdog_over.max(seen.watchdog_over);
    floor.corrupt = floor.corrupt.max(seen.corrupt);
    floor.errors = floor.errors.max(seen.errors);
    if tripped(seen) {
        floor.state = Some(TaskState::Tripped);
        floor.trip_cycle = floor.trip_cycle.or(seen.trip_cycle);
    }
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
