//! A launcher's liveness: one object per launcher that says it is alive
//! until a time, rewritten every quarter of the lease time.
//!
//! A trial lease taken `while_live` ([`super::lease::LeaseRecord`]) holds
//! its trial while both its own expiry and its owner's liveness hold, so
//! that a launcher running 8,000 trials renews one object every 30
//! seconds instead of 8,000 leases: a trial lease is then written once
//! when taken and renewed only every quarter of [`long_ttl`]. A launcher
//! that dies stops renewing its liveness, and its trials are taken over
//! once the liveness expires, as soon as they would have been with
//! per-trial renewals.
//!
//! Nobody but its launcher writes a liveness object, so it is a plain
//! overwrite (`<study>/launchers/<id>.json`, `<id>` the first 16 hex
//! digits of the sha256 of the owner id), not a chain of generations.
//! Launchers of earlier versions read a `while_live` lease by its own
//! expiry ([`long_ttl`] ahead): they take its trial over that much later,
//! never earlier.

use std::sync::Mutex;
use std::time::Duration;

use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::lease::{LeaseRecord, MAX_LEASE_TTL, lease_ttl, renew_every};
use super::{Ledger, LedgerError};

/// How long a trial lease kept by its launcher's liveness lasts on its
/// own: 15 lease times (30 minutes by default), at most [`MAX_LEASE_TTL`].
/// A trial renews it every quarter of that, so a trial shorter than a
/// quarter (7.5 minutes) writes its lease once.
pub fn long_ttl() -> Duration {
    (lease_ttl() * 15).min(MAX_LEASE_TTL).max(lease_ttl())
}

/// How long a lease lasts on its own: [`long_ttl`] when its launcher's
/// liveness keeps it, the lease time otherwise.
pub fn lease_time(while_live: bool) -> Duration {
    match while_live {
        true => long_ttl(),
        false => lease_ttl(),
    }
}

/// What a launcher's liveness object holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LivenessRecord {
    pub schema: u32,
    pub owner: String,
    /// The launcher is alive until then: its `while_live` leases hold no
    /// longer.
    pub expires_at: String,
    pub written_at: String,
}

/// Where `owner`'s liveness object lives.
pub fn key(study: &str, owner: &str) -> ObjPath {
    let digest = hex::encode(Sha256::digest(owner.as_bytes()));
    ObjPath::from(format!("{study}/launchers/{}.json", &digest[..16]))
}

/// `lease` as it holds given its owner's liveness (`None`: none found, or
/// one that does not read): a `while_live` lease holds until the earlier
/// of its own expiry and its owner's, and not at all without a liveness
/// of its owner. Any other lease is returned as it is.
pub fn effective(mut lease: LeaseRecord, liveness: Option<&LivenessRecord>) -> LeaseRecord {
    if !lease.while_live {
        return lease;
    }
    let own = chrono::DateTime::parse_from_rfc3339(&lease.expires_at).ok();
    let live = liveness
        .filter(|l| l.owner == lease.owner)
        .and_then(|l| chrono::DateTime::parse_from_rfc3339(&l.expires_at).ok());
    lease.expires_at = match (own, live) {
        (Some(own), Some(live)) => own.min(live).to_rfc3339(),
        // Unreadable either way: expired.
        _ => String::new(),
    };
    lease
}

/// This launcher's own liveness, as its trials see it.
#[derive(Debug)]
pub struct Liveness {
    pub owner: String,
    /// When the last write that succeeded began, by this launcher's clock:
    /// the liveness holds for others until a lease time after it.
    written: Mutex<Option<tokio::time::Instant>>,
}

impl Liveness {
    pub fn new(owner: &str) -> Liveness {
        Liveness {
            owner: owner.to_string(),
            written: Mutex::new(None),
        }
    }

    /// Whether a trial may be started, or go on, under a `while_live`
    /// lease: the last write that succeeded began less than half a lease
    /// time ago (the one after it may have failed). A trial looks every
    /// quarter of a lease time, so one given up stops at least a quarter
    /// of a lease time before anyone can take it over.
    pub fn alive(&self) -> bool {
        let written = self.written.lock().ok().and_then(|w| *w);
        written.is_some_and(|w| w.elapsed() < lease_ttl() / 2)
    }
}

impl Ledger {
    /// Write `live`'s liveness object, alive for a lease time from now.
    pub async fn write_liveness(&self, study: &str, live: &Liveness) -> Result<(), LedgerError> {
        let began = tokio::time::Instant::now();
        let now = chrono::Utc::now();
        let record = LivenessRecord {
            schema: super::records::SCHEMA,
            owner: live.owner.clone(),
            expires_at: (now + chrono::Duration::from_std(lease_ttl()).unwrap_or_default())
                .to_rfc3339(),
            written_at: now.to_rfc3339(),
        };
        let k = key(study, &live.owner);
        let bytes = serde_json::to_vec(&record).map_err(|e| self.io_err("encode", &k, e))?;
        self.store
            .put(&k, PutPayload::from(bytes))
            .await
            .map_err(|e| self.io_err("write", &k, e))?;
        if let Ok(mut w) = live.written.lock() {
            *w = Some(began);
        }
        Ok(())
    }

    /// Keep `live` written every quarter of the lease time, until dropped.
    /// A write that fails is tried again at the next quarter; the trials
    /// see the liveness lapse through [`Liveness::alive`].
    pub async fn keep_alive(&self, study: &str, live: &Liveness) {
        loop {
            tokio::time::sleep(renew_every()).await;
            // Releases that no later one took out with it.
            self.flush_releases().await;
            if let Err(e) = self.write_liveness(study, live).await {
                tracing::warn!(error = %e, "the launcher's liveness could not be written");
            }
        }
    }

    /// Remove `owner`'s liveness object (best effort: it expires anyway).
    /// Only once none of its `while_live` leases is held any more.
    pub async fn drop_liveness(&self, study: &str, owner: &str) {
        let _ = self.store.delete(&key(study, owner)).await;
    }

    /// `owner`'s liveness; `None` when there is none or it does not read
    /// (which holds nothing).
    pub async fn liveness(
        &self,
        study: &str,
        owner: &str,
    ) -> Result<Option<LivenessRecord>, LedgerError> {
        let bytes = self.get(&key(study, owner)).await?;
        Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
    }

    /// `lease` as it holds now that its owner's liveness is read (one read,
    /// for a `while_live` lease of another owner than `me` that has not
    /// expired on its own).
    pub(crate) async fn with_liveness(
        &self,
        study: &str,
        lease: LeaseRecord,
        me: &str,
    ) -> Result<LeaseRecord, LedgerError> {
        if !lease.while_live || lease.owner == me || lease.expired(chrono::Utc::now()) {
            return Ok(lease);
        }
        let live = self.liveness(study, &lease.owner).await?;
        Ok(effective(lease, live.as_ref()))
    }
}

/// [`Ledger::liveness`] on a local ledger, in the caller's blocking call.
pub(crate) fn liveness_local(
    root: &std::path::Path,
    study: &str,
    owner: &str,
) -> Result<Option<LivenessRecord>, (ObjPath, String)> {
    let k = key(study, owner);
    let path = super::local::file_of(root, &k);
    match crate::safe_read::read_regular(&path, crate::safe_read::MAX_LEASE_BYTES, None) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(crate::safe_read::Unreadable::Missing(_)) => Ok(None),
        Err(why) => Err((k, format!("{} {why}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::lease::{Held, Holder, Lease};

    /// A ledger on memory and one on a local folder (kept alive with it).
    fn ledgers() -> Vec<(Ledger, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        let memory = Ledger::over_store(
            std::sync::Arc::new(object_store::memory::InMemory::new()),
            "memory:///",
        );
        vec![(memory, None), (local, Some(dir))]
    }

    /// `owner`'s liveness, alive until `ahead` from now (past when
    /// negative), written as that launcher would.
    async fn live_until(ledger: &Ledger, owner: &str, ahead: chrono::Duration) {
        let now = chrono::Utc::now();
        let record = LivenessRecord {
            schema: crate::ledger::records::SCHEMA,
            owner: owner.to_string(),
            expires_at: (now + ahead).to_rfc3339(),
            written_at: now.to_rfc3339(),
        };
        let bytes = serde_json::to_vec(&record).expect("encode");
        ledger
            .store
            .put(&key("s", owner), bytes.into())
            .await
            .expect("put");
    }

    /// How many trials `status` counts as leased now.
    async fn live_leases(ledger: &Ledger) -> usize {
        ledger.live_leases("s").await.expect("io").unexpired.len()
    }

    async fn take(ledger: &Ledger, owner: &str, while_live: bool) -> Result<Lease, Held> {
        let holder = Holder {
            owner,
            host: "h",
            what: "",
            while_live,
        };
        ledger
            .acquire_lease("s", "k", &holder, Duration::from_secs(3600))
            .await
            .expect("io")
    }

    /// A lease kept by its launcher's liveness holds while the liveness
    /// does (for `acquire` and for `status`'s listing), although its own
    /// expiry is an hour ahead; once the liveness lapses, or is gone, or
    /// names another owner, the next launcher takes the trial over.
    #[tokio::test]
    async fn a_lease_kept_by_liveness_holds_while_its_launcher_is_alive() {
        for (ledger, _dir) in ledgers() {
            live_until(&ledger, "A", chrono::Duration::seconds(60)).await;
            let a = take(&ledger, "A", true).await.expect("A takes it");
            assert!(a.record.while_live);
            // Held by A, until A's liveness lapses (not an hour ahead).
            match take(&ledger, "B", true).await {
                Err(Held::By {
                    owner, expires_at, ..
                }) => {
                    assert_eq!(owner, "A");
                    let until = chrono::DateTime::parse_from_rfc3339(&expires_at).expect("time");
                    assert!(until < chrono::Utc::now() + chrono::Duration::seconds(61));
                }
                other => panic!("{}: B took it: {other:?}", ledger.url()),
            }
            assert_eq!(live_leases(&ledger).await, 1, "{}", ledger.url());

            // A's liveness lapses: nothing holds the trial any more.
            live_until(&ledger, "A", chrono::Duration::seconds(-1)).await;
            assert_eq!(live_leases(&ledger).await, 0, "{}", ledger.url());
            let b = take(&ledger, "B", true).await.expect("B takes it over");
            assert_eq!(b.record.generation, 2);

            // B dies without any liveness left; a liveness object of
            // another owner under B's name holds nothing either.
            let other = LivenessRecord {
                schema: crate::ledger::records::SCHEMA,
                owner: "not B".to_string(),
                expires_at: (chrono::Utc::now() + chrono::Duration::seconds(60)).to_rfc3339(),
                written_at: chrono::Utc::now().to_rfc3339(),
            };
            let bytes = serde_json::to_vec(&other).expect("encode");
            ledger
                .store
                .put(&key("s", "B"), bytes.into())
                .await
                .expect("put");
            let c = take(&ledger, "C", false).await.expect("C takes it over");
            assert_eq!(c.record.generation, 3);
            ledger.drop_liveness("s", "B").await;
            // C's lease is not kept by liveness: held on its own expiry.
            assert!(matches!(
                take(&ledger, "A", true).await,
                Err(Held::By { .. })
            ));
        }
    }

    /// The trial's own expiry still counts: a launcher alive for an hour
    /// does not hold a lease that expired on its own.
    #[test]
    fn a_lease_holds_until_the_earlier_of_its_expiry_and_its_launcher_s() {
        let now = chrono::Utc::now();
        let at = |s: i64| (now + chrono::Duration::seconds(s)).to_rfc3339();
        let lease = LeaseRecord {
            schema: crate::ledger::records::SCHEMA,
            trial_key: "k".into(),
            owner: "A".into(),
            host: "h".into(),
            generation: 1,
            expires_at: at(30),
            written_at: at(0),
            what: String::new(),
            taken_at: at(0),
            while_live: true,
        };
        let live = |owner: &str, s: i64| LivenessRecord {
            schema: crate::ledger::records::SCHEMA,
            owner: owner.into(),
            expires_at: at(s),
            written_at: at(0),
        };
        let held = |l: Option<&LivenessRecord>| effective(lease.clone(), l).holds(now);
        assert!(held(Some(&live("A", 60))));
        assert!(held(Some(&live("A", 10))));
        assert!(!held(Some(&live("A", -1))));
        assert!(!held(Some(&live("B", 60))));
        assert!(!held(None));
        let until = effective(lease.clone(), Some(&live("A", 3600))).expires_at;
        assert_eq!(until, lease.expires_at);
        // Not kept by liveness: as it is.
        let plain = LeaseRecord {
            while_live: false,
            ..lease.clone()
        };
        assert_eq!(effective(plain.clone(), None), plain);
    }
}
