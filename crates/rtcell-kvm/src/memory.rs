//! Guest memory: the VM's RAM and the channel region, as KVM memory slots.
//!
//! Guest RAM is an anonymous mapping private to the VM (slot 0, from guest address 0), holding the
//! monitor's pages, the boot info and the payload. The channel region is the very memfd mapping the host
//! side uses, given to the guest as slots at `REGION_GPA`. Design: the guest gets write access only to
//! the channels it writes; the header and the channels it only reads are read-only slots (when the layout
//! is page-aligned and KVM supports read-only memory), so a stray guest write is a VM exit the monitor
//! reports, never a corrupted channel. Execute-disable for data and for the region comes from the page
//! tables `layout` builds.

use std::sync::Arc;

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;
use rtcell_guest::abi::{BootInfo, REGION_GPA};
use rtcell_host::peer_text::peer_str;
use rtcell_shm::RegionView;
use rtcell_shm::mapping::SharedMemory;

use crate::elf::Image;
use crate::error::{KvmError, setup_err};
use crate::layout;

const KVM_MEM_READONLY: u32 = 2;
const PAGE: u64 = 4096;

/// Guest RAM: an anonymous mapping, unmapped on drop.
pub(crate) struct GuestRam {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by exactly one GuestRam and only moves with it (into the vCPU thread).
unsafe impl Send for GuestRam {}

impl GuestRam {
    pub(crate) fn new(len: usize) -> std::io::Result<GuestRam> {
        // SAFETY: anonymous private mapping; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(GuestRam { ptr: p as *mut u8, len })
    }

    /// Locks the mapping into memory (`mlock`).
    pub(crate) fn lock(&self) -> std::io::Result<()> {
        // SAFETY: locking our own mapping.
        if unsafe { libc::mlock(self.ptr as *const libc::c_void, self.len) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.len as u64
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is len bytes, readable and writable, and exclusively ours.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub(crate) fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let start = (gpa as usize).min(self.len);
        let end = start.saturating_add(len).min(self.len);
        // SAFETY: the range is clamped to the mapping; the guest may be writing it concurrently only while
        // the vCPU runs, and we read it only while the vCPU is stopped in an exit.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) }.to_vec()
    }

    /// Writes the monitor's pages (page tables with code executable and only data writable, GDT, IDT),
    /// the boot info and the payload's segments.
    pub(crate) fn load(&mut self, image: &Image, payload: &[u8], region_len: u64, handlers: bool, boot: &BootInfo) {
        let bytes = self.bytes();
        let exec: Vec<std::ops::Range<u64>> =
            image.segments.iter().filter(|s| s.executable).map(|s| s.gpa..s.gpa + s.mem_size).collect();
        let data: Vec<std::ops::Range<u64>> =
            image.segments.iter().filter(|s| s.writable).map(|s| s.gpa..s.gpa + s.mem_size).collect();
        layout::build(bytes, region_len, handlers, &exec, &data);
        layout::write_boot_info(bytes, boot);
        image.load(payload, bytes);
    }

    /// Gives the RAM to the VM as slot 0, from guest address 0. The RAM must outlive the VM.
    pub(crate) fn map_into(&self, vm: &VmFd) -> Result<(), KvmError> {
        let slot0 = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: self.len as u64,
            userspace_addr: self.ptr as u64,
        };
        // SAFETY: the RAM mapping outlives the VM: both move into `Machine`, where the VM drops first.
        unsafe { vm.set_user_memory_region(slot0) }.map_err(setup_err("guest RAM memory slot"))
    }
}

impl Drop for GuestRam {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly our mapping; KVM's memory slot died with the VM fd before this.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// The channel region as the guest sees it: the mapping (kept alive as long as the VM) and its
/// read-only page runs.
pub(crate) struct GuestRegion {
    pub(crate) shm: Arc<SharedMemory>,
    /// Read-only page runs of the region, for messages: (gpa start, gpa end).
    readonly: Vec<(u64, u64)>,
}

impl GuestRegion {
    /// Maps `shm` into the VM at `REGION_GPA` (slots 1 and up), page runs read-only where the guest must
    /// not write: every page but those of the `writable` channels. Where that cannot be done
    /// (`readonly_ok` false, or a layout that is not page-aligned) the whole region is writable and a
    /// warning about cell `cell` says so.
    pub(crate) fn map(
        vm: &VmFd,
        shm: &Arc<SharedMemory>,
        readonly_ok: bool,
        writable: &[String],
        cell: &str,
        warnings: &mut Vec<String>,
    ) -> Result<GuestRegion, KvmError> {
        let runs = match region_runs(shm, writable) {
            Some(r) if readonly_ok => r,
            Some(_) => {
                warnings.push(format!(
                    "cell {cell:?}: KVM lacks read-only memory; the whole region is writable by the guest"
                ));
                vec![(0, shm.len() as u64, false)]
            }
            None => {
                warnings.push(format!(
                    "cell {cell:?}: region channels are not page-aligned; the whole region is writable by the guest"
                ));
                vec![(0, shm.len() as u64, false)]
            }
        };
        let mut readonly = Vec::new();
        for (i, &(off, len, ro)) in runs.iter().enumerate() {
            let slot = kvm_userspace_memory_region {
                slot: 1 + i as u32,
                flags: if ro { KVM_MEM_READONLY } else { 0 },
                guest_phys_addr: REGION_GPA + off,
                memory_size: len,
                // SAFETY (pointer arithmetic): off + len lies within the region mapping.
                userspace_addr: shm.as_ptr() as u64 + off,
            };
            // SAFETY: the region mapping is kept alive by the Arc in `Machine` for as long as the VM.
            unsafe { vm.set_user_memory_region(slot) }.map_err(setup_err("region memory slot"))?;
            if ro {
                readonly.push((REGION_GPA + off, REGION_GPA + off + len));
            }
        }
        Ok(GuestRegion { shm: Arc::clone(shm), readonly })
    }

    /// What a guest access to `addr` that KVM could not satisfy (an MMIO exit) touched: a read-only
    /// channel, the region header, or nothing at all.
    pub(crate) fn describe_access(&self, addr: u64, what: &str) -> String {
        if let Some(&(a, b)) = self.readonly.iter().find(|&&(a, b)| addr >= a && addr < b) {
            let off = addr - REGION_GPA;
            let chan = RegionView::attach(self.shm.words()).ok().and_then(|v| {
                (0..v.len())
                    .filter_map(|i| v.entry(i).ok())
                    .find(|e| (e.offset as u64..(e.offset + e.size) as u64).contains(&off))
                    .map(|e| peer_str(e.name(), 64))
            });
            return match chan {
                Some(c) => {
                    format!("{what} to read-only channel {c:?} at guest address {addr:#x} (the guest may only read it)")
                }
                None => {
                    format!("{what} to the read-only region header at guest address {addr:#x} (pages {a:#x}..{b:#x})")
                }
            };
        }
        format!("{what} outside its memory at guest address {addr:#x} (neither RAM nor the channel region)")
    }
}

/// Page runs of the region with their access for the guest: (offset, len, read_only). `None` when the
/// layout is not page-aligned (then the whole region is writable).
fn region_runs(region: &SharedMemory, writable: &[String]) -> Option<Vec<(u64, u64, bool)>> {
    let view = RegionView::attach(region.words()).ok()?;
    let pages = (region.len() as u64).div_ceil(PAGE);
    let mut ro = vec![true; pages as usize];
    for i in 0..view.len() {
        let e = view.entry(i).ok()?;
        if e.offset as u64 % PAGE != 0 {
            return None;
        }
        if writable.iter().any(|w| w == e.name()) {
            let first = e.offset as u64 / PAGE;
            let last = (e.offset + e.size) as u64;
            for p in first..last.div_ceil(PAGE) {
                ro[p as usize] = false;
            }
        }
    }
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    for (p, &r) in ro.iter().enumerate() {
        match runs.last_mut() {
            Some(last) if last.2 == r => last.1 += PAGE,
            _ => runs.push((p as u64 * PAGE, PAGE, r)),
        }
    }
    Some(runs)
}
