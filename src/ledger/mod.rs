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
pub mod log;
pub mod records;
pub mod scan;

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
}

/// The attempts of one study as found in the ledger (see `scan.rs`).
#[derive(Debug, Default, Clone)]
pub struct Scan {
    /// Attempts that count (voided ones removed), ordered by (trial key,
    /// attempt id). From an index or a scan, records carry no rendered
    /// command, output tails, lost reason or start and finish times.
    pub attempts: Vec<AttemptRecord>,
    pub corrupt: Vec<CorruptObject>,
    /// Attempts whose measurements were discarded (a drifting host).
    pub voided: usize,
    /// Cells given up on hosts whose baseline would not settle.
    pub drops: Vec<DropRecord>,
}

impl Scan {
    /// Per trial key, its attempts in attempt order.
    pub fn by_trial(&self) -> BTreeMap<&str, Vec<&AttemptRecord>> {
        let mut out: BTreeMap<&str, Vec<&AttemptRecord>> = BTreeMap::new();
        for run in self.runs() {
            let mut v: Vec<&AttemptRecord> = run.iter().collect();
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
    pub fn first_attempts(&self) -> BTreeMap<&str, &AttemptRecord> {
        let mut out: BTreeMap<&str, &AttemptRecord> = BTreeMap::new();
        for run in self.runs() {
            if let Some(a) = run.iter().min_by(|a, b| a.attempt_id.cmp(&b.attempt_id)) {
                let slot = out.entry(a.trial_key.as_str()).or_insert(a);
                if a.attempt_id < slot.attempt_id {
                    *slot = a;
                }
            }
        }
        out
    }

    /// The attempt that counts for each trial: its first terminal attempt.
    /// Later terminal attempts of the same key (two launchers racing) are
    /// never counted twice.
    pub fn terminal(&self) -> BTreeMap<&str, &AttemptRecord> {
        self.terminal_where(|_| true)
    }

    /// [`Scan::terminal`] of the attempts `keep` accepts (the others are
    /// not looked at).
    pub fn terminal_where(
        &self,
        keep: impl Fn(&AttemptRecord) -> bool,
    ) -> BTreeMap<&str, &AttemptRecord> {
        let mut out: BTreeMap<&str, &AttemptRecord> = BTreeMap::new();
        for run in self.runs() {
            let first = run
                .iter()
                .filter(|a| a.status.is_terminal() && keep(a))
                .min_by(|a, b| a.attempt_id.cmp(&b.attempt_id));
            if let Some(a) = first {
                let slot = out.entry(a.trial_key.as_str()).or_insert(a);
                if a.attempt_id < slot.attempt_id {
                    *slot = a;
                }
            }
        }
        out
    }

    /// Runs of consecutive attempts with the same trial key (one run per
    /// trial when the attempts are ordered, as a scan leaves them).
    fn runs(&self) -> impl Iterator<Item = &[AttemptRecord]> {
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

    fn with_store(store: Arc<dyn ObjectStore>, url: String) -> Ledger {
        Ledger {
            store,
            url,
            known: Default::default(),
            streams: Default::default(),
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

    async fn get_bytes(&self, key: &ObjPath) -> Result<Option<bytes::Bytes>, LedgerError> {
        match self.store.get(key).await {
            Ok(r) => r
                .bytes()
                .await
                .map(Some)
                .map_err(|e| self.io_err("read", key, e)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
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
    pub async fn ensure_study(&self, record: &StudyRecord) -> Result<StudyRecord, LedgerError> {
        let key = ObjPath::from(format!("{}/study.json", record.study_id));
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

    /// Every fingerprint stored for a study (corrupt ones skipped).
    pub async fn hosts(
        &self,
        study: &str,
    ) -> Result<(Vec<HostRecord>, Vec<CorruptObject>), LedgerError> {
        let prefix = ObjPath::from(format!("{study}/hosts"));
        let keys = self.list(&prefix).await?;
        let mut out = Vec::new();
        let mut corrupt = Vec::new();
        for key in keys {
            if let Some(bytes) = self.get(&key).await? {
                match serde_json::from_slice::<HostRecord>(&bytes) {
                    Ok(r) => out.push(r),
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
        let key = ObjPath::from(format!(
            "{}/trials/{}/{}.json",
            record.study_id, record.trial_key, record.attempt_id
        ));
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| self.io_err("encode", &key, e))?;
        // The log entry first: a scan that trusts the index finds the
        // attempt through it (log.rs).
        self.log_object_tries(
            &record.study_id,
            &record.trial_key,
            &format!("{}.json", record.attempt_id),
            max_tries,
            true,
        )
        .await?;
        if !self.create_tries(&key, bytes, max_tries, true).await? {
            return Err(self.io_err("write", &key, "an attempt with this id already exists"));
        }
        Ok(())
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
