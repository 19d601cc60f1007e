//! A fleet past this machine, by simulation: the real launch driver
//! (`run_study`: scheduler, trial runner, racing, confirmation rounds,
//! drift anchors, the decisions' own analyses) and the real ledger code,
//! over FAKE hosts under virtual time. Not a timed test: it prints a table
//! for docs/benchmarks.md.
//!
//!   cargo bench --bench fleet_sim
//!   HOSTS=1000 SLOTS=8 CLASSES=10 CHURN=0.05 SEED=1 cargo bench --bench fleet_sim
//!   MAX_REPEATS=3 HOSTS=100 cargo bench --bench fleet_sim   # no racing
//!   RACES=1 HOSTS=20 SLOTS=2 CLASSES=2 cargo bench --bench fleet_sim   # each round
//!
//! - Hosts: HOSTS FAKE hosts (no process runs) of SLOTS GPUs, split evenly
//!   into CLASSES host classes (each a GPU model of its own, so the
//!   fingerprint classes them apart). A host is lost now and then (CHURN
//!   losses per host-hour, Poisson) and answers again 5 to 30 minutes
//!   later: the attempt it ran is lost with it and runs again.
//! - Trials: a FAKE program whose truth is known per class: a step time
//!   per config and cell (a few configs crash on some classes, one changes
//!   its output), 5 samples an attempt with 5 % noise a sample and 2 % an
//!   attempt. An attempt lasts a heavy-tailed start-up (log-normal, median
//!   STARTUP seconds, sigma 1, at most 30 min) plus its measured steps.
//! - Time is virtual (tokio's paused clock): a trial of 20 minutes costs
//!   no wall time, so what is measured is the schedule's own waits and the
//!   launcher's own CPU.
//! - The ledger is the real ledger code over an in-memory object store
//!   with a counting layer: every put, get, head, delete, copy and list
//!   page is counted (a list page is 1,000 names, as S3 pages). Listings
//!   come from an ordered index of the names beside it, so that a listing
//!   from an offset or by delimiter costs what it hands out, as it does on
//!   S3 (the in-memory store filters every name under the prefix).
//!
//! It reports, per class and for the fleet: slot time busy (attempts'
//! virtual time, lost ones included, over slots × span), the makespan
//! against its lower bound (per class: the largest of its attempts'
//! seconds over its slots and its longest attempt), ledger requests per
//! attempt, and the launcher's CPU per 1,000 trials and per virtual hour
//! (one thread: the runtime is current-thread). It says where each class's
//! span goes (the planned sweep, then the racing and confirmation rounds
//! after it), which kinds of ledger object the requests go to, and what
//! every bucket shipped against the truth (its fastest safe config).
//!
//! Targets (issue): >= 97 % busy, launcher <= 1 core, <= 3 ledger requests
//! per attempt.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::{Bound, Range};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as ObjPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use tokio_util::sync::CancellationToken;
use tunectl::fingerprint::{Fingerprint, Gpu};
use tunectl::launch::events::LaunchEvent;
use tunectl::launch::progress::describe;
use tunectl::launch::run_study::{LaunchHost, LaunchOptions, run_study};
use tunectl::ledger::Ledger;
use tunectl::ledger::records::ExitInfo;
use tunectl::spec::Study;
use tunectl::transport::local::RunOutput;
use tunectl::transport::{
    AttemptOutcome, AttemptSpec, Ended, HostState, Transport, TransportError,
};

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (splitmix64).
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A standard normal draw (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u = self.unit().max(1e-12);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

// ---------------------------------------------------------------------
// The counting store.

#[derive(Default)]
struct Counts {
    put: AtomicU64,
    get: AtomicU64,
    head: AtomicU64,
    delete: AtomicU64,
    copy: AtomicU64,
    list: AtomicU64,
    listed: AtomicU64,
    /// Requests by the kind of object (`<study>/<kind>/...`: leases, log,
    /// trials, index...) and verb.
    by_kind: Mutex<BTreeMap<(String, &'static str), u64>>,
}

/// The kind of object a path is: its second segment (`<study>/<kind>/`).
fn kind(path: Option<&ObjPath>) -> String {
    let Some(path) = path else {
        return "(root)".to_string();
    };
    let parts: Vec<_> = path.parts().collect();
    parts
        .get(1)
        .or(parts.first())
        .map(|p| p.as_ref().to_string())
        .unwrap_or_else(|| "(root)".to_string())
}

impl Counts {
    fn note(&self, path: Option<&ObjPath>, verb: &'static str, n: u64) {
        if let Ok(mut m) = self.by_kind.lock() {
            *m.entry((kind(path), verb)).or_default() += n;
        }
    }

    /// Requests as S3 would bill them: a list is a request a page of
    /// 1,000 names.
    fn requests(&self) -> u64 {
        self.put.load(Relaxed)
            + self.get.load(Relaxed)
            + self.head.load(Relaxed)
            + self.delete.load(Relaxed)
            + self.copy.load(Relaxed)
            + self.list.load(Relaxed)
            + self.listed.load(Relaxed) / 1000
    }
}

/// An in-memory object store that counts every request, listing from an
/// ordered index of its names (raw key to metadata).
struct Counting {
    inner: Arc<InMemory>,
    counts: Arc<Counts>,
    names: Arc<Mutex<BTreeMap<String, ObjectMeta>>>,
}

impl fmt::Debug for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting(InMemory)")
    }
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting(InMemory)")
    }
}

impl Counting {
    fn new(counts: Arc<Counts>) -> Counting {
        Counting {
            inner: Arc::new(InMemory::new()),
            counts,
            names: Default::default(),
        }
    }

    /// Keep the index of names in step with a write to `location`.
    async fn indexed(&self, location: &ObjPath) {
        if let Ok(meta) = self.inner.head(location).await
            && let Ok(mut names) = self.names.lock()
        {
            names.insert(location.as_ref().to_string(), meta);
        }
    }

    fn unindexed(&self, location: &ObjPath) {
        if let Ok(mut names) = self.names.lock() {
            names.remove(location.as_ref());
        }
    }

    /// The names under `prefix` (whole segments, as object_store means
    /// it) after `offset`, in key order, a page of 1,000 at a time as S3
    /// hands them out: a listing stopped early reads no further page.
    fn listed(
        &self,
        prefix: Option<&ObjPath>,
        offset: Option<&ObjPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let p = prefix
            .map(|p| format!("{}/", p.as_ref()))
            .unwrap_or_default();
        let start = match offset {
            Some(o) if o.as_ref() >= p.as_str() => Bound::Excluded(o.as_ref().to_string()),
            _ => Bound::Included(p.clone()),
        };
        let names = Arc::clone(&self.names);
        futures::stream::unfold(Some(start), move |from| {
            let page: Vec<ObjectMeta> = match (&from, names.lock()) {
                (Some(from), Ok(names)) => names
                    .range((from.clone(), Bound::Unbounded))
                    .take_while(|(k, _)| k.starts_with(&p))
                    .take(1000)
                    .map(|(_, m)| m.clone())
                    .collect(),
                _ => Vec::new(),
            };
            let next = (page.len() == 1000)
                .then(|| {
                    page.last()
                        .map(|m| Bound::Excluded(m.location.as_ref().to_string()))
                })
                .flatten();
            let done = page.is_empty();
            async move { (!done).then(|| (futures::stream::iter(page.into_iter().map(Ok)), next)) }
        })
        .flatten()
        .boxed()
    }

    fn counted_list(
        &self,
        prefix: Option<&ObjPath>,
        s: BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counts.list.fetch_add(1, Relaxed);
        self.counts.note(prefix, "list", 1);
        let counts = Arc::clone(&self.counts);
        let prefix = prefix.cloned();
        s.inspect(move |_| {
            counts.listed.fetch_add(1, Relaxed);
            counts.note(prefix.as_ref(), "names", 1);
        })
        .boxed()
    }
}

#[async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &ObjPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.counts.put.fetch_add(1, Relaxed);
        self.counts.note(Some(location), "put", 1);
        let r = self.inner.put_opts(location, payload, opts).await?;
        self.indexed(location).await;
        Ok(r)
    }

    async fn put_multipart_opts(
        &self,
        _location: &ObjPath,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        // The ledger writes no object in parts; the index of names would
        // not see one.
        Err(object_store::Error::NotImplemented {
            operation: "put_multipart".into(),
            implementer: "fleet_sim::Counting".into(),
        })
    }

    async fn get_opts(
        &self,
        location: &ObjPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if options.head {
            self.counts.head.fetch_add(1, Relaxed);
            self.counts.note(Some(location), "head", 1);
        } else {
            self.counts.get.fetch_add(1, Relaxed);
            self.counts.note(Some(location), "get", 1);
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &ObjPath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.counts.get.fetch_add(ranges.len() as u64, Relaxed);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjPath>> {
        let counts = Arc::clone(&self.counts);
        let names = Arc::clone(&self.names);
        // One request a thousand keys, as S3's DeleteObjects takes them.
        let mut keys = 0u64;
        self.inner
            .delete_stream(locations)
            .inspect(move |deleted| {
                if keys.is_multiple_of(1000) {
                    counts.delete.fetch_add(1, Relaxed);
                    counts.note(deleted.as_ref().ok(), "delete", 1);
                }
                keys += 1;
                if let (Ok(p), Ok(mut names)) = (deleted, names.lock()) {
                    names.remove(p.as_ref());
                }
            })
            .boxed()
    }

    fn list(
        &self,
        prefix: Option<&ObjPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counted_list(prefix, self.listed(prefix, None))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&ObjPath>,
        offset: &ObjPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counted_list(prefix, self.listed(prefix, Some(offset)))
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjPath>,
    ) -> object_store::Result<ListResult> {
        self.counts.list.fetch_add(1, Relaxed);
        self.counts.note(prefix, "list", 1);
        // Each folder under the prefix once: the names in it are skipped
        // (every name in `a/` sorts before `a0`).
        let p = prefix
            .map(|p| format!("{}/", p.as_ref()))
            .unwrap_or_default();
        let mut r = ListResult {
            common_prefixes: Vec::new(),
            objects: Vec::new(),
            extensions: Default::default(),
        };
        if let Ok(names) = self.names.lock() {
            let mut from = Bound::Included(p.clone());
            while let Some((k, m)) = names.range((from.clone(), Bound::Unbounded)).next() {
                let Some(rest) = k.strip_prefix(&p) else {
                    break;
                };
                match rest.split_once('/') {
                    Some((folder, _)) => {
                        r.common_prefixes
                            .push(ObjPath::from(format!("{p}{folder}")));
                        from = Bound::Included(format!("{p}{folder}0"));
                    }
                    None => {
                        r.objects.push(m.clone());
                        from = Bound::Excluded(k.clone());
                    }
                }
            }
        }
        let names = (r.objects.len() + r.common_prefixes.len()) as u64;
        self.counts.listed.fetch_add(names, Relaxed);
        self.counts.note(prefix, "names", names);
        Ok(r)
    }

    async fn copy_opts(
        &self,
        from: &ObjPath,
        to: &ObjPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.counts.copy.fetch_add(1, Relaxed);
        self.counts.note(Some(to), "copy", 1);
        self.inner.copy_opts(from, to, options).await?;
        self.indexed(to).await;
        Ok(())
    }

    async fn rename_opts(
        &self,
        from: &ObjPath,
        to: &ObjPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        // A copy and a delete on S3.
        self.counts.copy.fetch_add(1, Relaxed);
        self.counts.delete.fetch_add(1, Relaxed);
        self.counts.note(Some(to), "copy", 1);
        self.counts.note(Some(from), "delete", 1);
        self.inner.rename_opts(from, to, options).await?;
        self.unindexed(from);
        self.indexed(to).await;
        Ok(())
    }
}

// ---------------------------------------------------------------------
// The FAKE program's truth.

const DTYPES: [&str; 4] = ["fp32", "bf16", "fp16", "fp8"];
const BATCHES: [i64; 6] = [8, 16, 32, 64, 128, 256];
const TILES: [i64; 6] = [32, 64, 128, 256, 512, 1024];
const STREAMS: [i64; 3] = [1, 2, 4];
const SEQS: [i64; 4] = [256, 512, 1024, 2048];

/// The study: 4 × 6 × 6 × 3 = 432 configs, 4 cells (a bucket each),
/// 3 repeats; racing, confirmation rounds and drift anchors as the
/// defaults have them, but `measurement.max_repeats` from MAX_REPEATS
/// (default 30, the study's default; 3: no racing).
fn study_text() -> String {
    let list = |v: &[i64]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "name: fleet-sim
knobs:
  dtype: {{kind: categorical, values: [{}], default: fp32}}
  batch: {{kind: int, values: [{}], default: 32}}
  tile: {{kind: int, values: [{}], default: 128}}
  streams: {{kind: int, values: [{}], default: 1}}
cells:
  seq: [{}]
trial: {{command: 'train --dtype {{{{ dtype }}}} --batch {{{{ batch }}}} --tile {{{{ tile }}}} --streams {{{{ streams }}}} --seq {{{{ seq }}}}', timeout: 2h}}
objective: {{metric: step_ms, unit: ms, better: lower}}
measurement: {{warmup: 0, repeats: 3, max_repeats: {}}}
budget: {{max_trials: 1000000}}
",
        DTYPES.join(", "),
        list(&BATCHES),
        list(&TILES),
        list(&STREAMS),
        list(&SEQS),
        env_num("MAX_REPEATS", 30u32),
    )
}

/// One config of the FAKE program.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Config {
    dtype: usize,
    batch: i64,
    tile: i64,
    streams: i64,
}

/// What the FAKE program does with a config on a class: a step time in
/// ms at `seq`, or it crashes, or it runs with another output.
#[derive(Debug, PartialEq)]
enum Truth {
    Runs { ms: f64, same_output: bool },
    Crashes(&'static str),
}

fn truth(class: usize, classes: usize, c: Config, seq: i64) -> Truth {
    // fp8 needs the newer half of the classes; batch 256 runs out of
    // memory on odd classes; fp16 overflows (another output) on every
    // third class.
    if c.dtype == 3 && class < classes / 2 {
        return Truth::Crashes("fp8 is not supported on this GPU (FAKE)");
    }
    if c.batch == 256 && class % 2 == 1 {
        return Truth::Crashes("CUDA out of memory (FAKE)");
    }
    let same_output = !(c.dtype == 2 && class.is_multiple_of(3));
    let generation = 1.0 / (1.0 + 0.15 * class as f64);
    let dtype = [1.0, 0.64, 0.62, 0.5][c.dtype];
    let batch = match c.batch {
        8 => 1.3,
        16 => 1.12,
        32 => 1.0,
        64 => 0.94,
        128 => 0.91,
        _ => 0.9,
    };
    // The best tile depends on the class.
    let best_tile = TILES[1 + class % 4];
    let steps = ((c.tile as f64).log2() - (best_tile as f64).log2()).abs();
    let tile = 0.96 + 0.03 * steps;
    let streams = match (c.streams, class >= classes / 2) {
        (1, _) => 1.0,
        (_, true) => 0.97,
        (_, false) => 1.02,
    };
    let seq_factor = seq as f64 / 512.0;
    Truth::Runs {
        ms: 40.0 * generation * dtype * batch * tile * streams * seq_factor,
        same_output,
    }
}

fn config_of(spec: &AttemptSpec) -> Option<(Config, i64)> {
    let var = |name: &str| {
        spec.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let knobs: serde_json::Value = serde_json::from_str(var("TUNECTL_KNOBS")?).ok()?;
    let cell: serde_json::Value = serde_json::from_str(var("TUNECTL_CELL")?).ok()?;
    let dtype = DTYPES.iter().position(|d| knobs["dtype"] == *d)?;
    Some((
        Config {
            dtype,
            batch: knobs["batch"].as_i64()?,
            tile: knobs["tile"].as_i64()?,
            streams: knobs["streams"].as_i64()?,
        },
        cell["seq"].as_i64()?,
    ))
}

// ---------------------------------------------------------------------
// FAKE hosts under virtual time.

type VInstant = tokio::time::Instant;

/// When a host is lost and when it answers again.
struct Churn {
    rng: Rng,
    rate_per_s: f64,
    next_loss: Option<VInstant>,
    down: Option<Range<VInstant>>,
    reported_down: bool,
    rejoin_pending: bool,
}

impl Churn {
    fn new(seed: u64, per_hour: f64, t0: VInstant) -> Churn {
        let mut c = Churn {
            rng: Rng(seed),
            rate_per_s: per_hour / 3600.0,
            next_loss: None,
            down: None,
            reported_down: false,
            rejoin_pending: false,
        };
        c.next_loss = c.after(t0);
        c
    }

    fn after(&mut self, t: VInstant) -> Option<VInstant> {
        (self.rate_per_s > 0.0).then(|| {
            let wait = -(1.0 - self.rng.unit()).ln() / self.rate_per_s;
            t + Duration::from_secs_f64(wait)
        })
    }

    /// Bring the schedule to `now`.
    fn advance(&mut self, now: VInstant) {
        while let Some(at) = self.next_loss.filter(|at| *at <= now) {
            let for_s = 300.0 + 1500.0 * self.rng.unit();
            let end = at + Duration::from_secs_f64(for_s);
            self.down = Some(at..end);
            self.reported_down = false;
            self.next_loss = self.after(end);
        }
    }

    fn is_down(&self, t: VInstant) -> bool {
        self.down.as_ref().is_some_and(|d| d.contains(&t))
    }
}

/// One attempt as the FAKE host saw it.
struct Span {
    class: usize,
    start: f64,
    end: f64,
    lost: bool,
    /// `sweep` (a planned repeat), `racing` (a sweep run past the planned
    /// repeats), `anchor` or `confirm`.
    phase: &'static str,
    /// The cell's `seq` (one cell a bucket here).
    seq: i64,
}

/// The phase an attempt serves, from its contract's role and repeat.
fn phase_of(spec: &AttemptSpec, repeats: u32) -> &'static str {
    let var = |name: &str| {
        spec.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    match var("TUNECTL_ROLE") {
        Some("anchor") => "anchor",
        Some("confirm") => "confirm",
        _ if var("TUNECTL_REPEAT")
            .and_then(|r| r.parse::<u32>().ok())
            .is_some_and(|r| r >= repeats) =>
        {
            "racing"
        }
        _ => "sweep",
    }
}

struct Shared {
    t0: VInstant,
    spans: Mutex<Vec<Span>>,
    classes: usize,
    startup_s: f64,
}

/// A FAKE GPU host: no process runs; each attempt sleeps (in virtual
/// time) for its start-up and its steps and answers with the truth plus
/// noise.
struct SimHost {
    name: String,
    class: usize,
    gpus: u32,
    rng: Mutex<Rng>,
    churn: Mutex<Churn>,
    shared: Arc<Shared>,
}

fn lost() -> TransportError {
    TransportError::Ssh {
        detail: "connection reset (FAKE churn)".to_string(),
    }
}

#[async_trait]
impl Transport for SimHost {
    fn trial_dir(&self, study: &str, trial_key: &str, attempt_id: &str) -> String {
        ["/sim", study, trial_key, attempt_id].join("/")
    }

    async fn probe(
        &self,
        _tools: &BTreeMap<String, String>,
    ) -> Result<Fingerprint, TransportError> {
        Ok(Fingerprint {
            schema: tunectl::fingerprint::SCHEMA_VERSION,
            hostname: Some(self.name.clone()),
            arch: Some("x86_64".to_string()),
            os: Some("FakeOS".to_string()),
            kernel: Some("1.0".to_string()),
            cpu_model: Some("Fake CPU".to_string()),
            cpu_count: Some(64),
            memory_mib: Some(1 << 20),
            gpus: (0..self.gpus)
                .map(|i| Gpu {
                    index: i,
                    name: format!("FAKE GPU model {}", self.class),
                    memory_mib: Some(81920),
                    uuid: None,
                    vendor: Default::default(),
                })
                .collect(),
            driver_version: Some("600.1".to_string()),
            cuda_version: Some("13.0".to_string()),
            ..Fingerprint::default()
        })
    }

    async fn run_attempt(&self, spec: &AttemptSpec, _cancel: &CancellationToken) -> AttemptOutcome {
        let start = VInstant::now();
        let (truth, samples, run_s) = {
            let mut rng = self.rng.lock().expect("rng");
            let Some((config, seq)) = config_of(spec) else {
                panic!(
                    "the FAKE host cannot read the trial's knobs: {:?}",
                    spec.env
                );
            };
            let startup = (self.shared.startup_s * rng.normal().exp()).min(1800.0);
            let truth = truth(self.class, self.shared.classes, config, seq);
            match truth {
                Truth::Runs { ms, same_output } => {
                    let attempt = 1.0 + 0.02 * rng.normal();
                    let samples: Vec<f64> = (0..5)
                        .map(|_| ms * attempt * (1.0 + 0.05 * rng.normal()))
                        .collect();
                    // 500 steps a sample.
                    let steps_s: f64 = samples.iter().sum::<f64>() * 500.0 / 1000.0;
                    (Some(same_output), samples, startup + steps_s)
                }
                Truth::Crashes(_) => (None, Vec::new(), startup),
            }
        };
        let end = start + Duration::from_secs_f64(run_s);
        let lost_at = {
            let mut churn = self.churn.lock().expect("churn");
            churn.advance(start);
            if churn.is_down(start) {
                Some(start)
            } else {
                churn.next_loss.filter(|at| *at < end)
            }
        };
        let finish = lost_at.unwrap_or(end);
        tokio::time::sleep_until(finish).await;
        let at = |t: VInstant| t.duration_since(self.shared.t0).as_secs_f64();
        self.shared.spans.lock().expect("spans").push(Span {
            class: self.class,
            start: at(start),
            end: at(finish),
            lost: lost_at.is_some(),
            phase: phase_of(spec, 3),
            seq: config_of(spec).map_or(-1, |(_, seq)| seq),
        });
        if lost_at.is_some() {
            return AttemptOutcome {
                ended: Ended::HostLost(lost()),
                ..Default::default()
            };
        }
        let elapsed = Duration::from_secs_f64(run_s);
        let (code, stderr, result) = match truth {
            Some(same) => {
                let digest = if same { "output A" } else { "output B (FAKE)" };
                let result = serde_json::json!({"metrics": {"step_ms": samples}, "digest": digest});
                (0, String::new(), Some(result.to_string().into_bytes()))
            }
            None => (1, "the FAKE program crashed".to_string(), None),
        };
        AttemptOutcome {
            run: Some(RunOutput {
                exit: ExitInfo {
                    code: Some(code),
                    signal: None,
                },
                elapsed,
                stderr_tail: stderr,
                ..Default::default()
            }),
            result,
            elapsed,
            ..Default::default()
        }
    }

    async fn state(&self) -> HostState {
        let now = VInstant::now();
        let mut churn = self.churn.lock().expect("churn");
        churn.advance(now);
        if churn.is_down(now) {
            let first = !churn.reported_down;
            churn.reported_down = true;
            churn.rejoin_pending = true;
            let left = churn
                .down
                .as_ref()
                .map(|d| d.end.saturating_duration_since(now))
                .unwrap_or_default();
            return HostState::Down {
                reason: lost(),
                since: std::time::Instant::now(),
                retry_in: left.min(Duration::from_secs(60)),
                first,
            };
        }
        let rejoined = std::mem::take(&mut churn.rejoin_pending);
        HostState::Up { rejoined }
    }
}

// ---------------------------------------------------------------------
// The run and its figures.

/// CPU seconds this process has used (user + system).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 14th
    // field of the line, stime the 15th (11th and 12th after it).
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The fastest config the truth says is safe at `seq` on `class` (the
/// baseline when nothing is 2 % faster), and the baseline's time.
fn best(class: usize, classes: usize, seq: i64) -> (Config, f64, f64) {
    let base = Config {
        dtype: 0,
        batch: 32,
        tile: 128,
        streams: 1,
    };
    let time = |c: Config| match truth(class, classes, c, seq) {
        Truth::Runs {
            ms,
            same_output: true,
        } => Some(ms),
        _ => None,
    };
    let base_ms = time(base).expect("the baseline runs");
    let mut top = (base, base_ms);
    for dtype in 0..DTYPES.len() {
        for &batch in &BATCHES {
            for &tile in &TILES {
                for &streams in &STREAMS {
                    let c = Config {
                        dtype,
                        batch,
                        tile,
                        streams,
                    };
                    if let Some(ms) = time(c).filter(|ms| *ms < top.1) {
                        top = (c, ms);
                    }
                }
            }
        }
    }
    (top.0, top.1, base_ms)
}

/// The FAKE program's config that a report's config names.
fn config_in(config: &serde_json::Value) -> Config {
    Config {
        dtype: DTYPES
            .iter()
            .position(|d| config["dtype"] == *d)
            .unwrap_or(0),
        batch: config["batch"].as_i64().unwrap_or(0),
        tile: config["tile"].as_i64().unwrap_or(0),
        streams: config["streams"].as_i64().unwrap_or(0),
    }
}

/// How a cell measured `want`: its trials, hosts and interval against the
/// baseline, or its rejection, or that the cell has no report of it.
fn measured(cell: &tunectl::decide::CellReport, want: Config) -> String {
    let found = cell
        .eligible
        .iter()
        .chain(&cell.rejected)
        .find(|r| config_in(&r.config) == want);
    match found {
        None => "no report at the cell".to_string(),
        Some(r) => match (&r.rejection, &r.interval) {
            (Some(rej), _) => format!("rejected: {}", rej.detail),
            (None, Some(i)) => format!(
                "{} trials on {} hosts, {:.4}x [{:.4}, {:.4}], n={} vs {}",
                r.trials, r.hosts, i.speedup, i.low, i.high, i.runs, i.reference_runs
            ),
            (None, None) => format!("{} trials on {} hosts, no interval", r.trials, r.hosts),
        },
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not run
    // this (harness = false and no `--bench`): building it is the check.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let hosts_n: usize = env_num("HOSTS", 1000);
    let slots: u32 = env_num("SLOTS", 8);
    let classes: usize = env_num("CLASSES", 10);
    let churn: f64 = env_num("CHURN", 0.05);
    let seed: u64 = env_num("SEED", 1);
    let startup_s: f64 = env_num("STARTUP", 60.0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(simulate(hosts_n, slots, classes, churn, seed, startup_s));
}

async fn simulate(
    hosts_n: usize,
    slots: u32,
    classes: usize,
    churn: f64,
    seed: u64,
    startup_s: f64,
) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let study = Study::from_text(&dir.path().join("study.yaml"), &study_text())
        .expect("the simulated study is valid");
    let counts = Arc::new(Counts::default());
    let store = Counting::new(Arc::clone(&counts));
    let ledger = Ledger::over_store(Arc::new(store), "memory://fleet-sim");
    let t0 = VInstant::now();
    let shared = Arc::new(Shared {
        t0,
        spans: Mutex::new(Vec::new()),
        classes,
        startup_s,
    });
    let mut seeds = Rng(seed);
    let hosts: Vec<LaunchHost> = (0..hosts_n)
        .map(|i| {
            let class = i % classes;
            let name = format!("sim-{class}-{i:04}");
            let host = SimHost {
                name: name.clone(),
                class,
                gpus: slots,
                rng: Mutex::new(Rng(seeds.next())),
                churn: Mutex::new(Churn::new(seeds.next(), churn, t0)),
                shared: Arc::clone(&shared),
            };
            LaunchHost {
                name,
                transport_name: "fake".to_string(),
                slots,
                devices: None,
                device_env: None,
                transport: Arc::new(host),
                only_parts: None,
            }
        })
        .collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // RACES=1: each racing and confirmation round as it is queued, at its
    // virtual hour.
    let rounds = std::env::var("RACES").is_ok_and(|v| v == "1");
    let events = tokio::spawn(async move {
        let t0 = VInstant::now();
        let mut n = 0u64;
        while let Some(event) = rx.recv().await {
            n += 1;
            let h = t0.elapsed().as_secs_f64() / 3600.0;
            if rounds
                && matches!(
                    event,
                    LaunchEvent::RaceQueued { .. } | LaunchEvent::ConfirmationQueued { .. }
                )
            {
                for line in describe(&event) {
                    println!("{h:7.2} h  {line}");
                }
            }
        }
        n
    });
    let options = LaunchOptions {
        host_timeout: Duration::from_secs(3600),
        ..Default::default()
    };
    let wall = std::time::Instant::now();
    let cpu0 = cpu_s();
    let summary = run_study(
        &study,
        study.id(),
        &ledger,
        hosts,
        options,
        tx,
        CancellationToken::new(),
    )
    .await
    .expect("the simulated launch runs");
    let cpu = cpu_s() - cpu0;
    let wall = wall.elapsed().as_secs_f64();
    let requests = counts.requests();
    let events = events.await.unwrap_or(0);

    let spans = std::mem::take(&mut *shared.spans.lock().expect("spans"));
    let attempts = spans.len() as f64;
    let class_slots = (hosts_n / classes) as f64 * slots as f64;
    println!(
        "fleet_sim: {hosts_n} FAKE hosts x {slots} GPUs in {classes} classes, churn {churn} losses a host-hour, start-up median {startup_s} s, seed {seed}"
    );
    println!(
        "launch: {} attempts ({} lost with their host), {} trials ran ({} ok, {} failed), {} racing trials queued, {} confirmation trials, {} anchors; {events} events",
        spans.len(),
        spans.iter().filter(|s| s.lost).count(),
        summary.ran,
        summary.ok,
        summary.failed,
        summary.race_queued,
        summary.confirm_queued,
        summary.anchors_started,
    );
    println!();
    println!(
        "| class | slots | attempts | span, h | busy share | lost share | bound, h | span / bound |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut makespan: f64 = 0.0;
    let mut busy_all = 0.0;
    for class in 0..classes {
        let mine: Vec<&Span> = spans.iter().filter(|s| s.class == class).collect();
        let busy: f64 = mine.iter().map(|s| s.end - s.start).sum();
        let lost: f64 = mine
            .iter()
            .filter(|s| s.lost)
            .map(|s| s.end - s.start)
            .sum();
        let span = mine.iter().map(|s| s.end).fold(0.0, f64::max);
        let longest = mine.iter().map(|s| s.end - s.start).fold(0.0, f64::max);
        let bound = (busy / class_slots).max(longest);
        makespan = makespan.max(span);
        busy_all += busy;
        println!(
            "| {class} | {class_slots} | {} | {:.2} | {:.1} % | {:.1} % | {:.2} | {:.3} |",
            mine.len(),
            span / 3600.0,
            100.0 * busy / (class_slots * span).max(1e-9),
            100.0 * lost / (class_slots * span).max(1e-9),
            bound / 3600.0,
            span / bound.max(1e-9),
        );
    }
    let all_slots = hosts_n as f64 * slots as f64;
    println!(
        "| fleet | {all_slots} | {} | {:.2} | {:.1} % | | | |",
        spans.len(),
        makespan / 3600.0,
        100.0 * busy_all / (all_slots * makespan).max(1e-9),
    );
    println!();
    println!(
        "Where each class's span goes: the planned sweep (3 repeats of every config), then what follows it (racing runs, confirmation rounds, anchors)."
    );
    println!();
    println!(
        "| class | sweep ends, h | busy until then | after it, h | busy after it | racing | confirm | anchors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for class in 0..classes {
        let mine: Vec<&Span> = spans.iter().filter(|s| s.class == class).collect();
        let span = mine.iter().map(|s| s.end).fold(0.0, f64::max);
        let sweep_end = mine
            .iter()
            .filter(|s| s.phase == "sweep")
            .map(|s| s.end)
            .fold(0.0, f64::max);
        // Busy slot-seconds inside [from, to).
        let busy_in = |from: f64, to: f64| -> f64 {
            mine.iter()
                .map(|s| (s.end.min(to) - s.start.max(from)).max(0.0))
                .sum()
        };
        let count = |phase: &str| mine.iter().filter(|s| s.phase == phase).count();
        println!(
            "| {class} | {:.2} | {:.1} % | {:.2} | {:.1} % | {} | {} | {} |",
            sweep_end / 3600.0,
            100.0 * busy_in(0.0, sweep_end) / (class_slots * sweep_end).max(1e-9),
            (span - sweep_end) / 3600.0,
            100.0 * busy_in(sweep_end, span) / (class_slots * (span - sweep_end)).max(1e-9),
            count("racing"),
            count("confirm"),
            count("anchor"),
        );
    }
    println!();
    println!(
        "Each bucket's timeline (hours from the start): when its last planned sweep run, racing run and confirmation run ended, and its racing runs."
    );
    println!();
    println!("| class | seq | sweep ends | racing ends | confirm ends | racing runs |");
    println!("|---|---:|---:|---:|---:|---:|");
    for class in 0..classes {
        let mut seqs: Vec<i64> = spans
            .iter()
            .filter(|s| s.class == class)
            .map(|s| s.seq)
            .collect();
        seqs.sort_unstable();
        seqs.dedup();
        for seq in seqs {
            let mine = || {
                spans
                    .iter()
                    .filter(move |s| s.class == class && s.seq == seq)
            };
            let end = |phase: &str| {
                mine()
                    .filter(|s| s.phase == phase)
                    .map(|s| s.end / 3600.0)
                    .fold(f64::NAN, f64::max)
            };
            println!(
                "| {class} | {seq} | {:.2} | {:.2} | {:.2} | {} |",
                end("sweep"),
                end("racing"),
                end("confirm"),
                mine().filter(|s| s.phase == "racing").count(),
            );
        }
    }
    println!();
    println!(
        "launcher: {cpu:.1} s CPU ({wall:.1} s wall) for {} trials: {:.2} s per 1,000 trials, {:.4} cores over the {:.2} h makespan",
        spans.len(),
        1000.0 * cpu / attempts.max(1.0),
        cpu / makespan.max(1e-9),
        makespan / 3600.0,
    );
    println!(
        "ledger: {requests} requests ({} put, {} get, {} head, {} delete, {} copy, {} list calls, {} names listed): {:.2} per attempt",
        counts.put.load(Relaxed),
        counts.get.load(Relaxed),
        counts.head.load(Relaxed),
        counts.delete.load(Relaxed),
        counts.copy.load(Relaxed),
        counts.list.load(Relaxed),
        counts.listed.load(Relaxed),
        requests as f64 / attempts.max(1.0),
    );
    if let Ok(m) = counts.by_kind.lock() {
        let mut kinds: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((k, verb), n) in m.iter() {
            kinds
                .entry(k.as_str())
                .or_default()
                .push(format!("{verb} {:.2}", *n as f64 / attempts.max(1.0)));
        }
        for (k, verbs) in kinds {
            println!("  {k}: {} per attempt", verbs.join(", "));
        }
    }

    // What shipped, against the truth.
    let record = ledger
        .read_study(study.id())
        .await
        .expect("ledger read")
        .expect("the study record");
    let scan = ledger.scan(study.id()).await.expect("scan");
    let plans = ledger.plans(study.id()).await.expect("plans");
    let (host_records, _) = ledger.hosts(study.id()).await.expect("hosts");
    let analysis = tunectl::decide::analyze_planned(&record, &scan, &host_records, &plans);
    let class_of: HashMap<String, usize> = (0..hosts_n)
        .map(|i| (format!("sim-{}-{i:04}", i % classes), i % classes))
        .collect();
    let (mut buckets, mut verdicts, mut exact, mut worse) = (0, 0, 0, 0);
    let mut regret: f64 = 0.0;
    let mut off: Vec<String> = Vec::new();
    for c in &analysis.classes {
        let Some(class) = c.hosts.first().and_then(|h| class_of.get(h)).copied() else {
            continue;
        };
        for b in &c.buckets {
            // One cell a bucket here: its label is `seq=N`.
            let Some(seq) = b
                .cells
                .first()
                .and_then(|l| l.strip_prefix("seq="))
                .and_then(|v| v.parse::<i64>().ok())
            else {
                continue;
            };
            buckets += 1;
            if b.level == tunectl::decide::Level::Verdict {
                verdicts += 1;
            }
            let (top, top_ms, base_ms) = best(class, classes, seq);
            let shipped = config_in(&b.config);
            match truth(class, classes, shipped, seq) {
                Truth::Runs {
                    ms,
                    same_output: true,
                } => {
                    exact += usize::from(shipped == top);
                    worse += usize::from(ms > base_ms);
                    regret = regret.max(ms / top_ms - 1.0);
                    // What shipped where it was not the fastest, and why.
                    if ms > top_ms * (1.0 + 1e-9) {
                        off.push(format!(
                            "  class {class} seq {seq}: shipped {shipped:?} ({ms:.2} ms, {:+.1} % over the fastest {top:?} at {top_ms:.2} ms): {}",
                            100.0 * (ms / top_ms - 1.0),
                            b.decision
                        ));
                        // How the cell measured each of the two.
                        if let Some(cell) = c
                            .cells
                            .iter()
                            .find(|r| b.cells.first() == Some(&r.cell_label))
                        {
                            for (what, want) in [("shipped", shipped), ("fastest", top)] {
                                off.push(format!("    {what}: {}", measured(cell, want)));
                            }
                        }
                    }
                }
                other => panic!("class {class} seq {seq} shipped {shipped:?}: {other:?}"),
            }
        }
    }
    println!(
        "decisions: {buckets} buckets, {verdicts} VERDICT; {exact} shipped the truth's fastest safe config, none unsafe, {worse} slower than the baseline; worst shipped config {:.1} % slower than the truth's fastest",
        100.0 * regret
    );
    for line in off {
        println!("{line}");
    }
}
