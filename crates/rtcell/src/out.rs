//! Standard output that a reader going away cannot break: `rtcell ctl status | head -1` or a bench piped
//! into a pager that is quit. `println!` panics when stdout is a closed pipe, which would end a run
//! before its results are written; here the first failed write drops all later output, and the command
//! goes on (its files, history and exit status are what they would have been).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout failed (the reader is gone): nothing more is written.
static GONE: AtomicBool = AtomicBool::new(false);

/// Writes `args` to stdout, unless an earlier write failed.
pub fn write(args: std::fmt::Arguments<'_>) {
    if GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if o.write_fmt(args).and_then(|()| o.flush()).is_err() {
        GONE.store(true, Ordering::Relaxed);
    }
}

/// `print!` through [`write`].
macro_rules! out {
    ($($t:tt)*) => { $crate::out::write(format_args!($($t)*)) };
}

/// `println!` through [`write`].
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($t)*))) };
}
