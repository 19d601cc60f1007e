use super::*;

/// The analysis with a plan that is exactly what the scan holds: every
/// (class, cell) planned its configs seen there, `repeats` each.
/// The fixtures below give one attempt several samples; decisions
/// read runs (one value per attempt), so each sample becomes a run of
/// its own here: repeat `r` with `k` samples becomes repeats
/// `r·k .. r·k + k`.
fn one_run_per_sample(scan: &Scan) -> Scan {
    let mut attempts = Vec::new();
    for a in &scan.attempts {
        let samples = a.metrics.get("tp").cloned().unwrap_or_default();
        let measured = matches!(a.role, RoleKind::Sweep | RoleKind::Confirm);
        if a.status != AttemptStatus::Ok || samples.len() < 2 || !measured {
            attempts.push((**a).clone());
            continue;
        }
        let k = samples.len() as u32;
        for (i, x) in samples.iter().enumerate() {
            let mut b = (**a).clone();
            b.repeat = a.repeat * k + i as u32;
            b.trial_key = format!("{}/{i}", a.trial_key);
            b.metrics.insert("tp".to_string(), vec![*x]);
            attempts.push(b);
        }
    }
    Scan {
        attempts: crate::ledger::shared(attempts),
        ..scan.clone()
    }
}

fn analyze(study: &StudyRecord, scan: &Scan, hosts: &[HostRecord]) -> Analysis {
    let scan = &one_run_per_sample(scan);
    let repeats = study.spec.measurement.repeats;
    let mut seen: BTreeMap<(String, u32), (serde_json::Value, String, HashSet<u64>)> =
        BTreeMap::new();
    for a in scan.attempts.iter().filter(|a| a.role == RoleKind::Sweep) {
        seen.entry((a.host_class.to_string(), a.cell_index))
            .or_insert_with(|| ((*a.cell).clone(), a.cell_label.to_string(), HashSet::new()))
            .2
            .insert(a.config_index);
    }
    let plans: Vec<PlanRecord> = seen
        .into_iter()
        .map(
            |((class, cell_index), (cell, cell_label, configs))| PlanRecord {
                schema: 1,
                spec_hash: study.spec_hash.clone(),
                host_class: class,
                cell_index,
                cell,
                cell_label,
                configs: Some(configs.len() as u64),
                repeats,
                at: String::new(),
            },
        )
        .collect();
    super::analyze_planned(study, scan, hosts, &plans)
}
use crate::ledger::records::{Failure, SCHEMA};
use std::sync::Arc;

/// The tests' frozen spec, with `extra` sections.
fn spec(extra: serde_json::Value) -> FrozenSpec {
    let mut v = serde_json::json!({
        "objective": {"name": "tp", "unit": "x/s", "better": "higher"},
        "knobs": [{"name": "a", "kind": "int", "values": [1, 2, 3, 4], "default": 1}],
        "context": {"model": "m"},
    });
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    FrozenSpec::from_json(v).expect("spec")
}

fn study() -> StudyRecord {
    StudyRecord {
        schema: SCHEMA,
        tunectl_version: "t".into(),
        study_id: "s".into(),
        spec_hash: "h".into(),
        spec: spec(serde_json::json!({})),
        created_at: String::new(),
    }
}

/// An attempt of config `index` labelled `label`, repeat `r`, with
/// samples and a digest; `failed` makes it a crash.
fn attempt(
    index: u64,
    label: &str,
    r: u32,
    samples: &[f64],
    digest: &str,
    failed: bool,
) -> AttemptRecord {
    AttemptRecord {
        schema: SCHEMA,
        tunectl_version: "t".into(),
        study_id: "s".into(),
        spec_hash: "h".into(),
        trial_key: format!("{index}-{r}"),
        attempt_id: "a".into(),
        config: Arc::new(serde_json::json!({})),
        config_label: label.into(),
        config_index: index,
        is_baseline: label == "baseline",
        cell: Arc::new(serde_json::json!({"n": 1})),
        cell_label: "n=1".into(),
        cell_index: 0,
        repeat: r,
        role: RoleKind::Sweep,
        fidelity: None,
        host: "h1".into(),
        host_class: "hc-1".into(),
        fingerprint: "fp".into(),
        slot: 0,
        started_at: Default::default(),
        finished_at: Default::default(),
        duration_s: 0.0,
        run_s: None,
        warmup_runs: 0,
        status: if failed {
            AttemptStatus::Failed
        } else {
            AttemptStatus::Ok
        },
        failure: failed.then(|| Failure {
            class: FailureClass::Crash,
            detail: "exit code 3".into(),
            phase: crate::trial::Phase::Measure,
            timeout_s: None,
        }),
        exit: None,
        metrics: if failed {
            Default::default()
        } else {
            [("tp", samples.to_vec())].into_iter().collect()
        },
        digest: (!failed).then(|| digest.into()),
        outputs: Arc::default(),
        output_values: BTreeMap::new(),
        command: Default::default(),
        stdout_tail: Default::default(),
        stderr_head: Default::default(),
        lost_reason: None,
        resumed_from: None,
        pruned: None,
        readings: Vec::new(),
        stderr_tail: Default::default(),
    }
}

fn cell(attempts: Vec<AttemptRecord>) -> CellReport {
    let scan = Scan {
        attempts: crate::ledger::shared(attempts),
        ..Default::default()
    };
    let a = analyze(&study(), &scan, &[]);
    a.classes[0].cells[0].clone()
}

/// "What to try next" reads a lower-is-better objective the right way
/// round: the effect is best over worst in the better direction.
#[test]
fn next_levers_orient_a_lower_is_better_objective() {
    let mut study = study();
    study.spec = spec(serde_json::json!({
        "objective": {"name": "tp", "unit": "ms", "better": "lower"},
    }));
    let at = |index: u64, label: &str, a: i64, ms: f64| {
        let mut x = attempt(index, label, 0, &[ms, ms * 1.01, ms * 0.99], "d", false);
        x.config = Arc::new(serde_json::json!({ "a": a }));
        x
    };
    let scan = Scan {
        attempts: crate::ledger::shared(vec![
            at(0, "baseline", 1, 100.0),
            at(1, "a=2", 2, 50.0),
            at(2, "a=3", 3, 200.0),
        ]),
        ..Default::default()
    };
    let a = analyze(&study, &scan, &[]);
    let next = &a.classes[0].next;
    let e = &next.effects[0];
    assert_eq!(
        (e.best.clone(), e.worst.clone()),
        (Some(2.into()), Some(3.into()))
    );
    assert!((e.ratio.unwrap_or(0.0) - 4.0).abs() < 1e-9, "{e:?}");
    // One pair: no spread can be known.
    assert_eq!((e.pairs, e.spread), (1, None));
    // a=2 ships: neither the largest nor the smallest value tried.
    assert!(next.edges.is_empty(), "{:?}", next.edges);
    assert_eq!(next.untried.len(), 1);
    assert_eq!(next.untried[0].values, [serde_json::json!(4)]);
    assert_eq!(next.untried[0].possible_causes, ["budget"]);

    // A launch's analysis decides the same and leaves the levers out.
    let scan = one_run_per_sample(&scan);
    let d = analyze_scoped(&study, &scan, &[], &[], Scope::Decisions, |_| true);
    let a = analyze_scoped(&study, &scan, &[], &[], Scope::Everything, |_| true);
    assert!(!a.classes[0].next.effects.is_empty());
    let json = |x: &Analysis| {
        let mut v = serde_json::to_value(x).expect("json");
        v["classes"][0]["next"] = serde_json::Value::Null;
        v
    };
    assert_eq!(json(&d), json(&a));
    assert!(d.classes[0].next.effects.is_empty());
    assert!(d.classes[0].buckets[0].winner.is_some());
}

#[test]
fn gate_rejects_crashes_and_changed_outputs() {
    let c = cell(vec![
        attempt(0, "baseline", 0, &[100.0, 101.0, 99.0], "d0", false),
        attempt(1, "a=2", 0, &[150.0, 151.0, 149.0], "d1", false),
        attempt(2, "a=3", 0, &[300.0], "d0", true),
        attempt(3, "a=4", 0, &[120.0, 121.0, 119.0], "d0", false),
    ]);
    assert_eq!(c.baseline_state, BaselineState::Ok);
    let rejected: Vec<(&str, FailureClass)> = c
        .rejected
        .iter()
        .map(|r| {
            (
                r.label.as_str(),
                r.rejection
                    .as_ref()
                    .map(|x| x.class)
                    .unwrap_or(FailureClass::Crash),
            )
        })
        .collect();
    assert_eq!(
        rejected,
        vec![
            ("a=2", FailureClass::OutputChanged),
            ("a=3", FailureClass::Crash)
        ]
    );
    assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=4"));
    let s = c.winner.as_ref().and_then(|w| w.speedup).unwrap_or(0.0);
    assert!((s - 1.2).abs() < 1e-3, "{s}");
}

/// An attempt of a role this tunectl does not know is counted and set
/// aside: it is no evidence for or against any config.
#[test]
fn a_pruned_attempt_is_never_a_sample() {
    // Only rungs are pruned; a ledger that says otherwise (copied,
    // forged) must not change a verdict, whatever numbers it carries.
    let base = vec![
        attempt(0, "baseline", 0, &[100.0, 101.0, 99.0], "d", false),
        attempt(1, "a=2", 0, &[150.0, 151.0, 149.0], "d", false),
    ];
    let mut with = base.clone();
    for (index, label) in [(2, "a=3"), (1, "a=2")] {
        let mut p = attempt(index, label, 7, &[9000.0, 9001.0, 8999.0], "d", false);
        p.status = AttemptStatus::Pruned;
        with.push(p);
    }
    // What was measured and decided; a record not counted may still
    // leave its trial pending (never a reason to ship more).
    let judge = |attempts: Vec<AttemptRecord>| {
        let scan = Scan {
            attempts: crate::ledger::shared(attempts),
            ..Default::default()
        };
        let a = serde_json::to_value(analyze(&study(), &scan, &[])).expect("json");
        let class = &a["classes"][0];
        let cell = &class["cells"][0];
        let bucket = &class["buckets"][0];
        [
            cell["eligible"].clone(),
            cell["winner"].clone(),
            cell["rejected"].clone(),
            cell["baseline"].clone(),
            bucket["winner"].clone(),
            bucket["per_cell"].clone(),
            class["search"].clone(),
        ]
    };
    let (with, base) = (judge(with), judge(base));
    assert_eq!(with, base);
    assert_eq!(base[1]["label"], "a=2");
}

#[test]
fn an_unknown_role_is_ignored() {
    let mut probe = attempt(1, "a=2", 1, &[1.0, 1.0, 1.0], "other", false);
    probe.role = RoleKind::Unknown("probe".into());
    let scan = Scan {
        attempts: crate::ledger::shared(vec![
            attempt(0, "baseline", 0, &[100.0, 101.0, 99.0], "d", false),
            attempt(1, "a=2", 0, &[150.0, 151.0, 149.0], "d", false),
            probe,
        ]),
        ..Default::default()
    };
    let a = analyze(&study(), &scan, &[]);
    assert_eq!(a.unknown_role_attempts, 1);
    let c = &a.classes[0].cells[0];
    assert!(c.rejected.is_empty());
    assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
    let text = crate::report::render(&a, crate::report::Format::Table, false);
    assert!(text.contains("1 attempts of a role"), "{text}");
    let json = serde_json::to_value(&a).expect("json");
    assert_eq!(json["unknown_role_attempts"], 1);
    let none = analyze(&study(), &Scan::default(), &[]);
    let json = serde_json::to_value(&none).expect("json");
    assert!(json.get("unknown_role_attempts").is_none(), "{json}");
}

#[test]
fn a_win_within_noise_is_no_improvement() {
    let c = cell(vec![
        attempt(0, "baseline", 0, &[100.0, 110.0, 90.0], "d", false),
        attempt(1, "a=2", 0, &[105.0, 115.0, 95.0], "d", false),
    ]);
    assert!(c.winner.is_none());
    assert!(
        matches!(c.decision, CellDecision::NoImprovementShown { .. }),
        "{}",
        c.decision
    );
}

#[test]
fn ties_collapse_to_fewest_knobs_changed() {
    let c = cell(vec![
        attempt(0, "baseline", 0, &[100.0, 100.5, 99.5], "d", false),
        attempt(1, "a=2 b=1", 0, &[200.0, 200.4, 199.6], "d", false),
        attempt(2, "a=2", 0, &[199.8, 200.2, 199.4], "d", false),
    ]);
    assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
    assert!(
        matches!(
            &c.decision,
            CellDecision::Fastest {
                tie_with: Some(_),
                ..
            }
        ),
        "{}",
        c.decision
    );
}

/// A noisy baseline (±15%) says nothing about whether two tight
/// candidates differ: the one 20% faster is not "within noise" of the
/// one that changes fewer knobs.
#[test]
fn a_noisy_baseline_does_not_make_a_real_win_a_tie() {
    let c = cell(vec![
        attempt(
            0,
            "baseline",
            0,
            &[100.0, 85.0, 115.0, 100.0, 118.0],
            "d",
            false,
        ),
        attempt(
            1,
            "a=2 b=1",
            0,
            &[240.0, 242.0, 238.0, 241.0, 239.0],
            "d",
            false,
        ),
        attempt(
            2,
            "a=2",
            0,
            &[200.0, 202.0, 198.0, 201.0, 199.0],
            "d",
            false,
        ),
    ]);
    assert_eq!(
        c.winner.as_ref().map(|w| w.label.as_str()),
        Some("a=2 b=1"),
        "{}",
        c.decision
    );
    assert!(
        !matches!(
            &c.decision,
            CellDecision::Fastest {
                tie_with: Some(_),
                ..
            }
        ),
        "{}",
        c.decision
    );
}

/// Runs of one config at cell n=1: one single-sample attempt each.
fn runs_of(index: u64, label: &str, values: &[f64]) -> Vec<AttemptRecord> {
    values
        .iter()
        .enumerate()
        .map(|(r, v)| {
            let mut a = attempt(index, label, r as u32, &[*v], "d", false);
            a.trial_key = format!("{index}-{r}");
            a
        })
        .collect()
}

fn bucket_with(max_repeats: u32, attempts: Vec<AttemptRecord>) -> BucketReport {
    let mut s = study();
    s.spec = spec(serde_json::json!({
        "measurement": {"repeats": 3, "confirm_repeats": 3, "max_repeats": max_repeats},
    }));
    let scan = Scan {
        attempts: crate::ledger::shared(attempts),
        ..Default::default()
    };
    analyze(&s, &scan, &[]).classes[0].buckets[0].clone()
}

/// A candidate whose interval straddles the minimum is raced (with the
/// baseline), a DRAFT meanwhile; a clearly slower one is not. At the
/// cap the same evidence is a VERDICT that says the win is not shown,
/// with its interval: never "no improvement".
#[test]
fn a_close_decision_is_raced_and_at_the_cap_said_plainly() {
    let base = [100.0, 103.0, 97.0];
    let close = [104.0, 107.0, 101.0];
    let slow = [80.0, 82.0, 78.0];
    let attempts = || {
        let mut v = runs_of(0, "baseline", &base);
        v.extend(runs_of(1, "a=2", &close));
        v.extend(runs_of(2, "a=3", &slow));
        v
    };
    let b = bucket_with(30, attempts());
    let race = b.racing.clone().expect("raced");
    assert_eq!(race.configs, vec![("a=2".to_string(), 1)], "{race:?}");
    assert_eq!(race.runs, 6, "3 runs more: {race:?}");
    assert_eq!(b.level, Level::Draft);
    assert!(
        matches!(b.level_reason.0.as_slice(), [LevelReason::Racing { racing, .. }] if racing.configs.len() == 1),
        "{}",
        b.level_reason
    );
    assert!(
        matches!(b.decision, Decision::NotYetShown { .. }),
        "{}",
        b.decision
    );
    let i = b.interval.expect("interval");
    assert!(i.low < 1.02 && i.high > 1.02, "{i:?}");

    let b = bucket_with(3, attempts());
    assert!(b.racing.is_none());
    assert_eq!(b.level, Level::Verdict, "{}", b.level_reason);
    assert!(
        matches!(b.decision, Decision::NotShownAtCap { max_repeats: 3, .. }),
        "{}",
        b.decision
    );
    // Worded as what it is, never rounded to "no improvement".
    assert!(
        b.decision
            .to_string()
            .contains("not shown to beat the 2.0% minimum (measurement.max_repeats = 3 reached; "),
        "{}",
        b.decision
    );
}

/// At the cap, the runs that would settle an interval straddling the
/// minimum: 30 runs a side leave 1.05× [1.02, …] at a 2 % minimum, the
/// estimate one half-width (2.00 standard errors at 58 degrees of freedom)
/// above it; settling it with 90 % probability takes the estimate
/// t₀.₉₇₅ + t₀.₉₀ ≈ 3.26 standard errors above: 80 runs. An estimate on
/// the minimum cannot be settled.
#[test]
fn the_runs_that_would_settle_a_capped_decision_are_said() {
    let best = |speedup: f64, low: f64| Best {
        label: "a=2".to_string(),
        interval: crate::stats::speedup::Interval {
            speedup,
            low,
            high: speedup * speedup / low,
            confidence: 0.95,
            runs: 30,
            reference_runs: 30,
            samples_as_runs: false,
        },
        min_improvement: 0.02,
    };
    let d = Decision::NotShownAtCap {
        best: best(1.05, 1.02),
        runs: 30,
        max_repeats: 30,
    };
    assert!(
        d.to_string()
            .ends_with("(measurement.max_repeats = 30 reached; about 80 runs at every cell would likely settle it)"),
        "{d}"
    );
    let d = Decision::NotShownAtCap {
        best: best(1.0201, 0.99),
        runs: 30,
        max_repeats: 30,
    };
    assert!(
        d.to_string()
            .ends_with("its estimate is too near the minimum for ten times the runs to settle it)"),
        "{d}"
    );
}

/// The final round's size follows from the sweep: a win just above the
/// minimum needs more runs to confirm than a large one.
#[test]
fn the_final_round_is_sized_from_the_sweeps_estimate() {
    let base: Vec<f64> = (0..12).map(|i| 100.0 + f64::from(i % 3) - 1.0).collect();
    let size = |factor: f64| {
        let cand: Vec<f64> = base.iter().map(|x| x * factor).collect();
        let mut v = runs_of(0, "baseline", &base);
        v.extend(runs_of(1, "a=2", &cand));
        let b = bucket_with(30, v);
        assert_eq!(
            b.winner.as_ref().map(|w| w.label.as_str()),
            Some("a=2"),
            "{}",
            b.decision
        );
        b.confirm_runs.expect("a round")
    };
    let (large, small) = (size(1.5), size(1.05));
    assert_eq!(large, 3, "the minimum, confirm_repeats");
    assert!(small > large, "{small} vs {large}");
    assert!(small <= 30);
}

#[test]
fn a_failed_baseline_means_nothing_wins() {
    // Once: not believed yet, its re-run is pending.
    let c = cell(vec![
        attempt(0, "baseline", 0, &[], "d", true),
        attempt(1, "a=2", 0, &[200.0], "d", false),
    ]);
    assert_eq!(c.baseline_state, BaselineState::Pending);
    assert!(c.winner.is_none());
    assert!(
        matches!(c.decision, CellDecision::BaselineRetry { .. }),
        "{}",
        c.decision
    );
    // Twice (its re-run failed too): it fails reproducibly.
    let c = cell(vec![
        attempt(0, "baseline", 0, &[], "d", true),
        attempt(0, "baseline", 1, &[], "d", true),
        attempt(1, "a=2", 0, &[200.0], "d", false),
    ]);
    assert_eq!(c.baseline_state, BaselineState::Failed);
    assert!(c.winner.is_none());
    assert!(
        matches!(c.decision, CellDecision::BaselineFailed { .. }),
        "{}",
        c.decision
    );
    // Once, then passed: noted, set aside, the cell goes on.
    let c = cell(vec![
        attempt(0, "baseline", 0, &[], "d", true),
        attempt(0, "baseline", 1, &[100.0, 101.0, 99.0], "d", false),
        attempt(1, "a=2", 0, &[200.0, 201.0, 199.0], "d", false),
    ]);
    assert_eq!(c.baseline_state, BaselineState::Ok);
    assert!(
        c.notes
            .iter()
            .any(|n| n.to_string().contains("failed once")),
        "{:?}",
        c.notes
    );
    assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
}

/// An attempt at cell `n`, with a role.
fn at(index: u64, label: &str, n: u64, r: u32, v: f64, role: &str) -> AttemptRecord {
    let mut a = attempt(index, label, r, &[v, v * 1.001, v * 0.999], "d", false);
    a.cell = Arc::new(serde_json::json!({"n": n}));
    a.cell_label = format!("n={n}").into();
    a.cell_index = n as u32;
    a.role = RoleKind::from(role);
    a.trial_key = format!("{index}-{n}-{r}-{role}");
    a
}

fn study_with(confirm_repeats: u32) -> StudyRecord {
    let mut s = study();
    s.spec = spec(serde_json::json!({
        "measurement": {"repeats": 1, "confirm_repeats": confirm_repeats},
        "buckets": {"n": "all"},
    }));
    s
}

/// The bucket's tie rule compares candidates with each other at every
/// cell, not through the baseline's noise.
#[test]
fn a_bucket_does_not_hide_a_real_win_behind_the_baselines_noise() {
    let noisy = |index: u64, label: &str, n: u64, v: &[f64]| {
        let mut a = attempt(index, label, 0, v, "d", false);
        a.cell = Arc::new(serde_json::json!({"n": n}));
        a.cell_label = format!("n={n}").into();
        a.cell_index = n as u32;
        a.trial_key = format!("{index}-{n}");
        a
    };
    let base = [100.0, 85.0, 115.0, 100.0, 118.0];
    let fast = [240.0, 242.0, 238.0, 241.0, 239.0];
    let less = [200.0, 202.0, 198.0, 201.0, 199.0];
    let close = [241.0, 243.0, 239.0, 242.0, 240.0];
    // The bucket (cells 1 and 2) with `two` (2 knobs changed) and `one`
    // (1 knob) measured alike at both cells.
    let bucket = |two: &[f64], one: &[f64]| {
        let mut attempts = Vec::new();
        for n in [1, 2] {
            attempts.push(noisy(0, "baseline", n, &base));
            attempts.push(noisy(1, "a=2 b=1", n, two));
            attempts.push(noisy(2, "a=2", n, one));
        }
        let scan = Scan {
            attempts: crate::ledger::shared(attempts),
            ..Default::default()
        };
        analyze(&study_with(0), &scan, &[]).classes[0].buckets[0].clone()
    };
    let b = bucket(&fast, &less);
    assert_eq!(
        b.winner.as_ref().map(|w| w.label.as_str()),
        Some("a=2 b=1"),
        "{}",
        b.decision
    );
    // Two candidates within their own noise still collapse to the one
    // that changes fewer knobs.
    let b = bucket(&close, &fast);
    assert_eq!(b.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
    assert!(
        matches!(&b.decision, Decision::Wins { sweep, .. } if sweep.tie_with.is_some()),
        "{}",
        b.decision
    );
}

#[test]
fn no_harm_refuses_a_config_that_loses_at_one_cell_of_its_bucket() {
    // a=2 is 2× faster at n=1 and n=2 but 10% slower at n=3.
    let attempts = vec![
        at(0, "baseline", 1, 0, 100.0, "sweep"),
        at(0, "baseline", 2, 0, 100.0, "sweep"),
        at(0, "baseline", 3, 0, 100.0, "sweep"),
        at(1, "a=2", 1, 0, 200.0, "sweep"),
        at(1, "a=2", 2, 0, 200.0, "sweep"),
        at(1, "a=2", 3, 0, 90.0, "sweep"),
    ];
    let scan = Scan {
        attempts: crate::ledger::shared(attempts),
        ..Default::default()
    };
    let a = analyze(&study_with(0), &scan, &[]);
    let b = &a.classes[0].buckets;
    assert_eq!(b.len(), 1, "one bucket (rule all)");
    assert!(b[0].winner.is_none());
    assert_eq!(b[0].refusals[0].cell_label, "n=3");
    assert!(
        matches!(&b[0].decision, Decision::Refused(r) if r.cell_label == "n=3"),
        "{}",
        b[0].decision
    );
    // The cell alone would have picked it.
    assert_eq!(
        a.classes[0].cells[0]
            .winner
            .as_ref()
            .map(|w| w.label.as_str()),
        Some("a=2")
    );
}

#[test]
fn a_winner_is_a_draft_until_the_final_round_confirms_it() {
    let mut attempts = vec![
        at(0, "baseline", 1, 0, 100.0, "sweep"),
        at(1, "a=2", 1, 0, 150.0, "sweep"),
    ];
    let s = study_with(1);
    let scan = |attempts: Vec<AttemptRecord>| Scan {
        attempts: crate::ledger::shared(attempts),
        ..Default::default()
    };
    let a = analyze(&s, &scan(attempts.clone()), &[]);
    let b = &a.classes[0].buckets[0];
    assert_eq!(b.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
    assert_eq!(b.level, Level::Draft);
    assert!(
        matches!(
            b.level_reason.0.as_slice(),
            [LevelReason::AwaitingRound { .. }]
        ),
        "{}",
        b.level_reason
    );

    // Confirmed: the final round agrees.
    let mut confirmed = attempts.clone();
    confirmed.push(at(0, "baseline", 1, 0, 100.0, "confirm"));
    confirmed.push(at(1, "a=2", 1, 0, 149.0, "confirm"));
    let a = analyze(&s, &scan(confirmed), &[]);
    let b = &a.classes[0].buckets[0];
    assert_eq!(b.level, Level::Verdict, "{}", b.level_reason);
    assert_eq!(b.config, serde_json::json!({}));
    assert_eq!(a.level, Level::Verdict);

    // Not confirmed: the sweep's win was a fluke; the baseline ships.
    attempts.push(at(0, "baseline", 1, 0, 100.0, "confirm"));
    attempts.push(at(1, "a=2", 1, 0, 100.5, "confirm"));
    let a = analyze(&s, &scan(attempts), &[]);
    let b = &a.classes[0].buckets[0];
    assert!(b.winner.is_none());
    assert!(
        matches!(
            b.decision,
            Decision::NotConfirmed {
                because: NotConfirmedBecause::BelowMinimum(_),
                ..
            }
        ),
        "{}",
        b.decision
    );
    assert_eq!(b.level, Level::Verdict);
}

#[test]
fn per_host_ratios_merge_by_median() {
    // Host h2 is twice as fast for everything: pooled samples would
    // mislead, per-host ratios do not.
    let mut attempts = Vec::new();
    for (host, scale) in [("h1", 1.0), ("h2", 2.0), ("h3", 1.0)] {
        let mut b = attempt(0, "baseline", 0, &[100.0 * scale], "d", false);
        let mut c = attempt(1, "a=2", 0, &[110.0 * scale], "d", false);
        for x in [&mut b, &mut c] {
            x.host = host.into();
            x.trial_key = format!("{}-{host}", x.trial_key);
        }
        attempts.push(b);
        attempts.push(c);
    }
    let c = cell(attempts);
    let w = &c.eligible[0];
    assert_eq!(w.hosts, 3);
    assert!((w.speedup.unwrap_or(0.0) - 1.1).abs() < 1e-9);
}

#[test]
fn a_candidate_on_a_host_without_baseline_samples_compares_with_the_pooled_baseline() {
    // The baseline's repeats all ran on h1, the candidate's on h2 (two
    // slots of a class drew them so): it is still compared.
    let mut attempts = Vec::new();
    for r in 0..3 {
        let mut b = attempt(0, "baseline", r, &[100.0], "d", false);
        b.host = "h1".into();
        let mut c = attempt(1, "a=2", r, &[140.0], "d", false);
        c.host = "h2".into();
        attempts.push(b);
        attempts.push(c);
    }
    let c = cell(attempts);
    let w = &c.eligible[0];
    assert!(
        (w.speedup.unwrap_or(0.0) - 1.4).abs() < 1e-9,
        "{:?}",
        w.speedup
    );
}

#[test]
fn a_winner_that_crashes_in_the_final_round_does_not_ship() {
    let mut crash = at(1, "a=2", 1, 0, 0.0, "confirm");
    crash.status = AttemptStatus::Failed;
    crash.failure = Some(Failure {
        class: FailureClass::Oom,
        detail: "CUDA out of memory".into(),
        phase: crate::trial::Phase::Measure,
        timeout_s: None,
    });
    let attempts = vec![
        at(0, "baseline", 1, 0, 100.0, "sweep"),
        at(1, "a=2", 1, 0, 150.0, "sweep"),
        at(0, "baseline", 1, 0, 100.0, "confirm"),
        crash,
    ];
    let scan = Scan {
        attempts: crate::ledger::shared(attempts),
        ..Default::default()
    };
    let a = analyze(&study_with(1), &scan, &[]);
    let b = &a.classes[0].buckets[0];
    assert!(b.winner.is_none());
    assert!(
        matches!(b.decision, Decision::RoundFailed { .. }),
        "{}",
        b.decision
    );
    assert!(
        b.decision.to_string().contains("oom: CUDA out of memory"),
        "{}",
        b.decision
    );
    assert_eq!(b.level, Level::Verdict);
}

#[test]
fn a_bucket_with_only_the_baseline_measured_is_a_draft() {
    let scan = Scan {
        attempts: crate::ledger::shared(vec![at(0, "baseline", 1, 0, 100.0, "sweep")]),
        ..Default::default()
    };
    let a = analyze(&study_with(1), &scan, &[]);
    let b = &a.classes[0].buckets[0];
    assert_eq!(b.level, Level::Draft);
    assert!(
        matches!(b.decision, Decision::NothingMeasured),
        "{}",
        b.decision
    );
}

/// A final round that ends with the minimum inside its interval, its
/// estimate above the minimum, grows once to the runs its own noise asks
/// for, and is judged again on all its runs; one whose estimate is below
/// the minimum is refused at its planned size.
#[test]
fn a_final_round_across_the_minimum_grows_once_and_is_judged_on_all_its_runs() {
    let mut s = study();
    s.spec = spec(serde_json::json!({
        "measurement": {"repeats": 3, "confirm_repeats": 3, "max_repeats": 30},
    }));
    // One sample per run (the fixture's `analyze` makes each sample a run).
    let one = |index: u64, label: &str, r: usize, v: f64, role: &str| {
        let mut a = at(index, label, 1, r as u32, v, role);
        a.metrics.insert("tp".to_string(), vec![v]);
        a
    };
    let sweep = || {
        let mut v = Vec::new();
        for (r, (b, w)) in [(100.0, 150.0), (101.0, 151.0), (99.0, 149.0)]
            .iter()
            .enumerate()
        {
            v.push(one(0, "baseline", r, *b, "sweep"));
            v.push(one(1, "a=2", r, *w, "sweep"));
        }
        v
    };
    let with_round = |pairs: &[(f64, f64)]| {
        let mut v = sweep();
        for (r, (b, w)) in pairs.iter().enumerate() {
            v.push(one(0, "baseline", r, *b, "confirm"));
            v.push(one(1, "a=2", r, *w, "confirm"));
        }
        let scan = Scan {
            attempts: crate::ledger::shared(v),
            ..Default::default()
        };
        analyze(&s, &scan, &[]).classes[0].buckets[0].clone()
    };
    // A large sweep win: the round is planned at confirm_repeats.
    let b = with_round(&[]);
    assert_eq!(b.confirm_runs, Some(3), "{}", b.decision);
    // Its 3 runs a side measure about +4 % with 5 % noise: across 2 %.
    let first = [(100.0, 106.0), (103.0, 101.0), (97.0, 105.0)];
    let b = with_round(&first);
    let grown = b.confirm_runs.expect("a round");
    assert!((6..=30).contains(&grown), "{grown}: {}", b.decision);
    assert_eq!(b.level, Level::Draft, "{}", b.level_reason);
    assert!(
        matches!(
            b.level_reason.0.as_slice(),
            [LevelReason::AwaitingRound { done: Some((3, r)) }] if *r == grown
        ),
        "{}",
        b.level_reason
    );
    let c = b
        .winner
        .as_ref()
        .and_then(|w| w.confirmation.as_ref())
        .expect("round");
    assert_eq!((c.planned, c.runs, c.incomplete), (3, grown, true));
    // The grown round measured: the same +4 %, now known well enough.
    let mut all = first.to_vec();
    for r in 3..grown {
        let d = [-1.5, 0.0, 1.5][r as usize % 3];
        all.push((100.0 + d, (100.0 + d) * (1.04 + d / 300.0)));
    }
    let b = with_round(&all);
    assert_eq!(b.confirm_runs, Some(grown));
    assert_eq!(b.level, Level::Verdict, "{}", b.level_reason);
    assert_eq!(b.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
    let c = b
        .winner
        .as_ref()
        .and_then(|w| w.confirmation.as_ref())
        .expect("round");
    assert!(c.confirmed && c.runs_done == grown as usize, "{c:?}");
    let json = serde_json::to_value(c).unwrap_or_default();
    assert_eq!(json["planned_runs"], 3, "{json}");
    assert_eq!(json["runs"], grown, "{json}");
    // It does not grow again, whatever the grown round says: a round
    // still across the minimum at its grown size is refused.
    let mut flat = first.to_vec();
    for r in 3..grown {
        let d = [-3.0, 0.0, 3.0][r as usize % 3];
        flat.push((100.0 + d, (100.0 + d) * (1.01 + d / 300.0)));
    }
    let b = with_round(&flat);
    assert_eq!(b.confirm_runs, Some(grown));
    assert!(
        matches!(b.decision, Decision::NotConfirmed { .. }),
        "{}",
        b.decision
    );
    // A round whose estimate is below the minimum is not grown.
    let b = with_round(&[(100.0, 101.0), (103.0, 100.0), (97.0, 101.0)]);
    assert_eq!(b.confirm_runs, Some(3));
    assert!(
        matches!(b.decision, Decision::NotConfirmed { .. }),
        "{}",
        b.decision
    );
    assert_eq!(b.level, Level::Verdict);
}

/// The false-win bound of the final round (docs/verdicts.md, section 8),
/// checked by simulation through the analysis itself: a sweep winner whose
/// true speedup in the round is exactly the 2 % minimum is confirmed at
/// most 5 % of the time over the round's two looks (planned, then grown),
/// one truly as fast as the baseline almost never, and a true +5 % win far
/// more often than by the planned round alone. Runs have 3 % lognormal
/// noise a side; 1,000 rounds per truth, seeded.
#[test]
fn the_final_rounds_two_looks_keep_the_false_win_bound() {
    use rand::{RngExt, SeedableRng};
    let mut s = study();
    s.spec = spec(serde_json::json!({
        "measurement": {"repeats": 3, "confirm_repeats": 3, "max_repeats": 30},
    }));
    let one = |index: u64, label: &str, r: usize, v: f64, role: &str| {
        let mut a = at(index, label, 1, r as u32, v, role);
        a.metrics.insert("tp".to_string(), vec![v]);
        a
    };
    let mut sweep = Vec::new();
    for (r, (b, w)) in [(100.0, 150.0), (101.0, 151.0), (99.0, 149.0)]
        .iter()
        .enumerate()
    {
        sweep.push(one(0, "baseline", r, *b, "sweep"));
        sweep.push(one(1, "a=2", r, *w, "sweep"));
    }
    let bucket = |pairs: &[(f64, f64)]| {
        let mut v = sweep.clone();
        for (r, (b, w)) in pairs.iter().enumerate() {
            v.push(one(0, "baseline", r, *b, "confirm"));
            v.push(one(1, "a=2", r, *w, "confirm"));
        }
        let scan = Scan {
            attempts: crate::ledger::shared(v),
            ..Default::default()
        };
        analyze(&s, &scan, &[]).classes[0].buckets[0].clone()
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2026);
    let mut gauss = || {
        let u1: f64 = rng.random::<f64>().max(1e-12);
        let u2: f64 = rng.random::<f64>();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    };
    let rounds = 1000;
    // (confirmed, confirmed at the planned size, grown)
    let mut rate = |truth: f64| {
        let (mut confirmed, mut at_planned, mut grown) = (0, 0, 0);
        for _ in 0..rounds {
            let pairs: Vec<(f64, f64)> = (0..30)
                .map(|_| {
                    (
                        100.0 * (0.03 * gauss()).exp(),
                        100.0 * truth * (0.03 * gauss()).exp(),
                    )
                })
                .collect();
            let b = bucket(&pairs[..3]);
            let size = b.confirm_runs.expect("a round") as usize;
            let c = b.winner.as_ref().and_then(|w| w.confirmation.as_ref());
            at_planned += usize::from(c.is_some_and(|c| c.confirmed));
            let b = if size > 3 {
                grown += 1;
                bucket(&pairs[..size])
            } else {
                b
            };
            assert_eq!(b.confirm_runs, Some(size as u32), "the round grows once");
            let c = b.winner.as_ref().and_then(|w| w.confirmation.as_ref());
            confirmed += usize::from(c.is_some_and(|c| c.confirmed && !c.incomplete));
        }
        let share = |n: usize| n as f64 / rounds as f64;
        (share(confirmed), share(at_planned), share(grown))
    };
    let (boundary, boundary_planned, _) = rate(1.02);
    let (null, _, _) = rate(1.0);
    let (win, win_planned, win_grown) = rate(1.05);
    let seen = format!(
        "at the minimum {boundary} ({boundary_planned} at the planned size), none {null}, +5 % {win} ({win_planned} planned, grown {win_grown})"
    );
    eprintln!("{seen}");
    assert!(boundary <= 0.05, "{seen}");
    assert!(null <= 0.005, "{seen}");
    assert!(win >= win_planned + 0.2 && win >= 0.6, "{seen}");
}

/// Without the class's slots (`report`), a racing round is the rule's:
/// the first `RACE_WIDTH` configs grown by `repeats` or half again. With
/// them, a round that would leave slots idle takes more contenders, then
/// more runs each, as long as what it adds fits; never past the cap.
#[test]
fn a_racing_round_fills_the_slots_of_the_class_and_no_more() {
    // The rule's round: 3 of 5 at 3 runs grow to 6 (9 trials at one cell
    // and 3 of the baseline).
    assert_eq!(round_size(&[3, 3, 3, 3, 3], 3, 3, 1, 0, 30), (3, 6));
    // Half again once that is more: 20 runs grow to 30.
    assert_eq!(round_size(&[20, 20], 20, 3, 1, 0, 30), (2, 30));
    assert_eq!(round_size(&[20, 20], 20, 3, 1, 0, 25), (2, 25));
    // 24 slots: all 5 and the baseline to 6 runs (18 trials), then 7
    // runs (24 trials).
    assert_eq!(round_size(&[3, 3, 3, 3, 3], 3, 3, 1, 24, 30), (5, 7));
    // Two cells a config: each run is two trials; 4 configs and the
    // baseline to 6 runs are 30 trials, one more config 36.
    assert_eq!(round_size(&[3, 3, 3, 3, 3], 3, 3, 2, 32, 30), (4, 6));
    // Three raced to 6 (the baseline too) and a new one at 3: the rule's
    // round grows the three to 9 (12 trials with the baseline); 24 slots
    // take the fourth too (18), then one run more each (23); another
    // would be 28.
    assert_eq!(round_size(&[6, 6, 6, 3], 6, 3, 1, 24, 30), (4, 10));
    // Fewer slots than the rule's round: the rule's round still runs.
    assert_eq!(round_size(&[3, 3, 3, 3], 3, 3, 1, 4, 30), (3, 6));
    // The cap bounds the runs whatever the slots.
    assert_eq!(round_size(&[28], 28, 3, 1, 1000, 30), (1, 30));
    // No wanted config: nothing, whatever the slots.
    assert_eq!(round_size(&[], 3, 3, 1, 20, 30).0, 0);
}

/// A launch's analysis sizes the race to its class's slots; `report`'s
/// (and the decision itself) stay the rule's.
#[test]
fn a_launch_races_wider_where_its_class_has_slots_and_decides_the_same() {
    let base = [100.0, 103.0, 97.0];
    let close = [
        [104.0, 107.0, 101.0],
        [104.5, 107.5, 101.5],
        [105.0, 108.0, 102.0],
        [105.5, 108.5, 102.5],
        [106.0, 109.0, 103.0],
    ];
    let mut attempts = runs_of(0, "baseline", &base);
    for (i, v) in close.iter().enumerate() {
        attempts.extend(runs_of(i as u64 + 1, &format!("a={}", i + 2), v));
    }
    let mut s = study();
    s.spec = spec(serde_json::json!({
        "measurement": {"repeats": 3, "confirm_repeats": 3, "max_repeats": 30},
    }));
    let scan = Scan {
        attempts: crate::ledger::shared(attempts),
        ..Default::default()
    };
    let bucket =
        |scope| analyze_scoped(&s, &scan, &[], &[], scope, |_| true).classes[0].buckets[0].clone();
    let rule = bucket(Scope::Decisions);
    let race = rule.racing.clone().expect("raced");
    assert_eq!((race.configs.len(), race.runs), (3, 6), "{race:?}");
    let wide = bucket(Scope::Launch { race_slots: 48 });
    let race = wide.racing.clone().expect("raced");
    // 5 contenders and the baseline: 6 × (11 − 3) = 48 trials.
    assert_eq!((race.configs.len(), race.runs), (5, 11), "{race:?}");
    assert_eq!(wide.decision.to_string(), rule.decision.to_string());
    assert_eq!(wide.level, rule.level);
    // No slots known (0): the rule's round.
    let none = bucket(Scope::Launch { race_slots: 0 });
    assert_eq!(none.racing, rule.racing);
}

/// A contender leaves the race when its comparison with the leader shows
/// it slower, read at a level corrected for how many contenders the
/// bucket compares (Bonferroni): one comparison at 95 % settles `a=3`
/// (3 runs, 6.5 % below the leader), but among eleven contenders the same
/// evidence does not, and `a=3` races on with the leader. The far slower
/// contenders are settled either way.
#[test]
fn a_contender_is_settled_out_of_the_race_at_a_level_corrected_for_their_number() {
    let bucket = |fillers: u64| {
        let mut attempts = runs_of(0, "baseline", &[100.0, 103.0, 97.0]);
        attempts.extend(runs_of(1, "a=2", &[150.0, 153.0, 147.0]));
        attempts.extend(runs_of(2, "a=3", &[140.5, 143.5, 137.5]));
        for i in 3..3 + fillers {
            let v = 110.0 + i as f64;
            attempts.extend(runs_of(i, &format!("a={}", i + 1), &[v, v + 3.0, v - 3.0]));
        }
        let mut s = study();
        let values: Vec<u64> = (1..=16).collect();
        s.spec = spec(serde_json::json!({
            "knobs": [{"name": "a", "kind": "int", "values": values, "default": 1}],
            "measurement": {"repeats": 3, "confirm_repeats": 3, "max_repeats": 30},
        }));
        let scan = Scan {
            attempts: crate::ledger::shared(attempts),
            ..Default::default()
        };
        analyze(&s, &scan, &[]).classes[0].buckets[0].clone()
    };
    let raced = |b: &BucketReport| -> Vec<String> {
        let mut v: Vec<String> = b
            .racing
            .iter()
            .flat_map(|r| r.configs.iter().map(|(l, _)| l.clone()))
            .collect();
        v.sort();
        v
    };
    let one = bucket(0);
    assert!(one.racing.is_none(), "{:?}", one.racing);
    let many = bucket(10);
    assert_eq!(raced(&many), ["a=2", "a=3"], "{:?}", many.racing);
}

/// What ships must be within the minimum of every contender, not merely
/// "equivalent to the leader": the leader is only the best estimate, and a
/// contender equivalent to it may still beat the tie rule's pick by more
/// than the minimum. Here `a=4` leads (10 tight runs), `a=2` is shown
/// within 2 % of it and is the pick (nearest the default), and `a=3`,
/// noisier, is also within 2 % of the leader, yet its comparison with the
/// pick (+1.4 %, upper end above +2 % at the corrected level) does not
/// rule out that it beats the pick by more than the minimum: both race
/// on. With `a=3` measured as tightly, nothing is left to race and `a=2`
/// ships.
#[test]
fn a_contender_races_until_it_is_shown_not_to_beat_the_pick_by_the_minimum() {
    let around = |mid: f64, k: f64| -> Vec<f64> {
        (0..10)
            .map(|i| mid + if i % 2 == 0 { k } else { -k })
            .collect()
    };
    let bucket = |t_spread: f64| {
        let mut attempts = runs_of(0, "baseline", &around(100.0, 1.0));
        attempts.extend(runs_of(1, "a=2", &around(147.75, 0.73)));
        attempts.extend(runs_of(2, "a=3", &around(149.85, t_spread)));
        attempts.extend(runs_of(3, "a=4", &around(150.0, 0.07)));
        bucket_with(30, attempts)
    };
    let b = bucket(1.83);
    let race = b.racing.clone().expect("raced");
    let mut why: Vec<String> = race.why.iter().map(|(l, w)| format!("{l}: {w}")).collect();
    why.sort();
    assert_eq!(
        why,
        [
            "a=2: what would ship, against a contender that may beat it",
            "a=3: it may beat what would ship by more than the minimum"
        ],
        "{race:?}"
    );
    assert_eq!(b.level, Level::Draft, "{}", b.level_reason);
    assert!(
        matches!(&b.decision, Decision::Wins { label, for_now: true, .. } if label == "a=2"),
        "{}",
        b.decision
    );

    let b = bucket(0.2);
    assert!(b.racing.is_none(), "{:?}", b.racing);
    assert!(
        matches!(&b.decision, Decision::Wins { label, .. } if label == "a=2"),
        "{}",
        b.decision
    );
}
