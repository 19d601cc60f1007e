//! A cell: each config's gate verdict and speedup against the baseline,
//! and the fastest config there.

use std::sync::Arc;

use super::*;
use crate::stats::offsets::{HostOffsets, Side, Units, estimate_adjusted_units};

/// A candidate compared with the baseline, host by host.
#[derive(Debug, Clone, Copy)]
pub(super) struct Comparison {
    pub(super) speedup: f64,
    /// `None` when either side has fewer than `selection.min_samples`
    /// samples: its spread is unknown and nothing wins on it.
    pub(super) spread: Option<f64>,
}

pub(super) fn speedup_of(c: f64, b: f64, higher: bool) -> Option<f64> {
    if c == 0.0 || b == 0.0 {
        return None;
    }
    Some(if higher { c / b } else { b / c })
}

/// Per host of the candidate: speedup and combined relative spread against
/// that host's own baseline samples, or, on a host that has none (its
/// slots never drew a baseline trial), against the class's baseline
/// samples pooled: the hosts of a class are alike by definition, and
/// pairing by host only removes their small offsets where it can. Merged
/// across hosts by their median.
pub(super) fn compare(
    base: &BTreeMap<String, Vec<f64>>,
    cand: &BTreeMap<String, Vec<f64>>,
    higher: bool,
    min_samples: usize,
) -> Option<Comparison> {
    let pooled_base: Vec<f64> = base.values().flatten().copied().collect();
    let pooled_cand: Vec<f64> = cand.values().flatten().copied().collect();
    let pooled = Summary::of(&pooled_base);
    // A relative spread from fewer than `min_samples` samples is unknown:
    // a host with too few uses its class's pooled samples' spread.
    let known = |s: &Summary| (s.n >= min_samples).then(|| s.relative_spread());
    let pooled_base_spread = pooled.as_ref().and_then(known);
    let pooled_cand_spread = Summary::of(&pooled_cand).as_ref().and_then(known);
    let mut ratios = Vec::new();
    let mut spreads = Vec::new();
    for (host, cs) in cand {
        let own = base.get(host).and_then(|b| Summary::of(b));
        let (Some(bs), Some(c)) = (own.or(pooled), Summary::of(cs)) else {
            continue;
        };
        if let Some(r) = speedup_of(c.median, bs.median, higher) {
            ratios.push(r);
            let cand_spread = known(&c).or(pooled_cand_spread);
            let base_spread = known(&bs).or(pooled_base_spread);
            if let (Some(a), Some(b)) = (cand_spread, base_spread) {
                spreads.push(a + b);
            }
        }
    }
    Some(Comparison {
        speedup: crate::stats::median(&ratios)?,
        spread: (spreads.len() == ratios.len())
            .then(|| crate::stats::median(&spreads))
            .flatten(),
    })
}

/// Attempts of one config in one cell of one class.
#[derive(Default)]
pub(super) struct Group<'a> {
    pub(super) sweep: Vec<&'a AttemptRecord>,
    pub(super) confirm: Vec<&'a AttemptRecord>,
}

pub(super) fn analyze_cell(
    configs: &BTreeMap<u64, Group>,
    objective: &str,
    rules: &Rules,
    tolerance: Option<&crate::decide::gate::ToleranceSpec>,
) -> CellReport {
    let any = configs.values().flat_map(|g| g.sweep.first()).next();
    let cell = any
        .map(|a| (*a.cell).clone())
        .unwrap_or(serde_json::Value::Null);
    let cell_label = any.map(|a| a.cell_label.to_string()).unwrap_or_default();
    let base_group = configs
        .iter()
        .find(|(_, g)| g.sweep.iter().any(|a| a.is_baseline));
    let mut notes = Vec::new();

    // Every config's runs, and the host offsets they give the cell (a
    // config of a single run, whose units are its samples, aside).
    let mut runs: BTreeMap<u64, (BTreeMap<String, Vec<f64>>, bool)> = configs
        .iter()
        .filter(|(_, g)| !g.sweep.is_empty())
        .map(|(i, g)| (*i, runs_by_host(&g.sweep, objective, rules.higher)))
        .collect();
    let offsets = Arc::new(HostOffsets::fit(
        runs.values().filter(|r| !r.1).map(|r| &r.0),
    ));
    let mut base_report = base_group.map(|(i, g)| {
        config_report(
            &g.sweep,
            runs.remove(i).unwrap_or_default(),
            &offsets,
            objective,
            None,
            None,
            rules.higher,
            rules.min_samples,
        )
    });
    // The baseline's first successful repeat is the reference output.
    let mut reference: Option<&AttemptRecord> = None;
    if let Some((_, g)) = base_group {
        let mut ok: Vec<&&AttemptRecord> = g
            .sweep
            .iter()
            .filter(|a| a.status == AttemptStatus::Ok)
            .collect();
        ok.sort_by_key(|a| a.repeat);
        reference = ok.first().map(|a| **a);
        if let Some(r) = reference
            && ok
                .iter()
                .any(|a| crate::decide::gate::compare_outputs(r, a, tolerance).is_err())
        {
            notes.push(CellNote::BaselineOutputVaries);
        }
    }
    if let Some((_, g)) = base_group
        && base_report.as_ref().is_some_and(|r| r.rejection.is_none())
        && let Some(detail) = limit_broken(&g.sweep, rules)
    {
        notes.push(CellNote::BaselineOverLimit { detail });
    }
    // The baseline's failure is believed when it happens twice (its first
    // run and the re-run the launch makes): once, with a successful run,
    // it is noted and set aside; once, alone, the re-run is pending.
    let base_failures = base_group
        .map(|(_, g)| {
            g.sweep
                .iter()
                .filter(|a| a.status == AttemptStatus::Failed)
                .count()
        })
        .unwrap_or(0);
    let mut retry_pending = None;
    if base_failures == 1
        && let Some(b) = base_report.as_mut()
        && let Some(r) = b.rejection.take()
    {
        if b.summary.is_some() {
            notes.push(CellNote::BaselineFailedOnce {
                detail: r.to_string(),
            });
        } else {
            retry_pending = Some(r);
        }
    }
    let base_state = match &base_report {
        None => BaselineState::Pending,
        Some(_) if retry_pending.is_some() => BaselineState::Pending,
        Some(r) if r.rejection.is_some() => BaselineState::Failed,
        Some(_) => BaselineState::Ok,
    };
    let empty = BTreeMap::new();
    let base_side = BaseSide {
        samples: base_report.as_ref().map(|b| &b.by_host).unwrap_or(&empty),
        runs: base_report.as_ref().map(|b| &b.runs).unwrap_or(&empty),
        samples_as_runs: base_report.as_ref().is_some_and(|b| b.samples_as_runs),
        side: base_report.as_ref().and_then(|b| b.side.as_ref()),
        known: base_report
            .as_ref()
            .and_then(|b| b.summary)
            .is_some_and(|s| s.n >= rules.min_samples),
    };

    let mut eligible = Vec::new();
    let mut rejected = Vec::new();
    for (i, g) in configs {
        if g.sweep.is_empty() || g.sweep.iter().any(|a| a.is_baseline) {
            continue;
        }
        let r = config_report(
            &g.sweep,
            runs.remove(i).unwrap_or_default(),
            &offsets,
            objective,
            reference.map(|a| (a, tolerance)),
            Some(&base_side),
            rules.higher,
            rules.min_samples,
        );
        let mut r = r;
        if r.rejection.is_none() {
            r.rejection = limit_broken(&g.sweep, rules).map(|broken| Rejection {
                class: FailureClass::Limit,
                cause: broken.to_string(),
                detail: broken.to_string(),
                log: String::new(),
            });
        }
        if r.rejection.is_some() {
            rejected.push(r);
        } else if r.summary.is_some() {
            eligible.push(r);
        }
    }
    // Best first: by speedup, then a total order.
    eligible.sort_by(|a, b| {
        let (sa, sb) = (a.speedup.unwrap_or(0.0), b.speedup.unwrap_or(0.0));
        sb.total_cmp(&sa).then_with(|| a.order.cmp(&b.order))
    });
    rejected.sort_by(|a, b| a.order.cmp(&b.order));

    let mut winner = None;
    let mut threshold = None;
    let failure = |r: &Rejection| r.to_string();
    let decision = match &base_report {
        None => CellDecision::BaselinePending,
        Some(_) if retry_pending.is_some() => CellDecision::BaselineRetry {
            failure: retry_pending.as_ref().map(failure).unwrap_or_default(),
        },
        Some(b) if b.rejection.is_some() => CellDecision::BaselineFailed {
            failure: b.rejection.as_ref().map(failure).unwrap_or_default(),
        },
        Some(b) if b.summary.is_none() => CellDecision::BaselineUnmeasured,
        Some(b) if b.relative_spread.is_none() => CellDecision::BaselineFewSamples {
            samples: b.summary.map(|s| s.n).unwrap_or(0),
            min_samples: rules.min_samples,
        },
        Some(_) => match eligible.iter().find(|c| c.estimate.is_some()) {
            None if eligible.iter().any(|c| c.speedup.is_some()) => CellDecision::TooFewRuns {
                min_samples: rules.min_samples,
            },
            None => CellDecision::NoEligible,
            Some(leader) => {
                threshold = Some(rules.min_improvement);
                let tau = rules.tau();
                let (lo, _) = leader
                    .estimate
                    .map(|e| e.log_bounds(CONFIDENCE))
                    .unwrap_or((f64::NEG_INFINITY, 0.0));
                if lo > tau {
                    let pick = pick_among_ties(&eligible, leader, rules);
                    winner = Some(pick.clone());
                    CellDecision::Fastest {
                        label: pick.label.clone(),
                        interval: pick.interval,
                        min_improvement: rules.min_improvement,
                        tie_with: (pick.label != leader.label).then(|| leader.label.clone()),
                    }
                } else {
                    CellDecision::NoImprovementShown {
                        best: leader.label.clone(),
                        interval: leader.interval,
                        min_improvement: rules.min_improvement,
                    }
                }
            }
        },
    };
    if let Some(b) = base_report.as_mut() {
        b.speedup = b.summary.map(|_| 1.0);
    }
    CellReport {
        cell,
        cell_label,
        bucket: String::new(),
        baseline_state: base_state,
        baseline: base_report,
        winner,
        decision,
        threshold,
        eligible,
        rejected,
        notes,
        cell_index: None,
    }
}

/// How `c` compares with `leader` directly, within hosts: the log of its
/// speed relative to the leader's (0 = as fast, < 0 behind) with its
/// uncertainty. The baseline is out of it: its noise says nothing about
/// whether two candidates differ. `None` with fewer than two runs a side.
pub(super) fn against_leader(leader: &ConfigReport, c: &ConfigReport) -> Option<Estimate> {
    // `c`'s side was read with its own cell's offsets: of use only where
    // they are the leader's.
    let same = Arc::ptr_eq(&leader.offsets, &c.offsets);
    estimate_adjusted_units(
        Units {
            runs: &leader.runs,
            side: leader.side.as_ref(),
        },
        Units {
            runs: &c.runs,
            side: c.side.as_ref().filter(|_| same),
        },
        leader.samples_as_runs || c.samples_as_runs,
        &leader.offsets,
    )
}

/// Whether a config compared with the leader (`relative`, see
/// [`against_leader`]) is shown equivalent to it: the interval of their
/// ratio lies above 1 / (1 + `min_improvement`), so it is at most that
/// much slower.
pub(super) fn equivalent(relative: &Estimate, rules: &Rules) -> bool {
    relative.log_bounds(CONFIDENCE).0 > -rules.tau()
}

/// Among the candidates whose own lower bound clears the minimum and that
/// are shown equivalent to the leader (compared with it directly), the one
/// nearest the default, then by label.
pub(super) fn pick_among_ties<'a>(
    eligible: &'a [ConfigReport],
    leader: &'a ConfigReport,
    rules: &Rules,
) -> &'a ConfigReport {
    eligible
        .iter()
        .filter(|c| {
            c.estimate
                .is_some_and(|e| e.log_bounds(CONFIDENCE).0 > rules.tau())
                && against_leader(leader, c).is_some_and(|r| equivalent(&r, rules))
        })
        .min_by(|a, b| a.order.cmp(&b.order))
        .unwrap_or(leader)
}

/// A speedup with its interval and the runs behind it:
/// `1.08× [1.05, 1.11] 95% CI, n=24 vs 60 runs`.
pub fn interval_text(i: &Interval) -> String {
    IntervalText(i).to_string()
}

/// The first `selection.limits` bound a config's successful sweep attempts
/// break, judged on the median of the metric's samples pooled over the
/// class's hosts; a metric with no sample cannot be shown to keep its
/// bound, and counts as broken.
pub(super) fn limit_broken(attempts: &[&AttemptRecord], rules: &Rules) -> Option<LimitBroken> {
    for (metric, limit) in &rules.limits {
        let unit = rules.units.get(metric).cloned().unwrap_or_default();
        let samples: Vec<f64> = samples_by_host(attempts, metric)
            .into_values()
            .flatten()
            .collect();
        let Some(median) = crate::stats::median(&samples) else {
            return Some(LimitBroken::NoSample {
                metric: metric.clone(),
            });
        };
        if let Some(breach) = limit.broken_by(median) {
            return Some(LimitBroken::Breached {
                metric: metric.clone(),
                median,
                samples: samples.len(),
                breach,
                unit,
            });
        }
    }
    None
}

/// The summaries of every metric but `objective` that `attempts` recorded.
pub(super) fn secondary_metrics(
    attempts: &[&AttemptRecord],
    objective: &str,
) -> BTreeMap<String, Summary> {
    let mut names: Vec<&str> = attempts
        .iter()
        .filter(|a| a.status == AttemptStatus::Ok)
        .flat_map(|a| a.metrics.keys())
        .filter(|m| *m != objective)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter_map(|m| {
            let samples: Vec<f64> = samples_by_host(attempts, m)
                .into_values()
                .flatten()
                .collect();
            Some((m.to_string(), Summary::of(&samples)?))
        })
        .collect()
}

pub(super) fn samples_by_host(
    attempts: &[&AttemptRecord],
    objective: &str,
) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for a in attempts.iter().filter(|a| a.status == AttemptStatus::Ok) {
        if let Some(samples) = a.metrics.get(objective) {
            match out.get_mut(a.host.as_str()) {
                Some(v) => v.extend(samples.iter().copied()),
                None => {
                    out.insert(a.host.to_string(), samples.clone());
                }
            }
        }
    }
    out
}

/// The baseline's samples and runs by host, for comparing a candidate.
pub(super) struct BaseSide<'a> {
    pub(super) samples: &'a BTreeMap<String, Vec<f64>>,
    pub(super) runs: &'a BTreeMap<String, Vec<f64>>,
    pub(super) samples_as_runs: bool,
    /// Its runs read with the cell's offsets ([`HostOffsets::side`]).
    pub(super) side: Option<&'a Side>,
    /// Its pooled samples number at least `selection.min_samples`.
    pub(super) known: bool,
}

/// The units an interval reads, by host: one value per successful run with
/// the metric (the log of the run's median, oriented so that larger is
/// better), or, for a config with a single run, one per sample of it
/// (`true`; [`interval::units`]).
pub(super) fn runs_by_host(
    attempts: &[&AttemptRecord],
    metric: &str,
    higher: bool,
) -> (BTreeMap<String, Vec<f64>>, bool) {
    let mut runs: BTreeMap<String, Vec<Vec<f64>>> = BTreeMap::new();
    for a in attempts.iter().filter(|a| a.status == AttemptStatus::Ok) {
        if let Some(s) = a.metrics.get(metric).filter(|s| !s.is_empty()) {
            runs.entry(a.host.to_string()).or_default().push(s.clone());
        }
    }
    interval::units(&runs, higher)
}

/// A config's report at a cell, from its sweep attempts, its units by
/// host (`runs_by_host` of them) and the cell's host `offsets`.
#[allow(clippy::too_many_arguments)]
pub(super) fn config_report(
    attempts: &[&AttemptRecord],
    (runs, samples_as_runs): (BTreeMap<String, Vec<f64>>, bool),
    offsets: &Arc<HostOffsets>,
    objective: &str,
    reference: Option<(&AttemptRecord, Option<&crate::decide::gate::ToleranceSpec>)>,
    base: Option<&BaseSide>,
    higher: bool,
    min_samples: usize,
) -> ConfigReport {
    let first = attempts[0];
    let mut attempts = attempts.to_vec();
    attempts.sort_by_key(|a| a.repeat);
    let by_host = samples_by_host(&attempts, objective);
    let repeats_ended = attempts
        .iter()
        .map(|a| a.repeat)
        .collect::<HashSet<u32>>()
        .len();
    let samples: Vec<f64> = by_host.values().flatten().copied().collect();
    let summary = Summary::of(&samples);
    let mut rejection = attempts.iter().find_map(|a| {
        (a.status == AttemptStatus::Failed).then(|| {
            let f = a.failure.as_ref();
            let cause = f.map_or("failed", |f| f.detail.as_str());
            Rejection {
                class: f.map_or(FailureClass::Crash, |f| f.class),
                detail: Located::of(cause, a).to_string(),
                cause: cause.to_string(),
                log: a.stderr_head.to_string(),
            }
        })
    });
    if rejection.is_none()
        && !first.is_baseline
        && let Some((base, tolerance)) = reference
    {
        rejection = attempts
            .iter()
            .filter(|a| a.status == AttemptStatus::Ok)
            .find_map(|a| {
                crate::decide::gate::compare_outputs(base, a, tolerance)
                    .err()
                    .map(|why| Rejection {
                        class: FailureClass::OutputChanged,
                        detail: Located::of(&why, a).to_string(),
                        cause: why.to_string(),
                        log: String::new(),
                    })
            });
    }
    let comparison = base.and_then(|b| compare(b.samples, &by_host, higher, min_samples));
    // Nothing is decided on fewer than `min_samples` samples a side.
    let enough = summary.is_some_and(|s| s.n >= min_samples) && base.is_some_and(|b| b.known);
    // Its runs read with the offsets, once for all its comparisons.
    let side = (!samples_as_runs && !offsets.is_empty())
        .then(|| offsets.side(&runs))
        .flatten();
    let estimate = base.filter(|_| enough).and_then(|b| {
        estimate_adjusted_units(
            Units {
                runs: b.runs,
                side: b.side,
            },
            Units {
                runs: &runs,
                side: side.as_ref(),
            },
            b.samples_as_runs || samples_as_runs,
            offsets,
        )
    });
    let knobs_changed = knobs_changed(first);
    ConfigReport {
        label: first.config_label.to_string(),
        config: (*first.config).clone(),
        knobs_changed,
        trials: attempts.len(),
        hosts: by_host.len(),
        relative_spread: summary
            .filter(|s| s.n >= min_samples)
            .map(|s| s.relative_spread()),
        summary,
        speedup: estimate
            .map(|e| e.log.exp())
            .or(comparison.map(|c| c.speedup)),
        combined_spread: comparison.and_then(|c| c.spread),
        interval: estimate.map(|e| e.interval(CONFIDENCE)),
        rejection,
        metrics: secondary_metrics(&attempts, objective),
        order: (knobs_changed as u64, first.config_label.to_string()),
        by_host,
        runs,
        samples_as_runs,
        offsets: Arc::clone(offsets),
        side,
        estimate,
        repeats_ended,
        min_samples,
    }
}

pub(super) fn knobs_changed(a: &AttemptRecord) -> usize {
    if a.is_baseline || a.config_label == "baseline" {
        0
    } else {
        a.config_label.split(' ').filter(|s| !s.is_empty()).count()
    }
}
