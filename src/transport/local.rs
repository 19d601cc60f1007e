//! The local machine as a transport ([`LocalTransport`]), and running a
//! command here: `sh -c` in its own process group, so that a timeout or
//! Ctrl-C kills the trial and everything it started.
//!
//! The group dies with the launcher too. One small guard shell per
//! launcher process blocks reading a pipe whose writers are the launcher
//! and runs that are starting. Each run's `sh` leads its own group and,
//! before the trial's command, writes `+ <its pid>` to the guard on its
//! standard input, then points its standard input at `/dev/null`; the
//! launcher writes `- <pid>` once the run is over and its group killed.
//! When the launcher exits, however it dies (SIGKILL included), the kernel
//! closes its end of the pipe; once every starting run has registered (and
//! closed its copy), the guard reads end-of-file and kills every group still
//! registered (SIGTERM, SIGKILL 2 s later). A run registers itself, so there
//! is no moment at which the launcher could die with a run the guard does
//! not know of. One guard per launcher rather than one per run saves a
//! process start and a reap per run, a third of a no-op trial's cost.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::attempt::{MAX_OUTPUT_BYTES, MAX_RESULT_BYTES};
use super::{
    AttemptOutcome, AttemptSpec, CheckpointStore, Ended, FileError, ResultError, Transport,
    TransportError, checkpoint,
};
use crate::decide::gate::{self, MAX_VALUE_FILE_BYTES};
use crate::fingerprint::{self, Fingerprint};
use crate::ledger::checkpoint::Claim;
use crate::ledger::records::ExitInfo;
use crate::safe_read;
use crate::scrub;
use crate::trial::Phase;

/// The local machine as a transport.
pub struct LocalTransport {
    /// Root under which each attempt gets a fresh directory.
    pub work_root: PathBuf,
    pub keep_workdirs: bool,
}

/// Bytes kept from the end of stdout and stderr.
pub const TAIL_BYTES: usize = 8 * 1024;

/// Bytes kept from the start of stderr when it is longer than the tail
/// (a compile error is often followed by a long traceback).
pub const HEAD_BYTES: usize = 4 * 1024;

/// Grace between SIGTERM and SIGKILL when a trial is stopped.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// The launcher's guard (see the module documentation): keeps the set of
/// running groups (`+ <pgid>` adds, `- <pgid>` removes; pids are digits, so
/// the patterns below match them literally) and, at end-of-file, kills
/// every group left in it. It runs in a group of its own and ignores the
/// signals a terminal or a group kill would send it.
const GUARD: &str = r#"trap '' TERM INT HUP PIPE
g=' '
while read -r tc_op tc_p; do
  case $tc_op in
    +) g="$g$tc_p " ;;
    -) case $g in *" $tc_p "*) g="${g%% $tc_p *} ${g#* $tc_p }" ;; esac ;;
  esac
done
[ "$g" = ' ' ] && exit 0
for p in $g; do kill -s TERM -- "-$p" 2>/dev/null; done
sleep 2
for p in $g; do kill -s KILL -- "-$p" 2>/dev/null; done
"#;

/// What a run's `sh` does before the trial's command: register its group
/// with the guard on standard input (a guard that is gone costs the run
/// nothing: SIGPIPE is ignored for that one write, and its error
/// silenced), then give the trial `/dev/null` as standard input. One line,
/// so the trial's own line numbers (in `sh` error messages) stay as written.
const REGISTER: &str =
    r#"trap '' PIPE; printf '+ %s\n' "$$" >&0 2>/dev/null; trap - PIPE; exec </dev/null; "#;

/// The launcher's guard process and its pipe's write end.
struct Guard {
    child: std::process::Child,
    pipe: std::process::ChildStdin,
}

/// This launcher's guard, started with the first run.
static LAUNCH_GUARD: Mutex<Option<Guard>> = Mutex::new(None);

impl Guard {
    fn spawn() -> io::Result<Guard> {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(GUARD)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        match child.stdin.take() {
            Some(pipe) => Ok(Guard { child, pipe }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(io::Error::other("the guard shell has no standard input"))
            }
        }
    }

    /// A write end of the guard's pipe for a run's standard input, starting
    /// a guard (again, if the last one is gone) when needed.
    fn writer() -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        let mut slot = LAUNCH_GUARD
            .lock()
            .map_err(|_| io::Error::other("the guard's lock is poisoned"))?;
        if let Some(g) = slot.as_mut()
            && !matches!(g.child.try_wait(), Ok(None))
        {
            *slot = None;
        }
        if slot.is_none() {
            *slot = Some(Guard::spawn()?);
        }
        match slot.as_ref() {
            Some(g) => g.pipe.as_fd().try_clone_to_owned(),
            None => Err(io::Error::other("no guard")),
        }
    }

    /// Tell the guard a group is over (it was killed just before).
    fn release(pgid: i32) {
        use std::io::Write;
        if let Ok(mut slot) = LAUNCH_GUARD.lock()
            && let Some(g) = slot.as_mut()
            && g.pipe.write_all(format!("- {pgid}\n").as_bytes()).is_err()
        {
            // Gone: the next run starts another.
            *slot = None;
        }
    }
}

/// A run's process group while it may hold processes: killed (SIGKILL)
/// and released from the guard when dropped, also when the run's future is
/// dropped half-way.
struct RunGroup(i32);

impl Drop for RunGroup {
    fn drop(&mut self) {
        kill_group(self.0, libc::SIGKILL);
        Guard::release(self.0);
    }
}

#[derive(Debug, Clone)]
pub struct RunSpec {
    pub command: String,
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Append the full stdout and stderr to these files (when asked to keep
    /// whole logs); tails are kept either way.
    pub log_files: Option<(PathBuf, PathBuf)>,
    /// Keep these streams (`stdout`, `stderr`) whole, up to
    /// [`MAX_RESULT_BYTES`], to read metrics from ([`RunOutput::streams`]).
    pub keep_streams: Vec<String>,
}

/// Most bytes of each stream kept in a full log.
pub const MAX_LOG_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    pub exit: ExitInfo,
    pub timed_out: bool,
    pub cancelled: bool,
    pub elapsed: Duration,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// The start of stderr (at most [`HEAD_BYTES`]) that the tail does not
    /// hold: empty unless stderr was longer than [`TAIL_BYTES`]; it never
    /// overlaps `stderr_tail`.
    pub stderr_head: String,
    /// The streams asked for whole ([`RunSpec::keep_streams`]), or why not
    /// (longer than the limit).
    pub streams: BTreeMap<String, Result<Vec<u8>, FileError>>,
}

impl RunOutput {
    /// What the classifier reads: the head and, after a `[...]` line, the
    /// tail (just the tail when there is no head).
    pub fn stderr_for_classifier(&self) -> String {
        join_head_tail(&self.stderr_head, &self.stderr_tail)
    }
}

/// Head and tail of a stream as one text, lines never joined across the
/// cut.
pub fn join_head_tail(head: &str, tail: &str) -> String {
    if head.is_empty() {
        tail.to_string()
    } else {
        format!("{head}\n[...]\n{tail}")
    }
}

/// A stream's first bytes, its last bytes, and how long it was; and all of
/// it, when kept whole (`None` again once it grows past the limit). The
/// head and the tail are kept `margin` bytes beyond [`HEAD_BYTES`] and
/// [`TAIL_BYTES`], so that `secrets` are scrubbed before they are cut
/// ([`scrub::cut_scrubbed`]).
#[derive(Default)]
struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: usize,
    whole: Option<Vec<u8>>,
    secrets: &'static [String],
    margin: usize,
}

impl Capture {
    /// A capture that also keeps the whole stream, up to
    /// [`MAX_RESULT_BYTES`].
    fn whole() -> Capture {
        Capture {
            whole: Some(Vec::new()),
            ..Capture::default()
        }
    }

    /// This capture, scrubbing `secrets` from its head and tail.
    fn scrubbing(self, secrets: &'static [String]) -> Capture {
        Capture {
            secrets,
            margin: scrub::margin(secrets),
            ..self
        }
    }

    /// The whole stream, or why it is not kept.
    fn whole_bytes(&self) -> Result<Vec<u8>, FileError> {
        match &self.whole {
            Some(b) => Ok(b.clone()),
            None => Err(FileError::TooLarge {
                bytes: self.total as u64,
                limit: MAX_RESULT_BYTES,
            }),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if let Some(w) = &mut self.whole {
            if (w.len() + bytes.len()) as u64 > MAX_RESULT_BYTES {
                self.whole = None;
            } else {
                w.extend_from_slice(bytes);
            }
        }
        let keep_head = HEAD_BYTES + self.margin;
        if self.head.len() < keep_head {
            let n = (keep_head - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
        }
        self.total += bytes.len();
        self.tail.extend_from_slice(bytes);
        let keep_tail = TAIL_BYTES + self.margin;
        if self.tail.len() > 2 * keep_tail {
            let cut = self.tail.len() - keep_tail;
            self.tail.drain(..cut);
        }
    }

    /// `(head, tail)`: the head's bytes that come before the tail's first
    /// byte, and the tail, secrets scrubbed before the cuts.
    fn texts(&self) -> (String, String) {
        scrub::cut_scrubbed(
            &self.head,
            &self.tail,
            self.total,
            HEAD_BYTES,
            TAIL_BYTES,
            self.secrets,
        )
    }

    #[cfg(test)]
    fn tail_text(&self) -> String {
        self.texts().1
    }

    #[cfg(test)]
    fn head_text(&self) -> String {
        self.texts().0
    }
}

/// `(head, tail)` texts of a stream of `total` bytes from its first and
/// last bytes (each [`scrub::margin`] bytes beyond [`HEAD_BYTES`] and
/// [`TAIL_BYTES`] when the stream has them), as a local capture gives them:
/// this process's secrets scrubbed before the cuts, and the head never
/// overlapping the tail.
pub fn head_and_tail(head: Vec<u8>, tail: Vec<u8>, total: usize) -> (String, String) {
    scrub::cut_scrubbed(
        &head,
        &tail,
        total,
        HEAD_BYTES,
        TAIL_BYTES,
        scrub::launcher_secrets(),
    )
}

fn spawn_capture<R: AsyncRead + Unpin + Send + 'static>(
    mut reader: R,
    buf: Arc<Mutex<Capture>>,
    log: Option<PathBuf>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut file = match &log {
            Some(p) => tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .await
                .ok(),
            None => None,
        };
        let mut logged: u64 = 0;
        let mut chunk = [0u8; 4096];
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut b) = buf.lock() {
                        b.push(&chunk[..n]);
                    }
                    if let Some(f) = file.as_mut()
                        && logged < MAX_LOG_BYTES
                    {
                        let keep = (MAX_LOG_BYTES - logged).min(n as u64) as usize;
                        if f.write_all(&chunk[..keep]).await.is_err() {
                            file = None;
                        }
                        logged += keep as u64;
                    }
                }
            }
        }
        if let Some(mut f) = file {
            let _ = f.flush().await;
        }
    })
}

/// `(head, tail)` of a captured stream.
fn texts(buf: &Arc<Mutex<Capture>>) -> (String, String) {
    buf.lock().map(|b| b.texts()).unwrap_or_default()
}

fn kill_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; it
        // has no memory-safety preconditions. Errors (group already gone)
        // are expected and ignored.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Run `/bin/sh -c command` and wait for it, its timeout or cancellation.
pub async fn run(spec: &RunSpec, cancel: &CancellationToken) -> io::Result<RunOutput> {
    let started = Instant::now();
    let guard_pipe = Guard::writer()?;
    // POSIX puts `sh` at /bin/sh; naming it saves a PATH search per trial.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("{REGISTER}{}", spec.command))
        .current_dir(&spec.dir)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::from(guard_pipe))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    // The group's id is its leader's pid. Killed and released whenever
    // this function returns, or its future is dropped.
    let group = RunGroup(child.id().map(|p| p as i32).unwrap_or(0));
    let pgid = group.0;
    let capture = |name: &str| {
        if spec.keep_streams.iter().any(|s| s == name) {
            Capture::whole()
        } else {
            Capture::default()
        }
        .scrubbing(scrub::launcher_secrets())
    };
    let out_buf = Arc::new(Mutex::new(capture("stdout")));
    let err_buf = Arc::new(Mutex::new(capture("stderr")));
    let (out_log, err_log) = match &spec.log_files {
        Some((o, e)) => (Some(o.clone()), Some(e.clone())),
        None => (None, None),
    };
    let readers = [
        child
            .stdout
            .take()
            .map(|s| spawn_capture(s, out_buf.clone(), out_log)),
        child
            .stderr
            .take()
            .map(|s| spawn_capture(s, err_buf.clone(), err_log)),
    ];
    let mut timed_out = false;
    let mut cancelled = false;
    let status = tokio::select! {
        status = child.wait() => status?,
        _ = tokio::time::sleep(spec.timeout) => {
            timed_out = true;
            stop(&mut child, pgid).await?
        }
        _ = cancel.cancelled() => {
            cancelled = true;
            stop(&mut child, pgid).await?
        }
    };
    // Whatever the trial left behind in its group goes too.
    drop(group);
    for r in readers.into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
    }
    let (_, stdout_tail) = texts(&out_buf);
    let (stderr_head, stderr_tail) = texts(&err_buf);
    let mut streams = BTreeMap::new();
    for (name, buf) in [("stdout", &out_buf), ("stderr", &err_buf)] {
        if spec.keep_streams.iter().any(|s| s == name) {
            let whole = buf
                .lock()
                .map_err(|_| FileError::NotKept)
                .and_then(|b| b.whole_bytes());
            streams.insert(name.to_string(), whole);
        }
    }
    Ok(RunOutput {
        exit: ExitInfo {
            code: status.code(),
            signal: status.signal(),
        },
        timed_out,
        cancelled,
        elapsed: started.elapsed(),
        stdout_tail,
        stderr_tail,
        stderr_head,
        streams,
    })
}

async fn stop(
    child: &mut tokio::process::Child,
    pgid: i32,
) -> io::Result<std::process::ExitStatus> {
    kill_group(pgid, libc::SIGTERM);
    match tokio::time::timeout(KILL_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            kill_group(pgid, libc::SIGKILL);
            child.wait().await
        }
    }
}

pub use crate::safe_read::size_label;

/// The contents of a regular file of at most `cap` bytes (see
/// [`crate::safe_read`]); a file that is not there `was not written`.
pub fn read_regular(
    path: &Path,
    cap: u64,
    deadline: std::time::Instant,
) -> Result<Vec<u8>, FileError> {
    safe_read::read_regular(path, cap, Some(deadline)).map_err(written)
}

/// The sha256 of a regular file of at most `cap` bytes, read in chunks.
pub fn sha256_regular(
    path: &Path,
    cap: u64,
    deadline: std::time::Instant,
) -> Result<String, FileError> {
    let mut hasher = Sha256::new();
    safe_read::read_chunks(path, cap, Some(deadline), |b| hasher.update(b)).map_err(written)?;
    Ok(hex::encode(hasher.finalize()))
}

/// Why a trial's file was not read, as its messages say it.
fn written(e: safe_read::Unreadable) -> FileError {
    match e {
        safe_read::Unreadable::Missing(_) => FileError::NotWritten,
        other => FileError::Unreadable(other),
    }
}

/// The numbers of a tolerance file (at most 8 MiB and
/// [`gate::MAX_VALUES`] numbers), or why they cannot be used.
pub fn read_values(path: &Path, deadline: std::time::Instant) -> Result<Vec<f64>, FileError> {
    let bytes = read_regular(path, MAX_VALUE_FILE_BYTES, deadline).map_err(|e| match e {
        FileError::NotWritten => FileError::ValuesNotWritten,
        e => e,
    })?;
    gate::parse_values(&bytes).map_err(FileError::Values)
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
        Err(FileError::NotWritten) => {}
        Err(why) => {
            let name = result_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            outcome.result_error = Some(ResultError::Unread { name, why });
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
    for name in &spec.result_files {
        outcome.result_files.insert(
            name.clone(),
            read_regular(&dir.join(name), MAX_RESULT_BYTES, deadline),
        );
    }
}

#[async_trait]
impl Transport for LocalTransport {
    async fn probe(&self, tools: &BTreeMap<String, String>) -> Result<Fingerprint, TransportError> {
        fingerprint::probe_local(tools)
            .await
            .map_err(|e| TransportError::Probe(e.into()))
    }

    fn trial_dir(&self, study: &str, trial_key: &str, attempt_id: &str) -> String {
        let short_key = &trial_key[..trial_key.len().min(16)];
        self.work_root
            .join(study)
            .join(format!("{short_key}-{attempt_id}"))
            .display()
            .to_string()
    }

    fn checkpoint_root(&self, study: &str) -> Option<PathBuf> {
        // Beside the attempts' directories (`<short key>-<attempt id>`),
        // which never take this name.
        Some(self.work_root.join(study).join("checkpoints"))
    }

    fn checkpoints(&self) -> Option<&dyn CheckpointStore> {
        Some(self)
    }

    async fn run_attempt(&self, spec: &AttemptSpec, cancel: &CancellationToken) -> AttemptOutcome {
        let started = std::time::Instant::now();
        let dir = PathBuf::from(&spec.trial_dir);
        let mut outcome = AttemptOutcome {
            trial_dir: Some(dir.display().to_string()),
            ..Default::default()
        };
        let result_path = PathBuf::from(&spec.result_path);
        let stale: Vec<PathBuf> = std::iter::once(result_path.clone())
            .chain(
                spec.outputs
                    .iter()
                    .chain(&spec.result_files)
                    .map(|name| dir.join(name)),
            )
            .collect();
        // The directory and the first run's clean-up in one blocking call
        // (a checkpoint is restored before the clean-up, so not then).
        let cleared = spec.checkpoint.is_none();
        let (d, first_stale) = (dir.clone(), stale.clone());
        let made = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&d)?;
            if cleared {
                for p in &first_stale {
                    let _ = std::fs::remove_file(p);
                }
            }
            Ok(())
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r: std::io::Result<()>| r);
        if let Err(e) = made {
            outcome.end(Ended::SetupFailed(TransportError::TrialDir {
                path: dir.display().to_string(),
                source: e.into(),
            }));
            return outcome;
        }
        let runs = (0..spec.warmup)
            .map(|_| Phase::Warmup)
            .chain(std::iter::once(Phase::Measure));
        // Removed with the results read, in the same blocking call.
        let mut dir_removed = false;
        for (n, phase) in runs.enumerate() {
            // Every run starts from the committed checkpoint: a warm-up
            // must not advance the state the counted run resumes from.
            if let Some(c) = spec.checkpoint.clone() {
                let restored = tokio::task::spawn_blocking(move || checkpoint::restore(&c))
                    .await
                    .map_err(std::io::Error::other)
                    .and_then(|r| r);
                if let Err(e) = restored {
                    outcome.end(Ended::SetupFailed(TransportError::CheckpointDir(e.into())));
                    break;
                }
            }
            // Nothing a previous run wrote may pass for this run's output.
            if n > 0 || !cleared {
                let again = stale.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    for p in &again {
                        let _ = std::fs::remove_file(p);
                    }
                })
                .await;
            }
            let mut env = spec.env.clone();
            env.push(("TUNECTL_PHASE".into(), phase.as_str().into()));
            // Kept directories hold what the runs printed too.
            let log_files = (spec.keep_logs || self.keep_workdirs).then(|| {
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
                keep_streams: spec.streams.clone(),
            };
            let out = match run(&run_spec, cancel).await {
                Ok(o) => o,
                Err(e) => {
                    outcome.end(Ended::SetupFailed(TransportError::StartSh(e.into())));
                    break;
                }
            };
            let ok = out.exit.code == Some(0) && !out.timed_out && !out.cancelled;
            if out.cancelled {
                outcome.end(Ended::Cancelled);
            }
            // Metrics are read from the counted run's streams alone.
            let mut out = out;
            outcome.streams = std::mem::take(&mut out.streams);
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
                // A run that went well leaves nothing else to read here
                // (no logs kept): its directory goes now.
                let remove = !spec.keep_logs && !self.keep_workdirs;
                let (got, removed) = tokio::task::spawn_blocking(move || {
                    let mut got = AttemptOutcome::default();
                    collect_files(&d, &r, &sp, deadline, &mut got);
                    (got, remove && std::fs::remove_dir_all(&d).is_ok())
                })
                .await
                .unwrap_or_default();
                dir_removed = removed;
                outcome.result = got.result;
                outcome.result_error = got.result_error;
                outcome.outputs = got.outputs;
                outcome.output_values = got.output_values;
                outcome.result_files = got.result_files;
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
                    read_regular(&path, MAX_LOG_BYTES + 1024, deadline)
                })
                .await;
                if let Ok(Ok(bytes)) = read {
                    outcome.logs.insert(name.to_string(), bytes);
                }
            }
        }
        let succeeded = outcome.ended == Ended::Ran
            && !outcome.failed_in_warmup
            && outcome
                .run
                .as_ref()
                .is_some_and(|r| r.exit.code == Some(0) && !r.timed_out);
        if succeeded && !self.keep_workdirs {
            if !dir_removed {
                let _ = tokio::fs::remove_dir_all(&dir).await;
            }
            outcome.trial_dir = None;
        }
        outcome
    }
}

#[async_trait]
impl CheckpointStore for LocalTransport {
    fn root(&self, study: &str) -> Option<String> {
        Transport::checkpoint_root(self, study).map(|root| root.display().to_string())
    }

    async fn working_copies(&self, root: &str) -> Result<Vec<(String, String)>, TransportError> {
        checkpoint::working_copies_here(root).await
    }

    async fn claim(&self, base: &str) -> Result<Option<Claim>, TransportError> {
        checkpoint::claim_here(base).await
    }

    async fn install(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
        archive: &mut (dyn AsyncRead + Send + Unpin),
    ) -> Result<(), TransportError> {
        checkpoint::install_from(PathBuf::from(base), attempt_id, claim, archive).await
    }

    async fn commit(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
    ) -> Result<(), TransportError> {
        checkpoint::commit_here(base, attempt_id, claim).await
    }

    async fn size(&self, base: &str) -> Result<u64, TransportError> {
        checkpoint::size_here(base).await
    }

    async fn export(
        &self,
        base: &str,
        sink: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
    ) -> Result<(), TransportError> {
        checkpoint::pack_to(PathBuf::from(base), sink).await
    }

    async fn discard(&self, base: &str, attempt_id: &str) {
        checkpoint::discard_here(base, attempt_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::gate::Classifier;
    use crate::ledger::records::{AttemptStatus, FailureClass};
    use crate::transport::attempt::{RESULT_FILE, judge};

    #[test]
    fn head_never_overlaps_tail() {
        let mut c = Capture::default();
        c.push(b"short\n");
        assert_eq!(c.head_text(), "");
        assert_eq!(c.tail_text(), "short\n");

        // Just over the tail: the head holds only the bytes the tail lost.
        let mut c = Capture::default();
        c.push(b"ab");
        c.push(&vec![b'x'; TAIL_BYTES]);
        assert_eq!(c.head_text(), "ab");
        assert_eq!(c.tail_text().len(), TAIL_BYTES);

        // Long: head and tail are the two ends, in small reads.
        let mut c = Capture::default();
        let text: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for piece in text.chunks(777) {
            c.push(piece);
        }
        assert_eq!(c.head_text().as_bytes(), &text[..HEAD_BYTES]);
        assert_eq!(c.tail_text().as_bytes(), &text[text.len() - TAIL_BYTES..]);
        assert_eq!(c.total, text.len());
    }

    /// A secret printed across the tail's cut or the head's, in reads of
    /// any size: the capture keeps enough beyond each cut to see it whole,
    /// and no part of it is kept unscrubbed.
    #[test]
    fn a_capture_scrubs_a_secret_before_cutting_it() {
        let secrets: &'static [String] = Box::leak(Box::new(["tok-SECRET-0123456789".to_string()]));
        let secret = secrets[0].as_bytes();
        let total = 20_000;
        for at in (HEAD_BYTES - secret.len()..HEAD_BYTES + 1)
            .chain(total - TAIL_BYTES - secret.len()..total - TAIL_BYTES + 1)
        {
            let mut text = vec![b'.'; total];
            text[at..at + secret.len()].copy_from_slice(secret);
            for read in [1, 7, 777, 4096, 65536] {
                let mut c = Capture::default().scrubbing(secrets);
                for piece in text.chunks(read) {
                    c.push(piece);
                }
                let (head, tail) = c.texts();
                for (name, kept) in [("head", &head), ("tail", &tail)] {
                    let rest = kept.replace("[redacted]", "");
                    assert!(
                        rest.bytes().all(|b| b == b'.'),
                        "{name} keeps part of the secret at {at} (reads of {read}): {rest:?}"
                    );
                }
                let straddles = |cut: usize| at < cut && cut < at + secret.len();
                if straddles(HEAD_BYTES) {
                    assert!(head.ends_with("[redacted]"), "at {at}: {head:?}");
                }
                if straddles(total - TAIL_BYTES) {
                    assert!(tail.starts_with("[redacted]"), "at {at}: {tail:?}");
                }
            }
        }
    }

    /// A stream kept whole stays whole up to the limit, and past it says
    /// how long it was instead.
    #[test]
    fn a_whole_stream_is_kept_up_to_the_limit() {
        let mut c = Capture::whole();
        let chunk = vec![b'7'; 1024 * 1024];
        for _ in 0..8 {
            c.push(&chunk);
        }
        assert_eq!(c.whole_bytes().map(|b| b.len()), Ok(8 * 1024 * 1024));
        c.push(b"x");
        assert_eq!(
            c.whole_bytes().map_err(|e| e.to_string()),
            Err("is 8388609 bytes, over the limit of 8 MiB".to_string())
        );
        // The tail is kept as always.
        assert_eq!(c.tail_text().len(), TAIL_BYTES);
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
                result_files: Vec::new(),
                streams: Vec::new(),
                slot: 0,
                trial_dir,
                result_path,
                keep_logs: true,
                checkpoint: None,
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
        assert_eq!(f.phase, crate::trial::Phase::Measure);
        assert_eq!(
            f.detail,
            "exit code 1: RuntimeError: CUDA error: an illegal memory access was encountered"
        );
        assert!(j.metrics.is_empty());

        // The same program fails in warm-up when it gets three warm-ups.
        let outcome = fake.run("a2", FAILS_ON_THIRD_RUN, 3, &[], &[]).await;
        let j = judge(&outcome, "t", &Classifier::default(), 20.0);
        let f = j.failure.expect("failure");
        assert_eq!(f.phase, crate::trial::Phase::Warmup);
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
        assert!(read_values(&path, deadline).is_err_and(|e| {
            let e = e.to_string();
            e.starts_with("is ") && e.ends_with(" bytes, over the limit of 8 MiB")
        }),);
        std::fs::write(&path, "[1, 2, [3]]").expect("write");
        assert_eq!(read_values(&path, deadline), Ok(vec![1.0, 2.0, 3.0]));
        assert!(
            read_values(&dir.path().join("absent.json"), deadline)
                .is_err_and(|e| e.to_string().starts_with("cannot be read"))
        );
    }

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    fn spec_in(dir: &Path, command: &str) -> RunSpec {
        RunSpec {
            command: command.into(),
            dir: dir.to_path_buf(),
            env: vec![],
            timeout: Duration::from_secs(30),
            log_files: None,
            keep_streams: vec![],
        }
    }

    /// The registration happens before the trial's command and leaves no
    /// trace in what the trial sees: stdin is `/dev/null`, its own line
    /// numbers are as written, and whatever it left in its group is killed
    /// when the run ends.
    #[tokio::test]
    async fn a_run_sees_dev_null_and_its_leftovers_die() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cancel = CancellationToken::new();
        let cmd = "readlink /proc/$$/fd/0; cat; echo \"cat=$?\"; \
                   sleep 30 & echo \"bg=$!\"\nno_such_command_here";
        let out = run(&spec_in(dir.path(), cmd), &cancel).await.expect("run");
        assert_eq!(out.exit.code, Some(127), "{out:?}");
        let lines: Vec<&str> = out.stdout_tail.lines().collect();
        assert_eq!(lines[..2], ["/dev/null", "cat=0"], "{out:?}");
        assert!(
            out.stderr_tail.contains(" 2: no_such_command_here"),
            "{out:?}"
        );
        let bg: i32 = lines[2]
            .strip_prefix("bg=")
            .and_then(|p| p.parse().ok())
            .expect("bg pid");
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(bg) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(bg), "the run's background sleep {bg} outlived it");
    }

    /// The guard's bookkeeping in the shell that runs it: at end-of-file
    /// it kills the groups registered and not released, and only those.
    #[test]
    fn the_guard_kills_what_is_still_registered_at_end_of_file() {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let group = || {
            std::process::Command::new("sleep")
                .arg("30")
                .process_group(0)
                .spawn()
                .expect("sleep")
        };
        let (mut a, mut b, mut c) = (group(), group(), group());
        let mut guard = Guard::spawn().expect("guard");
        let line = format!("+ {}\n+ {}\n+ {}\n- {}\n", a.id(), b.id(), c.id(), b.id());
        guard.pipe.write_all(line.as_bytes()).expect("write");
        drop(guard.pipe);
        let status = guard.child.wait().expect("guard ends");
        assert!(status.success(), "{status:?}");
        for (p, name) in [(&mut a, "a"), (&mut c, "c")] {
            let s = p.wait().expect("wait");
            assert_eq!(s.signal(), Some(libc::SIGTERM), "{name}: {s:?}");
        }
        assert!(matches!(b.try_wait(), Ok(None)), "released b was killed");
        let _ = b.kill();
        let _ = b.wait();
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

    /// The counted run's whole stdout and `result:`'s files come back,
    /// and extraction reads them; a file only a warm-up wrote does not
    /// count.
    #[tokio::test]
    async fn result_sources_come_back_whole() {
        use crate::spec::result::{MetricSource, ResultSpec, Source};
        let fake = Fake::new();
        let trial_dir = fake
            .transport
            .trial_dir("study", "0123456789abcdef0123", "e1");
        let script = "echo \"tok/s: 812\"; i=0; while [ $i -lt 2000 ]; do echo 'filler....'; i=$((i+1)); done\n\
                      echo 'tok/s: 815'\n\
                      [ \"$TUNECTL_PHASE\" = warmup ] && echo 'ms\n3' > w.csv\n\
                      printf 'ms\\n1.5\\n2\\n' > r.csv\n";
        let prog = fake.root.path().join("e1.sh");
        std::fs::write(&prog, script).expect("write program");
        let spec = AttemptSpec {
            study_id: "study".into(),
            trial_key: "0123456789abcdef0123".into(),
            attempt_id: "e1".into(),
            command: format!("sh {}", prog.display()),
            env: Vec::new(),
            timeout: std::time::Duration::from_secs(20),
            warmup: 1,
            outputs: Vec::new(),
            tolerance_files: Vec::new(),
            result_files: vec!["r.csv".into(), "w.csv".into()],
            streams: vec!["stdout".into()],
            slot: 0,
            result_path: format!("{trial_dir}/{RESULT_FILE}"),
            trial_dir,
            keep_logs: false,
            checkpoint: None,
        };
        let outcome = fake
            .transport
            .run_attempt(&spec, &CancellationToken::new())
            .await;
        assert_eq!(outcome.result_files["r.csv"], Ok(b"ms\n1.5\n2\n".to_vec()));
        assert_eq!(outcome.result_files["w.csv"], Err(FileError::NotWritten));
        let source = |from: Source| MetricSource { from, scale: None };
        let mut result = ResultSpec {
            preset: None,
            metrics: [
                (
                    "t".to_string(),
                    source(Source::Stdout {
                        regex: r"tok/s: (\d+)".into(),
                    }),
                ),
                (
                    "ms".to_string(),
                    source(Source::Csv {
                        file: "r.csv".into(),
                        column: "ms".into(),
                    }),
                ),
            ]
            .into(),
        };
        let j = crate::transport::attempt::judge_with(
            &outcome,
            "t",
            Some(&result),
            &Classifier::default(),
            20.0,
        );
        assert_eq!(j.status, AttemptStatus::Ok, "{:?}", j.failure);
        assert_eq!(j.metrics["t"], vec![812.0, 815.0]);
        assert_eq!(j.metrics["ms"], vec![1.5, 2.0]);
        // The warm-up's file is gone: a metric read from it is no result.
        result.metrics.insert(
            "ms".into(),
            source(Source::Csv {
                file: "w.csv".into(),
                column: "ms".into(),
            }),
        );
        let j = crate::transport::attempt::judge_with(
            &outcome,
            "t",
            Some(&result),
            &Classifier::default(),
            20.0,
        );
        let f = j.failure.expect("failure");
        assert_eq!(f.class, FailureClass::NoResult);
        assert_eq!(f.detail, "result.ms: w.csv was not written");
    }
}
