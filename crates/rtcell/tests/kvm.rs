//! kvm cells end to end: the built-in payloads booted by the monitor, through the cell interface.
//! CI has /dev/kvm: there these tests must run. Elsewhere they skip, saying why.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rtcell_cells::{Cell, CellKind, CellSpec, CellStatus, VmOptions, WorkloadSpec, control};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{RecvError, RegionLayout, RegionView, RingConfig};

/// Whether to run: always in CI; elsewhere only where KVM works.
fn kvm_or_skip() -> bool {
    let status = rtcell_kvm::kvm_status();
    if status.is_usable() {
        return true;
    }
    rtcell_testkit::skip(&status.explain());
    false
}

fn cell_cpu() -> usize {
    *rtcell_host::cpu::online_cpus().unwrap().last().unwrap()
}

fn region(cell: &str) -> Arc<SharedMemory> {
    let mut layout = RegionLayout::new();
    layout.page_aligned();
    let ring = RingConfig::for_frames(4096, 4);
    layout.ring("m2c", ring).unwrap().ring("c2m", ring).unwrap();
    control::add_to_layout(&mut layout, cell).unwrap();
    let shm = SharedMemory::create_anonymous("kvm-test", layout.size_bytes()).unwrap();
    layout.init(shm.words(), std::process::id()).unwrap();
    Arc::new(shm)
}

fn spec(name: &str, workload: WorkloadSpec, vm: VmOptions) -> CellSpec {
    CellSpec {
        name: name.into(),
        kind: CellKind::Kvm,
        cpu: cell_cpu(),
        priority: None,
        lock_memory: false,
        workload,
        vm,
    }
}

fn echo_spec(name: &str) -> CellSpec {
    spec(
        name,
        WorkloadSpec::Echo { rx: "m2c".into(), tx: "c2m".into(), max_frame: 4096, notify: false },
        VmOptions::default(),
    )
}

fn faults(name: &str, args: &str, vm: VmOptions) -> CellSpec {
    spec(name, WorkloadSpec::Payload { payload: "faults".into(), args: args.into(), guest_writes: vec![] }, vm)
}

/// Waits for the cell to finish on its own; returns its status.
fn finish(cell: &mut Cell, limit: Duration) -> CellStatus {
    let t0 = Instant::now();
    loop {
        let s = cell.status();
        if s.is_finished() || t0.elapsed() > limit {
            return s;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn round_trip(r: &RegionView<'_>, msg: &[u8]) -> Result<Vec<u8>, RecvError> {
    let mut tx = r.ring("m2c").unwrap().producer();
    let mut rx = r.ring("c2m").unwrap().consumer();
    tx.try_send(msg).unwrap();
    let mut buf = vec![0u8; 4096];
    let t0 = Instant::now();
    loop {
        match rx.try_recv(&mut buf) {
            Ok(n) => return Ok(buf[..n].to_vec()),
            Err(RecvError::Empty) if t0.elapsed() < Duration::from_secs(10) => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn echo_payload_boots_and_echoes_every_size_then_stops() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("vm");
    let mut cell = Cell::start(echo_spec("vm"), Arc::clone(&shm)).unwrap();
    let started = cell.wait_running(Duration::from_secs(10)).unwrap();
    assert!(started < Duration::from_secs(10));
    let r = RegionView::attach(shm.words()).unwrap();
    for size in [0usize, 1, 7, 8, 15, 16, 63, 64, 100, 128, 255, 256, 512, 1000, 1024, 2048, 4000, 4096] {
        let msg: Vec<u8> = (0..size).map(|i| (i * 31 + size) as u8).collect();
        assert_eq!(round_trip(&r, &msg).unwrap(), msg, "{size} bytes");
    }
    let exits = cell.vm_exits().expect("exit statistics");
    assert!(exits.contains_key("exits"), "{exits:?}");
    let report = cell.stop(Duration::from_secs(5));
    assert_eq!(report.status, CellStatus::Stopped);
    assert_eq!(report.handled, 18);
}

fn expect_fault(args: &str, vm: VmOptions, needles: &[&str]) {
    let name = "f";
    let shm = region(name);
    let mut cell = Cell::start(faults(name, args, vm), Arc::clone(&shm)).unwrap();
    let s = finish(&mut cell, Duration::from_secs(20));
    let text = s.to_string();
    for n in needles {
        assert!(text.contains(n), "{args}: expected {n:?} in {text:?}");
    }
    assert!(matches!(s, CellStatus::Faulted(_)), "{args}: {s:?}");
    assert!(printable(&text), "{args}: {text:?}");
    drop(cell);
}

#[test]
fn each_fault_gets_its_own_report() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    expect_fault("mode=ud", VmOptions::default(), &["invalid opcode", "RIP 0x"]);
    expect_fault("mode=ud", VmOptions { exception_handlers: false, ..VmOptions::default() }, &["triple fault"]);
    expect_fault("mode=oob", VmOptions::default(), &["outside its memory", "0x30000000"]);
    expect_fault("mode=ro", VmOptions::default(), &["page fault", "write of address 0x1", "protection violation"]);
    expect_fault("mode=panic", VmOptions::default(), &["panicked", "deliberate panic 42"]);
    expect_fault(
        "mode=spin",
        VmOptions { watchdog_ms: Some(200), ..VmOptions::default() },
        &["watchdog", "no heartbeat"],
    );
    // Garbage into a channel the guest may only read: stopped by the read-only mapping.
    expect_fault("mode=garbage\nring=m2c", VmOptions::default(), &["read-only channel", "m2c"]);
}

#[test]
fn garbage_written_into_a_writable_ring_is_reported_as_corrupt_by_the_host_side() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("g");
    let spec = spec(
        "g",
        WorkloadSpec::Payload {
            payload: "faults".into(),
            args: "mode=garbage\nring=c2m".into(),
            guest_writes: vec!["c2m".into()],
        },
        VmOptions::default(),
    );
    let mut cell = Cell::start(spec, Arc::clone(&shm)).unwrap();
    let s = finish(&mut cell, Duration::from_secs(20));
    assert!(matches!(s, CellStatus::Done(_) | CellStatus::Stopped), "{s:?}");
    let r = RegionView::attach(shm.words()).expect("the header was read-only to the guest");
    let mut rx = r.ring("c2m").unwrap().consumer();
    let mut buf = vec![0u8; 4096];
    assert!(matches!(rx.try_recv(&mut buf), Err(RecvError::Corrupt(_))));
}

fn threads() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_hundred_start_stop_cycles_leak_nothing() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    // Warm up once-only state (signal handler, TSC calibration) outside the count.
    let shm = region("cyc");
    Cell::start(echo_spec("cyc"), Arc::clone(&shm)).unwrap().stop(Duration::from_secs(5));
    let (f0, t0) = (fds(), threads());
    for i in 0..100 {
        let mut cell = Cell::start(echo_spec("cyc"), Arc::clone(&shm)).unwrap();
        cell.wait_running(Duration::from_secs(10)).unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        let report = cell.stop(Duration::from_secs(5));
        assert_eq!(report.status, CellStatus::Stopped, "cycle {i}");
        // The next cycle starts from a fresh control block.
        let mut layout = RegionLayout::new();
        layout.page_aligned();
        let ring = RingConfig::for_frames(4096, 4);
        layout.ring("m2c", ring).unwrap().ring("c2m", ring).unwrap();
        control::add_to_layout(&mut layout, "cyc").unwrap();
        layout.init(shm.words(), std::process::id()).unwrap();
    }
    assert_eq!(fds(), f0, "file descriptors leaked");
    assert_eq!(threads(), t0, "threads leaked");
}

#[test]
fn unknown_payloads_are_refused_before_anything_starts() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("n");
    let spec = spec(
        "n",
        WorkloadSpec::Payload { payload: "nosuch".into(), args: String::new(), guest_writes: vec![] },
        VmOptions::default(),
    );
    let err = Cell::start(spec, shm).err().unwrap().to_string();
    assert!(err.contains("no payload named \"nosuch\"") && err.contains("echo"), "{err}");
}

#[test]
fn without_kvm_the_other_cell_kinds_still_work() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = common::rtcell()
        .env(rtcell_kvm::KVM_DEVICE_ENV, "/nonexistent/kvm")
        .args(["bench", "loopback", "--iterations", "200", "--sizes", "0,64", "--no-baseline", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::text(&o));
    let doc = common::valid_results(&out);
    let warnings = doc["warnings"].to_string();
    assert!(warnings.contains("kvm cells skipped") && warnings.contains("does not exist"), "{warnings}");
    let cells: Vec<String> = common::series(&doc)
        .iter()
        .filter(|s| s["name"] == "loopback_rtt")
        .map(|s| s["labels"]["cell"].as_str().unwrap().to_string())
        .collect();
    assert!(cells.contains(&"thread".to_string()) && cells.contains(&"process".to_string()));
    // Asking for kvm explicitly is refused with the reason.
    let o = common::rtcell()
        .env(rtcell_kvm::KVM_DEVICE_ENV, "/nonexistent/kvm")
        .args(["bench", "loopback", "--cell", "kvm"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(common::text(&o).contains("does not exist"), "{}", common::text(&o));
}

#[test]
fn spin_payload_records_its_activation_lateness_in_a_histogram() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let mut layout = RegionLayout::new();
    layout.page_aligned();
    layout.raw("hist.s", rtcell_shm::histogram::bytes_for(1000)).unwrap();
    control::add_to_layout(&mut layout, "s").unwrap();
    let shm = SharedMemory::create_anonymous("kvm-test", layout.size_bytes()).unwrap();
    layout.init(shm.words(), std::process::id()).unwrap();
    let shm = Arc::new(shm);
    let spec = spec(
        "s",
        WorkloadSpec::Payload {
            payload: "spin".into(),
            args: "hist=hist.s\nperiod_ns=100000\nbucket_ns=1000\n".into(),
            guest_writes: vec!["hist.s".into()],
        },
        VmOptions::default(),
    );
    let mut cell = Cell::start(spec, Arc::clone(&shm)).unwrap();
    cell.wait_running(Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let report = cell.stop(Duration::from_secs(5));
    assert_eq!(report.status, CellStatus::Stopped);
    let r = RegionView::attach(shm.words()).unwrap();
    let h = rtcell_shm::histogram::HistogramReader::read(r.raw("hist.s").unwrap()).unwrap();
    // About 3,000 activations in 0.3 s at 10 kHz; the count is what the histogram and heartbeat agree on,
    // not a timing claim.
    assert!(h.total() > 100, "only {} activations recorded", h.total());
    assert!(cell_logs_ok(&report));
}

fn cell_logs_ok(report: &rtcell_cells::CellReport) -> bool {
    report.handled > 0 || report.heartbeat > 0
}

fn faults_writing(name: &str, args: &str, vm: VmOptions, writes: &[&str]) -> CellSpec {
    let guest_writes = writes.iter().map(|w| w.to_string()).collect();
    spec(name, WorkloadSpec::Payload { payload: "faults".into(), args: args.into(), guest_writes }, vm)
}

fn printable(s: &str) -> bool {
    !s.chars().any(|c| c.is_control())
}

#[test]
fn guest_text_is_capped_escaped_and_labelled_as_the_guests() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("t");
    let mut cell = Cell::start(faults("t", "mode=text", VmOptions::default()), Arc::clone(&shm)).unwrap();
    let s = finish(&mut cell, Duration::from_secs(20));
    let text = s.to_string();
    assert!(matches!(s, CellStatus::Faulted(_)), "{text}");
    assert!(printable(&text), "control characters reach the terminal: {text:?}");
    assert!(text.starts_with("faulted: payload panicked; the guest's message: \\x1b[2J"), "{text}");
    assert!(text.contains("\\0\\rCell \"evil\""), "{text}");
    assert!(text.contains("claimed 4294967295 bytes"), "{text}");
    let logs = cell.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(printable(&logs[0]) && logs[0].contains("\\x1b]0;owned\\x07"), "{logs:?}");
    assert!(logs[0].len() < 4096 + 200, "{} bytes", logs[0].len());
}

#[test]
fn a_log_storm_is_counted_and_reported_not_kept() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("st");
    let spec = faults("st", "mode=storm", VmOptions { watchdog_ms: None, ..VmOptions::default() });
    let mut cell = Cell::start(spec, Arc::clone(&shm)).unwrap();
    let s = finish(&mut cell, Duration::from_secs(60));
    assert_eq!(s, CellStatus::Done(0));
    let kept = cell.logs().len();
    let storm = cell.log_storm().expect("a log storm note");
    let suppressed: u64 = storm.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(kept as u64 + suppressed, 100_000, "{storm}");
    assert!(kept <= 1000, "{kept} lines kept");
    assert!(storm.starts_with("log storm:") && storm.contains("per second"), "{storm}");
}

#[test]
fn the_watchdog_judges_the_heartbeat_not_the_state_the_guest_claims() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    for (state, claim) in [("done", "claimed \"done\" (exit code 0)"), ("starting", "claimed \"starting\"")] {
        let shm = region("w");
        let vm = VmOptions { watchdog_ms: Some(200), ..VmOptions::default() };
        let mut cell = Cell::start(faults("w", &format!("mode=fake\nstate={state}"), vm), Arc::clone(&shm)).unwrap();
        // The bound is the test's patience, not a timing claim: the watchdog must act long before it.
        let s = finish(&mut cell, Duration::from_secs(20));
        let text = s.to_string();
        assert!(matches!(s, CellStatus::Faulted(_)), "{state}: {text}");
        assert!(text.contains("watchdog: no heartbeat") && text.contains(claim), "{state}: {text}");
    }
}

#[test]
fn direction_nx_and_the_stack_guard_hold_for_every_payload() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let cases: [(&str, &[&str], &[&str]); 6] = [
        ("mode=wchan\nchan=m2c", &[], &["read-only channel \"m2c\""]),
        ("mode=wchan\nchan=c2m", &["m2c"], &["read-only channel \"c2m\""]),
        ("mode=header", &["c2m"], &["read-only region header"]),
        ("mode=xregion\nchan=c2m", &["c2m"], &["instruction fetch", "not executable", "channel region"]),
        ("mode=xdata", &[], &["instruction fetch", "not executable"]),
        ("mode=stack", &[], &["page fault", "stack overflow"]),
    ];
    for (args, writes, needles) in cases {
        let shm = region("f");
        let mut cell = Cell::start(faults_writing("f", args, VmOptions::default(), writes), Arc::clone(&shm)).unwrap();
        let s = finish(&mut cell, Duration::from_secs(20));
        let text = s.to_string();
        assert!(matches!(s, CellStatus::Faulted(_)), "{args}: {text}");
        for n in needles {
            assert!(text.contains(n), "{args}: expected {n:?} in {text:?}");
        }
    }
}

/// Attacks on the monitor's pages, mappings and stubs: each ends in the monitor's fault report, in
/// printable text, without the payload going on.
#[test]
fn hostile_accesses_to_monitor_pages_and_unbacked_addresses_end_in_the_monitors_report() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let cases: &[(&str, &[&str])] = &[
        // Page tables, GDT and the stubs are supervisor-only: no remapping from ring 3.
        ("op=w\naddr=0x8000", &["page fault", "write of address 0x8000", "protection violation"]),
        ("op=w\naddr=0xb000", &["page fault", "write of address 0xb000", "protection violation"]),
        ("op=w\naddr=0x3000", &["page fault", "write of address 0x3000", "protection violation"]),
        ("op=r\naddr=0x5000", &["page fault", "read of address 0x5000"]),
        ("op=x\naddr=0x5000", &["page fault", "instruction fetch of address 0x5000"]),
        // No execution from the stack, the message page, unbacked addresses or the hypercall window.
        ("op=x\naddr=0x1ff000", &["instruction fetch of address 0x1ff000", "not executable"]),
        ("op=x\naddr=0x2000", &["instruction fetch of address 0x2000", "not executable"]),
        ("op=x\naddr=0x30000000", &["instruction fetch of address 0x30000000", "not executable"]),
        ("op=x\naddr=0x3f000000", &["instruction fetch of address 0x3f000000", "not executable"]),
        // Past the region's end (inside its last 2 MiB page), past the mapped GiBs, non-canonical.
        ("op=r\naddr=0x401f0000", &["read outside its memory", "0x401f0000"]),
        ("op=w\naddr=0x80000000", &["page fault", "page not mapped"]),
        ("op=r\naddr=0x800000000000", &["general protection"]),
    ];
    for (args, needles) in cases {
        expect_fault(&format!("mode=poke\n{args}"), VmOptions::default(), needles);
    }
    // Code pages are read-only: no code written at run time, so NX cannot be sidestepped through them.
    expect_fault("mode=xtext", VmOptions::default(), &["page fault", "write of address 0x10", "protection violation"]);
    // An exception with a garbage stack pointer: the stubs run on their own ring-0 stack.
    expect_fault("mode=badstack", VmOptions::default(), &["invalid opcode", "RSP 0xdead000000000000"]);
    // Sleeping hypercalls without a heartbeat: the watchdog still acts.
    expect_fault("mode=sleep", VmOptions { watchdog_ms: Some(200), ..VmOptions::default() }, &["watchdog"]);
}

/// A payload that beats its heartbeat and does nothing else is not stopped by the watchdog (it shows
/// progress), but a stop request ends it: bounded, and reported as not stopping on request.
#[test]
fn a_payload_that_only_beats_is_still_stopped_on_request() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("b");
    let vm = VmOptions { watchdog_ms: Some(200), ..VmOptions::default() };
    let mut cell = Cell::start(faults("b", "mode=beat\ncell=b", vm), Arc::clone(&shm)).unwrap();
    cell.wait_running(Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(cell.status(), CellStatus::Running);
    let report = cell.stop(Duration::from_secs(1));
    let text = report.status.to_string();
    assert!(text.contains("did not stop within") && text.contains("vCPU stopped"), "{text}");
}

/// The exception-report hypercall made by the payload itself (ring 3), not by the monitor's ring-0
/// stubs, is a forgery: it must not be reported as an exception the monitor saw.
#[test]
fn a_forged_exception_report_is_not_the_monitors_verdict() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("fg");
    let mut cell = Cell::start(faults("fg", "mode=forge", VmOptions::default()), shm).unwrap();
    let s = finish(&mut cell, Duration::from_secs(20));
    let text = s.to_string();
    assert!(matches!(s, CellStatus::Faulted(_)), "{text}");
    assert!(!text.contains("stack overflow") && !text.starts_with("faulted: page fault"), "{text}");
    assert!(text.contains("forged"), "{text}");
}

/// Guest RAM never covers the hypercall window: with RAM up to it, a hypercall would be an ordinary
/// store into RAM, and the payload's done, log and panic would never reach the monitor.
#[test]
fn the_largest_ram_still_leaves_the_hypercall_window_unbacked() {
    let _serial = common::serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("big");
    let vm = VmOptions { ram_mib: 1024, ..VmOptions::default() };
    match Cell::start(faults("big", "mode=done\ncode=3", vm), shm) {
        // Refused before anything starts, saying why.
        Err(e) => assert!(e.to_string().contains("hypercall"), "{e}"),
        Ok(mut cell) => {
            let s = finish(&mut cell, Duration::from_secs(20));
            assert_eq!(s, CellStatus::Done(3), "the payload's done hypercall was lost: {s}");
        }
    }
}
