//! `cells:`, the workload axes a study is tuned *for*, and `buckets:`, how
//! each axis groups into buckets.

use std::collections::BTreeMap;

use marked_yaml::Node;
use serde::{Deserialize, Serialize};

use super::knobs::{Knob, explicit_values};
use super::{RESERVED_VARIABLES, Study};
use crate::spec::value::Value;
use crate::spec::yaml::{Walker, is_identifier, join};

/// Cells of a study in order (one empty cell when it has no axes).
pub fn cells(study: &Study) -> Vec<Vec<Value>> {
    let mut out: Vec<Vec<Value>> = vec![Vec::new()];
    for axis in &study.cells {
        let mut next = Vec::with_capacity(out.len() * axis.values.len());
        for prefix in &out {
            for v in &axis.values {
                let mut c = prefix.clone();
                c.push(v.clone());
                next.push(c);
            }
        }
        out = next;
    }
    out
}

/// `n=500000 seq=128`, or `(single cell)` when the study has no axes.
pub fn cell_label(study: &Study, cell: &[Value]) -> String {
    if study.cells.is_empty() {
        return "(single cell)".to_string();
    }
    study
        .cells
        .iter()
        .zip(cell)
        .map(|(a, v)| format!("{}={}", a.name, v))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A workload axis: tuned *for*, not tuned.
#[derive(Debug, Clone, Serialize)]
pub struct CellAxis {
    pub name: String,
    pub values: Vec<Value>,
}

/// How a cell axis groups into buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BucketRule {
    /// Numbers in [2^k, 2^(k+1)) share a bucket.
    Pow2,
    /// Every value is its own bucket.
    Exact,
    /// The whole axis is one bucket.
    All,
}

impl BucketRule {
    /// As written in a study.
    pub fn name(self) -> &'static str {
        match self {
            BucketRule::Pow2 => "pow2",
            BucketRule::Exact => "exact",
            BucketRule::All => "all",
        }
    }
}

pub(super) fn parse_cells(w: &mut Walker, node: &Node, knobs: &[Knob]) -> Vec<CellAxis> {
    let mut out = Vec::new();
    let Some(map) = w.mapping(node, "cells") else {
        return out;
    };
    for (key, value) in map.iter() {
        let name = key.as_str();
        let field = join("cells", name);
        if !is_identifier(name) {
            w.error(
                key.span(),
                &field,
                format!("`{name}` is not a valid cell axis name"),
            );
            continue;
        }
        if RESERVED_VARIABLES.contains(&name) {
            w.error(
                key.span(),
                &field,
                format!("`{name}` is reserved for a trial variable"),
            );
            continue;
        }
        if let Some(problem) = super::parse::own_prefix_problem(name) {
            w.error(key.span(), &field, problem);
            continue;
        }
        if knobs.iter().any(|k| k.name == name) {
            w.error(
                key.span(),
                &field,
                format!("`{name}` is both a knob and a cell axis; a name can only be one"),
            );
            continue;
        }
        if let Some(other) = out
            .iter()
            .find(|a: &&CellAxis| a.name.to_uppercase() == name.to_uppercase())
        {
            w.error(
                key.span(),
                &field,
                format!(
                    "`{name}` and `{}` would share the variable TUNECTL_CELL_{}; cell axis names must differ in more than case",
                    other.name,
                    name.to_uppercase()
                ),
            );
            continue;
        }
        if let Some(values) = explicit_values(w, value, &field, None) {
            out.push(CellAxis {
                name: name.to_string(),
                values,
            });
        }
    }
    out
}

/// Bucket rules for every cell axis: as written, else `pow2` for an axis
/// of positive numbers and `exact` for any other.
pub(super) fn parse_buckets(
    w: &mut Walker,
    node: Option<&Node>,
    cells: &[CellAxis],
) -> BTreeMap<String, BucketRule> {
    let mut out: BTreeMap<String, BucketRule> = cells
        .iter()
        .map(|a| {
            let numeric = a.values.iter().all(|v| v.as_f64().is_some_and(|x| x > 0.0));
            (
                a.name.clone(),
                if numeric {
                    BucketRule::Pow2
                } else {
                    BucketRule::Exact
                },
            )
        })
        .collect();
    let Some(node) = node else { return out };
    let Some(map) = w.mapping(node, "buckets") else {
        return out;
    };
    for (k, v) in map.iter() {
        let field = join("buckets", k.as_str());
        let Some(axis) = cells.iter().find(|a| a.name == k.as_str()) else {
            w.error(
                k.span(),
                &field,
                format!("`{}` is not a cell axis", k.as_str()),
            );
            continue;
        };
        let Some(rule) = w.string(v, &field) else {
            continue;
        };
        let rule = match rule.as_str() {
            "pow2" => BucketRule::Pow2,
            "exact" => BucketRule::Exact,
            "all" => BucketRule::All,
            other => {
                w.error_at(
                    v,
                    &field,
                    format!("unknown bucket rule `{other}` (expected pow2, exact or all)"),
                );
                continue;
            }
        };
        if rule == BucketRule::Pow2
            && !axis
                .values
                .iter()
                .all(|x| x.as_f64().is_some_and(|f| f > 0.0))
        {
            w.error_at(v, &field, "pow2 buckets need an axis of positive numbers");
            continue;
        }
        out.insert(axis.name.clone(), rule);
    }
    out
}
