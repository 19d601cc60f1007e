//! The scheduler: probes hosts, plans per host class, skips what the ledger
//! already holds, and feeds every free slot of a class the next ready trial.
//!
//! Order within a cell: the baseline's first repeat runs first (every
//! candidate of the cell is compared with it, so a failing baseline stops
//! the cell); then repeats go round-robin across configs (repeat 0 of every
//! config, then repeat 1...), so drift affects all configs alike. A config
//! that fails is not repeated. Every attempt is written to the ledger the
//! moment it ends; Ctrl-C kills running trials and records them as lost.
//!
//! Drift: every `anchor_every` candidate trials of a cell, a host
//! re-measures the baseline (an anchor), judged against the median of that
//! host's clean baseline readings of the cell with thresholds from their
//! own noise (`drift.rs`); a suspect anchor is confirmed by a burst of
//! three. A drift voids the host's measurements since its last clean anchor
//! (they run again), and the host cools down with exponential back-off
//! until an anchor settles; a host that does not settle drops the cell,
//! with its reason.
//!
//! Confirmation: once every cell of a bucket is measured on a class, the
//! bucket's draft winner and the baseline run a final interleaved round
//! (baseline, winner, baseline, winner...) that decides the verdict.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::attempt::{RESULT_FILE, judge};
use super::drift::{Judgement, K_DRIFT, K_SETTLE, Thresholds, Watch};
use super::prior::Prior;
use super::progress::Event;
use super::{AttemptSpec, HostState, Transport};
use crate::fingerprint::Fingerprint;
use crate::gate::Classifier;
use crate::ledger::lease::{Held, Lease, lease_ttl, renew_every};
use crate::ledger::records::{
    self, AttemptRecord, AttemptStatus, DropRecord, HostRecord, StudyRecord, VoidRecord,
};
use crate::ledger::{Ledger, Scan, new_attempt_id, spec_differences};
use crate::plan::{ClassInfo, Plan, PlanHost};
use crate::scrub::{scrub_secrets, secret_values};
use crate::search::{
    Brackets, Engine, HyperbandEngine, Outcome, Search, Shard, Source, Step, Tpe, TpeEngine,
};
use crate::space;
use crate::spec::{CommandRenderer, Study, TrialVars, Value};
use crate::trial::{Role, RoleKind, TrialIdentity};

/// A host ready to take trials.
pub struct LaunchHost {
    pub name: String,
    pub transport_name: String,
    pub slots: u32,
    /// Devices the inventory pins, one per slot; `None`: slot `i` pins GPU
    /// `i` where the host's fingerprint shows one, nothing otherwise.
    pub devices: Option<Vec<String>>,
    pub device_env: String,
    pub transport: Arc<dyn Transport>,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct LaunchSummary {
    pub ran: u64,
    pub ok: u64,
    pub failed: u64,
    pub lost: u64,
    pub already_done: u64,
    pub skipped: u64,
    pub interrupted: bool,
    pub corrupt_objects: usize,
    /// Baseline re-measurements taken to watch for drift.
    pub anchors: u64,
    /// Measurements discarded after drift (and run again).
    pub voided: u64,
    /// Cells given up on a host whose baseline would not settle.
    pub dropped_cells: u64,
    /// Trials of final confirmation rounds.
    pub confirm_trials: u64,
    /// Attempts lost with a host that dropped, queued again.
    pub requeued: u64,
    /// Hosts that did not answer at the start (`host: why`): skipped.
    pub unreachable_hosts: Vec<String>,
    /// Hosts whose fingerprint changed mid-launch: another host class now.
    pub changed_hosts: Vec<String>,
    /// Host classes given up after every host stayed down past
    /// `--host-timeout` (`class label: trials left`).
    pub abandoned_classes: Vec<String>,
    /// Attempts that ran and could not be written to the ledger, one line
    /// each (trial key, config, cell, attempt, host, status). Once one
    /// could not be written the launch started no new trial.
    pub unrecorded: Vec<String>,
}

impl LaunchSummary {
    /// Fold another round of the same launch into this one.
    pub fn add(&mut self, o: &LaunchSummary) {
        self.ran += o.ran;
        self.ok += o.ok;
        self.failed += o.failed;
        self.lost += o.lost;
        self.skipped += o.skipped;
        self.anchors += o.anchors;
        self.voided += o.voided;
        self.dropped_cells += o.dropped_cells;
        self.confirm_trials += o.confirm_trials;
        self.requeued += o.requeued;
        // What the ledger held at the start, and its unreadable objects,
        // are the first round's.
        if self.already_done == 0 {
            self.already_done = o.already_done;
        }
        self.corrupt_objects = self.corrupt_objects.max(o.corrupt_objects);
        self.interrupted |= o.interrupted;
        for (mine, theirs) in [
            (&mut self.unreachable_hosts, &o.unreachable_hosts),
            (&mut self.changed_hosts, &o.changed_hosts),
            (&mut self.abandoned_classes, &o.abandoned_classes),
            (&mut self.unrecorded, &o.unrecorded),
        ] {
            for x in theirs {
                if !mine.contains(x) {
                    mine.push(x.clone());
                }
            }
        }
    }
}

/// How a launch behaves.
#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// Drift is reported but nothing is discarded and no host cools down.
    pub no_cooldown: bool,
    /// Store every attempt's full stdout and stderr beside it.
    pub store_logs: bool,
    /// How long a host class whose every host is down waits for one to
    /// answer before its trials are left for a later launch.
    pub host_timeout: Duration,
    /// `--seed-from`: an earlier study's failures and values, for an
    /// adaptive search.
    pub prior: Option<Arc<Prior>>,
    /// `--shard i/n`: this launch runs the baseline and the `i`-th of `n`
    /// slices of each cell's candidates, without confirmation rounds.
    pub shard: Option<Shard>,
}

/// Default `--host-timeout`.
pub const DEFAULT_HOST_TIMEOUT: Duration = Duration::from_secs(600);

/// Times a trial is queued again after its host dropped, in one launch; a
/// trial that was running every time a host went down is left for later.
const MAX_HOST_LOSS_REQUEUES: u32 = 3;

/// How soon a rung trial another launcher holds is looked at again.
const HELD_RUNG_RETRY: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(
        "study `{study}` in ledger {ledger} was launched with a different spec (hash {old} → {new}); changed: {}.\nUse `--fork` to start a new study from this spec.",
        .changes.join("; ")
    )]
    SpecChanged {
        study: String,
        ledger: String,
        old: String,
        new: String,
        changes: Vec<String>,
    },
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
    #[error("{0}")]
    Other(String),
}

/// Check the study against the ledger's record of it, creating the record
/// on first launch.
pub async fn register_study(
    study: &Study,
    study_id: &str,
    ledger: &Ledger,
) -> Result<StudyRecord, LaunchError> {
    let record = StudyRecord {
        schema: records::SCHEMA,
        tunectl_version: records::VERSION.to_string(),
        study_id: study_id.to_string(),
        spec_hash: study.spec_hash(),
        spec: study.frozen(),
        created_at: chrono::Utc::now().to_rfc3339(),
    };
    let stored = ledger.ensure_study(&record).await?;
    if stored.spec_hash != record.spec_hash {
        return Err(LaunchError::SpecChanged {
            study: study_id.to_string(),
            ledger: ledger.url().to_string(),
            old: short(&stored.spec_hash),
            new: short(&record.spec_hash),
            changes: spec_differences(&stored.spec, &record.spec),
        });
    }
    Ok(stored)
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

/// What a unit measures. Confirmation units sort first: a bucket's final
/// round runs as soon as it is ready, while the host is in the same state;
/// an adaptive search's screening runs last (its objective stages first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Confirm,
    Sweep,
    Rung,
}

/// A unit of work: one trial of a cell, ordered so that a cell's baseline
/// comes first and repeats interleave across configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Unit {
    kind: Kind,
    cell: u32,
    repeat: u32,
    /// Sweep: 0 for the baseline, i + 1 for the cell's i-th candidate (in
    /// an adaptive study: config index + 1 for a finalist).
    /// Confirm: 0 for the baseline, config index + 1 for the winner.
    /// Rung: 0 for the baseline, config index + 1 for a search job.
    pos: u64,
    /// Rung: index of its budget in `Shared::budgets`; 0 otherwise.
    budget: u32,
}

impl Unit {
    fn sweep(cell: u32, repeat: u32, pos: u64) -> Unit {
        Unit {
            kind: Kind::Sweep,
            cell,
            repeat,
            pos,
            budget: 0,
        }
    }

    fn rung(cell: u32, budget: u32, pos: u64) -> Unit {
        Unit {
            kind: Kind::Rung,
            cell,
            repeat: 0,
            pos,
            budget,
        }
    }

    fn is_first_baseline(&self) -> bool {
        self.kind == Kind::Sweep && self.repeat == 0 && self.pos == 0
    }
}

#[derive(Default)]
struct ClassState {
    ready: BinaryHeap<Reverse<Unit>>,
    /// Things that may still add units: cells waiting for their baseline's
    /// first repeat, confirmation rounds being prepared.
    pending: usize,
    /// Units running now.
    in_flight: usize,
    failed_configs: HashSet<(u32, u64)>,
    /// Sweep units of a cell not finished yet (queued or running).
    outstanding: HashMap<u32, u64>,
    /// Cells whose baseline's first repeat has resolved.
    released: HashSet<u32>,
    /// Buckets whose confirmation round was started.
    confirm_started: HashSet<String>,
    /// Units another launcher holds, with when to look again.
    deferred: Vec<(std::time::Instant, Unit)>,
    /// Adaptive studies: the search of each cell, until it is over.
    searches: BTreeMap<u32, CellSearch>,
    /// Adaptive studies: the configs the objective stage measures at each
    /// released cell (the union of the finalists of its bucket's cells).
    finalists: HashMap<u32, Vec<u64>>,
    /// Cells whose objective stage was just released, for a confirmation
    /// check (they may have nothing left to run).
    just_released: Vec<u32>,
}

/// The adaptive search of one cell on one class.
struct CellSearch {
    search: Search,
    /// The baseline's rung attempt at each budget (the gate's reference).
    base: Vec<Option<Arc<AttemptRecord>>>,
    /// Baseline rung attempts not finished.
    base_left: usize,
    /// Why nothing can be searched here (a baseline rung failed).
    base_failed: Option<String>,
    /// Job number of each (config, budget index) handed out.
    jobs: HashMap<(u64, u32), usize>,
    /// Terminal rung attempts by trial key (from the ledger, and of this
    /// launch): a job whose trial is here gets its result without running.
    records: HashMap<String, Arc<AttemptRecord>>,
    /// The search's own finalists, once it is over.
    finalists: Option<Vec<u64>>,
}

/// Drift watch of one cell on one host.
#[derive(Default)]
struct Drift {
    /// The readings an anchor is judged against (`drift.rs`).
    watch: super::drift::Watch,
    /// Sweep attempts since the last clean anchor: (trial key, attempt, unit).
    since_clean: Vec<(String, String, Unit)>,
    /// Candidate trials since the last anchor.
    sweeps: u32,
}

struct State {
    classes: Vec<ClassState>,
    /// (host, cell, config, screening) that warmed up in this launch
    /// (`Shared::warm_key`).
    warmed: HashSet<(usize, u32, u64, bool)>,
    drift: HashMap<(usize, u32), Drift>,
    /// Hosts cooling down: their other slots wait.
    cooling: HashSet<usize>,
    /// (host, cell) given up.
    dropped: HashSet<(usize, u32)>,
    /// Hosts not answering now, since when.
    down: HashMap<usize, std::time::Instant>,
    /// Hosts out of this launch (fingerprint changed).
    retired: HashSet<usize>,
    /// Classes whose every host is down: announced, and given up.
    all_down_announced: HashSet<usize>,
    abandoned: HashSet<usize>,
    /// Requeues after host loss, per trial key.
    host_losses: HashMap<String, u32>,
    /// Plan records to write (an adaptive search chose its finalists).
    plan_writes: Vec<records::PlanRecord>,
    /// Ledger objects already named in a warning (unreadable, misplaced).
    named_objects: HashSet<String>,
    /// An attempt record could not be written (after its retries): no new
    /// trial starts, and running ones get one try each to record.
    ledger_failing: bool,
    summary: LaunchSummary,
}

struct Shared<'a> {
    study: &'a Study,
    study_id: &'a str,
    spec_hash: String,
    record: StudyRecord,
    plan: &'a Plan,
    ledger: &'a Ledger,
    renderer: CommandRenderer,
    /// `objective.command`, for everything but rung trials.
    objective_renderer: Option<CommandRenderer>,
    /// Budgets rung trials run at, ascending, as trials receive them
    /// (`[None]` without a `fidelity:` section).
    budgets: Vec<Option<f64>>,
    /// The budget of every other trial: `max_budget`, or `None`.
    objective_budget: Option<f64>,
    /// The gate's numeric tolerance (rungs are gated as they finish).
    tolerance: Option<crate::gate::ToleranceSpec>,
    /// Terminal attempts of the objective stage's first baseline repeat,
    /// by trial key (an adaptive cell is released after the ledger scan).
    first_baselines: HashMap<String, AttemptStatus>,
    classifier: Classifier,
    done: HashSet<String>,
    host_class: Vec<usize>,
    class_ids: Vec<String>,
    fingerprints: Vec<String>,
    /// Device pinned by each slot of each host.
    devices: Vec<Vec<Option<String>>>,
    host_names: Vec<String>,
    /// Bucket key of every cell, and the cells of every bucket.
    bucket_of_cell: Vec<String>,
    cells_of_bucket: HashMap<String, Vec<u32>>,
    options: LaunchOptions,
    /// This launcher, as lease owner.
    owner: String,
    /// Values of credential variables in the environment, scrubbed from
    /// everything recorded (a trial inherits the environment and may print
    /// it).
    secrets: Vec<String>,
    state: Mutex<State>,
    notify: Notify,
    events: mpsc::UnboundedSender<Event>,
    cancel: CancellationToken,
}

/// What one run produced, for the scheduler.
#[derive(Clone)]
struct Ran {
    status: AttemptStatus,
    key: String,
    attempt_id: String,
    /// Median of the objective's samples, and its standard error.
    value: Option<super::drift::Reading>,
    /// The host dropped while it ran.
    host_lost: bool,
    /// What was recorded (rungs are gated against their baseline's).
    record: Option<Arc<AttemptRecord>>,
}

/// How an attempt to run a trial ended.
enum TrialResult {
    Done(Ran),
    /// Another launcher holds the trial's lease: try again later.
    Held(Duration),
    /// Unrecorded (render error, ledger write failed).
    Unrecorded,
    /// Not started: the ledger cannot record attempts.
    NotStarted,
}

/// What a worker does about its host's state.
enum HostGate {
    Go,
    Wait(Duration),
    Leave,
}

enum Next {
    Run(Unit, bool),
    Wait,
    Done,
}

/// A host that answered its probe.
pub struct Probed {
    /// Index in the launch's host list.
    pub index: usize,
    pub plan_host: PlanHost,
    pub fingerprint: Fingerprint,
}

/// Probe hosts (all at once), register them in the ledger, and return
/// those that answered, with why the others did not. The local machine
/// failing its probe is an error; a remote host that does not answer is
/// reported and left out.
pub async fn probe_hosts(
    study: &Study,
    study_id: &str,
    ledger: &Ledger,
    hosts: &[LaunchHost],
    events: &mpsc::UnboundedSender<Event>,
) -> Result<(Vec<Probed>, Vec<String>), LaunchError> {
    let probes = futures::future::join_all(hosts.iter().map(|h| async {
        h.transport.prepare(study_id).await?;
        h.transport.probe(&study.tools).await
    }))
    .await;
    let mut out = Vec::new();
    let mut unreachable = Vec::new();
    for (index, (h, probe)) in hosts.iter().zip(probes).enumerate() {
        let fp = match probe {
            Ok(fp) => fp,
            Err(e) if h.transport_name != "local" => {
                let _ = events.send(Event::Warn(format!(
                    "warning: host `{}` does not answer ({e}); the study goes on without it",
                    h.name
                )));
                unreachable.push(format!("{}: {e}", h.name));
                continue;
            }
            Err(e) => {
                return Err(LaunchError::Other(format!(
                    "probing host `{}` failed: {e}",
                    h.name
                )));
            }
        };
        let class = fp.host_class();
        let label = fp.class_label();
        ledger
            .write_host(
                study_id,
                &HostRecord {
                    schema: records::SCHEMA,
                    host: h.name.clone(),
                    transport: h.transport_name.clone(),
                    fingerprint_hash: fp.hash(),
                    host_class: class.clone(),
                    class_label: label.clone(),
                    probed_at: chrono::Utc::now().to_rfc3339(),
                    fingerprint: fp.clone(),
                },
            )
            .await?;
        let _ = events.send(Event::HostReady {
            host: h.name.clone(),
            class: class.clone(),
            label: label.clone(),
        });
        out.push(Probed {
            index,
            plan_host: PlanHost {
                name: h.name.clone(),
                transport: h.transport_name.clone(),
                slots: h.slots,
                class: Some(ClassInfo { id: class, label }),
            },
            fingerprint: fp,
        });
    }
    Ok((out, unreachable))
}

/// Budgets of rung trials (ascending, as trials receive them) and the
/// budget of every other trial.
fn trial_budgets(study: &Study) -> Result<(Vec<Option<f64>>, Option<f64>), String> {
    let Some(f) = &study.fidelity else {
        return Ok((vec![None], None));
    };
    let top = study.objective_budget().unwrap_or(f.max_budget);
    let mut budgets: Vec<f64> = match study.strategy {
        crate::spec::Strategy::Hyperband { .. } => {
            Brackets::new(f.min_budget, f.max_budget, f.eta)?
                .brackets()
                .iter()
                .flat_map(|b| b.rungs.iter().map(|r| f.trial_budget(r.budget)))
                .collect()
        }
        _ => vec![top],
    };
    budgets.sort_by(f64::total_cmp);
    budgets.dedup();
    Ok((budgets.into_iter().map(Some).collect(), Some(top)))
}

/// The device each slot pins: the inventory's list, or GPU `i` for slot
/// `i` where the fingerprint shows that many GPUs.
fn slot_devices(host: &LaunchHost, fp: &Fingerprint) -> Vec<Option<String>> {
    match &host.devices {
        Some(d) => d.iter().cloned().map(Some).collect(),
        // Slurm pins a job's GPUs itself (gres).
        None if host.transport_name == "slurm" => vec![None; host.slots as usize],
        None => (0..host.slots)
            .map(|s| ((s as usize) < fp.gpus.len()).then(|| s.to_string()))
            .collect(),
    }
}

/// Run a study on `hosts` until every planned trial has a terminal
/// attempt, or `cancel` fires.
pub async fn run_study(
    study: &Study,
    study_id: &str,
    ledger: &Ledger,
    hosts: Vec<LaunchHost>,
    options: LaunchOptions,
    events: mpsc::UnboundedSender<Event>,
    cancel: CancellationToken,
) -> Result<LaunchSummary, LaunchError> {
    let record = register_study(study, study_id, ledger).await?;
    let (probed, unreachable) = probe_hosts(study, study_id, ledger, &hosts, &events).await?;
    if probed.is_empty() {
        return Err(LaunchError::Other(format!(
            "no host answered; nothing was run ({})",
            unreachable.join("; ")
        )));
    }
    // From here on, hosts are those that answered, in inventory order.
    let mut all_hosts: Vec<Option<LaunchHost>> = hosts.into_iter().map(Some).collect();
    let hosts: Vec<LaunchHost> = probed
        .iter()
        .filter_map(|p| all_hosts.get_mut(p.index).and_then(|h| h.take()))
        .collect();
    let devices: Vec<Vec<Option<String>>> = hosts
        .iter()
        .zip(&probed)
        .map(|(h, p)| slot_devices(h, &p.fingerprint))
        .collect();
    let plan_hosts: Vec<PlanHost> = probed.iter().map(|p| p.plan_host.clone()).collect();
    let plan = Plan::build_shard(study, &plan_hosts, options.shard).map_err(LaunchError::Other)?;
    for n in &plan.notes {
        let _ = events.send(Event::Note(n.clone()));
    }
    let scan = ledger.scan(study_id).await?;
    for c in &scan.corrupt {
        let _ = events.send(Event::Warn(format!(
            "warning: ignoring unreadable ledger object {}: {} (its trial runs again)",
            c.key, c.reason
        )));
    }
    let done: HashSet<String> = scan.terminal().keys().map(|k| k.to_string()).collect();
    let host_class: Vec<usize> = plan_hosts
        .iter()
        .map(|h| {
            plan.classes
                .iter()
                .position(|c| h.class.as_ref().is_some_and(|i| i.id == c.id))
                .unwrap_or(0)
        })
        .collect();
    let mut bucket_of_cell = Vec::new();
    let mut cells_of_bucket: HashMap<String, Vec<u32>> = HashMap::new();
    for (i, cell) in plan.cells.iter().enumerate() {
        let key =
            crate::report::buckets::bucket_of(&record.spec, &space::cell_json(study, cell)).key;
        cells_of_bucket
            .entry(key.clone())
            .or_default()
            .push(i as u32);
        bucket_of_cell.push(key);
    }
    let renderer = CommandRenderer::new(study).map_err(LaunchError::Other)?;
    let objective_renderer = match &study.objective_command {
        Some(c) => Some(CommandRenderer::with_command(study, c).map_err(LaunchError::Other)?),
        None => None,
    };
    let (budgets, objective_budget) = trial_budgets(study).map_err(LaunchError::Other)?;
    let tolerance = crate::gate::ToleranceSpec::from_spec(&record.spec);
    let first_baselines: HashMap<String, AttemptStatus> = scan
        .terminal()
        .values()
        .filter(|a| a.is_baseline && a.role == RoleKind::Sweep && a.repeat == 0)
        .map(|a| (a.trial_key.clone(), a.status))
        .collect();
    let shared = Shared {
        study,
        study_id,
        spec_hash: record.spec_hash.clone(),
        record: record.clone(),
        plan: &plan,
        ledger,
        renderer,
        objective_renderer,
        budgets,
        objective_budget,
        tolerance,
        first_baselines,
        classifier: Classifier::new(&study.gate.patterns).map_err(LaunchError::Other)?,
        done,
        host_class,
        class_ids: plan.classes.iter().map(|c| c.id.clone()).collect(),
        fingerprints: probed.iter().map(|p| p.fingerprint.hash()).collect(),
        devices,
        host_names: hosts.iter().map(|h| h.name.clone()).collect(),
        bucket_of_cell,
        cells_of_bucket,
        options,
        owner: format!(
            "{}-{}-{}",
            probed
                .first()
                .and_then(|p| p.fingerprint.hostname.clone())
                .unwrap_or_else(|| "launcher".to_string()),
            std::process::id(),
            &new_attempt_id()[..22]
        ),
        secrets: secret_values(),
        state: Mutex::new(State {
            classes: (0..plan.classes.len())
                .map(|_| ClassState::default())
                .collect(),
            warmed: HashSet::new(),
            drift: HashMap::new(),
            cooling: HashSet::new(),
            dropped: HashSet::new(),
            down: HashMap::new(),
            retired: HashSet::new(),
            all_down_announced: HashSet::new(),
            abandoned: HashSet::new(),
            host_losses: HashMap::new(),
            plan_writes: Vec::new(),
            named_objects: scan.corrupt.iter().map(|c| c.key.clone()).collect(),
            ledger_failing: false,
            summary: LaunchSummary {
                corrupt_objects: scan.corrupt.len(),
                unreachable_hosts: unreachable,
                ..Default::default()
            },
        }),
        notify: Notify::new(),
        events,
        cancel,
    };
    shared.seed(&scan);
    // Later scans of this launch only add what was written since.
    drop(scan);
    shared.record_plan().await?;
    // Buckets already measured in an earlier launch confirm now.
    for class in 0..plan.classes.len() {
        let cells: Vec<u32> = (0..plan.cells.len() as u32).collect();
        shared.maybe_confirm(class, &cells).await;
    }

    let mut workers = Vec::new();
    for (hi, host) in hosts.iter().enumerate() {
        for slot in 0..host.slots {
            workers.push(shared.worker(hi, host, slot));
        }
    }
    futures::future::join_all(workers).await;
    for h in &hosts {
        h.transport.close().await;
    }
    let mut summary = shared
        .state
        .lock()
        .map(|s| s.summary.clone())
        .unwrap_or_default();
    summary.interrupted = shared.cancel.is_cancelled();
    ledger.close_log(study_id).await;
    Ok(summary)
}

impl Shared<'_> {
    /// The plan record of `cell` on `class` with `configs` planned there.
    fn plan_record(&self, class: usize, cell: u32, configs: Option<u64>) -> records::PlanRecord {
        records::PlanRecord {
            schema: records::SCHEMA,
            spec_hash: self.spec_hash.clone(),
            host_class: self.class_ids[class].clone(),
            cell_index: cell,
            cell: space::cell_json(self.study, &self.plan.cells[cell as usize]),
            cell_label: self.cell_label(cell),
            configs,
            repeats: self.plan.repeats,
            at: chrono::Utc::now().to_rfc3339(),
        }
    }

    /// Record what this launch plans per class and cell, so that a report
    /// can tell a finished bucket from one with trials still to run. A
    /// shard plans a slice: the launch without `--shard` records the plan.
    /// An adaptive cell's configs are known when its search is over; an
    /// earlier launch's record of them is kept.
    async fn record_plan(&self) -> Result<(), LaunchError> {
        if self.options.shard.is_some() {
            return Ok(());
        }
        let have = self.ledger.plans(self.study_id).await?;
        let mut writes = Vec::new();
        for class in 0..self.class_ids.len() {
            for cell in 0..self.plan.cells.len() {
                let configs = (!self.adaptive()).then(|| 1 + self.plan.per_cell[cell].len() as u64);
                let known = have.iter().find(|r| {
                    r.spec_hash == self.spec_hash
                        && r.host_class == self.class_ids[class]
                        && r.cell_index == cell as u32
                        && r.repeats == self.plan.repeats
                });
                match known {
                    Some(r) if r.configs == configs || (self.adaptive() && r.configs.is_some()) => {
                    }
                    _ => writes.push(self.plan_record(class, cell as u32, configs)),
                }
            }
        }
        let results: Vec<Result<(), crate::ledger::LedgerError>> = futures::stream::iter(
            writes
                .iter()
                .map(|r| self.ledger.write_plan(self.study_id, r)),
        )
        .buffer_unordered(16)
        .collect()
        .await;
        for r in results {
            r?;
        }
        Ok(())
    }

    /// Write the plan records an adaptive search's end queued.
    async fn flush_plan_writes(&self) {
        let writes = match self.state.lock() {
            Ok(mut st) if !st.plan_writes.is_empty() => std::mem::take(&mut st.plan_writes),
            _ => return,
        };
        for r in writes {
            if let Err(e) = self.ledger.write_plan(self.study_id, &r).await {
                self.warn(format!(
                    "error: {e} (the report keeps cell {} a draft until a launch records its plan)",
                    r.cell_label
                ));
            }
        }
    }

    fn adaptive(&self) -> bool {
        self.study.strategy.is_adaptive()
    }

    fn config_of(&self, unit: Unit) -> u64 {
        match (unit.kind, unit.pos) {
            (_, 0) => self.plan.space.baseline(),
            (Kind::Sweep, p) if !self.adaptive() => {
                self.plan.per_cell[unit.cell as usize][(p - 1) as usize]
            }
            (_, p) => p - 1,
        }
    }

    fn role_of(&self, unit: Unit) -> Role {
        match unit.kind {
            Kind::Sweep => Role::Sweep,
            Kind::Confirm => Role::Confirm,
            Kind::Rung => Role::Rung,
        }
    }

    /// The budget a unit's trial receives.
    fn budget_of(&self, unit: Unit) -> Option<f64> {
        match unit.kind {
            Kind::Rung => self.budgets.get(unit.budget as usize).copied().flatten(),
            _ => self.objective_budget,
        }
    }

    /// What the warm-up of a unit is shared with: runs of the same config
    /// at the same cell with the same command on the same host (a search's
    /// rungs at every budget share one; the objective stage, which may run
    /// another command, has its own).
    fn warm_key(&self, host: usize, unit: Unit) -> (usize, u32, u64, bool) {
        (
            host,
            unit.cell,
            self.config_of(unit),
            unit.kind == Kind::Rung,
        )
    }

    fn key_for(
        &self,
        class: usize,
        cell: u32,
        config: u64,
        repeat: u32,
        role: Role,
        fidelity: Option<f64>,
    ) -> String {
        let config = self.plan.space.config_json(self.study, config);
        let cell = space::cell_json(self.study, &self.plan.cells[cell as usize]);
        TrialIdentity {
            study: self.study_id,
            config: &config,
            cell: &cell,
            fidelity,
            repeat,
            host_class: &self.class_ids[class],
            role,
        }
        .key()
    }

    fn key_of(&self, class: usize, unit: Unit) -> String {
        self.key_for(
            class,
            unit.cell,
            self.config_of(unit),
            unit.repeat,
            self.role_of(unit),
            self.budget_of(unit),
        )
    }

    fn note(&self, text: String) {
        let _ = self.events.send(Event::Note(text));
    }

    /// Something people must see even with `--progress quiet`.
    fn warn(&self, text: String) {
        let _ = self.events.send(Event::Warn(text));
    }

    fn cell_label(&self, cell: u32) -> String {
        space::cell_label(self.study, &self.plan.cells[cell as usize])
    }

    /// Fill the queues from the plan, skipping what the ledger holds.
    fn seed(&self, scan: &Scan) {
        let terminal = scan.terminal();
        let mut already = 0u64;
        let mut to_run = 0u64;
        let mut skipped: Vec<(u64, String)> = Vec::new();
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        // A config that failed in an earlier launch is not tried again in
        // that cell: its remaining repeats are skipped, as in one launch.
        for a in terminal.values() {
            if a.status == AttemptStatus::Failed
                && a.spec_hash == self.spec_hash
                && a.role == RoleKind::Sweep
                && let Some(class) = self.class_ids.iter().position(|c| *c == a.host_class)
            {
                st.classes[class]
                    .failed_configs
                    .insert((a.cell_index, a.config_index));
            }
        }
        if self.adaptive() {
            let (n, d, notes) = self.seed_searches(&mut st, scan);
            to_run += n;
            already += d;
            st.summary.already_done = already;
            drop(st);
            let _ = self.events.send(Event::Planned {
                to_run,
                already_done: already,
            });
            for n in notes {
                self.note(n);
            }
            return;
        }
        for class in 0..self.plan.classes.len() {
            for cell in 0..self.plan.cells.len() as u32 {
                let first = Unit::sweep(cell, 0, 0);
                let key = self.key_of(class, first);
                let cs = &mut st.classes[class];
                match terminal.get(key.as_str()).map(|a| a.status) {
                    Some(AttemptStatus::Ok) => {
                        already += 1;
                        let (n, d) = self.release_cell(cs, class, cell);
                        to_run += n;
                        already += d;
                    }
                    Some(_) => {
                        already += 1;
                        cs.released.insert(cell);
                        let n = self.plan.trials_in_cell(cell as usize) - 1;
                        skipped.push((n, self.baseline_failed_reason(cell)));
                    }
                    None => {
                        cs.ready.push(Reverse(first));
                        cs.pending += 1;
                        *cs.outstanding.entry(cell).or_insert(0) += 1;
                        // The rest of the cell is counted when released.
                        to_run += self.plan.trials_in_cell(cell as usize);
                    }
                }
            }
        }
        st.summary.already_done = already;
        drop(st);
        let _ = self.events.send(Event::Planned {
            to_run,
            already_done: already,
        });
        for (count, reason) in skipped {
            self.skip(count, reason);
        }
    }

    /// Start the search of every (class, cell) of an adaptive study: queue
    /// the baseline's rung at every budget (the gate's reference there).
    /// Returns (queued, already done, notes).
    fn seed_searches(&self, st: &mut State, scan: &Scan) -> (u64, u64, Vec<String>) {
        let (mut queued, mut done) = (0u64, 0u64);
        let mut notes = Vec::new();
        // Terminal rung attempts of this spec by (class, cell).
        let mut rungs: HashMap<(&str, u32), HashMap<String, Arc<AttemptRecord>>> = HashMap::new();
        for a in scan.terminal().values() {
            if a.role == RoleKind::Rung && a.spec_hash == self.spec_hash {
                rungs
                    .entry((a.host_class.as_str(), a.cell_index))
                    .or_default()
                    .insert(a.trial_key.clone(), Arc::new((*a).clone()));
            }
        }
        for class in 0..self.plan.classes.len() {
            let class_id = &self.class_ids[class];
            let workers = match self.study.strategy {
                crate::spec::Strategy::Hyperband { parallel, .. }
                | crate::spec::Strategy::Tpe { parallel, .. } => parallel,
                _ => None,
            }
            .map(|p| p as usize)
            .unwrap_or(self.plan.classes[class].slots.max(1) as usize);
            for cell in 0..self.plan.cells.len() as u32 {
                let search = match self.new_search(class, cell, workers, &mut notes) {
                    Ok(s) => s,
                    Err(e) => {
                        self.warn(format!(
                            "error: cannot start the search at cell {} on {class_id}: {e}",
                            self.cell_label(cell)
                        ));
                        continue;
                    }
                };
                let mut cs_search = CellSearch {
                    search,
                    base: vec![None; self.budgets.len()],
                    base_left: 0,
                    base_failed: None,
                    jobs: HashMap::new(),
                    records: rungs.remove(&(class_id.as_str(), cell)).unwrap_or_default(),
                    finalists: None,
                };
                let cs = &mut st.classes[class];
                for bi in 0..self.budgets.len() as u32 {
                    let unit = Unit::rung(cell, bi, 0);
                    let key = self.key_of(class, unit);
                    match cs_search.records.get(&key).cloned() {
                        Some(rec) => {
                            done += 1;
                            self.take_rung_baseline(&mut cs_search, bi, &rec);
                        }
                        None => {
                            cs_search.base_left += 1;
                            cs.ready.push(Reverse(unit));
                            queued += 1;
                        }
                    }
                }
                // Until the search is over and its objective stage queued.
                cs.pending += 1;
                cs.searches.insert(cell, cs_search);
            }
        }
        (queued, done, notes)
    }

    /// A new search engine for one (class, cell).
    fn new_search(
        &self,
        class: usize,
        cell: u32,
        workers: usize,
        notes: &mut Vec<String>,
    ) -> Result<Search, String> {
        let study = self.study;
        let class_id = self.class_ids[class].clone();
        let cell_json = space::cell_json(study, &self.plan.cells[cell as usize]);
        let prior = self.options.prior.as_deref();
        let known_failed: HashSet<u64> = prior
            .map(|p| p.failed(&class_id, &cell_json))
            .unwrap_or_default();
        if !known_failed.is_empty() && cell == 0 {
            notes.push(format!(
                "{} configs known to fail on {class_id} (from {}) are not tried there",
                known_failed.len(),
                prior.map(|p| p.source.as_str()).unwrap_or_default()
            ));
        }
        let accept = space::search_filter(
            study,
            &self.plan.space,
            &self.plan.cells[cell as usize],
            known_failed,
        )?;
        let metric = study
            .fidelity
            .as_ref()
            .map(|f| &f.proxy)
            .unwrap_or(&study.objective);
        match study.strategy {
            crate::spec::Strategy::Hyperband {
                seed, iterations, ..
            } => {
                let f = study
                    .fidelity
                    .as_ref()
                    .ok_or("hyperband needs a `fidelity:` section")?;
                let brackets = Brackets::new(f.min_budget, f.max_budget, f.eta)?;
                let source = Source::new(self.plan.space.size(), seed, accept);
                let engine = HyperbandEngine::new(brackets, metric.better, iterations, source);
                Ok(Search::new(Engine::Hyperband(Box::new(engine)), workers)
                    .with_fixed_cost(f.fixed_cost))
            }
            crate::spec::Strategy::Tpe { seed, count, .. } => {
                let tpe = Tpe::for_study(study, metric.better, seed)?;
                let warm = prior
                    .map(|p| p.observations(&class_id, &cell_json))
                    .unwrap_or_default();
                let budget = study
                    .fidelity
                    .as_ref()
                    .map(|f| f.max_budget)
                    .unwrap_or(f64::NAN);
                let engine = TpeEngine::new(tpe, metric.better, count, budget, &warm, accept)?;
                Ok(Search::new(Engine::Tpe(Box::new(engine)), workers)
                    .with_fixed_cost(study.fidelity.as_ref().map_or(0.0, |f| f.fixed_cost)))
            }
            _ => Err("not an adaptive strategy".to_string()),
        }
    }

    /// The baseline's rung attempt at budget `bi` finished.
    fn take_rung_baseline(&self, cs: &mut CellSearch, bi: u32, rec: &Arc<AttemptRecord>) {
        if rec.status != AttemptStatus::Ok && cs.base_failed.is_none() {
            let why = rec
                .failure
                .as_ref()
                .map(|f| format!("{}: {}", f.class.as_str(), f.detail))
                .unwrap_or_else(|| "its attempt was lost".to_string());
            cs.base_failed = Some(format!(
                "the baseline failed at budget {} ({why}); nothing can be gated there",
                budget_label(self.budgets.get(bi as usize).copied().flatten())
            ));
        }
        cs.base[bi as usize] = Some(rec.clone());
    }

    /// The budget index of a search job.
    fn budget_index(&self, budget: f64) -> u32 {
        let trial = self.study.fidelity.as_ref().map(|f| f.trial_budget(budget));
        self.budgets
            .iter()
            .position(|b| b.map(f64::to_bits) == trial.map(f64::to_bits))
            .unwrap_or(self.budgets.len().saturating_sub(1)) as u32
    }

    /// What a rung attempt tells the search: its proxy value, or a failure
    /// (failed, no proxy value, or output different from the baseline's
    /// at the same budget).
    fn rung_outcome(&self, base: Option<&AttemptRecord>, rec: &AttemptRecord) -> Outcome {
        if rec.status != AttemptStatus::Ok {
            return Outcome::Failed;
        }
        if let Some(b) = base
            && crate::gate::compare_outputs(b, rec, self.tolerance.as_ref()).is_err()
        {
            return Outcome::Failed;
        }
        let metric = self
            .study
            .fidelity
            .as_ref()
            .map(|f| f.proxy.name.as_str())
            .unwrap_or(self.study.objective.name.as_str());
        match rec
            .metrics
            .get(metric)
            .and_then(|s| crate::stats::median(s))
        {
            Some(v) if v.is_finite() => Outcome::Value(v),
            _ => Outcome::Failed,
        }
    }

    /// Hand out search jobs of `class` until one must run: returns it, or
    /// `None` when every search waits or is over. Jobs the ledger already
    /// holds get their result at once (a resumed launch replays its search).
    /// Searches that end release their cells' objective stage.
    fn advance_searches(&self, st: &mut State, class: usize) -> Option<Unit> {
        enum Then {
            Run(Unit),
            Again,
            Next,
            Over,
        }
        let cells: Vec<u32> = st.classes[class].searches.keys().copied().collect();
        for cell in cells {
            loop {
                let then = {
                    let State {
                        classes, summary, ..
                    } = &mut *st;
                    let Some(search) = classes[class].searches.get_mut(&cell) else {
                        break;
                    };
                    if search.finalists.is_some() || search.base_left > 0 {
                        break;
                    }
                    let step = if search.base_failed.is_some() {
                        Ok(Step::Done)
                    } else {
                        search.search.step()
                    };
                    match step {
                        Ok(Step::Run(index, job)) => {
                            let bi = self.budget_index(job.budget);
                            let unit = Unit::rung(cell, bi, job.config + 1);
                            let key = self.key_of(class, unit);
                            search.jobs.insert((job.config, bi), index);
                            match search.records.get(&key).cloned() {
                                Some(rec) => {
                                    let outcome = self
                                        .rung_outcome(search.base[bi as usize].as_deref(), &rec);
                                    let _ = search.search.report(index, outcome);
                                    summary.already_done += 1;
                                    Then::Again
                                }
                                None => Then::Run(unit),
                            }
                        }
                        Ok(Step::Wait) => Then::Next,
                        Ok(Step::Done) => Then::Over,
                        Err(e) => {
                            self.warn(format!(
                                "error: the search at cell {} stopped: {e}",
                                self.cell_label(cell)
                            ));
                            search.base_failed = Some(e);
                            Then::Over
                        }
                    }
                };
                match then {
                    Then::Run(unit) => {
                        let _ = self.events.send(Event::More { count: 1 });
                        return Some(unit);
                    }
                    Then::Again => continue,
                    Then::Next => break,
                    Then::Over => {
                        self.search_over(st, class, cell);
                        break;
                    }
                }
            }
        }
        None
    }

    /// The search of (class, cell) is over: keep its finalists, and once
    /// every cell of its bucket is over, queue the objective stage of the
    /// bucket's cells with the union of their finalists.
    fn search_over(&self, st: &mut State, class: usize, cell: u32) {
        let k = match self.study.strategy {
            crate::spec::Strategy::Hyperband { finalists, .. }
            | crate::spec::Strategy::Tpe { finalists, .. } => finalists as usize,
            _ => 0,
        };
        let label = self.cell_label(cell);
        let class_id = self.class_ids[class].clone();
        let cs = &mut st.classes[class];
        let Some(search) = cs.searches.get_mut(&cell) else {
            return;
        };
        let picked: Vec<u64> = if search.base_failed.is_some() {
            Vec::new()
        } else {
            search
                .search
                .finalists(k)
                .iter()
                .map(|s| s.config)
                .collect()
        };
        let message = match &search.base_failed {
            Some(why) => format!("search at cell {label} on {class_id} skipped: {why}"),
            None => format!(
                "search at cell {label} on {class_id} is over after {} jobs: {} finalists go to the objective stage ({})",
                search.search.issued(),
                picked.len(),
                picked
                    .iter()
                    .map(|c| self.plan.space.label(self.study, *c))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
        search.finalists = Some(picked);
        self.note(message);
        let bucket = &self.bucket_of_cell[cell as usize];
        let members = self
            .cells_of_bucket
            .get(bucket)
            .cloned()
            .unwrap_or_default();
        let all_over = members
            .iter()
            .all(|m| cs.searches.get(m).is_none_or(|s| s.finalists.is_some()));
        if !all_over {
            return;
        }
        let mut union: Vec<u64> = members
            .iter()
            .filter_map(|m| cs.searches.get(m).and_then(|s| s.finalists.clone()))
            .flatten()
            .collect();
        union.sort_unstable();
        union.dedup();
        let mut more = 0u64;
        for m in &members {
            if cs.searches.contains_key(m) {
                st.plan_writes
                    .push(self.plan_record(class, *m, Some(1 + union.len() as u64)));
            }
        }
        let cs = &mut st.classes[class];
        for m in members {
            if cs.searches.remove(&m).is_none() {
                continue;
            }
            cs.pending = cs.pending.saturating_sub(1);
            cs.finalists.insert(m, union.clone());
            cs.just_released.push(m);
            let first = Unit::sweep(m, 0, 0);
            let key = self.key_of(class, first);
            match self.first_baselines.get(&key) {
                Some(AttemptStatus::Ok) => {
                    let (n, d) = self.release_cell(cs, class, m);
                    more += n;
                    st.summary.already_done += d + 1;
                }
                Some(_) => {
                    cs.released.insert(m);
                    st.summary.already_done += 1;
                }
                None => {
                    cs.ready.push(Reverse(first));
                    cs.pending += 1;
                    *cs.outstanding.entry(m).or_insert(0) += 1;
                    more += 1;
                }
            }
        }
        if more > 0 {
            let _ = self.events.send(Event::More { count: more });
        }
    }

    /// Book-keeping of a rung unit that ended (not lost with its host).
    fn finish_rung(&self, st: &mut State, class: usize, unit: Unit, ran: Option<&Ran>) {
        let cs = &mut st.classes[class];
        let Some(search) = cs.searches.get_mut(&unit.cell) else {
            return;
        };
        let record = ran
            .filter(|r| r.status != AttemptStatus::Lost)
            .and_then(|r| r.record.clone());
        if let Some(rec) = &record {
            search.records.insert(rec.trial_key.clone(), rec.clone());
        }
        if unit.pos == 0 {
            search.base_left = search.base_left.saturating_sub(1);
            match &record {
                Some(rec) => self.take_rung_baseline(search, unit.budget, rec),
                None => {
                    if search.base_failed.is_none() {
                        search.base_failed = Some(format!(
                            "the baseline's rung attempt at budget {} was lost; launch again to search this cell",
                            budget_label(self.budgets.get(unit.budget as usize).copied().flatten())
                        ));
                    }
                }
            }
            return;
        }
        let config = unit.pos - 1;
        let Some(&index) = search.jobs.get(&(config, unit.budget)) else {
            return;
        };
        let outcome = match &record {
            Some(rec) => self.rung_outcome(search.base[unit.budget as usize].as_deref(), rec),
            // Lost (not with its host) or not recorded: the search goes on
            // without it.
            None => Outcome::Failed,
        };
        let _ = search.search.report(index, outcome);
    }

    fn baseline_failed_reason(&self, cell: u32) -> String {
        format!(
            "the baseline failed at cell {}; nothing can win there",
            self.cell_label(cell)
        )
    }

    fn skip(&self, count: u64, reason: String) {
        self.skip_with(count, reason, true);
    }

    fn skip_with(&self, count: u64, reason: String, announce: bool) {
        if count == 0 {
            return;
        }
        if let Ok(mut st) = self.state.lock() {
            st.summary.skipped += count;
        }
        let _ = self.events.send(Event::Skipped {
            count,
            reason,
            announce,
        });
    }

    /// Queue every sweep trial of a cell except the baseline's first repeat
    /// and those already done. Returns (queued, already done).
    fn release_cell(&self, cs: &mut ClassState, class: usize, cell: u32) -> (u64, u64) {
        let positions = self.positions(cs, cell);
        let (mut queued, mut done) = (0, 0);
        for repeat in 0..self.plan.repeats {
            for &pos in &positions {
                if repeat == 0 && pos == 0 {
                    continue;
                }
                let unit = Unit::sweep(cell, repeat, pos);
                if self.done.contains(&self.key_of(class, unit)) {
                    done += 1;
                } else {
                    cs.ready.push(Reverse(unit));
                    queued += 1;
                }
            }
        }
        *cs.outstanding.entry(cell).or_insert(0) += queued;
        cs.released.insert(cell);
        (queued, done)
    }

    /// Sweep positions of a cell, baseline (0) first.
    fn positions(&self, cs: &ClassState, cell: u32) -> Vec<u64> {
        if self.adaptive() {
            std::iter::once(0)
                .chain(cs.finalists.get(&cell).into_iter().flatten().map(|c| c + 1))
                .collect()
        } else {
            (0..self.plan.configs_in_cell(cell as usize)).collect()
        }
    }

    /// Sweep trials of a cell on a class (config × repeat).
    fn trials_in_cell(&self, cs: &ClassState, cell: u32) -> u64 {
        self.positions(cs, cell).len() as u64 * u64::from(self.plan.repeats)
    }

    /// The next unit for a slot of `host` (in `class`), and the cells whose
    /// sweep finished by skipping.
    fn next(&self, class: usize, host: usize) -> (Next, Vec<u32>) {
        let Ok(mut st) = self.state.lock() else {
            return (Next::Done, vec![]);
        };
        if st.cooling.contains(&host) {
            return (Next::Wait, vec![]);
        }
        let class_hosts: Vec<usize> = (0..self.host_class.len())
            .filter(|h| self.host_class[*h] == class)
            .collect();
        let mut skipped_failed = 0u64;
        let mut skipped_dropped = 0u64;
        let mut touched = Vec::new();
        let mut deferred = Vec::new();
        {
            let cs = &mut st.classes[class];
            let now = std::time::Instant::now();
            let (due, later): (Vec<_>, Vec<_>) =
                cs.deferred.drain(..).partition(|(t, _)| *t <= now);
            cs.deferred = later;
            for (_, u) in due {
                cs.ready.push(Reverse(u));
            }
        }
        let result = loop {
            if st.classes[class].ready.is_empty()
                && let Some(unit) = self.advance_searches(&mut st, class)
            {
                st.classes[class].ready.push(Reverse(unit));
            }
            touched.append(&mut st.classes[class].just_released);
            let State {
                classes,
                warmed,
                dropped,
                ..
            } = &mut *st;
            let cs = &mut classes[class];
            match cs.ready.pop() {
                Some(Reverse(unit)) => {
                    let config = self.config_of(unit);
                    let finish_sweep = |cs: &mut ClassState| {
                        if let Some(n) = cs.outstanding.get_mut(&unit.cell) {
                            *n = n.saturating_sub(1);
                        }
                    };
                    if unit.kind == Kind::Sweep && cs.failed_configs.contains(&(unit.cell, config))
                    {
                        skipped_failed += 1;
                        finish_sweep(cs);
                        touched.push(unit.cell);
                        continue;
                    }
                    if dropped.contains(&(host, unit.cell)) {
                        if class_hosts
                            .iter()
                            .all(|h| dropped.contains(&(*h, unit.cell)))
                        {
                            skipped_dropped += 1;
                            if unit.kind == Kind::Sweep {
                                finish_sweep(cs);
                            }
                            touched.push(unit.cell);
                        } else {
                            deferred.push(unit);
                        }
                        continue;
                    }
                    cs.in_flight += 1;
                    let warm = warmed.insert(self.warm_key(host, unit));
                    break Next::Run(unit, warm);
                }
                None if cs.pending > 0
                    || cs.in_flight > 0
                    || !deferred.is_empty()
                    || !cs.deferred.is_empty() =>
                {
                    break Next::Wait;
                }
                None => break Next::Done,
            }
        };
        for u in deferred {
            st.classes[class].ready.push(Reverse(u));
        }
        drop(st);
        if skipped_failed > 0 {
            // Counted, not announced: the failure itself was reported.
            self.skip_with(
                skipped_failed,
                "their config already failed in this cell".to_string(),
                false,
            );
        }
        if skipped_dropped > 0 {
            self.skip(
                skipped_dropped,
                "their cell was dropped on every host of the class".to_string(),
            );
        }
        (result, touched)
    }

    async fn worker(&self, host_index: usize, host: &LaunchHost, slot: u32) {
        let class = self.host_class[host_index];
        loop {
            if self.cancel.is_cancelled() || self.ledger_failing() {
                return;
            }
            match self.host_ready(host_index, host, class).await {
                HostGate::Go => {}
                HostGate::Wait(pause) => {
                    let notified = self.notify.notified();
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep(pause) => {}
                        _ = self.cancel.cancelled() => return,
                    }
                    continue;
                }
                HostGate::Leave => return,
            }
            // Register for wake-ups before looking at the queue, so that a
            // baseline finishing in between cannot be missed.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (next, touched) = self.next(class, host_index);
            self.flush_plan_writes().await;
            if !touched.is_empty() {
                self.maybe_confirm(class, &touched).await;
                self.notify.notify_waiters();
                // Skipping may have completed a bucket whose confirmation
                // round was just queued: look again before giving up.
                if matches!(next, Next::Done | Next::Wait) {
                    continue;
                }
            }
            let (unit, warm) = match next {
                Next::Done => return,
                Next::Wait => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = self.cancel.cancelled() => return,
                    }
                    continue;
                }
                Next::Run(u, warm) => (u, warm),
            };
            let config = self.config_of(unit);
            let key = self.key_of(class, unit);
            let ran = self
                .run_trial(
                    host_index,
                    host,
                    slot,
                    class,
                    unit.cell,
                    config,
                    unit.repeat,
                    self.role_of(unit),
                    self.budget_of(unit),
                    key,
                    warm,
                )
                .await;
            let ran = match ran {
                TrialResult::Done(r) => Some(r),
                TrialResult::Unrecorded => None,
                // The ledger fails: this launch starts nothing more.
                TrialResult::NotStarted => return,
                TrialResult::Held(retry_in) => {
                    // Another launcher replaying the same search runs this
                    // rung, and the search waits for its result: look
                    // again soon rather than at the lease's renewal.
                    let retry_in = match unit.kind {
                        Kind::Rung => retry_in.min(HELD_RUNG_RETRY),
                        _ => retry_in,
                    };
                    self.defer(class, host_index, unit, retry_in);
                    continue;
                }
            };
            let anchor_due = self.finish(class, host_index, unit, ran.as_ref());
            if anchor_due && !self.ledger_failing() {
                self.anchor(host_index, host, slot, class, unit.cell).await;
            }
            if unit.kind == Kind::Sweep {
                self.maybe_confirm(class, &[unit.cell]).await;
            }
            self.notify.notify_waiters();
        }
    }

    /// Whether this host's slot may take a unit now. A host that is down
    /// is retried with back-off while its class has work; a class whose
    /// every host stays down past `--host-timeout` is given up.
    async fn host_ready(&self, host_index: usize, host: &LaunchHost, class: usize) -> HostGate {
        if let Ok(st) = self.state.lock()
            && (st.retired.contains(&host_index) || st.abandoned.contains(&class))
        {
            return HostGate::Leave;
        }
        match host.transport.state().await {
            HostState::Up { rejoined } => {
                let was_down = self
                    .state
                    .lock()
                    .ok()
                    .and_then(|mut st| {
                        st.all_down_announced.remove(&class);
                        st.down.remove(&host_index)
                    })
                    .is_some();
                if rejoined || was_down {
                    self.warn(format!(
                        "host `{}` answers again and rejoins the study",
                        host.name
                    ));
                    self.notify.notify_waiters();
                }
                HostGate::Go
            }
            HostState::Changed { old, new } => {
                let mut changes = crate::fingerprint::differences(&old, &new);
                if changes.is_empty() {
                    changes.push("its fingerprint hash".to_string());
                }
                self.warn(format!(
                    "warning: host `{}` came back with another fingerprint ({}): it is a new host class ({}) and leaves this launch; its results so far stay with {}",
                    host.name,
                    changes.join("; "),
                    new.class_label(),
                    old.class_label(),
                ));
                if let Ok(mut st) = self.state.lock()
                    && st.retired.insert(host_index)
                {
                    st.summary.changed_hosts.push(host.name.clone());
                }
                self.notify.notify_waiters();
                HostGate::Leave
            }
            HostState::Down {
                reason,
                since,
                retry_in,
                first,
            } => {
                if first {
                    self.warn(format!(
                        "warning: host `{}` dropped ({reason}); its running trials are queued again on the other hosts of its class; retrying it with back-off",
                        host.name
                    ));
                }
                self.host_down(host_index, class, since, retry_in)
            }
        }
    }

    fn host_down(
        &self,
        host_index: usize,
        class: usize,
        since: std::time::Instant,
        retry_in: Duration,
    ) -> HostGate {
        let Ok(mut st) = self.state.lock() else {
            return HostGate::Leave;
        };
        st.down.entry(host_index).or_insert(since);
        let class_hosts: Vec<usize> = (0..self.host_class.len())
            .filter(|h| self.host_class[*h] == class)
            .collect();
        let cs = &st.classes[class];
        let has_work =
            !cs.ready.is_empty() || cs.pending > 0 || cs.in_flight > 0 || !cs.deferred.is_empty();
        if !has_work {
            return HostGate::Leave;
        }
        let all_down = class_hosts
            .iter()
            .all(|h| st.down.contains_key(h) || st.retired.contains(h));
        if !all_down {
            return HostGate::Wait(retry_in.min(Duration::from_secs(1)));
        }
        // The class has work and no host: wait for one, up to the limit.
        let last_down = class_hosts
            .iter()
            .filter_map(|h| st.down.get(h))
            .max()
            .copied();
        let every_retired = class_hosts.iter().all(|h| st.retired.contains(h));
        let waited = last_down.map(|t| t.elapsed()).unwrap_or_default();
        let label = self.plan.classes[class].label.clone();
        let left = cs.ready.len() + cs.deferred.len() + cs.in_flight;
        if every_retired {
            // Its hosts belong to other classes now: the next round of the
            // launch tunes those; what this class lacks stays as it is.
            if st.abandoned.insert(class) {
                drop(st);
                self.warn(format!(
                    "class {label} has no host left (its hosts changed class); its {left} queued trials are not run"
                ));
                self.notify.notify_waiters();
            }
            return HostGate::Leave;
        }
        if waited >= self.options.host_timeout {
            if st.abandoned.insert(class) {
                st.summary
                    .abandoned_classes
                    .push(format!("{label}: {left} queued trials not run"));
                drop(st);
                self.warn(format!(
                    "error: every host of class {label} stayed down for {}; its {left} queued trials (and any cell still waiting for a baseline) are left for a later launch",
                    humantime::format_duration(Duration::from_secs(waited.as_secs()))
                ));
                self.notify.notify_waiters();
            }
            return HostGate::Leave;
        }
        if st.all_down_announced.insert(class) {
            let names: Vec<&str> = class_hosts
                .iter()
                .map(|h| self.host_names[*h].as_str())
                .collect();
            drop(st);
            self.warn(format!(
                "warning: every host of class {label} is down ({}); its trials wait up to {} (--host-timeout) for one to answer",
                names.join(", "),
                humantime::format_duration(self.options.host_timeout)
            ));
        }
        HostGate::Wait(retry_in.min(Duration::from_secs(1)))
    }

    /// Another launcher holds this unit's trial: look again later.
    fn defer(&self, class: usize, host: usize, unit: Unit, retry_in: Duration) {
        if let Ok(mut st) = self.state.lock() {
            st.warmed.remove(&self.warm_key(host, unit));
            let cs = &mut st.classes[class];
            cs.in_flight = cs.in_flight.saturating_sub(1);
            cs.deferred
                .push((std::time::Instant::now() + retry_in, unit));
        }
    }

    /// Book-keeping after a unit ran. Returns whether the host is due for
    /// an anchor in this cell.
    fn finish(&self, class: usize, host: usize, unit: Unit, ran: Option<&Ran>) -> bool {
        let status = ran.map(|r| r.status);
        let mut release = None;
        let mut anchor_due = false;
        let Ok(mut st) = self.state.lock() else {
            return false;
        };
        let config = self.config_of(unit);
        // Lost with its host: the trial goes back to the class's queue, for
        // another host (or this one when it answers again).
        if let Some(r) = ran.filter(|r| r.host_lost) {
            let losses = st.host_losses.entry(r.key.clone()).or_insert(0);
            *losses += 1;
            if *losses <= MAX_HOST_LOSS_REQUEUES {
                st.warmed.remove(&self.warm_key(host, unit));
                st.summary.requeued += 1;
                let cs = &mut st.classes[class];
                cs.in_flight = cs.in_flight.saturating_sub(1);
                cs.ready.push(Reverse(unit));
                drop(st);
                let _ = self.events.send(Event::More { count: 1 });
                return false;
            }
            drop(st);
            self.warn(format!(
                "warning: a trial ({}) was running each of the {MAX_HOST_LOSS_REQUEUES} times a host dropped; it is left for a later launch",
                &r.key[..r.key.len().min(16)]
            ));
            return self.finish(
                class,
                host,
                unit,
                Some(&Ran {
                    host_lost: false,
                    ..r.clone()
                }),
            );
        }
        let cs = &mut st.classes[class];
        cs.in_flight = cs.in_flight.saturating_sub(1);
        if unit.kind == Kind::Sweep
            && let Some(n) = cs.outstanding.get_mut(&unit.cell)
        {
            *n = n.saturating_sub(1);
        }
        match status {
            Some(AttemptStatus::Failed) if unit.kind == Kind::Sweep => {
                cs.failed_configs.insert((unit.cell, config));
            }
            Some(AttemptStatus::Lost) | None => {
                st.warmed.remove(&self.warm_key(host, unit));
            }
            _ => {}
        }
        if unit.kind == Kind::Rung {
            self.finish_rung(&mut st, class, unit, ran);
            return false;
        }
        // The first baseline repeat releases its cell once; a re-run of it
        // (after drift) is an ordinary measurement.
        if unit.is_first_baseline() && !st.classes[class].released.contains(&unit.cell) {
            let cs = &mut st.classes[class];
            cs.pending = cs.pending.saturating_sub(1);
            match status {
                Some(AttemptStatus::Ok) => {
                    let (queued, done) = self.release_cell(cs, class, unit.cell);
                    st.summary.already_done += done;
                    // An adaptive cell's objective stage was not counted
                    // when the launch started.
                    if self.adaptive() && queued > 0 {
                        let _ = self.events.send(Event::More { count: queued });
                    }
                }
                Some(AttemptStatus::Failed) => {
                    cs.released.insert(unit.cell);
                    release = Some((
                        self.trials_in_cell(cs, unit.cell) - 1,
                        self.baseline_failed_reason(unit.cell),
                    ));
                }
                // Lost or not recorded: the cell waits for the next launch
                // (quietly when this one is stopping).
                _ => {
                    cs.released.insert(unit.cell);
                    if !self.cancel.is_cancelled() {
                        release = Some((
                            self.trials_in_cell(cs, unit.cell) - 1,
                            format!(
                                "the baseline's attempt at cell {} was lost; launch again to run this cell",
                                self.cell_label(unit.cell)
                            ),
                        ));
                    }
                }
            }
        }
        if unit.kind == Kind::Sweep
            && let Some(r) = ran.filter(|r| r.status == AttemptStatus::Ok)
        {
            let every = self.study.measurement.anchor_every;
            let d = st.drift.entry((host, unit.cell)).or_default();
            if unit.pos == 0
                && let Some(v) = r.value
            {
                d.watch.baseline(v);
            }
            d.since_clean
                .push((r.key.clone(), r.attempt_id.clone(), unit));
            if unit.pos > 0 {
                d.sweeps += 1;
                if every > 0 && d.sweeps >= every {
                    d.sweeps = 0;
                    anchor_due = true;
                }
            }
        }
        drop(st);
        if let Some((count, reason)) = release {
            self.skip(count, reason);
        }
        anchor_due
    }

    fn higher_is_better(&self) -> bool {
        self.study.objective.better == crate::spec::Better::Higher
    }

    /// Measure the baseline once on this host as an anchor.
    async fn measure_anchor(
        &self,
        host_index: usize,
        host: &LaunchHost,
        slot: u32,
        class: usize,
        cell: u32,
    ) -> Option<super::drift::Reading> {
        let base = self.plan.space.baseline();
        let role = Role::Anchor {
            host: host.name.clone(),
            tag: new_attempt_id(),
        };
        let key = self.key_for(class, cell, base, 0, role.clone(), self.objective_budget);
        if let Ok(mut st) = self.state.lock() {
            st.summary.anchors += 1;
        }
        let _ = self.events.send(Event::More { count: 1 });
        let TrialResult::Done(ran) = self
            .run_trial(
                host_index,
                host,
                slot,
                class,
                cell,
                base,
                0,
                role,
                self.objective_budget,
                key,
                false,
            )
            .await
        else {
            return None;
        };
        if ran.status != AttemptStatus::Ok {
            self.warn(format!(
                "warning: the baseline anchor failed on host {} at cell {}; drift not checked",
                host.name,
                self.cell_label(cell)
            ));
        }
        ran.value
    }

    /// Re-measure the baseline and judge it (`drift.rs`); on drift, void,
    /// cool down and re-queue.
    async fn anchor(
        &self,
        host_index: usize,
        host: &LaunchHost,
        slot: u32,
        class: usize,
        cell: u32,
    ) {
        let m = &self.study.measurement;
        let higher = self.higher_is_better();
        let Some(first) = self
            .measure_anchor(host_index, host, slot, class, cell)
            .await
        else {
            return;
        };
        let label = self.cell_label(cell);
        let judged = {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            let d = st.drift.entry((host_index, cell)).or_default();
            match d.watch.thresholds(&[first], m.cool_drift, m.cool_eps) {
                Some(t) => Some((t, Watch::judge(&t, &[first], higher))),
                None => {
                    // Nothing to compare with yet: the anchor starts the
                    // reference.
                    d.watch.clean(&[first]);
                    d.since_clean.clear();
                    None
                }
            }
        };
        let Some((t, judgement)) = judged else {
            return;
        };
        if self.options.no_cooldown || judgement == Judgement::Clean {
            if let Ok(mut st) = self.state.lock() {
                let d = st.drift.entry((host_index, cell)).or_default();
                d.watch.clean(&[first]);
                d.since_clean.clear();
            }
            if let Judgement::Worse(x) | Judgement::Better(x) = judgement {
                self.warn(format!(
                    "warning: host {} drifted {:.1}% at cell {label} (anchor vs the reference; threshold {}); --no-cooldown: measurements kept",
                    host.name,
                    x * 100.0,
                    threshold_text(&t, m.cool_drift, "cool_drift", K_DRIFT)
                ));
            }
            return;
        }
        // A suspect: two more anchors right away. The host has drifted only
        // if the three together are past the threshold the same way.
        let mut burst = vec![first];
        for _ in 0..2 {
            match self
                .measure_anchor(host_index, host, slot, class, cell)
                .await
            {
                Some(r) => burst.push(r),
                // A failed anchor checks nothing (measure_anchor warned).
                None => return,
            }
        }
        enum Verdict {
            Clean,
            /// Worse than the reference: cool down. The thresholds for one
            /// anchor (what settling is judged with), whether clean
            /// readings back the reference, and what is voided.
            Hot(
                f64,
                Thresholds,
                Thresholds,
                bool,
                Vec<(String, String, Unit)>,
            ),
            /// Better than the reference: what came before was measured in
            /// a worse state; re-measure, no cool-down.
            WasSlow(f64, Thresholds, Vec<(String, String, Unit)>),
        }
        let verdict = {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            let d = st.drift.entry((host_index, cell)).or_default();
            let Some(t) = d.watch.thresholds(&burst, m.cool_drift, m.cool_eps) else {
                return;
            };
            let one = d
                .watch
                .thresholds(&burst[..1], m.cool_drift, m.cool_eps)
                .unwrap_or(t);
            match (judgement, Watch::judge(&t, &burst, higher)) {
                (Judgement::Worse(_), Judgement::Worse(x)) => {
                    let backed = d.watch.has_clean();
                    d.watch.discard_provisional();
                    let voids = std::mem::take(&mut d.since_clean);
                    st.cooling.insert(host_index);
                    Verdict::Hot(x, t, one, backed, voids)
                }
                (Judgement::Better(_), Judgement::Better(x)) => {
                    d.watch.restart(&burst);
                    Verdict::WasSlow(x, t, std::mem::take(&mut d.since_clean))
                }
                _ => {
                    d.watch.clean(&burst);
                    d.since_clean.clear();
                    Verdict::Clean
                }
            }
        };
        let (drift, t, one, backed, voids) = match verdict {
            Verdict::Clean => return,
            Verdict::WasSlow(gain, t, voids) => {
                self.warn(format!(
                    "host {} was slower before: 3 anchors at cell {label} are {:.1}% better than the reference (threshold {}); re-measuring {} trials taken in the slower state",
                    host.name,
                    gain * 100.0,
                    threshold_text(&t, m.cool_drift, "cool_drift", K_DRIFT),
                    voids.len()
                ));
                let reason = format!(
                    "host {} was {:.1}% slower than later at cell {label}",
                    host.name,
                    gain * 100.0
                );
                self.void(&voids, &reason).await;
                self.requeue(class, cell, &voids, None);
                self.notify.notify_waiters();
                return;
            }
            Verdict::Hot(drift, t, one, backed, voids) => (drift, t, one, backed, voids),
        };
        self.warn(format!(
            "host {} drifted {:.1}% at cell {label} (3 anchors against the reference; threshold {}): discarding {} measurements since its last clean anchor and cooling down",
            host.name,
            drift * 100.0,
            threshold_text(&t, m.cool_drift, "cool_drift", K_DRIFT),
            voids.len()
        ));
        let reason = format!(
            "host {} drifted {:.1}% at cell {label}",
            host.name,
            drift * 100.0
        );
        self.void(&voids, &reason).await;
        // Cool down: back-off, then an anchor, until it settles: within the
        // settle threshold of the reference, or, when only the discarded
        // readings backed the reference, of the anchor before it (the host
        // is stable again).
        let started = std::time::Instant::now();
        let mut wait = m.cool_wait;
        let mut settled = false;
        let mut previous = crate::stats::median(&burst.iter().map(|r| r.value).collect::<Vec<_>>())
            .unwrap_or(one.reference);
        let mut last = drift;
        let mut tries = 0;
        while tries < m.cool_max_retry {
            let left = m.cool_max_wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                break;
            }
            tries += 1;
            tokio::select! {
                _ = tokio::time::sleep(wait.min(left)) => {}
                _ = self.cancel.cancelled() => break,
            }
            wait = wait.saturating_mul(2);
            let Some(v) = self
                .measure_anchor(host_index, host, slot, class, cell)
                .await
            else {
                break;
            };
            last = if backed {
                super::drift::shortfall(one.reference, v.value, higher)
            } else {
                super::drift::shortfall(previous, v.value, higher)
                    .max(super::drift::shortfall(v.value, previous, higher))
            };
            previous = v.value;
            if last <= one.settle {
                settled = true;
                if let Ok(mut st) = self.state.lock() {
                    st.drift
                        .entry((host_index, cell))
                        .or_default()
                        .watch
                        .settled(v);
                }
                break;
            }
        }
        let requeued = voids.len() as u64;
        let dropped = !settled && !self.cancel.is_cancelled();
        self.requeue(class, cell, &voids, Some((host_index, dropped)));
        let against = if backed {
            "the reference"
        } else {
            "the anchor before"
        };
        if settled {
            self.warn(format!(
                "host {} cooled down: its anchor is within {:.1}% of {against} (threshold {}) after {tries} tries; re-measuring {requeued} trials",
                host.name,
                last * 100.0,
                threshold_text(&one, m.cool_eps, "cool_eps", K_SETTLE)
            ));
        } else if dropped {
            let reason = format!(
                "the baseline did not settle within {} after {tries} anchors and {:.1}s (last {:.1}% off {against})",
                threshold_text(&one, m.cool_eps, "cool_eps", K_SETTLE),
                started.elapsed().as_secs_f64(),
                last * 100.0
            );
            self.warn(format!("host {} drops cell {label}: {reason}", host.name));
            let record = DropRecord {
                schema: records::SCHEMA,
                host_class: self.class_ids[class].clone(),
                host: host.name.clone(),
                cell: space::cell_json(self.study, &self.plan.cells[cell as usize]),
                cell_label: label,
                reason,
                at: chrono::Utc::now().to_rfc3339(),
            };
            if let Err(e) = self.ledger.write_drop(self.study_id, &record).await {
                self.warn(format!("error: {e}"));
            }
        }
        self.notify.notify_waiters();
    }

    /// Write void records for attempts whose measurements are discarded.
    async fn void(&self, voids: &[(String, String, Unit)], reason: &str) {
        let now = chrono::Utc::now().to_rfc3339();
        for (key, attempt_id, _) in voids {
            let record = VoidRecord {
                schema: records::SCHEMA,
                trial_key: key.clone(),
                attempt_id: attempt_id.clone(),
                reason: reason.to_string(),
                at: now.clone(),
            };
            if let Err(e) = self.ledger.write_void(self.study_id, &record).await {
                self.warn(format!("error: {e}"));
            }
        }
    }

    /// Put voided units back in the queue; `cooled` ends a host's
    /// cool-down (and drops the cell on it when it did not settle).
    fn requeue(
        &self,
        class: usize,
        cell: u32,
        voids: &[(String, String, Unit)],
        cooled: Option<(usize, bool)>,
    ) {
        let requeued = voids.len() as u64;
        if let Ok(mut st) = self.state.lock() {
            if let Some((host, dropped)) = cooled {
                st.cooling.remove(&host);
                if dropped {
                    st.dropped.insert((host, cell));
                    st.summary.dropped_cells += 1;
                }
            }
            st.summary.voided += requeued;
            let cs = &mut st.classes[class];
            for (_, _, unit) in voids {
                cs.ready.push(Reverse(*unit));
            }
            *cs.outstanding.entry(cell).or_insert(0) += requeued;
        }
        let _ = self.events.send(Event::More { count: requeued });
    }

    /// Start the confirmation round of every bucket (touched by `cells`)
    /// whose cells are all measured on `class`.
    async fn maybe_confirm(&self, class: usize, cells: &[u32]) {
        let rounds = self.study.measurement.confirm_repeats;
        // A shard sees a slice of the candidates: its leader is not the
        // bucket's; the launch without --shard confirms.
        if rounds == 0 || self.cancel.is_cancelled() || self.options.shard.is_some() {
            return;
        }
        let mut ready = Vec::new();
        {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            let cs = &mut st.classes[class];
            for cell in cells {
                let bucket = &self.bucket_of_cell[*cell as usize];
                if cs.confirm_started.contains(bucket) {
                    continue;
                }
                let members = self
                    .cells_of_bucket
                    .get(bucket)
                    .cloned()
                    .unwrap_or_default();
                let complete = members.iter().all(|c| {
                    cs.released.contains(c) && cs.outstanding.get(c).copied().unwrap_or(0) == 0
                });
                if complete {
                    cs.confirm_started.insert(bucket.clone());
                    cs.pending += 1;
                    ready.push((bucket.clone(), members));
                }
            }
        }
        for (bucket, members) in ready {
            let winner = self.draft_winner(class, &bucket).await;
            let mut queued = 0u64;
            if let Ok(mut st) = self.state.lock() {
                let cs = &mut st.classes[class];
                if let Some(config) = winner {
                    for cell in &members {
                        for repeat in 0..rounds {
                            for pos in [0, config + 1] {
                                let unit = Unit {
                                    kind: Kind::Confirm,
                                    cell: *cell,
                                    repeat,
                                    pos,
                                    budget: 0,
                                };
                                if !self.done.contains(&self.key_of(class, unit)) {
                                    cs.ready.push(Reverse(unit));
                                    queued += 1;
                                }
                            }
                        }
                    }
                }
                cs.pending = cs.pending.saturating_sub(1);
                st.summary.confirm_trials += queued;
            }
            if queued > 0 {
                let _ = self.events.send(Event::More { count: queued });
                let label = members
                    .first()
                    .map(|c| {
                        crate::report::buckets::bucket_of(
                            &self.record.spec,
                            &space::cell_json(self.study, &self.plan.cells[*c as usize]),
                        )
                        .label
                    })
                    .unwrap_or_default();
                self.note(format!(
                    "confirming the draft winner of bucket {label} on {}: {queued} interleaved trials against the baseline",
                    self.class_ids[class]
                ));
            }
            self.notify.notify_waiters();
        }
    }

    /// The draft winner of a bucket on a class, from the ledger as it is
    /// (the scan adds only what was written since the launch's last one;
    /// the analysis looks only at this class's attempts at the bucket's
    /// cells, all a bucket's decision depends on).
    async fn draft_winner(&self, class: usize, bucket: &str) -> Option<u64> {
        let scan = match self.ledger.scan(self.study_id).await {
            Ok(s) => s,
            Err(e) => {
                self.warn(format!(
                    "error: cannot read the ledger to confirm bucket {bucket}: {e}"
                ));
                return None;
            }
        };
        let hosts = self
            .ledger
            .hosts(self.study_id)
            .await
            .map(|(h, _)| h)
            .unwrap_or_default();
        let class_id = &self.class_ids[class];
        let cells = self.cells_of_bucket.get(bucket)?;
        let analysis = crate::report::analyze_where(&self.record, &scan, &hosts, &[], |a| {
            a.host_class == *class_id && cells.contains(&a.cell_index)
        });
        let report = analysis
            .classes
            .iter()
            .find(|c| c.host_class == *class_id)?
            .buckets
            .iter()
            .find(|b| b.key == bucket)?;
        let winner = report.winner.as_ref()?;
        self.plan.space.index_of(self.study, &winner.config)
    }

    #[allow(clippy::too_many_arguments)]
    fn vars(
        &self,
        host: &LaunchHost,
        slot: u32,
        cell: u32,
        config: u64,
        repeat: u32,
        budget: Option<f64>,
        key: &str,
        dir: &str,
        result: &str,
    ) -> TrialVars {
        let mut vars = TrialVars::default();
        for (k, v) in self
            .study
            .knobs
            .iter()
            .zip(self.plan.space.values(self.study, config))
        {
            vars.set(&k.name, v);
        }
        for (a, v) in self.study.cells.iter().zip(&self.plan.cells[cell as usize]) {
            vars.set(&a.name, v.clone());
        }
        vars.set("study", Value::Str(self.study_id.to_string()));
        vars.set(
            "study_dir",
            Value::Str(self.study.dir.display().to_string()),
        );
        vars.set("trial_id", Value::Str(key.to_string()));
        vars.set("trial_dir", Value::Str(dir.to_string()));
        vars.set("result", Value::Str(result.to_string()));
        vars.set("repeat", Value::Int(i64::from(repeat)));
        vars.set("budget", budget_value(budget).unwrap_or(Value::Null));
        vars.set("host", Value::Str(host.name.clone()));
        vars.set("slot", Value::Int(i64::from(slot)));
        vars.set("phase", Value::Str("measure".to_string()));
        vars
    }

    /// Run one unit and record it. Returns its status, or `None` when the
    /// attempt could not be recorded.
    #[allow(clippy::too_many_arguments)]
    async fn run_trial(
        &self,
        host_index: usize,
        host: &LaunchHost,
        slot: u32,
        class: usize,
        cell: u32,
        config: u64,
        repeat: u32,
        role: Role,
        budget: Option<f64>,
        key: String,
        warm: bool,
    ) -> TrialResult {
        // Nothing new starts once the ledger could not record an attempt.
        if self.ledger_failing() {
            return TrialResult::NotStarted;
        }
        // Take the trial's lease first: no two launchers run it at once.
        // Anchors are unique to this host and need none.
        let lease = if matches!(role, Role::Anchor { .. }) {
            None
        } else {
            match self
                .ledger
                .acquire_lease(self.study_id, &key, &self.owner, &host.name, lease_ttl())
                .await
            {
                Ok(Ok(lease)) => Some(lease),
                Ok(Err(Held::By { expires_at, .. })) => {
                    let until = chrono::DateTime::parse_from_rfc3339(&expires_at)
                        .ok()
                        .and_then(|t| {
                            (t.with_timezone(&chrono::Utc) - chrono::Utc::now())
                                .to_std()
                                .ok()
                        })
                        .unwrap_or(renew_every());
                    return TrialResult::Held(
                        until.min(renew_every()).max(Duration::from_millis(100)),
                    );
                }
                Err(e) => {
                    self.warn(format!("error: cannot take the lease of a trial: {e}"));
                    return TrialResult::Unrecorded;
                }
            }
        };
        // Finished elsewhere since this launch read the ledger? Objects
        // under the trial's key that are not its records (a copy of
        // another trial's attempt) do not count, and are named once.
        let finished = match &lease {
            Some(_) => match self.ledger.terminal_attempt(self.study_id, &key).await {
                Ok((done, skipped)) => {
                    self.name_objects(&skipped);
                    done
                }
                Err(_) => None,
            },
            None => None,
        };
        if let Some(done) = finished {
            if let Some(l) = &lease {
                self.ledger.release_lease(l).await;
            }
            return TrialResult::Done(Ran {
                status: done.status,
                key,
                attempt_id: done.attempt_id.clone(),
                value: None,
                host_lost: false,
                record: Some(Arc::new(done)),
            });
        }
        let result = self
            .run_leased(
                host_index,
                host,
                slot,
                class,
                cell,
                config,
                repeat,
                role,
                budget,
                key,
                warm,
                lease.clone(),
            )
            .await;
        if let Some(l) = &lease {
            self.ledger.release_lease(l).await;
        }
        result
    }

    /// Whether an attempt record could not be written in this launch.
    fn ledger_failing(&self) -> bool {
        self.state.lock().map(|s| s.ledger_failing).unwrap_or(true)
    }

    /// Warn once about each ledger object that is not what its key says
    /// (its trial runs as if it were not there).
    fn name_objects(&self, objects: &[crate::ledger::CorruptObject]) {
        let fresh: Vec<&crate::ledger::CorruptObject> = match self.state.lock() {
            Ok(mut st) => objects
                .iter()
                .filter(|c| st.named_objects.insert(c.key.clone()))
                .collect(),
            Err(_) => objects.iter().collect(),
        };
        for c in fresh {
            self.warn(format!(
                "warning: ignoring unreadable ledger object {}: {} (its trial runs again)",
                c.key, c.reason
            ));
        }
    }

    /// Run a trial whose lease this launcher holds, renewing it meanwhile.
    #[allow(clippy::too_many_arguments)]
    async fn run_leased(
        &self,
        host_index: usize,
        host: &LaunchHost,
        slot: u32,
        class: usize,
        cell: u32,
        config: u64,
        repeat: u32,
        role: Role,
        budget: Option<f64>,
        key: String,
        warm: bool,
        lease: Option<Lease>,
    ) -> TrialResult {
        let study = self.study;
        let attempt_id = new_attempt_id();
        let config_json = self.plan.space.config_json(study, config);
        let cell_values = &self.plan.cells[cell as usize];
        let cell_json = space::cell_json(study, cell_values);
        let config_label = self.plan.space.label(study, config);
        let cell_label = space::cell_label(study, cell_values);
        let trial_dir = host.transport.trial_dir(self.study_id, &key, &attempt_id);
        let result_path = format!("{trial_dir}/{RESULT_FILE}");
        let vars = self.vars(
            host,
            slot,
            cell,
            config,
            repeat,
            budget,
            &key,
            &trial_dir,
            &result_path,
        );
        let renderer = match (&role, &self.objective_renderer) {
            (Role::Rung, _) | (_, None) => &self.renderer,
            (_, Some(objective)) => objective,
        };
        let rendered = renderer
            .command(&vars)
            .and_then(|c| Ok((c, renderer.env(&vars)?)));
        let (command, extra_env) = match rendered {
            Ok(r) => r,
            Err(e) => {
                let _ = self.events.send(Event::Warn(format!(
                    "error: cannot render the command for {config_label} @ {cell_label}: {e}"
                )));
                return TrialResult::Unrecorded;
            }
        };
        let mut env: Vec<(String, String)> = vec![
            ("TUNECTL_STUDY".into(), self.study_id.to_string()),
            ("TUNECTL_TRIAL_ID".into(), key.clone()),
            ("TUNECTL_ATTEMPT_ID".into(), attempt_id.clone()),
            ("TUNECTL_TRIAL_DIR".into(), trial_dir.clone()),
            ("TUNECTL_RESULT".into(), result_path.clone()),
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
                budget_value(budget)
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
            ),
            ("TUNECTL_REPEAT".into(), repeat.to_string()),
            ("TUNECTL_ROLE".into(), role.name().to_string()),
            ("TUNECTL_HOST".into(), host.name.clone()),
            ("TUNECTL_SLOT".into(), slot.to_string()),
        ];
        for (k, v) in study
            .knobs
            .iter()
            .zip(self.plan.space.values(study, config))
        {
            env.push((
                format!("TUNECTL_KNOB_{}", k.name.to_uppercase()),
                v.to_string(),
            ));
        }
        if let Some(Some(device)) = self.devices[host_index].get(slot as usize) {
            env.push((host.device_env.clone(), device.clone()));
        }
        env.extend(extra_env);
        let spec = AttemptSpec {
            study_id: self.study_id.to_string(),
            trial_key: key.clone(),
            attempt_id: attempt_id.clone(),
            command: command.clone(),
            env,
            timeout: study.trial.timeout,
            warmup: if warm { study.measurement.warmup } else { 0 },
            outputs: study.gate.outputs.clone(),
            tolerance_files: study
                .gate
                .tolerance
                .iter()
                .flat_map(|t| t.files.clone())
                .collect(),
            slot,
            trial_dir,
            result_path,
            keep_logs: self.options.store_logs,
        };
        let started_at = chrono::Utc::now();
        let _ = self.events.send(Event::Started);
        // A lease lost while the trial runs (this launcher stalled past its
        // expiry and another took over) stops the attempt: it is lost.
        let attempt_cancel = self.cancel.child_token();
        let renew = async {
            let Some(mut lease) = lease else {
                return std::future::pending::<()>().await;
            };
            loop {
                tokio::time::sleep(renew_every()).await;
                match self.ledger.renew_lease(&mut lease, lease_ttl()).await {
                    Ok(true) => {}
                    Ok(false) | Err(_) => {
                        self.warn(format!(
                            "warning: lost the lease of {config_label} @ {cell_label}; stopping it (it will run again)"
                        ));
                        attempt_cancel.cancel();
                        return std::future::pending::<()>().await;
                    }
                }
            }
        };
        let outcome = tokio::select! {
            o = host.transport.run_attempt(&spec, &attempt_cancel) => o,
            _ = renew => unreachable!("the renewal loop never ends"),
        };
        let finished_at = chrono::Utc::now();
        let j = judge(
            &outcome,
            &study.objective.name,
            &self.classifier,
            study.trial.timeout.as_secs_f64(),
        );
        let run = outcome.run.as_ref();
        let scrub = |text: String| scrub_secrets(text, &self.secrets);
        // A batch task started by an earlier launcher keeps its own id.
        let attempt_id = outcome
            .adopted_attempt
            .clone()
            .filter(|a| !a.is_empty())
            .unwrap_or(attempt_id);
        let record = AttemptRecord {
            schema: records::SCHEMA,
            tunectl_version: records::VERSION.to_string(),
            study_id: self.study_id.to_string(),
            spec_hash: self.spec_hash.clone(),
            trial_key: key.clone(),
            attempt_id: attempt_id.clone(),
            config: config_json,
            config_label: config_label.clone(),
            config_index: config,
            is_baseline: config == self.plan.space.baseline(),
            cell: cell_json,
            cell_label: cell_label.clone(),
            cell_index: cell,
            repeat,
            role: role.kind(),
            fidelity: budget,
            host: host.name.clone(),
            host_class: self.class_ids[class].clone(),
            fingerprint: self.fingerprints[host_index].clone(),
            slot,
            started_at: started_at.to_rfc3339(),
            finished_at: finished_at.to_rfc3339(),
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
            metrics: j.metrics.clone(),
            digest: j.digest,
            outputs: j.outputs,
            output_values: j.output_values,
            command,
            stdout_tail: scrub(run.map(|r| r.stdout_tail.clone()).unwrap_or_default()),
            stderr_tail: scrub(run.map(|r| r.stderr_tail.clone()).unwrap_or_default()),
            stderr_head: scrub(run.map(|r| r.stderr_head.clone()).unwrap_or_default()),
            lost_reason: outcome
                .host_lost
                .clone()
                .or_else(|| outcome.setup_error.clone())
                .or_else(|| {
                    outcome
                        .cancelled
                        .then(|| "stopped by the launcher".to_string())
                })
                .filter(|_| j.status == AttemptStatus::Lost)
                .map(scrub),
        };
        // Once the ledger has failed, an attempt that was already running
        // gets one try: it is worth no more waiting.
        let tries = if self.ledger_failing() {
            1
        } else {
            crate::ledger::ATTEMPT_WRITE_TRIES
        };
        let written = self.ledger.write_attempt_tries(&record, tries).await;
        for (name, bytes) in &outcome.logs {
            let text = scrub(String::from_utf8_lossy(bytes).into_owned());
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
                self.warn(format!("error: {e}"));
            }
        }
        let failure_text = record.failure.as_ref().map(|f| {
            format!(
                "{config_label} @ {cell_label}: {}: {}",
                f.class.as_str(),
                f.detail
            )
        });
        if let Err(e) = written {
            let line = format!(
                "trial {key} · {config_label} @ {cell_label} · attempt {attempt_id} on host {} ({})",
                host.name,
                match (record.status, &record.failure) {
                    (AttemptStatus::Ok, _) => "ok".to_string(),
                    (AttemptStatus::Failed, Some(f)) => format!("failed: {}", f.class.as_str()),
                    (AttemptStatus::Failed, None) => "failed".to_string(),
                    (AttemptStatus::Lost, _) => "lost".to_string(),
                }
            );
            let first = match self.state.lock() {
                Ok(mut st) => {
                    st.summary.lost += 1;
                    st.summary.unrecorded.push(line.clone());
                    !std::mem::replace(&mut st.ledger_failing, true)
                }
                Err(_) => false,
            };
            let _ = self.events.send(Event::Warn(format!(
                "error: {e}\nerror: not recorded in the ledger: {line}"
            )));
            if first {
                let _ = self.events.send(Event::Warn(
                    "error: the ledger cannot record attempts: no new trial is started; running trials finish and get one try to record"
                        .to_string(),
                ));
            }
            let _ = self.events.send(Event::Finished {
                ok: false,
                lost: true,
                failure: None,
            });
            // Workers waiting for work look again, and leave.
            self.notify.notify_waiters();
            return TrialResult::Unrecorded;
        }
        if let Ok(mut st) = self.state.lock() {
            match j.status {
                AttemptStatus::Ok => {
                    st.summary.ran += 1;
                    st.summary.ok += 1;
                }
                AttemptStatus::Failed => {
                    st.summary.ran += 1;
                    st.summary.failed += 1;
                }
                AttemptStatus::Lost => st.summary.lost += 1,
            }
        }
        let _ = self.events.send(Event::Finished {
            ok: j.status == AttemptStatus::Ok,
            lost: j.status == AttemptStatus::Lost,
            failure: failure_text,
        });
        // Rungs are read on the proxy metric.
        let metric = match (&role, &study.fidelity) {
            (Role::Rung, Some(f)) => &f.proxy.name,
            _ => &study.objective.name,
        };
        let value = j
            .metrics
            .get(metric)
            .and_then(|samples| super::drift::Reading::of(samples));
        TrialResult::Done(Ran {
            status: j.status,
            key,
            attempt_id,
            value,
            host_lost: outcome.host_lost.is_some(),
            record: Some(Arc::new(record)),
        })
    }
}

/// `12.3% (the larger of cool_drift 10% and 3 × the anchors' noise 4.1%)`.
fn threshold_text(t: &Thresholds, floor: f64, name: &str, k: f64) -> String {
    let value = if name == "cool_eps" {
        t.settle
    } else {
        t.drift
    };
    match t.noise {
        Some(s) => format!(
            "{:.1}%: the larger of {name} {:.0}% and {k} × the anchors' noise {:.1}%",
            value * 100.0,
            floor * 100.0,
            s * 100.0
        ),
        None => format!(
            "{:.1}%: {name}; the anchors' noise is not known yet",
            value * 100.0
        ),
    }
}

/// A budget for messages: `81`, `0.5`, or `(none)`.
fn budget_label(budget: Option<f64>) -> String {
    budget_value(budget)
        .map(|v| v.to_string())
        .unwrap_or_else(|| "(none)".to_string())
}

/// A budget as a trial receives it: an integer when it is whole.
fn budget_value(budget: Option<f64>) -> Option<Value> {
    let b = budget?;
    Some(if b.fract() == 0.0 && b.abs() < 9.0e15 {
        Value::Int(b as i64)
    } else {
        Value::Float(b)
    })
}
