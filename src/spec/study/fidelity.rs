//! `fidelity:`: the budget in the user's own units that trials receive, its
//! bounds and `eta` (Hyperband's brackets), the proxy metric, continuation,
//! pruning and checkpoint sizes.

use marked_yaml::Node;
use serde::Serialize;

use super::parse::list_or_none;
use super::{Metric, Study};
use crate::spec::yaml::{Walker, join};

/// The `fidelity:` section: a budget in the user's own units (samples,
/// iterations, requests) that a trial receives as `budget` and
/// `TUNECTL_BUDGET`, and the proxy metric rungs are read on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fidelity {
    /// The budget's unit, shown in plans and reports ("samples").
    pub unit: String,
    pub min_budget: f64,
    pub max_budget: f64,
    pub eta: u32,
    /// Budgets reach the trial as whole numbers (`round_budget`); the
    /// default when `min_budget` and `max_budget` are both whole.
    pub integer: bool,
    /// The metric rungs are read on (default: the objective's metric).
    pub proxy: Metric,
    /// What a trial costs besides its budget (start-up, loading,
    /// compiling), in budget units: a trial at budget `b` is taken to cost
    /// `b + fixed_cost`, in the search's virtual schedule and the plan's
    /// cost. Default 0.
    pub fixed_cost: f64,
    /// `fidelity.continuation`: the trial command can continue a config's
    /// previous rung from a checkpoint (`$TUNECTL_CHECKPOINT_DIR`,
    /// `$TUNECTL_RESUME_FROM_BUDGET`), so a promoted rung costs only the
    /// budget it adds. Default false: every rung runs from zero. Left out
    /// of the frozen spec when false, so that older studies keep their
    /// hash.
    #[serde(skip_serializing_if = "is_false")]
    pub continuation: bool,
    /// `fidelity.prune`: rung trials report intermediate values
    /// (`$TUNECTL_PROGRESS_FILE`) and one that successive halving would not
    /// keep at a rung budget it has passed is stopped and recorded as
    /// pruned (hyperband and tpe). Default false. Left out of the frozen
    /// spec when false.
    #[serde(skip_serializing_if = "is_false")]
    pub prune: bool,
    /// `fidelity.checkpoint_max_bytes`: the largest checkpoint stored in
    /// the ledger for a next rung on another host (default
    /// [`crate::ledger::checkpoint::DEFAULT_CHECKPOINT_MAX_BYTES`]). Where
    /// state is kept, not what a trial means: never in the frozen spec.
    #[serde(skip)]
    pub checkpoint_max_bytes: Option<u64>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Study {
    /// The budget of every trial but an adaptive search's rung trials:
    /// `max_budget` as trials receive it, or `None` without `fidelity:`.
    pub fn objective_budget(&self) -> Option<f64> {
        self.fidelity.as_ref().map(|f| f.trial_budget(f.max_budget))
    }
}

impl Fidelity {
    /// The budget as the trial sees it (and as it enters the trial key).
    pub fn trial_budget(&self, budget: f64) -> f64 {
        if self.integer {
            round_budget(budget) as f64
        } else {
            budget
        }
    }
}

/// Most configs one Hyperband bracket may start; the largest bracket
/// starts `eta^s_max` configs, so this bounds `max_budget / min_budget`.
pub const MAX_BRACKET_CONFIGS: u64 = 10_000_000;

/// Relative slack when comparing `eta^s` with `max_budget / min_budget`, so
/// that a ratio computed as 80.99999999999999 still counts as 81.
const RATIO_TOLERANCE: f64 = 1e-9;

/// The integer budget a trial receives when the study's budget unit is a
/// whole number (samples, iterations): `budget` rounded to the nearest
/// integer, halves away from zero, and at least 1.
///
/// Rung budgets grow by a factor `eta >= 2`, so when `min_budget >= 1` the
/// rounded budgets of a bracket are strictly increasing (`round(eta·x) >=
/// round(x + 1) = round(x) + 1` for `x >= 1`) and its top rung gets exactly
/// `round(max_budget)`.
pub fn round_budget(budget: f64) -> u64 {
    // `as` saturates: a budget past u64::MAX (or NaN, which validation
    // rules out) cannot wrap.
    budget.round().max(1.0) as u64
}

/// How many Hyperband brackets past the first a fidelity section makes
/// (`s_max = floor(log_eta(max_budget / min_budget))`, computed as the
/// largest `s` with `eta^s <= R · (1 + 1e-9)` in integers, so float error
/// in `R` cannot lose a bracket), or why it makes none. Errors name the
/// field: `min_budget` must be a positive finite number, `max_budget`
/// finite and at least `min_budget`, `eta` at least 2, and the largest
/// bracket may start at most [`MAX_BRACKET_CONFIGS`] configs. The section
/// is checked with it when the study loads; `search::Brackets` builds the
/// brackets on it.
pub fn hyperband_s_max(min_budget: f64, max_budget: f64, eta: u32) -> Result<u32, String> {
    if !(min_budget.is_finite() && min_budget > 0.0) {
        return Err(format!(
            "min_budget must be a positive number, got {min_budget}"
        ));
    }
    if !max_budget.is_finite() {
        return Err(format!(
            "max_budget must be a finite number, got {max_budget}"
        ));
    }
    if max_budget < min_budget {
        return Err(format!(
            "max_budget ({max_budget}) must be at least min_budget ({min_budget})"
        ));
    }
    if eta < 2 {
        return Err(format!(
            "eta must be at least 2 (each rung keeps the top 1/eta), got {eta}"
        ));
    }
    let ratio = max_budget / min_budget;
    let eta64 = u64::from(eta);
    let mut s_max = 0u32;
    let mut power = 1u64; // eta^s_max
    while let Some(next) = power.checked_mul(eta64) {
        if next as f64 > ratio * (1.0 + RATIO_TOLERANCE) {
            break;
        }
        if next > MAX_BRACKET_CONFIGS {
            return Err(format!(
                "max_budget / min_budget = {ratio} with eta {eta} makes a bracket of more than {MAX_BRACKET_CONFIGS} configs; raise min_budget or eta"
            ));
        }
        power = next;
        s_max += 1;
    }
    Ok(s_max)
}

const FIDELITY_KEYS: &[&str] = &[
    "unit",
    "min_budget",
    "max_budget",
    "eta",
    "integer",
    "metric",
    "fixed_cost",
    "continuation",
    "prune",
    "checkpoint_max_bytes",
];

/// Default `fidelity.eta`: each rung keeps the top third.
pub const DEFAULT_ETA: u32 = 3;

/// The `fidelity:` section. `key_span`: the top-level `fidelity` key, where
/// problems of the section as a whole are reported. `declared_metrics`:
/// names under `metrics:` as written, valid or not (a metric with a bad
/// `better` is still declared and must not also be reported here).
pub(super) fn parse_fidelity(
    w: &mut Walker,
    node: &Node,
    key_span: Option<&marked_yaml::Span>,
    objective: Option<&Metric>,
    metrics: &[Metric],
    declared_metrics: &[String],
) -> Option<Fidelity> {
    let map = w.mapping(node, "fidelity")?;
    w.check_keys(map, "fidelity", FIDELITY_KEYS);
    let unit = w
        .required(map, "fidelity", "unit")
        .and_then(|n| w.string(n, "fidelity.unit"));
    if let (Some(u), Some(n)) = (&unit, map.get_node("unit"))
        && u.trim().is_empty()
    {
        w.error_at(
            n,
            "fidelity.unit",
            "the unit is empty; name what the budget counts (samples, steps, requests)",
        );
    }
    let budget = |w: &mut Walker, key: &str| -> Option<(f64, &Node)> {
        let f = join("fidelity", key);
        let n = w.required(map, "fidelity", key)?;
        let v = w.float(n, &f)?;
        if v <= 0.0 {
            w.error_at(n, &f, format!("must be a positive number, found {v}"));
            return None;
        }
        Some((v, n))
    };
    let min = budget(w, "min_budget");
    let max = budget(w, "max_budget");
    let eta = match map.get_node("eta") {
        Some(n) => w
            .int_at_least(n, "fidelity.eta", 2)
            .and_then(|e| match u32::try_from(e) {
                Ok(e) => Some(e),
                Err(_) => {
                    w.error_at(n, "fidelity.eta", format!("{e} is too large"));
                    None
                }
            }),
        None => Some(DEFAULT_ETA),
    };
    let integer = match map.get_node("integer") {
        Some(n) => w.bool(n, "fidelity.integer").map(Some),
        None => Some(None),
    };
    let fixed_cost = match map.get_node("fixed_cost") {
        Some(n) => w.float(n, "fidelity.fixed_cost").and_then(|v| {
            if v >= 0.0 && v.is_finite() {
                Some(v)
            } else {
                w.error_at(
                    n,
                    "fidelity.fixed_cost",
                    format!("must be a number >= 0 (budget units), found {v}"),
                );
                None
            }
        }),
        None => Some(0.0),
    };
    let continuation = match map.get_node("continuation") {
        Some(n) => w.bool(n, "fidelity.continuation"),
        None => Some(false),
    };
    let prune = match map.get_node("prune") {
        Some(n) => w.bool(n, "fidelity.prune"),
        None => Some(false),
    };
    let checkpoint_max_bytes = match map.get_node("checkpoint_max_bytes") {
        Some(n) => parse_byte_size(w, n, "fidelity.checkpoint_max_bytes").map(Some),
        None => Some(None),
    };
    let proxy = match map.get_node("metric") {
        Some(n) => {
            let name = w.string(n, "fidelity.metric");
            match (name, objective) {
                (Some(name), Some(objective)) => {
                    if objective.name == name {
                        Some(objective.clone())
                    } else if let Some(m) = metrics.iter().find(|m| m.name == name) {
                        Some(m.clone())
                    } else if declared_metrics.contains(&name) {
                        // Declared but invalid: reported under `metrics`.
                        None
                    } else {
                        let declared: Vec<&str> =
                            declared_metrics.iter().map(String::as_str).collect();
                        w.error_at(
                            n,
                            "fidelity.metric",
                            format!(
                                "`{name}` is neither the objective's metric (`{}`) nor declared under `metrics:` (declared: {}); the proxy metric must be one of them",
                                objective.name,
                                list_or_none(&declared)
                            ),
                        );
                        None
                    }
                }
                _ => None,
            }
        }
        None => objective.cloned(),
    };
    let ((min, min_node), (max, max_node)) = (min?, max?);
    if min >= max {
        w.error_at(
            max_node,
            "fidelity.max_budget",
            format!("max_budget {max} must be larger than min_budget {min}"),
        );
        return None;
    }
    let eta = eta?;
    let whole = |x: f64| x.fract() == 0.0;
    let integer = match integer? {
        Some(true) => {
            if let Some((key, value)) = [("min_budget", min), ("max_budget", max)]
                .into_iter()
                .find(|(_, v)| !whole(*v))
            {
                let n = map.get_node("integer").unwrap_or(min_node);
                w.error_at(
                    n,
                    "fidelity.integer",
                    format!(
                        "`integer: true` gives trials whole budgets, but {key} is {value}; write whole budgets or `integer: false`"
                    ),
                );
                return None;
            }
            true
        }
        Some(false) => false,
        None => whole(min) && whole(max),
    };
    if let Err(e) = hyperband_s_max(min, max, eta) {
        match key_span {
            Some(span) => w.error(span, "fidelity", e),
            None => w.error_at(node, "fidelity", e),
        }
        return None;
    }
    Some(Fidelity {
        unit: unit?,
        min_budget: min,
        max_budget: max,
        eta,
        integer,
        proxy: proxy?,
        fixed_cost: fixed_cost?,
        continuation: continuation?,
        prune: prune?,
        checkpoint_max_bytes: checkpoint_max_bytes?,
    })
}

/// A size in bytes: an integer, or a number with a unit (`512 MiB`,
/// `2GiB`, `100 KiB`, `1000 B`).
fn parse_byte_size(w: &mut Walker, n: &Node, field: &str) -> Option<u64> {
    let bad = |w: &mut Walker, found: &str| {
        w.error_at(
            n,
            field,
            format!("expected a size in bytes (`268435456`, `256 MiB`, `1 GiB`), found `{found}`"),
        );
        None
    };
    let text = w.string(n, field)?;
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return bad(w, t),
    };
    match digits
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(scale))
    {
        Some(v) => Some(v),
        None => bad(w, t),
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::study::tests::{load, problem};
    use crate::spec::study::{Better, DEFAULT_FINALISTS, Proposer, Strategy};

    #[test]
    fn fidelity_defaults() {
        let s = load("fidelity: {unit: samples, min_budget: 1000, max_budget: 27000}\n")
            .expect("valid");
        let f = s.fidelity.expect("fidelity");
        assert_eq!(f.unit, "samples");
        assert_eq!((f.min_budget, f.max_budget), (1000.0, 27000.0));
        assert_eq!(f.fixed_cost, 0.0);
        assert_eq!(f.eta, 3);
        assert!(f.integer, "whole budgets make an integer fidelity");
        assert_eq!(f.proxy, s.objective);
        // A fidelity and no strategy: hyperband.
        assert_eq!(
            s.strategy,
            Strategy::Hyperband {
                seed: 0,
                finalists: DEFAULT_FINALISTS,
                parallel: None,
                iterations: 1,
                proposer: Proposer::Random,
            }
        );
        assert_eq!(s.objective_command, None);

        let s = load(
            "fidelity: {unit: epochs, min_budget: 0.5, max_budget: 8, eta: 2, metric: loss}\n",
        )
        .expect("valid");
        let f = s.fidelity.expect("fidelity");
        assert_eq!(f.eta, 2);
        assert!(!f.integer, "a fractional budget is not an integer fidelity");
        assert_eq!(f.proxy.name, "loss");
        assert_eq!(f.proxy.better, Better::Lower);

        let s =
            load("fidelity: {unit: s, min_budget: 1, max_budget: 9, integer: false, metric: t}\n")
                .expect("valid");
        let f = s.fidelity.expect("fidelity");
        assert!(!f.integer);
        assert_eq!(f.proxy, s.objective);
    }

    #[test]
    fn fidelity_problems_name_file_line_and_field() {
        assert_eq!(
            problem("fidelity: {unit: samples, min_budget: 9, max_budget: 9}\n"),
            "s.yaml:8:54: fidelity.max_budget: max_budget 9 must be larger than min_budget 9"
        );
        assert_eq!(
            problem("fidelity: {unit: samples, min_budget: 0, max_budget: 9}\n"),
            "s.yaml:8:39: fidelity.min_budget: must be a positive number, found 0"
        );
        assert_eq!(
            problem("fidelity: {unit: samples, max_budget: 9}\n"),
            "s.yaml:8:12: fidelity.min_budget: missing required key"
        );
        assert_eq!(
            problem("fidelity: {unit: samples, min_budget: 1, max_budget: 9, eta: 1}\n"),
            "s.yaml:8:62: fidelity.eta: must be at least 2, found 1"
        );
        assert_eq!(
            problem("fidelity: {unit: samples, min_budget: 1.5, max_budget: 9, integer: true}\n"),
            "s.yaml:8:68: fidelity.integer: `integer: true` gives trials whole budgets, but min_budget is 1.5; write whole budgets or `integer: false`"
        );
        assert_eq!(
            problem("fidelity: {unit: samples, min_budget: 1, max_budget: 9, metric: acc}\n"),
            "s.yaml:8:65: fidelity.metric: `acc` is neither the objective's metric (`t`) nor declared under `metrics:` (declared: loss); the proxy metric must be one of them"
        );
        assert_eq!(
            problem("fidelity: {unit: samples, min_budget: 1, max_budget: 9, rate: 2}\n"),
            "s.yaml:8:57: fidelity.rate: unknown key `rate` (expected one of: unit, min_budget, max_budget, eta, integer, metric, fixed_cost, continuation, prune, checkpoint_max_bytes)"
        );
        assert_eq!(
            problem(
                "fidelity: {unit: s, min_budget: 1, max_budget: 9, checkpoint_max_bytes: 1 TB}\n"
            ),
            "s.yaml:8:73: fidelity.checkpoint_max_bytes: expected a size in bytes (`268435456`, `256 MiB`, `1 GiB`), found `1 TB`"
        );
        for (text, bytes) in [("1000", 1000), ("'256 MiB'", 256 << 20), ("2GiB", 2 << 30)] {
            let yaml = format!(
                "fidelity: {{unit: s, min_budget: 1, max_budget: 9, checkpoint_max_bytes: {text}}}\n"
            );
            let f = load(&yaml).expect("valid").fidelity.expect("fidelity");
            assert_eq!(f.checkpoint_max_bytes, Some(bytes), "{text}");
        }
        assert_eq!(
            problem("fidelity: {unit: s, min_budget: 1, max_budget: 9, prune: 1}\n"),
            "s.yaml:8:58: fidelity.prune: expected true or false, found the integer 1"
        );
        // Continuation is hyperband's; pruning hyperband's and tpe's.
        assert!(
            load("fidelity: {unit: s, min_budget: 1, max_budget: 9, prune: true}\nstrategy: {kind: tpe, count: 5}\n")
                .expect("prune with tpe")
                .fidelity
                .is_some_and(|f| f.prune)
        );
        assert_eq!(
            problem(
                "fidelity: {unit: s, min_budget: 1, max_budget: 9, prune: true}\nstrategy: {kind: random, count: 5}\n"
            ),
            "s.yaml:8:58: fidelity.prune: `prune: true` stops the rung trials of a hyperband or tpe search on their way; `strategy.kind: random` runs each config once, at one budget"
        );
        assert_eq!(
            problem(
                "fidelity: {unit: s, min_budget: 1, max_budget: 9, continuation: true}\nstrategy: {kind: tpe, count: 5}\n"
            ),
            "s.yaml:8:65: fidelity.continuation: `continuation: true` acts between the rungs of a hyperband search; `strategy.kind: tpe` runs each config once, at one budget"
        );
        assert_eq!(
            problem("fidelity: {unit: '', min_budget: 1, max_budget: 9}\n"),
            "s.yaml:8:18: fidelity.unit: the unit is empty; name what the budget counts (samples, steps, requests)"
        );
        // The bracket shape, reported at the section.
        assert_eq!(
            problem("fidelity:\n  unit: samples\n  min_budget: 1\n  max_budget: 1.0e9\n  eta: 2\n"),
            "s.yaml:8:1: fidelity: max_budget / min_budget = 1000000000 with eta 2 makes a bracket of more than 10000000 configs; raise min_budget or eta"
        );
    }
}
