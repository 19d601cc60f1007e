//! `gate:`: the correctness gate of a trial's outputs: the files it must
//! write, extra stderr patterns per failure class, and a numeric tolerance
//! for outputs compared with the baseline's.

use std::collections::BTreeMap;

use marked_yaml::Node;
use serde::Serialize;

use super::parse::stays_inside;
use crate::spec::yaml::{Walker, index, join};

/// Numeric comparison of declared outputs that hold JSON arrays of numbers.
#[derive(Debug, Clone, Serialize)]
pub struct Tolerance {
    pub files: Vec<String>,
    pub rtol: f64,
    pub atol: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Gate {
    pub outputs: Vec<String>,
    /// Extra stderr patterns (regular expressions) per failure class
    /// (`compile_failure`, `oom`), checked before the defaults.
    pub patterns: BTreeMap<String, Vec<String>>,
    pub tolerance: Option<Tolerance>,
}

pub(super) fn parse_gate(w: &mut Walker, node: &Node) -> Option<Gate> {
    let map = w.mapping(node, "gate")?;
    w.check_keys(map, "gate", &["outputs", "patterns", "tolerance"]);
    let outputs = match map.get_node("outputs") {
        Some(n) => w.string_list(n, "gate.outputs")?,
        None => Vec::new(),
    };
    if let Some(Node::Sequence(seq)) = map.get_node("outputs") {
        for (i, (path, item)) in outputs.iter().zip(seq.iter()).enumerate() {
            if !stays_inside(path) {
                w.error_at(
                    item,
                    &index("gate.outputs", i),
                    format!("`{path}` must be a relative path inside the trial directory"),
                );
            }
        }
    }
    let patterns = match map.get_node("patterns") {
        Some(n) => parse_patterns(w, n)?,
        None => BTreeMap::new(),
    };
    let tolerance = match map.get_node("tolerance") {
        Some(n) => Some(parse_tolerance(w, n, &outputs)?),
        None => None,
    };
    Some(Gate {
        outputs,
        patterns,
        tolerance,
    })
}

/// Failure classes a study can add stderr patterns for.
pub const PATTERN_CLASSES: &[&str] = &["compile_failure", "oom"];

fn parse_patterns(w: &mut Walker, node: &Node) -> Option<BTreeMap<String, Vec<String>>> {
    let map = w.mapping(node, "gate.patterns")?;
    w.check_keys(map, "gate.patterns", PATTERN_CLASSES);
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (k, v) in map.iter() {
        if !PATTERN_CLASSES.contains(&k.as_str()) {
            continue;
        }
        let field = join("gate.patterns", k.as_str());
        let Some(list) = w.string_list(v, &field) else {
            ok = false;
            continue;
        };
        if let Some(seq) = v.as_sequence() {
            for (i, (pattern, item)) in list.iter().zip(seq.iter()).enumerate() {
                if let Err(e) = regex::Regex::new(pattern) {
                    w.error_at(
                        item,
                        &index(&field, i),
                        format!("invalid regular expression: {e}"),
                    );
                    ok = false;
                }
            }
        }
        out.insert(k.as_str().to_string(), list);
    }
    ok.then_some(out)
}

fn parse_tolerance(w: &mut Walker, node: &Node, outputs: &[String]) -> Option<Tolerance> {
    let map = w.mapping(node, "gate.tolerance")?;
    w.check_keys(map, "gate.tolerance", &["files", "rtol", "atol"]);
    let files_node = w.required(map, "gate.tolerance", "files")?;
    let files = w.string_list(files_node, "gate.tolerance.files")?;
    if let Some(seq) = files_node.as_sequence() {
        for (i, (f, item)) in files.iter().zip(seq.iter()).enumerate() {
            if !outputs.contains(f) {
                w.error_at(
                    item,
                    &index("gate.tolerance.files", i),
                    format!("`{f}` is not one of gate.outputs"),
                );
                return None;
            }
        }
    }
    let bound = |w: &mut Walker, key: &str| -> Option<f64> {
        match map.get_node(key) {
            Some(n) => {
                let f = join("gate.tolerance", key);
                let v = w.float(n, &f)?;
                if v < 0.0 {
                    w.error_at(n, &f, format!("must not be negative, found {v}"));
                    return None;
                }
                Some(v)
            }
            None => Some(0.0),
        }
    };
    let rtol = bound(w, "rtol");
    let atol = bound(w, "atol");
    Some(Tolerance {
        files,
        rtol: rtol?,
        atol: atol?,
    })
}
