//! Running a study: probe the hosts, build the plan per host class, seed
//! the scheduler from the ledger, and drive one worker per host slot until
//! every planned trial has a terminal attempt or the launch is stopped.
//!
//! This is the async shell around the synchronous scheduler
//! (`schedule/`): workers ask it for the next unit, run it
//! (`run_trial.rs`), tell it how the unit ended, and carry out what it
//! asks for in return: anchors and cool-downs (with their back-off),
//! confirmation rounds (whose draft winner is read from the ledger), and
//! the ledger records of voids, drops and plans. Every event goes through
//! one [`Emitter`], which counts it and passes it to the reporter.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::events::{Emitter, LaunchEvent, LaunchSummary, Written};
use super::prior::Prior;
use super::run_trial::{Runner, RunnerSetup, Spend, TrialJob, TrialResult};
use super::schedule::drift::Reading;
use super::schedule::{
    AnchorStep, BucketStep, Burst, Check, HostGate, Kind, Next, Scheduler, Setup, Void, VoidReason,
};
use crate::fingerprint::Fingerprint;
use crate::ledger::records::{
    self, AttemptRecord, AttemptStatus, DropRecord, FailureClass, HostRecord, StudyRecord,
    VoidRecord,
};
use crate::ledger::{Ledger, new_attempt_id};
use crate::plan::{ClassInfo, Plan, PlanHost, PlanOnce};
use crate::search::{Brackets, Shard};
use crate::space;
use crate::spec::Study;
use crate::transport::{Discovery, HostState, Part, Transport, TransportError};
use crate::trial::{Role, RoleKind};

/// A host ready to take trials.
pub struct LaunchHost {
    pub name: String,
    pub transport_name: String,
    pub slots: u32,
    /// Devices the inventory pins, one per slot; `None`: slot `i` pins GPU
    /// `i` where the host's fingerprint shows one, nothing otherwise.
    pub devices: Option<Vec<String>>,
    /// The inventory's `device_env`; `None`: the default for the vendor of
    /// the host's GPUs (`default_device_env`).
    pub device_env: Option<String>,
    pub transport: Arc<dyn Transport>,
    /// Of an entry that turns out to hold several host classes (a mixed
    /// Slurm partition), only these parts (`<entry>.<tag>`, as `--host`
    /// named them); `None`: every part, or the whole host.
    pub only_parts: Option<Vec<String>>,
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
    /// The trial time this launch may spend (shared by its rounds).
    pub spend: Arc<Spend>,
    /// The study's plan, listed once for the launch (shared by its
    /// rounds; listed by the first round unless it was before).
    pub plan: Arc<PlanOnce>,
}

/// Default `--host-timeout`.
pub const DEFAULT_HOST_TIMEOUT: Duration = Duration::from_secs(600);

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
    /// The study cannot be planned (too large to list, a constraint that
    /// does not evaluate): invalid input, refused as `tunectl plan` refuses
    /// it (exit 2).
    #[error("{0}")]
    Invalid(String),
    /// The launcher's own host could not be probed (a remote host that
    /// does not answer is left out instead).
    #[error("probing host `{host}` failed: {reason}")]
    ProbeFailed {
        host: String,
        reason: TransportError,
    },
    /// Every host was left out: nothing ran.
    #[error("no host answered; nothing was run ({})", unreachable_list(.hosts))]
    NoHostAnswered {
        hosts: Vec<(String, TransportError)>,
    },
    /// The inventory's hosts could not be set up (the message says which
    /// file, entry and field).
    #[error("{0}")]
    Hosts(String),
}

fn unreachable_list(hosts: &[(String, TransportError)]) -> String {
    hosts
        .iter()
        .map(|(h, e)| format!("{h}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Check the study against the ledger's record of it, creating the record
/// on first launch. The record comes back judged by the study's settings
/// ([`FrozenSpec::judged_by`](crate::spec::FrozenSpec::judged_by)): a
/// study whose judging settings changed keeps its measurements and id.
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
    let changes = record.spec.differences_from(&stored.spec);
    if !changes.measurement.is_empty() {
        let short = |h: &str| h.chars().take(12).collect::<String>();
        return Err(LaunchError::SpecChanged {
            study: study_id.to_string(),
            ledger: ledger.url().to_string(),
            old: short(&stored.spec_hash),
            new: short(&record.spec_hash),
            changes: changes.measurement,
        });
    }
    Ok(StudyRecord {
        spec: stored.spec.judged_by(&record.spec),
        ..stored
    })
}

/// A host that answered its probe.
pub struct Probed {
    pub host: LaunchHost,
    pub plan_host: PlanHost,
    pub fingerprint: Fingerprint,
}

/// Discover and probe hosts (all at once), register them in the ledger,
/// and return those that answered, in inventory order. A host of several
/// host classes (a mixed Slurm partition) comes back as one host per
/// class, `<host>.<tag>`, sharing its slots by the tasks each part's
/// nodes run at once (their GPUs over a task's). The local
/// machine failing its probe is an error; a remote host that does not
/// answer is reported and left out.
pub async fn probe_hosts(
    study: &Study,
    study_id: &str,
    ledger: &Ledger,
    hosts: Vec<LaunchHost>,
    events: &Emitter,
) -> Result<Vec<Probed>, LaunchError> {
    /// What a host turned out to be.
    enum Found {
        Whole(Box<Fingerprint>),
        Parts(Vec<Part>),
        /// Parts were named that the host does not have.
        NoSuchPart(String),
    }
    let found = futures::future::join_all(hosts.iter().map(|h| async {
        let discovery = h
            .transport
            .discover(study_id, &study.tools, &study.class_key)
            .await?;
        if let Some(named) = &h.only_parts {
            match &discovery {
                Discovery::Parts(parts) => {
                    let have: Vec<String> = parts
                        .iter()
                        .map(|p| format!("{}.{}", h.name, p.suffix))
                        .collect();
                    if let Some(missing) = named.iter().find(|n| !have.contains(n)) {
                        return Ok(Found::NoSuchPart(format!(
                            "--host {missing}: `{}` has no such part at this launch; its parts (one per host class of the partition, of the node types that are up) are {}",
                            h.name,
                            have.join(", ")
                        )));
                    }
                }
                _ => {
                    return Ok(Found::NoSuchPart(format!(
                        "--host {}: `{}` is one host class at this launch (its partition has one node type), not parts: name it --host {}",
                        named.join(", --host "),
                        h.name,
                        h.name
                    )));
                }
            }
        }
        match discovery {
            Discovery::Probe => {
                h.transport.prepare(study_id).await?;
                Ok(Found::Whole(Box::new(
                    h.transport.probe(&study.tools).await?,
                )))
            }
            Discovery::Probed(fp) => {
                h.transport.prepare(study_id).await?;
                Ok(Found::Whole(fp))
            }
            Discovery::Parts(parts) => {
                // Only the parts named, when `--host` named parts: the
                // others are not prepared (their earlier tasks not
                // adopted), take no trial and are closed.
                let (parts, others): (Vec<Part>, Vec<Part>) = parts.into_iter().partition(|p| {
                    h.only_parts.as_ref().is_none_or(|named| {
                        named.contains(&format!("{}.{}", h.name, p.suffix))
                    })
                });
                for p in others {
                    p.transport.close().await;
                }
                for p in &parts {
                    p.transport.prepare(study_id).await?;
                }
                Ok::<_, crate::transport::TransportError>(Found::Parts(parts))
            }
        }
    }))
    .await;
    let mut out = Vec::new();
    for (h, found) in hosts.into_iter().zip(found) {
        let found = match found {
            Ok(f) => f,
            Err(e) if h.transport_name != "local" => {
                events.emit(LaunchEvent::HostUnreachable {
                    host: h.name.clone(),
                    reason: e,
                });
                continue;
            }
            Err(e) => {
                return Err(LaunchError::ProbeFailed {
                    host: h.name.clone(),
                    reason: e,
                });
            }
        };
        let made: Vec<(LaunchHost, Vec<String>, Fingerprint)> = match found {
            Found::NoSuchPart(why) => return Err(LaunchError::Invalid(why)),
            Found::Whole(fp) => vec![(h, Vec::new(), *fp)],
            Found::Parts(parts) => {
                // A part's share of the entry's jobs in flight, by the
                // tasks its nodes run at once (GPUs, not nodes).
                let capacity: Vec<u64> = parts.iter().map(|p| p.capacity).collect();
                let shares = crate::transport::slurm::nodes::shares(h.slots, &capacity);
                parts
                    .into_iter()
                    .zip(shares)
                    .map(|(p, share)| {
                        let host = LaunchHost {
                            name: format!("{}.{}", h.name, p.suffix),
                            transport_name: h.transport_name.clone(),
                            slots: share,
                            devices: h.devices.clone(),
                            device_env: h.device_env.clone(),
                            transport: p.transport,
                            only_parts: None,
                        };
                        (host, p.nodes, p.fingerprint)
                    })
                    .collect()
            }
        };
        for (host, nodes, fp) in made {
            let class = fp.host_class_under(&study.class_key);
            let label = fp.class_label_under(&study.class_key);
            ledger
                .write_host(
                    study_id,
                    &HostRecord {
                        schema: records::SCHEMA,
                        host: host.name.clone(),
                        transport: host.transport_name.clone(),
                        fingerprint_hash: fp.hash(),
                        host_class: class.clone(),
                        class_label: label.clone(),
                        probed_at: chrono::Utc::now().to_rfc3339(),
                        nodes: nodes.clone(),
                        fingerprint: fp.clone(),
                    },
                )
                .await?;
            events.emit(LaunchEvent::HostReady {
                host: host.name.clone(),
                class: class.clone(),
                label: label.clone(),
                nodes,
                slots: host.slots,
            });
            out.push(Probed {
                plan_host: PlanHost {
                    name: host.name.clone(),
                    transport: host.transport_name.clone(),
                    slots: host.slots,
                    class: Some(ClassInfo { id: class, label }),
                },
                host,
                fingerprint: fp,
            });
        }
    }
    Ok(out)
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

/// Trials whose attempt timed out under a shorter `trial.timeout` than
/// the study's now run again (a timeout is no fault of the config when it
/// had less time): each such attempt gets a void record, so the scan that
/// follows no longer counts it. Sweep and confirmation trials only: a
/// search's rungs are replayed as they ran. An attempt written before
/// records kept their timeout ran under the first launch's. Whether any
/// was voided.
async fn retry_timeouts(
    study: &Study,
    study_id: &str,
    record: &StudyRecord,
    scan: &crate::ledger::Scan,
    ledger: &Ledger,
    events: &Emitter,
) -> bool {
    let now = study.trial.timeout.as_secs_f64();
    let first = record.spec.trial_timeout_s();
    let mut shorter: Vec<(&AttemptRecord, f64)> = Vec::new();
    for a in scan.terminal().into_values() {
        let Some(failure) = &a.failure else {
            continue;
        };
        if failure.class != FailureClass::Timeout
            || !matches!(a.role, RoleKind::Sweep | RoleKind::Confirm)
        {
            continue;
        }
        if let Some(ran_under) = failure.timeout_s.or(first)
            && ran_under * (1.0 + 1e-9) < now
        {
            shorter.push((a, ran_under));
        }
    }
    if shorter.is_empty() {
        return false;
    }
    let at = chrono::Utc::now().to_rfc3339();
    let mut longest = 0.0f64;
    for (a, ran_under) in &shorter {
        longest = longest.max(*ran_under);
        let void = VoidRecord {
            schema: records::SCHEMA,
            trial_key: a.trial_key.clone(),
            attempt_id: a.attempt_id.clone(),
            reason: format!(
                "timed out under trial.timeout {}; the study's is {} now: run again",
                crate::fmt::duration_short(*ran_under),
                crate::fmt::duration_short(now)
            ),
            at: at.clone(),
        };
        if let Err(e) = ledger.write_void(study_id, &void).await {
            events.emit(LaunchEvent::LedgerWriteFailed {
                error: e.to_string(),
                what: Written::Void,
            });
        }
    }
    events.emit(LaunchEvent::TimeoutRaised {
        trials: shorter.len(),
        from_s: longest,
        to_s: now,
    });
    true
}

/// The variable and device each slot pins: the inventory's list, or GPU `i`
/// for slot `i` where the fingerprint shows that many GPUs; the variable is
/// the inventory's `device_env`, else the default for the GPUs' vendor.
fn slot_devices(host: &LaunchHost, fp: &Fingerprint) -> Vec<Option<(String, String)>> {
    let var = host
        .device_env
        .clone()
        .unwrap_or_else(|| crate::spec::inventory::default_device_env(fp).to_string());
    let devices: Vec<Option<String>> = match &host.devices {
        Some(d) => d.iter().cloned().map(Some).collect(),
        // Slurm pins a job's GPUs itself (gres).
        None if host.transport_name == "slurm" => vec![None; host.slots as usize],
        None => (0..host.slots)
            .map(|s| ((s as usize) < fp.gpus.len()).then(|| s.to_string()))
            .collect(),
    };
    devices
        .into_iter()
        .map(|d| d.map(|d| (var.clone(), d)))
        .collect()
}

/// Run a study on `hosts` until every planned trial has a terminal
/// attempt, or `cancel` fires. Events go to `events`; the summary counts
/// them.
pub async fn run_study(
    study: &Study,
    study_id: &str,
    ledger: &Ledger,
    hosts: Vec<LaunchHost>,
    options: LaunchOptions,
    events: tokio::sync::mpsc::UnboundedSender<LaunchEvent>,
    cancel: CancellationToken,
) -> Result<LaunchSummary, LaunchError> {
    let emitter = Emitter::new(events);
    // Refused before the ledger is written to (the study loader refused
    // it already; a study built otherwise is refused here alike).
    crate::space::check_size(study).map_err(|e| LaunchError::Invalid(e.to_string()))?;
    let record = register_study(study, study_id, ledger).await?;
    let probed = probe_hosts(study, study_id, ledger, hosts, &emitter).await?;
    if probed.is_empty() {
        return Err(LaunchError::NoHostAnswered {
            hosts: emitter.summary().unreachable_hosts,
        });
    }
    // From here on, hosts are those that answered, in inventory order.
    let plan_hosts: Vec<PlanHost> = probed.iter().map(|p| p.plan_host.clone()).collect();
    let (hosts, fingerprints): (Vec<LaunchHost>, Vec<Fingerprint>) =
        probed.into_iter().map(|p| (p.host, p.fingerprint)).unzip();
    let plan = options
        .plan
        .on(study, &plan_hosts)
        .map_err(LaunchError::Invalid)?;
    for n in &plan.notes {
        emitter.emit(LaunchEvent::PlanNote { text: n.clone() });
    }
    // Read when the round starts, after the study is registered and the
    // hosts probed: attempts another launcher recorded meanwhile count.
    let scan = ledger.scan(study_id).await?;
    let scan = if retry_timeouts(study, study_id, &record, &scan, ledger, &emitter).await {
        ledger.scan(study_id).await?
    } else {
        scan
    };
    for c in &scan.corrupt {
        emitter.emit(LaunchEvent::UnreadableObject {
            key: c.key.clone(),
            reason: c.reason.clone(),
        });
    }
    let class_ids: Vec<String> = plan.classes.iter().map(|c| c.id.clone()).collect();
    let host_class: Vec<usize> = plan_hosts
        .iter()
        .map(|h| {
            plan.classes
                .iter()
                .position(|c| h.class.as_ref().is_some_and(|i| i.id == c.id))
                .unwrap_or(0)
        })
        .collect();
    let (budgets, objective_budget) = trial_budgets(study).map_err(LaunchError::Invalid)?;
    let terminal = scan.terminal();
    let setup = Setup {
        study,
        study_id,
        spec_hash: record.spec_hash.clone(),
        plan: &plan,
        class_ids: class_ids.clone(),
        host_class: host_class.clone(),
        host_names: hosts.iter().map(|h| h.name.clone()).collect(),
        slots: hosts.iter().map(|h| h.slots).collect(),
        budgets,
        objective_budget,
        tolerance: crate::decide::gate::ToleranceSpec::from_spec(&record.spec),
        done: terminal.keys().map(|k| k.to_string()).collect(),
        first_baselines: terminal
            .values()
            .filter(|a| a.is_baseline && a.role == RoleKind::Sweep && a.repeat == 0)
            .map(|a| (a.trial_key.clone(), a.status))
            .collect(),
        prior: options.prior.clone(),
        no_cooldown: options.no_cooldown,
        sharded: options.shard.is_some(),
        host_timeout: options.host_timeout,
    };
    let runner = Runner::new(RunnerSetup {
        study,
        study_id,
        spec_hash: record.spec_hash.clone(),
        plan: &plan,
        ledger,
        class_ids,
        host_class: host_class.clone(),
        host_names: hosts.iter().map(|h| h.name.clone()).collect(),
        fingerprints: fingerprints.iter().map(Fingerprint::hash).collect(),
        devices: hosts
            .iter()
            .zip(&fingerprints)
            .map(|(h, fp)| slot_devices(h, fp))
            .collect(),
        owner: format!(
            "{}-{}-{}",
            fingerprints
                .first()
                .and_then(|fp| fp.hostname.clone())
                .unwrap_or_else(|| "launcher".to_string()),
            std::process::id(),
            &new_attempt_id()[..22]
        ),
        store_logs: options.store_logs,
        cancel: cancel.clone(),
        events: &emitter,
        named_objects: scan.corrupt.iter().map(|c| c.key.clone()).collect(),
        spend: options.spend.clone(),
    })
    .map_err(LaunchError::Invalid)?;
    let launch = Launch {
        study,
        study_id,
        record,
        plan: &plan,
        ledger,
        sched: Mutex::new(Scheduler::new(setup)),
        runner,
        host_class,
        sharded: options.shard.is_some(),
        events: &emitter,
        notify: Notify::new(),
        cancel,
    };
    launch.with_sched(|s| s.seed(&scan));
    // Rung states an earlier launcher recorded but died before committing.
    let left_behind = launch.runner.left_behind(&hosts, &scan).await;
    // Later scans of this launch only add what was written since.
    drop(scan);
    launch.record_plan().await?;
    // Buckets already measured in an earlier launch confirm now.
    for class in 0..plan.classes.len() {
        let cells: Vec<u32> = (0..plan.cells.len() as u32).collect();
        launch.maybe_confirm(class, &cells).await;
    }

    let mut workers = Vec::new();
    for (hi, host) in hosts.iter().enumerate() {
        for slot in 0..host.slots {
            workers.push(launch.worker(hi, host, slot));
        }
    }
    // This launcher's liveness keeps its trials' leases: written before
    // the first trial and every quarter of a lease time while they run.
    // Until a write succeeds, trials take leases renewed on their own.
    let live = launch.runner.liveness();
    if let Err(e) = ledger.write_liveness(study_id, live).await {
        tracing::warn!(error = %e, "the launcher's liveness could not be written");
    }
    tokio::select! {
        // Committed beside the trials: one may wait for a dead launcher's
        // lease to expire.
        _ = async {
            futures::join!(
                futures::future::join_all(workers),
                launch.runner.commit_left_behind(&hosts, left_behind)
            )
        } => {}
        _ = ledger.keep_alive(study_id, live) => {}
    }
    // Every lease it kept is released (or held by nothing once it is gone).
    ledger.flush_releases().await;
    ledger.drop_liveness(study_id, &live.owner).await;
    for h in &hosts {
        h.transport.close().await;
    }
    let mut summary = emitter.summary();
    summary.interrupted = launch.cancel.is_cancelled();
    ledger.close_log(study_id).await;
    Ok(summary)
}

/// One launch round: the scheduler behind a lock, the trial runner, and
/// what workers share.
struct Launch<'a> {
    study: &'a Study,
    study_id: &'a str,
    record: StudyRecord,
    plan: &'a Plan,
    ledger: &'a Ledger,
    sched: Mutex<Scheduler<'a>>,
    runner: Runner<'a>,
    host_class: Vec<usize>,
    sharded: bool,
    events: &'a Emitter,
    notify: Notify,
    cancel: CancellationToken,
}

impl<'a> Launch<'a> {
    /// Call the scheduler, then emit what it reported. `None`: its lock
    /// is poisoned (a worker panicked): the launch winds down.
    fn with_sched<T>(&self, f: impl FnOnce(&mut Scheduler<'a>) -> T) -> Option<T> {
        let (out, events) = {
            let mut s: MutexGuard<'_, Scheduler<'a>> = self.sched.lock().ok()?;
            if self.cancel.is_cancelled() {
                s.stopping();
            }
            let out = f(&mut s);
            (out, s.take_events())
        };
        self.events.emit_all(events);
        Some(out)
    }

    fn plan_record(&self, class: usize, cell: u32, configs: Option<u64>) -> records::PlanRecord {
        records::PlanRecord {
            schema: records::SCHEMA,
            spec_hash: self.record.spec_hash.clone(),
            host_class: self.plan.classes[class].id.clone(),
            cell_index: cell,
            cell: space::cell_json(self.study, &self.plan.cells[cell as usize]),
            cell_label: space::cell_label(self.study, &self.plan.cells[cell as usize]),
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
        if self.sharded {
            return Ok(());
        }
        let adaptive = self.study.strategy.is_adaptive();
        let have = self.ledger.plans(self.study_id).await?;
        let mut writes = Vec::new();
        for (class, c) in self.plan.classes.iter().enumerate() {
            for cell in 0..self.plan.cells.len() {
                let configs = (!adaptive).then(|| 1 + self.plan.per_cell[cell].len() as u64);
                let known = have.iter().find(|r| {
                    r.spec_hash == self.record.spec_hash
                        && r.host_class == c.id
                        && r.cell_index == cell as u32
                        && r.repeats == self.plan.repeats
                });
                match known {
                    Some(r) if r.configs == configs || (adaptive && r.configs.is_some()) => {}
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
        let writes = self
            .with_sched(|s| s.take_plan_writes())
            .unwrap_or_default();
        for (class, cell, configs) in writes {
            let r = self.plan_record(class, cell, configs);
            if let Err(e) = self.ledger.write_plan(self.study_id, &r).await {
                self.events.emit(LaunchEvent::LedgerWriteFailed {
                    error: e.to_string(),
                    what: Written::Plan { cell: r.cell_label },
                });
            }
        }
    }

    /// One slot of a host: run units until its class is done, its host
    /// leaves or the launch stops; then say so (the scheduler skips what
    /// only departed workers could have run).
    async fn worker(&self, host_index: usize, host: &LaunchHost, slot: u32) {
        self.work(host_index, host, slot).await;
        self.with_sched(|s| s.worker_left(host_index));
        self.notify.notify_waiters();
    }

    async fn work(&self, host_index: usize, host: &LaunchHost, slot: u32) {
        let class = self.host_class[host_index];
        loop {
            if self.cancel.is_cancelled() || self.runner.stopped_starting() {
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
            let Some((next, touched)) =
                self.with_sched(|s| s.next(class, host_index, Instant::now()))
            else {
                return;
            };
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
            let Some(job) = self.with_sched(|s| {
                let setup = s.setup();
                TrialJob {
                    host: host_index,
                    slot,
                    class,
                    cell: unit.cell,
                    config: setup.config_of(unit),
                    repeat: unit.repeat,
                    role: setup.role_of(unit),
                    budget: setup.budget_of(unit),
                    key: setup.key_of(class, unit),
                    warm,
                    prune: s.prune_rule(class, unit),
                    reads: s.reading_ladder(class, unit),
                }
            }) else {
                return;
            };
            let ran = match self.runner.run(host, job).await {
                TrialResult::Done(r) => Some(r),
                TrialResult::Unrecorded => {
                    // Workers waiting for work look again (and leave, when
                    // the ledger fails).
                    self.notify.notify_waiters();
                    None
                }
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
                    self.with_sched(|s| {
                        s.defer(class, host_index, unit, Instant::now() + retry_in)
                    });
                    continue;
                }
            };
            // One call: no other worker sees the unit finished but its
            // anchor or its bucket's confirmation round not yet counted
            // (and leaves, thinking the class done).
            let Some((check, ready, more)) = self.with_sched(|s| {
                let check = s.finish(class, host_index, unit, ran.as_ref());
                let ready = match unit.kind {
                    Kind::Sweep | Kind::Confirm => s.buckets_ready(class, &[unit.cell]),
                    _ => Vec::new(),
                };
                // A racing round not whole yet, with slots free: look at
                // the race again on what has arrived.
                let more = match unit.kind {
                    Kind::Sweep if ready.is_empty() => s.race_more_ready(class, unit.cell),
                    _ => None,
                };
                (check, ready, more)
            }) else {
                return;
            };
            self.confirm(class, ready).await;
            if let Some((bucket, members, slots)) = more {
                self.race_more(class, &bucket, &members, slots).await;
            }
            if check.is_due() {
                if !self.runner.stopped_starting() {
                    let given = match check {
                        Check::Reading(r) => Some(r),
                        _ => None,
                    };
                    self.anchor(host_index, host, slot, class, unit.cell, given)
                        .await;
                }
                self.with_sched(|s| s.anchor_over(class, unit.cell));
                self.maybe_confirm(class, &[unit.cell]).await;
            }
            self.notify.notify_waiters();
        }
    }

    /// Whether this host's slot may take a unit now.
    async fn host_ready(&self, host_index: usize, host: &LaunchHost, class: usize) -> HostGate {
        if self
            .with_sched(|s| s.host_left(host_index, class))
            .unwrap_or(true)
        {
            return HostGate::Leave;
        }
        match host.transport.state().await {
            HostState::Up { rejoined } => {
                if self
                    .with_sched(|s| s.host_up(host_index, class, rejoined))
                    .unwrap_or(false)
                {
                    self.notify.notify_waiters();
                }
                HostGate::Go
            }
            HostState::Changed { old, new } => {
                let mut changes = crate::fingerprint::differences(&old, &new);
                if changes.is_empty() {
                    changes.push("its fingerprint hash".to_string());
                }
                let key = &self.study.class_key;
                let (old, new) = (old.class_label_under(key), new.class_label_under(key));
                self.with_sched(|s| s.host_changed(host_index, changes, old, new));
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
                    self.events.emit(LaunchEvent::HostDropped {
                        host: host.name.clone(),
                        reason,
                    });
                }
                let gate = self
                    .with_sched(|s| s.host_down(host_index, class, since, retry_in, Instant::now()))
                    .unwrap_or(HostGate::Leave);
                if gate == HostGate::Leave {
                    self.notify.notify_waiters();
                }
                gate
            }
        }
    }

    /// Measure the baseline once on this host as an anchor.
    async fn measure_anchor(
        &self,
        host_index: usize,
        host: &LaunchHost,
        slot: u32,
        class: usize,
        cell: u32,
    ) -> Option<Reading> {
        let job = self.with_sched(|s| {
            s.anchor_started();
            let setup = s.setup();
            let base = setup.plan.space.baseline();
            let role = Role::Anchor {
                host: host.name.clone(),
                tag: new_attempt_id(),
            };
            TrialJob {
                host: host_index,
                slot,
                class,
                cell,
                config: base,
                repeat: 0,
                key: setup.key_for(class, cell, base, 0, role.clone(), setup.objective_budget),
                role,
                budget: setup.objective_budget,
                warm: false,
                prune: None,
                reads: Vec::new(),
            }
        })?;
        let TrialResult::Done(ran) = self.runner.run(host, job).await else {
            return None;
        };
        if ran.status != AttemptStatus::Ok {
            self.with_sched(|s| s.anchor_failed(host_index, cell));
        }
        ran.value
    }

    /// Re-measure the baseline (or take `given`, a baseline run measured
    /// anyway) and let the scheduler judge it; on drift, void, cool down
    /// and re-queue.
    async fn anchor(
        &self,
        host_index: usize,
        host: &LaunchHost,
        slot: u32,
        class: usize,
        cell: u32,
        given: Option<Reading>,
    ) {
        let first = match given {
            Some(r) => r,
            None => {
                let Some(r) = self
                    .measure_anchor(host_index, host, slot, class, cell)
                    .await
                else {
                    return;
                };
                r
            }
        };
        if self.with_sched(|s| s.first_anchor(host_index, cell, first)) != Some(AnchorStep::Burst) {
            return;
        }
        // A suspect: two more anchors right away.
        let mut burst = vec![first];
        for _ in 0..2 {
            match self
                .measure_anchor(host_index, host, slot, class, cell)
                .await
            {
                Some(r) => burst.push(r),
                // A failed anchor checks nothing (the scheduler said so).
                None => return,
            }
        }
        let Some(verdict) = self.with_sched(|s| s.burst(host_index, cell, &burst)) else {
            return;
        };
        match verdict {
            Burst::Clean => {}
            Burst::WasSlow { voids, reason } => {
                self.void(&voids, &reason).await;
                self.with_sched(|s| s.requeue(class, cell, &voids, None));
                self.notify.notify_waiters();
            }
            Burst::Hot {
                voids,
                reason,
                mut cooldown,
            } => {
                self.void(&voids, &reason).await;
                // Cool down: back-off, then an anchor, until it settles.
                let m = &self.study.measurement;
                let started = Instant::now();
                let mut wait = m.cool_wait;
                let mut settled_with = None;
                while cooldown.tries < m.cool_max_retry {
                    let left = m.cool_max_wait.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        break;
                    }
                    cooldown.start_try();
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
                    if cooldown.take(v.value) {
                        settled_with = Some(v);
                        break;
                    }
                }
                let stopped = self.cancel.is_cancelled();
                let dropped = self
                    .with_sched(|s| {
                        s.cooled(
                            class,
                            host_index,
                            cell,
                            &voids,
                            &cooldown,
                            settled_with,
                            stopped,
                            started.elapsed(),
                        )
                    })
                    .flatten();
                if let Some(reason) = dropped {
                    let record = DropRecord {
                        schema: records::SCHEMA,
                        host_class: self.plan.classes[class].id.clone(),
                        host: host.name.clone(),
                        cell: space::cell_json(self.study, &self.plan.cells[cell as usize]),
                        cell_label: space::cell_label(self.study, &self.plan.cells[cell as usize]),
                        reason: reason.to_string(),
                        at: chrono::Utc::now().to_rfc3339(),
                    };
                    if let Err(e) = self.ledger.write_drop(self.study_id, &record).await {
                        self.events.emit(LaunchEvent::LedgerWriteFailed {
                            error: e.to_string(),
                            what: Written::Drop,
                        });
                    }
                }
                self.notify.notify_waiters();
            }
        }
    }

    /// Write void records for attempts whose measurements are discarded.
    async fn void(&self, voids: &[Void], reason: &VoidReason) {
        let now = chrono::Utc::now().to_rfc3339();
        let reason = reason.to_string();
        for v in voids {
            let record = VoidRecord {
                schema: records::SCHEMA,
                trial_key: v.key.clone(),
                attempt_id: v.attempt_id.clone(),
                reason: reason.clone(),
                at: now.clone(),
            };
            if let Err(e) = self.ledger.write_void(self.study_id, &record).await {
                self.events.emit(LaunchEvent::LedgerWriteFailed {
                    error: e.to_string(),
                    what: Written::Void,
                });
            }
        }
    }

    /// Start the confirmation round of every bucket (touched by `cells`)
    /// whose cells are all measured on `class`.
    async fn maybe_confirm(&self, class: usize, cells: &[u32]) {
        if self.cancel.is_cancelled() {
            return;
        }
        let ready = self
            .with_sched(|s| s.buckets_ready(class, cells))
            .unwrap_or_default();
        self.confirm(class, ready).await;
    }

    /// Queue what each bucket `buckets_ready` gave asks now: more runs
    /// where its decision is close, or the final round of its draft winner.
    async fn confirm(&self, class: usize, ready: Vec<(String, Vec<u32>)>) {
        for (bucket, members) in ready {
            let slots = self.with_sched(|s| s.class_slots(class)).unwrap_or(0);
            let (step, done) = self.bucket_step(class, &bucket, &members, slots).await;
            self.with_sched(|s| s.queue_bucket_step(class, &members, step, &done));
            self.notify.notify_waiters();
        }
    }

    /// Look at a bucket's race again while its round's slowest runs are
    /// out (`race_more_ready`, which gave the `slots` its next runs may
    /// take): queue more runs if it still races, then ask its decision if
    /// the round ended meanwhile.
    async fn race_more(&self, class: usize, bucket: &str, members: &[u32], slots: u32) {
        let (step, done) = self.bucket_step(class, bucket, members, slots).await;
        let ready = self
            .with_sched(|s| s.queue_more_race(class, members, step, &done))
            .unwrap_or_default();
        self.notify.notify_waiters();
        self.confirm(class, ready).await;
    }

    /// What a bucket's decision on a class asks, from the ledger as it is
    /// (the scan adds only what was written since the launch's last one;
    /// the analysis looks only at this class's attempts at the bucket's
    /// cells, all a bucket's decision depends on), with the trial keys that
    /// have a terminal attempt there. A racing round is sized to
    /// `race_slots`.
    async fn bucket_step(
        &self,
        class: usize,
        bucket: &str,
        cells: &[u32],
        race_slots: u32,
    ) -> (BucketStep, HashSet<String>) {
        // The host records first: the scan is then held across no await,
        // and another worker's scan can extend it in place (not a copy).
        let hosts = self
            .ledger
            .hosts(self.study_id)
            .await
            .map(|(h, _)| h)
            .unwrap_or_default();
        let scan = match self.ledger.scan(self.study_id).await {
            Ok(s) => s,
            Err(e) => {
                self.events.emit(LaunchEvent::ConfirmReadFailed {
                    bucket: bucket.to_string(),
                    error: e.to_string(),
                });
                return (BucketStep::Settled, HashSet::new());
            }
        };
        let class_id = &self.plan.classes[class].id;
        let cells: HashSet<u32> = cells.iter().copied().collect();
        let keep = |a: &crate::ledger::records::AttemptRecord| {
            a.host_class == *class_id && cells.contains(&a.cell_index)
        };
        let terminal = scan.terminal_where(keep);
        let done: HashSet<String> = terminal.keys().map(|k| k.to_string()).collect();
        let analysis = crate::decide::analyze_terminal(
            &self.record,
            &scan,
            &terminal,
            &hosts,
            &[],
            crate::decide::Scope::Launch { race_slots },
        );
        let step = analysis
            .classes
            .iter()
            .find(|c| c.host_class == *class_id)
            .and_then(|c| c.buckets.iter().find(|b| b.key == bucket))
            .map(|report| {
                if let Some(r) = &report.racing {
                    return BucketStep::Race {
                        configs: r.configs.iter().map(|(_, i)| *i).collect(),
                        runs: r.runs,
                    };
                }
                match (&report.winner, report.confirm_runs) {
                    (Some(w), Some(runs)) => self
                        .plan
                        .space
                        .index_of(self.study, &w.config)
                        .map(|winner| BucketStep::Confirm { winner, runs })
                        .unwrap_or(BucketStep::Settled),
                    _ => BucketStep::Settled,
                }
            })
            .unwrap_or(BucketStep::Settled);
        (step, done)
    }
}

#[cfg(test)]
mod tests;
