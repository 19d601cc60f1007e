//! Buckets: cells that share one winner. Per cell axis, a rule from the
//! study (`pow2`: numbers in [2^k, 2^(k+1)); `exact`: each value; `all`:
//! the whole axis) maps a cell value to bounds; a bucket is the product.
//!
//! Both directions live here: [`bucket_of`] (a cell to its bucket, as the
//! launch, the report and the plan group cells) and [`contains`] (does a
//! bucket's bounds admit a cell, as `apply` picks the bucket of the cell it
//! is given).

use std::collections::BTreeMap;

use serde_json::{Map, Value as J, json};

use crate::canon::{canonical_json, sha256_hex};
use crate::spec::{BucketRule, FrozenSpec};

/// A bucket as `apply` and the report see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// First 16 hex of the sha256 of `bounds`.
    pub key: String,
    pub label: String,
    pub bounds: J,
}

/// The bucket of `cell` (a JSON object of axis values) under the frozen
/// spec's `buckets` rules (`pow2` where a rule is missing and the value is
/// a positive number, else `exact`).
pub fn bucket_of(spec: &FrozenSpec, cell: &J) -> Bucket {
    bucket_under(&spec.buckets, cell)
}

/// [`bucket_of`] under rules given as such (a study's own: the same
/// bucket as under its frozen spec).
pub fn bucket_under(rules: &BTreeMap<String, BucketRule>, cell: &J) -> Bucket {
    let mut bounds = serde_json::Map::new();
    let mut labels = Vec::new();
    if let Some(obj) = cell.as_object() {
        let mut axes: Vec<&String> = obj.keys().collect();
        axes.sort();
        for axis in axes {
            let value = &obj[axis];
            let positive = value.as_f64().filter(|v| *v > 0.0);
            let rule = rules.get(axis).copied().unwrap_or(if positive.is_some() {
                BucketRule::Pow2
            } else {
                BucketRule::Exact
            });
            match (rule, positive) {
                (BucketRule::Pow2, Some(v)) => {
                    let (lo, hi) = pow2_bounds(v);
                    bounds.insert(axis.clone(), json!({"min": lo, "max": hi}));
                    labels.push(format!("{axis} ∈ [{}, {})", num(lo), num(hi)));
                }
                (BucketRule::All, _) => {
                    bounds.insert(axis.clone(), json!("any"));
                    labels.push(format!("{axis}: any"));
                }
                _ => {
                    bounds.insert(axis.clone(), json!({"values": [value]}));
                    let shown = value
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| value.to_string());
                    labels.push(format!("{axis} = {shown}"));
                }
            }
        }
    }
    let bounds = J::Object(bounds);
    let key = sha256_hex(canonical_json(&bounds).as_bytes())[..16].to_string();
    let label = if labels.is_empty() {
        "(single cell)".to_string()
    } else {
        labels.join(", ")
    };
    Bucket { key, label, bounds }
}

/// `[2^k, 2^(k+1))` holding `v` (positive). `log2` rounds: just below a
/// power of two it can land on that power, whose range would not hold `v`.
fn pow2_bounds(v: f64) -> (f64, f64) {
    let mut k = v.log2().floor() as i32;
    if 2f64.powi(k) > v {
        k -= 1;
    } else if 2f64.powi(k + 1) <= v {
        k += 1;
    }
    (2f64.powi(k), 2f64.powi(k + 1))
}

/// A bound as written: `4`, `0.5`.
fn num(x: f64) -> String {
    crate::fmt::exact(x)
}

/// Whether a bucket's `bounds` contain `cell`: every axis the bounds
/// constrain admits the cell's value for it. Axes the bounds do not name
/// are not looked at (a single-cell study's bucket, `{}`, holds every
/// cell; `apply` refuses an axis no bucket has before it gets here).
pub fn contains(bounds: &J, cell: &Map<String, J>) -> bool {
    match bounds {
        J::Object(axes) => axes
            .iter()
            .all(|(axis, rule)| axis_contains(rule, cell.get(axis))),
        other => axis_contains(other, None),
    }
}

/// Whether one axis rule of a bucket's bounds admits `value`.
fn axis_contains(rule: &J, value: Option<&J>) -> bool {
    // `any` (an `all` axis) admits every value, null and a missing one
    // included: the axis does not pick the knobs, so `apply` need not be
    // told it.
    if rule.as_str() == Some("any") || rule.is_null() {
        return true;
    }
    let Some(value) = value else { return false };
    if let Some(values) = rule.get("values").and_then(J::as_array) {
        return values.iter().any(|v| loosely_equal(v, value));
    }
    // A range may be open at either end in an edited tuned file.
    if rule.get("min").is_some() || rule.get("max").is_some() {
        let Some(x) = value.as_f64() else {
            return false;
        };
        let lo = rule.get("min").and_then(J::as_f64);
        let hi = rule.get("max").and_then(J::as_f64);
        return lo.is_none_or(|lo| lo <= x) && hi.is_none_or(|hi| x < hi);
    }
    false
}

/// Equal as values: numbers by value (8 and 8.0), else by their text, as
/// `apply --cell n=8` cannot tell the number 8 from the string "8".
fn loosely_equal(a: &J, b: &J) -> bool {
    if a == b {
        return true;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => {
            let text = |v: &J| v.as_str().map(str::to_string).unwrap_or(v.to_string());
            text(a) == text(b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frozen(spec: J) -> FrozenSpec {
        FrozenSpec::from_json(spec).expect("spec")
    }

    fn cell(v: J) -> Map<String, J> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn pow2_exact_and_all() {
        let spec = frozen(json!({"buckets": {"n": "pow2", "dtype": "exact", "mode": "all"}}));
        let a = bucket_of(&spec, &json!({"n": 300000, "dtype": "bf16", "mode": "x"}));
        let b = bucket_of(&spec, &json!({"n": 500000, "dtype": "bf16", "mode": "y"}));
        let c = bucket_of(&spec, &json!({"n": 600000, "dtype": "bf16", "mode": "x"}));
        assert_eq!(a, b);
        assert_ne!(a.key, c.key);
        assert_eq!(a.label, "dtype = bf16, mode: any, n ∈ [262144, 524288)");
        assert!(contains(
            &a.bounds,
            &cell(json!({"n": 262144, "dtype": "bf16", "mode": "z"}))
        ));
        assert!(!contains(
            &a.bounds,
            &cell(json!({"n": 524288, "dtype": "bf16", "mode": "z"}))
        ));
        assert!(!contains(
            &a.bounds,
            &cell(json!({"n": 300000, "dtype": "fp16", "mode": "z"}))
        ));
    }

    #[test]
    fn defaults_and_no_axes() {
        let spec = frozen(json!({}));
        assert_eq!(bucket_of(&spec, &json!({"n": 3})).label, "n ∈ [2, 4)");
        assert_eq!(bucket_of(&spec, &json!({"d": "x"})).label, "d = x");
        let single = bucket_of(&spec, &json!({}));
        assert_eq!(single.label, "(single cell)");
        assert!(contains(&single.bounds, &Map::new()));
    }

    #[test]
    fn a_study_s_rules_give_the_bucket_of_its_frozen_spec() {
        let rules: BTreeMap<String, BucketRule> = [
            ("n".to_string(), BucketRule::Pow2),
            ("dtype".to_string(), BucketRule::Exact),
            ("mode".to_string(), BucketRule::All),
        ]
        .into();
        let spec = frozen(json!({"buckets": rules}));
        for c in [
            json!({"n": 3, "dtype": "bf16", "mode": "x"}),
            json!({"n": 1024, "dtype": 8, "mode": null}),
        ] {
            assert_eq!(bucket_under(&rules, &c), bucket_of(&spec, &c));
        }
    }

    /// Every cell lies in its own bucket, whatever its values.
    #[test]
    fn every_cell_is_in_its_own_bucket() {
        let spec = frozen(json!({"buckets": {"mode": "all", "d": "exact"}}));
        for c in [
            json!({"n": 1}),
            json!({"n": 4}),
            json!({"n": 0.75}),
            // log2 of these rounds up to the next power of two: their
            // bucket was [8, 16) and [2^53, 2^54), without them.
            json!({"n": 7.999999999999999}),
            json!({"n": 9007199254740991u64}),
            json!({"n": -3, "d": "x"}),
            json!({"n": 0, "d": null}),
            json!({"mode": null}),
            json!({"mode": "fast", "d": 8.0}),
        ] {
            let b = bucket_of(&spec, &c);
            assert!(
                contains(&b.bounds, &cell(c.clone())),
                "{c} not in {}",
                b.label
            );
        }
        assert_eq!(
            bucket_of(&spec, &json!({"n": 7.999999999999999})).label,
            "n ∈ [4, 8)"
        );
    }

    /// Where the report's matching and `apply`'s used to differ: `apply`'s
    /// rules are the ones kept.
    #[test]
    fn matching_a_cell_that_apply_is_given() {
        // An `all` axis need not be named, and admits null.
        let any = json!({"mode": "any", "n": {"min": 2, "max": 4}});
        assert!(contains(&any, &cell(json!({"n": 3}))));
        assert!(contains(&any, &cell(json!({"n": 3, "mode": null}))));
        // Axes the bounds do not name are not looked at.
        assert!(contains(&json!({}), &cell(json!({"batch": 4}))));
        assert!(contains(
            &json!({"n": {"values": [8]}}),
            &cell(json!({"n": 8, "x": 1}))
        ));
        // Values equal as numbers or as text.
        assert!(contains(
            &json!({"n": {"values": [8]}}),
            &cell(json!({"n": 8.0}))
        ));
        assert!(contains(
            &json!({"n": {"values": ["8"]}}),
            &cell(json!({"n": 8}))
        ));
        assert!(contains(
            &json!({"b": {"values": ["true"]}}),
            &cell(json!({"b": true}))
        ));
        assert!(!contains(
            &json!({"n": {"values": [8]}}),
            &cell(json!({"n": 9}))
        ));
        // A range open at one end (an edited file).
        assert!(contains(
            &json!({"n": {"min": 2}}),
            &cell(json!({"n": 1e9}))
        ));
        assert!(contains(&json!({"n": {"max": 4}}), &cell(json!({"n": -1}))));
        assert!(!contains(&json!({"n": {"max": 4}}), &cell(json!({"n": 4}))));
        assert!(!contains(
            &json!({"n": {"min": 2, "max": 4}}),
            &cell(json!({"n": "3"}))
        ));
        // A named axis the cell lacks is not matched, except `any`.
        assert!(!contains(&json!({"n": {"values": [8]}}), &Map::new()));
        assert!(!contains(&json!({"n": {"min": 2, "max": 4}}), &Map::new()));
        // Bounds that are not an object: only `any` admits.
        assert!(contains(&json!("any"), &Map::new()));
        assert!(!contains(&json!(["n"]), &Map::new()));
        // An unknown rule admits nothing.
        assert!(!contains(
            &json!({"n": {"between": [1, 2]}}),
            &cell(json!({"n": 1}))
        ));
    }
}
