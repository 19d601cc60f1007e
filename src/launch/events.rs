//! What happens during a launch, as typed events, and the one place that
//! counts them.
//!
//! The scheduler (`schedule/`), the trial runner (`run_trial.rs`) and the
//! launch driver (`run_study.rs`) describe what happened with a
//! [`LaunchEvent`]; none of them writes a sentence. Two consumers read the
//! same stream: [`LaunchSummary::apply`] counts it (the launch's result,
//! and the progress bar's numbers), and the progress reporter
//! (`progress.rs`) is the only code that turns events into text.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::ledger::records::{AttemptStatus, FailureClass};
use crate::transport::TransportError;
use crate::trial::RoleKind;

/// Something that happened in a launch.
#[derive(Debug, Clone, PartialEq)]
pub enum LaunchEvent {
    /// Trials this launch will try to run, and those found done.
    Planned {
        to_run: u64,
        already_done: u64,
    },
    /// A note of the plan (how it was cut down, what a shard runs...).
    PlanNote {
        text: String,
    },
    /// `--seed-from`: configs an earlier study saw fail on a class are not
    /// tried there.
    KnownFailures {
        class: String,
        count: usize,
        source: String,
    },
    HostReady {
        host: String,
        class: String,
        label: String,
        /// A mixed Slurm partition's part: its nodes.
        nodes: Vec<String>,
        /// Trials it runs at once.
        slots: u32,
    },
    /// A remote host did not answer its probe: the study goes on without it.
    HostUnreachable {
        host: String,
        reason: TransportError,
    },
    /// A ledger object that is not what its key says: its trial runs again.
    UnreadableObject {
        key: String,
        reason: String,
    },
    /// More trials joined the launch (search jobs, an adaptive cell's
    /// objective stage): counted, not announced.
    More {
        count: u64,
    },
    /// Trials found in the ledger after the launch started (a released
    /// cell's, a replayed search's): counted, not announced. `in_plan`:
    /// they were counted in [`LaunchEvent::Planned`]'s `to_run` or a
    /// [`LaunchEvent::More`] (a grid cell's trials are counted when the
    /// launch starts, before its baseline releases them).
    AlreadyDone {
        count: u64,
        in_plan: bool,
    },
    /// Trials that will not run, and why. `in_plan` as for
    /// [`LaunchEvent::AlreadyDone`].
    Skipped {
        count: u64,
        cause: SkipCause,
        in_plan: bool,
    },
    TrialStarted,
    /// An attempt ended and was recorded.
    TrialFinished {
        status: AttemptStatus,
        /// What it measured: an anchor and a confirmation trial are
        /// counted apart too.
        role: RoleKind,
        /// A sweep trial beyond the plan's repeats (racing).
        racing: bool,
        /// Why a failed attempt was rejected.
        rejection: Option<Rejection>,
        /// Of an `ok` attempt: its (host class, cell, config) labels, so
        /// that the summary can say how many the gate rejected.
        ok_of: Option<TrialOf>,
        /// Its wall time on its host, warm-ups included.
        seconds: f64,
    },
    /// An attempt ran and could not be written to the ledger. `first`: the
    /// first such attempt of the launch (no new trial starts from now on).
    AttemptUnrecorded {
        error: String,
        attempt: UnrecordedAttempt,
        first: bool,
    },
    /// A trial lost with its host goes back to its class's queue.
    TrialRequeued,
    /// A trial was running every time a host dropped: left for later.
    TrialLeftAfterHostLosses {
        key: String,
        losses: u32,
    },
    HostRejoined {
        host: String,
    },
    /// A host answers with another fingerprint: it leaves this launch.
    HostChanged {
        host: String,
        changes: Vec<String>,
        old_label: String,
        new_label: String,
    },
    HostDropped {
        host: String,
        reason: TransportError,
    },
    /// Every host of a class is down; its trials wait up to `timeout`.
    ClassAllDown {
        label: String,
        hosts: Vec<String>,
        timeout: Duration,
    },
    /// A class's queued trials are given up.
    ClassAbandoned {
        label: String,
        left: usize,
        cause: Abandon,
    },
    SearchCannotStart {
        cell: String,
        class: String,
        error: String,
    },
    SearchStopped {
        cell: String,
        error: String,
    },
    /// An adaptive search ended: its finalists go to the objective stage.
    SearchOver {
        cell: String,
        class: String,
        jobs: u64,
        finalists: Vec<String>,
    },
    SearchSkipped {
        cell: String,
        class: String,
        why: SearchStop,
    },
    /// A baseline re-measurement (an anchor) joined the launch.
    AnchorStarted,
    AnchorFailed {
        host: String,
        cell: String,
    },
    /// `--no-cooldown`: a drift seen, measurements kept.
    DriftKept {
        host: String,
        cell: String,
        drift: f64,
        threshold: Threshold,
    },
    /// Three anchors are better than the reference: what came before was
    /// measured in a slower state and runs again.
    WasSlower {
        host: String,
        cell: String,
        gain: f64,
        threshold: Threshold,
        remeasured: usize,
    },
    /// Three anchors are worse: measurements since the last clean anchor
    /// are discarded and the host cools down.
    Drifted {
        host: String,
        cell: String,
        drift: f64,
        threshold: Threshold,
        discarded: usize,
    },
    /// Discarded measurements go back to the queue.
    Remeasure {
        count: u64,
    },
    /// Trials that timed out under a shorter `trial.timeout` than the
    /// study's run again: their attempts are voided.
    TimeoutRaised {
        trials: usize,
        /// The longest timeout they ran under, and the study's now.
        from_s: f64,
        to_s: f64,
    },
    CooledDown {
        host: String,
        cell: String,
        off: f64,
        against: Against,
        threshold: Threshold,
        tries: u32,
        remeasured: u64,
    },
    CellDropped {
        host: String,
        cell: String,
        reason: DropReason,
    },
    /// Every trial a class can run in this launch has ended while other
    /// classes still run: its hosts take nothing more from this launch
    /// (free for other work, or to give back).
    ClassDone {
        class: String,
        hosts: Vec<String>,
        /// Classes still running.
        others: usize,
    },
    /// The watchdog: nothing of a class runs or can change, and what it
    /// still has queued no host of it can take. Those trials (and the
    /// searches not over) are left for a later launch; the launch ends.
    Stalled {
        class: String,
        trials: u64,
        searches: usize,
        cells: Vec<String>,
    },
    ConfirmationQueued {
        bucket: String,
        class: String,
        trials: u64,
    },
    /// A cell's first baseline run failed: it runs once more (its repeat
    /// 1) before the failure is believed; the cell waits for it.
    BaselineRetry {
        cell: String,
        class: String,
    },
    /// A bucket's decision is too close to call: more sweep runs of the
    /// baseline and `configs` configs, up to `runs` at every cell (they
    /// join the launch's trials, like [`LaunchEvent::More`]). `out`: the
    /// bucket's runs still out when they were queued (0: its last round
    /// was whole).
    RaceQueued {
        bucket: String,
        class: String,
        trials: u64,
        configs: usize,
        runs: u32,
        out: u64,
    },
    /// `budget.max_trial_time` is spent: no new trial starts; the running
    /// ones finish and are recorded.
    BudgetSpent {
        spent_s: f64,
        cap_s: f64,
    },
    ConfirmReadFailed {
        bucket: String,
        error: String,
    },
    /// A ledger write other than an attempt's failed.
    LedgerWriteFailed {
        error: String,
        what: Written,
    },
    LeaseError {
        error: String,
    },
    /// A trial waits: another launcher holds its lease (said once per
    /// trial and holder).
    LeaseHeld {
        config: String,
        cell: String,
        /// The trial key's first 16 characters.
        trial: String,
        owner: String,
        host: String,
        expires_at: String,
    },
    /// Another launcher's lease expired further ahead than any lease can
    /// (a wrong clock, a forged object): taken over as stale.
    LeaseFromTheFuture {
        config: String,
        cell: String,
        trial: String,
        owner: String,
        host: String,
        expires_at: String,
    },
    LeaseLost {
        config: String,
        cell: String,
    },
    /// A run landed on a node of another host class than its trial's: it
    /// is recorded for the node's class (host `host`), as that class's
    /// trial of the same config, cell and repeat, and runs again for its
    /// own.
    KeptForItsClass {
        config: String,
        cell: String,
        node: String,
        label: String,
        host: String,
    },
    /// A rung's checkpoint could not be read, brought to its host or
    /// stored as `fidelity.continuation` means to: a rung runs from an
    /// earlier state or from zero (never from a wrong one).
    CheckpointNotCarried {
        config: String,
        cell: String,
        problem: crate::transport::checkpoint::CheckpointProblem,
    },
    RenderFailed {
        config: String,
        cell: String,
        error: String,
    },
}

/// Why trials are skipped.
#[derive(Debug, Clone, PartialEq)]
pub enum SkipCause {
    BaselineFailed {
        cell: String,
    },
    BaselineLost {
        cell: String,
    },
    /// Counted, not announced: the failure itself was reported.
    ConfigFailed,
    CellDroppedEverywhere,
}

/// A rejected attempt: `config @ cell: class: detail`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub config: String,
    pub cell: String,
    pub class: FailureClass,
    pub detail: String,
}

/// An attempt the ledger did not take, as the summary lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct UnrecordedAttempt {
    pub key: String,
    pub config: String,
    pub cell: String,
    pub attempt_id: String,
    pub host: String,
    pub status: AttemptStatus,
    pub failure: Option<FailureClass>,
}

/// Why a class's trials were given up.
#[derive(Debug, Clone, PartialEq)]
pub enum Abandon {
    /// Its hosts belong to other classes now.
    HostsChangedClass,
    /// Every host stayed down past `--host-timeout`.
    AllDown { waited: Duration },
}

/// Why an adaptive search did not run at a cell.
#[derive(Debug, Clone, PartialEq)]
pub enum SearchStop {
    BaselineFailed {
        budget: Option<f64>,
        failure: Option<(FailureClass, String)>,
    },
    BaselineLost {
        budget: Option<f64>,
    },
    Error(String),
}

/// A drift threshold and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    pub value: f64,
    /// The study's floor (`cool_drift` or `cool_eps`).
    pub floor: f64,
    pub setting: Setting,
    /// How many times the anchors' noise the threshold is.
    pub k: f64,
    /// The anchors' noise, once known.
    pub noise: Option<f64>,
}

/// A `measurement:` setting a threshold is floored by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    CoolDrift,
    CoolEps,
}

impl Setting {
    pub fn name(self) -> &'static str {
        match self {
            Setting::CoolDrift => "cool_drift",
            Setting::CoolEps => "cool_eps",
        }
    }
}

/// What a cooling host's anchors were compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Against {
    Reference,
    AnchorBefore,
}

/// Why a host dropped a cell (also the drop record's reason).
#[derive(Debug, Clone, PartialEq)]
pub struct DropReason {
    pub threshold: Threshold,
    pub tries: u32,
    pub waited: Duration,
    pub last: f64,
    pub against: Against,
}

/// `12.3%: the larger of cool_drift 10% and 3 × the anchors' noise 4.1%`.
impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.setting.name();
        match self.noise {
            Some(s) => write!(
                f,
                "{:.1}%: the larger of {name} {:.0}% and {} × the anchors' noise {:.1}%",
                self.value * 100.0,
                self.floor * 100.0,
                self.k,
                s * 100.0
            ),
            None => write!(
                f,
                "{:.1}%: {name}; the anchors' noise is not known yet",
                self.value * 100.0
            ),
        }
    }
}

impl std::fmt::Display for Against {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Against::Reference => "the reference",
            Against::AnchorBefore => "the anchor before",
        })
    }
}

/// As the drop record keeps it.
impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the baseline did not settle within {} after {} anchors and {:.1}s (last {:.1}% off {})",
            self.threshold,
            self.tries,
            self.waited.as_secs_f64(),
            self.last * 100.0,
            self.against
        )
    }
}

/// As void records keep it.
impl std::fmt::Display for super::schedule::VoidReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use super::schedule::VoidReason;
        match self {
            VoidReason::WasSlower { host, cell, gain } => write!(
                f,
                "host {host} was {:.1}% slower than later at cell {cell}",
                gain * 100.0
            ),
            VoidReason::Drifted { host, cell, drift } => {
                write!(
                    f,
                    "host {host} drifted {:.1}% at cell {cell}",
                    drift * 100.0
                )
            }
        }
    }
}

/// Which ledger write failed, for what it means.
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    /// An adaptive cell's plan record: its report stays a draft.
    Plan {
        cell: String,
    },
    Log,
    Void,
    Drop,
}

impl LaunchEvent {
    /// Whether it is shown with `--progress quiet` too.
    pub fn is_warning(&self) -> bool {
        !matches!(
            self,
            LaunchEvent::Planned { .. }
                | LaunchEvent::PlanNote { .. }
                | LaunchEvent::KnownFailures { .. }
                | LaunchEvent::HostReady { .. }
                | LaunchEvent::More { .. }
                | LaunchEvent::AlreadyDone { .. }
                | LaunchEvent::Skipped { .. }
                | LaunchEvent::TrialStarted
                | LaunchEvent::TrialFinished { .. }
                | LaunchEvent::TrialRequeued
                | LaunchEvent::SearchOver { .. }
                | LaunchEvent::SearchSkipped { .. }
                | LaunchEvent::AnchorStarted
                | LaunchEvent::Remeasure { .. }
                | LaunchEvent::TimeoutRaised { .. }
                | LaunchEvent::ConfirmationQueued { .. }
                | LaunchEvent::RaceQueued { .. }
                | LaunchEvent::BaselineRetry { .. }
                | LaunchEvent::LeaseHeld { .. }
                | LaunchEvent::KeptForItsClass { .. }
        )
    }
}

/// What a launch did, counted from its events.
#[derive(Debug, Default, Clone)]
pub struct LaunchSummary {
    /// Trials of the plan: those the launch set out to run (sweep trials;
    /// an adaptive search's rung trials) and those a search added since.
    /// Anchors, confirmation rounds and re-measurements after drift are
    /// not among them: they are counted apart, so that the progress bar's
    /// total does not grow as they join.
    pub planned: u64,
    /// Trials of the plan that ran to an outcome (ok or failed).
    pub planned_ended: u64,
    /// Trials of the plan found in the ledger after the launch started.
    pub planned_found_done: u64,
    /// Trials of the plan that will not run.
    pub planned_skipped: u64,
    /// Anchors and confirmation-round trials queued (started, for anchors).
    pub anchors_started: u64,
    pub confirm_queued: u64,
    /// Racing trials queued (more sweep runs where a decision is close):
    /// also counted in `planned`.
    pub race_queued: u64,
    /// Attempts running now.
    pub running: u64,
    pub ran: u64,
    pub ok: u64,
    pub failed: u64,
    /// Rung trials stopped early by `fidelity.prune` (among `ran`).
    pub pruned: u64,
    pub lost: u64,
    pub already_done: u64,
    pub skipped: u64,
    pub interrupted: bool,
    /// Ledger objects ignored as unreadable or misplaced.
    pub corrupt_objects: usize,
    /// Baseline re-measurements that ran (and were recorded) to watch for
    /// drift.
    pub anchors: u64,
    /// Measurements discarded after drift (their trials queued again).
    pub voided: u64,
    /// Cells given up on a host whose baseline would not settle.
    pub dropped_cells: u64,
    /// Trials of final confirmation rounds that ran (and were recorded).
    pub confirm_trials: u64,
    /// Racing trials that ran (sweep trials beyond the plan's repeats).
    pub racing_trials: u64,
    /// `ok` trials that ran, by (host class, cell, config).
    pub ok_of: BTreeMap<TrialOf, u64>,
    /// Of `ok`: trials whose config the gate rejected as output changed
    /// (known once the verdicts are written).
    pub output_changed: u64,
    /// Attempts lost with a host that dropped, queued again.
    pub requeued: u64,
    /// Hosts that did not answer at the start, and why: skipped.
    pub unreachable_hosts: Vec<(String, TransportError)>,
    /// Hosts whose fingerprint changed mid-launch: another host class now.
    pub changed_hosts: Vec<String>,
    /// Host classes given up after every host stayed down past
    /// `--host-timeout`: (class label, trials left).
    pub abandoned_classes: Vec<(String, usize)>,
    /// Classes the watchdog ended (nothing could run what they had left):
    /// (class label, trials left).
    pub stalled: Vec<(String, u64)>,
    /// Attempts that ran and could not be written to the ledger. Once one
    /// could not be written the launch started no new trial.
    pub unrecorded: Vec<UnrecordedAttempt>,
    /// The trial-time cap was spent and the launch stopped starting trials:
    /// (spent, cap) in seconds.
    pub budget_spent: Option<(f64, f64)>,
    /// Slots of each host that took trials, and the hosts down or gone now.
    pub host_slots: BTreeMap<String, u64>,
    pub hosts_down: std::collections::BTreeSet<String>,
    /// Wall time of the plan's trials that ran (`planned_ended`).
    pub planned_secs: f64,
}

/// The end of a launch, where the plan's trials left are fewer than the
/// slots up: the rest of the slots have nothing of the plan to run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tail {
    /// Trials of the plan not over.
    pub left: u64,
    pub slots: u64,
    /// Slots running nothing now.
    pub idle: u64,
}

/// Where an `ok` trial belongs: (host class, cell label, config label).
pub type TrialOf = (String, String, String);

impl LaunchSummary {
    /// Count one event: the only code that keeps the launch's numbers.
    pub fn apply(&mut self, ev: &LaunchEvent) {
        match ev {
            LaunchEvent::Planned {
                to_run,
                already_done,
            } => {
                self.planned += to_run;
                self.already_done += already_done;
            }
            LaunchEvent::More { count } => self.planned += count,
            LaunchEvent::RaceQueued { trials, .. } => {
                self.planned += trials;
                self.race_queued += trials;
            }
            LaunchEvent::AlreadyDone { count, in_plan } => {
                self.already_done += count;
                if *in_plan {
                    self.planned_found_done += count;
                }
            }
            LaunchEvent::Skipped { count, in_plan, .. } => {
                self.skipped += count;
                if *in_plan {
                    self.planned_skipped += count;
                }
            }
            LaunchEvent::UnreadableObject { .. } => self.corrupt_objects += 1,
            LaunchEvent::HostUnreachable { host, reason } => {
                self.unreachable_hosts.push((host.clone(), reason.clone()))
            }
            LaunchEvent::TrialStarted => self.running += 1,
            LaunchEvent::HostReady { host, slots, .. } => {
                self.host_slots.insert(host.clone(), u64::from(*slots));
                self.hosts_down.remove(host);
            }
            LaunchEvent::HostDropped { host, .. } => {
                self.hosts_down.insert(host.clone());
            }
            LaunchEvent::HostRejoined { host } => {
                self.hosts_down.remove(host);
            }
            LaunchEvent::TrialFinished {
                status,
                role,
                racing,
                ok_of,
                seconds,
                ..
            } => {
                self.running = self.running.saturating_sub(1);
                if matches!(role, RoleKind::Sweep | RoleKind::Rung)
                    && *status != AttemptStatus::Lost
                {
                    self.planned_secs += seconds;
                }
                if let Some(of) = ok_of {
                    *self.ok_of.entry(of.clone()).or_insert(0) += 1;
                }
                if *racing && *status != AttemptStatus::Lost {
                    self.racing_trials += 1;
                }
                // Among the trials that ran (a lost one did not).
                match (role, status) {
                    (_, AttemptStatus::Lost) => {}
                    (RoleKind::Anchor, _) => self.anchors += 1,
                    (RoleKind::Confirm, _) => self.confirm_trials += 1,
                    (RoleKind::Sweep | RoleKind::Rung, _) => self.planned_ended += 1,
                    (RoleKind::Unknown(_), _) => {}
                }
                match status {
                    AttemptStatus::Ok => {
                        self.ran += 1;
                        self.ok += 1;
                    }
                    AttemptStatus::Failed => {
                        self.ran += 1;
                        self.failed += 1;
                    }
                    AttemptStatus::Pruned => {
                        self.ran += 1;
                        self.pruned += 1;
                    }
                    AttemptStatus::Lost => self.lost += 1,
                }
            }
            LaunchEvent::AttemptUnrecorded { attempt, .. } => {
                self.running = self.running.saturating_sub(1);
                self.lost += 1;
                self.unrecorded.push(attempt.clone());
            }
            LaunchEvent::TrialRequeued => self.requeued += 1,
            LaunchEvent::HostChanged { host, .. } => {
                self.hosts_down.insert(host.clone());
                if !self.changed_hosts.contains(host) {
                    self.changed_hosts.push(host.clone());
                }
            }
            LaunchEvent::ClassAbandoned {
                label,
                left,
                cause: Abandon::AllDown { .. },
            } => self.abandoned_classes.push((label.clone(), *left)),
            LaunchEvent::AnchorStarted => self.anchors_started += 1,
            LaunchEvent::Remeasure { count } => self.voided += count,
            LaunchEvent::CellDropped { .. } => self.dropped_cells += 1,
            LaunchEvent::Stalled { class, trials, .. } => {
                self.stalled.push((class.clone(), *trials))
            }
            LaunchEvent::ConfirmationQueued { trials, .. } => self.confirm_queued += trials,
            LaunchEvent::BudgetSpent { spent_s, cap_s } => {
                self.budget_spent = Some((*spent_s, *cap_s))
            }
            _ => {}
        }
    }

    /// Trials of the plan that are over: ran to an outcome, skipped, or
    /// found done, less the measurements discarded after drift (their
    /// trials run again), and never more than [`LaunchSummary::planned`].
    pub fn planned_over(&self) -> u64 {
        (self.planned_ended + self.planned_skipped + self.planned_found_done)
            .saturating_sub(self.voided)
            .min(self.planned)
    }

    /// Slots of the hosts up now.
    pub fn slots_up(&self) -> u64 {
        self.host_slots
            .iter()
            .filter(|(h, _)| !self.hosts_down.contains(*h))
            .map(|(_, s)| s)
            .sum()
    }

    /// Where the plan's trials left are fewer than the slots up: what is
    /// left, over how many slots, and how many run nothing.
    pub fn tail(&self) -> Option<Tail> {
        let left = self.planned.saturating_sub(self.planned_over());
        let slots = self.slots_up();
        (left > 0 && left < slots).then(|| Tail {
            left,
            slots,
            idle: slots.saturating_sub(self.running),
        })
    }

    /// The mean wall time of the plan's trials that ran.
    pub fn mean_trial_secs(&self) -> Option<f64> {
        (self.planned_ended > 0).then(|| self.planned_secs / self.planned_ended as f64)
    }

    /// Fold another round of the same launch into this one.
    pub fn add(&mut self, o: &LaunchSummary) {
        self.planned += o.planned;
        self.planned_ended += o.planned_ended;
        self.planned_found_done += o.planned_found_done;
        self.planned_skipped += o.planned_skipped;
        self.anchors_started += o.anchors_started;
        self.confirm_queued += o.confirm_queued;
        self.race_queued += o.race_queued;
        self.ran += o.ran;
        self.ok += o.ok;
        self.failed += o.failed;
        self.pruned += o.pruned;
        self.lost += o.lost;
        self.skipped += o.skipped;
        self.anchors += o.anchors;
        self.voided += o.voided;
        self.dropped_cells += o.dropped_cells;
        self.confirm_trials += o.confirm_trials;
        self.racing_trials += o.racing_trials;
        for (of, n) in &o.ok_of {
            *self.ok_of.entry(of.clone()).or_insert(0) += n;
        }
        self.output_changed += o.output_changed;
        self.requeued += o.requeued;
        // What the ledger held at the start, and its unreadable objects,
        // are the first round's.
        if self.already_done == 0 {
            self.already_done = o.already_done;
        }
        self.corrupt_objects = self.corrupt_objects.max(o.corrupt_objects);
        self.interrupted |= o.interrupted;
        self.budget_spent = o.budget_spent.or(self.budget_spent);
        for h in &o.unreachable_hosts {
            if !self.unreachable_hosts.contains(h) {
                self.unreachable_hosts.push(h.clone());
            }
        }
        for h in &o.changed_hosts {
            if !self.changed_hosts.contains(h) {
                self.changed_hosts.push(h.clone());
            }
        }
        for c in &o.abandoned_classes {
            if !self.abandoned_classes.contains(c) {
                self.abandoned_classes.push(c.clone());
            }
        }
        for c in &o.stalled {
            if !self.stalled.contains(c) {
                self.stalled.push(c.clone());
            }
        }
        for u in &o.unrecorded {
            if !self.unrecorded.contains(u) {
                self.unrecorded.push(u.clone());
            }
        }
    }
}

/// Where a launch sends its events: counted here, then passed to the
/// reporter.
pub struct Emitter {
    tx: mpsc::UnboundedSender<LaunchEvent>,
    tally: Mutex<LaunchSummary>,
}

impl Emitter {
    pub fn new(tx: mpsc::UnboundedSender<LaunchEvent>) -> Emitter {
        Emitter {
            tx,
            tally: Mutex::new(LaunchSummary::default()),
        }
    }

    pub fn emit(&self, ev: LaunchEvent) {
        if let Ok(mut t) = self.tally.lock() {
            t.apply(&ev);
        }
        // A reporter that is gone (the launch is ending) misses nothing the
        // summary needs: it was counted above.
        let _ = self.tx.send(ev);
    }

    pub fn emit_all(&self, events: impl IntoIterator<Item = LaunchEvent>) {
        for ev in events {
            self.emit(ev);
        }
    }

    /// The counts so far.
    pub fn summary(&self) -> LaunchSummary {
        self.tally.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_is_counted_from_its_events() {
        let mut s = LaunchSummary::default();
        for ev in [
            LaunchEvent::Planned {
                to_run: 4,
                already_done: 2,
            },
            LaunchEvent::TrialStarted,
            LaunchEvent::TrialFinished {
                status: AttemptStatus::Ok,
                role: RoleKind::Confirm,
                racing: false,
                rejection: None,
                ok_of: None,
                seconds: 1.0,
            },
            LaunchEvent::TrialStarted,
            LaunchEvent::TrialFinished {
                status: AttemptStatus::Lost,
                role: RoleKind::Sweep,
                racing: false,
                rejection: None,
                ok_of: None,
                seconds: 1.0,
            },
            LaunchEvent::TrialRequeued,
            LaunchEvent::AnchorStarted,
            LaunchEvent::Remeasure { count: 3 },
            LaunchEvent::Skipped {
                count: 2,
                cause: SkipCause::ConfigFailed,
                in_plan: true,
            },
        ] {
            s.apply(&ev);
        }
        assert_eq!((s.planned, s.ran, s.ok, s.lost, s.running), (4, 1, 1, 1, 0));
        // An anchor counts once it ran, a confirmation trial too; what is
        // queued is counted apart from the plan.
        assert_eq!((s.requeued, s.anchors, s.voided, s.skipped), (1, 0, 3, 2));
        assert_eq!(s.confirm_trials, 1);
        assert_eq!(s.already_done, 2);
    }

    #[test]
    fn rounds_add_up_without_repeating_hosts() {
        let mut a = LaunchSummary {
            ran: 2,
            already_done: 5,
            changed_hosts: vec!["h1".into()],
            ..Default::default()
        };
        let b = LaunchSummary {
            ran: 3,
            already_done: 9,
            changed_hosts: vec!["h1".into(), "h2".into()],
            ..Default::default()
        };
        a.add(&b);
        assert_eq!(a.ran, 5);
        assert_eq!(a.already_done, 5);
        assert_eq!(a.changed_hosts, vec!["h1".to_string(), "h2".to_string()]);
    }
}
