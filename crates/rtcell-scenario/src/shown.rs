//! Text from a scenario file shown in a complaint: a key, a name, a path or serde's own message may hold
//! control characters or be a megabyte long. Every complaint goes through [`line`] when it is rendered
//! (escaped with the project's sanitiser, capped); names quoted inside a message are first cut with
//! [`cut`] so that one long name cannot push the rest of the message out.

use rtcell_host::peer_text::peer_str;

/// Bytes of one quoted piece (a key, a name, a path in the file) kept in a message.
pub const PIECE_CAP: usize = 100;
/// Bytes of one field of a complaint (its message, its fix) after escaping.
pub const FIELD_CAP: usize = 1024;
/// Complaints shown at most for one file; the rest are counted.
pub const MAX_SHOWN: usize = 50;

/// `s` cut to [`PIECE_CAP`] bytes (at a character boundary), with `...(N bytes)` when it was longer.
/// Not escaped: the whole complaint is escaped once when rendered.
pub fn cut(s: &str) -> String {
    if s.len() <= PIECE_CAP {
        return s.to_string();
    }
    let mut end = PIECE_CAP;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...({} bytes)", &s[..end], s.len())
}

/// One field of a complaint made safe for a terminal: control characters and bidirectional overrides
/// escaped, at most `cap` bytes plus a truncation mark.
pub fn line(s: &str, cap: usize) -> String {
    peer_str(s, cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_text_and_marks_long_text() {
        assert_eq!(cut("abc"), "abc");
        let long = "é".repeat(1000);
        let c = cut(&long);
        assert!(c.len() < PIECE_CAP + 20 && c.ends_with("...(2000 bytes)"), "{c}");
    }

    #[test]
    fn line_escapes_controls_and_caps() {
        let l = line("\u{1b}[2J\u{202e}x", 100);
        assert!(!l.contains('\u{1b}') && !l.contains('\u{202e}'), "{l}");
        assert!(line(&"k".repeat(1_000_000), 200).len() < 300);
    }
}
