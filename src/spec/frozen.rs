//! The study as frozen in the ledger (`<study>/study.json`'s `spec`), read
//! back typed. The JSON is kept exactly as stored: it is hashed, diffed
//! against a relaunch's and written back byte for byte. The sections that
//! judging results needs are read from it once, here, with the defaults
//! that stand in for what a spec frozen by an older tunectl lacks.
//!
//! A spec has two parts. What decides a measurement (the command, the
//! knobs, the measurement protocol, the outputs and which of them are
//! compared numerically) is the study's identity: a change there is a new
//! study. The judging settings ([`JUDGING`]: selection thresholds, bucket
//! rules, the tolerance's rtol and atol) only decide what the recorded
//! evidence says: a change there re-judges the same measurements
//! ([`FrozenSpec::judged_by`]).

use std::collections::BTreeMap;
use std::ops::Deref;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::study::{Better, BucketRule, KnobKind, Limit, Selection, Study};

/// The settings that only judge recorded evidence, as key paths into the
/// frozen spec: changing them re-judges a study instead of starting a new
/// one.
pub const JUDGING: [&str; 4] = [
    "selection",
    "buckets",
    "gate.tolerance.rtol",
    "gate.tolerance.atol",
];

/// Settings that say how a trial is run, not what a successful measurement
/// means, as key paths into the frozen spec: a change neither starts a new
/// study nor re-judges one. A launch runs with the file's value; what
/// ran under the stored one stays as recorded, but for sweep and
/// confirmation trials that timed out under a shorter `trial.timeout`,
/// which run again (`launch::run_study`).
pub const RUNNING: [&str; 1] = ["trial.timeout"];

/// A frozen spec: its JSON as stored and the sections read from it.
#[derive(Debug, Clone, PartialEq)]
pub struct FrozenSpec {
    json: serde_json::Value,
    sections: Sections,
    /// When the judging sections are another spec's ([`FrozenSpec::judged_by`]):
    /// what differs from the stored ones, as key paths. The JSON stays as
    /// stored.
    rejudged: Vec<String>,
}

/// How two frozen specs differ, as key paths with old → new values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Differences {
    /// Changes to what a measurement means: another study.
    pub measurement: Vec<String>,
    /// Changes to the judging settings only ([`JUDGING`]).
    pub judging: Vec<String>,
}

/// The judging settings a decision used, for reports and verdict records.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judging {
    pub selection: FrozenSelection,
    pub buckets: BTreeMap<String, BucketRule>,
    /// The tolerance's `rtol` and `atol`; `None` without one.
    pub tolerance: Option<JudgingTolerance>,
    /// What differs from the settings stored at the study's first launch
    /// (key paths, old → new); empty when the stored ones judged.
    pub changed_since_launch: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct JudgingTolerance {
    pub rtol: f64,
    pub atol: f64,
}

/// The parts of a frozen spec that judging results reads.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sections {
    pub objective: FrozenMetric,
    pub knobs: Vec<FrozenKnob>,
    /// The workload context, values as written (strings, mostly).
    pub context: BTreeMap<String, serde_json::Value>,
    pub measurement: FrozenMeasurement,
    pub selection: FrozenSelection,
    /// Bucket rule per cell axis.
    pub buckets: BTreeMap<String, BucketRule>,
    pub gate: FrozenGate,
    pub fidelity: Option<FrozenFidelity>,
}

/// A metric (`objective`, or a `fidelity.proxy`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct FrozenMetric {
    pub name: String,
    pub unit: String,
    pub better: Better,
}

impl Default for FrozenMetric {
    fn default() -> Self {
        FrozenMetric {
            name: "objective".to_string(),
            unit: String::new(),
            better: Better::Higher,
        }
    }
}

/// A knob's domain and default (the baseline's value).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FrozenKnob {
    pub name: String,
    pub kind: KnobKind,
    pub values: Vec<serde_json::Value>,
    pub default: serde_json::Value,
}

/// Without `repeats` or `confirm_repeats`, the report has always taken one
/// sweep repeat and no confirmation round (not a study's defaults: those
/// are always frozen).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct FrozenMeasurement {
    pub repeats: u32,
    pub confirm_repeats: u32,
    /// Left out of the frozen spec at its default (see
    /// `spec::Measurement`).
    pub max_repeats: u32,
}

impl Default for FrozenMeasurement {
    fn default() -> Self {
        FrozenMeasurement {
            repeats: 1,
            confirm_repeats: 0,
            max_repeats: crate::spec::study::DEFAULT_MAX_REPEATS,
        }
    }
}

/// Defaults: a study's (`spec::Selection`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct FrozenSelection {
    pub min_improvement: f64,
    pub min_hosts: u32,
    /// Left out of the frozen spec at its default (see `spec::Selection`).
    pub min_samples: u32,
    /// Left out of the frozen spec when empty.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Limit>,
}

impl From<&Selection> for FrozenSelection {
    fn from(s: &Selection) -> Self {
        FrozenSelection {
            min_improvement: s.min_improvement,
            min_hosts: s.min_hosts,
            min_samples: s.min_samples,
            limits: s.limits.clone(),
        }
    }
}

impl Default for FrozenSelection {
    fn default() -> Self {
        FrozenSelection::from(&Selection::default())
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default)]
pub struct FrozenGate {
    /// Specs frozen before tolerances existed have none.
    pub tolerance: Option<ToleranceSpec>,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default)]
pub struct FrozenFidelity {
    pub unit: String,
    /// The metric rungs are read on; the objective's when absent.
    pub proxy: Option<FrozenMetric>,
}

impl Deref for FrozenSpec {
    type Target = Sections;

    fn deref(&self) -> &Sections {
        &self.sections
    }
}

impl FrozenSpec {
    /// Read a frozen spec. The error names the section that does not read.
    pub fn from_json(json: serde_json::Value) -> Result<FrozenSpec, String> {
        if !json.is_object() {
            return Err("the frozen spec is not a JSON object".to_string());
        }
        let sections = Sections {
            objective: section(&json, "objective")?,
            knobs: section(&json, "knobs")?,
            context: section(&json, "context")?,
            measurement: section(&json, "measurement")?,
            selection: section(&json, "selection")?,
            buckets: section(&json, "buckets")?,
            gate: section(&json, "gate")?,
            fidelity: section(&json, "fidelity")?,
        };
        Ok(FrozenSpec {
            json,
            sections,
            rejudged: Vec::new(),
        })
    }

    /// A study's frozen spec (see [`Study::frozen`]), as it would read back.
    pub(crate) fn of(study: &Study, json: serde_json::Value) -> FrozenSpec {
        let metric = |m: &super::Metric| FrozenMetric {
            name: m.name.clone(),
            unit: m.unit.clone(),
            better: m.better,
        };
        let sections = Sections {
            objective: metric(&study.objective),
            knobs: study
                .knobs
                .iter()
                .map(|k| FrozenKnob {
                    name: k.name.clone(),
                    kind: k.kind,
                    values: k.values.iter().map(|v| v.to_json()).collect(),
                    default: k.default.to_json(),
                })
                .collect(),
            context: study
                .context
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect(),
            measurement: FrozenMeasurement {
                repeats: study.measurement.repeats,
                confirm_repeats: study.measurement.confirm_repeats,
                max_repeats: study.measurement.max_repeats,
            },
            selection: FrozenSelection::from(&study.selection),
            buckets: study.buckets.clone(),
            gate: FrozenGate {
                tolerance: study.gate.tolerance.as_ref().map(ToleranceSpec::from),
            },
            fidelity: study.fidelity.as_ref().map(|f| FrozenFidelity {
                unit: f.unit.clone(),
                proxy: Some(metric(&f.proxy)),
            }),
        };
        FrozenSpec {
            json,
            sections,
            rejudged: Vec::new(),
        }
    }

    /// The JSON as stored.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
    }

    /// `trial.timeout` as stored, in seconds.
    pub fn trial_timeout_s(&self) -> Option<f64> {
        self.json
            .get("trial")
            .and_then(|t| t.get("timeout"))
            .and_then(serde_json::Value::as_f64)
    }

    /// Field-by-field differences from `old` to `self`, split into what
    /// changes a measurement and what only changes judging.
    pub fn differences_from(&self, old: &FrozenSpec) -> Differences {
        let mut d = Differences::default();
        diff(
            &measured(&old.json),
            &measured(&self.json),
            "",
            &mut d.measurement,
        );
        diff(
            &judging(&old.json),
            &judging(&self.json),
            "",
            &mut d.judging,
        );
        d
    }

    /// How the [`RUNNING`] settings of `self` differ from `old`'s, as key
    /// paths with old → new values.
    pub fn running_changes_from(&self, old: &FrozenSpec) -> Vec<String> {
        let mut out = Vec::new();
        diff(&running(&old.json), &running(&self.json), "", &mut out);
        out
    }

    /// Whether `self` and `other` mean the same measurements (their judging
    /// settings may differ).
    pub fn measures_as(&self, other: &FrozenSpec) -> bool {
        measured(&self.json) == measured(&other.json)
    }

    /// This spec (its evidence) judged by `by`'s settings: the judging
    /// sections are `by`'s, everything else and the stored JSON stay.
    /// Meant for a `by` that [measures as](Self::measures_as) `self`.
    pub fn judged_by(&self, by: &FrozenSpec) -> FrozenSpec {
        let mut sections = self.sections.clone();
        sections.selection = by.selection.clone();
        sections.buckets = by.buckets.clone();
        if let (Some(mine), Some(theirs)) = (&mut sections.gate.tolerance, &by.gate.tolerance) {
            mine.rtol = theirs.rtol;
            mine.atol = theirs.atol;
        }
        let mut rejudged = Vec::new();
        diff(&judging(&self.json), &judging(&by.json), "", &mut rejudged);
        FrozenSpec {
            json: self.json.clone(),
            sections,
            rejudged,
        }
    }

    /// The judging settings in effect, and what differs from the stored ones.
    pub fn judging(&self) -> Judging {
        Judging {
            selection: self.selection.clone(),
            buckets: self.buckets.clone(),
            tolerance: self.gate.tolerance.as_ref().map(|t| JudgingTolerance {
                rtol: t.rtol,
                atol: t.atol,
            }),
            changed_since_launch: self.rejudged.clone(),
        }
    }
}

/// The frozen JSON without the judging and the [`RUNNING`] settings.
fn measured(json: &serde_json::Value) -> serde_json::Value {
    let mut v = json.clone();
    if let Some(obj) = v.as_object_mut() {
        obj.remove("selection");
        obj.remove("buckets");
        if let Some(trial) = obj.get_mut("trial").and_then(|t| t.as_object_mut()) {
            trial.remove("timeout");
        }
        if let Some(t) = obj
            .get_mut("gate")
            .and_then(|g| g.get_mut("tolerance"))
            .and_then(|t| t.as_object_mut())
        {
            t.remove("rtol");
            t.remove("atol");
        }
    }
    v
}

/// Only the [`RUNNING`] settings of the frozen JSON (those it has).
fn running(json: &serde_json::Value) -> serde_json::Value {
    match json.get("trial").and_then(|t| t.get("timeout")) {
        Some(t) => serde_json::json!({ "trial": { "timeout": t } }),
        None => serde_json::json!({}),
    }
}

/// Only the judging settings of the frozen JSON (those it has).
fn judging(json: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for key in ["selection", "buckets"] {
        if let Some(v) = json.get(key) {
            out.insert(key.to_string(), v.clone());
        }
    }
    if let Some(t) = json.get("gate").and_then(|g| g.get("tolerance")) {
        let picked: serde_json::Map<String, serde_json::Value> = ["rtol", "atol"]
            .iter()
            .filter_map(|k| Some((k.to_string(), t.get(*k)?.clone())))
            .collect();
        out.insert(
            "gate".to_string(),
            serde_json::json!({ "tolerance": picked }),
        );
    }
    serde_json::Value::Object(out)
}

fn diff(a: &serde_json::Value, b: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    use serde_json::Value as J;
    match (a, b) {
        (J::Object(x), J::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => diff(va, vb, &p, out),
                    (Some(_), None) => out.push(format!("{p} (removed)")),
                    (None, Some(_)) => out.push(format!("{p} (added)")),
                    (None, None) => {}
                }
            }
        }
        (J::Array(x), J::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                diff(va, vb, &format!("{path}[{i}]"), out);
            }
        }
        _ if a == b => {}
        (J::String(x), J::String(y)) if x.chars().count() > 60 || y.chars().count() > 60 => {
            let (x, y) = around_difference(x, y);
            out.push(format!("{path}: {x} → {y}"))
        }
        _ => out.push(format!("{path}: {} → {}", short(a), short(b))),
    }
}

/// Two long strings cut to where they differ (from a little before the
/// first different character), so that the change shows.
fn around_difference(a: &str, b: &str) -> (String, String) {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let same = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let start = same.saturating_sub(20);
    let window = |s: &[char]| {
        let end = (start + 60).min(s.len());
        let mut t = String::new();
        if start > 0 {
            t.push('…');
        }
        t.extend(&s[start.min(end)..end]);
        if end < s.len() {
            t.push('…');
        }
        serde_json::Value::String(t).to_string()
    };
    (window(&a), window(&b))
}

fn short(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

/// One top-level section; absent or null reads as its default.
fn section<T: DeserializeOwned + Default>(
    json: &serde_json::Value,
    name: &str,
) -> Result<T, String> {
    match json.get(name) {
        None | Some(serde_json::Value::Null) => Ok(T::default()),
        Some(v) => T::deserialize(v).map_err(|e| format!("the frozen spec's `{name}`: {e}")),
    }
}

impl Serialize for FrozenSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(s)
    }
}

impl<'de> Deserialize<'de> for FrozenSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FrozenSpec, D::Error> {
        FrozenSpec::from_json(serde_json::Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// The numeric comparison of tolerance files, as frozen in the spec
/// (`spec.gate.tolerance`, which serializes [`crate::spec::Tolerance`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToleranceSpec {
    pub files: Vec<String>,
    pub rtol: f64,
    pub atol: f64,
}

impl ToleranceSpec {
    /// `gate.tolerance` of a frozen spec; `None` when the study has none.
    pub fn from_spec(spec: &FrozenSpec) -> Option<ToleranceSpec> {
        spec.gate.tolerance.clone()
    }
}

impl From<&crate::spec::study::Tolerance> for ToleranceSpec {
    fn from(t: &crate::spec::study::Tolerance) -> Self {
        ToleranceSpec {
            files: t.files.clone(),
            rtol: t.rtol,
            atol: t.atol,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    /// What a study freezes reads back as the same sections.
    #[test]
    fn a_frozen_study_reads_back_as_built() {
        let text = r#"name: s
context: {model: m}
knobs:
  x: {kind: int, values: [1, 2, 4, 8], default: 1}
  y: {kind: bool, default: false}
cells:
  n: [1, 1024]
trial: {command: "run {{ x }} {{ y }} {{ n }}"}
objective: {metric: t, unit: s, better: lower}
measurement: {repeats: 5, confirm_repeats: 2}
selection: {min_improvement: 0.05, min_hosts: 2, min_samples: 4}
gate:
  outputs: [out.json]
  tolerance: {files: [out.json], rtol: 0.001}
buckets: {n: exact}
fidelity: {unit: samples, min_budget: 1, max_budget: 9, metric: t}
"#;
        let study = Study::from_text(Path::new("s.yaml"), text).expect("study");
        let frozen = study.frozen();
        let back = FrozenSpec::from_json(frozen.json().clone()).expect("reads back");
        assert_eq!(back, frozen);
        assert_eq!(back.selection.min_samples, 4);
        assert_eq!(back.objective.better, Better::Lower);
        assert!(back.gate.tolerance.is_some());
    }

    /// A spec frozen before a section existed reads with its default; the
    /// JSON is written back as it was.
    #[test]
    fn missing_sections_take_their_defaults() {
        let json = json!({"objective": {"name": "tp"}, "knobs": [], "extra": [1, 2]});
        let spec = FrozenSpec::from_json(json.clone()).expect("old spec");
        assert_eq!(
            (
                spec.selection.min_improvement,
                spec.selection.min_hosts,
                spec.selection.min_samples
            ),
            (0.02, 1, 3)
        );
        assert_eq!(spec.measurement.repeats, 1);
        assert_eq!(spec.objective.better, Better::Higher);
        assert!(spec.gate.tolerance.is_none() && spec.fidelity.is_none());
        assert_eq!(serde_json::to_value(&spec).expect("json"), json);
    }

    #[test]
    fn a_long_command_shows_where_it_changed() {
        let old = "./bench --threads {{ threads }} --block {{ block }} --accum {{ accum }} --n {{ n }} --out out.txt";
        let new = "./bench --threads {{ threads }} --block {{ block }} --accum {{ accum }} --n {{ n }} --out out.csv";
        let mut out = Vec::new();
        diff(
            &json!({"trial": {"command": old}}),
            &json!({"trial": {"command": new}}),
            "",
            &mut out,
        );
        assert_eq!(
            out,
            vec!["trial.command: \"…n {{ n }} --out out.txt\" → \"…n {{ n }} --out out.csv\""]
        );
    }

    const TUNED: &str = r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4, 8], default: 1}
cells:
  n: [1, 1024]
trial: {command: "run {{ x }} {{ n }}"}
objective: {metric: t, better: lower}
gate:
  outputs: [out.json]
  tolerance: {files: [out.json], rtol: 0.001}
"#;

    fn spec(text: &str) -> FrozenSpec {
        Study::from_text(Path::new("s.yaml"), text)
            .expect("study")
            .frozen()
    }

    /// Selection, buckets and the tolerance's bounds are judging: the
    /// measurements stay the same study; anything else is another.
    #[test]
    fn judging_settings_change_the_verdict_not_the_study() {
        let old = spec(TUNED);
        let new = spec(&format!(
            "{}selection: {{min_improvement: 0.05}}\nbuckets: {{n: exact}}\n",
            TUNED.replace("rtol: 0.001", "rtol: 0.01, atol: 0.5")
        ));
        assert!(new.measures_as(&old));
        let d = new.differences_from(&old);
        assert!(d.measurement.is_empty(), "{d:?}");
        assert_eq!(
            d.judging,
            vec![
                "buckets.n: \"pow2\" → \"exact\"",
                "gate.tolerance.atol: 0.0 → 0.5",
                "gate.tolerance.rtol: 0.001 → 0.01",
                "selection.min_improvement: 0.02 → 0.05",
            ]
        );
        let judged = old.judged_by(&new);
        assert_eq!(judged.json(), old.json(), "the stored JSON stays");
        assert_eq!(judged.selection.min_improvement, 0.05);
        assert_eq!(judged.buckets["n"], BucketRule::Exact);
        let t = judged.gate.tolerance.as_ref().expect("tolerance");
        assert_eq!(
            (t.files.as_slice(), t.rtol, t.atol),
            (&["out.json".to_string()][..], 0.01, 0.5)
        );
        assert_eq!(judged.judging().changed_since_launch, d.judging);
        assert!(old.judging().changed_since_launch.is_empty());

        // Which files are compared numerically changes what is recorded.
        let other = spec(&TUNED.replace("tolerance: {files: [out.json]", "tolerance: {files: []"));
        assert!(!other.measures_as(&old));
        let d = other.differences_from(&old);
        assert_eq!(d.measurement.len(), 1, "{d:?}");
        assert!(
            d.measurement[0].starts_with("gate.tolerance.files"),
            "{d:?}"
        );
        assert!(!spec(&TUNED.replace("run {{", "run2 {{")).measures_as(&old));
    }

    /// A section that does not read is named.
    #[test]
    fn a_bad_section_is_named() {
        let err = FrozenSpec::from_json(json!({"selection": {"min_hosts": "two"}}))
            .expect_err("a string count");
        assert!(err.contains("`selection`"), "{err}");
        let err = serde_json::from_value::<FrozenSpec>(json!([])).expect_err("an array");
        assert!(err.to_string().contains("not a JSON object"), "{err}");
    }
}
