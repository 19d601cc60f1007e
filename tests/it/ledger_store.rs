//! The ledger on an object store, end to end through the binary. Every
//! scenario runs twice: on the local filesystem and on an S3-compatible
//! server (moto on loopback, started by `scripts/test.sh`, which exports
//! `TUNECTL_TEST_S3_ENDPOINT`). Each S3 test makes its own bucket with a
//! plain HTTP PUT.
//!
//! Without `TUNECTL_TEST_S3_ENDPOINT` the S3 half fails, saying what it
//! needs; `TUNECTL_TEST_SKIP_S3=1` skips it on purpose (each skipped test
//! says so), for a `cargo test` on a machine without the server.
//!
//! The trial program is the FAKE of tests/it/support/fake.rs, whose profile is
//! known, so the expected decisions are known. Every command's stdout and
//! stderr, and every object left in the store, are checked for the
//! (throwaway) credentials the commands were given.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::Value as Json;

use crate::support;
use crate::support::env::{Env, Out};
use crate::support::{ran, ran_to_the_end, unique};

/// A quickstart-like study: knobs with an output trap (`wrong`) and a crash
/// trap (`crash`), two cells in two buckets, warm-ups, repeats and a final
/// confirmation round.
const STUDY: &str = r#"name: storefake
description: quickstart-like fake study for the ledger store tests
knobs:
  mode: {kind: categorical, values: [base, fast, slow, wrong, crash], default: base}
cells:
  n: [1, 2]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} {{ n }}"
  timeout: 20s
objective: {metric: throughput, unit: ops/s, better: higher}
measurement: {warmup: 1, repeats: 2, anchor_every: 0, confirm_repeats: 1}
# One sample per run and 2 repeats: allow decisions on 2 samples (these
# tests are about the store, not the statistics).
selection: {min_samples: 2}
gate: {outputs: [out.txt]}
"#;

const STUDY_ID: &str = "storefake";
/// Sweep trials of a full launch of [`STUDY`]: per cell 2 repeats of base,
/// fast, slow and wrong, and 1 of crash (a failed config is not repeated).
const SWEEP_TRIALS: usize = 2 * (4 * 2 + 1);
/// The prefix of the ledger inside an S3 test bucket.
const S3_PREFIX: &str = "team/ledgers";
/// Lease time for every command: a killed launcher's trials are taken over
/// after this (the default, 2 minutes, is too slow for tests).
const LEASE_TTL: &str = "2s";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Local,
    S3,
}

/// A closed TCP port on loopback (bound, then released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// An [`Env`] whose ledger is on one backend, with the raw object store
/// beside it (the same library the binary uses, not the binary's own code).
/// Every command gets throwaway credentials and must never show them.
struct OnStore {
    env: Env,
    /// S3: (endpoint, bucket).
    s3: Option<(String, String)>,
    secret: String,
    rt: tokio::runtime::Runtime,
}

impl Deref for OnStore {
    type Target = Env;

    fn deref(&self) -> &Env {
        &self.env
    }
}

impl OnStore {
    /// `None` when the backend is S3 and no test server is configured
    /// (outside CI).
    fn new(backend: Backend, study: &str) -> Option<OnStore> {
        let s3 = match backend {
            Backend::Local => None,
            Backend::S3 => {
                let endpoint = support::s3::endpoint()?;
                let bucket = format!("tunectl-{}", unique());
                support::s3::create_bucket(&endpoint, &bucket);
                Some((endpoint, bucket))
            }
        };
        let secret = format!("tunectl-test-secret-{}", unique());
        let token = format!("tunectl-test-token-{}", unique());
        let mut env = Env::new(study)
            .with_var("TUNECTL_LEASE_TTL", LEASE_TTL)
            .with_var("AWS_ACCESS_KEY_ID", "tunectl-test")
            .with_var("AWS_SECRET_ACCESS_KEY", &secret)
            .with_var("AWS_SESSION_TOKEN", &token)
            .with_var("AWS_REGION", "us-east-1")
            .with_var("AWS_ALLOW_HTTP", "true")
            .with_secret(&secret)
            .with_secret(&token);
        if let Some((endpoint, bucket)) = &s3 {
            env = env
                .with_var("AWS_ENDPOINT_URL", endpoint)
                .with_ledger(format!("s3://{bucket}/{S3_PREFIX}"));
        }
        Some(OnStore {
            env,
            s3,
            secret,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        })
    }

    /// Every command keeps a compacted index however small the study
    /// (by default only studies of 256 attempts or more have one).
    fn indexed(self) -> OnStore {
        OnStore {
            env: self.env.with_var("TUNECTL_LEDGER_INDEX_MIN", "1"),
            ..self
        }
    }

    /// `tunectl launch STUDY` with its attempts' directories under `work`,
    /// and `vars` in its environment.
    fn launch_in(&self, study: &Path, work: &str, vars: &[(&str, &str)]) -> Command {
        let mut c = self.tunectl();
        c.arg("launch")
            .arg(study)
            .args(["--ledger", self.ledger_url(), "--workdir"])
            .arg(self.path().join(work))
            .args(["--progress", "quiet"]);
        for (k, v) in vars {
            c.env(k, v);
        }
        c
    }

    /// `tunectl ARGS --ledger URL`.
    fn cli(&self, args: &[&str]) -> Out {
        let mut c = self.tunectl();
        c.args(args).args(["--ledger", self.ledger_url()]);
        self.run(c)
    }

    /// Measured runs of the fake per trial key (warm-ups not counted).
    fn measured_runs(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for r in self.runs().into_iter().filter(|r| r.measured()) {
            *out.entry(r.trial).or_insert(0) += 1;
        }
        out
    }

    /// The ledger's root as a raw object store (the same library the
    /// binary uses, not the binary's own code).
    fn store(&self) -> Arc<dyn ObjectStore> {
        match &self.s3 {
            Some((endpoint, bucket)) => Arc::new(object_store::prefix::PrefixStore::new(
                self.bucket_store(endpoint, bucket),
                S3_PREFIX,
            )),
            None => {
                std::fs::create_dir_all(self.ledger()).expect("ledger dir");
                Arc::new(
                    object_store::local::LocalFileSystem::new_with_prefix(self.ledger())
                        .expect("local store"),
                )
            }
        }
    }

    fn bucket_store(&self, endpoint: &str, bucket: &str) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id("tunectl-test")
            .with_secret_access_key(&self.secret)
            .build()
            .expect("S3 store")
    }

    /// Every object under `prefix` of the ledger: (key, bytes), those
    /// deleted between the listing and their read left out.
    fn objects(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        let store = self.store();
        self.rt.block_on(async {
            let p = ObjPath::from(prefix);
            let metas: Vec<_> = store
                .list(Some(&p))
                .try_collect()
                .await
                .expect("list the ledger");
            let mut out = Vec::new();
            for m in metas {
                // Deleted since the listing (a launch is running): gone.
                let got = match store.get(&m.location).await {
                    Err(object_store::Error::NotFound { .. }) => continue,
                    got => got.expect("get"),
                };
                let bytes = got.bytes().await.expect("read");
                out.push((m.location.to_string(), bytes.to_vec()));
            }
            out.sort();
            out
        })
    }

    /// One object of the ledger, if it exists.
    fn object(&self, key: &str) -> Option<Vec<u8>> {
        let store = self.store();
        self.rt.block_on(async {
            match store.get(&ObjPath::from(key)).await {
                Ok(r) => Some(r.bytes().await.expect("read").to_vec()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => panic!("get {key}: {e}"),
            }
        })
    }

    fn delete_raw(&self, key: &str) {
        let store = self.store();
        self.rt.block_on(async {
            store
                .delete(&ObjPath::from(key))
                .await
                .expect("delete an object");
        });
    }

    /// What readers show: `report` as JSON and as text, `status --json`.
    fn views(&self) -> Views {
        let study = self.study_arg();
        let mut out = Vec::new();
        for args in [
            vec!["report", &study, "--format", "json"],
            vec!["report", &study],
            vec!["status", &study, "--json"],
            vec!["export", &study, "--format", "csv", "--samples"],
        ] {
            let o = self.cli(&args);
            assert_eq!(o.code, Some(0), "{args:?}:\n{}", o.text());
            out.push(o.stdout);
        }
        Views {
            report_json: out[0].clone(),
            report: out[1].clone(),
            status: out[2].clone(),
            data: out[3].clone(),
        }
    }

    fn put_raw(&self, key: &str, bytes: Vec<u8>) {
        let store = self.store();
        self.rt.block_on(async {
            store
                .put(&ObjPath::from(key), PutPayload::from(bytes))
                .await
                .expect("put a raw object");
        });
    }

    /// Attempt records per trial key (in attempt-id order); objects that
    /// are not attempt records are left out.
    fn attempts_in_store(&self) -> BTreeMap<String, Vec<Json>> {
        let mut out: BTreeMap<String, Vec<Json>> = BTreeMap::new();
        for (key, bytes) in self.objects(&format!("{STUDY_ID}/trials")) {
            let parts: Vec<&str> = key.split('/').collect();
            if parts.len() != 4 || !parts[3].ends_with(".json") {
                continue;
            }
            if let Ok(v) = serde_json::from_slice::<Json>(&bytes)
                && v.get("trial_key").is_some()
            {
                out.entry(parts[2].to_string()).or_default().push(v);
            }
        }
        out
    }

    /// No credential in any object of the store: the whole bucket, or the
    /// whole ledger directory.
    /// Every lease generation written was released.
    fn assert_no_leases(&self) {
        let leases: Vec<String> = self
            .objects(&format!("{STUDY_ID}/leases"))
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert!(leases.is_empty(), "leases left behind: {leases:?}");
    }

    fn assert_no_secret_in_store(&self) {
        let mut seen = 0;
        match &self.s3 {
            Some((endpoint, bucket)) => {
                let store = self.bucket_store(endpoint, bucket);
                let objects: Vec<(String, Vec<u8>)> = self.rt.block_on(async {
                    let metas: Vec<_> = store.list(None).try_collect().await.expect("list bucket");
                    let mut out = Vec::new();
                    for m in metas {
                        let b = store
                            .get(&m.location)
                            .await
                            .expect("get")
                            .bytes()
                            .await
                            .expect("read");
                        out.push((m.location.to_string(), b.to_vec()));
                    }
                    out
                });
                for (key, bytes) in objects {
                    seen += 1;
                    self.assert_no_secret(&String::from_utf8_lossy(&bytes), &key);
                }
            }
            None => {
                let mut stack = vec![self.ledger()];
                while let Some(dir) = stack.pop() {
                    let Ok(entries) = std::fs::read_dir(&dir) else {
                        continue;
                    };
                    for e in entries {
                        let p = e.expect("entry").path();
                        if p.is_dir() {
                            stack.push(p);
                        } else {
                            seen += 1;
                            let bytes = std::fs::read(&p).expect("read ledger file");
                            self.assert_no_secret(
                                &String::from_utf8_lossy(&bytes),
                                &p.display().to_string(),
                            );
                        }
                    }
                }
            }
        }
        assert!(seen > 0, "the ledger is empty");
    }
}

/// What readers show of a study (see [`Env::views`]).
#[derive(Debug, PartialEq)]
struct Views {
    report_json: String,
    report: String,
    status: String,
    /// `export --format csv --samples`: every sample as data.
    data: String,
}

fn is_terminal(a: &Json) -> bool {
    matches!(a["status"].as_str(), Some("ok" | "failed"))
}

/// Keys of sweep trials with a terminal attempt. A config that fails is
/// not repeated in its cell, and which of its repeats carries the failure
/// may differ between runs (a repeat held by a killed launcher's lease is
/// deferred, so a later repeat can run first); its trials count once as
/// `failed:<config>@<cell>`.
fn sweep_keys(attempts: &BTreeMap<String, Vec<Json>>) -> BTreeSet<String> {
    attempts
        .iter()
        .filter_map(|(k, l)| {
            let a = l.iter().find(|a| a["role"] == "sweep" && is_terminal(a))?;
            Some(if a["status"] == "failed" {
                format!("failed:{}@{}", a["config_label"], a["cell_label"])
            } else {
                k.clone()
            })
        })
        .collect()
}

/// Every trial in the ledger has exactly one terminal attempt (lost ones
/// allowed beside it).
fn assert_one_terminal_each(attempts: &BTreeMap<String, Vec<Json>>) {
    assert!(!attempts.is_empty(), "no attempts in the ledger");
    for (key, list) in attempts {
        let terminal = list.iter().filter(|a| is_terminal(a)).count();
        assert_eq!(
            terminal,
            1,
            "trial {key} has {terminal} terminal attempts: {}",
            serde_json::to_string_pretty(list).unwrap_or_default()
        );
    }
}

/// What a report decides: per cell (cell, winner, [(rejected, class)]) and
/// per bucket (bucket, what ships).
type Decisions = (
    Vec<(String, String, Vec<(String, String)>)>,
    Vec<(String, String)>,
);

fn decisions(report: &Json) -> Decisions {
    let classes = report["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 1, "one host class expected: {report}");
    let cells = classes[0]["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|c| {
            let mut rejected: Vec<(String, String)> = c["rejected"]
                .as_array()
                .expect("rejected")
                .iter()
                .map(|r| {
                    (
                        r["label"].as_str().unwrap_or("").to_string(),
                        r["rejection"]["class"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            rejected.sort();
            (
                c["cell_label"].as_str().unwrap_or("").to_string(),
                c["winner"]["label"]
                    .as_str()
                    .unwrap_or("(none)")
                    .to_string(),
                rejected,
            )
        })
        .collect();
    let buckets = classes[0]["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| {
            (
                b["label"].as_str().unwrap_or("").to_string(),
                b["winner"]["label"]
                    .as_str()
                    .unwrap_or("baseline")
                    .to_string(),
            )
        })
        .collect();
    (cells, buckets)
}

/// The decisions [`STUDY`]'s fake profile implies, whatever the store.
fn assert_expected_decisions(d: &Decisions) {
    let wrong_and_crash = vec![
        ("mode=crash".to_string(), "crash".to_string()),
        ("mode=wrong".to_string(), "output_changed".to_string()),
    ];
    let cells: Vec<_> = ["n=1", "n=2"]
        .iter()
        .map(|c| {
            (
                c.to_string(),
                "mode=fast".to_string(),
                wrong_and_crash.clone(),
            )
        })
        .collect();
    assert_eq!(d.0, cells, "cell decisions");
    assert_eq!(d.1.len(), 2, "two buckets: {d:?}");
    for (bucket, ships) in &d.1 {
        assert_eq!(ships, "mode=fast", "bucket {bucket}");
    }
}

/// A clean launch of `study` on a local ledger: its decisions and sweep
/// trial keys (trial keys do not depend on the store).
fn reference(study: &str) -> (Decisions, BTreeSet<String>) {
    let env = OnStore::new(Backend::Local, study).expect("local env");
    env.launch_ok(&[]);
    (
        decisions(&env.report_json()),
        sweep_keys(&env.attempts_in_store()),
    )
}

/// A trial that outlives several quarters of the lease time writes its
/// lease once: the launcher's one liveness object is rewritten instead
/// (`launchers/`), and `status` shows the trial running meanwhile. Once
/// the launch ends, neither its leases nor its liveness are left behind
/// (otherwise `status` would count the trial as running until they
/// expire).
fn a_long_trial_s_lease_is_kept_by_its_launcher_s_liveness(backend: Backend) {
    let Some(env) = OnStore::new(backend, STUDY) else {
        return;
    };
    // The lease time is 2 s, a quarter 0.5 s: 2.5 s is five quarters, at
    // cell 1 of mode `fast` only.
    let slow = [
        ("FAKE_SLEEP", "2.5"),
        ("FAKE_SLEEP_N", "1"),
        ("FAKE_SLEEP_MODE", "fast"),
    ];
    let running = env.spawn(env.launch_in(&env.study(), "work", &slow));
    let names =
        |prefix: &str| -> Vec<(String, Vec<u8>)> { env.objects(&format!("{STUDY_ID}/{prefix}")) };
    // What the ledger holds while the slow trial runs: every lease
    // generation's name and each liveness written (bounded: 20 s).
    let (mut generations, mut lives) = (BTreeSet::new(), BTreeSet::new());
    let mut running_seen = false;
    let started = std::time::Instant::now();
    let mut running = running;
    while running.child.try_wait().expect("wait").is_none()
        && started.elapsed() < Duration::from_secs(20)
    {
        for (k, _) in names("leases") {
            generations.insert(k.rsplit('.').nth(1).unwrap_or_default().to_string());
        }
        for (_, bytes) in names("launchers") {
            let v: Json = serde_json::from_slice(&bytes).expect("liveness JSON");
            lives.insert(v["written_at"].as_str().unwrap_or_default().to_string());
        }
        if lives.len() >= 3 && !running_seen {
            // Held until the liveness's expiry (a lease time ahead), not
            // the lease's own (15 lease times ahead).
            let status = env.cli(&["status", STUDY_ID, "--format", "json"]);
            let doc: Json = serde_json::from_str(&status.stdout).unwrap_or_default();
            let soon = chrono::Utc::now() + chrono::Duration::seconds(5);
            running_seen = doc["leases"].as_array().is_some_and(|l| {
                l.iter().any(|l| {
                    l["ended"] == false
                        && l["expires_at"]
                            .as_str()
                            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                            .is_some_and(|t| t < soon)
                })
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = env.finish(running);
    assert!(ran_to_the_end(out.code, &out.stderr), "{}", out.text());
    assert_eq!(
        generations,
        BTreeSet::from(["000000000001".to_string()]),
        "a lease was renewed by a new generation"
    );
    assert!(
        lives.len() >= 3,
        "the liveness was written {} times over a 2.5 s trial",
        lives.len()
    );
    assert!(running_seen, "status did not show the slow trial running");
    env.assert_no_leases();
    assert!(names("launchers").is_empty(), "a liveness was left behind");
}

/// Run a scenario against the local filesystem and against S3.
macro_rules! on_both_stores {
    ($scenario:ident, $local:ident, $s3:ident) => {
        #[test]
        fn $local() {
            $scenario(Backend::Local);
        }

        #[test]
        fn $s3() {
            $scenario(Backend::S3);
        }
    };
}

on_both_stores!(
    a_long_trial_s_lease_is_kept_by_its_launcher_s_liveness,
    a_long_trial_s_lease_is_kept_by_its_launcher_s_liveness_on_a_local_ledger,
    a_long_trial_s_lease_is_kept_by_its_launcher_s_liveness_on_an_s3_ledger
);
on_both_stores!(
    quickstart_like_study,
    quickstart_like_study_on_a_local_ledger,
    quickstart_like_study_on_an_s3_ledger
);
on_both_stores!(
    two_concurrent_launchers,
    two_concurrent_launchers_on_a_local_ledger,
    two_concurrent_launchers_on_an_s3_ledger
);
on_both_stores!(
    sigkilled_launchers,
    sigkilled_launchers_on_a_local_ledger,
    sigkilled_launchers_on_an_s3_ledger
);
on_both_stores!(
    corrupt_attempt_objects,
    corrupt_attempt_objects_on_a_local_ledger,
    corrupt_attempt_objects_on_an_s3_ledger
);
on_both_stores!(
    attempts_written_after_the_index,
    attempts_written_after_the_index_on_a_local_ledger,
    attempts_written_after_the_index_on_an_s3_ledger
);
on_both_stores!(
    a_damaged_index_is_ignored,
    a_damaged_index_is_ignored_on_a_local_ledger,
    a_damaged_index_is_ignored_on_an_s3_ledger
);
on_both_stores!(
    unwritable_ledger,
    unwritable_local_ledger_stops_before_any_trial,
    missing_s3_bucket_stops_before_any_trial
);

/// The study runs on the store exactly as on a local ledger: same
/// decisions, nothing runs twice, `status` and `ledger check` agree.
fn quickstart_like_study(backend: Backend) {
    let Some(env) = OnStore::new(backend, STUDY) else {
        return;
    };
    let out = env.launch_ok(&[]);
    assert!(
        out.stderr.contains(&format!(
            "launching study {STUDY_ID} · ledger {}",
            env.ledger_url()
        )),
        "{}",
        out.text()
    );
    let report = env.report_json();
    let d = decisions(&report);
    assert_expected_decisions(&d);
    if backend == Backend::S3 {
        let (local, local_keys) = reference(STUDY);
        assert_eq!(d, local, "S3 and local ledgers decide alike");
        assert_eq!(
            sweep_keys(&env.attempts_in_store()),
            local_keys,
            "same trials"
        );
    }

    // One attempt per trial, every one terminal, each measured once.
    let attempts = env.attempts_in_store();
    assert_one_terminal_each(&attempts);
    for (key, list) in &attempts {
        assert_eq!(list.len(), 1, "trial {key}: {list:?}");
    }
    let sweeps = sweep_keys(&attempts);
    assert_eq!(sweeps.len(), SWEEP_TRIALS, "{sweeps:?}");
    assert_eq!(ran(&out.stderr), attempts.len(), "{}", out.text());
    let measured = env.measured_runs();
    for (key, list) in &attempts {
        let expected = usize::from(list[0]["status"] == "ok");
        assert_eq!(measured.get(key).copied().unwrap_or(0), expected, "{key}");
    }
    let ok = attempts.values().filter(|l| l[0]["status"] == "ok").count();
    let failed = attempts.len() - ok;
    assert_eq!(failed, 2, "crash fails once per cell");

    // The layout, under the URL's prefix.
    let keys: Vec<String> = env.objects("").into_iter().map(|(k, _)| k).collect();
    assert!(keys.contains(&format!("{STUDY_ID}/study.json")), "{keys:?}");
    assert!(
        keys.iter()
            .any(|k| k.starts_with(&format!("{STUDY_ID}/hosts/local/fp-"))),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.starts_with(&format!("{STUDY_ID}/verdicts/"))),
        "{keys:?}"
    );
    assert!(
        !keys
            .iter()
            .any(|k| k.starts_with(&format!("{STUDY_ID}/leases/"))),
        "leases are released: {keys:?}"
    );

    // A relaunch runs nothing new.
    let runs_before = env.runs().len();
    let again = env.launch_ok(&[]);
    assert_eq!(ran(&again.stderr), 0, "{}", again.text());
    assert_eq!(env.runs().len(), runs_before, "the fake ran again");
    assert_eq!(
        env.attempts_in_store(),
        attempts,
        "the relaunch wrote attempts"
    );
    assert_eq!(decisions(&env.report_json()), d);

    // status: done counts; ledger check: clean.
    let status = env.status_json();
    let rows = status.as_array().expect("status rows");
    assert_eq!(rows.len(), 1, "{status}");
    // Sweep trials apart from anchors and confirmation trials.
    let counted = ["done", "anchors", "confirm_trials"]
        .iter()
        .map(|k| rows[0][*k].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert_eq!(counted, ok as u64, "{status}");
    assert_eq!(rows[0]["failed"], failed, "{status}");
    assert_eq!(rows[0]["lost"], 0, "{status}");
    assert_eq!(rows[0]["running"], 0, "{status}");
    let text = env.cli(&["status", &env.study_arg()]);
    assert_eq!(text.code, Some(0), "{}", text.text());
    assert!(
        text.stdout
            .contains(&format!("study {STUDY_ID} · ledger {}", env.ledger_url())),
        "{}",
        text.text()
    );
    assert!(
        text.stdout.contains(&format!(
            "done {} · failed 2",
            rows[0]["done"].as_u64().unwrap_or(u64::MAX)
        )),
        "{}",
        text.text()
    );
    let check = env.cli(&["ledger", "check", &env.study_arg()]);
    assert_eq!(check.code, Some(0), "{}", check.text());
    assert!(
        check.stdout.contains(&format!(
            "{STUDY_ID}: {} attempts readable, 0 voided, 0 unreadable",
            attempts.len()
        )),
        "{}",
        check.text()
    );
    // Without a study: every study of the ledger.
    let all = env.cli(&["ledger", "check"]);
    assert_eq!(all.code, Some(0), "{}", all.text());
    assert!(all.stdout.contains(STUDY_ID), "{}", all.text());

    // Credentials in the URL's user info are never shown either.
    if let Some((_, bucket)) = &env.s3 {
        let url = format!("s3://tunectl-test:{}@{bucket}/{S3_PREFIX}", env.secret);
        let mut c = env.tunectl();
        c.args(["status", &env.study_arg(), "--ledger", &url]);
        let out = env.run(c);
        assert_eq!(out.code, Some(0), "{}", out.text());
        assert!(out.stdout.contains(env.ledger_url()), "{}", out.text());
    }
    env.assert_no_secret_in_store();
}

/// Two launchers started at once on one study: no trial runs twice, every
/// trial ends with exactly one terminal attempt.
fn two_concurrent_launchers(backend: Backend) {
    let Some(env) = OnStore::new(backend, STUDY) else {
        return;
    };
    let slow = [("FAKE_SLEEP", "0.1")];
    let a = env.spawn(env.launch_in(&env.study(), "work-a", &slow));
    let b = env.spawn(env.launch_in(&env.study(), "work-b", &slow));
    let a = env.finish(a);
    let b = env.finish(b);
    assert!(
        ran_to_the_end(a.code, &a.stderr),
        "launcher A:\n{}",
        a.text()
    );
    assert!(
        ran_to_the_end(b.code, &b.stderr),
        "launcher B:\n{}",
        b.text()
    );

    // No trial key measured twice (warm-ups are not counted).
    let measured = env.measured_runs();
    let twice: Vec<_> = measured.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "trials run more than once: {twice:?}\nA:\n{}\nB:\n{}",
        a.text(),
        b.text()
    );

    let attempts = env.attempts_in_store();
    assert_one_terminal_each(&attempts);
    for (key, list) in &attempts {
        if list.iter().any(|a| a["status"] == "ok") {
            assert_eq!(measured.get(key), Some(&1), "trial {key} was measured");
        }
    }
    let terminal = attempts.len();
    assert_eq!(
        ran(&a.stderr) + ran(&b.stderr),
        terminal,
        "the launchers ran each trial once between them:\nA:\n{}\nB:\n{}",
        a.text(),
        b.text()
    );
    assert!(
        ran(&a.stderr) > 0 && ran(&b.stderr) > 0,
        "both launchers ran trials:\nA:\n{}\nB:\n{}",
        a.text(),
        b.text()
    );
    eprintln!(
        "{backend:?}: launcher A ran {}, B ran {} trials",
        ran(&a.stderr),
        ran(&b.stderr)
    );
    let (clean, clean_keys) = reference(STUDY);
    assert_eq!(sweep_keys(&attempts), clean_keys, "every planned trial ran");
    assert_eq!(decisions(&env.report_json()), clean);
    env.assert_no_leases();
    env.assert_no_secret_in_store();
}

/// A small deterministic generator (xorshift64*), so kill points repeat
/// from a seed.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The launcher is SIGKILLed at random points again and again, then runs
/// to completion: every trial has exactly one terminal result and the
/// decisions are a clean run's.
fn sigkilled_launchers(backend: Backend) {
    // Three repeats, so that five kills land before the study is done.
    let study = STUDY.replace("repeats: 2", "repeats: 3");
    let Some(env) = OnStore::new(backend, &study) else {
        return;
    };
    let seed: u64 = std::env::var("TUNECTL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_129);
    let mut rng = Rng(seed.max(1));
    let slow = [("FAKE_SLEEP", "0.2")];
    let mut kills = Vec::new();
    let mut mid_trial = 0;
    for round in 0..12 {
        if kills.len() >= 5 {
            break;
        }
        let wait = Duration::from_millis(250 + rng.next_u64() % 900);
        let runs_before = env.runs().len();
        let mut running = env.spawn(env.launch_in(&env.study(), &format!("work-{round}"), &slow));
        let child = &mut running.child;
        std::thread::sleep(wait);
        if child.try_wait().expect("try_wait").is_none() {
            child.kill().expect("SIGKILL the launcher");
            let _ = child.wait();
            kills.push(wait);
            // A trial this launcher started that has no terminal attempt:
            // the kill landed in the middle of it.
            let attempts = env.attempts_in_store();
            let done: BTreeSet<&String> = attempts
                .iter()
                .filter(|(_, l)| l.iter().any(is_terminal))
                .map(|(k, _)| k)
                .collect();
            if env.runs()[runs_before..]
                .iter()
                .any(|r| !done.contains(&r.trial))
            {
                mid_trial += 1;
            }
        }
        // Whatever it printed before dying carries no credential.
        let out = env.finish(running);
        assert_ne!(out.code, Some(1), "round {round}:\n{}", out.text());
    }
    assert!(
        kills.len() >= 5,
        "only {} kills landed before the study finished (seed {seed}): {kills:?}",
        kills.len()
    );
    assert!(
        mid_trial > 0,
        "no kill landed in the middle of a trial (seed {seed}): {kills:?}"
    );

    let last = env.launch_ok(&[]);
    eprintln!(
        "{backend:?}: seed {seed}, {} kills after {kills:?}, {mid_trial} in the middle of a trial; the last launch ran {}",
        kills.len(),
        ran(&last.stderr)
    );
    let attempts = env.attempts_in_store();
    assert_one_terminal_each(&attempts);
    let (clean, clean_keys) = reference(&study);
    assert_eq!(
        sweep_keys(&attempts),
        clean_keys,
        "every planned trial ran (seed {seed}):\n{}",
        last.text()
    );
    assert_eq!(
        decisions(&env.report_json()),
        clean,
        "seed {seed}, kills after {kills:?}"
    );
    let status = env.status_json();
    assert_eq!(status[0]["running"], 0, "{status}");
    env.assert_no_secret_in_store();
}

/// Truncated and garbage attempt objects: `ledger check` names them and
/// fails, `report` ignores them, and their trials run again.
fn corrupt_attempt_objects(backend: Backend) {
    let Some(env) = OnStore::new(backend, STUDY) else {
        return;
    };
    env.launch_ok(&[]);
    let clean = decisions(&env.report_json());
    let attempts = env.attempts_in_store();
    let pick = |label: &str, cell: &str, repeat: u64| -> (String, String) {
        let (key, list) = attempts
            .iter()
            .find(|(_, l)| {
                l[0]["role"] == "sweep"
                    && l[0]["config_label"] == label
                    && l[0]["cell_label"] == cell
                    && l[0]["repeat"] == repeat
            })
            .unwrap_or_else(|| panic!("no attempt of {label} @ {cell} repeat {repeat}"));
        let id = list[0]["attempt_id"].as_str().expect("attempt id");
        (key.clone(), format!("{STUDY_ID}/trials/{key}/{id}.json"))
    };
    // The first baseline of n=1 (its cell waits for it) and a repeat of the
    // winner at n=2.
    let (base_key, truncated) = pick("baseline", "n=1", 0);
    let (fast_key, garbage) = pick("mode=fast", "n=2", 1);
    let objects: BTreeMap<String, Vec<u8>> = env.objects(STUDY_ID).into_iter().collect();
    let whole = &objects[&truncated];
    env.put_raw(&truncated, whole[..whole.len() / 2].to_vec());
    env.put_raw(&garbage, b"\x00\xffnot an attempt record\x7f".to_vec());

    let check = env.cli(&["ledger", "check", &env.study_arg()]);
    assert_eq!(check.code, Some(1), "{}", check.text());
    for key in [&truncated, &garbage] {
        assert!(
            check.stdout.contains(key.as_str()),
            "{key}:\n{}",
            check.text()
        );
    }
    assert!(
        check.stderr.contains(&format!(
            "2 unreadable objects in ledger {}",
            env.ledger_url()
        )),
        "{}",
        check.text()
    );

    // report: the two are ignored (and listed), nothing else changes.
    let report = env.report_json();
    let listed: BTreeSet<&str> = report["corrupt_objects"]
        .as_array()
        .expect("corrupt_objects")
        .iter()
        .filter_map(|c| c["key"].as_str())
        .collect();
    assert_eq!(
        listed,
        BTreeSet::from([truncated.as_str(), garbage.as_str()]),
        "{report}"
    );
    let cell1 = &report["classes"][0]["cells"][0];
    assert_eq!(cell1["cell_label"], "n=1");
    assert_eq!(cell1["baseline"]["trials"], 1, "{cell1}");
    let status = env.cli(&["status", &env.study_arg()]);
    assert_eq!(status.code, Some(0), "{}", status.text());
    assert!(
        status.stdout.contains("2 unreadable ledger objects"),
        "{}",
        status.text()
    );

    // A relaunch runs exactly those two trials again.
    let before = env.attempts_in_store();
    let runs_before = env.runs().len();
    let out = env.launch_ok(&[]);
    for key in [&truncated, &garbage] {
        assert!(
            out.stderr
                .contains(&format!("warning: ignoring unreadable ledger object {key}")),
            "{}",
            out.text()
        );
    }
    let after = env.attempts_in_store();
    let sweeps_of = |m: &BTreeMap<String, Vec<Json>>, k: &str| {
        m.get(k)
            .map(|l| l.iter().filter(|a| a["role"] == "sweep").count())
            .unwrap_or(0)
    };
    let new_sweeps: BTreeSet<&String> = after
        .keys()
        .filter(|k| sweeps_of(&after, k) > sweeps_of(&before, k))
        .collect();
    assert_eq!(
        new_sweeps,
        BTreeSet::from([&base_key, &fast_key]),
        "{}",
        out.text()
    );
    let rerun: BTreeSet<String> = env.runs()[runs_before..]
        .iter()
        .filter(|r| r.measured())
        .map(|r| r.trial.clone())
        .collect();
    assert!(
        rerun.contains(&base_key) && rerun.contains(&fast_key),
        "{rerun:?}"
    );
    for key in [&base_key, &fast_key] {
        let readable: Vec<_> = after[key].iter().filter(|a| is_terminal(a)).collect();
        assert_eq!(readable.len(), 1, "{key}: {readable:?}");
    }
    let report = env.report_json();
    assert_eq!(decisions(&report), clean);
    assert_eq!(report["classes"][0]["cells"][0]["baseline"]["trials"], 2);
    // The objects stay (nothing is ever rewritten): check still names them.
    let check = env.cli(&["ledger", "check", &env.study_arg()]);
    assert_eq!(check.code, Some(1), "{}", check.text());
    assert!(
        check.stdout.contains(truncated.as_str()),
        "{}",
        check.text()
    );
    env.assert_no_secret_in_store();
}

/// The compacted index of [`STUDY`].
const INDEX: &str = "storefake/index/compact.json";

/// The index never decides what readers see: attempts written after it
/// (by another launcher, and by one whose clock is far behind) are seen,
/// a resume over it runs nothing already done, and without it every
/// report and status reads the same.
fn attempts_written_after_the_index(backend: Backend) {
    let Some(env) = OnStore::new(backend, STUDY) else {
        return;
    };
    let env = env.indexed();
    // A first launcher runs part of the study; its scans leave an index.
    let partial = env.study_dir().join("partial.yaml");
    std::fs::write(&partial, format!("{STUDY}budget: {{max_trials: 4}}\n")).expect("write");
    let first = env.run(env.launch_in(&partial, "work-1", &[]));
    assert!(
        ran_to_the_end(first.code, &first.stderr),
        "{}",
        first.text()
    );
    let first_ran = ran(&first.stderr);
    assert!(
        first_ran > 0 && first_ran < SWEEP_TRIALS,
        "{}",
        first.text()
    );
    let stale = env
        .object(INDEX)
        .unwrap_or_else(|| panic!("the first launch left no index:\n{}", first.text()));

    // Another launcher runs the rest. Then the index is put back as the
    // first left it, as if nothing had updated it since.
    let rest = env.launch_ok(&[]);
    assert!(ran(&rest.stderr) > 0, "{}", rest.text());
    env.put_raw(INDEX, stale.clone());
    let through_stale = env.views();
    let report: Json = serde_json::from_str(&through_stale.report_json).expect("report JSON");
    assert_expected_decisions(&decisions(&report));
    let (clean, clean_keys) = reference(STUDY);
    assert_eq!(decisions(&report), clean);
    assert_eq!(sweep_keys(&env.attempts_in_store()), clean_keys);

    // A resume over the stale index runs nothing.
    env.put_raw(INDEX, stale.clone());
    let runs_before = env.runs().len();
    let again = env.launch_ok(&[]);
    assert_eq!(ran(&again.stderr), 0, "{}", again.text());
    assert_eq!(env.runs().len(), runs_before, "the fake ran again");

    // Without the index: the same output, byte for byte; the full read
    // writes a new index, and reading through it changes nothing either.
    env.put_raw(INDEX, stale.clone());
    let indexed = env.views();
    assert_eq!(indexed, through_stale);
    env.delete_raw(INDEX);
    let full = env.views();
    assert_eq!(full, through_stale, "deleting the index changed the output");
    assert!(env.object(INDEX).is_some(), "a full read writes the index");
    assert_eq!(env.views(), full);
    let check = env.cli(&["ledger", "check", &env.study_arg()]);
    assert_eq!(check.code, Some(0), "{}", check.text());

    // A launcher whose clock is 27 years behind writes, as the protocol
    // says (log entry, then object), a second terminal attempt of a done
    // trial; its id sorts before every other, so it is the one that counts.
    let attempts = env.attempts_in_store();
    let (key, list) = attempts
        .iter()
        .find(|(_, l)| {
            l[0]["role"] == "sweep"
                && l[0]["config_label"] == "mode=slow"
                && l[0]["cell_label"] == "n=1"
                && l[0]["repeat"] == 0
        })
        .expect("mode=slow at n=1");
    let id = "19990101T000000.000000Z-00000000000000aa";
    let stream = "19990101T000000Z-00000000000000aa";
    let object = format!("{STUDY_ID}/trials/{key}/{id}.json");
    let mut rec = list[0].clone();
    rec["attempt_id"] = Json::from(id);
    rec["metrics"]["throughput"] = serde_json::json!([51.5]);
    let before = env.views();
    let stale = env.object(INDEX).expect("index");
    env.put_raw(
        &format!("{STUDY_ID}/log/{stream}/000000000001-{key}-{id}.json"),
        serde_json::to_vec(&serde_json::json!({"schema": 1, "object": object})).expect("entry"),
    );
    env.put_raw(&object, serde_json::to_vec_pretty(&rec).expect("record"));
    let after = env.views();
    assert_ne!(
        after.report_json, before.report_json,
        "the late attempt was not seen"
    );
    // mode=slow at n=1: 51.5 (the late attempt) and 50.1 (repeat 1).
    let report: Json = serde_json::from_str(&after.report_json).expect("report JSON");
    let slow = report["classes"][0]["cells"][0]["eligible"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["label"] == "mode=slow"))
        .unwrap_or_else(|| panic!("mode=slow at n=1: {report}"));
    let median = slow["summary"]["median"].as_f64().unwrap_or(f64::NAN);
    assert!((median - 50.8).abs() < 1e-9, "{slow}");
    env.put_raw(INDEX, stale);
    assert_eq!(env.views(), after);
    env.delete_raw(INDEX);
    assert_eq!(env.views(), after, "a full read disagrees");
    env.assert_no_secret_in_store();
}

/// A damaged index is reported, ignored and rewritten; what readers show
/// does not change, and a resume over it runs nothing. One that reads but
/// differs from the objects is found by `ledger check`, which rewrites it.
fn a_damaged_index_is_ignored(backend: Backend) {
    let Some(env) = OnStore::new(backend, STUDY) else {
        return;
    };
    let env = env.indexed();
    env.launch_ok(&[]);
    let good = env.views();
    let index = env.object(INDEX).expect("an index");
    let mut outside: Json = serde_json::from_slice(&index).expect("index JSON");
    outside["attempts"][0][2] = Json::from(999_999);
    let mut other: Json = serde_json::from_slice(&index).expect("index JSON");
    other["study_id"] = Json::from("another-study");
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"\x00\xffnot an index\x7f".to_vec()),
        ("truncated", index[..index.len() / 2].to_vec()),
        (
            "a position outside its tables",
            outside.to_string().into_bytes(),
        ),
        ("another study's", other.to_string().into_bytes()),
    ];
    for (what, bytes) in damages {
        env.put_raw(INDEX, bytes);
        let out = env.cli(&["report", &env.study_arg(), "--format", "json"]);
        assert_eq!(out.code, Some(0), "{what}:\n{}", out.text());
        assert!(
            out.stderr
                .contains(&format!("ignoring the ledger index {INDEX}")),
            "{what}: not reported:\n{}",
            out.text()
        );
        assert_eq!(out.stdout, good.report_json, "{what}");
        // Rewritten: the next reader uses it without complaint.
        let next = env.cli(&["report", &env.study_arg(), "--format", "json"]);
        assert!(
            !next.stderr.contains("ledger index"),
            "{what}:\n{}",
            next.text()
        );
        assert_eq!(env.views(), good, "{what}");
    }
    // An index that reads but says something its object does not (a
    // record's duration changed): readers trust it; `ledger check`
    // compares it with the objects, says so, and rewrites it.
    let mut lying: Json = serde_json::from_slice(&index).expect("index JSON");
    lying["attempts"][0][18] = Json::from(12345.5);
    let first = format!(
        "{STUDY_ID}/trials/{}/{}.json",
        lying["attempts"][0][0].as_str().expect("trial key"),
        lying["attempts"][0][1].as_str().expect("attempt id")
    );
    env.put_raw(INDEX, lying.to_string().into_bytes());
    let check = env.cli(&["ledger", "check", &env.study_arg(), "--format", "json"]);
    assert_eq!(
        check.code,
        Some(0),
        "derived data, not damage:\n{}",
        check.text()
    );
    let doc: Json = serde_json::from_str(&check.stdout).expect("check JSON");
    let problem = doc["studies"][0]["index_problem"]
        .as_str()
        .unwrap_or_default();
    assert!(
        problem.starts_with("1 indexed record differed from its object")
            && problem.contains(&first),
        "{}",
        check.text()
    );
    let again = env.cli(&["ledger", "check", &env.study_arg()]);
    assert_eq!(again.code, Some(0), "{}", again.text());
    assert!(
        !again.stdout.contains("the index"),
        "rewritten:\n{}",
        again.text()
    );
    assert_eq!(env.views(), good);

    env.put_raw(INDEX, b"{}".to_vec());
    let check = env.cli(&["ledger", "check", &env.study_arg()]);
    assert!(
        check
            .stdout
            .contains("the index (derived data): not usable"),
        "{}",
        check.text()
    );
    env.put_raw(INDEX, b"{}".to_vec());
    let runs_before = env.runs().len();
    let out = env.launch_ok(&[]);
    assert_eq!(ran(&out.stderr), 0, "{}", out.text());
    assert!(
        out.stderr.contains("ignoring the ledger index"),
        "{}",
        out.text()
    );
    assert_eq!(env.runs().len(), runs_before, "the fake ran again");
    assert_eq!(env.views(), good);
}

/// A launch that must fail with `needle` in its error, naming the ledger,
/// before any trial ran.
fn assert_stops_before_any_trial(env: &OnStore, url: &str, needle: &str) {
    let mut c = env.tunectl();
    c.arg("launch")
        .arg(env.study())
        .args(["--ledger", url, "--workdir"])
        .arg(env.path().join("work"))
        .args(["--progress", "quiet"]);
    let out = env.run(c);
    assert_eq!(out.code, Some(1), "{}", out.text());
    let shown = object_store_url_shown(url);
    assert!(
        out.stderr.contains(&format!("error: ledger `{shown}`")),
        "the error names the ledger {shown}:\n{}",
        out.text()
    );
    assert!(out.stderr.contains(needle), "{needle}:\n{}", out.text());
    assert!(
        out.took < Duration::from_secs(20),
        "took {:?}:\n{}",
        out.took,
        out.text()
    );
    assert!(env.runs().is_empty(), "a trial ran: {:?}", env.runs());
}

/// A URL as tunectl shows it (user info removed).
fn object_store_url_shown(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_string(),
    }
}

/// A ledger that cannot be written stops the launch before any trial.
///
/// Local: the tests run as root in CI, and `chmod` does not stop root, so
/// the unwritable ledgers are ones no user can write: a path that is a
/// regular file (the ledger cannot be opened), and a ledger whose study
/// folder is a regular file (the store opens, the first write fails). A
/// read-only directory is tried too when not running as root.
///
/// S3: a bucket that does not exist.
fn unwritable_ledger(backend: Backend) {
    let Some(env) = OnStore::new(backend, STUDY) else {
        return;
    };
    match backend {
        Backend::Local => {
            let file = env.path().join("a-file");
            std::fs::write(&file, "not a directory\n").expect("write file");
            let path = file.display().to_string();
            assert_stops_before_any_trial(&env, &path, "cannot create directory");
            let url = format!("file://{path}");
            assert_stops_before_any_trial(&env, &url, "cannot create directory");

            let ledger = env.path().join("blocked");
            std::fs::create_dir(&ledger).expect("mkdir");
            std::fs::write(ledger.join(STUDY_ID), "in the way\n").expect("write file");
            let path = ledger.display().to_string();
            assert_stops_before_any_trial(&env, &path, &format!("`{STUDY_ID}/study.json`"));

            // SAFETY: geteuid(2) has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                use std::os::unix::fs::PermissionsExt as _;
                let ro = env.path().join("read-only");
                std::fs::create_dir(&ro).expect("mkdir");
                std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555))
                    .expect("chmod");
                assert_stops_before_any_trial(
                    &env,
                    &ro.display().to_string(),
                    &format!("`{STUDY_ID}/study.json`"),
                );
            } else {
                eprintln!("note: running as root: a read-only directory would not stop writes");
            }
        }
        Backend::S3 => {
            let url = format!("s3://tunectl-missing-{}/{S3_PREFIX}", unique());
            assert_stops_before_any_trial(&env, &url, "NoSuchBucket");
            // User info in the URL is never shown.
            let url = format!(
                "s3://tunectl-test:{}@tunectl-missing-{}/{S3_PREFIX}",
                env.secret,
                unique()
            );
            assert_stops_before_any_trial(&env, &url, "NoSuchBucket");
            for args in [&["status", STUDY_ID][..], &["ledger", "check"][..]] {
                let mut c = env.tunectl();
                c.args(args).args(["--ledger", &url]);
                let out = env.run(c);
                assert_eq!(out.code, Some(1), "{}", out.text());
                assert!(
                    out.stderr.contains("error: ledger `s3://tunectl-missing-"),
                    "{}",
                    out.text()
                );
            }
        }
    }
}

/// An endpoint nobody listens on: a clear error naming the ledger, before
/// any trial, within seconds. Needs no S3 server.
#[test]
fn an_unreachable_s3_endpoint_stops_before_any_trial() {
    let env = OnStore::new(Backend::Local, STUDY).expect("env");
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let url = format!("s3://tunectl-unreachable/{S3_PREFIX}");
    let mut took = Vec::new();
    for args in [
        vec![
            "launch".to_string(),
            env.study_arg(),
            "--progress".into(),
            "quiet".into(),
        ],
        vec!["status".into(), env.study_arg()],
        vec!["ledger".into(), "check".into()],
        vec!["report".into(), env.study_arg()],
    ] {
        let mut c = env.tunectl();
        c.args(&args)
            .args(["--ledger", &url])
            .env("AWS_ENDPOINT_URL", &endpoint);
        let out = env.run(c);
        assert_eq!(out.code, Some(1), "{args:?}:\n{}", out.text());
        assert!(
            out.stderr.contains(&format!("error: ledger `{url}`")),
            "{args:?}: the error names the ledger:\n{}",
            out.text()
        );
        // object_store retries a refused connection 10 times (seen: 2-5 s).
        assert!(
            out.took < Duration::from_secs(40),
            "{args:?} took {:?}:\n{}",
            out.took,
            out.text()
        );
        took.push((args[0].clone(), out.took));
    }
    assert!(env.runs().is_empty(), "a trial ran: {:?}", env.runs());
    eprintln!("unreachable endpoint: {took:?}");
}

#[test]
fn the_fake_trial_program_logs_measured_runs() {
    // The log is what the concurrency and kill tests count; make sure a
    // measured run and a warm-up are told apart.
    let env = OnStore::new(Backend::Local, STUDY).expect("env");
    let mut fake = Command::new("sh");
    fake.arg(env.study_dir().join(support::fake::FILE))
        .args(["base", "2"])
        .current_dir(env.path());
    for var in support::fake::VARS {
        fake.env_remove(var);
    }
    let out = fake
        .env("TUNECTL_TRIAL_ID", "k1")
        .env("TUNECTL_ATTEMPT_ID", "a1")
        .env("TUNECTL_PHASE", "warmup")
        .env("TUNECTL_RESULT", env.path().join("r.json"))
        .output()
        .expect("run fake");
    assert!(out.status.success(), "{out:?}");
    let runs: Vec<(String, String, String)> = env
        .runs()
        .into_iter()
        .map(|r| (r.trial, r.attempt, r.phase))
        .collect();
    assert_eq!(
        runs,
        vec![("k1".to_string(), "a1".to_string(), "warmup".to_string())]
    );
    assert!(env.measured_runs().is_empty());
    let result = std::fs::read_to_string(env.path().join("r.json")).expect("result");
    let result: Json = serde_json::from_str(&result).expect("result JSON");
    assert_eq!(result["metrics"]["throughput"], serde_json::json!([100.0]));
}
