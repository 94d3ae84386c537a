//! The monitor/payload contract. Payloads run in 64-bit ring 3, identity-mapped. A hypercall is a 32-bit
//! write of its argument to `hypercall_gpa(n)`: no memory is there, so the write is an MMIO exit that the
//! monitor decodes. (Port I/O from ring 3 with IOPL=3 is not usable everywhere: KVM's PVM flavour, used
//! for nested guests, raises #GP for it. An MMIO write exits on every KVM.)
//!
//! Guest physical memory:
//!
//! | GPA                      | what                                                        | guest access |
//! |--------------------------|-------------------------------------------------------------|--------------|
//! | `0x0000..0x1000`         | unused                                                      | -            |
//! | `BOOT_INFO_GPA` (0x1000) | [`BootInfo`]                                                | read         |
//! | `MSG_GPA` (0x2000)       | message buffer for log / panic text (`MSG_SIZE` bytes)      | read-write   |
//! | `0x3000..0x10000`        | GDT, TSS, IDT, page tables (the monitor's pages)            | -            |
//! | `PAYLOAD_BASE` (1 MiB).. | payload ELF segments, then the stack, up to the RAM size    | read-write   |
//! | `REGION_GPA` (1 GiB)..   | the shared channel region                                   | per channel  |
//!
//! Any access outside guest RAM and the region is an MMIO exit, which the monitor reports as a fault.

/// Guest physical address of the boot-info page.
pub const BOOT_INFO_GPA: u64 = 0x1000;
/// Guest physical address of the message buffer (log and panic text).
pub const MSG_GPA: u64 = 0x2000;
/// Bytes of the message buffer.
pub const MSG_SIZE: usize = 4096;
/// End of the monitor's pages: no payload segment may start below this.
pub const MONITOR_END: u64 = 0x10_0000;
/// Where payloads are linked (their linker script's base).
pub const PAYLOAD_BASE: u64 = 0x10_0000;
/// Guest physical address of the shared channel region.
pub const REGION_GPA: u64 = 0x4000_0000;
/// Default guest RAM.
pub const DEFAULT_RAM: u64 = 2 << 20;
/// Stack the monitor reserves at the top of RAM (its lowest page is the unmapped guard page); payload
/// segments must end below it. 256 KiB: a C payload's `rtcell_com_open` builds its context (eight
/// channels with their table copies, about 67 KiB) on the stack before it is stored.
pub const STACK_SIZE: u64 = 256 << 10;

/// `BootInfo::magic`: "RTCBOOT1".
pub const BOOT_MAGIC: u64 = u64::from_le_bytes(*b"RTCBOOT1");
/// `BootInfo::version`.
pub const BOOT_VERSION: u32 = 1;
/// Bytes of `BootInfo::args`.
pub const ARGS_SIZE: usize = 3072;

/// Base of the hypercall window: unbacked guest physical addresses, mapped user-writable by the page tables.
pub const HYPERCALL_GPA: u64 = 0x3F00_0000;

/// Where to write (32 bits) to make hypercall `n`.
pub const fn hypercall_gpa(n: u16) -> u64 {
    HYPERCALL_GPA + 8 * n as u64
}

/// Hypercall: log the `value` bytes of text at `MSG_GPA`.
pub const HC_LOG: u16 = 0x10;
/// Hypercall: the payload is done; `value` is its exit code. The vCPU does not run again.
pub const HC_DONE: u16 = 0x11;
/// Hypercall: the payload panicked; `value` bytes of message at `MSG_GPA`. The vCPU does not run again.
pub const HC_PANIC: u16 = 0x12;
/// Hypercall from the exception handlers: `value` = vector; [`FaultInfo`] at `MSG_GPA`.
pub const HC_FAULT: u16 = 0x13;
/// Hypercall: pause for `value` ns. The monitor sleeps before it enters the guest again, giving the CPU
/// back to the host (e.g. the real-time throttling budget a busy-polling vCPU thread would exhaust).
pub const HC_SLEEP: u16 = 0x14;

/// The boot-info page, like Jailhouse's comm region: what the payload needs to know about its cell.
/// Written by the monitor before the vCPU starts; read-only to the payload.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BootInfo {
    pub magic: u64,
    pub version: u32,
    /// Bytes of this struct, so a payload can refuse a monitor of another layout.
    pub size: u32,
    /// TSC frequency (kHz) as the monitor calibrated it; the guest TSC runs at the same rate.
    pub tsc_khz: u64,
    /// The host CPU the vCPU is pinned to.
    pub cell_cpu: u32,
    pub flags: u32,
    pub region_gpa: u64,
    pub region_size: u64,
    pub ram_size: u64,
    /// Top of the stack: the end of RAM. The vCPU starts with RSP 8 below it, as if `_start` had been called.
    pub stack_top: u64,
    pub msg_gpa: u64,
    pub msg_size: u64,
    /// Bytes used in `args`.
    pub args_len: u32,
    pub reserved: u32,
    /// Payload arguments: UTF-8 `key=value` lines (e.g. `cell=echo-kvm`, `rx=m2c`, `tx=c2m`).
    pub args: [u8; ARGS_SIZE],
}

impl BootInfo {
    /// The arguments as text (empty if the monitor wrote invalid UTF-8 or a bad length).
    pub fn args(&self) -> &str {
        let n = (self.args_len as usize).min(ARGS_SIZE);
        core::str::from_utf8(&self.args[..n]).unwrap_or("")
    }

    /// The value of argument `key`, if given.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args().lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
    }
}

/// What an exception handler reports through `HC_FAULT` (written at `MSG_GPA`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct FaultInfo {
    pub vector: u64,
    pub error_code: u64,
    pub rip: u64,
    pub rsp: u64,
    /// CR2 for a page fault (the faulting address), else 0.
    pub cr2: u64,
}

/// Name of an x86 exception vector.
pub fn vector_name(v: u64) -> &'static str {
    match v {
        0 => "divide error (#DE)",
        1 => "debug (#DB)",
        2 => "NMI",
        3 => "breakpoint (#BP)",
        4 => "overflow (#OF)",
        5 => "bound range (#BR)",
        6 => "invalid opcode (#UD)",
        7 => "device not available (#NM)",
        8 => "double fault (#DF)",
        10 => "invalid TSS (#TS)",
        11 => "segment not present (#NP)",
        12 => "stack fault (#SS)",
        13 => "general protection (#GP)",
        14 => "page fault (#PF)",
        16 => "x87 floating point (#MF)",
        17 => "alignment check (#AC)",
        18 => "machine check (#MC)",
        19 => "SIMD floating point (#XM)",
        _ => "exception",
    }
}
