//! A run that landed on a node of another host class than its trial's (a
//! mixed Slurm partition's node whose type hid its class) is lost for its
//! trial, which runs again on its own class. What it measured is a run of
//! the node's class all the same: it is recorded there, as the attempt of
//! that class's trial of the same config, cell and repeat, when the launch
//! holds a host of that class and the trial is neither running (its lease
//! is free) nor done. That class's queue then finds the trial done when it
//! comes to it, as it finds a trial another launcher ran.
//!
//! Only sweep trials of the plan's repeats move so: every class of a sweep
//! runs them alike, where a search's rungs, confirmation rounds, anchors
//! and racing runs are each class's own decisions.

use std::sync::Arc;

use super::Runner;
use crate::launch::events::LaunchEvent;
use crate::launch::run_study::LaunchHost;
use crate::ledger::lease::{Holder, Lease, lease_ttl};
use crate::ledger::new_attempt_id;
use crate::ledger::records::{AttemptRecord, SharedStr};
use crate::scrub::scrub_secrets;
use crate::space;
use crate::transport::attempt::judge_with;
use crate::transport::{AttemptOutcome, Ended, RanElsewhere};
use crate::trial::{Role, TrialIdentity};

use super::TrialJob;

/// The trial of the node's class a run counts for, its lease taken.
pub(super) struct Elsewhere {
    class: usize,
    host: usize,
    key: String,
    lease: Lease,
}

impl Runner<'_> {
    /// Who takes the leases of the trials runs are recorded for: an owner
    /// of its own, since a lease is free to the owner that holds it, and
    /// this launcher may be running such a trial itself.
    pub(super) fn elsewhere_owner(&self) -> String {
        format!("{}-elsewhere", self.owner)
    }

    /// The trial of `there`'s class that `job`'s run on `host` counts for,
    /// leased and not done: `None` when the run is not one every class
    /// runs alike, the launch has no host of that class, or the trial is
    /// running or done.
    pub(super) async fn trial_elsewhere(
        &self,
        host: &LaunchHost,
        job: &TrialJob,
        there: &RanElsewhere,
    ) -> Option<Elsewhere> {
        if job.role != Role::Sweep
            || job.budget.is_some()
            || job.repeat >= self.study.measurement.repeats
            || self.study.strategy.is_adaptive()
            || self.ledger_failing()
        {
            return None;
        }
        let class = self.class_ids.iter().position(|c| *c == there.class)?;
        // A part of the same entry first (`<entry>.<tag>`).
        let entry = host.name.rsplit_once('.').map_or("", |(e, _)| e);
        let of_class = |h: &usize| self.host_class.get(*h) == Some(&class);
        let hosts = 0..self.host_names.len();
        let other = hosts
            .clone()
            .filter(of_class)
            .find(|h| self.host_names[*h].rsplit_once('.').map(|(e, _)| e) == Some(entry))
            .or_else(|| hosts.clone().find(of_class))?;
        let config = self.plan.space.config_json(self.study, job.config);
        let cell = space::cell_json(self.study, &self.plan.cells[job.cell as usize]);
        let key = TrialIdentity {
            study: self.study_id,
            config: &config,
            cell: &cell,
            fidelity: None,
            repeat: job.repeat,
            host_class: &self.class_ids[class],
            role: Role::Sweep,
        }
        .key();
        let (config_label, cell_label) = self.labels(job);
        let what = format!(
            "sweep {config_label} @ {cell_label} (run on node {})",
            there.node
        );
        let owner = self.elsewhere_owner();
        let holder = Holder {
            owner: &owner,
            host: &self.host_names[other],
            what: &what,
            while_live: false,
        };
        let lease = match self
            .ledger
            .acquire_lease(self.study_id, &key, &holder, lease_ttl())
            .await
        {
            Ok(Ok(lease)) => lease,
            _ => return None,
        };
        let done = !lease.no_attempts
            && !matches!(
                self.ledger.terminal_attempt(self.study_id, &key).await,
                Ok((None, _))
            );
        if done {
            self.ledger.release_lease(&lease).await;
            return None;
        }
        Some(Elsewhere {
            class,
            host: other,
            key,
            lease,
        })
    }

    /// Record what `outcome` left as the attempt of `at`'s trial (`lost`:
    /// the record of the trial it was started for), and give its lease
    /// back: the new attempt's id once written.
    pub(super) async fn record_elsewhere(
        &self,
        at: Elsewhere,
        there: &RanElsewhere,
        lost: &AttemptRecord,
        outcome: &AttemptOutcome,
    ) -> Option<String> {
        let mut ran = outcome.clone();
        ran.ended = Ended::Ran;
        ran.elsewhere = None;
        let study = self.study;
        let j = judge_with(
            &ran,
            &study.objective.name,
            study.result.as_ref(),
            &self.classifier,
            study.trial.timeout.as_secs_f64(),
        );
        let record = AttemptRecord {
            trial_key: at.key.clone(),
            attempt_id: new_attempt_id(),
            host: self.host_names[at.host].as_str().into(),
            host_class: self.class_ids[at.class].as_str().into(),
            fingerprint: self.fingerprints[at.host].as_str().into(),
            status: j.status,
            failure: j.failure.map(|mut f| {
                f.detail = scrub_secrets(f.detail, &self.secrets);
                f
            }),
            metrics: j.metrics.into(),
            digest: j.digest.map(SharedStr::from),
            outputs: Arc::new(j.outputs),
            output_values: j.output_values,
            lost_reason: None,
            ..lost.clone()
        };
        let written = self
            .ledger
            .write_attempt_releasing(&record, crate::ledger::ATTEMPT_WRITE_TRIES, Some(&at.lease))
            .await;
        if written.is_err() {
            self.ledger.release_lease(&at.lease).await;
            return None;
        }
        self.write_logs(&record, &outcome.logs).await;
        self.events.emit(LaunchEvent::KeptForItsClass {
            config: record.config_label.to_string(),
            cell: record.cell_label.to_string(),
            node: there.node.clone(),
            label: there.label.clone(),
            host: record.host.to_string(),
        });
        Some(record.attempt_id)
    }
}
