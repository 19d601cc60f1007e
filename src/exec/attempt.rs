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

/// Largest result file read back: results are small JSON.
pub const MAX_RESULT_BYTES: u64 = 8 * 1024 * 1024;

/// Largest declared output hashed (read in chunks, never whole).
pub const MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024 * 1024;

/// Bytes read at a time when hashing.
const CHUNK: usize = 1024 * 1024;

/// `n` bytes for people: `8 MiB`, `16 GiB`, else bytes.
pub fn size_label(n: u64) -> String {
    const GIB: u64 = 1024 * 1024 * 1024;
    if n >= GIB && n.is_multiple_of(GIB) {
        format!("{} GiB", n / GIB)
    } else if n >= 1024 * 1024 && n.is_multiple_of(1024 * 1024) {
        format!("{} MiB", n / (1024 * 1024))
    } else {
        format!("{n} bytes")
    }
}

/// What a file type is, for a message.
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        "not a regular file"
    }
}

/// Open `path` for reading if it is a regular file (a symlink is followed
/// only to a regular file) of at most `cap` bytes. Nothing else is opened
/// (a FIFO would block, a device never end), and the open itself cannot
/// block: the type is checked before, and again on the open descriptor. The
/// error says why, e.g. `is a FIFO, not a regular file`, `was not written`.
fn open_regular(path: &Path, cap: u64) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = |via_link: bool, t: std::fs::FileType| {
        format!(
            "is {}{}, not a regular file",
            if via_link { "a symlink to " } else { "" },
            kind_of(t)
        )
    };
    let link = std::fs::symlink_metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "was not written".to_string(),
        _ => format!("cannot be read: {e}"),
    })?;
    let via_link = link.file_type().is_symlink();
    let meta = if via_link {
        std::fs::metadata(path).map_err(|e| format!("is a symlink that cannot be followed: {e}"))?
    } else {
        link
    };
    if !meta.is_file() {
        return Err(not_regular(via_link, meta.file_type()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot be read: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(via_link, meta.file_type()));
    }
    if meta.len() > cap {
        return Err(format!(
            "is {} bytes, over the limit of {}",
            meta.len(),
            size_label(cap)
        ));
    }
    Ok(file)
}

/// Read `path` through `sink` in chunks: a regular file of at most `cap`
/// bytes (also when it grows while read), finished before `deadline`.
fn read_chunks(
    path: &Path,
    cap: u64,
    deadline: std::time::Instant,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), String> {
    use std::io::Read;
    let mut file = open_regular(path, cap)?;
    let mut buf = vec![0u8; CHUNK];
    let mut total: u64 = 0;
    loop {
        if std::time::Instant::now() > deadline {
            return Err("was still being read at the trial's timeout".to_string());
        }
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot be read: {e}")),
        };
        total += n as u64;
        if total > cap {
            return Err(format!("grew over the limit of {}", size_label(cap)));
        }
        sink(&buf[..n]);
    }
}

/// The contents of a regular file of at most `cap` bytes.
pub fn read_regular(
    path: &Path,
    cap: u64,
    deadline: std::time::Instant,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    read_chunks(path, cap, deadline, |b| out.extend_from_slice(b))?;
    Ok(out)
}

/// The sha256 of a regular file of at most `cap` bytes, read in chunks.
pub fn sha256_regular(
    path: &Path,
    cap: u64,
    deadline: std::time::Instant,
) -> Result<String, String> {
    let mut hasher = Sha256::new();
    read_chunks(path, cap, deadline, |b| hasher.update(b))?;
    Ok(hex::encode(hasher.finalize()))
}

/// The numbers of a tolerance file (at most 8 MiB and
/// [`gate::MAX_VALUES`] numbers), or why they cannot be used.
pub fn read_values(path: &Path, deadline: std::time::Instant) -> Result<Vec<f64>, String> {
    let bytes = read_regular(path, MAX_VALUE_FILE_BYTES, deadline).map_err(|e| {
        if e == "was not written" {
            "cannot be read: it was not written".to_string()
        } else {
            e
        }
    })?;
    gate::parse_values(&bytes)
}

/// What the counted run left: the result file, the digests of the declared
/// outputs and the numbers of the tolerance files, read within `deadline`
/// (blocking: call it off the async runtime).
fn collect_files(
    dir: &Path,
    result_path: &Path,
    spec: &AttemptSpec,
    deadline: std::time::Instant,
    outcome: &mut AttemptOutcome,
) {
    match read_regular(result_path, MAX_RESULT_BYTES, deadline) {
        Ok(b) => outcome.result = Some(b),
        Err(e) if e == "was not written" => {}
        Err(e) => {
            let name = result_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            outcome.result_error = Some(format!("the result file `{name}` {e}"));
        }
    }
    for name in &spec.outputs {
        let digest = sha256_regular(&dir.join(name), MAX_OUTPUT_BYTES, deadline);
        outcome.outputs.insert(name.clone(), digest);
    }
    for name in &spec.tolerance_files {
        outcome
            .output_values
            .insert(name.clone(), read_values(&dir.join(name), deadline));
    }
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
                // Read within the trial's timeout, off the runtime.
                let deadline = std::time::Instant::now() + spec.timeout;
                let (d, r, sp) = (dir.clone(), result_path.clone(), spec.clone());
                let got = tokio::task::spawn_blocking(move || {
                    let mut got = AttemptOutcome::default();
                    collect_files(&d, &r, &sp, deadline, &mut got);
                    got
                })
                .await
                .unwrap_or_default();
                outcome.result = got.result;
                outcome.result_error = got.result_error;
                outcome.outputs = got.outputs;
                outcome.output_values = got.output_values;
            }
        }
        outcome.elapsed = started.elapsed();
        if spec.keep_logs {
            for (name, file) in [
                ("stdout", ".tunectl-stdout.log"),
                ("stderr", ".tunectl-stderr.log"),
            ] {
                // Written by tunectl, but the trial could have replaced it.
                let path = dir.join(file);
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                let read = tokio::task::spawn_blocking(move || {
                    read_regular(&path, local::MAX_LOG_BYTES + 1024, deadline)
                })
                .await;
                if let Ok(Ok(bytes)) = read {
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

/// The objective's samples must be positive normal numbers: speedups are
/// ratios of them, and 0, a negative number or a subnormal one (which JSON
/// can write, e.g. `5e-324`) would make a ratio infinite, negative or
/// meaningless.
pub fn check_ratio_samples(name: &str, samples: &[f64]) -> Result<(), String> {
    match samples.iter().find(|x| !(x.is_normal() && **x > 0.0)) {
        None => Ok(()),
        Some(x) => {
            let what = if x.is_finite() && *x > 0.0 {
                "is subnormal (too close to zero), not a positive finite number"
            } else {
                "is not a positive finite number"
            };
            let shown = if *x != 0.0 && x.is_finite() && !(1e-6..1e16).contains(&x.abs()) {
                format!("{x:e}")
            } else {
                x.to_string()
            };
            Err(format!(
                "metric {name}: sample {shown} {what}; speedups are ratios"
            ))
        }
    }
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
        phase,
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
    if let Some(e) = &outcome.result_error {
        j.status = AttemptStatus::Failed;
        j.failure = no_result(e.clone());
        return j;
    }
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
            if let Err(e) = check_ratio_samples(objective, &metrics[objective]) {
                j.status = AttemptStatus::Failed;
                j.failure = no_result(e);
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
        assert_eq!(f.phase, Phase::Measure);
        assert_eq!(
            f.detail,
            "exit code 1: RuntimeError: CUDA error: an illegal memory access was encountered"
        );
        assert!(j.metrics.is_empty());

        // The same program fails in warm-up when it gets three warm-ups.
        let outcome = fake.run("a2", FAILS_ON_THIRD_RUN, 3, &[], &[]).await;
        let j = judge(&outcome, "t", &Classifier::default(), 20.0);
        let f = j.failure.expect("failure");
        assert_eq!(f.phase, Phase::Warmup);
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
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        assert!(
            read_values(&path, deadline).is_err_and(
                |e| e.starts_with("is ") && e.ends_with(" bytes, over the limit of 8 MiB")
            ),
        );
        std::fs::write(&path, "[1, 2, [3]]").expect("write");
        assert_eq!(read_values(&path, deadline), Ok(vec![1.0, 2.0, 3.0]));
        assert!(
            read_values(&dir.path().join("absent.json"), deadline)
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
