//! Thread and process cells through the library, with the real `rtcell` binary as the process cell.

use std::sync::Arc;
use std::time::Duration;

use rtcell_cells::{Cell, CellKind, CellSpec, CellStatus, WorkloadSpec, control, set_cell_executable};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{RecvError, RegionLayout, RegionView, RingConfig};

fn region(cell: &str) -> Arc<SharedMemory> {
    let mut layout = RegionLayout::new();
    let ring = RingConfig::for_frames(4096, 4);
    layout.ring("m2c", ring).unwrap().ring("c2m", ring).unwrap();
    control::add_to_layout(&mut layout, cell).unwrap();
    let shm = SharedMemory::create_anonymous("test", layout.size_bytes()).unwrap();
    layout.init(shm.words(), std::process::id()).unwrap();
    Arc::new(shm)
}

fn spec(name: &str, kind: CellKind) -> CellSpec {
    CellSpec {
        name: name.into(),
        kind,
        cpu: *rtcell_host::cpu::online_cpus().unwrap().last().unwrap(),
        priority: None,
        lock_memory: false,
        workload: WorkloadSpec::Echo { rx: "m2c".into(), tx: "c2m".into(), max_frame: 4096, notify: false },
        vm: Default::default(),
    }
}

fn echo_once(shm: &SharedMemory, msg: &[u8]) -> Vec<u8> {
    let r = RegionView::attach(shm.words()).unwrap();
    let mut tx = r.ring("m2c").unwrap().producer();
    let mut rx = r.ring("c2m").unwrap().consumer();
    tx.try_send(msg).unwrap();
    let mut buf = vec![0u8; 4096];
    let t0 = std::time::Instant::now();
    loop {
        match rx.try_recv(&mut buf) {
            Ok(n) => return buf[..n].to_vec(),
            Err(RecvError::Empty) if t0.elapsed() < Duration::from_secs(10) => std::thread::yield_now(),
            Err(e) => panic!("no echo: {e:?}"),
        }
    }
}

/// These tests run cells on the cell CPU and count this process's file descriptors: one at a time (the
/// cell CPU's lock also serialises the tests of this binary).
fn serial() -> rtcell_testkit::CellCpuGuard {
    rtcell_testkit::cell_cpu()
}

/// This process's open memfds and pipes: what a cell takes (its region and the child's pipes). Other
/// descriptors are left out: tests of this binary waiting for the cell CPU's lock hold its file open.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_str().is_some_and(|t| t.starts_with("/memfd:") || t.starts_with("pipe:")))
        .count()
}

#[test]
fn both_cell_kinds_echo_and_stop() {
    let _serial = serial();
    set_cell_executable(env!("CARGO_BIN_EXE_rtcell").into());
    for kind in [CellKind::Thread, CellKind::Process] {
        let shm = region("c");
        let mut cell = Cell::start(spec("c", kind), Arc::clone(&shm)).unwrap();
        cell.wait_running(Duration::from_secs(10)).unwrap();
        assert_eq!(echo_once(&shm, b"hello cell"), b"hello cell");
        assert_eq!(echo_once(&shm, b""), b"");
        let report = cell.stop(Duration::from_secs(5));
        assert_eq!(report.status, CellStatus::Stopped, "{kind}");
        assert_eq!(report.handled, 2);
    }
}

#[test]
fn a_killed_process_cell_is_reported_with_its_signal_and_leaves_nothing() {
    let _serial = serial();
    set_cell_executable(env!("CARGO_BIN_EXE_rtcell").into());
    let fds_before = open_fds();
    {
        let shm = region("victim");
        let mut cell = Cell::start(spec("victim", CellKind::Process), Arc::clone(&shm)).unwrap();
        cell.wait_running(Duration::from_secs(10)).unwrap();
        let pid = cell.pid().unwrap();
        // SAFETY: killing the child we just started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let t0 = std::time::Instant::now();
        let status = loop {
            let s = cell.status();
            if s.is_finished() || t0.elapsed() > Duration::from_secs(10) {
                break s;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(status, CellStatus::Killed { signal: 9, name: "SIGKILL".into() });
        assert!(status.to_string().contains("SIGKILL"));
        let report = cell.stop(Duration::from_secs(1));
        assert!(matches!(report.status, CellStatus::Killed { .. }));
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists() || is_zombie_free(pid));
    }
    // The region's memfd and the child's pipes are all closed again.
    assert_eq!(open_fds(), fds_before);
}

fn is_zombie_free(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| !s.contains(") Z "))
}

#[test]
fn a_panicking_workload_is_reported_as_faulted() {
    let _serial = serial();
    // A region without the echo channels: the workload fails to attach and reports why.
    let mut layout = RegionLayout::new();
    control::add_to_layout(&mut layout, "lonely").unwrap();
    let shm = SharedMemory::create_anonymous("test", layout.size_bytes()).unwrap();
    layout.init(shm.words(), std::process::id()).unwrap();
    let shm = Arc::new(shm);
    let mut cell = Cell::start(spec("lonely", CellKind::Thread), Arc::clone(&shm)).unwrap();
    let err = cell.wait_running(Duration::from_secs(10)).unwrap_err().to_string();
    assert!(err.contains("faulted") && err.contains("m2c"), "{err}");
}

#[test]
fn a_stale_named_region_is_detected_and_replaced() {
    let _serial = serial();
    let name = format!("test-stale-{}", std::process::id());
    // A region whose creator PID is not running (PID 0 never is).
    let mut layout = RegionLayout::new();
    layout.signal("s", 8).unwrap();
    {
        let (shm, stale) = SharedMemory::create_named(&name, layout.size_bytes()).unwrap();
        assert_eq!(stale, None);
        layout.init(shm.words(), 0x7fff_fff0).unwrap();
        std::mem::forget(shm); // as if the run was killed: the file stays
    }
    assert!(SharedMemory::stale_named().iter().any(|(n, _)| *n == name));
    let (shm, stale) = SharedMemory::create_named(&name, layout.size_bytes()).unwrap();
    assert_eq!(stale, Some(0x7fff_fff0));
    layout.init(shm.words(), std::process::id()).unwrap();
    // A live creator is not replaced.
    let err = SharedMemory::create_named(&name, layout.size_bytes()).err().unwrap();
    assert!(err.to_string().contains("in use"), "{err}");
    drop(shm);
    assert!(!std::path::Path::new(&format!("/dev/shm/rtcell.{name}")).exists());
}
