//! `knobs:`: the tunable parameters, each expanded to its domain (explicit
//! values, an int range linear or in powers of two, a float range linear or
//! logarithmic), with its default (the baseline).

use marked_yaml::Node;
use serde::{Deserialize, Serialize};

use super::RESERVED_VARIABLES;
use crate::spec::value::Value;
use crate::spec::yaml::{self, Walker, index, is_identifier, join};

/// Largest domain a single knob may expand to.
pub const MAX_KNOB_VALUES: usize = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KnobKind {
    Categorical,
    Int,
    Float,
    Bool,
}

/// A tunable parameter with its expanded domain; `default` is the baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Knob {
    pub name: String,
    pub kind: KnobKind,
    pub values: Vec<Value>,
    pub default: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Knob {
    /// Index of the default within `values`.
    pub fn default_index(&self) -> usize {
        self.values
            .iter()
            .position(|v| v == &self.default)
            .unwrap_or(0)
    }
}

const KNOB_KEYS: &[&str] = &[
    "kind",
    "values",
    "min",
    "max",
    "step",
    "scale",
    "count",
    "default",
    "description",
];

pub(super) fn parse_knobs(w: &mut Walker, node: &Node) -> Vec<Knob> {
    let Some(map) = w.mapping(node, "knobs") else {
        return Vec::new();
    };
    if map.is_empty() {
        w.error_at(node, "knobs", "a study needs at least one knob");
        return Vec::new();
    }
    let mut knobs = Vec::new();
    for (key, value) in map.iter() {
        let name = key.as_str();
        let field = join("knobs", name);
        if !is_identifier(name) {
            w.error(
                key.span(),
                &field,
                format!("`{name}` is not a valid knob name: use letters, digits and `_`, not starting with a digit"),
            );
            continue;
        }
        if RESERVED_VARIABLES.contains(&name) {
            w.error(
                key.span(),
                &field,
                format!("`{name}` is reserved for a trial variable; rename the knob"),
            );
            continue;
        }
        if let Some(problem) = super::parse::own_prefix_problem(name) {
            w.error(key.span(), &field, format!("{problem}; rename the knob"));
            continue;
        }
        if let Some(other) = knobs
            .iter()
            .find(|k: &&Knob| k.name.to_uppercase() == name.to_uppercase())
        {
            w.error(
                key.span(),
                &field,
                format!(
                    "`{name}` and `{}` would share the variable TUNECTL_KNOB_{}; knob names must differ in more than case",
                    other.name,
                    name.to_uppercase()
                ),
            );
            continue;
        }
        if let Some(knob) = parse_knob(w, value, name, &field) {
            knobs.push(knob);
        }
    }
    knobs
}

fn parse_knob(w: &mut Walker, node: &Node, name: &str, field: &str) -> Option<Knob> {
    let map = w.mapping(node, field)?;
    w.check_keys(map, field, KNOB_KEYS);
    let kind_node = w.required(map, field, "kind")?;
    let kind_field = join(field, "kind");
    let kind = match w.string(kind_node, &kind_field)?.as_str() {
        "categorical" => KnobKind::Categorical,
        "int" => KnobKind::Int,
        "float" => KnobKind::Float,
        "bool" => KnobKind::Bool,
        other => {
            w.error_at(
                kind_node,
                &kind_field,
                format!("unknown knob kind `{other}` (expected categorical, int, float or bool)"),
            );
            return None;
        }
    };
    let description = map
        .get_node("description")
        .and_then(|n| w.string(n, &join(field, "description")));
    let not_for = |w: &mut Walker, keys: &[&str], why: &str| {
        for k in keys {
            if let Some(n) = map.get_node(k) {
                w.error_at(n, &join(field, k), format!("`{k}` does not apply to {why}"));
            }
        }
    };
    let values: Vec<Value> = match kind {
        KnobKind::Bool => {
            not_for(
                w,
                &["values", "min", "max", "step", "scale", "count"],
                "a bool knob",
            );
            vec![Value::Bool(false), Value::Bool(true)]
        }
        KnobKind::Categorical => {
            not_for(
                w,
                &["min", "max", "step", "scale", "count"],
                "a categorical knob (list its `values`)",
            );
            let n = w.required(map, field, "values")?;
            explicit_values(w, n, &join(field, "values"), None)?
        }
        KnobKind::Int => {
            not_for(w, &["count"], "an int knob");
            if let Some(n) = map.get_node("values") {
                not_for(
                    w,
                    &["min", "max", "step", "scale"],
                    "an int knob with explicit `values`",
                );
                explicit_values(w, n, &join(field, "values"), Some(KnobKind::Int))?
            } else {
                int_range(w, map, field)?
            }
        }
        KnobKind::Float => {
            not_for(w, &["step"], "a float knob (use `count`)");
            if let Some(n) = map.get_node("values") {
                not_for(
                    w,
                    &["min", "max", "scale", "count"],
                    "a float knob with explicit `values`",
                );
                explicit_values(w, n, &join(field, "values"), Some(KnobKind::Float))?
            } else {
                float_range(w, map, field)?
            }
        }
    };
    let default_node = w.required(map, field, "default")?;
    let default_field = join(field, "default");
    let raw_default = w.scalar(default_node, &default_field)?;
    let default = match (kind, &raw_default) {
        (KnobKind::Float, Value::Int(i)) => Value::Float(*i as f64),
        _ => raw_default.clone(),
    };
    if !values.contains(&default) {
        let shown: Vec<String> = values.iter().take(8).map(|v| v.to_string()).collect();
        let more = if values.len() > 8 { ", ..." } else { "" };
        w.error_at(
            default_node,
            &default_field,
            format!(
                "the default {} `{raw_default}` is not one of the knob's values [{}{more}]",
                raw_default.kind(),
                shown.join(", ")
            ),
        );
        return None;
    }
    Some(Knob {
        name: name.to_string(),
        kind,
        values,
        default,
        description,
    })
}

pub(super) fn explicit_values(
    w: &mut Walker,
    node: &Node,
    field: &str,
    want: Option<KnobKind>,
) -> Option<Vec<Value>> {
    let seq = w.sequence(node, field)?;
    if seq.is_empty() {
        w.error_at(node, field, "the list of values is empty");
        return None;
    }
    let mut out: Vec<Value> = Vec::new();
    let mut ok = true;
    for (i, item) in seq.iter().enumerate() {
        let item_field = index(field, i);
        let Some(v) = w.scalar(item, &item_field) else {
            ok = false;
            continue;
        };
        let v = match (want, v) {
            (Some(KnobKind::Int), Value::Int(x)) => Value::Int(x),
            (Some(KnobKind::Float), Value::Int(x)) => Value::Float(x as f64),
            (Some(KnobKind::Float), Value::Float(x)) => Value::Float(x),
            (Some(k), other) => {
                let expected = if k == KnobKind::Int {
                    "an integer"
                } else {
                    "a number"
                };
                w.error_at(
                    item,
                    &item_field,
                    format!("expected {expected}, found {}", yaml::describe(item)),
                );
                let _ = other;
                ok = false;
                continue;
            }
            (None, v) => v,
        };
        if out.contains(&v) {
            w.error_at(item, &item_field, format!("duplicate value `{v}`"));
            ok = false;
            continue;
        }
        out.push(v);
    }
    ok.then_some(out)
}

fn int_range(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    field: &str,
) -> Option<Vec<Value>> {
    let min_node = w.required(map, field, "min");
    let max_node = w.required(map, field, "max");
    let min = min_node.and_then(|n| w.int(n, &join(field, "min")));
    let max = max_node.and_then(|n| w.int(n, &join(field, "max")));
    let scale = match map.get_node("scale") {
        Some(n) => {
            let s = w.string(n, &join(field, "scale"))?;
            match s.as_str() {
                "linear" | "pow2" => Some(s),
                other => {
                    w.error_at(
                        n,
                        &join(field, "scale"),
                        format!(
                            "unknown scale `{other}` for an int knob (expected linear or pow2)"
                        ),
                    );
                    return None;
                }
            }
        }
        None => None,
    };
    let (min, max) = (min?, max?);
    let max_node = max_node?;
    if min > max {
        w.error_at(
            max_node,
            &join(field, "max"),
            format!("max {max} is smaller than min {min}"),
        );
        return None;
    }
    if scale.as_deref() == Some("pow2") {
        if let Some(n) = map.get_node("step") {
            w.error_at(
                n,
                &join(field, "step"),
                "`step` does not apply with `scale: pow2`",
            );
            return None;
        }
        for (v, k) in [(min, "min"), (max, "max")] {
            if v <= 0 || (v & (v - 1)) != 0 {
                if let Some(n) = map.get_node(k) {
                    w.error_at(
                        n,
                        &join(field, k),
                        format!("{v} is not a power of two (scale: pow2)"),
                    );
                }
                return None;
            }
        }
        let mut out = Vec::new();
        let mut v = min;
        while v <= max {
            out.push(Value::Int(v));
            match v.checked_mul(2) {
                Some(next) => v = next,
                None => break,
            }
        }
        return Some(out);
    }
    let step = match map.get_node("step") {
        Some(n) => w.int_at_least(n, &join(field, "step"), 1)?,
        None => 1,
    };
    let count = ((max as i128 - min as i128) / step as i128 + 1) as usize;
    if count > MAX_KNOB_VALUES {
        w.error_at(
            max_node,
            field,
            format!("the range has {count} values, more than the limit of {MAX_KNOB_VALUES}; use a larger step or pow2"),
        );
        return None;
    }
    Some(
        (0..count)
            .map(|i| Value::Int(min + i as i64 * step))
            .collect(),
    )
}

fn float_range(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    field: &str,
) -> Option<Vec<Value>> {
    let min = w
        .required(map, field, "min")
        .and_then(|n| w.float(n, &join(field, "min")));
    let max = w
        .required(map, field, "max")
        .and_then(|n| w.float(n, &join(field, "max")));
    let count_node = w.required(map, field, "count");
    let count = count_node.and_then(|n| w.int_at_least(n, &join(field, "count"), 2));
    let log = match map.get_node("scale") {
        Some(n) => match w.string(n, &join(field, "scale"))?.as_str() {
            "linear" => false,
            "log" => true,
            other => {
                w.error_at(
                    n,
                    &join(field, "scale"),
                    format!("unknown scale `{other}` for a float knob (expected linear or log)"),
                );
                return None;
            }
        },
        None => false,
    };
    let (min, max, count) = (min?, max?, count? as usize);
    if min >= max {
        if let Some(n) = map.get_node("max") {
            w.error_at(
                n,
                &join(field, "max"),
                format!("max {max} must be larger than min {min}"),
            );
        }
        return None;
    }
    if log && min <= 0.0 {
        if let Some(n) = map.get_node("min") {
            w.error_at(n, &join(field, "min"), "a log scale needs min > 0");
        }
        return None;
    }
    if count > MAX_KNOB_VALUES {
        if let Some(n) = count_node {
            w.error_at(
                n,
                &join(field, "count"),
                format!("at most {MAX_KNOB_VALUES} values"),
            );
        }
        return None;
    }
    // Numbers too close to zero for full precision, or ranges too wide to
    // compute, would put NaN, infinities or duplicates in the domain.
    let mut subnormal = false;
    for (key, v) in [("min", min), ("max", max)] {
        if v != 0.0 && !v.is_normal() {
            if let Some(n) = map.get_node(key) {
                w.error_at(
                    n,
                    &join(field, key),
                    format!(
                        "{} is too close to zero to compute with (below {:e}); use 0 or a larger number",
                        short_number(v),
                        f64::MIN_POSITIVE
                    ),
                );
            }
            subnormal = true;
        }
    }
    if subnormal {
        return None;
    }
    let points: Vec<f64> = (0..count)
        .map(|i| {
            let t = i as f64 / (count - 1) as f64;
            let x = if log {
                (min.ln() + t * (max.ln() - min.ln())).exp()
            } else {
                min + t * (max - min)
            };
            // Round to 12 significant digits so grid points print cleanly and
            // a default written as `0.001` matches the generated point.
            round_sig(x, 12)
        })
        .collect();
    let bad = points
        .iter()
        .find(|x| !x.is_finite() || (**x != 0.0 && !x.is_normal()));
    let distinct = points.windows(2).all(|p| p[0] < p[1]);
    if bad.is_some() || !distinct {
        let why = match bad {
            Some(x) => format!("gives the point {}", short_number(*x)),
            None => {
                "gives points that are equal after rounding to 12 significant digits".to_string()
            }
        };
        if let Some(n) = map.get_node("max") {
            w.error_at(
                n,
                &join(field, "max"),
                format!(
                    "the {} range from {} to {} in {count} points {why}; narrow the range or lower count",
                    if log { "log" } else { "linear" },
                    short_number(min),
                    short_number(max),
                ),
            );
        }
        return None;
    }
    Some(points.into_iter().map(Value::Float).collect())
}

/// A number for a message: in exponent form when very large or small.
fn short_number(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-6..1e16).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        x.to_string()
    }
}

/// `x` rounded to `digits` significant digits.
fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let magnitude = x.abs().log10().floor() as i32;
    let factor = 10f64.powi(digits - 1 - magnitude);
    let scaled = x * factor;
    if factor.is_normal() && scaled.is_finite() {
        return scaled.round() / factor;
    }
    // Near the ends of the f64 range the power of ten overflows: go through
    // the decimal text instead.
    format!("{:.*e}", (digits - 1).max(0) as usize, x)
        .parse()
        .unwrap_or(f64::NAN)
}
