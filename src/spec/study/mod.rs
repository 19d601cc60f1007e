//! The study file: what to tune, how to run a trial, how to judge it.
//!
//! [`Study::load`] reads and validates a `study.yaml`, collecting every
//! problem at once; a study that loads is internally consistent (the
//! baseline satisfies the constraints, templates only name known variables).
//!
//! Each section of the file is parsed and checked in its own submodule:
//! `knobs`, `cells` (with `buckets:`), `constraints`, `trial`, `gate`,
//! `objective` (with `metrics:`), `measurement`, `selection`, `strategy`
//! (with `budget:`), `fidelity` and `fingerprint`; `size` says how large a
//! study may be, `checks` holds the checks of the study as a whole
//! (templates, size, rendering, warnings) and `parse` the small helpers
//! the sections share. This module holds
//! [`Study`] itself, the top-level keys, and `parse_study`, which reads the
//! sections in order (and `context:`, `ledger:` and the name on the way).

mod cells;
mod checks;
mod constraints;
mod fidelity;
mod fingerprint;
mod gate;
mod knobs;
mod measurement;
mod objective;
mod parse;
mod selection;
mod size;
mod strategy;
mod trial;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use marked_yaml::Node;
use serde::Serialize;

pub use cells::{BucketRule, CellAxis, cell_label, cells};
use cells::{parse_buckets, parse_cells};
pub use checks::MAX_TEMPLATE_BYTES;
use checks::{check_rendering, check_templates, refuse_too_large, warn_about};
pub use constraints::Constraint;
use constraints::{check_baseline, parse_constraints};
use fidelity::parse_fidelity;
pub use fidelity::{DEFAULT_ETA, Fidelity, MAX_BRACKET_CONFIGS, hyperband_s_max, round_budget};
use fingerprint::parse_fingerprint;
use gate::parse_gate;
pub use gate::{Gate, PATTERN_CLASSES, Tolerance};
use knobs::parse_knobs;
pub use knobs::{Knob, KnobKind, MAX_KNOB_VALUES};
use measurement::parse_measurement;
pub use measurement::{DEFAULT_MAX_REPEATS, Measurement};
pub use objective::{Better, Metric};
use objective::{declared_metric_names, parse_metric, parse_metrics, parse_objective_command};
use parse::top_key_span;
use selection::parse_selection;
pub use selection::{Breach, DEFAULT_MIN_SAMPLES, Limit, Selection};
pub use size::{MAX_GRID_ENUMERATION, TooLarge, check_size, grid_limit};
pub use strategy::{Budget, DEFAULT_FINALISTS, MAX_STRATEGY_COUNT, Proposer, Strategy};
use strategy::{check_strategy, parse_budget, parse_strategy};
use trial::parse_trial;
pub use trial::{MAX_TRIAL_FILE_BYTES, TrialSpec};

use super::diag::Diagnostics;
use super::frozen::FrozenSpec;
use super::result::{ResultSpec, parse_result};
use super::yaml::{self, Walker, join};
use crate::fingerprint::ClassKey;

/// Template variables that tunectl provides to every trial command.
pub const RESERVED_VARIABLES: &[&str] = &[
    "study",
    "study_dir",
    "trial_id",
    "trial_dir",
    "result",
    "repeat",
    "budget",
    "host",
    "slot",
    "phase",
];

/// A validated study.
#[derive(Debug, Clone, Serialize)]
pub struct Study {
    pub name: String,
    pub description: Option<String>,
    pub context: BTreeMap<String, String>,
    pub knobs: Vec<Knob>,
    pub constraints: Vec<Constraint>,
    pub cells: Vec<CellAxis>,
    pub trial: TrialSpec,
    pub objective: Metric,
    pub metrics: Vec<Metric>,
    pub measurement: Measurement,
    pub gate: Gate,
    pub strategy: Strategy,
    /// The `fidelity:` section, when the study has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Fidelity>,
    /// `objective.command`: the command the objective stage of an adaptive
    /// search runs (finalists, their baseline, anchors and confirmation
    /// trials); rungs run `trial.command`. `None`: `trial.command` for all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objective_command: Option<String>,
    /// The `result:` section: where metrics are read when the command does
    /// not write `$TUNECTL_RESULT` itself. Left out of the frozen spec
    /// when absent, so that older studies keep their identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultSpec>,
    pub budget: Budget,
    pub selection: Selection,
    /// Bucket rule per cell axis (every axis present).
    pub buckets: BTreeMap<String, BucketRule>,
    pub tools: BTreeMap<String, String>,
    /// `fingerprint.class_key`: the facts that make a host class. Left out
    /// of the frozen spec when it is the default, so that older studies
    /// keep their identity; any other key is a new study (its classes are
    /// other classes).
    #[serde(skip_serializing_if = "ClassKey::is_default")]
    pub class_key: ClassKey,
    pub ledger: Option<String>,
    /// What is valid but likely a mistake, with where (`validate` and
    /// `plan` print them): settings under which no candidate can win, a
    /// knob the trial never sees.
    #[serde(skip)]
    pub warnings: Vec<super::Diagnostic>,
    /// The file it was loaded from.
    #[serde(skip)]
    pub source: PathBuf,
    /// The absolute directory of that file (`study_dir` in templates).
    #[serde(skip)]
    pub dir: PathBuf,
}

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "context",
    "knobs",
    "constraints",
    "cells",
    "trial",
    "objective",
    "metrics",
    "measurement",
    "gate",
    "strategy",
    "budget",
    "fingerprint",
    "ledger",
    "selection",
    "buckets",
    "fidelity",
    "result",
];

/// A study file, by its top-level keys (see [`yaml::parse_kind`]).
pub const STUDY_FILE: yaml::FileKind = yaml::FileKind {
    what: "study",
    keys: TOP_KEYS,
};

impl Study {
    /// Load and validate a study file.
    pub fn load(path: &Path) -> Result<Study, Diagnostics> {
        let text = crate::safe_read::read_text(path, crate::safe_read::MAX_STUDY_FILE_BYTES)
            .map_err(|e| Diagnostics::whole_file(path, format!("cannot read file: {e}")))?;
        let root = yaml::parse_kind(path, &text, STUDY_FILE)?;
        let dir = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."));
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let mut w = Walker::with_text(path, &text);
        let study = parse_study(&mut w, &root, path, &dir);
        match study {
            Some(s) if w.diags.is_empty() => Ok(s),
            _ => Err(w.diags),
        }
    }

    /// Load from text (tests and tools); `path` is used in messages and as
    /// the study directory's anchor.
    pub fn from_text(path: &Path, text: &str) -> Result<Study, Diagnostics> {
        let root = yaml::parse_kind(path, text, STUDY_FILE)?;
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let mut w = Walker::with_text(path, text);
        let study = parse_study(&mut w, &root, path, &dir);
        match study {
            Some(s) if w.diags.is_empty() => Ok(s),
            _ => Err(w.diags),
        }
    }

    /// The study's identity in the ledger.
    pub fn id(&self) -> &str {
        &self.name
    }

    /// The frozen specification: everything that decides what a trial means.
    /// `description` (the study's and the knobs'), `budget` and `ledger` are
    /// left out so that they can change between launches of one study.
    pub fn frozen(&self) -> FrozenSpec {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(obj) = v.as_object_mut() {
            obj.remove("description");
            obj.remove("budget");
            obj.remove("ledger");
            // Knob descriptions are documentation, not meaning.
            if let Some(knobs) = obj.get_mut("knobs").and_then(|k| k.as_array_mut()) {
                for k in knobs {
                    if let Some(k) = k.as_object_mut() {
                        k.remove("description");
                    }
                }
            }
        }
        FrozenSpec::of(self, v)
    }

    /// sha256 of the canonical frozen spec, hex.
    pub fn spec_hash(&self) -> String {
        crate::canon::sha256_hex(crate::canon::canonical_json(self.frozen().json()).as_bytes())
    }

    /// Names usable in trial templates.
    pub fn template_variables(&self) -> Vec<String> {
        let mut names: Vec<String> = RESERVED_VARIABLES.iter().map(|s| s.to_string()).collect();
        names.extend(self.knobs.iter().map(|k| k.name.clone()));
        names.extend(self.cells.iter().map(|c| c.name.clone()));
        names
    }

    /// Number of configs in the full grid (before constraints), at most
    /// `u128::MAX` (many knobs of many values would overflow it).
    pub fn grid_size(&self) -> u128 {
        self.knobs
            .iter()
            .fold(1u128, |n, k| n.saturating_mul(k.values.len() as u128))
    }

    /// Number of cells (1 when the study has no cell axes), at most
    /// `u128::MAX`; counted, never listed (see [`check_size`]).
    pub fn cell_count(&self) -> u128 {
        self.cells
            .iter()
            .fold(1u128, |n, c| n.saturating_mul(c.values.len() as u128))
    }
}

fn parse_study(w: &mut Walker, root: &Node, path: &Path, dir: &Path) -> Option<Study> {
    let map = w.mapping(root, "")?;
    w.check_keys(map, "", TOP_KEYS);

    let name = yaml::required_name(w, map, "", "study");
    let description = map
        .get_node("description")
        .and_then(|n| w.string(n, "description"));
    let context = match map.get_node("context") {
        Some(n) => parse_context(w, n),
        None => BTreeMap::new(),
    };
    let knobs = match w.required(map, "", "knobs") {
        Some(n) => parse_knobs(w, n),
        None => Vec::new(),
    };
    let cells = match map.get_node("cells") {
        Some(n) => parse_cells(w, n, &knobs),
        None => Vec::new(),
    };
    let trial = w
        .required(map, "", "trial")
        .and_then(|n| parse_trial(w, n, dir));
    let objective = w
        .required(map, "", "objective")
        .and_then(|n| parse_metric(w, n, "objective", true));
    let metrics = match map.get_node("metrics") {
        Some(n) => parse_metrics(w, n, objective.as_ref()),
        None => Vec::new(),
    };
    let result = match (map.get_node("result"), &objective) {
        (Some(n), Some(o)) => {
            let all: Vec<&Metric> = std::iter::once(o).chain(metrics.iter()).collect();
            parse_result(w, n, &all).map(Some)
        }
        (Some(_), None) => None,
        (None, _) => Some(None),
    };
    let measurement = match map.get_node("measurement") {
        Some(n) => parse_measurement(w, n),
        None => Some(Measurement::default()),
    };
    let gate = match map.get_node("gate") {
        Some(n) => parse_gate(w, n),
        None => Some(Gate {
            outputs: vec![],
            patterns: BTreeMap::new(),
            tolerance: None,
        }),
    };
    let selection = match map.get_node("selection") {
        Some(n) => parse_selection(w, n, &metrics),
        None => Some(Selection::default()),
    };
    let buckets = parse_buckets(w, map.get_node("buckets"), &cells);
    let fidelity_node = map.get_node("fidelity");
    let fidelity = fidelity_node.map(|n| {
        let declared_metrics = declared_metric_names(map);
        parse_fidelity(
            w,
            n,
            top_key_span(map, "fidelity"),
            objective.as_ref(),
            &metrics,
            &declared_metrics,
        )
    });
    let strategy = match map.get_node("strategy") {
        Some(n) => parse_strategy(w, n, fidelity_node.is_some()),
        // A budget to give trials asks for a search that uses it.
        None if fidelity_node.is_some() => Some(Strategy::Hyperband {
            seed: 0,
            finalists: DEFAULT_FINALISTS,
            parallel: None,
            iterations: 1,
            proposer: Proposer::Random,
        }),
        None => Some(Strategy::Grid),
    };
    // Continuation acts between the rungs of a hyperband search; pruning
    // stops a rung trial of hyperband or tpe on its way. Grid and random
    // run each config once, at one budget, and read nothing on the way.
    if let (Some(Some(f)), Some(s), Some(node)) = (&fidelity, &strategy, fidelity_node)
        && let Some(fidelity_map) = node.as_mapping()
    {
        let hyperband = matches!(s, Strategy::Hyperband { .. });
        let tpe = matches!(s, Strategy::Tpe { .. });
        let checks = [
            (
                "continuation",
                f.continuation && !hyperband,
                "acts between the rungs of a hyperband search",
            ),
            (
                "prune",
                f.prune && !hyperband && !tpe,
                "stops the rung trials of a hyperband or tpe search on their way",
            ),
        ];
        for (key, wrong, what) in checks {
            if wrong && let Some(n) = fidelity_map.get_node(key) {
                w.error_at(
                    n,
                    &join("fidelity", key),
                    format!(
                        "`{key}: true` {what}; `strategy.kind: {}` runs each config once, at one budget",
                        s.name()
                    ),
                );
            }
        }
    }
    let objective_command = parse_objective_command(w, map, strategy.as_ref());
    let budget = match map.get_node("budget") {
        Some(n) => parse_budget(w, n, strategy.as_ref()),
        None => Some(Budget::default()),
    };
    let (tools, class_key) = match map.get_node("fingerprint") {
        Some(n) => parse_fingerprint(w, n),
        None => (BTreeMap::new(), ClassKey::default()),
    };
    let ledger = map.get_node("ledger").and_then(|n| w.string(n, "ledger"));

    // Names as declared, valid or not: a knob with a bad default is still a
    // knob, and must not also be reported as unknown wherever it is used.
    let declared = |key: &str| -> Vec<String> {
        map.get_mapping(key)
            .map(|m| m.keys().map(|k| k.as_str().to_string()).collect())
            .unwrap_or_default()
    };
    let (declared_knobs, declared_cells) = (declared("knobs"), declared("cells"));
    let constraints = match map.get_node("constraints") {
        Some(n) => parse_constraints(w, n, &declared_knobs, &declared_cells),
        None => Vec::new(),
    };
    check_templates(w, map, &declared_knobs, &declared_cells);

    let study = Study {
        name: name?,
        description,
        context,
        knobs,
        constraints,
        cells,
        trial: trial?,
        objective: objective?,
        metrics,
        measurement: measurement?,
        gate: gate?,
        strategy: strategy?,
        fidelity: match fidelity {
            Some(f) => Some(f?),
            None => None,
        },
        objective_command: objective_command?,
        result: result?,
        budget: budget?,
        selection: selection?,
        buckets,
        tools,
        class_key,
        ledger,
        warnings: Vec::new(),
        source: path.to_path_buf(),
        dir: dir.to_path_buf(),
    };
    if study.knobs.is_empty() {
        return None;
    }
    let mut study = study;
    warn_about(w, map, &study);
    study.warnings = std::mem::take(&mut w.warnings);
    // These evaluate the study as a whole: only meaningful when every part
    // of it is valid. The size first: the others list its cells.
    if w.diags.is_empty() {
        refuse_too_large(w, map, &study);
    }
    if w.diags.is_empty() {
        check_baseline(w, map, &study);
        check_strategy(w, map, &study);
    }
    if w.diags.is_empty() {
        check_rendering(w, map, &study);
    }
    Some(study)
}

fn parse_context(w: &mut Walker, node: &Node) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(map) = w.mapping(node, "context") else {
        return out;
    };
    for (k, v) in map.iter() {
        let field = join("context", k.as_str());
        match v {
            Node::Scalar(_) => {
                if let Some(value) = w.scalar(v, &field) {
                    out.insert(k.as_str().to_string(), value.to_string());
                }
            }
            other => {
                let found = yaml::describe(other);
                w.error_at(
                    other,
                    &field,
                    format!("expected a single value, found {found}"),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 7 lines; a test's own lines start at line 8.
    pub(super) const BASE: &str = r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4, 8], default: 1}
  y: {kind: bool, default: false}
trial: {command: "run {{ x }} {{ y }} --n {{ budget }}"}
objective: {metric: t, unit: s, better: lower}
metrics: [{name: loss, better: lower}]
"#;

    pub(super) fn load(extra: &str) -> Result<Study, Diagnostics> {
        Study::from_text(Path::new("s.yaml"), &format!("{BASE}{extra}"))
    }

    /// The one problem `extra` causes, as printed.
    pub(super) fn problem(extra: &str) -> String {
        let diags = load(extra).expect_err("a problem");
        let lines: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
        assert_eq!(lines.len(), 1, "expected one problem, got {lines:#?}");
        lines.into_iter().next().unwrap_or_default()
    }

    #[test]
    fn a_study_without_the_new_sections_keeps_its_frozen_spec() {
        let s = load("strategy: {kind: random, seed: 3, count: 4}\n").expect("valid");
        let frozen = s.frozen();
        let obj = frozen.json().as_object().expect("an object");
        assert!(!obj.contains_key("fidelity"));
        assert!(!obj.contains_key("objective_command"));
        assert_eq!(
            obj["strategy"],
            serde_json::json!({"kind": "random", "seed": 3, "count": 4})
        );
        assert_eq!(
            obj["objective"],
            serde_json::json!({"name": "t", "unit": "s", "better": "lower"})
        );
        let s = load("").expect("valid");
        assert_eq!(s.strategy, Strategy::Grid);
        assert_eq!(
            s.frozen().json()["strategy"],
            serde_json::json!({"kind": "grid"})
        );
    }

    #[test]
    fn result_sources_are_parsed() {
        let s = load(
            "result:\n  t: {stdout: 'took ([0-9.]+) s', scale: 1000}\n  loss: {file: out/l.csv, column: loss}\n",
        )
        .expect("valid");
        let r = s.result.clone().expect("result");
        assert_eq!(r.metrics.len(), 2);
        assert_eq!(r.metrics["t"].scale, Some(1000.0));
        assert_eq!(r.files(), vec!["out/l.csv".to_string()]);
        assert_eq!(r.streams(), vec!["stdout".to_string()]);
        // Part of the frozen spec; a study without one keeps its identity.
        let frozen = s.frozen();
        assert_eq!(
            frozen.json()["result"]["metrics"]["t"],
            serde_json::json!({"source": "stdout", "regex": "took ([0-9.]+) s", "scale": 1000.0})
        );
        assert!(
            load("")
                .expect("valid")
                .frozen()
                .json()
                .get("result")
                .is_none()
        );
    }

    #[test]
    fn result_presets() {
        let with = |objective: &str, extra: &str| {
            Study::from_text(
                Path::new("s.yaml"),
                &format!(
                    "{}{extra}",
                    BASE.replace("metric: t,", &format!("metric: {objective},"))
                ),
            )
        };
        let s = with("time", "result: {preset: hyperfine}\n").expect("valid");
        let r = s.result.expect("result");
        assert_eq!(r.preset.as_deref(), Some("hyperfine"));
        assert_eq!(r.files(), vec!["hyperfine.json".to_string()]);
        assert_eq!(
            r.metrics["time"].from.describe(),
            "hyperfine.json: results[0].times"
        );
        // The file can be renamed, and a declared metric given its own source.
        let s = with(
            "output_throughput",
            "result: {preset: vllm-bench, file: bench/serve.json, loss: {stderr: 'loss=(\\S+)'}}\n",
        )
        .expect("valid");
        let r = s.result.expect("result");
        assert_eq!(r.files(), vec!["bench/serve.json".to_string()]);
        assert_eq!(r.streams(), vec!["stderr".to_string()]);
        let diags = with("tokens", "result: {preset: llama-bench}\n").expect_err("not provided");
        assert_eq!(
            diags.to_string().trim(),
            "s.yaml:8:18: result.preset: the objective's metric `tokens` is not one the preset `llama-bench` provides (pp_ts, tg_ts, samples_ts, avg_ts, samples_ns, avg_ns); name the objective after one of them, or give `tokens` its own source"
        );
    }

    #[test]
    fn result_problems_name_file_line_and_field() {
        assert_eq!(
            problem("result: {t: {stdout: 'tok/s: ([0-9.]+'}}\n"),
            "s.yaml:8:22: result.t.stdout: invalid regular expression: regex parse error:\n    tok/s: ([0-9.]+\n           ^\nerror: unclosed group"
        );
        assert_eq!(
            problem("result: {t: {stderr: 'tok/s: [0-9.]+'}}\n"),
            "s.yaml:8:22: result.t.stderr: the regular expression must have exactly one capture group (the number), found 0"
        );
        assert_eq!(
            problem("result: {preset: hyperfin}\n"),
            "s.yaml:8:18: result.preset: unknown preset `hyperfin` (known: hyperfine, vllm-bench, llama-bench, pytest-benchmark)"
        );
        assert_eq!(
            problem("result: {t: {file: o.json, path: a.b, scal: 2}}\n"),
            "s.yaml:8:39: result.t.scal: unknown key `scal` (did you mean `scale`?)"
        );
        assert_eq!(
            problem("result: {t: {stdout: 't=(\\d+)'}, acc: {stdout: 'a=(\\d+)'}}\n"),
            "s.yaml:8:34: result.acc: `acc` is neither the objective's metric nor declared under `metrics:` (declared: t, loss); `result:` gives sources to those, or `preset`/`file`"
        );
        assert_eq!(
            problem("result: {t: {file: o.json, path: 'a[x]'}}\n"),
            "s.yaml:8:34: result.t.path: `[x]` in `a[x]` is not `[i]`, `[*]` or `[?key==value]`"
        );
        assert_eq!(
            problem("result: {t: {file: ../o.json, path: a}}\n"),
            "s.yaml:8:20: result.t.file: `../o.json` must be a relative path inside the trial directory"
        );
        assert_eq!(
            problem("result: {t: {column: ms}}\n"),
            "s.yaml:8:14: result.t.file: `column` reads a file: name it with `file`"
        );
        assert_eq!(
            problem("result: {t: {stdout: 't=(\\d+)', path: a}}\n"),
            "s.yaml:8:14: result.t: give exactly one of `path` (with `file`, a JSON file), `column` (with `file`, a CSV file), `stdout` or `stderr` (found: path, stdout)"
        );
        assert_eq!(
            problem("result: {t: {stdout: 't=(\\d+)', scale: 0}}\n"),
            "s.yaml:8:40: result.t.scale: must be a positive number, found 0"
        );
        assert_eq!(
            problem("result: {loss: {stdout: 'l=(\\d+)'}}\n"),
            "s.yaml:8:10: result: no source for the objective's metric `t`: with a `result:` section, the objective is read from it"
        );
        assert_eq!(
            problem("result: {file: x.json, t: {stdout: 't=(\\d+)'}}\n"),
            "s.yaml:8:16: result.file: `file` names a preset's file; without `preset`, give each metric its own `file`"
        );
    }
}
