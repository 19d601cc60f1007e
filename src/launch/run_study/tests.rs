//! The launch driver over a FAKE transport: hosts that run no process and
//! answer with a known truth (config → time, with 1% noise), a real ledger
//! in a temporary folder, and the real scheduler, runner and analysis. The
//! seam is the [`Transport`] trait, so host drops and thermal episodes can
//! be played exactly, without sshd or Slurm.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use async_trait::async_trait;

use super::*;
use crate::ledger::records::ExitInfo;
use crate::transport::local::RunOutput;
use crate::transport::{AttemptOutcome, AttemptSpec, Ended, RanElsewhere, TransportError};

/// Knob `a`: 1 is the baseline (100 ms), 2 is 10% faster, 3 is 30% faster.
/// Lower is better.
const STUDY: &str = "name: fake-driver
knobs:
  a: {kind: int, values: [1, 2, 3], default: 1}
cells:
  n: [10]
trial: {command: 'run {{ a }}', timeout: 5s}
objective: {metric: t, unit: ms, better: lower}
measurement:
  warmup: 0
  repeats: 3
  anchor_every: 2
  confirm_repeats: 2
  cool_wait: 10ms
  cool_max_wait: 5s
";

fn time_of(a: i64) -> f64 {
    match a {
        1 => 100.0,
        2 => 90.0,
        _ => 70.0,
    }
}

/// A FAKE host: no process runs; each attempt returns 5 samples of its
/// config's time × the host's current slowdown × 1% noise.
struct FakeHost {
    name: String,
    runs: AtomicUsize,
    /// From run `start` to run `end` (counted over every attempt, anchors
    /// included), the host is `factor` times slower: a thermal episode.
    episode: Option<(usize, usize, f64)>,
    /// From run `start` on, the host heats without end: run `n` is
    /// `1 + step × (n − start + 1)` times slower.
    heating: Option<(usize, f64)>,
    /// At this run the host drops: the attempt is lost with it, and the
    /// host answers again after `down_checks` state checks.
    drop_at: Option<usize>,
    down_checks: AtomicUsize,
    noise: Mutex<u64>,
    /// Wall time of each run.
    delay: Duration,
    /// What its probe says of its CPU: another model, another class.
    cpu_model: &'static str,
    /// The first attempt of each of the first `n` candidate trials lands
    /// on a node of this host class (a mixed Slurm partition's node whose
    /// type hid its class): it runs to its end and is lost for its trial's
    /// class, as the Slurm transport says.
    strays: Option<(usize, RanElsewhere)>,
    /// The trials strayed so far.
    strayed: Mutex<Vec<String>>,
}

impl FakeHost {
    fn new(name: &str) -> FakeHost {
        FakeHost {
            name: name.to_string(),
            runs: AtomicUsize::new(0),
            episode: None,
            heating: None,
            drop_at: None,
            down_checks: AtomicUsize::new(0),
            noise: Mutex::new(name.len() as u64 + 1),
            delay: Duration::ZERO,
            cpu_model: "Fake CPU",
            strays: None,
            strayed: Mutex::default(),
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            schema: crate::fingerprint::SCHEMA_VERSION,
            hostname: Some(self.name.clone()),
            arch: Some("x86_64".to_string()),
            os: Some("FakeOS".to_string()),
            kernel: Some("1.0".to_string()),
            cpu_model: Some(self.cpu_model.to_string()),
            cpu_count: Some(8),
            memory_mib: Some(16384),
            gpus: Vec::new(),
            driver_version: None,
            cuda_version: None,
            tools: BTreeMap::new(),
            ..Fingerprint::default()
        }
    }

    /// ±1% (uniform), from a small deterministic generator.
    fn jitter(&self) -> f64 {
        let mut s = self.noise.lock().expect("noise lock");
        *s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (*s >> 11) as f64 / (1u64 << 53) as f64;
        1.0 + 0.02 * (u - 0.5)
    }
}

/// How a fake host drops.
fn connection_reset() -> TransportError {
    TransportError::Ssh {
        detail: "connection reset (fake)".to_string(),
    }
}

#[async_trait]
impl Transport for FakeHost {
    fn trial_dir(&self, study: &str, trial_key: &str, attempt_id: &str) -> String {
        ["/fake", study, trial_key, attempt_id].join("/")
    }

    async fn probe(
        &self,
        _tools: &BTreeMap<String, String>,
    ) -> Result<Fingerprint, TransportError> {
        Ok(self.fingerprint())
    }

    async fn run_attempt(&self, spec: &AttemptSpec, _cancel: &CancellationToken) -> AttemptOutcome {
        tokio::task::yield_now().await;
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let n = self.runs.fetch_add(1, Ordering::SeqCst);
        if self.drop_at == Some(n) {
            self.down_checks.store(3, Ordering::SeqCst);
            return AttemptOutcome {
                ended: Ended::HostLost(connection_reset()),
                ..Default::default()
            };
        }
        let a: i64 = spec
            .env
            .iter()
            .find(|(k, _)| k == "TUNECTL_KNOB_A")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(1);
        let factor = match (self.episode, self.heating) {
            (Some((start, end, f)), _) if (start..end).contains(&n) => f,
            (_, Some((start, step))) if n >= start => 1.0 + step * (n - start + 1) as f64,
            _ => 1.0,
        };
        let samples: Vec<f64> = (0..5)
            .map(|_| time_of(a) * factor * self.jitter())
            .collect();
        let result = serde_json::json!({"metrics": {"t": samples}, "digest": "same output"});
        let strays = self.strays.as_ref().filter(|(n, _)| {
            let mut strayed = self.strayed.lock().expect("strays lock");
            let first = a != 1 && !strayed.contains(&spec.trial_key) && strayed.len() < *n;
            if first {
                strayed.push(spec.trial_key.clone());
            }
            first
        });
        let (ended, elsewhere) = match strays {
            Some((_, there)) => (
                Ended::HostLost(TransportError::OtherClass {
                    node: there.node.clone(),
                    got: there.label.clone(),
                    expected: "this host's".to_string(),
                    steered: true,
                }),
                Some(there.clone()),
            ),
            _ => (Ended::Ran, None),
        };
        AttemptOutcome {
            ended,
            elsewhere,
            run: Some(RunOutput {
                exit: ExitInfo {
                    code: Some(0),
                    signal: None,
                },
                timed_out: false,
                cancelled: false,
                elapsed: Duration::from_millis(1),
                stdout_tail: String::new(),
                stderr_tail: String::new(),
                stderr_head: String::new(),
                ..Default::default()
            }),
            result: Some(result.to_string().into_bytes()),
            elapsed: Duration::from_millis(1),
            ..Default::default()
        }
    }

    async fn state(&self) -> HostState {
        let left = self.down_checks.load(Ordering::SeqCst);
        if left == 0 {
            return HostState::Up { rejoined: false };
        }
        self.down_checks.store(left - 1, Ordering::SeqCst);
        if left == 1 {
            return HostState::Up { rejoined: true };
        }
        HostState::Down {
            reason: connection_reset(),
            since: Instant::now(),
            retry_in: Duration::from_millis(10),
            first: left == 3,
        }
    }
}

struct Ran {
    summary: LaunchSummary,
    events: Vec<LaunchEvent>,
    analysis: crate::decide::Analysis,
    scan: Arc<crate::ledger::Scan>,
    /// Lost attempts' reasons, by attempt id, from their objects (a scan
    /// leaves them out).
    lost_reasons: HashMap<String, String>,
}

async fn launch(hosts: Vec<FakeHost>) -> Ran {
    launch_study(STUDY, hosts).await
}

async fn launch_study(text: &str, hosts: Vec<FakeHost>) -> Ran {
    let dir = tempfile::tempdir().expect("temp dir");
    let study =
        Study::from_text(&dir.path().join("study.yaml"), text).expect("the fake study is valid");
    let ledger_dir = dir.path().join("ledger");
    std::fs::create_dir(&ledger_dir).expect("ledger dir");
    let ledger = Ledger::open(&ledger_dir.display().to_string()).expect("ledger");
    let hosts: Vec<LaunchHost> = hosts
        .into_iter()
        .map(|h| LaunchHost {
            name: h.name.clone(),
            transport_name: "fake".to_string(),
            slots: 1,
            devices: None,
            device_env: None,
            transport: Arc::new(h),
            only_parts: None,
        })
        .collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let options = LaunchOptions {
        host_timeout: Duration::from_secs(60),
        ..Default::default()
    };
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
    .expect("the launch runs");
    let mut events = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        events.push(ev);
    }
    let record = ledger
        .read_study(study.id())
        .await
        .expect("ledger read")
        .expect("study record");
    let scan = ledger.scan(study.id()).await.expect("scan");
    let plans = ledger.plans(study.id()).await.expect("plans");
    let (host_records, _) = ledger.hosts(study.id()).await.expect("hosts");
    let analysis = crate::decide::analyze_planned(&record, &scan, &host_records, &plans);
    let mut lost_reasons = HashMap::new();
    for a in scan
        .attempts
        .iter()
        .filter(|a| a.status == AttemptStatus::Lost)
    {
        let whole = ledger
            .read_attempt(study.id(), &a.trial_key, &a.attempt_id)
            .await
            .expect("attempt read")
            .expect("attempt object");
        lost_reasons.insert(a.attempt_id.clone(), whole.lost_reason.unwrap_or_default());
    }
    Ran {
        summary,
        events,
        analysis,
        scan,
        lost_reasons,
    }
}

/// The shipped config's label and the level, as the report's JSON says.
fn verdict(r: &Ran) -> (String, serde_json::Value) {
    let bucket = &r.analysis.classes[0].buckets[0];
    (
        bucket
            .winner
            .as_ref()
            .map(|w| w.label.clone())
            .unwrap_or_default(),
        serde_json::to_value(bucket.level).expect("level"),
    )
}

/// Every trial has exactly one finished (ok or failed) attempt.
fn counted_once(scan: &crate::ledger::Scan) {
    let mut finished: HashMap<&str, usize> = HashMap::new();
    for a in &scan.attempts {
        if a.status != AttemptStatus::Lost {
            *finished.entry(a.trial_key.as_str()).or_default() += 1;
        }
    }
    assert!(
        finished.values().all(|n| *n == 1),
        "a trial finished twice: {finished:?}"
    );
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn the_fastest_config_ships_as_a_verdict_over_two_fake_hosts() {
    let r = current_thread().block_on(launch(vec![FakeHost::new("x"), FakeHost::new("y")]));
    assert_eq!(
        verdict(&r),
        ("a=3".to_string(), serde_json::json!("verdict"))
    );
    // 3 configs × 3 repeats, then 2 confirmation pairs.
    assert_eq!(
        r.summary.ran,
        9 + r.summary.confirm_trials + r.summary.anchors
    );
    assert_eq!(r.summary.confirm_trials, 4);
    assert_eq!((r.summary.failed, r.summary.lost), (0, 0));
    counted_once(&r.scan);
}

#[test]
fn a_host_that_drops_mid_launch_loses_nothing_and_counts_nothing_twice() {
    let mut x = FakeHost::new("x");
    x.drop_at = Some(2);
    let r = current_thread().block_on(launch(vec![x, FakeHost::new("y")]));
    assert_eq!(r.summary.requeued, 1);
    assert_eq!(r.summary.lost, 1);
    assert!(
        r.events
            .iter()
            .any(|e| matches!(e, LaunchEvent::HostDropped { host, .. } if host == "x"))
    );
    assert!(
        r.events
            .iter()
            .any(|e| matches!(e, LaunchEvent::HostRejoined { host } if host == "x"))
    );
    assert_eq!(
        verdict(&r),
        ("a=3".to_string(), serde_json::json!("verdict"))
    );
    counted_once(&r.scan);
}

#[test]
fn a_thermal_episode_is_voided_remeasured_and_does_not_change_the_winner() {
    // Host x alone, 40% slower from its 6th run (an anchor is due after
    // candidates 1 and 2 of repeat 0, and again at repeat 1) for 5 runs.
    let mut x = FakeHost::new("x");
    x.episode = Some((5, 10, 1.4));
    let r = current_thread().block_on(launch(vec![x]));
    assert!(
        r.events
            .iter()
            .any(|e| matches!(e, LaunchEvent::Drifted { .. })),
        "the episode is seen: {:?}",
        r.events
    );
    assert!(r.summary.voided > 0);
    assert_eq!(r.summary.dropped_cells, 0);
    assert!(
        r.events
            .iter()
            .any(|e| matches!(e, LaunchEvent::CooledDown { .. }))
    );
    assert_eq!(
        verdict(&r),
        ("a=3".to_string(), serde_json::json!("verdict"))
    );
    counted_once(&r.scan);
}

/// Issue seen on a real fleet: a host drifts for good while the other
/// host of its class has run everything else, including the confirmation
/// round. The drifting host drops the cell and its voided measurements go
/// back to the queue, which only the other host can run. The launch must
/// hand them to it and end, not wait for ever.
#[test]
fn a_host_that_drops_its_cell_after_its_classmate_finished_does_not_stall_the_launch() {
    let study = STUDY.replace(
        "cool_max_wait: 5s",
        "cool_max_wait: 5s\n  cool_max_retry: 3",
    );
    let mut x = FakeHost::new("x");
    // Heating from its 4th run on, for good: no two anchors agree, it
    // never settles.
    x.heating = Some((3, 0.25));
    // y is slower: x takes the first candidates and its anchor is due.
    let mut y = FakeHost::new("y");
    y.delay = Duration::from_millis(5);
    let rt = current_thread();
    let r = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), launch_study(&study, vec![x, y])).await
        })
        .expect("the launch ends");
    assert_eq!(r.summary.dropped_cells, 1, "{:?}", r.events);
    assert!(r.summary.voided > 0);
    // What x measured hot was run again, on y.
    let skipped = r.summary.skipped;
    assert_eq!(skipped, 0, "{:?}", r.events);
    counted_once(&r.scan);
    // The confirmation round waited for the re-measurements.
    let at = |f: fn(&LaunchEvent) -> bool| r.events.iter().position(f);
    let remeasured = at(|e| matches!(e, LaunchEvent::Remeasure { .. }));
    let confirmed = at(|e| matches!(e, LaunchEvent::ConfirmationQueued { .. }));
    assert!(
        remeasured < confirmed && remeasured.is_some(),
        "{:?}",
        r.events
    );
    // y measured the cell in full (and confirmed its winner after the
    // re-measurements): the drop on x is history.
    assert_eq!(
        verdict(&r),
        ("a=3".to_string(), serde_json::json!("verdict"))
    );
    assert!(r.summary.stalled.is_empty());
}

/// Runs of host x's class that land on a node of y's class (a mixed
/// partition's node whose type hid its class) are lost for x's class and
/// run again there, and each sweep run among them is recorded for y's
/// class, as y's trial of the same config, cell and repeat, which y then
/// finds done: y runs it no more, and nothing is counted twice.
#[test]
fn a_run_on_a_node_of_another_class_is_kept_for_that_class() {
    let mut y = FakeHost::new("y");
    y.cpu_model = "Other CPU";
    // y is slow: while its first trial runs, its others wait in its queue.
    y.delay = Duration::from_millis(300);
    let there = RanElsewhere {
        node: "node-7".to_string(),
        class: y.fingerprint().host_class_under(&Default::default()),
        label: "y's class".to_string(),
    };
    let y_class = there.class.clone();
    let mut x = FakeHost::new("x");
    // Its first three candidate trials: y is running its first baseline
    // then, and has not started them.
    x.strays = Some((3, there));
    let r = current_thread().block_on(launch(vec![x, y]));
    counted_once(&r.scan);
    let attempts: Vec<_> = r.scan.attempts.iter().collect();
    let strays: Vec<_> = attempts
        .iter()
        .filter(|a| a.host.as_str() == "x" && a.status == AttemptStatus::Lost)
        .collect();
    assert_eq!(strays.len(), 3, "{attempts:#?}");
    for lost in strays {
        assert_eq!(lost.role, RoleKind::Sweep);
        let why = &r.lost_reasons[&lost.attempt_id];
        assert!(why.contains("node-7"), "{why}");
        let id = why
            .split("recorded for that class as attempt ")
            .nth(1)
            .unwrap_or_else(|| panic!("not kept: {why}"));
        let kept = attempts
            .iter()
            .find(|a| a.attempt_id == id)
            .expect("the kept attempt is in the ledger");
        assert_eq!(
            (kept.host.as_str(), kept.host_class.as_str(), kept.status),
            ("y", y_class.as_str(), AttemptStatus::Ok)
        );
        assert_eq!(
            (
                &kept.config_label,
                &kept.cell_label,
                kept.repeat,
                &kept.role
            ),
            (
                &lost.config_label,
                &lost.cell_label,
                lost.repeat,
                &lost.role
            )
        );
        assert_ne!(kept.trial_key, lost.trial_key);
        assert!(!kept.metrics.is_empty());
        // x's own trial ran again, on x.
        assert!(attempts.iter().any(|a| a.trial_key == lost.trial_key
            && a.status == AttemptStatus::Ok
            && a.host.as_str() == "x"));
        // y did not run its trial again.
        assert_eq!(
            attempts
                .iter()
                .filter(|a| a.trial_key == kept.trial_key)
                .count(),
            1
        );
    }
    let kept_events = r
        .events
        .iter()
        .filter(|e| matches!(e, LaunchEvent::KeptForItsClass { host, node, .. } if host == "y" && node == "node-7"))
        .count();
    assert_eq!(kept_events, 3);
    assert_eq!(r.summary.lost, 3);
    for class in &r.analysis.classes {
        let b = &class.buckets[0];
        assert_eq!(
            (
                b.winner.as_ref().map(|w| w.label.as_str()),
                serde_json::to_value(b.level).expect("level")
            ),
            (Some("a=3"), serde_json::json!("verdict")),
            "{}",
            class.label
        );
    }
}

/// A slot pins its device with the inventory's `device_env`, else with the
/// variable of the GPUs' vendor.
#[test]
fn slot_devices_pin_with_the_vendors_variable() {
    use crate::fingerprint::{Gpu, GpuVendor};
    let gpus = |vendors: &[GpuVendor]| Fingerprint {
        gpus: vendors
            .iter()
            .enumerate()
            .map(|(i, v)| Gpu {
                index: u32::try_from(i).unwrap(),
                name: "G".into(),
                memory_mib: None,
                uuid: None,
                vendor: *v,
            })
            .collect(),
        ..Fingerprint::default()
    };
    let host = |device_env: Option<&str>| LaunchHost {
        name: "h".into(),
        transport_name: "local".into(),
        slots: 3,
        devices: None,
        device_env: device_env.map(str::to_owned),
        transport: Arc::new(FakeHost::new("h")),
        only_parts: None,
    };
    let pinned =
        |h: &LaunchHost, fp: &Fingerprint| -> Vec<Option<(String, String)>> { slot_devices(h, fp) };
    let pair = |var: &str, d: &str| Some((var.to_owned(), d.to_owned()));
    let (amd, intel, nvidia) = (GpuVendor::Amd, GpuVendor::Intel, GpuVendor::Nvidia);
    assert_eq!(
        pinned(&host(None), &gpus(&[amd, amd])),
        vec![
            pair("HIP_VISIBLE_DEVICES", "0"),
            pair("HIP_VISIBLE_DEVICES", "1"),
            None
        ]
    );
    assert_eq!(
        pinned(&host(None), &gpus(&[intel])),
        vec![pair("ZE_AFFINITY_MASK", "0"), None, None]
    );
    for mixed in [&[nvidia, nvidia][..], &[amd, nvidia][..]] {
        assert_eq!(
            pinned(&host(None), &gpus(mixed))[0],
            pair("CUDA_VISIBLE_DEVICES", "0")
        );
    }
    assert_eq!(
        pinned(&host(Some("ROCR_VISIBLE_DEVICES")), &gpus(&[amd]))[0],
        pair("ROCR_VISIBLE_DEVICES", "0")
    );
    assert_eq!(pinned(&host(None), &gpus(&[])), vec![None, None, None]);
}
