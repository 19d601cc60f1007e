//! What the ssh and Slurm transport tests share (tests/it/ssh.rs,
//! tests/it/slurm.rs): the FAKE GPU trial program
//! tests/fixtures/fake-gpu-trial with its known profile per GPU model (the
//! expectation table both transports are held to), the study over it, a
//! `tunectl launch` read through its JSON outcome, and what a report and
//! the ledger say a launch decided.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value as Json;

use super::ledger_files;

pub const H100: &str = "NVIDIA H100 80GB HBM3";
pub const A100: &str = "NVIDIA A100-SXM4-80GB";

/// The FAKE GPU trial program.
pub fn fake_gpu_trial() -> String {
    format!(
        "{}/tests/fixtures/fake-gpu-trial",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The knobs the fake reacts to (a study's `knobs:` lines).
pub const KNOBS: &str = "  tile: {kind: int, values: [64, 128, 256], default: 64}\n  fast_math: {kind: bool, default: false}\n";

/// What the fake does on one GPU model, whatever the transport.
pub struct Truth {
    pub model: &'static str,
    /// What ships in every bucket: a config's label, or `None` for the
    /// baseline (nothing beats it).
    pub ships: Option<&'static str>,
    /// Configs that fail there, with their rejection class.
    pub fails: &'static [(&'static str, &'static str)],
}

/// The fake's profile: on H100 `tile=128` wins; on A100 `tile=256` runs
/// out of memory and nothing beats the baseline; `fast_math=true` changes
/// the output on both.
pub const PROFILE: [Truth; 2] = [
    Truth {
        model: H100,
        ships: Some("tile=128"),
        fails: &[],
    },
    Truth {
        model: A100,
        ships: None,
        fails: &[("tile=256", "oom")],
    },
];

/// A config the fake's output differs with, on every model.
pub const CHANGES_OUTPUT: &str = "fast_math=true";

/// A launch that ended, read through `--format json` (`tunectl.launch/1`).
pub struct Launched {
    pub stderr: String,
    pub doc: Json,
}

impl Launched {
    /// A count of the launch's `summary` (`ran`, `lost`, ...).
    pub fn count(&self, key: &str) -> u64 {
        self.doc["summary"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("no summary.{key} in {}", self.doc))
    }
}

/// Run `launch` (a `tunectl launch` command) with `--format json`, for at
/// most `limit`; it must run to its end ([`super::finished`]).
pub fn launch(launch: std::process::Command, limit: Duration) -> Launched {
    let out = assert_cmd::Command::from_std(launch)
        .args(["--format", "json"])
        .timeout(limit)
        .output()
        .expect("run tunectl launch");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc: Json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "launch printed no JSON ({e}); exit {:?}\n--- stdout\n{}--- stderr\n{stderr}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let code = out.status.code();
    assert!(
        super::finished(code, &doc),
        "launch did not run to its end (exit {code:?}):\n{doc:#}\n--- stderr\n{stderr}"
    );
    Launched { stderr, doc }
}

/// `tunectl report STUDY --format json --ledger LEDGER`.
pub fn report_json(study: &Path, ledger: &Path) -> Json {
    let out = super::env::tunectl_command()
        .args(["report", "--format", "json", "--ledger"])
        .arg(ledger)
        .arg(study)
        .output()
        .expect("run tunectl report");
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// The report's class whose label names `model`.
pub fn class_of<'a>(report: &'a Json, model: &str) -> &'a Json {
    report["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .find(|c| c["label"].as_str().is_some_and(|l| l.contains(model)))
        .unwrap_or_else(|| panic!("no {model} class in {report}"))
}

/// The buckets of a report's class.
pub fn buckets(class: &Json) -> &[Json] {
    class["buckets"].as_array().expect("buckets")
}

/// What a launch shipped per host class: class id → bucket label →
/// (winner or `baseline`, level).
pub fn shipped(report: &Json) -> BTreeMap<String, BTreeMap<String, (String, String)>> {
    let mut out = BTreeMap::new();
    for c in report["classes"].as_array().expect("classes") {
        let per_bucket = buckets(c)
            .iter()
            .map(|b| {
                (
                    b["label"].as_str().unwrap_or_default().to_string(),
                    (
                        b["winner"]["label"]
                            .as_str()
                            .unwrap_or("baseline")
                            .to_string(),
                        b["level"].as_str().unwrap_or_default().to_string(),
                    ),
                )
            })
            .collect();
        out.insert(
            c["host_class"].as_str().unwrap_or_default().to_string(),
            per_bucket,
        );
    }
    out
}

/// Every config the gate rejected in a class, as (cell, config, rejection
/// class), sorted.
pub fn rejected(class: &Json) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for cell in class["cells"].as_array().expect("cells") {
        for r in cell["rejected"].as_array().expect("rejected") {
            out.push((
                cell["cell_label"].as_str().unwrap_or_default().to_string(),
                r["label"].as_str().unwrap_or_default().to_string(),
                r["rejection"]["class"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ));
        }
    }
    out.sort();
    out
}

/// Each model's buckets ship what [`PROFILE`] says, with the decision's
/// outcome to match.
fn assert_ships(report: &Json) {
    for truth in &PROFILE {
        let class = class_of(report, truth.model);
        for b in buckets(class) {
            match truth.ships {
                Some(label) => {
                    assert_eq!(b["winner"]["label"], label, "{}: {b:#}", truth.model);
                    assert_eq!(b["outcome"], "wins", "{}: {b:#}", truth.model);
                }
                None => assert!(
                    b["winner"].is_null(),
                    "nothing beats the {} baseline: {b:#}",
                    truth.model
                ),
            }
        }
    }
}

/// A grid study's report holds to [`PROFILE`]: what ships, what fails
/// with which class, and [`CHANGES_OUTPUT`] rejected as `output_changed`
/// on every model.
pub fn assert_grid_profile(report: &Json) {
    assert_eq!(
        report["classes"].as_array().map(Vec::len),
        Some(PROFILE.len()),
        "{report:#}"
    );
    assert_ships(report);
    for truth in &PROFILE {
        let rejected = rejected(class_of(report, truth.model));
        for (config, why) in truth.fails {
            assert!(
                rejected.iter().any(|(_, c, w)| c == config && w == why),
                "{}: {config} should be rejected as {why}: {rejected:?}",
                truth.model
            );
        }
        assert!(
            rejected
                .iter()
                .any(|(_, c, w)| c.contains(CHANGES_OUTPUT) && w == "output_changed"),
            "{}: {rejected:?}",
            truth.model
        );
    }
}

/// A search study's report (`hyperband`) holds to [`PROFILE`]: what ships,
/// and each class screened on its own: rungs fail only where a config
/// fails on that model.
pub fn assert_search_profile(report: &Json) {
    assert_ships(report);
    let total = |c: &Json, key: &str| -> u64 {
        c["search"]
            .as_array()
            .expect("search rows")
            .iter()
            .filter_map(|r| r[key].as_u64())
            .sum()
    };
    for truth in &PROFILE {
        let class = class_of(report, truth.model);
        let failed = total(class, "failed");
        assert_eq!(
            failed > 0,
            !truth.fails.is_empty(),
            "{}: {failed} failed rungs: {class:#}",
            truth.model
        );
        assert!(
            total(class, "output_changed") > 0,
            "{}: {class:#}",
            truth.model
        );
    }
}

/// Each trial has exactly one terminal (ok/failed) attempt; drift anchors
/// aside (an anchor is measured again by design). Returns (trials, lost
/// attempts).
pub fn one_terminal_per_trial(ledger: &Path, study: &str) -> (usize, usize) {
    let all = ledger_files::attempts(ledger, study);
    let mut lost = 0;
    for (key, list) in &all {
        let terminal = list.iter().filter(|a| a["status"] != "lost").count();
        lost += list.len() - terminal;
        let role = list[0]["role"].as_str().unwrap_or_default();
        if role == "anchor" {
            continue;
        }
        assert_eq!(
            terminal, 1,
            "trial {key} ({role}) has {terminal} terminal attempts: {list:?}"
        );
    }
    (all.len(), lost)
}
