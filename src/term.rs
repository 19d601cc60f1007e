//! Text for people: whatever a user, a host or a trial wrote (knob and cell
//! values, host names, failure details, trial output) reaches a terminal
//! only through [`escape`] or [`escape_block`], so an escape sequence in it
//! is shown, never obeyed. JSON output keeps JSON's own escaping.

use std::borrow::Cow;

/// Characters that reorder the text around them (bidirectional overrides
/// and isolates): shown escaped like control characters.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

fn needs_escape(c: char, block: bool) -> bool {
    if block && (c == '\n' || c == '\t') {
        return false;
    }
    c.is_control() || is_bidi_control(c)
}

fn escaped(s: &str, block: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| needs_escape(c, block)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if !needs_escape(c, block) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x100 => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push_str(&format!("\\u{:04x}", u32::from(c))),
        }
    }
    Cow::Owned(out)
}

/// One line of text for a terminal: every control character (C0 with
/// newline and tab, DEL, C1) and bidirectional control is shown as an
/// escape: ESC as `\x1b`, newline as `\n`, U+202E as `\u202e`.
pub fn escape(s: &str) -> Cow<'_, str> {
    escaped(s, false)
}

/// A multi-line block for a terminal: like [`escape`], but newlines and
/// tabs stay as they are (a carriage return does not: it would overwrite
/// the line).
pub fn escape_block(s: &str) -> Cow<'_, str> {
    escaped(s, true)
}

/// The first error writing to stdout other than a closed pipe, for the
/// exit status (see [`out`]).
static STDOUT_FAILED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Write `text` to stdout as it is. A reader that went away (`tunectl
/// report | head`) is not an error: the rest is dropped and the command
/// goes on (a launch must not die because its output is no longer read).
/// Any other failure (a full disk under `> file`) is kept, and the command
/// exits 1 naming it ([`stdout_failure`]).
pub fn out(text: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    if let Err(e) = written
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        let _ = STDOUT_FAILED.set(e.to_string());
    }
}

/// Why stdout could not be written, when it could not (a closed pipe
/// aside).
pub fn stdout_failure() -> Option<&'static str> {
    STDOUT_FAILED.get().map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(escape("plain · text ±"), "plain · text ±");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(escape("a\x1b[31mred\x07"), "a\\x1b[31mred\\x07");
        assert_eq!(escape("two\nlines\r"), "two\\nlines\\r");
        assert_eq!(escape("c1 \u{9b}2J del \x7f"), "c1 \\x9b2J del \\x7f");
        assert_eq!(escape("evil\u{202e}txt"), "evil\\u202etxt");
        assert_eq!(
            escape_block("a\n\tb\x1b]0;x\x07\r"),
            "a\n\tb\\x1b]0;x\\x07\\r"
        );
    }
}
