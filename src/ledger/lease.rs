//! Leases: who runs a trial now, so that two launchers on one study never
//! run it twice.
//!
//! A lease is a chain of generations, `<study>/leases/<trial-key>.<gen>.json`,
//! each created with a conditional create (`PutMode::Create`), which every
//! store honours (S3 `If-None-Match`, GCS and Azure preconditions, the local
//! filesystem's atomic link). Taking a free trial creates generation 1;
//! renewing creates the next generation with the same owner; taking over an
//! expired lease creates the next generation with a new owner. Two launchers
//! racing for the same generation: exactly one create succeeds. So no
//! conditional *update* is needed, which the local filesystem lacks, and the
//! same protocol is correct on every store. Expiry compares wall clocks:
//! launchers' clocks must agree to well within the lease time (default
//! 2 minutes).
//!
//! No launcher grants a lease longer than [`MAX_LEASE_TTL`], so a lease
//! that expires further ahead than that plus [`CLOCK_SKEW_ALLOWANCE`]
//! was not written by one whose clock agrees with this one's (a clock set
//! a year ahead, a forged object): it would hold its trial for as long.
//! Such a lease holds nothing: the next launcher takes it over like an
//! expired one, and says so ([`Lease::took_over`]).
//!
//! The generations sit side by side in `leases/`, not in a folder per
//! trial: a local ledger would otherwise make (and keep) one directory per
//! trial, an inode that costs more than the lease itself on some file
//! systems. Finding a trial's generations lists `leases/`, which holds only
//! the leases of trials running now (released ones are deleted).

use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path as ObjPath;
use object_store::{PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use super::{Ledger, LedgerError};

/// How long a lease lasts without renewal, by default.
pub const LEASE_TTL: Duration = Duration::from_secs(120);

/// The longest lease time a launcher grants: a longer `TUNECTL_LEASE_TTL`
/// is cut to it.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(3600);

/// How far ahead of this launcher's clock another launcher's may be: a
/// lease expiring more than [`MAX_LEASE_TTL`] and this from now is taken
/// over as stale.
pub const CLOCK_SKEW_ALLOWANCE: Duration = Duration::from_secs(300);

/// The lease time in force: `TUNECTL_LEASE_TTL` (e.g. `30s`, at most
/// [`MAX_LEASE_TTL`]) or [`LEASE_TTL`]. A killed launcher's trials wait
/// this long before another launcher takes them over; shorter suits tests
/// and stable clocks.
pub fn lease_ttl() -> Duration {
    ttl_of(std::env::var("TUNECTL_LEASE_TTL").ok().as_deref())
}

/// The lease time a `TUNECTL_LEASE_TTL` of `value` sets.
fn ttl_of(value: Option<&str>) -> Duration {
    value
        .and_then(|v| crate::spec::yaml::parse_duration(v).ok())
        .filter(|d| *d >= Duration::from_millis(100))
        .map(|d| d.min(MAX_LEASE_TTL))
        .unwrap_or(LEASE_TTL)
}

/// How often a running trial renews its lease: a quarter of its time.
pub fn renew_every() -> Duration {
    lease_ttl() / 4
}

/// Who takes a lease: the launcher (`owner`), the host the trial runs
/// on, and what runs (`config @ cell`, for people).
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    pub owner: &'a str,
    pub host: &'a str,
    pub what: &'a str,
    /// The lease holds only while the owner's liveness does
    /// ([`super::liveness`]), and is taken for [`super::liveness::long_ttl`].
    pub while_live: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LeaseRecord {
    pub schema: u32,
    pub trial_key: String,
    /// The launcher holding it (one id per launch process).
    pub owner: String,
    pub host: String,
    pub generation: u64,
    pub expires_at: String,
    pub written_at: String,
    /// What runs under it, for people (`status --watch`): `config @ cell`.
    /// Absent in leases of earlier versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub what: String,
    /// When its holder took it (kept by renewals): how long the trial has
    /// been running. Absent in leases of earlier versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub taken_at: String,
    /// It holds only while its owner's liveness object does, as well as
    /// until `expires_at` ([`super::liveness`]). Absent (`false`) in
    /// leases of earlier versions and in leases renewed on their own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub while_live: bool,
}

impl LeaseRecord {
    /// Its expiry has passed (or cannot be read).
    pub fn expired(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        chrono::DateTime::parse_from_rfc3339(&self.expires_at)
            .map(|t| t.with_timezone(&chrono::Utc) <= now)
            .unwrap_or(true)
    }

    /// Its expiry is further ahead of `now` than any lease can be:
    /// [`MAX_LEASE_TTL`] plus [`CLOCK_SKEW_ALLOWANCE`].
    pub fn from_the_future(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        let furthest = chrono::Duration::from_std(MAX_LEASE_TTL + CLOCK_SKEW_ALLOWANCE)
            .unwrap_or_else(|_| chrono::Duration::hours(1));
        chrono::DateTime::parse_from_rfc3339(&self.expires_at)
            .is_ok_and(|t| t.with_timezone(&chrono::Utc) > now + furthest)
    }

    /// It holds its trial at `now`: not expired, and not from the future.
    pub fn holds(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        !self.expired(now) && !self.from_the_future(now)
    }
}

/// A lease this launcher holds.
#[derive(Debug, Clone)]
pub struct Lease {
    pub study: String,
    pub record: LeaseRecord,
    /// The generation this launcher took it with: its own generations are
    /// this one to `record.generation` (renewals add one each).
    pub first_generation: u64,
    /// Nothing was stored under the trial's key (no `trials/<key>/`
    /// folder) just after the lease was taken, so the trial has no
    /// attempt to look for. Known on a local ledger only: `false` says
    /// nothing.
    pub no_attempts: bool,
    /// The lease of another owner this one took over because it expired
    /// further ahead than any lease can ([`LeaseRecord::from_the_future`]):
    /// for the launcher to say so.
    pub took_over: Option<LeaseRecord>,
}

impl Lease {
    /// The keys of the generations this launcher wrote.
    pub fn own_generations(&self) -> Vec<ObjPath> {
        (self.first_generation..=self.record.generation)
            .map(|g| key(&self.study, &self.record.trial_key, g))
            .collect()
    }
}

/// Why a trial could not be leased.
#[derive(Debug, Clone)]
pub enum Held {
    /// Another launcher holds a live lease until then.
    By {
        owner: String,
        host: String,
        expires_at: String,
    },
}

fn key(study: &str, trial: &str, generation: u64) -> ObjPath {
    ObjPath::from(format!("{study}/leases/{trial}.{generation:012}.json"))
}

/// `(trial key, generation)` of a lease object's name, `None` for anything
/// else under `leases/`.
fn parse_name(name: &str) -> Option<(&str, u64)> {
    let (trial, generation) = name.strip_suffix(".json")?.rsplit_once('.')?;
    if trial.is_empty() || generation.len() != 12 {
        return None;
    }
    Some((trial, generation.parse().ok()?))
}

fn prefix(study: &str) -> ObjPath {
    ObjPath::from(format!("{study}/leases"))
}

/// The generation to take after `latest` (with `latest` when it is
/// another owner's lease from the future, taken over), or who holds the
/// trial.
fn free_generation(
    latest: Option<LeaseRecord>,
    owner: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(u64, Option<LeaseRecord>), Held> {
    match latest {
        Some(l) if l.owner != owner && l.from_the_future(now) => Ok((l.generation + 1, Some(l))),
        Some(l) if !l.expired(now) && l.owner != owner => Err(held_by(Some(l))),
        Some(l) => Ok((l.generation + 1, None)),
        None => Ok((1, None)),
    }
}

/// A lease taken: the generation written, and the lease from the future it
/// took over, if any.
type Taken = (LeaseRecord, Option<LeaseRecord>);

fn held_by(latest: Option<LeaseRecord>) -> Held {
    Held::By {
        owner: latest.as_ref().map(|l| l.owner.clone()).unwrap_or_default(),
        host: latest.as_ref().map(|l| l.host.clone()).unwrap_or_default(),
        expires_at: latest.map(|l| l.expires_at).unwrap_or_default(),
    }
}

/// What failed in a local ledger: operation, key, message.
type LocalError = (&'static str, ObjPath, String);

/// [`Ledger::acquire_lease`] on a local ledger in one blocking call: the
/// listing of `leases/` by name, the newest generation's read and the
/// create (local.rs), instead of a thread hand-off for each.
fn acquire_local(
    root: &std::path::Path,
    study: &str,
    trial: &str,
    holder: &Holder<'_>,
    ttl: Duration,
) -> Result<Result<Taken, Held>, LocalError> {
    let latest = match latest_local(root, study, trial)? {
        // Held while its owner is alive: is it?
        Some(l) if l.while_live && l.owner != holder.owner && !l.expired(chrono::Utc::now()) => {
            let live = super::liveness::liveness_local(root, study, &l.owner)
                .map_err(|(k, e)| ("read", k, e))?;
            Some(super::liveness::effective(l, live.as_ref()))
        }
        other => other,
    };
    let (generation, stale) = match free_generation(latest, holder.owner, chrono::Utc::now()) {
        Ok(g) => g,
        Err(held) => return Ok(Err(held)),
    };
    let record = Ledger::lease_record(trial, holder, generation, ttl, None);
    let k = key(study, trial, generation);
    let bytes = serde_json::to_vec(&record).map_err(|e| ("encode", k.clone(), e.to_string()))?;
    match super::local::create_new(&super::local::file_of(root, &k), &bytes) {
        Ok(true) => Ok(Ok((record, stale))),
        // Someone created that generation first: they hold it.
        Ok(false) => Ok(Err(held_by(latest_local(root, study, trial)?))),
        Err(e) => Err(("write", k, e)),
    }
}

/// [`Ledger::latest_lease`] on a local ledger.
fn latest_local(
    root: &std::path::Path,
    study: &str,
    trial: &str,
) -> Result<Option<LeaseRecord>, LocalError> {
    let dir = super::local::file_of(root, &prefix(study));
    let names = super::local::names(&dir, None, false)
        .map_err(|e| ("list", prefix(study), e.to_string()))?;
    let Some((generation, name)) = names
        .iter()
        .filter_map(|n| {
            parse_name(n)
                .filter(|(t, _)| *t == trial)
                .map(|(_, g)| (g, n))
        })
        .max()
    else {
        return Ok(None);
    };
    let vacant = LeaseRecord {
        generation,
        ..Ledger::vacant(trial)
    };
    // A regular file of at most MAX_LEASE_BYTES (crate::safe_read): a
    // FIFO or a device there is an error naming it, never a wait.
    let path = dir.join(name);
    let bytes = match crate::safe_read::read_regular(&path, crate::safe_read::MAX_LEASE_BYTES, None)
    {
        Ok(b) => b,
        // Released between the listing and the read: free again, but the
        // next generation keeps counting up.
        Err(crate::safe_read::Unreadable::Missing(_)) => return Ok(Some(vacant)),
        Err(why) => {
            let k = ObjPath::from(format!("{study}/leases/{name}"));
            return Err(("read", k, format!("{} {why}", path.display())));
        }
    };
    // A torn or garbage generation: the next one takes over.
    Ok(Some(serde_json::from_slice(&bytes).unwrap_or(vacant)))
}

impl Ledger {
    /// Every lease generation in a study's `leases/`, by trial, oldest
    /// generation first.
    async fn lease_generations(
        &self,
        study: &str,
    ) -> Result<std::collections::BTreeMap<String, Vec<(u64, ObjPath)>>, LedgerError> {
        let prefix = prefix(study);
        let mut by_trial: std::collections::BTreeMap<String, Vec<(u64, ObjPath)>> =
            Default::default();
        if let Some(root) = &self.local_root {
            // By name, as a lease is taken (acquire_local): what is there
            // and not a regular file is listed too, and refused when read.
            let dir = super::local::file_of(root, &prefix);
            let names = tokio::task::spawn_blocking(move || super::local::names(&dir, None, false))
                .await
                .map_err(|e| self.io_err("list", &prefix, e))?
                .map_err(|e| self.io_err("list", &prefix, e))?;
            for name in names {
                if let Some((trial, generation)) = parse_name(&name) {
                    by_trial
                        .entry(trial.to_string())
                        .or_default()
                        .push((generation, ObjPath::from(format!("{prefix}/{name}"))));
                }
            }
            for gens in by_trial.values_mut() {
                gens.sort_by_key(|(g, _)| *g);
            }
            return Ok(by_trial);
        }
        let mut listing = self.store.list(Some(&prefix));
        while let Some(meta) = listing
            .try_next()
            .await
            .map_err(|e| self.io_err("list", &prefix, e))?
        {
            let k = meta.location;
            // Directly in `leases/`: anything deeper is not a lease.
            if k.parts().count() != 3 {
                continue;
            }
            if let Some((trial, generation)) = k.filename().and_then(parse_name) {
                by_trial
                    .entry(trial.to_string())
                    .or_default()
                    .push((generation, k.clone()));
            }
        }
        for gens in by_trial.values_mut() {
            gens.sort_by_key(|(g, _)| *g);
        }
        Ok(by_trial)
    }

    /// The generations of one trial's lease, oldest first, read from the
    /// trial's own names on (`list_with_offset`): on a store that lists in
    /// key order (S3's general-purpose buckets, GCS, Azure, memory) that is
    /// one list request however many leases the study holds, where the
    /// whole of `leases/` is one request a thousand of them. A store that
    /// lists out of order can make it miss generations; a miss can only
    /// make the create that follows fail, and that failure reads the whole
    /// listing ([`Ledger::acquire_in_store`]).
    async fn trial_generations(
        &self,
        study: &str,
        trial: &str,
    ) -> Result<Vec<(u64, ObjPath)>, LedgerError> {
        let prefix = prefix(study);
        let offset = ObjPath::from(format!("{study}/leases/{trial}"));
        let mut listing = self.store.list_with_offset(Some(&prefix), &offset);
        let mut gens = Vec::new();
        while let Some(meta) = listing
            .try_next()
            .await
            .map_err(|e| self.io_err("list", &prefix, e))?
        {
            let k = meta.location;
            let Some(name) = k.parts().nth(2) else {
                continue;
            };
            // Past the names that begin with the trial's key: in key
            // order, none of its generations is further on.
            if !name.as_ref().starts_with(trial) {
                break;
            }
            if k.parts().count() != 3 {
                continue;
            }
            if let Some((t, generation)) = parse_name(name.as_ref())
                && t == trial
            {
                gens.push((generation, k.clone()));
            }
        }
        gens.sort_by_key(|(g, _)| *g);
        Ok(gens)
    }

    /// The newest generation of a trial's lease, from the trial's own
    /// names ([`Ledger::trial_generations`]) or, `whole`, from the listing
    /// of every lease of the study.
    async fn latest_lease(
        &self,
        study: &str,
        trial: &str,
        whole: bool,
    ) -> Result<Option<LeaseRecord>, LedgerError> {
        // A store that will not list from an offset (S3's directory
        // buckets do not take `start-after`) is listed whole.
        let own = match whole {
            true => None,
            false => self.trial_generations(study, trial).await.ok(),
        };
        let newest = match own {
            Some(mut gens) => gens.pop(),
            None => self
                .lease_generations(study)
                .await?
                .remove(trial)
                .and_then(|mut g| g.pop()),
        };
        let Some((generation, k)) = newest else {
            return Ok(None);
        };
        let Some(bytes) = self.get(&k).await? else {
            // Released between the listing and the read: free again, but
            // the next generation keeps counting up.
            return Ok(Some(LeaseRecord {
                generation,
                ..Self::vacant(trial)
            }));
        };
        Ok(Some(match serde_json::from_slice::<LeaseRecord>(&bytes) {
            Ok(r) => r,
            // A torn or garbage generation: the next one takes over.
            Err(_) => LeaseRecord {
                generation,
                ..Self::vacant(trial)
            },
        }))
    }

    /// A generation that holds nothing: no owner, expired.
    fn vacant(trial: &str) -> LeaseRecord {
        LeaseRecord {
            schema: super::records::SCHEMA,
            trial_key: trial.to_string(),
            owner: String::new(),
            host: String::new(),
            generation: 0,
            expires_at: String::new(),
            written_at: String::new(),
            what: String::new(),
            taken_at: String::new(),
            while_live: false,
        }
    }

    async fn create_generation(
        &self,
        record: &LeaseRecord,
        study: &str,
    ) -> Result<bool, LedgerError> {
        let k = key(study, &record.trial_key, record.generation);
        let bytes = serde_json::to_vec(record).map_err(|e| self.io_err("encode", &k, e))?;
        if self.local_root.is_some() {
            // One try, as below; an existing generation is `false`.
            let created = self.create_in_turn(vec![(k, bytes)], 1, false, Vec::new());
            return Ok(created.await?.first() == Some(&true));
        }
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self.store.put_opts(&k, PutPayload::from(bytes), opts).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.io_err("write", &k, e)),
        }
    }

    /// Generation `generation` of a lease held by `holder`, taken at
    /// `taken_at` (now, for a new one).
    fn lease_record(
        trial: &str,
        holder: &Holder<'_>,
        generation: u64,
        ttl: Duration,
        taken_at: Option<&str>,
    ) -> LeaseRecord {
        let now = chrono::Utc::now();
        LeaseRecord {
            schema: super::records::SCHEMA,
            trial_key: trial.to_string(),
            owner: holder.owner.to_string(),
            host: holder.host.to_string(),
            generation,
            expires_at: (now + chrono::Duration::from_std(ttl).unwrap_or_default()).to_rfc3339(),
            written_at: now.to_rfc3339(),
            what: holder.what.to_string(),
            taken_at: taken_at.map_or_else(|| now.to_rfc3339(), str::to_string),
            while_live: holder.while_live,
        }
    }

    /// Take the lease of a trial, or say who holds it.
    pub async fn acquire_lease(
        &self,
        study: &str,
        trial: &str,
        holder: &Holder<'_>,
        ttl: Duration,
    ) -> Result<Result<Lease, Held>, LedgerError> {
        let mut no_attempts = false;
        let taken = match &self.local_root {
            Some(root) => {
                let (root, study_id) = (root.clone(), study.to_string());
                let trial = trial.to_string();
                let (owner, host, what) = (
                    holder.owner.to_string(),
                    holder.host.to_string(),
                    holder.what.to_string(),
                );
                let while_live = holder.while_live;
                let (taken, none) = tokio::task::spawn_blocking(move || {
                    let holder = Holder {
                        owner: &owner,
                        host: &host,
                        what: &what,
                        while_live,
                    };
                    let taken = acquire_local(&root, &study_id, &trial, &holder, ttl);
                    // After the create, as the caller's look for a finished
                    // attempt would be: a folder that is not there holds
                    // none (one that is, or cannot be told, is read then).
                    let folder = ObjPath::from(format!("{study_id}/trials/{trial}"));
                    let none = taken.as_ref().is_ok_and(|t| t.is_ok())
                        && std::fs::symlink_metadata(super::local::file_of(&root, &folder))
                            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
                    (taken, none)
                })
                .await
                .unwrap_or_else(|e| (Err(("write", prefix(study), e.to_string())), false));
                no_attempts = none;
                taken.map_err(|(op, k, e)| self.io_err(op, &k, e))?
            }
            None => self.acquire_in_store(study, trial, holder, ttl).await?,
        };
        Ok(taken.map(|(record, took_over)| Lease {
            study: study.to_string(),
            // A lease from the future goes with this one's release: it
            // holds nothing, and would show its trial held until then.
            first_generation: took_over
                .as_ref()
                .map_or(record.generation, |stale| stale.generation),
            record,
            no_attempts,
            took_over,
        }))
    }

    /// [`Ledger::acquire_lease`] through the store: the generation made.
    async fn acquire_in_store(
        &self,
        study: &str,
        trial: &str,
        holder: &Holder<'_>,
        ttl: Duration,
    ) -> Result<Result<Taken, Held>, LedgerError> {
        // From the trial's own names first. When that finds the trial held,
        // or the generation after the newest it saw exists (someone created
        // it first, or a store listing out of order hid it), once more from
        // the whole listing: what a store's order hides can delay a trial
        // by one listing, never hold it for good nor let two launchers in.
        for whole in [false, true] {
            let latest = match self.latest_lease(study, trial, whole).await? {
                Some(l) => Some(self.with_liveness(study, l, holder.owner).await?),
                None => None,
            };
            let (generation, stale) =
                match free_generation(latest, holder.owner, chrono::Utc::now()) {
                    Ok(g) => g,
                    Err(held) if whole => return Ok(Err(held)),
                    Err(_) => continue,
                };
            let record = Self::lease_record(trial, holder, generation, ttl, None);
            if self.create_generation(&record, study).await? {
                return Ok(Ok((record, stale)));
            }
        }
        // Someone created that generation first: they hold it.
        Ok(Err(held_by(self.latest_lease(study, trial, true).await?)))
    }

    /// Extend a held lease. `Ok(false)`: it was taken over (it had expired).
    pub async fn renew_lease(&self, lease: &mut Lease, ttl: Duration) -> Result<bool, LedgerError> {
        let r = &lease.record;
        let holder = Holder {
            owner: &r.owner,
            host: &r.host,
            what: &r.what,
            while_live: r.while_live,
        };
        let taken_at = (!r.taken_at.is_empty()).then_some(r.taken_at.as_str());
        let next = Self::lease_record(&r.trial_key, &holder, r.generation + 1, ttl, taken_at);
        if self.create_generation(&next, &lease.study).await? {
            lease.record = next;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Give a lease up: the generations this launcher wrote are deleted,
    /// by name, without a listing (best effort: an undeleted lease simply
    /// expires). Generations of an expired owner it took over from stay:
    /// expired, they hold nothing.
    pub async fn release_lease(&self, lease: &Lease) {
        let _ = self
            .create_in_turn(Vec::new(), 1, false, lease.own_generations())
            .await;
    }

    /// The live leases of a study: trials running now somewhere (a lease
    /// from the future holds nothing, see [`Ledger::unexpired_leases`]),
    /// and the lease objects that do not read.
    pub async fn live_leases(&self, study: &str) -> Result<Leases, LedgerError> {
        let now = chrono::Utc::now();
        let mut all = self.unexpired_leases(study).await?;
        all.unexpired.retain(|r| r.holds(now));
        Ok(all)
    }

    /// The newest generation of every trial's lease that has not expired,
    /// leases from the future ([`LeaseRecord::from_the_future`]) included:
    /// what `status` shows. A newest generation that does not read (not a
    /// regular file, cut short, not a lease) is listed apart: a launch
    /// cannot take that trial's lease until it is removed, and `status`
    /// says so rather than fail on it. Only a listing that fails is an
    /// error.
    pub async fn unexpired_leases(&self, study: &str) -> Result<Leases, LedgerError> {
        let all = self.lease_generations(study).await?;
        let now = chrono::Utc::now();
        let mut out = Leases::default();
        // Each owner's liveness, read once.
        let mut lives: std::collections::HashMap<String, Option<super::liveness::LivenessRecord>> =
            Default::default();
        for (trial, gens) in &all {
            let Some((_, k)) = gens.last() else {
                continue;
            };
            let unreadable = |reason: String| UnreadableLease {
                trial_key: trial.clone(),
                object: k.to_string(),
                reason,
            };
            match self.get(k).await {
                // Released and gone since the listing.
                Ok(None) => {}
                Ok(Some(bytes)) => match serde_json::from_slice::<LeaseRecord>(&bytes) {
                    Ok(r) if r.while_live && !r.expired(now) => {
                        let live = match lives.get(&r.owner) {
                            Some(l) => l.clone(),
                            None => {
                                let l = self.liveness(study, &r.owner).await.ok().flatten();
                                lives.insert(r.owner.clone(), l.clone());
                                l
                            }
                        };
                        let r = super::liveness::effective(r, live.as_ref());
                        if !r.expired(now) {
                            out.unexpired.push(r);
                        }
                    }
                    Ok(r) if !r.expired(now) => out.unexpired.push(r),
                    Ok(_) => {}
                    // A released generation is empty: nothing held.
                    Err(_) if bytes.is_empty() => {}
                    Err(e) => out.unreadable.push(unreadable(format!("not a lease: {e}"))),
                },
                Err(e) => out.unreadable.push(unreadable(e.to_string())),
            }
        }
        Ok(out)
    }
}

/// What [`Ledger::unexpired_leases`] found.
#[derive(Debug, Default)]
pub struct Leases {
    pub unexpired: Vec<LeaseRecord>,
    /// Newest generations that do not read, by trial.
    pub unreadable: Vec<UnreadableLease>,
}

/// A trial's newest lease generation that does not read as a lease.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UnreadableLease {
    pub trial_key: String,
    /// Its object key in the ledger.
    pub object: String,
    pub reason: String,
}

/// How many of 16 launchers racing for `trial`'s lease get it.
#[cfg(test)]
async fn racing_winners(ledger: std::sync::Arc<Ledger>, trial: &'static str) -> usize {
    let mut tasks = Vec::new();
    for i in 0..16 {
        let l = std::sync::Arc::clone(&ledger);
        tasks.push(tokio::spawn(async move {
            let owner = format!("L{i}");
            let holder = Holder {
                owner: &owner,
                host: "h",
                what: "",
                while_live: false,
            };
            l.acquire_lease("s", trial, &holder, Duration::from_secs(60))
                .await
                .map(|r| r.is_ok())
        }));
    }
    let mut winners = 0;
    for t in tasks {
        if matches!(t.await, Ok(Ok(true))) {
            winners += 1;
        }
    }
    winners
}

#[cfg(test)]
mod listing_order;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_winner_then_takeover_after_expiry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        let a = ledger
            .acquire_lease(
                "s",
                "k",
                &Holder {
                    owner: "A",
                    host: "h1",
                    what: "sweep x=1 @ n=2",
                    while_live: false,
                },
                Duration::from_secs(60),
            )
            .await
            .expect("io");
        assert!(a.is_ok());
        let b = ledger
            .acquire_lease(
                "s",
                "k",
                &Holder {
                    owner: "B",
                    host: "h2",
                    what: "",
                    while_live: false,
                },
                Duration::from_secs(60),
            )
            .await
            .expect("io");
        assert!(matches!(b, Err(Held::By { ref owner, .. }) if owner == "A"));
        // A renews; still A's.
        let mut lease = a.expect("lease");
        assert!(
            ledger
                .renew_lease(&mut lease, Duration::from_millis(500))
                .await
                .expect("io")
        );
        assert_eq!(lease.record.generation, 2);
        // A renewal says what runs, and since when, as the first did.
        let first = ledger.live_leases("s").await.expect("io").unexpired;
        assert_eq!(first.len(), 1);
        assert_eq!(lease.record.what, "sweep x=1 @ n=2");
        assert_eq!(first[0].what, "sweep x=1 @ n=2");
        assert_eq!(first[0].taken_at, lease.record.taken_at);
        assert!(!lease.record.taken_at.is_empty());
        // Long enough to be read back live on a busy machine, short enough
        // to wait out.
        tokio::time::sleep(Duration::from_millis(600)).await;
        // Expired: B takes over with the next generation; A's renewal fails.
        let b = ledger
            .acquire_lease(
                "s",
                "k",
                &Holder {
                    owner: "B",
                    host: "h2",
                    what: "",
                    while_live: false,
                },
                Duration::from_secs(60),
            )
            .await
            .expect("io")
            .expect("takeover");
        assert_eq!(b.record.generation, 3);
        assert!(
            !ledger
                .renew_lease(&mut lease, Duration::from_secs(60))
                .await
                .expect("io")
        );
        assert_eq!(
            ledger.live_leases("s").await.expect("io").unexpired.len(),
            1
        );
        ledger.release_lease(&b).await;
        assert!(
            ledger
                .live_leases("s")
                .await
                .expect("io")
                .unexpired
                .is_empty()
        );
        // A's expired generations stay; the trial can be taken again, with
        // the generation after them.
        let c = ledger
            .acquire_lease(
                "s",
                "k",
                &Holder {
                    owner: "C",
                    host: "h3",
                    what: "",
                    while_live: false,
                },
                Duration::from_secs(60),
            )
            .await
            .expect("io")
            .expect("free again");
        assert_eq!(c.record.generation, 3);
        ledger.release_lease(&c).await;
        ledger.release_lease(&lease).await;
        assert!(
            !dir.path()
                .join("s/leases")
                .read_dir()
                .is_ok_and(|mut d| d.next().is_some())
        );
    }

    /// A lease of `owner` expiring `ahead` from now, as its generation 1
    /// of trial `k` in the local ledger at `dir`.
    fn forge(dir: &std::path::Path, owner: &str, ahead: chrono::Duration) {
        let now = chrono::Utc::now();
        let record = LeaseRecord {
            schema: 1,
            trial_key: "k".into(),
            owner: owner.into(),
            host: "h0".into(),
            generation: 1,
            expires_at: (now + ahead).to_rfc3339(),
            written_at: now.to_rfc3339(),
            what: String::new(),
            taken_at: String::new(),
            while_live: false,
        };
        std::fs::create_dir_all(dir.join("s/leases")).expect("mkdir");
        std::fs::write(
            dir.join("s/leases/k.000000000001.json"),
            serde_json::to_vec(&record).expect("json"),
        )
        .expect("write");
    }

    /// A lease whose expiry is further ahead than any launcher grants plus
    /// the clock-skew allowance (a clock a year ahead, a forged object)
    /// used to hold its trial for as long: it is taken over at once, the
    /// lease taken says from whom, and its release removes the stale one
    /// too. One within the allowance still holds.
    #[tokio::test]
    async fn a_lease_from_the_future_is_taken_over_and_said() {
        let ttl = Duration::from_secs(60);
        for (store, fast) in [("local", true), ("object_store", false)] {
            let dir = tempfile::tempdir().expect("tempdir");
            let ledger = if fast {
                Ledger::open(&dir.path().display().to_string()).expect("ledger")
            } else {
                let s = object_store::local::LocalFileSystem::new_with_prefix(dir.path())
                    .expect("store");
                Ledger::with_store(std::sync::Arc::new(s), "slow".into())
            };
            forge(dir.path(), "M", chrono::Duration::days(365));
            assert!(
                ledger
                    .live_leases("s")
                    .await
                    .expect("io")
                    .unexpired
                    .is_empty(),
                "{store}: a lease from the future is not live"
            );
            let shown = ledger.unexpired_leases("s").await.expect("io").unexpired;
            assert_eq!(shown.len(), 1, "{store}: status shows it");
            let a = ledger
                .acquire_lease(
                    "s",
                    "k",
                    &Holder {
                        owner: "A",
                        host: "h",
                        what: "",
                        while_live: false,
                    },
                    ttl,
                )
                .await
                .expect("io")
                .unwrap_or_else(|_| panic!("{store}: the stale lease still holds"));
            assert_eq!(a.record.generation, 2, "{store}");
            let stale = a.took_over.clone().expect("said");
            assert_eq!((stale.owner.as_str(), stale.host.as_str()), ("M", "h0"));
            assert_eq!(a.own_generations().len(), 2, "{store}");
            let live = ledger.live_leases("s").await.expect("io").unexpired;
            assert_eq!(live.len(), 1, "{store}");
            assert_eq!(live[0].owner, "A", "{store}");
            ledger.release_lease(&a).await;
            assert!(
                ledger
                    .unexpired_leases("s")
                    .await
                    .expect("io")
                    .unexpired
                    .is_empty(),
                "{store}: released with the stale one"
            );

            // Within the lease time and the allowance: held, as ever.
            let near = MAX_LEASE_TTL + CLOCK_SKEW_ALLOWANCE - Duration::from_secs(60);
            forge(
                dir.path(),
                "B",
                chrono::Duration::from_std(near).expect("duration"),
            );
            let held = ledger
                .acquire_lease(
                    "s",
                    "k",
                    &Holder {
                        owner: "A",
                        host: "h",
                        what: "",
                        while_live: false,
                    },
                    ttl,
                )
                .await
                .expect("io");
            assert!(
                matches!(held, Err(Held::By { ref owner, .. }) if owner == "B"),
                "{store}: {held:?}"
            );
        }
    }

    #[test]
    fn how_far_ahead_a_lease_can_expire() {
        let now = chrono::Utc::now();
        let furthest =
            chrono::Duration::from_std(MAX_LEASE_TTL + CLOCK_SKEW_ALLOWANCE).expect("duration");
        let at = |ahead: chrono::Duration| LeaseRecord {
            expires_at: (now + ahead).to_rfc3339(),
            ..Ledger::vacant("k")
        };
        let second = chrono::Duration::seconds(1);
        assert!(at(second).holds(now));
        assert!(at(furthest - second).holds(now));
        assert!(!at(furthest - second).from_the_future(now));
        assert!(at(furthest + second).from_the_future(now));
        assert!(!at(furthest + second).holds(now));
        assert!(!at(furthest + second).expired(now));
        assert!(at(-second).expired(now) && !at(-second).holds(now));
        // An expiry that cannot be read is expired, never from the future.
        let garbage = LeaseRecord {
            expires_at: "soon".into(),
            ..Ledger::vacant("k")
        };
        assert!(garbage.expired(now) && !garbage.from_the_future(now));
        // No launcher grants more than MAX_LEASE_TTL.
        assert_eq!(ttl_of(Some("30s")), Duration::from_secs(30));
        assert_eq!(ttl_of(Some("2h")), MAX_LEASE_TTL);
        assert_eq!(ttl_of(Some("1ms")), LEASE_TTL);
        assert_eq!(ttl_of(None), LEASE_TTL);
    }

    #[test]
    fn lease_names_parse_back() {
        let k = key("s", "abc", 7);
        assert_eq!(k.as_ref(), "s/leases/abc.000000000007.json");
        assert_eq!(k.filename().and_then(parse_name), Some(("abc", 7)));
        for name in [
            "abc.json",
            "abc.7.json",
            ".000000000007.json",
            "abc.000000000007",
        ] {
            assert_eq!(parse_name(name), None, "{name}");
        }
    }

    /// Only the leases directly in `leases/` count: a trial's generations
    /// of another trial or deeper objects are none of its own.
    #[tokio::test]
    async fn a_lease_is_found_among_others_and_nothing_deeper_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        let ttl = Duration::from_secs(60);
        let a = ledger
            .acquire_lease(
                "s",
                "k1",
                &Holder {
                    owner: "A",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        assert!(a.is_ok());
        let b = ledger
            .acquire_lease(
                "s",
                "k2",
                &Holder {
                    owner: "B",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        assert!(b.is_ok());
        // An object under a folder (the layout of older versions) is not read.
        std::fs::create_dir_all(dir.path().join("s/leases/k3")).expect("mkdir");
        std::fs::write(dir.path().join("s/leases/k3/000000000001.json"), b"{}").expect("write");
        let held = ledger
            .acquire_lease(
                "s",
                "k1",
                &Holder {
                    owner: "C",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        assert!(matches!(held, Err(Held::By { ref owner, .. }) if owner == "A"));
        let live = ledger.live_leases("s").await.expect("io").unexpired;
        let mut owners: Vec<&str> = live.iter().map(|l| l.owner.as_str()).collect();
        owners.sort();
        assert_eq!(owners, ["A", "B"]);
        ledger.release_lease(&a.expect("lease")).await;
        let live = ledger.live_leases("s").await.expect("io").unexpired;
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].trial_key, "k2");
        assert!(!dir.path().join("s/leases/k1").exists());
    }

    /// A local ledger's leases, taken in one blocking call, and the same
    /// folder through object_store see each other's generations.
    #[tokio::test]
    async fn local_and_object_store_leases_exclude_each_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fast = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        assert!(fast.local_root.is_some());
        let store =
            object_store::local::LocalFileSystem::new_with_prefix(dir.path()).expect("store");
        let slow = Ledger::with_store(std::sync::Arc::new(store), "slow".into());
        let ttl = Duration::from_secs(60);
        let a = fast
            .acquire_lease(
                "s",
                "k",
                &Holder {
                    owner: "A",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        let a = a.expect("free");
        let held = slow
            .acquire_lease(
                "s",
                "k",
                &Holder {
                    owner: "B",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        assert!(matches!(held, Err(Held::By { ref owner, .. }) if owner == "A"));
        let b = slow
            .acquire_lease(
                "s",
                "k2",
                &Holder {
                    owner: "B",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        let b = b.expect("free");
        let held = fast
            .acquire_lease(
                "s",
                "k2",
                &Holder {
                    owner: "A",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        assert!(matches!(held, Err(Held::By { ref owner, .. }) if owner == "B"));
        // Released by one, taken by the other at the next generation.
        fast.release_lease(&a).await;
        let c = slow
            .acquire_lease(
                "s",
                "k",
                &Holder {
                    owner: "B",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        assert_eq!(c.expect("free again").record.generation, 1);
        slow.release_lease(&b).await;
        // A garbage newest generation holds nothing: the next one is taken.
        std::fs::write(dir.path().join("s/leases/k2.000000000004.json"), b"torn").expect("write");
        let d = fast
            .acquire_lease(
                "s",
                "k2",
                &Holder {
                    owner: "A",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        assert_eq!(d.expect("taken over").record.generation, 5);
        // Only a local ledger that saw no `trials/<key>/` says so.
        assert!(a.no_attempts);
        assert!(!b.no_attempts, "object_store's path looks nothing up");
        std::fs::create_dir_all(dir.path().join("s/trials/k3")).expect("mkdir");
        let e = fast
            .acquire_lease(
                "s",
                "k3",
                &Holder {
                    owner: "A",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io");
        assert!(!e.expect("free").no_attempts);
    }

    #[tokio::test]
    async fn racing_launchers_get_one_lease() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger =
            std::sync::Arc::new(Ledger::open(&dir.path().display().to_string()).expect("ledger"));
        assert_eq!(racing_winners(ledger, "k").await, 1);
    }
}
