//! Slurm partitions: trials run as tasks of job arrays.
//!
//! A `SlurmTransport` is one inventory entry (a partition, pinned to a host
//! class by its `constraint`/`gres` where the partition is mixed). The
//! scheduler's workers call [`Transport::run_attempt`] as for any host;
//! here an attempt joins a queue, and a submitter turns what is queued into
//! one job array (one `sbatch`) at a time: task *i* runs the same request
//! script as an ssh host (the agent of [`super::wire`]), with the probe
//! first and the timeout kept by the agent, and writes its reply to
//! `t<i>.frames` in the batch directory. A poller asks Slurm about every
//! job of the study in one `squeue` call per interval, reads the reports of
//! the tasks that ended, and answers the waiting attempts.
//!
//! The batch directory (`<shared_dir>/<study>/batches/<batch id>/`) holds
//! the array's script, one script and one report per task and a manifest
//! (task → trial key and attempt). Jobs are named `tunectl-<study>` and
//! commented with the study and batch, so a launcher started after another
//! one died finds them again ([`Transport::prepare`]) and adopts them:
//! finished tasks are recorded from their reports, running ones awaited,
//! none submitted again.
//!
//! Rung checkpoints of `fidelity.continuation` live in the shared directory
//! too (`<shared_dir>/<study>/checkpoints/<key>/`): a task restores and
//! leaves the state there, and the login host moves archives to and from
//! the ledger (here, or over its ssh connection). The manifest keeps each
//! task's checkpoint, so an adopted task is committed as it ran.
//!
//! A partition with nodes of several host classes (and no `constraint`)
//! is split before probing ([`Transport::discover`]): `sinfo` lists its
//! node types, one node of each is probed (`--nodelist`), and each class
//! becomes a part of its own, a host `<entry>.<tag>`, whose tasks are
//! pinned to the nodes of its class, an array per node (`--nodelist`,
//! [`nodes::pin_tasks`]): a task waiting for one class's busy GPUs then
//! holds back only its own node, not the whole partition (see
//! `Inner::pin_targets`). A class left with no node known falls back to
//! excluding the nodes of every other class (`--exclude`). Each task
//! probes its node again: one that lands on a node of another class (one
//! whose type hid its class) is lost and runs again, and that node is
//! taken from the class from then on ([`nodes::NodeClasses`]).
//! What it left, if it ran to its end, comes back as the outcome's
//! `elsewhere` run, which the launcher may record for the node's class.

mod adopt;
mod jobs;
mod login;
pub mod nodes;
#[cfg(test)]
mod tests;

use adopt::*;
use jobs::*;
pub use login::Login;
use login::*;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use super::checkpoint::{self, RunCheckpoint};
use super::local::RunOutput;
use super::ssh::SshTransport;
use super::wire::{self, AgentOptions, Collected, Frame};
use super::{
    AttemptOutcome, AttemptSpec, CheckpointStore, Discovery, Ended, HostState, Part, RanElsewhere,
    SlurmCommand, Transport, TransportError, WireError,
};
use crate::fingerprint::{self, ClassKey, Fingerprint};
use crate::ledger::checkpoint::Claim;
use crate::ledger::records::ExitInfo;
use crate::shell_quote::quote_word;
use crate::spec::inventory::SlurmHost;
use nodes::NodeClasses;

/// The default batch script (templates/slurm-array.sh).
pub const DEFAULT_TEMPLATE: &str = include_str!("../../../templates/slurm-array.sh");

/// Most tasks in one array.
const MAX_ARRAY: usize = 1000;

/// Largest task report or manifest read from the shared directory on this
/// machine: a report holds at most the result, the kept streams and two
/// stored logs (each frame at most [`wire::MAX_FRAME_BYTES`]).
const MAX_REPORT_FILE_BYTES: u64 = 4 * wire::MAX_FRAME_BYTES as u64;

/// How long the submitter waits for more attempts before submitting what
/// is queued (it submits at once when a full array is queued).
const GATHER_QUIET: Duration = Duration::from_millis(300);
const GATHER_MAX: Duration = Duration::from_secs(2);

/// How long a probe job may wait in the queue and run.
const PROBE_WAIT: Duration = Duration::from_secs(600);

/// Limit of one client command (`sbatch`, `squeue`, `scancel`, file I/O).
const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// A task absent from `squeue` this long after submission has vanished.
const VANISH_GRACE: Duration = Duration::from_secs(30);

/// An attempt waiting for submission.
struct Pending {
    spec: AttemptSpec,
    tx: oneshot::Sender<AttemptOutcome>,
}

/// A submitted task.
struct Task {
    spec: AttemptSpec,
    /// The attempt waiting for it; `None` for an adopted task not yet
    /// claimed.
    tx: Option<oneshot::Sender<AttemptOutcome>>,
    frames: String,
    submitted: Instant,
    state: String,
    node: String,
    /// This launcher asked Slurm to cancel it.
    cancelling: bool,
}

/// What the manifest says of one task.
#[derive(serde::Serialize, serde::Deserialize, Clone)]
struct ManifestTask {
    task: usize,
    trial_key: String,
    attempt_id: String,
    trial_dir: String,
    outputs: Vec<String>,
    tolerance_files: Vec<String>,
    /// `result:`'s files and streams (absent from older manifests).
    #[serde(default)]
    result_files: Vec<String>,
    #[serde(default)]
    streams: Vec<String>,
    /// The checkpoint its request restores (absent from older manifests).
    #[serde(default)]
    checkpoint: Option<RunCheckpoint>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    study: String,
    job_id: Option<String>,
    tasks: Vec<ManifestTask>,
}

struct Inner {
    name: String,
    cfg: SlurmHost,
    login: Login,
    keep_workdirs: bool,
    template: String,
    root: RwLock<Option<String>>,
    study: RwLock<Option<String>>,
    tools: Mutex<BTreeMap<String, String>>,
    expected: Mutex<Option<Fingerprint>>,
    /// The study's class key: what makes a task's node of this entry's
    /// class (set by `discover`; the default key before).
    class_key: Mutex<ClassKey>,
    queue: Mutex<Vec<Pending>>,
    /// `jobid_taskid` → task.
    inflight: Mutex<HashMap<String, Task>>,
    /// Trial key → `jobid_taskid` of an adopted task.
    adopted: Mutex<HashMap<String, String>>,
    /// Tasks to cancel at the next poll.
    to_cancel: Mutex<HashSet<String>>,
    wake_submitter: Notify,
    wake_poller: Notify,
    stop: CancellationToken,
    started: std::sync::Once,
    sbatch_calls: AtomicU64,
    poll_calls: AtomicU64,
    batches: AtomicU64,
    /// Outcomes of adopted tasks that ended before a worker asked for them.
    finished: Mutex<HashMap<String, AttemptOutcome>>,
    /// Attempt ids of adopted tasks, by `jobid_taskid`.
    adopted_ids: Mutex<HashMap<String, String>>,
    /// Set once a mixed partition's nodes are known: where this entry's
    /// (or part's) jobs may run.
    steer: Mutex<Option<Steering>>,
    /// A steered part whose every node is down: since when, why, and
    /// whether that was reported.
    down: Mutex<Option<ClassDown>>,
    /// Nodes of a steered part's class that the last `sinfo` of them found
    /// down: no task is pinned to them while another node is up.
    down_nodes: Mutex<BTreeSet<String>>,
}

/// Every node of a part's class is down (as `sinfo` says).
#[derive(Clone)]
struct ClassDown {
    reason: TransportError,
    since: Instant,
    next_check: Instant,
    reported: bool,
}

/// One host class's share of a mixed partition.
#[derive(Clone)]
struct Steering {
    /// The class's id.
    class: String,
    /// Every node of the entry whose class is known, shared by its parts.
    nodes: Arc<Mutex<NodeClasses>>,
}

/// A Slurm partition (an inventory entry) as a transport.
pub struct SlurmTransport {
    inner: Arc<Inner>,
}

impl SlurmTransport {
    pub fn new(
        name: &str,
        cfg: SlurmHost,
        login: Login,
        template: Option<String>,
        keep_workdirs: bool,
    ) -> Self {
        SlurmTransport {
            inner: Arc::new(Inner {
                name: name.to_string(),
                cfg,
                login,
                keep_workdirs,
                template: template.unwrap_or_else(|| DEFAULT_TEMPLATE.to_string()),
                root: RwLock::new(None),
                study: RwLock::new(None),
                tools: Mutex::new(BTreeMap::new()),
                expected: Mutex::new(None),
                class_key: Mutex::new(ClassKey::default()),
                queue: Mutex::new(Vec::new()),
                inflight: Mutex::new(HashMap::new()),
                adopted: Mutex::new(HashMap::new()),
                to_cancel: Mutex::new(HashSet::new()),
                wake_submitter: Notify::new(),
                wake_poller: Notify::new(),
                stop: CancellationToken::new(),
                started: std::sync::Once::new(),
                sbatch_calls: AtomicU64::new(0),
                poll_calls: AtomicU64::new(0),
                batches: AtomicU64::new(0),
                finished: Mutex::new(HashMap::new()),
                adopted_ids: Mutex::new(HashMap::new()),
                steer: Mutex::new(None),
                down: Mutex::new(None),
                down_nodes: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    /// A part of this entry for one host class, already probed: its own
    /// queue, arrays and poller, its jobs steered by `steering`.
    fn part(&self, suffix: &str, fingerprint: Fingerprint, steering: Steering) -> SlurmTransport {
        let inner = &self.inner;
        let part = SlurmTransport::new(
            &format!("{}.{suffix}", inner.name),
            inner.cfg.clone(),
            inner.login.clone(),
            Some(inner.template.clone()),
            inner.keep_workdirs,
        );
        let p = &part.inner;
        copy_lock(&inner.root, &p.root);
        copy_lock(&inner.study, &p.study);
        if let (Ok(from), Ok(mut to)) = (inner.tools.lock(), p.tools.lock()) {
            *to = from.clone();
        }
        if let Ok(mut e) = p.expected.lock() {
            *e = Some(fingerprint);
        }
        if let (Ok(from), Ok(mut to)) = (inner.class_key.lock(), p.class_key.lock()) {
            *to = from.clone();
        }
        if let Ok(mut s) = p.steer.lock() {
            *s = Some(steering);
        }
        part
    }

    /// The node types of the entry's partition, as `sinfo` lists them now
    /// (for `plan`: no job is submitted).
    pub async fn node_types(&self) -> Result<Vec<nodes::NodeType>, TransportError> {
        let partition = self.inner.cfg.partition.as_deref();
        let out = self
            .inner
            .login
            .sh(&nodes::sinfo_command(partition))
            .await?;
        Ok(nodes::parse_sinfo(
            &String::from_utf8_lossy(&out),
            partition,
        ))
    }

    /// `sbatch` and poll calls made so far (for the benchmark).
    pub fn calls(&self) -> (u64, u64) {
        (
            self.inner.sbatch_calls.load(Ordering::Relaxed),
            self.inner.poll_calls.load(Ordering::Relaxed),
        )
    }
}

fn copy_lock(from: &RwLock<Option<String>>, to: &RwLock<Option<String>>) {
    if let (Ok(f), Ok(mut t)) = (from.read(), to.write()) {
        *t = f.clone();
    }
}

#[async_trait]
impl Transport for SlurmTransport {
    fn trial_dir(&self, study: &str, trial_key: &str, attempt_id: &str) -> String {
        let root = self
            .inner
            .root
            .read()
            .ok()
            .and_then(|r| r.clone())
            .unwrap_or_else(|| "/tmp/tunectl-slurm".to_string());
        let short_key = &trial_key[..trial_key.len().min(16)];
        format!("{root}/{study}/work/{short_key}-{attempt_id}")
    }

    fn checkpoints(&self) -> Option<&dyn CheckpointStore> {
        Some(self)
    }

    fn adopts(&self, trial_key: &str) -> bool {
        self.inner
            .adopted
            .lock()
            .is_ok_and(|a| a.contains_key(trial_key))
    }

    async fn prepare(&self, study_id: &str) -> Result<(), TransportError> {
        if let Ok(mut s) = self.inner.study.write() {
            *s = Some(study_id.to_string());
        }
        self.adopt().await
    }

    async fn probe(&self, tools: &BTreeMap<String, String>) -> Result<Fingerprint, TransportError> {
        let inner = &self.inner;
        if let Ok(mut t) = inner.tools.lock() {
            *t = tools.clone();
        }
        let fp = inner.probe_on(tools, None).await?;
        if let Ok(mut e) = inner.expected.lock() {
            *e = Some(fp.clone());
        }
        self.start();
        Ok(fp)
    }

    async fn discover(
        &self,
        study_id: &str,
        tools: &BTreeMap<String, String>,
        key: &ClassKey,
    ) -> Result<Discovery, TransportError> {
        self.discover_classes(study_id, tools, key).await
    }

    async fn run_attempt(&self, spec: &AttemptSpec, cancel: &CancellationToken) -> AttemptOutcome {
        self.start();
        let inner = &self.inner;
        // A task of an earlier launcher already runs (or ran) this trial.
        let adopted = inner
            .adopted
            .lock()
            .ok()
            .and_then(|mut a| a.remove(&spec.trial_key));
        let (tx, rx) = oneshot::channel();
        // The checkpoint an adopted task's request restores.
        let adopted_checkpoint = adopted.as_ref().and_then(|id| {
            inner
                .inflight
                .lock()
                .ok()
                .and_then(|m| m.get(id).and_then(|t| t.spec.checkpoint.clone()))
        });
        let waiting_id = match adopted {
            Some(id) => {
                let done = inner.finished.lock().ok().and_then(|mut d| d.remove(&id));
                if let Some(mut outcome) = done {
                    if let Ok(mut m) = inner.inflight.lock() {
                        m.remove(&id);
                    }
                    outcome.adopted_attempt = Some(adopted_attempt_id(&id, inner));
                    outcome.adopted_checkpoint = adopted_checkpoint;
                    return outcome;
                }
                if let Ok(mut m) = inner.inflight.lock()
                    && let Some(t) = m.get_mut(&id)
                {
                    t.tx = Some(tx);
                }
                Some(id)
            }
            None => {
                if let Ok(mut q) = inner.queue.lock() {
                    q.push(Pending {
                        spec: spec.clone(),
                        tx,
                    });
                }
                inner.wake_submitter.notify_one();
                None
            }
        };
        let adopted_attempt = waiting_id.as_ref().map(|id| adopted_attempt_id(id, inner));
        tokio::select! {
            outcome = rx => {
                let mut outcome = outcome.unwrap_or_else(|_| AttemptOutcome {
                    ended: Ended::HostLost(TransportError::Unwatched),
                    ..Default::default()
                });
                outcome.adopted_attempt = adopted_attempt;
                outcome.adopted_checkpoint = adopted_checkpoint;
                outcome
            }
            _ = cancel.cancelled() => {
                // Queued: dropped from the queue. Submitted: cancelled with
                // the next `scancel`.
                if let Ok(mut q) = inner.queue.lock() {
                    q.retain(|p| p.spec.attempt_id != spec.attempt_id);
                }
                if let Ok(mut m) = inner.inflight.lock() {
                    let ids: Vec<String> = m
                        .iter()
                        .filter(|(id, t)| {
                            t.spec.attempt_id == spec.attempt_id
                                || waiting_id.as_deref() == Some(id.as_str())
                        })
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in ids {
                        if let Some(t) = m.get_mut(&id) {
                            t.cancelling = true;
                            t.tx = None;
                        }
                        if let Ok(mut c) = inner.to_cancel.lock() {
                            c.insert(id);
                        }
                    }
                }
                inner.wake_poller.notify_one();
                AttemptOutcome {
                    ended: Ended::Cancelled,
                    adopted_attempt,
                    adopted_checkpoint,
                    ..Default::default()
                }
            }
        }
    }

    async fn state(&self) -> HostState {
        let inner = &self.inner;
        let Some(mut down) = inner.down.lock().ok().and_then(|d| d.clone()) else {
            return HostState::Up { rejoined: false };
        };
        let now = Instant::now();
        if now >= down.next_check {
            match inner.class_down().await {
                None => {
                    if let Ok(mut d) = inner.down.lock() {
                        *d = None;
                    }
                    return HostState::Up { rejoined: true };
                }
                Some(reason) => down.reason = reason,
            }
            down.next_check = Instant::now() + inner.cfg.poll_interval;
        }
        let first = !down.reported;
        down.reported = true;
        let retry_in = down.next_check.saturating_duration_since(Instant::now());
        let out = HostState::Down {
            reason: down.reason.clone(),
            since: down.since,
            retry_in,
            first,
        };
        if let Ok(mut d) = inner.down.lock()
            && d.is_some()
        {
            *d = Some(down);
        }
        out
    }

    async fn close(&self) {
        let inner = &self.inner;
        // Whatever still runs for this launcher (adopted tasks nobody
        // claimed, tasks of cancelled attempts) is cancelled, by id.
        if let Ok(m) = inner.inflight.lock()
            && let Ok(mut c) = inner.to_cancel.lock()
        {
            for (id, t) in m.iter() {
                if !is_final(&t.state) && t.state != "DONE" {
                    c.insert(id.clone());
                }
            }
        }
        inner.cancel_requested().await;
        inner.stop.cancel();
        let (sbatch, polls) = self.calls();
        tracing::info!(host = %inner.name, sbatch, polls, "slurm calls");
    }
}

#[async_trait]
impl CheckpointStore for SlurmTransport {
    fn root(&self, study: &str) -> Option<String> {
        // In the shared directory: the login host moves archives, the
        // nodes restore and save the state.
        let root = self.inner.root.read().ok().and_then(|r| r.clone())?;
        Some(format!("{root}/{study}/checkpoints"))
    }

    async fn working_copies(&self, root: &str) -> Result<Vec<(String, String)>, TransportError> {
        match &self.inner.login {
            Login::Local => checkpoint::working_copies_here(root).await,
            Login::Ssh(t) => t.working_copies(root).await,
        }
    }

    async fn claim(&self, base: &str) -> Result<Option<Claim>, TransportError> {
        match &self.inner.login {
            Login::Local => checkpoint::claim_here(base).await,
            Login::Ssh(t) => t.claim(base).await,
        }
    }

    async fn install(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
        archive: &mut (dyn AsyncRead + Send + Unpin),
    ) -> Result<(), TransportError> {
        match &self.inner.login {
            Login::Local => checkpoint::install_from(base.into(), attempt_id, claim, archive).await,
            Login::Ssh(t) => t.install(base, attempt_id, claim, archive).await,
        }
    }

    async fn commit(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
    ) -> Result<(), TransportError> {
        match &self.inner.login {
            Login::Local => checkpoint::commit_here(base, attempt_id, claim).await,
            Login::Ssh(t) => t.commit(base, attempt_id, claim).await,
        }
    }

    async fn size(&self, base: &str) -> Result<u64, TransportError> {
        match &self.inner.login {
            Login::Local => checkpoint::size_here(base).await,
            Login::Ssh(t) => t.size(base).await,
        }
    }

    async fn export(
        &self,
        base: &str,
        sink: &mut (dyn AsyncWrite + Send + Unpin),
    ) -> Result<(), TransportError> {
        match &self.inner.login {
            Login::Local => checkpoint::pack_to(base.into(), sink).await,
            Login::Ssh(t) => t.export(base, sink).await,
        }
    }

    async fn discard(&self, base: &str, attempt_id: &str) {
        match &self.inner.login {
            Login::Local => checkpoint::discard_here(base, attempt_id).await,
            Login::Ssh(t) => t.discard(base, attempt_id).await,
        }
    }
}
