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
//! Hostile modes (a payload attacking the monitor and the operator):
//!
//! - `text`: logs escape sequences, NUL and a forged status line, claiming a 4 GiB length, then panics
//!   with the same text.
//! - `storm`: makes 100,000 log hypercalls, then ends with exit code 0.
//! - `fake`: claims `state=done` (default) or `state=starting` in its control block, then spins without
//!   a heartbeat.
//! - `wchan`: writes the first word of channel `chan=` (any kind).
//! - `header`: writes the first word of the region (its header).
//! - `xregion`: writes `ret` into writable channel `chan=` and calls it.
//! - `xdata`: writes `ret` into a static buffer and calls it.
//! - `stack`: recurses until the stack overflows.
//! - `forge`: writes a made-up exception report (a page fault "stack overflow") into the message page and
//!   makes the exception-report hypercall itself, from ring 3.
//! - `poke`: reads (`op=r`), writes (`op=w`) or calls (`op=x`) the address `addr=` (hex).
//! - `beat`: beats its heartbeat forever, doing nothing else.
//! - `sleep`: asks the monitor for the longest sleep (4.29 s), forever, without a heartbeat.
//! - `xtext`: writes `mov eax, 7; ret` over one of its own functions and calls it.
//! - `badstack`: points RSP at an unmapped, non-canonical address, then executes `ud2`.
//!
//! With `cell=<name>`, the cell's control block is marked running first.

#![no_std]
#![no_main]

use core::sync::atomic::Ordering;

use rtcell_guest::abi::{BOOT_INFO_GPA, BootInfo, HC_FAULT, HC_LOG, HC_PANIC, HC_SLEEP, MSG_GPA, hypercall_gpa};
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
        "text" => {
            raw_message(HC_LOG, EVIL);
            raw_message(HC_PANIC, EVIL);
            0
        }
        "storm" => {
            for _ in 0..100_000 {
                rt::log("storm");
            }
            0
        }
        "fake" => {
            if let Some(c) = &ctl {
                match boot.arg("state") {
                    Some("starting") => c.finish(CellState::Starting, 0, ""),
                    _ => c.finish(CellState::Done, 0, "all fine"),
                }
            }
            loop {
                core::hint::spin_loop();
            }
        }
        "wchan" => {
            let name = arg(boot, "faults", "chan");
            let entry = region.find(name).unwrap_or_else(|e| panic!("faults: channel {name}: {e}"));
            if let Some(w) = region.channel_words(&entry).first() {
                w.store(0xA5A5_A5A5_A5A5_A5A5, Ordering::Relaxed);
            }
            panic!("faults: the write to channel {name} was not stopped");
        }
        "header" => {
            rt::region(boot)[0].store(0xA5A5_A5A5_A5A5_A5A5, Ordering::Relaxed);
            panic!("faults: the write to the region header was not stopped");
        }
        "xregion" => {
            let name = arg(boot, "faults", "chan");
            let entry = region.find(name).unwrap_or_else(|e| panic!("faults: channel {name}: {e}"));
            let words = region.channel_words(&entry);
            let Some(w) = words.first() else { panic!("faults: channel {name} is empty") };
            w.store(0xC3C3_C3C3_C3C3_C3C3, Ordering::SeqCst); // ret
            // SAFETY: deliberately calls data: the page is mapped non-executable, so the fetch faults.
            let f: extern "C" fn() = unsafe { core::mem::transmute(w.as_ptr() as *const ()) };
            f();
            panic!("faults: code in channel {name} ran");
        }
        "xdata" => {
            let p = &raw mut CODE;
            // SAFETY: only this single-threaded payload touches CODE; writing a `ret` then calling it is
            // the attack: the data page is non-executable, so the fetch faults.
            unsafe {
                p.cast::<u8>().write_volatile(0xC3);
                let f: extern "C" fn() = core::mem::transmute(p as *const ());
                f();
            }
            panic!("faults: code in a data page ran");
        }
        "stack" => {
            let depth = recurse(core::hint::black_box(1));
            panic!("faults: recursion of depth {depth} did not overflow the stack");
        }
        "forge" => {
            let stack_guard = boot.ram_size - (64 << 10);
            // vector, error code (write, present), RIP, RSP, CR2: a "stack overflow" that never happened.
            let info: [u64; 5] = [14, 3, 0x10_0000, stack_guard, stack_guard + 8];
            // SAFETY: the message page is the payload's; the hypercall window is unbacked (an exit).
            unsafe {
                core::ptr::copy_nonoverlapping(info.as_ptr(), MSG_GPA as *mut u64, info.len());
                core::sync::atomic::compiler_fence(Ordering::SeqCst);
                (hypercall_gpa(HC_FAULT) as *mut u32).write_volatile(14);
            }
            panic!("faults: the forged exception report was not stopped");
        }
        "poke" => {
            let a = arg(boot, "faults", "addr");
            let addr = u64::from_str_radix(a.trim_start_matches("0x"), 16)
                .unwrap_or_else(|_| panic!("faults: addr={a:?} is not hex"));
            match boot.arg("op").unwrap_or("w") {
                // SAFETY (all three): the attack itself; the monitor must stop the payload.
                "r" => {
                    let v = unsafe { (addr as *const u64).read_volatile() };
                    panic!("faults: read {v:#x} at {addr:#x}");
                }
                "x" => {
                    let f: extern "C" fn() = unsafe { core::mem::transmute(addr as *const ()) };
                    f();
                    panic!("faults: called {addr:#x} and it returned");
                }
                _ => {
                    unsafe { (addr as *mut u64).write_volatile(0xA5A5_A5A5_A5A5_A5A5) };
                    panic!("faults: wrote {addr:#x}");
                }
            }
        }
        "beat" => {
            let Some(c) = &ctl else { panic!("faults: mode=beat needs cell=") };
            loop {
                c.beat();
                core::hint::spin_loop();
            }
        }
        "sleep" => loop {
            rt_sleep_max();
        },
        "xtext" => {
            let f: fn() -> u32 = victim;
            let p = f as *const () as *mut u8;
            // SAFETY: the attack: code written into the payload's own text page (which must be read-only).
            let v = unsafe {
                core::ptr::copy_nonoverlapping([0xB8u8, 7, 0, 0, 0, 0xC3].as_ptr(), p, 6);
                core::sync::atomic::compiler_fence(Ordering::SeqCst);
                core::hint::black_box(f)()
            };
            panic!("faults: code written into a text page ran (returned {v})");
        }
        "badstack" => {
            // SAFETY: the attack: an exception with a useless stack pointer; the monitor reports it.
            unsafe { core::arch::asm!("mov rsp, {0}", "ud2", in(reg) 0xDEAD_0000_0000_0000u64, options(noreturn)) }
        }
        other => panic!("faults: unknown mode {other:?}; see the faults payload's documentation"),
    }
}

/// Control characters, NUL and a line that imitates the monitor's verdict.
const EVIL: &[u8] = b"\x1b[2J\x1b[H\0\rCell \"evil\": kvm on CPU 1, done (exit code 0)\n\x1b]0;owned\x07";

/// A data page for `xdata`.
static mut CODE: [u8; 64] = [0; 64];

/// Writes `text` into the message buffer and makes hypercall `n` claiming a 4 GiB - 1 length.
fn raw_message(n: u16, text: &[u8]) {
    // SAFETY: the message buffer is the payload's (MSG_SIZE bytes, user-writable) and `text` is shorter;
    // the hypercall window is unbacked, so the write only exits to the monitor.
    unsafe {
        core::ptr::copy_nonoverlapping(text.as_ptr(), MSG_GPA as *mut u8, text.len());
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        (hypercall_gpa(n) as *mut u32).write_volatile(u32::MAX);
    }
}

/// Overwritten by `xtext`.
#[inline(never)]
fn victim() -> u32 {
    core::hint::black_box(1)
}

/// The longest sleep the hypercall can ask for.
fn rt_sleep_max() {
    // SAFETY: the hypercall window is unbacked: the write only exits to the monitor.
    unsafe { (hypercall_gpa(HC_SLEEP) as *mut u32).write_volatile(u32::MAX) };
}

/// Uses 4 KiB of stack per level, forever.
#[inline(never)]
fn recurse(n: u64) -> u64 {
    let mut frame = [0u8; 4096];
    frame[n as usize % 4096] = n as u8;
    core::hint::black_box(&mut frame);
    recurse(n + 1) + frame[0] as u64
}
