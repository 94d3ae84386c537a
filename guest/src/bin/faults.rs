//! Misbehaves on purpose, so the monitor's and the host's fault handling can be tested. `mode=`:
//!
//! - `ud`: executes `ud2` (invalid opcode).
//! - `oob`: writes to guest physical 0x3000_0000, mapped by the page tables but neither RAM nor region:
//!   the monitor sees an MMIO exit.
//! - `spin`: reports running, then loops forever without a heartbeat (for the watchdog).
//! - `garbage`: fills every byte of the ring channel named by `ring=` (one the guest may write, i.e. a
//!   guest-to-host ring) with 0xA5; the host consumer must then report it corrupt.
//! - `panic`: `panic!("deliberate panic 42")`.
//! - `ro`: writes to the boot-info page, which the monitor maps read-only: a page fault.
//! - `done`: ends with the exit code `code=` (default 0).
//!
//! With `cell=<name>`, the cell's control block is marked running first.

#![no_std]
#![no_main]

use core::sync::atomic::Ordering;

use rtcell_guest::abi::{BOOT_INFO_GPA, BootInfo};
use rtcell_guest::rt;
use rtcell_payloads::{arg, arg_or, control, region};
use rtcell_shm::ChannelKind;
use rtcell_shm::control::CellState;

rtcell_guest::entry!(main);

/// Mapped (the first GiB is in the page tables) but not backed by any memory slot.
const UNBACKED_GPA: u64 = 0x3000_0000;

fn main(boot: &'static BootInfo) -> i32 {
    let mode = arg(boot, "faults", "mode");
    let region = region(boot, "faults");
    let ctl = boot.arg("cell").map(|_| control(boot, &region, "faults"));
    if let Some(c) = &ctl {
        c.set_running(0);
    }
    match mode {
        "ud" => {
            // SAFETY: `ud2` raises #UD; the monitor reports it and never resumes the payload.
            unsafe { core::arch::asm!("ud2", options(noreturn, nomem, nostack)) }
        }
        "oob" => {
            // SAFETY: no Rust object lives at UNBACKED_GPA; the write leaves the VM as an MMIO exit,
            // which the monitor reports as a fault.
            unsafe { (UNBACKED_GPA as *mut u64).write_volatile(0xA5A5_A5A5_A5A5_A5A5) };
            panic!("faults: the write to unbacked address {UNBACKED_GPA:#x} was not stopped");
        }
        "spin" => loop {
            core::hint::spin_loop();
        },
        "garbage" => {
            let name = arg(boot, "faults", "ring");
            let entry = match region.find(name) {
                Ok(e) if e.kind == ChannelKind::Ring => e,
                Ok(e) => panic!("faults: channel {name} is a {:?}, not a ring", e.kind),
                Err(e) => panic!("faults: ring {name}: {e}"),
            };
            for w in region.channel_words(&entry) {
                w.store(0xA5A5_A5A5_A5A5_A5A5, Ordering::Relaxed);
            }
            rt::log("faults: ring filled with 0xA5");
            if let Some(c) = &ctl {
                c.finish(CellState::Done, 0, "");
            }
            0
        }
        "panic" => panic!("deliberate panic {}", 42),
        "ro" => {
            // The last word of the boot-info page: past the BootInfo that `boot` refers to, so no Rust
            // reference covers the byte written.
            let target = (BOOT_INFO_GPA + 4096 - 8) as *mut u64;
            // SAFETY: the page is mapped read-only to ring 3, so the write raises a page fault, which
            // the monitor reports; no Rust object lives at that address.
            unsafe { target.write_volatile(0xA5A5_A5A5_A5A5_A5A5) };
            panic!("faults: the write to the read-only boot-info page did not fault");
        }
        "done" => {
            let code: i32 = arg_or(boot, "faults", "code", 0);
            if let Some(c) = &ctl {
                c.finish(CellState::Done, code, "");
            }
            code
        }
        other => panic!("faults: unknown mode {other:?}; one of ud, oob, spin, garbage, panic, ro, done"),
    }
}
