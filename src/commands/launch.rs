//! `tunectl launch`: run a study's trials on the inventory's hosts, record
//! every attempt, then write each bucket's verdict.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::hosts::{ssh_control_dir, transport_for};
use super::inputs::{Resolved, fork_id, ledger_url, load_inputs, resolution_notes, resolve};
use super::notify::{self, LaunchEnd, OutcomeSchema};
use super::plan;
use super::{CliError, Exit, failed, note, print_json, say_err, schema};
use crate::launch::launcher::{LaunchNote, LaunchOutcome, Launcher, Narrator};
use crate::launch::progress;
use crate::launch::run_study::{LaunchError, LaunchHost, LaunchOptions};
use crate::launch::run_trial::Spend;
use crate::ledger::Ledger;
use crate::plan::PlanOnce;
use crate::space::ConfigSpace;
use crate::spec::{Host, Inventory, Study, Transport};

/// Probe, plan and run the study's trials, then write the verdicts; then
/// run the notify command, if any, with the outcome.
pub async fn run(a: LaunchArgs) -> Result<(), CliError> {
    let mut end = LaunchEnd {
        started: Some(std::time::Instant::now()),
        ..Default::default()
    };
    let ended = launch(&a, &mut end).await;
    if let Some(command) = end.notify.clone() {
        notify::run(&command, &end.outcome(&ended)).await;
    }
    if a.output.json(false) {
        print_json(&end.outcome_as(&ended, OutcomeSchema::Named(schema::LAUNCH)))?;
    }
    let outcome = ended?;
    match exit_of(&outcome) {
        Exit::Success => Ok(()),
        exit => Err(CliError::Launch(exit, said(&outcome))),
    }
}

/// What a launch's outcome comes to (docs/cli.md, exit codes).
pub fn exit_of(outcome: &LaunchOutcome) -> Exit {
    match outcome {
        LaunchOutcome::Verdict => Exit::Success,
        LaunchOutcome::Unrecorded { .. }
        | LaunchOutcome::HostsLost { .. }
        | LaunchOutcome::BudgetSpent { .. }
        | LaunchOutcome::BaselineFails { .. } => Exit::Failed,
        LaunchOutcome::Drafts { .. } => Exit::Drafts,
        LaunchOutcome::Stalled { .. } => Exit::Stalled,
        LaunchOutcome::Interrupted => Exit::Interrupted,
    }
}

/// What is said of a launch's outcome on stderr, and in the `message` of
/// its JSON and notify documents; `None` on exit 0 and for an interrupt
/// (said as it happened).
pub fn said(outcome: &LaunchOutcome) -> Option<String> {
    Some(match outcome {
        LaunchOutcome::Verdict | LaunchOutcome::Interrupted => return None,
        LaunchOutcome::Unrecorded { ledger, .. } => format!(
            "the ledger {ledger} could not record every attempt: the launch stopped starting trials, and no verdicts were written (fix the ledger and launch again)"
        ),
        LaunchOutcome::HostsLost { .. } => {
            "the study is incomplete: a host class lost every host (see above)".to_string()
        }
        LaunchOutcome::BudgetSpent { spent, cap } => format!(
            "the launch stopped starting trials at budget.max_trial_time {} ({} of trial time spent): the study is incomplete; launch again (with a higher cap) to go on: nothing that ran runs again",
            fmt_secs(*cap),
            fmt_secs(*spent)
        ),
        LaunchOutcome::Stalled { classes } => {
            let classes: Vec<String> = classes
                .iter()
                .map(|(c, n)| format!("{c}: {n} trials"))
                .collect();
            format!(
                "the launch stopped making progress: no host could take what was left of {} (see above); launch again to run them",
                classes.join(", ")
            )
        }
        LaunchOutcome::BaselineFails { failures } => {
            let lines: Vec<String> = failures
                .iter()
                .map(|f| {
                    format!(
                        "{} · cell {}: {}: {}{}",
                        f.host_class,
                        f.cell,
                        f.class.as_str(),
                        f.detail,
                        if f.log.is_empty() {
                            String::new()
                        } else {
                            format!("\n    its stderr:\n      {}", f.log.join("\n      "))
                        }
                    )
                })
                .collect();
            format!(
                "the baseline fails reproducibly (its first run and its re-run), so nothing can be judged there: an error of the study, not a verdict; fix the command or the defaults and launch again:\n  {}",
                lines.join("\n  ")
            )
        }
        LaunchOutcome::Drafts {
            drafts,
            dropped_cells,
        } => {
            let lines: Vec<String> = drafts
                .iter()
                .map(|d| format!("{} · {}: {}", d.host_class, d.bucket, d.reason))
                .collect();
            format!(
                "the launch finished, but not every bucket is a VERDICT ({} {}{}); what export writes for them is not final:\n  {}",
                drafts.len(),
                if drafts.len() == 1 { "draft" } else { "drafts" },
                if *dropped_cells > 0 {
                    format!(
                        ", {} dropped after drift",
                        crate::fmt::count(*dropped_cells, "cell", "cells")
                    )
                } else {
                    String::new()
                },
                lines.join("\n  ")
            )
        }
    })
}

/// The command that shows a launch's evidence, ready to paste into a shell:
/// `tunectl report <study>`, with `--ledger <url>` when `ledger` is given.
fn report_command(study: &std::path::Path, ledger: Option<&str>) -> String {
    use crate::shell_quote::quote_word;
    let mut cmd = format!(
        "tunectl report {}",
        quote_word(&study.display().to_string())
    );
    if let Some(url) = ledger {
        cmd.push_str(" --ledger ");
        cmd.push_str(&quote_word(url));
    }
    cmd
}

/// What a launch says as it goes, on stderr; `report`: the command that
/// shows the evidence.
fn narrator(report: String) -> Narrator {
    Arc::new(move |n: &LaunchNote<'_>| match n {
        LaunchNote::Launching { study_id, ledger } => {
            note!("launching study {study_id} · ledger {ledger}");
        }
        LaunchNote::Interrupted => {
            say_err!("interrupted: stopping; running trials are killed and recorded as lost");
        }
        LaunchNote::AnotherRound { hosts } => {
            note!(
                "hosts {} changed class mid-launch: probing again to tune their new class",
                hosts.join(", ")
            );
        }
        LaunchNote::RoundsOver { summary } => {
            for (h, why) in &summary.unreachable_hosts {
                say_err!("warning: host {h}: {why} (skipped in this launch)");
            }
            for (c, left) in &summary.abandoned_classes {
                say_err!(
                    "warning: class {c}: {left} queued trials not run: every host stayed down past --host-timeout; launch again when they answer"
                );
            }
            if !summary.unrecorded.is_empty() {
                eprintln!(
                    "error: {} attempts were NOT recorded in the ledger (their trials run again on a later launch):",
                    summary.unrecorded.len()
                );
                for u in &summary.unrecorded {
                    eprintln!("  {}", progress::unrecorded_line(u));
                }
            }
        }
        LaunchNote::Verdict { class, bucket } => {
            note!(
                "{} · {}: ships {} [{}] · {}",
                class.host_class,
                bucket.label,
                bucket
                    .winner
                    .as_ref()
                    .map(|w| w.label.as_str())
                    .unwrap_or("baseline"),
                bucket.level.as_str().to_uppercase(),
                bucket.decision
            );
        }
        LaunchNote::Finished { summary } => {
            note!(
                "{} · `{report}` shows the evidence",
                progress::summary_line(summary),
            );
        }
    })
}

/// What `--host` names: per inventory entry, `None` for the whole entry,
/// or the parts of a mixed Slurm entry (`gpus.h100`: one host class of its
/// partition, named as the launch prints it; found when it starts).
/// Empty when no `--host` is given (every entry). A name that is neither
/// an entry nor `<slurm entry>.<tag>` is refused, with the hosts listed.
fn host_selection<'a>(
    inv: &'a Inventory,
    names: &[String],
) -> Result<BTreeMap<&'a str, Option<Vec<String>>>, CliError> {
    let mut out: BTreeMap<&str, Option<Vec<String>>> = BTreeMap::new();
    for name in names {
        if let Some(h) = inv.host(name) {
            out.insert(h.name.as_str(), None);
            continue;
        }
        // The longest slurm entry's name that `name` extends with `.TAG`.
        let entry = inv
            .hosts
            .iter()
            .filter(|h| matches!(h.transport, Transport::Slurm(_)))
            .filter(|h| {
                name.strip_prefix(h.name.as_str())
                    .and_then(|rest| rest.strip_prefix('.'))
                    .is_some_and(|tag| !tag.is_empty())
            })
            .max_by_key(|h| h.name.len());
        let Some(entry) = entry else {
            let known: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
            return Err(CliError::Invalid(format!(
                "--host {name}: no such host in the inventory (hosts: {}; a host class of a mixed Slurm partition is named ENTRY.TAG, as the launch and `tunectl plan` print it)",
                known.join(", ")
            )));
        };
        // (When the whole entry is named too, it has every part.)
        if let Some(parts) = out.entry(entry.name.as_str()).or_insert(Some(Vec::new()))
            && !parts.contains(name)
        {
            parts.push(name.clone());
        }
    }
    Ok(out)
}

/// A launch that stopped in an error: invalid input (exit 2) when the
/// study cannot be planned or its spec changed, else exit 1.
fn stopped(e: LaunchError) -> CliError {
    match e {
        LaunchError::SpecChanged { .. } | LaunchError::Invalid(_) => {
            CliError::Invalid(e.to_string())
        }
        LaunchError::Ledger(_)
        | LaunchError::ProbeFailed { .. }
        | LaunchError::NoHostAnswered { .. }
        | LaunchError::Hosts(_) => failed(e),
    }
}

async fn launch(a: &LaunchArgs, end: &mut LaunchEnd) -> Result<LaunchOutcome, CliError> {
    let (study, inv) = load_inputs(&a.study, a.inventory.as_deref())?;
    // From here on the launch's end is worth telling.
    end.notify = a.notify.clone().or_else(|| inv.notify.clone());
    end.name = study.id().to_string();
    end.study_id = study.id().to_string();
    end.report = report_command(&a.study, None);
    let only = host_selection(&inv, &a.hosts)?;
    let selected: Vec<&crate::spec::Host> = inv
        .hosts
        .iter()
        .filter(|h| a.hosts.is_empty() || only.contains_key(h.name.as_str()))
        .collect();
    let url = ledger_url(a.ledger.as_deref(), Some(&study), Some(&inv));
    let ledger = Ledger::open(&url).map_err(failed)?;
    end.ledger = ledger.url().to_string();
    // `report` reads the flag (or TUNECTL_LEDGER) and the study's own
    // ledger, never the inventory's: the command names the ledger unless
    // the study file alone leads `report` to it.
    let named = a.ledger.is_some() || (study.ledger.is_none() && inv.ledger.is_some());
    end.report = report_command(&a.study, named.then(|| ledger.url()));
    // An unreachable or unreadable store stops the launch before any trial.
    ledger.check_reachable().await.map_err(failed)?;
    // The study this file means: its name, or the fork of its spec that a
    // launch with `--fork` started (relaunching it needs no `--fork`).
    let file = a.study.display().to_string();
    let study_id = match resolve(&ledger, &study).await? {
        Resolved::Launched { record, fork } => {
            resolution_notes(&file, &study, &record, fork, true);
            let running = study.frozen().running_changes_from(&record.spec);
            if !running.is_empty() {
                note!(
                    "note: running `{}` with {file}'s {}, changed since it was launched (not a new study: it does not change what a measurement means); what ran before stays as recorded, a trial that timed out included (`--fork` measures them all again)",
                    record.study_id,
                    running.join("; ")
                );
            }
            record.study_id
        }
        Resolved::New => study.id().to_string(),
        Resolved::Changed { .. } if a.fork => {
            let id = fork_id(&study);
            note!(
                "forking: this spec differs from the ledger's `{}`; recording it as study `{id}`",
                study.id()
            );
            id
        }
        // Refused with the changes named when the launch registers it.
        Resolved::Changed { .. } => study.id().to_string(),
    };
    end.study_id = study_id.clone();
    let prior = match &a.seed_from {
        Some(from) => Some(Arc::new(load_prior(from, &study, &ledger).await?)),
        None => None,
    };
    // The plan is listed once for the launch: here with a shard, else by
    // the spend check or the first round, whichever comes first.
    let plans = Arc::new(PlanOnce::new(a.shard));
    if a.shard.is_some() {
        // Refused before anything runs (the plan says why).
        plans.get(&study).map_err(CliError::Invalid)?;
    }
    check_spend(a, &study, &inv, &selected, &study_id, &ledger, &plans).await?;
    let work_root = a
        .workdir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("tunectl-work"));
    // Trials run inside their own directories: the root must be absolute.
    let work_root = std::path::absolute(&work_root).map_err(failed)?;
    let control_dir = ssh_control_dir().map_err(failed)?;
    let make_hosts = || -> Result<Vec<LaunchHost>, CliError> {
        selected
            .iter()
            .map(|h| {
                let transport =
                    transport_for(h, &inv, &work_root, &control_dir, a.keep_workdirs)?;
                if let Transport::Ssh(cfg) = &h.transport
                    && h.slots > cfg.max_sessions
                {
                    say_err!(
                        "warning: host `{}` has {} slots but max_sessions {}: at most {} of its trials run at once",
                        h.name, h.slots, cfg.max_sessions, cfg.max_sessions
                    );
                }
                Ok(LaunchHost {
                    name: h.name.clone(),
                    transport_name: h.transport.name().to_string(),
                    slots: h.concurrency(),
                    devices: h.devices.clone(),
                    device_env: h.device_env.clone(),
                    transport,
                    only_parts: only.get(h.name.as_str()).cloned().flatten(),
                })
            })
            .collect()
    };
    // Bad templates or login hosts stop the launch before anything runs.
    make_hosts()?;
    let progress_mode = if super::quiet() {
        progress::ProgressMode::Quiet
    } else {
        a.progress
    };
    let launched = Launcher {
        study: &study,
        study_id: &study_id,
        ledger: &ledger,
        options: LaunchOptions {
            no_cooldown: a.no_cooldown,
            store_logs: a.store_logs,
            host_timeout: a.host_timeout,
            prior,
            shard: a.shard,
            spend: Arc::new(Spend::new(study.budget.max_trial_time)),
            plan: plans,
        },
        progress: progress_mode,
        narrator: narrator(end.report.clone()),
    }
    .run(|| {
        make_hosts().map_err(|e| match e {
            CliError::Invalid(m) => LaunchError::Invalid(m),
            e => LaunchError::Hosts(e.message().unwrap_or_default().to_string()),
        })
    })
    .await;
    end.summary = launched.summary;
    end.buckets = launched.buckets;
    launched.outcome.map_err(stopped)
}

/// Refuse a launch that would spend more trial time than the study's
/// `budget.max_trial_time` by the plan's estimate, or that runs on remote
/// hosts without a cap, unless `--yes` acknowledges it. The ledger's
/// attempts of the study, when it read them.
async fn check_spend(
    a: &LaunchArgs,
    study: &Study,
    inv: &Inventory,
    selected: &[&Host],
    study_id: &str,
    ledger: &Ledger,
    plans: &PlanOnce,
) -> Result<(), CliError> {
    let cap = study.budget.max_trial_time;
    let remote: Vec<&str> = selected
        .iter()
        .filter(|h| !matches!(h.transport, Transport::Local))
        .map(|h| h.name.as_str())
        .collect();
    if a.yes || (cap.is_none() && remote.is_empty()) {
        return Ok(());
    }
    let hosts = Inventory {
        hosts: selected.iter().map(|h| (*h).clone()).collect(),
        ..inv.clone()
    };
    let outlook = plan::outlook(study, &hosts, study_id, Some(ledger), plans).await?;
    let (expected, worst) = outlook.trial_seconds(study);
    let what = match expected {
        Some(e) => format!(
            "the plan's estimate is {} of trial time (from the median of {} run times in the ledger; at most {} with every run at its timeout)",
            fmt_secs(e),
            outlook.timings.len(),
            fmt_secs(worst)
        ),
        None => format!(
            "the plan's estimate is at most {} of trial time (every run at its timeout: the ledger has no run times yet)",
            fmt_secs(worst)
        ),
    };
    match cap {
        None => Err(CliError::Invalid(format!(
            "this launch runs on remote hosts ({}) and the study sets no budget.max_trial_time; {what}. Set a cap, or pass --yes to launch without one (`tunectl plan` shows the cost per host class)",
            remote.join(", ")
        ))),
        Some(cap) => match expected {
            Some(e) if e > cap.as_secs_f64() => Err(CliError::Invalid(format!(
                "{what}, more than budget.max_trial_time {}. Raise the cap, or pass --yes to launch anyway: it stops starting trials at the cap, and a later launch goes on",
                fmt_secs(cap.as_secs_f64())
            ))),
            Some(_) => Ok(()),
            // Nothing to estimate from but the timeouts: the cap is the
            // acknowledgement, and the launch stops at it.
            None if worst > cap.as_secs_f64() => {
                note!(
                    "note: {what}; budget.max_trial_time {} stops the launch if it gets there",
                    fmt_secs(cap.as_secs_f64())
                );
                Ok(())
            }
            None => Ok(()),
        },
    }
}

use crate::fmt::duration as fmt_secs;

#[derive(clap::Args, Debug)]
pub struct LaunchArgs {
    /// The study file.
    pub study: std::path::PathBuf,
    /// Inventory file (default: this machine, one slot).
    #[arg(long, short)]
    pub inventory: Option<std::path::PathBuf>,
    /// Ledger URL or path (default: the study's `ledger`, the inventory's, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Only use these inventory hosts (repeatable); ENTRY.TAG names one host
    /// class of a mixed Slurm partition, as the launch prints it.
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// Where attempts get their fresh directories.
    #[arg(long, env = "TUNECTL_WORKDIR")]
    pub workdir: Option<std::path::PathBuf>,
    /// Keep the directories of successful attempts too (failed ones are always kept).
    #[arg(long)]
    pub keep_workdirs: bool,
    /// How progress is shown on stderr (`--quiet` means `quiet`).
    #[arg(long, value_enum, default_value_t = crate::launch::progress::ProgressMode::Auto)]
    pub progress: crate::launch::progress::ProgressMode,
    /// Start a new study (id `<name>-<spec hash>`) when the spec differs from the ledger's.
    #[arg(long)]
    pub fork: bool,
    /// Report drift of the baseline anchors but discard nothing and never cool down.
    #[arg(long)]
    pub no_cooldown: bool,
    /// Store every attempt's full stdout and stderr in the ledger beside it
    /// (`<attempt>.stdout.log`, `<attempt>.stderr.log`; 64 MiB each at most).
    #[arg(long)]
    pub store_logs: bool,
    /// How long the trials of a host class wait when every host of the
    /// class is down, before they are left for a later launch (e.g. `10m`).
    #[arg(long, value_parser = crate::spec::yaml::parse_duration, default_value = "10m")]
    pub host_timeout: std::time::Duration,
    /// Run one shard of a grid: `i/n` (1-based): the baseline and the i-th
    /// of n contiguous slices of the grid's candidates, no confirmation
    /// round. Shards may share a ledger or each have one.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    pub shard: Option<crate::search::Shard>,
    /// Warm-start an adaptive search from an earlier study of the same
    /// knobs: `<ledger URL or path>#<study id>`, or a study id in this
    /// launch's ledger. Configs that failed there on a host class are not
    /// tried again on it; TPE starts from its values.
    #[arg(long)]
    pub seed_from: Option<String>,
    /// A shell command run on this machine when the launch ends, with the
    /// outcome as JSON on its stdin (overrides the inventory's `notify`).
    #[arg(long, value_name = "COMMAND")]
    pub notify: Option<String>,
    /// Launch although the plan's estimate exceeds `budget.max_trial_time`,
    /// or remote hosts run without one.
    #[arg(long)]
    pub yes: bool,
    // `text` prints nothing on stdout (progress and the summary go to
    // stderr); `json` the outcome document.
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
}

/// `--seed-from`: `<ledger URL or path>#<study id>`, or a study id in the
/// launch's ledger.
async fn load_prior(
    from: &str,
    study: &Study,
    ledger: &Ledger,
) -> Result<crate::launch::prior::Prior, CliError> {
    if !study.strategy.is_adaptive() {
        return Err(CliError::Invalid(format!(
            "--seed-from warm-starts an adaptive search (strategy hyperband or tpe); this study's strategy is {}",
            study.strategy.name()
        )));
    }
    let other;
    let (source, id) = match from.rsplit_once('#') {
        Some((url, id)) if !url.is_empty() && !id.is_empty() => {
            other = Ledger::open_existing(url).map_err(failed)?.ok_or_else(|| {
                CliError::Invalid(format!("--seed-from {from}: no ledger at `{url}`"))
            })?;
            (&other, id.to_string())
        }
        _ if from.contains("://") || from.contains('/') => {
            let listed = match Ledger::open_existing(from).map_err(failed)? {
                Some(l) => l.studies().await.map_err(failed)?.join(", "),
                None => "no ledger there".to_string(),
            };
            return Err(CliError::Invalid(format!(
                "--seed-from {from}: name the study as `<ledger>#<study id>` (studies there: {listed})"
            )));
        }
        _ => (ledger, from.to_string()),
    };
    let space = ConfigSpace::new(study).map_err(CliError::Invalid)?;
    let metric = study
        .fidelity
        .as_ref()
        .map(|f| f.proxy.name.clone())
        .unwrap_or_else(|| study.objective.name.clone());
    let budget = study
        .fidelity
        .as_ref()
        .map(|f| f.trial_budget(f.max_budget));
    let prior = crate::launch::prior::Prior::load(source, &id, study, &space, &metric, budget)
        .await
        .map_err(|e| CliError::Invalid(format!("--seed-from {from}: {e}")))?;
    note!(
        "seeding from {}: what it knows about {} host class(es) of these knobs",
        prior.source,
        prior.classes()
    );
    Ok(prior)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::launcher::{BaselineFailure, DraftBucket};

    #[test]
    fn host_names_an_entry_or_a_part_of_a_slurm_entry() {
        let text = "hosts:\n  - {name: gpus, transport: slurm}\n  - {name: gpus.big, transport: slurm}\n  - {name: box, transport: local}\n";
        let inv = Inventory::from_text(std::path::Path::new("inv.yaml"), text).expect("loads");
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let sel =
            host_selection(&inv, &names(&["gpus.h100", "gpus.a100", "gpus.h100"])).expect("parts");
        assert_eq!(
            sel.get("gpus"),
            Some(&Some(names(&["gpus.h100", "gpus.a100"])))
        );
        assert_eq!(sel.len(), 1);
        // The longest entry a name extends; the whole entry wins over parts.
        let sel = host_selection(&inv, &names(&["gpus.big.x", "gpus.h100", "gpus", "box"]))
            .expect("parts");
        assert_eq!(sel.get("gpus.big"), Some(&Some(names(&["gpus.big.x"]))));
        assert_eq!(sel.get("gpus"), Some(&None));
        assert_eq!(sel.get("box"), Some(&None));
        // A local entry has no parts; an unknown name is refused.
        for bad in ["box.x", "gpus.", "nope"] {
            let e = host_selection(&inv, &names(&[bad])).expect_err(bad);
            assert!(
                matches!(&e, CliError::Invalid(m) if m.contains(&format!("--host {bad}: no such host"))),
                "{e:?}"
            );
        }
        assert!(host_selection(&inv, &[]).expect("none").is_empty());
    }

    /// Every outcome, with its exit code and whether it is said.
    fn every_outcome() -> Vec<(LaunchOutcome, u8, bool)> {
        vec![
            (LaunchOutcome::Verdict, 0, false),
            (
                LaunchOutcome::Unrecorded {
                    ledger: "file:///l".into(),
                    attempts: 2,
                },
                1,
                true,
            ),
            (LaunchOutcome::Interrupted, 130, false),
            (
                LaunchOutcome::HostsLost {
                    classes: vec![("c".into(), 3)],
                },
                1,
                true,
            ),
            (
                LaunchOutcome::BudgetSpent {
                    spent: 70.0,
                    cap: 60.0,
                },
                1,
                true,
            ),
            (
                LaunchOutcome::Stalled {
                    classes: vec![("c".into(), 4)],
                },
                4,
                true,
            ),
            (
                LaunchOutcome::BaselineFails {
                    failures: vec![BaselineFailure {
                        host_class: "c".into(),
                        cell: "n=1".into(),
                        class: crate::ledger::records::FailureClass::Crash,
                        detail: "exit code 3".into(),
                        log: vec!["boom".into()],
                    }],
                },
                1,
                true,
            ),
            (
                LaunchOutcome::Drafts {
                    drafts: vec![DraftBucket {
                        host_class: "c".into(),
                        bucket: "b".into(),
                        reason: crate::decide::LevelReasons(vec![
                            crate::decide::LevelReason::NothingMeasured,
                        ]),
                    }],
                    dropped_cells: 1,
                },
                3,
                true,
            ),
        ]
    }

    #[test]
    fn every_outcome_has_its_exit_code_and_its_sentence() {
        for (outcome, code, is_said) in every_outcome() {
            let exit = exit_of(&outcome);
            assert_eq!(exit.code(), code, "{outcome:?}");
            assert_eq!(said(&outcome).is_some(), is_said, "{outcome:?}");
            // What the process exits with is what the documents say.
            if exit != Exit::Success {
                assert_eq!(CliError::Launch(exit, said(&outcome)).code(), code);
            }
        }
    }

    #[test]
    fn the_sentences_name_what_the_outcome_holds() {
        let text = |o: &LaunchOutcome| said(o).expect("said");
        let all = every_outcome();
        assert!(text(&all[1].0).starts_with("the ledger file:///l could not record"));
        assert!(
            text(&all[4].0).contains("budget.max_trial_time 1m ("),
            "{}",
            text(&all[4].0)
        );
        assert!(text(&all[5].0).contains("what was left of c: 4 trials"));
        assert!(
            text(&all[6].0)
                .ends_with("c · cell n=1: crash: exit code 3\n    its stderr:\n      boom")
        );
        assert_eq!(
            text(&all[7].0),
            "the launch finished, but not every bucket is a VERDICT (1 draft, 1 cell dropped after drift); what export writes for them is not final:\n  c · b: no candidate has been measured yet"
        );
    }

    #[test]
    fn an_error_before_the_launch_keeps_its_exit_code() {
        assert_eq!(CliError::Invalid("x".into()).status(), Exit::Invalid);
        assert_eq!(CliError::Failed("x".into()).code(), 1);
        assert_eq!(stopped(LaunchError::Invalid("too large".into())).code(), 2);
        assert_eq!(
            stopped(LaunchError::NoHostAnswered { hosts: Vec::new() }).code(),
            1
        );
    }
}
