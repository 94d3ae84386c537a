//! The executive on real threads: cycle counts, the two missed-cycle policies, the watchdog and the
//! safe value. Counts and states are asserted, never timings.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rtcell_control::offload::Precision;
use rtcell_host::clock::mono_ns;
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{RegionLayout, RegionView};
use rtcell_tasks::{Inject, MissedPolicy, Schedule, TaskSpec, TaskState, TaskWork, Watchdog, read_counters, run_set};

fn spin_task(name: &str, period_ms: u64, us: f64, inject: Option<Inject>, missed: MissedPolicy) -> TaskSpec {
    let cpu = *rtcell_host::cpu::online_cpus().unwrap().last().unwrap();
    TaskSpec {
        name: name.into(),
        period_ns: period_ms * 1_000_000,
        offset_ns: 0,
        deadline_ns: period_ms * 1_000_000,
        priority: 10,
        cpu,
        missed,
        watchdog: None,
        work: TaskWork::Spin { us, inject },
        send: None,
        recv: None,
        frame_bytes: 24,
        output: None,
        safe_value: Vec::new(),
        tsc_khz: 0,
        params: vec![],
        on_corrupt: Default::default(),
    }
}

/// Runs `tasks` for `dur` and returns the region's memory for reading the results.
fn run(tasks: &[TaskSpec], signals: &[&str], dur: Duration) -> SharedMemory {
    run_with_rings(tasks, signals, &[], dur)
}

/// As [`run`], with rings of 32-byte frames (`name`, capacity in frames).
fn run_with_rings(tasks: &[TaskSpec], signals: &[&str], rings: &[(&str, u32)], dur: Duration) -> SharedMemory {
    // The tests pin their tasks to the cell CPU: one task set at a time (across test binaries too), or one
    // test's injected long cycle preempts the other's tasks and changes their counts.
    let _one = rtcell_testkit::cell_cpu();
    let mut l = RegionLayout::new();
    rtcell_tasks::add_schedule_to_layout(&mut l).unwrap();
    for t in tasks {
        rtcell_tasks::add_task_to_layout(&mut l, &t.name).unwrap();
    }
    for s in signals {
        l.signal(s, 8).unwrap();
    }
    for (name, frames) in rings {
        l.ring(name, rtcell_shm::RingConfig::for_frames(32, *frames)).unwrap();
    }
    let shm = SharedMemory::create_anonymous("tasks-test", l.size_bytes()).unwrap();
    l.init(shm.words(), std::process::id()).unwrap();
    let region = RegionView::attach(shm.words()).unwrap();
    let stop = AtomicBool::new(false);
    let sched = Schedule::attach(&region).unwrap();
    let mut on_ready = |_: &[String]| {
        let start = mono_ns() + 20_000_000;
        sched.go(start, start + dur.as_nanos() as u64);
    };
    let out = run_set(tasks, &region, &stop, &mut on_ready, &|| {});
    assert!(out.faulted.is_empty(), "{:?}", out.faulted);
    shm
}

#[test]
fn skip_and_run_at_once_account_for_every_release() {
    // Cycle 5 takes 25 ms in a 10 ms period.
    let inject = Some(Inject { at_cycle: 5, cycles: 1, us: 25_000.0 });
    let tasks = [
        spin_task("skip", 10, 100.0, inject, MissedPolicy::Skip),
        spin_task("now", 10, 100.0, inject, MissedPolicy::RunAtOnce),
    ];
    // Two tasks on one CPU would preempt each other's injected cycle: run them one at a time.
    for t in tasks {
        let shm = run(std::slice::from_ref(&t), &[], Duration::from_millis(300));
        let region = RegionView::attach(shm.words()).unwrap();
        let c = read_counters(&region, &t.name).unwrap();
        assert_eq!(c.state, Some(TaskState::Done));
        assert!(c.overruns >= 1, "{c:?}");
        match t.missed {
            MissedPolicy::Skip => {
                assert!(c.skipped >= 2, "the 25 ms cycle passes two releases: {c:?}");
                assert!((c.cycles + c.skipped).abs_diff(30) <= 1, "{c:?}");
            }
            MissedPolicy::RunAtOnce => {
                assert_eq!(c.skipped, 0, "{c:?}");
                assert!(c.cycles.abs_diff(30) <= 1, "every release runs: {c:?}");
                assert!(c.longest >= 2, "the missed release runs late too: {c:?}");
            }
        }
    }
}

#[test]
fn the_watchdog_trips_stops_the_task_and_writes_its_safe_value() {
    let mut t = spin_task("wd", 5, 50.0, Some(Inject { at_cycle: 3, cycles: 100, us: 6_000.0 }), MissedPolicy::Skip);
    t.watchdog = Some(Watchdog { time_ns: 5_000_000, sensitivity: 2 });
    t.output = Some("out".into());
    t.safe_value = vec![-7.5];
    let shm = run(&[t], &["out"], Duration::from_millis(500));
    let region = RegionView::attach(shm.words()).unwrap();
    let c = read_counters(&region, "wd").unwrap();
    assert_eq!(c.state, Some(TaskState::Tripped), "{c:?}");
    assert_eq!(c.trip_cycle, Some(4), "second consecutive cycle over 5 ms: {c:?}");
    assert_eq!(c.cycles, 5);
    let sig = region.signal("out").unwrap();
    let mut v = [0.0];
    assert_eq!(rtcell_tasks::work::read_f64s(&sig, &mut v).unwrap(), 1);
    assert_eq!(v[0], -7.5);

    // A writer stopped mid-update (odd sequence) reads as Busy, which readers retry, not as a bad value.
    let seq = sig.seq_word().fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    assert_eq!(rtcell_tasks::work::try_read_f64s(&sig, &mut v), Err(rtcell_shm::SignalError::Busy));
    sig.seq_word().store(seq, std::sync::atomic::Ordering::Release);
    assert_eq!(rtcell_tasks::work::try_read_f64s(&sig, &mut v), Ok(1));
    assert_eq!(v[0], -7.5);
}

#[test]
fn watchdog_judgement_follows_codesys() {
    let wd = Watchdog { time_ns: 1000, sensitivity: 3 };
    assert_eq!(wd.judge(0, 1000), (0, None), "at the time is not over");
    let (n, v) = wd.judge(0, 1001);
    assert_eq!((n, v.is_none()), (1, true));
    let (n, v) = wd.judge(1, 2000);
    assert_eq!((n, v.is_none()), (2, true));
    let (n, v) = wd.judge(2, 1500);
    assert!(n == 3 && v.unwrap().contains("3 consecutive"));
    assert_eq!(wd.judge(2, 10).0, 0, "a good cycle resets the count");
    let (_, v) = wd.judge(0, 3001);
    assert!(v.unwrap().contains("time x sensitivity"), "one cycle above time x sensitivity trips at once");
}

#[test]
fn a_master_whose_cell_never_answers_keeps_its_own_schedule() {
    // Nobody serves the request ring: every reply is missing. The master stops waiting before its deadline,
    // so the missing replies are counted against the offload, not as the master's own overruns.
    let mut t = spin_task("master", 10, 0.0, None, MissedPolicy::Skip);
    t.work = TaskWork::Master { request: "req".into(), reply: "rep".into(), precision: Precision::F64 };
    let shm = run_with_rings(std::slice::from_ref(&t), &[], &[("req", 64), ("rep", 64)], Duration::from_millis(300));
    let region = RegionView::attach(shm.words()).unwrap();
    let c = read_counters(&region, "master").unwrap();
    assert_eq!(c.state, Some(TaskState::Done));
    assert_eq!(c.cycles + c.skipped, 30, "{c:?}");
    assert_eq!(c.sent, c.cycles, "{c:?}");
    assert_eq!(c.recv_lost, c.cycles, "every reply is missing: {c:?}");
    // Waiting up to the deadline itself would make every cycle an overrun; a rare host preemption may
    // still make one.
    assert!(c.overruns * 2 < c.cycles, "the master overran waiting for replies: {c:?}");
}
