//! Text for people: whatever a user, a host or a trial wrote (knob and cell
//! values, host names, failure details, trial output) reaches a terminal
//! only through [`escape`] or [`escape_block`], so an escape sequence in it
//! is shown, never obeyed. JSON output ([`json_pretty`]) writes the
//! same characters in JSON's own escaping (`\u009b`), so a document on a
//! terminal is as safe as text and still reads back to the same values.

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

/// Characters a JSON document for a terminal writes as `\uXXXX` besides
/// those JSON itself escapes (C0, `"` and `\`): DEL, C1 controls,
/// bidirectional controls, and the line and paragraph separators.
fn json_escapes(c: char) -> bool {
    c == '\u{7f}'
        || ('\u{80}'..='\u{9f}').contains(&c)
        || is_bidi_control(c)
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// serde_json's pretty printer, with [`json_escapes`] characters escaped in
/// strings and keys.
struct TerminalJson<'a>(serde_json::ser::PrettyFormatter<'a>);

impl serde_json::ser::Formatter for TerminalJson<'_> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if json_escapes(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                write!(w, "\\u{:04x}", u32::from(c))?;
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// `doc` as pretty JSON (two-space indent, as `serde_json::to_string_pretty`)
/// for stdout: DEL, C1, bidirectional controls and U+2028/U+2029 are
/// written as `\uXXXX`, so no string a host or a trial wrote acts on the
/// terminal that shows the document. It parses to the same values.
pub fn json_pretty(doc: &impl serde::Serialize) -> Result<String, serde_json::Error> {
    let mut bytes = Vec::with_capacity(4096);
    let formatter = TerminalJson(serde_json::ser::PrettyFormatter::new());
    let mut ser = serde_json::Serializer::with_formatter(&mut bytes, formatter);
    doc.serialize(&mut ser)?;
    // Only whole UTF-8 fragments and ASCII were written.
    String::from_utf8(bytes).map_err(|e| serde::ser::Error::custom(e.to_string()))
}

/// The first error writing to stdout other than a closed pipe, for the
/// exit status (see [`out`]).
static STDOUT_FAILED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// `text` with each line wrapped at spaces to at most `width` columns (as
/// a terminal shows them), so that no word is broken where the terminal
/// would wrap: a continuation line is indented 4 columns past its line's
/// own indent. A word wider than the room left is cut, as the terminal
/// would. Lines that fit stay as they are.
pub fn wrap_block(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        wrap_line(line, width, &mut out);
    }
    out
}

fn wrap_line(line: &str, width: usize, out: &mut String) {
    use console::measure_text_width as cols;
    if cols(line) <= width {
        out.push_str(line);
        return;
    }
    let body = line.trim_start_matches(' ');
    let indent = line.len() - body.len();
    // Too narrow to indent: wrap flush left.
    let hang = if indent + 4 + 8 <= width {
        indent + 4
    } else {
        0
    };
    let mut room = width;
    let mut used = indent;
    out.push_str(&line[..indent]);
    let mut first_on_line = true;
    for word in body.split(' ').filter(|w| !w.is_empty()) {
        let w = cols(word);
        if !first_on_line && used + 1 + w > room {
            out.push('\n');
            out.push_str(&" ".repeat(hang));
            used = hang;
            room = width;
            first_on_line = true;
        }
        if !first_on_line {
            out.push(' ');
            used += 1;
        }
        // A word wider than a whole line: cut it where the line ends.
        let mut rest = word;
        while used + cols(rest) > room && room > used {
            let fit = room - used;
            let mut taken = 0;
            let mut end = 0;
            for (at, c) in rest.char_indices() {
                let cw = cols(c.encode_utf8(&mut [0; 4]));
                if taken + cw > fit {
                    break;
                }
                taken += cw;
                end = at + c.len_utf8();
            }
            if end == 0 {
                break;
            }
            out.push_str(&rest[..end]);
            out.push('\n');
            out.push_str(&" ".repeat(hang));
            used = hang;
            rest = &rest[end..];
        }
        out.push_str(rest);
        used += cols(rest);
        first_on_line = false;
    }
}

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
    #[test]
    fn wrapping_breaks_lines_at_spaces_and_indents_what_follows() {
        use super::wrap_block;
        assert_eq!(wrap_block("short line", 80), "short line");
        assert_eq!(
            wrap_block("  bucket n=1: DRAFT (racing: more runs) · leader", 24),
            "  bucket n=1: DRAFT\n      (racing: more\n      runs) · leader"
        );
        for line in wrap_block("  bucket n=1: DRAFT (racing: more runs) · leader", 24).lines() {
            assert!(console::measure_text_width(line) <= 24, "{line:?}");
        }
        // Lines keep their own breaks; a word wider than a line is cut.
        assert_eq!(wrap_block("a\nb", 5), "a\nb");
        let cut = wrap_block("x /a/very/long/ledger/path/here", 16);
        for line in cut.lines() {
            assert!(console::measure_text_width(line) <= 16, "{cut}");
        }
        assert_eq!(
            cut.replace(['\n', ' '], ""),
            "x/a/very/long/ledger/path/here"
        );
    }

    use super::*;

    #[test]
    fn json_for_a_terminal_escapes_what_json_leaves_raw_and_reads_back() {
        let value = serde_json::json!({
            "c1\u{9b}key": ["a\u{1b}[31m\u{7f}\u{85}\u{9b}2J\u{202e}exe\u{2028}·±€😀", 1.5, null],
            "plain": {"nested": true}
        });
        let text = json_pretty(&value).expect("json");
        assert!(
            !text
                .chars()
                .any(|c| json_escapes(c) || (c.is_control() && c != '\n')),
            "{text:?}"
        );
        assert!(
            text.contains(r#""a\u001b[31m\u007f\u0085\u009b2J\u202eexe\u2028·±€😀""#),
            "{text}"
        );
        assert!(text.contains(r#""c1\u009bkey""#), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, value);
        // Nothing to escape: byte for byte serde_json's pretty form.
        let clean = serde_json::json!({"a": [1, {"b": "c"}], "d": []});
        assert_eq!(
            json_pretty(&clean).expect("json"),
            serde_json::to_string_pretty(&clean).expect("json")
        );
    }

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
