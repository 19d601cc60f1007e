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
use crate::gate::{self, Classifier, MAX_VALUE_FILE_BYTES};
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

/// The numbers of a tolerance file (at most 8 MiB and
/// [`gate::MAX_VALUES`] numbers), or why they cannot be used.
pub async fn read_values(path: &Path) -> Result<Vec<f64>, String> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("cannot be read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_VALUE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > MAX_VALUE_FILE_BYTES {
        return Err(format!(
            "over the limit of {} MiB",
            MAX_VALUE_FILE_BYTES / (1024 * 1024)
        ));
    }
    tokio::task::spawn_blocking(move || gate::parse_values(&bytes))
        .await
        .map_err(|e| format!("cannot be parsed: {e}"))?
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
            let log_files = spec.keep_logs.then(|| {
                (
                    dir.join(".tunectl-stdout.log"),
                    dir.join(".tunectl-stderr.log"),
                )
            });
            if let Some((o, e)) = &log_files {
                let header = format!("== tunectl: {} run ==\n", phase.as_str());
                for p in [o, e] {
                    use tokio::io::AsyncWriteExt;
                    if let Ok(mut f) = tokio::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(p)
                        .await
                    {
                        let _ = f.write_all(header.as_bytes()).await;
                    }
                }
            }
            let run_spec = RunSpec {
                command: spec.command.clone(),
                dir: dir.clone(),
                env,
                timeout: spec.timeout,
                log_files,
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
                for name in &spec.tolerance_files {
                    outcome
                        .output_values
                        .insert(name.clone(), read_values(&dir.join(name)).await);
                }
            }
        }
        outcome.elapsed = started.elapsed();
        if spec.keep_logs {
            for (name, file) in [
                ("stdout", ".tunectl-stdout.log"),
                ("stderr", ".tunectl-stderr.log"),
            ] {
                if let Ok(bytes) = tokio::fs::read(dir.join(file)).await {
                    outcome.logs.insert(name.to_string(), bytes);
                }
            }
        }
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
    /// The numbers of each tolerance file.
    pub output_values: BTreeMap<String, Vec<f64>>,
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
        output_values: BTreeMap::new(),
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
    if outcome.host_lost.is_some() {
        j.status = AttemptStatus::Lost;
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
                        j.outputs.insert(name.clone(), s.clone());
                        // Tolerance files are compared by their numbers.
                        if !outcome.output_values.contains_key(name) {
                            hasher.update(format!("output {name} {s}\n"));
                            any = true;
                        }
                    }
                    None => {
                        j.status = AttemptStatus::Failed;
                        j.failure = no_result(format!("declared output `{name}` was not written"));
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

    /// A tiny trial program in a temporary directory, run through the
    /// local transport.
    struct Fake {
        root: tempfile::TempDir,
        transport: LocalTransport,
    }

    impl Fake {
        fn new() -> Fake {
            let root = tempfile::tempdir().expect("tempdir");
            let transport = LocalTransport {
                work_root: root.path().join("work"),
                keep_workdirs: false,
            };
            Fake { root, transport }
        }

        /// Run `script` (sh) as one attempt with `warmup` warm-ups.
        async fn run(
            &self,
            name: &str,
            script: &str,
            warmup: u32,
            outputs: &[&str],
            tolerance: &[&str],
        ) -> AttemptOutcome {
            let prog = self.root.path().join(format!("{name}.sh"));
            std::fs::write(&prog, script).expect("write program");
            let trial_dir = self
                .transport
                .trial_dir("study", "0123456789abcdef0123", name);
            let result_path = format!("{trial_dir}/{RESULT_FILE}");
            let spec = AttemptSpec {
                study_id: "study".into(),
                trial_key: "0123456789abcdef0123".into(),
                attempt_id: name.into(),
                command: format!("sh {}", prog.display()),
                env: vec![("TUNECTL_RESULT".into(), result_path.clone())],
                timeout: std::time::Duration::from_secs(20),
                warmup,
                outputs: outputs.iter().map(|s| s.to_string()).collect(),
                tolerance_files: tolerance.iter().map(|s| s.to_string()).collect(),
                slot: 0,
                trial_dir,
                result_path,
                keep_logs: true,
            };
            self.transport
                .run_attempt(&spec, &CancellationToken::new())
                .await
        }
    }

    /// Succeeds on its first two runs and fails from the third on; it does
    /// not look at `TUNECTL_PHASE`.
    const FAILS_ON_THIRD_RUN: &str = r#"
n=$(cat runs 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > runs
if [ "$n" -ge 3 ]; then
  echo "RuntimeError: CUDA error: an illegal memory access was encountered" >&2
  exit 1
fi
echo '{"metrics": {"t": 1.5}}' > "$TUNECTL_RESULT"
"#;

    /// "A failure that only appears on the first measured run after a
    /// clean warm-up is still a failure."
    #[tokio::test]
    async fn failure_after_clean_warmups_is_a_measure_failure() {
        let fake = Fake::new();
        let outcome = fake.run("a1", FAILS_ON_THIRD_RUN, 2, &[], &[]).await;
        assert_eq!(outcome.warmups_run, 2);
        assert!(!outcome.failed_in_warmup);
        assert!(
            outcome.result.is_none(),
            "the warm-ups' result must not count"
        );
        // The failed attempt's directory is kept.
        let dir = outcome.trial_dir.clone().expect("kept");
        assert_eq!(
            std::fs::read_to_string(format!("{dir}/runs"))
                .ok()
                .as_deref(),
            Some("3\n")
        );
        let j = judge(&outcome, "t", &Classifier::default(), 20.0);
        assert_eq!(j.status, AttemptStatus::Failed);
        let f = j.failure.expect("failure");
        assert_eq!(f.class, FailureClass::Crash);
        assert_eq!(f.phase, "measure");
        assert_eq!(
            f.detail,
            "exit code 1: RuntimeError: CUDA error: an illegal memory access was encountered"
        );
        assert!(j.metrics.is_empty());

        // The same program fails in warm-up when it gets three warm-ups.
        let outcome = fake.run("a2", FAILS_ON_THIRD_RUN, 3, &[], &[]).await;
        let j = judge(&outcome, "t", &Classifier::default(), 20.0);
        let f = j.failure.expect("failure");
        assert_eq!(f.phase, "warmup");
        assert!(f.detail.ends_with("(in warm-up run 3)"), "{}", f.detail);

        // And passes with one.
        let outcome = fake.run("a3", FAILS_ON_THIRD_RUN, 1, &[], &[]).await;
        let j = judge(&outcome, "t", &Classifier::default(), 20.0);
        assert_eq!(j.status, AttemptStatus::Ok);
        assert_eq!(j.metrics["t"], vec![1.5]);
        assert!(
            outcome.trial_dir.is_none(),
            "a successful attempt's directory goes"
        );
    }

    /// Warm-ups that wrote a result do not stand in for a counted run that
    /// wrote none.
    #[tokio::test]
    async fn measured_run_without_result_after_warmups() {
        let fake = Fake::new();
        let script = r#"
if [ "$TUNECTL_PHASE" = warmup ]; then
  echo '{"metrics": {"t": 1}}' > "$TUNECTL_RESULT"
  echo warm > out.txt
fi
"#;
        let outcome = fake.run("b1", script, 2, &["out.txt"], &[]).await;
        assert_eq!(outcome.warmups_run, 2);
        let j = judge(&outcome, "t", &Classifier::default(), 20.0);
        let f = j.failure.expect("failure");
        assert_eq!(
            (f.class, f.phase.as_str()),
            (FailureClass::NoResult, "measure")
        );
    }

    /// Tolerance files: their numbers are kept, flattened, and their hash
    /// is left out of the digest; other outputs still count in it.
    #[tokio::test]
    async fn tolerance_files_are_read_and_left_out_of_the_digest() {
        let fake = Fake::new();
        let script = |logits: &str, tokens: &str| {
            format!(
                "echo '{logits}' > logits.json\necho '{tokens}' > tokens.txt\n\
                 echo '{{\"metrics\": {{\"t\": 1}}}}' > \"$TUNECTL_RESULT\"\n"
            )
        };
        let outputs = ["logits.json", "tokens.txt"];
        let tolerance = ["logits.json"];
        let run = |name: &'static str, logits: &'static str, tokens: &'static str| {
            let fake = &fake;
            let script = script(logits, tokens);
            async move {
                let o = fake.run(name, &script, 0, &outputs, &tolerance).await;
                judge(&o, "t", &Classifier::default(), 20.0)
            }
        };
        let a = run("c1", "[[0.25, 0.5], [NaN, -1e-3]]", "hello").await;
        assert_eq!(a.status, AttemptStatus::Ok, "{:?}", a.failure);
        let v = &a.output_values["logits.json"];
        assert_eq!(v.len(), 4);
        assert_eq!((v[0], v[1], v[3]), (0.25, 0.5, -1e-3));
        assert!(v[2].is_nan());
        // Both files are hashed.
        assert_eq!(a.outputs.len(), 2);
        // Different numbers, same other output: same digest.
        let b = run("c2", "[0.25, 0.5001, 0, 0]", "hello").await;
        assert_eq!(b.status, AttemptStatus::Ok);
        assert_eq!(a.digest, b.digest);
        assert_ne!(a.outputs["logits.json"], b.outputs["logits.json"]);
        // A different other output: a different digest.
        let c = run("c3", "[0.25, 0.5, 0, 0]", "bye").await;
        assert_ne!(a.digest, c.digest);
        // Unparsable, or missing: no_result, with a clear detail.
        let d = run("c4", "[0.25, oops]", "hello").await;
        let f = d.failure.expect("failure");
        assert_eq!(f.class, FailureClass::NoResult);
        assert_eq!(
            f.detail,
            "tolerance file `logits.json`: not a JSON array of numbers: `oops` is not a number at byte 7"
        );
        assert!(d.output_values.is_empty());
        let o = fake
            .run(
                "c5",
                "echo '{\"metrics\": {\"t\": 1}}' > \"$TUNECTL_RESULT\"\necho x > tokens.txt",
                0,
                &outputs,
                &tolerance,
            )
            .await;
        let f = judge(&o, "t", &Classifier::default(), 20.0)
            .failure
            .expect("failure");
        assert_eq!(f.detail, "declared output `logits.json` was not written");
    }

    #[tokio::test]
    async fn oversized_tolerance_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("big.json");
        let mut text = String::from("[");
        while text.len() as u64 <= MAX_VALUE_FILE_BYTES {
            text.push_str("0.123456789,");
        }
        text.push_str("0]");
        std::fs::write(&path, &text).expect("write");
        assert_eq!(
            read_values(&path).await.err().as_deref(),
            Some("over the limit of 8 MiB")
        );
        std::fs::write(&path, "[1, 2, [3]]").expect("write");
        assert_eq!(read_values(&path).await, Ok(vec![1.0, 2.0, 3.0]));
        assert!(
            read_values(&dir.path().join("absent.json"))
                .await
                .is_err_and(|e| e.starts_with("cannot be read"))
        );
    }

    /// A compile error printed first, then a traceback longer than the
    /// stderr tail: the kept head still classifies it.
    #[tokio::test]
    async fn compile_error_before_a_long_traceback() {
        let fake = Fake::new();
        let script = r#"
echo "triton.compiler.errors.CompilationError: at 10:4: too many registers" >&2
i=0
while [ $i -lt 600 ]; do
  echo "  File "/site-packages/torch/_inductor/runtime/x.py", line $i, in run" >&2
  i=$((i + 1))
done
echo "RuntimeError: kernel_7 did not build" >&2
exit 1
"#;
        let outcome = fake.run("d1", script, 0, &[], &[]).await;
        let run = outcome.run.as_ref().expect("ran");
        assert!(
            run.stderr_head
                .starts_with("triton.compiler.errors.CompilationError")
        );
        assert!(!run.stderr_tail.contains("CompilationError"));
        let j = judge(&outcome, "t", &Classifier::default(), 20.0);
        let f = j.failure.expect("failure");
        assert_eq!(f.class, FailureClass::CompileFailure);
        assert_eq!(
            f.detail,
            "exit code 1: triton.compiler.errors.CompilationError: at 10:4: too many registers"
        );
    }
}
