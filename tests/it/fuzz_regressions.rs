//! Every input the fuzzer (benches/fuzz.rs) found crashing is kept under
//! tests/fixtures/fuzz/<target>/ and replayed here through the same
//! target functions: none may panic or take more than 5 s.
//! The crashes it found before they were fixed elsewhere (a duration of
//! 1e308, YAML nested 20,000 deep) are among them.

use std::path::{Path, PathBuf};
use std::time::Duration;

#[path = "../../benches/fuzz/targets.rs"]
mod targets;

fn cases(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for t in targets::TARGETS {
        let Ok(entries) = std::fs::read_dir(dir.join(t)) else {
            continue;
        };
        for e in entries.flatten() {
            out.push((t.to_string(), e.path()));
        }
    }
    out.sort();
    out
}

/// Replay every case of `dir`; the failures, described.
fn replay(dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for (target, path) in cases(dir) {
        let data = std::fs::read(&path).expect("read case");
        let (tx, rx) = std::sync::mpsc::channel();
        let t = target.clone();
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || {
                let r = std::panic::catch_unwind(|| targets::run_target(&t, &data));
                let _ = tx.send(r.is_ok());
            })
            .expect("spawn");
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(true) => {}
            Ok(false) => failures.push(format!("{target}: {} panics", path.display())),
            Err(_) => failures.push(format!("{target}: {} hangs", path.display())),
        }
    }
    failures
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz")
}

#[test]
fn fuzz_findings_stay_fixed() {
    assert!(!cases(&root()).is_empty());
    let failures = replay(&root());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
