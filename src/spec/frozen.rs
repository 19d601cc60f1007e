//! The study as frozen in the ledger (`<study>/study.json`'s `spec`), read
//! back typed. The JSON is kept exactly as stored: it is hashed, diffed
//! against a relaunch's and written back byte for byte. The sections that
//! judging results needs are read from it once, here, with the defaults
//! that stand in for what a spec frozen by an older tunectl lacks.

use std::collections::BTreeMap;
use std::ops::Deref;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::study::{Better, BucketRule, KnobKind, Selection, Study};
use crate::gate::ToleranceSpec;

/// A frozen spec: its JSON as stored and the sections read from it.
#[derive(Debug, Clone, PartialEq)]
pub struct FrozenSpec {
    json: serde_json::Value,
    sections: Sections,
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
}

impl Default for FrozenMeasurement {
    fn default() -> Self {
        FrozenMeasurement {
            repeats: 1,
            confirm_repeats: 0,
        }
    }
}

/// Defaults: a study's (`spec::Selection`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct FrozenSelection {
    pub min_improvement: f64,
    pub min_hosts: u32,
    /// Left out of the frozen spec at its default (see `spec::Selection`).
    pub min_samples: u32,
}

impl From<&Selection> for FrozenSelection {
    fn from(s: &Selection) -> Self {
        FrozenSelection {
            min_improvement: s.min_improvement,
            min_hosts: s.min_hosts,
            min_samples: s.min_samples,
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
        Ok(FrozenSpec { json, sections })
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
        FrozenSpec { json, sections }
    }

    /// The JSON as stored.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
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
