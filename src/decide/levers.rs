//! What to try next on a host class, from the evidence a study has: which
//! knobs moved the objective most, which winners sit at the edge of a
//! knob's range, and which values of a knob's domain were never tried.
//! It only reads the analysis; it decides nothing.
//!
//! A knob's effect is a paired estimate: two configs measured at the same
//! cell that differ in that knob alone form a pair, and the effect is the
//! median, over such pairs, of the ratio of the best value's objective to
//! the worst value's (in the better direction, so ≥ 1 means the best value
//! is better), with the scaled MAD of those ratios as its spread. Which
//! value is best and which worst is read from every context (cell and the
//! other knobs' values) that measured two values or more: each value's
//! objective relative to the geometric mean of its context, median over
//! contexts. Only configs that passed the gate count.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::{BucketReport, CellReport, ConfigReport};
use crate::spec::FrozenSpec;
use crate::spec::study::KnobKind;
use crate::stats::Summary;

/// The next levers of one host class.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NextSteps {
    /// Every knob with more than one value in its domain, the largest
    /// effect first (knobs without an estimate last).
    pub effects: Vec<KnobEffect>,
    /// Winners whose value of a knob is the largest or smallest tried
    /// (measured or screened).
    pub edges: Vec<Edge>,
    /// Per knob, the values of its domain no trial of the class ever used
    /// (not even a search's screening run).
    pub untried: Vec<Untried>,
}

/// How much one knob moved the objective (see the module's doc).
#[derive(Debug, Clone, Serialize)]
pub struct KnobEffect {
    pub knob: String,
    /// The value that measured best, and the one that measured worst.
    pub best: Option<Value>,
    pub worst: Option<Value>,
    /// Median over the pairs of best's objective / worst's, oriented so
    /// that more is better; `None` without a pair.
    pub ratio: Option<f64>,
    /// 1.4826 × MAD of the pair ratios; `None` (unknown) with fewer pairs
    /// than `selection.min_samples`.
    pub spread: Option<f64>,
    /// Pairs of configs that differ in this knob alone (same cell).
    pub pairs: usize,
    /// Why there is no estimate, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_estimate: Option<NoEstimate>,
}

/// Why a knob's effect has no estimate. Its `Display` is the JSON's
/// `no_estimate` text.
#[derive(Debug, Clone, PartialEq)]
pub enum NoEstimate {
    /// One value of the knob passed the gate.
    OnlyValue { knob: String, value: String },
    /// No two configs that passed the gate differ in this knob alone.
    NoPair,
    /// No value of the knob has a measurement.
    NoMeasurement,
    /// The best and worst values never met with the other knobs equal.
    ExtremesNeverPaired,
}

impl fmt::Display for NoEstimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoEstimate::OnlyValue { knob, value } => {
                write!(f, "only {knob}={value} passed the gate")
            }
            NoEstimate::NoPair => {
                f.write_str("no two configs that passed the gate differ in this knob alone")
            }
            NoEstimate::NoMeasurement => f.write_str("no value has a measurement"),
            NoEstimate::ExtremesNeverPaired => f.write_str(
                "its best and worst values were never measured with the other knobs equal",
            ),
        }
    }
}

impl Serialize for NoEstimate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A bucket's winner at the edge of what was tried of a knob.
#[derive(Debug, Clone, Serialize)]
pub struct Edge {
    /// The bucket's label.
    pub bucket: String,
    pub knob: String,
    pub value: Value,
    /// `largest` or `smallest`.
    pub side: &'static str,
    /// Whether it is also the edge of the knob's range (`true`), or only
    /// of the values tried (values beyond it were never tried).
    pub edge_of_range: bool,
}

/// Values of a knob's domain never tried on the class, and what may have
/// kept them out.
#[derive(Debug, Clone, Serialize)]
pub struct Untried {
    pub knob: String,
    pub values: Vec<Value>,
    /// What could have kept them out, as far as the study tells:
    /// `constraint` (a constraint names the knob), `search` (a random or
    /// adaptive strategy did not pick them), `budget` (budget.max_trials
    /// can cut a grid), `pending` (the class has trials left to run).
    pub possible_causes: Vec<&'static str>,
}

/// A value as a config label writes it (`16384`, `bf16`).
pub fn value_text(v: &Value) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

/// The next levers of a class from its cell reports, the configs its
/// search screened (rungs) and its buckets; `trials_left`: planned trials
/// of the class have not ended.
pub fn next_steps(
    spec: &FrozenSpec,
    cells: &[CellReport],
    screened: &[&Value],
    buckets: &[BucketReport],
    trials_left: bool,
    higher: bool,
    min_samples: usize,
) -> NextSteps {
    let measured: Vec<(&str, &ConfigReport)> = cells
        .iter()
        .flat_map(|c| {
            c.baseline
                .iter()
                .filter(|b| b.rejection.is_none())
                .chain(&c.eligible)
                .map(move |r| (c.cell_label.as_str(), r))
        })
        .filter(|(_, r)| r.summary.is_some_and(|s| s.median > 0.0))
        .collect();
    let tried: Vec<&Value> = cells
        .iter()
        .flat_map(|c| c.baseline.iter().chain(&c.eligible).chain(&c.rejected))
        .map(|r| &r.config)
        .chain(screened.iter().copied())
        .collect();
    let knobs: Vec<_> = spec.knobs.iter().filter(|k| k.values.len() > 1).collect();

    let mut effects: Vec<KnobEffect> = knobs
        .iter()
        .map(|k| effect(&k.name, &measured, higher, min_samples))
        .collect();
    effects.sort_by(|a, b| {
        let key = |e: &KnobEffect| e.ratio.unwrap_or(f64::NEG_INFINITY);
        key(b).total_cmp(&key(a)).then_with(|| a.knob.cmp(&b.knob))
    });

    // The distinct values each knob was tried at, in their JSON text's
    // order: found once per knob (a class can have tens of thousands of
    // tried configs), each value's text computed once.
    let tried_by_knob: HashMap<&str, Vec<&Value>> = knobs
        .iter()
        .map(|k| {
            let mut seen: HashSet<&Value> = HashSet::new();
            let mut out: Vec<&Value> = tried
                .iter()
                .filter_map(|c| c.get(&k.name))
                .filter(|v| seen.insert(*v))
                .collect();
            out.sort_by_cached_key(|v| v.to_string());
            (k.name.as_str(), out)
        })
        .collect();
    let tried_values =
        |knob: &str| -> Vec<&Value> { tried_by_knob.get(knob).cloned().unwrap_or_default() };

    let mut edges = Vec::new();
    for b in buckets {
        if b.winner.is_none() {
            continue;
        }
        for k in &knobs {
            if !matches!(k.kind, KnobKind::Int | KnobKind::Float) {
                continue;
            }
            let Some(w) = b.config.get(&k.name).and_then(Value::as_f64) else {
                continue;
            };
            if Some(w) == k.default.as_f64() {
                continue;
            }
            let range: Vec<f64> = k.values.iter().filter_map(Value::as_f64).collect();
            let seen: Vec<f64> = tried_values(&k.name)
                .into_iter()
                .filter_map(Value::as_f64)
                .collect();
            let (max, min) = (fold(&seen, f64::max), fold(&seen, f64::min));
            let side = if Some(w) == max {
                Some(("largest", Some(w) == fold(&range, f64::max)))
            } else if Some(w) == min {
                Some(("smallest", Some(w) == fold(&range, f64::min)))
            } else {
                None
            };
            if let Some((side, edge_of_range)) = side {
                edges.push(Edge {
                    bucket: b.label.clone(),
                    knob: k.name.clone(),
                    value: b.config[&k.name].clone(),
                    side,
                    edge_of_range,
                });
            }
        }
    }

    let constrained = constraint_names(spec);
    let grid = spec
        .json()
        .get("strategy")
        .and_then(|s| s.get("kind"))
        .and_then(Value::as_str)
        .is_none_or(|kind| kind == "grid");
    let untried = knobs
        .iter()
        .filter_map(|k| {
            let seen = tried_values(&k.name);
            let values: Vec<Value> = k
                .values
                .iter()
                .filter(|v| !seen.contains(v))
                .cloned()
                .collect();
            if values.is_empty() || tried.is_empty() {
                return None;
            }
            let mut causes = Vec::new();
            if constrained.contains(&k.name) {
                causes.push("constraint");
            }
            causes.push(if grid { "budget" } else { "search" });
            if trials_left {
                causes.push("pending");
            }
            Some(Untried {
                knob: k.name.clone(),
                values,
                possible_causes: causes,
            })
        })
        .collect();
    NextSteps {
        effects,
        edges,
        untried,
    }
}

fn fold(xs: &[f64], f: fn(f64, f64) -> f64) -> Option<f64> {
    xs.iter().copied().reduce(f)
}

/// Names the study's constraints use.
fn constraint_names(spec: &FrozenSpec) -> BTreeSet<String> {
    spec.json()
        .get("constraints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("expr").and_then(Value::as_str))
        .filter_map(|e| crate::spec::template::expression_variables(e).ok())
        .flatten()
        .collect()
}

/// The paired effect of `knob` over the measured configs (cell label,
/// report).
fn effect(
    knob: &str,
    measured: &[(&str, &ConfigReport)],
    higher: bool,
    min_samples: usize,
) -> KnobEffect {
    // (cell, the other knobs' values) → value of `knob` → performance
    // (more is better). The other knobs are the config's (name, value)
    // pairs in key order, borrowed: equal exactly when their canonical
    // JSON is. Nothing below depends on the order of the contexts (medians
    // and spreads of what they give).
    type Context<'a> = (&'a str, Vec<(&'a String, &'a Value)>);
    let mut contexts: HashMap<Context, BTreeMap<String, (Value, f64)>> = HashMap::new();
    for (cell, r) in measured {
        let (Some(obj), Some(s)) = (r.config.as_object(), r.summary) else {
            continue;
        };
        let Some(value) = obj.get(knob) else {
            continue;
        };
        let mut others: Vec<(&String, &Value)> = obj.iter().filter(|(k, _)| *k != knob).collect();
        others.sort_by(|a, b| a.0.cmp(b.0));
        let perf = if higher { s.median } else { 1.0 / s.median };
        contexts
            .entry((cell, others))
            .or_default()
            .insert(value.to_string(), (value.clone(), perf));
    }
    let distinct: BTreeSet<&String> = contexts.values().flat_map(|v| v.keys()).collect();
    let only = (distinct.len() == 1)
        .then(|| contexts.values().flat_map(|v| v.values()).next())
        .flatten()
        .map(|(v, _)| value_text(v));
    contexts.retain(|_, values| values.len() > 1);
    let none = |why: NoEstimate| KnobEffect {
        knob: knob.to_string(),
        best: None,
        worst: None,
        ratio: None,
        spread: None,
        pairs: 0,
        no_estimate: Some(why),
    };
    if let Some(only) = only {
        return none(NoEstimate::OnlyValue {
            knob: knob.to_string(),
            value: only.to_string(),
        });
    }
    if contexts.is_empty() {
        return none(NoEstimate::NoPair);
    }
    // Each value's performance relative to its context's geometric mean.
    let mut scores: BTreeMap<String, (Value, Vec<f64>)> = BTreeMap::new();
    for values in contexts.values() {
        let geo = (values.values().map(|(_, p)| p.ln()).sum::<f64>() / values.len() as f64).exp();
        for (key, (v, p)) in values {
            scores
                .entry(key.clone())
                .or_insert_with(|| (v.clone(), Vec::new()))
                .1
                .push(p / geo);
        }
    }
    let ranked: Vec<(&String, f64)> = scores
        .iter()
        .filter_map(|(k, (_, s))| Some((k, crate::stats::median(s)?)))
        .collect();
    let best = ranked.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    let worst = ranked.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let (Some((best, _)), Some((worst, _))) = (best, worst) else {
        return none(NoEstimate::NoMeasurement);
    };
    let ratios: Vec<f64> = contexts
        .values()
        .filter_map(|values| Some(values.get(*best)?.1 / values.get(*worst)?.1))
        .collect();
    let summary = Summary::of(&ratios);
    KnobEffect {
        knob: knob.to_string(),
        best: Some(scores[*best].0.clone()),
        worst: Some(scores[*worst].0.clone()),
        ratio: summary.map(|s| s.median),
        spread: summary.filter(|s| s.n >= min_samples).map(|s| s.spread),
        pairs: ratios.len(),
        no_estimate: summary.is_none().then_some(NoEstimate::ExtremesNeverPaired),
    }
}
