//! kvm cells running payloads written in C: built with the SDK's payload kit (runtime archive, linker
//! script, make recipe) and the C API header, loaded from a file, driven over COM channels from the host.
//! CI has /dev/kvm, gcc and make: there these tests must run. Elsewhere they skip, saying why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rtcell_cells::{Cell, CellError, CellKind, CellSpec, CellStatus, VmOptions, WorkloadSpec, control};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{ComConfig, ComError, ComView, Freshness, RegionLayout, RegionView, SignalDef};

/// Signal the host sends (channel `m2c`) and the C step echoes back as signal `ECHO` (channel `c2m`).
const PING: u16 = 1;
const ECHO: u16 = 2;
/// Step timing statistics of the jitter payload (channel `c2m`).
const STATS: u16 = 3;

/// The echo payload: a step that answers every new value of signal 1 on signal 2, and counts its steps
/// and echoes (read by nothing but the debugger; they keep the data and bss sections in use).
const ECHO_C: &str = r#"
#include <rtcell.h>

static rtcell_com *rx;            /* m2c, through an explicit handle: freshness */
static uint32_t steps, echoes;
uint32_t initialised = 0;         /* .bss */
static uint32_t magic = 0x5a5a;   /* .data */
static const char name[] = "echo"; /* .rodata */

void echo_init(void)
{
    const char *channels[] = { "m2c" };
    if (rtcell_com_open(rtcell_cell_region(), channels, 1, &rx) != E_OK)
        rx = 0;
    initialised = magic + (uint32_t)name[0];
}

void echo_step(void)
{
    uint32_t v = 0;
    size_t len = 0;
    uint8_t fresh = RTCELL_FRESH_NEVER;
    steps++;
    if (rx == 0 || initialised != 0x5a5a + 'e')
        return;
    if (rtcell_com_receive_signal(rx, 1, &v, sizeof v, &len, &fresh) == E_OK && fresh == RTCELL_FRESH_NEW
        && len == sizeof v) {
        if (Com_SendSignal(2, &v) == E_OK)
            echoes++;
    }
}
"#;

/// A step that writes through a null pointer on its third call.
const NULL_C: &str = r#"
#include <rtcell.h>

static int calls;
int *volatile target = 0;

void crash_step(void)
{
    if (++calls == 3)
        *target = 42;
}
"#;

/// A step that measures the TSC ticks between its own calls and publishes (count, min, max, sum) as
/// signal 3 after every call.
const JITTER_C: &str = r#"
#include <rtcell.h>

static uint64_t last, stats[4] = { 0, ~0ull, 0, 0 };

void jitter_step(void)
{
    uint64_t now = __builtin_ia32_rdtsc();
    if (last != 0) {
        uint64_t d = now - last;
        stats[0]++;
        if (d < stats[1])
            stats[1] = d;
        if (d > stats[2])
            stats[2] = d;
        stats[3] += d;
    }
    last = now;
    Com_SendSignal(3, stats);
}
"#;

/// kvm cells busy-poll the cell CPU: one at a time.
fn serial() -> rtcell_testkit::CellCpuGuard {
    rtcell_testkit::cell_cpu()
}

/// Whether to run the tests that build C payloads: always in CI; elsewhere only with gcc and make.
fn toolchain_or_skip() -> bool {
    let ok = |cmd: &str| Command::new(cmd).arg("--version").output().is_ok_and(|o| o.status.success());
    let missing: Vec<&str> = ["gcc", "make"].into_iter().filter(|c| !ok(c)).collect();
    if missing.is_empty() {
        return true;
    }
    rtcell_testkit::skip(&format!("{missing:?} not found (apt-get install build-essential)"));
    false
}

/// Whether to run the tests that boot payloads: always in CI; elsewhere only where KVM works.
fn kvm_or_skip() -> bool {
    if !toolchain_or_skip() {
        return false;
    }
    let status = rtcell_kvm::kvm_status();
    if status.is_usable() {
        return true;
    }
    rtcell_testkit::skip(&status.explain());
    false
}

/// A directory of this test binary's own under the build's temporary directory, emptied once.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-payload");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// The SDK prefix: the payload kit as `rtcell sdk payload-kit` writes it, and the C API header.
fn sdk() -> &'static Path {
    static SDK: OnceLock<PathBuf> = OnceLock::new();
    SDK.get_or_init(|| {
        let prefix = scratch().join("sdk");
        let written = rtcell_kvm::sdk::write_payload_kit(&prefix).unwrap();
        assert_eq!(written.len(), 4, "{written:?}");
        std::fs::create_dir_all(prefix.join("include")).unwrap();
        let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/rtcell.h");
        std::fs::copy(&header, prefix.join("include/rtcell.h")).unwrap_or_else(|e| panic!("{}: {e}", header.display()));
        prefix
    })
}

/// Runs the SDK recipe on `sources` (file name, text) with `vars`; returns make's output and whether it
/// succeeded.
fn make(name: &str, sources: &[(&str, &str)], vars: &[&str]) -> (bool, String, PathBuf) {
    let dir = scratch().join(name);
    let src = dir.join("src");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&src).unwrap();
    for (file, text) in sources {
        std::fs::write(src.join(file), text).unwrap();
    }
    let out = dir.join(format!("{name}.elf"));
    let o = Command::new("make")
        .arg("-f")
        .arg(sdk().join("share/rtcell/payload.mk"))
        .arg(format!("SRC={}", src.display()))
        .arg(format!("OUT={}", out.display()))
        .args(vars)
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text, out)
}

/// Builds a payload; panics with make's output if that fails.
fn build(name: &str, sources: &[(&str, &str)], vars: &[&str]) -> PathBuf {
    let (ok, text, out) = make(name, sources, vars);
    assert!(ok, "building {name} failed:\n{text}");
    out
}

fn echo_payload() -> &'static Path {
    static ELF: OnceLock<PathBuf> = OnceLock::new();
    ELF.get_or_init(|| build("echo", &[("echo.c", ECHO_C)], &["INIT=echo_init", "STEP=echo_step"]))
}

fn cell_cpu() -> usize {
    *rtcell_host::cpu::online_cpus().unwrap().last().unwrap()
}

fn signal(id: u16) -> SignalDef {
    SignalDef { id, max_len: 4, dynamic: false, group: None }
}

/// Region: COM channels `m2c` (signal 1) and `c2m` (signals 2 and 3), and the cell's control block.
fn region(cell: &str) -> Arc<SharedMemory> {
    let mut layout = RegionLayout::new();
    layout.page_aligned();
    layout.com("m2c", ComConfig { signals: vec![signal(PING)], groups: vec![] }).unwrap();
    let stats = SignalDef { id: STATS, max_len: 32, dynamic: false, group: None };
    layout.com("c2m", ComConfig { signals: vec![signal(ECHO), stats], groups: vec![] }).unwrap();
    control::add_to_layout(&mut layout, cell).unwrap();
    let shm = SharedMemory::create_anonymous("c-payload-test", layout.size_bytes()).unwrap();
    layout.init(shm.words(), std::process::id()).unwrap();
    Arc::new(shm)
}

fn spec(name: &str, payload: &Path, args: &str) -> CellSpec {
    CellSpec {
        name: name.into(),
        kind: CellKind::Kvm,
        cpu: cell_cpu(),
        priority: None,
        lock_memory: false,
        workload: WorkloadSpec::Payload {
            payload: payload.display().to_string(),
            args: args.into(),
            guest_writes: vec!["c2m".into()],
        },
        vm: VmOptions::default(),
    }
}

/// Waits for the cell to finish on its own (up to `limit`); returns its status.
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

/// Sends `n` values on signal 1 and waits for each to come back on signal 2; returns the round trips.
fn drive(shm: &SharedMemory, n: u32) -> Vec<Duration> {
    let region = RegionView::attach(shm.words()).unwrap();
    let (m2c, c2m): (ComView<'_>, ComView<'_>) = (region.com("m2c").unwrap(), region.com("c2m").unwrap());
    let mut seen = 0u64;
    let mut rtts = Vec::with_capacity(n as usize);
    for v in 1..=n {
        let t0 = Instant::now();
        m2c.send_signal(PING, &v.to_le_bytes()).unwrap();
        let mut buf = [0u8; 4];
        loop {
            // Busy: the guest's vCPU was stopped by the host mid-write on every retry; read again.
            let (len, fresh) = match c2m.receive_signal(ECHO, &mut buf, &mut seen) {
                Ok(read) => read,
                Err(ComError::Busy) => (0, Freshness::Old),
                Err(e) => panic!("echo of value {v}: {e:?}"),
            };
            if fresh == Freshness::New {
                assert_eq!(len, 4);
                let got = u32::from_le_bytes(buf);
                assert_eq!(got, v, "echo of value {v}");
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "no echo of value {v} within 5 s");
            std::hint::spin_loop();
        }
        rtts.push(t0.elapsed());
    }
    rtts
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Runs the echo payload with `args`, drives `n` values, checks the step count over `hold`, stops it.
/// Returns (round trips sorted, steps counted during `hold`).
fn run_echo(name: &str, args: &str, n: u32, hold: Duration) -> (Vec<Duration>, u64) {
    let shm = region(name);
    let mut cell = Cell::start(spec(name, echo_payload(), args), Arc::clone(&shm)).unwrap();
    cell.wait_running(Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}; logs: {:?}", cell.logs()));
    let mut rtts = drive(&shm, n);
    rtts.sort();
    let (_, before) = cell.progress();
    std::thread::sleep(hold);
    let (_, after) = cell.progress();
    let report = cell.stop(Duration::from_secs(5));
    assert_eq!(report.status, CellStatus::Stopped, "{report:?}");
    assert!(report.handled >= after, "{report:?}");
    (rtts, after - before)
}

#[test]
fn a_c_step_echoes_com_signals_back_to_back() {
    let _serial = serial();
    if !kvm_or_skip() {
        return;
    }
    let (rtts, steps) = run_echo("c-echo", "com=m2c,c2m\nperiod_ns=0\n", 2000, Duration::from_millis(200));
    eprintln!(
        "back to back: echo round trip median {:?}, p99 {:?}, max {:?}; {steps} steps in 200 ms",
        percentile(&rtts, 0.5),
        percentile(&rtts, 0.99),
        rtts[rtts.len() - 1]
    );
    assert!(steps > 10_000, "only {steps} steps in 200 ms back to back");
}

#[test]
fn a_c_step_runs_on_its_period() {
    let _serial = serial();
    if !kvm_or_skip() {
        return;
    }
    // Every COM channel (com= empty), 100 µs period.
    let period = Duration::from_micros(100);
    let hold = Duration::from_millis(500);
    let (rtts, steps) = run_echo("c-periodic", "period_ns=100000\n", 200, hold);
    let expected = hold.as_nanos() as f64 / period.as_nanos() as f64;
    eprintln!(
        "period 100 µs: {steps} steps in {hold:?} (expected {expected:.0}); echo round trip median {:?}, max {:?}",
        percentile(&rtts, 0.5),
        rtts[rtts.len() - 1]
    );
    // Never faster than the period (a correctness bound). How much slower is the host's business (a
    // nested machine under load can take most of the hold from the cell CPU): the figures above say it,
    // the test only requires that the task kept stepping.
    let ratio = steps as f64 / expected;
    assert!(ratio < 1.25, "{steps} steps in {hold:?} at a 100 µs period: faster than the period");
    assert!(steps >= 10, "only {steps} steps in {hold:?}");
}

#[test]
fn the_step_period_holds_on_the_guest_tsc() {
    let _serial = serial();
    if !kvm_or_skip() {
        return;
    }
    let elf = build("jitter", &[("jitter.c", JITTER_C)], &["STEP=jitter_step"]);
    let khz = rtcell_host::tsc::TscClock::calibrate().unwrap().khz();
    rtcell_cells::set_tsc_khz(khz);
    let period_ns = 50_000u64;
    let shm = region("c-jitter");
    let mut cell = Cell::start(spec("c-jitter", &elf, &format!("period_ns={period_ns}\n")), Arc::clone(&shm)).unwrap();
    cell.wait_running(Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let report = cell.stop(Duration::from_secs(5));
    assert_eq!(report.status, CellStatus::Stopped, "{report:?}");
    let region = RegionView::attach(shm.words()).unwrap();
    let mut buf = [0u8; 32];
    let (len, _) = region.com("c2m").unwrap().receive_signal(STATS, &mut buf, &mut 0).unwrap();
    assert_eq!(len, 32);
    let w = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
    let ns = |ticks: u64| ticks as f64 * 1e6 / khz as f64;
    let (n, min, max, mean) = (w(0), ns(w(1)), ns(w(2)), ns(w(3)) / w(0).max(1) as f64);
    eprintln!(
        "period {period_ns} ns on the guest TSC ({khz} kHz): {n} intervals, mean {mean:.1} ns, min {min:.0} ns, max {max:.0} ns"
    );
    // Host interruptions (the cell CPU is shared here) skip releases, but the count cannot fall far short.
    assert!(n > 5_000, "{n} steps in 1 s at 50 µs");
    // The release grid is absolute: never more steps than releases in the time they spanned (give or
    // take the host's and the guest's TSC calibrations), however late some were.
    let releases = ns(w(3)) / period_ns as f64;
    assert!(n as f64 <= releases * 1.005 + 1.0, "{n} steps over {releases:.1} releases");
    assert!(min > 0.0 && max >= mean, "{min} {max}");
}

#[test]
fn a_null_pointer_write_in_the_c_step_is_a_fault_of_the_cell() {
    let _serial = serial();
    if !kvm_or_skip() {
        return;
    }
    let elf = build("crash", &[("crash.c", NULL_C)], &["STEP=crash_step"]);
    let shm = region("c-crash");
    let mut cell = Cell::start(spec("c-crash", &elf, "period_ns=1000000\n"), Arc::clone(&shm)).unwrap();
    let status = finish(&mut cell, Duration::from_secs(10));
    let CellStatus::Faulted(why) = &status else { panic!("expected a fault, got {status:?}") };
    assert!(why.contains("page fault") && why.contains("address 0x0"), "{why}");
    let report = cell.stop(Duration::from_secs(5));
    assert!(matches!(report.status, CellStatus::Faulted(_)), "{report:?}");
    assert_eq!(report.name, "c-crash");
}

#[test]
fn a_com_channel_the_region_lacks_ends_the_cell_before_it_runs() {
    let _serial = serial();
    if !kvm_or_skip() {
        return;
    }
    let shm = region("c-nochan");
    let mut cell = Cell::start(spec("c-nochan", echo_payload(), "com=m2c, nosuch\n"), Arc::clone(&shm)).unwrap();
    let status = finish(&mut cell, Duration::from_secs(10));
    let CellStatus::Faulted(why) = &status else { panic!("expected a fault, got {status:?}") };
    assert!(why.contains("attaching the C API to m2c, nosuch"), "{why}");
    assert_eq!(cell.progress().1, 0, "no step ran");
    let report = cell.stop(Duration::from_secs(5));
    assert!(matches!(report.status, CellStatus::Faulted(_)), "{report:?}");
}

/// A copy of the echo payload with `patch` applied, written next to it as `name`.
fn patched(name: &str, patch: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut f = std::fs::read(echo_payload()).unwrap();
    patch(&mut f);
    let path = scratch().join(name);
    std::fs::write(&path, f).unwrap();
    path
}

fn u64_at(f: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(f[off..off + 8].try_into().unwrap())
}

/// File offset of the program header of the first PT_LOAD segment.
fn first_load(f: &[u8]) -> usize {
    let phoff = u64_at(f, 32) as usize;
    (0..u16::from_le_bytes([f[56], f[57]]) as usize)
        .map(|i| phoff + i * 56)
        .find(|&ph| u32::from_le_bytes(f[ph..ph + 4].try_into().unwrap()) == 1)
        .unwrap()
}

#[test]
fn missing_and_malformed_payload_files_are_refused_with_the_cell_name() {
    if !toolchain_or_skip() {
        return;
    }
    let text = scratch().join("text.elf");
    std::fs::write(&text, "not an ELF file at all, but long enough to have a header's worth of bytes").unwrap();
    let huge = scratch().join("huge.elf");
    std::fs::File::create(&huge).unwrap().set_len(65 << 20).unwrap();
    let cases: Vec<(PathBuf, &str)> = vec![
        (scratch().join("does-not-exist.elf"), "No such file"),
        (scratch().to_path_buf(), "not a regular file"),
        (text, "not a 64-bit little-endian ELF"),
        (huge, "above the"),
        (patched("class32.elf", |f| f[4] = 1), "not a 64-bit little-endian ELF"),
        (patched("arm.elf", |f| f[18] = 0xb7), "is not x86-64"),
        (
            patched("low.elf", |f| {
                let ph = first_load(f);
                f[ph + 16..ph + 32].copy_from_slice(&[0; 16]);
            }),
            "monitor's pages",
        ),
        (
            patched("high.elf", |f| {
                let ph = first_load(f);
                let at = 0x40_0000u64.to_le_bytes();
                f[ph + 16..ph + 24].copy_from_slice(&at);
                f[ph + 24..ph + 32].copy_from_slice(&at);
            }),
            "past the payload area",
        ),
        (patched("entry.elf", |f| f[24..32].copy_from_slice(&0x1f_0000u64.to_le_bytes())), "entry point"),
    ];
    let shm = region("c-bad");
    for (path, needle) in &cases {
        let spec = spec("c-bad", path, "");
        let err = match Cell::start(spec, Arc::clone(&shm)) {
            Ok(c) => {
                let _ = c.stop(Duration::from_secs(5));
                panic!("{} was accepted", path.display());
            }
            Err(e) => e,
        };
        assert!(matches!(err, CellError::PayloadFile { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("\"c-bad\"") && msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains(needle), "{}: {msg}", path.display());
        // The same verdict up front, for the scenario layer.
        let early = rtcell_kvm::payloads::validate(&path.display().to_string(), 2 << 20).unwrap_err().to_string();
        assert!(early.contains(needle), "{early}");
    }
    // The payload the bad ones were made from is fine.
    rtcell_kvm::payloads::validate(&echo_payload().display().to_string(), 2 << 20).unwrap();
    // Built-in names still work the old way.
    assert!(rtcell_kvm::payloads::validate("echo", 2 << 20).is_ok());
}

#[test]
fn the_recipe_refuses_what_a_payload_cannot_have() {
    if !toolchain_or_skip() {
        return;
    }
    let (ok, text, _) = make("empty", &[("README", "no C here")], &["STEP=step"]);
    assert!(!ok && text.contains("no .c files in SRC="), "{text}");
    let (ok, text, _) = make("nostep", &[("a.c", "void step(void) {}")], &[]);
    assert!(!ok && text.contains("STEP is not set"), "{text}");
    let ctor = "static int x; __attribute__((constructor)) static void c(void) { x = 1; } void step(void) { x++; }";
    let (ok, text, _) = make("ctor", &[("a.c", ctor)], &["STEP=step"]);
    assert!(!ok && text.contains("C constructors or destructors"), "{text}");
    let tls = "_Thread_local int t; void step(void) { t++; }";
    let (ok, text, _) = make("tls", &[("a.c", tls)], &["STEP=step"]);
    assert!(!ok && text.contains("thread-local variables"), "{text}");
    let (ok, text, _) = make("misspelt", &[("a.c", "void step(void) {}")], &["STEP=stpe"]);
    assert!(!ok && text.contains("stpe"), "{text}");
    // Names of its own, no init, several files.
    let two = [
        ("a.c", "void helper(int *p); void rtcell_cell_step(void) { static int n; helper(&n); }"),
        ("b.c", "void helper(int *p) { (*p)++; }"),
    ];
    let elf = build("own-names", &two, &["STEP=rtcell_cell_step"]);
    rtcell_kvm::payloads::validate(&elf.display().to_string(), 2 << 20).unwrap();
}
