//! The monitor's pages in guest RAM: boot info, GDT and TSS, IDT with exception stubs, page tables.
//! Everything the vCPU needs to start in 64-bit ring 3 without running a line of boot code.

use rtcell_guest::abi::{
    ARGS_SIZE, BOOT_INFO_GPA, BOOT_MAGIC, BOOT_VERSION, BootInfo, HC_FAULT, MSG_GPA, MSG_SIZE, REGION_GPA, STACK_SIZE,
    hypercall_gpa,
};

pub const GDT_GPA: u64 = 0x3000;
pub const TSS_GPA: u64 = 0x3800;
pub const IDT_GPA: u64 = 0x4000;
pub const STUBS_GPA: u64 = 0x5000;
/// Ring-0 stack for exception handlers (grows down from 0x8000).
pub const RING0_STACK_TOP: u64 = 0x8000;
pub const PML4_GPA: u64 = 0x8000;
pub const PDPT_GPA: u64 = 0x9000;
pub const PD0_GPA: u64 = 0xA000;
pub const PT0_GPA: u64 = 0xB000;
pub const PD1_GPA: u64 = 0xC000;
/// Page table of the last 2 MiB of RAM when RAM is larger than 2 MiB (4 KiB pages for the stack guard).
pub const PT_TOP_GPA: u64 = 0xD000;

pub const SEL_KERNEL_CODE: u16 = 0x08;
pub const SEL_USER_DATA: u16 = 0x18 | 3;
pub const SEL_USER_CODE: u16 = 0x20 | 3;
pub const SEL_TSS: u16 = 0x28;
pub const GDT_LIMIT: u16 = 7 * 8 - 1;
pub const TSS_LIMIT: u32 = 0x67;
pub const IDT_LIMIT: u16 = 256 * 16 - 1;

const PTE_P: u64 = 1;
const PTE_W: u64 = 2;
const PTE_U: u64 = 4;
const PTE_PS: u64 = 0x80;
/// Execute-disable (needs EFER.NXE).
const PTE_NX: u64 = 1 << 63;
const TWO_MIB: u64 = 2 << 20;
/// Exception vectors that push an error code.
const HAS_ERROR_CODE: [u8; 10] = [8, 10, 11, 12, 13, 14, 17, 21, 29, 30];

fn put_u64(ram: &mut [u8], gpa: u64, v: u64) {
    let a = gpa as usize;
    ram[a..a + 8].copy_from_slice(&v.to_le_bytes());
}

/// The unmapped guard page under the payload's stack (the lowest page of the `STACK_SIZE` bytes at the
/// top of RAM): a stack overflow is a page fault there, not a write over the payload's data.
pub fn stack_guard(ram_size: u64) -> core::ops::Range<u64> {
    let g = ram_size - STACK_SIZE;
    g..g + 4096
}

/// Rights of the 4 KiB page at `gpa` of guest RAM: present, writable, user, executable. Only the pages
/// of executable payload segments (`exec`, GPA ranges) and the exception stubs may be executed, and an
/// executable page is read-only unless a writable segment (`data`) shares it, so code cannot be
/// written at run time.
fn page_flags(gpa: u64, ram_size: u64, exec: &[core::ops::Range<u64>], data: &[core::ops::Range<u64>]) -> u64 {
    let overlaps = |rs: &[core::ops::Range<u64>]| rs.iter().any(|r| r.start < gpa + 4096 && gpa < r.end);
    let executable = overlaps(exec);
    let write = if executable && !overlaps(data) { 0 } else { PTE_W };
    let flags = match gpa {
        0 => return 0,                                       // null page: not present
        g if stack_guard(ram_size).contains(&g) => return 0, // stack guard: not present
        BOOT_INFO_GPA => PTE_P | PTE_U,                      // read-only to the payload
        MSG_GPA => PTE_P | PTE_W | PTE_U,                    // message buffer
        STUBS_GPA => return STUBS_GPA | PTE_P,               // exception stubs: ring 0, read and execute
        g if g < 0x10000 => PTE_P | PTE_W,                   // monitor pages: supervisor only
        g if g < 0x10_0000 => return 0,                      // unused
        _ => PTE_P | write | PTE_U,                          // payload and stack
    };
    gpa | flags | if executable { 0 } else { PTE_NX }
}

/// Writes GDT, TSS, page tables and (if `handlers`) the IDT and its stubs into `ram`.
/// `ram.len()` is the guest RAM size (a multiple of 2 MiB, at least 2 MiB). `exec` are the GPA ranges
/// of the payload's executable segments: every other page is non-executable (NX), the region included;
/// `data` those of its writable segments (code pages that share none are read-only).
pub fn build(
    ram: &mut [u8],
    region_size: u64,
    handlers: bool,
    exec: &[core::ops::Range<u64>],
    data: &[core::ops::Range<u64>],
) {
    // GDT: null, kernel code, kernel data, user data, user code, 64-bit TSS (two slots).
    let gdt = [0u64, 0x00AF_9A00_0000_FFFF, 0x00CF_9200_0000_FFFF, 0x00CF_F200_0000_FFFF, 0x00AF_FA00_0000_FFFF];
    for (i, d) in gdt.iter().enumerate() {
        put_u64(ram, GDT_GPA + 8 * i as u64, *d);
    }
    let (base, limit) = (TSS_GPA, TSS_LIMIT as u64);
    let tss_lo = (limit & 0xFFFF)
        | ((base & 0xFF_FFFF) << 16)
        | (0x89u64 << 40) // present, available 64-bit TSS
        | (((limit >> 16) & 0xF) << 48)
        | (((base >> 24) & 0xFF) << 56);
    put_u64(ram, GDT_GPA + 40, tss_lo);
    put_u64(ram, GDT_GPA + 48, base >> 32);
    // TSS: RSP0 for exceptions taken in ring 3; the I/O bitmap offset points past the limit (no port I/O).
    put_u64(ram, TSS_GPA + 4, RING0_STACK_TOP);
    let iomap = TSS_GPA as usize + 0x66;
    ram[iomap..iomap + 2].copy_from_slice(&0x68u16.to_le_bytes());

    if handlers {
        write_idt_and_stubs(ram);
    }

    // Page tables. PML4[0] -> PDPT; PDPT[0] -> PD0 (first GiB), PDPT[1] -> PD1 (the region).
    let dir = PTE_P | PTE_W | PTE_U;
    put_u64(ram, PML4_GPA, PDPT_GPA | dir);
    put_u64(ram, PDPT_GPA, PD0_GPA | dir);
    put_u64(ram, PDPT_GPA + 8, PD1_GPA | dir);
    let ram_size = ram.len() as u64;
    // First 2 MiB in 4 KiB pages so each monitor page gets its own rights; the same for the last 2 MiB
    // of a larger RAM (its stack guard page).
    put_u64(ram, PD0_GPA, PT0_GPA | dir);
    for page in 0..512u64 {
        put_u64(ram, PT0_GPA + 8 * page, page_flags(page * 4096, ram_size, exec, data));
    }
    let top = ram_size / TWO_MIB - 1;
    if top > 0 {
        put_u64(ram, PD0_GPA + 8 * top, PT_TOP_GPA | dir);
        for page in 0..512u64 {
            put_u64(ram, PT_TOP_GPA + 8 * page, page_flags(top * TWO_MIB + page * 4096, ram_size, exec, data));
        }
    }
    // The rest of the first GiB in 2 MiB pages: RAM, then unbacked addresses (an access is an MMIO exit);
    // executable only where an executable segment lies.
    for i in (1..512u64).filter(|&i| i != top) {
        let executable = exec.iter().any(|r| r.start < (i + 1) * TWO_MIB && i * TWO_MIB < r.end);
        let nx = if executable { 0 } else { PTE_NX };
        put_u64(ram, PD0_GPA + 8 * i, (i * TWO_MIB) | PTE_P | PTE_W | PTE_U | PTE_PS | nx);
    }
    // The region, never executable: read-only parts are enforced by read-only memory slots.
    let region_pages = region_size.div_ceil(TWO_MIB).min(512);
    for i in 0..region_pages {
        put_u64(ram, PD1_GPA + 8 * i, (REGION_GPA + i * TWO_MIB) | PTE_P | PTE_W | PTE_U | PTE_PS | PTE_NX);
    }
}

/// IDT entries pointing at one 16-byte stub per vector 0..32, and the common handler that reports the
/// exception through `HC_FAULT` with a [`rtcell_guest::abi::FaultInfo`] in the message buffer.
fn write_idt_and_stubs(ram: &mut [u8]) {
    let common = STUBS_GPA + 32 * 16;
    for v in 0..32u64 {
        let stub = STUBS_GPA + v * 16;
        let mut code = Vec::with_capacity(16);
        if !HAS_ERROR_CODE.contains(&(v as u8)) {
            code.extend_from_slice(&[0x6A, 0x00]); // push 0
        }
        code.extend_from_slice(&[0x6A, v as u8]); // push vector
        let next = stub + code.len() as u64 + 5;
        code.push(0xE9); // jmp common
        code.extend_from_slice(&((common as i64 - next as i64) as i32).to_le_bytes());
        let a = stub as usize;
        ram[a..a + code.len()].copy_from_slice(&code);
        // Interrupt gate, ring 0, present.
        let lo = (stub & 0xFFFF) | ((SEL_KERNEL_CODE as u64) << 16) | (0x8Eu64 << 40) | (((stub >> 16) & 0xFFFF) << 48);
        put_u64(ram, IDT_GPA + 16 * v, lo);
        put_u64(ram, IDT_GPA + 16 * v + 8, stub >> 32);
    }
    // Stack on entry: vector, error code, RIP, CS, RFLAGS, RSP, SS.
    let mut c: Vec<u8> = Vec::new();
    let store = |c: &mut Vec<u8>, off: u64| {
        c.extend_from_slice(&[0x48, 0xA3]); // mov [moffs64], rax
        c.extend_from_slice(&(MSG_GPA + off).to_le_bytes());
    };
    c.extend_from_slice(&[0x48, 0x8B, 0x04, 0x24]); // mov rax, [rsp]      vector
    store(&mut c, 0);
    c.extend_from_slice(&[0x48, 0x8B, 0x44, 0x24, 0x08]); // mov rax, [rsp+8]   error code
    store(&mut c, 8);
    c.extend_from_slice(&[0x48, 0x8B, 0x44, 0x24, 0x10]); // mov rax, [rsp+16]  RIP
    store(&mut c, 16);
    c.extend_from_slice(&[0x48, 0x8B, 0x44, 0x24, 0x28]); // mov rax, [rsp+40]  RSP
    store(&mut c, 24);
    c.extend_from_slice(&[0x0F, 0x20, 0xD0]); // mov rax, cr2
    store(&mut c, 32);
    c.extend_from_slice(&[0x48, 0x8B, 0x04, 0x24]); // mov rax, [rsp]      vector -> eax
    c.push(0xA3); // mov [moffs64], eax: the fault hypercall
    c.extend_from_slice(&hypercall_gpa(HC_FAULT).to_le_bytes());
    c.extend_from_slice(&[0xEB, 0xFE]); // jmp $
    let a = common as usize;
    ram[a..a + c.len()].copy_from_slice(&c);
}

/// Writes the boot-info page. `args` longer than `ARGS_SIZE` is refused by the caller.
pub fn write_boot_info(ram: &mut [u8], info: &BootInfo) {
    let a = BOOT_INFO_GPA as usize;
    let size = core::mem::size_of::<BootInfo>();
    // SAFETY: BootInfo is repr(C) plain data with no padding-sensitive invariants; we copy its bytes.
    let bytes = unsafe { core::slice::from_raw_parts(info as *const BootInfo as *const u8, size) };
    ram[a..a + size].copy_from_slice(bytes);
}

/// A boot-info value for the given cell.
pub fn boot_info(tsc_khz: u64, cpu: u32, region_size: u64, ram_size: u64, args: &str) -> Option<BootInfo> {
    if args.len() > ARGS_SIZE {
        return None;
    }
    let mut a = [0u8; ARGS_SIZE];
    a[..args.len()].copy_from_slice(args.as_bytes());
    Some(BootInfo {
        magic: BOOT_MAGIC,
        version: BOOT_VERSION,
        size: core::mem::size_of::<BootInfo>() as u32,
        tsc_khz,
        cell_cpu: cpu,
        flags: 0,
        region_gpa: REGION_GPA,
        region_size,
        ram_size,
        stack_top: ram_size,
        msg_gpa: MSG_GPA,
        msg_size: MSG_SIZE as u64,
        args_len: args.len() as u32,
        reserved: 0,
        args: a,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_info_fits_its_page_and_stubs_fit_theirs() {
        assert!(core::mem::size_of::<BootInfo>() <= 4096);
        let mut ram = vec![0u8; 2 << 20];
        let code = 0x10_0000..0x10_1000;
        let data = 0x10_1000..0x10_2000;
        build(&mut ram, 1 << 20, true, core::slice::from_ref(&code), core::slice::from_ref(&data));
        // Common handler ends before the ring-0 stack's page.
        let end = (STUBS_GPA + 32 * 16 + 80) as usize;
        assert!(end < 0x6000);
        // Null page not present, boot info read-only user, payload user-writable.
        let pte = |page: usize| u64::from_le_bytes(ram[PT0_GPA as usize + 8 * page..][..8].try_into().unwrap());
        assert_eq!(pte(0), 0);
        assert_eq!(pte(1) & 7, PTE_P | PTE_U);
        assert_eq!(pte(0x100) & 7, PTE_P | PTE_U, "code is read-only");
        assert_eq!(pte(0x101) & 7, 7);
        assert_eq!(pte(3) & PTE_U, 0);
        // Code executable, data and stack not; the guard page under the stack not present.
        assert_eq!(pte(0x100) & PTE_NX, 0);
        assert_eq!(pte(0x101) & PTE_NX, PTE_NX);
        assert_eq!(pte(0x1FF) & PTE_NX, PTE_NX);
        assert_eq!(pte(((2 << 20) - STACK_SIZE) as usize / 4096), 0);
        assert_eq!(pte(STUBS_GPA as usize / 4096) & (PTE_NX | PTE_U), 0);
    }
}
