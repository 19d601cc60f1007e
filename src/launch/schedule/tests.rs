//! The scheduler on its own: no transport, no ledger, no clock. Each test
//! plays the launch driver's part by hand (ask for a unit, say how it
//! ended) and checks what the scheduler hands out and reports.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use super::drift::Reading;
use super::*;
use crate::launch::events::{Abandon, LaunchEvent, SkipCause};
use crate::ledger::Scan;
use crate::ledger::records::{AttemptRecord, AttemptStatus};
use crate::plan::{ClassInfo, Plan, PlanHost};
use crate::spec::Study;

/// Three configs (a = 1 is the baseline), two cells, two repeats; lower is
/// better; an anchor every 2 candidates; confirmation rounds of 2.
const STUDY: &str = "name: t
knobs:
  a: {kind: int, values: [1, 2, 3], default: 1}
cells:
  n: [10, 20]
trial: {command: 'run {{ a }} {{ n }}', timeout: 5s}
objective: {metric: t, unit: s, better: lower}
measurement: {warmup: 0, repeats: 2, anchor_every: 2, confirm_repeats: 2, cool_drift: 0.05, cool_eps: 0.03}
";

/// Two hosts of one class (slot 1 each) and one of another.
fn plan_hosts() -> Vec<PlanHost> {
    let h = |name: &str, class: &str| PlanHost {
        name: name.to_string(),
        transport: "local".to_string(),
        slots: 1,
        class: Some(ClassInfo {
            id: class.to_string(),
            label: class.to_string(),
        }),
    };
    vec![h("x", "hc-a"), h("y", "hc-a"), h("z", "hc-b")]
}

/// The study (`study` and `extra`) and its plan live for the test's whole
/// run.
fn fixture(study: &str, extra: &str) -> (&'static Study, &'static Plan) {
    let text = [study, extra].concat();
    let study: &'static Study = Box::leak(Box::new(
        Study::from_text(Path::new("t.yaml"), &text).expect("valid study"),
    ));
    let plan: &'static Plan = Box::leak(Box::new(Plan::build(study, &plan_hosts()).expect("plan")));
    (study, plan)
}

/// A scheduler over `fixture`; `one_bucket`: both cells form one bucket
/// (else a bucket per cell).
fn scheduler(extra: &str, one_bucket: bool, sharded: bool) -> Scheduler<'static> {
    scheduler_of(STUDY, extra, one_bucket, sharded)
}

/// `scheduler` over another study text.
fn scheduler_of(study: &str, extra: &str, one_bucket: bool, sharded: bool) -> Scheduler<'static> {
    let extra = if one_bucket {
        [extra, "buckets: {n: all}\n"].concat()
    } else {
        extra.to_string()
    };
    let (study, plan) = fixture(study, &extra);
    Scheduler::new(Setup {
        study,
        study_id: "t",
        spec_hash: "spec".to_string(),
        plan,
        class_ids: plan.classes.iter().map(|c| c.id.clone()).collect(),
        host_class: vec![0, 0, 1],
        host_names: vec!["x".to_string(), "y".to_string(), "z".to_string()],
        slots: vec![1, 1, 1],
        budgets: vec![None],
        objective_budget: None,
        tolerance: None,
        done: HashSet::new(),
        first_baselines: HashMap::new(),
        prior: None,
        no_cooldown: false,
        sharded,
        host_timeout: Duration::from_secs(600),
    })
}

fn empty_scan() -> Scan {
    Scan {
        attempts: Vec::new(),
        corrupt: Vec::new(),
        voided: 0,
        drops: Vec::new(),
    }
}

/// A recorded attempt of `unit` on class 0, as the ledger returns it.
fn record(s: &Scheduler<'_>, unit: Unit, status: AttemptStatus) -> AttemptRecord {
    let setup = s.setup();
    let config = setup.config_of(unit);
    serde_json::from_value(serde_json::json!({
        "schema": 1, "tunectl_version": "test", "study_id": "t",
        "spec_hash": "spec", "trial_key": setup.key_of(0, unit),
        "attempt_id": "a1", "config": {}, "config_label": "c",
        "config_index": config, "is_baseline": config == setup.plan.space.baseline(),
        "cell": {}, "cell_label": "n", "cell_index": unit.cell,
        "repeat": unit.repeat, "role": "sweep", "fidelity": null,
        "host": "x", "host_class": "hc-a", "fingerprint": "f", "slot": 0,
        "started_at": "", "finished_at": "", "duration_s": 1.0,
        "run_s": 1.0, "warmup_runs": 0, "status": status,
        "failure": null, "exit": null, "metrics": {}, "digest": null,
        "outputs": {}, "command": "", "stdout_tail": "", "stderr_tail": ""
    }))
    .expect("a record")
}

/// How a unit ended: `status`, measuring `value` (relative noise 1%).
fn ran(s: &Scheduler<'_>, class: usize, unit: Unit, status: AttemptStatus, value: f64) -> Ran {
    Ran {
        status,
        key: s.setup().key_of(class, unit),
        attempt_id: "attempt".to_string(),
        value: Some(Reading {
            value,
            noise: Some(0.01),
        }),
        host_lost: false,
        record: None,
    }
}

/// The next unit for `host` of `class`, which must be one.
fn take(s: &mut Scheduler<'_>, class: usize, host: usize) -> Unit {
    match s.next(class, host, Instant::now()).0 {
        Next::Run(u, _) => u,
        other => panic!("expected a unit, got {other:?}"),
    }
}

/// Run every ready unit of `class` on `host` with `status`, returning them.
fn drain(s: &mut Scheduler<'_>, class: usize, host: usize, status: AttemptStatus) -> Vec<Unit> {
    let mut out = Vec::new();
    while let (Next::Run(u, _), _) = s.next(class, host, Instant::now()) {
        let r = ran(s, class, u, status, 100.0);
        if s.finish(class, host, u, Some(&r)).is_due() {
            // The driver's anchor: clean, nothing voided.
            s.anchor_over(class, u.cell);
        }
        out.push(u);
    }
    out
}

fn skipped(events: &[LaunchEvent]) -> Vec<(u64, SkipCause)> {
    events
        .iter()
        .filter_map(|e| match e {
            LaunchEvent::Skipped { count, cause, .. } => Some((*count, cause.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_cell_starts_with_its_baseline_and_repeats_interleave_across_configs() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    let planned = s.take_events();
    // 2 cells × 3 configs × 2 repeats per class, 2 classes.
    assert_eq!(
        planned,
        vec![LaunchEvent::Planned {
            to_run: 24,
            already_done: 0
        }]
    );
    let first = take(&mut s, 0, 0);
    assert_eq!(first, Unit::sweep(0, 0, 0));
    // Nothing of cell 0 but its baseline before the baseline ended: the
    // other slot gets cell 1's baseline, then waits.
    assert_eq!(take(&mut s, 0, 1), Unit::sweep(1, 0, 0));
    assert_eq!(s.next(0, 1, Instant::now()).0, Next::Wait);
    let r = ran(&s, 0, first, AttemptStatus::Ok, 100.0);
    s.finish(0, 0, first, Some(&r));
    let order: Vec<(u32, u64)> = (0..5)
        .map(|_| {
            let u = take(&mut s, 0, 0);
            (u.repeat, u.pos)
        })
        .collect();
    assert_eq!(order, vec![(0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]);
}

#[test]
fn a_failed_baseline_runs_once_more_and_a_second_failure_skips_its_cell() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    s.take_events();
    let base = take(&mut s, 0, 0);
    let r = ran(&s, 0, base, AttemptStatus::Failed, 100.0);
    s.finish(0, 0, base, Some(&r));
    // Not believed yet: its repeat 1 runs alone, before anything else of
    // the cell.
    assert_eq!(
        s.take_events(),
        vec![LaunchEvent::BaselineRetry {
            cell: "n=10".to_string(),
            class: "hc-a".to_string()
        }]
    );
    let retry = take(&mut s, 0, 0);
    assert_eq!((retry.cell, retry.repeat, retry.pos), (0, 1, 0));
    let r = ran(&s, 0, retry, AttemptStatus::Failed, 100.0);
    s.finish(0, 0, retry, Some(&r));
    assert_eq!(
        skipped(&s.take_events()),
        vec![(
            4,
            SkipCause::BaselineFailed {
                cell: "n=10".to_string()
            }
        )]
    );
    // Only cell 1 remains for the class.
    let rest = drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert!(rest.iter().all(|u| u.cell == 1), "{rest:?}");
    assert_eq!(rest.len(), 6);
}

#[test]
fn a_baseline_that_passes_its_re_run_releases_its_cell() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    let base = take(&mut s, 0, 0);
    let r = ran(&s, 0, base, AttemptStatus::Failed, 100.0);
    s.finish(0, 0, base, Some(&r));
    let retry = take(&mut s, 0, 0);
    assert_eq!((retry.cell, retry.repeat, retry.pos), (0, 1, 0));
    let r = ran(&s, 0, retry, AttemptStatus::Ok, 100.0);
    s.finish(0, 0, retry, Some(&r));
    s.take_events();
    // Every other trial of the cell runs, the re-run not again; the
    // baseline's one failure does not stop its repeats.
    let rest = drain(&mut s, 0, 0, AttemptStatus::Ok);
    let cell0: Vec<(u32, u64)> = rest
        .iter()
        .filter(|u| u.cell == 0)
        .map(|u| (u.repeat, u.pos))
        .collect();
    assert_eq!(cell0.len(), 4, "{cell0:?}");
    assert!(!cell0.contains(&(1, 0)), "{cell0:?}");
    assert!(skipped(&s.take_events()).is_empty());
}

#[test]
fn a_config_that_failed_is_not_repeated_in_its_cell() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    let base = take(&mut s, 0, 0);
    let r = ran(&s, 0, base, AttemptStatus::Ok, 100.0);
    s.finish(0, 0, base, Some(&r));
    let cand = take(&mut s, 0, 0);
    assert_eq!((cand.cell, cand.repeat, cand.pos), (0, 0, 1));
    let r = ran(&s, 0, cand, AttemptStatus::Failed, 100.0);
    s.finish(0, 0, cand, Some(&r));
    s.take_events();
    let rest = drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert!(!rest.iter().any(|u| u.cell == 0 && u.pos == 1), "{rest:?}");
    assert!(
        skipped(&s.take_events()).contains(&(1, SkipCause::ConfigFailed)),
        "the repeat is counted as skipped"
    );
}

#[test]
fn trials_the_ledger_holds_are_counted_and_never_handed_out() {
    let mut s = scheduler("", false, false);
    let base = Unit::sweep(0, 0, 0);
    let cand = Unit::sweep(0, 1, 2);
    let mut scan = empty_scan();
    scan.attempts = crate::ledger::shared(vec![
        record(&s, base, AttemptStatus::Ok),
        record(&s, cand, AttemptStatus::Ok),
    ]);
    scan.attempts.sort_by(|a, b| a.trial_key.cmp(&b.trial_key));
    // What the driver derives from the same scan.
    s.s.done = [s.setup().key_of(0, base), s.setup().key_of(0, cand)]
        .into_iter()
        .collect();
    s.seed(&scan);
    let planned = s.take_events();
    assert_eq!(
        planned[0],
        LaunchEvent::Planned {
            // Class 0: cell 0's 4 left + cell 1's 6; class 1: 12.
            to_run: 22,
            already_done: 2
        }
    );
    let handed = drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert!(!handed.contains(&base) && !handed.contains(&cand));
    assert_eq!(handed.len(), 10);
}

#[test]
fn a_trial_lost_with_its_host_goes_back_a_bounded_number_of_times() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    s.take_events();
    let base = take(&mut s, 0, 0);
    let mut lost = ran(&s, 0, base, AttemptStatus::Lost, 0.0);
    lost.host_lost = true;
    for _ in 0..MAX_HOST_LOSS_REQUEUES {
        s.finish(0, 0, base, Some(&lost));
        assert_eq!(s.take_events(), vec![LaunchEvent::TrialRequeued]);
        // The other host of the class takes it.
        assert_eq!(take(&mut s, 0, 1), base);
    }
    s.finish(0, 1, base, Some(&lost));
    let events = s.take_events();
    assert!(matches!(
        events[0],
        LaunchEvent::TrialLeftAfterHostLosses { losses: 3, .. }
    ));
    // Left for a later launch: its cell waits for the baseline, quietly
    // counted as skipped with its reason.
    assert_eq!(
        skipped(&events),
        vec![(
            5,
            SkipCause::BaselineLost {
                cell: "n=10".to_string()
            }
        )]
    );
}

#[test]
fn a_bucket_confirms_once_all_its_cells_are_measured_and_its_round_runs_first() {
    let mut s = scheduler("", true, false);
    s.seed(&empty_scan());
    // Cell 0 done, cell 1 not started: not ready.
    let b0 = take(&mut s, 0, 0);
    let r = ran(&s, 0, b0, AttemptStatus::Ok, 100.0);
    s.finish(0, 0, b0, Some(&r));
    assert!(s.buckets_ready(0, &[0]).is_empty());
    drain(&mut s, 0, 0, AttemptStatus::Ok);
    let bucket = s.setup().plan.bucket_of_cell(0).clone();
    let ready = s.buckets_ready(0, &[0, 1]);
    assert_eq!(ready, vec![(bucket.key.clone(), vec![0, 1])]);
    // Asked again: already started.
    assert!(s.buckets_ready(0, &[1]).is_empty());
    s.take_events();
    let queued = s.queue_bucket_step(
        0,
        &[0, 1],
        BucketStep::Confirm { winner: 2, runs: 2 },
        &HashSet::new(),
    );
    // baseline and winner, 2 rounds, 2 cells.
    assert_eq!(queued, 8);
    assert_eq!(
        s.take_events(),
        vec![LaunchEvent::ConfirmationQueued {
            bucket: bucket.label.clone(),
            class: "hc-a".to_string(),
            trials: 8
        }]
    );
    let round: Vec<(u32, u32, u64)> = (0..4)
        .map(|_| {
            let u = take(&mut s, 0, 0);
            assert_eq!(u.kind, Kind::Confirm);
            let r = ran(&s, 0, u, AttemptStatus::Ok, 100.0);
            s.finish(0, 0, u, Some(&r));
            (u.cell, u.repeat, u.pos)
        })
        .collect();
    // Interleaved: baseline, winner (config 2 → pos 3), baseline, winner.
    assert_eq!(round, vec![(0, 0, 0), (0, 0, 3), (0, 1, 0), (0, 1, 3)]);
}

/// The drift watch goes on through a confirmation round: each of its
/// baseline runs is a check (no extra anchor); a hot one, confirmed by its
/// burst, voids the round's runs since the last clean check, which run
/// again after the cool-down without holding the bucket back.
#[test]
fn a_slowdown_during_the_confirmation_round_is_caught_and_its_runs_measured_again() {
    let mut s = scheduler("", true, false);
    s.seed(&empty_scan());
    drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert_eq!(s.buckets_ready(0, &[0, 1]).len(), 1);
    assert_eq!(
        s.queue_bucket_step(
            0,
            &[0, 1],
            BucketStep::Confirm { winner: 2, runs: 2 },
            &HashSet::new()
        ),
        8
    );
    s.take_events();
    // A pair measured in the normal state: the baseline is a clean check.
    let b = take(&mut s, 0, 0);
    assert_eq!((b.kind, b.pos), (Kind::Confirm, 0));
    let r = ran(&s, 0, b, AttemptStatus::Ok, 100.0);
    assert_eq!(s.finish(0, 0, b, Some(&r)), Check::Reading(reading(100.0)));
    assert_eq!(s.first_anchor(0, 0, reading(100.0)), AnchorStep::Done);
    s.anchor_over(0, 0);
    let w = take(&mut s, 0, 0);
    assert_eq!((w.kind, w.pos), (Kind::Confirm, 3));
    let r = ran(&s, 0, w, AttemptStatus::Ok, 90.0);
    assert_eq!(s.finish(0, 0, w, Some(&r)), Check::None);
    // The next baseline run is 30 % slower: a suspect, and its burst agrees.
    let b2 = take(&mut s, 0, 0);
    assert_eq!((b2.kind, b2.repeat, b2.pos), (Kind::Confirm, 1, 0));
    let r = ran(&s, 0, b2, AttemptStatus::Ok, 130.0);
    assert_eq!(s.finish(0, 0, b2, Some(&r)), Check::Reading(reading(130.0)));
    let (voids, mut cooldown) = drifted(&mut s);
    // The runs since the clean check: the winner's, then the hot one; the
    // baseline run before them was judged clean.
    assert_eq!(
        voids.iter().map(|v| v.unit).collect::<Vec<_>>(),
        vec![w, b2]
    );
    cooldown.start_try();
    assert!(cooldown.take(100.5));
    let dropped = s.cooled(
        0,
        0,
        0,
        &voids,
        &cooldown,
        Some(reading(100.5)),
        false,
        Duration::ZERO,
    );
    assert_eq!(dropped, None);
    s.anchor_over(0, 0);
    let events = s.take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, LaunchEvent::Drifted { .. })),
        "{events:?}"
    );
    assert!(events.contains(&LaunchEvent::Remeasure { count: 2 }));
    // The round runs to its end, the voided run again among it; then the
    // bucket's step is asked again (the round might grow), once.
    let mut rest = Vec::new();
    while let (Next::Run(u, _), _) = s.next(0, 0, Instant::now()) {
        assert_eq!(u.kind, Kind::Confirm, "{u:?}");
        let r = ran(&s, 0, u, AttemptStatus::Ok, 100.0);
        if s.finish(0, 0, u, Some(&r)).is_due() {
            s.anchor_over(0, 0);
            s.anchor_over(0, 1);
        }
        rest.push(u);
    }
    assert_eq!(rest.len(), 7, "{rest:?}");
    assert!(rest.contains(&w) && rest.contains(&b2));
    assert_eq!(s.buckets_ready(0, &[0, 1]).len(), 1);
    assert!(s.buckets_ready(0, &[0, 1]).is_empty());
    // The same size again: every run finished in this launch, none is
    // queued twice (the ledger's keys are not even needed).
    assert_eq!(
        s.queue_bucket_step(
            0,
            &[0, 1],
            BucketStep::Confirm { winner: 2, runs: 2 },
            &HashSet::new()
        ),
        0
    );
    assert_eq!(s.next(0, 0, Instant::now()).0, Next::Done);
}

/// A final round that ends across the minimum grows: once its runs are
/// measured the bucket is ready again, and a larger size queues only the
/// repeats it adds, interleaved as before; the grown round's runs hold
/// the bucket back in turn.
#[test]
fn a_grown_final_round_queues_only_the_runs_it_adds() {
    let mut s = scheduler("", true, false);
    s.seed(&empty_scan());
    drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert_eq!(s.buckets_ready(0, &[0, 1]).len(), 1);
    assert_eq!(
        s.queue_bucket_step(
            0,
            &[0, 1],
            BucketStep::Confirm { winner: 2, runs: 2 },
            &HashSet::new()
        ),
        8
    );
    // Not ready while its runs are queued or running.
    assert!(s.buckets_ready(0, &[0, 1]).is_empty());
    let mut first = Vec::new();
    while let (Next::Run(u, _), _) = s.next(0, 0, Instant::now()) {
        let r = ran(&s, 0, u, AttemptStatus::Ok, 100.0);
        if s.finish(0, 0, u, Some(&r)).is_due() {
            s.anchor_over(0, u.cell);
        }
        if first.len() < 7 {
            assert!(s.buckets_ready(0, &[u.cell]).is_empty(), "{u:?}");
        }
        first.push(u);
    }
    assert_eq!(first.len(), 8);
    assert_eq!(s.buckets_ready(0, &[0, 1]).len(), 1);
    s.take_events();
    // Grown from 2 to 3 runs a side: repeat 2 of both sides at both cells.
    assert_eq!(
        s.queue_bucket_step(
            0,
            &[0, 1],
            BucketStep::Confirm { winner: 2, runs: 3 },
            &HashSet::new()
        ),
        4
    );
    assert!(matches!(
        s.take_events()[..],
        [LaunchEvent::ConfirmationQueued { trials: 4, .. }]
    ));
    assert!(s.buckets_ready(0, &[0, 1]).is_empty());
    let mut added = Vec::new();
    while let (Next::Run(u, _), _) = s.next(0, 0, Instant::now()) {
        let r = ran(&s, 0, u, AttemptStatus::Ok, 100.0);
        if s.finish(0, 0, u, Some(&r)).is_due() {
            s.anchor_over(0, u.cell);
        }
        added.push((u.kind, u.cell, u.repeat, u.pos));
    }
    assert_eq!(
        added,
        vec![
            (Kind::Confirm, 0, 2, 0),
            (Kind::Confirm, 0, 2, 3),
            (Kind::Confirm, 1, 2, 0),
            (Kind::Confirm, 1, 2, 3)
        ]
    );
    assert_eq!(s.buckets_ready(0, &[0, 1]).len(), 1);
    assert_eq!(
        s.queue_bucket_step(
            0,
            &[0, 1],
            BucketStep::Confirm { winner: 2, runs: 3 },
            &HashSet::new()
        ),
        0
    );
    assert_eq!(s.next(0, 0, Instant::now()).0, Next::Done);
}

/// Finish `unit` on `host` of class 0 as measured (a due anchor is clean).
fn measure(s: &mut Scheduler<'_>, host: usize, unit: Unit) {
    let r = ran(s, 0, unit, AttemptStatus::Ok, 100.0);
    if s.finish(0, host, unit, Some(&r)).is_due() {
        s.anchor_over(0, unit.cell);
    }
}

/// A racing round of config 2 against the baseline, `race(3)`: repeat 2
/// of both at the two cells of the one bucket (racing up to 6 runs),
/// queued after the sweep; with the bucket's key and cells.
fn racing_round_queued() -> (Scheduler<'static>, String, Vec<u32>) {
    let study = STUDY.replace("warmup: 0,", "warmup: 0, max_repeats: 6,");
    let mut s = scheduler_of(&study, "", true, false);
    s.seed(&empty_scan());
    drain(&mut s, 0, 0, AttemptStatus::Ok);
    let ready = s.buckets_ready(0, &[0, 1]);
    assert_eq!(ready.len(), 1);
    let (key, members) = ready[0].clone();
    assert_eq!(
        s.queue_bucket_step(0, &members, race(3), &HashSet::new()),
        4
    );
    s.take_events();
    (s, key, members)
}

/// Config 2 raced against the baseline to `runs`.
fn race(runs: u32) -> BucketStep {
    BucketStep::Race {
        configs: vec![2],
        runs,
    }
}

/// Pipelining: while a racing round's slowest runs are out and the class
/// has a free slot, the race is looked at again and its next runs queued
/// (never one that is queued, running or measured); a confirmation asked
/// on a partial round is set aside; the bucket's decision is asked once
/// the round is whole, and a class with a look in progress never ends.
#[test]
fn a_race_queues_its_next_runs_while_its_slowest_are_out() {
    let (mut s, key, members) = racing_round_queued();
    // Both slots busy, two queued: nothing free.
    let (u1, u2) = (take(&mut s, 0, 0), take(&mut s, 0, 1));
    measure(&mut s, 0, u1);
    assert_eq!(s.race_more_ready(0, u1.cell), None);
    let u3 = take(&mut s, 0, 0);
    measure(&mut s, 1, u2);
    let u4 = take(&mut s, 0, 1);
    measure(&mut s, 0, u3);
    // Host x is free, u4 is out: a look, with the slot u4 holds.
    assert_eq!(
        s.race_more_ready(0, u3.cell),
        Some((key.clone(), members.clone(), 2))
    );
    // One look at a time.
    assert_eq!(s.race_more_ready(0, u3.cell), None);
    // The same round asked again: nothing is queued twice.
    assert!(
        s.queue_more_race(0, &members, race(3), &HashSet::new())
            .is_empty()
    );
    assert!(s.take_events().is_empty());
    // A round further: repeat 3, while u4 is still out.
    assert!(s.race_more_ready(0, u3.cell).is_some());
    assert!(
        s.queue_more_race(0, &members, race(4), &HashSet::new())
            .is_empty()
    );
    assert_eq!(
        s.take_events(),
        vec![LaunchEvent::RaceQueued {
            bucket: s.setup().plan.bucket_of_cell(0).label.clone(),
            class: "hc-a".to_string(),
            trials: 4,
            configs: 1,
            runs: 4,
            out: 1,
        }]
    );
    // Host x runs them one by one while u4 is still out on host y.
    let mut added = Vec::new();
    for _ in 0..4 {
        let u = take(&mut s, 0, 0);
        assert_eq!((u.kind, u.repeat), (Kind::Sweep, 3));
        measure(&mut s, 0, u);
        added.push(u);
    }
    assert_eq!(s.next(0, 0, Instant::now()).0, Next::Wait);
    // A look that asks for the final round while a run is out: set aside.
    assert!(s.race_more_ready(0, added[3].cell).is_some());
    let confirm = BucketStep::Confirm { winner: 2, runs: 2 };
    assert!(
        s.queue_more_race(0, &members, confirm.clone(), &HashSet::new())
            .is_empty()
    );
    assert!(s.take_events().is_empty());
    // A look in progress when the round ends: the class waits for it
    // (not done), and its end asks the bucket's decision.
    assert!(s.race_more_ready(0, added[3].cell).is_some());
    measure(&mut s, 1, u4);
    assert!(s.buckets_ready(0, &members).is_empty());
    assert_eq!(s.race_more_ready(0, u4.cell), None);
    assert_eq!(s.next(0, 0, Instant::now()).0, Next::Wait);
    assert_eq!(
        s.queue_more_race(0, &members, confirm.clone(), &HashSet::new()),
        vec![(key, members.clone())]
    );
    assert_eq!(
        s.queue_bucket_step(0, &members, confirm, &HashSet::new()),
        8
    );
}

/// A launch that stops (Ctrl-C, the budget) queues nothing more from a
/// look at a race that was under way, and starts no new look.
#[test]
fn a_stopping_launch_queues_nothing_from_a_look_at_a_race() {
    let (mut s, _, members) = racing_round_queued();
    let units: Vec<Unit> = (0..3)
        .map(|i| {
            let u = take(&mut s, 0, i % 2);
            measure(&mut s, i % 2, u);
            u
        })
        .collect();
    let last = take(&mut s, 0, 1);
    assert!(s.race_more_ready(0, units[2].cell).is_some());
    s.stopping();
    assert!(
        s.queue_more_race(0, &members, race(5), &HashSet::new())
            .is_empty()
    );
    assert!(s.take_events().is_empty());
    measure(&mut s, 1, last);
    assert_eq!(s.race_more_ready(0, last.cell), None);
}

#[test]
fn a_shard_never_confirms() {
    let mut s = scheduler("", false, true);
    s.seed(&empty_scan());
    drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert!(s.buckets_ready(0, &[0, 1]).is_empty());
}

#[test]
fn a_class_done_while_another_runs_says_so_once_and_the_last_says_nothing() {
    let mut s = scheduler("", false, true);
    s.seed(&empty_scan());
    s.take_events();
    let class_done = |events: Vec<LaunchEvent>| -> Vec<LaunchEvent> {
        events
            .into_iter()
            .filter(|e| matches!(e, LaunchEvent::ClassDone { .. }))
            .collect()
    };
    drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert_eq!(s.next(0, 0, Instant::now()).0, Next::Done);
    assert_eq!(s.next(0, 1, Instant::now()).0, Next::Done);
    assert_eq!(
        class_done(s.take_events()),
        vec![LaunchEvent::ClassDone {
            class: "hc-a".to_string(),
            hosts: vec!["x".to_string(), "y".to_string()],
            others: 1,
        }]
    );
    drain(&mut s, 1, 2, AttemptStatus::Ok);
    assert_eq!(s.next(1, 2, Instant::now()).0, Next::Done);
    assert!(
        class_done(s.take_events()).is_empty(),
        "the last class to finish ends the launch: nothing to say"
    );
}

#[test]
fn an_anchor_is_due_every_anchor_every_candidates_of_a_cell_on_a_host() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    let mut due = Vec::new();
    for _ in 0..6 {
        let u = take(&mut s, 0, 0);
        let r = ran(&s, 0, u, AttemptStatus::Ok, 100.0);
        due.push((u.cell, u.pos, s.finish(0, 0, u, Some(&r)).is_due()));
    }
    // Cell 0: baseline, then candidates 1 and 2 (the 2nd candidate is due),
    // baseline repeat 1, candidate 1 of repeat 1...
    assert_eq!(
        due,
        vec![
            (0, 0, false),
            (0, 1, false),
            (0, 2, true),
            (0, 0, false),
            (0, 1, false),
            (0, 2, true)
        ]
    );
}

/// A scheduler whose host 0 measured cell 0 with baseline readings
/// `values` and candidates after each (so the anchor is due).
fn measured(values: &[f64]) -> (Scheduler<'static>, Vec<Unit>) {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    let mut done = Vec::new();
    let mut base = values.iter();
    for _ in 0..3 {
        let u = take(&mut s, 0, 0);
        let v = if u.pos == 0 {
            *base.next().unwrap_or(&100.0)
        } else {
            90.0
        };
        let r = ran(&s, 0, u, AttemptStatus::Ok, v);
        s.finish(0, 0, u, Some(&r));
        done.push(u);
    }
    s.take_events();
    (s, done)
}

/// Host 0 drifts 30% at cell 0: a suspect anchor, confirmed by its burst.
fn drifted(s: &mut Scheduler<'_>) -> (Vec<Void>, Cooldown) {
    assert_eq!(s.first_anchor(0, 0, reading(130.0)), AnchorStep::Burst);
    match s.burst(0, 0, &[reading(130.0), reading(131.0), reading(129.0)]) {
        Burst::Hot {
            voids, cooldown, ..
        } => (voids, cooldown),
        other => panic!("a 30% slowdown is a drift: {other:?}"),
    }
}

fn reading(value: f64) -> Reading {
    Reading {
        value,
        noise: Some(0.01),
    }
}

#[test]
fn an_anchor_within_the_noise_is_clean_and_says_nothing() {
    let (mut s, _) = measured(&[100.0]);
    assert_eq!(s.first_anchor(0, 0, reading(102.0)), AnchorStep::Done);
    assert!(s.take_events().is_empty());
    assert!(!s.is_cooling(0));
}

#[test]
fn a_slowdown_confirmed_by_a_burst_voids_cools_and_settles() {
    let (mut s, measured_units) = measured(&[100.0]);
    assert_eq!(s.first_anchor(0, 0, reading(130.0)), AnchorStep::Burst);
    let burst = [reading(130.0), reading(128.0), reading(131.0)];
    let Burst::Hot {
        voids,
        mut cooldown,
        ..
    } = s.burst(0, 0, &burst)
    else {
        panic!("a 30% slowdown is a drift");
    };
    // Everything host 0 measured since its last clean anchor runs again.
    let voided: Vec<Unit> = voids.iter().map(|v| v.unit).collect();
    assert_eq!(voided, measured_units);
    assert!(s.is_cooling(0));
    assert_eq!(s.next(0, 0, Instant::now()).0, Next::Wait);
    assert!(matches!(s.take_events()[0], LaunchEvent::Drifted { .. }));
    // Only the voided readings backed the reference: the host is stable
    // again when two anchors in a row agree within cool_eps.
    cooldown.start_try();
    assert!(!cooldown.take(120.0));
    cooldown.start_try();
    assert!(cooldown.take(120.5));
    let dropped = s.cooled(
        0,
        0,
        0,
        &voids,
        &cooldown,
        Some(reading(120.5)),
        false,
        Duration::ZERO,
    );
    assert_eq!(dropped, None);
    assert!(!s.is_cooling(0));
    let events = s.take_events();
    assert!(events.contains(&LaunchEvent::Remeasure { count: 3 }));
    assert!(matches!(
        events.last(),
        Some(LaunchEvent::CooledDown { tries: 2, .. })
    ));
    // The voided units are handed out again.
    let again: Vec<Unit> = (0..3).map(|_| take(&mut s, 0, 0)).collect();
    for u in &measured_units {
        assert!(again.contains(u), "{u:?} runs again");
    }
}

#[test]
fn a_single_wild_anchor_is_cleared_by_its_burst() {
    let (mut s, _) = measured(&[100.0]);
    assert_eq!(s.first_anchor(0, 0, reading(130.0)), AnchorStep::Burst);
    let burst = [reading(130.0), reading(100.5), reading(99.0)];
    assert!(matches!(s.burst(0, 0, &burst), Burst::Clean));
    assert!(!s.is_cooling(0));
    assert!(s.take_events().is_empty());
}

#[test]
fn a_host_that_does_not_settle_drops_the_cell_and_its_classmate_carries_on() {
    let (mut s, _) = measured(&[100.0]);
    let (voids, mut cooldown) = drifted(&mut s);
    cooldown.start_try();
    assert!(!cooldown.take(125.0));
    let why = s.cooled(
        0,
        0,
        0,
        &voids,
        &cooldown,
        None,
        false,
        Duration::from_secs(9),
    );
    let why = why.expect("the cell is dropped");
    assert_eq!(why.tries, 1);
    assert!(
        s.take_events()
            .iter()
            .any(|e| matches!(e, LaunchEvent::CellDropped { .. }))
    );
    // Host 0 hands cell 0's units on; host 1 (same class) runs them.
    let from_y = take(&mut s, 0, 1);
    assert_eq!(from_y.cell, 0);
    // Once host 1 drops it too, what is left of the cell is skipped.
    s.first_anchor(1, 0, reading(100.0));
    let stopped = s.cooled(0, 1, 0, &[], &cooldown, None, false, Duration::ZERO);
    assert!(stopped.is_some());
    s.take_events();
    let rest = drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert!(rest.iter().all(|u| u.cell == 1), "{rest:?}");
    assert!(
        skipped(&s.take_events())
            .iter()
            .any(|(_, c)| *c == SkipCause::CellDroppedEverywhere)
    );
}

#[test]
fn a_stopping_launch_neither_drops_cells_nor_announces_lost_baselines() {
    let (mut s, _) = measured(&[100.0]);
    let (voids, cooldown) = drifted(&mut s);
    assert_eq!(
        s.cooled(0, 0, 0, &voids, &cooldown, None, true, Duration::ZERO),
        None
    );
    assert!(
        !s.take_events()
            .iter()
            .any(|e| matches!(e, LaunchEvent::CellDropped { .. }))
    );
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    s.take_events();
    let base = take(&mut s, 0, 0);
    s.stopping();
    s.finish(0, 0, base, None);
    assert!(skipped(&s.take_events()).is_empty());
}

#[test]
fn a_class_whose_hosts_stay_down_waits_then_is_given_up() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    s.take_events();
    let t0 = Instant::now();
    let retry = Duration::from_secs(5);
    // One of two hosts down: wait for it, the other works.
    assert_eq!(
        s.host_down(0, 0, t0, retry, t0),
        HostGate::Wait(Duration::from_secs(1))
    );
    assert!(s.take_events().is_empty());
    // Both down: announced once, then given up after --host-timeout.
    assert!(matches!(
        s.host_down(1, 0, t0, retry, t0),
        HostGate::Wait(_)
    ));
    assert!(matches!(
        s.take_events()[..],
        [LaunchEvent::ClassAllDown { .. }]
    ));
    let later = t0 + Duration::from_secs(601);
    assert_eq!(s.host_down(1, 0, t0, retry, later), HostGate::Leave);
    assert!(matches!(
        s.take_events()[..],
        [LaunchEvent::ClassAbandoned {
            left: 2,
            cause: Abandon::AllDown { .. },
            ..
        }]
    ));
    assert!(s.host_left(0, 0));
    // The other class is untouched.
    assert!(!s.host_left(2, 1));
}

#[test]
fn a_rejoining_host_is_announced_once() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    s.take_events();
    let t0 = Instant::now();
    s.host_down(0, 0, t0, Duration::from_secs(1), t0);
    assert!(s.host_up(0, 0, false));
    assert!(!s.host_up(0, 0, false));
    assert_eq!(
        s.take_events(),
        vec![LaunchEvent::HostRejoined {
            host: "x".to_string()
        }]
    );
}

#[test]
fn a_unit_another_launcher_holds_comes_back_when_due() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    let t0 = Instant::now();
    let u = take(&mut s, 1, 2);
    s.defer(1, 2, u, t0 + Duration::from_secs(2));
    // Cell 1's baseline first, then a wait until the deferred one is due.
    assert_eq!(take(&mut s, 1, 2), Unit::sweep(1, 0, 0));
    assert_eq!(s.next(1, 2, t0).0, Next::Wait);
    match s.next(1, 2, t0 + Duration::from_secs(3)).0 {
        Next::Run(again, _) => assert_eq!(again, u),
        other => panic!("the deferred unit is due: {other:?}"),
    }
}

#[test]
fn the_same_results_give_the_same_schedule() {
    let run = || {
        let mut s = scheduler("", true, false);
        s.seed(&empty_scan());
        let mut order = Vec::new();
        for host in [0usize, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1] {
            if let (Next::Run(u, warm), _) = s.next(0, host, Instant::now()) {
                let status = if u.pos == 2 {
                    AttemptStatus::Failed
                } else {
                    AttemptStatus::Ok
                };
                let r = ran(&s, 0, u, status, 100.0);
                s.finish(0, host, u, Some(&r));
                order.push((host, u, warm));
            }
        }
        (order, s.take_events())
    };
    assert_eq!(run(), run());
}

#[test]
fn a_classmate_waits_while_a_host_anchors_and_then_runs_what_it_voided() {
    let (mut s, measured_units) = measured(&[100.0]);
    // measured() left host 0 due for an anchor at cell 0 (finish said so).
    // Host 1 runs everything else of the class meanwhile.
    let rest = drain(&mut s, 0, 1, AttemptStatus::Ok);
    assert!(!rest.is_empty());
    // Nothing left to hand out, but host 0's anchor may void: host 1 waits
    // instead of leaving, and the bucket of cell 0 is not confirmed yet.
    assert_eq!(s.next(0, 1, Instant::now()).0, Next::Wait);
    assert!(s.buckets_ready(0, &[0]).is_empty());
    let (voids, cooldown) = drifted(&mut s);
    s.cooled(0, 0, 0, &voids, &cooldown, None, false, Duration::ZERO);
    s.anchor_over(0, 0);
    // Host 0 dropped the cell: host 1 takes its voided units.
    let again = drain(&mut s, 0, 1, AttemptStatus::Ok);
    for u in &measured_units {
        assert!(again.contains(u), "{u:?} runs again on host 1");
    }
    assert_eq!(s.buckets_ready(0, &[0]).len(), 1);
}

#[test]
fn a_cell_dropped_on_every_host_still_in_the_launch_is_skipped() {
    let (mut s, _) = measured(&[100.0]);
    let (voids, cooldown) = drifted(&mut s);
    // Host 1 changed class and left: host 0 alone holds the class.
    s.host_changed(1, vec![], "a".to_string(), "b".to_string());
    s.cooled(0, 0, 0, &voids, &cooldown, None, false, Duration::ZERO);
    s.anchor_over(0, 0);
    s.take_events();
    let rest = drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert!(rest.iter().all(|u| u.cell == 1), "{rest:?}");
    assert!(
        skipped(&s.take_events())
            .iter()
            .any(|(_, c)| *c == SkipCause::CellDroppedEverywhere)
    );
    assert_eq!(s.next(0, 0, Instant::now()).0, Next::Done);
}

#[test]
fn the_watchdog_ends_a_class_that_can_never_run_what_it_has_left() {
    let mut s = scheduler("", false, false);
    s.seed(&empty_scan());
    s.take_events();
    // A state nothing should reach: host 0 dropped both cells, and host 1,
    // the only one that could run them, cools down with no anchor
    // running. Waiting would never end.
    s.st.dropped.insert((0, 0));
    s.st.dropped.insert((0, 1));
    s.st.cooling.insert(1);
    let (next, _) = s.next(0, 0, Instant::now());
    assert_eq!(next, Next::Done);
    let events = s.take_events();
    assert!(
        matches!(
            &events[..],
            [LaunchEvent::Stalled { trials: 2, searches: 0, cells, .. }] if cells.len() == 2
        ),
        "{events:?}"
    );
    assert!(s.host_left(1, 0));
    // Class 1 goes on.
    assert!(matches!(s.next(1, 2, Instant::now()).0, Next::Run(..)));
}

/// A small deterministic generator for the simulation below.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Worker {
    Idle,
    Running(Unit),
    /// Finished a sweep unit whose anchor is due at this cell.
    Anchoring(u32),
    Gone,
}

/// Play a launch round with random outcomes: results ok, failed, lost,
/// lost with the host or unrecorded; anchors clean, suspect, drifted,
/// settled or dropped; hosts going down and coming back; confirmation
/// rounds with or without a winner. Returns the steps taken and the
/// events, or panics if the round does not end.
fn simulate(seed: u64, one_bucket: bool) -> (usize, Vec<LaunchEvent>) {
    let mut rng = Rng(seed);
    let mut s = scheduler("", one_bucket, false);
    s.seed(&empty_scan());
    let classes = [0usize, 0, 1];
    let mut workers = [Worker::Idle; 3];
    let mut down_until: [Option<usize>; 3] = [None; 3];
    let t0 = Instant::now();
    let mut events = s.take_events();
    // As the decision would: one winner per bucket and class (or none),
    // its round of 2 runs a side growing now and then, up to 4, when the
    // bucket is ready again after it.
    let mut rounds: HashMap<(usize, String), (Option<u64>, u32)> = HashMap::new();
    let mut confirm =
        |s: &mut Scheduler<'_>, rng: &mut Rng, class: usize, ready: Vec<(String, Vec<u32>)>| {
            for (bucket, members) in ready {
                let (winner, runs) = match rounds.get(&(class, bucket.clone())) {
                    None => (rng.chance(70).then(|| 1 + rng.below(2)), 2),
                    Some(&(w, r)) => (w, if rng.chance(50) { (r + 1).min(4) } else { r }),
                };
                rounds.insert((class, bucket), (winner, runs));
                let step = match winner {
                    Some(winner) => BucketStep::Confirm { winner, runs },
                    None => BucketStep::Settled,
                };
                s.queue_bucket_step(class, &members, step, &HashSet::new());
            }
        };
    for step in 0..20_000 {
        if workers.iter().all(|w| *w == Worker::Gone) {
            events.extend(s.take_events());
            return (step, events);
        }
        let now = t0 + Duration::from_millis(step as u64);
        let h = rng.below(3) as usize;
        let class = classes[h];
        match workers[h] {
            Worker::Gone => {}
            Worker::Idle => {
                if let Some(until) = down_until[h] {
                    if step >= until {
                        down_until[h] = None;
                        s.host_up(h, class, true);
                    } else {
                        if s.host_down(h, class, now, Duration::from_millis(5), now)
                            == HostGate::Leave
                        {
                            workers[h] = Worker::Gone;
                            s.worker_left(h);
                        }
                        continue;
                    }
                }
                if s.host_left(h, class) {
                    workers[h] = Worker::Gone;
                    s.worker_left(h);
                    continue;
                }
                let (next, touched) = s.next(class, h, now);
                let ready = s.buckets_ready(class, &touched);
                confirm(&mut s, &mut rng, class, ready);
                match next {
                    Next::Run(u, _) => workers[h] = Worker::Running(u),
                    Next::Wait => {}
                    // As the driver: skipping may have completed a bucket
                    // whose round was just queued; look again first.
                    Next::Done if !touched.is_empty() => {}
                    Next::Done => {
                        // A worker leaves only when nothing of its class
                        // runs or may come back to the queue.
                        let cs = &s.st.classes[class];
                        assert!(
                            s.host_left(h, class)
                                || (cs.in_flight == 0
                                    && cs.anchoring.is_empty()
                                    && cs.confirming == 0),
                            "seed {seed}: host {h} left class {class} with work under way"
                        );
                        workers[h] = Worker::Gone;
                        s.worker_left(h);
                    }
                }
            }
            Worker::Running(u) => {
                let roll = rng.below(100);
                let mut r = ran(
                    &s,
                    class,
                    u,
                    AttemptStatus::Ok,
                    100.0 * (1.0 + 0.02 * rng.below(5) as f64),
                );
                let ran = match roll {
                    0..=74 => Some(r),
                    75..=84 => {
                        r.status = AttemptStatus::Failed;
                        Some(r)
                    }
                    85..=89 => {
                        r.status = AttemptStatus::Lost;
                        Some(r)
                    }
                    90..=95 => {
                        r.status = AttemptStatus::Lost;
                        r.host_lost = true;
                        down_until[h] = Some(step + 1 + rng.below(50) as usize);
                        Some(r)
                    }
                    _ => None,
                };
                let due = s.finish(class, h, u, ran.as_ref()).is_due();
                let ready = match u.kind {
                    Kind::Sweep | Kind::Confirm => s.buckets_ready(class, &[u.cell]),
                    _ => Vec::new(),
                };
                confirm(&mut s, &mut rng, class, ready);
                workers[h] = if due {
                    Worker::Anchoring(u.cell)
                } else {
                    Worker::Idle
                };
            }
            Worker::Anchoring(cell) => {
                s.anchor_started();
                let hot = rng.chance(30);
                let first = reading(if hot { 140.0 } else { 101.0 });
                if s.first_anchor(h, cell, first) == AnchorStep::Burst {
                    let second = reading(if rng.chance(70) { 140.0 } else { 100.0 });
                    match s.burst(h, cell, &[first, second, second]) {
                        Burst::Clean => {}
                        Burst::WasSlow { voids, .. } => s.requeue(class, cell, &voids, None),
                        Burst::Hot {
                            voids,
                            mut cooldown,
                            ..
                        } => {
                            cooldown.start_try();
                            let settles = rng.chance(50);
                            let v = if settles { 100.0 } else { 170.0 };
                            let settled = cooldown.take(v) && settles;
                            let with = settled.then(|| reading(v));
                            s.cooled(
                                class,
                                h,
                                cell,
                                &voids,
                                &cooldown,
                                with,
                                false,
                                Duration::ZERO,
                            );
                        }
                    }
                }
                s.anchor_over(class, cell);
                let ready = s.buckets_ready(class, &[cell]);
                confirm(&mut s, &mut rng, class, ready);
                workers[h] = Worker::Idle;
            }
        }
        events.extend(s.take_events());
    }
    let classes: Vec<String> = s
        .st
        .classes
        .iter()
        .enumerate()
        .map(|(i, cs)| {
            format!(
                "class {i}: ready {:?}, pending {}, confirming {}, in flight {}, anchoring {:?}, deferred {:?}, outstanding {:?}",
                cs.ready, cs.pending, cs.confirming, cs.in_flight, cs.anchoring, cs.deferred, cs.outstanding
            )
        })
        .collect();
    panic!(
        "seed {seed}: the round did not end: {workers:?}; {}; cooling {:?}, dropped {:?}, down {:?}, retired {:?}, abandoned {:?}, down_until {down_until:?}",
        classes.join("; "),
        s.st.cooling,
        s.st.dropped,
        s.st.down,
        s.st.retired,
        s.st.abandoned
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    #[test]
    fn every_launch_round_ends_without_its_watchdog(seed in proptest::prelude::any::<u64>(), one_bucket in proptest::prelude::any::<bool>()) {
        let (_, events) = simulate(seed, one_bucket);
        let stalled: Vec<&LaunchEvent> = events
            .iter()
            .filter(|e| matches!(e, LaunchEvent::Stalled { .. }))
            .collect();
        proptest::prop_assert!(stalled.is_empty(), "seed {}: {:?}", seed, stalled);
    }
}

/// A run of a final round lost in this launch (its host still answering)
/// is queued again by the bucket's next step, at most `MAX_LOST_REQUEUES`
/// times; then the round waits for the next launch.
#[test]
fn a_lost_round_run_is_queued_again_a_bounded_number_of_times() {
    let mut s = scheduler("", true, false);
    s.seed(&empty_scan());
    drain(&mut s, 0, 0, AttemptStatus::Ok);
    assert_eq!(s.buckets_ready(0, &[0, 1]).len(), 1);
    assert_eq!(
        s.queue_bucket_step(
            0,
            &[0, 1],
            BucketStep::Confirm { winner: 2, runs: 1 },
            &HashSet::new()
        ),
        4
    );
    let mut lost_one = None;
    let mut requeued = 0;
    loop {
        while let (Next::Run(u, _), _) = s.next(0, 0, Instant::now()) {
            // The winner's run at cell 0 is lost every time.
            let status = if (u.cell, u.pos) == (0, 3) {
                lost_one = Some(u);
                AttemptStatus::Lost
            } else {
                AttemptStatus::Ok
            };
            let r = ran(&s, 0, u, status, 100.0);
            if s.finish(0, 0, u, Some(&r)).is_due() {
                s.anchor_over(0, u.cell);
            }
        }
        assert_eq!(s.buckets_ready(0, &[0, 1]).len(), 1);
        match s.queue_bucket_step(
            0,
            &[0, 1],
            BucketStep::Confirm { winner: 2, runs: 1 },
            &HashSet::new(),
        ) {
            0 => break,
            1 => requeued += 1,
            n => panic!("{n} queued"),
        }
        assert!(requeued <= MAX_LOST_REQUEUES, "queued again and again");
    }
    assert!(lost_one.is_some());
    assert_eq!(requeued, MAX_LOST_REQUEUES);
    assert_eq!(s.next(0, 0, Instant::now()).0, Next::Done);
}
