//! `rtcell check` and `rtcell tune`: how the host is set up for a cell CPU, and the run-time knobs
//! changed (and changed back).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use rtcell_bench::latency::{LatencyConfig, Mode};
use rtcell_bench::loopback::{self, LoopbackConfig, Notify};
use rtcell_bench::{BenchError, SuiteRun};
use rtcell_cells::CellKind;
use rtcell_host::check::{CheckOptions, HostCheck, Level, Verdict, check_cell_cpu_with};
use rtcell_host::facts::{HostFacts, is_root};
use rtcell_host::root::HostRoot;
use rtcell_host::tsc::TscClock;
use rtcell_host::tune::{self, Outcome, Restored, TuneError};
use rtcell_loads::Load;
use rtcell_report::table::Table;
use rtcell_report::{Results, Series};

use super::{EXIT_INTERRUPTED, EXIT_USAGE, Plan, default_out, host_summary, install_ctrlc};

mod measure;
use measure::{Measure, compare};

pub const CHECK_HELP: &str = "Examples:
  rtcell check              # the default cell CPU (the last online CPU)
  rtcell check --cpu 1 --json
  rtcell check --root /srv/captured-host --cpu 3

Each item: a verdict (ok, warn, bad), what was found, why it matters for a cell on that CPU, and the
exact fix (a command, or a kernel parameter). A file that cannot be read (not root, or not in this
kernel) is reported as such and counts neither way. At the end: a score out of 100 (ok items count
fully, warnings half, each by its weight) and the three changes that would help most.
`rtcell tune --cpu N` makes the run-time changes.

Exit status: 0 nothing is bad; 1 an item is bad (the cell cannot run as configured); 2 bad input.";

pub const TUNE_HELP: &str = "Examples:
  rtcell tune --cpu 1                       # dry run: each change as before -> after, and the boot line
  rtcell tune --cpu 1 --apply               # make them (root), saving the previous values first
  rtcell tune --revert                      # put every saved value back, byte for byte
  rtcell tune --cpu 1 --apply --measure     # latency and loopback before and after, and the difference

Run-time knobs only: the affinity of every device IRQ that may reach the cell CPU (and the default for
IRQs registered later), the cell CPU's governor (performance), RT throttling (off), timer migration
(off), the unbound workqueue cpumask (without the cell CPU), transparent huge pages (always -> never).
Boot-time knobs (isolcpus=, nohz_full=, rcu_nocbs=, irqaffinity=, ...) are printed as a kernel command
line; rtcell never writes the bootloader. /dev/cpu_dma_latency is not changed: the kernel drops the
request when its holder closes the file, so rtcell bench latency holds it at 0 during its runs instead.

--apply writes each change to the state file, flushed to disk, before making it: after Ctrl-C, an
error or a crash half-way, --revert restores everything already changed. State file: --state PATH,
else $RTCELL_HOME/tune-state.json, else $XDG_STATE_HOME/rtcell/tune-state.json, else
/var/lib/rtcell/tune-state.json. While one is in effect, another --apply is refused.

--measure runs the latency suite (nanosleep and a thread cell polling, period 1 ms, --duration per
mode) and a loopback round trip (thread cell, 0/64/1024 B, 100,000 each) before and after the changes,
writes both results documents (--out DIR/before, DIR/after) and prints the difference. The changes
stay in effect afterwards: --revert undoes them.

Exit status: 0 done (IRQs the kernel keeps in place, such as managed IRQs, are reported, not failed);
1 another change or a restore failed, or not root; 2 bad input; 130 Ctrl-C (the state file covers
what was changed).";

#[derive(Args, Clone)]
pub struct CheckArgs {
    /// The CPU a cell would run on (default: the last online CPU).
    #[arg(long)]
    cpu: Option<usize>,
    /// Print the verdicts as JSON.
    #[arg(long)]
    json: bool,
    /// Read /proc, /sys and /dev under DIR instead of / (a tree captured from another machine).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

#[derive(Args, Clone)]
pub struct TuneArgs {
    /// The cell CPU (default for a dry run: the last online CPU; --apply needs it said).
    #[arg(long)]
    cpu: Option<usize>,
    /// Make the changes (root only), saving the previous values in the state file first.
    #[arg(long, conflicts_with = "revert")]
    apply: bool,
    /// Restore every value the last --apply changed, and remove the state file.
    #[arg(long)]
    revert: bool,
    /// With --apply: measure latency and loopback before and after, and print the difference.
    #[arg(long, requires = "apply")]
    measure: bool,
    /// Latency measured per mode by --measure (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", requires = "measure")]
    duration: String,
    /// Where --measure writes its results documents (default: rtcell-results/<timestamp>-tune/).
    #[arg(long, requires = "measure")]
    out: Option<PathBuf>,
    /// The state file (default: $RTCELL_HOME/tune-state.json, else $XDG_STATE_HOME/rtcell/tune-state.json,
    /// else /var/lib/rtcell/tune-state.json).
    #[arg(long, value_name = "PATH")]
    state: Option<PathBuf>,
    /// Read and change the files under DIR instead of / (a copy of /proc and /sys to try tune on).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

/// A usage error, printed with exit status 2.
fn usage(msg: impl std::fmt::Display) -> i32 {
    eprintln!("error: {msg}");
    EXIT_USAGE
}

fn host_root(dir: Option<&Path>) -> Result<HostRoot, i32> {
    match dir {
        None => Ok(HostRoot::system()),
        Some(d) if d.is_dir() => Ok(HostRoot::at(d)),
        Some(d) => Err(usage(format_args!(
            "--root {}: not a directory; give a tree laid out like / (with proc/ and sys/)",
            d.display()
        ))),
    }
}

/// The cell CPU of `--cpu`, or the last online CPU. A CPU that does not exist at all is bad input;
/// an offline one is left to the check (which says how to bring it online).
fn cell_cpu(root: &HostRoot, cpu: Option<usize>) -> Result<usize, i32> {
    let online = rtcell_host::cpu::online_cpus_in(root).unwrap_or_default();
    match cpu {
        None => Ok(online.last().copied().unwrap_or(0)),
        Some(c) if online.contains(&c) || root.exists(&format!("/sys/devices/system/cpu/cpu{c}")) => Ok(c),
        Some(c) => Err(usage(format_args!(
            "--cpu {c}: this machine has no CPU {c}; online CPUs: {}",
            rtcell_host::cpu::format_cpu_list(&online)
        ))),
    }
}

/// The check of `cpu`, with the live system's own additions: KVM as rtcell will use it, and shared
/// regions left by dead runs.
fn run_check(root: &HostRoot, cpu: usize, opts: &CheckOptions) -> HostCheck {
    let mut verdicts = check_cell_cpu_with(root, cpu, opts);
    if root.is_system() {
        let kvm = rtcell_kvm::kvm_status();
        if let Some(v) = verdicts.iter_mut().find(|v| v.item == "kvm") {
            v.level = match &kvm {
                rtcell_kvm::KvmStatus::Usable { nested: false } => Level::Ok,
                _ => Level::Warn,
            };
            v.detail = kvm.explain();
            v.fix = match &kvm {
                rtcell_kvm::KvmStatus::Usable { nested: false } => None,
                rtcell_kvm::KvmStatus::Usable { nested: true } => Some(
                    "for kvm-cell figures that hold on bare metal, run on a host with hardware virtualisation".into(),
                ),
                _ => Some(
                    "modprobe kvm_intel (or kvm_amd); check the BIOS virtualisation setting; chmod/chgrp /dev/kvm"
                        .into(),
                ),
            };
        }
        for (name, pid) in rtcell_shm::mapping::SharedMemory::stale_named() {
            verdicts.push(
                Verdict::warn(
                    "stale region",
                    format!("/dev/shm/rtcell.{name} was left by process {pid}, which is no longer running"),
                )
                .with_fix(format!("rm /dev/shm/rtcell.{name}")),
            );
        }
    }
    HostCheck::from_verdicts(cpu, verdicts)
}

/// `rtcell check`.
pub fn check_main(a: CheckArgs) -> i32 {
    let root = match host_root(a.root.as_deref()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let cpu = match cell_cpu(&root, a.cpu) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let hc = run_check(&root, cpu, &CheckOptions::default());
    let tsc_khz = if root.is_system() { TscClock::calibrate().ok().map(|t| t.khz()) } else { None };
    let facts = HostFacts::collect_from(&root, tsc_khz);
    if a.json {
        let mut doc = match serde_json::to_value(&hc) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        };
        doc["host"] = serde_json::to_value(&facts).unwrap_or_default();
        if root.is_system() {
            doc["held_cpus"] = super::cpus::held_json(&rtcell_host::cpulock::held_cpus());
        }
        match serde_json::to_string_pretty(&doc) {
            Ok(s) => outln!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        }
    } else {
        outln!("{}", host_summary(&facts));
        outln!();
        outln!("Cell CPU {cpu}:");
        out!("{}", rtcell_host::check::render_text(&hc.verdicts));
        if root.is_system() {
            outln!();
            out!("{}", super::cpus::held_text(&rtcell_host::cpulock::held_cpus()));
        } else {
            outln!("(read under {})", root.base().display());
        }
    }
    if hc.summary.bad > 0 { 1 } else { 0 }
}

/// The check of the run's cell CPU, as `rtcell bench` records it in `host.check` (after the run, with
/// the steal it measured; sampled briefly if the run was too short to measure any).
pub fn record_check(host: &mut HostFacts, cpu: usize) {
    let sample = if host.steal_pct.is_some() { Duration::ZERO } else { CheckOptions::default().steal_sample };
    let opts = CheckOptions { steal_pct: host.steal_pct, steal_sample: sample };
    host.check = Some(run_check(&HostRoot::system(), cpu, &opts));
}

/// The CPU a bench plan runs its cell (or measured side) on.
pub fn plan_cell_cpu(plan: &Plan) -> usize {
    #[allow(unreachable_patterns)] // Suites added later fall back to the default cell CPU.
    match plan {
        Plan::C2c(c) => c.cpu_b,
        Plan::Loopback(c) => c.cell_cpu,
        Plan::Control(c) => c.cell_cpu,
        Plan::Membench(c) => c.cpu,
        Plan::Latency(c) => c.cpu,
        Plan::Itc(c) => c.responder_cpu,
        Plan::Capi(c) => c.cell_cpu,
        _ => super::online().last().copied().unwrap_or(0),
    }
}

fn state_path(a: &TuneArgs) -> PathBuf {
    a.state.clone().unwrap_or_else(|| tune::default_state_path(|k| std::env::var(k).ok()))
}

/// Changing kernel settings of the live system needs root; a fixture tree does not.
fn refuse_unless_root(root: &HostRoot, what: &str) -> Result<(), i32> {
    if root.is_system() && !is_root() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        eprintln!(
            "error: rtcell tune {what} changes kernel settings of the whole machine and needs root (running as uid \
             {uid}): run it with sudo; without --apply it shows what it would change"
        );
        return Err(1);
    }
    Ok(())
}

/// `rtcell tune`.
pub fn tune_main(a: TuneArgs) -> i32 {
    let root = match host_root(a.root.as_deref()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if a.revert {
        if a.cpu.is_some() {
            return usage("--revert takes no --cpu: the state file says which CPU the changes were for");
        }
        return revert_main(&root, &a);
    }
    if a.apply && a.cpu.is_none() {
        return usage("--apply needs --cpu N: say which CPU the cell gets (rtcell check shows the candidates)");
    }
    let latency_duration = match rtcell_scenario::parse_duration(&a.duration) {
        Ok(d) if !d.is_zero() => d,
        Ok(_) => return usage("--duration 0: give a time per latency mode, e.g. 5s"),
        Err(e) => return usage(format_args!("--duration {e}")),
    };
    let cpu = match cell_cpu(&root, a.cpu) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let plan = match tune::plan(&root, cpu) {
        Ok(p) => p,
        Err(e @ TuneError::NoSuchCpu { .. }) => return usage(e),
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let state = state_path(&a);
    out!("{}", render_plan(&plan, a.apply, &state));
    if !a.apply {
        return 0;
    }
    if let Err(code) = refuse_unless_root(&root, "--apply") {
        return code;
    }
    if state.exists() {
        eprintln!("error: {}", TuneError::StateExists { path: state });
        return 1;
    }
    if plan.changes.is_empty() {
        outln!("\nNothing to change at run time.");
        return 0;
    }
    if a.measure && !root.is_system() {
        return usage("--measure runs benchmarks on this machine: it cannot go with --root");
    }
    install_ctrlc();
    let measuring = if a.measure {
        match Measure::prepare(cpu, latency_duration, a.out.clone()) {
            Ok(m) => Some(m),
            Err(code) => return code,
        }
    } else {
        None
    };
    let before = match &measuring {
        Some(m) => match m.run("before") {
            Ok(r) => Some(r),
            Err(code) => return code,
        },
        None => None,
    };
    outln!();
    let mut on_change = |c: &tune::Change, o: &Outcome| match o {
        Outcome::Changed => outln!("changed  {}: {} ({})", c.label, c.arrow(), c.path),
        Outcome::Refused(e) => outln!("REFUSED  {}: {e}", c.label),
    };
    let applied = match tune::apply(&root, &plan, &state, &rtcell_host::stop::stop_requested, &mut on_change) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            if state.exists() && !matches!(e, TuneError::StateExists { .. }) {
                eprintln!("what was changed before the error is in {}: rtcell tune --revert", state.display());
            }
            return 1;
        }
    };
    let made = applied.done.len() - applied.refused();
    let revert_cmd = revert_command(&a, &state);
    outln!(
        "\n{made} change{} made{}; the previous values are in {}; undo with: {revert_cmd}",
        if made == 1 { "" } else { "s" },
        if applied.refused() > 0 { format!(", {} refused by the kernel", applied.refused()) } else { String::new() },
        applied.state.display()
    );
    if applied.stopped {
        eprintln!("interrupted: {} of {} changes were made; {revert_cmd} restores them", made, plan.changes.len());
        return EXIT_INTERRUPTED;
    }
    // The kernel refuses to move managed IRQs (multi-queue devices): expected, and only a boot
    // parameter helps. Any other refusal is a failure.
    let irq_refused = applied
        .done
        .iter()
        .filter(|(c, o)| matches!(o, Outcome::Refused(_)) && c.path.starts_with("/proc/irq/"))
        .count();
    if irq_refused > 0 {
        outln!(
            "the kernel keeps {irq_refused} IRQ{} where {} (managed by its driver, or fixed): only \
             isolcpus=managed_irq,domain,{cpu} at boot moves managed IRQs off CPU {cpu}",
            if irq_refused == 1 { "" } else { "s" },
            if irq_refused == 1 { "it is" } else { "they are" }
        );
    }
    let failed = applied.refused() > irq_refused;
    if let (Some(m), Some(before)) = (&measuring, before) {
        if rtcell_host::stop::stop_requested() {
            return EXIT_INTERRUPTED;
        }
        let after = match m.run("after") {
            Ok(r) => r,
            Err(code) => return code,
        };
        outln!("\n{}", compare(&before, &after));
        outln!("results: {} (before), {} (after)", before.path.display(), after.path.display());
        outln!("the changes stay in effect: {revert_cmd}");
    }
    if failed { 1 } else { 0 }
}

fn revert_command(a: &TuneArgs, state: &Path) -> String {
    let mut cmd = "rtcell tune --revert".to_string();
    if let Some(r) = &a.root {
        cmd.push_str(&format!(" --root {}", r.display()));
    }
    if a.state.is_some() {
        cmd.push_str(&format!(" --state {}", state.display()));
    }
    cmd
}

fn render_plan(p: &tune::Plan, apply: bool, state: &Path) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let hk = rtcell_host::cpu::format_cpu_list(&p.housekeeping);
    let mode = if apply { "applying" } else { "dry run: nothing is changed (--apply makes these changes)" };
    let _ = writeln!(out, "rtcell tune for a cell on CPU {} (housekeeping CPUs {hk}), {mode}", p.cpu);
    if p.changes.is_empty() {
        let _ = writeln!(out, "\nRun-time changes: none needed");
    } else {
        let _ = writeln!(out, "\nRun-time changes, before -> after:");
        let mut t = Table::new(&["knob", "file", "before -> after"]);
        for c in &p.changes {
            t.row(vec![c.label.clone(), c.path.clone(), c.arrow()]);
        }
        let _ = writeln!(out, "{}", t.render());
    }
    let _ = writeln!(out, "\nLeft alone:");
    for u in &p.unchanged {
        let _ = writeln!(out, "  - {u}");
    }
    let b = &p.boot;
    let _ = writeln!(out, "\nBoot-time changes (rtcell never writes the bootloader: add them yourself and reboot):");
    if b.add.is_empty() {
        let _ = writeln!(out, "  none needed");
    } else {
        let _ = writeln!(out, "  add: {}", b.add.join(" "));
        let _ = writeln!(out, "  the whole command line: {}", b.line);
        let _ = writeln!(
            out,
            "  on Debian/Ubuntu: append them to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub, reboot"
        );
    }
    for (param, cost) in &b.optional {
        let _ = writeln!(out, "  optional: {param}: {cost}");
    }
    for n in &b.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    let _ = writeln!(out, "\nState file: {}", state.display());
    out
}

fn revert_main(root: &HostRoot, a: &TuneArgs) -> i32 {
    if let Err(code) = refuse_unless_root(root, "--revert") {
        return code;
    }
    let state = state_path(a);
    let r = match tune::revert(root, &state) {
        Ok(r) => r,
        Err(e @ TuneError::NoState { .. }) if a.state.is_none() => {
            outln!("{e}");
            return 0;
        }
        Err(e @ (TuneError::NoState { .. } | TuneError::OtherRoot { .. } | TuneError::StateCorrupt { .. })) => {
            return usage(e);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    outln!("reverting the changes made for CPU {} (state file {}):", r.header.cpu, state.display());
    if r.torn_tail {
        outln!("  (the last record was cut short by a crash: its change was never made)");
    }
    for (e, res) in &r.done {
        let before = e.before.trim();
        match res {
            Restored::Restored => outln!("restored  {}: {before} ({})", e.label, e.path),
            Restored::AlreadyAsBefore => outln!("unchanged {}: already {before} ({})", e.label, e.path),
            Restored::Differs { now } => {
                outln!(
                    "DIFFERS   {}: wrote {}, reads {:?}, was {before:?} ({})",
                    e.label,
                    e.restore,
                    now.trim(),
                    e.path
                )
            }
            Restored::Failed(why) => outln!("FAILED    {}: {why}", e.label),
        }
    }
    if r.removed {
        outln!("every value reads as before; state file removed");
        0
    } else {
        eprintln!(
            "error: {} value(s) not restored; the state file {} is kept: fix the cause and run rtcell tune --revert again",
            r.done.iter().filter(|(_, res)| !res.is_ok()).count(),
            state.display()
        );
        1
    }
}
