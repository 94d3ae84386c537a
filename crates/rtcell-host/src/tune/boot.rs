//! Boot-time knobs: the kernel command line that would isolate the cell CPU. rtcell only prints it;
//! it never writes a bootloader configuration.

use crate::check::cmdline::{cmdline_cpus, cmdline_param, isolcpus_flags, isolcpus_value};
use crate::check::kernel::{THP_ENABLED, selected_choice};
use crate::check::power::{IDLE_LATENCY_LIMIT_US, deepest_enabled_latency};
use crate::cpu::{format_cpu_list, parse_cpu_list};
use crate::facts::{self, preempt_model_in};
use crate::root::HostRoot;

/// What to add to the kernel command line.
#[derive(Debug, Clone, PartialEq)]
pub struct BootSuggestion {
    /// Parameters to add (or to replace the current value of), each `key=value` or a bare word.
    pub add: Vec<String>,
    /// Parameters worth knowing that trade something away, with what they cost.
    pub optional: Vec<(String, String)>,
    /// The whole command line with `add` applied (arguments after `--` kept at the end).
    pub line: String,
    /// Things to know about this kernel (e.g. a parameter it would ignore).
    pub notes: Vec<String>,
}

fn key(param: &str) -> &str {
    param.split_once('=').map_or(param, |(k, _)| k)
}

/// `cmdline` with every parameter of `add` set: existing ones of the same key removed, the new ones
/// appended before `--`.
pub fn with_params(cmdline: &str, add: &[String]) -> String {
    let tokens: Vec<&str> = cmdline.split_whitespace().collect();
    let split = tokens.iter().position(|t| *t == "--").unwrap_or(tokens.len());
    let keys: Vec<&str> = add.iter().map(|p| key(p)).collect();
    let mut out: Vec<&str> = tokens[..split].iter().copied().filter(|t| !keys.contains(&key(t))).collect();
    out.extend(add.iter().map(String::as_str));
    out.extend(&tokens[split..]);
    out.join(" ")
}

/// The list `value` names, with `cpu` added (`None` when it is there already).
fn with_cpu(value: Option<&str>, cpu: usize, online: &[usize]) -> Option<Vec<usize>> {
    let mut cpus = value.and_then(|v| cmdline_cpus(v, online).ok()).unwrap_or_default();
    if cpus.contains(&cpu) {
        return None;
    }
    cpus.push(cpu);
    cpus.sort_unstable();
    Some(cpus)
}

/// The boot parameters that would help a cell on `cpu` and are not set yet.
pub fn suggest(root: &HostRoot, cpu: usize, online: &[usize], housekeeping: &[usize]) -> BootSuggestion {
    let cmdline = root.read_trimmed("/proc/cmdline").unwrap_or_default();
    let param = |k: &str| cmdline_param(&cmdline, k);
    let mut add = Vec::new();
    let mut notes = Vec::new();

    let iso = param("isolcpus");
    let flags = iso.map(isolcpus_flags).unwrap_or_default();
    let iso_cpus = with_cpu(iso, cpu, online);
    let flags_ok = iso.is_some() && (flags.is_empty() || flags.contains(&"domain")) && flags.contains(&"managed_irq");
    if iso_cpus.is_some() || !flags_ok {
        let cpus = iso_cpus.unwrap_or_else(|| iso.and_then(|v| cmdline_cpus(v, online).ok()).unwrap_or_default());
        add.push(format!("isolcpus={}", isolcpus_value(&flags, &cpus)));
    }
    for k in ["nohz_full", "rcu_nocbs"] {
        if let Some(cpus) = with_cpu(param(k), cpu, online) {
            add.push(format!("{k}={}", format_cpu_list(&cpus)));
        }
    }
    if !root.exists("/sys/devices/system/cpu/nohz_full") {
        notes.push(
            "this kernel is built without CONFIG_NO_HZ_FULL: it ignores nohz_full= (the tick keeps running)".into(),
        );
    }
    let irqaffinity_ok = param("irqaffinity").and_then(|v| parse_cpu_list(v).ok()).is_some_and(|l| !l.contains(&cpu));
    if !irqaffinity_ok && !housekeeping.is_empty() {
        add.push(format!("irqaffinity={}", format_cpu_list(housekeeping)));
    }
    let version = root.read_trimmed("/proc/sys/kernel/version").unwrap_or_default();
    let model = preempt_model_in(root);
    if version.split_whitespace().any(|t| t == "PREEMPT_DYNAMIC") && !matches!(model, "full" | "rt") {
        add.push("preempt=full".into());
    } else if model != "rt" && model != "unknown" && !version.split_whitespace().any(|t| t == "PREEMPT_DYNAMIC") {
        notes.push(format!(
            "preemption model {model}: only a PREEMPT_RT kernel (Debian: linux-image-rt-amd64) makes the kernel fully \
             preemptible"
        ));
    }
    if param("skew_tick").is_none_or(|v| v == "0" || v.is_empty()) {
        add.push("skew_tick=1".into());
    }
    let cpuinfo = root.read("/proc/cpuinfo").unwrap_or_default();
    let stable_tsc = ["constant_tsc", "nonstop_tsc"].iter().all(|f| facts::cpuinfo_has_flag(&cpuinfo, f));
    let clocksource =
        root.read_trimmed("/sys/devices/system/clocksource/clocksource0/current_clocksource").unwrap_or_default();
    let tsc_reliable = param("tsc").is_some_and(|v| v.split(',').any(|f| f == "reliable"));
    if stable_tsc && clocksource == "tsc" && !tsc_reliable {
        add.push("tsc=reliable".into());
    }
    if param("nosoftlockup").is_none() {
        add.push("nosoftlockup".into());
    }
    if root.read_i64("/proc/sys/kernel/nmi_watchdog").is_ok_and(|v| v != 0) && param("nmi_watchdog").is_none() {
        add.push("nmi_watchdog=0".into());
    }
    let limited = ["idle", "processor.max_cstate", "intel_idle.max_cstate"].iter().any(|k| param(k).is_some());
    if !limited && deepest_enabled_latency(root, cpu).is_some_and(|(_, l)| l > IDLE_LATENCY_LIMIT_US as i64) {
        add.push("processor.max_cstate=1".into());
        add.push("intel_idle.max_cstate=0".into());
    }
    if root.read(THP_ENABLED).ok().as_deref().and_then(selected_choice) == Some("always") {
        add.push("transparent_hugepage=never".into());
    }
    let mut optional = Vec::new();
    if param("mitigations") != Some("off") {
        optional.push((
            "mitigations=off".to_string(),
            "shorter kernel entries and exits, at the price of the CPU vulnerability mitigations: only where every \
             program on the machine is trusted"
                .to_string(),
        ));
    }
    let line = with_params(&cmdline, &add);
    BootSuggestion { add, optional, line, notes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{tuned, untuned, write};

    #[test]
    fn params_replace_their_key_and_stay_before_init_arguments() {
        let line = with_params(
            "BOOT_IMAGE=/vmlinuz isolcpus=2 quiet -- --init-arg",
            &["isolcpus=domain,managed_irq,1-2".into(), "skew_tick=1".into()],
        );
        assert_eq!(line, "BOOT_IMAGE=/vmlinuz quiet isolcpus=domain,managed_irq,1-2 skew_tick=1 -- --init-arg");
        assert_eq!(with_params("", &["nosoftlockup".into()]), "nosoftlockup");
    }

    #[test]
    fn untuned_machine_gets_the_whole_set() {
        let dir = tempfile::tempdir().unwrap();
        untuned(dir.path());
        write(dir.path(), "sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc\n");
        let s = suggest(&HostRoot::at(dir.path()), 1, &[0, 1], &[0]);
        assert_eq!(
            s.add,
            [
                "isolcpus=domain,managed_irq,1",
                "nohz_full=1",
                "rcu_nocbs=1",
                "irqaffinity=0",
                "preempt=full",
                "skew_tick=1",
                "tsc=reliable",
                "nosoftlockup",
                "nmi_watchdog=0",
                "processor.max_cstate=1",
                "intel_idle.max_cstate=0",
                "transparent_hugepage=never",
            ]
        );
        assert!(s.line.starts_with("BOOT_IMAGE=/vmlinuz quiet isolcpus=domain,managed_irq,1 nohz_full=1 "));
        assert_eq!(s.optional[0].0, "mitigations=off");
        assert!(s.notes[0].contains("CONFIG_NO_HZ_FULL"), "{:?}", s.notes);
    }

    #[test]
    fn tuned_machine_needs_nothing_and_partial_lists_are_extended() {
        let dir = tempfile::tempdir().unwrap();
        tuned(dir.path());
        let root = HostRoot::at(dir.path());
        let s = suggest(&root, 1, &[0, 1], &[0]);
        assert!(s.add.is_empty(), "{:?}", s.add);
        assert!(s.optional.is_empty());
        write(dir.path(), "proc/cmdline", "isolcpus=nohz,2 nohz_full=2 rcu_nocbs=1 irqaffinity=0-1\n");
        let s = suggest(&root, 1, &[0, 1, 2], &[0]);
        assert_eq!(
            s.add[..4],
            ["isolcpus=nohz,domain,managed_irq,1-2", "nohz_full=1-2", "irqaffinity=0", "skew_tick=1"]
        );
    }
}
