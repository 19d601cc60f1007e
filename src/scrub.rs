//! Credentials out of what is recorded and shown: text a trial or a probe
//! printed goes through here before it reaches the ledger or a terminal.

/// Values of environment variables that hold credentials (by name: secret,
/// token, password, key...), long enough to be worth hiding.
pub fn secret_values() -> Vec<String> {
    let mut out: Vec<String> = std::env::vars()
        .filter(|(k, v)| {
            let k = k.to_ascii_uppercase();
            v.len() >= 8
                && (k.contains("SECRET")
                    || k.contains("TOKEN")
                    || k.contains("PASSWORD")
                    || k.ends_with("_KEY")
                    || k.contains("SAS")
                    || k.contains("CREDENTIAL"))
        })
        .map(|(_, v)| v)
        .collect();
    // Longest first, so that one secret containing another is hidden whole.
    out.sort_by_key(|v| std::cmp::Reverse(v.len()));
    out
}

/// [`secret_values`] of this process, read once: what every transport
/// scrubs from trial output as it cuts it ([`cut_scrubbed`]).
pub fn launcher_secrets() -> &'static [String] {
    static SECRETS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    SECRETS.get_or_init(secret_values)
}

/// Bytes a stream's head and tail are kept beyond their cuts so that a
/// secret straddling a cut is seen whole: the longest secret's length.
pub fn margin(secrets: &[String]) -> usize {
    secrets.iter().map(String::len).max().unwrap_or(0)
}

/// Where any secret occurs in `bytes`, every occurrence (overlapping ones
/// too), merged into disjoint ranges in order.
fn secret_spans(bytes: &[u8], secrets: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
    for s in secrets
        .iter()
        .map(String::as_bytes)
        .filter(|s| !s.is_empty())
    {
        if s.len() > bytes.len() {
            continue;
        }
        for at in 0..=bytes.len() - s.len() {
            if bytes[at] == s[0] && &bytes[at..at + s.len()] == s {
                spans.push(at..at + s.len());
            }
        }
    }
    spans.sort_by_key(|r| r.start);
    let mut merged: Vec<std::ops::Range<usize>> = Vec::with_capacity(spans.len());
    for r in spans {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// `bytes[from..to]` as text (invalid UTF-8 replaced), each of `spans`
/// (none of which crosses `from` or `to`) shown as `[redacted]`.
fn render(bytes: &[u8], from: usize, to: usize, spans: &[std::ops::Range<usize>]) -> String {
    let mut out = String::with_capacity(to - from);
    let mut at = from;
    for s in spans.iter().filter(|s| s.start >= from && s.end <= to) {
        out.push_str(&String::from_utf8_lossy(&bytes[at..s.start]));
        out.push_str("[redacted]");
        at = s.end;
    }
    out.push_str(&String::from_utf8_lossy(&bytes[at..to]));
    out
}

/// The head and the tail of a stream of `total` bytes, secrets scrubbed
/// before they are cut: `(head, tail)` as stored, where `tail` is about
/// the last `keep_tail` bytes and `head` about the first `keep_head` bytes
/// that come before the tail's (empty unless the stream is longer than
/// the tail; the two never overlap).
///
/// `head` holds the stream's first bytes and `tail` its last ones, each at
/// least [`margin`] bytes beyond its cut (when the stream has them): every
/// secret that a cut would split lies whole in them, so it is found and
/// each cut moves out of it. The tail's cut moves back to the secret's
/// start (the tail then opens with `[redacted]`); the head's moves past
/// its end when that is still before the tail, else back to its start. A
/// secret can be seen in part only at the far edge of a window, beyond
/// the margin, and that part is never kept. So no secret is ever kept in
/// part: it is `[redacted]` whole, or not kept at all.
pub fn cut_scrubbed(
    head: &[u8],
    tail: &[u8],
    total: usize,
    keep_head: usize,
    keep_tail: usize,
    secrets: &[String],
) -> (String, String) {
    let tail = &tail[tail.len().saturating_sub(total)..];
    // The tail window is bytes [window_start, total) of the stream.
    let window_start = total - tail.len();
    let spans = secret_spans(tail, secrets);
    let mut cut = tail.len().saturating_sub(keep_tail);
    if let Some(s) = spans.iter().find(|s| s.start < cut && cut < s.end) {
        cut = s.start;
    }
    let tail_text = render(tail, cut, tail.len(), &spans);
    let tail_start = window_start + cut;
    // The head: from the head window, or from the tail window when that
    // holds the whole stream.
    let known = if window_start == 0 { tail } else { head };
    let mut end = keep_head.min(tail_start).min(known.len());
    if end == 0 {
        return (String::new(), tail_text);
    }
    let spans = secret_spans(known, secrets);
    if let Some(s) = spans.iter().find(|s| s.start < end && end < s.end) {
        end = if s.end <= tail_start.min(known.len()) {
            s.end
        } else {
            s.start
        };
    }
    (render(known, 0, end, &spans), tail_text)
}

/// `text` with every secret value replaced by `[redacted]`.
pub fn scrub_secrets(mut text: String, secrets: &[String]) -> String {
    for s in secrets {
        if text.contains(s.as_str()) {
            text = text.replace(s.as_str(), "[redacted]");
        }
    }
    text
}

/// Prefixes of well-known credential formats (GitHub, GitLab, Slack, AWS
/// access key ids, OpenAI-style keys).
const TOKEN_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "akia",
    "asia",
    "sk-",
];

/// Name segments (split at `_`, `-`, `.`) that make a `name=value` or
/// `name: value` a credential.
const SECRET_WORDS: &[&str] = &[
    "secret",
    "token",
    "password",
    "passwd",
    "pwd",
    "apikey",
    "key",
    "credential",
    "credentials",
    "authorization",
    "auth",
    "bearer",
];

/// Whether `name` (the part before `=` or `:`) names a credential.
fn names_secret(name: &str) -> bool {
    name.to_ascii_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|seg| SECRET_WORDS.contains(&seg))
}

/// Text printed by a probe's tool command (or any host output kept in the
/// fingerprint), with credentials removed: the values of this process's
/// credential variables ([`secret_values`]), then, word by word, a value
/// whose name says it is a credential (`token=...`,
/// `AWS_SECRET_ACCESS_KEY=...`, `password: x`, the word after `Bearer`) or
/// that looks like one (`ghp_...`, `AKIA...`), in the spirit of
/// [`crate::ledger::redact_error`] for store errors.
pub fn scrub_host_text(text: &str, secrets: &[String]) -> String {
    let text = scrub_secrets(text.to_string(), secrets);
    let mut out = String::with_capacity(text.len());
    let mut hide_next = false;
    for word in text.split_inclusive(char::is_whitespace) {
        let core = word.trim_end();
        let lower = core.to_ascii_lowercase();
        let bare = lower.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
        let looks_secret = TOKEN_PREFIXES
            .iter()
            .any(|p| bare.starts_with(p) && bare.len() >= p.len() + 8);
        let (name, value) = match core.find(['=', ':']) {
            Some(i) => (&core[..i], &core[i + 1..]),
            None => (core, ""),
        };
        let named = names_secret(name);
        let hide =
            hide_next || looks_secret || (named && !value.trim_matches(['=', ':']).is_empty());
        // `Authorization: Bearer x`, `token: x`: the value is the next word.
        hide_next = named
            && (value.trim_matches(['=', ':']).is_empty() && core.len() > name.len()
                || lower == "bearer");
        if hide && !core.is_empty() {
            out.push_str("[redacted]");
            out.push_str(&word[core.len()..]);
        } else {
            out.push_str(word);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed() {
        let secrets = vec!["abcdefgh12345".to_string(), "abcdefgh".to_string()];
        assert_eq!(
            scrub_secrets("key=abcdefgh12345 and abcdefgh".to_string(), &secrets),
            "key=[redacted] and [redacted]"
        );
    }

    /// `[redacted]` taken out of `text`: what is left must hold no
    /// character of a secret (the fillers below use none).
    fn leaked(text: &str) -> Option<String> {
        let rest = text.replace("[redacted]", "");
        rest.chars()
            .any(|c| c.is_ascii_alphanumeric())
            .then_some(rest)
    }

    /// A stream of `total` filler bytes (`.` and newlines) with `secret`
    /// written at `at`, as a transport keeps it for [`cut_scrubbed`]: its
    /// first `keep_head + margin` and last `keep_tail + margin` bytes (a
    /// local capture may keep more of the tail: that changes nothing).
    fn windows(total: usize, secret: &str, at: usize, margin: usize) -> (Vec<u8>, Vec<u8>) {
        let mut s: Vec<u8> = (0..total)
            .map(|i| if i % 61 == 60 { b'\n' } else { b'.' })
            .collect();
        s[at..at + secret.len()].copy_from_slice(secret.as_bytes());
        let head = s[..(HEAD + margin).min(total)].to_vec();
        let tail = s[total - (TAIL + margin).min(total)..].to_vec();
        (head, tail)
    }

    const HEAD: usize = 4096;
    const TAIL: usize = 8192;

    /// A secret straddling the tail's cut or the head's used to be cut
    /// first and scrubbed after: the half on the kept side stayed. Sweep the
    /// secret's start across each cut, byte by byte, for streams where the
    /// head and tail are far apart, just apart, and overlapping: no part of
    /// it is ever kept, and where a cut would have split it, the kept side
    /// shows `[redacted]`.
    #[test]
    fn a_secret_across_a_cut_is_never_half_kept() {
        let secret = "s3cr3tT0ken-ABCDEFGHIJ0123456789xyz";
        let others = ["0123456789".to_string()];
        let secrets: Vec<String> = [secret.to_string()].into_iter().chain(others).collect();
        let m = margin(&secrets);
        assert_eq!(m, secret.len());
        let len = secret.len();
        for total in [40_000, TAIL + HEAD + len, TAIL + 100, TAIL + 1, TAIL] {
            let tail_cut = total.saturating_sub(TAIL);
            let head_cut = HEAD.min(tail_cut);
            for cut in [tail_cut, head_cut] {
                let from = cut.saturating_sub(len + 1);
                let to = (cut + 1).min(total - len);
                for at in from..=to {
                    let (head, tail) = windows(total, secret, at, m);
                    let (h, t) = cut_scrubbed(&head, &tail, total, HEAD, TAIL, &secrets);
                    let case = format!("total {total}, secret at {at}, cut at {cut}");
                    assert_eq!(leaked(&h), None, "head: {case}");
                    assert_eq!(leaked(&t), None, "tail: {case}");
                    assert!(t.len() <= TAIL + 10, "{case}");
                    assert!(h.len() <= HEAD + 10, "{case}");
                    if total <= TAIL {
                        assert!(h.is_empty(), "{case}");
                    }
                    let split = at < cut && cut < at + len;
                    if split && cut == tail_cut && tail_cut > 0 {
                        assert!(t.starts_with("[redacted]"), "{case}: {t:?}");
                    }
                    if at + len <= tail_cut.min(HEAD)
                        || (split && cut == head_cut && at + len <= tail_cut)
                    {
                        assert!(h.contains("[redacted]"), "{case}: {h:?}");
                    }
                }
            }
        }
    }

    /// Without secrets the cut is where it always was: the last bytes, and
    /// the first ones before them.
    #[test]
    fn without_secrets_the_cut_is_as_before() {
        let text: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let (h, t) = cut_scrubbed(
            &text[..HEAD],
            &text[text.len() - TAIL..],
            text.len(),
            HEAD,
            TAIL,
            &[],
        );
        assert_eq!(h.as_bytes(), &text[..HEAD]);
        assert_eq!(t.as_bytes(), &text[text.len() - TAIL..]);
        let (h, t) = cut_scrubbed(b"", b"ab", 2, HEAD, TAIL, &[]);
        assert_eq!((h.as_str(), t.as_str()), ("", "ab"));
    }

    #[test]
    fn host_text_loses_what_looks_like_a_credential() {
        let s = |t: &str| scrub_host_text(t, &[]);
        assert_eq!(s("torch 2.3.1+cu121"), "torch 2.3.1+cu121");
        assert_eq!(
            s("token=ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok"),
            "[redacted] ok"
        );
        assert_eq!(
            s("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG"),
            "[redacted]"
        );
        assert_eq!(s("key ghp_abcdefghijklmnop"), "key [redacted]");
        assert_eq!(
            s("Authorization: Bearer abc.def"),
            "Authorization: [redacted] [redacted]"
        );
        assert_eq!(s("password: hunter22"), "password: [redacted]");
        assert_eq!(
            s("nvcc: NVIDIA (R) Cuda compiler"),
            "nvcc: NVIDIA (R) Cuda compiler"
        );
        assert_eq!(s("x leak-me-9"), "x leak-me-9");
        assert_eq!(s("tokenizers==0.15.0"), "tokenizers==0.15.0");
        assert_eq!(s("Python 3.10.12"), "Python 3.10.12");
        assert_eq!(
            scrub_host_text("x leak-me-9", &["leak-me-9".to_string()]),
            "x [redacted]"
        );
    }
}
