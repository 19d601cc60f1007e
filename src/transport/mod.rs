//! Transports: running attempts on hosts.
//!
//! A [`Transport`] carries out one attempt on one host (fresh directory,
//! warm-ups, the counted run, result file, output digests) and reports raw
//! facts; it never judges them. [`attempt::judge`] turns those facts into a
//! ledger record, the same way for every transport, reading the metrics
//! where the study's `result:` says they are ([`extract`]).
//!
//! Transports: [`local`] (this machine), [`ssh`] and [`slurm`]; the last
//! two run the same POSIX agent on the host and read its report, the
//! protocol of [`wire`].
//!
//! What goes wrong is data, not sentences ([`error`]): a
//! [`TransportError`] for a host, a command or a report that failed (also
//! why an attempt is lost, [`Ended`]), and [`FileError`], [`ResultError`]
//! and [`ExtractError`] for what a trial left that cannot be used. Their
//! messages are the words the ledger and the launch's output show.
//!
//! [`checkpoint`] keeps the rungs' checkpoints of `fidelity.continuation`
//! on the hosts ([`Transport::checkpoints`]: the local host, SSH hosts,
//! a Slurm entry's shared directory) and in the ledger.
//!
//! The launch round ([`crate::launch`]) schedules trials and runs them
//! through these: its trial runner judges with [`attempt`] and carries
//! checkpoints with [`checkpoint`]. Nothing here depends on it.

pub mod attempt;
pub mod checkpoint;
pub mod error;
pub mod extract;
pub mod local;
pub mod slurm;
pub mod ssh;
pub mod wire;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::fingerprint::Fingerprint;
use crate::ledger::checkpoint::Claim;
pub use error::{
    ExtractError, FileError, PathError, ResultError, SlurmCommand, SourceError, TransportError,
    WireError,
};
use local::RunOutput;

/// Everything a transport needs to carry out one attempt.
#[derive(Debug, Clone)]
pub struct AttemptSpec {
    pub study_id: String,
    pub trial_key: String,
    pub attempt_id: String,
    /// The rendered command: the template's text with a reference to an
    /// environment variable of [`env`](Self::env) for every value.
    pub command: String,
    /// Environment of the trial contract, without `TUNECTL_PHASE`, which
    /// the transport sets per run. It carries every value the command
    /// refers to: a transport must set all of it for the command.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub warmup: u32,
    /// Declared output files, relative to the trial directory.
    pub outputs: Vec<String>,
    /// The outputs among them whose numbers are read back
    /// (`gate.tolerance.files`).
    pub tolerance_files: Vec<String>,
    /// Files the study's `result:` reads metrics from (relative to the
    /// trial directory), read back like the result file.
    pub result_files: Vec<String>,
    /// Streams (`stdout`, `stderr`) the study's `result:` reads metrics
    /// from: the counted run's are brought back whole, up to
    /// [`attempt::MAX_RESULT_BYTES`].
    pub streams: Vec<String>,
    pub slot: u32,
    /// The attempt's fresh directory on the host.
    pub trial_dir: String,
    /// `$TUNECTL_RESULT`.
    pub result_path: String,
    /// Keep the full stdout and stderr of every run (`--store-logs`).
    pub keep_logs: bool,
    /// The checkpoint directory restored before each run
    /// (`fidelity.continuation`, on a host that keeps checkpoints).
    pub checkpoint: Option<checkpoint::RunCheckpoint>,
}

/// What happened, as raw facts.
#[derive(Debug, Clone, Default)]
pub struct AttemptOutcome {
    /// Full logs (`stdout`, `stderr`) when the spec asked to keep them.
    pub logs: BTreeMap<String, Vec<u8>>,
    pub warmups_run: u32,
    /// The last run made: a failed warm-up or the counted run.
    pub run: Option<RunOutput>,
    pub failed_in_warmup: bool,
    /// Contents of `$TUNECTL_RESULT` after the counted run.
    pub result: Option<Vec<u8>>,
    /// Why `$TUNECTL_RESULT` was there but not read (not a regular file,
    /// over the size limit...).
    pub result_error: Option<ResultError>,
    /// sha256 of each declared output, or why it has none (`was not
    /// written`, `is a FIFO, not a regular file`...).
    pub outputs: BTreeMap<String, Result<String, FileError>>,
    /// The numbers of each tolerance file, or why they could not be read.
    pub output_values: BTreeMap<String, Result<Vec<f64>, FileError>>,
    /// The contents of each file of [`AttemptSpec::result_files`], or why
    /// it was not read (`was not written`, over the limit...).
    pub result_files: BTreeMap<String, Result<Vec<u8>, FileError>>,
    /// The counted run's whole streams of [`AttemptSpec::streams`], or why
    /// they did not come back (over the limit).
    pub streams: BTreeMap<String, Result<Vec<u8>, FileError>>,
    pub elapsed: Duration,
    /// Whether the attempt ran to its end, or how it was lost.
    pub ended: Ended,
    /// Where the attempt ran (kept for failed attempts).
    pub trial_dir: Option<String>,
    /// The attempt was started by an earlier launcher (a batch task found
    /// again): its id, which the record keeps.
    pub adopted_attempt: Option<String>,
    /// The checkpoint that adopted task's request restored (`None`: none,
    /// or a request of an older launcher that did not say).
    pub adopted_checkpoint: Option<checkpoint::RunCheckpoint>,
    /// It ran to its end on a node of another host class than planned (a
    /// mixed Slurm partition's node whose type hid its class): lost for
    /// its trial's class, and what it left is a run of the node's class.
    pub elsewhere: Option<RanElsewhere>,
}

/// A run on a node of another host class than its trial's.
#[derive(Debug, Clone, PartialEq)]
pub struct RanElsewhere {
    pub node: String,
    /// The node's class under the study's class key, and its label.
    pub class: String,
    pub label: String,
}

/// How an attempt ended for the launcher: it ran (what it left is in the
/// outcome's facts, a failure of the config included), or it is lost and
/// runs again. Where several happen to one attempt (the launcher stops it,
/// then the connection drops), [`AttemptOutcome::end`] keeps the one
/// listed last here.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Ended {
    /// It ran: it succeeded or failed on its own.
    #[default]
    Ran,
    /// The launcher stopped it (Ctrl-C, its prune rule): lost, not failed.
    Cancelled,
    /// It could not be started, or what it left could not be read (no
    /// working directory, a wrapper that ran nothing...): not the config's
    /// fault.
    SetupFailed(TransportError),
    /// The host dropped while it ran, or before it could start: it runs
    /// again on another host of its class.
    HostLost(TransportError),
}

impl Ended {
    fn weight(&self) -> u8 {
        match self {
            Ended::Ran => 0,
            Ended::Cancelled => 1,
            Ended::SetupFailed(_) => 2,
            Ended::HostLost(_) => 3,
        }
    }
}

impl AttemptOutcome {
    /// Say how the attempt ended; what was said before stays when it
    /// weighs more (see [`Ended`]).
    pub fn end(&mut self, how: Ended) {
        if how.weight() > self.ended.weight() {
            self.ended = how;
        }
    }

    /// The launcher stopped it, and nothing weightier happened.
    pub fn cancelled(&self) -> bool {
        self.ended == Ended::Cancelled
    }

    /// Why the attempt is lost (`None`: it ran), in words for its record.
    pub fn lost_reason(&self) -> Option<String> {
        match &self.ended {
            Ended::Ran => None,
            Ended::Cancelled => Some(TransportError::StoppedByLauncher.to_string()),
            Ended::SetupFailed(why) | Ended::HostLost(why) => Some(why.to_string()),
        }
    }
}

/// Whether a host can take trials now.
#[derive(Debug, Clone)]
pub enum HostState {
    /// Connected. `rejoined`: it was down and answers again.
    Up { rejoined: bool },
    /// Not answering; the next try is in `retry_in`. `first`: this down
    /// period has not been reported yet.
    Down {
        reason: TransportError,
        since: std::time::Instant,
        retry_in: Duration,
        first: bool,
    },
    /// It answers again but with another fingerprint (a driver upgrade...):
    /// it belongs to another host class now.
    Changed {
        old: Box<Fingerprint>,
        new: Box<Fingerprint>,
    },
}

/// What a host is, found before it is probed.
pub enum Discovery {
    /// One host class: probe it ([`Transport::probe`]).
    Probe,
    /// One host class, already probed.
    Probed(Box<Fingerprint>),
    /// Several host classes (a Slurm partition with nodes of several
    /// kinds): each part is a host of its own, already probed.
    Parts(Vec<Part>),
}

/// One host class's share of a host that holds several.
pub struct Part {
    /// The part's host name is `<host>.<suffix>`.
    pub suffix: String,
    /// The nodes of the part when it was found (sorted).
    pub nodes: Vec<String>,
    /// How many of the entry's tasks its nodes run at once (GPUs over the
    /// GPUs a task asks for, per node): its share of the entry's jobs in
    /// flight.
    pub capacity: u64,
    pub fingerprint: Fingerprint,
    pub transport: std::sync::Arc<dyn Transport>,
}

/// Where and how a host keeps rung checkpoints (layout in
/// [`checkpoint`]): the operations on one checkpoint directory (`base`).
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// The directory of `study`'s checkpoints on this host; `None` while
    /// it cannot be known (the host's work directory is not found yet).
    fn root(&self, study: &str) -> Option<String>;
    /// The directory of the checkpoint `key` of `study` on this host.
    fn dir(&self, study: &str, key: &str) -> Option<String> {
        self.root(study).map(|root| format!("{root}/{key}"))
    }
    /// The attempts' working copies under `root` (a study's checkpoints
    /// directory), as (checkpoint key, attempt id): those of attempts
    /// running now, and those a launcher that died left behind.
    async fn working_copies(&self, root: &str) -> Result<Vec<(String, String)>, TransportError>;
    /// The claim of the committed state the host holds in `base`, if any.
    async fn claim(&self, base: &str) -> Result<Option<Claim>, TransportError>;
    /// Install `archive` (a tar, checked as it is read: a read error means
    /// it is not the claimed one) as the committed state of `claim` in
    /// `base`; on any error the host's committed state is as it was.
    async fn install(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
        archive: &mut (dyn AsyncRead + Send + Unpin),
    ) -> Result<(), TransportError>;
    /// The working copy of `attempt_id` becomes the committed state of
    /// `claim`.
    async fn commit(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
    ) -> Result<(), TransportError>;
    /// The size of the committed state's archive in `base`.
    async fn size(&self, base: &str) -> Result<u64, TransportError>;
    /// Write the committed state in `base` as a tar to `sink`; an error
    /// when it could not be read whole.
    async fn export(
        &self,
        base: &str,
        sink: &mut (dyn AsyncWrite + Send + Unpin),
    ) -> Result<(), TransportError>;
    /// Drop the working copy of `attempt_id` (best effort).
    async fn discard(&self, base: &str, attempt_id: &str);
}

#[async_trait]
pub trait Transport: Send + Sync {
    /// Where an attempt runs on this host (a path that does not exist yet).
    fn trial_dir(&self, study: &str, trial_key: &str, attempt_id: &str) -> String;
    /// Probe the host's fingerprint.
    async fn probe(&self, tools: &BTreeMap<String, String>) -> Result<Fingerprint, TransportError>;
    /// Carry out one attempt.
    async fn run_attempt(&self, spec: &AttemptSpec, cancel: &CancellationToken) -> AttemptOutcome;
    /// Get ready for a study before probing (find work of earlier
    /// launchers...).
    async fn prepare(&self, _study_id: &str) -> Result<(), TransportError> {
        Ok(())
    }
    /// Find out, before probing, whether this host holds machines of
    /// several host classes (set for `study_id`, probing with `tools`,
    /// classing machines by `class_key`).
    async fn discover(
        &self,
        _study_id: &str,
        _tools: &BTreeMap<String, String>,
        _class_key: &crate::fingerprint::ClassKey,
    ) -> Result<Discovery, TransportError> {
        Ok(Discovery::Probe)
    }
    /// Whether the host can take a trial now (reconnecting when due).
    async fn state(&self) -> HostState {
        HostState::Up { rejoined: false }
    }
    /// Close connections at the end of a launch.
    async fn close(&self) {}
    /// The work directory of a study on this machine, for the local host
    /// (rungs' progress files are read there while they run); `None`
    /// elsewhere.
    fn checkpoint_root(&self, _study: &str) -> Option<std::path::PathBuf> {
        None
    }
    /// How this host keeps the rung checkpoints of
    /// `fidelity.continuation`; `None`: rungs on this host get their
    /// attempt's own directory and start from zero.
    fn checkpoints(&self) -> Option<&dyn CheckpointStore> {
        None
    }
    /// Whether the next attempt of `trial_key` here is a task an earlier
    /// launcher started (a Slurm batch found again), not a new run.
    fn adopts(&self, _trial_key: &str) -> bool {
        false
    }
}
