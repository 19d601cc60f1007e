//! The confirmation round: its size, and whether it confirmed.

use super::*;

/// The attempts of repeats below `rounds`, in repeat order.
pub(super) fn first_runs<'a>(
    attempts: &[&'a AttemptRecord],
    rounds: u32,
) -> Vec<&'a AttemptRecord> {
    let mut v: Vec<&AttemptRecord> = attempts
        .iter()
        .copied()
        .filter(|a| a.repeat < rounds)
        .collect();
    v.sort_by_key(|a| a.repeat);
    v
}

/// Runs a side at every cell that the final round needs for a win the size
/// the sweep suggests to clear the minimum with 95 % probability, given the
/// run-to-run noise the sweep showed: at least
/// `measurement.confirm_repeats`, at most `measurement.max_repeats`. The
/// size planned for is halfway between the sweep's estimate and its lower
/// bound: the estimate of the best of many configs, read when its interval
/// first cleared the minimum, runs high (the winner's curse), and a round
/// sized on it alone would miss real wins.
pub(super) fn confirm_size(pick: &Standing, rules: &Rules) -> u32 {
    let sds: Vec<f64> = pick
        .cells
        .iter()
        .map(|(_, e)| interval::run_sd(e))
        .filter(|x| x.is_finite())
        .collect();
    let sd = if sds.is_empty() {
        f64::INFINITY
    } else {
        sds.iter().sum::<f64>() / sds.len() as f64
    };
    let planned = (pick.est.log + pick.bounds().0) / 2.0;
    let needed = interval::runs_needed(
        planned,
        rules.tau(),
        sd,
        pick.cells.len(),
        CONFIDENCE,
        CONFIRM_POWER,
    );
    needed
        .max(rules.confirm_repeats)
        .min(rules.max_repeats.max(rules.confirm_repeats))
}

/// The probability with which the final round is sized to confirm a win as
/// large as the sweep measured.
pub const CONFIRM_POWER: f64 = 0.95;

/// The final round of `pick`: its size, and what its runs say. It is
/// first sized from the sweep ([`confirm_size`]). A round that ends with
/// the minimum inside its interval while its own estimate is above the
/// minimum (it leans towards the win but cannot show it) grows once: to
/// the runs its own estimate and noise ask for a win that size to clear
/// the minimum with [`CONFIRM_POWER`], at least by `measurement.repeats`
/// or half again, at most `measurement.max_repeats`; and is judged again
/// on all its runs. A round shown below the minimum, shown slower at a
/// cell, or failed is not grown; nor is one the cap already bounds.
pub(super) fn final_round(
    pick: &Standing,
    cells: &[&BTreeMap<u64, Group>],
    objective: &str,
    rules: &Rules,
) -> (u32, Option<Confirmation>) {
    let planned = confirm_size(pick, rules);
    let first = confirm(pick, cells, objective, rules, planned);
    let Some(grown) = first
        .as_ref()
        .and_then(|c| grown_size(c, rules, cells.len()))
    else {
        return (planned, first);
    };
    let mut again = confirm(pick, cells, objective, rules, grown);
    if let Some(c) = again.as_mut() {
        c.planned = planned;
    }
    (grown, again)
}

/// The size a round that ended across the minimum grows to, or `None`
/// when it does not grow (see [`final_round`]).
fn grown_size(c: &Confirmation, rules: &Rules, cells: usize) -> Option<u32> {
    let cap = rules.max_repeats.max(rules.confirm_repeats);
    let est = c.estimate?;
    let leans = est.log > rules.tau() && est.log_bounds(CONFIDENCE).0 <= rules.tau();
    if c.incomplete || c.confirmed || c.failure.is_some() || c.harmed.is_some() || !leans {
        return None;
    }
    if c.runs >= cap {
        return None;
    }
    let asked = interval::runs_needed(
        est.log,
        rules.tau(),
        c.run_sd,
        cells,
        CONFIDENCE,
        CONFIRM_POWER,
    );
    let least = c.runs + rules.repeats.max(c.runs.div_ceil(2));
    Some(asked.max(least).min(cap))
}

/// The final interleaved round of `pick` against the baseline: confirm
/// attempts at every cell of the bucket, judged like the sweep.
pub(super) fn confirm(
    pick: &Standing,
    cells: &[&BTreeMap<u64, Group>],
    objective: &str,
    rules: &Rules,
    rounds: u32,
) -> Option<Confirmation> {
    let mut estimates: Vec<Estimate> = Vec::new();
    let mut harmed = None;
    let mut any = false;
    let mut runs_done = usize::MAX;
    let (mut all_base, mut all_win) = (Vec::new(), Vec::new());
    for groups in cells {
        let base = groups
            .values()
            .find(|g| g.sweep.iter().any(|a| a.is_baseline))?;
        let win = groups.get(&pick.config_index)?;
        if win
            .sweep
            .first()
            .is_none_or(|a| a.config_label != pick.report.label)
        {
            return None;
        }
        // A confirmation trial that fails, or whose output differs from the
        // baseline's reference output, fails the round outright.
        let reference = {
            let mut ok: Vec<&&AttemptRecord> = base
                .sweep
                .iter()
                .filter(|a| a.status == AttemptStatus::Ok)
                .collect();
            ok.sort_by_key(|a| a.repeat);
            ok.first().map(|a| **a)
        };
        for a in &win.confirm {
            let failure = if a.status == AttemptStatus::Failed {
                Some(match &a.failure {
                    Some(f) => (Some(f.class), f.detail.clone()),
                    None => (None, String::new()),
                })
            } else if a.status == AttemptStatus::Ok {
                reference.and_then(|r| {
                    crate::decide::gate::compare_outputs(r, a, rules.tolerance.as_ref())
                        .err()
                        .map(|why| (Some(FailureClass::OutputChanged), why.to_string()))
                })
            } else {
                None
            };
            if let Some((class, detail)) = failure {
                return Some(Confirmation {
                    speedup: 0.0,
                    interval: None,
                    estimate: None,
                    run_sd: f64::INFINITY,
                    planned: rounds,
                    baseline: None,
                    winner: None,
                    threshold: rules.min_improvement,
                    confirmed: false,
                    incomplete: false,
                    runs: rounds,
                    runs_done: 0,
                    harmed: None,
                    min_samples: rules.min_samples,
                    failure: Some(RoundFailure {
                        class,
                        detail,
                        repeat: a.repeat,
                        host: a.host.to_string(),
                    }),
                });
            }
        }
        // The round's first `rounds` runs a side count (a round sized
        // larger before, by other judging settings, leaves more).
        let (bc, wc) = (
            first_runs(&base.confirm, rounds),
            first_runs(&win.confirm, rounds),
        );
        any |= !bc.is_empty() || !wc.is_empty();
        let ended =
            |v: &[&AttemptRecord]| v.iter().map(|a| a.repeat).collect::<HashSet<u32>>().len();
        runs_done = runs_done.min(ended(&bc).min(ended(&wc)));
        let (b, b_single) = runs_by_host(&bc, objective, rules.higher);
        let (w, w_single) = runs_by_host(&wc, objective, rules.higher);
        all_base.extend(samples_by_host(&bc, objective).into_values().flatten());
        all_win.extend(samples_by_host(&wc, objective).into_values().flatten());
        if let Some(e) = interval::estimate_units(&b, &w, b_single || w_single) {
            if harmed.is_none() && e.log_bounds(CONFIDENCE).1 < 0.0 {
                harmed = bc.first().map(|a| a.cell_label.to_string());
            }
            estimates.push(e);
        }
    }
    if !any {
        return None;
    }
    let runs_done = if runs_done == usize::MAX {
        0
    } else {
        runs_done
    };
    let complete = runs_done >= rounds as usize && estimates.len() == cells.len();
    let est = Estimate::mean(&estimates);
    let sds: Vec<f64> = estimates
        .iter()
        .map(interval::run_sd)
        .filter(|x| x.is_finite())
        .collect();
    let run_sd = if sds.len() == estimates.len() && !sds.is_empty() {
        sds.iter().sum::<f64>() / sds.len() as f64
    } else {
        f64::INFINITY
    };
    let confirmed = complete
        && harmed.is_none()
        && est.is_some_and(|e| e.log_bounds(CONFIDENCE).0 > rules.tau());
    Some(Confirmation {
        speedup: est.map(|e| e.log.exp()).unwrap_or(1.0),
        interval: est.map(|e| e.interval(CONFIDENCE)),
        estimate: est,
        run_sd,
        planned: rounds,
        baseline: Summary::of(&all_base),
        winner: Summary::of(&all_win),
        threshold: rules.min_improvement,
        confirmed,
        failure: None,
        incomplete: !complete,
        runs: rounds,
        runs_done,
        harmed: if complete { harmed } else { None },
        min_samples: rules.min_samples,
    })
}
