//! Power management items: frequency governors per CPU, idle states of the cell CPU, and who holds
//! `/dev/cpu_dma_latency`.

use super::{Ctx, Verdict, procs};
use crate::facts;
use crate::root::HostRoot;

/// Exit latency above which an idle state is worth disabling for a cell that sleeps between periods.
pub const IDLE_LATENCY_LIMIT_US: u64 = 10;

/// The PM QoS file; its value (a native-endian `i32`, microseconds) is the strictest request held.
pub const DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// The value `/dev/cpu_dma_latency` reads when nobody holds a request (2000 s: no limit).
const DMA_LATENCY_DEFAULT_US: i32 = 2_000_000_000;

/// One CPU's frequency scaling, as far as it could be read.
#[derive(Debug, Clone, PartialEq)]
struct Scaling {
    cpu: usize,
    governor: Option<String>,
    /// (min, max) the governor may pick, kHz.
    range_khz: Option<(u64, u64)>,
    /// The hardware maximum, kHz.
    hw_max_khz: Option<u64>,
}

fn scaling(root: &HostRoot, cpu: usize) -> Option<Scaling> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq");
    if !root.exists(&dir) {
        return None;
    }
    let num = |f: &str| root.read_i64(&format!("{dir}/{f}")).ok().and_then(|v| u64::try_from(v).ok());
    Some(Scaling {
        cpu,
        governor: root.read_trimmed(&format!("{dir}/scaling_governor")).ok(),
        range_khz: num("scaling_min_freq").zip(num("scaling_max_freq")),
        hw_max_khz: num("cpuinfo_max_freq"),
    })
}

fn describe(s: &Scaling) -> String {
    let mut d = format!("CPU {} {}", s.cpu, s.governor.as_deref().unwrap_or("(governor unreadable)"));
    if let Some((lo, hi)) = s.range_khz {
        d.push_str(&format!(" {}-{} MHz", lo / 1000, hi / 1000));
        if let Some(max) = s.hw_max_khz.filter(|m| *m > hi) {
            d.push_str(&format!(" (capped below the {} MHz maximum)", max / 1000));
        }
    }
    d
}

pub(super) fn check_governor(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "governor";
    let (root, cell) = (ctx.root, ctx.cell);
    let Some(own) = scaling(root, cell) else {
        // Under a hypervisor the host owns frequency; on bare metal a missing driver means the
        // firmware may still change it behind the kernel's back.
        let in_vm = ctx.cpuinfo.as_deref().is_ok_and(|c| facts::cpuinfo_has_flag(c, "hypervisor"));
        let v = if in_vm {
            Verdict::ok(ITEM, "no frequency scaling exposed (typical in a VM: the host sets the frequency)")
        } else {
            Verdict::warn(
                ITEM,
                "no frequency scaling exposed: no cpufreq driver, so firmware may still vary the frequency",
            )
            .with_fix("set the firmware (BIOS) power profile to maximum performance")
        };
        return out.push(v);
    };
    let others: Vec<String> = ctx
        .online_list()
        .iter()
        .filter(|&&c| c != cell)
        .filter_map(|&c| scaling(root, c))
        .map(|s| describe(&s))
        .collect();
    let others = if others.is_empty() { String::new() } else { format!("; other CPUs: {}", others.join(", ")) };
    let boost = match root.read_trimmed("/sys/devices/system/cpu/cpufreq/boost").as_deref() {
        Ok("1") => "; boost (turbo) is on: the top frequency depends on temperature and other cores' load",
        _ => "",
    };
    let path = format!("/sys/devices/system/cpu/cpu{cell}/cpufreq/scaling_governor");
    match own.governor.as_deref() {
        Some("performance") => out.push(Verdict::ok(ITEM, format!("{}{others}{boost}", describe(&own)))),
        Some(g) => out.push(
            Verdict::warn(
                ITEM,
                format!("{}: the {g} governor changes the frequency, adding latency and varying execution times{others}{boost}", describe(&own)),
            )
            .with_fix(format!(
                "echo performance > {path} (or cpupower -c {cell} frequency-set -g performance; rtcell tune --cpu \
                 {cell} --apply does this)"
            )),
        ),
        None => match root.read_trimmed(&path) {
            Err(e) => out.push(Verdict::unreadable(ITEM, &e)),
            Ok(_) => out.push(Verdict::warn(ITEM, format!("could not read {path}")).not_checked()),
        },
    }
}

/// An enabled idle state of a CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleState {
    /// e.g. "state2".
    pub dir: String,
    pub name: String,
    pub latency_us: i64,
}

/// Enabled idle states, and the errors of states that could not be read.
type IdleStates = (Vec<IdleState>, Vec<String>);

/// The enabled idle states of `cpu`; `Ok(None)` when the CPU exposes no cpuidle directory.
fn idle_states(root: &HostRoot, cpu: usize) -> Result<Option<IdleStates>, crate::root::ReadError> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle");
    let states = match root.list_subdirs(&dir) {
        Ok(s) => s,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut enabled = Vec::new();
    let mut errors = Vec::new();
    for s in states.iter().filter(|s| s.starts_with("state")) {
        let base = format!("{dir}/{s}");
        match (
            root.read_trimmed(&format!("{base}/name")),
            root.read_i64(&format!("{base}/latency")),
            root.read_i64(&format!("{base}/disable")),
        ) {
            (Ok(name), Ok(latency_us), Ok(d)) => {
                if d == 0 {
                    enabled.push(IdleState { dir: base, name, latency_us });
                }
            }
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => errors.push(e.to_string()),
        }
    }
    Ok(Some((enabled, errors)))
}

/// The enabled idle state of `cpu` with the longest exit latency: (name, us).
pub fn deepest_enabled_latency(root: &HostRoot, cpu: usize) -> Option<(String, i64)> {
    let (states, _) = idle_states(root, cpu).ok()??;
    states.into_iter().max_by_key(|s| s.latency_us).map(|s| (s.name, s.latency_us))
}

pub(super) fn check_idle_states(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "idle states";
    let cell = ctx.cell;
    let (enabled, errors) = match idle_states(ctx.root, cell) {
        Ok(Some(s)) => s,
        Ok(None) => return out.push(Verdict::ok(ITEM, format!("no cpuidle states exposed for CPU {cell}"))),
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    for e in errors {
        out.push(Verdict::warn(ITEM, e).not_checked());
    }
    let list = if enabled.is_empty() {
        "none".to_string()
    } else {
        enabled.iter().map(|s| format!("{} ({} us)", s.name, s.latency_us)).collect::<Vec<_>>().join(", ")
    };
    let deep: Vec<String> = enabled
        .iter()
        .filter(|s| s.latency_us > IDLE_LATENCY_LIMIT_US as i64)
        .map(|s| format!("{}/disable", s.dir))
        .collect();
    if deep.is_empty() {
        out.push(Verdict::ok(ITEM, format!("enabled idle states on CPU {cell}: {list}")));
    } else {
        out.push(
            Verdict::warn(
                ITEM,
                format!(
                    "enabled idle states on CPU {cell}: {list}; waking from those above \
                     {IDLE_LATENCY_LIMIT_US} us delays cells that sleep between periods"
                ),
            )
            .with_fix(format!(
                "for f in {}; do echo 1 > $f; done (or hold /dev/cpu_dma_latency at 0 during runs)",
                deep.join(" ")
            )),
        );
    }
}

/// The PM QoS CPU latency limit now in force, in us.
fn dma_latency_value(root: &HostRoot) -> Result<i32, crate::root::ReadError> {
    let bytes = root.read_bytes(DMA_LATENCY)?;
    let raw: [u8; 4] = bytes.get(..4).and_then(|b| b.try_into().ok()).ok_or_else(|| {
        crate::root::ReadError::invalid(DMA_LATENCY, format!("expected 4 bytes, read {}", bytes.len()))
    })?;
    Ok(i32::from_ne_bytes(raw))
}

pub(super) fn check_pm_qos(out: &mut Vec<Verdict>, ctx: &Ctx<'_>) {
    const ITEM: &str = "pm qos";
    let cell = ctx.cell;
    let holders = match ctx.procs() {
        Ok(p) => {
            let (found, unreadable) = procs::holders(ctx.root, p, DMA_LATENCY);
            let mut names: Vec<String> = found.iter().map(|(pid, name)| format!("{name} (pid {pid})")).collect();
            if unreadable > 0 {
                names.push(format!("{unreadable} processes whose open files only root can see"));
            }
            names
        }
        Err(_) => Vec::new(),
    };
    let held_by = if holders.is_empty() { String::new() } else { format!(", open in {}", holders.join(", ")) };
    let value = match dma_latency_value(ctx.root) {
        Ok(v) => v,
        Err(e) if e.is_not_found() => {
            return out.push(Verdict::ok(ITEM, format!("{DMA_LATENCY} does not exist (no PM QoS in this kernel)")));
        }
        Err(e) => return out.push(Verdict::unreadable(ITEM, &e)),
    };
    let deepest = deepest_enabled_latency(ctx.root, cell);
    if value < DMA_LATENCY_DEFAULT_US {
        return out.push(Verdict::ok(ITEM, format!("{DMA_LATENCY} is held at {value} us{held_by}")));
    }
    match deepest {
        Some((name, lat)) if lat > IDLE_LATENCY_LIMIT_US as i64 => out.push(
            Verdict::warn(
                ITEM,
                format!("nobody holds {DMA_LATENCY}{held_by}: CPU {cell} may enter {name} ({lat} us to wake)"),
            )
            .with_fix(format!(
                "hold it at 0 while the cell runs: `exec 3> {DMA_LATENCY}; echo 0 >&3` in the shell that starts it \
                 (released when that shell exits); rtcell bench latency holds it during its runs"
            )),
        ),
        _ => out.push(Verdict::ok(
            ITEM,
            format!(
                "nobody holds {DMA_LATENCY}{held_by}; holding it would change nothing here: no enabled idle state \
                 of CPU {cell} takes more than {IDLE_LATENCY_LIMIT_US} us to wake"
            ),
        )),
    }
}
