//! What goes wrong in a transport, as data: [`TransportError`] (reaching a
//! host, running something there, reading its report, Slurm's client
//! commands, checkpoints), and what a trial left that could not be used:
//! [`FileError`] (a file or stream not read back), [`ResultError`] (no
//! usable metrics) and [`ExtractError`] (a metric of `result:` not read).
//!
//! Every message (`Display`) is worded as the launcher has always worded
//! it: a lost attempt's `lost_reason`, a failure's detail and a host's
//! warnings read the same as before these types.

use std::fmt;
use std::sync::Arc;

use crate::decide::gate::ValuesError;
use crate::fingerprint::FingerprintError;
use crate::safe_read::{Unreadable, size_label};

/// An error that is not `Clone` (an I/O error...), shared by the clones of
/// what holds it (an outcome, a launch event); two are equal when they say
/// the same.
#[derive(Debug)]
pub struct Shared<E>(pub Arc<E>);

/// An I/O error, shared.
pub type IoError = Shared<std::io::Error>;

impl<E> Clone for Shared<E> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<E> From<E> for Shared<E> {
    fn from(e: E) -> Self {
        Shared(Arc::new(e))
    }
}

impl<E: fmt::Display> fmt::Display for Shared<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<E: std::error::Error> std::error::Error for Shared<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl<E: fmt::Display> PartialEq for Shared<E> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

/// A Slurm client command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmCommand {
    Sbatch,
    Squeue,
    Scancel,
    Sinfo,
}

impl fmt::Display for SlurmCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SlurmCommand::Sbatch => "sbatch",
            SlurmCommand::Squeue => "squeue",
            SlurmCommand::Scancel => "scancel",
            SlurmCommand::Sinfo => "sinfo",
        })
    }
}

/// Why something a transport does failed, or why an attempt is lost.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransportError {
    // Reaching a host.
    /// Connecting to an SSH host (or finding its work directory) failed.
    #[error("cannot connect to {host}: {cause}")]
    Connect {
        host: String,
        #[source]
        cause: Box<TransportError>,
    },
    /// The host is down: what needs its connection waits for it.
    #[error("host `{host}` is not connected")]
    NotConnected { host: String },
    /// No connection was ever made, and no try failed yet.
    #[error("not connected")]
    NeverConnected,
    /// The master connection's check failed.
    #[error("the connection ended")]
    ConnectionEnded,
    /// The connection was lost during an attempt (doing `cause`).
    #[error("the connection to the host was lost{}", in_parens(.cause))]
    ConnectionLost { cause: Option<Box<TransportError>> },
    /// What `openssh` said (its error and their sources, on one line).
    #[error("{detail}")]
    Ssh { detail: String },
    /// A session of the master connection could not start.
    #[error("cannot start a session: {detail}")]
    SessionStart { detail: String },
    /// A session started without the standard stream(s) asked for.
    #[error("the session has no standard {missing}")]
    NoStdio { missing: &'static str },
    /// The host's sessions are closed (the transport is shutting down).
    #[error("semaphore closed")]
    SessionsClosed,
    /// The host did not say where its work directory is.
    #[error("cannot find a work directory on the host (got `{got}`; is $HOME set?)")]
    NoWorkdir { got: String },
    /// The login host did not say where its home directory is.
    #[error("cannot find the home directory (got `{got}`)")]
    NoHome { got: String },

    // Running something on a host.
    /// A small script on the host exited unsuccessfully.
    #[error("remote script failed ({status}): {stderr}")]
    RemoteScript { status: String, stderr: String },
    /// A streaming command on the host (a checkpoint's `tar`) exited
    /// unsuccessfully.
    #[error("the host's command failed ({status}): {stderr}")]
    HostCommand { status: String, stderr: String },
    /// A command gave no answer within its limit.
    #[error("no answer within {secs} s")]
    NoAnswer { secs: u64 },
    /// Writing a script (`what`: `script`, `agent`) to a session failed.
    #[error("cannot send the {what}: {source}")]
    CannotSend { what: &'static str, source: IoError },
    /// Writing an attempt (`what`: `the attempt`, `the attempt script`) to
    /// its session failed.
    #[error("sending {what}: {source}")]
    Sending { what: &'static str, source: IoError },
    /// Copying an archive to or from a host's command failed.
    #[error(transparent)]
    Transfer(IoError),

    // A persistent agent.
    #[error("reading from the agent: {0}")]
    AgentRead(#[source] IoError),
    #[error("the agent ended without greeting")]
    AgentSilent,
    #[error("the agent greeted with `{got}`")]
    AgentGreeting { got: String },
    #[error("the agent did not greet within {secs} s")]
    AgentSlow { secs: u64 },
    /// An agent failed to start, and what its shell printed on stderr.
    #[error("{cause}: {stderr}")]
    AgentStderr {
        #[source]
        cause: Box<TransportError>,
        stderr: String,
    },
    /// The agent's input could not be written (doing `cause`).
    #[error("the host's agent ended ({cause})")]
    AgentEnded { cause: Box<TransportError> },
    /// The agent's shell died during an attempt (its stderr, if any).
    #[error("the host's agent ended during the attempt{}", colon(.stderr))]
    AgentDied { stderr: String },
    /// The agent stopped sending frames without ending (its stderr, if
    /// any).
    #[error("the host's agent stopped reporting{}", colon(.stderr))]
    AgentStopped { stderr: String },

    // The wrapper and its report.
    /// A reply that did not read.
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the host's wrapper ended without reporting")]
    WrapperSilent,
    #[error("the host's wrapper failed: {stderr}")]
    WrapperFailed { stderr: String },
    #[error("the host's wrapper ran nothing")]
    RanNothing,
    /// The wrapper's `setup` frame: why the attempt could not start, in
    /// the host's words.
    #[error("{0}")]
    HostSetup(String),
    /// The host could not hash a declared output.
    #[error(
        "cannot digest output `{output}` on the host (got `{got}`; it needs sha256sum, shasum or openssl)"
    )]
    NoDigest { output: String, got: String },
    /// An environment name a shell cannot export.
    #[error("`{name}` is not a valid environment variable name")]
    EnvName { name: String },

    // This machine.
    #[error("cannot create trial directory {path}: {source}")]
    TrialDir { path: String, source: IoError },
    #[error("cannot create {path}: {source}")]
    CreateDir { path: String, source: IoError },
    #[error("cannot write {path}: {source}")]
    WriteFile { path: String, source: IoError },
    /// A trial's `sh` could not start.
    #[error("cannot start `sh`: {0}")]
    StartSh(#[source] IoError),
    /// A client command's `/bin/sh` could not run.
    #[error("cannot run /bin/sh: {0}")]
    RunSh(#[source] IoError),
    /// A client command here exited unsuccessfully.
    #[error("{stderr} ({status})")]
    LocalCommand { status: String, stderr: String },
    /// A blocking task panicked or was cancelled.
    #[error("{detail}")]
    Task { detail: String },
    /// The fingerprint probe (its script, or running it here).
    #[error(transparent)]
    Probe(Shared<FingerprintError>),
    /// A host that was down answers, but its probe failed.
    #[error("answers but its probe failed: {0}")]
    ProbeFailed(#[source] Box<TransportError>),

    // Checkpoints.
    /// A run's checkpoint directory could not be restored.
    #[error("cannot prepare the checkpoint directory: {0}")]
    CheckpointDir(#[source] IoError),
    /// The committed state could not be packed.
    #[error("cannot pack the checkpoint: {0}")]
    Pack(#[source] IoError),
    /// Installing, committing or measuring a checkpoint here failed.
    #[error(transparent)]
    Checkpoint(IoError),
    #[error("the host did not say the archive's size")]
    NoArchiveSize,
    /// A claim or manifest could not be written as JSON.
    #[error("{detail}")]
    Encode { detail: String },

    // Slurm.
    /// A client command failed.
    #[error("{command} failed: {cause}")]
    Slurm {
        command: SlurmCommand,
        #[source]
        cause: Box<TransportError>,
    },
    /// `sbatch --parsable` answered something else than a job id.
    #[error("sbatch answered `{answer}`, not a job id")]
    NotAJobId { answer: String },
    /// Finding the jobs of earlier launchers failed.
    #[error("cannot list the study's jobs: {0}")]
    ListJobs(#[source] Box<TransportError>),
    /// A value pasted into the batch script holds a control character.
    #[error(
        "{what} `{}` contains a control character; it would add a line to the batch script",
        .value.escape_debug()
    )]
    ControlChar { what: &'static str, value: String },
    #[error("the batch template does not parse: {detail}")]
    TemplateParse { detail: String },
    #[error("cannot render the batch template: {detail}")]
    TemplateRender { detail: String },
    /// A probe job ended (in `state`; `None`: it vanished from the queue)
    /// without a fingerprint.
    #[error(
        "the probe job {job} ended ({}) without a fingerprint",
        .state.as_deref().unwrap_or("vanished")
    )]
    ProbeJobEnded { job: String, state: Option<String> },
    /// A probe job did not run in time.
    #[error("the probe job {job} did not run within {secs} s (state {state})")]
    ProbeJobWaiting {
        job: String,
        secs: u64,
        state: String,
    },
    #[error("no node of this type is up")]
    NoNodeUp,
    /// No node type of a mixed partition answered: each type (described)
    /// and why.
    #[error(
        "no node type of the partition answered its probe: {}",
        each_left_out(.left_out)
    )]
    NoNodeType {
        left_out: Vec<(String, TransportError)>,
    },
    /// `sinfo` lists no node of a steered part's class.
    #[error("slurm: no node of the class is listed ({})", .nodes.join(", "))]
    ClassUnlisted { nodes: Vec<String> },
    /// Every node of a steered part's class is down (`node STATE` each).
    #[error("slurm: every node of the class is down ({})", .states.join(", "))]
    ClassDown { states: Vec<String> },
    /// A task waiting in the queue was given up (why).
    #[error("{0}; the task was waiting in the queue")]
    QueuedTask(Box<TransportError>),
    #[error("slurm: the launcher stopped watching the task")]
    Unwatched,
    /// This launcher cancelled the task.
    #[error("stopped by the launcher")]
    StoppedByLauncher,
    #[error("slurm: the task was cancelled outside tunectl{}", on_node(.node))]
    CancelledOutside { node: String },
    #[error("slurm: the task vanished from the queue without a report")]
    Vanished,
    /// A task ended without reporting, in a state that is not the trial's
    /// fault.
    #[error("slurm: {state}{}", on_node(.node))]
    TaskEnded { state: String, node: String },
    /// A task lost (`cause`) whose report did not read either.
    #[error("{cause}; its report: {report}")]
    BadReport {
        cause: Box<TransportError>,
        report: WireError,
    },
    /// A task ran on a node of another host class than its part's.
    #[error(
        "slurm: ran on a node of another host class{}: {got} (expected {expected}){}",
        node_in_parens(.node),
        next_step(.node, *.steered)
    )]
    OtherClass {
        node: String,
        got: String,
        expected: String,
        /// The part keeps the node out of its jobs from now on.
        steered: bool,
    },
}

/// A reply of the host's wrapper that did not read (see
/// [`super::wire`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    #[error("reading from the host: {0}")]
    Read(#[source] IoError),
    /// A header line over the limit (its start).
    #[error("unexpected line from the host's wrapper: `{start}` (longer than {limit} bytes)")]
    LongLine { start: String, limit: usize },
    /// A header that is not a frame (its start).
    #[error("unexpected line from the host's wrapper: `{line}`")]
    UnexpectedLine { line: String },
    #[error("the reply for `{tag}` announces {len} bytes, more than the {limit} a report may hold")]
    TooLong {
        tag: String,
        len: usize,
        limit: usize,
    },
    #[error("the reply for `{tag}` was cut short: {source}")]
    CutShort { tag: String, source: IoError },
    /// A file's body not followed by its newline.
    #[error("the reply for `{tag}` is garbled")]
    Garbled { tag: String },
}

/// Why a file or stream a trial left was not read back (the messages
/// follow the file's name: "declared output `x` was not written").
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FileError {
    #[error("was not written")]
    NotWritten,
    #[error("is {bytes} bytes, over the limit of {}", size_label(*.limit))]
    TooLarge { bytes: u64, limit: u64 },
    /// Refused (not a regular file, too large...) or not read, here.
    #[error("{0}")]
    Unreadable(Unreadable),
    /// The host's own words for why it did not send it.
    #[error("{0}")]
    Host(String),
    /// A stream whose capture could not be taken.
    #[error("could not be kept")]
    NotKept,
    /// A tolerance file that is not there.
    #[error("cannot be read: it was not written")]
    ValuesNotWritten,
    /// A tolerance file sent over its limit.
    #[error("over the limit of {}", size_label(*.limit))]
    ValuesTooLarge { limit: u64 },
    /// A tolerance file that is not an array of numbers.
    #[error("{0}")]
    Values(ValuesError),
    /// Not among what the transport brought back.
    #[error("was not brought back")]
    NotBroughtBack,
}

/// Why a run that exited 0 has no usable metrics.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResultError {
    #[error("the result file is not valid JSON: {detail}")]
    NotJson { detail: String },
    #[error("the result file must hold one JSON object")]
    NotObject,
    #[error("the result has no `metrics` object")]
    NoMetrics,
    #[error("metric `{name}` must be a number or an array of numbers")]
    NotNumbers { name: String },
    #[error("metric `{name}` has no finite samples")]
    NoFiniteSamples { name: String },
    #[error("`digest` must be a string")]
    DigestNotString,
    #[error("exit 0 but nothing written to $TUNECTL_RESULT")]
    NotWritten,
    /// `$TUNECTL_RESULT` (named) is there but was not read.
    #[error("the result file `{name}` {why}")]
    Unread { name: String, why: FileError },
    /// A sample a ratio cannot use.
    #[error(
        "metric {name}: sample {} {}; speedups are ratios",
        shown(*.sample),
        unusable(*.sample)
    )]
    Unusable { name: String, sample: f64 },
    #[error(transparent)]
    Extract(#[from] ExtractError),
}

/// The first metric of `result:` that could not be read, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("result.{metric}: {why}")]
pub struct ExtractError {
    pub metric: String,
    pub why: Box<SourceError>,
}

/// Why a metric's source gave no samples (each message names the file or
/// stream first).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceError {
    /// The file or stream `name` was not brought back.
    #[error("{name} {why}")]
    NotRead { name: String, why: FileError },
    #[error("{stream}: invalid regex: {detail}")]
    Regex { stream: String, detail: String },
    #[error("{stream}: '{text}' matched by '{regex}' is not a number")]
    MatchNotNumber {
        stream: String,
        text: String,
        regex: String,
    },
    #[error("{stream}: no match for '{regex}'")]
    NoMatch { stream: String, regex: String },
    #[error("{file}: not a CSV file: {detail}")]
    NotCsv { file: String, detail: String },
    #[error("{file}: no column '{column}' (columns: {})", .columns.join(", "))]
    NoColumn {
        file: String,
        column: String,
        columns: Vec<String>,
    },
    /// A cell (row counted from 1) that is not a number.
    #[error("{file}: column '{column}', row {row}: '{cell}' is not a number")]
    CellNotNumber {
        file: String,
        column: String,
        row: usize,
        cell: String,
    },
    #[error("{file}: column '{column}' has no rows")]
    NoRows { file: String, column: String },
    #[error("{file}: not valid JSON: {detail}")]
    NotJson { file: String, detail: String },
    /// The JSON path (as written) does not select what it should.
    #[error("{file}: {path}: {why}")]
    Path {
        file: String,
        path: String,
        why: PathError,
    },
    #[error("{file}: {path}: selects no numbers")]
    NoNumbers { file: String, path: String },
    /// A sample (scaled) that is not a positive normal number; `described`
    /// describes where it was read.
    #[error("{described}: sample {sample} is not a positive normal number")]
    Sample { described: String, sample: f64 },
}

/// Where a JSON path stops (`at`: where in the document, as
/// `results[0].times`, or `the document`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PathError {
    #[error("{at} is {kind}, not an object")]
    NotObject { at: String, kind: &'static str },
    /// A key not there (and the first 20 keys that are).
    #[error("{at} has no key '{key}' (keys: {})", .keys.join(", "))]
    NoKey {
        at: String,
        key: String,
        keys: Vec<String>,
    },
    #[error("{at} has {len} elements, no [{index}]")]
    NoIndex { at: String, len: i64, index: i64 },
    #[error("{at} is {kind}, not an array")]
    NotArray { at: String, kind: &'static str },
    /// A JSON number with no `f64`.
    #[error("{at}: {number} is not a number")]
    NotF64 { at: String, number: String },
    #[error("{at} is {kind}, not a number")]
    NotNumber { at: String, kind: &'static str },
}

fn in_parens(cause: &Option<Box<TransportError>>) -> String {
    cause.as_ref().map_or(String::new(), |c| format!(" ({c})"))
}

fn colon(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

fn on_node(node: &str) -> String {
    if node.is_empty() {
        String::new()
    } else {
        format!(" on node {node}")
    }
}

fn node_in_parens(node: &str) -> String {
    if node.is_empty() {
        String::new()
    } else {
        format!(" (node {node})")
    }
}

fn next_step(node: &str, steered: bool) -> String {
    if steered {
        format!("; node {node} is kept out of this class's jobs from now on")
    } else {
        "; pin the class with `constraint` or `gres`".to_string()
    }
}

fn each_left_out(types: &[(String, TransportError)]) -> String {
    let each: Vec<String> = types.iter().map(|(t, e)| format!("{t}: {e}")).collect();
    each.join("; ")
}

/// A sample as a message shows it: in `e` notation when far from 1.
fn shown(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-6..1e16).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        x.to_string()
    }
}

fn unusable(x: f64) -> &'static str {
    if x.is_finite() && x > 0.0 {
        "is subnormal (too close to zero), not a positive finite number"
    } else {
        "is not a positive finite number"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words are the launcher's of before these types.
    #[test]
    fn messages_read_as_before() {
        let lost = TransportError::ConnectionLost {
            cause: Some(Box::new(TransportError::NotConnected { host: "h".into() })),
        };
        assert_eq!(
            lost.to_string(),
            "the connection to the host was lost (host `h` is not connected)"
        );
        assert_eq!(
            TransportError::ConnectionLost { cause: None }.to_string(),
            "the connection to the host was lost"
        );
        assert_eq!(
            TransportError::AgentDied {
                stderr: String::new()
            }
            .to_string(),
            "the host's agent ended during the attempt"
        );
        assert_eq!(
            TransportError::AgentStopped { stderr: "x".into() }.to_string(),
            "the host's agent stopped reporting: x"
        );
        let wrong = |steered| TransportError::OtherClass {
            node: "n1".into(),
            got: "a".into(),
            expected: "b".into(),
            steered,
        };
        assert_eq!(
            wrong(true).to_string(),
            "slurm: ran on a node of another host class (node n1): a (expected b); node n1 is kept out of this class's jobs from now on"
        );
        assert_eq!(
            TransportError::ControlChar {
                what: "qos",
                value: "a\nb".into()
            }
            .to_string(),
            "qos `a\\nb` contains a control character; it would add a line to the batch script"
        );
        assert_eq!(
            TransportError::Slurm {
                command: SlurmCommand::Sbatch,
                cause: Box::new(TransportError::LocalCommand {
                    status: "exit status: 1".into(),
                    stderr: "no partition".into()
                })
            }
            .to_string(),
            "sbatch failed: no partition (exit status: 1)"
        );
        assert_eq!(
            FileError::TooLarge {
                bytes: 9,
                limit: 8 * 1024 * 1024
            }
            .to_string(),
            "is 9 bytes, over the limit of 8 MiB"
        );
        assert_eq!(
            ResultError::Unusable {
                name: "t".into(),
                sample: 5e-324
            }
            .to_string(),
            "metric t: sample 5e-324 is subnormal (too close to zero), not a positive finite number; speedups are ratios"
        );
    }

    /// Shared errors are equal when they say the same.
    #[test]
    fn shared_errors_compare_by_their_words() {
        let a: IoError = std::io::Error::other("x").into();
        let b: IoError = std::io::Error::other("x").into();
        let c: IoError = std::io::Error::other("y").into();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.clone(), a);
    }
}
