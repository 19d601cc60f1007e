//! The scheduler: probes hosts, plans per host class, skips what the ledger
//! already holds, and feeds every free slot of a class the next ready trial.
//!
//! Order within a cell: the baseline's first repeat runs first (every
//! candidate of the cell is compared with it, so a failing baseline stops
//! the cell); then repeats go round-robin across configs (repeat 0 of every
//! config, then repeat 1...), so drift affects all configs alike. A config
//! that fails is not repeated. Every attempt is written to the ledger the
//! moment it ends; Ctrl-C kills running trials and records them as lost.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::attempt::{RESULT_FILE, judge};
use super::progress::Event;
use super::{AttemptSpec, Transport};
use crate::fingerprint::Fingerprint;
use crate::gate::Classifier;
use crate::ledger::records::{self, AttemptRecord, AttemptStatus, HostRecord, StudyRecord};
use crate::ledger::{Ledger, Scan, new_attempt_id, spec_differences};
use crate::plan::{ClassInfo, Plan, PlanHost};
use crate::space;
use crate::spec::{CommandRenderer, Study, TrialVars, Value};
use crate::trial::TrialIdentity;

/// A host ready to take trials.
pub struct LaunchHost {
    pub name: String,
    pub transport_name: String,
    pub slots: u32,
    /// Device pinned by each slot (`None`: nothing pinned).
    pub devices: Vec<Option<String>>,
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
}

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

/// A unit of work: one trial of a cell, ordered so that a cell's baseline
/// comes first and repeats interleave across configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Unit {
    cell: u32,
    repeat: u32,
    /// 0 for the baseline, i + 1 for the cell's i-th candidate.
    pos: u64,
}

#[derive(Default)]
struct ClassState {
    ready: BinaryHeap<Reverse<Unit>>,
    /// Cells whose first baseline repeat has not finished yet.
    waiting_cells: usize,
    failed_configs: HashSet<(u32, u64)>,
}

struct State {
    classes: Vec<ClassState>,
    /// (host, cell, config) that warmed up in this launch.
    warmed: HashSet<(usize, u32, u64)>,
    summary: LaunchSummary,
}

struct Shared<'a> {
    study: &'a Study,
    study_id: &'a str,
    spec_hash: String,
    plan: &'a Plan,
    ledger: &'a Ledger,
    renderer: CommandRenderer,
    classifier: Classifier,
    done: HashSet<String>,
    host_class: Vec<usize>,
    class_ids: Vec<String>,
    fingerprints: Vec<String>,
    state: Mutex<State>,
    notify: Notify,
    events: mpsc::UnboundedSender<Event>,
    cancel: CancellationToken,
}

/// Probe hosts, register them in the ledger, and return plan hosts.
pub async fn probe_hosts(
    study: &Study,
    study_id: &str,
    ledger: &Ledger,
    hosts: &[LaunchHost],
    events: &mpsc::UnboundedSender<Event>,
) -> Result<Vec<(PlanHost, Fingerprint)>, LaunchError> {
    let mut out = Vec::new();
    for h in hosts {
        let fp =
            h.transport.probe(&study.tools).await.map_err(|e| {
                LaunchError::Other(format!("probing host `{}` failed: {e}", h.name))
            })?;
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
        out.push((
            PlanHost {
                name: h.name.clone(),
                transport: h.transport_name.clone(),
                slots: h.slots,
                class: Some(ClassInfo { id: class, label }),
            },
            fp,
        ));
    }
    Ok(out)
}

/// Run a study on `hosts` until every planned trial has a terminal
/// attempt, or `cancel` fires.
pub async fn run_study(
    study: &Study,
    study_id: &str,
    ledger: &Ledger,
    hosts: Vec<LaunchHost>,
    events: mpsc::UnboundedSender<Event>,
    cancel: CancellationToken,
) -> Result<LaunchSummary, LaunchError> {
    let record = register_study(study, study_id, ledger).await?;
    let probed = probe_hosts(study, study_id, ledger, &hosts, &events).await?;
    let plan_hosts: Vec<PlanHost> = probed.iter().map(|(p, _)| p.clone()).collect();
    let plan = Plan::build(study, &plan_hosts).map_err(LaunchError::Other)?;
    for n in &plan.notes {
        let _ = events.send(Event::Note(n.clone()));
    }
    let scan: Scan = ledger.scan(study_id).await?;
    for c in &scan.corrupt {
        let _ = events.send(Event::Note(format!(
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
    let renderer = CommandRenderer::new(study).map_err(LaunchError::Other)?;
    let shared = Shared {
        study,
        study_id,
        spec_hash: record.spec_hash.clone(),
        plan: &plan,
        ledger,
        renderer,
        classifier: Classifier::default(),
        done,
        host_class,
        class_ids: plan.classes.iter().map(|c| c.id.clone()).collect(),
        fingerprints: probed.iter().map(|(_, fp)| fp.hash()).collect(),
        state: Mutex::new(State {
            classes: (0..plan.classes.len())
                .map(|_| ClassState::default())
                .collect(),
            warmed: HashSet::new(),
            summary: LaunchSummary {
                corrupt_objects: scan.corrupt.len(),
                ..Default::default()
            },
        }),
        notify: Notify::new(),
        events,
        cancel,
    };
    shared.seed(&scan);

    let mut workers = Vec::new();
    for (hi, host) in hosts.iter().enumerate() {
        for slot in 0..host.slots {
            workers.push(shared.worker(hi, host, slot));
        }
    }
    futures::future::join_all(workers).await;
    let mut summary = shared
        .state
        .lock()
        .map(|s| s.summary.clone())
        .unwrap_or_default();
    summary.interrupted = shared.cancel.is_cancelled();
    Ok(summary)
}

impl Shared<'_> {
    fn config_of(&self, unit: Unit) -> u64 {
        if unit.pos == 0 {
            self.plan.space.baseline()
        } else {
            self.plan.per_cell[unit.cell as usize][(unit.pos - 1) as usize]
        }
    }

    fn key_of(&self, class: usize, unit: Unit) -> String {
        let config = self
            .plan
            .space
            .config_json(self.study, self.config_of(unit));
        let cell = space::cell_json(self.study, &self.plan.cells[unit.cell as usize]);
        TrialIdentity {
            study: self.study_id,
            config: &config,
            cell: &cell,
            fidelity: None,
            repeat: unit.repeat,
            host_class: &self.class_ids[class],
            role: crate::trial::Role::Sweep,
        }
        .key()
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
                && let Some(class) = self.class_ids.iter().position(|c| *c == a.host_class)
            {
                st.classes[class]
                    .failed_configs
                    .insert((a.cell_index, a.config_index));
            }
        }
        for class in 0..self.plan.classes.len() {
            for cell in 0..self.plan.cells.len() as u32 {
                let first = Unit {
                    cell,
                    repeat: 0,
                    pos: 0,
                };
                let key = self.key_of(class, first);
                match terminal.get(key.as_str()).map(|a| a.status) {
                    Some(AttemptStatus::Ok) => {
                        already += 1;
                        let (n, d) = self.release_cell(&mut st.classes[class], class, cell);
                        to_run += n;
                        already += d;
                    }
                    Some(_) => {
                        already += 1;
                        let n = self.plan.trials_in_cell(cell as usize) - 1;
                        skipped.push((n, self.baseline_failed_reason(cell)));
                    }
                    None => {
                        st.classes[class].ready.push(Reverse(first));
                        st.classes[class].waiting_cells += 1;
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

    fn baseline_failed_reason(&self, cell: u32) -> String {
        format!(
            "the baseline failed at cell {}; nothing can win there",
            space::cell_label(self.study, &self.plan.cells[cell as usize])
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

    /// Queue every trial of a cell except the baseline's first repeat and
    /// those already done. Returns (queued, already done).
    fn release_cell(&self, cs: &mut ClassState, class: usize, cell: u32) -> (u64, u64) {
        let configs = self.plan.configs_in_cell(cell as usize);
        let (mut queued, mut done) = (0, 0);
        for repeat in 0..self.plan.repeats {
            for pos in 0..configs {
                if repeat == 0 && pos == 0 {
                    continue;
                }
                let unit = Unit { cell, repeat, pos };
                if self.done.contains(&self.key_of(class, unit)) {
                    done += 1;
                } else {
                    cs.ready.push(Reverse(unit));
                    queued += 1;
                }
            }
        }
        (queued, done)
    }

    /// Next unit for a class: `Ok(Some)` to run, `Ok(None)` to wait, `Err`
    /// when the class has nothing left.
    fn next(&self, class: usize, host: usize) -> Result<Option<(Unit, bool)>, ()> {
        let Ok(mut st) = self.state.lock() else {
            return Err(());
        };
        let mut skipped_failed = 0u64;
        let result = loop {
            let cs = &mut st.classes[class];
            match cs.ready.pop() {
                Some(Reverse(unit)) => {
                    let config = self.config_of(unit);
                    if cs.failed_configs.contains(&(unit.cell, config)) {
                        skipped_failed += 1;
                        continue;
                    }
                    let warm = st.warmed.insert((host, unit.cell, config));
                    break Ok(Some((unit, warm)));
                }
                None if cs.waiting_cells > 0 => break Ok(None),
                None => break Err(()),
            }
        };
        drop(st);
        if skipped_failed > 0 {
            // Counted, not announced: the failure itself was reported.
            self.skip_with(
                skipped_failed,
                "their config already failed in this cell".to_string(),
                false,
            );
        }
        result
    }

    async fn worker(&self, host_index: usize, host: &LaunchHost, slot: u32) {
        let class = self.host_class[host_index];
        loop {
            if self.cancel.is_cancelled() {
                return;
            }
            // Register for wake-ups before looking at the queue, so that a
            // baseline finishing in between cannot be missed.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (unit, warm) = match self.next(class, host_index) {
                Err(()) => return,
                Ok(None) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = self.cancel.cancelled() => return,
                    }
                    continue;
                }
                Ok(Some(u)) => u,
            };
            let status = self
                .run_unit(host_index, host, slot, class, unit, warm)
                .await;
            let mut release = None;
            if let Ok(mut st) = self.state.lock() {
                let config = self.config_of(unit);
                match status {
                    Some(AttemptStatus::Failed) => {
                        st.classes[class].failed_configs.insert((unit.cell, config));
                    }
                    Some(AttemptStatus::Lost) | None => {
                        st.warmed.remove(&(host_index, unit.cell, config));
                    }
                    Some(AttemptStatus::Ok) => {}
                }
                if unit.repeat == 0 && unit.pos == 0 {
                    let cs = &mut st.classes[class];
                    match status {
                        Some(AttemptStatus::Ok) => {
                            cs.waiting_cells -= 1;
                            let (_, done) = self.release_cell(cs, class, unit.cell);
                            st.summary.already_done += done;
                        }
                        Some(AttemptStatus::Failed) => {
                            cs.waiting_cells -= 1;
                            release = Some((
                                self.plan.trials_in_cell(unit.cell as usize) - 1,
                                self.baseline_failed_reason(unit.cell),
                            ));
                        }
                        // Lost or not recorded: the cell waits for the next
                        // launch (quietly when this one is stopping).
                        _ => {
                            cs.waiting_cells -= 1;
                            if !self.cancel.is_cancelled() {
                                release = Some((
                                    self.plan.trials_in_cell(unit.cell as usize) - 1,
                                    format!(
                                        "the baseline's attempt at cell {} was lost; launch again to run this cell",
                                        space::cell_label(
                                            self.study,
                                            &self.plan.cells[unit.cell as usize]
                                        )
                                    ),
                                ));
                            }
                        }
                    }
                }
            }
            if let Some((count, reason)) = release {
                self.skip(count, reason);
            }
            self.notify.notify_waiters();
        }
    }

    fn vars(
        &self,
        host: &LaunchHost,
        slot: u32,
        unit: Unit,
        key: &str,
        dir: &str,
        result: &str,
    ) -> TrialVars {
        let mut vars = TrialVars::default();
        let config = self.config_of(unit);
        for (k, v) in self
            .study
            .knobs
            .iter()
            .zip(self.plan.space.values(self.study, config))
        {
            vars.set(&k.name, v);
        }
        for (a, v) in self
            .study
            .cells
            .iter()
            .zip(&self.plan.cells[unit.cell as usize])
        {
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
        vars.set("repeat", Value::Int(i64::from(unit.repeat)));
        vars.set("budget", Value::Null);
        vars.set("host", Value::Str(host.name.clone()));
        vars.set("slot", Value::Int(i64::from(slot)));
        vars.set("phase", Value::Str("measure".to_string()));
        vars
    }

    /// Run one unit and record it. Returns its status, or `None` when the
    /// attempt could not be recorded.
    async fn run_unit(
        &self,
        host_index: usize,
        host: &LaunchHost,
        slot: u32,
        class: usize,
        unit: Unit,
        warm: bool,
    ) -> Option<AttemptStatus> {
        let study = self.study;
        let key = self.key_of(class, unit);
        let attempt_id = new_attempt_id();
        let config = self.config_of(unit);
        let config_json = self.plan.space.config_json(study, config);
        let cell_values = &self.plan.cells[unit.cell as usize];
        let cell_json = space::cell_json(study, cell_values);
        let config_label = self.plan.space.label(study, config);
        let cell_label = space::cell_label(study, cell_values);
        let trial_dir = host.transport.trial_dir(self.study_id, &key, &attempt_id);
        let result_path = format!("{trial_dir}/{RESULT_FILE}");
        let vars = self.vars(host, slot, unit, &key, &trial_dir, &result_path);
        let rendered = self
            .renderer
            .command(&vars)
            .and_then(|c| Ok((c, self.renderer.env(&vars)?)));
        let (command, extra_env) = match rendered {
            Ok(r) => r,
            Err(e) => {
                let _ = self.events.send(Event::Note(format!(
                    "error: cannot render the command for {config_label} @ {cell_label}: {e}"
                )));
                return None;
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
            ("TUNECTL_BUDGET".into(), String::new()),
            ("TUNECTL_REPEAT".into(), unit.repeat.to_string()),
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
        if let Some(Some(device)) = host.devices.get(slot as usize) {
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
            slot,
            trial_dir,
            result_path,
        };
        let started_at = chrono::Utc::now();
        let _ = self.events.send(Event::Started);
        let outcome = host.transport.run_attempt(&spec, &self.cancel).await;
        let finished_at = chrono::Utc::now();
        let j = judge(
            &outcome,
            &study.objective.name,
            &self.classifier,
            study.trial.timeout.as_secs_f64(),
        );
        let run = outcome.run.as_ref();
        let record = AttemptRecord {
            schema: records::SCHEMA,
            tunectl_version: records::VERSION.to_string(),
            study_id: self.study_id.to_string(),
            spec_hash: self.spec_hash.clone(),
            trial_key: key,
            attempt_id,
            config: config_json,
            config_label: config_label.clone(),
            config_index: config,
            is_baseline: unit.pos == 0,
            cell: cell_json,
            cell_label: cell_label.clone(),
            cell_index: unit.cell,
            repeat: unit.repeat,
            role: "sweep".to_string(),
            fidelity: None,
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
            failure: j.failure.clone(),
            exit: run.map(|r| r.exit.clone()),
            metrics: j.metrics,
            digest: j.digest,
            outputs: j.outputs,
            command,
            stdout_tail: run.map(|r| r.stdout_tail.clone()).unwrap_or_default(),
            stderr_tail: run.map(|r| r.stderr_tail.clone()).unwrap_or_default(),
        };
        let written = self.ledger.write_attempt(&record).await;
        let failure_text = j.failure.as_ref().map(|f| {
            format!(
                "{config_label} @ {cell_label}: {}: {}",
                f.class.as_str(),
                f.detail
            )
        });
        if let Err(e) = written {
            let _ = self.events.send(Event::Note(format!("error: {e}")));
            let _ = self.events.send(Event::Finished {
                ok: false,
                lost: true,
                failure: None,
            });
            if let Ok(mut st) = self.state.lock() {
                st.summary.lost += 1;
            }
            return None;
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
        Some(j.status)
    }
}
