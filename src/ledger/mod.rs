//! The ledger: append-only objects on an object store (a local directory,
//! S3, GCS or Azure), in the layout of docs/ledger.md (an overview is in
//! docs/design.md). Every attempt is one immutable object written as soon
//! as the attempt ends and never rewritten; only derived objects (plans,
//! verdicts, the index) are overwritten, and only leases are deleted. A
//! corrupt object is reported by name and ignored, never fatal.
//!
//! ```text
//! <study>/study.json
//! <study>/hosts/<host>/<fp-hash>.json
//! <study>/trials/<trial-key>/<attempt>.json
//! <study>/trials/<trial-key>/<attempt>.void                voids that attempt (drift)
//! <study>/drops/<class>/<cell-hash>-<host>.json
//! <study>/plan/<class>/<cell-index>.json                   derived
//! <study>/verdicts/<class>/<bucket>.json                   derived
//! <study>/leases/<trial-key>.<generation>.json             lease.rs
//! <study>/log/<stream>/<n>-<trial-key>-<attempt>.json      written before the attempt (log.rs)
//! <study>/index/compact.json                               derived (index.rs, scan.rs)
//! <study>/checkpoints/<key>.tar, <key>.json                a rung's committed state (checkpoint.rs)
//! ```
//!
//! docs/ledger.md has the whole layout and how scans read it.

pub mod check;
pub mod checkpoint;
pub mod index;
pub mod lease;
pub mod liveness;
mod local;
pub mod log;
pub mod records;
pub mod scan;
#[cfg(test)]
pub(crate) mod test_store;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

pub use records::{
    AttemptRecord, AttemptStatus, DropRecord, HostRecord, PlanRecord, StudyRecord, VoidRecord,
};

/// The most bytes read of a ledger object, by its kind (its key's second
/// part): leases, arrival-log entries, attempt records (`trials/`), the
/// index, and every other record (docs/security.md lists the values).
pub fn read_cap(key: &ObjPath) -> u64 {
    use crate::safe_read::{
        MAX_ATTEMPT_BYTES, MAX_INDEX_BYTES, MAX_LEASE_BYTES, MAX_LOG_ENTRY_BYTES, MAX_RECORD_BYTES,
    };
    match key.parts().nth(1).as_ref().map(|p| p.as_ref()) {
        Some("leases") | Some("launchers") => MAX_LEASE_BYTES,
        Some("log") => MAX_LOG_ENTRY_BYTES,
        Some("trials") => MAX_ATTEMPT_BYTES,
        Some("index") => MAX_INDEX_BYTES,
        _ => MAX_RECORD_BYTES,
    }
}

/// Default ledger root, relative to the working directory.
pub const DEFAULT_LEDGER: &str = "ledgers";

/// Tries of each write of an attempt record (its log entry, its object),
/// whatever the error: 0.1 s, 0.3 s, 0.9 s and 2.7 s apart, 4 s in all.
pub const ATTEMPT_WRITE_TRIES: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger `{url}`: {message}")]
    Open { url: String, message: String },
    #[error("ledger `{url}`: {op} `{key}` failed: {message}")]
    Io {
        url: String,
        op: &'static str,
        key: String,
        message: String,
    },
}

/// An object that could not be read as what its key says it is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CorruptObject {
    pub key: String,
    pub reason: String,
}

pub struct Ledger {
    store: Arc<dyn ObjectStore>,
    /// The URL as shown to people (credentials removed).
    url: String,
    /// Per study: what the last scan in this process knew (`scan.rs`).
    known: tokio::sync::Mutex<HashMap<String, scan::Known>>,
    /// Per study: this process's log stream (`log.rs`).
    streams: std::sync::Mutex<HashMap<String, log::Writer>>,
    /// The directory of a local ledger: its log is listed by name alone.
    local_root: Option<std::path::PathBuf>,
    /// Host records read in this process, by key: each is created once and
    /// never rewritten, so a key read once is not read again.
    host_records: std::sync::Mutex<HashMap<String, HostRecord>>,
    /// Attempt records this process created, as written, by key, until a
    /// scan of this process reads them (from these bytes, not the store):
    /// at most [`WRITTEN_KEPT`].
    written: std::sync::Mutex<HashMap<String, Vec<u8>>>,
    /// Lease generations given up with their attempt's record, not yet
    /// deleted: a store's releases go out together, in one bulk delete
    /// ([`Ledger::flush_releases`]).
    released: std::sync::Mutex<Vec<ObjPath>>,
}

/// How many attempt records [`Ledger`] keeps for its own next scan; past
/// that, the scan reads them from the store.
const WRITTEN_KEPT: usize = 4096;

/// The most keys one bulk delete takes (S3's `DeleteObjects`).
const RELEASE_BATCH_KEYS: usize = 1000;

/// The attempts of one study as found in the ledger (see `scan.rs`).
#[derive(Debug, Default, Clone)]
pub struct Scan {
    /// Attempts that count (voided ones removed), ordered by (trial key,
    /// attempt id). From an index or a scan, records carry no rendered
    /// command, output tails, lost reason or start and finish times.
    pub attempts: Vec<std::sync::Arc<AttemptRecord>>,
    pub corrupt: Vec<CorruptObject>,
    /// Attempts whose measurements were discarded (a drifting host).
    pub voided: usize,
    /// Cells given up on hosts whose baseline would not settle.
    pub drops: Vec<DropRecord>,
}

/// Per trial key, one of its attempts.
pub type Firsts<'a> = BTreeMap<&'a str, &'a AttemptRecord>;

/// The earliest attempt (smallest attempt id) of each trial key among
/// `picked`. A scan leaves its attempts ordered, so the sort is one pass
/// and the map is built from sorted keys (one comparison an attempt,
/// where inserting each searched the tree: a tenth of `status` at
/// 100,000 attempts); in any other order a key can come more than once.
fn by_key(mut picked: Vec<&AttemptRecord>) -> Firsts<'_> {
    picked.sort_by(|a, b| {
        (a.trial_key.as_str(), a.attempt_id.as_str())
            .cmp(&(b.trial_key.as_str(), b.attempt_id.as_str()))
    });
    picked.dedup_by(|later, earlier| later.trial_key == earlier.trial_key);
    picked
        .into_iter()
        .map(|a| (a.trial_key.as_str(), a))
        .collect()
}

/// The attempt of `run` with the smallest attempt id of those `keep`
/// accepts.
fn earliest(
    run: &[Arc<AttemptRecord>],
    keep: impl Fn(&AttemptRecord) -> bool,
) -> Option<&AttemptRecord> {
    run.iter()
        .map(|a| &**a)
        .filter(|a| keep(a))
        .min_by(|a, b| a.attempt_id.cmp(&b.attempt_id))
}

/// Records shared as [`Scan::attempts`] holds them.
pub fn shared(records: Vec<AttemptRecord>) -> Vec<Arc<AttemptRecord>> {
    records.into_iter().map(Arc::new).collect()
}

impl Scan {
    /// Per trial key, its attempts in attempt order.
    pub fn by_trial(&self) -> BTreeMap<&str, Vec<&AttemptRecord>> {
        let mut out: BTreeMap<&str, Vec<&AttemptRecord>> = BTreeMap::new();
        for run in self.runs() {
            let mut v: Vec<&AttemptRecord> = run.iter().map(|a| &**a).collect();
            v.sort_by(|a, b| a.attempt_id.cmp(&b.attempt_id));
            match out.get_mut(run[0].trial_key.as_str()) {
                Some(have) => {
                    have.extend(v);
                    have.sort_by(|a, b| a.attempt_id.cmp(&b.attempt_id));
                }
                None => {
                    out.insert(run[0].trial_key.as_str(), v);
                }
            }
        }
        out
    }

    /// Per trial key, its first attempt (the smallest attempt id), whatever
    /// its status: [`Scan::by_trial`]'s first entries, without building a
    /// vector per trial.
    pub fn first_attempts(&self) -> Firsts<'_> {
        self.first_where(|_| true)
    }

    /// The attempt that counts for each trial: its first terminal attempt.
    /// Later terminal attempts of the same key (two launchers racing) are
    /// never counted twice.
    pub fn terminal(&self) -> Firsts<'_> {
        self.terminal_where(|_| true)
    }

    /// [`Scan::terminal`] of the attempts `keep` accepts (the others are
    /// not looked at).
    pub fn terminal_where(&self, keep: impl Fn(&AttemptRecord) -> bool) -> Firsts<'_> {
        self.first_where(|a| a.status.is_terminal() && keep(a))
    }

    /// [`Scan::first_attempts`] and [`Scan::terminal`] in one pass.
    pub fn first_and_terminal(&self) -> (Firsts<'_>, Firsts<'_>) {
        let (mut first, mut terminal) = (Vec::new(), Vec::new());
        for run in self.runs() {
            first.extend(earliest(run, |_| true));
            terminal.extend(earliest(run, |a| a.status.is_terminal()));
        }
        (by_key(first), by_key(terminal))
    }

    /// Per trial key, its first attempt (smallest attempt id) of those
    /// `keep` accepts, whatever order the attempts are in.
    /// `keep` is asked first, so that the trial keys compared are only
    /// those of the attempts kept: a launch asks this of one class's
    /// bucket after each of its trials, and the study's other attempts
    /// then cost one call of `keep` each.
    fn first_where(&self, keep: impl Fn(&AttemptRecord) -> bool) -> Firsts<'_> {
        let mut picked: Vec<&AttemptRecord> = Vec::new();
        // The kept attempts keep the scan's order: the trial's attempts
        // follow one another, and the earliest of them is kept.
        for a in self.records().filter(|a| keep(a)) {
            match picked.last_mut() {
                Some(p) if p.trial_key == a.trial_key => {
                    if a.attempt_id < p.attempt_id {
                        *p = a;
                    }
                }
                _ => picked.push(a),
            }
        }
        by_key(picked)
    }

    /// The attempts, in order.
    pub fn records(&self) -> impl Iterator<Item = &AttemptRecord> {
        self.attempts.iter().map(|a| &**a)
    }

    /// Runs of consecutive attempts with the same trial key (one run per
    /// trial when the attempts are ordered, as a scan leaves them).
    fn runs(&self) -> impl Iterator<Item = &[Arc<AttemptRecord>]> {
        self.attempts
            .chunk_by(|a, b| a.trial_key == b.trial_key)
            .filter(|r| !r.is_empty())
    }
}

impl Drop for Ledger {
    /// What scans cached can be 100,000 records: freeing them takes a
    /// tenth of a second, which a command about to exit need not wait for.
    /// Large caches are freed on a thread of their own.
    fn drop(&mut self) {
        let known = std::mem::take(self.known.get_mut());
        if known.values().map(scan::Known::len).sum::<usize>() >= 10_000 {
            // If the thread cannot start, the closure (and the cache) is
            // dropped here.
            let _ = std::thread::Builder::new()
                .name("ledger-free".to_string())
                .spawn(move || drop(known));
        }
    }
}

/// Remove anything that looks like a credential from an error message
/// (object_store errors can quote request URLs with signed queries).
pub fn redact_error(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for word in message.split_inclusive(char::is_whitespace) {
        let lower = word.to_ascii_lowercase();
        if lower.contains("x-amz-signature")
            || lower.contains("x-amz-credential")
            || lower.contains("sig=")
            || lower.contains("secret")
            || lower.contains("token=")
        {
            out.push_str("[redacted]");
            if word.ends_with(char::is_whitespace) {
                out.push(' ');
            }
        } else {
            out.push_str(word);
        }
    }
    out
}

/// Remove credentials from a URL before showing it.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Ok(mut u) if u.query().is_some() => {
            u.set_query(None);
            u.to_string()
        }
        _ => url.to_string(),
    }
}

impl Ledger {
    /// Open a ledger URL: a plain path or `file://` URL (created if
    /// missing), or a remote store (`s3://`, `gs://`, `az://`) configured
    /// from the standard environment; any other scheme is refused.
    pub fn open(url: &str) -> Result<Ledger, LedgerError> {
        let shown = redact_url(url);
        let open_err = |message: String| LedgerError::Open {
            url: shown.clone(),
            message,
        };
        let remote = |scheme: &str| -> Result<Arc<dyn ObjectStore>, LedgerError> {
            let parsed =
                url::Url::parse(url).map_err(|e| open_err(format!("not a valid URL: {e}")))?;
            let bucket_url = format!("{scheme}://{}", parsed.host_str().unwrap_or_default());
            let built: Result<Arc<dyn ObjectStore>, object_store::Error> = match scheme {
                // Endpoint, region and credentials from the standard
                // environment (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, ...).
                "s3" => object_store::aws::AmazonS3Builder::from_env()
                    .with_url(bucket_url)
                    .build()
                    .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
                "gs" => object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(bucket_url)
                    .build()
                    .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
                _ => object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url)
                    .build()
                    .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
            };
            let store = built.map_err(|e| open_err(redact_error(&e.to_string())))?;
            let prefix = if scheme == "az" {
                String::new()
            } else {
                parsed.path().trim_matches('/').to_string()
            };
            Ok(if prefix.is_empty() {
                store
            } else {
                Arc::new(object_store::prefix::PrefixStore::new(store, prefix))
            })
        };
        let path: std::path::PathBuf = if let Some(rest) = url.strip_prefix("file://") {
            let parsed =
                url::Url::parse(url).map_err(|e| open_err(format!("not a valid URL: {e}")))?;
            parsed
                .to_file_path()
                .map_err(|_| open_err(format!("`file://{rest}` is not an absolute local path")))?
        } else if let Some((scheme, _)) = url.split_once("://") {
            return match scheme {
                "s3" | "gs" | "az" => Ok(Ledger::with_store(remote(scheme)?, shown)),
                other => Err(open_err(format!(
                    "`{other}://` is not a ledger URL tunectl knows (use a path, file://, s3://, gs:// or az://)"
                ))),
            };
        } else {
            std::path::PathBuf::from(url)
        };
        std::fs::create_dir_all(&path)
            .map_err(|e| open_err(format!("cannot create directory {}: {e}", path.display())))?;
        let store = LocalFileSystem::new_with_prefix(&path)
            .map_err(|e| open_err(format!("cannot open {}: {e}", path.display())))?;
        let mut ledger = Ledger::with_store(Arc::new(store), shown);
        ledger.local_root = Some(std::fs::canonicalize(&path).unwrap_or(path));
        Ok(ledger)
    }

    /// A ledger over a store the caller built, shown as `url`: for
    /// benchmarks that count a launch's requests (an in-memory store with
    /// a counting layer, `benches/fleet_sim.rs`). Commands open ledgers
    /// with [`Ledger::open`].
    pub fn over_store(store: Arc<dyn ObjectStore>, url: &str) -> Ledger {
        Ledger::with_store(store, url.to_string())
    }

    fn with_store(store: Arc<dyn ObjectStore>, url: String) -> Ledger {
        Ledger {
            store,
            url,
            known: Default::default(),
            streams: Default::default(),
            host_records: Default::default(),
            written: Default::default(),
            released: Default::default(),
            local_root: None,
        }
    }

    /// Fail early, with a clear message, when the store cannot be reached
    /// or read (wrong endpoint, no bucket, no permission).
    pub async fn check_reachable(&self) -> Result<(), LedgerError> {
        let probe = ObjPath::from("tunectl-reachability-check");
        let listed = tokio::time::timeout(Duration::from_secs(30), async {
            self.store.list(Some(&probe)).next().await.transpose()
        })
        .await;
        match listed {
            Err(_) => Err(LedgerError::Open {
                url: self.url.clone(),
                message: "the store did not answer within 30 s".to_string(),
            }),
            Ok(Err(e)) => {
                let mut message = format!(
                    "the store cannot be listed: {}",
                    redact_error(&e.to_string())
                );
                let plain_http = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
                    .iter()
                    .any(|v| std::env::var(v).is_ok_and(|u| u.starts_with("http://")));
                let allowed = std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v == "true");
                if self.url.starts_with("s3://") && plain_http && !allowed {
                    message.push_str(
                        " (the endpoint is plain http://: set AWS_ALLOW_HTTP=true to allow it)",
                    );
                }
                Err(LedgerError::Open {
                    url: self.url.clone(),
                    message,
                })
            }
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// Open a ledger for reading only when it already exists; never creates
    /// anything (for plans and reports).
    pub fn open_existing(url: &str) -> Result<Option<Ledger>, LedgerError> {
        let local = match url.strip_prefix("file://") {
            Some(_) => url::Url::parse(url)
                .ok()
                .and_then(|u| u.to_file_path().ok()),
            None if !url.contains("://") => Some(std::path::PathBuf::from(url)),
            None => None,
        };
        if let Some(path) = local
            && !path.is_dir()
        {
            return Ok(None);
        }
        Self::open(url).map(Some)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn io_err(&self, op: &'static str, key: &ObjPath, e: impl std::fmt::Display) -> LedgerError {
        LedgerError::Io {
            url: self.url.clone(),
            op,
            key: key.to_string(),
            message: e.to_string(),
        }
    }

    /// Write a new object; never overwrites. Transient errors are retried
    /// with back-off. Returns `Ok(false)` when the key already exists.
    async fn create(&self, key: &ObjPath, bytes: Vec<u8>) -> Result<bool, LedgerError> {
        self.create_tries(key, bytes, 4, false).await
    }

    /// [`Ledger::create`] with at most `max_tries` tries, 0.1 s, 0.3 s,
    /// 0.9 s, 2.7 s ... apart; with `any_error`, permission and
    /// authentication errors are retried too (an attempt record is worth
    /// waiting a few seconds for: a ledger being remounted or repaired).
    async fn create_tries(
        &self,
        key: &ObjPath,
        bytes: Vec<u8>,
        max_tries: u32,
        any_error: bool,
    ) -> Result<bool, LedgerError> {
        let mut created = self
            .create_in_turn(vec![(key.clone(), bytes)], max_tries, any_error, Vec::new())
            .await?;
        Ok(created.pop().unwrap_or(false))
    }

    /// Create objects one after the other, each as [`Ledger::create_tries`]
    /// does; one that cannot be written stops the ones after it (a log
    /// entry that failed means no object). Then delete `then_delete`, best
    /// effort, unless a create failed or the last object existed already.
    /// Returns, per object,
    /// whether it was new.
    ///
    /// A local ledger does it all in one blocking call as long as nothing
    /// fails (local.rs): one thread hand-off, not one per file operation.
    async fn create_in_turn(
        &self,
        objects: Vec<(ObjPath, Vec<u8>)>,
        max_tries: u32,
        any_error: bool,
        then_delete: Vec<ObjPath>,
    ) -> Result<Vec<bool>, LedgerError> {
        if let Some(root) = &self.local_root {
            let files = objects
                .iter()
                .map(|(k, _)| k)
                .chain(&then_delete)
                .map(|k| local::file_of(root, k))
                .collect();
            return self.create_in_turn_local(objects, files, max_tries).await;
        }
        let mut created = Vec::with_capacity(objects.len());
        for (key, bytes) in objects {
            created.push(
                self.create_once_tries(&key, bytes, max_tries, any_error)
                    .await?,
            );
        }
        if created.last() != Some(&false) && !then_delete.is_empty() {
            self.delete_in_bulk(then_delete).await;
        }
        Ok(created)
    }

    /// [`Ledger::create_in_turn`] on a local ledger, `files` being the
    /// objects' files and then the ones to delete. Every local error is
    /// retried (object_store's local backend reports none as a permission
    /// error either).
    async fn create_in_turn_local(
        &self,
        objects: Vec<(ObjPath, Vec<u8>)>,
        files: Vec<std::path::PathBuf>,
        max_tries: u32,
    ) -> Result<Vec<bool>, LedgerError> {
        let objects = Arc::new(objects);
        let files = Arc::new(files);
        let mut created: Vec<bool> = Vec::with_capacity(objects.len());
        let mut delay = Duration::from_millis(100);
        let mut tries = 0;
        loop {
            tries += 1;
            let from = created.len();
            let (objs, fs) = (objects.clone(), files.clone());
            // From the first object not yet written: (new or not) of each
            // one written now, and the error that stopped them, if any.
            let done = tokio::task::spawn_blocking(move || {
                let mut done = Vec::new();
                for i in from..objs.len() {
                    match local::create_new(&fs[i], &objs[i].1) {
                        Ok(new) => done.push(new),
                        Err(e) => return (done, Some(e)),
                    }
                }
                if done.last() != Some(&false) {
                    for f in &fs[objs.len()..] {
                        // Best effort, as object_store's deletes are here.
                        let _ = local::remove(f);
                    }
                }
                (done, None)
            })
            .await;
            let (done, error) = match done {
                Ok(d) => d,
                Err(e) => (Vec::new(), Some(e.to_string())),
            };
            if !done.is_empty() {
                // The next object starts its tries afresh.
                tries = 1;
                delay = Duration::from_millis(100);
            }
            created.extend(done);
            let Some(e) = error else {
                return Ok(created);
            };
            let Some((key, _)) = objects.get(created.len()) else {
                return Ok(created);
            };
            if tries >= max_tries {
                return Err(self.io_err("write", key, e));
            }
            tracing::warn!(key = %key, error = %e, "ledger write failed; retrying");
            tokio::time::sleep(delay).await;
            delay *= 3;
        }
    }

    /// One object's create through the store, retried as
    /// [`Ledger::create_tries`] says.
    async fn create_once_tries(
        &self,
        key: &ObjPath,
        bytes: Vec<u8>,
        max_tries: u32,
        any_error: bool,
    ) -> Result<bool, LedgerError> {
        let mut delay = Duration::from_millis(100);
        let mut tries = 0;
        loop {
            tries += 1;
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            match self
                .store
                .put_opts(key, PutPayload::from(bytes.clone()), opts)
                .await
            {
                Ok(_) => return Ok(true),
                Err(object_store::Error::AlreadyExists { .. }) => return Ok(false),
                Err(e @ object_store::Error::PermissionDenied { .. })
                | Err(e @ object_store::Error::Unauthenticated { .. })
                    if !any_error =>
                {
                    return Err(self.io_err("write", key, e));
                }
                Err(e) if tries >= max_tries => return Err(self.io_err("write", key, e)),
                Err(e) => {
                    tracing::warn!(key = %key, error = %e, "ledger write failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 3;
                }
            }
        }
    }

    async fn get(&self, key: &ObjPath) -> Result<Option<Vec<u8>>, LedgerError> {
        Ok(self.get_bytes(key).await?.map(|b| b.to_vec()))
    }

    /// An object's bytes, at most [`read_cap`] of its kind; `None` when it
    /// is not there. A local ledger's file is read only when it is a
    /// regular file ([`crate::safe_read`]: a FIFO, a device, a directory or
    /// a socket is an error naming the file and what it is, at once).
    async fn get_bytes(&self, key: &ObjPath) -> Result<Option<bytes::Bytes>, LedgerError> {
        let cap = read_cap(key);
        if let Some(root) = &self.local_root {
            let path = local::file_of(root, key);
            let read = tokio::task::spawn_blocking(move || {
                let got = crate::safe_read::read_regular(&path, cap, None);
                (path, got)
            })
            .await
            .map_err(|e| self.io_err("read", key, e))?;
            return match read {
                (_, Ok(bytes)) => Ok(Some(bytes.into())),
                (_, Err(crate::safe_read::Unreadable::Missing(_))) => Ok(None),
                (path, Err(why)) => {
                    Err(self.io_err("read", key, format!("{} {why}", path.display())))
                }
            };
        }
        let got = match self.store.get(key).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.io_err("read", key, e)),
        };
        let too_big = |n: u64| {
            self.io_err(
                "read",
                key,
                format!(
                    "the object is {n} bytes, over the limit of {}",
                    crate::safe_read::size_label(cap)
                ),
            )
        };
        if got.meta.size > cap {
            return Err(too_big(got.meta.size));
        }
        // The size announced is checked above; what arrives is counted too.
        let mut stream = got.into_stream();
        let mut out = Vec::new();
        while let Some(chunk) = stream
            .try_next()
            .await
            .map_err(|e| self.io_err("read", key, e))?
        {
            if (out.len() + chunk.len()) as u64 > cap {
                return Err(too_big((out.len() + chunk.len()) as u64));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(Some(out.into()))
    }

    /// Whether an object is there, without reading it (a `.void` marker,
    /// an object named by the log). A local ledger's file that is there
    /// and is not a regular file is an error naming it and what it is.
    async fn exists(&self, key: &ObjPath) -> Result<bool, LedgerError> {
        if let Some(root) = &self.local_root {
            let path = local::file_of(root, key);
            let found = tokio::task::spawn_blocking(move || {
                let got = crate::safe_read::check_regular(&path);
                (path, got)
            })
            .await
            .map_err(|e| self.io_err("read", key, e))?;
            return match found {
                (_, Ok(there)) => Ok(there),
                (path, Err(why)) => {
                    Err(self.io_err("read", key, format!("{} {why}", path.display())))
                }
            };
        }
        match self.store.head(key).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.io_err("read", key, e)),
        }
    }

    async fn list(&self, prefix: &ObjPath) -> Result<Vec<ObjPath>, LedgerError> {
        self.store
            .list(Some(prefix))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(|e| self.io_err("list", prefix, e))
    }

    pub async fn read_study(&self, study: &str) -> Result<Option<StudyRecord>, LedgerError> {
        let key = ObjPath::from(format!("{study}/study.json"));
        match self.get(&key).await? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.io_err("parse", &key, format!("corrupt study record: {e}"))),
        }
    }

    /// Store the study record unless one exists; returns the stored one.
    ///
    /// Only a study the ledger holds nothing of gets a new record: the
    /// record is the first object a launch writes, so a study whose other
    /// objects (attempts, hosts, the arrival log...) are there without it
    /// lost it (deleted, or a partial copy of the ledger). That is an
    /// error naming the record, and nothing is written: a new record would
    /// pair the study's measurements with whatever spec launched now.
    pub async fn ensure_study(&self, record: &StudyRecord) -> Result<StudyRecord, LedgerError> {
        let key = ObjPath::from(format!("{}/study.json", record.study_id));
        if let Some(stored) = self.read_study(&record.study_id).await? {
            return Ok(stored);
        }
        if self.holds_study_objects(&record.study_id).await? {
            // Another launcher may have written the record, then its first
            // objects, since it was looked for.
            if let Some(stored) = self.read_study(&record.study_id).await? {
                return Ok(stored);
            }
            return Err(self.io_err(
                "read",
                &key,
                format!(
                    "the study record is missing, but the ledger holds the study's other objects (attempts under `{study}/trials/`, hosts, the arrival log...): it was deleted or not copied. Nothing was written. Restore `{key}` from a backup or copy of this ledger, run `tunectl ledger check` to see what else is missing, or launch into a new ledger (--ledger)",
                    study = record.study_id,
                ),
            ));
        }
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| self.io_err("encode", &key, e))?;
        if self.create(&key, bytes).await? {
            return Ok(record.clone());
        }
        self.read_study(&record.study_id)
            .await?
            .ok_or_else(|| self.io_err("read", &key, "vanished after an existing-object error"))
    }

    pub async fn write_host(&self, study: &str, record: &HostRecord) -> Result<(), LedgerError> {
        let key = ObjPath::from(format!(
            "{study}/hosts/{}/{}.json",
            record.host, record.fingerprint_hash
        ));
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| self.io_err("encode", &key, e))?;
        self.create(&key, bytes).await.map(|_| ())
    }

    /// Every fingerprint stored for a study (corrupt ones skipped). One
    /// listing, and a read of each record this process has not read yet
    /// (host records are created once, never rewritten): a launch that
    /// asks at every decision reads each record once.
    pub async fn hosts(
        &self,
        study: &str,
    ) -> Result<(Vec<HostRecord>, Vec<CorruptObject>), LedgerError> {
        let prefix = ObjPath::from(format!("{study}/hosts"));
        let keys = self.list(&prefix).await?;
        let mut out = Vec::new();
        let mut corrupt = Vec::new();
        for key in keys {
            let read_before = self
                .host_records
                .lock()
                .ok()
                .and_then(|m| m.get(key.as_ref()).cloned());
            if let Some(r) = read_before {
                out.push(r);
                continue;
            }
            if let Some(bytes) = self.get(&key).await? {
                match serde_json::from_slice::<HostRecord>(&bytes) {
                    Ok(r) => {
                        if let Ok(mut m) = self.host_records.lock() {
                            m.insert(key.to_string(), r.clone());
                        }
                        out.push(r)
                    }
                    Err(e) => corrupt.push(CorruptObject {
                        key: key.to_string(),
                        reason: e.to_string(),
                    }),
                }
            }
        }
        out.sort_by(|a, b| a.probed_at.cmp(&b.probed_at));
        Ok((out, corrupt))
    }

    /// Write an attempt record (its log entry first), each write tried
    /// [`ATTEMPT_WRITE_TRIES`] times whatever the error.
    pub async fn write_attempt(&self, record: &AttemptRecord) -> Result<(), LedgerError> {
        self.write_attempt_tries(record, ATTEMPT_WRITE_TRIES).await
    }

    /// [`Ledger::write_attempt`] with at most `max_tries` tries of each
    /// write (1: once, for a launcher that already knows the ledger fails).
    pub async fn write_attempt_tries(
        &self,
        record: &AttemptRecord,
        max_tries: u32,
    ) -> Result<(), LedgerError> {
        self.write_attempt_releasing(record, max_tries, None).await
    }

    /// [`Ledger::write_attempt_tries`], then, once the record is written,
    /// give up `lease` as [`Ledger::release_lease`] does, in the same
    /// blocking call on a local ledger. A record that cannot be written
    /// leaves the lease alone.
    pub async fn write_attempt_releasing(
        &self,
        record: &AttemptRecord,
        max_tries: u32,
        lease: Option<&lease::Lease>,
    ) -> Result<(), LedgerError> {
        let key = ObjPath::from(format!(
            "{}/trials/{}/{}.json",
            record.study_id, record.trial_key, record.attempt_id
        ));
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| self.io_err("encode", &key, e))?;
        // The log entry first: a scan that trusts the index finds the
        // attempt through it (log.rs).
        let entry = self.log_entry(
            &record.study_id,
            &record.trial_key,
            &format!("{}.json", record.attempt_id),
        )?;
        let released = lease.map(lease::Lease::own_generations).unwrap_or_default();
        // A local ledger deletes them in the same blocking call; a store's
        // wait to go out with others, in one request.
        let (now, later) = match self.local_root {
            Some(_) => (released, Vec::new()),
            None => (Vec::new(), released),
        };
        let kept = bytes.clone();
        let created = self
            .create_in_turn(vec![entry, (key.clone(), bytes)], max_tries, true, now)
            .await?;
        // The entry's `false` (it exists): an earlier try of this very
        // create went through. The record's: an attempt with its id.
        if created.get(1) != Some(&true) {
            return Err(self.io_err("write", &key, "an attempt with this id already exists"));
        }
        self.release_later(later).await;
        // Created by this call: these bytes are the object's, for this
        // process's next scan to read without a request.
        if let Ok(mut w) = self.written.lock()
            && w.len() < WRITTEN_KEPT
        {
            w.insert(key.to_string(), kept);
        }
        Ok(())
    }

    /// Delete `keys` (lease generations whose attempt is recorded) with
    /// others: now when a bulk delete's worth is waiting, else at the next
    /// [`Ledger::flush_releases`] (a launch's liveness write, every quarter
    /// of a lease time, and its end). Until then their trial shows leased
    /// by a launcher that holds it no more: its record is written, so no
    /// launch runs it again (one that takes the lease then finds the
    /// record), and `status` counts it done, not running.
    async fn release_later(&self, keys: Vec<ObjPath>) {
        if keys.is_empty() {
            return;
        }
        let due = self.released.lock().map(|mut r| {
            r.extend(keys);
            r.len() >= RELEASE_BATCH_KEYS
        });
        if due.unwrap_or(true) {
            self.flush_releases().await;
        }
    }

    /// Delete every lease generation released and not yet deleted, in
    /// bulk (best effort, as any release: an undeleted lease expires).
    pub async fn flush_releases(&self) {
        let mut keys = self
            .released
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        while !keys.is_empty() {
            let rest = keys.split_off(keys.len().min(RELEASE_BATCH_KEYS));
            self.delete_in_bulk(std::mem::replace(&mut keys, rest))
                .await;
        }
    }

    /// Delete `keys`: one request for all of them where the store deletes
    /// in bulk (S3's `DeleteObjects`), concurrent single deletes elsewhere.
    /// Best effort: what is not deleted stays.
    async fn delete_in_bulk(&self, keys: Vec<ObjPath>) {
        let keys = futures::stream::iter(keys.into_iter().map(Ok)).boxed();
        let _: Vec<_> = self.store.delete_stream(keys).collect().await;
    }

    /// Write a verdict object (verdicts are derived data and may be
    /// replaced by a later launch).
    pub async fn write_verdict(
        &self,
        study: &str,
        class: &str,
        bucket: &str,
        value: &serde_json::Value,
    ) -> Result<(), LedgerError> {
        let key = ObjPath::from(format!("{study}/verdicts/{class}/{bucket}.json"));
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| self.io_err("encode", &key, e))?;
        self.store
            .put(&key, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.io_err("write", &key, e))
    }

    /// Discard an attempt's measurement: its trial runs again.
    /// Remove the verdict records of `class` whose bucket is not in `keep`
    /// (buckets that judging settings no longer make); returns how many.
    pub async fn prune_verdicts(
        &self,
        study: &str,
        class: &str,
        keep: &[&str],
    ) -> Result<usize, LedgerError> {
        let prefix = ObjPath::from(format!("{study}/verdicts/{class}"));
        let mut removed = 0;
        for key in self.list(&prefix).await? {
            let stale = key
                .filename()
                .and_then(|f| f.strip_suffix(".json"))
                .is_some_and(|b| !keep.contains(&b));
            if stale {
                self.store
                    .delete(&key)
                    .await
                    .map_err(|e| self.io_err("delete", &key, e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    pub async fn write_void(&self, study: &str, record: &VoidRecord) -> Result<(), LedgerError> {
        let key = ObjPath::from(format!(
            "{study}/trials/{}/{}.void",
            record.trial_key, record.attempt_id
        ));
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| self.io_err("encode", &key, e))?;
        self.log_object(
            study,
            &record.trial_key,
            &format!("{}.void", record.attempt_id),
        )
        .await?;
        self.create(&key, bytes).await.map(|_| ())
    }

    pub async fn write_drop(&self, study: &str, record: &DropRecord) -> Result<(), LedgerError> {
        let cell = crate::canon::sha256_hex(crate::canon::canonical_json(&record.cell).as_bytes());
        let key = ObjPath::from(format!(
            "{study}/drops/{}/{}-{}.json",
            record.host_class,
            &cell[..16],
            record.host
        ));
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| self.io_err("encode", &key, e))?;
        self.create(&key, bytes).await.map(|_| ())
    }

    /// Record what a launch plans at one cell on one host class
    /// (replacing what an earlier launch knew).
    pub async fn write_plan(&self, study: &str, record: &PlanRecord) -> Result<(), LedgerError> {
        let key = ObjPath::from(format!(
            "{study}/plan/{}/{}.json",
            record.host_class, record.cell_index
        ));
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| self.io_err("encode", &key, e))?;
        self.store
            .put(&key, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.io_err("write", &key, e))
    }

    /// The plan records of a study (unreadable ones skipped: a bucket
    /// without its plan is no verdict).
    pub async fn plans(&self, study: &str) -> Result<Vec<PlanRecord>, LedgerError> {
        let prefix = ObjPath::from(format!("{study}/plan"));
        let keys = self.list(&prefix).await?;
        let got: Vec<Result<Option<Vec<u8>>, LedgerError>> =
            futures::stream::iter(keys.iter().map(|k| self.get(k)))
                .buffered(16)
                .collect()
                .await;
        let mut out = Vec::new();
        for bytes in got {
            if let Some(bytes) = bytes?
                && let Ok(r) = serde_json::from_slice::<PlanRecord>(&bytes)
            {
                out.push(r);
            }
        }
        out.sort_by(|a, b| {
            (a.host_class.as_str(), a.cell_index).cmp(&(b.host_class.as_str(), b.cell_index))
        });
        Ok(out)
    }

    /// Cells dropped on hosts (corrupt objects skipped).
    pub async fn drops(&self, study: &str) -> Result<Vec<DropRecord>, LedgerError> {
        let prefix = ObjPath::from(format!("{study}/drops"));
        let mut out = Vec::new();
        for key in self.list(&prefix).await? {
            if let Some(bytes) = self.get(&key).await?
                && let Ok(r) = serde_json::from_slice::<DropRecord>(&bytes)
            {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Store a full log beside its attempt:
    /// `<study>/trials/<key>/<attempt>.<name>.log`.
    pub async fn write_log(
        &self,
        study: &str,
        trial: &str,
        attempt: &str,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), LedgerError> {
        let key = ObjPath::from(format!("{study}/trials/{trial}/{attempt}.{name}.log"));
        self.create(&key, bytes).await.map(|_| ())
    }

    /// The first terminal, non-voided attempt of a trial, if any, and the
    /// objects under the trial's prefix that were skipped because they are
    /// not a record of this trial: unreadable, another schema, or a record
    /// whose own `study_id`, `trial_key` or `attempt_id` does not match
    /// where it is stored (a copy of another trial's attempt). Those never
    /// count as the trial's result.
    pub async fn terminal_attempt(
        &self,
        study: &str,
        trial: &str,
    ) -> Result<(Option<AttemptRecord>, Vec<CorruptObject>), LedgerError> {
        let prefix = ObjPath::from(format!("{study}/trials/{trial}"));
        let keys = self.list(&prefix).await?;
        let voided: std::collections::HashSet<String> = keys
            .iter()
            .filter_map(|k| {
                k.filename()
                    .and_then(|f| f.strip_suffix(".void"))
                    .map(str::to_string)
            })
            .collect();
        let mut found: Vec<AttemptRecord> = Vec::new();
        let mut skipped = Vec::new();
        for k in keys.iter().filter(|k| k.extension() == Some("json")) {
            let Some(bytes) = self.get(k).await? else {
                continue;
            };
            match scan::check_record(k, &bytes) {
                Ok(r) => {
                    if r.status.is_terminal() && !voided.contains(&r.attempt_id) {
                        found.push(r);
                    }
                }
                Err(reason) => skipped.push(CorruptObject {
                    key: k.to_string(),
                    reason,
                }),
            }
        }
        found.sort_by(|a, b| a.attempt_id.cmp(&b.attempt_id));
        Ok((found.into_iter().next(), skipped))
    }

    /// One attempt object, whole (a scan leaves out its command and
    /// output): `None` when it is not there. An object that is not a
    /// readable record of that trial and attempt is an error naming it.
    pub async fn read_attempt(
        &self,
        study: &str,
        trial: &str,
        attempt: &str,
    ) -> Result<Option<AttemptRecord>, LedgerError> {
        let key = ObjPath::from(format!("{study}/trials/{trial}/{attempt}.json"));
        let Some(bytes) = self.get(&key).await? else {
            return Ok(None);
        };
        match scan::check_record(&key, &bytes) {
            Ok(r)
                if r.study_id.as_ref() == study
                    && r.trial_key == trial
                    && r.attempt_id == attempt =>
            {
                Ok(Some(r))
            }
            Ok(_) => Err(self.unreadable(&key, "a record of another trial or attempt".into())),
            Err(reason) => Err(self.unreadable(&key, reason)),
        }
    }

    fn unreadable(&self, key: &ObjPath, reason: String) -> LedgerError {
        LedgerError::Io {
            url: self.url().to_string(),
            op: "read",
            key: key.to_string(),
            message: reason,
        }
    }

    /// Study ids in the ledger (top-level prefixes with a study record).
    pub async fn studies(&self) -> Result<Vec<String>, LedgerError> {
        let mut out = Vec::new();
        for id in self.top_prefixes().await? {
            if self.read_study(&id).await.is_ok_and(|r| r.is_some()) {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// The records of the forks of study `name` (ids `<name>-<12 hex>`),
    /// oldest first.
    pub async fn forks_of(&self, name: &str) -> Result<Vec<StudyRecord>, LedgerError> {
        let mut out = Vec::new();
        for id in self.top_prefixes().await? {
            let is_fork = id
                .strip_prefix(name)
                .and_then(|r| r.strip_prefix('-'))
                .is_some_and(|h| {
                    h.len() == 12
                        && h.bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                });
            if is_fork && let Some(r) = self.read_study(&id).await? {
                out.push(r);
            }
        }
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(out)
    }

    async fn top_prefixes(&self) -> Result<Vec<String>, LedgerError> {
        let listed = self
            .store
            .list_with_delimiter(None)
            .await
            .map_err(|e| self.io_err("list", &ObjPath::from(""), e))?;
        Ok(listed
            .common_prefixes
            .iter()
            .map(|p| p.as_ref().to_string())
            .collect())
    }
}

/// A new attempt id: sortable by time, unique across launchers.
pub fn new_attempt_id() -> String {
    let now = chrono::Utc::now();
    let nonce: u64 = rand::random();
    format!("{}-{:016x}", now.format("%Y%m%dT%H%M%S%.6fZ"), nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host records are created once and never rewritten: a launch that
    /// asks for them at every decision lists them each time (a host probed
    /// since is seen) and reads each record once.
    #[tokio::test]
    async fn host_records_are_read_once_and_new_ones_seen() {
        let store = Arc::new(test_store::Listing::new(false));
        let ledger = Ledger::with_store(store.clone(), "mem".into());
        let record = |host: &str, hash: &str| HostRecord {
            schema: records::SCHEMA,
            host: host.into(),
            transport: "local".into(),
            fingerprint_hash: hash.into(),
            host_class: "c".into(),
            class_label: "c".into(),
            probed_at: "2026-12-04T00:00:00Z".into(),
            nodes: Vec::new(),
            fingerprint: Default::default(),
        };
        for h in ["a", "b", "c"] {
            ledger
                .write_host("s", &record(h, "f1"))
                .await
                .expect("write");
        }
        let gets =
            |store: &test_store::Listing| store.gets.swap(0, std::sync::atomic::Ordering::Relaxed);
        gets(&store);
        let (first, _) = ledger.hosts("s").await.expect("hosts");
        assert_eq!(first.len(), 3);
        assert_eq!(gets(&store), 3);
        let (again, _) = ledger.hosts("s").await.expect("hosts");
        assert_eq!(again.len(), 3);
        assert_eq!(gets(&store), 0, "records read before are not read again");
        // Another launcher probes a host, and one of these again with
        // another fingerprint: both new records are read, the rest not.
        ledger
            .write_host("s", &record("d", "f1"))
            .await
            .expect("write");
        ledger
            .write_host("s", &record("a", "f2"))
            .await
            .expect("write");
        gets(&store);
        let (now, _) = ledger.hosts("s").await.expect("hosts");
        assert_eq!(now.len(), 5);
        assert_eq!(gets(&store), 2);
        // A second process (a new ledger handle) reads them all.
        let other = Ledger::with_store(store.clone(), "mem".into());
        assert_eq!(other.hosts("s").await.expect("hosts").0.len(), 5);
        assert_eq!(gets(&store), 5);
    }

    /// An object is read up to the cap of its kind: on a remote store one
    /// over it is refused before its bytes are read; on a local ledger a
    /// file over it, or one that is not a regular file, is refused naming
    /// the file and what it is.
    #[tokio::test]
    async fn objects_are_read_up_to_the_cap_of_their_kind() {
        use crate::safe_read::{MAX_ATTEMPT_BYTES, MAX_LEASE_BYTES, MAX_RECORD_BYTES};
        assert_eq!(
            read_cap(&ObjPath::from("s/leases/k.1.json")),
            MAX_LEASE_BYTES
        );
        assert_eq!(
            read_cap(&ObjPath::from("s/trials/k/a.json")),
            MAX_ATTEMPT_BYTES
        );
        assert_eq!(read_cap(&ObjPath::from("s/study.json")), MAX_RECORD_BYTES);
        let lease = ObjPath::from("s/leases/k.000000000001.json");
        let at_cap = vec![b' '; MAX_LEASE_BYTES as usize];
        let over = vec![b' '; MAX_LEASE_BYTES as usize + 1];

        let remote = Ledger::with_store(
            Arc::new(object_store::memory::InMemory::new()),
            "mem".into(),
        );
        remote
            .store
            .put(&lease, over.clone().into())
            .await
            .expect("put");
        let e = remote.get(&lease).await.expect_err("over the cap");
        assert!(
            e.to_string()
                .ends_with("the object is 65537 bytes, over the limit of 64 KiB"),
            "{e}"
        );
        remote
            .store
            .put(&lease, at_cap.clone().into())
            .await
            .expect("put");
        assert_eq!(
            remote.get(&lease).await.expect("read"),
            Some(at_cap.clone())
        );

        let dir = tempfile::tempdir().expect("tempdir");
        let local = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        let file = dir.path().join("s/leases/k.000000000001.json");
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, &over).expect("write");
        let e = local.get(&lease).await.expect_err("over the cap");
        assert!(
            e.to_string().ends_with(&format!(
                "{} is 65537 bytes, over the limit of 64 KiB",
                file.display()
            )),
            "{e}"
        );
        std::fs::remove_file(&file).expect("rm");
        std::fs::create_dir(&file).expect("mkdir");
        let e = local.get(&lease).await.expect_err("a directory");
        assert!(
            e.to_string().ends_with(&format!(
                "{} is a directory, not a regular file",
                file.display()
            )),
            "{e}"
        );
        assert!(local.exists(&lease).await.is_err());
        assert_eq!(
            local
                .get(&ObjPath::from("s/absent.json"))
                .await
                .expect("io"),
            None
        );
    }

    fn record(attempt: &str) -> AttemptRecord {
        serde_json::from_value(serde_json::json!({
            "schema": 1, "tunectl_version": "0.1.0", "study_id": "s", "spec_hash": "h",
            "trial_key": "ab", "attempt_id": attempt,
            "config": {"a": 1}, "config_label": "a=1", "config_index": 1,
            "is_baseline": false, "cell": {}, "cell_label": "", "cell_index": 0,
            "repeat": 0, "role": "sweep", "fidelity": null, "host": "h1",
            "host_class": "hc-1", "fingerprint": "fp-1", "slot": 0,
            "started_at": "t0", "finished_at": "t1", "duration_s": 1.0, "run_s": 0.5,
            "warmup_runs": 0, "status": "ok", "failure": null,
            "exit": {"code": 0, "signal": null}, "metrics": {"t": [1.0]},
            "digest": null, "outputs": {}, "command": "cmd",
            "stdout_tail": "", "stderr_tail": ""
        }))
        .expect("record")
    }

    /// Files under `dir`, relative, sorted (staging files included).
    fn files(dir: &std::path::Path) -> Vec<String> {
        fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(root, &p, out);
                } else if let Ok(rel) = p.strip_prefix(root) {
                    out.push(rel.display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    /// The same ledger folder through object_store alone (the path every
    /// store but a local one takes).
    fn through_object_store(dir: &std::path::Path) -> Ledger {
        let store = LocalFileSystem::new_with_prefix(dir).expect("store");
        Ledger::with_store(Arc::new(store), dir.display().to_string())
    }

    #[tokio::test]
    async fn a_local_attempt_write_leaves_what_object_store_leaves() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fast = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        assert!(fast.local_root.is_some());
        fast.write_attempt(&record("a1")).await.expect("write");
        let slow_dir = tempfile::tempdir().expect("tempdir");
        let slow = through_object_store(slow_dir.path());
        slow.write_attempt(&record("a1")).await.expect("write");
        // Same names but the stream's (random), and the same bytes.
        let strip = |names: Vec<String>| -> Vec<String> {
            names
                .into_iter()
                .map(|n| match n.split('/').collect::<Vec<_>>().as_slice() {
                    ["s", "log", _, entry] => format!("s/log/*/{entry}"),
                    _ => n,
                })
                .collect()
        };
        assert_eq!(strip(files(dir.path())), strip(files(slow_dir.path())));
        assert_eq!(files(dir.path()).len(), 2, "{:?}", files(dir.path()));
        let read = |d: &std::path::Path| std::fs::read(d.join("s/trials/ab/a1.json"));
        assert_eq!(
            read(dir.path()).expect("fast"),
            read(slow_dir.path()).expect("slow")
        );
        // And a scan finds it through its log entry.
        let scan = fast.scan("s").await.expect("scan");
        assert_eq!(scan.attempts.len(), 1);
    }

    #[tokio::test]
    async fn an_existing_attempt_is_never_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        let path = dir.path().join("s/trials/ab/a1.json");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, b"already here").expect("write");
        let err = ledger
            .write_attempt_tries(&record("a1"), 1)
            .await
            .expect_err("exists");
        assert!(
            err.to_string().contains(
                "write `s/trials/ab/a1.json` failed: an attempt with this id already exists"
            ),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).expect("read"), b"already here");
        // Nor is a lease generation: the second launcher does not get it.
        let ttl = Duration::from_secs(60);
        let a = ledger
            .acquire_lease(
                "s",
                "k",
                &crate::ledger::lease::Holder {
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
        let gen1 = dir.path().join("s/leases/k.000000000001.json");
        let before = std::fs::read(&gen1).expect("read");
        let mut b = a.expect("lease");
        b.record.owner = "B".into();
        b.record.generation = 0;
        assert!(!ledger.renew_lease(&mut b, ttl).await.expect("io"));
        assert_eq!(std::fs::read(&gen1).expect("read"), before);
    }

    /// The log entry is written first and the object only after it: an
    /// entry that cannot be written means no object; an object that
    /// cannot be written leaves its entry (a scan looks for it again).
    #[tokio::test]
    async fn the_log_entry_comes_before_the_object() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        std::fs::create_dir_all(dir.path().join("s")).expect("mkdir");
        std::fs::write(dir.path().join("s/log"), b"in the way").expect("write");
        let err = ledger
            .write_attempt_tries(&record("a1"), 1)
            .await
            .expect_err("no log");
        assert!(err.to_string().contains("write `s/log/"), "{err}");
        assert!(
            !dir.path().join("s/trials").exists(),
            "an object without its entry"
        );

        std::fs::remove_file(dir.path().join("s/log")).expect("rm");
        std::fs::write(dir.path().join("s/trials"), b"in the way").expect("write");
        let err = ledger
            .write_attempt_tries(&record("a2"), 1)
            .await
            .expect_err("no trials");
        assert!(
            err.to_string().contains("write `s/trials/ab/a2.json`"),
            "{err}"
        );
        let names = files(&dir.path().join("s/log"));
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].ends_with("-ab-a2.json"), "{names:?}");
    }

    /// A folder that cannot be written: the error names the object and the
    /// file, word for word as object_store's own local writes name them.
    #[tokio::test]
    async fn a_failed_local_write_reads_as_object_stores_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("s"), b"not a folder").expect("write");
        let url = dir.path().display().to_string();
        let fast = Ledger::open(&url).expect("ledger");
        let slow = through_object_store(dir.path());
        let key = ObjPath::from("s/hosts/h/x.json");
        let a = fast.create_tries(&key, b"{}".to_vec(), 1, false).await;
        let b = slow.create_tries(&key, b"{}".to_vec(), 1, false).await;
        let (a, b) = (
            a.expect_err("fast").to_string(),
            b.expect_err("slow").to_string(),
        );
        assert_eq!(a, b);
        let file = dir.path().join("s/hosts/h/x.json#1");
        assert!(a.contains("`s/hosts/h/x.json` failed"), "{a}");
        assert!(a.contains(&file.display().to_string()), "{a}");
    }

    async fn live_leases(ledger: &Ledger) -> usize {
        ledger.live_leases("s").await.expect("io").unexpired.len()
    }

    #[tokio::test]
    async fn a_lease_goes_with_its_record_and_stays_when_the_record_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        let ttl = Duration::from_secs(60);
        let lease = ledger
            .acquire_lease(
                "s",
                "ab",
                &crate::ledger::lease::Holder {
                    owner: "A",
                    host: "h",
                    what: "",
                    while_live: false,
                },
                ttl,
            )
            .await
            .expect("io")
            .expect("free");
        let gen1 = dir.path().join("s/leases/ab.000000000001.json");
        assert!(gen1.exists());
        std::fs::create_dir_all(dir.path().join("s/trials/ab")).expect("mkdir");
        std::fs::write(dir.path().join("s/trials/ab/a1.json"), b"x").expect("write");
        assert!(
            ledger
                .write_attempt_releasing(&record("a1"), 1, Some(&lease))
                .await
                .is_err()
        );
        assert!(gen1.exists(), "released without its record");
        ledger
            .write_attempt_releasing(&record("a2"), 1, Some(&lease))
            .await
            .expect("write");
        assert!(dir.path().join("s/trials/ab/a2.json").exists());
        assert!(!gen1.exists(), "not released");
        assert_eq!(live_leases(&ledger).await, 0);
    }

    /// On a store, released lease generations wait to go out together:
    /// each stays until a bulk delete's worth waits or the launch flushes
    /// them, and then one request takes them all. The trial's record is
    /// written first, so its trial is done for every reader meanwhile.
    #[tokio::test]
    async fn a_stores_releases_go_out_together() {
        let store = Arc::new(test_store::Listing::new(false));
        let ledger = Ledger::over_store(store.clone(), "memory://");
        let holder = crate::ledger::lease::Holder {
            owner: "A",
            host: "h",
            what: "",
            while_live: false,
        };
        let ttl = Duration::from_secs(60);
        let take = |trial: &'static str| {
            let ledger = &ledger;
            async move {
                ledger
                    .acquire_lease("s", trial, &holder, ttl)
                    .await
                    .expect("io")
                    .expect("free")
            }
        };
        let leased = |trial: &'static str| {
            let store = store.clone();
            async move {
                let key = ObjPath::from(format!("s/leases/{trial}.000000000001.json"));
                store.head(&key).await.is_ok()
            }
        };
        let rec = |trial: &str, attempt: &str| {
            let mut r = record(attempt);
            r.trial_key = trial.to_string();
            r
        };
        let first = take("ab").await;
        ledger
            .write_attempt_releasing(&rec("ab", "a1"), 1, Some(&first))
            .await
            .expect("write");
        assert!(leased("ab").await, "deleted alone");
        // Its trial is done for a reader meanwhile.
        let scan = ledger.scan("s").await.expect("scan");
        assert_eq!(scan.terminal().len(), 1);
        let second = take("cd").await;
        ledger
            .write_attempt_releasing(&rec("cd", "a2"), 1, Some(&second))
            .await
            .expect("write");
        assert!(leased("ab").await && leased("cd").await);
        let deletes = store.deletes.load(std::sync::atomic::Ordering::Relaxed);
        ledger.flush_releases().await;
        assert!(!leased("ab").await && !leased("cd").await, "flushed");
        assert_eq!(
            store.deletes.load(std::sync::atomic::Ordering::Relaxed),
            deletes + 1,
            "one bulk delete"
        );
        // A bulk delete's worth goes out at once.
        let mut last = None;
        for i in 0..RELEASE_BATCH_KEYS {
            let trial: &'static str = Box::leak(format!("t{i:04}").into_boxed_str());
            let lease = take(trial).await;
            ledger
                .write_attempt_releasing(&rec(trial, &format!("b{i:04}")), 1, Some(&lease))
                .await
                .expect("write");
            last = Some(trial);
        }
        assert!(!leased(last.expect("one")).await, "a full batch waited");
        assert_eq!(live_leases(&ledger).await, 0);
    }
}
