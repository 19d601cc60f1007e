//! `trial:`: the command that runs one trial, its timeout and environment,
//! and `trial.files`, the benchmark's files hashed into the spec.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use marked_yaml::Node;
use serde::Serialize;

use super::parse::{ser_secs, stays_inside};
use crate::spec::yaml::{Walker, index, is_identifier, join};

#[derive(Debug, Clone, Serialize)]
pub struct TrialSpec {
    pub command: String,
    #[serde(serialize_with = "ser_secs")]
    pub timeout: Duration,
    pub env: BTreeMap<String, String>,
    /// `trial.files`: files of the benchmark (a wrapper script, a model
    /// config) by path relative to the study directory, each with the
    /// sha256 of its content when the study was loaded (`sha256:<hex>`).
    /// Part of the spec, so a changed file is a changed study.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
}

const TRIAL_KEYS: &[&str] = &["command", "timeout", "env", "files"];

/// Largest file `trial.files` hashes (a benchmark's scripts and configs,
/// not its data).
pub const MAX_TRIAL_FILE_BYTES: u64 = 256 << 20;

pub(super) fn parse_trial(w: &mut Walker, node: &Node, dir: &Path) -> Option<TrialSpec> {
    let map = w.mapping(node, "trial")?;
    w.check_keys(map, "trial", TRIAL_KEYS);
    let command = w
        .required(map, "trial", "command")
        .and_then(|n| w.string(n, "trial.command"));
    if let (Some(c), Some(n)) = (&command, map.get_node("command"))
        && c.trim().is_empty()
    {
        w.error_at(n, "trial.command", "the command is empty");
    }
    let timeout = match map.get_node("timeout") {
        Some(n) => w.duration(n, "trial.timeout"),
        None => Some(Duration::from_secs(600)),
    };
    let env = match map.get_node("env") {
        Some(n) => {
            let env = w.string_map(n, "trial.env").unwrap_or_default();
            if let Some(m) = n.as_mapping() {
                for k in m.keys() {
                    let name = k.as_str();
                    if !is_identifier(name) || name.starts_with("TUNECTL_") {
                        w.error(
                            k.span(),
                            &join("trial.env", name),
                            format!("`{name}` is not a usable environment variable name (TUNECTL_* is reserved)"),
                        );
                    }
                }
            }
            env
        }
        None => BTreeMap::new(),
    };
    let files = match map.get_node("files") {
        Some(n) => parse_trial_files(w, n, dir)?,
        None => BTreeMap::new(),
    };
    Some(TrialSpec {
        command: command?,
        timeout: timeout?,
        env,
        files,
    })
}

/// `trial.files`: each a relative path inside the study directory naming a
/// regular file, hashed now.
fn parse_trial_files(w: &mut Walker, node: &Node, dir: &Path) -> Option<BTreeMap<String, String>> {
    let paths = w.string_list(node, "trial.files")?;
    let Node::Sequence(seq) = node else {
        return None;
    };
    let mut out = BTreeMap::new();
    for (i, (path, item)) in paths.iter().zip(seq.iter()).enumerate() {
        let field = index("trial.files", i);
        let p = Path::new(path);
        if !stays_inside(path) {
            w.error_at(
                item,
                &field,
                format!("`{path}` must be a relative path inside the study directory"),
            );
            continue;
        }
        match hash_file(&dir.join(p)) {
            Ok(digest) => {
                if out.insert(path.clone(), digest).is_some() {
                    w.error_at(item, &field, format!("`{path}` is listed twice"));
                }
            }
            Err(why) => w.error_at(item, &field, format!("`{path}` {why}")),
        }
    }
    Some(out)
}

/// `sha256:<hex>` of a regular file's content, or why it has none.
fn hash_file(path: &Path) -> Result<String, String> {
    use crate::safe_read::{Unreadable, read_chunks};
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    read_chunks(path, MAX_TRIAL_FILE_BYTES, None, |b| hasher.update(b)).map_err(|e| match e {
        Unreadable::Missing(e) => format!("cannot be read: {e}"),
        Unreadable::Refused(why) if why.ends_with("not a regular file") => {
            format!("{why} (list the files themselves)")
        }
        Unreadable::Refused(why) if why.contains("over the limit") => {
            format!("{why} that trial.files hashes (list scripts and configs, not data)")
        }
        Unreadable::Refused(why) | Unreadable::Failed(why) => why,
    })?;
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}
