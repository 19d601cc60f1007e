//! Reading a study's attempts.
//!
//! - **Full scan** (no usable index, and `ledger check`): list the arrival
//!   log (`log.rs`), then list every object under `<study>/trials/` and read
//!   every attempt object. Objects named by a log entry but not listed are
//!   *unresolved*: later scans look for them again.
//! - **Indexed scan**: read the compacted index (`index.rs`), list each
//!   open log stream after what the index covers, and read only the objects
//!   named there that the index does not hold, plus the unresolved ones.
//! - **Refresh**: a later scan in the same process starts from what the
//!   previous one knew instead of the index: a launch reads its ledger
//!   once, then only what was written since (by itself or by other
//!   launchers).
//!
//! Why an indexed scan misses nothing that a full scan would see: every
//! attempt and `.void` object is written after a log entry naming it, in
//! a stream whose entries are numbered; a scan lists every stream past the
//! last number up to which it has seen all entries; an entry it has not
//! seen has a larger number. Writers' clocks play no part. Objects written
//! outside this protocol (by hand, by an older tunectl) are seen only by a
//! full scan: `tunectl ledger check`, or any scan once the index is gone.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path as ObjPath;

use super::index::{self, Contents, Unusable, View};
use super::log::{self, Entry, Mark};
use super::records::{self, AttemptRecord, SharedStr};
use super::{CorruptObject, Ledger, LedgerError, Scan};

mod local;

/// `.void` markers: trial key → attempt ids.
type Voids = HashMap<String, HashSet<String>>;

/// Listed log entries: per stream, number → is the end; the objects named;
/// whether every entry could be told.
type Entries = (BTreeMap<String, BTreeMap<u64, bool>>, Vec<String>, bool);

/// What this process knows of a study's attempts.
pub(crate) struct Known {
    pub scan: Arc<Scan>,
    /// Readable records that a `.void` marker discards.
    voided: Vec<Arc<AttemptRecord>>,
    voids: Voids,
    /// Unreadable attempt objects (their bytes were read and are not a
    /// valid record: they stay so).
    corrupt: Vec<CorruptObject>,
    streams: BTreeMap<String, Mark>,
    /// Objects to look for again: named by a log entry and not found, or
    /// found and not readable for a reason that may pass (a store error).
    pub(crate) unresolved: BTreeSet<String>,
    /// Attempt objects read that the stored index does not hold.
    unindexed: usize,
    /// No usable index is stored.
    index_stale: bool,
    /// When this process last wrote the index.
    indexed_at: Option<std::time::Instant>,
}

/// One object read (or looked for).
enum Got {
    Record(Box<AttemptRecord>),
    /// Read, and not a valid attempt record: stays unreadable.
    Corrupt(CorruptObject),
    /// Could not be read now (a store error): reported this time, looked for
    /// again next time.
    Failed(CorruptObject),
    /// A `.void` marker that exists: (trial key, attempt id, object key).
    Void(String, String, String),
    /// Not there (yet).
    Missing(String),
}

/// Makes the records read from objects share what repeats between them,
/// as records read from the index do (see [`records::SharedStr`]): each
/// object read owns its strings and values until it passes through here.
#[derive(Default)]
struct Interner {
    strings: HashSet<SharedStr>,
    values: HashSet<Arc<serde_json::Value>>,
    outputs: HashSet<Arc<BTreeMap<String, String>>>,
}

impl Interner {
    fn string(&mut self, s: &mut SharedStr) {
        match self.strings.get(s.as_str()) {
            Some(have) => *s = have.clone(),
            None => {
                self.strings.insert(s.clone());
            }
        }
    }

    fn shared<T: Eq + std::hash::Hash>(set: &mut HashSet<Arc<T>>, v: &mut Arc<T>) {
        match set.get(v) {
            Some(have) => *v = Arc::clone(have),
            None => {
                set.insert(Arc::clone(v));
            }
        }
    }

    fn record(&mut self, mut r: AttemptRecord) -> AttemptRecord {
        for s in [
            &mut r.tunectl_version,
            &mut r.study_id,
            &mut r.spec_hash,
            &mut r.config_label,
            &mut r.cell_label,
            &mut r.host,
            &mut r.host_class,
            &mut r.fingerprint,
        ] {
            self.string(s);
        }
        if let Some(d) = r.digest.as_mut() {
            self.string(d);
        }
        Self::shared(&mut self.values, &mut r.config);
        Self::shared(&mut self.values, &mut r.cell);
        Self::shared(&mut self.outputs, &mut r.outputs);
        r
    }
}

fn has_void(voids: &Voids, a: &AttemptRecord) -> bool {
    voids
        .get(&a.trial_key)
        .is_some_and(|s| s.contains(&a.attempt_id))
}

fn sort_attempts<T: Borrow<AttemptRecord>>(v: &mut [T]) {
    fn key<T: Borrow<AttemptRecord>>(a: &T) -> (&str, &str) {
        let a = a.borrow();
        (a.trial_key.as_str(), a.attempt_id.as_str())
    }
    let ordered = v.is_sorted_by(|a, b| key(a) <= key(b));
    if !ordered {
        v.sort_by(|a, b| key(a).cmp(&key(b)));
    }
}

/// Add `new` to `v`, both in (trial key, attempt id) order: `new` is
/// sorted, each of its records placed by a binary search, and `v`'s moved
/// once, with no comparison between two of them (a launch's scans add a
/// few records at a time to tens of thousands).
fn merge_sorted<T: Borrow<AttemptRecord>>(v: &mut Vec<T>, mut new: Vec<T>) {
    if new.is_empty() {
        return;
    }
    sort_attempts(&mut new);
    let order = |a: &T, b: &T| {
        let (a, b) = (a.borrow(), b.borrow());
        (&a.trial_key, &a.attempt_id) <= (&b.trial_key, &b.attempt_id)
    };
    if v.last().is_none_or(|last| order(last, &new[0])) {
        v.append(&mut new);
        return;
    }
    let places: Vec<usize> = new
        .iter()
        .map(|n| v.partition_point(|a| order(a, n)))
        .collect();
    let old = std::mem::take(v);
    v.reserve(old.len() + new.len());
    let mut old = old.into_iter();
    let mut taken = 0;
    for (n, place) in new.into_iter().zip(places) {
        v.extend(old.by_ref().take(place - taken));
        taken = place;
        v.push(n);
    }
    v.extend(old);
}

/// `(trial key, file name)` of `<study>/trials/<trial>/<file>`.
fn split_object(key: &str) -> Option<(&str, &str)> {
    let mut parts = key.split('/');
    let (_, _, trial, file) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    parts.next().is_none().then_some((trial, file))
}

impl Known {
    fn assemble(
        records: Vec<Arc<AttemptRecord>>,
        voids: Voids,
        corrupt: Vec<CorruptObject>,
        streams: BTreeMap<String, Mark>,
        unresolved: BTreeSet<String>,
    ) -> Known {
        let (voided, mut attempts): (Vec<_>, Vec<_>) = if voids.is_empty() {
            (Vec::new(), records)
        } else {
            records.into_iter().partition(|a| has_void(&voids, a))
        };
        sort_attempts(&mut attempts);
        let mut corrupt = corrupt;
        corrupt.sort_by(|a, b| a.key.cmp(&b.key));
        Known {
            scan: Arc::new(Scan {
                attempts,
                corrupt: corrupt.clone(),
                voided: voided.len(),
                drops: Vec::new(),
            }),
            voided,
            voids,
            corrupt,
            streams,
            unresolved,
            unindexed: 0,
            index_stale: false,
            indexed_at: None,
        }
    }

    fn from_index(c: Contents) -> Known {
        let mut voids = Voids::new();
        for (t, a) in c.voids {
            voids.entry(t).or_default().insert(a);
        }
        Known::assemble(c.records, voids, c.corrupt, c.streams, c.unresolved)
    }

    fn records(&self) -> usize {
        self.scan.attempts.len() + self.voided.len()
    }

    /// How many records this holds (for `Ledger`'s drop).
    pub(crate) fn len(&self) -> usize {
        self.records()
    }

    /// Every readable attempt record known, voided ones included.
    pub(crate) fn all_records(&self) -> impl Iterator<Item = &AttemptRecord> {
        self.scan.attempts.iter().chain(&self.voided).map(|a| &**a)
    }

    /// Is the object at `key` (`<study>/trials/<trial>/<file>`) known?
    pub(crate) fn holds(&self, key: &str) -> bool {
        let Some((trial, file)) = split_object(key) else {
            return false;
        };
        if let Some(id) = file.strip_suffix(".void") {
            return self.voids.get(trial).is_some_and(|s| s.contains(id));
        }
        let Some(id) = file.strip_suffix(".json") else {
            return false;
        };
        self.scan
            .attempts
            .binary_search_by(|a| (a.trial_key.as_str(), a.attempt_id.as_str()).cmp(&(trial, id)))
            .is_ok()
            || self
                .voided
                .iter()
                .any(|a| a.trial_key == trial && a.attempt_id == id)
            || self.corrupt.iter().any(|c| c.key == key)
    }

    /// Add what a scan read; `failed` are this scan's passing read errors.
    fn merge(&mut self, got: Vec<Got>, drops: Vec<records::DropRecord>) {
        let mut new_records = Vec::new();
        let mut new_voids = Vec::new();
        let mut failed = Vec::new();
        let mut corrupt_changed = false;
        for g in got {
            match g {
                Got::Record(r) => {
                    self.unresolved.remove(&format!(
                        "{}/trials/{}/{}.json",
                        r.study_id, r.trial_key, r.attempt_id
                    ));
                    self.unindexed += 1;
                    new_records.push(*r);
                }
                Got::Corrupt(c) => {
                    self.unresolved.remove(&c.key);
                    self.unindexed += 1;
                    corrupt_changed = true;
                    self.corrupt.push(c);
                }
                Got::Failed(c) => {
                    self.unresolved.insert(c.key.clone());
                    failed.push(c);
                }
                Got::Void(t, a, key) => {
                    self.unresolved.remove(&key);
                    new_voids.push((t, a));
                }
                Got::Missing(key) => {
                    self.unresolved.insert(key);
                }
            }
        }
        if corrupt_changed {
            self.corrupt.sort_by(|a, b| a.key.cmp(&b.key));
        }
        let mut corrupt = self.corrupt.clone();
        corrupt.extend(failed);
        corrupt.sort_by(|a, b| a.key.cmp(&b.key));
        let changed = !new_records.is_empty()
            || !new_voids.is_empty()
            || corrupt.len() != self.scan.corrupt.len()
            || corrupt
                .iter()
                .zip(&self.scan.corrupt)
                .any(|(a, b)| a.key != b.key || a.reason != b.reason)
            || drops != self.scan.drops;
        if !changed {
            return;
        }
        // In place when no one else holds the previous scan.
        let scan = Arc::make_mut(&mut self.scan);
        let voids_came = !new_voids.is_empty();
        for (t, a) in new_voids {
            self.voids.entry(t).or_default().insert(a);
        }
        let mut counted = Vec::with_capacity(new_records.len());
        for r in new_records {
            if has_void(&self.voids, &r) {
                self.voided.push(Arc::new(r));
            } else {
                counted.push(Arc::new(r));
            }
        }
        merge_sorted(&mut scan.attempts, counted);
        // The records held before were checked against the voids known
        // then: only a new void can remove one of them.
        if voids_came {
            let voids = &self.voids;
            let mut now_voided = Vec::new();
            scan.attempts.retain(|a| {
                if has_void(voids, a) {
                    now_voided.push(a.clone());
                    false
                } else {
                    true
                }
            });
            self.voided.extend(now_voided);
        }
        scan.voided = self.voided.len();
        scan.corrupt = corrupt;
        scan.drops = drops;
    }

    fn view(&self) -> View<'_> {
        View {
            streams: &self.streams,
            unresolved: &self.unresolved,
            voids: self
                .voids
                .iter()
                .flat_map(|(t, ids)| ids.iter().map(move |a| (t.as_str(), a.as_str())))
                .collect(),
            corrupt: &self.corrupt,
            records: self.all_records().collect(),
        }
    }
}

/// What a full scan does with a file listed under `<study>/trials/`.
enum Listed<'a> {
    /// A `.void` marker: (trial key, attempt id).
    Void(&'a str, &'a str),
    /// A stored log or other companion of an attempt: not read.
    Companion,
    /// An attempt object (or something else, which reads as unreadable).
    Read,
}

fn listed_as(key: &str) -> Listed<'_> {
    match split_object(key) {
        Some((trial, file)) => match file.strip_suffix(".void") {
            Some(attempt) => Listed::Void(trial, attempt),
            None if !file.ends_with(".json") => Listed::Companion,
            None => Listed::Read,
        },
        None => Listed::Read,
    }
}

/// Is the record stored where its own fields say it belongs
/// (`<study>/trials/<trial_key>/<attempt_id>.json`)?
fn matches_location(key: &ObjPath, rec: &AttemptRecord) -> bool {
    let parts: Vec<String> = key.parts().map(|p| p.as_ref().to_string()).collect();
    parts.len() == 4
        && parts[0] == rec.study_id
        && parts[2] == rec.trial_key
        && parts[3] == format!("{}.json", rec.attempt_id)
}

/// The attempt record stored at `key`, or why it is not one: not a valid
/// record, another schema, or a record whose own fields say it belongs
/// elsewhere (copied under another trial's key). Every reader of attempt
/// objects (scans and the launcher's look at one trial) goes through this,
/// so a misplaced record never stands for the trial it is stored under.
pub(crate) fn check_record(key: &ObjPath, bytes: &[u8]) -> Result<AttemptRecord, String> {
    match serde_json::from_slice::<AttemptRecord>(bytes) {
        Ok(rec) if rec.schema != records::SCHEMA => {
            Err(format!("unsupported schema version {}", rec.schema))
        }
        Ok(rec) if !matches_location(key, &rec) => Err(misplaced_reason(key, &rec)),
        Ok(rec) => Ok(rec),
        Err(e) => Err(format!("not a valid attempt record: {e}")),
    }
}

/// What is wrong with a record stored under another name than its own.
fn misplaced_reason(key: &ObjPath, rec: &AttemptRecord) -> String {
    let own = format!(
        "{}/trials/{}/{}.json",
        rec.study_id, rec.trial_key, rec.attempt_id
    );
    let parts: Vec<&str> = key.as_ref().split('/').collect();
    if parts.get(2).is_some_and(|t| *t != rec.trial_key) {
        format!(
            "misplaced: the record's trial key {} does not match its location (it belongs at {own})",
            rec.trial_key
        )
    } else {
        format!(
            "misplaced: the record's study or attempt id does not match its location (it belongs at {own})"
        )
    }
}

/// A full scan of at least this many objects named by the arrival log says
/// what it is doing (it takes seconds: listing and reading every object).
const LARGE_FULL_SCAN: usize = 10_000;

impl Ledger {
    /// The attempts of a study: from the compacted index plus what was
    /// written since, or from a full scan when there is no usable index.
    /// Later calls in this process read only what was written since the
    /// last one. Unreadable or malformed objects are listed in `corrupt`
    /// and otherwise ignored.
    ///
    /// The records carry everything but the rendered command, the output
    /// tails, the lost reason and the start and finish times (read the
    /// object for those).
    pub async fn scan(&self, study: &str) -> Result<Arc<Scan>, LedgerError> {
        let mut cache = self.known.lock().await;
        let known = match cache.remove(study) {
            Some(k) => self.refresh(study, k).await?,
            None => match self.read_index(study).await {
                Ok(c) => self.refresh(study, Known::from_index(c)).await?,
                Err(Unusable::Missing) => self.full_scan(study).await?,
                Err(Unusable::Invalid(why)) => {
                    tracing::warn!(
                        "ignoring the ledger index {}: {why}; reading every attempt object instead (the index is rewritten)",
                        index::key(study)
                    );
                    self.full_scan(study).await?
                }
            },
        };
        let known = self.keep_index(study, known).await;
        let scan = Arc::clone(&known.scan);
        cache.insert(study.to_string(), known);
        Ok(scan)
    }

    /// Every attempt object listed and read, the index ignored, and the
    /// index rewritten from what was read (`ledger check`).
    pub async fn scan_full(&self, study: &str) -> Result<Arc<Scan>, LedgerError> {
        let mut cache = self.known.lock().await;
        cache.remove(study);
        let known = self.full_scan(study).await?;
        let known = self.keep_index(study, known).await;
        let scan = Arc::clone(&known.scan);
        cache.insert(study.to_string(), known);
        Ok(scan)
    }

    /// How many writers' log streams of `study` the last [`Ledger::scan`]
    /// found not ended: launches writing to it now, or ones that stopped
    /// without ending theirs (killed). 0 before any scan.
    pub async fn open_log_streams(&self, study: &str) -> usize {
        let cache = self.known.lock().await;
        cache
            .get(study)
            .map(|k| k.streams.values().filter(|m| !m.closed).count())
            .unwrap_or(0)
    }

    /// Trial keys that have at least one attempt object, with how many.
    pub async fn trial_keys(&self, study: &str) -> Result<BTreeMap<String, usize>, LedgerError> {
        Ok(self.scan_with_trial_keys(study).await?.1)
    }

    /// [`Ledger::scan`] and [`Ledger::trial_keys`] of one look at the
    /// ledger.
    pub async fn scan_with_trial_keys(
        &self,
        study: &str,
    ) -> Result<(Arc<Scan>, BTreeMap<String, usize>), LedgerError> {
        let scan = self.scan(study).await?;
        let cache = self.known.lock().await;
        let mut out: BTreeMap<String, usize> = BTreeMap::new();
        if let Some(k) = cache.get(study) {
            for a in k.scan.attempts.iter().chain(&k.voided) {
                *out.entry(a.trial_key.clone()).or_insert(0) += 1;
            }
            for c in &k.corrupt {
                if let Some((trial, _)) = split_object(&c.key) {
                    *out.entry(trial.to_string()).or_insert(0) += 1;
                }
            }
        }
        Ok((scan, out))
    }

    /// Write the index when none is usable or it has fallen behind (and the
    /// study is big enough to need one). Best effort: a failed write only
    /// costs time on the next scan.
    ///
    /// Fallen behind: [`index::REBUILD_AFTER`] records that it does not
    /// hold, and either a share of all ([`index::REBUILD_SHARE`]) or
    /// [`index::REBUILD_EVERY`] since this process last wrote it. A launch
    /// that scans at every decision so rewrites the index a number of
    /// times that grows with the log of the study's size (and with its
    /// hours), not with its attempts: each rewrite is the whole index.
    async fn keep_index(&self, study: &str, mut k: Known) -> Known {
        let behind = k.unindexed >= index::REBUILD_AFTER
            && (k.unindexed as f64 >= index::REBUILD_SHARE * k.records() as f64
                || k.indexed_at
                    .is_none_or(|t| t.elapsed() >= index::REBUILD_EVERY));
        if k.records() >= index::index_min() && (k.index_stale || behind) {
            match self.write_index(study, &k.view()).await {
                Ok(()) => {
                    k.index_stale = false;
                    k.unindexed = 0;
                    k.indexed_at = Some(std::time::Instant::now());
                }
                Err(e) => tracing::debug!(error = %e, "cannot write the ledger index"),
            }
        }
        k
    }

    /// Read objects (attempts: GET; voids: HEAD) 32 at a time; the records
    /// share what repeats between them as they arrive.
    async fn fetch(&self, keys: Vec<String>) -> Vec<Got> {
        let mut interner = Interner::default();
        let mut out = Vec::with_capacity(keys.len());
        let mut reads = futures::stream::iter(keys.into_iter().map(|k| async move {
            let key = ObjPath::from(k.as_str());
            if let Some((trial, file)) = split_object(&k)
                && let Some(id) = file.strip_suffix(".void")
            {
                return match self.exists(&key).await {
                    Ok(true) => Got::Void(trial.to_string(), id.to_string(), k.clone()),
                    Ok(false) => Got::Missing(k),
                    Err(e) => Got::Failed(CorruptObject {
                        reason: e.to_string(),
                        key: k,
                    }),
                };
            }
            // An attempt this process created: its bytes as written, read
            // as the object's would be.
            let own = self.written.lock().ok().and_then(|mut w| w.remove(&k));
            let read = match own {
                Some(bytes) => Ok(Some(bytes.into())),
                None => self.get_bytes(&key).await,
            };
            match read {
                Ok(Some(bytes)) => match check_record(&key, &bytes) {
                    Ok(rec) => Got::Record(Box::new(index::slim(rec))),
                    Err(reason) => Got::Corrupt(CorruptObject { key: k, reason }),
                },
                Ok(None) => Got::Missing(k),
                Err(e) => Got::Failed(CorruptObject {
                    key: k,
                    reason: e.to_string(),
                }),
            }
        }))
        .buffer_unordered(32);
        while let Some(got) = reads.next().await {
            out.push(match got {
                Got::Record(r) => Got::Record(Box::new(interner.record(*r))),
                other => other,
            });
        }
        out
    }

    /// Every object key under `<study>/trials/`, the attempt records read
    /// among them (see [`listed_as`]), and what else reading them found. A
    /// local ledger is walked and read with plain file reads on threads of
    /// its own (`local.rs`); any other store is listed, then read 32
    /// objects at a time.
    async fn list_and_read_trials(
        &self,
        study: &str,
    ) -> Result<(Vec<String>, Vec<Arc<AttemptRecord>>, Vec<Got>), LedgerError> {
        let reads = |k: &str| matches!(listed_as(k), Listed::Read);
        if let Some(root) = &self.local_root {
            let (root, owned, url) = (root.clone(), study.to_string(), self.url.clone());
            let (keys, records, got) =
                tokio::task::spawn_blocking(move || local::read_trials(&root, &owned, &url, reads))
                    .await
                    .map_err(|e| LedgerError::Io {
                        url: self.url.clone(),
                        op: "list",
                        key: format!("{study}/trials"),
                        message: e.to_string(),
                    })??;
            // Each worker shared what repeats among its own records; one
            // pass here makes every record share with all the others.
            let mut interner = Interner::default();
            // Each record moved out of its allocation and into a new one
            // in turn: never a second copy of them all.
            let records = records
                .into_iter()
                .map(|r| Arc::new(interner.record(Arc::unwrap_or_clone(r))))
                .collect();
            return Ok((keys, records, got));
        }
        let all: Vec<String> = self
            .list(&ObjPath::from(format!("{study}/trials")))
            .await?
            .into_iter()
            .map(|k| k.as_ref().to_string())
            .collect();
        let keys = all.iter().filter(|k| reads(k)).cloned().collect();
        let mut records = Vec::new();
        let mut other = Vec::new();
        for g in self.fetch(keys).await {
            match g {
                Got::Record(r) => records.push(Arc::new(*r)),
                g => other.push(g),
            }
        }
        Ok((all, records, other))
    }

    /// Entries of the arrival log listed from `keys`: per stream, the
    /// numbers seen (and which is the end), and the objects named; `false`
    /// when an entry names nothing tunectl can tell (not written by
    /// tunectl): only a full scan covers what it might have meant.
    async fn entries(&self, study: &str, keys: Vec<ObjPath>) -> Result<Entries, LedgerError> {
        let mut numbers: BTreeMap<String, BTreeMap<u64, bool>> = BTreeMap::new();
        let mut objects = Vec::new();
        let mut sound = true;
        for k in keys {
            let Some((stream, n, entry)) = log::parse(study, &k) else {
                continue;
            };
            numbers
                .entry(stream)
                .or_default()
                .insert(n, entry == Entry::End);
            match entry {
                Entry::Object(o) => objects.push(o),
                Entry::End => {}
                Entry::Unparsed(key) => match self.entry_object(study, &key).await? {
                    Some(o) => objects.push(o),
                    None => {
                        tracing::warn!(
                            "the ledger log entry {key} names no attempt object; reading every attempt object instead"
                        );
                        sound = false;
                    }
                },
            }
        }
        Ok((numbers, objects, sound))
    }

    /// List every object of the study and read every attempt object.
    async fn full_scan(&self, study: &str) -> Result<Known, LedgerError> {
        // The log first: an entry created after this listing has a number
        // above the marks computed here, and an entry listed here whose
        // object the walk below does not find is looked for again later.
        let listed = self.log_all(study).await?;
        // An entry that names nothing counts for its stream's mark: this
        // scan lists every object anyway.
        let (numbers, named, _) = self.entries(study, listed).await?;
        if named.len() >= LARGE_FULL_SCAN {
            tracing::warn!(
                "study {study}: no usable ledger index; reading its {} attempt objects (this read writes the index, and later reads use it)",
                named.len()
            );
        }
        let streams: BTreeMap<String, Mark> = numbers
            .iter()
            .map(|(s, ns)| (s.clone(), log::advance(Mark::default(), ns)))
            .collect();

        let (all, mut records, got) = self.list_and_read_trials(study).await?;
        let mut voids = Voids::new();
        let mut present: HashSet<String> = HashSet::new();
        for text in all {
            match listed_as(&text) {
                Listed::Void(trial, attempt) => {
                    voids
                        .entry(trial.to_string())
                        .or_default()
                        .insert(attempt.to_string());
                }
                Listed::Companion => continue,
                Listed::Read => {}
            }
            present.insert(text);
        }
        let mut corrupt = Vec::new();
        let mut unresolved: BTreeSet<String> =
            named.into_iter().filter(|o| !present.contains(o)).collect();
        let mut failed = Vec::new();
        for g in got {
            match g {
                Got::Record(r) => records.push(Arc::new(*r)),
                Got::Corrupt(c) => corrupt.push(c),
                Got::Failed(c) => {
                    unresolved.insert(c.key.clone());
                    failed.push(c);
                }
                // Listed, then gone: looked for again.
                Got::Missing(k) => {
                    unresolved.insert(k);
                }
                Got::Void(..) => {}
            }
        }
        let read = records.len() + corrupt.len();
        let mut k = Known::assemble(records, voids, corrupt, streams, unresolved);
        k.unindexed = read;
        k.index_stale = true;
        let drops = self.drops(study).await?;
        let scan = Arc::make_mut(&mut k.scan);
        scan.corrupt.extend(failed);
        scan.corrupt.sort_by(|a, b| a.key.cmp(&b.key));
        scan.drops = drops;
        Ok(k)
    }

    /// Bring `k` up to date: list each open log stream after its mark, read
    /// the objects named there that `k` does not hold, and look again for
    /// the unresolved ones.
    async fn refresh(&self, study: &str, mut k: Known) -> Result<Known, LedgerError> {
        let open: Vec<(String, Mark)> = self
            .log_streams(study)
            .await?
            .into_iter()
            .map(|s| {
                let m = k.streams.get(&s).copied().unwrap_or_default();
                (s, m)
            })
            .filter(|(_, m)| !m.closed)
            .collect();
        let lists: Vec<Result<Vec<ObjPath>, LedgerError>> = futures::stream::iter(
            open.iter()
                .map(|(s, m)| self.log_entries(study, s, m.through)),
        )
        .buffer_unordered(16)
        .collect()
        .await;
        let mut keys = Vec::new();
        for l in lists {
            keys.extend(l?);
        }
        let (numbers, named, sound) = self.entries(study, keys).await?;
        if !sound {
            return self.full_scan(study).await;
        }
        for (s, ns) in &numbers {
            let m = k.streams.get(s).copied().unwrap_or_default();
            k.streams.insert(s.clone(), log::advance(m, ns));
        }
        let mut wanted: BTreeSet<String> = named.into_iter().filter(|o| !k.holds(o)).collect();
        wanted.extend(k.unresolved.iter().cloned());
        let got = if wanted.is_empty() {
            Vec::new()
        } else {
            self.fetch(wanted.into_iter().collect()).await
        };
        let drops = self.drops(study).await?;
        k.merge(got, drops);
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;

    const S: &str = "st";

    fn rec(trial: &str, id: &str, status: &str) -> AttemptRecord {
        serde_json::from_value(serde_json::json!({
            "schema": 1, "tunectl_version": "t", "study_id": S, "spec_hash": "h",
            "trial_key": trial, "attempt_id": id, "config": {"a": 1},
            "config_label": "a=1", "config_index": 1, "is_baseline": false,
            "cell": {}, "cell_label": "(single cell)", "cell_index": 0, "repeat": 0,
            "fidelity": null, "host": "h", "host_class": "hc", "fingerprint": "fp",
            "slot": 0, "started_at": "s", "finished_at": "f", "duration_s": 1.0,
            "run_s": 1.0, "warmup_runs": 0, "status": status, "failure": null,
            "exit": null, "metrics": {"t": [1.0]}, "digest": null, "outputs": {},
            "command": "c", "stdout_tail": "o", "stderr_tail": "e"
        }))
        .expect("record")
    }

    fn trial(n: u8) -> String {
        format!("{n:02x}").repeat(32)
    }

    fn ids(scan: &Scan) -> Vec<(String, String)> {
        scan.attempts
            .iter()
            .map(|a| (a.trial_key.clone(), a.attempt_id.clone()))
            .collect()
    }

    /// Write the index from what `l` knows now.
    async fn compact(l: &Ledger) {
        l.scan(S).await.expect("scan");
        let cache = l.known.lock().await;
        let k = cache.get(S).expect("known");
        l.write_index(S, &k.view()).await.expect("write index");
    }

    /// A new reader that starts from the index (asserts it did).
    async fn fresh(dir: &std::path::Path) -> Arc<Scan> {
        let l = Ledger::open(&dir.display().to_string()).expect("open");
        assert!(l.read_index(S).await.is_ok(), "no usable index");
        let scan = l.scan(S).await.expect("scan");
        let cache = l.known.lock().await;
        assert!(!cache[S].index_stale, "the reader did not use the index");
        scan
    }

    #[tokio::test]
    async fn writes_after_the_index_are_seen_whatever_their_ids() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let a = Ledger::open(&url).expect("open");
        for n in 1..=3 {
            a.write_attempt(&rec(&trial(n), "20260101T000000.000000Z-01", "ok"))
                .await
                .expect("write");
        }
        let reader = Ledger::open(&url).expect("open");
        compact(&reader).await;
        // Another launcher, and this one with its clock 27 years behind.
        let b = Ledger::open(&url).expect("open");
        b.write_attempt(&rec(&trial(4), "20260101T000000.000000Z-02", "ok"))
            .await
            .expect("write");
        a.write_attempt(&rec(&trial(1), "19990101T000000.000000Z-00", "failed"))
            .await
            .expect("write");
        let scan = fresh(dir.path()).await;
        assert_eq!(scan.attempts.len(), 5);
        assert_eq!(
            scan.terminal()[trial(1).as_str()].attempt_id,
            "19990101T000000.000000Z-00"
        );
        // The reader that wrote the index sees them too (refresh).
        let again = reader.scan(S).await.expect("scan");
        assert_eq!(ids(&again), ids(&scan));
        // And what a full scan sees.
        let full = Ledger::open(&url).expect("open");
        assert_eq!(ids(&full.scan_full(S).await.expect("full")), ids(&scan));
        // Scanned records are slim, from the index or not.
        assert!(
            scan.attempts
                .iter()
                .all(|a| a.command.is_empty() && a.stdout_tail.is_empty())
        );
    }

    /// Records read from the objects (a full scan) and from the index agree
    /// field for field, and both share what repeats between attempts: one
    /// allocation per distinct config, cell, label, host and class, not one
    /// per attempt.
    #[tokio::test]
    async fn objects_and_index_give_the_same_shared_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let a = Ledger::open(&url).expect("open");
        for n in 0..48u8 {
            let status = if n % 7 == 0 { "failed" } else { "ok" };
            let mut r = rec(
                &trial(n),
                &format!("20260101T000000.000000Z-{n:02}"),
                status,
            );
            r.config = Arc::new(serde_json::json!({"a": n % 3, "b": ["x", n % 3 == 1]}));
            r.config_index = u64::from(n % 3);
            r.config_label = format!("a={}", n % 3).into();
            r.host = format!("h{}", n % 2).into();
            r.digest = Some(format!("d{}", n % 4).into());
            r.metrics.insert("t", vec![f64::from(n), 1.5]);
            a.write_attempt(&r).await.expect("write");
        }
        let full = Ledger::open(&url).expect("open");
        let objects = full.scan_full(S).await.expect("full scan");
        compact(&full).await;
        let indexed = fresh(dir.path()).await;
        assert_eq!(objects.attempts.len(), 48);
        let json = |s: &Scan| -> Vec<serde_json::Value> {
            s.attempts
                .iter()
                .map(|a| serde_json::to_value(a).expect("json"))
                .collect()
        };
        assert_eq!(json(&objects), json(&indexed));
        for scan in [&objects, &indexed] {
            let first = |i: u64| {
                scan.attempts
                    .iter()
                    .find(|a| a.config_index == i)
                    .expect("config")
            };
            for x in &scan.attempts {
                let f = first(x.config_index);
                assert!(Arc::ptr_eq(&x.config, &f.config));
                assert!(std::ptr::eq(
                    x.config_label.as_str(),
                    f.config_label.as_str()
                ));
                let c = &scan.attempts[0];
                assert!(Arc::ptr_eq(&x.cell, &c.cell));
                assert!(Arc::ptr_eq(&x.outputs, &c.outputs));
                assert!(std::ptr::eq(x.host_class.as_str(), c.host_class.as_str()));
                assert!(std::ptr::eq(x.spec_hash.as_str(), c.spec_hash.as_str()));
            }
            let hosts: HashSet<*const u8> = scan.attempts.iter().map(|a| a.host.as_ptr()).collect();
            assert_eq!(hosts.len(), 2);
        }
    }

    #[tokio::test]
    async fn an_entry_whose_object_is_not_there_yet_is_looked_for_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let a = Ledger::open(&url).expect("open");
        a.write_attempt(&rec(&trial(1), "20260101T000000.000000Z-01", "ok"))
            .await
            .expect("write");
        // A writer that created the entry and has not written the object
        // (slow, or killed in between).
        let late = rec(&trial(2), "20260101T000000.000000Z-02", "ok");
        a.log_object(S, &late.trial_key, "20260101T000000.000000Z-02.json")
            .await
            .expect("entry");
        let reader = Ledger::open(&url).expect("open");
        compact(&reader).await;
        assert_eq!(reader.scan(S).await.expect("scan").attempts.len(), 1);
        let key = format!(
            "{S}/trials/{}/20260101T000000.000000Z-02.json",
            late.trial_key
        );
        assert!(reader.known.lock().await[S].unresolved.contains(&key));
        // The object lands.
        a.store
            .put(
                &ObjPath::from(key.as_str()),
                PutPayload::from(serde_json::to_vec(&late).expect("json")),
            )
            .await
            .expect("put");
        assert_eq!(fresh(dir.path()).await.attempts.len(), 2);
        assert_eq!(reader.scan(S).await.expect("scan").attempts.len(), 2);
        assert!(reader.known.lock().await[S].unresolved.is_empty());
    }

    #[tokio::test]
    async fn a_number_not_seen_holds_the_mark_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let a = Ledger::open(&url).expect("open");
        a.write_attempt(&rec(&trial(1), "20260101T000000.000000Z-01", "ok"))
            .await
            .expect("write");
        a.write_attempt(&rec(&trial(2), "20260101T000000.000000Z-02", "ok"))
            .await
            .expect("write");
        // Number 3 is taken by a write still in flight; 4 lands first.
        let (stream, three) = a.next_entry(S);
        assert_eq!(three, 3);
        a.write_attempt(&rec(&trial(4), "20260101T000000.000000Z-04", "ok"))
            .await
            .expect("write");
        let reader = Ledger::open(&url).expect("open");
        compact(&reader).await;
        assert_eq!(reader.known.lock().await[S].streams[&stream].through, 2);
        // Entry 3 and its object land after the index was written.
        let r3 = rec(&trial(3), "20260101T000000.000000Z-03", "ok");
        let entry = format!(
            "{S}/log/{stream}/000000000003-{}-20260101T000000.000000Z-03.json",
            r3.trial_key
        );
        a.create(&ObjPath::from(entry), b"{}".to_vec())
            .await
            .expect("entry");
        a.store
            .put(
                &ObjPath::from(format!(
                    "{S}/trials/{}/20260101T000000.000000Z-03.json",
                    r3.trial_key
                )),
                PutPayload::from(serde_json::to_vec(&r3).expect("json")),
            )
            .await
            .expect("put");
        assert_eq!(fresh(dir.path()).await.attempts.len(), 4);
        a.close_log(S).await;
        let scan = reader.scan(S).await.expect("scan");
        assert_eq!(scan.attempts.len(), 4);
        let mark = reader.known.lock().await[S].streams[&stream];
        assert_eq!(
            mark,
            Mark {
                through: 5,
                closed: true
            }
        );
    }

    #[tokio::test]
    async fn a_reader_counts_the_log_streams_their_writers_have_not_ended() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let reader = Ledger::open(&url).expect("open");
        assert_eq!(reader.open_log_streams(S).await, 0);
        let a = Ledger::open(&url).expect("open");
        let b = Ledger::open(&url).expect("open");
        a.write_attempt(&rec(&trial(1), "20260101T000000.000000Z-01", "ok"))
            .await
            .expect("write");
        b.write_attempt(&rec(&trial(2), "20260101T000000.000000Z-02", "ok"))
            .await
            .expect("write");
        reader.scan(S).await.expect("scan");
        assert_eq!(reader.open_log_streams(S).await, 2);
        a.close_log(S).await;
        reader.scan(S).await.expect("scan");
        assert_eq!(reader.open_log_streams(S).await, 1);
        b.close_log(S).await;
        reader.scan(S).await.expect("scan");
        assert_eq!(reader.open_log_streams(S).await, 0);
        // A reader that starts now, from whatever the index holds.
        let fresh = Ledger::open(&url).expect("open");
        fresh.scan(S).await.expect("scan");
        assert_eq!(fresh.open_log_streams(S).await, 0);
    }

    #[tokio::test]
    async fn a_void_written_after_the_index_discards_its_attempt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let a = Ledger::open(&url).expect("open");
        for n in 1..=2 {
            a.write_attempt(&rec(&trial(n), "20260101T000000.000000Z-01", "ok"))
                .await
                .expect("write");
        }
        let reader = Ledger::open(&url).expect("open");
        compact(&reader).await;
        a.write_void(
            S,
            &records::VoidRecord {
                schema: 1,
                trial_key: trial(2),
                attempt_id: "20260101T000000.000000Z-01".into(),
                reason: "drift".into(),
                at: "now".into(),
            },
        )
        .await
        .expect("void");
        let scan = fresh(dir.path()).await;
        assert_eq!((scan.attempts.len(), scan.voided), (1, 1));
        let again = reader.scan(S).await.expect("scan");
        assert_eq!((again.attempts.len(), again.voided), (1, 1));
    }

    #[tokio::test]
    async fn an_entry_that_names_nothing_costs_one_full_scan() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let a = Ledger::open(&url).expect("open");
        a.write_attempt(&rec(&trial(1), "20260101T000000.000000Z-01", "ok"))
            .await
            .expect("write");
        compact(&Ledger::open(&url).expect("open")).await;
        // Not written by tunectl: a name that does not parse, a body that
        // names nothing. Then an attempt written without an entry (outside
        // the protocol), which only a full scan sees.
        a.store
            .put(
                &ObjPath::from(format!("{S}/log/zz/000000000001-what")),
                PutPayload::from(b"{}".to_vec()),
            )
            .await
            .expect("put");
        let hidden = rec(&trial(2), "20260101T000000.000000Z-02", "ok");
        a.store
            .put(
                &ObjPath::from(format!(
                    "{S}/trials/{}/20260101T000000.000000Z-02.json",
                    hidden.trial_key
                )),
                PutPayload::from(serde_json::to_vec(&hidden).expect("json")),
            )
            .await
            .expect("put");
        let reader = Ledger::open(&url).expect("open");
        assert_eq!(reader.scan(S).await.expect("scan").attempts.len(), 2);
        assert_eq!(reader.known.lock().await[S].streams["zz"].through, 1);
        compact(&reader).await;
        // Past it: the next reader does not scan everything again (so it
        // does not see another object written outside the protocol).
        let hidden = rec(&trial(3), "20260101T000000.000000Z-03", "ok");
        a.store
            .put(
                &ObjPath::from(format!(
                    "{S}/trials/{}/20260101T000000.000000Z-03.json",
                    hidden.trial_key
                )),
                PutPayload::from(serde_json::to_vec(&hidden).expect("json")),
            )
            .await
            .expect("put");
        assert_eq!(fresh(dir.path()).await.attempts.len(), 2);
        // A full scan (ledger check) does.
        let full = Ledger::open(&url).expect("open");
        assert_eq!(full.scan_full(S).await.expect("full").attempts.len(), 3);
    }

    #[tokio::test]
    async fn check_names_objects_the_log_or_the_index_hold_that_are_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let a = Ledger::open(&url).expect("open");
        for n in 1..=3 {
            a.write_attempt(&rec(&trial(n), "20260101T000000.000000Z-01", "ok"))
                .await
                .expect("write");
        }
        compact(&Ledger::open(&url).expect("open")).await;
        let object = |n: u8| format!("{S}/trials/{}/20260101T000000.000000Z-01.json", trial(n));
        let clean = Ledger::open(&url).expect("open");
        assert!(
            clean
                .check_study(S)
                .await
                .expect("check")
                .missing
                .is_empty()
        );
        // One object deleted (its log entry stays); another deleted with
        // the whole log, so only the index still knows it.
        let full = Ledger::open(&url).expect("open");
        compact(&full).await;
        std::fs::remove_file(dir.path().join(object(1))).expect("rm");
        let checked = full.check_study(S).await.expect("check");
        let named: Vec<(&str, bool)> = checked
            .missing
            .iter()
            .map(|c| (c.key.as_str(), c.reason.contains("arrival log")))
            .collect();
        assert_eq!(named, vec![(object(1).as_str(), true)]);
        // (An indexed scan does not see deletions: the index keeps object 1.)
        compact(&Ledger::open(&url).expect("open")).await;
        std::fs::remove_dir_all(dir.path().join(S).join("log")).expect("rm log");
        std::fs::remove_file(dir.path().join(object(2))).expect("rm");
        let checked = Ledger::open(&url)
            .expect("open")
            .check_study(S)
            .await
            .expect("check");
        let named: Vec<(&str, bool)> = checked
            .missing
            .iter()
            .map(|c| (c.key.as_str(), c.reason.contains("index")))
            .collect();
        assert_eq!(
            named,
            vec![(object(1).as_str(), true), (object(2).as_str(), true)],
            "{checked:?}"
        );
        assert_eq!(checked.scan.attempts.len(), 1);
    }

    /// A launch's scans read the attempts it wrote from the bytes it wrote
    /// (no request each), and find them as another process reading the
    /// store does.
    #[tokio::test]
    async fn a_scan_reads_its_own_process_attempts_without_a_request() {
        use std::sync::atomic::Ordering::Relaxed;
        let store = Arc::new(crate::ledger::test_store::Listing::new(false));
        let writer = Ledger::over_store(store.clone(), "mem://");
        for i in 0..3 {
            writer
                .write_attempt(&rec(&trial(i), "a", "ok"))
                .await
                .expect("write");
        }
        store.gets.store(0, Relaxed);
        let own = writer.scan(S).await.expect("scan");
        let own_gets = store.gets.swap(0, Relaxed);
        let other = Ledger::over_store(store.clone(), "mem://")
            .scan(S)
            .await
            .expect("scan");
        let other_gets = store.gets.load(Relaxed);
        assert_eq!(own.attempts.len(), 3);
        assert_eq!(other_gets, own_gets + 3, "{own_gets} {other_gets}");
        let json = |s: &Scan| serde_json::to_string(&s.attempts).expect("json");
        assert_eq!(json(&own), json(&other));
        // Read once: a later write is read the same way, the earlier
        // ones are not kept.
        writer
            .write_attempt(&rec(&trial(9), "b", "ok"))
            .await
            .expect("write");
        assert_eq!(writer.written.lock().expect("lock").len(), 1);
        assert_eq!(writer.scan(S).await.expect("scan").attempts.len(), 4);
        assert!(writer.written.lock().expect("lock").is_empty());
    }

    /// Records merged a few at a time, in any order, anywhere among those
    /// held: the same order as sorting them all.
    #[test]
    fn records_merged_in_are_in_key_order() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut held: Vec<AttemptRecord> = Vec::new();
        let mut all: Vec<AttemptRecord> = Vec::new();
        for round in 0..60 {
            let n = [0, 1, 2, 5, 40][round % 5];
            let new: Vec<AttemptRecord> = (0..n)
                .map(|_| {
                    let t = rng.random_range(0..30u8);
                    let a = rng.random_range(0..1000u32);
                    rec(&trial(t), &format!("{a:04}"), "ok")
                })
                .collect();
            all.extend(new.iter().cloned());
            merge_sorted(&mut held, new);
            let mut want = all.clone();
            sort_attempts(&mut want);
            let ids = |v: &[AttemptRecord]| -> Vec<(String, String)> {
                v.iter()
                    .map(|a| (a.trial_key.clone(), a.attempt_id.clone()))
                    .collect()
            };
            assert_eq!(ids(&held), ids(&want), "round {round}");
        }
    }

    #[test]
    fn terminal_ignores_the_order_of_the_attempts() {
        let mut attempts = vec![
            rec(&trial(1), "b", "ok"),
            rec(&trial(2), "a", "lost"),
            rec(&trial(1), "a", "failed"),
            rec(&trial(2), "b", "ok"),
            rec(&trial(1), "0", "lost"),
        ];
        let unordered = Scan {
            attempts: crate::ledger::shared(attempts.clone()),
            ..Default::default()
        };
        sort_attempts(&mut attempts);
        let ordered = Scan {
            attempts: crate::ledger::shared(attempts),
            ..Default::default()
        };
        let t = |s: &Scan| -> Vec<(String, String)> {
            s.terminal()
                .into_iter()
                .map(|(k, a)| (k.to_string(), a.attempt_id.clone()))
                .collect()
        };
        assert_eq!(t(&unordered), t(&ordered));
        assert_eq!(
            t(&ordered),
            vec![(trial(1), "a".to_string()), (trial(2), "b".to_string())]
        );
        let b = |s: &Scan| -> Vec<(String, Vec<String>)> {
            s.by_trial()
                .into_iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        v.iter().map(|a| a.attempt_id.clone()).collect(),
                    )
                })
                .collect()
        };
        assert_eq!(b(&unordered), b(&ordered));
        // The first attempts are by_trial's first entries, in any order.
        let f = |s: &Scan| -> Vec<(String, String)> {
            s.first_attempts()
                .into_iter()
                .map(|(k, a)| (k.to_string(), a.attempt_id.clone()))
                .collect()
        };
        let firsts: Vec<(String, String)> = b(&ordered)
            .into_iter()
            .map(|(k, v)| (k, v[0].clone()))
            .collect();
        assert_eq!(f(&unordered), firsts);
        assert_eq!(f(&ordered), firsts);
        // Both in one pass, as status takes them.
        for s in [&unordered, &ordered] {
            let (first, terminal) = s.first_and_terminal();
            let ids = |m: crate::ledger::Firsts| -> Vec<(String, String)> {
                m.into_iter()
                    .map(|(k, a)| (k.to_string(), a.attempt_id.clone()))
                    .collect()
            };
            assert_eq!(ids(first), firsts);
            assert_eq!(ids(terminal), t(&ordered));
        }
    }

    /// The plain-file walk of a local ledger (`local.rs`) finds and reads
    /// what the object store's own listing and reads find, odd files
    /// included: a `.void` marker, a companion log, a staging file, an
    /// unreadable object, a record copied under another trial's key, a
    /// file directly under `trials/`, one nested deeper, and a trial
    /// directory reached through a symbolic link.
    #[tokio::test]
    async fn a_local_walk_finds_what_the_store_listing_finds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().display().to_string();
        let a = Ledger::open(&url).expect("open");
        for n in 1..=4u8 {
            let status = if n == 3 { "failed" } else { "ok" };
            a.write_attempt(&rec(
                &trial(n),
                &format!("20260101T000000.000000Z-0{n}"),
                status,
            ))
            .await
            .expect("write");
        }
        a.write_void(
            S,
            &records::VoidRecord {
                schema: 1,
                trial_key: trial(2),
                attempt_id: "20260101T000000.000000Z-02".into(),
                reason: "drift".into(),
                at: "now".into(),
            },
        )
        .await
        .expect("void");
        let trials = dir.path().join(S).join("trials");
        let put = |rel: &str, body: &[u8]| {
            let p = trials.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, body).expect("write");
        };
        put(&format!("{}/x.log", trial(1)), b"a companion");
        put(&format!("{}/y.json#7", trial(1)), b"a staging file");
        put("staged.json#12", b"a staging file, read if it were listed");
        put(&format!("{}/bad.json", trial(5)), b"{not json");
        let copied = std::fs::read(
            trials
                .join(trial(1))
                .join("20260101T000000.000000Z-01.json"),
        )
        .expect("read");
        put(
            &format!("{}/20260101T000000.000000Z-01.json", trial(6)),
            &copied,
        );
        put("loose.json", b"{}");
        put(&format!("{}/deeper/z.json", trial(4)), b"{}");
        // A trial directory elsewhere, linked in.
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let linked = elsewhere.path().join(trial(7));
        std::fs::create_dir_all(&linked).expect("mkdir");
        let mut r7 = rec(&trial(7), "20260101T000000.000000Z-07", "ok");
        r7.metrics.insert("t", vec![7.0]);
        std::fs::write(
            linked.join("20260101T000000.000000Z-07.json"),
            serde_json::to_vec_pretty(&r7).expect("json"),
        )
        .expect("write");
        std::os::unix::fs::symlink(&linked, trials.join(trial(7))).expect("symlink");

        let walked = Ledger::open(&url).expect("open");
        assert!(walked.local_root.is_some());
        let walked = walked.scan_full(S).await.expect("walk");
        let store =
            object_store::local::LocalFileSystem::new_with_prefix(dir.path()).expect("store");
        let listed = Ledger::with_store(Arc::new(store), url.clone());
        let listed = listed.scan_full(S).await.expect("listing");

        assert_eq!(ids(&walked), ids(&listed));
        assert_eq!(
            ids(&walked),
            [1u8, 3, 4, 7]
                .iter()
                .map(|n| (trial(*n), format!("20260101T000000.000000Z-0{n}")))
                .collect::<Vec<_>>()
        );
        assert_eq!((walked.voided, listed.voided), (1, 1));
        let corrupt = |s: &Scan| -> Vec<(String, String)> {
            s.corrupt
                .iter()
                .map(|c| (c.key.clone(), c.reason.clone()))
                .collect()
        };
        assert_eq!(corrupt(&walked), corrupt(&listed));
        let keys: Vec<String> = walked.corrupt.iter().map(|c| c.key.clone()).collect();
        assert_eq!(
            keys,
            vec![
                format!("{S}/trials/{}/deeper/z.json", trial(4)),
                format!("{S}/trials/{}/bad.json", trial(5)),
                format!("{S}/trials/{}/20260101T000000.000000Z-01.json", trial(6)),
                format!("{S}/trials/loose.json"),
            ]
        );
        // Field for field, the records agree.
        for (w, l) in walked.attempts.iter().zip(&listed.attempts) {
            assert_eq!(
                serde_json::to_value(w).expect("json"),
                serde_json::to_value(l).expect("json")
            );
        }
    }
}
