//! One attempt on the local machine, and the judgement of any attempt's
//! raw outcome into a ledger record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::local::{self, RunSpec};
use super::{AttemptOutcome, AttemptSpec, Transport};
use crate::fingerprint::{self, Fingerprint};
use crate::gate::Classifier;
use crate::ledger::records::{AttemptStatus, Failure, FailureClass};
use crate::trial::Phase;

/// Name of the result file inside the trial directory.
pub const RESULT_FILE: &str = "tunectl-result.json";

/// The local machine as a transport.
pub struct LocalTransport {
    /// Root under which each attempt gets a fresh directory.
    pub work_root: PathBuf,
    pub keep_workdirs: bool,
}

async fn sha256_file(path: &Path) -> Option<String> {
    let bytes = tokio::fs::read(path).await.ok()?;
    Some(hex::encode(Sha256::digest(&bytes)))
}

#[async_trait]
impl Transport for LocalTransport {
    async fn probe(&self, tools: &BTreeMap<String, String>) -> Result<Fingerprint, String> {
        fingerprint::probe_local(tools)
            .await
            .map_err(|e| e.to_string())
    }

    fn trial_dir(&self, study: &str, trial_key: &str, attempt_id: &str) -> String {
        let short_key = &trial_key[..trial_key.len().min(16)];
        self.work_root
            .join(study)
            .join(format!("{short_key}-{attempt_id}"))
            .display()
            .to_string()
    }

    async fn run_attempt(&self, spec: &AttemptSpec, cancel: &CancellationToken) -> AttemptOutcome {
        let started = std::time::Instant::now();
        let dir = PathBuf::from(&spec.trial_dir);
        let mut outcome = AttemptOutcome {
            trial_dir: Some(dir.display().to_string()),
            ..Default::default()
        };
        if let Err(e) = tokio::fs::create_dir_all(&dir).await {
            outcome.setup_error = Some(format!(
                "cannot create trial directory {}: {e}",
                dir.display()
            ));
            return outcome;
        }
        let result_path = PathBuf::from(&spec.result_path);
        let runs = (0..spec.warmup)
            .map(|_| Phase::Warmup)
            .chain(std::iter::once(Phase::Measure));
        for phase in runs {
            // Nothing a previous run wrote may pass for this run's output.
            let _ = tokio::fs::remove_file(&result_path).await;
            for name in &spec.outputs {
                let _ = tokio::fs::remove_file(dir.join(name)).await;
            }
            let mut env = spec.env.clone();
            env.push(("TUNECTL_PHASE".into(), phase.as_str().into()));
            let run_spec = RunSpec {
                command: spec.command.clone(),
                dir: dir.clone(),
                env,
                timeout: spec.timeout,
            };
            let out = match local::run(&run_spec, cancel).await {
                Ok(o) => o,
                Err(e) => {
                    outcome.setup_error = Some(format!("cannot start `sh`: {e}"));
                    break;
                }
            };
            let ok = out.exit.code == Some(0) && !out.timed_out && !out.cancelled;
            outcome.cancelled = out.cancelled;
            outcome.run = Some(out);
            if !ok {
                outcome.failed_in_warmup = phase == Phase::Warmup;
                break;
            }
            if phase == Phase::Warmup {
                outcome.warmups_run += 1;
            } else {
                outcome.result = tokio::fs::read(&result_path).await.ok();
                for name in &spec.outputs {
                    outcome
                        .outputs
                        .insert(name.clone(), sha256_file(&dir.join(name)).await);
                }
            }
        }
        outcome.elapsed = started.elapsed();
        let succeeded = outcome.setup_error.is_none()
            && !outcome.cancelled
            && !outcome.failed_in_warmup
            && outcome
                .run
                .as_ref()
                .is_some_and(|r| r.exit.code == Some(0) && !r.timed_out);
        if succeeded && !self.keep_workdirs {
            let _ = tokio::fs::remove_dir_all(&dir).await;
            outcome.trial_dir = None;
        }
        outcome
    }
}

/// The judged result of an attempt.
#[derive(Debug, Clone)]
pub struct Judgement {
    pub status: AttemptStatus,
    pub failure: Option<Failure>,
    pub metrics: BTreeMap<String, Vec<f64>>,
    pub digest: Option<String>,
    pub outputs: BTreeMap<String, String>,
}

/// Samples per metric name.
type Metrics = BTreeMap<String, Vec<f64>>;

/// Parse `{"metrics": {...}, "digest": "..."}`.
fn parse_result(bytes: &[u8]) -> Result<(Metrics, Option<String>), String> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("the result file is not valid JSON: {e}"))?;
    let obj = value
        .as_object()
        .ok_or("the result file must hold one JSON object")?;
    let metrics = obj
        .get("metrics")
        .and_then(|m| m.as_object())
        .ok_or("the result has no `metrics` object")?;
    let mut out = BTreeMap::new();
    for (name, v) in metrics {
        let samples: Vec<f64> = match v {
            serde_json::Value::Number(n) => n.as_f64().into_iter().collect(),
            serde_json::Value::Array(items) => {
                let nums: Option<Vec<f64>> = items.iter().map(|i| i.as_f64()).collect();
                nums.ok_or(format!(
                    "metric `{name}` must be a number or an array of numbers"
                ))?
            }
            _ => {
                return Err(format!(
                    "metric `{name}` must be a number or an array of numbers"
                ));
            }
        };
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return Err(format!("metric `{name}` has no finite samples"));
        }
        out.insert(name.clone(), samples);
    }
    let digest = match obj.get("digest") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("`digest` must be a string".to_string()),
    };
    Ok((out, digest))
}

/// Turn raw facts into a status, a failure reason, metrics and digests.
pub fn judge(
    outcome: &AttemptOutcome,
    objective: &str,
    classifier: &Classifier,
    timeout_s: f64,
) -> Judgement {
    let mut j = Judgement {
        status: AttemptStatus::Ok,
        failure: None,
        metrics: BTreeMap::new(),
        digest: None,
        outputs: BTreeMap::new(),
    };
    let phase = if outcome.failed_in_warmup {
        Phase::Warmup
    } else {
        Phase::Measure
    };
    let fail = |class: FailureClass, detail: String| Failure {
        class,
        detail,
        phase: phase.as_str().to_string(),
    };
    if outcome.cancelled {
        j.status = AttemptStatus::Lost;
        j.failure = None;
        return j;
    }
    if outcome.setup_error.is_some() {
        // The host could not start the trial (full disk, no shell): not the
        // config's fault, so the trial runs again on a later launch.
        j.status = AttemptStatus::Lost;
        return j;
    }
    let Some(run) = &outcome.run else {
        j.status = AttemptStatus::Failed;
        j.failure = Some(fail(
            FailureClass::NoResult,
            "the trial never ran".to_string(),
        ));
        return j;
    };
    if let Some((class, detail)) =
        classifier.classify(&run.exit, run.timed_out, &run.stderr_tail, timeout_s)
    {
        j.status = AttemptStatus::Failed;
        let detail = if outcome.failed_in_warmup {
            format!("{detail} (in warm-up run {})", outcome.warmups_run + 1)
        } else {
            detail
        };
        j.failure = Some(fail(class, detail));
        return j;
    }
    let no_result = |detail: String| Some(fail(FailureClass::NoResult, detail));
    let Some(bytes) = &outcome.result else {
        j.status = AttemptStatus::Failed;
        j.failure = no_result("exit 0 but nothing written to $TUNECTL_RESULT".to_string());
        return j;
    };
    match parse_result(bytes) {
        Err(e) => {
            j.status = AttemptStatus::Failed;
            j.failure = no_result(e);
            return j;
        }
        Ok((metrics, digest)) => {
            if !metrics.contains_key(objective) {
                j.status = AttemptStatus::Failed;
                let found: Vec<&str> = metrics.keys().map(String::as_str).collect();
                j.failure = no_result(format!(
                    "the result has no objective metric `{objective}` (found: {})",
                    if found.is_empty() {
                        "none".to_string()
                    } else {
                        found.join(", ")
                    }
                ));
                return j;
            }
            j.metrics = metrics;
            let mut hasher = Sha256::new();
            let mut any = false;
            for (name, sha) in &outcome.outputs {
                match sha {
                    Some(s) => {
                        hasher.update(format!("output {name} {s}\n"));
                        j.outputs.insert(name.clone(), s.clone());
                        any = true;
                    }
                    None => {
                        j.status = AttemptStatus::Failed;
                        j.failure = no_result(format!("declared output `{name}` was not written"));
                        return j;
                    }
                }
            }
            if let Some(d) = digest {
                hasher.update(format!("digest {d}\n"));
                any = true;
            }
            if any {
                j.digest = Some(hex::encode(hasher.finalize()));
            }
        }
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::local::RunOutput;
    use crate::ledger::records::ExitInfo;

    fn ok_outcome(result: &str) -> AttemptOutcome {
        AttemptOutcome {
            run: Some(RunOutput {
                exit: ExitInfo {
                    code: Some(0),
                    signal: None,
                },
                ..Default::default()
            }),
            result: Some(result.as_bytes().to_vec()),
            ..Default::default()
        }
    }

    #[test]
    fn results_are_parsed_and_checked() {
        let c = Classifier::default();
        let j = judge(
            &ok_outcome(r#"{"metrics":{"t":[1,2,3]},"digest":"abc"}"#),
            "t",
            &c,
            1.0,
        );
        assert_eq!(j.status, AttemptStatus::Ok);
        assert_eq!(j.metrics["t"], vec![1.0, 2.0, 3.0]);
        assert!(j.digest.is_some());
        let j = judge(&ok_outcome(r#"{"metrics":{"x":1}}"#), "t", &c, 1.0);
        assert_eq!(j.failure.map(|f| f.class), Some(FailureClass::NoResult));
        let j = judge(&ok_outcome("not json"), "t", &c, 1.0);
        assert_eq!(j.failure.map(|f| f.class), Some(FailureClass::NoResult));
        let j = judge(&ok_outcome(r#"{"metrics":{"t":"fast"}}"#), "t", &c, 1.0);
        assert_eq!(j.failure.map(|f| f.class), Some(FailureClass::NoResult));
    }
}
