//! Reading a local ledger's attempt records straight from its files (not
//! with tunectl's own reader).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

/// Attempt records of `study` in the local ledger at `ledger`: trial key →
/// its attempts, in attempt-id order (their file names sort by time).
pub fn attempts(ledger: &Path, study: &str) -> BTreeMap<String, Vec<Json>> {
    let mut out: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    let Ok(dirs) = std::fs::read_dir(ledger.join(study).join("trials")) else {
        return out;
    };
    for d in dirs.flatten() {
        let key = d.file_name().to_string_lossy().into_owned();
        let mut files: Vec<PathBuf> = std::fs::read_dir(d.path())
            .into_iter()
            .flatten()
            .flatten()
            .map(|f| f.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for p in files {
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            let record = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
            out.entry(key.clone()).or_default().push(record);
        }
    }
    out
}

/// The text of every `.yaml` file directly in `dir` (none when it does not
/// exist), by file name.
pub fn yaml_texts(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|f| f.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
        })
        .collect()
}

/// Every `.json` file under `dir`, parsed (none when it does not exist).
pub fn json_files(dir: &Path) -> Vec<Json> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&p)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
                out.push(
                    serde_json::from_str(&text)
                        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display())),
                );
            }
        }
    }
    out
}
