//! Standard output that a reader going away cannot break: `rtcell ctl status | head -1` or a bench piped
//! into a pager that is quit. `println!` panics when stdout is a closed pipe, which would end a run
//! before its results are written. Here the first failed write stops all later output and the command
//! goes on, so a run still writes its files and history:
//! - a closed pipe (the reader is gone) is not an error of the command; loops that only print (a watched
//!   statistics stream) end at once ([`gone`]);
//! - any other failure (a full disk, an I/O error on `> file`) is said on stderr at the end and the command
//!   exits 1 at least ([`finish`]): output that was cut is never passed off as complete.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout failed: nothing more is written.
static GONE: AtomicBool = AtomicBool::new(false);
/// The first failure that was not a closed pipe.
static FAILED: Mutex<Option<String>> = Mutex::new(None);

/// Writes `args` to stdout, unless an earlier write failed.
pub fn write(args: std::fmt::Arguments<'_>) {
    if GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.flush()) {
        GONE.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe
            && let Ok(mut f) = FAILED.lock()
        {
            f.get_or_insert_with(|| e.to_string());
        }
    }
}

/// Whether standard output can take no more (its reader is gone, or writing failed).
pub fn gone() -> bool {
    GONE.load(Ordering::Relaxed)
}

/// The command's exit status: `code`, or at least 1 if writing to stdout failed for another reason than
/// a closed pipe (said on stderr).
pub fn finish(code: i32) -> i32 {
    match FAILED.lock().ok().and_then(|mut f| f.take()) {
        Some(e) => {
            eprintln!("error: writing to standard output: {e}; what was printed is incomplete");
            code.max(1)
        }
        None => code,
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
