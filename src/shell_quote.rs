//! Shell quoting: a string as one word of POSIX shell text, passed on byte
//! for byte. Used wherever tunectl writes shell text itself: the probe
//! script's tool commands, the transports' command lines, the plan's
//! commands for people. (Where a study's template value lands in shell
//! text is `spec::shell`'s concern: values never enter the text.)

/// `s` as one single-quoted shell word (`'` becomes `'\''`), so that a
/// POSIX shell passes it on byte for byte, wherever the word stands.
pub fn single_quote(s: &str) -> String {
    format!("'{}'", inside_single_quotes(s))
}

/// `s` inside `'...'`: every `'` closes the quotes, adds an escaped `'` and
/// opens them again.
fn inside_single_quotes(s: &str) -> String {
    s.replace('\'', "'\\''")
}

/// `s` as one shell word: bare when it is made only of ASCII letters,
/// digits and `- _ = / , . +` (so that rendered commands read as written:
/// `run 2 9`), else [`single_quote`]d. An argument, an assignment's value
/// or a path, never a command's name: a bare `if` or `X=1` there would be
/// read as a keyword or an assignment.
pub fn quote_word(s: &str) -> String {
    let bare =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '=' | '/' | ',' | '.' | '+');
    if !s.is_empty() && s.chars().all(bare) {
        s.to_string()
    } else {
        single_quote(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_bare_only_when_nothing_needs_quoting() {
        assert_eq!(quote_word("abc"), "abc");
        assert_eq!(quote_word("--x=1.5,/a+b_c"), "--x=1.5,/a+b_c");
        assert_eq!(quote_word(""), "''");
        assert_eq!(quote_word("; touch /tmp/pwned"), "'; touch /tmp/pwned'");
        assert_eq!(quote_word("it's"), "'it'\\''s'");
        assert_eq!(quote_word("~/x"), "'~/x'");
        assert_eq!(single_quote("abc"), "'abc'");
        assert_eq!(single_quote(""), "''");
        assert_eq!(single_quote("it's"), r"'it'\''s'");
        assert_eq!(single_quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }

    /// The shell_escape crate, used before, wrote `!` as `'\!'` (for csh
    /// and interactive bash history); in single quotes a POSIX shell keeps
    /// `!` as it is, so it stays inside the quotes like any other byte.
    #[test]
    fn quoted_words_reach_the_shell_byte_for_byte() {
        assert_eq!(quote_word("a!b"), "'a!b'");
        let values = [
            "a!b",
            "it's",
            "'",
            "''",
            "a b",
            "$HOME",
            "`id`",
            "\\",
            "\"x\"",
            "a\nb",
            "*",
            "~",
            "-n",
            "x=1",
            "#c",
            "\u{e9}t\u{e9}",
            "",
        ];
        for v in values {
            for q in [quote_word(v), single_quote(v)] {
                let out = std::process::Command::new("/bin/sh")
                    .arg("-c")
                    .arg(format!("printf '%s' {q}"))
                    .output()
                    .expect("sh runs");
                assert_eq!(String::from_utf8_lossy(&out.stdout), v, "{q}");
            }
        }
    }
}
