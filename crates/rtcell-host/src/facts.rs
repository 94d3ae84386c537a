//! Facts about the host, recorded in every results document (`host` in rtcell.results/1).

use std::io;

use serde::{Deserialize, Serialize};

use crate::check::HostCheck;
use crate::cpu;
use crate::root::HostRoot;

mod cpu_times;
pub use cpu_times::{CpuTimes, StealSampler, busy_percent, steal_percent};

/// The `host` object of a results document. Field names and values follow `schema/results.schema.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HostFacts {
    pub cpu_model: String,
    pub cpus: u32,
    /// Calibrated TSC frequency; `None` where there is no usable TSC.
    pub tsc_khz: Option<u64>,
    pub kernel: String,
    /// One of none, voluntary, full, dynamic, rt, unknown.
    pub preempt: String,
    pub cmdline: String,
    pub isolated_cpus: Vec<u32>,
    /// Hypervisor vendor when running in a VM (e.g. "KVM"), `None` on bare metal.
    pub hypervisor: Option<String>,
    /// Share of CPU time stolen by an outer hypervisor during the run, in percent.
    pub steal_pct: Option<f64>,
    /// One of hardware, nested, absent, denied.
    pub kvm: String,
    /// `rtcell check` for the run's cell CPU: how the host was set up when it was measured. Absent in
    /// documents written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<HostCheck>,
}

/// True when the effective user is root: real-time scheduling and mlock are then normally granted.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl HostFacts {
    /// Facts about the live system. `tsc_khz` comes from a calibrated `TscClock` (calibration takes
    /// time and can fail, so it is the caller's decision). `steal_pct` is left `None`: a
    /// [`StealSampler`] around the run fills it.
    pub fn collect(tsc_khz: Option<u64>) -> HostFacts {
        HostFacts::collect_from(&HostRoot::system(), tsc_khz)
    }

    /// Facts read from `root`. Never fails: anything unreadable becomes "unknown", empty or `None`.
    pub fn collect_from(root: &HostRoot, tsc_khz: Option<u64>) -> HostFacts {
        let cpuinfo = root.read("/proc/cpuinfo").unwrap_or_default();
        let cpus = match cpu::online_cpus_in(root) {
            Ok(list) => list.len(),
            Err(_) => cpuinfo.lines().filter(|l| cpuinfo_key(l) == Some("processor")).count(),
        };
        let hypervisor = hypervisor_in(root, &cpuinfo);
        let kvm = kvm_kind_in(root, hypervisor.is_some()).to_string();
        HostFacts {
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".to_string()),
            cpus: u32::try_from(cpus).unwrap_or(u32::MAX),
            tsc_khz,
            kernel: kernel_in(root),
            preempt: preempt_model_in(root).to_string(),
            cmdline: root.read_trimmed("/proc/cmdline").unwrap_or_default(),
            isolated_cpus: cpu::isolated_cpus_in(root)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| u32::try_from(c).ok())
                .collect(),
            hypervisor,
            steal_pct: None,
            kvm,
            check: None,
        }
    }
}

fn cpuinfo_key(line: &str) -> Option<&str> {
    line.split_once(':').map(|(k, _)| k.trim())
}

/// First value of `key` in a `/proc/cpuinfo` text.
pub fn cpuinfo_field<'a>(cpuinfo: &'a str, key: &str) -> Option<&'a str> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// Whether the first CPU's `flags` include `flag`.
pub fn cpuinfo_has_flag(cpuinfo: &str, flag: &str) -> bool {
    cpuinfo_field(cpuinfo, "flags").is_some_and(|f| f.split_whitespace().any(|x| x == flag))
}

/// The CPU model name; other architectures name the field differently.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Model", "Hardware", "cpu model", "cpu"]
        .iter()
        .find_map(|k| cpuinfo_field(cpuinfo, k).filter(|v| !v.is_empty()))
        .map(str::to_string)
}

/// Kernel release and build string, as `uname -rv` prints them.
fn kernel_in(root: &HostRoot) -> String {
    let release = root.read_trimmed("/proc/sys/kernel/osrelease");
    let version = root.read_trimmed("/proc/sys/kernel/version");
    match (release, version) {
        (Ok(r), Ok(v)) => format!("{r} {v}"),
        _ if root.is_system() => uname().map(|(r, v)| format!("{r} {v}")).unwrap_or_else(|| "unknown".into()),
        _ => "unknown".to_string(),
    }
}

/// (release, version) from uname(2).
fn uname() -> Option<(String, String)> {
    // SAFETY: utsname is plain old data (arrays of c_char); all zeroes is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname that the call fills in.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let field = |chars: &[libc::c_char]| {
        let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some((field(&u.release), field(&u.version)))
}

/// Maps a CPUID hypervisor vendor id to the usual product name; unknown ids are kept as they are.
pub fn hypervisor_name(vendor_id: &str) -> String {
    match vendor_id.trim() {
        "KVMKVMKVM" => "KVM",
        "Microsoft Hv" => "Hyper-V",
        "VMwareVMware" => "VMware",
        "XenVMMXenVMM" => "Xen",
        "TCGTCGTCGTCG" => "QEMU TCG",
        "ACRNACRNACRN" => "ACRN",
        "bhyve bhyve" => "bhyve",
        "VBoxVBoxVBox" => "VirtualBox",
        "QNXQVMBSQG" => "QNX",
        other => other,
    }
    .to_string()
}

/// Vendor id from CPUID leaf 0x40000000 (e.g. "KVMKVMKVM"); only meaningful when the `hypervisor`
/// CPU flag is set.
#[cfg(target_arch = "x86_64")]
pub fn hypervisor_vendor_id() -> Option<String> {
    let r = crate::tsc::cpuid(0x4000_0000);
    let bytes: Vec<u8> = [r.ebx, r.ecx, r.edx].iter().flat_map(|w| w.to_le_bytes()).filter(|&b| b != 0).collect();
    let s = String::from_utf8_lossy(&bytes).trim().to_string();
    (!s.is_empty()).then_some(s)
}

#[cfg(not(target_arch = "x86_64"))]
pub fn hypervisor_vendor_id() -> Option<String> {
    None
}

/// The hypervisor we run under, `None` on bare metal. Presence comes from the `hypervisor` CPU
/// flag (or `/sys/hypervisor/type`); the vendor from CPUID on the live system, else from
/// `/sys/hypervisor/type`.
pub fn hypervisor_in(root: &HostRoot, cpuinfo: &str) -> Option<String> {
    let sys_type = root.read_trimmed("/sys/hypervisor/type").ok().filter(|s| !s.is_empty());
    if !cpuinfo_has_flag(cpuinfo, "hypervisor") && sys_type.is_none() {
        return None;
    }
    if root.is_system() {
        if let Some(id) = hypervisor_vendor_id() {
            return Some(hypervisor_name(&id));
        }
    }
    Some(match sys_type {
        Some(t) if t.eq_ignore_ascii_case("xen") => "Xen".to_string(),
        Some(t) => t,
        None => "unknown".to_string(),
    })
}

/// What `/dev/kvm` offers: "absent", "denied", "nested" (we are a guest ourselves) or "hardware".
pub fn kvm_kind() -> &'static str {
    let root = HostRoot::system();
    let cpuinfo = root.read("/proc/cpuinfo").unwrap_or_default();
    kvm_kind_in(&root, hypervisor_in(&root, &cpuinfo).is_some())
}

/// [`kvm_kind`] under `root`, with hypervisor presence already known.
///
/// Opening is the real test (permissions, a device node without a loaded module). Errors other
/// than "missing" or "no permission" also count as "denied": KVM is there but unusable.
pub fn kvm_kind_in(root: &HostRoot, hypervisor_present: bool) -> &'static str {
    use std::os::unix::fs::OpenOptionsExt;
    let opened =
        std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(root.path("/dev/kvm"));
    match opened {
        Ok(_) if hypervisor_present => "nested",
        Ok(_) => "hardware",
        Err(e) if e.kind() == io::ErrorKind::NotFound => "absent",
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENODEV)) => "absent",
        Err(_) => "denied",
    }
}

/// Everything that tells the kernel's preemption model, gathered so [`preempt_model`] stays pure.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreemptEvidence<'a> {
    /// `/sys/kernel/realtime` ("1" on PREEMPT_RT kernels).
    pub realtime: Option<&'a str>,
    /// The uname version string, e.g. "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1".
    pub uname_version: &'a str,
    /// `/sys/kernel/debug/sched/preempt`, e.g. "none voluntary (full) lazy" (needs debugfs).
    pub debugfs: Option<&'a str>,
    /// `/proc/cmdline`, for `preempt=`.
    pub cmdline: &'a str,
    /// The model the kernel logged at boot ("Dynamic Preempt: voluntary"), if still in the log.
    pub boot_log: Option<&'a str>,
    /// The kernel configuration (`/boot/config-<release>`), if present.
    pub kconfig: Option<&'a str>,
}

/// Decides the preemption model: one of none, voluntary, full, dynamic, rt, unknown.
///
/// The uname version carries exactly one of `PREEMPT_RT`, `PREEMPT_DYNAMIC` or `PREEMPT` (full;
/// lazy kernels too) and nothing for none/voluntary. A dynamic kernel's active model comes from
/// debugfs, else `preempt=` on the command line, else the boot log, else the configured default;
/// "dynamic" if none of these is available. "lazy" is reported as "full": it preempts immediately
/// for real-time tasks and only defers for normal ones.
pub fn preempt_model(e: &PreemptEvidence<'_>) -> &'static str {
    if e.realtime.map(str::trim) == Some("1") {
        return "rt";
    }
    let tokens: Vec<&str> = e.uname_version.split_whitespace().collect();
    if tokens.contains(&"PREEMPT_RT") {
        return "rt";
    }
    if tokens.contains(&"PREEMPT_DYNAMIC") {
        return e
            .debugfs
            .and_then(debugfs_active_model)
            .or_else(|| cmdline_preempt(e.cmdline))
            .or_else(|| e.boot_log.and_then(model_name))
            .or_else(|| e.kconfig.and_then(kconfig_model))
            .unwrap_or("dynamic");
    }
    if tokens.contains(&"PREEMPT") || tokens.contains(&"PREEMPT_LAZY") {
        return "full";
    }
    e.kconfig.and_then(kconfig_model).unwrap_or("unknown")
}

fn model_name(name: &str) -> Option<&'static str> {
    match name.trim() {
        "none" => Some("none"),
        "voluntary" => Some("voluntary"),
        "full" | "lazy" => Some("full"),
        _ => None,
    }
}

/// The parenthesised entry of `/sys/kernel/debug/sched/preempt`.
fn debugfs_active_model(text: &str) -> Option<&'static str> {
    text.split_whitespace().find_map(|t| t.strip_prefix('(').and_then(|t| t.strip_suffix(')'))).and_then(model_name)
}

fn cmdline_preempt(cmdline: &str) -> Option<&'static str> {
    cmdline
        .split_whitespace()
        .take_while(|t| *t != "--")
        .filter_map(|t| t.strip_prefix("preempt="))
        .last()
        .and_then(model_name)
}

fn kconfig_model(config: &str) -> Option<&'static str> {
    let set = |name: &str| config.lines().any(|l| l.trim() == format!("{name}=y"));
    if set("CONFIG_PREEMPT_RT") {
        Some("rt")
    } else if set("CONFIG_PREEMPT") || set("CONFIG_PREEMPT_LAZY") {
        Some("full")
    } else if set("CONFIG_PREEMPT_VOLUNTARY") {
        Some("voluntary")
    } else if set("CONFIG_PREEMPT_NONE") {
        Some("none")
    } else {
        None
    }
}

/// [`preempt_model`] with evidence read from `root` (the kernel log and `/boot` only when needed).
pub fn preempt_model_in(root: &HostRoot) -> &'static str {
    let realtime = root.read("/sys/kernel/realtime").ok();
    let version = match root.read_trimmed("/proc/sys/kernel/version") {
        Ok(v) => v,
        Err(_) if root.is_system() => uname().map(|(_, v)| v).unwrap_or_default(),
        Err(_) => String::new(),
    };
    let debugfs = root.read("/sys/kernel/debug/sched/preempt").ok();
    let cmdline = root.read("/proc/cmdline").unwrap_or_default();
    let tokens: Vec<&str> = version.split_whitespace().collect();
    let resolved = realtime.as_deref().map(str::trim) == Some("1")
        || tokens.iter().any(|t| matches!(*t, "PREEMPT_RT" | "PREEMPT" | "PREEMPT_LAZY"));
    let needs_more = !resolved && debugfs.is_none() && cmdline_preempt(&cmdline).is_none();
    let boot_log = if needs_more && tokens.contains(&"PREEMPT_DYNAMIC") {
        root.kernel_log().ok().and_then(|log| {
            log.iter().rev().find_map(|m| m.strip_prefix("Dynamic Preempt: ").map(|s| s.trim().to_string()))
        })
    } else {
        None
    };
    let kconfig = if needs_more && boot_log.is_none() {
        let release = root
            .read_trimmed("/proc/sys/kernel/osrelease")
            .ok()
            .or_else(|| if root.is_system() { uname().map(|(r, _)| r) } else { None });
        release.and_then(|r| root.read(&format!("/boot/config-{r}")).ok())
    } else {
        None
    };
    preempt_model(&PreemptEvidence {
        realtime: realtime.as_deref(),
        uname_version: &version,
        debugfs: debugfs.as_deref(),
        cmdline: &cmdline,
        boot_log: boot_log.as_deref(),
        kconfig: kconfig.as_deref(),
    })
}

/// This machine's host name; "unknown" where the kernel does not say.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(version: &str) -> &'static str {
        preempt_model(&PreemptEvidence { uname_version: version, ..PreemptEvidence::default() })
    }

    #[test]
    fn preempt_model_from_uname_strings() {
        assert_eq!(model("#1 SMP PREEMPT_RT Debian 6.1.76-1 (2024-02-01)"), "rt");
        assert_eq!(model("#1 SMP PREEMPT Debian 6.1.76-1"), "full");
        assert_eq!(model("#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1"), "dynamic");
        assert_eq!(model("#1 SMP PREEMPT_DYNAMIC @0"), "dynamic");
        assert_eq!(model("#1 SMP Debian 6.1.76-1"), "unknown");
        assert_eq!(model("#1 SMP PREEMPT_LAZY"), "full");
        // A host name or distro tag containing the word must not fool the token match.
        assert_eq!(model("#1 SMP NOPREEMPT_RTX"), "unknown");
    }

    #[test]
    fn preempt_model_uses_the_best_available_evidence() {
        let dynamic = "#1 SMP PREEMPT_DYNAMIC";
        let rt = PreemptEvidence { realtime: Some("1\n"), uname_version: dynamic, ..Default::default() };
        assert_eq!(preempt_model(&rt), "rt");
        let debugfs = PreemptEvidence {
            uname_version: dynamic,
            debugfs: Some("none voluntary (full) lazy\n"),
            cmdline: "preempt=none",
            ..Default::default()
        };
        assert_eq!(preempt_model(&debugfs), "full");
        let lazy = PreemptEvidence { debugfs: Some("none voluntary full (lazy)\n"), ..debugfs };
        assert_eq!(preempt_model(&lazy), "full");
        let cmdline = PreemptEvidence {
            uname_version: dynamic,
            cmdline: "quiet preempt=voluntary",
            boot_log: Some("none"),
            ..Default::default()
        };
        assert_eq!(preempt_model(&cmdline), "voluntary");
        let boot = PreemptEvidence { uname_version: dynamic, boot_log: Some("none"), ..Default::default() };
        assert_eq!(preempt_model(&boot), "none");
        let config = PreemptEvidence {
            uname_version: "#1 SMP",
            kconfig: Some("CONFIG_PREEMPT_BUILD=y\n# CONFIG_PREEMPT is not set\nCONFIG_PREEMPT_VOLUNTARY=y\n"),
            ..Default::default()
        };
        assert_eq!(preempt_model(&config), "voluntary");
    }

    #[test]
    fn steal_from_proc_stat() {
        let a = CpuTimes::parse_proc_stat(
            "cpu  1298 0 1274 49420 272 0 29 12 0 0\ncpu0 384 0 433 25332 7 0 4 2 0 0\nintr 1 2\n",
        )
        .unwrap();
        assert_eq!(a.steal, 12);
        assert_eq!(a.total(), 1298 + 1274 + 49420 + 272 + 29 + 12);
        let b = CpuTimes::parse_proc_stat("cpu  1348 0 1274 49420 272 0 29 62 100 0\n").unwrap();
        // 100 jiffies elapsed (50 user, 50 steal); guest time is already in user.
        assert_eq!(steal_percent(&a, &b), Some(50.0));
        assert_eq!(steal_percent(&a, &a), None);
        assert_eq!(steal_percent(&b, &a), None);
        // Old kernels: four columns only.
        let old = CpuTimes::parse_proc_stat("cpu 1 2 3 4\n").unwrap();
        assert_eq!(old.steal, 0);
        assert!(CpuTimes::parse_proc_stat("cpu0 1 2 3 4\n").is_none());
        assert!(CpuTimes::parse_proc_stat("cpu 1 x 3 4\n").is_none());
        assert!(CpuTimes::parse_proc_stat("cpu 1 2\n").is_none());
        let cpu0 = CpuTimes::parse_proc_stat_cpu("cpu  1 2 3 4\ncpu0 384 0 433 25332 7 0 4 2 0 0\n", 0).unwrap();
        assert_eq!(cpu0.user, 384);
        assert!(CpuTimes::parse_proc_stat_cpu("cpu  1 2 3 4\n", 1).is_none());
        let later = CpuTimes { user: cpu0.user + 30, idle: cpu0.idle + 60, iowait: cpu0.iowait + 10, ..cpu0 };
        assert_eq!(busy_percent(&cpu0, &later), Some(30.0));
        assert_eq!(busy_percent(&cpu0, &cpu0), None);
    }

    #[test]
    fn hypervisor_names() {
        assert_eq!(hypervisor_name("KVMKVMKVM"), "KVM");
        assert_eq!(hypervisor_name("Microsoft Hv"), "Hyper-V");
        assert_eq!(hypervisor_name("VMwareVMware"), "VMware");
        assert_eq!(hypervisor_name("XenVMMXenVMM"), "Xen");
        assert_eq!(hypervisor_name("SomethingElse"), "SomethingElse");
    }

    fn write(base: &std::path::Path, rel: &str, text: &str) {
        let p = base.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn collect_from_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path();
        write(
            b,
            "proc/cpuinfo",
            "processor\t: 0\nmodel name\t: Test CPU 3000\nflags\t\t: fpu tsc hypervisor\n\nprocessor\t: 1\n",
        );
        write(b, "sys/devices/system/cpu/online", "0-3\n");
        write(b, "sys/devices/system/cpu/isolated", "2-3\n");
        write(b, "proc/sys/kernel/osrelease", "6.1.0-18-rt-amd64\n");
        write(b, "proc/sys/kernel/version", "#1 SMP PREEMPT_RT Debian 6.1.76-1\n");
        write(b, "proc/cmdline", "BOOT_IMAGE=/vmlinuz isolcpus=2-3\n");
        write(b, "sys/hypervisor/type", "xen\n");
        let root = HostRoot::at(b);
        let f = HostFacts::collect_from(&root, Some(3_000_000));
        assert_eq!(f.cpu_model, "Test CPU 3000");
        assert_eq!(f.cpus, 4);
        assert_eq!(f.tsc_khz, Some(3_000_000));
        assert_eq!(f.kernel, "6.1.0-18-rt-amd64 #1 SMP PREEMPT_RT Debian 6.1.76-1");
        assert_eq!(f.preempt, "rt");
        assert_eq!(f.cmdline, "BOOT_IMAGE=/vmlinuz isolcpus=2-3");
        assert_eq!(f.isolated_cpus, vec![2, 3]);
        assert_eq!(f.hypervisor.as_deref(), Some("Xen"));
        assert_eq!(f.steal_pct, None);
        assert_eq!(f.kvm, "absent");

        write(b, "dev/kvm", "");
        assert_eq!(kvm_kind_in(&root, true), "nested");
        assert_eq!(kvm_kind_in(&root, false), "hardware");

        let empty = tempfile::tempdir().unwrap();
        let f = HostFacts::collect_from(&HostRoot::at(empty.path()), None);
        assert_eq!(f.cpu_model, "unknown");
        assert_eq!(f.preempt, "unknown");
        assert_eq!(f.kernel, "unknown");
        assert!(f.hypervisor.is_none());
    }

    #[test]
    fn fixture_steal_sampler_without_progress_gives_none() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "proc/stat", "cpu  1 0 1 10 0 0 0 0 0 0\n");
        let s = StealSampler::start_in(&HostRoot::at(dir.path()));
        assert_eq!(s.finish(), None);
        write(dir.path(), "proc/stat", "cpu  1 0 1 16 0 0 0 4 0 0\n");
        assert_eq!(s.finish(), Some(40.0));
    }

    #[test]
    fn live_facts_have_the_schema_shape() {
        let f = HostFacts::collect(None);
        assert!(f.cpus >= 1);
        assert!(["none", "voluntary", "full", "dynamic", "rt", "unknown"].contains(&f.preempt.as_str()));
        assert!(["hardware", "nested", "absent", "denied"].contains(&f.kvm.as_str()));
        assert!(!f.kernel.is_empty());
        if f.hypervisor.is_some() {
            assert_ne!(f.kvm, "hardware");
        }
        let s = StealSampler::start();
        std::thread::sleep(std::time::Duration::from_millis(30));
        if let Some(p) = s.finish() {
            assert!((0.0..=100.0).contains(&p));
        }
    }
}
