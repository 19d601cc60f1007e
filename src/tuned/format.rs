//! The tuned file itself: its types, reading and parsing it (with the
//! line and field of what does not read), loading a file or a directory
//! of them, and checking the knob values it holds against its domains.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use marked_yaml::Node;
use serde::Deserialize;
use serde_json::{Map, Value as Json};

use super::{SCHEMA, TunedLevel, short};
use crate::fingerprint::ClassKey;

/// A YAML node as JSON (scalars typed as study files are: YAML 1.2 core
/// schema for plain scalars, quoted scalars are strings).
pub fn node_to_json(node: &Node) -> Json {
    match node {
        Node::Scalar(s) => crate::spec::yaml::scalar_value(s).to_json(),
        Node::Sequence(items) => Json::Array(items.iter().map(node_to_json).collect()),
        Node::Mapping(m) => Json::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().to_string(), node_to_json(v)))
                .collect(),
        ),
    }
}

/// What `apply` needs from a tuned file.
#[derive(Debug, Clone, Deserialize)]
pub struct TunedFile {
    pub schema: u32,
    pub study: String,
    pub spec_hash: String,
    pub host_class: String,
    pub class_label: String,
    /// The class key the study chose, when not the default: `apply`
    /// classes its host by it.
    #[serde(default)]
    pub class_key: Option<TunedClassKey>,
    pub baseline: Map<String, Json>,
    /// Every knob's domain (see
    /// [`compact_domain`](super::export::compact_domain)); `None` in a file
    /// written before tuned files carried them.
    #[serde(default)]
    pub domains: Option<Map<String, Json>>,
    /// The judging settings; `apply` reads only `buckets` (a rule per
    /// cell axis of the study). `None` in a file written before tuned
    /// files carried them.
    #[serde(default)]
    pub judging: Option<TunedJudging>,
    #[serde(default)]
    pub buckets: Vec<TunedBucket>,
}

/// What `apply` reads of a tuned file's `judging`.
#[derive(Debug, Clone, Deserialize)]
pub struct TunedJudging {
    /// The bucket rule of every cell axis of the study (empty: the study
    /// has no cell axes).
    #[serde(default)]
    pub buckets: Option<Map<String, Json>>,
}

/// A tuned file's `class_key`: the fields, and the commands of the tools
/// they read (run by `apply` to class this host, as a launch's probe does).
#[derive(Debug, Clone, Deserialize)]
pub struct TunedClassKey {
    pub fields: ClassKey,
    #[serde(default)]
    pub tools: BTreeMap<String, String>,
}

impl TunedClassKey {
    /// A key's `tool:<name>` without a command here cannot be probed: say
    /// so rather than class the host by a version read as unknown.
    pub fn check(&self) -> Result<(), String> {
        match self.fields.tools().find(|t| !self.tools.contains_key(*t)) {
            Some(t) => Err(format!(
                "class_key.fields names `tool:{t}` but class_key.tools has no command for `{t}`"
            )),
            None => Ok(()),
        }
    }
}

/// One bucket of a tuned file.
#[derive(Debug, Clone, Deserialize)]
pub struct TunedBucket {
    pub key: String,
    pub label: String,
    pub bounds: Json,
    pub knobs: Map<String, Json>,
    pub winner: Option<String>,
    pub level: TunedLevel,
    pub decision: String,
}

/// A tuned file, by its top-level keys (see
/// [`crate::spec::yaml::parse_kind`]): those
/// [`export`](super::export()) writes.
pub const TUNED_FILE: crate::spec::yaml::FileKind = crate::spec::yaml::FileKind {
    what: "tuned",
    keys: &[
        "schema",
        "tunectl_version",
        "study",
        "spec_hash",
        "host_class",
        "class_label",
        "class_key",
        "hosts",
        "fingerprint",
        "objective",
        "statistic",
        "context",
        "baseline",
        "judging",
        "domains",
        "buckets",
    ],
};

/// Parse a tuned file's text (`file` names it in messages, with the line,
/// column and field of the first value that does not read).
pub fn parse(file: &Path, text: &str) -> Result<TunedFile, String> {
    let node = crate::spec::yaml::parse_kind(file, text, TUNED_FILE).map_err(|d| d.to_string())?;
    let json = node_to_json(&node);
    let schema = json.get("schema").and_then(Json::as_u64);
    if schema != Some(u64::from(SCHEMA)) {
        let at = match &node {
            Node::Mapping(m) => m.get_node("schema").unwrap_or(&node),
            _ => &node,
        };
        return Err(diagnostic(
            file,
            at,
            "schema",
            format!(
                "not a tuned file of schema {SCHEMA} (schema: {}); re-export it with this tunectl",
                json.get("schema")
                    .map(Json::to_string)
                    .unwrap_or("missing".into())
            ),
        ));
    }
    serde_path_to_error::deserialize(json).map_err(|e| {
        // The path of the value serde refused, walked in the YAML tree to
        // find where it is written; a missing field's path ends at the
        // mapping that lacks it.
        let mut at = &node;
        let mut field = String::new();
        for segment in e.path().iter() {
            let next = match (segment, at) {
                (serde_path_to_error::Segment::Map { key }, Node::Mapping(m)) => {
                    field = crate::spec::yaml::join(&field, key);
                    m.get_node(key)
                }
                (serde_path_to_error::Segment::Seq { index }, Node::Sequence(s)) => {
                    field = crate::spec::yaml::index(&field, *index);
                    s.get(*index)
                }
                _ => None,
            };
            match next {
                Some(n) => at = n,
                None => break,
            }
        }
        diagnostic(file, at, &field, format!("not a tuned file: {}", e.inner()))
    })
}

/// `file:line:column: field: message`, at `node`.
fn diagnostic(file: &Path, node: &Node, field: &str, message: String) -> String {
    let (line, column) = node
        .span()
        .start()
        .map(|m| (m.line(), m.column()))
        .unwrap_or((0, 0));
    crate::spec::Diagnostic {
        file: file.to_path_buf(),
        line,
        column,
        field: field.to_string(),
        message,
    }
    .to_string()
}

/// The `*.yaml` and `*.yml` files of `dir`, sorted: where tuned files are
/// looked for.
pub fn yaml_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml") | Some("yml")
                )
        })
        .collect();
    v.sort();
    Ok(v)
}

/// Load a tuned file, or every `*.yaml`/`*.yml` file of a directory (sorted
/// by name). They must all come from the same study and spec, with at
/// most one file per host class.
pub fn load(path: &Path) -> Result<Vec<(PathBuf, TunedFile)>, String> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let v = yaml_files(path).map_err(|e| format!("{}: cannot list: {e}", path.display()))?;
        if v.is_empty() {
            return Err(format!(
                "{}: no tuned files (*.yaml) in this directory; write them with `tunectl export`",
                path.display()
            ));
        }
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut out: Vec<(PathBuf, TunedFile)> = Vec::new();
    for f in files {
        let text = crate::safe_read::read_text(&f, crate::safe_read::MAX_TUNED_FILE_BYTES)
            .map_err(|e| format!("{}: cannot read: {e}", f.display()))?;
        let t = parse(&f, &text)?;
        if let Some(key) = &t.class_key {
            key.check().map_err(|e| format!("{}: {e}", f.display()))?;
        }
        if let Some((first, ft)) = out.first()
            && (ft.study != t.study || ft.spec_hash != t.spec_hash)
        {
            return Err(format!(
                "{} is from study `{}` (spec {}) but {} is from study `{}` (spec {}); apply one study's tuned files at a time",
                f.display(),
                t.study,
                short(&t.spec_hash),
                first.display(),
                ft.study,
                short(&ft.spec_hash)
            ));
        }
        if let Some((other, _)) = out.iter().find(|(_, o)| o.host_class == t.host_class) {
            return Err(format!(
                "{} and {} are both for host class {}; keep one",
                other.display(),
                f.display(),
                t.host_class
            ));
        }
        out.push((f, t));
    }
    Ok(out)
}

// ---------------------------------------------------------------- domains

fn same_value(a: &Json, b: &Json) -> bool {
    a == b || matches!((a, b), (Json::Number(x), Json::Number(y)) if x.as_f64() == y.as_f64())
}

/// Whether a domain (as
/// [`compact_domain`](super::export::compact_domain) writes it) holds `value`.
pub(super) fn domain_contains(domain: &Json, value: &Json) -> Result<bool, String> {
    if let Some(values) = domain.get("values").and_then(Json::as_array) {
        return Ok(values.iter().any(|v| same_value(v, value)));
    }
    let (Some(min), Some(max)) = (
        domain.get("min").and_then(Json::as_f64),
        domain.get("max").and_then(Json::as_f64),
    ) else {
        return Err("its domain has neither `values` nor `min` and `max`".to_string());
    };
    if let Some(step) = domain.get("step") {
        let (Some(step), Some(min), Some(v)) = (
            step.as_i64().filter(|s| *s >= 1),
            domain.get("min").and_then(Json::as_i64),
            value.as_i64(),
        ) else {
            return Ok(false);
        };
        let max = domain.get("max").and_then(Json::as_i64).unwrap_or(min);
        return Ok(min <= v
            && v <= max
            && (i128::from(v) - i128::from(min)) % i128::from(step) == 0);
    }
    Ok(value.as_f64().is_some_and(|x| min <= x && x <= max))
}

pub(super) fn describe_domain(domain: &Json) -> String {
    if let Some(values) = domain.get("values").and_then(Json::as_array) {
        let shown: Vec<String> = values.iter().take(12).map(|v| v.to_string()).collect();
        let more = if values.len() > 12 { ", ..." } else { "" };
        return format!("[{}{more}]", shown.join(", "));
    }
    let step = domain
        .get("step")
        .map(|s| format!(" by {s}"))
        .unwrap_or_default();
    format!(
        "{} to {}{step}",
        domain.get("min").unwrap_or(&Json::Null),
        domain.get("max").unwrap_or(&Json::Null)
    )
}

/// Check every knob value of loaded tuned files (baseline and every
/// bucket) against the knob domains the files carry. `Err`: the first
/// value outside its knob's domain, naming the file, the bucket and the
/// knob. `Ok`: warnings (files too old to carry domains).
pub fn check_domains(files: &[(PathBuf, TunedFile)]) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    for (path, file) in files {
        let Some(domains) = &file.domains else {
            warnings.push(format!(
                "{} carries no knob domains (it was written by an older tunectl), so its values cannot be checked against the study's knobs; re-export it with `tunectl export`",
                path.display()
            ));
            continue;
        };
        let sets = std::iter::once(("the baseline".to_string(), &file.baseline)).chain(
            file.buckets
                .iter()
                .map(|b| (format!("bucket `{}` (key {})", b.label, b.key), &b.knobs)),
        );
        for (where_, knobs) in sets {
            for (name, value) in knobs {
                let problem = match domains.get(name) {
                    None => Some(format!(
                        "`{name}` is not a knob of study `{}` (knobs: {})",
                        file.study,
                        domains.keys().cloned().collect::<Vec<_>>().join(", ")
                    )),
                    Some(d) => match domain_contains(d, value) {
                        Ok(true) => None,
                        Ok(false) => Some(format!(
                            "knob `{name}`: {value} is not one of its values ({})",
                            describe_domain(d)
                        )),
                        Err(e) => Some(format!("knob `{name}`: {e}")),
                    },
                };
                if let Some(p) = problem {
                    return Err(format!(
                        "{}: {where_}: {p}; the file was edited or damaged: re-export it with `tunectl export`",
                        path.display()
                    ));
                }
            }
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::tuned::tests::exported;

    #[test]
    fn a_tuned_file_with_a_level_it_cannot_have_is_refused() {
        let (_, text, _, _) = exported();
        let edited = text.replacen("level: draft", "level: final", 1);
        assert_ne!(edited, text);
        let e = parse(Path::new("edited.yaml"), &edited).expect_err("refused");
        // The line of the first `level:`, the column of its value.
        let line = 1 + edited[..edited.find("level: final").expect("edited")]
            .matches('\n')
            .count();
        let at = format!("edited.yaml:{line}:");
        assert!(
            e.starts_with(&at)
                && e.contains(": buckets[")
                && e.contains("].level: not a tuned file:")
                && e.contains("`final`")
                && e.contains("`verdict`, `draft`, `pending`"),
            "{e}"
        );
    }

    #[test]
    fn a_tuned_file_that_does_not_read_names_the_line_and_field() {
        let (_, text, _, _) = exported();
        let line_of =
            |t: &str, needle: &str| 1 + t[..t.find(needle).expect("in")].matches('\n').count();
        // A field of the wrong type: its own line.
        let edited = text.replacen("study: ", "study: [1, 2] #", 1);
        let e = parse(Path::new("t.yaml"), &edited).expect_err("refused");
        let at = format!("t.yaml:{}:", line_of(&edited, "study: ["));
        assert!(e.starts_with(&at) && e.contains(": study: "), "{e}");
        // A missing field: the mapping that lacks it.
        let edited = text.replacen("    decision: ", "    decided: ", 1);
        let e = parse(Path::new("t.yaml"), &edited).expect_err("refused");
        assert!(
            e.contains(": buckets[0]: ") && e.contains("missing field `decision`"),
            "{e}"
        );
        assert!(!e.starts_with("t.yaml: "), "no line: {e}");
        // A schema this tunectl does not read: the schema's line.
        let edited = text.replacen("schema: 1", "schema: 9", 1);
        let e = parse(Path::new("t.yaml"), &edited).expect_err("refused");
        let at = format!("t.yaml:{}:", line_of(&edited, "schema: 9"));
        assert!(
            e.starts_with(&at) && e.contains("schema 1 (schema: 9)"),
            "{e}"
        );
    }

    #[test]
    fn loading_checks_schema_study_and_duplicates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (name, text, _, _) = exported();
        assert!(
            load(dir.path())
                .expect_err("empty dir")
                .contains("no tuned files")
        );
        std::fs::write(dir.path().join(&name), &text).expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not yaml: [").expect("write");
        assert_eq!(load(dir.path()).expect("loads").len(), 1);
        std::fs::write(dir.path().join("copy.yaml"), &text).expect("write");
        assert!(
            load(dir.path())
                .expect_err("duplicate")
                .contains("both for host class")
        );
        std::fs::write(
            dir.path().join("copy.yaml"),
            text.replace("host_class: hc-", "host_class: hc-f")
                .replace("spec_hash: ", "spec_hash: x"),
        )
        .expect("write");
        assert!(
            load(dir.path())
                .expect_err("two studies")
                .contains("one study")
        );
        let bad = dir.path().join("old.yml");
        std::fs::write(&bad, "schema: 9\n").expect("write");
        assert!(load(&bad).expect_err("schema").contains("schema"));
    }
}
