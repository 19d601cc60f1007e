//! `selection:`: how a winner is chosen: the improvement it needs, the hosts
//! and samples a decision rests on, and limits on secondary metrics.

use std::collections::BTreeMap;

use marked_yaml::Node;
use serde::{Deserialize, Serialize};

use super::Metric;
use crate::spec::yaml::Walker;

/// How selection decides.
#[derive(Debug, Clone, Serialize)]
pub struct Selection {
    /// A candidate must improve on the baseline by more than this (and by
    /// more than the combined relative spread).
    pub min_improvement: f64,
    /// A decision resting on fewer hosts of the class is a draft.
    pub min_hosts: u32,
    /// Samples a config needs at a cell (on a host class) for its spread
    /// to be known; with fewer, nothing wins on it. Left out of the frozen
    /// spec at its default, so older studies keep their hashes.
    #[serde(skip_serializing_if = "is_default_min_samples")]
    pub min_samples: u32,
    /// Bounds on secondary metrics (`metrics:` names): a candidate whose
    /// median breaks one at a cell is rejected there. Left out of the
    /// frozen spec when empty, so older studies keep their hashes.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Limit>,
}

/// A bound on a secondary metric (`selection.limits`), inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Limit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

impl Limit {
    /// Which side of the bound `value` breaks, if it does.
    pub fn broken_by(&self, value: f64) -> Option<Breach> {
        if let Some(max) = self.max
            && value > max
        {
            return Some(Breach::AboveMax(max));
        }
        if let Some(min) = self.min
            && value < min
        {
            return Some(Breach::BelowMin(min));
        }
        None
    }
}

/// A value outside a [`Limit`]: `above the limit max 200`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Breach {
    AboveMax(f64),
    BelowMin(f64),
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Breach::AboveMax(max) => write!(f, "above the limit max {max}"),
            Breach::BelowMin(min) => write!(f, "below the limit min {min}"),
        }
    }
}

pub const DEFAULT_MIN_SAMPLES: u32 = 3;

fn is_default_min_samples(n: &u32) -> bool {
    *n == DEFAULT_MIN_SAMPLES
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            min_improvement: 0.02,
            min_hosts: 1,
            min_samples: DEFAULT_MIN_SAMPLES,
            limits: BTreeMap::new(),
        }
    }
}

pub(super) fn parse_selection(
    w: &mut Walker,
    node: &Node,
    metrics: &[Metric],
) -> Option<Selection> {
    let map = w.mapping(node, "selection")?;
    w.check_keys(
        map,
        "selection",
        &["min_improvement", "min_hosts", "min_samples", "limits"],
    );
    let limits = match map.get_node("limits") {
        Some(n) => parse_limits(w, n, metrics)?,
        None => BTreeMap::new(),
    };
    let d = Selection::default();
    let min_improvement = match map.get_node("min_improvement") {
        Some(n) => {
            let v = w.float(n, "selection.min_improvement")?;
            if !(0.0..1.0).contains(&v) {
                w.error_at(
                    n,
                    "selection.min_improvement",
                    format!("must be a fraction between 0 and 1 (0.02 for 2%), found {v}"),
                );
                return None;
            }
            v
        }
        None => d.min_improvement,
    };
    let min_hosts = match map.get_node("min_hosts") {
        Some(n) => w.u32_in(n, "selection.min_hosts", 1, 10_000)?,
        None => d.min_hosts,
    };
    let min_samples = match map.get_node("min_samples") {
        Some(n) => w.u32_in(n, "selection.min_samples", 2, 1_000_000)?,
        None => d.min_samples,
    };
    Some(Selection {
        min_improvement,
        min_hosts,
        min_samples,
        limits,
    })
}

/// `selection.limits`: metric name → `{min, max}` (at least one), each a
/// finite number, for metrics declared under `metrics:`.
fn parse_limits(
    w: &mut Walker,
    node: &Node,
    metrics: &[Metric],
) -> Option<BTreeMap<String, Limit>> {
    let map = w.mapping(node, "selection.limits")?;
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (k, v) in map.iter() {
        let name = k.as_str().to_string();
        let field = format!("selection.limits.{name}");
        if !metrics.iter().any(|m| m.name == name) {
            let declared: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
            w.error_at(
                v,
                &field,
                format!(
                    "`{name}` is not a metric under `metrics:` (declared: {}); a limit bounds a secondary metric",
                    if declared.is_empty() {
                        "none".to_string()
                    } else {
                        declared.join(", ")
                    }
                ),
            );
            ok = false;
            continue;
        }
        let Some(m) = w.mapping(v, &field) else {
            ok = false;
            continue;
        };
        w.check_keys(m, &field, &["min", "max"]);
        let mut bound = |key: &str| -> Option<Option<f64>> {
            match m.get_node(key) {
                None => Some(None),
                Some(n) => {
                    let x = w.float(n, &format!("{field}.{key}"))?;
                    if !x.is_finite() {
                        w.error_at(n, &format!("{field}.{key}"), "must be a finite number");
                        return None;
                    }
                    Some(Some(x))
                }
            }
        };
        let (Some(min), Some(max)) = (bound("min"), bound("max")) else {
            ok = false;
            continue;
        };
        match (min, max) {
            (None, None) => {
                w.error_at(v, &field, "give `min`, `max` or both");
                ok = false;
            }
            (Some(lo), Some(hi)) if lo > hi => {
                w.error_at(v, &field, format!("`min` {lo} is above `max` {hi}"));
                ok = false;
            }
            _ => {
                out.insert(name, Limit { min, max });
            }
        }
    }
    ok.then_some(out)
}
