//! What the payloads share: their arguments, and attaching to the region and the cell's control block.
//! Anything wrong at start-up panics, which reaches the monitor as a panic report with the reason.

#![no_std]

use core::fmt::{self, Write};
use core::str::FromStr;

use rtcell_guest::abi::BootInfo;
use rtcell_guest::rt::{self, FmtBuf};
use rtcell_shm::RegionView;
use rtcell_shm::control::{CellState, ControlBlock, MAX_MESSAGE};

/// The value of a required argument `key=value`.
pub fn arg<'a>(boot: &'a BootInfo, payload: &str, key: &str) -> &'a str {
    match boot.arg(key) {
        Some(v) => v,
        None => panic!("{payload}: argument {key}= missing"),
    }
}

/// The value of an optional argument, parsed; `default` when it is absent.
pub fn arg_or<T: FromStr>(boot: &BootInfo, payload: &str, key: &str, default: T) -> T {
    match boot.arg(key) {
        None => default,
        Some(v) => match v.parse() {
            Ok(x) => x,
            Err(_) => panic!("{payload}: argument {key}={v:?} is not a valid value"),
        },
    }
}

/// The channel region, checked.
pub fn region(boot: &BootInfo, payload: &str) -> RegionView<'static> {
    match RegionView::attach(rt::region(boot)) {
        Ok(r) => r,
        Err(e) => panic!("{payload}: channel region: {e}"),
    }
}

/// The control block of the cell named by argument `cell=`.
pub fn control(boot: &BootInfo, region: &RegionView<'static>, payload: &str) -> ControlBlock<'static> {
    let cell = arg(boot, payload, "cell");
    match ControlBlock::attach(region, cell) {
        Ok(c) => c,
        Err(e) => panic!("{payload}: control block of cell {cell:?}: {e}"),
    }
}

/// Ends the cell as faulted with the formatted reason (also logged) and returns exit code 1.
pub fn fault(ctl: &ControlBlock<'_>, why: fmt::Arguments<'_>) -> i32 {
    let mut msg = FmtBuf::<MAX_MESSAGE>::new();
    let _ = msg.write_fmt(why);
    rt::log(msg.as_str());
    ctl.finish(CellState::Faulted, 1, msg.as_str());
    1
}
