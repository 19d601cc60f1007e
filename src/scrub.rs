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
