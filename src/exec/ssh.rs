//! Hosts reached over SSH.
//!
//! One multiplexed master connection per host (the `openssh` crate, native
//! mux), many sessions over it, at most `max_sessions` trials at once.
//! Nothing is installed on the host: every remote step is a POSIX `sh`
//! script sent on the session's standard input (so the remote login shell
//! only ever sees `exec /bin/sh -s`, whatever shell it is), wrapped in a
//! function so that the whole script is read before any of it runs.
//!
//! An attempt is one remote command. The wrapper runs the warm-ups and the
//! counted run, each in its own process group (`setsid`) so that a timeout
//! or Ctrl-C kills everything the trial started; it reports each run's pid
//! and exit status, then the result file, the sha256 digests of the declared
//! outputs (computed on the host), the numbers files, the head and tail of
//! stdout and stderr, as length-prefixed frames on its stdout:
//!
//! ```text
//! @@tunectl run <phase> <pid>
//! @@tunectl rc <status> <t0 ns|x> <t1 ns|x>
//! @@tunectl size <stream> <bytes>
//! @@tunectl file <tag> <n>\n<n bytes>\n
//! @@tunectl missing <tag> [why]
//! @@tunectl digest <output index> <hex|-|none> [why]
//! @@tunectl setup <message>
//! @@tunectl end
//! ```
//!
//! The wrapper also bounds every run on its own: a watchdog kills it a
//! little after its timeout, and a guard reading the session's input (the
//! launcher keeps it open, silent, while the attempt runs) kills it when
//! that input ends: a launcher killed outright, or a session that died,
//! leaves nothing running on the host.
//!
//! A stream that ends without `end` while the master connection is gone is
//! a lost host: the attempt is lost (it runs again elsewhere), the host is
//! marked down and retried with back-off, and the process groups it was
//! running are killed when it answers again.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::attempt::{MAX_OUTPUT_BYTES, MAX_RESULT_BYTES};
use super::local::{HEAD_BYTES, MAX_LOG_BYTES, RunOutput, TAIL_BYTES, head_and_tail};
use super::{AttemptOutcome, AttemptSpec, HostState, Transport};
use crate::fingerprint::{self, Fingerprint, PROBE_TIMEOUT, TOOL_TIMEOUT};
use crate::gate::{self, MAX_VALUE_FILE_BYTES};
use crate::ledger::records::ExitInfo;
use crate::spec::inventory::{HostKeyChecking, SshHost};
use crate::spec::shell::quote_word;
use crate::trial::Phase;

/// Default `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Keep-alive probes on the master connection: a host that stops answering
/// is noticed within about three intervals.
const SERVER_ALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// Seconds an idle master connection stays up (it is idle only between
/// trials, or after its launcher died).
const MASTER_IDLE_EXIT_S: usize = 600;

/// First and longest wait between reconnection tries of a dropped host.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Grace between SIGTERM and SIGKILL when a remote trial is stopped.
const KILL_GRACE_S: u32 = 2;

/// How long the wrapper may take to report after its trial was killed.
const AFTER_KILL: Duration = Duration::from_secs(20);

/// Limit for small remote commands (workdir, kill, reap).
const SMALL_COMMAND: Duration = Duration::from_secs(30);

/// Longest file frame accepted from a host: the largest file the wrapper
/// sends (a full log, a result, a tolerance file) with room to spare. A
/// longer length is a garbled report, never an allocation.
const MAX_FRAME_BYTES: usize = 2 * MAX_LOG_BYTES as usize;

/// A host over SSH as a transport.
pub struct SshTransport {
    name: String,
    cfg: SshHost,
    control_dir: PathBuf,
    keep_workdirs: bool,
    /// Trials (and probes) in flight over the master connection.
    sessions: Semaphore,
    /// The live master connection, `None` while the host is down.
    current: RwLock<Option<Arc<Session>>>,
    /// Serialises reconnection.
    conn: tokio::sync::Mutex<Conn>,
    /// The remote root of attempt directories, known once connected.
    workdir: RwLock<Option<String>>,
    /// What the first probe asked for and found.
    tools: Mutex<BTreeMap<String, String>>,
    fingerprint: Mutex<Option<Fingerprint>>,
    /// Process groups of attempts lost with the connection, killed when the
    /// host answers again.
    orphans: Mutex<Vec<Orphan>>,
}

#[derive(Debug, Clone)]
struct Orphan {
    pgid: u32,
    attempt_id: String,
}

#[derive(Debug)]
struct Conn {
    /// Why the host is down and since when; `None` while it is up.
    down: Option<(String, Instant)>,
    /// The down period was reported to the scheduler.
    reported: bool,
    retry_at: Instant,
    backoff: Duration,
}

impl SshTransport {
    pub fn new(name: &str, cfg: SshHost, control_dir: PathBuf, keep_workdirs: bool) -> Self {
        let permits = cfg.max_sessions.max(1) as usize;
        SshTransport {
            name: name.to_string(),
            cfg,
            control_dir,
            keep_workdirs,
            sessions: Semaphore::new(permits),
            current: RwLock::new(None),
            conn: tokio::sync::Mutex::new(Conn {
                down: None,
                reported: false,
                retry_at: Instant::now(),
                backoff: FIRST_RETRY,
            }),
            workdir: RwLock::new(None),
            tools: Mutex::new(BTreeMap::new()),
            fingerprint: Mutex::new(None),
            orphans: Mutex::new(Vec::new()),
        }
    }

    /// Run a small POSIX `sh` script on the host (connecting first if
    /// needed) and return its stdout; a non-zero exit is an error with its
    /// stderr. For a Slurm login host.
    pub async fn run_remote(&self, body: &str, limit: Duration) -> Result<Vec<u8>, String> {
        let session = self.live_session().await?;
        run_script(&session, body, limit).await.map(|o| o.stdout)
    }

    /// The live master connection, connecting first when there is none or
    /// it has ended.
    async fn live_session(&self) -> Result<Arc<Session>, String> {
        if let Some(s) = self.session()
            && s.check().await.is_ok()
        {
            return Ok(s);
        }
        let s = self
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.cfg.host))?;
        if let Ok(mut c) = self.current.write() {
            *c = Some(s.clone());
        }
        Ok(s)
    }

    fn session(&self) -> Option<Arc<Session>> {
        self.current.read().ok().and_then(|s| s.clone())
    }

    /// Open the master connection and find the remote work root.
    async fn connect(&self) -> Result<Arc<Session>, String> {
        let mut b = SessionBuilder::default();
        b.known_hosts_check(match self.cfg.strict_host_key_checking {
            HostKeyChecking::Yes => KnownHosts::Strict,
            HostKeyChecking::AcceptNew => KnownHosts::Add,
        })
        .connect_timeout(self.cfg.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT))
        .server_alive_interval(SERVER_ALIVE_INTERVAL)
        .control_directory(&self.control_dir);
        // A master left behind by a launcher that was killed exits on its
        // own once idle that long.
        if let Some(idle) = std::num::NonZeroUsize::new(MASTER_IDLE_EXIT_S) {
            b.control_persist(ControlPersist::IdleFor(idle));
        }
        if let Some(p) = self.cfg.port {
            b.port(p);
        }
        if let Some(u) = &self.cfg.user {
            b.user(u.clone());
        }
        if let Some(k) = &self.cfg.identity_file {
            b.keyfile(expand_home(k));
        }
        if let Some(k) = &self.cfg.known_hosts_file {
            b.user_known_hosts_file(expand_home(k));
        }
        if let Some(j) = &self.cfg.proxy_jump {
            b.jump_hosts(j.split(',').map(str::trim).filter(|s| !s.is_empty()));
        }
        let session = b
            .connect_mux(&self.cfg.host)
            .await
            .map_err(|e| error_chain(&e))?;
        let session = Arc::new(session);
        let root = self.resolve_workdir(&session).await?;
        if let Ok(mut w) = self.workdir.write() {
            *w = Some(root);
        }
        Ok(session)
    }

    /// `workdir`, or `${XDG_CACHE_HOME:-$HOME/.cache}/tunectl/work`; `~/`
    /// and relative paths are taken from the remote home.
    async fn resolve_workdir(&self, session: &Arc<Session>) -> Result<String, String> {
        let body = match &self.cfg.workdir {
            Some(w) if w.starts_with('/') => return Ok(w.trim_end_matches('/').to_string()),
            Some(w) => format!(
                "printf '%s/%s\\n' \"$HOME\" {}",
                quote_word(w.trim_start_matches("~/"))
            ),
            None => "printf '%s/tunectl/work\\n' \"${XDG_CACHE_HOME:-$HOME/.cache}\"".to_string(),
        };
        let out = run_script(session, &body, SMALL_COMMAND).await?;
        let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !root.starts_with('/') {
            return Err(format!(
                "cannot find a work directory on the host (got `{root}`; is $HOME set?)"
            ));
        }
        Ok(root)
    }

    /// The host dropped: forget the connection and plan the first retry.
    async fn mark_down(&self, reason: &str) {
        let old = self.current.write().ok().and_then(|mut s| s.take());
        let mut conn = self.conn.lock().await;
        if conn.down.is_none() {
            conn.down = Some((reason.to_string(), Instant::now()));
            conn.reported = false;
            conn.backoff = FIRST_RETRY;
            conn.retry_at = Instant::now() + FIRST_RETRY;
        }
        drop(conn);
        if let Some(s) = old
            && let Ok(s) = Arc::try_unwrap(s)
        {
            let _ = s.close().await;
        }
    }

    /// Kill the process groups of attempts lost with an earlier connection,
    /// where they still run (checked by their attempt id in the process
    /// environment, so a reused pid is never touched).
    async fn reap_orphans(&self, session: &Arc<Session>) -> usize {
        let orphans: Vec<Orphan> = self
            .orphans
            .lock()
            .map(|mut o| std::mem::take(&mut *o))
            .unwrap_or_default();
        if orphans.is_empty() {
            return 0;
        }
        let mut body = String::from("tc_n=0\n");
        for o in &orphans {
            let _ = writeln!(
                body,
                "if [ -r /proc/{pid}/environ ] && tr '\\000' '\\n' </proc/{pid}/environ | grep -qx {id}; then kill -s KILL -- -{pid} 2>/dev/null || kill -s KILL {pid} 2>/dev/null; tc_n=$((tc_n + 1)); fi",
                pid = o.pgid,
                id = quote_word(&format!("TUNECTL_ATTEMPT_ID={}", o.attempt_id)),
            );
        }
        body.push_str("printf '%s\\n' \"$tc_n\"\n");
        match run_script(session, &body, SMALL_COMMAND).await {
            Ok(out) => String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or(0),
            Err(_) => {
                // Try again on the next reconnection.
                if let Ok(mut o) = self.orphans.lock() {
                    o.extend(orphans);
                }
                0
            }
        }
    }

    /// Stop a remote run: SIGTERM to its process group, SIGKILL after a
    /// grace period. Uses a session of its own (not counted against
    /// `max_sessions`: a full host must still be able to kill).
    async fn kill_remote(&self, session: &Arc<Session>, pgid: u32) -> Result<(), String> {
        let body = format!(
            "kill -s TERM -- -{pgid} 2>/dev/null || kill -s TERM {pgid} 2>/dev/null || exit 0\n\
             tc_i=0\n\
             while [ $tc_i -lt {KILL_GRACE_S} ]; do\n\
             \x20 sleep 1\n\
             \x20 kill -s 0 -- -{pgid} 2>/dev/null || kill -s 0 {pgid} 2>/dev/null || exit 0\n\
             \x20 tc_i=$((tc_i + 1))\n\
             done\n\
             kill -s KILL -- -{pgid} 2>/dev/null || kill -s KILL {pgid} 2>/dev/null\n\
             exit 0\n"
        );
        run_script(session, &body, SMALL_COMMAND).await.map(|_| ())
    }
}

/// `~/x` → `$HOME/x` on this machine (for key and known-hosts files).
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// An error and its sources, on one line.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !more.is_empty() && !text.contains(&more) {
            text.push_str(": ");
            text.push_str(more.trim());
        }
        source = s.source();
    }
    text
}

/// Wrap a script body so that the shell reads all of it before running any
/// of it, with standard input closed for whatever it runs.
pub(crate) fn wrap(body: &str) -> String {
    format!("tc_main() {{\n{body}\n}}\ntc_main </dev/null\n")
}

/// [`wrap`], with the session's standard input (past the script: nothing
/// more comes until the launcher closes it) kept as file descriptor 3 for
/// the wrapper's guard ([`WrapperOptions::guard_input`]).
pub(crate) fn wrap_guarded(body: &str) -> String {
    format!("tc_main() {{\n{body}\n}}\ntc_main 3<&0 </dev/null\n")
}

struct ScriptOutput {
    stdout: Vec<u8>,
}

/// Run a small script on the host and collect its output.
async fn run_script(
    session: &Arc<Session>,
    body: &str,
    limit: Duration,
) -> Result<ScriptOutput, String> {
    let work = async {
        let mut child = Session::to_raw_command(session.clone(), "exec /bin/sh -s")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .await
            .map_err(|e| error_chain(&e))?;
        if let Some(mut stdin) = child.stdin().take() {
            stdin
                .write_all(wrap(body).as_bytes())
                .await
                .map_err(|e| format!("cannot send the script: {e}"))?;
            let _ = stdin.shutdown().await;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| error_chain(&e))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "remote script failed ({}): {}",
                out.status,
                err.trim().chars().take(500).collect::<String>()
            ));
        }
        Ok(ScriptOutput { stdout: out.stdout })
    };
    match tokio::time::timeout(limit, work).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
    }
}

/// Whether `name` can be exported by a POSIX shell.
pub(crate) fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// How the attempt wrapper behaves beyond the attempt itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct WrapperOptions {
    /// Keep the directory of a successful attempt.
    pub keep_workdirs: bool,
    /// The wrapper enforces each run's timeout itself (a batch job has no
    /// launcher connected to kill it), and reports it with a `timeout`
    /// frame.
    pub self_timeout: bool,
    /// Seconds the wrapper's own timeout allows beyond the trial's (an ssh
    /// launcher kills at the timeout itself; the wrapper's is the backstop
    /// for when the launcher is gone).
    pub timeout_margin_s: u64,
    /// Run a guard that reads file descriptor 3 (the session's standard
    /// input, see [`wrap_guarded`]) and, at its end (the launcher or its
    /// connection is gone), stops the wrapper and kills the running run's
    /// group.
    pub guard_input: bool,
    /// Run this probe script first (in a subshell, in the trial directory)
    /// and send its output as the file frame `probe`.
    pub probe: Option<String>,
    /// Time runs with the host's clock (`date +%s%N`).
    pub remote_clock: bool,
}

/// The remote script of one attempt (see the module documentation).
pub(crate) fn attempt_script(spec: &AttemptSpec, opts: &WrapperOptions) -> Result<String, String> {
    let keep_workdirs = opts.keep_workdirs;
    let mut s = String::new();
    let q = quote_word;
    s.push_str(&SCRIPT_FUNCTIONS.replace("TC_TAIL", &TAIL_BYTES.to_string()));
    let _ = writeln!(s, "tc_dir={}", q(&spec.trial_dir));
    let _ = writeln!(s, "tc_result={}", q(&spec.result_path));
    if opts.self_timeout {
        let secs = spec.timeout.as_secs() + u64::from(spec.timeout.subsec_nanos() > 0);
        let _ = writeln!(s, "tc_timeout={}", secs.max(1) + opts.timeout_margin_s);
    } else {
        s.push_str("tc_timeout=\n");
    }
    // Hashing the outputs gets the trial's timeout too.
    let _ = writeln!(s, "tc_read_limit={}", spec.timeout.as_secs().max(1));
    s.push_str(
        "mkdir -p \"$tc_dir\" 2>/dev/null || { printf '@@tunectl setup cannot create the trial directory %s\\n' \"$tc_dir\"; printf '@@tunectl end\\n'; return 0; }\n\
         cd \"$tc_dir\" || { printf '@@tunectl setup cannot enter the trial directory %s\\n' \"$tc_dir\"; printf '@@tunectl end\\n'; return 0; }\n",
    );
    if opts.guard_input {
        s.push_str("tc_guard\n");
    } else {
        s.push_str("tc_guard_pid=\n");
    }
    if let Some(probe) = &opts.probe {
        let _ = writeln!(
            s,
            "( {probe}\n) >.tunectl-probe 2>/dev/null </dev/null\ntc_file probe .tunectl-probe 1048576\nrm -f .tunectl-probe"
        );
    }
    for (k, v) in &spec.env {
        if !is_env_name(k) {
            return Err(format!("`{k}` is not a valid environment variable name"));
        }
        let _ = writeln!(s, "{k}={}; export {k}", q(v));
    }
    let mut removals = String::from("rm -f \"$tc_result\"");
    for o in &spec.outputs {
        removals.push(' ');
        removals.push_str(&q(o));
    }
    let phases: Vec<&str> = (0..spec.warmup)
        .map(|_| Phase::Warmup.as_str())
        .chain(std::iter::once(Phase::Measure.as_str()))
        .collect();
    let _ = writeln!(
        s,
        "tc_ok=1\ntc_first=1\nfor tc_phase in {}; do",
        phases.join(" ")
    );
    // The directory is new: only runs after the first can find old files.
    let _ = writeln!(s, "  [ $tc_first = 1 ] || {removals}\n  tc_first=0");
    s.push_str("  TUNECTL_PHASE=$tc_phase; export TUNECTL_PHASE\n");
    // Where no launcher watches the run, the host's clock times it (where
    // `date` has nanoseconds); otherwise the launcher times it between the
    // `run` and `rc` frames.
    s.push_str(if opts.remote_clock {
        "  tc_t0=$(date +%s%N 2>/dev/null)\n"
    } else {
        "  tc_t0=x\n"
    });
    let _ = writeln!(
        s,
        "  $tc_setsid /bin/sh -c {} >.tunectl-run-stdout 2>.tunectl-run-stderr </dev/null &",
        q(&spec.command)
    );
    s.push_str(
        "  tc_pid=$!\n\
         \x20 [ -z \"$tc_guard_pid\" ] || echo \"$tc_pid\" >.tunectl-run-pid\n\
         \x20 printf '@@tunectl run %s %s\\n' \"$tc_phase\" \"$tc_pid\"\n\
         \x20 tc_dog=\n\
         \x20 [ -z \"$tc_timeout\" ] || tc_watch\n\
         \x20 wait \"$tc_pid\"; tc_rc=$?\n\
         \x20 [ -z \"$tc_dog\" ] || kill -s TERM \"$tc_dog\" 2>/dev/null\n\
         \x20 if [ -e .tunectl-timed-out ]; then rm -f .tunectl-timed-out; printf '@@tunectl timeout\\n'; fi\n\
         \x20 tc_t1=x; [ \"$tc_t0\" = x ] || tc_t1=$(date +%s%N 2>/dev/null)\n\
         \x20 printf '@@tunectl rc %s %s %s\\n' \"$tc_rc\" \"${tc_t0:-x}\" \"${tc_t1:-x}\"\n\
         \x20 [ -n \"$tc_setsid\" ] && kill -s KILL -- \"-$tc_pid\" 2>/dev/null\n",
    );
    if spec.keep_logs {
        s.push_str(
            "  { printf '== tunectl: %s run ==\\n' \"$tc_phase\"; cat .tunectl-run-stdout; } >>.tunectl-stdout.log\n\
             \x20 { printf '== tunectl: %s run ==\\n' \"$tc_phase\"; cat .tunectl-run-stderr; } >>.tunectl-stderr.log\n",
        );
    }
    s.push_str("  [ \"$tc_rc\" -eq 0 ] || { tc_ok=0; break; }\ndone\n");
    // Size, tail and head of the last run's streams (nothing when empty).
    let _ = writeln!(
        s,
        "tc_stream stdout .tunectl-run-stdout 0\ntc_stream stderr .tunectl-run-stderr {HEAD_BYTES}"
    );
    s.push_str("if [ $tc_ok = 1 ]; then\n");
    let _ = writeln!(s, "  tc_rfile result \"$tc_result\" {MAX_RESULT_BYTES}");
    for (i, o) in spec.outputs.iter().enumerate() {
        let _ = writeln!(s, "  tc_digest {i} {} {MAX_OUTPUT_BYTES}", q(o));
    }
    for (i, f) in spec.tolerance_files.iter().enumerate() {
        let _ = writeln!(s, "  tc_rfile value:{i} {} {MAX_VALUE_FILE_BYTES}", q(f));
    }
    s.push_str("fi\n");
    if spec.keep_logs {
        let _ = writeln!(
            s,
            "tc_file log:stdout .tunectl-stdout.log {MAX_LOG_BYTES}\n\
             tc_file log:stderr .tunectl-stderr.log {MAX_LOG_BYTES}"
        );
    }
    if !keep_workdirs {
        s.push_str("if [ $tc_ok = 1 ]; then cd / && rm -rf \"$tc_dir\"; fi\n");
    }
    // The guard's work is done: stop it before the end frame, so that the
    // launcher closing the session afterwards kills nothing.
    s.push_str("[ -z \"$tc_guard_pid\" ] || { kill -s TERM \"$tc_guard_pid\" 2>/dev/null; rm -f \"$tc_dir/.tunectl-run-pid\"; }\n");
    s.push_str("printf '@@tunectl end\\n'\n");
    Ok(s)
}

/// Shell functions of the attempt wrapper.
const SCRIPT_FUNCTIONS: &str = r#"umask 022
if command -v setsid >/dev/null 2>&1; then tc_setsid=setsid; else tc_setsid=; fi
tc_watch() {
  # Kill the run's group at the timeout; killed itself, it stops its sleep.
  (
    trap 'kill -s TERM "$tc_s" 2>/dev/null; exit 0' TERM
    sleep "$tc_timeout" & tc_s=$!
    wait "$tc_s" || exit 0
    : >.tunectl-timed-out
    kill -s TERM -- "-$tc_pid" 2>/dev/null || kill -s TERM "$tc_pid" 2>/dev/null
    sleep 2
    kill -s KILL -- "-$tc_pid" 2>/dev/null || kill -s KILL "$tc_pid" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  tc_dog=$!
}
tc_guard() {
  # The launcher holds the session's input open while the attempt runs and
  # sends nothing on it: its end means the launcher or its connection is
  # gone. Then stop the wrapper (no next run starts) and kill the running
  # run's group. Stopped itself (the attempt is over), it stops its cat.
  tc_main_pid=$$
  (
    trap 'kill -s TERM "$tc_c" 2>/dev/null; exit 0' TERM
    cat <&3 >/dev/null 2>&1 & tc_c=$!
    wait "$tc_c"
    kill -s TERM "$tc_main_pid" 2>/dev/null
    tc_p=$(cat .tunectl-run-pid 2>/dev/null)
    [ -n "$tc_p" ] || exit 0
    kill -s TERM -- "-$tc_p" 2>/dev/null || kill -s TERM "$tc_p" 2>/dev/null
    sleep 2
    kill -s KILL -- "-$tc_p" 2>/dev/null || kill -s KILL "$tc_p" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  tc_guard_pid=$!
  exec 3<&-
}
tc_stream() {
  # Size, tail and (when $3 > 0) head of a stream; nothing for an empty one.
  [ -s "$2" ] || return 0
  tc_n=$(wc -c <"$2" | tr -d ' ')
  printf '@@tunectl size %s %s\n' "$1" "$tc_n"
  tc_k=$tc_n; [ "$tc_k" -gt TC_TAIL ] && tc_k=TC_TAIL
  printf '@@tunectl file %s_tail %s\n' "$1" "$tc_k"
  tail -c "$tc_k" <"$2"
  printf '\n'
  if [ "$3" -gt 0 ] && [ "$tc_n" -gt TC_TAIL ]; then
    tc_k=$3
    printf '@@tunectl file %s_head %s\n' "$1" "$tc_k"
    head -c "$tc_k" <"$2"
    printf '\n'
  fi
}
tc_file() {
  if [ -f "$2" ]; then
    tc_n=$(wc -c <"$2" | tr -d ' ')
    [ "$tc_n" -gt "$3" ] && tc_n=$3
    printf '@@tunectl file %s %s\n' "$1" "$tc_n"
    head -c "$tc_n" <"$2"
    printf '\n'
  else
    printf '@@tunectl missing %s\n' "$1"
  fi
}
tc_why() {
  # Why $1 is not read: nothing for a regular file (a symlink is followed
  # only to one) of at most $2 bytes. Nothing else is opened: a FIFO would
  # block, a device never end.
  if [ ! -e "$1" ] && [ ! -L "$1" ]; then echo "was not written"; return 0; fi
  tc_l=; [ -L "$1" ] && tc_l="a symlink to "
  if [ ! -f "$1" ]; then
    if [ ! -e "$1" ]; then tc_k="nothing (a dangling symlink)"
    elif [ -d "$1" ]; then tc_k="a directory"
    elif [ -p "$1" ]; then tc_k="a FIFO"
    elif [ -c "$1" ]; then tc_k="a character device"
    elif [ -b "$1" ]; then tc_k="a block device"
    elif [ -S "$1" ]; then tc_k="a socket"
    else tc_k="something else"; fi
    echo "is $tc_l$tc_k, not a regular file"; return 0
  fi
  tc_n=$(wc -c <"$1" | tr -d ' ')
  if [ "$tc_n" -gt "$2" ]; then echo "is $tc_n bytes, over the limit of $3"; fi
}
tc_rfile() {
  # A regular file of at most $3 bytes, else why not.
  tc_w=$(tc_why "$2" "$3" "$(tc_size "$3")")
  if [ -z "$tc_w" ]; then
    tc_n=$(wc -c <"$2" | tr -d ' ')
    printf '@@tunectl file %s %s\n' "$1" "$tc_n"
    head -c "$tc_n" <"$2"
    printf '\n'
  else
    printf '@@tunectl missing %s %s\n' "$1" "$tc_w"
  fi
}
tc_size() {
  if [ $(($1 % 1073741824)) -eq 0 ]; then echo "$(($1 / 1073741824)) GiB"
  elif [ $(($1 % 1048576)) -eq 0 ]; then echo "$(($1 / 1048576)) MiB"
  else echo "$1 bytes"; fi
}
tc_sha() {
  tc_to=; command -v timeout >/dev/null 2>&1 && tc_to="timeout $tc_read_limit"
  if command -v sha256sum >/dev/null 2>&1; then $tc_to sha256sum <"$1"
  elif command -v shasum >/dev/null 2>&1; then $tc_to shasum -a 256 <"$1"
  elif command -v openssl >/dev/null 2>&1; then $tc_to openssl dgst -sha256 -r <"$1"
  else echo none
  fi | cut -d' ' -f1
}
tc_digest() {
  tc_w=$(tc_why "$2" "$3" "$(tc_size "$3")")
  if [ -z "$tc_w" ]; then
    tc_h=$(tc_sha "$2")
    if [ -n "$tc_h" ]; then
      printf '@@tunectl digest %s %s\n' "$1" "$tc_h"
    else
      printf "@@tunectl digest %s - was still being read at the trial's timeout\n" "$1"
    fi
  else
    printf '@@tunectl digest %s - %s\n' "$1" "$tc_w"
  fi
}
"#;

/// One frame of the wrapper's report.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame {
    /// The run was killed by the wrapper's own timeout.
    TimedOut,
    Run {
        phase: String,
        pid: u32,
    },
    Rc {
        rc: i32,
        remote_ns: Option<u128>,
    },
    Size {
        stream: String,
        bytes: usize,
    },
    File {
        tag: String,
        bytes: Vec<u8>,
    },
    Missing {
        tag: String,
        /// Why it was not sent (absent from older wrappers).
        why: Option<String>,
    },
    Digest {
        index: usize,
        hex: Option<String>,
        /// Why there is no digest (absent from older wrappers).
        why: Option<String>,
    },
    Setup(String),
    End,
}

/// Read frames from the wrapper's stdout until it ends; a malformed frame
/// ends the stream with an error.
pub(crate) async fn read_frames<R: tokio::io::AsyncRead + Unpin>(
    reader: R,
    tx: mpsc::UnboundedSender<Result<Frame, String>>,
) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                let _ = tx.send(Err(format!("reading from the host: {e}")));
                return;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\n');
        let frame = match parse_header(text) {
            Ok(Header::Frame(f)) => f,
            Ok(Header::File { tag, len }) if len > MAX_FRAME_BYTES => {
                let _ = tx.send(Err(format!(
                    "the reply for `{tag}` announces {len} bytes, more than the {MAX_FRAME_BYTES} a report may hold"
                )));
                return;
            }
            Ok(Header::File { tag, len }) => {
                let mut bytes = vec![0u8; len];
                if let Err(e) = reader.read_exact(&mut bytes).await {
                    let _ = tx.send(Err(format!("the reply for `{tag}` was cut short: {e}")));
                    return;
                }
                let mut nl = [0u8; 1];
                if reader.read_exact(&mut nl).await.is_err() || nl[0] != b'\n' {
                    let _ = tx.send(Err(format!("the reply for `{tag}` is garbled")));
                    return;
                }
                Frame::File { tag, bytes }
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let end = frame == Frame::End;
        if tx.send(Ok(frame)).is_err() || end {
            return;
        }
    }
}

enum Header {
    Frame(Frame),
    File { tag: String, len: usize },
}

fn parse_header(line: &str) -> Result<Header, String> {
    let garbled = || {
        format!(
            "unexpected line from the host's wrapper: `{}`",
            line.chars().take(200).collect::<String>()
        )
    };
    let rest = line.strip_prefix("@@tunectl ").ok_or_else(garbled)?;
    let mut words = rest.splitn(2, ' ');
    let kind = words.next().unwrap_or_default();
    let args = words.next().unwrap_or_default();
    let mut parts = args.split(' ');
    let mut next = || parts.next().ok_or_else(garbled);
    let frame = match kind {
        "run" => Frame::Run {
            phase: next()?.to_string(),
            pid: next()?.parse().map_err(|_| garbled())?,
        },
        "rc" => {
            let rc = next()?.parse().map_err(|_| garbled())?;
            let t0 = next()?.parse::<u128>().ok();
            let t1 = next()?.parse::<u128>().ok();
            Frame::Rc {
                rc,
                remote_ns: t0.zip(t1).and_then(|(a, b)| b.checked_sub(a)),
            }
        }
        "size" => Frame::Size {
            stream: next()?.to_string(),
            bytes: next()?.parse().map_err(|_| garbled())?,
        },
        "file" => {
            let tag = next()?.to_string();
            let len: usize = next()?.parse().map_err(|_| garbled())?;
            return Ok(Header::File { tag, len });
        }
        "missing" => {
            let mut words = args.splitn(2, ' ');
            Frame::Missing {
                tag: words.next().unwrap_or_default().to_string(),
                why: words.next().map(str::to_string).filter(|w| !w.is_empty()),
            }
        }
        "digest" => {
            let mut words = args.splitn(3, ' ');
            let index = words
                .next()
                .and_then(|w| w.parse().ok())
                .ok_or_else(garbled)?;
            let hex = words.next().ok_or_else(garbled)?;
            Frame::Digest {
                index,
                hex: (hex != "-").then(|| hex.to_string()),
                why: words.next().map(str::to_string).filter(|w| !w.is_empty()),
            }
        }
        "setup" => Frame::Setup(args.to_string()),
        "timeout" => Frame::TimedOut,
        "end" => Frame::End,
        _ => return Err(garbled()),
    };
    Ok(Header::Frame(frame))
}

/// Exit information from a shell's `$?`: above 128 is a signal.
pub(crate) fn exit_info(rc: i32) -> ExitInfo {
    if (129..=128 + 64).contains(&rc) {
        ExitInfo {
            code: None,
            signal: Some(rc - 128),
        }
    } else {
        ExitInfo {
            code: Some(rc),
            signal: None,
        }
    }
}

/// What the frames of one attempt said.
#[derive(Default)]
pub(crate) struct Collected {
    pub runs: Vec<(String, Option<ExitInfo>, Option<Duration>, Instant)>,
    pub files: BTreeMap<String, Vec<u8>>,
    pub sizes: BTreeMap<String, usize>,
    pub digests: BTreeMap<usize, Result<String, Option<String>>>,
    /// Files not sent, with why (when the wrapper said).
    pub missing: BTreeMap<String, Option<String>>,
    pub setup: Option<String>,
    pub timed_out: bool,
    pub ended: bool,
}

impl Collected {
    /// Take in a frame read after the fact (from a file), where no clock
    /// ran: run times stay unknown.
    pub fn absorb(&mut self, frame: Frame) {
        match frame {
            Frame::Run { phase, .. } => self.runs.push((phase, None, None, Instant::now())),
            Frame::Rc { rc, remote_ns } => {
                if let Some(run) = self.runs.last_mut() {
                    run.1 = Some(exit_info(rc));
                    run.2 =
                        remote_ns.map(|ns| Duration::from_nanos(ns.min(u64::MAX as u128) as u64));
                }
            }
            Frame::Size { stream, bytes } => {
                self.sizes.insert(stream, bytes);
            }
            Frame::File { tag, bytes } => {
                self.files.insert(tag, bytes);
            }
            Frame::Missing { tag, why } => {
                self.missing.insert(tag, why);
            }
            Frame::Digest { index, hex, why } => {
                self.digests.insert(index, hex.ok_or(why));
            }
            Frame::Setup(m) => self.setup = Some(m),
            Frame::TimedOut => self.timed_out = true,
            Frame::End => self.ended = true,
        }
    }
}

#[async_trait]
impl Transport for SshTransport {
    fn trial_dir(&self, study: &str, trial_key: &str, attempt_id: &str) -> String {
        let root = self
            .workdir
            .read()
            .ok()
            .and_then(|w| w.clone())
            .unwrap_or_else(|| "/tmp/tunectl-work".to_string());
        let short_key = &trial_key[..trial_key.len().min(16)];
        format!("{root}/{study}/{short_key}-{attempt_id}")
    }

    async fn probe(&self, tools: &BTreeMap<String, String>) -> Result<Fingerprint, String> {
        if let Ok(mut t) = self.tools.lock() {
            *t = tools.clone();
        }
        let session = self.live_session().await?;
        let fp = probe_over(&session, tools).await?;
        if let Ok(mut f) = self.fingerprint.lock() {
            *f = Some(fp.clone());
        }
        Ok(fp)
    }

    async fn state(&self) -> HostState {
        if let Some(s) = self.session() {
            if s.check().await.is_ok() {
                return HostState::Up { rejoined: false };
            }
            self.mark_down("the connection ended").await;
        }
        let mut conn = self.conn.lock().await;
        if self.session().is_some() {
            return HostState::Up { rejoined: false };
        }
        let now = Instant::now();
        let (reason, since) = conn
            .down
            .clone()
            .unwrap_or_else(|| ("not connected".to_string(), now));
        if now < conn.retry_at {
            let first = !conn.reported;
            conn.reported = true;
            return HostState::Down {
                reason,
                since,
                retry_in: conn.retry_at - now,
                first,
            };
        }
        match self.connect().await {
            Ok(session) => {
                let tools = self.tools.lock().map(|t| t.clone()).unwrap_or_default();
                let fp = match probe_over(&session, &tools).await {
                    Ok(fp) => fp,
                    Err(e) => {
                        conn.backoff = (conn.backoff * 2).min(MAX_RETRY);
                        conn.retry_at = Instant::now() + conn.backoff;
                        return HostState::Down {
                            reason: format!("answers but its probe failed: {e}"),
                            since,
                            retry_in: conn.backoff,
                            first: false,
                        };
                    }
                };
                let old = self.fingerprint.lock().ok().and_then(|f| f.clone());
                let reaped = self.reap_orphans(&session).await;
                if let Some(old) = old
                    && old.hash() != fp.hash()
                {
                    // Keep the host down in this launch: it is another class.
                    conn.retry_at = Instant::now() + Duration::from_secs(3600 * 24);
                    return HostState::Changed {
                        old: Box::new(old),
                        new: Box::new(fp),
                    };
                }
                if let Ok(mut c) = self.current.write() {
                    *c = Some(session);
                }
                let was_down = conn.down.take().map(|(_, t)| t.elapsed());
                conn.backoff = FIRST_RETRY;
                conn.reported = false;
                HostState::Up {
                    rejoined: was_down.is_some() || reaped > 0,
                }
            }
            Err(e) => {
                if conn.down.is_none() {
                    conn.down = Some((e.clone(), since));
                }
                conn.backoff = (conn.backoff * 2).min(MAX_RETRY);
                conn.retry_at = Instant::now() + conn.backoff;
                let first = !conn.reported;
                conn.reported = true;
                HostState::Down {
                    reason: e,
                    since,
                    retry_in: conn.backoff,
                    first,
                }
            }
        }
    }

    async fn close(&self) {
        let s = self.current.write().ok().and_then(|mut s| s.take());
        if let Some(s) = s
            && let Ok(s) = Arc::try_unwrap(s)
        {
            let _ = s.close().await;
        }
    }

    async fn run_attempt(&self, spec: &AttemptSpec, cancel: &CancellationToken) -> AttemptOutcome {
        let started = Instant::now();
        let mut outcome = AttemptOutcome {
            trial_dir: Some(spec.trial_dir.clone()),
            ..Default::default()
        };
        let Some(session) = self.session() else {
            outcome.host_lost = Some(format!(
                "the connection to the host was lost (host `{}` is not connected)",
                self.name
            ));
            return outcome;
        };
        // The wrapper bounds every run itself (the trial's timeout plus a
        // margin: this launcher kills at the timeout) and kills it when
        // this launcher or its connection goes away.
        let opts = WrapperOptions {
            keep_workdirs: self.keep_workdirs,
            self_timeout: true,
            timeout_margin_s: u64::from(KILL_GRACE_S) + 3,
            guard_input: true,
            ..Default::default()
        };
        let script = match attempt_script(spec, &opts) {
            Ok(s) => s,
            Err(e) => {
                outcome.setup_error = Some(e);
                return outcome;
            }
        };
        let _permit = tokio::select! {
            p = self.sessions.acquire() => p.ok(),
            _ = cancel.cancelled() => {
                outcome.cancelled = true;
                return outcome;
            }
        };
        let spawned = Session::to_raw_command(session.clone(), "exec /bin/sh -s")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .await;
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let text = error_chain(&e);
                if session.check().await.is_err() {
                    self.mark_down(&text).await;
                    outcome.host_lost =
                        Some(format!("the connection to the host was lost ({text})"));
                } else {
                    outcome.setup_error = Some(format!("cannot start a session: {text}"));
                }
                return outcome;
            }
        };
        // The session's input stays open (and silent) until the attempt is
        // over: the wrapper's guard kills the run when it ends early.
        let mut input = child.stdin().take();
        if let Some(stdin) = input.as_mut() {
            let sent = stdin.write_all(wrap_guarded(&script).as_bytes()).await;
            if let Err(e) = sent {
                outcome.host_lost = Some(format!(
                    "the connection to the host was lost (sending the attempt script: {e})"
                ));
                self.mark_down("the connection ended").await;
                return outcome;
            }
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        let reader = child.stdout().take().map(|out| {
            let tx = tx.clone();
            tokio::spawn(read_frames(out, tx))
        });
        drop(tx);
        let err_reader = child.stderr().take().map(|mut err| {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let _ = (&mut err).take(16 * 1024).read_to_end(&mut buf).await;
                buf
            })
        });

        let mut got = Collected::default();
        let mut pid: Option<u32> = None;
        let mut deadline: Option<tokio::time::Instant> = None;
        let mut give_up: Option<tokio::time::Instant> = None;
        let mut timed_out = false;
        let mut garbled: Option<String> = None;
        loop {
            let sleep_until = deadline.or(give_up);
            tokio::select! {
                frame = rx.recv() => match frame {
                    Some(Ok(Frame::Run { phase, pid: p })) => {
                        pid = Some(p);
                        deadline = Some(tokio::time::Instant::now() + spec.timeout);
                        got.runs.push((phase, None, None, Instant::now()));
                    }
                    Some(Ok(Frame::Rc { rc, remote_ns })) => {
                        deadline = None;
                        if let Some(run) = got.runs.last_mut() {
                            run.1 = Some(exit_info(rc));
                            run.2 = Some(match remote_ns {
                                Some(ns) => Duration::from_nanos(ns.min(u64::MAX as u128) as u64),
                                None => run.3.elapsed(),
                            });
                        }
                    }
                    Some(Ok(Frame::Size { stream, bytes })) => {
                        got.sizes.insert(stream, bytes);
                    }
                    Some(Ok(Frame::File { tag, bytes })) => {
                        got.files.insert(tag, bytes);
                    }
                    Some(Ok(f @ (Frame::Missing { .. } | Frame::Digest { .. }))) => {
                        got.absorb(f);
                    }
                    Some(Ok(Frame::Setup(m))) => got.setup = Some(m),
                    Some(Ok(Frame::TimedOut)) => got.timed_out = true,
                    Some(Ok(Frame::End)) => {
                        got.ended = true;
                        break;
                    }
                    Some(Err(e)) => {
                        garbled = Some(e);
                        break;
                    }
                    None => break,
                },
                _ = async {
                    match sleep_until {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {
                    if deadline.is_some() {
                        // The run is past its timeout: kill its group and
                        // read the wrapper's report of it.
                        timed_out = true;
                        deadline = None;
                        give_up = Some(tokio::time::Instant::now() + AFTER_KILL);
                        if let Some(p) = pid {
                            let _ = self.kill_remote(&session, p).await;
                        }
                    } else {
                        break;
                    }
                }
                _ = cancel.cancelled(), if !outcome.cancelled => {
                    outcome.cancelled = true;
                    deadline = None;
                    give_up = Some(tokio::time::Instant::now() + AFTER_KILL);
                    if let Some(p) = pid {
                        let _ = self.kill_remote(&session, p).await;
                    }
                }
            }
        }
        if let Some(r) = reader {
            r.abort();
        }
        let wrapper_err = match err_reader {
            Some(r) => match tokio::time::timeout(Duration::from_secs(2), r).await {
                Ok(Ok(b)) => String::from_utf8_lossy(&b).trim().to_string(),
                _ => String::new(),
            },
            None => String::new(),
        };
        drop(input);
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;

        if !got.ended {
            let connected = session.check().await.is_ok();
            if !connected {
                let reason = "the connection to the host was lost".to_string();
                self.mark_down(&reason).await;
                if let Some(p) = pid
                    && let Ok(mut o) = self.orphans.lock()
                {
                    o.push(Orphan {
                        pgid: p,
                        attempt_id: spec.attempt_id.clone(),
                    });
                }
                outcome.host_lost = Some(reason);
            } else if !outcome.cancelled {
                let why = garbled.unwrap_or_else(|| {
                    if wrapper_err.is_empty() {
                        "the host's wrapper ended without reporting".to_string()
                    } else {
                        format!("the host's wrapper failed: {wrapper_err}")
                    }
                });
                if let Some(p) = pid {
                    let _ = self.kill_remote(&session, p).await;
                }
                outcome.setup_error = Some(why);
            }
            outcome.elapsed = started.elapsed();
            return outcome;
        }
        if let Some(m) = got.setup.take() {
            outcome.setup_error = Some(m);
            outcome.elapsed = started.elapsed();
            return outcome;
        }
        let timed_out = timed_out || got.timed_out;
        fill_outcome(&mut outcome, spec, got, timed_out);
        outcome.elapsed = started.elapsed();
        outcome
    }
}

/// Turn the wrapper's report into the raw facts every transport reports.
pub(crate) fn fill_outcome(
    outcome: &mut AttemptOutcome,
    spec: &AttemptSpec,
    mut got: Collected,
    timed_out: bool,
) {
    let Some((phase, exit, elapsed, _)) = got.runs.pop() else {
        outcome.setup_error = Some("the host's wrapper ran nothing".to_string());
        return;
    };
    let warmups_ok = got.runs.len() as u32;
    let exit = exit.unwrap_or_default();
    let ok = exit.code == Some(0) && !timed_out && !outcome.cancelled;
    let mut take = |tag: &str| got.files.remove(tag).unwrap_or_default();
    let (_, stdout_tail) = head_and_tail(
        Vec::new(),
        take("stdout_tail"),
        got.sizes.get("stdout").copied().unwrap_or(0),
    );
    let (stderr_head, stderr_tail) = head_and_tail(
        take("stderr_head"),
        take("stderr_tail"),
        got.sizes.get("stderr").copied().unwrap_or(0),
    );
    outcome.run = Some(RunOutput {
        exit,
        timed_out,
        cancelled: outcome.cancelled,
        elapsed: elapsed.unwrap_or_default(),
        stdout_tail,
        stderr_tail,
        stderr_head,
    });
    // The wrapper stops at the first run that fails: a warm-up reported
    // last is one that failed (or was stopped).
    outcome.warmups_run = warmups_ok;
    outcome.failed_in_warmup = phase == Phase::Warmup.as_str();
    if ok && phase == Phase::Measure.as_str() {
        outcome.result = got.files.remove("result");
        if outcome.result.is_none()
            && let Some(Some(why)) = got.missing.get("result")
            && why != "was not written"
        {
            let name = spec
                .result_path
                .rsplit('/')
                .next()
                .unwrap_or(&spec.result_path);
            outcome.result_error = Some(format!("the result file `{name}` {why}"));
        }
        for (i, name) in spec.outputs.iter().enumerate() {
            let digest = got
                .digests
                .get(&i)
                .cloned()
                .unwrap_or(Err(None))
                .map_err(|why| why.unwrap_or_else(|| "was not written".to_string()));
            match digest {
                Ok(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    outcome
                        .outputs
                        .insert(name.clone(), Ok(h.to_ascii_lowercase()));
                }
                Ok(other) => {
                    outcome.setup_error = Some(format!(
                        "cannot digest output `{name}` on the host (got `{other}`; it needs sha256sum, shasum or openssl)"
                    ));
                    return;
                }
                Err(why) => {
                    outcome.outputs.insert(name.clone(), Err(why));
                }
            }
        }
        for (i, name) in spec.tolerance_files.iter().enumerate() {
            let tag = format!("value:{i}");
            let value = match got.files.remove(&tag) {
                None => Err(match got.missing.get(&tag) {
                    Some(Some(why)) if why != "was not written" => why.clone(),
                    _ => "cannot be read: it was not written".to_string(),
                }),
                Some(b) if b.len() as u64 > MAX_VALUE_FILE_BYTES => Err(format!(
                    "over the limit of {} MiB",
                    MAX_VALUE_FILE_BYTES / (1024 * 1024)
                )),
                Some(b) => gate::parse_values(&b),
            };
            outcome.output_values.insert(name.clone(), value);
        }
    }
    for stream in ["stdout", "stderr"] {
        if let Some(b) = got.files.remove(&format!("log:{stream}")) {
            outcome.logs.insert(stream.to_string(), b);
        }
    }
    if ok && !outcome.cancelled {
        outcome.trial_dir = None;
    }
}

/// Run the fingerprint probe over a connection.
async fn probe_over(
    session: &Arc<Session>,
    tools: &BTreeMap<String, String>,
) -> Result<Fingerprint, String> {
    let script = fingerprint::probe_script(tools).map_err(|e| e.to_string())?;
    let n = u32::try_from(tools.len()).unwrap_or(u32::MAX);
    let limit = PROBE_TIMEOUT.saturating_add(TOOL_TIMEOUT.saturating_mul(n));
    let out = run_script(session, &script, limit).await?;
    let mut fp = fingerprint::parse_probe_output(&String::from_utf8_lossy(&out.stdout));
    for name in tools.keys() {
        fp.tools.entry(name.clone()).or_insert(None);
    }
    Ok(fp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse() {
        assert!(matches!(
            parse_header("@@tunectl run warmup 42"),
            Ok(Header::Frame(Frame::Run { pid: 42, .. }))
        ));
        match parse_header("@@tunectl rc 0 100 250") {
            Ok(Header::Frame(Frame::Rc { rc, remote_ns })) => {
                assert_eq!(rc, 0);
                assert_eq!(remote_ns, Some(150));
            }
            _ => panic!("rc"),
        }
        // BSD date prints `%N` literally: the local clock is used instead.
        match parse_header("@@tunectl rc 3 1700000000N 1700000001N") {
            Ok(Header::Frame(Frame::Rc { rc, remote_ns })) => {
                assert_eq!(rc, 3);
                assert_eq!(remote_ns, None);
            }
            _ => panic!("rc"),
        }
        assert!(matches!(
            parse_header("@@tunectl file result 12"),
            Ok(Header::File { len: 12, .. })
        ));
        assert!(matches!(
            parse_header("@@tunectl digest 1 -"),
            Ok(Header::Frame(Frame::Digest {
                index: 1,
                hex: None,
                why: None
            }))
        ));
        assert!(parse_header("Welcome to the host!").is_err());
        assert!(parse_header("@@tunectl run warmup notapid").is_err());
        assert!(parse_header("@@tunectl bogus").is_err());
    }

    #[test]
    fn shell_status_above_128_is_a_signal() {
        assert_eq!(exit_info(137).signal, Some(9));
        assert_eq!(exit_info(137).code, None);
        assert_eq!(exit_info(3).code, Some(3));
        assert_eq!(exit_info(255).code, Some(255));
    }

    #[test]
    fn env_names_are_checked() {
        assert!(is_env_name("TUNECTL_KNOB_X"));
        assert!(is_env_name("_a1"));
        assert!(!is_env_name("1A"));
        assert!(!is_env_name("A;B"));
        assert!(!is_env_name(""));
    }

    #[tokio::test]
    async fn frames_round_trip_through_the_reader() {
        let text = b"@@tunectl run measure 7\n@@tunectl rc 0 x x\n@@tunectl file result 5\nhello\n@@tunectl missing value:0\n@@tunectl end\n".to_vec();
        let (tx, mut rx) = mpsc::unbounded_channel();
        read_frames(&text[..], tx).await;
        let mut frames = Vec::new();
        while let Some(f) = rx.recv().await {
            frames.push(f.expect("frame"));
        }
        assert_eq!(frames.len(), 5);
        assert_eq!(
            frames[2],
            Frame::File {
                tag: "result".into(),
                bytes: b"hello".to_vec()
            }
        );
        assert_eq!(frames[4], Frame::End);

        // A file frame cut short is an error, not a short file.
        let text = b"@@tunectl file result 50\nhello\n".to_vec();
        let (tx, mut rx) = mpsc::unbounded_channel();
        read_frames(&text[..], tx).await;
        assert!(matches!(rx.recv().await, Some(Err(_))));
    }
}
