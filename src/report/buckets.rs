//! Buckets: cells that share one winner. Per cell axis, a rule from the
//! study (`pow2`: numbers in [2^k, 2^(k+1)); `exact`: each value; `all`:
//! the whole axis) maps a cell value to bounds; a bucket is the product.

use serde_json::{Value as J, json};

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
    let mut bounds = serde_json::Map::new();
    let mut labels = Vec::new();
    if let Some(obj) = cell.as_object() {
        let mut axes: Vec<&String> = obj.keys().collect();
        axes.sort();
        for axis in axes {
            let value = &obj[axis];
            let positive = value.as_f64().filter(|v| *v > 0.0);
            let rule = spec
                .buckets
                .get(axis)
                .copied()
                .unwrap_or(if positive.is_some() {
                    BucketRule::Pow2
                } else {
                    BucketRule::Exact
                });
            match (rule, positive) {
                (BucketRule::Pow2, Some(v)) => {
                    let k = v.log2().floor() as i32;
                    let (lo, hi) = (2f64.powi(k), 2f64.powi(k + 1));
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

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Does `cell` fall inside `bounds`?
pub fn contains(bounds: &J, cell: &J) -> bool {
    let Some(b) = bounds.as_object() else {
        return false;
    };
    b.iter().all(|(axis, rule)| {
        let v = &cell[axis.as_str()];
        if rule.as_str() == Some("any") {
            return !v.is_null();
        }
        if let Some(values) = rule["values"].as_array() {
            return values
                .iter()
                .any(|x| x == v || (x.as_f64().is_some() && x.as_f64() == v.as_f64()));
        }
        match (rule["min"].as_f64(), rule["max"].as_f64(), v.as_f64()) {
            (Some(lo), Some(hi), Some(x)) => lo <= x && x < hi,
            _ => false,
        }
    }) && cell.as_object().is_some_and(|c| c.len() == b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_exact_and_all() {
        let spec = FrozenSpec::from_json(
            json!({"buckets": {"n": "pow2", "dtype": "exact", "mode": "all"}}),
        )
        .expect("spec");
        let a = bucket_of(&spec, &json!({"n": 300000, "dtype": "bf16", "mode": "x"}));
        let b = bucket_of(&spec, &json!({"n": 500000, "dtype": "bf16", "mode": "y"}));
        let c = bucket_of(&spec, &json!({"n": 600000, "dtype": "bf16", "mode": "x"}));
        assert_eq!(a, b);
        assert_ne!(a.key, c.key);
        assert_eq!(a.label, "dtype = bf16, mode: any, n ∈ [262144, 524288)");
        assert!(contains(
            &a.bounds,
            &json!({"n": 262144, "dtype": "bf16", "mode": "z"})
        ));
        assert!(!contains(
            &a.bounds,
            &json!({"n": 524288, "dtype": "bf16", "mode": "z"})
        ));
        assert!(!contains(
            &a.bounds,
            &json!({"n": 300000, "dtype": "fp16", "mode": "z"})
        ));
    }

    #[test]
    fn defaults_and_no_axes() {
        let spec = FrozenSpec::from_json(json!({})).expect("spec");
        assert_eq!(bucket_of(&spec, &json!({"n": 3})).label, "n ∈ [2, 4)");
        assert_eq!(bucket_of(&spec, &json!({"d": "x"})).label, "d = x");
        let single = bucket_of(&spec, &json!({}));
        assert_eq!(single.label, "(single cell)");
        assert!(contains(&single.bounds, &json!({})));
    }
}
