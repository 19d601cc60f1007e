//! `tunectl status`: per host class, trials done, failed, lost, running
//! and pending.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::inputs::{Opened, changed_text, ledger_url, open_study, study_arg};
use super::{CliError, failed, print_json, say, say_err, schema};
use crate::ledger::lease::{LeaseRecord, UnreadableLease};
use crate::ledger::{Firsts, HostRecord, Ledger};
use crate::plan::{ClassInfo, Plan, PlanHost, Progress};
use crate::spec::Study;

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// A study file (pending counts need it), or a study id in the ledger.
    pub study: String,
    /// Ledger URL or path (default: the study file's `ledger`, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
    /// Same as `--format json`.
    #[arg(long, conflicts_with_all = ["format", "watch"])]
    pub json: bool,
    /// Keep showing the status, refreshed every `--interval`, with an ETA
    /// and each bucket's leader so far, until nothing is running or
    /// pending (or Ctrl-C).
    #[arg(long)]
    pub watch: bool,
    /// How often `--watch` reads the ledger again (e.g. `2s`, `500ms`; at
    /// least 100ms).
    #[arg(long, requires = "watch", value_parser = crate::commands::status::parse_interval, default_value = "2s")]
    pub interval: std::time::Duration,
}

mod watch;
pub use watch::parse_interval;

#[derive(Serialize, Default)]
struct ClassStatus {
    host_class: String,
    label: String,
    hosts: Vec<String>,
    /// Sweep trials (the planned grid) done, failed, and lost without a
    /// later terminal attempt.
    done: u64,
    failed: u64,
    lost: u64,
    running: u64,
    /// Baseline anchors and confirmation-round trials recorded (not part
    /// of the planned sweep).
    anchors: u64,
    confirm_trials: u64,
    /// Of `done` and `failed`: racing runs, sweep trials beyond the plan's
    /// `repeats` where a decision was close (counted with the study file).
    racing: u64,
    /// An adaptive search's screening runs (rung trials) finished.
    screening: u64,
    /// Planned sweep trials without a terminal attempt and not running;
    /// `None` without the study file.
    pending: Option<u64>,
    /// Planned sweep trials that will not run: their config failed in that
    /// cell, or the cell's baseline failed.
    skipped: Option<u64>,
    planned: Option<u64>,
}

/// `status --format json` (docs/json.md).
#[derive(Serialize)]
struct StatusDoc<'a> {
    schema: &'static str,
    study: &'a str,
    ledger: &'a str,
    classes: &'a [&'a ClassStatus],
    unreadable_objects: usize,
    leases: &'a [LeaseStatus],
    /// Lease objects that do not read: a launch cannot take their trials'
    /// leases until they are removed.
    unreadable_leases: &'a [UnreadableLease],
}

/// A trial's lease that has not expired: a launcher runs the trial, and
/// others wait for it until then; a stale one (expiring further ahead than
/// any lease can) holds nothing and the next launch takes it over.
#[derive(Serialize)]
struct LeaseStatus {
    trial_key: String,
    owner: String,
    host: String,
    expires_at: String,
    stale: bool,
    /// Its trial has a result in the ledger: the lease holds nothing (its
    /// launch deletes it with others soon, or stopped before it could),
    /// and no launch runs the trial again.
    ended: bool,
}

/// The leases `status` shows, by trial key, and the live ones among them
/// (holding a trial that has not ended). `ended`: whether a trial key has
/// a terminal attempt in the ledger.
fn lease_statuses(
    leases: Vec<LeaseRecord>,
    ended: impl Fn(&str) -> bool,
) -> (Vec<LeaseStatus>, Vec<LeaseRecord>) {
    let now = chrono::Utc::now();
    let mut shown: Vec<LeaseStatus> = leases
        .iter()
        .map(|l| LeaseStatus {
            trial_key: l.trial_key.clone(),
            owner: l.owner.clone(),
            host: l.host.clone(),
            expires_at: l.expires_at.clone(),
            stale: l.from_the_future(now),
            ended: ended(&l.trial_key),
        })
        .collect();
    shown.sort_by(|a, b| a.trial_key.cmp(&b.trial_key));
    let live = leases
        .into_iter()
        .filter(|l| l.holds(now) && !ended(&l.trial_key))
        .collect();
    (shown, live)
}

/// The text lines of the leases `status` shows.
fn lease_lines(leases: &[LeaseStatus]) -> Vec<String> {
    if leases.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!(
        "leases: {} {} leased (a launch waits for a leased trial until its lease is released or expires)",
        leases.len(),
        if leases.len() == 1 { "trial" } else { "trials" }
    )];
    // Leases of ended trials, in one line: a launch on an object store
    // deletes the leases it gave up together, a quarter of a lease time
    // apart, so a running launch leaves many for a moment.
    let ended = leases.iter().filter(|l| l.ended).count();
    if ended > 0 {
        out.push(format!(
            "  {ended} of them for {} that {} ended (the result is in the ledger): such a lease holds nothing, no launch runs its trial again, and its launch deletes it soon",
            if ended == 1 { "a trial" } else { "trials" },
            if ended == 1 { "has" } else { "have" },
        ));
    }
    for l in leases.iter().filter(|l| !l.ended) {
        let key: String = l.trial_key.chars().take(16).collect();
        out.push(if l.stale {
            format!(
                "  trial {key}: held by {} on {} until {}: further ahead than any lease can be ({} plus {} of clock skew), stale; the next launch takes it over",
                l.owner,
                l.host,
                l.expires_at,
                humantime::format_duration(crate::ledger::lease::MAX_LEASE_TTL),
                humantime::format_duration(crate::ledger::lease::CLOCK_SKEW_ALLOWANCE),
            )
        } else {
            format!(
                "  trial {key}: held by {} on {} until {}",
                l.owner, l.host, l.expires_at
            )
        });
    }
    out
}

/// Per host class (by id), what the ledger holds of study `study_id` and,
/// with its study file (`study`), what is left: the counts of `status`
/// and of `status --watch`. `first` and `terminal` are the scan's first
/// attempt and counting attempt of each trial
/// ([`crate::ledger::Scan::first_and_terminal`]).
fn count(
    study_id: &str,
    study: Option<&Study>,
    (first, terminal): (&Firsts, &Firsts),
    hosts: &[HostRecord],
    leases: &[LeaseRecord],
) -> BTreeMap<String, ClassStatus> {
    let mut classes: BTreeMap<String, ClassStatus> = BTreeMap::new();
    for h in hosts {
        let c = classes
            .entry(h.host_class.clone())
            .or_insert_with(|| ClassStatus {
                host_class: h.host_class.clone(),
                ..Default::default()
            });
        c.label = h.class_label.clone();
        if !c.hosts.contains(&h.host) {
            c.hosts.push(h.host.clone());
        }
    }
    // From sorted keys: built in one pass.
    let key_class: BTreeMap<&str, &str> = first
        .iter()
        .map(|(&key, a)| (key, a.host_class.as_str()))
        .collect();
    for (&key, first) in first {
        let class = first.host_class.as_str();
        if !classes.contains_key(class) {
            classes.insert(
                class.to_string(),
                ClassStatus {
                    host_class: class.to_string(),
                    ..Default::default()
                },
            );
        }
        let Some(c) = classes.get_mut(class) else {
            continue;
        };
        match first.role {
            crate::trial::RoleKind::Anchor => {
                // An anchor lost with its host is not a missing trial.
                c.anchors += u64::from(terminal.contains_key(key));
                continue;
            }
            crate::trial::RoleKind::Confirm => {
                c.confirm_trials += u64::from(terminal.contains_key(key));
                continue;
            }
            crate::trial::RoleKind::Rung => {
                c.screening += u64::from(terminal.contains_key(key));
                continue;
            }
            // Not a trial of any plan: nothing this tunectl runs or waits for.
            crate::trial::RoleKind::Unknown(_) => continue,
            crate::trial::RoleKind::Sweep => {}
        }
        let beyond_plan = study.is_some_and(|s| first.repeat >= s.measurement.repeats);
        match terminal.get(key).map(|t| t.status) {
            Some(crate::ledger::AttemptStatus::Ok) => c.done += 1,
            Some(_) => c.failed += 1,
            None => c.lost += 1,
        }
        if beyond_plan && terminal.contains_key(key) {
            c.racing += 1;
        }
    }
    for l in leases {
        let class = key_class.get(l.trial_key.as_str()).copied().or_else(|| {
            hosts
                .iter()
                .rev()
                .find(|h| h.host == l.host)
                .map(|h| h.host_class.as_str())
        });
        if let Some(class) = class
            && let Some(c) = classes.get_mut(class)
        {
            c.running += 1;
            // A running trial with an earlier lost attempt is not lost.
            if key_class.contains_key(l.trial_key.as_str())
                && !terminal.contains_key(l.trial_key.as_str())
            {
                c.lost = c.lost.saturating_sub(1);
            }
        }
    }
    // An adaptive search's sweep trials (its objective stage) are known
    // only as its results arrive: no pending count.
    if let Some(study) = study.filter(|s| !s.strategy.is_adaptive()) {
        let plan_hosts: Vec<PlanHost> = classes
            .values()
            .map(|c| PlanHost {
                name: c.hosts.first().cloned().unwrap_or_default(),
                transport: "recorded".to_string(),
                slots: 1,
                class: Some(ClassInfo {
                    id: c.host_class.clone(),
                    label: c.label.clone(),
                }),
            })
            .collect();
        if let Ok(plan) = Plan::build(study, &plan_hosts) {
            let mut progress = Progress {
                done: terminal.keys().copied().collect(),
                running: leases.iter().map(|l| l.trial_key.as_str()).collect(),
                ..Default::default()
            };
            // Failed configs and baselines, per class. A baseline's first
            // failure in a cell is re-run before it is believed: it stops
            // its repeats (and, with its first repeat and the re-run, its
            // cell) at the second.
            let mut failed_configs: HashMap<&str, HashSet<(u32, u64)>> = HashMap::new();
            let mut failed_baselines: HashMap<&str, HashSet<u32>> = HashMap::new();
            let mut baseline_failures: HashMap<(&str, u32), Vec<u32>> = HashMap::new();
            for a in terminal.values() {
                if a.role == crate::trial::RoleKind::Sweep
                    && a.status == crate::ledger::AttemptStatus::Failed
                {
                    let class = a.host_class.as_str();
                    if a.is_baseline {
                        baseline_failures
                            .entry((class, a.cell_index))
                            .or_default()
                            .push(a.repeat);
                        continue;
                    }
                    failed_configs
                        .entry(class)
                        .or_default()
                        .insert((a.cell_index, a.config_index));
                }
            }
            let baseline = plan.space.baseline();
            for ((class, cell), repeats) in baseline_failures {
                if repeats.len() >= 2 {
                    failed_configs
                        .entry(class)
                        .or_default()
                        .insert((cell, baseline));
                }
                if repeats.contains(&0) && repeats.contains(&1) {
                    failed_baselines.entry(class).or_default().insert(cell);
                }
            }
            for c in classes.values_mut() {
                let class = c.host_class.as_str();
                progress.failed_configs = failed_configs.remove(class).unwrap_or_default();
                progress.failed_baselines = failed_baselines.remove(class).unwrap_or_default();
                let left = plan.still_to_run(study, study_id, &c.host_class, &progress);
                c.planned = Some(plan.trials_per_class());
                c.pending = Some(left.to_run.len() as u64);
                c.skipped = Some(left.skipped.len() as u64);
            }
        }
    }
    classes
}

/// Count, per host class, what the ledger holds of the study and what is
/// left.
pub async fn run(a: StatusArgs) -> Result<(), CliError> {
    if a.watch && a.output.json(a.json) {
        return Err(CliError::Invalid(
            "`--watch` is a live view for people and `--format json` one document: give one of them"
                .to_string(),
        ));
    }
    let (name, study) = study_arg(&a.study)?;
    let url = ledger_url(a.ledger.as_deref(), study.as_ref(), None);
    let Some(ledger) = Ledger::open_existing(&url).map_err(failed)? else {
        return Err(CliError::Failed(format!("no ledger at `{url}`")));
    };
    ledger.check_reachable().await.map_err(failed)?;
    let not_there = |id: &str| {
        CliError::Failed(format!(
            "study `{id}` is not in the ledger `{}`{}",
            ledger.url(),
            super::inputs::ledger_hint(&url)
        ))
    };
    // A study file means the study it resolves to (its name, or the fork
    // of its spec); one whose spec was never launched shows its name's
    // study, without pending counts (the file does not plan that study).
    let (study_id, study, record) = match open_study(
        &ledger,
        &a.study,
        &name,
        study.as_ref(),
        false,
    )
    .await?
    {
        // By id: that id, whatever the record says.
        Opened::Launched(record) if study.is_none() => (name, None, record),
        Opened::Launched(record) => (record.study_id.clone(), study, record),
        Opened::NotThere => return Err(not_there(&name)),
        Opened::Changed {
            record,
            changes,
            forks,
        } => {
            say_err!(
                "warning: {}: this spec was never launched: {}; showing `{name}` as launched, without pending counts; `tunectl launch --fork` measures this one",
                a.study,
                changed_text(&name, &changes, &forks)
            );
            (record.study_id.clone(), None, record)
        }
    };
    if a.watch {
        return watch::run(watch::Watched {
            ledger,
            study_id,
            study,
            record,
            interval: a.interval,
        })
        .await;
    }
    let scan = ledger.scan(&study_id).await.map_err(failed)?;
    let (hosts, _) = ledger.hosts(&study_id).await.map_err(failed)?;
    let (first, terminal) = scan.first_and_terminal();
    let found = ledger.unexpired_leases(&study_id).await.map_err(failed)?;
    let unreadable_leases = found.unreadable;
    let (shown, leases) = lease_statuses(found.unexpired, |key| terminal.contains_key(key));
    let classes = count(
        &study_id,
        study.as_ref(),
        (&first, &terminal),
        &hosts,
        &leases,
    );
    let rows: Vec<&ClassStatus> = classes.values().collect();
    if a.output.json(a.json) {
        return print_json(&StatusDoc {
            schema: schema::STATUS,
            study: &study_id,
            ledger: ledger.url(),
            classes: &rows,
            unreadable_objects: scan.corrupt.len(),
            leases: &shown,
            unreadable_leases: &unreadable_leases,
        });
    }
    say!("study {study_id} · ledger {}", ledger.url());
    if rows.is_empty() {
        say!("no host has been probed for this study yet");
    }
    for c in rows {
        let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_else(|| "?".to_string());
        say!(
            "{} · {} · hosts: {}\n  done {}{} · failed {} · lost {} · running {} · pending {} · skipped {} (of {} planned sweep trials){}; besides: {} baseline anchors, {} confirmation trials",
            c.host_class,
            c.label,
            c.hosts.join(", "),
            c.done,
            if c.racing > 0 {
                format!(" (with {} racing runs beyond the plan)", c.racing)
            } else {
                String::new()
            },
            c.failed,
            c.lost,
            c.running,
            opt(c.pending),
            opt(c.skipped),
            opt(c.planned),
            match (&study, c.pending) {
                (_, Some(_)) => String::new(),
                (Some(s), None) if s.strategy.is_adaptive() => format!(
                    " · {} screening runs of the {} search done; its sweep trials are planned as it goes",
                    c.screening,
                    s.strategy.name()
                ),
                _ => " · give the study file for pending counts".to_string(),
            },
            c.anchors,
            c.confirm_trials
        );
    }
    for line in lease_lines(&shown) {
        say!("{line}");
    }
    for l in &unreadable_leases {
        let key: String = l.trial_key.chars().take(16).collect();
        say!(
            "  trial {key}: its lease does not read ({}): a launch cannot run this trial until `{}` is removed from the ledger",
            l.reason,
            l.object
        );
    }
    if !scan.corrupt.is_empty() {
        say!(
            "{} unreadable ledger objects (`tunectl ledger check` lists them)",
            scan.corrupt.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_of_ended_trials_are_one_line_and_held_ones_one_each() {
        let lease = |key: &str, ended: bool| LeaseStatus {
            trial_key: key.to_string(),
            owner: "launcher-1".to_string(),
            host: "h1".to_string(),
            expires_at: "2026-12-07T23:00:00+00:00".to_string(),
            stale: false,
            ended,
        };
        let lines = lease_lines(&[
            lease("aaaa", true),
            lease("bbbb", false),
            lease("cccc", true),
        ]);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("leases: 3 trials leased"), "{lines:?}");
        assert!(
            lines[1].starts_with("  2 of them for trials that have ended"),
            "{lines:?}"
        );
        assert_eq!(
            lines[2],
            "  trial bbbb: held by launcher-1 on h1 until 2026-12-07T23:00:00+00:00"
        );
        let one = lease_lines(&[lease("aaaa", true)]);
        assert!(
            one[1].starts_with("  1 of them for a trial that has ended"),
            "{one:?}"
        );
        assert!(lease_lines(&[]).is_empty());
    }
}
