//! In-run pruning (`fidelity.prune`): the rule a running job is stopped
//! by, fixed when it starts ([`PruneRule`]), and which of a job's readings
//! count at a ladder of budgets ([`ladder_readings`]). The
//! [`Search`](super::Search) builds the rules; the launcher applies them
//! to a trial's progress file.

use crate::spec::Better;

/// When a running job is stopped early (`fidelity.prune`): the results the
/// engine had seen, per budget smaller than the job's, when it started.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PruneRule {
    /// `eta`: a config goes on from a budget when it ranks in the top
    /// `floor(n / eta)` of the `n` results there (itself included).
    pub(super) eta: u32,
    /// Budget and the values seen there, budgets increasing.
    pub(super) levels: Vec<(f64, Vec<f64>)>,
    pub(super) better: Option<Better>,
    /// The job's own budget: a value reached there is its result, ranked
    /// at its own rung, never a reason to stop it.
    pub(super) until: f64,
    /// While a budget has fewer than `eta - 1` results (too few to take
    /// its top `1 / eta`), go on only from the best value seen there, as
    /// Optuna's successive-halving pruner does, instead of stopping
    /// nothing ([`PruneRule::keep_only_the_best_at_first`]).
    pub(super) best_at_first: bool,
}

impl PruneRule {
    /// A rule for a job at budget `until` from the values seen at smaller
    /// budgets (`levels`: budget and values, in any order).
    pub fn new(eta: u32, better: Better, until: f64, levels: Vec<(f64, Vec<f64>)>) -> PruneRule {
        let mut levels: Vec<(f64, Vec<f64>)> = levels
            .into_iter()
            .filter(|(b, values)| *b < until && !values.is_empty())
            .collect();
        levels.sort_by(|a, b| a.0.total_cmp(&b.0));
        PruneRule {
            eta,
            levels,
            better: Some(better),
            until,
            best_at_first: false,
        }
    }

    /// The same rule, but a budget with too few results for its top
    /// `1 / eta` to hold anything keeps only the best of them: a job whose
    /// value there is beaten by one already seen stops. This is the rule
    /// of Optuna's successive-halving and Hyperband pruners for their
    /// first trials; it is the in-run pruning of `kind: tpe`, where the
    /// first jobs all run at the largest budget and one slow config left
    /// to run to its end costs many small ones.
    pub fn keep_only_the_best_at_first(mut self) -> PruneRule {
        self.best_at_first = true;
        self
    }

    /// The same rule with every budget passed through `f` (to the units
    /// the trial reports in, e.g. rounded budgets).
    pub fn map_budgets(mut self, f: impl Fn(f64) -> f64) -> PruneRule {
        for level in &mut self.levels {
            level.0 = f(level.0);
        }
        self.until = f(self.until);
        self
    }

    /// Whether a value `value` reached at `budget` means the job stops:
    /// the budget of the rung it falls short at, or `None` to go on. ASHA's
    /// own rule: with `n` results at that rung, the job's value (tied
    /// values rank it first) must be in the top `floor((n + 1) / eta)`;
    /// when that is 0 there is too little evidence to stop anything (with
    /// [`PruneRule::keep_only_the_best_at_first`]: it must be the best). A
    /// value at or past the job's own budget never stops it.
    pub fn prunes(&self, budget: f64, value: f64) -> Option<f64> {
        let better = self.better?;
        if !value.is_finite() || budget.is_nan() || budget >= self.until {
            return None;
        }
        let (at, seen) = self.levels.iter().rev().find(|(b, _)| *b <= budget)?;
        let ahead = seen
            .iter()
            .filter(|v| match better {
                Better::Higher => **v > value,
                Better::Lower => **v < value,
            })
            .count();
        let mut keep = (seen.len() + 1) / self.eta.max(2) as usize;
        if self.best_at_first {
            keep = keep.max(1);
        }
        (keep > 0 && ahead >= keep).then_some(*at)
    }

    /// Whether this rule can ever stop a job.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty() || self.better.is_none()
    }
}

/// The readings (budget, value) that count at the budgets of `ladder`
/// (ascending) for a job at budget `until`: for each ladder budget below
/// `until`, the first finite reading at or past it and before `until`,
/// taken at the largest ladder budget at or below its own. What a job
/// reported beyond those is never looked at, so a launcher that keeps only
/// these keeps everything a search decides on.
pub fn ladder_readings(ladder: &[f64], readings: &[(f64, f64)], until: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for &(b, v) in readings {
        if !b.is_finite() || !v.is_finite() || b >= until {
            continue;
        }
        let Some(&at) = ladder.iter().rev().find(|r| **r <= b) else {
            continue;
        };
        if at < until && !out.iter().any(|(r, _)| *r == at) {
            out.push((at, v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prune_rule_stops_what_asha_would_not_promote() {
        let rule = PruneRule {
            eta: 3,
            levels: vec![
                (1.0, vec![10.0, 20.0, 30.0, 40.0, 50.0, 60.0]),
                (3.0, vec![5.0]),
            ],
            better: Some(Better::Higher),
            until: 9.0,
            best_at_first: false,
        };
        // 6 results at budget 1 and the job's: the top floor(7/3) = 2 go
        // on. 55 is second, 45 third.
        assert_eq!(rule.prunes(2.0, 55.0), None);
        assert_eq!(rule.prunes(2.0, 45.0), Some(1.0));
        // A tie ranks the job first.
        assert_eq!(rule.prunes(1.0, 50.0), None);
        // Below every budget seen: nothing to hold it against.
        assert_eq!(rule.prunes(0.5, 0.0), None);
        // One result at budget 3: floor(2/3) = 0, too little to stop on.
        assert_eq!(rule.prunes(3.0, 0.0), None);
        assert_eq!(rule.prunes(2.0, f64::NAN), None);
        // At (or past) its own budget a value is the job's result.
        assert_eq!(rule.prunes(9.0, 0.0), None);
        let lower = PruneRule {
            better: Some(Better::Lower),
            ..rule.clone()
        };
        assert_eq!(lower.prunes(1.0, 15.0), None);
        assert_eq!(lower.prunes(1.0, 25.0), Some(1.0));
        // Budgets as the trial sees them.
        let mapped = rule.clone().map_budgets(|b| b * 10.0);
        assert_eq!(mapped.prunes(2.0, 0.0), None);
        assert_eq!(mapped.prunes(29.0, 0.0), Some(10.0));
        // Keeping only the best where there are too few results: the one
        // result at budget 3 is 5.
        let first = rule.clone().keep_only_the_best_at_first();
        assert_eq!(first.prunes(3.0, 4.0), Some(3.0));
        assert_eq!(first.prunes(3.0, 5.0), None);
        assert_eq!(first.prunes(2.0, 45.0), Some(1.0));
        assert_eq!(first.prunes(2.0, 55.0), None);
        assert_eq!(mapped.prunes(89.0, 0.0), None);
        assert_eq!(mapped.prunes(10.0, 45.0), Some(10.0));
        assert!(PruneRule::default().is_empty());
    }

    #[test]
    fn only_the_first_reading_past_each_ladder_budget_counts() {
        let ladder = [1.0, 3.0, 9.0];
        let read = [
            (0.5, 1.0),
            (1.0, 2.0),
            (2.0, 3.0),
            (5.0, 4.0),
            (9.0, f64::NAN),
            (10.0, 5.0),
            (27.0, 6.0),
        ];
        // 0.5 is below the ladder, 2 falls to 1 (taken), NaN is no
        // reading, 27 is the job's own budget.
        assert_eq!(
            ladder_readings(&ladder, &read, 27.0),
            vec![(1.0, 2.0), (3.0, 4.0), (9.0, 5.0)]
        );
        assert_eq!(
            ladder_readings(&ladder, &read, 9.0),
            vec![(1.0, 2.0), (3.0, 4.0)]
        );
        assert!(ladder_readings(&[], &read, 27.0).is_empty());
    }
}
