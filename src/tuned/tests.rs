//! Fixtures the tests of the tuned modules share: a study's records, an
//! analysis of one class built by hand, and the tuned file exported
//! from it.

use std::path::Path;

use serde_json::{Value as Json, json};

use super::{TunedFile, export, node_to_json, parse};
use crate::decide::{Analysis, BucketCell, BucketReport, BucketWinner, Refusal, analyze};
use crate::fingerprint::{Fingerprint, Gpu};
use crate::ledger::Scan;
use crate::ledger::records::{AttemptRecord, StudyRecord};

fn study() -> StudyRecord {
    serde_json::from_value(json!({
        "schema": 1, "tunectl_version": "t", "study_id": "fake", "spec_hash": "feedface0123456789",
        "spec": {
            "objective": {"name": "tp", "unit": "ops/s", "better": "higher"},
            "knobs": [
                {"name": "mode", "kind": "categorical", "values": ["base", "fast", "crash"], "default": "base"},
                {"name": "threads", "kind": "int", "values": [1, 2], "default": 1},
            ],
            "context": {"model": "m"},
        },
        "created_at": "",
    }))
    .expect("study record")
}

/// A hand-written attempt record (JSON, so new optional fields of the
/// record do not break this test).
fn attempt(
    cell: i64,
    config: u64,
    mode: &str,
    r: u32,
    tp: Option<f64>,
    class: &str,
) -> AttemptRecord {
    let baseline = mode == "base";
    let label = if baseline {
        "baseline".to_string()
    } else {
        format!("mode={mode}")
    };
    serde_json::from_value(json!({
        "schema": 1, "tunectl_version": "t", "study_id": "fake", "spec_hash": "feedface0123456789",
        "trial_key": format!("{cell}-{config}-{r}"), "attempt_id": "a",
        "config": {"mode": mode, "threads": 1}, "config_label": label, "config_index": config,
        "is_baseline": baseline, "cell": {"n": cell}, "cell_label": format!("n={cell}"),
        "cell_index": cell, "repeat": r, "fidelity": null, "host": "h1", "host_class": class,
        "fingerprint": "fp", "slot": 0, "started_at": "", "finished_at": "", "duration_s": 0.0,
        "run_s": null, "warmup_runs": 0,
        "status": if tp.is_some() { "ok" } else { "failed" },
        "failure": if tp.is_some() { Json::Null } else { json!({"class": "crash", "detail": "exit code 3", "phase": "measure"}) },
        "exit": null,
        "metrics": match tp { Some(x) => json!({"tp": [x, x + 0.5, x - 0.5]}), None => json!({}) },
        "digest": if tp.is_some() { json!("d") } else { Json::Null },
        "outputs": {}, "command": "", "stdout_tail": "", "stderr_tail": "",
    }))
    .expect("attempt record")
}

pub(super) fn h100() -> Fingerprint {
    Fingerprint {
        hostname: Some("gpu1".into()),
        cpu_model: Some("Intel(R) Xeon(R) Platinum 8480+".into()),
        cpu_count: Some(224),
        gpus: (0..2)
            .map(|i| Gpu {
                index: i,
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_mib: Some(81559),
                uuid: None,
                vendor: crate::fingerprint::GpuVendor::Nvidia,
            })
            .collect(),
        driver_version: Some("550.54.15".into()),
        cuda_version: Some("12.4".into()),
        ..Fingerprint::default()
    }
}

/// An analysis of one class (2× H100) with two cells and three buckets
/// built by hand: n ∈ [1, 2) won by mode=fast, n ∈ [2, 4) keeping the
/// baseline, n ∈ [4, 8) pending.
pub(super) fn analysis() -> Analysis {
    let fp = h100();
    let class = fp.host_class();
    let mut attempts = Vec::new();
    for cell in [1, 2] {
        // Three runs each (an interval needs two a side), a little
        // apart.
        for r in 0..3 {
            let jitter = [0.0, 0.3, -0.3][r as usize];
            attempts.push(attempt(cell, 0, "base", r, Some(100.0 + jitter), &class));
            attempts.push(attempt(
                cell,
                1,
                "fast",
                r,
                Some(if cell == 1 { 200.0 } else { 101.0 } - jitter),
                &class,
            ));
            attempts.push(attempt(cell, 2, "crash", r, None, &class));
        }
    }
    let scan = Scan {
        attempts: crate::ledger::shared(attempts),
        ..Scan::default()
    };
    let mut a = analyze(&study(), &scan, &[]);
    let c = &mut a.classes[0];
    c.label = fp.class_label();
    c.fingerprint = Some(fp);
    c.hosts = vec!["gpu1".into()];
    let cell1 = c.cells[0].clone();
    let cell2 = c.cells[1].clone();
    assert_eq!(
        cell1.winner.as_ref().map(|w| w.label.as_str()),
        Some("mode=fast")
    );
    let fast = cell1.winner.clone().expect("winner");
    c.buckets = vec![
        BucketReport {
            key: "b1".into(),
            label: "n ∈ [2^0, 2^1)".into(),
            bounds: json!({"n": {"min": 1, "max": 2}}),
            cells: vec!["n=1".into()],
            config: fast.config.clone(),
            winner: Some(BucketWinner {
                label: "mode=fast".into(),
                config: fast.config.clone(),
                knobs_changed: 1,
                speedup: 2.0,
                min_cell_speedup: 2.0,
                interval: crate::stats::speedup::Interval {
                    speedup: 2.0,
                    low: 1.9,
                    high: 2.1,
                    confidence: 0.95,
                    runs: 3,
                    reference_runs: 3,
                    samples_as_runs: false,
                },
                confirmation: None,
            }),
            decision: crate::decide::Decision::NothingMeasured,
            level: crate::decide::Level::Draft,
            level_reason: crate::decide::LevelReasons::one(crate::decide::LevelReason::NoRound),
            threshold: Some(0.02),
            per_cell: vec![BucketCell {
                cell_label: "n=1".into(),
                baseline: cell1.baseline.clone(),
                winner: cell1.winner.clone(),
            }],
            refusals: vec![],
            rejected: cell1.rejected.clone(),
            interval: None,
            racing: None,
            confirm_runs: None,
        },
        BucketReport {
            key: "b2".into(),
            label: "n ∈ [2^1, 2^2)".into(),
            bounds: json!({"n": {"min": 2, "max": 4}}),
            cells: vec!["n=2".into()],
            config: json!({"mode": "base", "threads": 1}),
            winner: None,
            decision: crate::decide::Decision::NothingPassedTheGate,
            level: crate::decide::Level::Draft,
            level_reason: crate::decide::LevelReasons::one(crate::decide::LevelReason::NoRound),
            threshold: Some(0.02),
            per_cell: vec![BucketCell {
                cell_label: "n=2".into(),
                baseline: cell2.baseline.clone(),
                winner: None,
            }],
            refusals: vec![Refusal {
                config_label: "mode=fast".into(),
                cell_label: "n=2".into(),
                speedup: Some(1.01),
                reason: crate::decide::RefusalReason::NotConfirmed,
            }],
            rejected: cell2.rejected.clone(),
            interval: None,
            racing: None,
            confirm_runs: None,
        },
        BucketReport {
            key: "b3".into(),
            label: "n ∈ [2^2, 2^3)".into(),
            bounds: json!({"n": {"min": 4, "max": 8}}),
            cells: vec![],
            config: json!({"mode": "fast", "threads": 1}),
            winner: None,
            decision: crate::decide::Decision::NothingMeasured,
            level: crate::decide::Level::Draft,
            level_reason: crate::decide::LevelReasons::default(),
            threshold: None,
            per_cell: vec![],
            refusals: vec![],
            rejected: vec![],
            interval: None,
            racing: None,
            confirm_runs: None,
        },
    ];
    a
}

pub(super) fn exported() -> (String, String, TunedFile, Json) {
    let a = analysis();
    let (name, text) = export(&a, &a.classes[0]);
    let file = parse(Path::new(&name), &text).expect("parses back");
    let node = crate::spec::yaml::parse_text(Path::new(&name), &text).expect("yaml");
    (name, text.clone(), file, node_to_json(&node))
}
