//! Reading a local ledger's attempt records straight from its files, and
//! waiting for a condition, for the transport tests. Include it with
//! `#[path = "support/ledger_files.rs"] mod ledger_files;`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// Attempt records of `study` in the local ledger at `ledger`: trial key →
/// its attempts (in no particular order).
pub fn attempts(ledger: &Path, study: &str) -> BTreeMap<String, Vec<Json>> {
    let mut out: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    let Ok(dirs) = std::fs::read_dir(ledger.join(study).join("trials")) else {
        return out;
    };
    for d in dirs.flatten() {
        let key = d.file_name().to_string_lossy().into_owned();
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            let p = f.path();
            if p.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&p)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
                let record = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
                out.entry(key.clone()).or_default().push(record);
            }
        }
    }
    out
}

/// Poll `cond` every 50 ms until it holds (true) or `limit` passes (false).
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}
