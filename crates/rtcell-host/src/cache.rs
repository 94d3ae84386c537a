//! The CPU caches of one CPU, as the kernel describes them in
//! `/sys/devices/system/cpu/cpuN/cache/index*/{level,type,size,shared_cpu_list}`.
//!
//! Under a hypervisor these are what its CPUID tells the guest, which usually matches the physical parts
//! but says nothing about how many other guests share the last level.

use crate::cpu::parse_cpu_list;
use crate::root::{HostRoot, ReadError};

/// One cache the CPU can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    /// 1, 2, 3, ...
    pub level: u32,
    /// What it holds, as sysfs says: `Data`, `Instruction` or `Unified`.
    pub kind: String,
    pub size_bytes: u64,
    /// CPUs sharing this cache (the CPU itself included); empty when sysfs does not say.
    pub shared_with: Vec<usize>,
}

impl Cache {
    /// Short name: `L1d`, `L1i`, `L2`, `L3` (a split level gets a `d` / `i` suffix).
    pub fn name(&self) -> String {
        match self.kind.as_str() {
            "Data" => format!("L{}d", self.level),
            "Instruction" => format!("L{}i", self.level),
            _ => format!("L{}", self.level),
        }
    }

    /// Whether data reads go through it (data and unified caches).
    pub fn holds_data(&self) -> bool {
        self.kind != "Instruction"
    }
}

/// The caches of `cpu`, by level (instruction before data within a level, as sysfs numbers them).
/// A CPU without a `cache` directory (some virtual machines) has none: `Ok(vec![])`.
pub fn caches_of(root: &HostRoot, cpu: usize) -> Result<Vec<Cache>, ReadError> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cache");
    let entries = match root.list_subdirs(&dir) {
        Ok(e) => e,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut caches = Vec::new();
    for entry in entries.iter().filter(|e| e.starts_with("index")) {
        let path = |f: &str| format!("{dir}/{entry}/{f}");
        let level_text = root.read_trimmed(&path("level"))?;
        let level = level_text
            .parse::<u32>()
            .map_err(|_| ReadError::invalid(path("level"), format!("expected a level number, found {level_text:?}")))?;
        let kind = root.read_trimmed(&path("type"))?;
        let size_text = root.read_trimmed(&path("size"))?;
        let size_bytes = parse_size(&size_text).ok_or_else(|| {
            ReadError::invalid(path("size"), format!("expected a size like 48K, found {size_text:?}"))
        })?;
        let shared_with = match root.read_optional(&path("shared_cpu_list"))? {
            Some(list) => parse_cpu_list(list.trim()).unwrap_or_default(),
            None => Vec::new(),
        };
        caches.push(Cache { level, kind, size_bytes, shared_with });
    }
    caches.sort_by_key(|c| (c.level, c.kind != "Instruction"));
    Ok(caches)
}

/// A sysfs cache size: a number with an optional `K`, `M` or `G` suffix (powers of 1024).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, scale) = match text.char_indices().last()? {
        (i, 'K') => (&text[..i], 1 << 10),
        (i, 'M') => (&text[..i], 1 << 20),
        (i, 'G') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// The name of the smallest data cache of `caches` that holds `bytes`, or `DRAM` when none does.
pub fn level_holding(caches: &[Cache], bytes: u64) -> String {
    caches
        .iter()
        .filter(|c| c.holds_data() && c.size_bytes >= bytes)
        .min_by_key(|c| (c.size_bytes, c.level))
        .map_or_else(|| "DRAM".to_string(), Cache::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(dir: &std::path::Path, cpu: usize, index: usize, level: &str, kind: &str, size: &str) {
        let d = dir.join(format!("sys/devices/system/cpu/cpu{cpu}/cache/index{index}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("level"), format!("{level}\n")).unwrap();
        std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
        std::fs::write(d.join("size"), format!("{size}\n")).unwrap();
        std::fs::write(d.join("shared_cpu_list"), "1\n").unwrap();
    }

    #[test]
    fn reads_the_caches_of_a_cpu_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path(), 1, 0, "1", "Data", "48K");
        fixture(dir.path(), 1, 1, "1", "Instruction", "32K");
        fixture(dir.path(), 1, 2, "2", "Unified", "1024K");
        fixture(dir.path(), 1, 3, "3", "Unified", "32768K");
        let caches = caches_of(&HostRoot::at(dir.path()), 1).unwrap();
        let names: Vec<String> = caches.iter().map(Cache::name).collect();
        assert_eq!(names, ["L1i", "L1d", "L2", "L3"]);
        assert_eq!(caches[1].size_bytes, 48 << 10);
        assert_eq!(caches[3].size_bytes, 32 << 20);
        assert_eq!(caches[3].shared_with, [1]);
        assert_eq!(level_holding(&caches, 1024), "L1d");
        assert_eq!(level_holding(&caches, 48 << 10), "L1d");
        assert_eq!(level_holding(&caches, (48 << 10) + 64), "L2");
        assert_eq!(level_holding(&caches, 4 << 20), "L3");
        assert_eq!(level_holding(&caches, 64 << 20), "DRAM");
    }

    #[test]
    fn a_cpu_without_cache_information_has_no_caches() {
        let dir = tempfile::tempdir().unwrap();
        assert!(caches_of(&HostRoot::at(dir.path()), 0).unwrap().is_empty());
        assert_eq!(level_holding(&[], 1024), "DRAM");
    }

    #[test]
    fn malformed_sizes_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path(), 0, 0, "1", "Data", "lots");
        let e = caches_of(&HostRoot::at(dir.path()), 0).unwrap_err();
        assert_eq!(e.path, "/sys/devices/system/cpu/cpu0/cache/index0/size");
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("48K"), Some(48 * 1024));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("x1K"), None);
    }

    #[test]
    fn the_live_system_is_readable() {
        // Whatever this machine has (possibly nothing under a hypervisor), reading must not fail.
        let caches = caches_of(&HostRoot::system(), 0).unwrap();
        for c in caches {
            assert!(c.level >= 1 && c.size_bytes > 0, "{c:?}");
        }
    }
}
