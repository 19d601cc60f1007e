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
//! becomes a part of its own, a host `<entry>.<tag>`, whose jobs exclude
//! the nodes of every other class (`--exclude`). Each task probes its node
//! again: one that lands on a node of another class (a node that joined,
//! or whose type hid its class) is lost and runs again, and that node is
//! excluded from the class's jobs from then on ([`nodes::NodeClasses`]).

pub mod nodes;

use std::collections::{BTreeMap, HashMap, HashSet};
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
use super::{AttemptOutcome, AttemptSpec, Discovery, HostState, Part, Transport};
use crate::fingerprint::{self, ClassKey, Fingerprint};
use crate::ledger::checkpoint::Claim;
use crate::ledger::records::ExitInfo;
use crate::spec::inventory::SlurmHost;
use crate::spec::shell::quote_word;
use nodes::NodeClasses;

/// The default batch script (templates/slurm-array.sh).
pub const DEFAULT_TEMPLATE: &str = include_str!("../../templates/slurm-array.sh");

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

/// Where client commands run and files are read and written.
#[derive(Clone)]
pub enum Login {
    Local,
    Ssh(Arc<SshTransport>),
}

impl Login {
    /// Run a POSIX `sh` script; stdout, or an error with stderr.
    async fn sh(&self, body: &str) -> Result<Vec<u8>, String> {
        match self {
            Login::Ssh(t) => t.run_remote(body, COMMAND_LIMIT).await,
            Login::Local => {
                let mut cmd = tokio::process::Command::new("/bin/sh");
                cmd.arg("-c")
                    .arg(body)
                    .stdin(std::process::Stdio::null())
                    .kill_on_drop(true);
                let out = tokio::time::timeout(COMMAND_LIMIT, cmd.output())
                    .await
                    .map_err(|_| format!("no answer within {} s", COMMAND_LIMIT.as_secs()))?
                    .map_err(|e| format!("cannot run /bin/sh: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "{} ({})",
                        String::from_utf8_lossy(&out.stderr).trim(),
                        out.status
                    ));
                }
                Ok(out.stdout)
            }
        }
    }

    /// Create files (and their directories).
    async fn write_files(&self, files: &[(String, String)]) -> Result<(), String> {
        match self {
            Login::Local => {
                for (path, text) in files {
                    if let Some(dir) = std::path::Path::new(path).parent() {
                        tokio::fs::create_dir_all(dir)
                            .await
                            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                    }
                    tokio::fs::write(path, text)
                        .await
                        .map_err(|e| format!("cannot write {path}: {e}"))?;
                }
                Ok(())
            }
            Login::Ssh(_) => {
                let mut body = String::new();
                for (path, text) in files {
                    body.push_str(&format!(
                        "mkdir -p \"$(dirname {p})\" && printf '%s' {t} >{p} || exit 1\n",
                        p = quote_word(path),
                        t = quote_word(text)
                    ));
                }
                self.sh(&body).await.map(|_| ())
            }
        }
    }

    /// Read files; missing ones are left out, and so are (said once here)
    /// those that are not regular files of at most
    /// [`MAX_REPORT_FILE_BYTES`] on this machine.
    async fn read_files(&self, paths: &[String]) -> Result<HashMap<String, Vec<u8>>, String> {
        let mut out = HashMap::new();
        match self {
            Login::Local => {
                for p in paths {
                    let path = std::path::PathBuf::from(p);
                    let read = tokio::task::spawn_blocking(move || {
                        crate::safe_read::read_regular(&path, MAX_REPORT_FILE_BYTES, None)
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                    match read {
                        Ok(b) => {
                            out.insert(p.clone(), b);
                        }
                        Err(crate::safe_read::Unreadable::Missing(_)) => {}
                        Err(why) => tracing::warn!(path = %p, "not read: {why}"),
                    }
                }
            }
            Login::Ssh(_) => {
                if paths.is_empty() {
                    return Ok(out);
                }
                let body = wire::fetch_files_script(paths);
                let bytes = self.sh(&body).await?;
                for frame in parse_frames(&bytes).await? {
                    if let Frame::File { tag, bytes } = frame
                        && let Some(p) = tag.parse::<usize>().ok().and_then(|i| paths.get(i))
                    {
                        out.insert(p.clone(), bytes);
                    }
                }
            }
        }
        Ok(out)
    }

    /// `$HOME` where the files live.
    async fn home(&self) -> Result<String, String> {
        let out = self.sh("printf '%s\\n' \"$HOME\"").await?;
        let home = String::from_utf8_lossy(&out).trim().to_string();
        if !home.starts_with('/') {
            return Err(format!("cannot find the home directory (got `{home}`)"));
        }
        Ok(home)
    }
}

/// Frames of a complete report (bytes already read).
async fn parse_frames(bytes: &[u8]) -> Result<Vec<Frame>, String> {
    match wire::read_report(bytes).await {
        (frames, None) => Ok(frames),
        (_, Some(e)) => Err(e),
    }
}

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
}

/// Every node of a part's class is down (as `sinfo` says).
#[derive(Clone)]
struct ClassDown {
    reason: String,
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
    pub async fn node_types(&self) -> Result<Vec<nodes::NodeType>, String> {
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

impl Inner {
    /// The study's class key (the default one before `discover`).
    fn class_key(&self) -> ClassKey {
        self.class_key.lock().map(|k| k.clone()).unwrap_or_default()
    }

    /// The study being launched (`probe` before one is set: a bare
    /// `tunectl fingerprint`).
    fn study_id(&self) -> String {
        self.study
            .read()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or_else(|| "probe".to_string())
    }

    fn job_name(&self) -> String {
        format!("tunectl-{}", self.study_id())
    }

    async fn root(&self) -> Result<String, String> {
        if let Some(r) = self.root.read().ok().and_then(|r| r.clone()) {
            return Ok(r);
        }
        let root = match &self.cfg.shared_dir {
            Some(d) if d.starts_with('/') => d.trim_end_matches('/').to_string(),
            Some(d) => format!(
                "{}/{}",
                self.login.home().await?,
                d.trim_start_matches("~/")
            ),
            None => format!("{}/.cache/tunectl/slurm", self.login.home().await?),
        };
        if let Ok(mut r) = self.root.write() {
            *r = Some(root.clone());
        }
        Ok(root)
    }

    /// The `--time` of a batch: the inventory's, or every run at its
    /// timeout plus five minutes for the probe and the agent, in minutes.
    fn time_limit(&self, specs: &[&AttemptSpec]) -> String {
        if let Some(t) = &self.cfg.time_limit {
            return t.clone();
        }
        let secs = specs
            .iter()
            .map(|s| s.timeout.as_secs() * (u64::from(s.warmup) + 1))
            .max()
            .unwrap_or(60)
            + 300;
        secs.div_ceil(60).to_string()
    }

    fn render_batch(
        &self,
        batch_dir: &str,
        tasks: usize,
        time_limit: &str,
        batch_id: &str,
    ) -> Result<String, String> {
        // Every value here is pasted into the script as is: a control
        // character (a newline above all) would add a line of its own. The
        // inventory refuses them; this keeps any other caller honest.
        let c = &self.cfg;
        let pasted = [
            ("partition", c.partition.as_deref()),
            ("account", c.account.as_deref()),
            ("qos", c.qos.as_deref()),
            ("gres", c.gres.as_deref()),
            ("constraint", c.constraint.as_deref()),
            ("time_limit", Some(time_limit)),
            ("batch directory", Some(batch_dir)),
        ]
        .into_iter()
        .chain(
            c.sbatch_args
                .iter()
                .map(|a| ("sbatch_args", Some(a.as_str()))),
        );
        for (what, value) in pasted {
            if let Some(v) = value
                && v.chars().any(char::is_control)
            {
                return Err(format!(
                    "{what} `{}` contains a control character; it would add a line to the batch script",
                    v.escape_debug()
                ));
            }
        }
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.add_template("batch", &self.template)
            .map_err(|e| format!("the batch template does not parse: {e}"))?;
        let array = match self.cfg.array_throttle {
            Some(n) => format!("0-{}%{n}", tasks - 1),
            None => format!("0-{}", tasks - 1),
        };
        let study = self.study_id();
        let ctx = minijinja::context! {
            job_name => self.job_name(),
            comment => format!("tunectl:study={study}:batch={batch_id}:host={}", self.name),
            array => array,
            batch_dir => batch_dir,
            batch_dir_sh => quote_word(batch_dir),
            time_limit => time_limit,
            partition => self.cfg.partition.clone(),
            account => self.cfg.account.clone(),
            qos => self.cfg.qos.clone(),
            gres => self.cfg.gres.clone(),
            constraint => self.cfg.constraint.clone(),
            sbatch_args => self.cfg.sbatch_args.clone(),
        };
        env.get_template("batch")
            .and_then(|t| t.render(ctx))
            .map_err(|e| format!("cannot render the batch template: {e}"))
    }

    /// `sbatch` options that steer a job: a probe to its node
    /// (`--nodelist`), a mixed partition's part away from the nodes of
    /// other classes (`--exclude`). On the command line, so that they hold
    /// whatever the batch template says.
    fn steering_args(&self, probe_node: Option<&str>) -> Vec<String> {
        if let Some(n) = probe_node {
            return vec![format!("--nodelist={n}")];
        }
        let Some(steer) = self.steer.lock().ok().and_then(|s| s.clone()) else {
            return Vec::new();
        };
        let others = steer
            .nodes
            .lock()
            .map(|m| m.others(&steer.class))
            .unwrap_or_default();
        if others.is_empty() {
            return Vec::new();
        }
        vec![format!("--exclude={}", others.join(","))]
    }

    /// Submit one array of `specs` (none: a probe job, on `probe_node`
    /// when given); returns the job id and the batch directory.
    async fn submit(
        &self,
        specs: &[&AttemptSpec],
        probe_only: bool,
        probe_node: Option<&str>,
    ) -> Result<(String, String), String> {
        let root = self.root().await?;
        let study = self.study_id();
        let batch_id = format!(
            "{}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ"),
            self.batches.fetch_add(1, Ordering::Relaxed)
        );
        let batch_dir = format!("{root}/{study}/batches/{batch_id}");
        let tools = self.tools.lock().map(|t| t.clone()).unwrap_or_default();
        let probe = fingerprint::probe_script(&tools).map_err(|e| e.to_string())?;
        let mut files = Vec::new();
        let count = if probe_only { 1 } else { specs.len() };
        if probe_only {
            let body = wire::probe_script(&batch_dir, &probe);
            files.push((format!("{batch_dir}/t0.sh"), wire::wrap(&body)));
        } else {
            let opts = AgentOptions {
                keep_workdirs: self.keep_workdirs,
                self_timeout: true,
                probe: Some(probe),
                remote_clock: true,
                ..Default::default()
            };
            let mut manifest = Manifest {
                study: study.clone(),
                job_id: None,
                tasks: Vec::new(),
            };
            for (i, spec) in specs.iter().enumerate() {
                let script = wire::attempt_script(spec, &opts)?;
                files.push((format!("{batch_dir}/t{i}.sh"), wire::wrap(&script)));
                manifest.tasks.push(ManifestTask {
                    task: i,
                    trial_key: spec.trial_key.clone(),
                    attempt_id: spec.attempt_id.clone(),
                    trial_dir: spec.trial_dir.clone(),
                    outputs: spec.outputs.clone(),
                    tolerance_files: spec.tolerance_files.clone(),
                    result_files: spec.result_files.clone(),
                    streams: spec.streams.clone(),
                    checkpoint: spec.checkpoint.clone(),
                });
            }
            files.push((
                format!("{batch_dir}/manifest.json"),
                serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?,
            ));
        }
        let time_limit = if probe_only {
            "10".to_string()
        } else {
            self.time_limit(specs)
        };
        let script = self.render_batch(&batch_dir, count, &time_limit, &batch_id)?;
        files.push((format!("{batch_dir}/batch.sh"), script));
        self.login.write_files(&files).await?;
        self.sbatch_calls.fetch_add(1, Ordering::Relaxed);
        let mut args: Vec<String> = self
            .steering_args(probe_node)
            .iter()
            .map(|a| quote_word(a))
            .collect();
        args.push(quote_word(&format!("{batch_dir}/batch.sh")));
        let out = self
            .login
            .sh(&format!("sbatch --parsable {}", args.join(" ")))
            .await
            .map_err(|e| format!("sbatch failed: {e}"))?;
        let text = String::from_utf8_lossy(&out);
        let job = text
            .trim()
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string();
        if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("sbatch answered `{}`, not a job id", text.trim()));
        }
        Ok((job, batch_dir))
    }

    /// Run a probe job (on `node` when given) and read its fingerprint.
    async fn probe_on(
        &self,
        tools: &BTreeMap<String, String>,
        node: Option<&str>,
    ) -> Result<Fingerprint, String> {
        let (job, batch_dir) = self.submit(&[], true, node).await?;
        let frames = format!("{batch_dir}/t0.frames");
        let id = format!("{job}_0");
        let start = Instant::now();
        // Polled like everything else: one query per interval.
        let step = self.cfg.poll_interval;
        loop {
            tokio::time::sleep(step).await;
            let states = self.query().await?;
            let state = states.get(&id).map(|s| s.0.clone());
            if state.as_deref().is_some_and(is_final) || state.is_none() {
                let reports = self.login.read_files(std::slice::from_ref(&frames)).await?;
                let bytes = reports.get(&frames).cloned().unwrap_or_default();
                let mut got = Collected::default();
                for f in parse_frames(&bytes).await.unwrap_or_default() {
                    got.absorb(f);
                }
                if let Some(p) = got.files.get("probe") {
                    let mut fp = fingerprint::parse_probe_output(&String::from_utf8_lossy(p));
                    for name in tools.keys() {
                        fp.tools.entry(name.clone()).or_insert(None);
                    }
                    return Ok(fp);
                }
                if state.is_some() || start.elapsed() > VANISH_GRACE {
                    return Err(format!(
                        "the probe job {job} ended ({}) without a fingerprint",
                        state.unwrap_or_else(|| "vanished".to_string())
                    ));
                }
            }
            if start.elapsed() > PROBE_WAIT {
                let _ = self.login.sh(&format!("scancel {job}")).await;
                return Err(format!(
                    "the probe job {job} did not run within {} s (state {})",
                    PROBE_WAIT.as_secs(),
                    state.unwrap_or_default()
                ));
            }
        }
    }

    /// One `squeue` for every job of the study: `jobid_taskid` → (state,
    /// node, comment).
    async fn query(&self) -> Result<HashMap<String, (String, String, String)>, String> {
        self.poll_calls.fetch_add(1, Ordering::Relaxed);
        let out = self
            .login
            .sh(&format!(
                "squeue -h -r -t all --name={} -o '%i|%T|%N|%k'",
                quote_word(&self.job_name())
            ))
            .await
            .map_err(|e| format!("squeue failed: {e}"))?;
        let mut map = HashMap::new();
        for line in String::from_utf8_lossy(&out).lines() {
            let mut parts = line.splitn(4, '|');
            let (Some(id), Some(state)) = (parts.next(), parts.next()) else {
                continue;
            };
            let node = parts.next().unwrap_or_default().to_string();
            let comment = parts.next().unwrap_or_default().to_string();
            map.insert(
                id.trim().to_string(),
                (state.trim().to_string(), node, comment),
            );
        }
        Ok(map)
    }

    /// For a steered part: `None` when a node of its class is up, else
    /// why none is (`gpu-a down`). `sinfo` failing counts as up: only
    /// Slurm's word takes a class down.
    async fn class_down(&self) -> Option<String> {
        let steer = self.steer.lock().ok().and_then(|s| s.clone())?;
        let members = steer.nodes.lock().map(|m| m.of(&steer.class)).ok()?;
        if members.is_empty() {
            return None;
        }
        let out = self
            .login
            .sh(&format!(
                "sinfo -h -N -n {} -o '%N|%T'",
                quote_word(&members.join(","))
            ))
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&out);
        let mut states = Vec::new();
        for line in text.lines() {
            let Some((node, state)) = line.trim().split_once('|') else {
                continue;
            };
            if nodes::state_is_up(state.trim()) {
                return None;
            }
            states.push(format!("{node} {}", state.trim()));
        }
        states.sort();
        states.dedup();
        Some(if states.is_empty() {
            format!(
                "slurm: no node of the class is listed ({})",
                members.join(", ")
            )
        } else {
            format!(
                "slurm: every node of the class is down ({})",
                states.join(", ")
            )
        })
    }

    /// A steered part with tasks waiting in the queue checks that its
    /// class still has a node up; when none is, the waiting tasks are
    /// cancelled and lost (they run again when a node returns, like the
    /// trials of an ssh host that dropped) and the part reports itself
    /// down until `state` finds a node up.
    async fn check_class_nodes(&self) {
        let pending: Vec<String> = self
            .inflight
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(_, t)| {
                        t.tx.is_some()
                            && t.state == "PENDING"
                            && t.submitted.elapsed() > self.cfg.poll_interval
                    })
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default();
        if pending.is_empty() {
            return;
        }
        let Some(reason) = self.class_down().await else {
            return;
        };
        let now = Instant::now();
        if let Ok(mut d) = self.down.lock()
            && d.is_none()
        {
            *d = Some(ClassDown {
                reason: reason.clone(),
                since: now,
                next_check: now + self.cfg.poll_interval,
                reported: false,
            });
        }
        let mut lost = Vec::new();
        if let Ok(mut m) = self.inflight.lock() {
            for id in &pending {
                if let Some(t) = m.remove(id) {
                    lost.push(t);
                }
            }
        }
        if let Ok(mut c) = self.to_cancel.lock() {
            c.extend(pending);
        }
        for t in lost {
            if let Some(tx) = t.tx {
                let _ = tx.send(AttemptOutcome {
                    host_lost: Some(format!("{reason}; the task was waiting in the queue")),
                    trial_dir: Some(t.spec.trial_dir.clone()),
                    ..Default::default()
                });
            }
        }
        self.cancel_requested().await;
    }

    /// Cancel the tasks asked for (one `scancel`).
    async fn cancel_requested(&self) {
        let ids: Vec<String> = self
            .to_cancel
            .lock()
            .map(|mut s| s.drain().collect())
            .unwrap_or_default();
        if ids.is_empty() {
            return;
        }
        let args: Vec<String> = ids.iter().map(|i| quote_word(i)).collect();
        if let Err(e) = self.login.sh(&format!("scancel {}", args.join(" "))).await {
            tracing::warn!("scancel failed: {e}");
        }
    }

    /// Answer the waiting attempts of tasks that ended.
    async fn poll_once(&self) -> Result<(), String> {
        self.cancel_requested().await;
        if self.inflight.lock().map(|m| m.is_empty()).unwrap_or(true) {
            return Ok(());
        }
        let states = self.query().await?;
        let mut ended: Vec<(String, String)> = Vec::new();
        if let Ok(mut inflight) = self.inflight.lock() {
            for (id, task) in inflight.iter_mut() {
                match states.get(id) {
                    Some((state, node, _)) => {
                        task.state = state.clone();
                        if !node.is_empty() {
                            task.node = node.clone();
                        }
                        if is_final(state) {
                            ended.push((id.clone(), task.frames.clone()));
                        }
                    }
                    None if task.submitted.elapsed() > VANISH_GRACE => {
                        task.state = "VANISHED".to_string();
                        ended.push((id.clone(), task.frames.clone()));
                    }
                    None => {}
                }
            }
        }
        self.check_class_nodes().await;
        if ended.is_empty() {
            return Ok(());
        }
        let paths: Vec<String> = ended.iter().map(|(_, f)| f.clone()).collect();
        let reports = self.login.read_files(&paths).await?;
        let expected = self.expected.lock().ok().and_then(|e| e.clone());
        let steer = self.steer.lock().ok().and_then(|s| s.clone());
        let key = self.class_key();
        for (id, frames_path) in ended {
            let Some(task) = self.inflight.lock().ok().and_then(|mut m| m.remove(&id)) else {
                continue;
            };
            let bytes = reports.get(&frames_path).cloned().unwrap_or_default();
            let outcome = judge_task(&task, &bytes, expected.as_ref(), steer.as_ref(), &key).await;
            match task.tx {
                Some(tx) => {
                    let _ = tx.send(outcome);
                }
                None => {
                    // Adopted and not claimed yet: keep the outcome for the
                    // worker that will ask for this trial.
                    if let Ok(mut m) = self.inflight.lock() {
                        m.insert(
                            id.clone(),
                            Task {
                                state: "DONE".to_string(),
                                tx: None,
                                ..task
                            },
                        );
                    }
                    if let Ok(mut d) = self.finished.lock() {
                        d.insert(id, outcome);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Slurm states after which a task runs no more.
fn is_final(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "TIMEOUT"
            | "OUT_OF_MEMORY"
            | "CANCELLED"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "REVOKED"
            | "SPECIAL_EXIT"
    )
}

/// How a task that did not report its end is taken.
#[derive(Debug, PartialEq)]
enum Unreported {
    /// A failure of the trial, of this class of Slurm state.
    Failed { timed_out: bool, detail: String },
    /// Lost through no fault of the trial (node failure, preemption...).
    Lost(String),
}

fn unreported(state: &str, node: &str, cancelling: bool) -> Unreported {
    let on = if node.is_empty() {
        String::new()
    } else {
        format!(" on node {node}")
    };
    match state {
        "TIMEOUT" | "DEADLINE" => Unreported::Failed {
            timed_out: true,
            detail: format!("slurm: the job reached its time limit{on} (TIMEOUT)"),
        },
        "OUT_OF_MEMORY" => Unreported::Failed {
            timed_out: false,
            detail: format!(
                "slurmstepd: error: Detected 1 oom_kill event{on}: the job ran out of memory (OUT_OF_MEMORY)"
            ),
        },
        "FAILED" => Unreported::Failed {
            timed_out: false,
            detail: format!("slurm: the task failed{on} before its wrapper reported (FAILED)"),
        },
        "CANCELLED" if cancelling => Unreported::Lost("stopped by the launcher".to_string()),
        "CANCELLED" => {
            Unreported::Lost(format!("slurm: the task was cancelled outside tunectl{on}"))
        }
        "VANISHED" => {
            Unreported::Lost("slurm: the task vanished from the queue without a report".to_string())
        }
        other => Unreported::Lost(format!("slurm: {other}{on}")),
    }
}

/// The outcome of a task that ended, from its report and its Slurm state.
async fn judge_task(
    task: &Task,
    report: &[u8],
    expected: Option<&Fingerprint>,
    steer: Option<&Steering>,
    key: &ClassKey,
) -> AttemptOutcome {
    let mut outcome = AttemptOutcome {
        trial_dir: Some(task.spec.trial_dir.clone()),
        ..Default::default()
    };
    let mut got = Collected::default();
    let (frames, garbled) = wire::read_report(report).await;
    for f in frames {
        got.absorb(f);
    }
    let node = if task.node.is_empty() {
        String::new()
    } else {
        format!(" (node {})", task.node)
    };
    // Classed by the node that ran it: a task on a node of another class
    // than planned is lost and runs again. A mixed partition's part learns
    // the node's class, so that its later jobs keep off that node (and the
    // part of that class may use it).
    if let (Some(expected), Some(probe)) = (expected, got.files.get("probe")) {
        let fp = fingerprint::parse_probe_output(&String::from_utf8_lossy(probe));
        let class = fp.host_class_under(key);
        let learned = steer.is_some_and(|s| {
            !task.node.is_empty()
                && s.nodes
                    .lock()
                    .is_ok_and(|mut m| m.learn(&task.node, &class))
        });
        if class != expected.host_class_under(key) {
            let next = if steer.is_some() {
                format!(
                    "; node {} is kept out of this class's jobs from now on",
                    task.node
                )
            } else {
                "; pin the class with `constraint` or `gres`".to_string()
            };
            outcome.host_lost = Some(format!(
                "slurm: ran on a node of another host class{node}: {} (expected {}){next}",
                fp.class_label_under(key),
                expected.class_label_under(key)
            ));
            return outcome;
        }
        if learned {
            tracing::info!(node = %task.node, class = %fp.class_label_under(key), "a node joined the class");
        }
    }
    if task.cancelling && !got.ended {
        outcome.cancelled = true;
        return outcome;
    }
    if !got.ended {
        let why = unreported(&task.state, &task.node, task.cancelling);
        match why {
            Unreported::Lost(reason) => {
                outcome.host_lost = Some(match garbled {
                    Some(g) => format!("{reason}; its report: {g}"),
                    None => reason,
                });
            }
            Unreported::Failed { timed_out, detail } => {
                let warmups = got.runs.iter().filter(|r| r.1.is_some()).count() as u32;
                let failed_in_warmup = got
                    .runs
                    .last()
                    .is_some_and(|r| r.0 == crate::trial::Phase::Warmup.as_str());
                outcome.warmups_run = warmups.saturating_sub(1);
                outcome.failed_in_warmup = failed_in_warmup;
                outcome.run = Some(RunOutput {
                    exit: ExitInfo {
                        code: None,
                        signal: Some(9),
                    },
                    timed_out,
                    cancelled: false,
                    elapsed: Duration::ZERO,
                    stdout_tail: String::new(),
                    stderr_tail: detail,
                    stderr_head: String::new(),
                    streams: BTreeMap::new(),
                });
            }
        }
        return outcome;
    }
    if let Some(m) = got.setup.take() {
        outcome.setup_error = Some(m);
        return outcome;
    }
    let timed_out = got.timed_out;
    wire::fill_outcome(&mut outcome, &task.spec, got, timed_out);
    outcome
}

/// The submitter: gathers queued attempts into one array at a time.
async fn submitter(inner: Arc<Inner>) {
    loop {
        let notified = inner.wake_submitter.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let queued = inner.queue.lock().map(|q| q.len()).unwrap_or(0);
        if queued == 0 {
            tokio::select! {
                _ = notified => {}
                _ = inner.stop.cancelled() => return,
            }
            continue;
        }
        // Gather: until no attempt arrived for a moment, or a full array.
        let start = Instant::now();
        let mut last = queued;
        while start.elapsed() < GATHER_MAX {
            tokio::select! {
                _ = tokio::time::sleep(GATHER_QUIET) => {}
                _ = inner.stop.cancelled() => return,
            }
            let now = inner.queue.lock().map(|q| q.len()).unwrap_or(0);
            if now == last || now >= MAX_ARRAY {
                break;
            }
            last = now;
        }
        let batch: Vec<Pending> = inner
            .queue
            .lock()
            .map(|mut q| {
                let n = q.len().min(MAX_ARRAY);
                q.drain(..n).collect()
            })
            .unwrap_or_default();
        // Attempts cancelled while queued answer at once.
        let batch: Vec<Pending> = batch.into_iter().filter(|p| !p.tx.is_closed()).collect();
        if batch.is_empty() {
            continue;
        }
        let specs: Vec<&AttemptSpec> = batch.iter().map(|p| &p.spec).collect();
        match inner.submit(&specs, false, None).await {
            Ok((job, batch_dir)) => {
                if let Ok(mut m) = inner.inflight.lock() {
                    for (i, p) in batch.into_iter().enumerate() {
                        m.insert(
                            format!("{job}_{i}"),
                            Task {
                                spec: p.spec,
                                tx: Some(p.tx),
                                frames: format!("{batch_dir}/t{i}.frames"),
                                submitted: Instant::now(),
                                state: "SUBMITTED".to_string(),
                                node: String::new(),
                                cancelling: false,
                            },
                        );
                    }
                }
                inner.wake_poller.notify_one();
            }
            Err(e) => {
                tracing::warn!("submitting a job array failed: {e}");
                for p in batch {
                    let _ = p.tx.send(AttemptOutcome {
                        setup_error: Some(e.clone()),
                        ..Default::default()
                    });
                }
            }
        }
    }
}

/// The poller: one query per interval while tasks are in flight.
async fn poller(inner: Arc<Inner>) {
    loop {
        let interval = inner.cfg.poll_interval;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = inner.stop.cancelled() => return,
        }
        if let Err(e) = inner.poll_once().await {
            tracing::warn!("polling slurm failed: {e}");
        }
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

    fn checkpoint_dir(&self, study: &str, key: &str) -> Option<String> {
        // In the shared directory: the login host moves archives, the
        // nodes restore and save the state.
        let root = self.inner.root.read().ok().and_then(|r| r.clone())?;
        Some(format!("{root}/{study}/checkpoints/{key}"))
    }

    async fn checkpoint_claim(&self, base: &str) -> Result<Option<Claim>, String> {
        match &self.inner.login {
            Login::Local => checkpoint::claim_here(base).await,
            Login::Ssh(t) => t.checkpoint_claim(base).await,
        }
    }

    async fn checkpoint_install(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
        archive: &mut (dyn AsyncRead + Send + Unpin),
    ) -> Result<(), String> {
        match &self.inner.login {
            Login::Local => checkpoint::install_from(base.into(), attempt_id, claim, archive).await,
            Login::Ssh(t) => t.checkpoint_install(base, attempt_id, claim, archive).await,
        }
    }

    async fn checkpoint_commit(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
    ) -> Result<(), String> {
        match &self.inner.login {
            Login::Local => checkpoint::commit_here(base, attempt_id, claim).await,
            Login::Ssh(t) => t.checkpoint_commit(base, attempt_id, claim).await,
        }
    }

    async fn checkpoint_size(&self, base: &str) -> Result<u64, String> {
        match &self.inner.login {
            Login::Local => checkpoint::size_here(base).await,
            Login::Ssh(t) => t.checkpoint_size(base).await,
        }
    }

    async fn checkpoint_export(
        &self,
        base: &str,
        sink: &mut (dyn AsyncWrite + Send + Unpin),
    ) -> Result<(), String> {
        match &self.inner.login {
            Login::Local => checkpoint::pack_to(base.into(), sink).await,
            Login::Ssh(t) => t.checkpoint_export(base, sink).await,
        }
    }

    async fn checkpoint_discard(&self, base: &str, attempt_id: &str) {
        match &self.inner.login {
            Login::Local => checkpoint::discard_here(base, attempt_id).await,
            Login::Ssh(t) => t.checkpoint_discard(base, attempt_id).await,
        }
    }

    fn adopts(&self, trial_key: &str) -> bool {
        self.inner
            .adopted
            .lock()
            .is_ok_and(|a| a.contains_key(trial_key))
    }

    async fn prepare(&self, study_id: &str) -> Result<(), String> {
        if let Ok(mut s) = self.inner.study.write() {
            *s = Some(study_id.to_string());
        }
        self.adopt().await
    }

    async fn probe(&self, tools: &BTreeMap<String, String>) -> Result<Fingerprint, String> {
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
    ) -> Result<Discovery, String> {
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
                    host_lost: Some("slurm: the launcher stopped watching the task".to_string()),
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
                    cancelled: true,
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

/// The attempt id an adopted task ran under.
fn adopted_attempt_id(id: &str, inner: &Inner) -> String {
    inner
        .adopted_ids
        .lock()
        .ok()
        .and_then(|m| m.get(id).cloned())
        .unwrap_or_default()
}

impl SlurmTransport {
    fn start(&self) {
        let inner = self.inner.clone();
        self.inner.started.call_once(move || {
            tokio::spawn(submitter(inner.clone()));
            tokio::spawn(poller(inner));
        });
    }

    /// [`Transport::discover`]: a partition without `constraint` whose
    /// nodes are of several types is probed once per type (`--nodelist`,
    /// all at once) and split into one part per host class found. A type
    /// with no node up, or whose probe fails, is left out with a warning
    /// (a task that lands on one of its nodes later is classed by its own
    /// probe). `sinfo` failing leaves the entry whole.
    async fn discover_classes(
        &self,
        study_id: &str,
        tools: &BTreeMap<String, String>,
        key: &ClassKey,
    ) -> Result<Discovery, String> {
        let inner = &self.inner;
        if let Ok(mut k) = inner.class_key.lock() {
            *k = key.clone();
        }
        if let Ok(mut s) = inner.study.write() {
            *s = Some(study_id.to_string());
        }
        if let Ok(mut t) = inner.tools.lock() {
            *t = tools.clone();
        }
        if inner.cfg.constraint.is_some() {
            return Ok(Discovery::Probe);
        }
        let partition = inner.cfg.partition.as_deref();
        let listed = match inner.login.sh(&nodes::sinfo_command(partition)).await {
            Ok(out) => String::from_utf8_lossy(&out).into_owned(),
            Err(e) => {
                tracing::warn!(host = %inner.name, "cannot list the partition's nodes ({e}): probing one node for the whole entry");
                return Ok(Discovery::Probe);
            }
        };
        let types = nodes::parse_sinfo(&listed, partition);
        if types.len() < 2 {
            return Ok(Discovery::Probe);
        }
        let probes = futures::future::join_all(types.iter().map(|t| async move {
            match t.up.first() {
                Some(n) => inner.probe_on(tools, Some(n)).await,
                None => Err("no node of this type is up".to_string()),
            }
        }))
        .await;
        let map = Arc::new(Mutex::new(NodeClasses::default()));
        // Host classes in order of their first node type: (fingerprint,
        // types).
        let mut classes: Vec<(Fingerprint, Vec<&nodes::NodeType>)> = Vec::new();
        let mut left_out = Vec::new();
        for (t, probe) in types.iter().zip(probes) {
            let fp = match probe {
                Ok(fp) => fp,
                Err(e) => {
                    left_out.push(format!("{}: {e}", t.describe()));
                    continue;
                }
            };
            let class = fp.host_class_under(key);
            if let Ok(mut m) = map.lock() {
                for n in &t.nodes {
                    m.learn(n, &class);
                }
            }
            match classes
                .iter_mut()
                .find(|(f, _)| f.host_class_under(key) == class)
            {
                Some((_, ts)) => ts.push(t),
                None => classes.push((fp, vec![t])),
            }
        }
        for why in &left_out {
            tracing::warn!(host = %inner.name, "node type left out: {why}");
        }
        if classes.is_empty() {
            return Err(format!(
                "no node type of the partition answered its probe: {}",
                left_out.join("; ")
            ));
        }
        if classes.len() == 1 {
            let (fp, _) = classes.remove(0);
            if let Ok(mut e) = inner.expected.lock() {
                *e = Some(fp.clone());
            }
            if let Ok(mut s) = inner.steer.lock() {
                *s = Some(Steering {
                    class: fp.host_class_under(key),
                    nodes: map,
                });
            }
            self.start();
            return Ok(Discovery::Probed(Box::new(fp)));
        }
        let mut parts: Vec<Part> = Vec::new();
        for (fp, ts) in classes {
            let mut suffix = ts.first().map(|t| t.tag()).unwrap_or_default();
            if parts.iter().any(|p| p.suffix == suffix) {
                let first = ts
                    .first()
                    .and_then(|t| t.nodes.first())
                    .cloned()
                    .unwrap_or_default();
                suffix = format!("{suffix}-{first}");
            }
            let mut members: Vec<String> = ts.iter().flat_map(|t| t.nodes.clone()).collect();
            members.sort();
            let steering = Steering {
                class: fp.host_class_under(key),
                nodes: map.clone(),
            };
            let part = self.part(&suffix, fp.clone(), steering);
            part.start();
            parts.push(Part {
                suffix,
                nodes: members,
                fingerprint: fp,
                transport: Arc::new(part),
            });
        }
        Ok(Discovery::Parts(parts))
    }

    /// Find this study's jobs of earlier launchers and adopt their tasks.
    async fn adopt(&self) -> Result<(), String> {
        let inner = &self.inner;
        let states = match inner.query().await {
            Ok(s) => s,
            Err(e) => return Err(format!("cannot list the study's jobs: {e}")),
        };
        // Batch directories named in the jobs' comments.
        let mut batches: BTreeMap<String, String> = BTreeMap::new();
        for (id, (_, _, comment)) in &states {
            let job = id.split('_').next().unwrap_or_default().to_string();
            // Another entry's (or part's) jobs are its own to adopt; jobs
            // of launchers that did not name the host are anyone's.
            let host = comment.split(':').find_map(|p| p.strip_prefix("host="));
            if host.is_some_and(|h| h != inner.name) {
                continue;
            }
            if let Some(b) = comment.split(':').find_map(|p| p.strip_prefix("batch=")) {
                batches.insert(job, b.to_string());
            }
        }
        if batches.is_empty() {
            return Ok(());
        }
        let root = inner.root().await?;
        let study = inner.study_id();
        let manifest_paths: Vec<String> = batches
            .values()
            .map(|b| format!("{root}/{study}/batches/{b}/manifest.json"))
            .collect();
        let manifests = inner.login.read_files(&manifest_paths).await?;
        let mut adopted = 0;
        for (job, batch) in &batches {
            let dir = format!("{root}/{study}/batches/{batch}");
            let Some(bytes) = manifests.get(&format!("{dir}/manifest.json")) else {
                continue;
            };
            let Ok(manifest) = serde_json::from_slice::<Manifest>(bytes) else {
                continue;
            };
            for t in manifest.tasks {
                let id = format!("{job}_{}", t.task);
                let Some((state, node, _)) = states.get(&id) else {
                    continue;
                };
                let spec = AttemptSpec {
                    study_id: study.clone(),
                    trial_key: t.trial_key.clone(),
                    attempt_id: t.attempt_id.clone(),
                    command: String::new(),
                    env: Vec::new(),
                    timeout: Duration::ZERO,
                    warmup: 0,
                    outputs: t.outputs.clone(),
                    tolerance_files: t.tolerance_files.clone(),
                    result_files: t.result_files.clone(),
                    streams: t.streams.clone(),
                    slot: 0,
                    trial_dir: t.trial_dir.clone(),
                    result_path: String::new(),
                    keep_logs: false,
                    checkpoint: t.checkpoint.clone(),
                };
                if let Ok(mut ids) = inner.adopted_ids.lock() {
                    ids.insert(id.clone(), t.attempt_id.clone());
                }
                if let Ok(mut m) = inner.inflight.lock() {
                    m.insert(
                        id.clone(),
                        Task {
                            spec,
                            tx: None,
                            frames: format!("{dir}/t{}.frames", t.task),
                            submitted: Instant::now(),
                            state: state.clone(),
                            node: node.clone(),
                            cancelling: false,
                        },
                    );
                }
                if let Ok(mut a) = inner.adopted.lock() {
                    a.insert(t.trial_key, id);
                }
                adopted += 1;
            }
        }
        if adopted > 0 {
            tracing::info!(host = %inner.name, adopted, "adopted tasks of an earlier launcher");
            self.start();
            inner.wake_poller.notify_one();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreported_states_map_to_failure_classes_or_loss() {
        assert!(matches!(
            unreported("TIMEOUT", "gpu-a", false),
            Unreported::Failed {
                timed_out: true,
                ..
            }
        ));
        match unreported("OUT_OF_MEMORY", "gpu-a", false) {
            Unreported::Failed { timed_out, detail } => {
                assert!(!timed_out);
                let c = crate::decide::gate::Classifier::default();
                let (class, _) = c
                    .classify(
                        &ExitInfo {
                            code: None,
                            signal: Some(9),
                        },
                        false,
                        &detail,
                        60.0,
                    )
                    .expect("a failure");
                assert_eq!(class.as_str(), "oom");
            }
            other => panic!("{other:?}"),
        }
        for lost in ["NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "VANISHED"] {
            assert!(
                matches!(unreported(lost, "", false), Unreported::Lost(_)),
                "{lost}"
            );
        }
        assert_eq!(
            unreported("CANCELLED", "", true),
            Unreported::Lost("stopped by the launcher".to_string())
        );
        match unreported("CANCELLED", "gpu-b", false) {
            Unreported::Lost(r) => assert!(r.contains("outside tunectl"), "{r}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn final_states() {
        for s in ["COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED"] {
            assert!(is_final(s));
        }
        for s in [
            "PENDING",
            "RUNNING",
            "COMPLETING",
            "CONFIGURING",
            "REQUEUED",
        ] {
            assert!(!is_final(s));
        }
    }

    #[test]
    fn the_default_template_renders_every_option() {
        let cfg = SlurmHost {
            login: "local".into(),
            partition: Some("gpu".into()),
            account: Some("acct".into()),
            qos: None,
            gres: Some("gpu:h100:1".into()),
            constraint: Some("h100".into()),
            time_limit: None,
            sbatch_args: vec!["--exclusive".into()],
            max_jobs_in_flight: 100,
            array_throttle: Some(8),
            poll_interval: Duration::from_secs(30),
            shared_dir: None,
            batch_template: None,
        };
        let t = SlurmTransport::new("p", cfg, Login::Local, None, false);
        if let Ok(mut s) = t.inner.study.write() {
            *s = Some("st".into());
        }
        let text = t
            .inner
            .render_batch("/shared/st/batches/b 1", 12, "7", "b1")
            .expect("render");
        for line in [
            "#SBATCH --job-name=tunectl-st",
            "#SBATCH --comment=tunectl:study=st:batch=b1:host=p",
            "#SBATCH --array=0-11%8",
            "#SBATCH --time=7",
            "#SBATCH --partition=gpu",
            "#SBATCH --account=acct",
            "#SBATCH --gres=gpu:h100:1",
            "#SBATCH --constraint=h100",
            "#SBATCH --exclusive",
            "#SBATCH --no-requeue",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(!text.contains("--qos"), "{text}");
        // A newline anywhere would be a line of its own: refused.
        let mut cfg = t.inner.cfg.clone();
        cfg.partition = Some("gpu\n#SBATCH --uid=0".into());
        let bad = SlurmTransport::new("p", cfg, Login::Local, None, false);
        let err = bad
            .inner
            .render_batch("/s", 1, "7", "b1")
            .expect_err("refused");
        assert!(
            err.contains("partition") && err.contains("control character"),
            "{err}"
        );
        let mut cfg = t.inner.cfg.clone();
        cfg.sbatch_args.push("--x\nrm -rf ~".into());
        let bad = SlurmTransport::new("p", cfg, Login::Local, None, false);
        assert!(bad.inner.render_batch("/s", 1, "7", "b1").is_err());
        assert!(
            text.contains("exec /bin/sh '/shared/st/batches/b 1'/t\"$SLURM_ARRAY_TASK_ID\".sh"),
            "{text}"
        );
    }
}
