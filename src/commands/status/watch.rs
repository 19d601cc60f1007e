//! `tunectl status --watch`: the status of a running study, read again
//! from the ledger every `--interval`. On a terminal the view is redrawn in
//! place (indicatif); otherwise each refresh that changed something is
//! printed as one plain block. Per host class it shows `status`'s counts
//! ([`super::count`]), an ETA from the recorded run times, and each
//! bucket's leader as the report's analysis ([`crate::decide`])
//! judges it so far: while anything of the class runs or waits, that
//! leader is a DRAFT, whatever the evidence so far looks like.
//!
//! It only reads: the study goes on when the watch stops. It stops by
//! itself once nothing is running or pending and no launch is writing to
//! the study ([`Ending`]), and on Ctrl-C.

use std::collections::{BTreeSet, HashSet};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{ClassStatus, count};
use crate::commands::{CliError, failed, say_err};
use crate::decide::{
    Analysis, BucketReport, CellReport, ConfigReport, Level, Scope, analyze_scoped,
};
use crate::ledger::lease::LeaseRecord;
use crate::ledger::records::{AttemptRecord, AttemptStatus};
use crate::ledger::{Ledger, Scan, StudyRecord};
use crate::spec::Study;
use crate::trial::RoleKind;

/// What `status --watch` watches.
pub(super) struct Watched {
    pub ledger: Ledger,
    pub study_id: String,
    /// The study file, when given: pending counts need it.
    pub study: Option<Study>,
    pub record: StudyRecord,
    pub interval: Duration,
}

/// `--interval`: a duration as the study file writes them, at least
/// 100 ms (the ledger is listed at every refresh).
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = crate::spec::yaml::parse_duration(text)?;
    if d < Duration::from_millis(100) {
        return Err(format!("`{text}` is shorter than 100ms"));
    }
    Ok(d)
}

/// How long a host class still needs, as far as the ledger tells.
#[derive(Debug, Clone, PartialEq)]
enum Eta {
    /// `left` trials (pending and running) in waves over `slots` slots,
    /// each taking the median recorded run time of the class's trials.
    Left {
        eta: Duration,
        left: u64,
        slots: u64,
        median_s: f64,
    },
    NothingLeft,
    /// Nothing to base an estimate on, and why.
    Unknown(&'static str),
}

impl Eta {
    /// The estimate for a class with `status`'s counts `c`, whose recorded
    /// attempts are `attempts`.
    /// `no_pending`: why the class has no pending count, if it has none.
    fn of<'a>(
        c: &ClassStatus,
        attempts: impl Iterator<Item = &'a AttemptRecord>,
        no_pending: &'static str,
    ) -> Eta {
        let mut slots: BTreeSet<(&str, u32)> = BTreeSet::new();
        let mut times = Vec::new();
        for a in attempts {
            slots.insert((a.host.as_str(), a.slot));
            if a.status != AttemptStatus::Lost
                && !matches!(a.role, RoleKind::Unknown(_))
                && a.duration_s.is_finite()
                && a.duration_s >= 0.0
            {
                times.push(a.duration_s);
            }
        }
        let Some(pending) = c.pending else {
            return Eta::Unknown(no_pending);
        };
        let left = pending + c.running;
        if left == 0 {
            return Eta::NothingLeft;
        }
        let Some(median_s) = crate::stats::median(&times) else {
            return Eta::Unknown("no trial of this class has finished yet");
        };
        // The slots seen at work so far; at least those running now.
        let slots = (slots.len() as u64).max(c.running).max(1);
        let waves = left.div_ceil(slots);
        Eta::Left {
            eta: Duration::from_secs_f64((waves as f64 * median_s).ceil()),
            left,
            slots,
            median_s,
        }
    }

    fn text(&self) -> String {
        match self {
            Eta::Left {
                eta,
                left,
                slots,
                median_s,
            } => format!(
                "ETA ~{} ({left} trial{} left on {slots} slot{}, {} each by the median run so far)",
                humantime::format_duration(*eta),
                if *left == 1 { "" } else { "s" },
                if *slots == 1 { "" } else { "s" },
                seconds(*median_s)
            ),
            Eta::NothingLeft => "nothing left to run".to_string(),
            Eta::Unknown(why) => format!("ETA unknown ({why})"),
        }
    }
}

use crate::fmt::duration_short as seconds;

/// `n=3 vs 3 of the baseline, combined spread 2.1%` for the leader of a
/// bucket, over its cells: the fewest samples and the widest spread.
fn evidence(b: &BucketReport) -> String {
    let n = |r: &Option<ConfigReport>| r.as_ref().and_then(|r| r.summary).map(|s| s.n);
    let mut lead_n = Vec::new();
    let mut base_n = Vec::new();
    let mut spreads = Vec::new();
    for cell in &b.per_cell {
        lead_n.push(n(&cell.winner).unwrap_or(0));
        base_n.push(n(&cell.baseline).unwrap_or(0));
        spreads.push(cell.winner.as_ref().and_then(|w| w.combined_spread));
    }
    let cells = b.per_cell.len();
    let at_least = if cells > 1 { "≥ " } else { "" };
    let spread = match (
        b.interval,
        spreads.iter().copied().collect::<Option<Vec<f64>>>(),
    ) {
        (Some(i), _) => format!("{:.3}× [{:.3}, {:.3}] 95% CI", i.speedup, i.low, i.high),
        (None, Some(s)) if !s.is_empty() => format!(
            "combined spread {}{:.1}%",
            if cells > 1 { "up to " } else { "" },
            s.iter().copied().fold(0.0, f64::max) * 100.0
        ),
        _ => "spread unknown".to_string(),
    };
    format!(
        "n={at_least}{} vs {at_least}{} of the baseline, {spread}",
        lead_n.iter().min().copied().unwrap_or(0),
        base_n.iter().min().copied().unwrap_or(0),
    )
}

/// `n=3, spread 1.2%` of the baseline of a bucket no config beats yet.
fn baseline_evidence(b: &BucketReport) -> String {
    let reports: Vec<&ConfigReport> = b
        .per_cell
        .iter()
        .filter_map(|c| c.baseline.as_ref())
        .collect();
    let ns: Vec<usize> = reports
        .iter()
        .map(|r| r.summary.map(|s| s.n).unwrap_or(0))
        .collect();
    let spread = match reports
        .iter()
        .map(|r| r.relative_spread)
        .collect::<Option<Vec<f64>>>()
    {
        Some(s) if !s.is_empty() => format!(
            "spread {}{:.1}%",
            if s.len() > 1 { "up to " } else { "" },
            s.iter().copied().fold(0.0, f64::max) * 100.0
        ),
        _ => "spread unknown".to_string(),
    };
    format!(
        "n={}{}, {spread}",
        if ns.len() > 1 { "≥ " } else { "" },
        ns.iter().min().copied().unwrap_or(0)
    )
}

/// One bucket's leader and its level. `busy`: trials of the class are
/// running or pending, so whatever leads is a DRAFT.
fn leader_line(b: &BucketReport, busy: bool, ahead: Option<&ConfigReport>) -> String {
    let level = match (b.level, busy) {
        (Level::Verdict, false) => format!("VERDICT ({})", b.level_reason),
        (Level::Verdict, true) => "DRAFT (trials still running or pending)".to_string(),
        (Level::Draft, _) => format!("DRAFT ({})", b.level_reason),
    };
    let leader = match &b.winner {
        Some(w) => format!(
            "leader {}: {:.3}× the baseline{} ({})",
            w.label,
            w.speedup,
            if b.per_cell.len() > 1 {
                format!(", geo-mean over {} cells", b.per_cell.len())
            } else {
                String::new()
            },
            evidence(b)
        ),
        None if b.per_cell.iter().all(|c| c.baseline.is_none()) => {
            "no leader yet: the baseline has not run here".to_string()
        }
        None => format!(
            "leader: the baseline ({}): {}{}",
            baseline_evidence(b),
            b.decision,
            // While trials run, the candidate ahead so far, unless the
            // decision names it already.
            ahead
                .filter(|r| busy && !b.decision.to_string().contains(r.label.as_str()))
                .map(ahead_text)
                .unwrap_or_default()
        ),
    };
    format!("  bucket {}: {level} · {leader}", b.label)
}

/// The candidate ahead of the baseline so far, where none is shown to
/// beat it yet: ` · ahead so far: mode=fast 1.950× (n=2, no interval yet;
/// not shown to beat the minimum yet)`.
fn ahead_text(r: &ConfigReport) -> String {
    let Some(speedup) = r.speedup.filter(|s| s.is_finite() && *s > 1.0) else {
        return String::new();
    };
    let n = r.summary.map(|s| s.n).unwrap_or(0);
    let interval = match r.interval {
        Some(i) => format!(", {:.3}× [{:.3}, {:.3}] 95% CI", i.speedup, i.low, i.high),
        None => ", no interval yet".to_string(),
    };
    format!(
        " · ahead so far: {} {speedup:.3}× (n={n}{interval}; not shown to beat the minimum yet)",
        r.label
    )
}

/// The candidate with the largest speedup over the baseline at any cell of
/// bucket `b` so far (none when the baseline leads everywhere).
fn ahead_of_baseline<'a>(cells: &'a [CellReport], b: &BucketReport) -> Option<&'a ConfigReport> {
    cells
        .iter()
        .filter(|c| b.cells.contains(&c.cell_label))
        .flat_map(|c| c.eligible.iter())
        .filter(|r| r.speedup.is_some_and(|s| s.is_finite() && s > 1.0))
        .max_by(|x, y| {
            x.speedup
                .unwrap_or(0.0)
                .total_cmp(&y.speedup.unwrap_or(0.0))
                .then(y.label.cmp(&x.label))
        })
}

/// One refresh: what the ledger says now.
struct Frame {
    /// The lines under the header, the same for the same ledger contents.
    body: Vec<String>,
    /// Nothing of any class runs or waits (and some class is known).
    settled: bool,
    /// Nothing of any class runs (some may wait).
    idle: bool,
}

/// The most trials the watch names as running, per class.
const RUNNING_SHOWN: usize = 3;

/// What runs now on a class's hosts, from the live leases of trials with
/// no result yet: the longest-running first, `what @ host (for how
/// long)`, at most [`RUNNING_SHOWN`] lines and how many more.
fn running_lines(
    c: &ClassStatus,
    leases: &[LeaseRecord],
    ended: &HashSet<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<String> {
    let mut running: Vec<(&LeaseRecord, Option<f64>)> = leases
        .iter()
        .filter(|l| c.hosts.contains(&l.host) && !ended.contains(l.trial_key.as_str()))
        .map(|l| {
            let since = chrono::DateTime::parse_from_rfc3339(&l.taken_at)
                .ok()
                .map(|t| (now - t.with_timezone(&chrono::Utc)).num_milliseconds() as f64 / 1e3);
            (l, since)
        })
        .collect();
    running.sort_by(|a, b| {
        b.1.unwrap_or(0.0)
            .total_cmp(&a.1.unwrap_or(0.0))
            .then(a.0.trial_key.cmp(&b.0.trial_key))
    });
    let mut out: Vec<String> = running
        .iter()
        .take(RUNNING_SHOWN)
        .map(|(l, since)| {
            let what = if l.what.is_empty() {
                format!("trial {}", l.trial_key.chars().take(12).collect::<String>())
            } else {
                l.what.clone()
            };
            let took = since
                .map(|s| format!(" for {}", crate::fmt::duration_short(s.max(0.0))))
                .unwrap_or_default();
            format!("  running now: {what} on {}{took}", l.host)
        })
        .collect();
    if running.len() > RUNNING_SHOWN {
        out.push(format!(
            "  and {} more running",
            running.len() - RUNNING_SHOWN
        ));
    }
    out
}

fn frame(
    study: Option<&Study>,
    scan: &Scan,
    classes: &[ClassStatus],
    analysis: &Analysis,
    leases: &[LeaseRecord],
) -> Frame {
    let ended: HashSet<&str> = scan.terminal().into_keys().collect();
    let now = chrono::Utc::now();
    let no_pending = match study {
        Some(s) if s.strategy.is_adaptive() => "an adaptive search plans its trials as it goes",
        Some(_) => "the study file does not plan the study launched",
        None => "the pending trials are not known: give the study file",
    };
    let mut body = Vec::new();
    if classes.is_empty() {
        body.push("no host has been probed for this study yet".to_string());
    }
    for c in classes {
        // Without a pending count (a study id, an adaptive search) the
        // analysis knows whether every planned trial ended.
        let busy = c.running > 0 || c.pending.is_some_and(|p| p > 0);
        let eta = Eta::of(
            c,
            scan.records().filter(|a| a.host_class == c.host_class),
            no_pending,
        );
        body.push(format!(
            "{} · {} · hosts: {}",
            c.host_class,
            c.label,
            c.hosts.join(", ")
        ));
        let mut counts = format!("  done {} · failed {}", c.done, c.failed);
        if c.lost > 0 {
            counts.push_str(&format!(" · lost {}", c.lost));
        }
        counts.push_str(&format!(
            " · running {} · pending {} · {}",
            c.running,
            c.pending
                .map(|n| n.to_string())
                .unwrap_or_else(|| "?".to_string()),
            eta.text()
        ));
        body.push(counts);
        body.extend(running_lines(c, leases, &ended, now));
        if let Some(report) = analysis
            .classes
            .iter()
            .find(|r| r.host_class == c.host_class)
        {
            for b in &report.buckets {
                let ahead = ahead_of_baseline(&report.cells, b);
                body.push(leader_line(b, busy, ahead));
            }
        }
    }
    if !scan.corrupt.is_empty() {
        body.push(format!(
            "{} unreadable ledger objects (`tunectl ledger check` lists them)",
            scan.corrupt.len()
        ));
    }
    Frame {
        body,
        idle: classes.iter().all(|c| c.running == 0),
        settled: !classes.is_empty()
            && classes
                .iter()
                .all(|c| c.running == 0 && c.pending.unwrap_or(0) == 0),
    }
}

/// One refresh read from the ledger.
async fn read(w: &Watched) -> Result<(Frame, usize), CliError> {
    let scan = w.ledger.scan(&w.study_id).await.map_err(failed)?;
    let writers = w.ledger.open_log_streams(&w.study_id).await;
    let (hosts, _) = w.ledger.hosts(&w.study_id).await.map_err(failed)?;
    // A lease that does not read holds no trial here; `status` names it.
    let mut leases = w
        .ledger
        .live_leases(&w.study_id)
        .await
        .map_err(failed)?
        .unexpired;
    let plans = w.ledger.plans(&w.study_id).await.map_err(failed)?;
    let (first, terminal) = scan.first_and_terminal();
    // A lease whose trial has its record (released with the next batch)
    // runs nothing.
    leases.retain(|l| !terminal.contains_key(l.trial_key.as_str()));
    let classes: Vec<ClassStatus> = count(
        &w.study_id,
        w.study.as_ref(),
        (&first, &terminal),
        &hosts,
        &leases,
    )
    .into_values()
    .collect();
    // The watch shows decisions and live counts, never next levers.
    let analysis = analyze_scoped(&w.record, &scan, &hosts, &plans, Scope::Decisions, |_| true);
    Ok((
        frame(w.study.as_ref(), &scan, &classes, &analysis, &leases),
        writers,
    ))
}

/// When the watch ends by itself.
#[derive(Default)]
struct Ending {
    /// Refreshes in a row with nothing running or pending.
    quiet: u32,
    /// Since when.
    since: Option<Instant>,
}

impl Ending {
    /// Whether the study is over after a refresh that found it `settled`,
    /// with `writers` log streams not ended. A launch between two trials
    /// (a confirmation round or an anchor just queued) runs nothing for a
    /// moment, but its log stays open until it ends; a launcher killed
    /// without ending its log stops counting once nothing has run for a
    /// lease's time (its leases have expired by then).
    fn over(&mut self, settled: bool, writers: usize, lease_ttl: Duration) -> bool {
        if !settled {
            *self = Ending::default();
            return false;
        }
        self.quiet += 1;
        let since = *self.since.get_or_insert_with(Instant::now);
        self.quiet >= 2 && (writers == 0 || since.elapsed() >= lease_ttl)
    }
}

/// Where the refreshes go: one view redrawn in place on a terminal, plain
/// blocks otherwise.
struct View {
    header: String,
    interval: Duration,
    bar: Option<ProgressBar>,
    shown: Option<Vec<String>>,
}

impl View {
    fn new(header: String, interval: Duration) -> View {
        let bar = std::io::stdout().is_terminal().then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
            b.set_style(
                ProgressStyle::with_template("{msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b
        });
        View {
            header,
            interval,
            bar,
            shown: None,
        }
    }

    fn show(&mut self, body: Vec<String>) {
        let now = chrono::Utc::now().format("%H:%M:%S UTC");
        match &self.bar {
            // Redrawn every time: the clock shows the view is alive.
            Some(b) => {
                let text = format!(
                    "{}\nas of {now} · every {} · Ctrl-C stops watching (not the study)\n{}",
                    self.header,
                    humantime::format_duration(self.interval),
                    body.join("\n")
                );
                // Wrapped at spaces to the terminal's width (one column
                // short of it: some terminals wrap on the last one), so the
                // terminal never breaks a word.
                let width = console::Term::stdout().size().1.max(20) as usize;
                let text = crate::term::wrap_block(&crate::term::escape_block(&text), width - 1);
                b.set_message(text);
            }
            None if self.shown.as_ref() != Some(&body) => {
                let header = match self.shown {
                    None => format!("{}\n", self.header),
                    Some(_) => String::new(),
                };
                let text = format!("{header}-- {now}\n{}", body.join("\n"));
                crate::term::out(&format!("{}\n", crate::term::escape_block(&text)));
            }
            None => {}
        }
        self.shown = Some(body);
    }

    fn warn(&self, text: &str) {
        match &self.bar {
            Some(b) => b.println(crate::term::escape_block(text)),
            None => say_err!("{text}"),
        }
    }

    /// The last view stays on the screen.
    fn finish(self) {
        if let Some(b) = self.bar {
            b.finish();
        }
    }
}

/// Watch until the study is over or Ctrl-C.
pub(super) async fn run(w: Watched) -> Result<(), CliError> {
    let spec = &w.record.spec.objective;
    let header = format!(
        "study {} · objective {} ({}, {} is better) · ledger {}",
        w.study_id,
        spec.name,
        spec.unit,
        spec.better.name(),
        w.ledger.url()
    );
    let mut view = View::new(header, w.interval);
    let lease_ttl = crate::ledger::lease::lease_ttl();
    let mut ending = Ending::default();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut tick = tokio::time::interval(w.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let refresh = async |tick: &mut tokio::time::Interval| {
        tick.tick().await;
        read(&w).await
    };
    let interrupted = loop {
        let refreshed = tokio::select! {
            _ = &mut ctrl_c => break true,
            r = refresh(&mut tick) => r,
        };
        match refreshed {
            Ok((mut frame, writers)) => {
                // Trials wait, and no launch is there to run them: an
                // interrupted study. Say so; a launch may resume it while
                // the watch goes on.
                if frame.idle && !frame.settled && writers == 0 {
                    frame.body.push(
                        "no launch is running this study: what is pending waits for `tunectl launch`, which resumes it (the watch goes on)"
                            .to_string(),
                    );
                }
                view.show(frame.body);
                if ending.over(frame.settled, writers, lease_ttl) {
                    break false;
                }
            }
            // Nothing shown yet: the study cannot be watched.
            Err(e) if view.shown.is_none() => return Err(e),
            Err(e) => view.warn(&format!(
                "warning: {}; trying again in {}",
                e.message().unwrap_or("cannot read the ledger"),
                humantime::format_duration(w.interval)
            )),
        }
    };
    view.finish();
    if interrupted {
        say_err!("stopped watching; the study goes on");
    } else {
        say_err!("nothing is running or pending: stopped watching");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(host: &str, slot: u32, status: &str, duration_s: f64) -> AttemptRecord {
        serde_json::from_value(serde_json::json!({
            "schema": 1, "tunectl_version": "t", "study_id": "s", "spec_hash": "h",
            "trial_key": "k", "attempt_id": "a", "config": {"a": 1},
            "config_label": "a=1", "config_index": 1, "is_baseline": false,
            "cell": {}, "cell_label": "(single cell)", "cell_index": 0, "repeat": 0,
            "fidelity": null, "host": host, "host_class": "hc", "fingerprint": "fp",
            "slot": slot, "started_at": "", "finished_at": "", "duration_s": duration_s,
            "run_s": null, "warmup_runs": 0, "status": status, "failure": null,
            "exit": null, "metrics": {}, "digest": null, "outputs": {},
            "command": "", "stdout_tail": "", "stderr_tail": ""
        }))
        .expect("record")
    }

    const NO_FILE: &str = "no file";

    #[test]
    fn the_watch_ends_after_two_quiet_refreshes_once_no_launch_writes() {
        let ttl = Duration::from_secs(3600);
        let mut e = Ending::default();
        assert!(!e.over(true, 0, ttl), "one quiet refresh is not the end");
        assert!(!e.over(false, 0, ttl));
        assert!(!e.over(true, 0, ttl));
        assert!(e.over(true, 0, ttl));
        // A launch between two trials: nothing runs, its log is open.
        let mut e = Ending::default();
        for _ in 0..5 {
            assert!(!e.over(true, 1, ttl));
        }
        // A launcher killed without ending its log: a lease's time later.
        let mut e = Ending::default();
        assert!(!e.over(true, 1, Duration::ZERO));
        assert!(e.over(true, 1, Duration::ZERO));
    }

    #[test]
    fn the_eta_is_the_trials_left_in_waves_over_the_slots_at_the_median_run_time() {
        let c = ClassStatus {
            running: 2,
            pending: Some(5),
            ..Default::default()
        };
        // Two hosts, three slots seen; a lost attempt shows a slot but has
        // no run time.
        let attempts = [
            attempt("a", 0, "ok", 10.0),
            attempt("a", 1, "failed", 30.0),
            attempt("b", 0, "ok", 20.0),
            attempt("b", 0, "lost", 1000.0),
        ];
        let eta = Eta::of(&c, attempts.iter(), NO_FILE);
        // 7 left on 3 slots: 3 waves of 20 s.
        assert_eq!(
            eta,
            Eta::Left {
                eta: Duration::from_secs(60),
                left: 7,
                slots: 3,
                median_s: 20.0
            }
        );
        assert_eq!(
            eta.text(),
            "ETA ~1m (7 trials left on 3 slots, 20s each by the median run so far)"
        );
    }

    #[test]
    fn without_a_basis_the_eta_is_unknown_and_says_why() {
        let c = ClassStatus {
            running: 1,
            pending: Some(3),
            ..Default::default()
        };
        let lost = [attempt("a", 0, "lost", 5.0)];
        assert_eq!(
            Eta::of(&c, lost.iter(), NO_FILE).text(),
            "ETA unknown (no trial of this class has finished yet)"
        );
        let ok = [attempt("a", 0, "ok", 5.0)];
        let no_pending = ClassStatus {
            running: 1,
            ..Default::default()
        };
        assert_eq!(
            Eta::of(&no_pending, ok.iter(), NO_FILE).text(),
            "ETA unknown (no file)"
        );
        let done = ClassStatus {
            pending: Some(0),
            ..Default::default()
        };
        assert_eq!(Eta::of(&done, ok.iter(), NO_FILE), Eta::NothingLeft);
    }
}
