//! The objects stored in the ledger. Every one carries a schema version.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;

pub const SCHEMA: u32 = 1;
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `<study>/study.json`: the frozen spec and its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyRecord {
    pub schema: u32,
    pub tunectl_version: String,
    pub study_id: String,
    pub spec_hash: String,
    pub spec: serde_json::Value,
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
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub class: FailureClass,
    pub detail: String,
    /// `warmup` or `measure`: which run failed.
    pub phase: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

fn default_role() -> String {
    "sweep".to_string()
}

/// `<study>/trials/<trial-key>/<attempt>.json.void`: an attempt whose
/// measurement was discarded (its host drifted); the trial runs again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VoidRecord {
    pub schema: u32,
    pub trial_key: String,
    pub attempt_id: String,
    pub reason: String,
    pub at: String,
}

/// `<study>/drops/<host-class>/<cell-hash>.json`: a cell given up on a host
/// because its baseline would not settle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DropRecord {
    pub schema: u32,
    pub host_class: String,
    pub host: String,
    pub cell: serde_json::Value,
    pub cell_label: String,
    pub reason: String,
    pub at: String,
}

/// `<study>/trials/<trial-key>/<attempt>.json`: one execution of a trial.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub schema: u32,
    pub tunectl_version: String,
    pub study_id: String,
    pub spec_hash: String,
    pub trial_key: String,
    pub attempt_id: String,
    pub config: serde_json::Value,
    pub config_label: String,
    pub config_index: u64,
    pub is_baseline: bool,
    pub cell: serde_json::Value,
    pub cell_label: String,
    pub cell_index: u32,
    pub repeat: u32,
    /// `sweep`, `anchor` or `confirm` (see `trial::Role`).
    #[serde(default = "default_role")]
    pub role: String,
    pub fidelity: Option<f64>,
    pub host: String,
    pub host_class: String,
    pub fingerprint: String,
    pub slot: u32,
    pub started_at: String,
    pub finished_at: String,
    /// Wall time of the attempt, warm-ups included.
    pub duration_s: f64,
    /// Wall time of the counted run alone.
    pub run_s: Option<f64>,
    pub warmup_runs: u32,
    pub status: AttemptStatus,
    pub failure: Option<Failure>,
    pub exit: Option<ExitInfo>,
    /// Samples per metric (a single number becomes one sample).
    pub metrics: BTreeMap<String, Vec<f64>>,
    /// The output digest the gate compares (sha256 over the declared
    /// outputs and the trial's own `digest`).
    pub digest: Option<String>,
    /// sha256 of each declared output file.
    pub outputs: BTreeMap<String, String>,
    pub command: String,
    pub stdout_tail: String,
    pub stderr_tail: String,
}
