//! Text from a peer (a cell's log and panic text, a control block's message, anything a guest, a
//! process cell or a client wrote) made safe to show: the one sanitiser every such string goes through
//! before it reaches a terminal, a log, results.json or gRPC.
//!
//! [`peer_text`] returns one line of printable text:
//!
//! - at most `cap` bytes of the input are looked at (the caller bounds any read of peer memory by the
//!   same cap first); a longer input ends in `…[truncated: N of M bytes shown]`;
//! - printable characters are kept; `\` becomes `\\`, so an escape below is never ambiguous;
//! - control characters (C0, DEL, C1: escape sequences, NUL, newlines, carriage returns) and the Unicode
//!   line/paragraph separators and bidirectional overrides are written as `\n`, `\r`, `\t`, `\0`, `\xNN`
//!   or `\u{NNNN}`;
//! - bytes that are not UTF-8 are written as `\xNN`.
//!
//! So a peer can never end a line, clear a screen, move the cursor or make its text look like ours.
//! Callers label the result as the peer's (e.g. `cell "x" log: ...`).
//!
//! [`LogLimiter`] is the per-cell rate limit: a token bucket of messages per second; the messages over it
//! are counted ([`LogLimiter::suppressed`]) instead of kept.

use std::fmt::Write as _;
use std::time::Instant;

/// Bytes of one peer message shown at most (the cap per log line, panic message, control-block text).
pub const PEER_TEXT_CAP: usize = 4096;

/// Escapes and caps `bytes` (see the module documentation): at most `cap` input bytes are looked at and
/// at most `cap` bytes of escaped text are produced, plus the truncation mark when anything was cut.
pub fn peer_text(bytes: &[u8], cap: usize) -> String {
    let input = &bytes[..bytes.len().min(cap)];
    let mut out = String::with_capacity(input.len().min(cap) + 48);
    let mut used = 0; // input bytes shown
    let mut piece = String::new();
    'outer: while used < input.len() {
        let rest = &input[used..];
        let (good, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s, 0),
            Err(e) => (
                // `valid_up_to` ends a valid prefix.
                std::str::from_utf8(&rest[..e.valid_up_to()]).unwrap_or(""),
                e.error_len().unwrap_or(rest.len() - e.valid_up_to()).max(1),
            ),
        };
        for c in good.chars() {
            piece.clear();
            escape_into(&mut piece, c);
            if out.len() + piece.len() > cap {
                break 'outer;
            }
            out.push_str(&piece);
            used += c.len_utf8();
        }
        for b in &rest[good.len()..good.len() + bad] {
            if out.len() + 4 > cap {
                break 'outer;
            }
            let _ = write!(out, "\\x{b:02x}");
            used += 1;
        }
    }
    if used < bytes.len() {
        let _ = write!(out, "…[truncated: {used} of {} bytes shown]", bytes.len());
    }
    out
}

/// [`peer_text`] of a string that is already UTF-8 (escaping still applies).
pub fn peer_str(s: &str, cap: usize) -> String {
    peer_text(s.as_bytes(), cap)
}

/// `s` unchanged when it is already one printable line of at most `cap` bytes (such as what
/// [`peer_text`] returns, so text escaped once is not escaped again), else [`peer_str`]`(s, cap)`. For
/// text relayed by a party that should have escaped it (e.g. a daemon's reply shown by a client).
pub fn printable_line(s: &str, cap: usize) -> String {
    if s.len() <= cap.saturating_add(64) && !s.chars().any(needs_escape) { s.to_string() } else { peer_str(s, cap) }
}

/// Whether `c` must be escaped: controls, and the characters that break or reorder lines on a terminal.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

fn escape_into(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\0' => out.push_str("\\0"),
        c if needs_escape(c) && (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// Per-cell rate limit of peer messages: `burst` at once, then `per_second` on average. What is over
/// the limit is counted, not kept.
#[derive(Debug, Clone)]
pub struct LogLimiter {
    per_second: u32,
    burst: u32,
    tokens: f64,
    last: Instant,
    suppressed: u64,
}

impl LogLimiter {
    /// A limiter that starts full (`burst` messages may come at once).
    pub fn new(per_second: u32, burst: u32) -> LogLimiter {
        LogLimiter { per_second, burst, tokens: burst as f64, last: Instant::now(), suppressed: 0 }
    }

    /// Whether a message arriving now may be kept; when not, it is counted as suppressed.
    pub fn allow(&mut self) -> bool {
        self.allow_at(Instant::now())
    }

    /// [`LogLimiter::allow`] at a given time (for tests).
    pub fn allow_at(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last);
        self.last = now;
        self.tokens = (self.tokens + dt.as_secs_f64() * self.per_second as f64).min(self.burst as f64);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }

    /// Messages refused so far.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }

    /// The limit, for messages: "N per second (bursts of B)".
    pub fn describe(&self) -> String {
        format!("{} per second (bursts of {})", self.per_second, self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn control_characters_and_bad_utf8_are_escaped_visibly() {
        let t = peer_text(b"a\x1b[2J\nCell \"evil\": done\0\r\t\\ \xff\xfe ok \xe2\x80\xae", 4096);
        assert_eq!(t, "a\\x1b[2J\\nCell \"evil\": done\\0\\r\\t\\\\ \\xff\\xfe ok \\u{202e}");
        assert!(!t.chars().any(|c| c.is_control()));
        assert_eq!(peer_text("größe µs".as_bytes(), 4096), "größe µs");
        assert_eq!(peer_text(b"\x85\xc2\x85", 4096), "\\x85\\x85");
        // Text escaped once passes through printable_line unchanged; raw text does not.
        assert_eq!(printable_line(&t, 4096), t);
        assert_eq!(printable_line("a\nb", 4096), "a\\nb");
    }

    #[test]
    fn long_text_is_capped_and_marked() {
        let long = vec![b'x'; 10_000];
        let t = peer_text(&long, PEER_TEXT_CAP);
        assert!(t.starts_with(&"x".repeat(PEER_TEXT_CAP)));
        assert!(t.ends_with("…[truncated: 4096 of 10000 bytes shown]"), "{}", &t[4000..]);
        // A cut in the middle of a character shows the stray byte, not a replacement that hides it.
        let t = peer_text("aé".as_bytes(), 8);
        assert_eq!(t, "aé");
        let t = peer_text("aé".as_bytes(), 2);
        assert!(t.starts_with("a…[truncated: 1 of 3"), "{t}");
        // Escapes count against the cap too: 4096 NULs do not become 8192 bytes.
        let t = peer_text(&[0u8; 4096], PEER_TEXT_CAP);
        assert!(t.starts_with("\\0\\0") && t.len() < PEER_TEXT_CAP + 64, "{} bytes", t.len());
        assert!(t.ends_with("…[truncated: 2048 of 4096 bytes shown]"), "{}", &t[4000..]);
    }

    #[test]
    fn the_limiter_keeps_a_burst_then_the_rate_and_counts_the_rest() {
        let mut l = LogLimiter::new(10, 5);
        let t0 = Instant::now();
        let kept = (0..100).filter(|_| l.allow_at(t0)).count();
        assert_eq!(kept, 5);
        assert_eq!(l.suppressed(), 95);
        assert!(l.allow_at(t0 + Duration::from_millis(150)));
        assert!(!l.allow_at(t0 + Duration::from_millis(150)));
        assert_eq!(l.suppressed(), 96);
    }
}
