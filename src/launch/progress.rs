//! Progress for people, on stderr: an indicatif bar on a terminal, plain
//! periodic lines otherwise (CI, pipes). The only code that turns launch
//! events into text: the scheduler, the trial runner and the launch driver
//! emit typed [`LaunchEvent`]s, counted by [`LaunchSummary::apply`].

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{HumanDuration, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use tokio::sync::mpsc;

use super::events::{
    Abandon, LaunchEvent, LaunchSummary, SearchStop, SkipCause, Tail, UnrecordedAttempt, Written,
};
use super::run_trial::budget_value;
use crate::ledger::records::AttemptStatus;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar on a terminal, plain lines otherwise.
    Auto,
    Bar,
    Plain,
    /// Nothing but warnings and the final summary.
    Quiet,
}

/// What the launch counts besides the plan's progress: `ok 2 · failed 1 ·
/// running 1 · lost 1 · skipped 3 · anchors 2 · confirm 1/4` (zero counts
/// after `running` left out). Anchors and confirmation-round trials are
/// counted here, not in the bar's total, which stays the plan's; once the
/// plan is over they come first, as they are what still runs. In the tail
/// (fewer trials of the plan left than slots up) the line begins with it:
/// `tail: 3 trials left for 8 slots, 5 idle`.
fn counts_line(c: &LaunchSummary) -> String {
    let mut extra = Vec::new();
    if c.anchors_started > 0 {
        extra.push(format!("anchors {}", c.anchors));
    }
    if c.confirm_queued > 0 {
        extra.push(format!("confirm {}/{}", c.confirm_trials, c.confirm_queued));
    }
    let mut counts = vec![
        format!("ok {}", c.ok),
        format!("failed {}", c.failed),
        format!("running {}", c.running),
    ];
    for (name, n) in [
        ("pruned", c.pruned),
        ("lost", c.lost),
        ("skipped", c.skipped),
    ] {
        if n > 0 {
            counts.push(format!("{name} {n}"));
        }
    }
    let mut line: Vec<String> = c.tail().map(tail_text).into_iter().collect();
    if plan_over(c) {
        line.append(&mut extra);
        line.append(&mut counts);
    } else {
        line.append(&mut counts);
        line.append(&mut extra);
    }
    line.join(" · ")
}

/// `tail: 3 trials left for 8 slots, 5 idle`.
fn tail_text(t: Tail) -> String {
    format!(
        "tail: {} left for {} slots, {} idle",
        crate::fmt::count(t.left, "trial", "trials"),
        t.slots,
        t.idle
    )
}

/// In the tail, the launch takes at least a trial's length (the mean of
/// those that ran) per round of the slots up, however fast the rate of
/// the full launch was.
fn tail_floor(c: &LaunchSummary) -> Option<Duration> {
    let t = c.tail()?;
    let mean = c.mean_trial_secs()?;
    let rounds = t.left.div_ceil(t.slots.max(1)) as f64;
    Duration::try_from_secs_f64(mean * rounds).ok()
}

fn plan_over(c: &LaunchSummary) -> bool {
    c.planned > 0 && c.planned_over() >= c.planned
}

/// The bar's layout: the ETA first and the counts last, in the width
/// left, so that a narrow terminal (80 columns) cuts the counts, never the
/// ETA.
const BAR_TEMPLATE: &str = "{eta_short} [{bar:20}] {pos}/{len} trials · {wide_msg}";

/// The launch's progress bar: its length is the plan's trials, its
/// position those of them that are over.
struct Bar {
    bar: ProgressBar,
    /// The plan is over and trials beyond it (anchors, a confirmation
    /// round) still run: the plan's rate says nothing of how long they take.
    beyond_plan: Arc<AtomicBool>,
    /// In the tail, the least the ETA can be, in ms ([`tail_floor`]; 0
    /// outside it).
    tail_floor_ms: Arc<AtomicU64>,
}

impl Bar {
    fn new(target: ProgressDrawTarget) -> Bar {
        let beyond_plan = Arc::new(AtomicBool::new(false));
        let beyond = beyond_plan.clone();
        let tail_floor_ms = Arc::new(AtomicU64::new(0));
        let floor = tail_floor_ms.clone();
        let style = ProgressStyle::with_template(BAR_TEMPLATE)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key(
                "eta_short",
                move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                    // Before trials of the plan end there is no rate to
                    // estimate from (indicatif then says 0), and after it
                    // nothing to estimate with: unknown, not zero.
                    let eta = s
                        .eta()
                        .max(Duration::from_millis(floor.load(Ordering::Relaxed)));
                    let unknown = s.pos() == 0
                        || (eta.is_zero() && s.pos() < s.len().unwrap_or(0))
                        || beyond.load(Ordering::Relaxed);
                    let _ = if unknown {
                        w.write_str("ETA ?")
                    } else {
                        write!(w, "ETA {:#}", HumanDuration(eta))
                    };
                },
            )
            .progress_chars("=> ");
        // No length until the plan says how many trials: a length of 0
        // draws a full bar.
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(style);
        Bar {
            bar,
            beyond_plan,
            tail_floor_ms,
        }
    }

    fn show(&self, c: &LaunchSummary) {
        let beyond = c.running > 0 || c.confirm_trials < c.confirm_queued;
        self.beyond_plan
            .store(plan_over(c) && beyond, Ordering::Relaxed);
        let floor = tail_floor(c).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.tail_floor_ms.store(floor, Ordering::Relaxed);
        if c.planned > 0 {
            self.bar.set_length(c.planned);
        }
        self.bar.set_position(c.planned_over());
        self.bar.set_message(counts_line(c));
    }
}

/// `--progress plain`'s line, every 10 s: the plan's trials over, an ETA
/// and the counts, and the time since the launch started.
fn plain_line(c: &LaunchSummary, elapsed: Duration) -> String {
    format!(
        "progress: {}/{} trials · {} · {} ({}s)",
        c.planned_over(),
        c.planned,
        plain_eta(c, elapsed),
        counts_line(c),
        elapsed.as_secs()
    )
}

/// The trials of the plan left at the rate the ended ones took (those
/// skipped or found done took no time), and in the tail at least a trial's
/// length ([`tail_floor`]): `ETA ?` before one has ended, and once the
/// plan is over while anchors or a confirmation round still run.
fn plain_eta(c: &LaunchSummary, elapsed: Duration) -> String {
    let over = c.planned_over();
    let left = c.planned.saturating_sub(over);
    let ended = c.planned_ended.saturating_sub(c.voided);
    if ended == 0 || left == 0 {
        return "ETA ?".to_string();
    }
    let eta = elapsed
        .mul_f64(left as f64 / ended as f64)
        .max(tail_floor(c).unwrap_or_default());
    format!("ETA {}", crate::fmt::duration(eta.as_secs_f64()))
}

/// The launch's closing line: what ran (confirmation rounds and anchors
/// among it), what was found done or skipped, and what drift cost.
pub fn summary_line(s: &LaunchSummary) -> String {
    let mut among = Vec::new();
    if s.racing_trials > 0 {
        among.push(format!(
            "{} racing trials where a decision was close",
            s.racing_trials
        ));
    }
    if s.confirm_trials > 0 {
        among.push(format!("{} confirmation trials", s.confirm_trials));
    }
    if s.anchors > 0 {
        among.push(format!("{} baseline anchors", s.anchors));
    }
    let mut drift = Vec::new();
    if s.voided > 0 {
        drift.push(format!(
            "{} measurements discarded after drift (their trials queued again)",
            s.voided
        ));
    }
    if s.dropped_cells > 0 {
        drift.push(format!(
            "{} {} dropped after drift",
            s.dropped_cells,
            if s.dropped_cells == 1 {
                "cell"
            } else {
                "cells"
            }
        ));
    }
    format!(
        "ran {} ({} ok, {}{} failed{}{}), {} lost, {} already in the ledger, {} skipped{}",
        crate::fmt::count(s.ran, "trial", "trials"),
        s.ok.saturating_sub(s.output_changed),
        if s.output_changed > 0 {
            format!("{} with changed output, ", s.output_changed)
        } else {
            String::new()
        },
        s.failed,
        if s.pruned > 0 {
            format!(", {} pruned", s.pruned)
        } else {
            String::new()
        },
        if among.is_empty() {
            String::new()
        } else {
            format!("; among them {}", among.join(" and "))
        },
        s.lost,
        s.already_done,
        s.skipped,
        if drift.is_empty() {
            String::new()
        } else {
            format!("; {}", drift.join(", "))
        }
    )
}

/// An attempt the ledger did not take, on one line.
pub fn unrecorded_line(u: &UnrecordedAttempt) -> String {
    let status = match (u.status, u.failure) {
        (AttemptStatus::Ok, _) => "ok".to_string(),
        (AttemptStatus::Failed, Some(f)) => format!("failed: {}", f.as_str()),
        (AttemptStatus::Failed, None) => "failed".to_string(),
        (AttemptStatus::Lost, _) => "lost".to_string(),
        (AttemptStatus::Pruned, _) => "pruned".to_string(),
    };
    format!(
        "trial {} · {} @ {} · attempt {} on host {} ({status})",
        u.key, u.config, u.cell, u.attempt_id, u.host
    )
}

/// A budget for messages: `81`, `0.5`, or `(none)`.
fn budget_label(budget: Option<f64>) -> String {
    budget_value(budget)
        .map(|v| v.to_string())
        .unwrap_or_else(|| "(none)".to_string())
}

fn skip_text(cause: &SkipCause) -> String {
    match cause {
        SkipCause::BaselineFailed { cell } => {
            format!("the baseline failed at cell {cell}; nothing can win there")
        }
        SkipCause::BaselineLost { cell } => {
            format!("the baseline's attempt at cell {cell} was lost; launch again to run this cell")
        }
        SkipCause::ConfigFailed => "their config already failed in this cell".to_string(),
        SkipCause::CellDroppedEverywhere => {
            "their cell was dropped on every host of the class".to_string()
        }
    }
}

fn search_stop_text(why: &SearchStop) -> String {
    match why {
        SearchStop::BaselineFailed { budget, failure } => format!(
            "the baseline failed at budget {} ({}); nothing can be gated there",
            budget_label(*budget),
            match failure {
                Some((class, detail)) => format!("{}: {detail}", class.as_str()),
                None => "its attempt was lost".to_string(),
            }
        ),
        SearchStop::BaselineLost { budget } => format!(
            "the baseline's rung attempt at budget {} was lost; launch again to search this cell",
            budget_label(*budget)
        ),
        SearchStop::Error(e) => e.clone(),
    }
}

fn duration_text(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// What an event says to people, if anything.
pub fn describe(ev: &LaunchEvent) -> Vec<String> {
    let one = |s: String| vec![s];
    match ev {
        LaunchEvent::Planned {
            to_run,
            already_done,
        } => {
            let mut out = Vec::new();
            if *already_done > 0 {
                out.push(format!(
                    "{already_done} trials already in the ledger; not running them again"
                ));
            }
            out.push(format!("{to_run} trials to run"));
            out
        }
        LaunchEvent::PlanNote { text } => one(text.clone()),
        LaunchEvent::KnownFailures {
            class,
            count,
            source,
        } => one(format!(
            "{count} configs known to fail on {class} (from {source}) are not tried there"
        )),
        LaunchEvent::HostReady {
            host,
            class,
            label,
            nodes,
            ..
        } if nodes.is_empty() => one(format!("host {host}: class {class} ({label})")),
        LaunchEvent::HostReady {
            host,
            class,
            label,
            nodes,
            ..
        } => one(format!(
            "host {host} (slurm nodes {}): class {class} ({label})",
            nodes.join(", ")
        )),
        LaunchEvent::HostUnreachable { host, reason } => one(format!(
            "warning: host `{host}` does not answer ({reason}); the study goes on without it"
        )),
        LaunchEvent::UnreadableObject { key, reason } => one(format!(
            "warning: ignoring unreadable ledger object {key}: {reason} (its trial runs again)"
        )),
        LaunchEvent::More { .. }
        | LaunchEvent::AlreadyDone { .. }
        | LaunchEvent::TrialStarted
        | LaunchEvent::TrialRequeued
        | LaunchEvent::AnchorStarted
        | LaunchEvent::Remeasure { .. } => vec![],
        LaunchEvent::TimeoutRaised {
            trials,
            from_s,
            to_s,
        } => one(format!(
            "note: {} that timed out under trial.timeout {} {} again under {} (the timed-out attempts are voided)",
            crate::fmt::count(*trials as u64, "trial", "trials"),
            crate::fmt::duration_short(*from_s),
            if *trials == 1 { "runs" } else { "run" },
            crate::fmt::duration_short(*to_s),
        )),
        LaunchEvent::Skipped { count, cause, .. } => match cause {
            // Counted, not announced: the failure itself was reported.
            SkipCause::ConfigFailed => vec![],
            _ => one(format!("skipping {count} trials: {}", skip_text(cause))),
        },
        LaunchEvent::TrialFinished { rejection, .. } => match rejection {
            Some(r) => one(format!(
                "rejected {} @ {}: {}: {}",
                r.config,
                r.cell,
                r.class.as_str(),
                r.detail
            )),
            None => vec![],
        },
        LaunchEvent::AttemptUnrecorded {
            error,
            attempt,
            first,
        } => {
            let mut out = vec![format!(
                "error: {error}\nerror: not recorded in the ledger: {}",
                unrecorded_line(attempt)
            )];
            if *first {
                out.push("error: the ledger cannot record attempts: no new trial is started; running trials finish and get one try to record".to_string());
            }
            out
        }
        LaunchEvent::TrialLeftAfterHostLosses { key, losses } => one(format!(
            "warning: a trial ({key}) was running each of the {losses} times a host dropped; it is left for a later launch"
        )),
        LaunchEvent::HostRejoined { host } => {
            one(format!("host `{host}` answers again and rejoins the study"))
        }
        LaunchEvent::HostChanged {
            host,
            changes,
            old_label,
            new_label,
        } => one(format!(
            "warning: host `{host}` came back with another fingerprint ({}): it is a new host class ({new_label}) and leaves this launch; its results so far stay with {old_label}",
            changes.join("; ")
        )),
        LaunchEvent::HostDropped { host, reason } => one(format!(
            "warning: host `{host}` dropped ({reason}); its running trials are queued again on the other hosts of its class; retrying it with back-off"
        )),
        LaunchEvent::ClassAllDown {
            label,
            hosts,
            timeout,
        } => one(format!(
            "warning: every host of class {label} is down ({}); its trials wait up to {} (--host-timeout) for one to answer",
            hosts.join(", "),
            duration_text(*timeout)
        )),
        LaunchEvent::ClassAbandoned { label, left, cause } => match cause {
            Abandon::HostsChangedClass => one(format!(
                "class {label} has no host left (its hosts changed class); its {left} queued trials are not run"
            )),
            Abandon::AllDown { waited } => one(format!(
                "error: every host of class {label} stayed down for {}; its {left} queued trials (and any cell still waiting for a baseline) are left for a later launch",
                duration_text(*waited)
            )),
        },
        LaunchEvent::SearchCannotStart { cell, class, error } => one(format!(
            "error: cannot start the search at cell {cell} on {class}: {error}"
        )),
        LaunchEvent::SearchStopped { cell, error } => {
            one(format!("error: the search at cell {cell} stopped: {error}"))
        }
        LaunchEvent::SearchOver {
            cell,
            class,
            jobs,
            finalists,
        } => one(format!(
            "search at cell {cell} on {class} is over after {jobs} jobs: {} finalists go to the objective stage ({})",
            finalists.len(),
            finalists.join("; ")
        )),
        LaunchEvent::SearchSkipped { cell, class, why } => one(format!(
            "search at cell {cell} on {class} skipped: {}",
            search_stop_text(why)
        )),
        LaunchEvent::AnchorFailed { host, cell } => one(format!(
            "warning: the baseline anchor failed on host {host} at cell {cell}; drift not checked"
        )),
        LaunchEvent::DriftKept {
            host,
            cell,
            drift,
            threshold,
        } => one(format!(
            "warning: host {host} drifted {:.1}% at cell {cell} (anchor vs the reference; threshold {}); --no-cooldown: measurements kept",
            drift * 100.0,
            threshold
        )),
        LaunchEvent::WasSlower {
            host,
            cell,
            gain,
            threshold,
            remeasured,
        } => one(format!(
            "host {host} was slower before: 3 anchors at cell {cell} are {:.1}% better than the reference (threshold {}); re-measuring {remeasured} trials taken in the slower state",
            gain * 100.0,
            threshold
        )),
        LaunchEvent::Drifted {
            host,
            cell,
            drift,
            threshold,
            discarded,
        } => one(format!(
            "host {host} drifted {:.1}% at cell {cell} (3 anchors against the reference; threshold {}): discarding {discarded} measurements since its last clean anchor and cooling down",
            drift * 100.0,
            threshold
        )),
        LaunchEvent::CooledDown {
            host,
            cell: _,
            off,
            against,
            threshold,
            tries,
            remeasured,
        } => one(format!(
            "host {host} cooled down: its anchor is within {:.1}% of {} (threshold {}) after {tries} tries; re-measuring {remeasured} trials",
            off * 100.0,
            against,
            threshold
        )),
        LaunchEvent::CellDropped { host, cell, reason } => {
            one(format!("host {host} drops cell {cell}: {reason}"))
        }
        LaunchEvent::ClassDone {
            class,
            hosts,
            others,
        } => one(format!(
            "class {class} is done: every trial it can run in this launch has ended; its {} ({}) take nothing more from this launch while {} still run{}",
            crate::fmt::count(hosts.len() as u64, "host", "hosts"),
            hosts.join(", "),
            crate::fmt::count(*others as u64, "other class", "other classes"),
            if *others == 1 { "s" } else { "" }
        )),
        LaunchEvent::Stalled {
            class,
            trials,
            searches,
            cells,
        } => one(format!(
            "error: class {class} stopped making progress: nothing runs, and no host of it can take its {trials} queued trials{} (cells {}); they are left for a later launch",
            if *searches > 0 {
                format!(" or finish its {searches} searches")
            } else {
                String::new()
            },
            cells.join("; ")
        )),
        LaunchEvent::BudgetSpent { spent_s, cap_s } => one(format!(
            "budget.max_trial_time {} is spent ({} of trial time): no new trial starts; the running ones finish",
            humantime::format_duration(std::time::Duration::from_secs(cap_s.round() as u64)),
            humantime::format_duration(std::time::Duration::from_secs(spent_s.round() as u64)),
        )),
        LaunchEvent::ConfirmationQueued {
            bucket,
            class,
            trials,
        } => one(format!(
            "confirming the draft winner of bucket {bucket} on {class}: {trials} interleaved trials against the baseline"
        )),
        LaunchEvent::RaceQueued {
            bucket,
            class,
            trials,
            configs,
            runs,
            out,
        } => one(format!(
            "racing in bucket {bucket} on {class}: {configs} {} too close to call; {trials} more interleaved runs with the baseline, up to {runs} each per cell{}",
            if *configs == 1 {
                "config is"
            } else {
                "configs are"
            },
            if *out > 0 {
                format!(" (queued while {out} of its runs are out)")
            } else {
                String::new()
            }
        )),
        LaunchEvent::BaselineRetry { cell, class } => one(format!(
            "the baseline failed at cell {cell} on {class}: running it once more before believing it"
        )),
        LaunchEvent::ConfirmReadFailed { bucket, error } => one(format!(
            "error: cannot read the ledger to confirm bucket {bucket}: {error}"
        )),
        LaunchEvent::LedgerWriteFailed { error, what } => match what {
            Written::Plan { cell } => one(format!(
                "error: {error} (the report keeps cell {cell} a draft until a launch records its plan)"
            )),
            Written::Log | Written::Void | Written::Drop => one(format!("error: {error}")),
        },
        LaunchEvent::LeaseError { error } => {
            one(format!("error: cannot take the lease of a trial: {error}"))
        }
        LaunchEvent::LeaseHeld {
            config,
            cell,
            trial,
            owner,
            host,
            expires_at,
        } => one(format!(
            "waiting for {config} @ {cell} (trial {trial}): its lease is held by {owner} on {host} until {expires_at}"
        )),
        LaunchEvent::LeaseFromTheFuture {
            config,
            cell,
            trial,
            owner,
            host,
            expires_at,
        } => one(format!(
            "warning: the lease of {config} @ {cell} (trial {trial}) held by {owner} on {host} expires at {expires_at}, further ahead than any lease can ({} plus {} of clock skew): a wrong clock or a forged lease; taken over as stale",
            humantime::format_duration(crate::ledger::lease::MAX_LEASE_TTL),
            humantime::format_duration(crate::ledger::lease::CLOCK_SKEW_ALLOWANCE),
        )),
        LaunchEvent::CheckpointNotCarried {
            config,
            cell,
            problem,
        } => one(format!("warning: rung of {config} @ {cell}: {problem}")),
        LaunchEvent::KeptForItsClass {
            config,
            cell,
            node,
            label,
            host,
        } => one(format!(
            "{config} @ {cell} ran on node {node}, of the class {label}: recorded for that class (host {host}), and runs again for its own"
        )),
        LaunchEvent::LeaseLost { config, cell } => one(format!(
            "warning: lost the lease of {config} @ {cell}; stopping it (it will run again)"
        )),
        LaunchEvent::RenderFailed {
            config,
            cell,
            error,
        } => one(format!(
            "error: cannot render the command for {config} @ {cell}: {error}"
        )),
    }
}

/// Consume events until the channel closes.
pub async fn report(mode: ProgressMode, mut rx: mpsc::UnboundedReceiver<LaunchEvent>) {
    let mode = match mode {
        ProgressMode::Auto
            if std::io::stderr().is_terminal() && std::env::var_os("CI").is_none() =>
        {
            ProgressMode::Bar
        }
        ProgressMode::Auto => ProgressMode::Plain,
        m => m,
    };
    let bar = (mode == ProgressMode::Bar).then(|| {
        let b = Bar::new(ProgressDrawTarget::stderr());
        b.bar.enable_steady_tick(Duration::from_millis(200));
        b
    });
    // Host names, failure details and trial output are shown escaped
    // (crate::term), never obeyed.
    let say = |text: &str, warning: bool| match &bar {
        Some(b) => b.bar.println(crate::term::escape_block(text)),
        None if warning || mode != ProgressMode::Quiet => {
            eprintln!("{}", crate::term::escape_block(text))
        }
        None => {}
    };
    let mut c = LaunchSummary::default();
    let started = Instant::now();
    let period = Duration::from_secs(10);
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { break };
                c.apply(&ev);
                let warning = ev.is_warning();
                for line in describe(&ev) {
                    say(&line, warning);
                }
                if let Some(b) = &bar {
                    b.show(&c);
                }
            }
            _ = tick.tick() => {
                if mode == ProgressMode::Plain {
                    eprintln!("{}", plain_line(&c, started.elapsed()));
                }
            }
        }
    }
    if let Some(b) = bar {
        b.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::events::{Setting, Threshold};

    #[test]
    fn thresholds_say_where_they_come_from() {
        let t = Threshold {
            value: 0.123,
            floor: 0.10,
            setting: Setting::CoolDrift,
            k: 3.0,
            noise: Some(0.041),
        };
        assert_eq!(
            t.to_string(),
            "12.3%: the larger of cool_drift 10% and 3 × the anchors' noise 4.1%"
        );
        let t = Threshold { noise: None, ..t };
        assert_eq!(
            t.to_string(),
            "12.3%: cool_drift; the anchors' noise is not known yet"
        );
    }

    #[test]
    fn the_closing_line_counts_confirmations_and_anchors_among_what_ran() {
        let s = LaunchSummary {
            ran: 20,
            ok: 19,
            failed: 1,
            confirm_trials: 4,
            anchors: 3,
            voided: 2,
            dropped_cells: 1,
            ..Default::default()
        };
        assert_eq!(
            summary_line(&s),
            "ran 20 trials (19 ok, 1 failed; among them 4 confirmation trials and 3 baseline anchors), 0 lost, 0 already in the ledger, 0 skipped; 2 measurements discarded after drift (their trials queued again), 1 cell dropped after drift"
        );
    }

    #[test]
    fn the_bar_total_is_the_plan_and_anchors_and_confirmations_are_counted_apart() {
        let mut c = LaunchSummary::default();
        c.apply(&LaunchEvent::Planned {
            to_run: 10,
            already_done: 0,
        });
        let finished = |role| LaunchEvent::TrialFinished {
            status: AttemptStatus::Ok,
            role,
            racing: false,
            rejection: None,
            ok_of: None,
            seconds: 1.0,
        };
        for ev in [
            LaunchEvent::TrialStarted,
            finished(crate::trial::RoleKind::Sweep),
            LaunchEvent::AnchorStarted,
            LaunchEvent::TrialStarted,
            finished(crate::trial::RoleKind::Anchor),
            LaunchEvent::AnchorStarted,
            LaunchEvent::ConfirmationQueued {
                bucket: "n=1".to_string(),
                class: "hc-1".to_string(),
                trials: 4,
            },
            LaunchEvent::TrialStarted,
            finished(crate::trial::RoleKind::Confirm),
            LaunchEvent::TrialRequeued,
            LaunchEvent::TrialStarted,
            finished(crate::trial::RoleKind::Sweep),
        ] {
            c.apply(&ev);
            assert_eq!(c.planned, 10, "the total moved at {ev:?}");
        }
        assert_eq!(c.planned_over(), 2);
        assert_eq!(
            counts_line(&c),
            "ok 4 · failed 0 · running 0 · anchors 1 · confirm 1/4"
        );
        // A measurement discarded after drift runs again: it is not over.
        c.apply(&LaunchEvent::Remeasure { count: 1 });
        assert_eq!((c.planned, c.planned_over()), (10, 1));
        // Trials of the plan found done or skipped are over; those outside
        // it (a cell whose baseline failed in an earlier launch) are not.
        c.apply(&LaunchEvent::AlreadyDone {
            count: 2,
            in_plan: true,
        });
        c.apply(&LaunchEvent::Skipped {
            count: 3,
            cause: SkipCause::ConfigFailed,
            in_plan: true,
        });
        c.apply(&LaunchEvent::Skipped {
            count: 5,
            cause: SkipCause::BaselineFailed {
                cell: "n=2".to_string(),
            },
            in_plan: false,
        });
        assert_eq!((c.planned, c.planned_over()), (10, 6));
    }

    /// A terminal of a given width that keeps what is written to it.
    #[derive(Debug, Clone)]
    struct Screen {
        width: u16,
        text: std::sync::Arc<std::sync::Mutex<String>>,
    }

    impl Screen {
        fn new(width: u16) -> Screen {
            Screen {
                width,
                text: Default::default(),
            }
        }

        /// The last line drawn.
        fn last_line(&self) -> String {
            let text = self.text.lock().map(|t| t.clone()).unwrap_or_default();
            text.lines()
                .rfind(|l| !l.is_empty())
                .unwrap_or_default()
                .to_string()
        }

        fn push(&self, s: &str) {
            if let Ok(mut t) = self.text.lock() {
                t.push_str(s);
            }
        }
    }

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            self.width
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.push(s);
            self.push("\n");
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.push(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.push("\n");
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_tail_is_said_and_its_eta_is_at_least_a_trial_long() {
        let mut c = LaunchSummary::default();
        for (host, slots) in [("a", 4), ("b", 4)] {
            c.apply(&LaunchEvent::HostReady {
                host: host.to_string(),
                class: "hc-1".to_string(),
                label: "H100".to_string(),
                nodes: Vec::new(),
                slots,
            });
        }
        c.apply(&LaunchEvent::Planned {
            to_run: 100,
            already_done: 0,
        });
        // Trials of 30 s of the plan, run to their end.
        let ran = |c: &mut LaunchSummary, n: usize| {
            for _ in 0..n {
                c.apply(&LaunchEvent::TrialStarted);
                c.apply(&LaunchEvent::TrialFinished {
                    status: AttemptStatus::Ok,
                    role: crate::trial::RoleKind::Sweep,
                    racing: false,
                    rejection: None,
                    ok_of: None,
                    seconds: 30.0,
                });
            }
        };
        // 90 ran in 6 minutes, 8 at a time.
        ran(&mut c, 90);
        // 10 left for 8 slots: no tail yet, the rate's ETA (40 s).
        let line = plain_line(&c, Duration::from_secs(360));
        assert!(line.contains(" · ETA 40s · "), "{line}");
        assert!(!line.contains("tail"), "{line}");
        // 3 left, all running: 5 slots idle, and the 3 take a trial's
        // length, not the 12 s the full launch's rate says.
        ran(&mut c, 7);
        for _ in 0..3 {
            c.apply(&LaunchEvent::TrialStarted);
        }
        let line = plain_line(&c, Duration::from_secs(388));
        assert!(line.contains(" · ETA 30s · "), "{line}");
        assert!(
            line.contains("tail: 3 trials left for 8 slots, 5 idle · ok 97"),
            "{line}"
        );
        // Host b drops: 4 slots up, 1 idle.
        c.apply(&LaunchEvent::HostDropped {
            host: "b".to_string(),
            reason: crate::transport::TransportError::Ssh {
                detail: "connection reset".to_string(),
            },
        });
        assert_eq!(
            c.tail(),
            Some(crate::launch::events::Tail {
                left: 3,
                slots: 4,
                idle: 1
            })
        );
        c.apply(&LaunchEvent::HostRejoined {
            host: "b".to_string(),
        });
        assert_eq!(c.slots_up(), 8);
    }

    #[test]
    fn a_plain_line_has_an_eta_from_the_trials_that_ran() {
        let mut c = LaunchSummary {
            planned: 100,
            ..Default::default()
        };
        let line = plain_line(&c, Duration::from_secs(10));
        assert!(
            line.starts_with("progress: 0/100 trials · ETA ? · "),
            "{line}"
        );
        // 20 ran in 40 s, 30 were found done: 50 left at 2 s each.
        c.planned_ended = 20;
        c.planned_found_done = 30;
        let line = plain_line(&c, Duration::from_secs(40));
        assert!(
            line.starts_with("progress: 50/100 trials · ETA 1m 40s · "),
            "{line}"
        );
        assert!(line.ends_with(" (40s)"), "{line}");
        // The plan is over: nothing to estimate.
        c.planned_ended = 70;
        assert!(plain_line(&c, Duration::from_secs(90)).contains(" · ETA ? · "));
    }

    #[test]
    fn before_the_plan_the_bar_is_empty_not_full() {
        let screen = Screen::new(80);
        let b = Bar::new(ProgressDrawTarget::term_like(Box::new(screen.clone())));
        b.show(&LaunchSummary::default());
        b.bar.tick();
        let line = screen.last_line();
        assert!(
            line.starts_with("ETA ? [                    ] 0/"),
            "{line:?}"
        );
        assert!(!line.contains('='), "{line:?}");
    }

    #[test]
    fn at_80_columns_the_bar_shows_its_eta_and_cuts_the_counts() {
        let screen = Screen::new(80);
        let b = Bar::new(ProgressDrawTarget::term_like(Box::new(screen.clone())));
        let mut c = LaunchSummary {
            planned: 1200,
            running: 8,
            ..Default::default()
        };
        b.show(&c);
        b.bar.tick();
        let line = screen.last_line();
        assert!(line.starts_with("ETA ? ["), "{line:?}");
        // A rate needs time between two positions.
        c.planned_ended = 10;
        b.show(&c);
        std::thread::sleep(std::time::Duration::from_millis(100));
        c.planned_ended = 400;
        c.ok = 390;
        c.failed = 10;
        c.lost = 3;
        c.skipped = 12;
        c.planned_skipped = 12;
        c.anchors_started = 40;
        c.anchors = 38;
        c.confirm_queued = 24;
        c.confirm_trials = 10;
        b.show(&c);
        b.bar.tick();
        let line = screen.last_line();
        assert!(line.starts_with("ETA "), "{line:?}");
        assert!(!line.starts_with("ETA ?"), "{line:?}");
        assert!(line.contains(" 412/1200 trials · ok 390"), "{line:?}");
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line:?}",
            line.chars().count()
        );
        // The counts that do not fit are cut, not wrapped.
        assert!(!line.contains("confirm"), "{line:?}");
        // The plan is over, a confirmation round runs: what it does comes
        // first, and the plan's rate gives no ETA for it.
        c.planned_ended = 1188;
        c.running = 1;
        b.show(&c);
        b.bar.tick();
        let line = screen.last_line();
        assert!(
            line.starts_with("ETA ? [")
                && line.contains(" 1200/1200 trials · anchors 38 · confirm 10/24 · ok "),
            "{line:?}"
        );
    }

    #[test]
    fn counted_events_say_nothing_and_warnings_say_why() {
        assert!(describe(&LaunchEvent::More { count: 3 }).is_empty());
        let lines = describe(&LaunchEvent::Skipped {
            in_plan: true,
            count: 4,
            cause: SkipCause::BaselineFailed {
                cell: "n=1".to_string(),
            },
        });
        assert_eq!(
            lines,
            vec!["skipping 4 trials: the baseline failed at cell n=1; nothing can win there"]
        );
        let ev = LaunchEvent::HostDropped {
            host: "h1".to_string(),
            reason: crate::transport::TransportError::Ssh {
                detail: "connection reset".to_string(),
            },
        };
        assert!(ev.is_warning());
        assert!(describe(&ev)[0].starts_with("warning: host `h1` dropped (connection reset)"));
    }
}
