//! Running one trial: take its lease, check the ledger does not already
//! hold it, render its command and environment (the trial contract), hand
//! it to the host's transport, judge the outcome, scrub secrets from what
//! is kept, and write the attempt record (and logs) to the ledger.
//!
//! A lease lost while the trial runs (this launcher stalled past its expiry
//! and another took over) stops the attempt: it is lost, and runs again.
//! Once an attempt record cannot be written, nothing new starts: running
//! trials finish and get one try each to record.

mod elsewhere;
mod interrupted;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::events::{Emitter, LaunchEvent, Rejection, UnrecordedAttempt, Written};
use super::run_study::LaunchHost;
use super::schedule::Ran;
use super::schedule::drift::Reading;
use crate::decide::gate::Classifier;
use crate::ledger::checkpoint::DEFAULT_CHECKPOINT_MAX_BYTES;
use crate::ledger::lease::{Held, Lease, renew_every};
use crate::ledger::liveness::{Liveness, lease_time, long_ttl};
use crate::ledger::records::{self, AttemptRecord, AttemptStatus, PrunedAt, SharedStr};
use crate::ledger::{CorruptObject, Ledger, new_attempt_id};
use crate::plan::Plan;
use crate::scrub::{scrub_secrets, secret_values};
use crate::search::PruneRule;
use crate::space;
use crate::spec::{CommandRenderer, Study, TrialVars, Value};
use crate::transport::attempt::{RESULT_FILE, judge_with};
use crate::transport::checkpoint::{Carry, RungCheckpoint, checkpoint_key};
use crate::transport::{AttemptSpec, Ended};
use crate::trial::Role;

/// How an attempt to run a trial ended.
pub enum TrialResult {
    Done(Ran),
    /// Another launcher holds the trial's lease: try again in this long.
    Held(Duration),
    /// Unrecorded (render error, lease error, ledger write failed).
    Unrecorded,
    /// Not started: the ledger cannot record attempts.
    NotStarted,
}

/// One trial to run.
#[derive(Debug, Clone)]
pub struct TrialJob {
    /// Index of the host in the launch.
    pub host: usize,
    pub slot: u32,
    pub class: usize,
    pub cell: u32,
    pub config: u64,
    pub repeat: u32,
    pub role: Role,
    pub budget: Option<f64>,
    pub key: String,
    /// Run the study's warm-ups first.
    pub warm: bool,
    /// When to stop this rung early from its progress file
    /// (`fidelity.prune`); `None` for every other trial.
    pub prune: Option<PruneRule>,
    /// The budgets at which its progress is kept in its record
    /// (`AttemptRecord::readings`: a rung of a `kind: tpe` search with
    /// `fidelity.prune`); empty for every other trial.
    pub reads: Vec<f64>,
}

/// The trial time a launch may spend (`budget.max_trial_time`), shared by
/// its rounds: every attempt's duration (warm-ups included) on every slot
/// adds to it; once it reaches the cap no new trial starts, and the ones
/// running finish and are recorded.
#[derive(Debug, Default)]
pub struct Spend {
    cap_ms: Option<u64>,
    spent_ms: AtomicU64,
    reached: AtomicBool,
}

impl Spend {
    pub fn new(cap: Option<Duration>) -> Spend {
        Spend {
            cap_ms: cap.map(|c| u64::try_from(c.as_millis()).unwrap_or(u64::MAX)),
            ..Spend::default()
        }
    }

    /// Count an attempt's duration; true the first time the cap is reached.
    pub fn add(&self, d: Duration) -> bool {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let spent = self
            .spent_ms
            .fetch_add(ms, Ordering::SeqCst)
            .saturating_add(ms);
        match self.cap_ms {
            Some(cap) if spent >= cap => !self.reached.swap(true, Ordering::SeqCst),
            _ => false,
        }
    }

    /// Whether the cap is reached: nothing new starts.
    pub fn exhausted(&self) -> bool {
        self.reached.load(Ordering::SeqCst)
    }

    pub fn spent(&self) -> Duration {
        Duration::from_millis(self.spent_ms.load(Ordering::SeqCst))
    }

    pub fn cap(&self) -> Option<Duration> {
        self.cap_ms.map(Duration::from_millis)
    }
}

/// What every trial of a launch round shares.
pub struct Runner<'a> {
    pub study: &'a Study,
    pub study_id: &'a str,
    pub spec_hash: String,
    pub plan: &'a Plan,
    pub ledger: &'a Ledger,
    renderer: CommandRenderer,
    /// `objective.command`, for everything but rung trials.
    objective_renderer: Option<CommandRenderer>,
    classifier: Classifier,
    class_ids: Vec<String>,
    /// Class (index into `class_ids`) and name of each host.
    host_class: Vec<usize>,
    host_names: Vec<String>,
    /// Fingerprint hash of each host.
    fingerprints: Vec<String>,
    /// Variable and device pinned by each slot of each host.
    devices: Vec<Vec<Option<(String, String)>>>,
    /// This launcher, as lease owner.
    owner: String,
    /// This launcher's liveness, which keeps its trials' leases
    /// ([`crate::ledger::liveness`]).
    liveness: Arc<Liveness>,
    /// Values of credential variables in the environment, scrubbed from
    /// everything recorded (a trial inherits the environment and may print
    /// it).
    secrets: Vec<String>,
    store_logs: bool,
    cancel: CancellationToken,
    events: &'a Emitter,
    /// Ledger objects already named in a warning (unreadable, misplaced).
    named_objects: Mutex<HashSet<String>>,
    /// (trial key, lease owner) already said to be waited on.
    named_holders: Mutex<HashSet<(String, String)>>,
    /// An attempt record could not be written (after its retries).
    ledger_failing: AtomicBool,
    spend: Arc<Spend>,
}

/// What a [`Runner`] is made from.
pub struct RunnerSetup<'a> {
    pub study: &'a Study,
    pub study_id: &'a str,
    pub spec_hash: String,
    pub plan: &'a Plan,
    pub ledger: &'a Ledger,
    pub class_ids: Vec<String>,
    pub host_class: Vec<usize>,
    pub host_names: Vec<String>,
    pub fingerprints: Vec<String>,
    pub devices: Vec<Vec<Option<(String, String)>>>,
    pub owner: String,
    pub store_logs: bool,
    pub cancel: CancellationToken,
    pub events: &'a Emitter,
    /// Ledger objects already reported as unreadable.
    pub named_objects: HashSet<String>,
    pub spend: Arc<Spend>,
}

/// How long until a lease that expires at `expires_at` (RFC 3339) does:
/// `None` when it has or the time does not read.
fn until_expiry(expires_at: &str) -> Option<Duration> {
    let t = chrono::DateTime::parse_from_rfc3339(expires_at).ok()?;
    (t.with_timezone(&chrono::Utc) - chrono::Utc::now())
        .to_std()
        .ok()
}

/// `held` renewed up to generation `to`: its release deletes every
/// generation this launcher wrote, the renewals' included (a generation
/// left behind would show the trial as running until it expires).
fn renewed_to(held: &mut Option<Lease>, to: Option<u64>) {
    if let (Some(h), Some(to)) = (held.as_mut(), to) {
        h.record.generation = h.record.generation.max(to);
    }
}

impl<'a> Runner<'a> {
    pub fn new(s: RunnerSetup<'a>) -> Result<Runner<'a>, String> {
        let objective_renderer = match &s.study.objective_command {
            Some(c) => Some(CommandRenderer::with_command(s.study, c)?),
            None => None,
        };
        Ok(Runner {
            renderer: CommandRenderer::new(s.study)?,
            objective_renderer,
            classifier: Classifier::new(&s.study.gate.patterns).map_err(|e| e.to_string())?,
            study: s.study,
            study_id: s.study_id,
            spec_hash: s.spec_hash,
            plan: s.plan,
            ledger: s.ledger,
            class_ids: s.class_ids,
            host_class: s.host_class,
            host_names: s.host_names,
            fingerprints: s.fingerprints,
            devices: s.devices,
            liveness: Arc::new(Liveness::new(&s.owner)),
            owner: s.owner,
            secrets: secret_values(),
            store_logs: s.store_logs,
            cancel: s.cancel,
            events: s.events,
            named_objects: Mutex::new(s.named_objects),
            named_holders: Mutex::default(),
            ledger_failing: AtomicBool::new(false),
            spend: s.spend,
        })
    }

    /// This launcher's liveness: the launch keeps it written
    /// ([`Ledger::keep_alive`]) while its trials run.
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// Keep `lease` for another quarter of a lease time, `renewed` being
    /// when it was last written; `false` when it is lost. A lease kept by
    /// this launcher's liveness is lost when the liveness may lapse, and
    /// written again only every quarter of [`long_ttl`]; any other lease
    /// is renewed every time.
    async fn keep_lease(&self, lease: &mut Lease, renewed: &mut tokio::time::Instant) -> bool {
        if lease.record.while_live {
            if !self.liveness.alive() {
                return false;
            }
            if renewed.elapsed() < long_ttl() / 4 {
                return true;
            }
        }
        *renewed = tokio::time::Instant::now();
        let ttl = lease_time(lease.record.while_live);
        matches!(self.ledger.renew_lease(lease, ttl).await, Ok(true))
    }

    /// Whether an attempt record could not be written in this launch.
    pub fn ledger_failing(&self) -> bool {
        self.ledger_failing.load(Ordering::SeqCst)
    }

    /// Whether this launch starts no new trial: the ledger could not
    /// record an attempt, or the trial-time cap is spent.
    pub fn stopped_starting(&self) -> bool {
        self.ledger_failing() || self.spend.exhausted()
    }

    /// Run one trial and record it.
    pub async fn run(&self, host: &LaunchHost, job: TrialJob) -> TrialResult {
        // Nothing new starts once the ledger could not record an attempt,
        // or once the trial-time cap is spent.
        if self.stopped_starting() {
            return TrialResult::NotStarted;
        }
        // Take the trial's lease first: no two launchers run it at once.
        // Anchors are unique to this host and need none.
        let lease = if matches!(job.role, Role::Anchor { .. }) {
            None
        } else {
            let (config, cell) = self.labels(&job);
            let what = format!("{} {config} @ {cell}", job.role.kind().as_str());
            // Kept by this launcher's liveness while it is sure to hold.
            let while_live = self.liveness.alive();
            let holder = crate::ledger::lease::Holder {
                owner: &self.owner,
                host: &host.name,
                what: &what,
                while_live,
            };
            match self
                .ledger
                .acquire_lease(self.study_id, &job.key, &holder, lease_time(while_live))
                .await
            {
                Ok(Ok(lease)) => {
                    if let Some(stale) = &lease.took_over {
                        self.events.emit(LaunchEvent::LeaseFromTheFuture {
                            config: config.clone(),
                            cell: cell.clone(),
                            trial: job.key.chars().take(16).collect(),
                            owner: stale.owner.clone(),
                            host: stale.host.clone(),
                            expires_at: stale.expires_at.clone(),
                        });
                    }
                    Some(lease)
                }
                Ok(Err(Held::By {
                    owner,
                    host: held_on,
                    expires_at,
                })) => {
                    // Held a moment by this launcher, recording there a run
                    // of this class that landed elsewhere: look again soon.
                    if owner == self.elsewhere_owner() {
                        return TrialResult::Held(Duration::from_millis(200));
                    }
                    let fresh = self
                        .named_holders
                        .lock()
                        .map(|mut n| n.insert((job.key.clone(), owner.clone())))
                        .unwrap_or(true);
                    if fresh {
                        self.events.emit(LaunchEvent::LeaseHeld {
                            config,
                            cell,
                            trial: job.key.chars().take(16).collect(),
                            owner,
                            host: held_on,
                            expires_at: expires_at.clone(),
                        });
                    }
                    let until = until_expiry(&expires_at).unwrap_or(renew_every());
                    return TrialResult::Held(
                        until.min(renew_every()).max(Duration::from_millis(100)),
                    );
                }
                Err(e) => {
                    self.events.emit(LaunchEvent::LeaseError {
                        error: e.to_string(),
                    });
                    return TrialResult::Unrecorded;
                }
            }
        };
        // Finished elsewhere since this launch read the ledger? Objects
        // under the trial's key that are not its records (a copy of
        // another trial's attempt) do not count, and are named once.
        let finished = match &lease {
            // A local ledger saw nothing under the key once leased.
            Some(l) if l.no_attempts => None,
            Some(_) => match self.ledger.terminal_attempt(self.study_id, &job.key).await {
                Ok((done, skipped)) => {
                    self.name_objects(&skipped);
                    done
                }
                Err(_) => None,
            },
            None => None,
        };
        // What this launcher gives up at the end: the lease as renewed
        // while the trial ran, or nothing once it went with the record.
        let mut held = lease.clone();
        let result = match finished {
            Some(done) => TrialResult::Done(Ran {
                status: done.status,
                key: job.key,
                attempt_id: done.attempt_id.clone(),
                value: None,
                host_lost: false,
                record: Some(Arc::new(done)),
            }),
            None => self.run_leased(host, job, lease, &mut held).await,
        };
        if let Some(l) = &held {
            self.ledger.release_lease(l).await;
        }
        result
    }

    /// A trial's config and cell labels, for a message.
    fn labels(&self, job: &TrialJob) -> (String, String) {
        (
            self.plan.space.label(self.study, job.config),
            space::cell_label(self.study, &self.plan.cells[job.cell as usize]),
        )
    }

    /// Warn once about each ledger object that is not what its key says
    /// (its trial runs as if it were not there).
    pub fn name_objects(&self, objects: &[CorruptObject]) {
        let fresh: Vec<&CorruptObject> = match self.named_objects.lock() {
            Ok(mut named) => objects
                .iter()
                .filter(|c| named.insert(c.key.clone()))
                .collect(),
            Err(_) => objects.iter().collect(),
        };
        for c in fresh {
            self.events.emit(LaunchEvent::UnreadableObject {
                key: c.key.clone(),
                reason: c.reason.clone(),
            });
        }
    }

    /// The template variables of a trial.
    fn vars(&self, host: &LaunchHost, job: &TrialJob, dir: &str, result: &str) -> TrialVars {
        let mut vars = TrialVars::default();
        for (k, v) in self
            .study
            .knobs
            .iter()
            .zip(self.plan.space.values(self.study, job.config))
        {
            vars.set(&k.name, v);
        }
        for (a, v) in self
            .study
            .cells
            .iter()
            .zip(&self.plan.cells[job.cell as usize])
        {
            vars.set(&a.name, v.clone());
        }
        vars.set("study", Value::Str(self.study_id.to_string()));
        vars.set(
            "study_dir",
            Value::Str(self.study.dir.display().to_string()),
        );
        vars.set("trial_id", Value::Str(job.key.clone()));
        vars.set("trial_dir", Value::Str(dir.to_string()));
        vars.set("result", Value::Str(result.to_string()));
        vars.set("repeat", Value::Int(i64::from(job.repeat)));
        vars.set("budget", budget_value(job.budget).unwrap_or(Value::Null));
        vars.set("host", Value::Str(host.name.clone()));
        vars.set("slot", Value::Int(i64::from(job.slot)));
        vars.set("phase", Value::Str("measure".to_string()));
        vars
    }

    /// The trial contract's environment.
    fn contract_env(
        &self,
        host: &LaunchHost,
        job: &TrialJob,
        attempt_id: &str,
        trial_dir: &str,
        result_path: &str,
    ) -> Vec<(String, String)> {
        let config_json = self.plan.space.config_json(self.study, job.config);
        let cell_json = space::cell_json(self.study, &self.plan.cells[job.cell as usize]);
        let mut env: Vec<(String, String)> = vec![
            ("TUNECTL_STUDY".into(), self.study_id.to_string()),
            (
                "TUNECTL_STUDY_DIR".into(),
                self.study.dir.display().to_string(),
            ),
            ("TUNECTL_TRIAL_ID".into(), job.key.clone()),
            ("TUNECTL_ATTEMPT_ID".into(), attempt_id.to_string()),
            ("TUNECTL_TRIAL_DIR".into(), trial_dir.to_string()),
            ("TUNECTL_RESULT".into(), result_path.to_string()),
            (
                "TUNECTL_KNOBS".into(),
                crate::canon::canonical_json(&config_json),
            ),
            (
                "TUNECTL_CELL".into(),
                crate::canon::canonical_json(&cell_json),
            ),
            (
                "TUNECTL_BUDGET".into(),
                budget_value(job.budget)
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
            ),
            ("TUNECTL_REPEAT".into(), job.repeat.to_string()),
            ("TUNECTL_ROLE".into(), job.role.name().to_string()),
            ("TUNECTL_HOST".into(), host.name.clone()),
            ("TUNECTL_SLOT".into(), job.slot.to_string()),
        ];
        env.extend(space::value_env(
            self.study,
            &self.plan.space.values(self.study, job.config),
            &self.plan.cells[job.cell as usize],
        ));
        if let Some(Some((var, device))) = self.devices[job.host].get(job.slot as usize) {
            env.push((var.clone(), device.clone()));
        }
        env
    }

    /// What a rung's checkpoint needs on `host`; `None` when the host
    /// keeps no checkpoints.
    fn carry<'h>(&'h self, host: &'h LaunchHost) -> Option<Carry<'h>> {
        Some(Carry {
            ledger: self.ledger,
            store: host.transport.checkpoints()?,
            host: &host.name,
            study_id: self.study_id,
            spec_hash: &self.spec_hash,
            cap: self
                .study
                .fidelity
                .as_ref()
                .and_then(|f| f.checkpoint_max_bytes)
                .unwrap_or(DEFAULT_CHECKPOINT_MAX_BYTES),
        })
    }

    /// The checkpoint directory of a rung under `fidelity.continuation`,
    /// on a host that keeps checkpoints. A candidate's rung continues its
    /// config's last committed rung; the baseline's rungs run from zero
    /// and commit nothing (they are the gate's reference at each budget,
    /// and run side by side).
    async fn checkpoint_for(
        &self,
        host: &LaunchHost,
        job: &TrialJob,
        attempt_id: &str,
        warnings: &mut Vec<crate::transport::checkpoint::CheckpointProblem>,
    ) -> Option<RungCheckpoint> {
        let fidelity = self.study.fidelity.as_ref()?;
        if !fidelity.continuation || job.role != Role::Rung {
            return None;
        }
        let budget = job.budget?;
        let key = checkpoint_key(
            self.study_id,
            &self.plan.space.config_json(self.study, job.config),
            &space::cell_json(self.study, &self.plan.cells[job.cell as usize]),
            &self.class_ids[job.class],
        );
        let continues = job.config != self.plan.space.baseline();
        let adopting = host.transport.adopts(&job.key);
        RungCheckpoint::prepare(
            &self.carry(host)?,
            &key,
            attempt_id,
            budget,
            continues,
            adopting,
            warnings,
        )
        .await
    }

    /// Run `work` while renewing `lease` (a checkpoint brought to the host
    /// may take longer than a lease lives); `None` when the lease was lost
    /// meanwhile (`work` is dropped).
    async fn holding<T>(
        &self,
        lease: &mut Option<Lease>,
        work: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let Some(lease) = lease.as_mut() else {
            return Some(work.await);
        };
        tokio::pin!(work);
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::select! {
                out = &mut work => return Some(out),
                _ = tokio::time::sleep(renew_every()) => {
                    if !self.keep_lease(lease, &mut renewed).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Say what became of a rung's checkpoint, when it was not what the
    /// contract promises (carried to the next rung).
    fn checkpoint_warnings(
        &self,
        config: &str,
        cell: &str,
        warnings: Vec<crate::transport::checkpoint::CheckpointProblem>,
    ) {
        for problem in warnings {
            self.events.emit(LaunchEvent::CheckpointNotCarried {
                config: config.to_string(),
                cell: cell.to_string(),
                problem,
            });
        }
    }

    /// Run a trial whose lease this launcher holds, renewing it meanwhile.
    /// `held` is what the caller releases afterwards: it learns of every
    /// renewal (each is a generation of the lease to delete), and becomes
    /// `None` when the lease went with the attempt's record (nothing else
    /// is written after it).
    async fn run_leased(
        &self,
        host: &LaunchHost,
        job: TrialJob,
        mut lease: Option<Lease>,
        held: &mut Option<Lease>,
    ) -> TrialResult {
        let study = self.study;
        let attempt_id = new_attempt_id();
        let cell_values = &self.plan.cells[job.cell as usize];
        let config_label = self.plan.space.label(study, job.config);
        let cell_label = space::cell_label(study, cell_values);
        let trial_dir = host
            .transport
            .trial_dir(self.study_id, &job.key, &attempt_id);
        let result_path = format!("{trial_dir}/{RESULT_FILE}");
        let vars = self.vars(host, &job, &trial_dir, &result_path);
        let renderer = match (&job.role, &self.objective_renderer) {
            (Role::Rung, _) | (_, None) => &self.renderer,
            (_, Some(objective)) => objective,
        };
        // The command refers to the environment's variables for its values
        // (the contract's, `trial.env`'s, and those it adds): render it
        // once the rest of that environment is known.
        let mut env = self.contract_env(host, &job, &attempt_id, &trial_dir, &result_path);
        let rendered = renderer.env(&vars).and_then(|extra| {
            env.extend(extra);
            renderer.command(&vars, &env)
        });
        let command = match rendered {
            Ok(r) => {
                env.extend(r.env);
                r.command
            }
            Err(error) => {
                self.events.emit(LaunchEvent::RenderFailed {
                    config: config_label,
                    cell: cell_label,
                    error,
                });
                return TrialResult::Unrecorded;
            }
        };
        let mut warnings = Vec::new();
        let prepared = self
            .holding(
                &mut lease,
                self.checkpoint_for(host, &job, &attempt_id, &mut warnings),
            )
            .await;
        self.checkpoint_warnings(&config_label, &cell_label, warnings);
        renewed_to(held, lease.as_ref().map(|l| l.record.generation));
        let Some(checkpoint) = prepared else {
            // Taken over while its checkpoint was brought to the host:
            // the other launcher runs it.
            self.events.emit(LaunchEvent::LeaseLost {
                config: config_label,
                cell: cell_label,
            });
            return TrialResult::Held(renew_every());
        };
        let fidelity = study.fidelity.as_ref();
        if job.role == Role::Rung && fidelity.is_some_and(|f| f.continuation) {
            // On a host that keeps no checkpoints a rung gets its own
            // fresh directory and never a resume: it runs from zero.
            let dir = checkpoint
                .as_ref()
                .map_or(trial_dir.clone(), |c| c.run.run_dir.clone());
            env.push(("TUNECTL_CHECKPOINT_DIR".into(), dir));
            if let Some(from) = checkpoint.as_ref().and_then(|c| c.resume_from) {
                env.push((
                    "TUNECTL_RESUME_FROM_BUDGET".into(),
                    budget_value(Some(from))
                        .map(|v| v.to_string())
                        .unwrap_or_default(),
                ));
            }
        }
        let progress_file = format!("{trial_dir}/{PROGRESS_FILE}");
        if job.role == Role::Rung && fidelity.is_some_and(|f| f.prune) {
            env.push(("TUNECTL_PROGRESS_FILE".into(), progress_file.clone()));
        }
        // Read while the trial runs only where it runs: on this machine
        // (elsewhere it is read back when the trial ends).
        let watched = job
            .prune
            .clone()
            .filter(|r| !r.is_empty())
            .filter(|_| host.transport.checkpoint_root(self.study_id).is_some())
            .map(|rule| (rule, std::path::PathBuf::from(&progress_file)));
        let spec = AttemptSpec {
            study_id: self.study_id.to_string(),
            trial_key: job.key.clone(),
            attempt_id: attempt_id.clone(),
            command: command.clone(),
            env,
            timeout: study.trial.timeout,
            warmup: if job.warm {
                study.measurement.warmup
            } else {
                0
            },
            outputs: study.gate.outputs.clone(),
            tolerance_files: study
                .gate
                .tolerance
                .iter()
                .flat_map(|t| t.files.clone())
                .collect(),
            result_files: {
                let mut files = study.result.as_ref().map(|r| r.files()).unwrap_or_default();
                // Brought back by every transport, to be judged the same
                // way wherever the rung ran.
                if job.prune.is_some() {
                    files.push(PROGRESS_FILE.to_string());
                }
                files
            },
            streams: study
                .result
                .as_ref()
                .map(|r| r.streams())
                .unwrap_or_default(),
            slot: job.slot,
            trial_dir,
            result_path,
            keep_logs: self.store_logs,
            checkpoint: checkpoint.as_ref().map(|c| c.run.clone()),
        };
        let started_at = chrono::Utc::now();
        self.events.emit(LaunchEvent::TrialStarted);
        let attempt_cancel = self.cancel.child_token();
        let renewed = std::sync::atomic::AtomicU64::new(0);
        let renew = async {
            let Some(mut lease) = lease else {
                return std::future::pending::<()>().await;
            };
            let mut written = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(renew_every()).await;
                match self.keep_lease(&mut lease, &mut written).await {
                    true => {
                        renewed.fetch_max(lease.record.generation, Ordering::SeqCst);
                    }
                    false => {
                        self.events.emit(LaunchEvent::LeaseLost {
                            config: config_label.clone(),
                            cell: cell_label.clone(),
                        });
                        attempt_cancel.cancel();
                        return std::future::pending::<()>().await;
                    }
                }
            }
        };
        // Where the watch stopped it, and the progress file it read then.
        let pruned: Mutex<Option<(PrunedAt, Vec<u8>)>> = Mutex::new(None);
        let watch = async {
            let Some((rule, path)) = watched else {
                return std::future::pending::<()>().await;
            };
            if let Some(at) = watch_progress(&rule, &path).await {
                if let Ok(mut p) = pruned.lock() {
                    *p = Some(at);
                }
                attempt_cancel.cancel();
            }
            std::future::pending::<()>().await
        };
        let outcome = tokio::select! {
            o = host.transport.run_attempt(&spec, &attempt_cancel) => o,
            _ = renew => unreachable!("the renewal loop never ends"),
            _ = watch => unreachable!("the progress watch never ends"),
        };
        renewed_to(held, Some(renewed.load(Ordering::SeqCst)));
        // Stopped by its prune rule (not by Ctrl-C or a lost lease first),
        // or, having ended on its own, its progress says it would have been
        // (read back from any host). Its readings are the lines up to
        // where it stopped, whichever way it was read.
        let stopped = pruned
            .lock()
            .ok()
            .and_then(|mut p| p.take())
            .filter(|_| outcome.cancelled());
        let (pruned, readings) = match stopped {
            Some((at, bytes)) => {
                let readings = progress(job.prune.as_ref(), &bytes).1;
                (Some(at), readings)
            }
            None => match outcome.result_files.get(PROGRESS_FILE) {
                Some(Ok(bytes)) if outcome.ended == Ended::Ran => {
                    progress(job.prune.as_ref(), bytes)
                }
                _ => (None, Vec::new()),
            },
        };
        let readings = match job.budget {
            Some(until) if !job.reads.is_empty() => {
                crate::search::ladder_readings(&job.reads, &readings, until)
            }
            _ => Vec::new(),
        };
        let finished_at = chrono::Utc::now();
        if self.spend.add(outcome.elapsed) {
            self.events.emit(LaunchEvent::BudgetSpent {
                spent_s: self.spend.spent().as_secs_f64(),
                cap_s: self.spend.cap().map_or(0.0, |c| c.as_secs_f64()),
            });
        }
        let mut j = judge_with(
            &outcome,
            &study.objective.name,
            study.result.as_ref(),
            &self.classifier,
            study.trial.timeout.as_secs_f64(),
        );
        if pruned.is_some() {
            // No metrics, no digest: a pruned trial is no sample of
            // anything.
            j.status = AttemptStatus::Pruned;
            j.failure = None;
            j.metrics.clear();
            j.digest = None;
            j.outputs.clear();
            j.output_values.clear();
        }
        let run = outcome.run.as_ref();
        let scrub = |text: String| scrub_secrets(text, &self.secrets);
        // A batch task started by an earlier launcher keeps its own id,
        // and the checkpoint it ran with.
        let adopted = outcome.adopted_attempt.clone().filter(|a| !a.is_empty());
        let checkpoint = match (&adopted, checkpoint) {
            (Some(id), Some(c)) => Some(c.adopted(id, outcome.adopted_checkpoint.clone())),
            (_, c) => c,
        };
        let attempt_id = adopted.unwrap_or(attempt_id);
        // Ran on a node of another class: lost here, kept for that class.
        let elsewhere = match &outcome.elsewhere {
            Some(there) if j.status == AttemptStatus::Lost => self
                .trial_elsewhere(host, &job, there)
                .await
                .map(|at| (at, there)),
            _ => None,
        };
        let mut record = AttemptRecord {
            schema: records::SCHEMA,
            tunectl_version: records::VERSION.into(),
            study_id: self.study_id.into(),
            spec_hash: self.spec_hash.as_str().into(),
            trial_key: job.key.clone(),
            attempt_id: attempt_id.clone(),
            config: Arc::new(self.plan.space.config_json(study, job.config)),
            config_label: config_label.as_str().into(),
            config_index: job.config,
            is_baseline: job.config == self.plan.space.baseline(),
            cell: Arc::new(space::cell_json(study, cell_values)),
            cell_label: cell_label.as_str().into(),
            cell_index: job.cell,
            repeat: job.repeat,
            role: job.role.kind(),
            fidelity: job.budget,
            host: host.name.as_str().into(),
            host_class: self.class_ids[job.class].as_str().into(),
            fingerprint: self.fingerprints[job.host].as_str().into(),
            slot: job.slot,
            started_at: started_at.to_rfc3339().into(),
            finished_at: finished_at.to_rfc3339().into(),
            duration_s: outcome.elapsed.as_secs_f64(),
            run_s: run
                .filter(|_| !outcome.failed_in_warmup)
                .map(|r| r.elapsed.as_secs_f64()),
            warmup_runs: outcome.warmups_run,
            status: j.status,
            failure: j.failure.clone().map(|mut f| {
                f.detail = scrub(f.detail);
                f
            }),
            exit: run.map(|r| r.exit.clone()),
            metrics: j.metrics.clone().into(),
            digest: j.digest.map(SharedStr::from),
            outputs: Arc::new(j.outputs),
            output_values: j.output_values,
            command: command.into(),
            stdout_tail: scrub(run.map(|r| r.stdout_tail.clone()).unwrap_or_default()).into(),
            stderr_tail: scrub(run.map(|r| r.stderr_tail.clone()).unwrap_or_default()).into(),
            stderr_head: scrub(run.map(|r| r.stderr_head.clone()).unwrap_or_default()).into(),
            lost_reason: outcome
                .lost_reason()
                .filter(|_| j.status == AttemptStatus::Lost)
                .map(|why| scrub(why.to_string())),
            resumed_from: checkpoint.as_ref().and_then(|c| c.resume_from),
            pruned: pruned.map(Box::new),
            readings,
        };
        if let Some((at, there)) = elsewhere
            && let Some(id) = self.record_elsewhere(at, there, &record, &outcome).await
            && let Some(why) = &mut record.lost_reason
        {
            why.push_str(&format!(
                "; its run is recorded for that class as attempt {id}"
            ));
        }
        // Once the ledger has failed, an attempt that was already running
        // gets one try: it is worth no more waiting.
        let tries = if self.ledger_failing() {
            1
        } else {
            crate::ledger::ATTEMPT_WRITE_TRIES
        };
        // With no checkpoint to commit and no log to store after the
        // record, the lease goes in the same ledger call, right after the
        // record is written (one thread hand-off on a local ledger, not
        // two), as it would next in `run`.
        let release = held
            .as_ref()
            .filter(|_| checkpoint.is_none() && outcome.logs.is_empty());
        let written = self
            .ledger
            .write_attempt_releasing(&record, tries, release)
            .await;
        if release.is_some() && written.is_ok() {
            *held = None;
        }
        // The state becomes the next rung's only once its attempt is
        // recorded ok (and only then goes to the ledger); anything else
        // leaves the last committed one.
        if let Some(c) = checkpoint
            && let Some(carry) = self.carry(host)
        {
            match (written.is_ok() && j.status == AttemptStatus::Ok, job.budget) {
                (true, Some(budget)) => {
                    let mut warnings = Vec::new();
                    c.commit(&carry, budget, &job.key, &mut warnings).await;
                    self.checkpoint_warnings(&config_label, &cell_label, warnings);
                }
                _ => c.discard(&carry).await,
            }
        }
        self.write_logs(&record, &outcome.logs).await;
        if let Err(e) = written {
            let first = !self.ledger_failing.swap(true, Ordering::SeqCst);
            self.events.emit(LaunchEvent::AttemptUnrecorded {
                error: e.to_string(),
                attempt: UnrecordedAttempt {
                    key: job.key,
                    config: config_label,
                    cell: cell_label,
                    attempt_id,
                    host: host.name.clone(),
                    status: record.status,
                    failure: record.failure.as_ref().map(|f| f.class),
                },
                first,
            });
            return TrialResult::Unrecorded;
        }
        self.events.emit(LaunchEvent::TrialFinished {
            status: j.status,
            role: job.role.kind(),
            racing: job.role == Role::Sweep && job.repeat >= study.measurement.repeats,
            rejection: record.failure.as_ref().map(|f| Rejection {
                config: config_label.clone(),
                cell: cell_label.clone(),
                class: f.class,
                detail: f.detail.clone(),
            }),
            ok_of: (j.status == AttemptStatus::Ok).then(|| {
                (
                    record.host_class.to_string(),
                    cell_label.clone(),
                    config_label.clone(),
                )
            }),
            seconds: record.duration_s,
        });
        // Rungs are read on the proxy metric.
        let metric = match (&job.role, &study.fidelity) {
            (Role::Rung, Some(f)) => &f.proxy.name,
            _ => &study.objective.name,
        };
        // One line per trial at `-v`.
        tracing::info!(
            "{}",
            trial_line(
                &record,
                metric,
                crate::fmt::duration_short(record.duration_s)
            )
        );
        let value = j
            .metrics
            .get(metric)
            .and_then(|samples| Reading::of(samples));
        TrialResult::Done(Ran {
            status: j.status,
            key: job.key,
            attempt_id,
            value,
            host_lost: matches!(outcome.ended, Ended::HostLost(_)),
            record: Some(Arc::new(record)),
        })
    }
}

impl Runner<'_> {
    /// Store an attempt's full logs (`--store-logs`) beside its record,
    /// scrubbed.
    async fn write_logs(
        &self,
        record: &AttemptRecord,
        logs: &std::collections::BTreeMap<String, Vec<u8>>,
    ) {
        for (name, bytes) in logs {
            let text = scrub_secrets(String::from_utf8_lossy(bytes).into_owned(), &self.secrets);
            if let Err(e) = self
                .ledger
                .write_log(
                    self.study_id,
                    &record.trial_key,
                    &record.attempt_id,
                    name,
                    text.into_bytes(),
                )
                .await
            {
                self.events.emit(LaunchEvent::LedgerWriteFailed {
                    error: e.to_string(),
                    what: Written::Log,
                });
            }
        }
    }
}

/// A recorded attempt on one line, for `-v`: `sweep a=2 @ n=1 on gpu-a
/// (repeat 1): ok in 1.2s, throughput 123.4 (median of 3)`, or how it
/// failed and the first line of why.
fn trial_line(r: &AttemptRecord, metric: &str, took: String) -> String {
    let budget = r
        .fidelity
        .map(|b| format!(" at budget {}", crate::fmt::short(b)))
        .unwrap_or_default();
    let outcome = match r.status {
        AttemptStatus::Ok => match r.metrics.get(metric) {
            Some(samples) if !samples.is_empty() => {
                let median = crate::stats::median(samples).unwrap_or(f64::NAN);
                if samples.len() == 1 {
                    format!("ok in {took}, {metric} {}", crate::fmt::sig(median))
                } else {
                    format!(
                        "ok in {took}, {metric} {} (median of {})",
                        crate::fmt::sig(median),
                        samples.len()
                    )
                }
            }
            _ => format!("ok in {took}"),
        },
        AttemptStatus::Failed => match &r.failure {
            Some(f) => format!(
                "failed in {took}: {}: {}",
                f.class.as_str(),
                f.detail.lines().next().unwrap_or("")
            ),
            None => format!("failed in {took}"),
        },
        AttemptStatus::Lost => format!(
            "lost after {took}: {}",
            r.lost_reason.as_deref().unwrap_or("no reason recorded")
        ),
        AttemptStatus::Pruned => match &r.pruned {
            Some(p) => format!(
                "pruned after {took}: {metric} {} at budget {}",
                crate::fmt::sig(p.value),
                crate::fmt::short(p.budget)
            ),
            None => format!("pruned after {took}"),
        },
    };
    format!(
        "{} {} @ {}{budget} on {} (repeat {}): {outcome}",
        r.role.as_str(),
        r.config_label,
        r.cell_label,
        r.host,
        r.repeat,
    )
}

/// Name of the progress file in the trial directory (`fidelity.prune`).
pub const PROGRESS_FILE: &str = "tunectl-progress.txt";

/// Largest progress file read: lines of two numbers.
const MAX_PROGRESS_BYTES: u64 = 4 * 1024 * 1024;

/// How often a running rung's progress file is read.
const PROGRESS_POLL: Duration = Duration::from_millis(100);

/// Read a running trial's progress file (`budget value` lines, appended)
/// until a line makes `rule` stop it: returns where, and the file as read
/// then. A file that is not a regular one is never read.
async fn watch_progress(rule: &PruneRule, path: &std::path::Path) -> Option<(PrunedAt, Vec<u8>)> {
    loop {
        tokio::time::sleep(PROGRESS_POLL).await;
        let regular = tokio::fs::symlink_metadata(path)
            .await
            .is_ok_and(|m| m.is_file() && m.len() <= MAX_PROGRESS_BYTES);
        if !regular {
            continue;
        }
        // Checked again on the opened file: one swapped for a FIFO since
        // is not waited on.
        let p = path.to_path_buf();
        let read = tokio::task::spawn_blocking(move || {
            crate::safe_read::read_regular(&p, MAX_PROGRESS_BYTES, None)
        })
        .await;
        let Ok(Ok(bytes)) = read else {
            continue;
        };
        if let (Some(at), _) = progress(Some(rule), &bytes) {
            return Some((at, bytes));
        }
    }
}

/// A progress file's complete lines, up to the first that makes `rule`
/// stop the trial: where it stops (if a line does), and the (budget,
/// value) of those lines, the stopping one included. Lines that are not
/// two numbers, and a last line without its newline (still being
/// written), are passed over. The same lines give the same answer whether
/// read while the trial runs or after it ended, so whether a rung is
/// pruned, and what it read, depends on what it reported, not on when the
/// file was read.
fn progress(rule: Option<&PruneRule>, bytes: &[u8]) -> (Option<PrunedAt>, Vec<(f64, f64)>) {
    let text = String::from_utf8_lossy(bytes);
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    let mut read = Vec::new();
    for (budget, value) in complete.lines().filter_map(progress_line) {
        read.push((budget, value));
        if let Some(rung_budget) = rule.and_then(|r| r.prunes(budget, value)) {
            let at = PrunedAt {
                rung_budget,
                budget,
                value,
            };
            return (Some(at), read);
        }
    }
    (None, read)
}

/// `budget value`: two finite numbers separated by white space.
fn progress_line(line: &str) -> Option<(f64, f64)> {
    let mut words = line.split_whitespace();
    let budget: f64 = words.next()?.parse().ok()?;
    let value: f64 = words.next()?.parse().ok()?;
    (words.next().is_none() && budget.is_finite() && value.is_finite()).then_some((budget, value))
}

/// A budget as a trial receives it: an integer when it is whole.
pub fn budget_value(budget: Option<f64>) -> Option<Value> {
    let b = budget?;
    Some(if b.fract() == 0.0 && b.abs() < 9.0e15 {
        Value::Int(b as i64)
    } else {
        Value::Float(b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Better;

    #[test]
    fn a_progress_file_prunes_at_its_first_line_asha_would_not_promote() {
        // 5 results at budget 1: the top floor(6/3) = 2 go on.
        let rule = PruneRule::new(
            3,
            Better::Higher,
            9.0,
            vec![(1.0, vec![10.0, 20.0, 30.0, 40.0, 50.0])],
        );
        let stop = |bytes: &[u8]| progress(Some(&rule), bytes).0;
        // Below every rung budget, malformed or not numbers: passed over.
        let file = b"0.5 1\nnot a line\n2 x\n1 2 3\n2 inf\n";
        assert_eq!(progress(Some(&rule), file), (None, vec![(0.5, 1.0)]));
        // Second best at 1, then fifth at 2: stopped there, and what it
        // read is the lines up to that one.
        let file = b"1 45\n2 35\n3 60\n";
        let at = PrunedAt {
            rung_budget: 1.0,
            budget: 2.0,
            value: 35.0,
        };
        assert_eq!(
            progress(Some(&rule), file),
            (Some(at), vec![(1.0, 45.0), (2.0, 35.0)])
        );
        // Without a rule every line is read.
        assert_eq!(progress(None, file).1.len(), 3);
        // A last line without its newline is still being written.
        assert_eq!(stop(b"1 45\n2 35"), None);
        assert_eq!(progress(None, b"1 45\n2 35").1, vec![(1.0, 45.0)]);
        // At the job's own budget a value is its result.
        assert_eq!(stop(b"9 0\n"), None);
        assert_eq!(stop(b"\xff\xfe\n"), None);
    }
}
