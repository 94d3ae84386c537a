//! Where suites say what they are doing ("loopback: kvm cell, 64 B x 100000 ..."). By default a line on
//! standard error; a caller that draws progress bars (`rtcell bench` with no suite) installs a sink so
//! those lines go above its bars instead of through them.

use std::sync::RwLock;

type Sink = Box<dyn Fn(&str) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Sends `line` to the installed sink, or to standard error.
pub fn say(line: &str) {
    match SINK.read() {
        Ok(guard) => match guard.as_ref() {
            Some(sink) => sink(line),
            None => eprintln!("{line}"),
        },
        Err(_) => eprintln!("{line}"),
    }
}

/// Installs `sink` for every later [`say`]; `None` goes back to standard error.
pub fn set_sink(sink: Option<Sink>) {
    if let Ok(mut guard) = SINK.write() {
        *guard = sink;
    }
}

/// `progress!("loopback: {kind} cell ...")`: a progress line through [`say`].
#[macro_export]
macro_rules! progress {
    ($($arg:tt)*) => { $crate::progress::say(&format!($($arg)*)) };
}
