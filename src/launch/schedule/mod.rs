//! The scheduler: which trial a free slot runs next, and what follows from
//! how it ended. Synchronous and without I/O: it reads the plan and what
//! the ledger held at the start, is told what ran, and answers with units
//! of work and typed [`LaunchEvent`]s (`take_events`). The launch driver
//! (`run_study.rs`) runs the units and writes the ledger.
//!
//! Order within a cell: the baseline's first repeat runs first (every
//! candidate of the cell is compared with it, so a failing baseline stops
//! the cell); then repeats go round-robin across configs (repeat 0 of every
//! config, then repeat 1...), so drift affects all configs alike. A config
//! that fails is not repeated.
//!
//! Drift (`anchor.rs`, statistics in `drift.rs`): every `anchor_every`
//! candidate trials of a cell, a host re-measures the baseline (an anchor),
//! judged against the median of that host's clean baseline readings of the
//! cell with thresholds from their own noise; a suspect anchor is confirmed
//! by a burst of three. A drift voids the host's measurements since its
//! last clean anchor (they run again), and the host cools down until an
//! anchor settles; a host that does not settle drops the cell.
//!
//! Confirmation: once every cell of a bucket is measured on a class, the
//! bucket's draft winner and the baseline run a final interleaved round
//! (baseline, winner, baseline, winner...) that decides the verdict. The
//! drift watch goes on through it: each of the round's baseline runs is a
//! check (the first anchor of one), so a host that heats up during the
//! round is caught, and the round's runs since its last clean check run
//! again after the cool-down.
//!
//! Adaptive studies (`search.rs`): each (class, cell) runs its search's
//! rungs first; when every cell of a bucket is searched, the union of their
//! finalists is measured as ordinary sweep trials.

mod anchor;
pub mod drift;
mod rounds;
mod search;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use anchor::{AnchorStep, Burst, Check, Cooldown, Void, VoidReason};
use drift::Reading;
use search::CellSearch;

use super::events::{Abandon, LaunchEvent, SkipCause};
use super::prior::Prior;
use crate::ledger::Scan;
use crate::ledger::records::{AttemptRecord, AttemptStatus};
use crate::plan::Plan;
use crate::space;
use crate::spec::Study;
use crate::trial::{Role, RoleKind, TrialIdentity};

/// Times a trial is queued again after its host dropped, in one launch; a
/// trial that was running every time a host went down is left for later.
pub const MAX_HOST_LOSS_REQUEUES: u32 = 3;

/// How many times a bucket's next step (racing, the final round) queues
/// again a run that was lost in this launch (its host still answering).
pub const MAX_LOST_REQUEUES: u32 = 2;

/// What a unit measures. Confirmation units sort first: a bucket's final
/// round runs as soon as it is ready, while the host is in the same state;
/// an adaptive search's screening runs last (its objective stages first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Confirm,
    Sweep,
    Rung,
}

impl Kind {
    /// Whether a unit of this kind, until it is finished, holds its
    /// bucket's next step (racing, the final round or its growth) back.
    pub fn holds_bucket(self) -> bool {
        matches!(self, Kind::Sweep | Kind::Confirm)
    }
}

/// A unit of work: one trial of a cell, ordered so that a cell's baseline
/// comes first and repeats interleave across configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unit {
    pub kind: Kind,
    pub cell: u32,
    pub repeat: u32,
    /// Sweep: 0 for the baseline, i + 1 for the cell's i-th candidate (in
    /// an adaptive study: config index + 1 for a finalist).
    /// Confirm: 0 for the baseline, config index + 1 for the winner.
    /// Rung: 0 for the baseline, config index + 1 for a search job.
    pub pos: u64,
    /// Rung: index of its budget in `Setup::budgets`; 0 otherwise.
    pub budget: u32,
}

impl Unit {
    pub fn sweep(cell: u32, repeat: u32, pos: u64) -> Unit {
        Unit {
            kind: Kind::Sweep,
            cell,
            repeat,
            pos,
            budget: 0,
        }
    }

    pub fn rung(cell: u32, budget: u32, pos: u64) -> Unit {
        Unit {
            kind: Kind::Rung,
            cell,
            repeat: 0,
            pos,
            budget,
        }
    }

    pub fn confirm(cell: u32, repeat: u32, pos: u64) -> Unit {
        Unit {
            kind: Kind::Confirm,
            cell,
            repeat,
            pos,
            budget: 0,
        }
    }

    fn is_first_baseline(&self) -> bool {
        self.kind == Kind::Sweep && self.repeat == 0 && self.pos == 0
    }
}

/// What one run produced, for the scheduler.
#[derive(Debug, Clone)]
pub struct Ran {
    pub status: AttemptStatus,
    pub key: String,
    pub attempt_id: String,
    /// Median of the objective's samples, and its standard error.
    pub value: Option<Reading>,
    /// The host dropped while it ran.
    pub host_lost: bool,
    /// What was recorded (rungs are gated against their baseline's).
    pub record: Option<Arc<AttemptRecord>>,
}

/// What a slot does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Run this unit; `true`: its first run on this host (warm up).
    Run(Unit, bool),
    /// Nothing ready now; something may still come.
    Wait,
    Done,
}

/// What a worker does about its host's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostGate {
    Go,
    Wait(Duration),
    Leave,
}

/// A plan record to write: (class, cell, configs planned there).
pub type PlanWrite = (usize, u32, Option<u64>);

/// What a bucket's decision asks of the launch once its sweep is measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketStep {
    /// Racing: more sweep runs of the baseline and these configs, up to
    /// `runs` at every cell.
    Race { configs: Vec<u64>, runs: u32 },
    /// The final interleaved round: the baseline and `winner`, `runs` a
    /// side at every cell.
    Confirm { winner: u64, runs: u32 },
    /// Nothing more to measure.
    Settled,
}

/// Everything the scheduler reads and never changes.
pub struct Setup<'a> {
    pub study: &'a Study,
    pub study_id: &'a str,
    pub spec_hash: String,
    pub plan: &'a Plan,
    /// Host class id of each planned class.
    pub class_ids: Vec<String>,
    /// Planned class of each host.
    pub host_class: Vec<usize>,
    pub host_names: Vec<String>,
    /// Worker slots of each host.
    pub slots: Vec<u32>,
    /// Budgets rung trials run at, ascending, as trials receive them
    /// (`[None]` without a `fidelity:` section).
    pub budgets: Vec<Option<f64>>,
    /// The budget of every other trial: `max_budget`, or `None`.
    pub objective_budget: Option<f64>,
    /// The gate's numeric tolerance (rungs are gated as they finish).
    pub tolerance: Option<crate::decide::gate::ToleranceSpec>,
    /// Trial keys with a terminal attempt in the ledger at the start.
    pub done: HashSet<String>,
    /// Terminal attempts of the objective stage's first baseline repeat,
    /// by trial key (an adaptive cell is released after the ledger scan).
    pub first_baselines: HashMap<String, AttemptStatus>,
    /// `--seed-from`.
    pub prior: Option<Arc<Prior>>,
    /// `--no-cooldown`: drift is reported, nothing discarded.
    pub no_cooldown: bool,
    /// `--shard`: no confirmation rounds.
    pub sharded: bool,
    pub host_timeout: Duration,
}

#[derive(Default)]
struct ClassState {
    ready: BinaryHeap<Reverse<Unit>>,
    /// Things that may still add units: cells waiting for their baseline's
    /// first repeat, adaptive searches not over.
    pending: usize,
    /// Confirmation rounds the driver is preparing (reading the draft
    /// winner from the ledger).
    confirming: usize,
    /// Units running now.
    in_flight: usize,
    /// Anchors (and cool-downs) running now, per cell: their host's
    /// voided measurements may come back to the queue.
    anchoring: HashMap<u32, usize>,
    failed_configs: HashSet<(u32, u64)>,
    /// Sweep and confirmation units of a cell not finished yet (queued or
    /// running): its bucket's next step waits for them.
    outstanding: HashMap<u32, u64>,
    /// Cells whose baseline's first repeat has resolved.
    released: HashSet<u32>,
    /// Buckets whose next step was started (their decision asked), or
    /// that are settled.
    confirm_started: HashSet<String>,
    /// Buckets with a racing round queued: a partial look may add runs
    /// while its slowest are still out.
    racing: HashSet<String>,
    /// Buckets whose race is being looked at again on a partial round.
    looking: HashSet<String>,
    /// Units a bucket's step queued that are not finished yet (queued or
    /// running): a later step does not queue them again.
    open: HashSet<Unit>,
    /// Failed sweep runs of the baseline per cell (the ledger's and this
    /// launch's): one is re-run before it is believed; two stop the cell.
    baseline_failures: HashMap<u32, u32>,
    /// Cells whose first baseline run failed and whose re-run (repeat 1)
    /// decides whether the cell goes on.
    retrying: HashSet<u32>,
    /// Cells whose repeat 1 of the baseline ran as that re-run in this
    /// launch (not queued again when the cell is released).
    retried: HashSet<u32>,
    /// Units another launcher holds, with when to look again.
    deferred: Vec<(Instant, Unit)>,
    /// Adaptive studies: the search of each cell, until it is over.
    searches: BTreeMap<u32, CellSearch>,
    /// Adaptive studies: the configs the objective stage measures at each
    /// released cell (the union of the finalists of its bucket's cells).
    finalists: HashMap<u32, Vec<u64>>,
    /// Cells whose objective stage was just released, for a confirmation
    /// check (they may have nothing left to run).
    just_released: Vec<u32>,
}

impl ClassState {
    fn has_work(&self) -> bool {
        !self.ready.is_empty()
            || self.pending > 0
            || self.confirming > 0
            || self.in_flight > 0
            || !self.anchoring.is_empty()
            || !self.deferred.is_empty()
    }

    /// Whether something running may still add units (a trial, an anchor
    /// that may void measurements, a confirmation round being prepared),
    /// or a unit another launcher holds comes back later.
    fn may_change(&self) -> bool {
        self.in_flight > 0
            || !self.anchoring.is_empty()
            || self.confirming > 0
            || !self.deferred.is_empty()
    }

    /// One sweep or confirmation unit of `cell` is no longer outstanding.
    fn unit_done(&mut self, cell: u32) {
        if let Some(n) = self.outstanding.get_mut(&cell) {
            *n = n.saturating_sub(1);
        }
    }
}

#[derive(Default)]
struct State {
    classes: Vec<ClassState>,
    /// (host, cell, config, screening) that warmed up in this launch
    /// (`Setup::warm_key`).
    warmed: HashSet<(usize, u32, u64, bool)>,
    drift: HashMap<(usize, u32), anchor::Drift>,
    /// Hosts cooling down: their other slots wait.
    cooling: HashSet<usize>,
    /// (host, cell) given up.
    dropped: HashSet<(usize, u32)>,
    /// Hosts not answering now, since when.
    down: HashMap<usize, Instant>,
    /// Hosts out of this launch (fingerprint changed).
    retired: HashSet<usize>,
    /// Workers of each host still asking for units.
    workers: Vec<u32>,
    /// Classes whose every host is down: announced, and given up.
    all_down_announced: HashSet<usize>,
    abandoned: HashSet<usize>,
    /// Requeues after host loss, per trial key.
    host_losses: HashMap<String, u32>,
    /// (class, unit) finished or skipped in this launch: a bucket's next
    /// step does not queue them again (a voided one is requeued by
    /// `requeue`; a skipped one, or one lost more than
    /// `MAX_LOST_REQUEUES` times, waits for the next launch).
    finished: HashSet<(usize, Unit)>,
    /// Runs lost (or unrecorded) in this launch, per (class, unit).
    lost_runs: HashMap<(usize, Unit), u32>,
    /// Plan records to write (an adaptive search chose its finalists).
    plan_writes: Vec<PlanWrite>,
    /// The launch is stopping (Ctrl-C): a lost baseline is not announced.
    stopping: bool,
    /// Classes whose end was announced ([`LaunchEvent::ClassDone`]).
    done: HashSet<usize>,
}

/// The scheduler of one launch round.
pub struct Scheduler<'a> {
    s: Setup<'a>,
    st: State,
    out: Vec<LaunchEvent>,
}

impl<'a> Setup<'a> {
    pub fn adaptive(&self) -> bool {
        self.study.strategy.is_adaptive()
    }

    pub fn config_of(&self, unit: Unit) -> u64 {
        match (unit.kind, unit.pos) {
            (_, 0) => self.plan.space.baseline(),
            (Kind::Sweep, p) if !self.adaptive() => {
                self.plan.per_cell[unit.cell as usize][(p - 1) as usize]
            }
            (_, p) => p - 1,
        }
    }

    pub fn role_of(&self, unit: Unit) -> Role {
        match unit.kind {
            Kind::Sweep => Role::Sweep,
            Kind::Confirm => Role::Confirm,
            Kind::Rung => Role::Rung,
        }
    }

    /// The budget a unit's trial receives.
    pub fn budget_of(&self, unit: Unit) -> Option<f64> {
        match unit.kind {
            Kind::Rung => self.budgets.get(unit.budget as usize).copied().flatten(),
            _ => self.objective_budget,
        }
    }

    /// What the warm-up of a unit is shared with: runs of the same config
    /// at the same cell with the same command on the same host (a search's
    /// rungs at every budget share one; the objective stage, which may run
    /// another command, has its own).
    fn warm_key(&self, host: usize, unit: Unit) -> (usize, u32, u64, bool) {
        (
            host,
            unit.cell,
            self.config_of(unit),
            unit.kind == Kind::Rung,
        )
    }

    pub fn key_for(
        &self,
        class: usize,
        cell: u32,
        config: u64,
        repeat: u32,
        role: Role,
        fidelity: Option<f64>,
    ) -> String {
        let config = self.plan.space.config_json(self.study, config);
        let cell = space::cell_json(self.study, &self.plan.cells[cell as usize]);
        TrialIdentity {
            study: self.study_id,
            config: &config,
            cell: &cell,
            fidelity,
            repeat,
            host_class: &self.class_ids[class],
            role,
        }
        .key()
    }

    pub fn key_of(&self, class: usize, unit: Unit) -> String {
        self.key_for(
            class,
            unit.cell,
            self.config_of(unit),
            unit.repeat,
            self.role_of(unit),
            self.budget_of(unit),
        )
    }

    pub fn cell_label(&self, cell: u32) -> String {
        space::cell_label(self.study, &self.plan.cells[cell as usize])
    }

    fn class_hosts(&self, class: usize) -> Vec<usize> {
        (0..self.host_class.len())
            .filter(|h| self.host_class[*h] == class)
            .collect()
    }

    /// Sweep positions of a cell, baseline (0) first.
    fn positions(&self, cs: &ClassState, cell: u32) -> Vec<u64> {
        if self.adaptive() {
            std::iter::once(0)
                .chain(cs.finalists.get(&cell).into_iter().flatten().map(|c| c + 1))
                .collect()
        } else {
            (0..self.plan.configs_in_cell(cell as usize)).collect()
        }
    }

    /// Sweep trials of a cell on a class (config × repeat).
    fn trials_in_cell(&self, cs: &ClassState, cell: u32) -> u64 {
        self.positions(cs, cell).len() as u64 * u64::from(self.plan.repeats)
    }

    /// Queue every sweep trial of a cell except the baseline's first repeat
    /// and those already done. Returns (queued, already done).
    fn release_cell(&self, cs: &mut ClassState, class: usize, cell: u32) -> (u64, u64) {
        // (repeat, position, key) of every sweep trial of the cell: the
        // plan's list for a grid or random study (what `status` counts too),
        // the finalists of an adaptive one.
        let trials: Vec<(u32, u64, String)> = if self.adaptive() {
            let positions = self.positions(cs, cell);
            (0..self.plan.repeats)
                .flat_map(|repeat| positions.iter().map(move |&pos| (repeat, pos)))
                .map(|(repeat, pos)| {
                    (
                        repeat,
                        pos,
                        self.key_of(class, Unit::sweep(cell, repeat, pos)),
                    )
                })
                .collect()
        } else {
            self.plan
                .sweep_trials_in_cell(self.study, self.study_id, &self.class_ids[class], cell)
                .map(|t| (t.repeat, t.pos, t.key))
                .collect()
        };
        let (mut queued, mut done) = (0, 0);
        for (repeat, pos, key) in trials {
            if repeat == 0 && pos == 0 {
                continue;
            }
            // The baseline's re-run already ran in this launch (counted
            // as it finished).
            if repeat == 1 && pos == 0 && cs.retried.contains(&cell) {
                continue;
            }
            if self.done.contains(&key) {
                done += 1;
            } else {
                cs.ready.push(Reverse(Unit::sweep(cell, repeat, pos)));
                queued += 1;
            }
        }
        *cs.outstanding.entry(cell).or_insert(0) += queued;
        cs.released.insert(cell);
        (queued, done)
    }
}

impl<'a> Scheduler<'a> {
    pub fn new(setup: Setup<'a>) -> Scheduler<'a> {
        let classes = (0..setup.plan.classes.len())
            .map(|_| ClassState::default())
            .collect();
        let workers = setup.slots.clone();
        Scheduler {
            s: setup,
            st: State {
                classes,
                workers,
                ..State::default()
            },
            out: Vec::new(),
        }
    }

    pub fn setup(&self) -> &Setup<'a> {
        &self.s
    }

    /// What happened since the last call.
    pub fn take_events(&mut self) -> Vec<LaunchEvent> {
        std::mem::take(&mut self.out)
    }

    /// Plan records queued since the last call (an adaptive search chose
    /// its finalists).
    pub fn take_plan_writes(&mut self) -> Vec<PlanWrite> {
        std::mem::take(&mut self.st.plan_writes)
    }

    /// `in_plan`: the skipped trials were counted in the launch's plan
    /// (see [`LaunchEvent::AlreadyDone`]).
    fn skip(&mut self, count: u64, cause: SkipCause, in_plan: bool) {
        if count > 0 {
            self.out.push(LaunchEvent::Skipped {
                count,
                cause,
                in_plan,
            });
        }
    }

    /// Fill the queues from the plan, skipping what the ledger holds.
    pub fn seed(&mut self, scan: &Scan) {
        let terminal = scan.terminal();
        // A config that failed in an earlier launch is not tried again in
        // that cell: its remaining repeats are skipped, as in one launch.
        // The baseline's first failure in a cell is re-run before it is
        // believed: it stops the cell only at its second.
        let baseline = self.s.plan.space.baseline();
        for a in terminal.values() {
            if a.status == AttemptStatus::Failed
                && a.spec_hash == self.s.spec_hash
                && a.role == RoleKind::Sweep
                && let Some(class) = self.s.class_ids.iter().position(|c| *c == a.host_class)
            {
                let cs = &mut self.st.classes[class];
                if a.config_index == baseline {
                    let n = cs.baseline_failures.entry(a.cell_index).or_insert(0);
                    *n += 1;
                    if *n < 2 {
                        continue;
                    }
                }
                cs.failed_configs.insert((a.cell_index, a.config_index));
            }
        }
        if self.s.adaptive() {
            let mut notes = Vec::new();
            let (to_run, already_done) = self.seed_searches(scan, &mut notes);
            self.out.push(LaunchEvent::Planned {
                to_run,
                already_done,
            });
            self.out.append(&mut notes);
            return;
        }
        let (mut to_run, mut already) = (0u64, 0u64);
        let mut skipped = Vec::new();
        for class in 0..self.s.plan.classes.len() {
            for cell in 0..self.s.plan.cells.len() as u32 {
                let first = Unit::sweep(cell, 0, 0);
                let key = self.s.key_of(class, first);
                let cs = &mut self.st.classes[class];
                match terminal.get(key.as_str()).map(|a| a.status) {
                    Some(AttemptStatus::Ok) => {
                        already += 1;
                        let (n, d) = self.s.release_cell(cs, class, cell);
                        to_run += n;
                        already += d;
                    }
                    Some(_) => {
                        already += 1;
                        // Its re-run (repeat 1) decides: passed, the cell
                        // goes on; failed too, it stops; not run yet, it
                        // runs first.
                        let retry = self.s.key_of(class, Unit::sweep(cell, 1, 0));
                        match terminal.get(retry.as_str()).map(|a| a.status) {
                            Some(AttemptStatus::Ok) => {
                                let (n, d) = self.s.release_cell(cs, class, cell);
                                to_run += n;
                                already += d;
                            }
                            Some(_) => {
                                cs.released.insert(cell);
                                let n = self.s.plan.trials_in_cell(cell as usize) - 1;
                                skipped.push((
                                    n,
                                    SkipCause::BaselineFailed {
                                        cell: self.s.cell_label(cell),
                                    },
                                ));
                            }
                            None => {
                                cs.pending += 1;
                                to_run += self.s.plan.trials_in_cell(cell as usize) - 1;
                                self.queue_baseline_retry(class, cell);
                            }
                        }
                    }
                    None => {
                        cs.ready.push(Reverse(first));
                        cs.pending += 1;
                        *cs.outstanding.entry(cell).or_insert(0) += 1;
                        // The rest of the cell is counted when released.
                        to_run += self.s.plan.trials_in_cell(cell as usize);
                    }
                }
            }
        }
        self.out.push(LaunchEvent::Planned {
            to_run,
            already_done: already,
        });
        // A cell whose baseline failed in an earlier launch was not
        // counted in `to_run`.
        for (count, cause) in skipped {
            self.skip(count, cause, false);
        }
    }

    /// The next unit for a slot of `host` (in `class`), and the cells whose
    /// sweep finished by skipping (for a confirmation check).
    pub fn next(&mut self, class: usize, host: usize, now: Instant) -> (Next, Vec<u32>) {
        if self.st.cooling.contains(&host) {
            return (Next::Wait, vec![]);
        }
        // Hosts of the class still in this launch: a cell dropped on all of
        // them is skipped (a host that changed class will not come back).
        let live_hosts = self.live_hosts(class);
        let mut skipped_failed = 0u64;
        let mut skipped_dropped = 0u64;
        let mut touched = Vec::new();
        let mut deferred = Vec::new();
        // Deferred units now due (a worker waiting for work asks every
        // second: nothing is moved when none is due).
        let cs = &mut self.st.classes[class];
        if cs.deferred.iter().any(|(t, _)| *t <= now) {
            let (due, later): (Vec<_>, Vec<_>) =
                cs.deferred.drain(..).partition(|(t, _)| *t <= now);
            cs.deferred = later;
            for (_, u) in due {
                cs.ready.push(Reverse(u));
            }
        }
        let result = loop {
            if self.st.classes[class].ready.is_empty()
                && let Some(unit) = self.advance_searches(class)
            {
                self.st.classes[class].ready.push(Reverse(unit));
            }
            touched.append(&mut self.st.classes[class].just_released);
            let State {
                classes,
                warmed,
                dropped,
                finished,
                ..
            } = &mut self.st;
            let cs = &mut classes[class];
            match cs.ready.pop() {
                Some(Reverse(unit)) => {
                    let config = self.s.config_of(unit);
                    if unit.kind == Kind::Sweep && cs.failed_configs.contains(&(unit.cell, config))
                    {
                        skipped_failed += 1;
                        cs.unit_done(unit.cell);
                        finished.insert((class, unit));
                        touched.push(unit.cell);
                        continue;
                    }
                    if dropped.contains(&(host, unit.cell)) {
                        if live_hosts
                            .iter()
                            .all(|h| dropped.contains(&(*h, unit.cell)))
                        {
                            skipped_dropped += 1;
                            if unit.kind.holds_bucket() {
                                cs.unit_done(unit.cell);
                            }
                            finished.insert((class, unit));
                            touched.push(unit.cell);
                        } else {
                            deferred.push(unit);
                        }
                        continue;
                    }
                    cs.in_flight += 1;
                    let warm = warmed.insert(self.s.warm_key(host, unit));
                    break Next::Run(unit, warm);
                }
                None if cs.pending > 0 || cs.may_change() || !deferred.is_empty() => {
                    break Next::Wait;
                }
                None => break Next::Done,
            }
        };
        for u in deferred {
            self.st.classes[class].ready.push(Reverse(u));
        }
        self.skip(skipped_failed, SkipCause::ConfigFailed, true);
        self.skip(skipped_dropped, SkipCause::CellDroppedEverywhere, true);
        if result == Next::Wait && self.stalled(class, &live_hosts) {
            self.end_stalled(class);
            return (Next::Done, touched);
        }
        // Done, with nothing just released that could queue more (a
        // bucket's next step): the class's work in this launch is over.
        if result == Next::Done && touched.is_empty() {
            self.announce_done(class);
        }
        (result, touched)
    }

    /// Say, once, that `class` is done while other classes still have
    /// work (at the launch's end every class is done: nothing to say).
    fn announce_done(&mut self, class: usize) {
        if self.st.stopping || self.st.abandoned.contains(&class) || !self.st.done.insert(class) {
            return;
        }
        let others = (0..self.st.classes.len())
            .filter(|c| {
                *c != class
                    && !self.st.done.contains(c)
                    && !self.st.abandoned.contains(c)
                    && self.st.classes[*c].has_work()
            })
            .count();
        if others == 0 {
            return;
        }
        let hosts = self
            .s
            .class_hosts(class)
            .into_iter()
            .map(|h| self.s.host_names[h].clone())
            .collect();
        self.out.push(LaunchEvent::ClassDone {
            class: self.s.plan.classes[class].label.clone(),
            hosts,
            others,
        });
    }

    /// Hosts of `class` that may still take units: in this launch (not
    /// changed class), with a worker still asking.
    fn live_hosts(&self, class: usize) -> Vec<usize> {
        self.s
            .class_hosts(class)
            .into_iter()
            .filter(|h| {
                !self.st.retired.contains(h) && self.st.workers.get(*h).is_some_and(|w| *w > 0)
            })
            .collect()
    }

    /// Slots of `class` in this launch: the workers of its hosts that
    /// still ask for units (a host that is down keeps its workers). A
    /// racing round is sized to fill them.
    pub fn class_slots(&self, class: usize) -> u32 {
        self.live_hosts(class)
            .iter()
            .filter_map(|h| self.st.workers.get(*h))
            .sum()
    }

    /// A worker of `host` left (its class is done, its host left, the
    /// launch stops).
    pub fn worker_left(&mut self, host: usize) {
        if let Some(w) = self.st.workers.get_mut(host) {
            *w = w.saturating_sub(1);
        }
    }

    /// The watchdog: nothing of `class` runs or can change, no host of it
    /// is down (one may answer again), and no host still in the launch can
    /// take any queued unit. Waiting would never end.
    fn stalled(&self, class: usize, live_hosts: &[usize]) -> bool {
        let cs = &self.st.classes[class];
        if cs.may_change() || live_hosts.iter().any(|h| self.st.down.contains_key(h)) {
            return false;
        }
        let takeable = |u: &Unit| {
            live_hosts
                .iter()
                .any(|h| !self.st.cooling.contains(h) && !self.st.dropped.contains(&(*h, u.cell)))
        };
        !cs.ready.iter().any(|Reverse(u)| takeable(u))
    }

    /// End what `class` still has queued or pending, with its reason; its
    /// workers leave and the launch goes on with the other classes.
    fn end_stalled(&mut self, class: usize) {
        let cs = &mut self.st.classes[class];
        let units: Vec<Unit> = cs.ready.drain().map(|Reverse(u)| u).collect();
        let mut cells: Vec<u32> = units.iter().map(|u| u.cell).collect();
        cells.extend(cs.searches.keys().copied());
        cells.sort_unstable();
        cells.dedup();
        let searches = cs.searches.len();
        cs.searches.clear();
        cs.pending = 0;
        cs.outstanding.clear();
        cs.open.clear();
        self.st.abandoned.insert(class);
        self.out.push(LaunchEvent::Stalled {
            class: self.s.plan.classes[class].label.clone(),
            trials: units.len() as u64,
            searches,
            cells: cells.iter().map(|c| self.s.cell_label(*c)).collect(),
        });
    }

    /// Another launcher holds this unit's trial: look again at `when`.
    pub fn defer(&mut self, class: usize, host: usize, unit: Unit, when: Instant) {
        self.st.warmed.remove(&self.s.warm_key(host, unit));
        let cs = &mut self.st.classes[class];
        cs.in_flight = cs.in_flight.saturating_sub(1);
        cs.deferred.push((when, unit));
    }

    /// Book-keeping after a unit ran (`None`: it could not be recorded).
    /// Returns the drift check the host is due for in this cell, if any.
    pub fn finish(&mut self, class: usize, host: usize, unit: Unit, ran: Option<&Ran>) -> Check {
        let config = self.s.config_of(unit);
        // Lost with its host: the trial goes back to the class's queue, for
        // another host (or this one when it answers again).
        if let Some(r) = ran.filter(|r| r.host_lost) {
            let losses = self.st.host_losses.entry(r.key.clone()).or_insert(0);
            *losses += 1;
            if *losses <= MAX_HOST_LOSS_REQUEUES {
                self.st.warmed.remove(&self.s.warm_key(host, unit));
                let cs = &mut self.st.classes[class];
                cs.in_flight = cs.in_flight.saturating_sub(1);
                cs.ready.push(Reverse(unit));
                self.out.push(LaunchEvent::TrialRequeued);
                return Check::None;
            }
            self.out.push(LaunchEvent::TrialLeftAfterHostLosses {
                key: r.key.chars().take(16).collect(),
                losses: MAX_HOST_LOSS_REQUEUES,
            });
            let kept = Ran {
                host_lost: false,
                ..r.clone()
            };
            return self.finish(class, host, unit, Some(&kept));
        }
        let status = ran.map(|r| r.status);
        // A lost or unrecorded run may be queued again by its bucket's next
        // step, a bounded number of times; any other outcome is final here.
        let lost = matches!(status, Some(AttemptStatus::Lost) | None);
        let losses = self.st.lost_runs.entry((class, unit)).or_insert(0);
        *losses += u32::from(lost);
        if !lost || *losses > MAX_LOST_REQUEUES {
            self.st.finished.insert((class, unit));
        }
        let cs = &mut self.st.classes[class];
        cs.in_flight = cs.in_flight.saturating_sub(1);
        cs.open.remove(&unit);
        if unit.kind.holds_bucket() {
            cs.unit_done(unit.cell);
        }
        match status {
            Some(AttemptStatus::Failed) if unit.kind == Kind::Sweep && unit.pos == 0 => {
                // The baseline: one failure is re-run before it is
                // believed; a second stops it.
                let n = cs.baseline_failures.entry(unit.cell).or_insert(0);
                *n += 1;
                if *n >= 2 {
                    cs.failed_configs.insert((unit.cell, config));
                }
            }
            Some(AttemptStatus::Failed) if unit.kind == Kind::Sweep => {
                cs.failed_configs.insert((unit.cell, config));
            }
            Some(AttemptStatus::Lost) | None => {
                self.st.warmed.remove(&self.s.warm_key(host, unit));
            }
            _ => {}
        }
        if unit.kind == Kind::Rung {
            self.finish_rung(class, unit, ran);
            return Check::None;
        }
        // The first baseline repeat releases its cell once; a re-run of it
        // (after drift) is an ordinary measurement. When it failed, its
        // repeat 1 runs alone first, and decides.
        let cs = &self.st.classes[class];
        let retry = Unit::sweep(unit.cell, 1, 0);
        if unit.is_first_baseline() && !cs.released.contains(&unit.cell) {
            if status == Some(AttemptStatus::Failed) && !cs.retrying.contains(&unit.cell) {
                self.queue_baseline_retry(class, unit.cell);
            } else {
                self.release_after_baseline(class, unit.cell, status);
            }
        } else if unit == retry
            && self.st.classes[class].retrying.remove(&unit.cell)
            && !self.st.classes[class].released.contains(&unit.cell)
        {
            // Its trial ran: not queued again, nor skipped.
            self.st.classes[class].retried.insert(unit.cell);
            self.release_after_baseline(class, unit.cell, status);
        }
        let check = match ran.filter(|r| r.status == AttemptStatus::Ok) {
            Some(r) if unit.kind == Kind::Sweep => self.sweep_measured(host, unit, r),
            Some(r) if unit.kind == Kind::Confirm => self.confirm_measured(host, unit, r),
            _ => Check::None,
        };
        if check.is_due() {
            // Until `anchor_over`: what the anchor voids comes back.
            *self.st.classes[class]
                .anchoring
                .entry(unit.cell)
                .or_insert(0) += 1;
        }
        check
    }

    /// The anchor that `finish` said was due at `cell` is over (with its
    /// cool-down, if any; whether it ran or not).
    pub fn anchor_over(&mut self, class: usize, cell: u32) {
        let anchoring = &mut self.st.classes[class].anchoring;
        if let Some(n) = anchoring.get_mut(&cell) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                anchoring.remove(&cell);
            }
        }
    }

    /// The first baseline repeat of `cell` ended with `status`: release the
    /// rest of the cell, or skip it.
    /// The cell's first baseline run failed: run its repeat 1 alone before
    /// believing it (unless the ledger already has it: then that decides).
    fn queue_baseline_retry(&mut self, class: usize, cell: u32) {
        let retry = Unit::sweep(cell, 1, 0);
        let key = self.s.key_of(class, retry);
        let cs = &mut self.st.classes[class];
        cs.retrying.insert(cell);
        if self.s.done.contains(&key) {
            // Decided by the ledger: the caller's seed looks it up.
            return;
        }
        cs.ready.push(Reverse(retry));
        *cs.outstanding.entry(cell).or_insert(0) += 1;
        self.out.push(LaunchEvent::BaselineRetry {
            cell: self.s.cell_label(cell),
            class: self.s.class_ids[class].clone(),
        });
    }

    fn release_after_baseline(&mut self, class: usize, cell: u32, status: Option<AttemptStatus>) {
        let stopping = self.st.stopping;
        let cs = &mut self.st.classes[class];
        cs.pending = cs.pending.saturating_sub(1);
        let skip = match status {
            Some(AttemptStatus::Ok) => {
                let (queued, done) = self.s.release_cell(cs, class, cell);
                if done > 0 {
                    self.out.push(LaunchEvent::AlreadyDone {
                        count: done,
                        in_plan: !self.s.adaptive(),
                    });
                }
                // An adaptive cell's objective stage was not counted when
                // the launch started.
                if self.s.adaptive() && queued > 0 {
                    self.out.push(LaunchEvent::More { count: queued });
                }
                None
            }
            Some(AttemptStatus::Failed) => {
                cs.released.insert(cell);
                // The first baseline run, and its re-run when it ran here.
                let ran = if cs.retried.contains(&cell) { 2 } else { 1 };
                Some((
                    self.s.trials_in_cell(cs, cell).saturating_sub(ran),
                    SkipCause::BaselineFailed {
                        cell: self.s.cell_label(cell),
                    },
                ))
            }
            // Lost or not recorded: the cell waits for the next launch
            // (quietly when this one is stopping).
            _ if stopping => {
                cs.released.insert(cell);
                None
            }
            _ => {
                cs.released.insert(cell);
                Some((
                    self.s.trials_in_cell(cs, cell) - 1,
                    SkipCause::BaselineLost {
                        cell: self.s.cell_label(cell),
                    },
                ))
            }
        };
        // An adaptive cell's objective stage joins the plan only when its
        // baseline releases it; a grid cell's was counted at the start.
        let in_plan = !self.s.adaptive();
        if let Some((count, cause)) = skip {
            self.skip(count, cause, in_plan);
        }
    }

    /// The launch is stopping: what is lost now is not news.
    pub fn stopping(&mut self) {
        self.st.stopping = true;
    }

    /// Whether `host` cools down now (its slots wait).
    pub fn is_cooling(&self, host: usize) -> bool {
        self.st.cooling.contains(&host)
    }

    /// Whether a worker of `host` leaves: its host changed class, or its
    /// class was given up.
    pub fn host_left(&self, host: usize, class: usize) -> bool {
        self.st.retired.contains(&host) || self.st.abandoned.contains(&class)
    }

    /// `host` answers. Returns whether it rejoined (its waiting slots may
    /// look again).
    pub fn host_up(&mut self, host: usize, class: usize, rejoined: bool) -> bool {
        self.st.all_down_announced.remove(&class);
        let was_down = self.st.down.remove(&host).is_some();
        if rejoined || was_down {
            self.out.push(LaunchEvent::HostRejoined {
                host: self.s.host_names[host].clone(),
            });
            return true;
        }
        false
    }

    /// `host` answers with another fingerprint: it leaves this launch.
    pub fn host_changed(
        &mut self,
        host: usize,
        changes: Vec<String>,
        old_label: String,
        new_label: String,
    ) {
        if self.st.retired.insert(host) {
            self.out.push(LaunchEvent::HostChanged {
                host: self.s.host_names[host].clone(),
                changes,
                old_label,
                new_label,
            });
        }
    }

    /// `host` does not answer (since `since`; its transport retries in
    /// `retry_in`). A host that is down is retried with back-off while its
    /// class has work; a class whose every host stays down past
    /// `--host-timeout` is given up.
    pub fn host_down(
        &mut self,
        host: usize,
        class: usize,
        since: Instant,
        retry_in: Duration,
        now: Instant,
    ) -> HostGate {
        self.st.down.entry(host).or_insert(since);
        let class_hosts = self.s.class_hosts(class);
        let cs = &self.st.classes[class];
        if !cs.has_work() {
            return HostGate::Leave;
        }
        let wait = HostGate::Wait(retry_in.min(Duration::from_secs(1)));
        let all_down = class_hosts
            .iter()
            .all(|h| self.st.down.contains_key(h) || self.st.retired.contains(h));
        if !all_down {
            return wait;
        }
        // The class has work and no host: wait for one, up to the limit.
        let last_down = class_hosts
            .iter()
            .filter_map(|h| self.st.down.get(h))
            .max()
            .copied();
        let every_retired = class_hosts.iter().all(|h| self.st.retired.contains(h));
        let waited = last_down
            .map(|t| now.saturating_duration_since(t))
            .unwrap_or_default();
        let label = self.s.plan.classes[class].label.clone();
        let left = cs.ready.len() + cs.deferred.len() + cs.in_flight;
        if every_retired || waited >= self.s.host_timeout {
            if self.st.abandoned.insert(class) {
                let cause = if every_retired {
                    // Its hosts belong to other classes now: the next round
                    // of the launch tunes those.
                    Abandon::HostsChangedClass
                } else {
                    Abandon::AllDown {
                        waited: Duration::from_secs(waited.as_secs()),
                    }
                };
                self.out
                    .push(LaunchEvent::ClassAbandoned { label, left, cause });
            }
            return HostGate::Leave;
        }
        if self.st.all_down_announced.insert(class) {
            self.out.push(LaunchEvent::ClassAllDown {
                label,
                hosts: class_hosts
                    .iter()
                    .map(|h| self.s.host_names[*h].clone())
                    .collect(),
                timeout: self.s.host_timeout,
            });
        }
        wait
    }

    /// Put voided units back in the queue; `cooled` ends a host's
    /// cool-down (and drops the cell on it when it did not settle).
    pub fn requeue(
        &mut self,
        class: usize,
        cell: u32,
        voids: &[Void],
        cooled: Option<(usize, bool)>,
    ) {
        if let Some((host, dropped)) = cooled {
            self.st.cooling.remove(&host);
            if dropped {
                self.st.dropped.insert((host, cell));
            }
        }
        let cs = &mut self.st.classes[class];
        for v in voids {
            cs.ready.push(Reverse(v.unit));
        }
        // Voided sweep and confirmation runs hold their bucket's next step
        // back until they are measured again.
        let held = voids.iter().filter(|v| v.unit.kind.holds_bucket()).count();
        *cs.outstanding.entry(cell).or_insert(0) += held as u64;
        let count = voids.len() as u64;
        self.out.push(LaunchEvent::Remeasure { count });
    }
}
