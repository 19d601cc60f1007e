//! The objects stored in the ledger. Every one carries a schema version.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::spec::FrozenSpec;
use crate::trial::{Phase, RoleKind};

mod samples;
mod text;
pub use samples::MetricSamples;
pub use text::Text;

pub const SCHEMA: u32 = 1;
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A string that repeats between attempt records (spec hash, labels, host,
/// host class, fingerprint, digest): a scan of 100,000 attempts holds each
/// distinct one once and shares it, instead of 100,000 copies. Written and
/// read as a plain JSON string.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedStr(Arc<str>);

impl SharedStr {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> SharedStr {
        SharedStr(Arc::from(s))
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> SharedStr {
        SharedStr(Arc::from(s))
    }
}

impl From<&String> for SharedStr {
    fn from(s: &String) -> SharedStr {
        SharedStr(Arc::from(s.as_str()))
    }
}

impl From<SharedStr> for String {
    fn from(s: SharedStr) -> String {
        s.0.to_string()
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == *other.0
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == *other.0
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == *other.0
    }
}

impl Serialize for SharedStr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SharedStr, D::Error> {
        // From the parser's buffer: the shared copy is the only one.
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SharedStr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SharedStr, E> {
                Ok(SharedStr::from(v))
            }
        }
        d.deserialize_str(V)
    }
}

/// `<study>/study.json`: the frozen spec and its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyRecord {
    pub schema: u32,
    pub tunectl_version: String,
    pub study_id: String,
    pub spec_hash: String,
    /// Written back exactly as read; a spec whose sections do not read
    /// makes the whole record unreadable, naming the section.
    pub spec: FrozenSpec,
    pub created_at: String,
}

/// `<study>/hosts/<host>/<fp-hash>.json`: a fingerprint as probed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostRecord {
    pub schema: u32,
    pub host: String,
    pub transport: String,
    pub fingerprint_hash: String,
    pub host_class: String,
    pub class_label: String,
    pub probed_at: String,
    /// A mixed Slurm partition's part: the nodes of its class when it was
    /// probed (absent for every other host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    pub fingerprint: Fingerprint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// Ran to the end and produced a result.
    Ok,
    /// Ran and failed: a result in its own right, with its reason.
    Failed,
    /// Never finished for reasons not of the trial's making (launcher
    /// interrupted, host lost): the trial runs again.
    Lost,
    /// A rung trial the search stopped early (`fidelity.prune`): its
    /// intermediate value ranked where ASHA would not promote it. Terminal,
    /// never a failure of the config and never a measured sample.
    Pruned,
}

impl AttemptStatus {
    pub fn is_terminal(self) -> bool {
        !matches!(self, AttemptStatus::Lost)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    CompileFailure,
    Oom,
    Timeout,
    Crash,
    NoResult,
    OutputChanged,
    /// A secondary metric broke its `selection.limits` bound (a judgement
    /// of the report, never an attempt's failure).
    Limit,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::CompileFailure => "compile_failure",
            FailureClass::Oom => "oom",
            FailureClass::Timeout => "timeout",
            FailureClass::Crash => "crash",
            FailureClass::NoResult => "no_result",
            FailureClass::OutputChanged => "output_changed",
            FailureClass::Limit => "limit",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub class: FailureClass,
    pub detail: String,
    /// Which run failed.
    pub phase: Phase,
    /// For a `timeout`: the `trial.timeout` the run had, in seconds (a
    /// later launch with a longer one runs the trial again). Absent in
    /// records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// `<study>/trials/<trial-key>/<attempt>.void`: an attempt whose
/// measurement was discarded (its host drifted); the trial runs again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VoidRecord {
    pub schema: u32,
    pub trial_key: String,
    pub attempt_id: String,
    pub reason: String,
    pub at: String,
}

/// `<study>/drops/<host-class>/<cell-hash>-<host>.json`: a cell given up on a host
/// because its baseline would not settle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DropRecord {
    pub schema: u32,
    pub host_class: String,
    pub host: String,
    pub cell: serde_json::Value,
    pub cell_label: String,
    pub reason: String,
    pub at: String,
}

/// `<study>/plan/<host-class>/<cell-index>.json`: what a launch planned to
/// run at one cell on one host class (derived from the spec; rewritten by
/// a launch that knows more, such as an adaptive search's finalists). A
/// bucket is a verdict only when every planned trial of its cells ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub schema: u32,
    pub spec_hash: String,
    pub host_class: String,
    pub cell_index: u32,
    pub cell: serde_json::Value,
    pub cell_label: String,
    /// Configs with sweep trials planned here, the baseline included;
    /// `None` while an adaptive search has not chosen its finalists.
    pub configs: Option<u64>,
    /// Sweep trials planned per config.
    pub repeats: u32,
    pub at: String,
}

/// `<study>/trials/<trial-key>/<attempt>.json`: one execution of a trial.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub schema: u32,
    pub tunectl_version: SharedStr,
    pub study_id: SharedStr,
    pub spec_hash: SharedStr,
    pub trial_key: String,
    pub attempt_id: String,
    /// Shared between the attempts of one config (see [`SharedStr`]).
    pub config: Arc<serde_json::Value>,
    pub config_label: SharedStr,
    pub config_index: u64,
    pub is_baseline: bool,
    pub cell: Arc<serde_json::Value>,
    pub cell_label: SharedStr,
    pub cell_index: u32,
    pub repeat: u32,
    /// `sweep`, `anchor`, `confirm` or `rung` (see `trial::Role`); `sweep`
    /// in records written before roles existed.
    #[serde(default)]
    pub role: RoleKind,
    pub fidelity: Option<f64>,
    pub host: SharedStr,
    pub host_class: SharedStr,
    pub fingerprint: SharedStr,
    pub slot: u32,
    pub started_at: Text,
    pub finished_at: Text,
    /// Wall time of the attempt, warm-ups included.
    pub duration_s: f64,
    /// Wall time of the counted run alone.
    pub run_s: Option<f64>,
    pub warmup_runs: u32,
    pub status: AttemptStatus,
    pub failure: Option<Failure>,
    pub exit: Option<ExitInfo>,
    /// Samples per metric (a single number becomes one sample).
    pub metrics: MetricSamples,
    /// The output digest the gate compares (sha256 over the declared
    /// outputs, except the tolerance files, and the trial's own `digest`).
    pub digest: Option<SharedStr>,
    /// sha256 of each declared output file.
    pub outputs: Arc<BTreeMap<String, String>>,
    /// The numbers of each tolerance file (`gate.tolerance.files`),
    /// flattened; compared with the baseline's within tolerance. NaN and
    /// infinities are stored as the strings `"NaN"`, `"Infinity"`,
    /// `"-Infinity"`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "values_serde"
    )]
    pub output_values: BTreeMap<String, Vec<f64>>,
    pub command: Text,
    pub stdout_tail: Text,
    pub stderr_tail: Text,
    /// The start of stderr (up to 4 KiB) when it was longer than the tail;
    /// never overlaps `stderr_tail`.
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub stderr_head: Text,
    /// Why a `lost` attempt was lost (its host dropped...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_reason: Option<String>,
    /// The budget a continued rung resumed from (`fidelity.continuation`):
    /// it ran only from there to `fidelity`. `None`: it ran from zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<f64>,
    /// Where a `pruned` attempt was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned: Option<Box<PrunedAt>>,
    /// What a rung of a `kind: tpe` search with `fidelity.prune` read on
    /// its way, as (budget, proxy value) pairs: the first progress line at
    /// or past each rung budget below its own, up to the line it was
    /// pruned on. Later rungs are stopped against them, so a relaunch
    /// replays them from here. Empty (and left out) for every other trial.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readings: Vec<(f64, f64)>,
}

/// The intermediate value a rung trial was pruned on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrunedAt {
    /// The rung budget it fell short at (as trials receive budgets).
    pub rung_budget: f64,
    /// The budget of the progress line (`budget value`) that decided.
    pub budget: f64,
    /// Its value on the proxy metric.
    pub value: f64,
}

/// Numbers that JSON cannot write (NaN, infinities) as strings.
pub(crate) mod values_serde {
    use std::collections::BTreeMap;
    use std::fmt;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::{SerializeSeq, Serializer};
    use serde::{Deserialize, Serialize};

    struct Num(f64);

    impl Serialize for Num {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let x = self.0;
            if x.is_finite() {
                s.serialize_f64(x)
            } else if x.is_nan() {
                s.serialize_str("NaN")
            } else if x > 0.0 {
                s.serialize_str("Infinity")
            } else {
                s.serialize_str("-Infinity")
            }
        }
    }

    struct NumVisitor;

    impl Visitor<'_> for NumVisitor {
        type Value = Num;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a number, \"NaN\", \"Infinity\" or \"-Infinity\"")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
            Ok(Num(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
            Ok(Num(v as f64))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
            Ok(Num(v as f64))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
            match v {
                "NaN" => Ok(Num(f64::NAN)),
                "Infinity" => Ok(Num(f64::INFINITY)),
                "-Infinity" => Ok(Num(f64::NEG_INFINITY)),
                _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
            }
        }
        // What serde_json writes for a non-finite f64.
        fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
            Ok(Num(f64::NAN))
        }
    }

    impl<'de> Deserialize<'de> for Num {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
            d.deserialize_any(NumVisitor)
        }
    }

    struct Seq<'a>(&'a [f64]);

    impl Serialize for Seq<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(self.0.len()))?;
            for x in self.0 {
                seq.serialize_element(&Num(*x))?;
            }
            seq.end()
        }
    }

    pub fn serialize<S: Serializer>(
        map: &BTreeMap<String, Vec<f64>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(map.iter().map(|(k, v)| (k, Seq(v))))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Vec<f64>>, D::Error> {
        let raw = BTreeMap::<String, Vec<Num>>::deserialize(d)?;
        Ok(raw
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().map(|n| n.0).collect()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> serde_json::Value {
        serde_json::json!({
            "schema": 1, "tunectl_version": "t", "study_id": "s", "spec_hash": "h",
            "trial_key": "k", "attempt_id": "a", "config": {}, "config_label": "c",
            "config_index": 0, "is_baseline": true, "cell": {}, "cell_label": "",
            "cell_index": 0, "repeat": 0, "fidelity": null, "host": "h",
            "host_class": "hc", "fingerprint": "fp", "slot": 0, "started_at": "",
            "finished_at": "", "duration_s": 0.0, "run_s": null, "warmup_runs": 0,
            "status": "ok", "failure": null, "exit": null, "metrics": {},
            "digest": null, "outputs": {}, "command": "", "stdout_tail": "",
            "stderr_tail": ""
        })
    }

    /// Records written before `output_values` and `stderr_head` existed
    /// still read; empty ones are not written.
    #[test]
    fn new_fields_are_optional() {
        let r: AttemptRecord = serde_json::from_value(minimal()).expect("old record");
        assert!(r.output_values.is_empty());
        assert!(r.stderr_head.is_empty());
        let v = serde_json::to_value(&r).expect("json");
        assert!(v.get("output_values").is_none());
        assert!(v.get("stderr_head").is_none());
        assert_eq!(r.role, RoleKind::Sweep);
    }

    /// A role this tunectl does not know reads, and is written back as it
    /// was.
    #[test]
    fn an_unknown_role_reads_and_survives() {
        let mut v = minimal();
        v["role"] = serde_json::json!("probe");
        let r: AttemptRecord = serde_json::from_value(v.clone()).expect("a foreign role");
        assert_eq!(r.role, RoleKind::Unknown("probe".into()));
        assert_eq!(serde_json::to_value(&r).expect("json")["role"], "probe");
    }

    /// A frozen spec that does not read makes the study record unreadable,
    /// with the section named.
    #[test]
    fn a_study_record_with_a_bad_spec_names_the_section() {
        let v = serde_json::json!({
            "schema": 1, "tunectl_version": "t", "study_id": "s", "spec_hash": "h",
            "spec": {"measurement": {"repeats": -1}}, "created_at": ""
        });
        let err = serde_json::from_value::<StudyRecord>(v).expect_err("a negative count");
        assert!(err.to_string().contains("`measurement`"), "{err}");
    }

    /// NaN and infinities survive the trip through JSON.
    #[test]
    fn output_values_round_trip() {
        let mut r: AttemptRecord = serde_json::from_value(minimal()).expect("record");
        r.output_values.insert(
            "logits.json".into(),
            vec![
                0.5,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                -0.0,
                1e-300,
            ],
        );
        r.stderr_head = "head".into();
        let text = serde_json::to_string(&r).expect("json");
        assert!(
            text.contains(
                r#""output_values":{"logits.json":[0.5,"NaN","Infinity","-Infinity",-0.0,1e-300]}"#
            ),
            "{text}"
        );
        let back: AttemptRecord = serde_json::from_str(&text).expect("read back");
        let v = &back.output_values["logits.json"];
        assert_eq!(v[0], 0.5);
        assert!(v[1].is_nan());
        assert_eq!(&v[2..], &[f64::INFINITY, f64::NEG_INFINITY, -0.0, 1e-300]);
        assert_eq!(back.stderr_head, "head");
        // null (how serde_json writes a non-finite f64) reads as NaN; other
        // strings do not read.
        let mut v = minimal();
        v["output_values"] = serde_json::json!({"x": [1, null]});
        let r: AttemptRecord = serde_json::from_value(v.clone()).expect("null");
        assert!(r.output_values["x"][1].is_nan());
        v["output_values"] = serde_json::json!({"x": ["nan"]});
        assert!(serde_json::from_value::<AttemptRecord>(v).is_err());
    }
}
