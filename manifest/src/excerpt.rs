//! Input quoted in errors, bounded. An error that names what was wrong
//! quotes at most an excerpt of it (its start and end, or the part of a
//! line around a column), so that a 1 MiB manifest line, ID or key never
//! comes back whole in a status message, a REST body or an event: a
//! client's default limits (gRPC's 8 KiB of metadata, 4 MiB messages)
//! would turn the answer into another error than the one it was.

use std::borrow::Cow;

/// Characters of input an error quotes at most ([`excerpt`]).
pub const QUOTE_CHARS: usize = 200;

/// Bytes of a whole error message at most (a gRPC status message, a REST
/// error's `message`, an event's detail): well below gRPC's 8 KiB of
/// metadata, where the message travels.
pub const MESSAGE_BYTES: usize = 2048;

/// Line and column (1-based, the column in characters) of byte `offset`
/// of `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// `text` whole when it has at most `max` characters; else its first and
/// last `max / 2` characters around `…[N characters cut]…`, so that both
/// the start of a message and its end (where serde says what it expected)
/// stay readable.
pub fn excerpt(text: &str, max: usize) -> Cow<'_, str> {
    let count = text.chars().count();
    if count <= max {
        return Cow::Borrowed(text);
    }
    let half = max / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - half).collect();
    Cow::Owned(format!("{head}…[{} characters cut]…{tail}", count - 2 * half))
}

/// The part of `text`'s line `line` (1-based) around column `col` (1-based,
/// in characters), at most [`QUOTE_CHARS`] characters, `…` where cut:
/// what a syntax error points at.
pub fn around(text: &str, line: usize, col: usize) -> String {
    let Some(l) = text.lines().nth(line.saturating_sub(1)) else {
        return String::new();
    };
    let count = l.chars().count();
    if count <= QUOTE_CHARS {
        return l.to_string();
    }
    let start = col.saturating_sub(1).saturating_sub(QUOTE_CHARS / 2).min(count - QUOTE_CHARS);
    let part: String = l.chars().skip(start).take(QUOTE_CHARS).collect();
    let before = if start > 0 { "…" } else { "" };
    let after = if start + QUOTE_CHARS < count { "…" } else { "" };
    format!("{before}{part}{after}")
}

/// `message` cut to at most [`MESSAGE_BYTES`] bytes (on a character
/// boundary, `…[cut]` at the end): the last bound on any error message
/// that leaves a daemon.
pub fn message(message: &str) -> Cow<'_, str> {
    if message.len() <= MESSAGE_BYTES {
        return Cow::Borrowed(message);
    }
    const MARK: &str = "…[cut]";
    let mut end = MESSAGE_BYTES - MARK.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{MARK}", &message[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_short_text_is_quoted_whole_and_a_long_one_by_its_ends() {
        assert_eq!(excerpt("field `x`", 200), "field `x`");
        let long = format!("invalid type: string \"{}\", expected u32", "a".repeat(1 << 20));
        let e = excerpt(&long, 200);
        assert!(e.starts_with("invalid type: string \"aaa"), "{e}");
        assert!(e.ends_with("\", expected u32"), "{e}");
        assert!(e.contains(&format!("[{} characters cut]", long.len() - 200)), "{e}");
    }

    #[test]
    fn a_line_is_quoted_around_its_column() {
        let text = format!("ok = 1\n{}!{}\n", "x".repeat(1000), "y".repeat(1000));
        let near = around(&text, 2, 1001);
        assert!(near.starts_with('…') && near.ends_with('…'), "{near}");
        assert!(near.contains("x!y"), "{near}");
        assert_eq!(around(&text, 1, 1), "ok = 1");
        assert_eq!(around(&text, 9, 1), "");
    }

    proptest! {
        #[test]
        fn every_bound_holds_for_any_text(text in ".{0,3000}", max in 2usize..300, line in 0usize..4, col in 0usize..4000) {
            prop_assert!(excerpt(&text, max).chars().count() <= max + 40);
            prop_assert!(around(&text, line, col).chars().count() <= QUOTE_CHARS + 2);
            prop_assert!(message(&text).len() <= MESSAGE_BYTES);
        }
    }
}
