//! Rung states a launcher left uncommitted when it died: between recording
//! a rung `ok` and committing its state (`run-<attempt>` becoming the
//! committed `state/`, then the ledger's archive), a launcher killed there
//! leaves the working copy behind and the config's state where it was.
//! The next launch of the study commits such copies, as the dead launcher
//! would have, so the config's next rung, in this launch or a later one
//! that extends the study, continues from it.

use std::collections::HashMap;
use std::time::Duration;

use super::Runner;
use crate::launch::run_study::LaunchHost;
use crate::ledger::Scan;
use crate::ledger::lease::{Held, Holder, Lease, lease_ttl};
use crate::ledger::records::AttemptStatus;
use crate::transport::checkpoint::RungCheckpoint;
use crate::trial::RoleKind;

/// A working copy to commit, found on a host at the launch's start.
pub struct LeftBehind {
    host: usize,
    key: String,
    attempt_id: String,
    trial_key: String,
    budget: f64,
    config: String,
    cell: String,
}

impl Runner<'_> {
    /// The working copies on `hosts` whose attempt the ledger holds as the
    /// `ok` attempt that counts for its rung (of a candidate, under this
    /// spec): those a launcher left uncommitted. Copies of attempts with
    /// no record (running now, here or under another launcher) or another
    /// one are left alone.
    pub async fn left_behind(&self, hosts: &[LaunchHost], scan: &Scan) -> Vec<LeftBehind> {
        let mut out = Vec::new();
        if !self.study.fidelity.as_ref().is_some_and(|f| f.continuation) {
            return out;
        }
        let mut records = None;
        for (hi, host) in hosts.iter().enumerate() {
            let Some(store) = host.transport.checkpoints() else {
                continue;
            };
            let Some(root) = store.root(self.study_id) else {
                continue;
            };
            let copies = match store.working_copies(&root).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(host = %host.name, "cannot list its checkpoints' working copies: {e}");
                    continue;
                }
            };
            if copies.is_empty() {
                continue;
            }
            let (by_id, counted) = records.get_or_insert_with(|| {
                let by_id: HashMap<&str, _> =
                    scan.records().map(|a| (a.attempt_id.as_str(), a)).collect();
                let counted: HashMap<&str, &str> = scan
                    .terminal()
                    .into_iter()
                    .map(|(k, a)| (k, a.attempt_id.as_str()))
                    .collect();
                (by_id, counted)
            });
            for (key, attempt_id) in copies {
                let Some(a) = by_id.get(attempt_id.as_str()) else {
                    continue;
                };
                let Some(budget) = a.fidelity else {
                    continue;
                };
                if a.status == AttemptStatus::Ok
                    && a.role == RoleKind::Rung
                    && !a.is_baseline
                    && *a.spec_hash == *self.spec_hash
                    && counted.get(a.trial_key.as_str()) == Some(&a.attempt_id.as_str())
                {
                    out.push(LeftBehind {
                        host: hi,
                        key,
                        attempt_id,
                        trial_key: a.trial_key.clone(),
                        budget,
                        config: a.config_label.to_string(),
                        cell: a.cell_label.to_string(),
                    });
                }
            }
        }
        out
    }

    /// Commit each of `copies` under its trial's lease (a launcher that is
    /// still committing it is waited for; a dead one's lease until it
    /// expires), unless the host's state has gone past it meanwhile (a
    /// later rung committed): then the copy is dropped.
    pub async fn commit_left_behind(&self, hosts: &[LaunchHost], copies: Vec<LeftBehind>) {
        for c in copies {
            let host = &hosts[c.host];
            let Some(carry) = self.carry(host) else {
                continue;
            };
            let Some(root) = carry.store.root(self.study_id) else {
                continue;
            };
            let Some(lease) = self.lease_to_commit(host, &c).await else {
                continue;
            };
            let base = format!("{root}/{}", c.key);
            let copy = RungCheckpoint::left_behind(&c.key, &base, &c.attempt_id);
            let here = carry.store.claim(&base).await.ok().flatten();
            if here.is_some_and(|h| h.budget >= c.budget) {
                copy.discard(&carry).await;
            } else {
                let mut warnings = Vec::new();
                copy.commit(&carry, c.budget, &c.trial_key, &mut warnings)
                    .await;
                tracing::info!(
                    host = %host.name,
                    "committed the checkpoint of the rung of {} @ {} at budget {} that an interrupted launch left",
                    c.config,
                    c.cell,
                    c.budget
                );
                self.checkpoint_warnings(&c.config, &c.cell, warnings);
            }
            self.ledger.release_lease(&lease).await;
        }
    }

    /// The lease of `c`'s trial: taken, or waited for to its holder's
    /// expiry (a few times); `None` while still held, on a ledger error,
    /// or when the launch stops.
    async fn lease_to_commit(&self, host: &LaunchHost, c: &LeftBehind) -> Option<Lease> {
        let what = format!("checkpoint commit of {} @ {}", c.config, c.cell);
        let holder = Holder {
            owner: &self.owner,
            host: &host.name,
            what: &what,
            while_live: false,
        };
        for _ in 0..3 {
            let taken = self
                .ledger
                .acquire_lease(self.study_id, &c.trial_key, &holder, lease_ttl())
                .await;
            let wait = match taken {
                Ok(Ok(lease)) => return Some(lease),
                Ok(Err(Held::By { expires_at, .. })) => {
                    super::until_expiry(&expires_at)
                        .unwrap_or_default()
                        .min(lease_ttl())
                        + Duration::from_millis(200)
                }
                Err(e) => {
                    tracing::debug!("cannot take the lease to commit a checkpoint: {e}");
                    return None;
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.cancel.cancelled() => return None,
            }
        }
        None
    }
}
