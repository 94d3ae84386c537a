//! Per-vCPU statistics through KVM's binary statistics interface (`KVM_GET_STATS_FD`): exit counts by
//! reason without tracing. Read from the supervisor while the vCPU runs.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

/// `_IO(KVMIO, 0xce)`.
const KVM_GET_STATS_FD: libc::c_ulong = 0xAECE;

/// One counter: where its value lives in the stats file.
#[derive(Debug, Clone)]
struct Desc {
    name: String,
    /// Byte offset of the value in the file.
    offset: u64,
}

/// An open statistics file of one vCPU.
pub struct VcpuStats {
    file: File,
    descs: Vec<Desc>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

impl VcpuStats {
    /// Opens the statistics of the vCPU whose file descriptor is `vcpu_fd`.
    pub fn open(vcpu_fd: &impl AsRawFd) -> std::io::Result<VcpuStats> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new file descriptor or -1.
        let fd = unsafe { libc::ioctl(vcpu_fd.as_raw_fd(), KVM_GET_STATS_FD, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor the kernel gave us.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let mut header = [0u8; 24];
        file.read_exact_at(&mut header, 0)?;
        let bad = || std::io::Error::other("malformed KVM statistics header");
        let name_size = u32_at(&header, 4).ok_or_else(bad)? as usize;
        let num_desc = u32_at(&header, 8).ok_or_else(bad)? as usize;
        let desc_offset = u32_at(&header, 16).ok_or_else(bad)? as u64;
        let data_offset = u32_at(&header, 20).ok_or_else(bad)? as u64;
        if name_size > 4096 || num_desc > 100_000 {
            return Err(bad());
        }
        let desc_size = 16 + name_size;
        let mut raw = vec![0u8; desc_size * num_desc];
        file.read_exact_at(&mut raw, desc_offset)?;
        let mut descs = Vec::new();
        for d in raw.chunks_exact(desc_size) {
            let size = u16::from_le_bytes([d[6], d[7]]);
            let offset = u32_at(d, 8).ok_or_else(bad)? as u64;
            let name_bytes = &d[16..];
            let end = name_bytes.iter().position(|&b| b == 0).unwrap_or(name_bytes.len());
            let name = String::from_utf8_lossy(&name_bytes[..end]).into_owned();
            if size == 1 {
                descs.push(Desc { name, offset: data_offset + offset });
            }
        }
        Ok(VcpuStats { file, descs })
    }

    /// Current values of every single-value counter, by name.
    pub fn read(&self) -> std::io::Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        let mut v = [0u8; 8];
        for d in &self.descs {
            self.file.read_exact_at(&mut v, d.offset)?;
            out.insert(d.name.clone(), u64::from_le_bytes(v));
        }
        Ok(out)
    }

    /// Exit counters only (`exits`, `io_exits`, `mmio_exits`, `halt_exits`, `irq_exits`, `signal_exits`, ...).
    pub fn exits(&self) -> std::io::Result<BTreeMap<String, u64>> {
        Ok(self.read()?.into_iter().filter(|(k, _)| k.ends_with("exits")).collect())
    }
}

/// Difference of two exit snapshots (after - before), by reason; reasons that did not change are left out.
pub fn exit_delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, &a)| {
            let d = a.saturating_sub(*before.get(k).unwrap_or(&0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}
