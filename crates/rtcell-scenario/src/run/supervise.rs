//! Watching a run from its go to its end: every tick the sink channels are drained, the region's guards
//! checked, the cells' and tasks' states read (a trip, a corrupt input or a cell that ended badly is
//! reported once, as it happens), and a live line per task printed; the run ends when its window has
//! passed and every task has reached a final state, when it is stopped, or at the latest a little
//! after its last period.

use std::time::{Duration, Instant};

use rtcell_cells::{Cell, CellStatus};
use rtcell_host::clock::mono_ns;
use rtcell_shm::RegionView;
use rtcell_tasks::stats::BlockReading;
use rtcell_tasks::{TaskState, read_counters};

use super::show::{drain, print_live, snapshot};
use super::start::{LinuxSide, Specs};
use crate::integrity::{DirectoryGuard, RegionWatch, ScheduleGuard};
use crate::live::Live;
use crate::plan::Plan;

/// Supervision tick (draining sink channels, watching cells).
const TICK: Duration = Duration::from_millis(10);
/// Live line refresh on a terminal, and when the output is not one.
const LIVE_TTY: Duration = Duration::from_millis(500);
const LIVE_PIPE: Duration = Duration::from_secs(1);
/// Supervision ticks between two snapshots of the cells' states for observers (100 ms).
const SNAPSHOT_TICKS: u64 = 10;

/// The run's guards over its region: checked every tick and once more at the end.
pub(super) struct Guards<'a> {
    pub dir: DirectoryGuard<'a>,
    pub sched: ScheduleGuard<'a>,
    pub watch: RegionWatch<'a>,
}

impl Guards<'_> {
    pub fn check(&mut self, start_ns: u64, errors: &mut Vec<String>) {
        self.dir.check(errors);
        self.sched.check(errors);
        self.watch.check(start_ns, errors);
    }
}

/// A sink channel's consumer, drained by the supervisor: its name, its consumer and a frame buffer.
pub(super) type Sink<'a> = (String, rtcell_shm::Consumer<'a>, Vec<u8>);

/// The supervisor's view of a running plan and what it has reported so far.
pub(super) struct Supervisor<'r, 'p> {
    plan: &'p Plan,
    region: &'p RegionView<'r>,
    specs: &'p Specs,
    pub sinks: Vec<Sink<'r>>,
    tty: bool,
    /// Live lines printed last time (a terminal's are rewritten in place).
    pub live_lines: usize,
    /// Stopped before its end.
    pub incomplete: bool,
    reported_trips: Vec<String>,
    reported_corrupt: Vec<String>,
    /// When the run's window opened (as the supervisor saw it).
    pub started_at: Instant,
}

impl<'r, 'p> Supervisor<'r, 'p> {
    pub fn new(plan: &'p Plan, region: &'p RegionView<'r>, specs: &'p Specs) -> Supervisor<'r, 'p> {
        let sinks = plan
            .channels
            .iter()
            .filter(|c| c.sink)
            .filter_map(|ch| {
                let r = region.ring(&ch.name).ok()?;
                Some((ch.name.clone(), r.consumer(), vec![0u8; ch.frame_bytes as usize]))
            })
            .collect();
        Supervisor {
            plan,
            region,
            specs,
            sinks,
            tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            live_lines: 0,
            incomplete: false,
            reported_trips: Vec::new(),
            reported_corrupt: Vec::new(),
            started_at: Instant::now(),
        }
    }

    /// Supervises the run whose window is `[start, end)` (monotonic ns) until it ends; a stop asks the
    /// cells and the Linux side to stop and ends the window now.
    // Each argument is a part of the run this loop reads, checks or stops; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        cells: &mut [(Cell, Option<Duration>)],
        live: &Live,
        stop: &dyn Fn() -> bool,
        linux: &LinuxSide,
        guards: &mut Guards<'_>,
        (start, end): (u64, u64),
        errors: &mut Vec<String>,
        warnings: &mut Vec<String>,
    ) {
        self.started_at = Instant::now();
        let live_every = if self.tty { LIVE_TTY } else { LIVE_PIPE };
        let mut last_live = Instant::now();
        let max_period = self.plan.tasks.iter().map(|t| t.spec.period_ns).max().unwrap_or(0);
        let linger = Duration::from_nanos(max_period) + Duration::from_millis(500);
        let mut ticks = 0u64;
        loop {
            std::thread::sleep(TICK);
            ticks += 1;
            if ticks % SNAPSHOT_TICKS == 0 {
                live.set_cells(snapshot(cells, self.plan));
            }
            drain(&mut self.sinks);
            guards.check(start, errors);
            let now = mono_ns();
            if stop() && !self.incomplete {
                self.incomplete = true;
                linux.request_stop();
                for (c, _) in cells.iter_mut() {
                    c.request_stop();
                }
                guards.sched.end_now(now);
            }
            check_cells(cells, errors);
            self.check_tasks(&mut guards.watch, start, errors);
            if last_live.elapsed() >= live_every {
                last_live = Instant::now();
                self.live_lines =
                    print_live(self.region, self.specs, self.started_at.elapsed(), self.tty, self.live_lines);
            }
            let all_final = self.all_final();
            if (now >= end || self.incomplete) && all_final {
                break;
            }
            if now >= end.saturating_add(linger.as_nanos() as u64)
                || (self.incomplete && self.started_at.elapsed() > self.plan.duration + linger * 4)
            {
                warnings.push("some tasks did not end within their last period after the end of the run".into());
                break;
            }
        }
    }

    /// Reports, once each, a task that tripped its watchdog or took a corrupt input (a block that does
    /// not hold what a task can write is reported by the watch as scribbled, never shown).
    fn check_tasks(&mut self, watch: &mut RegionWatch<'_>, start: u64, errors: &mut Vec<String>) {
        for (_, s) in self.specs {
            let Ok(reading) = BlockReading::read(self.region, &s.name) else { continue };
            let Some(cnt) = watch.counters_ok(s, &reading, start, errors) else { continue };
            if cnt.corrupt > 0 && cnt.state != Some(TaskState::Tripped) && !self.reported_corrupt.contains(&s.name) {
                self.reported_corrupt.push(s.name.clone());
                self.interrupt_live();
                eprintln!("error: task {:?}: {}", s.name, cnt.message);
            }
            if cnt.state == Some(TaskState::Tripped) && !self.reported_trips.contains(&s.name) {
                self.reported_trips.push(s.name.clone());
                self.interrupt_live();
                eprintln!(
                    "task {:?} stopped: {}; its output holds its safe value, the other tasks go on",
                    s.name, cnt.message
                );
            }
        }
    }

    /// A message printed between live lines: a terminal's next live lines start afresh below it.
    fn interrupt_live(&mut self) {
        if self.tty {
            self.live_lines = 0;
        }
    }

    fn all_final(&self) -> bool {
        self.specs.iter().all(|(_, s)| {
            read_counters(self.region, &s.name).ok().and_then(|c| c.state).is_some_and(|st| st.is_final())
        })
    }

    /// The last live lines, once the cells have stopped (on a terminal, over the ones shown).
    pub fn last_live(&mut self) {
        if self.tty && self.live_lines > 0 {
            let shown = self.started_at.elapsed().min(self.plan.duration + super::START_MARGIN);
            print_live(self.region, self.specs, shown, self.tty, self.live_lines);
        }
    }
}

/// Reports, once each, a cell that ended other than done, tripped or stopped; the other cells go on.
fn check_cells(cells: &mut [(Cell, Option<Duration>)], errors: &mut Vec<String>) {
    for (c, _) in cells.iter_mut() {
        let st = c.status();
        if st.is_finished() && !matches!(st, CellStatus::Done(0) | CellStatus::Tripped { .. } | CellStatus::Stopped) {
            let msg = format!("cell {:?} ({}, CPU {}) {st}", c.name(), c.kind(), c.cpu());
            if !errors.contains(&msg) {
                eprintln!("error: {msg}; the other cells go on");
                errors.push(msg);
            }
        }
    }
}
