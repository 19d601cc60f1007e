//! The reported injection templates, as one study any transport can run:
//! command templates where a hand-written reading of the shell grammar
//! disagreed with `sh` about a `{{ }}`'s quoting (a `#` right after a
//! closing quote, or after `$#`, is part of the word, not a comment), with
//! knob values that are shell code. Each template writes what it printed
//! to an output file of the trial directory, whose sha256 the ledger
//! records wherever the trial ran; the test compares it with what the
//! template prints for the literal value.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// Values that run `touch <dir>/pwned<n>` wherever a shell reads them as
/// code, and other shell syntax that must arrive as written.
pub fn payloads(dir: &Path) -> Vec<String> {
    let m = |n: u32| dir.join(format!("pwned{n}")).display().to_string();
    vec![
        "plain".to_string(),
        format!("$(touch {})", m(1)),
        format!("`touch {}`", m(2)),
        format!(";touch {}", m(3)),
        format!("|touch {}", m(4)),
        format!("&&touch {}", m(5)),
        format!("\ntouch {}\n", m(6)),
        format!("';touch {};'", m(7)),
        format!("\";touch {};\"", m(8)),
        format!("\\';touch {};#", m(9)),
        format!("a[$(touch {})]", m(10)),
        format!("${{IFS}}touch${{IFS}}{}", m(11)),
        format!("'\"$(touch {})\"'", m(12)),
        format!("#\ntouch {}", m(13)),
        "'".to_string(),
        "\"".to_string(),
        "\\".to_string(),
        "$((1))".to_string(),
        "${IFS}".to_string(),
        "$HOME ~ * ?".to_string(),
        "two words".to_string(),
        String::new(),
    ]
}

/// The reported templates (with `printf '%s|'` for `echo`, which some
/// shells let interpret backslashes, and `cd /` first so that `$PWD` is
/// known), each writing to `out<n>.txt` in the trial directory.
pub const TEMPLATES: &str = r##"cd / && printf '%s|' "$PWD"#'
' {{ v }} >"$TUNECTL_TRIAL_DIR/out1.txt"
cd / && printf '%s|' "$PWD"#"
{{ v }}" >"$TUNECTL_TRIAL_DIR/out2.txt"
x=$(printf '%s|' $#'
' {{ v }}); printf '%s' "$x" >"$TUNECTL_TRIAL_DIR/out3.txt"
printf '{"metrics":{"t":1}}' >"$TUNECTL_RESULT""##;

/// What each template writes for the value `v`: the literal value.
pub fn expected(v: &str) -> [String; 3] {
    [
        format!("/#\n|{v}|"),
        format!("/#\n{v}|"),
        format!("0\n|{v}|"),
    ]
}

/// A study named `name` whose knob `v` takes `values` and whose command is
/// [`TEMPLATES`].
pub fn study(name: &str, values: &[String]) -> String {
    let yaml: Vec<String> = values
        .iter()
        .map(|v| serde_json::to_string(v).expect("JSON string"))
        .collect();
    format!(
        "name: {name}\nknobs:\n  v: {{kind: categorical, values: [{}], default: plain}}\ntrial:\n  command: {}\n  timeout: 30s\nobjective: {{metric: t, better: higher}}\nmeasurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}\ngate:\n  outputs: [out1.txt, out2.txt, out3.txt]\n",
        yaml.join(", "),
        serde_json::to_string(TEMPLATES).expect("JSON string"),
    )
}

/// Every file named `pwned*` under `dir`.
pub fn markers(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if e.file_name().to_string_lossy().starts_with("pwned") {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

/// Check the attempts of the study: one per value, each ok, each output
/// what the template prints for the literal value, and no value's text in
/// the recorded command.
pub fn check(attempts: &BTreeMap<String, Vec<Json>>, values: &[String]) {
    let mut seen = Vec::new();
    for a in attempts.values().flatten() {
        let v = a["config"]["v"].as_str().expect("the value");
        seen.push(v.to_string());
        assert_eq!(a["status"], "ok", "value {v:?}: {a}");
        for (i, want) in expected(v).iter().enumerate() {
            let digest = hex::encode(Sha256::digest(want.as_bytes()));
            assert_eq!(
                a["outputs"][format!("out{}.txt", i + 1)],
                digest.as_str(),
                "template {} with the value {v:?}: it does not print {want:?}",
                i + 1
            );
        }
        let command = a["command"].as_str().unwrap_or_default();
        assert!(
            !command.contains("touch") && command.contains("\"${TUNECTL_KNOB_V}\""),
            "the command: {command}"
        );
    }
    seen.sort();
    let mut want = values.to_vec();
    want.sort();
    assert_eq!(seen, want, "one attempt per value");
}
