//! `launch --notify` (or the inventory's `notify`): a shell command run on
//! the launching machine when a launch ends, with the outcome as JSON on
//! its stdin, so that a study can post to a chat or send mail without
//! tunectl knowing how. A notification that fails is a warning: it never
//! changes the launch's exit status.

use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;

use super::launch::{exit_of, said};
use super::{CliError, Exit, say_err};
use crate::launch::events::LaunchSummary;
pub use crate::launch::launcher::BucketOutcome;
use crate::launch::launcher::LaunchOutcome;

/// How long the command may run before it is killed (with its process
/// group).
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(60);

/// What a launch knows about its end, filled in as it goes.
#[derive(Default)]
pub struct LaunchEnd {
    /// The command to run; `None` until the inputs are loaded (a launch
    /// whose study or inventory does not load tells nobody).
    pub notify: Option<String>,
    pub name: String,
    pub study_id: String,
    pub ledger: String,
    pub report: String,
    /// `None` when the launch ended before it ran anything.
    pub summary: Option<LaunchSummary>,
    /// Every bucket's decision, as written to the verdict records.
    pub buckets: Vec<BucketOutcome>,
    /// When the launch started.
    pub started: Option<std::time::Instant>,
}

/// The document on the command's stdin (docs/cli.md, `launch --notify`),
/// and that of `launch --format json` (docs/json.md).
#[derive(Debug, Serialize)]
pub struct Outcome<'a> {
    pub schema: OutcomeSchema,
    pub study: &'a str,
    pub name: &'a str,
    pub ledger: &'a str,
    /// `verdict`, `draft`, `stalled`, `interrupted`, `failed` or `invalid`.
    pub outcome: &'static str,
    pub exit_code: u8,
    /// Seconds since the launch started; `null` when it did not get there.
    pub elapsed_seconds: Option<f64>,
    /// What went wrong, as the launch said it; `null` on exit 0.
    pub message: Option<String>,
    /// The launch's counts; `null` when it ended before running anything.
    pub summary: Option<Counts>,
    pub buckets: &'a [BucketOutcome],
    /// The command that shows the evidence.
    pub report: &'a str,
}

/// The notify document's `schema` is its version number (1), which the
/// commands written for it read; `launch --format json`'s is its name.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub enum OutcomeSchema {
    Notify(u32),
    Named(&'static str),
}

#[derive(Debug, Serialize)]
pub struct Counts {
    pub ran: u64,
    pub ok: u64,
    /// Of `ok`: trials whose config the gate rejected because its output
    /// differs from the baseline's.
    pub output_changed: u64,
    pub failed: u64,
    /// Rung trials stopped early by `fidelity.prune` (among `ran`).
    pub pruned: u64,
    pub lost: u64,
    pub already_in_ledger: u64,
    pub skipped: u64,
    pub confirm_trials: u64,
    /// Sweep trials beyond the plan's repeats, where a decision was close.
    pub racing_trials: u64,
    pub anchors: u64,
    pub voided: u64,
    pub dropped_cells: u64,
    pub unreachable_hosts: Vec<String>,
}

impl LaunchEnd {
    /// The outcome of a launch that ended with `ended`, for the notify
    /// command.
    pub fn outcome(&self, ended: &Result<LaunchOutcome, CliError>) -> Outcome<'_> {
        self.outcome_as(ended, OutcomeSchema::Notify(1))
    }

    /// The outcome of a launch that ended with `ended`, under `schema`.
    pub fn outcome_as(
        &self,
        ended: &Result<LaunchOutcome, CliError>,
        schema: OutcomeSchema,
    ) -> Outcome<'_> {
        let (exit, message) = match ended {
            Ok(o) => (exit_of(o), said(o)),
            Err(e) => (e.status(), e.message().map(str::to_string)),
        };
        Outcome {
            schema,
            study: &self.study_id,
            name: &self.name,
            ledger: &self.ledger,
            outcome: word(exit),
            exit_code: exit.code(),
            elapsed_seconds: self.started.map(|s| s.elapsed().as_secs_f64()),
            message,
            summary: self.summary.as_ref().map(|s| Counts {
                ran: s.ran,
                ok: s.ok,
                output_changed: s.output_changed,
                failed: s.failed,
                pruned: s.pruned,
                lost: s.lost,
                already_in_ledger: s.already_done,
                skipped: s.skipped,
                confirm_trials: s.confirm_trials,
                racing_trials: s.racing_trials,
                anchors: s.anchors,
                voided: s.voided,
                dropped_cells: s.dropped_cells,
                unreachable_hosts: s.unreachable_hosts.iter().map(|(h, _)| h.clone()).collect(),
            }),
            buckets: &self.buckets,
            report: &self.report,
        }
    }
}

/// The word for how a launch ended (docs/cli.md, `launch --notify`).
fn word(exit: Exit) -> &'static str {
    match exit {
        Exit::Success => "verdict",
        Exit::Failed => "failed",
        Exit::Invalid => "invalid",
        Exit::Drafts => "draft",
        Exit::Stalled => "stalled",
        Exit::Interrupted => "interrupted",
    }
}

/// Run `command` with `sh -c`, the outcome as JSON on its stdin and in
/// `TUNECTL_STUDY`, `TUNECTL_OUTCOME`, `TUNECTL_EXIT_CODE`; its stdout and
/// stderr go to the launch's stderr. Waits at most [`NOTIFY_TIMEOUT`].
pub async fn run(command: &str, outcome: &Outcome<'_>) {
    if let Err(why) = try_run(command, outcome, NOTIFY_TIMEOUT).await {
        say_err!("warning: the notify command ({}): {why}", short(command));
    }
}

async fn try_run(command: &str, outcome: &Outcome<'_>, limit: Duration) -> Result<(), String> {
    let json = serde_json::to_vec_pretty(outcome).map_err(|e| e.to_string())?;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .env("TUNECTL_STUDY", outcome.study)
        .env("TUNECTL_OUTCOME", outcome.outcome)
        .env("TUNECTL_EXIT_CODE", outcome.exit_code.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::from(std::io::stderr()))
        // Its own process group, so that a timeout kills what it started.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let pid = child.id();
    let mut stdin = child.stdin.take();
    let talk = async {
        if let Some(s) = stdin.as_mut() {
            // A command that does not read its stdin is fine.
            let _ = s.write_all(&json).await;
        }
        drop(stdin.take());
        child.wait().await
    };
    match tokio::time::timeout(limit, talk).await {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(match status.code() {
            Some(c) => format!("exited {c}"),
            None => "was killed by a signal".to_string(),
        }),
        Ok(Err(e)) => Err(format!("cannot wait for it: {e}")),
        Err(_) => {
            if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
                // SAFETY: kill(2) on the process group we started.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
            }
            Err(format!(
                "did not end within {}: killed",
                humantime::format_duration(limit)
            ))
        }
    }
}

/// A command as a warning names it: its first 60 characters.
fn short(command: &str) -> String {
    let mut s: String = command.chars().take(60).collect();
    if command.chars().count() > 60 {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> LaunchEnd {
        LaunchEnd {
            notify: None,
            name: "s".into(),
            study_id: "s".into(),
            ledger: "file:///l".into(),
            report: "tunectl report s.yaml".into(),
            summary: None,
            buckets: Vec::new(),
            started: None,
        }
    }

    #[tokio::test]
    async fn a_command_that_hangs_is_killed_at_its_limit() {
        let end = outcome();
        let o = end.outcome(&Ok(LaunchOutcome::Verdict));
        let started = std::time::Instant::now();
        let err = try_run("sleep 30 & wait", &o, Duration::from_millis(300))
            .await
            .expect_err("killed");
        assert!(err.contains("did not end within 300ms: killed"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn the_outcome_arrives_on_stdin_and_in_the_environment() {
        let dir = tempfile::tempdir().expect("tmp");
        let out = dir.path().join("got");
        let end = outcome();
        let o = end.outcome(&Ok(LaunchOutcome::Drafts {
            drafts: vec![crate::launch::launcher::DraftBucket {
                host_class: "c".into(),
                bucket: "b".into(),
                reason: crate::decide::LevelReasons(vec![
                    crate::decide::LevelReason::NothingMeasured,
                ]),
            }],
            dropped_cells: 0,
        }));
        let cmd = format!(
            "cat > '{}'; echo \"$TUNECTL_STUDY $TUNECTL_OUTCOME $TUNECTL_EXIT_CODE\" >> '{}'",
            out.display(),
            out.display()
        );
        try_run(&cmd, &o, Duration::from_secs(20))
            .await
            .expect("ran");
        let text = std::fs::read_to_string(&out).expect("written");
        let (json, env) = text.rsplit_once('}').expect("JSON then a line");
        let doc: serde_json::Value = serde_json::from_str(&format!("{json}}}")).expect("JSON");
        assert_eq!(
            doc["schema"], 1,
            "the notify document keeps its version number"
        );
        assert_eq!(doc["outcome"], "draft");
        assert_eq!(doc["exit_code"], 3);
        assert_eq!(
            doc["message"],
            "the launch finished, but not every bucket is a VERDICT (1 draft); what export writes for them is not final:\n  c · b: no candidate has been measured yet"
        );
        assert_eq!(env.trim(), "s draft 3");
        let err = try_run("exit 7", &o, Duration::from_secs(20))
            .await
            .expect_err("failed");
        assert_eq!(err, "exited 7");
    }
}
