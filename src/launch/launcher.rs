//! One launch, once its inputs are read and its hosts chosen: its rounds
//! (a round starts again when a host changed class mid-launch), Ctrl-C,
//! and the verdicts written at the end. What it comes to is a typed
//! [`LaunchOutcome`]; what it says as it goes is a typed [`LaunchNote`].
//! Neither holds a sentence: the words are the caller's
//! (`commands/launch.rs`), which also maps the outcome to an exit code.

use std::sync::Arc;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::events::LaunchSummary;
use super::progress::{self, ProgressMode};
use super::run_study::{self, LaunchError, LaunchHost, LaunchOptions};
use crate::decide::{BucketReport, ClassReport, Level, LevelReasons};
use crate::ledger::Ledger;
use crate::ledger::records::FailureClass;
use crate::spec::Study;

/// Launch rounds at most in one launch (a round starts again when a host's
/// fingerprint changed).
pub const MAX_LAUNCH_ROUNDS: usize = 3;

/// How a launch that ran ended, in the order it is decided: the first that
/// applies is the outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum LaunchOutcome {
    /// Attempts ran that the ledger (at `ledger`) did not record: the
    /// launch stopped starting trials and wrote no verdicts.
    Unrecorded { ledger: String, attempts: usize },
    /// Ctrl-C: running trials were killed and recorded as lost.
    Interrupted,
    /// Host classes that lost every host past `--host-timeout`: (class
    /// label, trials left).
    HostsLost { classes: Vec<(String, usize)> },
    /// `budget.max_trial_time` was spent: the launch stopped starting
    /// trials (seconds).
    BudgetSpent { spent: f64, cap: f64 },
    /// Classes whose watchdog ended them: (class label, trials left).
    Stalled { classes: Vec<(String, u64)> },
    /// Cells whose baseline failed its first run and its re-run.
    BaselineFails { failures: Vec<BaselineFailure> },
    /// The launch finished, but some buckets are drafts;
    /// `dropped_cells`: cells dropped after drift in this launch.
    Drafts {
        drafts: Vec<DraftBucket>,
        dropped_cells: u64,
    },
    /// Every bucket is a VERDICT.
    Verdict,
}

/// A bucket that ended as a draft, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftBucket {
    pub host_class: String,
    pub bucket: String,
    pub reason: LevelReasons,
}

/// A cell whose baseline fails reproducibly.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineFailure {
    pub host_class: String,
    pub cell: String,
    /// The failure class (`crash`, `timeout`...) and its detail.
    pub class: FailureClass,
    pub detail: String,
    /// The head of its stderr (12 lines at most).
    pub log: Vec<String>,
}

/// One bucket's decision, as written to its verdict record.
#[derive(Debug, Clone, Serialize)]
pub struct BucketOutcome {
    pub host_class: String,
    pub class_label: String,
    pub bucket: String,
    /// The winner's label, or `baseline`.
    pub ships: String,
    pub level: String,
    pub decision: String,
    /// The decision's stable code ([`crate::decide::Decision::code`]).
    pub outcome: &'static str,
    pub level_reason: String,
    /// The level reasons' stable codes.
    pub level_because: Vec<&'static str>,
}

impl BucketOutcome {
    pub fn of(class: &ClassReport, bucket: &BucketReport) -> BucketOutcome {
        BucketOutcome {
            host_class: class.host_class.clone(),
            class_label: class.label.clone(),
            bucket: bucket.label.clone(),
            ships: bucket
                .winner
                .as_ref()
                .map_or_else(|| "baseline".to_string(), |w| w.label.clone()),
            level: bucket.level.as_str().to_string(),
            decision: bucket.decision.to_string(),
            outcome: bucket.decision.code(),
            level_reason: bucket.level_reason.to_string(),
            level_because: bucket.level_reason.codes(),
        }
    }
}

/// What a launch tells as it goes, in its order.
pub enum LaunchNote<'a> {
    /// The rounds start.
    Launching { study_id: &'a str, ledger: &'a str },
    /// Ctrl-C: the launch stops.
    Interrupted,
    /// Hosts changed class mid-launch: another round probes them again.
    AnotherRound { hosts: &'a [String] },
    /// The rounds are over (unreachable hosts, abandoned classes and
    /// unrecorded attempts are in the summary).
    RoundsOver { summary: &'a LaunchSummary },
    /// A bucket's verdict record was written.
    Verdict {
        class: &'a ClassReport,
        bucket: &'a BucketReport,
    },
    /// The verdicts are written (or were not, after unrecorded attempts).
    Finished { summary: &'a LaunchSummary },
}

/// Who hears a launch's notes (also from the Ctrl-C task).
pub type Narrator = Arc<dyn Fn(&LaunchNote<'_>) + Send + Sync>;

/// What a launch did.
pub struct Launched {
    /// Its counts; `None` when it stopped in an error before its rounds
    /// were over.
    pub summary: Option<LaunchSummary>,
    /// Every bucket's decision, as written (those written before an
    /// error too).
    pub buckets: Vec<BucketOutcome>,
    pub outcome: Result<LaunchOutcome, LaunchError>,
}

impl Launched {
    fn stopped(summary: Option<LaunchSummary>, e: LaunchError) -> Launched {
        Launched {
            summary,
            buckets: Vec::new(),
            outcome: Err(e),
        }
    }
}

/// A launch of `study` as `study_id` into `ledger`.
pub struct Launcher<'a> {
    pub study: &'a Study,
    pub study_id: &'a str,
    pub ledger: &'a Ledger,
    pub options: LaunchOptions,
    pub progress: ProgressMode,
    pub narrator: Narrator,
}

impl Launcher<'_> {
    /// Run the rounds on the hosts `hosts` makes (anew for each round),
    /// until Ctrl-C or the end, then write the verdicts.
    pub async fn run(
        self,
        mut hosts: impl FnMut() -> Result<Vec<LaunchHost>, LaunchError>,
    ) -> Launched {
        let Launcher {
            study,
            study_id,
            ledger,
            options,
            progress: progress_mode,
            narrator: tell,
        } = self;
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        let told = tell.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                told(&LaunchNote::Interrupted);
                on_signal.cancel();
            }
        });
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let reporter = tokio::spawn(progress::report(progress_mode, rx));
        tell(&LaunchNote::Launching {
            study_id,
            ledger: ledger.url(),
        });
        let mut summary = LaunchSummary::default();
        // A host whose fingerprint changed mid-launch is a new host class:
        // the launch goes round again (probing anew) so that class is
        // tuned too.
        for round in 0..MAX_LAUNCH_ROUNDS {
            let round_hosts = match hosts() {
                Ok(h) => h,
                Err(e) => return Launched::stopped(None, e),
            };
            let round_options = options.clone();
            let result = run_study::run_study(
                study,
                study_id,
                ledger,
                round_hosts,
                round_options,
                tx.clone(),
                cancel.clone(),
            )
            .await;
            let this = match result {
                Ok(s) => s,
                Err(e) => {
                    drop(tx);
                    let _ = reporter.await;
                    return Launched::stopped(None, e);
                }
            };
            let again =
                !this.changed_hosts.is_empty() && !this.interrupted && this.unrecorded.is_empty();
            summary.add(&this);
            if !again {
                break;
            }
            if round + 1 < MAX_LAUNCH_ROUNDS {
                tell(&LaunchNote::AnotherRound {
                    hosts: &this.changed_hosts,
                });
            }
        }
        drop(tx);
        let _ = reporter.await;
        tell(&LaunchNote::RoundsOver { summary: &summary });
        // Attempts that ran and are not in the ledger: verdicts derived
        // now would rest on an incomplete record, so the ones there stay.
        let unrecorded = !summary.unrecorded.is_empty();
        // Verdicts: derived from the ledger, rewritten after every launch;
        // not after attempts went unrecorded (they stay as they were).
        let mut buckets = Vec::new();
        let mut drafts = Vec::new();
        let mut baseline_failures = Vec::new();
        // This launch's ok trials of configs the gate rejected as output
        // changed.
        let mut output_changed = 0u64;
        if !unrecorded {
            let written = crate::report::write_verdicts(
                ledger,
                study_id,
                Some(&study.frozen()),
                |class, bucket| {
                    buckets.push(BucketOutcome::of(class, bucket));
                    let cells = class
                        .cells
                        .iter()
                        .filter(|c| bucket.cells.contains(&c.cell_label));
                    for cell in cells {
                        for r in &cell.rejected {
                            if r.rejection.as_ref().map(|x| x.class)
                                == Some(FailureClass::OutputChanged)
                            {
                                let of = (
                                    class.host_class.clone(),
                                    cell.cell_label.clone(),
                                    r.label.clone(),
                                );
                                output_changed += summary.ok_of.get(&of).copied().unwrap_or(0);
                            }
                        }
                    }
                    for pc in &bucket.per_cell {
                        if let Some(r) = pc.baseline.as_ref().and_then(|b| b.rejection.as_ref()) {
                            baseline_failures.push(BaselineFailure {
                                host_class: class.host_class.clone(),
                                cell: pc.cell_label.clone(),
                                class: r.class,
                                detail: r.detail.clone(),
                                log: r.log.lines().take(12).map(str::to_string).collect(),
                            });
                        }
                    }
                    if bucket.level != Level::Verdict {
                        drafts.push(DraftBucket {
                            host_class: class.host_class.clone(),
                            bucket: bucket.label.clone(),
                            reason: bucket.level_reason.clone(),
                        });
                    }
                    tell(&LaunchNote::Verdict { class, bucket });
                },
            )
            .await;
            if let Err(e) = written {
                return Launched {
                    summary: Some(summary),
                    buckets,
                    outcome: Err(e.into()),
                };
            }
        }
        summary.output_changed = output_changed;
        tell(&LaunchNote::Finished { summary: &summary });
        let outcome = outcome_of(ledger.url(), &summary, baseline_failures, drafts);
        Launched {
            summary: Some(summary),
            buckets,
            outcome: Ok(outcome),
        }
    }
}

/// What a launch whose rounds ended with `summary` comes to.
fn outcome_of(
    ledger: &str,
    summary: &LaunchSummary,
    baseline_failures: Vec<BaselineFailure>,
    drafts: Vec<DraftBucket>,
) -> LaunchOutcome {
    if !summary.unrecorded.is_empty() {
        LaunchOutcome::Unrecorded {
            ledger: ledger.to_string(),
            attempts: summary.unrecorded.len(),
        }
    } else if summary.interrupted {
        LaunchOutcome::Interrupted
    } else if !summary.abandoned_classes.is_empty() {
        LaunchOutcome::HostsLost {
            classes: summary.abandoned_classes.clone(),
        }
    } else if let Some((spent, cap)) = summary.budget_spent {
        LaunchOutcome::BudgetSpent { spent, cap }
    } else if !summary.stalled.is_empty() {
        LaunchOutcome::Stalled {
            classes: summary.stalled.clone(),
        }
    } else if !baseline_failures.is_empty() {
        LaunchOutcome::BaselineFails {
            failures: baseline_failures,
        }
    } else if !drafts.is_empty() {
        LaunchOutcome::Drafts {
            drafts,
            dropped_cells: summary.dropped_cells,
        }
    } else {
        LaunchOutcome::Verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft() -> DraftBucket {
        DraftBucket {
            host_class: "c".into(),
            bucket: "b".into(),
            reason: LevelReasons::default(),
        }
    }

    fn failure() -> BaselineFailure {
        BaselineFailure {
            host_class: "c".into(),
            cell: "n=1".into(),
            class: FailureClass::Crash,
            detail: "exit code 3".into(),
            log: Vec::new(),
        }
    }

    #[test]
    fn the_first_that_applies_is_the_outcome() {
        let mut s = LaunchSummary {
            dropped_cells: 2,
            ..Default::default()
        };
        let of = |s: &LaunchSummary| outcome_of("file:///l", s, vec![failure()], vec![draft()]);
        assert_eq!(
            outcome_of("file:///l", &s, Vec::new(), Vec::new()),
            LaunchOutcome::Verdict
        );
        assert_eq!(
            outcome_of("file:///l", &s, Vec::new(), vec![draft()]),
            LaunchOutcome::Drafts {
                drafts: vec![draft()],
                dropped_cells: 2
            }
        );
        assert_eq!(
            of(&s),
            LaunchOutcome::BaselineFails {
                failures: vec![failure()]
            }
        );
        s.stalled = vec![("c".into(), 4)];
        assert!(matches!(of(&s), LaunchOutcome::Stalled { .. }));
        s.budget_spent = Some((10.0, 5.0));
        assert_eq!(
            of(&s),
            LaunchOutcome::BudgetSpent {
                spent: 10.0,
                cap: 5.0
            }
        );
        s.abandoned_classes = vec![("c".into(), 3)];
        assert!(matches!(of(&s), LaunchOutcome::HostsLost { .. }));
        s.interrupted = true;
        assert_eq!(of(&s), LaunchOutcome::Interrupted);
        s.unrecorded = vec![super::super::events::UnrecordedAttempt {
            key: "k".into(),
            config: "x".into(),
            cell: "n=1".into(),
            attempt_id: "a".into(),
            host: "h".into(),
            status: crate::ledger::records::AttemptStatus::Ok,
            failure: None,
        }];
        assert_eq!(
            of(&s),
            LaunchOutcome::Unrecorded {
                ledger: "file:///l".into(),
                attempts: 1
            }
        );
    }
}
