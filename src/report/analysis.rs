//! From ledger attempts to decisions.
//!
//! Correctness first: a config with any failed attempt is rejected with
//! that failure; a config whose output digest differs from the baseline's
//! (same host class, same cell) is rejected as `output_changed`. Among the
//! rest, a candidate replaces the baseline only if its improvement exceeds
//! both `min_improvement` and the combined relative spread of the two;
//! candidates within noise of the leader collapse to the one with the
//! fewest knobs changed, then the lowest label.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::ledger::records::{AttemptRecord, AttemptStatus, FailureClass, HostRecord, StudyRecord};
use crate::ledger::{CorruptObject, Scan};
use crate::stats::Summary;

/// Default minimum relative improvement for a win.
pub const MIN_IMPROVEMENT: f64 = 0.02;

#[derive(Debug, Clone, Serialize)]
pub struct MetricInfo {
    pub name: String,
    pub unit: String,
    /// `higher` or `lower`.
    pub better: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub study_id: String,
    pub spec_hash: String,
    pub tunectl_version: String,
    /// `draft`: selection without re-measurement against the baseline.
    pub level: String,
    pub objective: MetricInfo,
    pub statistic: String,
    pub min_improvement: f64,
    pub context: BTreeMap<String, String>,
    /// The baseline config (every knob at its default).
    pub baseline: serde_json::Value,
    pub classes: Vec<ClassReport>,
    pub corrupt_objects: Vec<CorruptObject>,
    /// Attempts ignored because they belong to another spec.
    pub foreign_attempts: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassReport {
    pub host_class: String,
    pub label: String,
    pub hosts: Vec<String>,
    /// The class's most recent fingerprint (class-defining fields and all).
    pub fingerprint: Option<crate::fingerprint::Fingerprint>,
    pub cells: Vec<CellReport>,
    /// Decisions per bucket: what ships.
    pub buckets: Vec<BucketReport>,
}

/// One bucket of cells of one host class, and what wins it.
#[derive(Debug, Clone, Serialize)]
pub struct BucketReport {
    /// Stable id: first 16 hex of the sha256 of `bounds`.
    pub key: String,
    /// For people: `n ∈ [2^18, 2^19)` and so on.
    pub label: String,
    /// Per cell axis: `{"min": lo, "max": hi}` (half-open, pow2 rule),
    /// `{"values": [v]}` (exact rule) or `"any"` (all rule).
    pub bounds: serde_json::Value,
    /// Labels of the cells in the bucket that have results.
    pub cells: Vec<String>,
    /// The config that ships: the winner's, or the baseline's.
    pub config: serde_json::Value,
    pub winner: Option<BucketWinner>,
    pub decision: String,
    /// `draft` or `verdict`.
    pub level: String,
    pub level_reason: String,
    /// Relative improvement the winner had to exceed.
    pub threshold: Option<f64>,
    /// Per cell: the baseline and, when there is one, the winner.
    pub per_cell: Vec<BucketCell>,
    /// Configs that won a cell but were refused the bucket, with the cell
    /// that refused them.
    pub refusals: Vec<Refusal>,
    /// Configs rejected by the gate in any cell of the bucket.
    pub rejected: Vec<ConfigReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BucketWinner {
    pub label: String,
    pub config: serde_json::Value,
    pub knobs_changed: usize,
    /// Geometric mean over the bucket's cells of the speedup.
    pub speedup: f64,
    /// The smallest per-cell speedup.
    pub min_cell_speedup: f64,
    /// The final interleaved round against the baseline, when it ran.
    pub confirmation: Option<Confirmation>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Confirmation {
    pub speedup: f64,
    pub baseline: Option<Summary>,
    pub winner: Option<Summary>,
    pub threshold: f64,
    pub confirmed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct BucketCell {
    pub cell_label: String,
    pub baseline: Option<ConfigReport>,
    pub winner: Option<ConfigReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub config_label: String,
    pub cell_label: String,
    pub speedup: Option<f64>,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CellReport {
    pub cell: serde_json::Value,
    pub cell_label: String,
    /// `ok`, `failed` or `pending`.
    pub baseline_state: String,
    pub baseline: Option<ConfigReport>,
    pub winner: Option<ConfigReport>,
    /// Why the winner won, or why the baseline stays.
    pub decision: String,
    /// The threshold the winner had to beat (relative).
    pub threshold: Option<f64>,
    /// Eligible candidates, best first (the winner included).
    pub eligible: Vec<ConfigReport>,
    pub rejected: Vec<ConfigReport>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rejection {
    pub class: FailureClass,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    pub label: String,
    pub config: serde_json::Value,
    pub knobs_changed: usize,
    /// Trials with a terminal attempt.
    pub trials: usize,
    pub summary: Option<Summary>,
    pub relative_spread: Option<f64>,
    /// Relative to the baseline in the "better" direction: 1.10 = 10 % better.
    pub speedup: Option<f64>,
    pub rejection: Option<Rejection>,
    #[serde(skip)]
    order: (u64, String),
}

struct Group<'a> {
    attempts: Vec<&'a AttemptRecord>,
}

/// Analyse a study's ledger contents.
pub fn analyze(study: &StudyRecord, scan: &Scan, hosts: &[HostRecord]) -> Analysis {
    let spec = &study.spec;
    let objective = MetricInfo {
        name: spec["objective"]["name"]
            .as_str()
            .unwrap_or("objective")
            .to_string(),
        unit: spec["objective"]["unit"].as_str().unwrap_or("").to_string(),
        better: spec["objective"]["better"]
            .as_str()
            .unwrap_or("higher")
            .to_string(),
    };
    let higher = objective.better != "lower";
    let context: BTreeMap<String, String> = spec["context"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let baseline: serde_json::Map<String, serde_json::Value> = spec["knobs"]
        .as_array()
        .map(|ks| {
            ks.iter()
                .filter_map(|k| Some((k["name"].as_str()?.to_string(), k["default"].clone())))
                .collect()
        })
        .unwrap_or_default();

    let terminal = scan.terminal();
    let mut foreign = 0;
    // class → cell index → config index → attempts
    let mut tree: BTreeMap<&str, BTreeMap<u32, BTreeMap<u64, Group>>> = BTreeMap::new();
    for a in terminal.values() {
        if a.spec_hash != study.spec_hash {
            foreign += 1;
            continue;
        }
        tree.entry(a.host_class.as_str())
            .or_default()
            .entry(a.cell_index)
            .or_default()
            .entry(a.config_index)
            .or_insert_with(|| Group { attempts: vec![] })
            .attempts
            .push(a);
    }

    let mut classes = Vec::new();
    for (class_id, cells) in &tree {
        let mut class_hosts: Vec<String> = hosts
            .iter()
            .filter(|h| h.host_class == *class_id)
            .map(|h| h.host.clone())
            .collect();
        class_hosts.sort();
        class_hosts.dedup();
        let label = hosts
            .iter()
            .rev()
            .find(|h| h.host_class == *class_id)
            .map(|h| h.class_label.clone())
            .unwrap_or_else(|| "unknown (no fingerprint in the ledger)".to_string());
        let cell_reports = cells
            .values()
            .map(|configs| analyze_cell(configs, &objective.name, higher, MIN_IMPROVEMENT))
            .collect();
        let fingerprint = hosts
            .iter()
            .rev()
            .find(|h| h.host_class == *class_id)
            .map(|h| h.fingerprint.clone());
        classes.push(ClassReport {
            host_class: class_id.to_string(),
            label,
            hosts: class_hosts,
            fingerprint,
            cells: cell_reports,
            buckets: Vec::new(),
        });
    }

    Analysis {
        study_id: study.study_id.clone(),
        spec_hash: study.spec_hash.clone(),
        tunectl_version: crate::ledger::records::VERSION.to_string(),
        level: "draft".to_string(),
        statistic: "median ± 1.4826·MAD over n samples".to_string(),
        objective,
        min_improvement: MIN_IMPROVEMENT,
        context,
        baseline: serde_json::Value::Object(baseline),
        classes,
        corrupt_objects: scan.corrupt.clone(),
        foreign_attempts: foreign,
    }
}

fn short(d: &str) -> &str {
    &d[..d.len().min(12)]
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn analyze_cell(
    configs: &BTreeMap<u64, Group>,
    objective: &str,
    higher: bool,
    min_improvement: f64,
) -> CellReport {
    let any = configs.values().flat_map(|g| g.attempts.first()).next();
    let cell = any
        .map(|a| a.cell.clone())
        .unwrap_or(serde_json::Value::Null);
    let cell_label = any.map(|a| a.cell_label.clone()).unwrap_or_default();
    let base_group = configs
        .values()
        .find(|g| g.attempts.iter().any(|a| a.is_baseline));
    let mut notes = Vec::new();

    let mut base_report = base_group.map(|g| config_report(g, objective, None, None, higher));
    let mut base_digest: Option<&str> = None;
    if let Some(g) = base_group {
        let mut ok: Vec<&&AttemptRecord> = g
            .attempts
            .iter()
            .filter(|a| a.status == AttemptStatus::Ok)
            .collect();
        ok.sort_by_key(|a| a.repeat);
        base_digest = ok.first().and_then(|a| a.digest.as_deref());
        let distinct: std::collections::BTreeSet<Option<&str>> =
            ok.iter().map(|a| a.digest.as_deref()).collect();
        if distinct.len() > 1 {
            notes.push(
                "the baseline's output differs between its own repeats; candidates are compared with its first repeat".to_string(),
            );
        }
    }
    let base_state = match &base_report {
        None => "pending",
        Some(r) if r.rejection.is_some() => "failed",
        Some(_) => "ok",
    };
    let base_summary = base_report.as_ref().and_then(|r| r.summary);

    let mut eligible = Vec::new();
    let mut rejected = Vec::new();
    for g in configs.values() {
        if g.attempts.iter().any(|a| a.is_baseline) {
            continue;
        }
        let r = config_report(g, objective, base_digest, base_summary, higher);
        if r.rejection.is_some() {
            rejected.push(r);
        } else if r.summary.is_some() {
            eligible.push(r);
        }
    }
    // Best first: by median in the better direction, then a total order.
    eligible.sort_by(|a, b| {
        let (ma, mb) = (
            a.summary.map(|s| s.median).unwrap_or(f64::NAN),
            b.summary.map(|s| s.median).unwrap_or(f64::NAN),
        );
        let by = if higher {
            mb.total_cmp(&ma)
        } else {
            ma.total_cmp(&mb)
        };
        by.then_with(|| a.order.cmp(&b.order))
    });
    rejected.sort_by(|a, b| a.order.cmp(&b.order));

    let mut winner = None;
    let mut threshold = None;
    let decision = match (&base_report, base_summary) {
        (None, _) => "pending: the baseline has not run here yet".to_string(),
        (Some(b), _) if b.rejection.is_some() => {
            let r = b
                .rejection
                .as_ref()
                .map(|r| format!("{}: {}", r.class.as_str(), r.detail))
                .unwrap_or_default();
            format!("baseline failed ({r}); nothing can win here")
        }
        (Some(_), None) => "pending: the baseline has no measurements yet".to_string(),
        (Some(_), Some(bs)) => match eligible.first() {
            None => "baseline kept: no eligible candidate".to_string(),
            Some(leader) => {
                let ls = leader.summary.unwrap_or(bs);
                let improvement = leader.speedup.unwrap_or(1.0) - 1.0;
                let needed = min_improvement.max(ls.relative_spread() + bs.relative_spread());
                threshold = Some(needed);
                if improvement > needed {
                    // Contenders: candidates that also clear their threshold
                    // and cannot be told apart from the leader.
                    let pick = eligible
                        .iter()
                        .filter(|c| {
                            let Some(cs) = c.summary else { return false };
                            let own =
                                min_improvement.max(cs.relative_spread() + bs.relative_spread());
                            let imp = c.speedup.unwrap_or(1.0) - 1.0;
                            let gap = ((ls.median - cs.median) / ls.median).abs();
                            imp > own && gap <= ls.relative_spread() + cs.relative_spread()
                        })
                        .min_by(|a, b| a.order.cmp(&b.order))
                        .unwrap_or(leader);
                    winner = Some(pick.clone());
                    let tie = if pick.label != leader.label {
                        format!(
                            "; within noise of the fastest ({}), it changes fewer knobs",
                            leader.label
                        )
                    } else {
                        String::new()
                    };
                    format!(
                        "{} wins: {:.2}× the baseline (+{}), above the threshold of {} (the larger of the {} minimum and the combined spread){tie}",
                        pick.label,
                        pick.speedup.unwrap_or(1.0),
                        pct(pick.speedup.unwrap_or(1.0) - 1.0),
                        pct(needed),
                        pct(min_improvement),
                    )
                } else {
                    format!(
                        "baseline kept: the best candidate ({}) is {:+.1}%, not above the threshold of {} (no improvement)",
                        leader.label,
                        improvement * 100.0,
                        pct(needed)
                    )
                }
            }
        },
    };
    if let Some(b) = base_report.as_mut() {
        b.speedup = base_summary.map(|_| 1.0);
    }
    CellReport {
        cell,
        cell_label,
        baseline_state: base_state.to_string(),
        baseline: base_report,
        winner,
        decision,
        threshold,
        eligible,
        rejected,
        notes,
    }
}

fn config_report(
    g: &Group,
    objective: &str,
    base_digest: Option<&str>,
    base: Option<Summary>,
    higher: bool,
) -> ConfigReport {
    let first = g.attempts[0];
    let mut attempts = g.attempts.clone();
    attempts.sort_by_key(|a| a.repeat);
    let samples: Vec<f64> = attempts
        .iter()
        .filter(|a| a.status == AttemptStatus::Ok)
        .flat_map(|a| a.metrics.get(objective).into_iter().flatten().copied())
        .collect();
    let summary = Summary::of(&samples);
    let mut rejection = attempts.iter().find_map(|a| {
        (a.status == AttemptStatus::Failed).then(|| {
            let f = a.failure.clone();
            Rejection {
                class: f.as_ref().map(|f| f.class).unwrap_or(FailureClass::Crash),
                detail: format!(
                    "{} (repeat {}, host {})",
                    f.as_ref().map(|f| f.detail.as_str()).unwrap_or("failed"),
                    a.repeat,
                    a.host
                ),
            }
        })
    });
    if rejection.is_none()
        && !first.is_baseline
        && let Some(bd) = base_digest
        && let Some(bad) = attempts
            .iter()
            .find(|a| a.status == AttemptStatus::Ok && a.digest.as_deref() != Some(bd))
    {
        rejection = Some(Rejection {
            class: FailureClass::OutputChanged,
            detail: format!(
                "output digest {} ≠ baseline's {} (repeat {}, host {})",
                bad.digest.as_deref().map(short).unwrap_or("(none)"),
                short(bd),
                bad.repeat,
                bad.host
            ),
        });
    }
    let speedup = match (summary, base) {
        (Some(s), Some(b)) if s.median != 0.0 && b.median != 0.0 => Some(if higher {
            s.median / b.median
        } else {
            b.median / s.median
        }),
        _ => None,
    };
    let knobs_changed = knobs_changed(first);
    ConfigReport {
        label: first.config_label.clone(),
        config: first.config.clone(),
        knobs_changed,
        trials: attempts.len(),
        relative_spread: summary.map(|s| s.relative_spread()),
        summary,
        speedup,
        rejection,
        order: (knobs_changed as u64, first.config_label.clone()),
    }
}

fn knobs_changed(a: &AttemptRecord) -> usize {
    if a.is_baseline || a.config_label == "baseline" {
        0
    } else {
        a.config_label.split(' ').filter(|s| !s.is_empty()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::records::{Failure, SCHEMA};

    fn study() -> StudyRecord {
        StudyRecord {
            schema: SCHEMA,
            tunectl_version: "t".into(),
            study_id: "s".into(),
            spec_hash: "h".into(),
            spec: serde_json::json!({
                "objective": {"name": "tp", "unit": "x/s", "better": "higher"},
                "knobs": [{"name": "a", "default": 1}],
                "context": {"model": "m"},
            }),
            created_at: String::new(),
        }
    }

    /// An attempt of config `index` labelled `label`, repeat `r`, with
    /// samples and a digest; `failed` makes it a crash.
    fn attempt(
        index: u64,
        label: &str,
        r: u32,
        samples: &[f64],
        digest: &str,
        failed: bool,
    ) -> AttemptRecord {
        AttemptRecord {
            schema: SCHEMA,
            tunectl_version: "t".into(),
            study_id: "s".into(),
            spec_hash: "h".into(),
            trial_key: format!("{index}-{r}"),
            attempt_id: "a".into(),
            config: serde_json::json!({}),
            config_label: label.into(),
            config_index: index,
            is_baseline: label == "baseline",
            cell: serde_json::json!({"n": 1}),
            cell_label: "n=1".into(),
            cell_index: 0,
            repeat: r,
            role: "sweep".to_string(),
            fidelity: None,
            host: "h1".into(),
            host_class: "hc-1".into(),
            fingerprint: "fp".into(),
            slot: 0,
            started_at: String::new(),
            finished_at: String::new(),
            duration_s: 0.0,
            run_s: None,
            warmup_runs: 0,
            status: if failed {
                AttemptStatus::Failed
            } else {
                AttemptStatus::Ok
            },
            failure: failed.then(|| Failure {
                class: FailureClass::Crash,
                detail: "exit code 3".into(),
                phase: "measure".into(),
            }),
            exit: None,
            metrics: if failed {
                BTreeMap::new()
            } else {
                BTreeMap::from([("tp".to_string(), samples.to_vec())])
            },
            digest: (!failed).then(|| digest.to_string()),
            outputs: BTreeMap::new(),
            command: String::new(),
            stdout_tail: String::new(),
            stderr_tail: String::new(),
        }
    }

    fn cell(attempts: Vec<AttemptRecord>) -> CellReport {
        let scan = Scan {
            attempts,
            corrupt: vec![],
        };
        let a = analyze(&study(), &scan, &[]);
        a.classes[0].cells[0].clone()
    }

    #[test]
    fn gate_rejects_crashes_and_changed_outputs() {
        let c = cell(vec![
            attempt(0, "baseline", 0, &[100.0, 101.0, 99.0], "d0", false),
            attempt(1, "a=2", 0, &[150.0, 151.0, 149.0], "d1", false),
            attempt(2, "a=3", 0, &[300.0], "d0", true),
            attempt(3, "a=4", 0, &[120.0, 121.0, 119.0], "d0", false),
        ]);
        assert_eq!(c.baseline_state, "ok");
        let rejected: Vec<(&str, FailureClass)> = c
            .rejected
            .iter()
            .map(|r| {
                (
                    r.label.as_str(),
                    r.rejection
                        .as_ref()
                        .map(|x| x.class)
                        .unwrap_or(FailureClass::Crash),
                )
            })
            .collect();
        assert_eq!(
            rejected,
            vec![
                ("a=2", FailureClass::OutputChanged),
                ("a=3", FailureClass::Crash)
            ]
        );
        assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=4"));
        let s = c.winner.as_ref().and_then(|w| w.speedup).unwrap_or(0.0);
        assert!((s - 1.2).abs() < 1e-9);
    }

    #[test]
    fn a_win_within_noise_is_no_improvement() {
        let c = cell(vec![
            attempt(0, "baseline", 0, &[100.0, 110.0, 90.0], "d", false),
            attempt(1, "a=2", 0, &[105.0, 115.0, 95.0], "d", false),
        ]);
        assert!(c.winner.is_none());
        assert!(c.decision.starts_with("baseline kept"), "{}", c.decision);
    }

    #[test]
    fn ties_collapse_to_fewest_knobs_changed() {
        let c = cell(vec![
            attempt(0, "baseline", 0, &[100.0, 100.5, 99.5], "d", false),
            attempt(1, "a=2 b=1", 0, &[200.0, 204.0, 196.0], "d", false),
            attempt(2, "a=2", 0, &[199.0, 203.0, 195.0], "d", false),
        ]);
        assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
        assert!(c.decision.contains("changes fewer knobs"), "{}", c.decision);
    }

    #[test]
    fn a_failed_baseline_means_nothing_wins() {
        let c = cell(vec![
            attempt(0, "baseline", 0, &[], "d", true),
            attempt(1, "a=2", 0, &[200.0], "d", false),
        ]);
        assert_eq!(c.baseline_state, "failed");
        assert!(c.winner.is_none());
        assert!(c.decision.contains("baseline failed"), "{}", c.decision);
    }
}
