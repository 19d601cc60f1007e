//! The study file: what to tune, how to run a trial, how to judge it.
//!
//! [`Study::load`] reads and validates a `study.yaml`, collecting every
//! problem at once; a study that loads is internally consistent (the
//! baseline satisfies the constraints, templates only name known variables).

mod cells;
mod constraints;
mod fidelity;
mod fingerprint;
mod gate;
mod knobs;
mod measurement;
mod objective;
mod parse;
mod selection;
mod strategy;
mod trial;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use marked_yaml::Node;
use serde::Serialize;

pub use cells::{BucketRule, CellAxis};
use cells::{parse_buckets, parse_cells};
pub use constraints::Constraint;
use constraints::{check_baseline, parse_constraints};
use fidelity::parse_fidelity;
pub use fidelity::{DEFAULT_ETA, Fidelity};
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
pub use selection::{DEFAULT_MIN_SAMPLES, Limit, Selection};
pub use strategy::{Budget, DEFAULT_FINALISTS, MAX_STRATEGY_COUNT, Proposer, Strategy};
use strategy::{check_strategy, parse_budget, parse_strategy};
use trial::parse_trial;
pub use trial::{MAX_TRIAL_FILE_BYTES, TrialSpec};

use super::diag::Diagnostics;
use super::frozen::FrozenSpec;
use super::result::{ResultSpec, parse_result};
use super::template;
use super::value::Value;
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
    /// `u128::MAX`; counted, never listed (see [`crate::space::check_size`]).
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
    // Continuation and pruning act between the rungs of a hyperband search;
    // any other strategy runs each config once, at one budget.
    if let (Some(Some(f)), Some(s), Some(node)) = (&fidelity, &strategy, fidelity_node)
        && !matches!(s, Strategy::Hyperband { .. })
        && let Some(fidelity_map) = node.as_mapping()
    {
        for (key, on) in [("continuation", f.continuation), ("prune", f.prune)] {
            if on && let Some(n) = fidelity_map.get_node(key) {
                w.error_at(
                    n,
                    &join("fidelity", key),
                    format!(
                        "`{key}: true` acts between the rungs of a hyperband search; `strategy.kind: {}` runs each config once, at one budget",
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
        check_size(w, map, &study);
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

/// Settings that are valid but under which no candidate can win, and knobs
/// the trial never sees: warnings, with where.
fn warn_about(w: &mut Walker, map: &marked_yaml::types::MarkedMappingNode, study: &Study) {
    let m = &study.measurement;
    let measurement = map.get_node("measurement");
    let at = |key: &str| {
        measurement
            .and_then(|n| n.as_mapping())
            .and_then(|m| m.get_node(key))
            .or(measurement)
            .map(|n| *n.span())
            .unwrap_or_else(|| *map.span())
    };
    if m.repeats < 2 {
        let span = at("repeats");
        w.warn(
            &span,
            "measurement.repeats",
            format!(
                "{}: one run per config shows nothing of how runs vary: a speedup's interval then takes the run's samples as runs (right only when each is an independent run, as hyperfine's are), and with one sample a run no candidate can win; set repeats: 2 or more (3 is the default)",
                m.repeats
            ),
        );
    } else if study.selection.min_samples > m.repeats {
        let span = map
            .get_node("selection")
            .and_then(|n| n.as_mapping())
            .and_then(|s| s.get_node("min_samples"))
            .map(|n| *n.span())
            .unwrap_or_else(|| at("repeats"));
        w.warn(
            &span,
            "selection.min_samples",
            format!(
                "{} is more than measurement.repeats ({}): unless each run reports at least {} samples, no candidate can win",
                study.selection.min_samples,
                m.repeats,
                study.selection.min_samples.div_ceil(m.repeats)
            ),
        );
    }
    if m.max_repeats < m.repeats {
        let span = at("max_repeats");
        w.warn(
            &span,
            "measurement.max_repeats",
            format!(
                "{} is below measurement.repeats ({}): nothing is raced; the sweep's repeats are the cap",
                m.max_repeats, m.repeats
            ),
        );
    }
    // A knob neither the command nor the environment names: unless the
    // program reads TUNECTL_KNOB_<NAME> or TUNECTL_KNOBS itself, all its
    // values measure the same thing.
    let mut texts: Vec<&str> = vec![study.trial.command.as_str()];
    texts.extend(study.trial.env.values().map(String::as_str));
    texts.extend(study.trial.files.values().map(String::as_str));
    if let Some(c) = &study.objective_command {
        texts.push(c);
    }
    let reads_all = texts.iter().any(|t| t.contains("TUNECTL_KNOB"));
    if reads_all {
        return;
    }
    let knobs_node = map.get_node("knobs").and_then(|n| n.as_mapping());
    for k in &study.knobs {
        let named = texts.iter().any(|t| {
            t.match_indices(k.name.as_str()).any(|(i, _)| {
                let before = t[..i].chars().next_back();
                let after = t[i + k.name.len()..].chars().next();
                let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !word(before) && !word(after)
            })
        });
        if !named {
            let span = knobs_node
                .and_then(|m| m.iter().find(|(key, _)| key.as_str() == k.name))
                .map(|(key, _)| *key.span())
                .unwrap_or_else(|| *map.span());
            w.warn(
                &span,
                &format!("knobs.{}", k.name),
                format!(
                    "`{}` appears in neither trial.command nor trial.env (nor trial.files): unless the program reads TUNECTL_KNOB_{} or TUNECTL_KNOBS, every value of it measures the same thing",
                    k.name,
                    k.name.to_uppercase()
                ),
            );
        }
    }
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

/// The longest template (`trial.command`, `objective.command`, a
/// `trial.env` value) a study may hold.
pub const MAX_TEMPLATE_BYTES: usize = 16 * 1024;

fn check_templates(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    knobs: &[String],
    cells: &[String],
) {
    let mut known: Vec<String> = RESERVED_VARIABLES.iter().map(|s| s.to_string()).collect();
    known.extend(knobs.iter().cloned());
    known.extend(cells.iter().cloned());
    let trial = map.get_mapping("trial");
    let check = |w: &mut Walker, node: &Node, field: &str, source: &str| {
        // A template is a command line, not a program: past this size only
        // a generated or damaged file gets, and parsing one (a 30 KB
        // expression of unary minuses) takes seconds.
        if source.len() > MAX_TEMPLATE_BYTES {
            w.error_at(
                node,
                field,
                format!(
                    "the template is {} bytes long; at most {MAX_TEMPLATE_BYTES} are accepted",
                    source.len()
                ),
            );
            return;
        }
        match template::template_variables(source) {
            Err(e) => w.error_at(node, field, format!("invalid template: {e}")),
            Ok(vars) => {
                for v in vars {
                    if !known.contains(&v) {
                        w.error_at(
                            node,
                            field,
                            format!(
                                "unknown template variable `{v}` (known: {})",
                                known.join(", ")
                            ),
                        );
                    }
                }
            }
        }
    };
    let text = |n: &Node| n.as_scalar().map(|s| s.as_str().to_string());
    // Commands run through a shell: every value must land where it can be
    // quoted (see spec::shell).
    let shell_check = |w: &mut Walker, node: &Node, field: &str, source: &str| {
        if let Err((at, why)) = template::check_shell_template(source) {
            let nth = source[..at].matches("{{").count();
            if source[at..].starts_with("{{") {
                w.error_inside(node, "{{", nth, field, why);
            } else {
                w.error_at(node, field, why);
            }
        }
    };
    if let Some(n) = trial.and_then(|t| t.get_node("command"))
        && let Some(source) = text(n)
    {
        check(w, n, "trial.command", &source);
        shell_check(w, n, "trial.command", &source);
    }
    if let Some(env) = trial.and_then(|t| t.get_mapping("env")) {
        for (k, n) in env.iter() {
            if let Some(source) = text(n) {
                check(w, n, &join("trial.env", k.as_str()), &source);
            }
        }
    }
    if let Some(n) = map
        .get_mapping("objective")
        .and_then(|o| o.get_node("command"))
        && let Some(source) = text(n)
    {
        check(w, n, "objective.command", &source);
        shell_check(w, n, "objective.command", &source);
    }
}

/// Most renders [`check_rendering`] makes of each command.
const MAX_CHECK_RENDERS: usize = 10_000;

/// Render the trial command, its environment and `objective.command` once
/// with the baseline at the first cell, then (when there are at most
/// [`MAX_CHECK_RENDERS`] of them) with each knob's every value, the others
/// at their defaults, and with the baseline at every cell; configs a
/// constraint excludes are skipped. An error that only shows when a template
/// is rendered (an unknown filter, an attribute of a number, a division by
/// zero) is reported here, at the template, instead of failing every trial.
fn check_rendering(w: &mut Walker, map: &marked_yaml::types::MarkedMappingNode, study: &Study) {
    let baseline: Vec<Value> = study.knobs.iter().map(|k| k.default.clone()).collect();
    let cells = crate::space::cells(study);
    let Some(first_cell) = cells.first() else {
        return;
    };
    let mut points: Vec<(Vec<Value>, &[Value])> = vec![(baseline.clone(), first_cell)];
    let more = study.knobs.iter().map(|k| k.values.len()).sum::<usize>() + cells.len();
    if more <= MAX_CHECK_RENDERS {
        for (i, knob) in study.knobs.iter().enumerate() {
            for v in knob.values.iter().filter(|v| **v != knob.default) {
                let mut config = baseline.clone();
                config[i] = v.clone();
                points.push((config, first_cell));
            }
        }
        points.extend(
            cells
                .iter()
                .skip(1)
                .map(|c| (baseline.clone(), c.as_slice())),
        );
    }
    let checker = template::TemplateCheck::new(study).ok();
    let budget = |b: f64| {
        if b.fract() == 0.0 && b.abs() < 9.0e15 {
            Value::Int(b as i64)
        } else {
            Value::Float(b)
        }
    };
    // Rung trials run `trial.command` from min_budget up; the others (and
    // `objective.command`) at max_budget.
    let (trial_budgets, objective_budget) = match &study.fidelity {
        Some(f) => (
            vec![
                budget(f.trial_budget(f.min_budget)),
                budget(f.trial_budget(f.max_budget)),
            ],
            budget(f.trial_budget(f.max_budget)),
        ),
        None => (vec![Value::Null], Value::Null),
    };
    let mut renderers = vec![(
        template::CommandRenderer::new(study),
        "trial.command",
        trial_budgets,
    )];
    if let Some(c) = &study.objective_command {
        renderers.push((
            template::CommandRenderer::with_command(study, c),
            "objective.command",
            vec![objective_budget],
        ));
    }
    let node_of = |field: &str| -> Option<&Node> {
        let mut parts = field.split('.');
        let mut node = map.get_node(parts.next()?)?;
        for p in parts {
            node = node.as_mapping()?.get_node(p)?;
        }
        Some(node)
    };
    for (renderer, field, budgets) in renderers {
        let renderer = match renderer {
            Ok(r) => r,
            Err(e) => {
                if let Some(n) = node_of(field) {
                    w.error_at(n, field, format!("invalid template: {e}"));
                }
                continue;
            }
        };
        'points: for (config, cell) in &points {
            if let Some(c) = &checker
                && !matches!(c.violated(config, cell), Ok(None))
            {
                continue;
            }
            for b in &budgets {
                let mut vars = template::TrialVars::default();
                for (k, v) in study.knobs.iter().zip(config) {
                    vars.set(&k.name, v.clone());
                }
                for (a, v) in study.cells.iter().zip(cell.iter()) {
                    vars.set(&a.name, v.clone());
                }
                let text = |s: &str| Value::Str(s.to_string());
                vars.set("study", text(&study.name));
                vars.set("study_dir", text(&study.dir.display().to_string()));
                vars.set("trial_id", text(&"0".repeat(64)));
                vars.set("trial_dir", text("/tmp/tunectl-work/trial"));
                vars.set(
                    "result",
                    text("/tmp/tunectl-work/trial/tunectl-result.json"),
                );
                vars.set("repeat", Value::Int(0));
                vars.set("budget", b.clone());
                vars.set("host", text("local"));
                vars.set("slot", Value::Int(0));
                vars.set("phase", text("measure"));
                if let Err((failed, e)) = renderer.try_render(&vars) {
                    let config_label = study
                        .knobs
                        .iter()
                        .zip(config)
                        .map(|(k, v)| format!("{}={v}", k.name))
                        .collect::<Vec<_>>()
                        .join(" ");
                    let at = if config == &baseline {
                        "the baseline".to_string()
                    } else {
                        format!("config {config_label}")
                    };
                    let cell_text = if study.cells.is_empty() {
                        String::new()
                    } else {
                        format!(" at cell {}", crate::space::cell_label(study, cell))
                    };
                    if let Some(n) = node_of(&failed) {
                        w.error_at(
                            n,
                            &failed,
                            format!("the template fails to render for {at}{cell_text}: {e}"),
                        );
                    }
                    break 'points;
                }
            }
        }
    }
}

/// Refuse a study too large to plan ([`crate::space::check_size`]): at
/// `knobs` when its grid is what is too large, else at `cells`.
fn check_size(w: &mut Walker, map: &marked_yaml::types::MarkedMappingNode, study: &Study) {
    use crate::space::TooLarge;
    if let Err(e) = crate::space::check_size(study) {
        let at = match &e {
            TooLarge::Grid(_) => None,
            TooLarge::Cells(_) | TooLarge::Pairs(_) => map.get_node("cells").map(|n| (n, "cells")),
        }
        .or_else(|| map.get_node("knobs").map(|n| (n, "knobs")));
        if let Some((node, field)) = at {
            w.error_at(node, field, e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings under which no candidate can win, and a knob the trial
    /// never sees, are warnings with their place; a study without them has
    /// none.
    #[test]
    fn warnings_name_where_no_candidate_can_win_and_knobs_never_seen() {
        let text = "name: w
knobs:
  mode: {kind: categorical, values: [a, b], default: a}
  unused: {kind: int, values: [1, 2], default: 1}
trial: {command: \"run {{ mode }}\"}
objective: {metric: t, unit: s, better: lower}
measurement: {repeats: 1, max_repeats: 1}
";
        let s = Study::from_text(Path::new("w.yaml"), text).expect("valid");
        let at: Vec<(usize, &str)> = s
            .warnings
            .iter()
            .map(|d| (d.line, d.field.as_str()))
            .collect();
        assert_eq!(
            at,
            [(7, "measurement.repeats"), (4, "knobs.unused")],
            "{:?}",
            s.warnings
        );
        assert!(s.warnings[0].message.contains("samples as runs"));
        let text = text
            .replace("repeats: 1, max_repeats: 1", "repeats: 2")
            .replace("selection", "")
            + "selection: {min_samples: 4}\n";
        let s = Study::from_text(Path::new("w.yaml"), &text).expect("valid");
        assert!(
            s.warnings
                .iter()
                .any(|d| d.field == "selection.min_samples"
                    && d.message.contains("at least 2 samples")),
            "{:?}",
            s.warnings
        );
        // A knob read from the environment by name is seen.
        let text = "name: e
knobs:
  mode: {kind: categorical, values: [a, b], default: a}
trial: {command: \"run\", env: {MODE: \"{{ mode }}\"}}
objective: {metric: t, unit: s, better: lower}
";
        let s = Study::from_text(Path::new("e.yaml"), text).expect("valid");
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }

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
