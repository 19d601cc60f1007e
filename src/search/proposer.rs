//! Where Hyperband's new configs come from when they are drawn from a
//! model: [`ModelProposer`], a BOHB-like proposer (Falkner, Klein, Hutter:
//! "BOHB: Robust and Efficient Hyperparameter Optimization at Scale", ICML
//! 2018) over this crate's [`Tpe`].
//!
//! Choices:
//! - One TPE model per budget, fed every result the search saw at that
//!   budget, whatever bracket or iteration it came from; a failure (crash,
//!   pruned run) is a failed observation, ranked bad.
//! - A new config comes from the model of the **largest budget with at
//!   least `max(d + 1, 10)` successful results** (`d`: knobs with more
//!   than one value). `d + 1` is BOHB's `min_points_in_model`; 10 is the
//!   `n_startup` of [`TpeOptions`], the observations TPE takes before it
//!   trusts its model, so that a budget with a handful of results (its
//!   good group one config) does not steer the search. On the
//!   search_regret benchmark (docs/benchmarks.md) 10 did better than
//!   `d + 1` = 6 at almost every budget, on both proxies. The model moves
//!   up to larger budgets as soon as they have enough results; with no such
//!   budget, new configs come from the uniform draw order (the stream
//!   plain Hyperband uses).
//! - A fixed share of new configs ([`RANDOM_FRACTION`], BOHB's 1/3) is
//!   drawn uniformly anyway, so the model cannot lock the search out of a
//!   region it judged early and wrongly (a misleading proxy at small
//!   budgets).
//! - Configs already started by the search are never proposed again (a
//!   config enters rung 0 once per search), and configs running now count
//!   as failed in the model (the constant liar of [`Tpe`]), so parallel
//!   workers do not all draw next to the same point.
//! - Deterministic: the same seed and the same sequence of
//!   [`ModelProposer::observe`], [`ModelProposer::note_drawn`] and
//!   [`ModelProposer::propose`] calls give the same proposals.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::hyperband::Outcome;
use super::tpe::{KnobDomain, Tpe, TpeOptions};
use crate::spec::Better;

/// Share of new configs drawn uniformly even when a model exists (BOHB's
/// `random_fraction`).
pub const RANDOM_FRACTION: f64 = 1.0 / 3.0;

/// Model proposals refused in a row (constraints, known failures) before
/// a proposal falls back to the uniform order.
const MAX_REFUSALS: u32 = 1_000;

/// Stream offset of the proposer's random choices, so that they are not
/// the uniform order's (seeded with the search's seed itself).
const COIN_STREAM: u64 = 0xB0B0_0000_0000_0001;

/// Where a proposal came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Proposal {
    /// A config the model at this budget proposed.
    Model { config: u64, budget: f64 },
    /// Take the next config of the uniform order: no budget has enough
    /// results yet, the coin chose exploration, or the model had nothing
    /// left to propose.
    Uniform,
}

/// Per-budget TPE models for Hyperband's new configs (see the module docs).
#[derive(Debug, Clone)]
pub struct ModelProposer {
    domains: Vec<KnobDomain>,
    size: u64,
    better: Better,
    seed: u64,
    /// Successful results a budget needs before its model proposes.
    min_points: usize,
    random_fraction: f64,
    options: TpeOptions,
    coin: ChaCha8Rng,
    /// Budget (its bits: budgets are positive, so their bits order as
    /// they do) → the model of the results seen there.
    models: BTreeMap<u64, Model>,
    /// Every config the search started or refused: never proposed.
    drawn: BTreeSet<u64>,
}

#[derive(Debug, Clone)]
struct Model {
    tpe: Tpe,
    successes: usize,
}

impl ModelProposer {
    /// A proposer over knobs with these domains, for a metric where
    /// `better` wins, seeded with the search's seed.
    pub fn new(domains: Vec<KnobDomain>, better: Better, seed: u64) -> Result<Self, String> {
        // Validate the domains once, as the models will be built.
        let size = Tpe::new(domains.clone(), better, seed)?.size();
        let d = domains.iter().filter(|d| d.values() > 1).count();
        let min_points = (d + 1).max(TpeOptions::default().n_startup);
        Ok(ModelProposer {
            domains,
            size,
            better,
            seed,
            min_points,
            random_fraction: RANDOM_FRACTION,
            options: TpeOptions::default(),
            coin: ChaCha8Rng::seed_from_u64(seed ^ COIN_STREAM),
            models: BTreeMap::new(),
            drawn: BTreeSet::new(),
        })
    }

    /// The same with another share of uniform draws (`0.0`: every
    /// proposal from a model once one exists; `1.0`: plain uniform draws).
    pub fn with_random_fraction(mut self, fraction: f64) -> Self {
        self.random_fraction = if fraction.is_nan() {
            RANDOM_FRACTION
        } else {
            fraction.clamp(0.0, 1.0)
        };
        self
    }

    /// The same with another threshold of successful results a budget
    /// needs before its model proposes (at least 1).
    pub fn with_min_points(mut self, points: usize) -> Self {
        self.min_points = points.max(1);
        self
    }

    /// The same with other TPE options for the models (`n_startup` is
    /// ignored: a model proposes once its budget has
    /// [`ModelProposer::min_points`] successes). Errors as
    /// [`Tpe::with_options`].
    pub fn with_tpe_options(mut self, options: TpeOptions) -> Result<Self, String> {
        Tpe::with_options(
            self.domains.clone(),
            self.better,
            self.seed,
            options.clone(),
        )?;
        self.options = options;
        Ok(self)
    }

    /// Configs in the space: the product of the domains' value counts.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Successful results a budget needs before its model proposes.
    pub fn min_points(&self) -> usize {
        self.min_points
    }

    /// A result of `config` at `budget`. A config seen again at the same
    /// budget replaces its earlier result.
    pub fn observe(&mut self, config: u64, budget: f64, outcome: Outcome) -> Result<(), String> {
        if !(budget.is_finite() && budget > 0.0) {
            return Ok(());
        }
        let model = match self.models.entry(budget.to_bits()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let options = TpeOptions {
                    n_startup: self.min_points,
                    ..self.options.clone()
                };
                // Each budget's model draws from its own stream.
                let seed = self.seed ^ budget.to_bits().rotate_left(17);
                let mut tpe = Tpe::with_options(self.domains.clone(), self.better, seed, options)?;
                for &c in &self.drawn {
                    tpe.exclude(c)?;
                }
                e.insert(Model { tpe, successes: 0 })
            }
        };
        let value = match outcome {
            Outcome::Value(v) if v.is_finite() => Some(v),
            _ => None,
        };
        model.tpe.observe(config, value)?;
        if value.is_some() {
            model.successes += 1;
        }
        Ok(())
    }

    /// `config` was started (or refused) by the search: never propose it.
    pub fn note_drawn(&mut self, config: u64) -> Result<(), String> {
        if self.drawn.insert(config) {
            for model in self.models.values_mut() {
                model.tpe.exclude(config)?;
            }
        }
        Ok(())
    }

    /// The budget whose model proposes now: the largest with at least
    /// [`ModelProposer::min_points`] successful results.
    pub fn model_budget(&self) -> Option<f64> {
        self.models
            .iter()
            .rev()
            .find(|(_, m)| m.successes >= self.min_points)
            .map(|(bits, _)| f64::from_bits(*bits))
    }

    /// The next new config: from the model of [`ModelProposer::model_budget`]
    /// (never a config drawn before, never one `accept` refuses, with the
    /// configs in `running` counted as failed), or [`Proposal::Uniform`].
    /// The caller reports the config it starts with
    /// [`ModelProposer::note_drawn`].
    pub fn propose(
        &mut self,
        running: &HashSet<u64>,
        accept: &dyn Fn(u64) -> bool,
    ) -> Result<Proposal, String> {
        // The coin is flipped on every call, model or not, so that its
        // stream does not depend on when the first model appears.
        let explore = self.coin.random::<f64>() < self.random_fraction;
        let Some(budget) = self.model_budget() else {
            return Ok(Proposal::Uniform);
        };
        if explore {
            return Ok(Proposal::Uniform);
        }
        for _ in 0..MAX_REFUSALS {
            let Some(model) = self.models.get_mut(&budget.to_bits()) else {
                break;
            };
            let Some(config) = model.tpe.suggest(running) else {
                break;
            };
            if accept(config) {
                return Ok(Proposal::Model { config, budget });
            }
            self.note_drawn(config)?;
        }
        Ok(Proposal::Uniform)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 ordinal knobs of 6 values (1,296 configs), lower is better, a
    /// bowl with its optimum at positions (4, 1, 3, 5).
    fn bowl(tpe: &Tpe, c: u64) -> f64 {
        let opt = [4.0, 1.0, 3.0, 5.0];
        tpe.decode(c)
            .iter()
            .zip(opt)
            .map(|(&x, o)| (x as f64 - o).powi(2))
            .sum()
    }

    fn domains() -> Vec<KnobDomain> {
        vec![KnobDomain::Ordinal { values: 6 }; 4]
    }

    #[test]
    fn proposals_concentrate_on_the_good_region() {
        // 40 results at budget 1 (a uniform sample), then 30 proposals:
        // those from the model land far nearer the optimum than uniform
        // draws (a uniform config is 4 · 5.83 ≈ 23 away on average).
        let space = Tpe::new(domains(), Better::Lower, 0).unwrap();
        let mut model_cost = 0.0;
        let mut model_count = 0;
        let mut uniform_cost = 0.0;
        let mut uniform_count = 0;
        for seed in 0..5u64 {
            let mut p = ModelProposer::new(domains(), Better::Lower, seed)
                .unwrap()
                .with_random_fraction(0.0);
            let mut rng = ChaCha8Rng::seed_from_u64(1000 + seed);
            for _ in 0..40 {
                let c = rng.random_range(0..space.size());
                p.note_drawn(c).unwrap();
                p.observe(c, 1.0, Outcome::Value(bowl(&space, c))).unwrap();
            }
            for _ in 0..30 {
                let Proposal::Model { config, budget } =
                    p.propose(&HashSet::new(), &|_| true).unwrap()
                else {
                    panic!("a model with 40 results proposes");
                };
                assert_eq!(budget, 1.0);
                model_cost += bowl(&space, config);
                model_count += 1;
                p.note_drawn(config).unwrap();
                p.observe(config, 1.0, Outcome::Value(bowl(&space, config)))
                    .unwrap();
                let u = rng.random_range(0..space.size());
                uniform_cost += bowl(&space, u);
                uniform_count += 1;
            }
        }
        let (model, uniform) = (
            model_cost / model_count as f64,
            uniform_cost / uniform_count as f64,
        );
        assert!(model * 3.0 < uniform, "model {model}, uniform {uniform}");
    }

    #[test]
    fn the_largest_budget_with_enough_results_proposes() {
        let space = Tpe::new(domains(), Better::Lower, 0).unwrap();
        let p = ModelProposer::new(domains(), Better::Lower, 3).unwrap();
        // max(d + 1, 10): 10 for 4 knobs; d + 1 for 12 knobs (one of them
        // with a single value, which does not count).
        assert_eq!(p.min_points(), 10);
        let mut many = vec![KnobDomain::Ordinal { values: 2 }; 12];
        many.push(KnobDomain::Categorical { values: 1 });
        let wide = ModelProposer::new(many, Better::Lower, 3).unwrap();
        assert_eq!(wide.min_points(), 13);
        let mut p = p.with_random_fraction(0.0).with_min_points(5);
        assert_eq!(p.min_points(), 5);
        // Nothing seen: uniform.
        assert_eq!(
            p.propose(&HashSet::new(), &|_| true).unwrap(),
            Proposal::Uniform
        );
        for c in 0..20u64 {
            p.note_drawn(c * 7).unwrap();
            p.observe(c * 7, 1.0, Outcome::Value(bowl(&space, c * 7)))
                .unwrap();
        }
        assert_eq!(p.model_budget(), Some(1.0));
        // Four successes and many failures at 9: not enough.
        for c in 0..4u64 {
            p.observe(c * 7, 9.0, Outcome::Value(1.0)).unwrap();
        }
        for c in 4..20u64 {
            p.observe(c * 7, 9.0, Outcome::Failed).unwrap();
        }
        assert_eq!(p.model_budget(), Some(1.0));
        p.observe(4 * 7, 9.0, Outcome::Value(2.0)).unwrap();
        assert_eq!(p.model_budget(), Some(9.0));
        match p.propose(&HashSet::new(), &|_| true).unwrap() {
            Proposal::Model { budget, config } => {
                assert_eq!(budget, 9.0);
                assert!(config % 7 != 0 || config / 7 >= 20, "{config} drawn before");
            }
            Proposal::Uniform => panic!("the budget-9 model proposes"),
        }
        // Everything uniform with a fraction of 1.
        let mut all = p.clone().with_random_fraction(1.0);
        for _ in 0..20 {
            assert_eq!(
                all.propose(&HashSet::new(), &|_| true).unwrap(),
                Proposal::Uniform
            );
        }
    }

    #[test]
    fn drawn_running_and_refused_configs_are_never_proposed() {
        // A tiny space: 3 × 3 = 9 configs. Five seen, two running, one
        // refused: one config is left to propose, then none.
        let d = vec![KnobDomain::Ordinal { values: 3 }; 2];
        let mut p = ModelProposer::new(d, Better::Higher, 1)
            .unwrap()
            .with_random_fraction(0.0)
            .with_min_points(3);
        for c in 0..5u64 {
            p.note_drawn(c).unwrap();
            p.observe(c, 1.0, Outcome::Value(c as f64)).unwrap();
        }
        let running: HashSet<u64> = [5, 6].into_iter().collect();
        for c in [5, 6] {
            p.note_drawn(c).unwrap();
        }
        let accept = |c: u64| c != 7;
        let got = p.propose(&running, &accept).unwrap();
        assert_eq!(
            got,
            Proposal::Model {
                config: 8,
                budget: 1.0
            }
        );
        p.note_drawn(8).unwrap();
        assert_eq!(p.propose(&running, &accept).unwrap(), Proposal::Uniform);
    }

    #[test]
    fn running_configs_push_parallel_proposals_apart() {
        // Eight proposals in a row with none reported (eight workers), on
        // a 1-D space with a peak at 100 known from 29 results: counted as
        // failed (the constant liar; they were drawn, so the models also
        // exclude them) the running configs push the next proposals
        // apart; not passed as running, the eight cluster on the peak.
        let spread = |with_liar: bool, seed: u64| -> u64 {
            let d = vec![KnobDomain::Ordinal { values: 200 }];
            let mut p = ModelProposer::new(d, Better::Higher, seed)
                .unwrap()
                .with_random_fraction(0.0);
            for c in (0..200).step_by(7) {
                p.note_drawn(c).unwrap();
                let v = 1000.0 - (c as f64 - 100.0).abs();
                p.observe(c, 1.0, Outcome::Value(v)).unwrap();
            }
            let mut running = HashSet::new();
            for _ in 0..8 {
                let shown = if with_liar {
                    running.clone()
                } else {
                    HashSet::new()
                };
                let Proposal::Model { config, .. } = p.propose(&shown, &|_| true).unwrap() else {
                    panic!("a model proposes");
                };
                assert!(!running.contains(&config), "{config} proposed twice");
                p.note_drawn(config).unwrap();
                running.insert(config);
            }
            running.iter().max().unwrap() - running.iter().min().unwrap()
        };
        let (mut with, mut without) = (0, 0);
        for seed in 0..10 {
            with += spread(true, seed);
            without += spread(false, seed);
        }
        assert!(
            with > 2 * without,
            "spread with the liar {with}, without {without}"
        );
    }

    #[test]
    fn deterministic_for_a_seed() {
        let space = Tpe::new(domains(), Better::Lower, 0).unwrap();
        let run = |seed: u64| {
            let mut p = ModelProposer::new(domains(), Better::Lower, seed).unwrap();
            let mut out = Vec::new();
            let mut next_uniform = 0u64;
            let mut running = HashSet::new();
            for n in 0..80u64 {
                let c = match p.propose(&running, &|_| true).unwrap() {
                    Proposal::Model { config, .. } => config,
                    Proposal::Uniform => {
                        // A fixed stand-in for the uniform order.
                        loop {
                            next_uniform = (next_uniform + 389) % space.size();
                            if !p.drawn.contains(&next_uniform) {
                                break next_uniform;
                            }
                        }
                    }
                };
                p.note_drawn(c).unwrap();
                running.insert(c);
                out.push(c);
                if n % 3 == 2 {
                    for &r in &out[out.len() - 3..] {
                        running.remove(&r);
                        p.observe(r, 1.0, Outcome::Value(bowl(&space, r))).unwrap();
                    }
                }
            }
            out
        };
        assert_eq!(run(4), run(4));
        assert_ne!(run(4), run(5));
    }
}
