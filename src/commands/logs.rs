//! `tunectl logs`: what trials printed. The attempts of a study that match
//! the filters (by default the failed ones), each with its command, how it
//! ended, and the stdout and stderr the ledger keeps of it (read from the
//! attempt objects: a scan leaves the tails out).

use serde::Serialize;

use super::inputs::{Opened, ledger_url, open_study, study_arg};
use super::{CliError, failed, print_json, say, say_err, schema};
use crate::ledger::Ledger;
use crate::ledger::records::{AttemptRecord, AttemptStatus, ExitInfo, Failure, PrunedAt};

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// A study file, or a study id in the ledger.
    pub study: String,
    /// Ledger URL or path (default: the study file's `ledger`, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Which attempts: `failed` (the default), `lost`, `pruned`, `ok`, or
    /// `all`.
    #[arg(long, value_enum, default_value_t = Which::Failed)]
    pub status: Which,
    /// Only the attempts of this config, by its label as reports show it
    /// (`threads=4 block=16384`, `baseline`).
    #[arg(long)]
    pub config: Option<String>,
    /// Only the attempts at this cell, by its label (`n=500000`).
    #[arg(long)]
    pub cell: Option<String>,
    /// Only the attempts on this host (its inventory name).
    #[arg(long)]
    pub host: Option<String>,
    /// Only the attempts of this trial: its key, or the start of it (at
    /// least 8 characters).
    #[arg(long)]
    pub trial: Option<String>,
    /// Show at most this many attempts: the latest ones.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
}

/// `--status`: which attempts are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    Failed,
    Lost,
    Pruned,
    Ok,
    All,
}

impl Which {
    fn admits(self, s: AttemptStatus) -> bool {
        match self {
            Which::All => true,
            Which::Failed => s == AttemptStatus::Failed,
            Which::Lost => s == AttemptStatus::Lost,
            Which::Pruned => s == AttemptStatus::Pruned,
            Which::Ok => s == AttemptStatus::Ok,
        }
    }
}

/// `logs --format json` (docs/json.md).
#[derive(Serialize)]
struct LogsDoc<'a> {
    schema: &'static str,
    study: &'a str,
    ledger: &'a str,
    /// Attempts that matched, before `--limit`.
    matched: usize,
    attempts: Vec<Shown<'a>>,
}

/// One attempt as `logs` shows it.
#[derive(Serialize)]
struct Shown<'a> {
    trial_key: &'a str,
    attempt_id: &'a str,
    role: &'a str,
    config: &'a str,
    cell: &'a str,
    host: &'a str,
    host_class: &'a str,
    repeat: u32,
    fidelity: Option<f64>,
    status: AttemptStatus,
    failure: Option<&'a Failure>,
    lost_reason: Option<&'a str>,
    pruned: Option<&'a PrunedAt>,
    exit: Option<&'a ExitInfo>,
    started_at: &'a str,
    duration_s: f64,
    command: &'a str,
    stdout_tail: &'a str,
    stderr_head: &'a str,
    stderr_tail: &'a str,
}

impl<'a> Shown<'a> {
    fn of(r: &'a AttemptRecord) -> Shown<'a> {
        Shown {
            trial_key: &r.trial_key,
            attempt_id: &r.attempt_id,
            role: r.role.as_str(),
            config: &r.config_label,
            cell: &r.cell_label,
            host: &r.host,
            host_class: &r.host_class,
            repeat: r.repeat,
            fidelity: r.fidelity,
            status: r.status,
            failure: r.failure.as_ref(),
            lost_reason: r.lost_reason.as_deref(),
            pruned: r.pruned.as_deref(),
            exit: r.exit.as_ref(),
            started_at: &r.started_at,
            duration_s: r.duration_s,
            command: &r.command,
            stdout_tail: &r.stdout_tail,
            stderr_head: &r.stderr_head,
            stderr_tail: &r.stderr_tail,
        }
    }
}

/// The shortest trial-key prefix `--trial` takes.
const MIN_TRIAL_PREFIX: usize = 8;

pub async fn run(a: LogsArgs) -> Result<(), CliError> {
    if let Some(t) = &a.trial
        && t.len() < MIN_TRIAL_PREFIX
    {
        return Err(CliError::Invalid(format!(
            "--trial `{t}`: give at least {MIN_TRIAL_PREFIX} characters of the trial key"
        )));
    }
    let (name, study) = study_arg(&a.study)?;
    let url = ledger_url(a.ledger.as_deref(), study.as_ref(), None);
    let Some(ledger) = Ledger::open_existing(&url).map_err(failed)? else {
        return Err(CliError::Failed(format!("no ledger at `{url}`")));
    };
    ledger.check_reachable().await.map_err(failed)?;
    let study_id = match open_study(&ledger, &a.study, &name, study.as_ref(), false).await? {
        Opened::Launched(record) => record.study_id,
        Opened::Changed { record, .. } => record.study_id,
        Opened::NotThere => {
            return Err(CliError::Failed(format!(
                "study `{name}` is not in the ledger `{}`{}",
                ledger.url(),
                super::inputs::ledger_hint(&url)
            )));
        }
    };
    let scan = ledger.scan(&study_id).await.map_err(failed)?;
    let mut picked: Vec<&AttemptRecord> = scan
        .records()
        .filter(|r| a.status.admits(r.status))
        .filter(|r| a.config.as_deref().is_none_or(|c| *r.config_label == *c))
        .filter(|r| a.cell.as_deref().is_none_or(|c| *r.cell_label == *c))
        .filter(|r| a.host.as_deref().is_none_or(|h| *r.host == *h))
        .filter(|r| {
            a.trial
                .as_deref()
                .is_none_or(|t| r.trial_key.starts_with(t))
        })
        .collect();
    // Oldest first; attempt ids start with their time.
    picked.sort_by(|x, y| x.attempt_id.cmp(&y.attempt_id));
    let matched = picked.len();
    let skip = matched.saturating_sub(a.limit);
    // The scan keeps no command or output: read each attempt's object.
    let mut full = Vec::new();
    for r in &picked[skip..] {
        match ledger
            .read_attempt(&study_id, &r.trial_key, &r.attempt_id)
            .await
            .map_err(failed)?
        {
            Some(rec) => full.push(rec),
            None => say_err!(
                "warning: attempt {} of trial {} is no longer in the ledger",
                r.attempt_id,
                r.trial_key
            ),
        }
    }
    if a.output.json(false) {
        return print_json(&LogsDoc {
            schema: schema::LOGS,
            study: &study_id,
            ledger: ledger.url(),
            matched,
            attempts: full.iter().map(Shown::of).collect(),
        });
    }
    if matched == 0 {
        say!(
            "no {} attempt of study {study_id} matches (of {} in the ledger){}",
            match a.status {
                Which::All => "".to_string(),
                w => format!("{w:?}").to_lowercase(),
            }
            .trim(),
            scan.attempts.len(),
            if a.status == Which::Failed {
                "; --status all shows every attempt"
            } else {
                ""
            }
        );
        return Ok(());
    }
    if skip > 0 {
        say!(
            "{matched} attempts match; the latest {} (--limit):",
            a.limit
        );
    }
    for r in &full {
        say!("{}", text(r));
    }
    Ok(())
}

/// One attempt for people: a heading, how it ended, its command, then its
/// output as the ledger keeps it.
fn text(r: &AttemptRecord) -> String {
    let mut out = Vec::new();
    let budget = r
        .fidelity
        .map(|b| format!(" at budget {}", crate::fmt::short(b)))
        .unwrap_or_default();
    out.push(format!(
        "== {} {} @ {}{budget} on {} (repeat {}) · {}",
        r.role.as_str(),
        r.config_label,
        r.cell_label,
        r.host,
        r.repeat,
        status_word(r.status)
    ));
    out.push(format!(
        "   trial {} · attempt {} · started {} · took {}",
        r.trial_key,
        r.attempt_id,
        r.started_at,
        crate::fmt::duration_short(r.duration_s)
    ));
    if let Some(f) = &r.failure {
        out.push(format!("   {}: {}", f.class.as_str(), f.detail));
    }
    if let Some(why) = &r.lost_reason {
        out.push(format!("   lost: {why}"));
    }
    if let Some(p) = &r.pruned {
        out.push(format!(
            "   pruned: its progress read {} at budget {}, short at rung budget {}",
            crate::fmt::sig(p.value),
            crate::fmt::short(p.budget),
            crate::fmt::short(p.rung_budget)
        ));
    }
    if let Some(e) = &r.exit {
        out.push(format!("   exit: {}", exit_text(e)));
    }
    out.push(format!("   $ {}", r.command));
    let block = |out: &mut Vec<String>, title: &str, text: &str| {
        if text.is_empty() {
            return;
        }
        out.push(format!("--- {title} ---"));
        out.push(text.trim_end_matches('\n').to_string());
    };
    if r.stdout_tail.is_empty() && r.stderr_head.is_empty() && r.stderr_tail.is_empty() {
        out.push("   (no output kept)".to_string());
    }
    block(&mut out, "stdout (its last 8 KiB)", &r.stdout_tail);
    block(&mut out, "stderr (its first 4 KiB)", &r.stderr_head);
    let tail = if r.stderr_head.is_empty() {
        "stderr (its last 8 KiB)"
    } else {
        "stderr (its last 8 KiB, after the gap)"
    };
    block(&mut out, tail, &r.stderr_tail);
    out.push(String::new());
    out.join("\n")
}

fn status_word(s: AttemptStatus) -> &'static str {
    match s {
        AttemptStatus::Ok => "ok",
        AttemptStatus::Failed => "failed",
        AttemptStatus::Lost => "lost",
        AttemptStatus::Pruned => "pruned",
    }
}

fn exit_text(e: &ExitInfo) -> String {
    match (e.code, e.signal) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "unknown".to_string(),
    }
}
