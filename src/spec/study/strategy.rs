//! `strategy:` (grid, random, hyperband, tpe, with their settings) and
//! `budget:` (how much a launch may spend), and the check that a sampled
//! search asks for no more configs than the grid has.

use std::time::Duration;

use marked_yaml::Node;
use serde::Serialize;

use super::Study;
use crate::spec::yaml::{Walker, join};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Strategy {
    Grid,
    Random {
        seed: u64,
        count: u64,
    },
    /// Hyperband brackets run with asynchronous successive halving over the
    /// study's `fidelity:` budgets; needs a `fidelity:` section.
    Hyperband {
        seed: u64,
        /// Top-K configs at `max_budget` (ranked on the proxy metric)
        /// promoted to the objective stage.
        finalists: u32,
        /// Workers of the virtual schedule decisions are made on (a job
        /// takes its budget in virtual time; results are seen at their
        /// virtual end), which makes the search deterministic for a seed
        /// whatever order results arrive in. `None`: the host class's
        /// slots at launch.
        parallel: Option<u32>,
        /// Hyperband iterations (every bracket each) over one stream of
        /// configs, none tried twice; the next starts when those running
        /// have nothing to hand out.
        iterations: u32,
        /// Where new configs come from. Left out of the frozen spec at its
        /// default, so older studies keep their hashes.
        #[serde(skip_serializing_if = "Proposer::is_random")]
        proposer: Proposer,
    },
    /// Tree-structured Parzen Estimator: `count` configs suggested one by
    /// one (at `max_budget` when the study has a `fidelity:` section).
    Tpe {
        seed: u64,
        count: u64,
        finalists: u32,
        parallel: Option<u32>,
    },
}

impl Strategy {
    /// Whether configs are chosen as results arrive (hyperband, tpe).
    pub fn is_adaptive(&self) -> bool {
        matches!(self, Strategy::Hyperband { .. } | Strategy::Tpe { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Grid => "grid",
            Strategy::Random { .. } => "random",
            Strategy::Hyperband { .. } => "hyperband",
            Strategy::Tpe { .. } => "tpe",
        }
    }
}

/// Where a hyperband search takes the configs it starts
/// (`strategy.proposer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proposer {
    /// Drawn uniformly without replacement, in a seeded order.
    #[default]
    Random,
    /// Proposed by TPE models of the results so far, per budget, a third
    /// of them still drawn uniformly (BOHB-like).
    Tpe,
}

impl Proposer {
    pub fn is_random(&self) -> bool {
        *self == Proposer::Random
    }

    pub fn name(&self) -> &'static str {
        match self {
            Proposer::Random => "random",
            Proposer::Tpe => "tpe",
        }
    }
}

/// Default number of finalists an adaptive search promotes to the
/// objective stage.
pub const DEFAULT_FINALISTS: u32 = 3;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Budget {
    pub max_trials: Option<u64>,
    /// The trial time one launch may spend, summed over every slot
    /// (warm-ups included); a launch whose estimate exceeds it is refused
    /// without `--yes`, and a running one stops starting trials at it.
    #[serde(skip)]
    pub max_trial_time: Option<Duration>,
}

const STRATEGY_KEYS: &[&str] = &[
    "kind",
    "seed",
    "count",
    "finalists",
    "parallel",
    "iterations",
    "proposer",
];

/// `has_fidelity`: whether the study has a `fidelity:` section (written,
/// valid or not), which hyperband needs.
pub(super) fn parse_strategy(w: &mut Walker, node: &Node, has_fidelity: bool) -> Option<Strategy> {
    let map = w.mapping(node, "strategy")?;
    w.check_keys(map, "strategy", STRATEGY_KEYS);
    let kind_node = w.required(map, "strategy", "kind")?;
    let kind = w.string(kind_node, "strategy.kind")?;
    // The keys each kind takes besides `kind`.
    let (takes, sizing): (&[&str], &str) = match kind.as_str() {
        "grid" => (&[], "every config is a candidate"),
        "random" => (&["seed", "count"], ""),
        "hyperband" => (
            &["seed", "finalists", "parallel", "iterations", "proposer"],
            "hyperband sizes itself by the brackets of its `fidelity:` section",
        ),
        "tpe" => (&["seed", "count", "finalists", "parallel"], ""),
        other => {
            w.error_at(
                kind_node,
                "strategy.kind",
                format!("unknown strategy `{other}` (expected grid, random, hyperband or tpe)"),
            );
            return None;
        }
    };
    let mut ok = true;
    for k in &STRATEGY_KEYS[1..] {
        if takes.contains(k) {
            continue;
        }
        if let Some(n) = map.get_node(k) {
            let users: Vec<&str> = ["random", "hyperband", "tpe"]
                .into_iter()
                .filter(|kind| match *k {
                    "seed" => true,
                    "count" => *kind != "hyperband",
                    "iterations" | "proposer" => *kind == "hyperband",
                    _ => *kind != "random",
                })
                .collect();
            let why = if *k == "count" && !sizing.is_empty() {
                format!(" ({sizing})")
            } else {
                String::new()
            };
            w.error_at(
                n,
                &join("strategy", k),
                format!(
                    "`{k}` does not apply to `kind: {kind}`{why}; it applies to {}",
                    or_list(&users)
                ),
            );
            ok = false;
        }
    }
    if kind == "hyperband" && !has_fidelity {
        w.error_at(
            kind_node,
            "strategy.kind",
            "hyperband needs a `fidelity:` section (min_budget, max_budget, unit) to know what budget to give a trial; add one, or use grid, random or tpe",
        );
        ok = false;
    }
    let seed = match map.get_node("seed").filter(|_| takes.contains(&"seed")) {
        Some(n) => w.int_at_least(n, "strategy.seed", 0).map(|s| s as u64),
        None => Some(0),
    };
    let count = if takes.contains(&"count") {
        w.required(map, "strategy", "count").and_then(|n| {
            let c = w.int_at_least(n, "strategy.count", 1)?;
            if c as u64 > MAX_STRATEGY_COUNT {
                w.error_at(
                    n,
                    "strategy.count",
                    format!("asks for {c} configs, more than the limit of {MAX_STRATEGY_COUNT}"),
                );
                return None;
            }
            Some(c as u64)
        })
    } else {
        Some(0)
    };
    let finalists = match map
        .get_node("finalists")
        .filter(|_| takes.contains(&"finalists"))
    {
        Some(n) => w.u32_in(n, "strategy.finalists", 1, MAX_FINALISTS),
        None => Some(DEFAULT_FINALISTS),
    };
    let parallel = match map
        .get_node("parallel")
        .filter(|_| takes.contains(&"parallel"))
    {
        Some(n) => w.u32_in(n, "strategy.parallel", 1, MAX_PARALLEL).map(Some),
        None => Some(None),
    };
    let iterations = match map
        .get_node("iterations")
        .filter(|_| takes.contains(&"iterations"))
    {
        Some(n) => w.u32_in(n, "strategy.iterations", 1, MAX_ITERATIONS),
        None => Some(1),
    };
    let proposer = match map
        .get_node("proposer")
        .filter(|_| takes.contains(&"proposer"))
    {
        Some(n) => w
            .string(n, "strategy.proposer")
            .and_then(|p| match p.as_str() {
                "random" => Some(Proposer::Random),
                "tpe" => Some(Proposer::Tpe),
                other => {
                    w.error_at(
                        n,
                        "strategy.proposer",
                        format!("unknown proposer `{other}` (expected random or tpe)"),
                    );
                    None
                }
            }),
        None => Some(Proposer::Random),
    };
    let (seed, count, finalists, parallel, iterations, proposer) =
        (seed?, count?, finalists?, parallel?, iterations?, proposer?);
    if !ok {
        return None;
    }
    Some(match kind.as_str() {
        "grid" => Strategy::Grid,
        "random" => Strategy::Random { seed, count },
        "hyperband" => Strategy::Hyperband {
            seed,
            finalists,
            parallel,
            iterations,
            proposer,
        },
        _ => Strategy::Tpe {
            seed,
            count,
            finalists,
            parallel,
        },
    })
}

/// Most configs `strategy.count` may ask for (random and tpe): the plan
/// holds every one of them.
pub const MAX_STRATEGY_COUNT: u64 = 1_000_000;
/// Most finalists an adaptive search may promote to the objective stage.
const MAX_FINALISTS: u32 = 10_000;
/// Most Hyperband iterations one search may run.
const MAX_ITERATIONS: u32 = 1_000;
/// Largest `strategy.parallel`.
const MAX_PARALLEL: u32 = 1_000_000;

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

pub(super) fn parse_budget(
    w: &mut Walker,
    node: &Node,
    strategy: Option<&Strategy>,
) -> Option<Budget> {
    let map = w.mapping(node, "budget")?;
    w.check_keys(map, "budget", &["max_trials", "max_trial_time"]);
    let max_trial_time = map.get_node("max_trial_time").and_then(|n| {
        let d = w.duration(n, "budget.max_trial_time")?;
        if d.is_zero() {
            w.error_at(n, "budget.max_trial_time", "must be more than 0");
            return None;
        }
        Some(d)
    });
    let max_trials = match map.get_node("max_trials") {
        Some(n) => {
            let max = w.int_at_least(n, "budget.max_trials", 1)? as u64;
            if let Some(s) = strategy.filter(|s| s.is_adaptive()) {
                w.error_at(
                    n,
                    "budget.max_trials",
                    format!(
                        "does not apply to `{}`: an adaptive strategy sizes itself (hyperband by the brackets of its `fidelity:` section, tpe by `strategy.count`); remove `max_trials`",
                        s.name()
                    ),
                );
                return None;
            }
            Some(max)
        }
        None => None,
    };
    Some(Budget {
        max_trials,
        max_trial_time,
    })
}

pub(super) fn check_strategy(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    study: &Study,
) {
    let (count, what) = match study.strategy {
        Strategy::Random { count, .. } => (count, "random"),
        Strategy::Tpe { count, .. } => (count, "tpe"),
        _ => return,
    };
    let candidates = study.grid_size().saturating_sub(1);
    if u128::from(count) > candidates
        && let Some(n) = map
            .get_mapping("strategy")
            .and_then(|s| s.get_node("count"))
    {
        w.error_at(
            n,
            "strategy.count",
            format!("asks for {count} {what} configs but the grid has only {candidates} besides the baseline"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::study::tests::{load, problem};

    #[test]
    fn adaptive_strategies_parse() {
        let s = load(
            "fidelity: {unit: samples, min_budget: 1, max_budget: 9}\nstrategy: {kind: hyperband, seed: 5, finalists: 2, parallel: 4, iterations: 3}\n",
        )
        .expect("valid");
        assert_eq!(
            s.strategy,
            Strategy::Hyperband {
                seed: 5,
                finalists: 2,
                parallel: Some(4),
                iterations: 3,
                proposer: Proposer::Random,
            }
        );
        // `iterations` is hyperband's alone.
        let e = problem("strategy: {kind: tpe, count: 5, iterations: 2}\n");
        assert!(
            e.contains("strategy.iterations") && e.contains("it applies to hyperband"),
            "{e}"
        );
        // So is `proposer`, `random` or `tpe`; only `tpe` enters the frozen
        // spec (older studies keep their hashes).
        let fid = "fidelity: {unit: samples, min_budget: 1, max_budget: 9}\n";
        let s = load(&format!(
            "{fid}strategy: {{kind: hyperband, proposer: tpe}}\n"
        ))
        .expect("valid");
        assert!(matches!(
            s.strategy,
            Strategy::Hyperband {
                proposer: Proposer::Tpe,
                ..
            }
        ));
        assert_eq!(s.frozen().json()["strategy"]["proposer"], "tpe");
        let s = load(&format!(
            "{fid}strategy: {{kind: hyperband, proposer: random}}\n"
        ))
        .expect("valid");
        assert!(s.frozen().json()["strategy"].get("proposer").is_none());
        let e = problem(&format!(
            "{fid}strategy: {{kind: hyperband, proposer: bohb}}\n"
        ));
        assert!(
            e.contains("strategy.proposer") && e.contains("expected random or tpe"),
            "{e}"
        );
        let e = problem("strategy: {kind: tpe, count: 5, proposer: tpe}\n");
        assert!(
            e.contains("strategy.proposer") && e.contains("it applies to hyperband"),
            "{e}"
        );
        let s = load("strategy: {kind: tpe, count: 5}\n").expect("valid");
        assert_eq!(
            s.strategy,
            Strategy::Tpe {
                seed: 0,
                count: 5,
                finalists: DEFAULT_FINALISTS,
                parallel: None,
            }
        );
        assert!(s.fidelity.is_none());
        let s = load(
            "fidelity: {unit: steps, min_budget: 10, max_budget: 100}\nstrategy: {kind: tpe, seed: 1, count: 7, finalists: 1, parallel: 2}\n",
        )
        .expect("valid");
        assert_eq!(
            s.strategy,
            Strategy::Tpe {
                seed: 1,
                count: 7,
                finalists: 1,
                parallel: Some(2)
            }
        );
        // A fidelity with grid or random: trials run at max_budget.
        for strategy in ["{kind: grid}", "{kind: random, count: 3}"] {
            let s = load(&format!(
                "fidelity: {{unit: steps, min_budget: 10, max_budget: 100}}\nstrategy: {strategy}\n"
            ))
            .expect("valid");
            assert!(s.fidelity.is_some() && !s.strategy.is_adaptive());
        }
    }

    #[test]
    fn strategy_problems_name_file_line_and_field() {
        assert_eq!(
            problem("strategy: {kind: hyperband}\n"),
            "s.yaml:8:18: strategy.kind: hyperband needs a `fidelity:` section (min_budget, max_budget, unit) to know what budget to give a trial; add one, or use grid, random or tpe"
        );
        assert_eq!(
            problem("strategy: {kind: annealing}\n"),
            "s.yaml:8:18: strategy.kind: unknown strategy `annealing` (expected grid, random, hyperband or tpe)"
        );
        assert_eq!(
            problem("strategy: {kind: tpe}\n"),
            "s.yaml:8:12: strategy.count: missing required key"
        );
        assert_eq!(
            problem("strategy: {kind: tpe, count: 8}\n"),
            "s.yaml:8:30: strategy.count: asks for 8 tpe configs but the grid has only 7 besides the baseline"
        );
        assert_eq!(
            problem("strategy: {kind: tpe, count: 2, finalists: 0}\n"),
            "s.yaml:8:44: strategy.finalists: must be between 1 and 10000, found 0"
        );
        assert_eq!(
            problem(
                "fidelity: {unit: s, min_budget: 1, max_budget: 9}\nstrategy: {kind: hyperband, count: 4}\n"
            ),
            "s.yaml:9:36: strategy.count: `count` does not apply to `kind: hyperband` (hyperband sizes itself by the brackets of its `fidelity:` section); it applies to random or tpe"
        );
        assert_eq!(
            problem("strategy: {kind: grid, seed: 1}\n"),
            "s.yaml:8:30: strategy.seed: `seed` does not apply to `kind: grid`; it applies to random, hyperband or tpe"
        );
        assert_eq!(
            problem("strategy: {kind: random, count: 2, parallel: 2}\n"),
            "s.yaml:8:46: strategy.parallel: `parallel` does not apply to `kind: random`; it applies to hyperband or tpe"
        );
        assert_eq!(
            problem(
                "fidelity: {unit: s, min_budget: 1, max_budget: 9}\nstrategy: {kind: hyperband, parallel: 0}\n"
            ),
            "s.yaml:9:39: strategy.parallel: must be between 1 and 1000000, found 0"
        );
        assert_eq!(
            problem("strategy: {kind: tpe, count: 2, seed: -1}\n"),
            "s.yaml:8:39: strategy.seed: must be at least 0, found -1"
        );
    }

    #[test]
    fn max_trials_does_not_size_an_adaptive_search() {
        assert_eq!(
            problem(
                "fidelity: {unit: s, min_budget: 1, max_budget: 9}\nbudget: {max_trials: 50}\n"
            ),
            "s.yaml:9:22: budget.max_trials: does not apply to `hyperband`: an adaptive strategy sizes itself (hyperband by the brackets of its `fidelity:` section, tpe by `strategy.count`); remove `max_trials`"
        );
        assert_eq!(
            problem("strategy: {kind: tpe, count: 2}\nbudget: {max_trials: 50}\n"),
            "s.yaml:9:22: budget.max_trials: does not apply to `tpe`: an adaptive strategy sizes itself (hyperband by the brackets of its `fidelity:` section, tpe by `strategy.count`); remove `max_trials`"
        );
        let s = load("fidelity: {unit: s, min_budget: 1, max_budget: 9}\nstrategy: {kind: grid}\nbudget: {max_trials: 50}\n")
            .expect("valid: grid with a fidelity keeps its budget");
        assert_eq!(s.budget.max_trials, Some(50));
    }
}
