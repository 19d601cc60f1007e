//! From ledger attempts to decisions.
//!
//! Correctness first: a config with any failed attempt is rejected with
//! that failure; a config whose outputs differ from the baseline's (same
//! host class, same cell) is rejected as `output_changed`.
//!
//! Speed is judged on how well a speedup is known, not on how much single
//! runs scatter: every speedup has a 95 % confidence interval from the
//! runs of both configs, compared within hosts (`crate::stats::speedup`).
//! In a cell, a candidate beats the baseline only if the interval's lower
//! bound is above 1 + `min_improvement`.
//!
//! What ships is decided per bucket: a config wins a bucket only if it
//! passed the gate and was measured at every cell of the bucket, is not
//! shown slower than the baseline anywhere (no cell's interval lies below
//! 1), and the interval of its geometric-mean speedup lies above 1 +
//! `min_improvement`. A config shown equivalent to the leader (their
//! ratio's interval above 1 / (1 + `min_improvement`)) that changes fewer
//! knobs takes its place. Where the intervals cannot decide yet, the
//! configs concerned get more runs (racing, up to
//! `measurement.max_repeats`). A winner becomes a VERDICT once a final
//! interleaved round against the baseline, sized from the sweep's
//! estimate, confirms it; until then it is a DRAFT.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::{Serialize, Serializer};

use crate::ledger::records::{
    AttemptRecord, AttemptStatus, FailureClass, HostRecord, PlanRecord, StudyRecord,
};
use crate::ledger::{CorruptObject, Firsts, Scan};
use crate::spec::frozen::{FrozenMetric, Judging};
use crate::spec::{Better, FrozenSpec};
use crate::stats::Summary;
use crate::stats::speedup::{self as interval, CONFIDENCE, Estimate, Interval};
use crate::trial::RoleKind;

mod bucket;
mod cell;
mod confirm;
pub mod gate;
pub mod levers;
mod model;
#[cfg(test)]
mod tests;
mod words;

use bucket::*;
pub use cell::interval_text;
use cell::*;
pub use confirm::CONFIRM_POWER;
use confirm::*;
pub use model::*;
pub use words::*;

/// Analyse a study's ledger contents.
/// Without the plan records, no bucket is a verdict (nothing says its
/// evidence is complete): what `report` shows reads them, see
/// [`analyze_planned`].
pub fn analyze(study: &StudyRecord, scan: &Scan, hosts: &[HostRecord]) -> Analysis {
    analyze_where(study, scan, hosts, &[], |_| true)
}

/// [`analyze`] with what launches planned per host class and cell.
pub fn analyze_planned(
    study: &StudyRecord,
    scan: &Scan,
    hosts: &[HostRecord],
    plans: &[PlanRecord],
) -> Analysis {
    analyze_where(study, scan, hosts, plans, |_| true)
}

/// [`analyze`] of the attempts `keep` accepts. A bucket's decision on a
/// host class depends only on that class's attempts at the bucket's cells,
/// so a launch confirming one bucket analyses just those.
pub fn analyze_where(
    study: &StudyRecord,
    scan: &Scan,
    hosts: &[HostRecord],
    plans: &[PlanRecord],
    keep: impl Fn(&AttemptRecord) -> bool,
) -> Analysis {
    analyze_scoped(study, scan, hosts, plans, Scope::Everything, keep)
}

/// How much of an [`Analysis`] to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// What `report` shows: also each class's next levers and its trace of
    /// anchors and rungs (the HTML report's charts).
    Everything,
    /// The decisions, with all they rest on (cells, buckets, search rows),
    /// and neither next levers nor traces (left empty): what a launch needs
    /// to confirm a draft winner and to write verdict records, which hold
    /// neither. Each bucket's decision is the same as with `Everything`.
    Decisions,
    /// The decisions as a launch acts on them: as `Decisions`, with each
    /// racing round sized to the slots of the class (`race_slots`): more
    /// contenders at once and more runs each, where the rule's own round
    /// would leave slots idle.
    Launch { race_slots: u32 },
}

/// [`analyze_where`] building only what `scope` asks for.
pub fn analyze_scoped(
    study: &StudyRecord,
    scan: &Scan,
    hosts: &[HostRecord],
    plans: &[PlanRecord],
    scope: Scope,
    keep: impl Fn(&AttemptRecord) -> bool,
) -> Analysis {
    analyze_terminal(study, scan, &scan.terminal_where(keep), hosts, plans, scope)
}

/// [`analyze_scoped`] of the attempts that count (`terminal`: what
/// [`Scan::terminal_where`] picked from `scan`), for a caller that needs
/// them too: a launch deciding a bucket picks them once.
pub fn analyze_terminal(
    study: &StudyRecord,
    scan: &Scan,
    terminal: &Firsts<'_>,
    hosts: &[HostRecord],
    plans: &[PlanRecord],
    scope: Scope,
) -> Analysis {
    let everything = scope == Scope::Everything;
    let spec = &study.spec;
    let objective = MetricInfo::of(&spec.objective);
    let rules = Rules {
        higher: objective.better == Better::Higher,
        tolerance: spec.gate.tolerance.clone(),
        min_improvement: spec.selection.min_improvement,
        repeats: spec.measurement.repeats,
        confirm_repeats: spec.measurement.confirm_repeats,
        max_repeats: spec.measurement.max_repeats.max(spec.measurement.repeats),
        min_hosts: spec.selection.min_hosts,
        min_samples: spec.selection.min_samples as usize,
        race_slots: match scope {
            Scope::Launch { race_slots } => race_slots,
            Scope::Everything | Scope::Decisions => 0,
        },
        limits: spec.selection.limits.clone(),
        units: secondary_declared(spec)
            .into_iter()
            .map(|m| (m.name, m.unit))
            .collect(),
    };
    let context: BTreeMap<String, String> = spec
        .context
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string()),
            )
        })
        .collect();

    let mut foreign = 0;
    let mut anchors = 0;
    let mut unknown_roles = 0;
    let mut rungs: BTreeMap<&str, Vec<&AttemptRecord>> = BTreeMap::new();
    let mut traces: BTreeMap<&str, Vec<AttemptRecord>> = BTreeMap::new();
    // class → cell index → config index → attempts
    let mut tree: BTreeMap<&str, BTreeMap<u32, BTreeMap<u64, Group>>> = BTreeMap::new();
    for a in terminal.values() {
        if a.spec_hash != study.spec_hash {
            foreign += 1;
            continue;
        }
        // Only a rung is ever pruned; anything else recorded so is no
        // evidence (never a sample, never a failure).
        if a.status == AttemptStatus::Pruned && a.role != RoleKind::Rung {
            continue;
        }
        match &a.role {
            RoleKind::Rung => {
                tree.entry(a.host_class.as_str()).or_default();
                rungs.entry(a.host_class.as_str()).or_default().push(a);
                if everything {
                    traces
                        .entry(a.host_class.as_str())
                        .or_default()
                        .push((*a).clone());
                }
                continue;
            }
            // Measured for a purpose this tunectl does not know: no
            // evidence for anything it decides.
            RoleKind::Unknown(_) => {
                unknown_roles += 1;
                continue;
            }
            RoleKind::Sweep | RoleKind::Anchor | RoleKind::Confirm => {}
        }
        let group = tree
            .entry(a.host_class.as_str())
            .or_default()
            .entry(a.cell_index)
            .or_default()
            .entry(a.config_index)
            .or_default();
        match a.role {
            RoleKind::Anchor => {
                anchors += 1;
                if everything {
                    traces
                        .entry(a.host_class.as_str())
                        .or_default()
                        .push((*a).clone());
                }
            }
            RoleKind::Confirm => group.confirm.push(a),
            _ => group.sweep.push(a),
        }
    }

    let plans: Vec<&PlanRecord> = plans
        .iter()
        .filter(|p| p.spec_hash == study.spec_hash)
        .collect();
    // A class with a plan and nothing run yet is reported too: its buckets
    // are pending.
    for p in &plans {
        tree.entry(p.host_class.as_str()).or_default();
    }

    let mut classes = Vec::new();
    for (class_id, cells) in &tree {
        let class_plans: Vec<&PlanRecord> = plans
            .iter()
            .filter(|p| p.host_class == *class_id)
            .copied()
            .collect();
        let mut class_hosts: Vec<String> = hosts
            .iter()
            .filter(|h| h.host_class == *class_id)
            .map(|h| h.host.clone())
            .collect();
        class_hosts.sort();
        class_hosts.dedup();
        let latest = hosts.iter().rev().find(|h| h.host_class == *class_id);
        let label = latest
            .map(|h| h.class_label.clone())
            .unwrap_or_else(|| "unknown (no fingerprint in the ledger)".to_string());
        let drops: Vec<_> = scan
            .drops
            .iter()
            .filter(|d| d.host_class == *class_id)
            .collect();
        let mut cell_reports = Vec::new();
        for (cell_index, configs) in cells {
            if configs.values().all(|g| g.sweep.is_empty()) {
                continue;
            }
            let mut report =
                analyze_cell(configs, &objective.name, &rules, rules.tolerance.as_ref());
            report.cell_index = Some(*cell_index);
            report.bucket = crate::plan::buckets::bucket_of(spec, &report.cell).key;
            for d in drops.iter().filter(|d| d.cell_label == report.cell_label) {
                report.notes.push(CellNote::Dropped {
                    host: d.host.clone(),
                    reason: d.reason.clone(),
                });
            }
            cell_reports.push(report);
        }
        // A cell dropped before anything of it survived still belongs in
        // the report: its bucket cannot ship a change.
        for d in &drops {
            if cell_reports.iter().any(|r| r.cell_label == d.cell_label) {
                continue;
            }
            let why = CellNote::Dropped {
                host: d.host.clone(),
                reason: d.reason.clone(),
            };
            cell_reports.push(CellReport {
                cell: d.cell.clone(),
                cell_label: d.cell_label.clone(),
                bucket: crate::plan::buckets::bucket_of(spec, &d.cell).key,
                baseline_state: BaselineState::Pending,
                baseline: None,
                winner: None,
                decision: CellDecision::Dropped(why.clone()),
                threshold: None,
                eligible: Vec::new(),
                rejected: Vec::new(),
                notes: vec![why],
                cell_index: None,
            });
        }
        // A planned cell nothing has run at yet belongs in the report: its
        // bucket has no decision to ship.
        for p in &class_plans {
            if cell_reports
                .iter()
                .any(|r| r.cell_index == Some(p.cell_index) || r.cell_label == p.cell_label)
            {
                continue;
            }
            cell_reports.push(CellReport {
                cell: p.cell.clone(),
                cell_label: p.cell_label.clone(),
                bucket: crate::plan::buckets::bucket_of(spec, &p.cell).key,
                baseline_state: BaselineState::Pending,
                baseline: None,
                winner: None,
                decision: CellDecision::NothingRun,
                threshold: None,
                eligible: Vec::new(),
                rejected: Vec::new(),
                notes: Vec::new(),
                cell_index: Some(p.cell_index),
            });
        }
        cell_reports.sort_by_key(|r| r.cell_index.unwrap_or(u32::MAX));
        let (buckets, trials_left) = decide_buckets(
            spec,
            cells,
            &cell_reports,
            &objective.name,
            &rules,
            &class_plans,
        );
        // An adaptive search's screening runs tried configs too.
        let screened: Vec<&serde_json::Value> = rungs
            .get(class_id)
            .map(|r| r.iter().map(|a| &*a.config).collect())
            .unwrap_or_default();
        let next = if everything {
            levers::next_steps(
                spec,
                &cell_reports,
                &screened,
                &buckets,
                trials_left,
                rules.higher,
                rules.min_samples,
            )
        } else {
            Default::default()
        };
        classes.push(ClassReport {
            host_class: class_id.to_string(),
            label,
            hosts: class_hosts,
            fingerprint: latest.map(|h| h.fingerprint.clone()),
            cells: cell_reports,
            buckets,
            search: search_rows(
                spec,
                rungs.get(class_id).map(Vec::as_slice).unwrap_or_default(),
                rules.tolerance.as_ref(),
            ),
            next,
            trace: {
                let mut t = traces.remove(class_id).unwrap_or_default();
                t.sort_by(|a, b| a.attempt_id.cmp(&b.attempt_id));
                t
            },
        });
    }
    let all_verdicts = !classes.is_empty()
        && classes
            .iter()
            .all(|c| !c.buckets.is_empty() && c.buckets.iter().all(|b| b.level == Level::Verdict));

    Analysis {
        study_id: study.study_id.clone(),
        spec_hash: study.spec_hash.clone(),
        tunectl_version: crate::ledger::records::VERSION.to_string(),
        level: if all_verdicts {
            Level::Verdict
        } else {
            Level::Draft
        },
        statistic: "median ± 1.4826·MAD over n samples; speedups are geometric means over runs (one value per run: the median of its samples), compared within hosts, with a 95% Student-t interval".to_string(),
        objective,
        metrics: secondary_declared(spec),
        min_improvement: rules.min_improvement,
        context,
        baseline: spec_baseline(spec),
        domains: spec_domains(spec),
        class_key: spec.json().get("class_key").cloned(),
        class_tools: spec_class_tools(spec),
        classes,
        corrupt_objects: scan.corrupt.clone(),
        foreign_attempts: foreign,
        voided_attempts: scan.voided,
        anchors,
        unknown_role_attempts: unknown_roles,
        repeats: rules.repeats,
        confirm_repeats: rules.confirm_repeats,
        min_hosts: rules.min_hosts,
        judging: spec.judging(),
    }
}

/// The rung table of one class: per (cell, budget), how many configs ran,
/// failed or changed output (against the baseline's rung at that budget),
/// and the best on the proxy metric.
fn search_rows(
    spec: &FrozenSpec,
    rungs: &[&AttemptRecord],
    tolerance: Option<&crate::decide::gate::ToleranceSpec>,
) -> Vec<SearchRow> {
    let fidelity = spec.fidelity.as_ref();
    let metric = MetricInfo::of(
        fidelity
            .and_then(|f| f.proxy.as_ref())
            .unwrap_or(&spec.objective),
    );
    let higher = metric.better == Better::Higher;
    let budget_unit = fidelity.map(|f| f.unit.clone()).unwrap_or_default();
    // (cell index, budget bits) → attempts
    let mut groups: BTreeMap<(u32, Option<u64>), Vec<&AttemptRecord>> = BTreeMap::new();
    for a in rungs {
        groups
            .entry((a.cell_index, a.fidelity.map(f64::to_bits)))
            .or_default()
            .push(a);
    }
    let mut out = Vec::new();
    for ((_, _), attempts) in groups {
        let Some(first) = attempts.first() else {
            continue;
        };
        let base = attempts
            .iter()
            .find(|a| a.is_baseline && a.status == AttemptStatus::Ok)
            .copied();
        let value = |a: &AttemptRecord| {
            a.metrics
                .get(&metric.name)
                .and_then(|s| crate::stats::median(s))
        };
        let (mut failed, mut changed, mut pruned) = (0, 0, 0);
        let mut best: Option<(String, f64)> = None;
        for a in &attempts {
            if a.status == AttemptStatus::Pruned {
                pruned += 1;
                continue;
            }
            if a.status != AttemptStatus::Ok {
                failed += 1;
                continue;
            }
            if !a.is_baseline
                && let Some(b) = base
                && crate::decide::gate::compare_outputs(b, a, tolerance).is_err()
            {
                changed += 1;
                continue;
            }
            if a.is_baseline {
                continue;
            }
            if let Some(v) = value(a) {
                let better = match &best {
                    None => true,
                    Some((_, b)) => {
                        if higher {
                            v > *b
                        } else {
                            v < *b
                        }
                    }
                };
                if better {
                    best = Some((a.config_label.to_string(), v));
                }
            }
        }
        out.push(SearchRow {
            cell_label: first.cell_label.to_string(),
            budget: first.fidelity,
            budget_unit: budget_unit.clone(),
            metric: metric.clone(),
            trials: attempts.len() as u64,
            failed,
            pruned,
            output_changed: changed,
            baseline: base.and_then(value),
            best,
        });
    }
    out
}

/// The study's `metrics:`, as frozen (none in a spec without them).
fn secondary_declared(spec: &FrozenSpec) -> Vec<MetricInfo> {
    spec.json()
        .get("metrics")
        .cloned()
        .and_then(|m| serde_json::from_value::<Vec<FrozenMetric>>(m).ok())
        .unwrap_or_default()
        .iter()
        .map(MetricInfo::of)
        .collect()
}

/// The commands of the tools that the spec's class key reads.
fn spec_class_tools(spec: &FrozenSpec) -> BTreeMap<String, String> {
    let json = spec.json();
    let fields = json
        .get("class_key")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tools = json.get("tools").and_then(serde_json::Value::as_object);
    fields
        .iter()
        .filter_map(|f| f.as_str()?.strip_prefix("tool:"))
        .filter_map(|name| {
            let command = tools?.get(name)?.as_str()?;
            Some((name.to_owned(), command.to_owned()))
        })
        .collect()
}

fn spec_domains(spec: &FrozenSpec) -> serde_json::Map<String, serde_json::Value> {
    spec.knobs
        .iter()
        .map(|k| {
            (
                k.name.clone(),
                serde_json::json!({"kind": k.kind, "values": k.values}),
            )
        })
        .collect()
}

fn spec_baseline(spec: &FrozenSpec) -> serde_json::Value {
    serde_json::Value::Object(
        spec.knobs
            .iter()
            .map(|k| (k.name.clone(), k.default.clone()))
            .collect(),
    )
}
