//! What every transport shares about an attempt: where its result goes,
//! the limits on what is read back, and the judgement of its raw outcome
//! into a ledger record (the same for every transport).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::{AttemptOutcome, Ended, ResultError, extract};
use crate::decide::gate::Classifier;
use crate::ledger::records::{AttemptStatus, Failure, FailureClass};
use crate::spec::result::ResultSpec;
use crate::trial::Phase;

/// Name of the result file inside the trial directory.
pub const RESULT_FILE: &str = "tunectl-result.json";

/// Largest result file read back: results are small JSON.
pub const MAX_RESULT_BYTES: u64 = 8 * 1024 * 1024;

/// Largest declared output hashed (read in chunks, never whole).
pub const MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024 * 1024;

/// The judged result of an attempt.
#[derive(Debug, Clone)]
pub struct Judgement {
    pub status: AttemptStatus,
    pub failure: Option<Failure>,
    pub metrics: BTreeMap<String, Vec<f64>>,
    pub digest: Option<String>,
    pub outputs: BTreeMap<String, String>,
    /// The numbers of each tolerance file.
    pub output_values: BTreeMap<String, Vec<f64>>,
}

/// Samples per metric name.
type Metrics = BTreeMap<String, Vec<f64>>;

/// Parse `{"metrics": {...}, "digest": "..."}`. `metrics` may be left out
/// when the study's `result:` reads them elsewhere (`metrics_required`
/// false).
fn parse_result(
    bytes: &[u8],
    metrics_required: bool,
) -> Result<(Metrics, Option<String>), ResultError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ResultError::NotJson {
            detail: e.to_string(),
        })?;
    let obj = value.as_object().ok_or(ResultError::NotObject)?;
    let empty = serde_json::Map::new();
    let metrics = match obj.get("metrics").and_then(|m| m.as_object()) {
        Some(m) => m,
        None if !metrics_required && obj.get("metrics").is_none() => &empty,
        None => return Err(ResultError::NoMetrics),
    };
    let mut out = BTreeMap::new();
    for (name, v) in metrics {
        let not_numbers = || ResultError::NotNumbers { name: name.clone() };
        let samples: Vec<f64> = match v {
            serde_json::Value::Number(n) => n.as_f64().into_iter().collect(),
            serde_json::Value::Array(items) => {
                let nums: Option<Vec<f64>> = items.iter().map(|i| i.as_f64()).collect();
                nums.ok_or_else(not_numbers)?
            }
            _ => return Err(not_numbers()),
        };
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return Err(ResultError::NoFiniteSamples { name: name.clone() });
        }
        out.insert(name.clone(), samples);
    }
    let digest = match obj.get("digest") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(ResultError::DigestNotString),
    };
    Ok((out, digest))
}

/// The first sample a ratio cannot use: not a positive normal number.
pub fn first_unusable(samples: &[f64]) -> Option<&f64> {
    samples.iter().find(|x| !(x.is_normal() && **x > 0.0))
}

/// The objective's samples must be positive normal numbers: speedups are
/// ratios of them, and 0, a negative number or a subnormal one (which JSON
/// can write, e.g. `5e-324`) would make a ratio infinite, negative or
/// meaningless.
pub fn check_ratio_samples(name: &str, samples: &[f64]) -> Result<(), ResultError> {
    match first_unusable(samples) {
        None => Ok(()),
        Some(x) => Err(ResultError::Unusable {
            name: name.to_string(),
            sample: *x,
        }),
    }
}

/// Turn raw facts into a status, a failure reason, metrics and digests, for
/// a study without a `result:` section.
pub fn judge(
    outcome: &AttemptOutcome,
    objective: &str,
    classifier: &Classifier,
    timeout_s: f64,
) -> Judgement {
    judge_with(outcome, objective, None, classifier, timeout_s)
}

/// The metrics of a run that exited 0: those `result:` reads (when the
/// study has it) over those of `$TUNECTL_RESULT` (optional then), and the
/// result's digest; or why there are none.
fn read_metrics(
    outcome: &AttemptOutcome,
    result: Option<&ResultSpec>,
) -> Result<(Metrics, Option<String>), ResultError> {
    let (mut metrics, digest) = match (&outcome.result, result) {
        (Some(bytes), _) => parse_result(bytes, result.is_none())?,
        (None, Some(_)) => (Metrics::new(), None),
        (None, None) => return Err(ResultError::NotWritten),
    };
    if let Some(spec) = result {
        // A metric `result:` gives is read there, whatever the file says.
        metrics.extend(extract::extract(
            spec,
            &outcome.result_files,
            &outcome.streams,
        )?);
    }
    Ok((metrics, digest))
}

/// [`judge`], reading metrics where the study's `result:` says.
pub fn judge_with(
    outcome: &AttemptOutcome,
    objective: &str,
    result: Option<&ResultSpec>,
    classifier: &Classifier,
    timeout_s: f64,
) -> Judgement {
    let mut j = Judgement {
        status: AttemptStatus::Ok,
        failure: None,
        metrics: BTreeMap::new(),
        digest: None,
        outputs: BTreeMap::new(),
        output_values: BTreeMap::new(),
    };
    let phase = if outcome.failed_in_warmup {
        Phase::Warmup
    } else {
        Phase::Measure
    };
    let fail = |class: FailureClass, detail: String| Failure {
        timeout_s: (class == FailureClass::Timeout).then_some(timeout_s),
        class,
        detail,
        phase,
    };
    // Stopped by the launcher, on a host that dropped, or never started
    // (full disk, no shell: not the config's fault): the trial runs again.
    if outcome.ended != Ended::Ran {
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
    if let Some((class, detail)) = classifier.classify(
        &run.exit,
        run.timed_out,
        &run.stderr_for_classifier(),
        timeout_s,
    ) {
        j.status = AttemptStatus::Failed;
        let detail = if outcome.failed_in_warmup {
            format!("{detail} (in warm-up run {})", outcome.warmups_run + 1)
        } else {
            detail.to_string()
        };
        j.failure = Some(fail(class, detail));
        return j;
    }
    let no_result = |detail: String| Some(fail(FailureClass::NoResult, detail));
    if let Some(e) = &outcome.result_error {
        j.status = AttemptStatus::Failed;
        j.failure = no_result(e.to_string());
        return j;
    }
    match read_metrics(outcome, result) {
        Err(e) => {
            j.status = AttemptStatus::Failed;
            j.failure = no_result(e.to_string());
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
            if let Err(e) = check_ratio_samples(objective, &metrics[objective]) {
                j.status = AttemptStatus::Failed;
                j.failure = no_result(e.to_string());
                return j;
            }
            j.metrics = metrics;
            let mut hasher = Sha256::new();
            let mut any = false;
            for (name, sha) in &outcome.outputs {
                match sha {
                    Ok(s) => {
                        j.outputs.insert(name.clone(), s.clone());
                        // Tolerance files are compared by their numbers.
                        if !outcome.output_values.contains_key(name) {
                            hasher.update(format!("output {name} {s}\n"));
                            any = true;
                        }
                    }
                    Err(why) => {
                        j.status = AttemptStatus::Failed;
                        j.failure = no_result(format!("declared output `{name}` {why}"));
                        return j;
                    }
                }
            }
            for (name, values) in &outcome.output_values {
                match values {
                    Ok(v) => {
                        j.output_values.insert(name.clone(), v.clone());
                    }
                    Err(e) => {
                        j.status = AttemptStatus::Failed;
                        j.failure = no_result(format!("tolerance file `{name}`: {e}"));
                        j.output_values.clear();
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
    use crate::ledger::records::ExitInfo;
    use crate::transport::local::RunOutput;

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

    /// With `result:`, `$TUNECTL_RESULT` is optional; when written, its
    /// digest and other metrics count, and `result:`'s metrics win.
    #[test]
    fn result_section_metrics_win_over_the_result_file() {
        use crate::spec::result::{MetricSource, Source};
        let c = Classifier::default();
        let spec = ResultSpec {
            preset: None,
            metrics: [(
                "t".to_string(),
                MetricSource {
                    from: Source::Stdout {
                        regex: r"t=(\S+)".into(),
                    },
                    scale: Some(2.0),
                },
            )]
            .into(),
        };
        let with_stdout = |result: Option<&str>, stdout: &str| {
            let mut o = ok_outcome("");
            o.result = result.map(|r| r.as_bytes().to_vec());
            o.streams
                .insert("stdout".into(), Ok(stdout.as_bytes().to_vec()));
            judge_with(&o, "t", Some(&spec), &c, 1.0)
        };
        let j = with_stdout(None, "t=1.5\nt=2\n");
        assert_eq!(j.status, AttemptStatus::Ok, "{:?}", j.failure);
        assert_eq!(j.metrics["t"], vec![3.0, 4.0]);
        assert_eq!(j.digest, None);
        let j = with_stdout(
            Some(r#"{"metrics": {"t": 99, "mem": 7}, "digest": "d"}"#),
            "t=1\n",
        );
        assert_eq!(j.metrics["t"], vec![2.0]);
        assert_eq!(j.metrics["mem"], vec![7.0]);
        assert!(j.digest.is_some());
        // A result file with only a digest is fine with `result:`.
        let j = with_stdout(Some(r#"{"digest": "d"}"#), "t=1\n");
        assert_eq!(j.status, AttemptStatus::Ok, "{:?}", j.failure);
        // A metric not found fails the attempt, naming the source.
        let j = with_stdout(None, "nothing\n");
        let f = j.failure.expect("failure");
        assert_eq!(f.class, FailureClass::NoResult);
        assert_eq!(f.detail, r"result.t: stdout: no match for 't=(\S+)'");
        // Without `result:`, the result file stays required.
        let mut o = ok_outcome("");
        o.result = None;
        let f = judge(&o, "t", &c, 1.0).failure.expect("failure");
        assert_eq!(f.detail, "exit 0 but nothing written to $TUNECTL_RESULT");
    }
}
