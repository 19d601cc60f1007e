//! Hosts reached over SSH: the transport of the wire protocol
//! ([`super::wire`]) over ssh sessions.
//!
//! One multiplexed master connection per host (the `openssh` crate, native
//! mux), many sessions over it, at most `max_sessions` trials at once.
//! Trials run through persistent agents ([`super::wire::persistent_agent`]):
//! one long-lived session per slot in use, `exec /bin/sh -s tunectl-agent`,
//! sent the agent's functions once and then one request per attempt on its
//! standard input; each reply is read from its stdout as it comes, up to its
//! `end`. Other remote steps (probe, work directory, kills without an agent)
//! are a request script on a session of their own. Where no agent can start
//! (or `agent: false`), every attempt gets a session of its own running the
//! whole wrapper script, as before the agents.
//!
//! The launcher times each run between its `run` and `rc` frames and kills
//! its process group at the trial's timeout (or on Ctrl-C) through the agent
//! (`tc_kill`), or over a session of its own; the wrapper's watchdog, a
//! margin later, is the backstop. The agent's input stays open and silent
//! while an attempt runs: when it ends the agent's exit trap (without an
//! agent: the wrapper's guard) kills the run, so a launcher killed outright,
//! or a session that died, leaves nothing running on the host. An agent
//! whose shell dies mid-attempt loses that attempt (it runs again, as with
//! a lost host) and the host's next attempt starts a new agent.
//!
//! Rung checkpoints of `fidelity.continuation` live under the host's work
//! directory (layout in [`super::checkpoint`]); archives to and from the
//! ledger stream through `tar` on a session of their own
//! (`exec /bin/sh -c <script>`, its standard input or output the archive).
//!
//! A reply that ends without `end` while the master connection is gone is
//! a lost host: the attempt is lost (it runs again elsewhere), the host is
//! marked down and retried with back-off, and the process groups it was
//! running are killed when it answers again.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use openssh::{ChildStdin, ChildStdout};
use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::checkpoint::COMMITTED;
use super::wire::{
    AGENT_MARK, AGENT_READY, AgentOptions, Collected, Frame, attempt_script, fill_outcome,
    persistent_agent, persistent_request, read_frames, read_reply, wrap, wrap_guarded,
};
use super::{
    AttemptOutcome, AttemptSpec, CheckpointStore, Ended, HostState, Transport, TransportError,
    WireError,
};
use crate::fingerprint::{self, Fingerprint, PROBE_TIMEOUT, TOOL_TIMEOUT};
use crate::ledger::checkpoint::Claim;
use crate::shell_quote::quote_word;
use crate::spec::inventory::{HostKeyChecking, SshHost};

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

/// How long the agent may take to report after its trial was killed.
const AFTER_KILL: Duration = Duration::from_secs(20);

/// Limit for small remote commands (workdir, kill, reap).
const SMALL_COMMAND: Duration = Duration::from_secs(30);

/// How long a persistent agent may take to greet once started.
const AGENT_START: Duration = Duration::from_secs(20);

/// The last bytes of an agent's stderr kept for messages.
const AGENT_STDERR_BYTES: usize = 4096;

/// Waits before each new try of a session the host refused (its sshd
/// counts a session until it has seen the session's close, which trails
/// the end that this launcher sees): about 2.5 s in all.
const REFUSED_WAITS_MS: [u64; 6] = [20, 60, 150, 300, 700, 1300];

/// How long a retired idle agent may take to end before its place under
/// `max_sessions` is given to another session anyway.
const AGENT_CLOSE: Duration = Duration::from_secs(2);

/// A host over SSH as a transport.
pub struct SshTransport {
    name: String,
    cfg: SshHost,
    control_dir: PathBuf,
    keep_workdirs: bool,
    /// Sessions open over the master connection, at most `max_sessions`:
    /// an attempt's, an idle persistent agent's (an agent holds its permit
    /// while it lives), a checkpoint transfer's or check's
    /// ([`SshTransport::session_permit`]).
    sessions: Arc<Semaphore>,
    /// Callers waiting for a permit: an agent whose attempt ends is then
    /// closed rather than kept idle, so that its session goes to them.
    waiting: AtomicUsize,
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
    /// Idle persistent agents (at most one per slot in use).
    agents: Mutex<Vec<Agent>>,
    /// No persistent agent on this host (switched off in the inventory, or
    /// one could not start): one session per attempt.
    agent_off: AtomicBool,
}

/// A persistent agent: `sh -s` on one session of the master connection,
/// running one attempt at a time (see [`persistent_agent`]).
struct Agent {
    /// The master connection it belongs to: an agent of an earlier
    /// connection is never reused.
    session: Arc<Session>,
    /// Holds the session open; dropping it closes the agent's input.
    _child: openssh::Child<Arc<Session>>,
    /// Its session's place under `max_sessions`, released when it ends.
    _permit: OwnedSemaphorePermit,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The end of what the agent's shell printed on stderr.
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Agent {
    /// End an idle agent and give its place up once its session is over:
    /// its input closes, its shell exits, and only then (or after
    /// [`AGENT_CLOSE`]) is its permit released, so the session that takes
    /// the place does not open while the host still counts this one.
    async fn close(self) {
        let Agent {
            _child: child,
            _permit: permit,
            stdin,
            stdout,
            ..
        } = self;
        drop(stdin);
        drop(stdout);
        let _ = tokio::time::timeout(AGENT_CLOSE, child.wait()).await;
        drop(permit);
    }

    fn stderr_text(&self) -> String {
        let bytes = self.stderr.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).trim().to_string()
    }
}

/// How an attempt went on a persistent agent.
enum AgentRun {
    /// The outcome is final.
    Done,
    /// No agent could start (the host's shell refuses it): run the attempt
    /// on a session of its own.
    NoAgent,
}

#[derive(Debug, Clone)]
struct Orphan {
    pgid: u32,
    attempt_id: String,
}

#[derive(Debug)]
struct Conn {
    /// Why the host is down and since when; `None` while it is up.
    down: Option<(TransportError, Instant)>,
    /// The down period was reported to the scheduler.
    reported: bool,
    retry_at: Instant,
    backoff: Duration,
}

impl SshTransport {
    pub fn new(name: &str, cfg: SshHost, control_dir: PathBuf, keep_workdirs: bool) -> Self {
        let permits = cfg.max_sessions.max(1) as usize;
        let cfg_agent = cfg.agent;
        SshTransport {
            name: name.to_string(),
            cfg,
            control_dir,
            keep_workdirs,
            sessions: Arc::new(Semaphore::new(permits)),
            waiting: AtomicUsize::new(0),
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
            agents: Mutex::new(Vec::new()),
            agent_off: AtomicBool::new(!cfg_agent),
        }
    }

    /// Run a small POSIX `sh` script on the host (connecting first if
    /// needed) and return its stdout; a non-zero exit is an error with its
    /// stderr. For a Slurm login host.
    pub async fn run_remote(&self, body: &str, limit: Duration) -> Result<Vec<u8>, TransportError> {
        let session = self.live_session().await?;
        run_script(&session, body, limit).await.map(|o| o.stdout)
    }

    /// The live master connection, connecting first when there is none or
    /// it has ended.
    async fn live_session(&self) -> Result<Arc<Session>, TransportError> {
        if let Some(s) = self.session()
            && s.check().await.is_ok()
        {
            return Ok(s);
        }
        let s = self.connect().await.map_err(|e| TransportError::Connect {
            host: self.cfg.host.clone(),
            cause: Box::new(e),
        })?;
        if let Ok(mut c) = self.current.write() {
            *c = Some(s.clone());
        }
        Ok(s)
    }

    fn session(&self) -> Option<Arc<Session>> {
        self.current.read().ok().and_then(|s| s.clone())
    }

    /// The live connection, or why there is none (the host is down: its
    /// checkpoints wait for it).
    fn connected(&self) -> Result<Arc<Session>, TransportError> {
        self.session().ok_or_else(|| TransportError::NotConnected {
            host: self.name.clone(),
        })
    }

    /// Open the master connection and find the remote work root.
    async fn connect(&self) -> Result<Arc<Session>, TransportError> {
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
        if let Some(c) = &self.cfg.ssh_config {
            b.config_file(c);
        }
        if let Some(j) = &self.cfg.proxy_jump {
            b.jump_hosts(j.split(',').map(str::trim).filter(|s| !s.is_empty()));
        }
        let session = b.connect_mux(&self.cfg.host).await.map_err(|e| ssh(&e))?;
        let session = Arc::new(session);
        let root = self.resolve_workdir(&session).await?;
        if let Ok(mut w) = self.workdir.write() {
            *w = Some(root);
        }
        Ok(session)
    }

    /// `workdir`, or `${XDG_CACHE_HOME:-$HOME/.cache}/tunectl/work`; `~/`
    /// and relative paths are taken from the remote home.
    async fn resolve_workdir(&self, session: &Arc<Session>) -> Result<String, TransportError> {
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
            return Err(TransportError::NoWorkdir { got: root });
        }
        Ok(root)
    }

    /// The host dropped: forget the connection and plan the first retry.
    async fn mark_down(&self, reason: &TransportError) {
        let old = self.current.write().ok().and_then(|mut s| s.take());
        self.drop_agents();
        let mut conn = self.conn.lock().await;
        if conn.down.is_none() {
            conn.down = Some((reason.clone(), Instant::now()));
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
    async fn kill_remote(&self, session: &Arc<Session>, pgid: u32) -> Result<(), TransportError> {
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

    /// Close every idle agent (their shells see their input end and exit).
    fn drop_agents(&self) {
        let idle = self
            .agents
            .lock()
            .map(|mut a| std::mem::take(&mut *a))
            .unwrap_or_default();
        drop(idle);
    }

    /// An idle agent of this connection, if there is one.
    fn take_agent(&self, session: &Arc<Session>) -> Option<Agent> {
        let mut idle = self.agents.lock().ok()?;
        idle.retain(|a| Arc::ptr_eq(&a.session, session));
        idle.pop()
    }

    /// An idle agent of this connection that is still there: one whose
    /// shell ended while it waited (killed on the host) has its output at
    /// its end, and is closed instead of being given an attempt (which would
    /// be lost with it).
    async fn take_live_agent(&self, session: &Arc<Session>) -> Option<Agent> {
        while let Some(mut agent) = self.take_agent(session) {
            // An idle agent prints nothing until it is sent a request:
            // anything to read (its end, or stray output) retires it.
            match tokio::time::timeout(Duration::from_millis(2), agent.stdout.fill_buf()).await {
                Err(_) => return Some(agent),
                Ok(_) => {
                    tracing::debug!(host = %self.name, "an idle persistent agent had ended: starting another");
                }
            }
        }
        None
    }

    async fn put_agent(&self, agent: Agent) {
        // Someone waits for a session: this one is theirs.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            agent.close().await;
            return;
        }
        let current = self.session();
        if current.is_some_and(|s| Arc::ptr_eq(&s, &agent.session))
            && let Ok(mut idle) = self.agents.lock()
        {
            idle.push(agent);
        }
    }

    /// A place for one more session under `max_sessions`: a free one, else
    /// one an idle agent held (the agent is closed), else the first to
    /// come free (an attempt's, or an agent's whose attempt ends).
    async fn session_permit(&self) -> Result<OwnedSemaphorePermit, TransportError> {
        loop {
            if let Ok(p) = self.sessions.clone().try_acquire_owned() {
                return Ok(p);
            }
            let idle = self.agents.lock().ok().and_then(|mut a| a.pop());
            match idle {
                // Closing it releases its permit: try again.
                Some(agent) => agent.close().await,
                None => break,
            }
        }
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting);
        // An agent may have gone idle between the try and the count.
        let idle = self.agents.lock().ok().and_then(|mut a| a.pop());
        if let Some(agent) = idle {
            agent.close().await;
        }
        self.sessions
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| TransportError::SessionsClosed)
    }

    /// Start a persistent agent on a new session and wait for its greeting.
    async fn start_agent(
        &self,
        session: &Arc<Session>,
        permit: OwnedSemaphorePermit,
    ) -> Result<Agent, TransportError> {
        let mut child = open_session(
            session,
            &format!("exec /bin/sh -s {AGENT_MARK}"),
            true,
            true,
        )
        .await
        .map_err(|e| session_start(&e))?;
        let (Some(mut stdin), Some(stdout), Some(mut err)) = (
            child.stdin().take(),
            child.stdout().take(),
            child.stderr().take(),
        ) else {
            return Err(TransportError::NoStdio { missing: "streams" });
        };
        // Drained for the agent's life: a full stderr pipe would stop the
        // shell. The end is kept for messages.
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let kept = stderr.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut k) = kept.lock() {
                    k.extend_from_slice(&buf[..n]);
                    let over = k.len().saturating_sub(AGENT_STDERR_BYTES);
                    k.drain(..over);
                }
            }
        });
        let mut stdout = BufReader::new(stdout);
        let greet = async {
            let cannot_send = |e: std::io::Error| TransportError::CannotSend {
                what: "agent",
                source: e.into(),
            };
            stdin
                .write_all(persistent_agent().as_bytes())
                .await
                .map_err(cannot_send)?;
            stdin.flush().await.map_err(cannot_send)?;
            let mut line = Vec::new();
            (&mut stdout)
                .take(256)
                .read_until(b'\n', &mut line)
                .await
                .map_err(|e| TransportError::AgentRead(e.into()))?;
            if line.strip_suffix(b"\n") == Some(AGENT_READY.as_bytes()) {
                Ok(())
            } else if line.is_empty() {
                Err(TransportError::AgentSilent)
            } else {
                Err(TransportError::AgentGreeting {
                    got: String::from_utf8_lossy(&line).trim().to_string(),
                })
            }
        };
        let greeted = match tokio::time::timeout(AGENT_START, greet).await {
            Ok(r) => r,
            Err(_) => Err(TransportError::AgentSlow {
                secs: AGENT_START.as_secs(),
            }),
        };
        let agent = Agent {
            session: session.clone(),
            _child: child,
            _permit: permit,
            stdin,
            stdout,
            stderr,
        };
        match greeted {
            Ok(()) => {
                tracing::debug!(host = %self.name, "started a persistent agent");
                Ok(agent)
            }
            Err(e) => {
                // Let its stderr arrive: it says why.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let err = agent.stderr_text();
                Err(if err.is_empty() {
                    e
                } else {
                    TransportError::AgentStderr {
                        cause: Box::new(e),
                        stderr: err.chars().take(500).collect(),
                    }
                })
            }
        }
    }

    /// A new agent with a session permit of its own; `None` when cancelled
    /// while waiting for the permit.
    async fn agent_with_permit(
        &self,
        session: &Arc<Session>,
        cancel: &CancellationToken,
    ) -> Result<Option<Agent>, TransportError> {
        let permit = tokio::select! {
            p = self.session_permit() => p?,
            _ = cancel.cancelled() => return Ok(None),
        };
        self.start_agent(session, permit).await.map(Some)
    }

    /// Run an attempt on a persistent agent of this connection (an idle one,
    /// or one started now).
    async fn attempt_on_agent(
        &self,
        session: &Arc<Session>,
        spec: &AttemptSpec,
        cancel: &CancellationToken,
        outcome: &mut AttemptOutcome,
    ) -> AgentRun {
        // As on a session of its own: the agent's watchdog is the backstop
        // for a launcher that stopped watching; it records the run's group
        // for the agent's exit trap (its input ended).
        let opts = AgentOptions {
            keep_workdirs: self.keep_workdirs,
            self_timeout: true,
            timeout_margin_s: u64::from(KILL_GRACE_S) + 3,
            track_run: true,
            ..Default::default()
        };
        let request = match persistent_request(spec, &opts) {
            Ok(r) => r,
            Err(e) => {
                outcome.end(Ended::SetupFailed(e));
                return AgentRun::Done;
            }
        };
        let mut agent = match self.take_live_agent(session).await {
            Some(a) => a,
            None => match self.agent_with_permit(session, cancel).await {
                Ok(None) => {
                    outcome.end(Ended::Cancelled);
                    return AgentRun::Done;
                }
                Ok(Some(a)) => a,
                Err(e) => {
                    if session.check().await.is_err() {
                        self.mark_down(&e).await;
                        outcome.end(Ended::HostLost(TransportError::ConnectionLost {
                            cause: Some(Box::new(e)),
                        }));
                        return AgentRun::Done;
                    }
                    // A session the host refused even after its tries
                    // says nothing about agents: the next attempt tries
                    // one again.
                    if !matches!(&e, TransportError::SessionStart { detail } if is_refusal(detail))
                    {
                        tracing::debug!(
                            host = %self.name,
                            "no persistent agent ({e}): one ssh session per attempt on this host"
                        );
                        self.agent_off.store(true, Ordering::Relaxed);
                    }
                    return AgentRun::NoAgent;
                }
            },
        };
        let sent = async {
            agent.stdin.write_all(request.as_bytes()).await?;
            agent.stdin.flush().await
        }
        .await;
        if let Err(e) = sent {
            // Nothing ran: the attempt is lost (the host with it, when its
            // connection is gone).
            drop(agent);
            let sending = Box::new(TransportError::Sending {
                what: "the attempt",
                source: e.into(),
            });
            if session.check().await.is_err() {
                self.mark_down(&TransportError::ConnectionEnded).await;
                outcome.end(Ended::HostLost(TransportError::ConnectionLost {
                    cause: Some(sending),
                }));
            } else {
                outcome.end(Ended::HostLost(TransportError::AgentEnded {
                    cause: sending,
                }));
            }
            return AgentRun::Done;
        }

        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut stdout = agent.stdout;
        let reader = tokio::spawn(async move {
            let ended = read_reply(&mut stdout, tx).await;
            (stdout, ended)
        });
        let mut stdin = agent.stdin;
        let mut watch = FrameWatch::new(spec.timeout, outcome.cancelled());
        // Past its timeout or cancelled, the agent kills the run's group
        // and reports it.
        while let Watch::Kill(p) = watch.next(&mut rx, cancel).await {
            self.kill_through(session, &mut stdin, p).await;
        }
        let FrameWatch {
            mut got,
            pid,
            timed_out,
            cancelled,
            garbled,
            closed: agent_ended,
            ..
        } = watch;
        if cancelled {
            outcome.end(Ended::Cancelled);
        }

        if got.ended {
            // The reply is whole: the reader stopped right after `end`.
            if let Ok((stdout, true)) = reader.await {
                self.put_agent(Agent {
                    session: agent.session,
                    _child: agent._child,
                    _permit: agent._permit,
                    stdin,
                    stdout,
                    stderr: agent.stderr,
                })
                .await;
            }
            if let Some(m) = got.setup.take() {
                outcome.end(Ended::SetupFailed(TransportError::HostSetup(m)));
                return AgentRun::Done;
            }
            let timed_out = timed_out || got.timed_out;
            fill_outcome(outcome, spec, got, timed_out);
            return AgentRun::Done;
        }
        reader.abort();
        let err = {
            // Its stderr may say why it ended.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let bytes = agent.stderr.lock().map(|b| b.clone()).unwrap_or_default();
            String::from_utf8_lossy(&bytes).trim().to_string()
        };
        // Closing the agent's input ends it (and, through its exit trap,
        // whatever it still runs).
        drop(stdin);
        drop(agent._child);
        if session.check().await.is_err() {
            let reason = TransportError::ConnectionLost { cause: None };
            self.mark_down(&reason).await;
            if let Some(p) = pid
                && let Ok(mut o) = self.orphans.lock()
            {
                o.push(Orphan {
                    pgid: p,
                    attempt_id: spec.attempt_id.clone(),
                });
            }
            outcome.end(Ended::HostLost(reason));
            return AgentRun::Done;
        }
        if outcome.cancelled() {
            return AgentRun::Done;
        }
        if let Some(p) = pid {
            let _ = self.kill_remote(session, p).await;
        }
        match garbled {
            Some(g) => outcome.end(Ended::SetupFailed(g.into())),
            None if !agent_ended => {
                outcome.end(Ended::SetupFailed(TransportError::AgentStopped {
                    stderr: err,
                }));
            }
            None => {
                // The agent's shell died (killed on the host): the attempt
                // is lost and runs again, as with a lost host, but the host
                // stays up; the next attempt starts a new agent.
                outcome.end(Ended::HostLost(TransportError::AgentDied {
                    stderr: err.chars().take(500).collect(),
                }));
            }
        }
        AgentRun::Done
    }

    /// Stop a run through its agent (`tc_kill`), or over a session of its
    /// own when the agent cannot be written to.
    async fn kill_through(&self, session: &Arc<Session>, stdin: &mut ChildStdin, pid: u32) {
        let line = format!("tc_kill {pid}\n");
        let sent = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        }
        .await;
        if sent.is_err() {
            let _ = self.kill_remote(session, pid).await;
        }
    }
}

/// `~/x` → `$HOME/x` on this machine (for key and known-hosts files).
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// What `openssh` said, with its sources.
fn ssh(e: &openssh::Error) -> TransportError {
    TransportError::Ssh {
        detail: error_chain(e),
    }
}

/// A session that did not start, and what `openssh` said.
fn session_start(e: &openssh::Error) -> TransportError {
    TransportError::SessionStart {
        detail: error_chain(e),
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

struct ScriptOutput {
    stdout: Vec<u8>,
}

/// Start `command` on a new session of the master connection, its stderr
/// piped to this launcher and its stdin and stdout piped where asked (else
/// null). A session the host refuses is tried again after each of
/// [`REFUSED_WAITS_MS`]: this launcher opens at most `max_sessions` at
/// once, so a refusal is the host still counting one that has just ended
/// (or an sshd whose `MaxSessions` is too low, which the last refusal
/// then reports).
async fn open_session(
    session: &Arc<Session>,
    command: &str,
    stdin: bool,
    stdout: bool,
) -> Result<openssh::Child<Arc<Session>>, openssh::Error> {
    let piped = |yes: bool| if yes { Stdio::piped() } else { Stdio::null() };
    let mut waits = REFUSED_WAITS_MS.iter();
    loop {
        let spawned = Session::to_raw_command(session.clone(), command)
            .stdin(piped(stdin))
            .stdout(piped(stdout))
            .stderr(Stdio::piped())
            .spawn()
            .await;
        match spawned {
            Err(e) if refused_by_host(&e) => match waits.next() {
                Some(ms) => {
                    tracing::debug!("the host refused a session ({e}): trying again");
                    tokio::time::sleep(Duration::from_millis(*ms)).await;
                }
                None => return Err(e),
            },
            done => return done,
        }
    }
}

/// Whether the host's sshd refused a new session on a live connection (a
/// channel open failure, `MaxSessions` reached), as opposed to a
/// connection that is gone.
fn refused_by_host(e: &openssh::Error) -> bool {
    is_refusal(&error_chain(e))
}

/// [`refused_by_host`] on the error's text.
fn is_refusal(text: &str) -> bool {
    text.contains("open refused") || text.contains("administratively prohibited")
}

/// Run a small script on the host and collect its output.
async fn run_script(
    session: &Arc<Session>,
    body: &str,
    limit: Duration,
) -> Result<ScriptOutput, TransportError> {
    let work = async {
        let mut child = open_session(session, "exec /bin/sh -s", true, true)
            .await
            .map_err(|e| ssh(&e))?;
        if let Some(mut stdin) = child.stdin().take() {
            stdin.write_all(wrap(body).as_bytes()).await.map_err(|e| {
                TransportError::CannotSend {
                    what: "script",
                    source: e.into(),
                }
            })?;
            let _ = stdin.shutdown().await;
        }
        let out = child.wait_with_output().await.map_err(|e| ssh(&e))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(TransportError::RemoteScript {
                status: out.status.to_string(),
                stderr: err.trim().chars().take(500).collect(),
            });
        }
        Ok(ScriptOutput { stdout: out.stdout })
    };
    match tokio::time::timeout(limit, work).await {
        Ok(r) => r,
        Err(_) => Err(TransportError::NoAnswer {
            secs: limit.as_secs(),
        }),
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

    async fn probe(&self, tools: &BTreeMap<String, String>) -> Result<Fingerprint, TransportError> {
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
            self.mark_down(&TransportError::ConnectionEnded).await;
        }
        let mut conn = self.conn.lock().await;
        if self.session().is_some() {
            return HostState::Up { rejoined: false };
        }
        let now = Instant::now();
        let (reason, since) = conn
            .down
            .clone()
            .unwrap_or((TransportError::NeverConnected, now));
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
                            reason: TransportError::ProbeFailed(Box::new(e)),
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
        self.drop_agents();
        let s = self.current.write().ok().and_then(|mut s| s.take());
        if let Some(s) = s
            && let Ok(s) = Arc::try_unwrap(s)
        {
            let _ = s.close().await;
        }
    }

    fn checkpoints(&self) -> Option<&dyn CheckpointStore> {
        Some(self)
    }

    async fn run_attempt(&self, spec: &AttemptSpec, cancel: &CancellationToken) -> AttemptOutcome {
        let started = Instant::now();
        let mut outcome = AttemptOutcome {
            trial_dir: Some(spec.trial_dir.clone()),
            ..Default::default()
        };
        let Some(session) = self.session() else {
            outcome.end(Ended::HostLost(TransportError::ConnectionLost {
                cause: Some(Box::new(TransportError::NotConnected {
                    host: self.name.clone(),
                })),
            }));
            return outcome;
        };
        if !self.agent_off.load(Ordering::Relaxed) {
            // The agent holds its own session permit.
            match self
                .attempt_on_agent(&session, spec, cancel, &mut outcome)
                .await
            {
                AgentRun::Done => {
                    outcome.elapsed = started.elapsed();
                    return outcome;
                }
                AgentRun::NoAgent => {}
            }
        }
        // The agent bounds every run itself (the trial's timeout plus a
        // margin: this launcher kills at the timeout) and kills it when
        // this launcher or its connection goes away.
        let opts = AgentOptions {
            keep_workdirs: self.keep_workdirs,
            self_timeout: true,
            timeout_margin_s: u64::from(KILL_GRACE_S) + 3,
            guard_input: true,
            ..Default::default()
        };
        let script = match attempt_script(spec, &opts) {
            Ok(s) => s,
            Err(e) => {
                outcome.end(Ended::SetupFailed(e));
                return outcome;
            }
        };
        let _permit = tokio::select! {
            p = self.session_permit() => p.ok(),
            _ = cancel.cancelled() => {
                outcome.end(Ended::Cancelled);
                return outcome;
            }
        };
        let spawned = open_session(&session, "exec /bin/sh -s", true, true).await;
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                if session.check().await.is_err() {
                    let text = ssh(&e);
                    self.mark_down(&text).await;
                    outcome.end(Ended::HostLost(TransportError::ConnectionLost {
                        cause: Some(Box::new(text)),
                    }));
                } else {
                    outcome.end(Ended::SetupFailed(session_start(&e)));
                }
                return outcome;
            }
        };
        // The session's input stays open (and silent) until the attempt is
        // over: the agent's guard kills the run when it ends early.
        let mut input = child.stdin().take();
        if let Some(stdin) = input.as_mut() {
            let sent = stdin.write_all(wrap_guarded(&script).as_bytes()).await;
            if let Err(e) = sent {
                outcome.end(Ended::HostLost(TransportError::ConnectionLost {
                    cause: Some(Box::new(TransportError::Sending {
                        what: "the attempt script",
                        source: e.into(),
                    })),
                }));
                self.mark_down(&TransportError::ConnectionEnded).await;
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

        let mut watch = FrameWatch::new(spec.timeout, outcome.cancelled());
        // Past its timeout or cancelled: kill the run's group and read the
        // agent's report of it.
        while let Watch::Kill(p) = watch.next(&mut rx, cancel).await {
            let _ = self.kill_remote(&session, p).await;
        }
        let FrameWatch {
            mut got,
            pid,
            timed_out,
            cancelled,
            garbled,
            ..
        } = watch;
        if cancelled {
            outcome.end(Ended::Cancelled);
        }
        if let Some(r) = reader {
            r.abort();
        }
        // The attempt is over: close the session's input first. The
        // remote shell reads its script from that input, so it exits (and
        // its stderr ends) only then; waiting for stderr with the input
        // still open cost every attempt the 2 s below.
        drop(input);
        let wrapper_err = match err_reader {
            Some(r) => match tokio::time::timeout(Duration::from_secs(2), r).await {
                Ok(Ok(b)) => String::from_utf8_lossy(&b).trim().to_string(),
                _ => String::new(),
            },
            None => String::new(),
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;

        if !got.ended {
            let connected = session.check().await.is_ok();
            if !connected {
                let reason = TransportError::ConnectionLost { cause: None };
                self.mark_down(&reason).await;
                if let Some(p) = pid
                    && let Ok(mut o) = self.orphans.lock()
                {
                    o.push(Orphan {
                        pgid: p,
                        attempt_id: spec.attempt_id.clone(),
                    });
                }
                outcome.end(Ended::HostLost(reason));
            } else if !outcome.cancelled() {
                let why = match garbled {
                    Some(g) => g.into(),
                    None if wrapper_err.is_empty() => TransportError::WrapperSilent,
                    None => TransportError::WrapperFailed {
                        stderr: wrapper_err,
                    },
                };
                if let Some(p) = pid {
                    let _ = self.kill_remote(&session, p).await;
                }
                outcome.end(Ended::SetupFailed(why));
            }
            outcome.elapsed = started.elapsed();
            return outcome;
        }
        if let Some(m) = got.setup.take() {
            outcome.end(Ended::SetupFailed(TransportError::HostSetup(m)));
            outcome.elapsed = started.elapsed();
            return outcome;
        }
        let timed_out = timed_out || got.timed_out;
        fill_outcome(&mut outcome, spec, got, timed_out);
        outcome.elapsed = started.elapsed();
        outcome
    }
}

#[async_trait]
impl CheckpointStore for SshTransport {
    fn root(&self, study: &str) -> Option<String> {
        let root = self.workdir.read().ok().and_then(|w| w.clone())?;
        Some(format!("{root}/{study}/checkpoints"))
    }

    async fn working_copies(&self, root: &str) -> Result<Vec<(String, String)>, TransportError> {
        let session = self.connected()?;
        let _permit = self.session_permit().await?;
        // One line per working copy: `<key> <attempt id>`.
        let body = format!(
            "cd {} 2>/dev/null || exit 0\n\
             for d in */run-*; do [ -d \"$d\" ] && printf '%s %s\\n' \"${{d%%/*}}\" \"${{d#*/run-}}\"; done\n\
             exit 0\n",
            quote_word(root)
        );
        let out = run_script(&session, &body, SMALL_COMMAND).await?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, a)| (k.to_string(), a.to_string()))
            .collect())
    }

    async fn claim(&self, base: &str) -> Result<Option<Claim>, TransportError> {
        let session = self.connected()?;
        let _permit = self.session_permit().await?;
        let body = format!(
            "b={}
if [ -d \"$b/state\" ] && [ -f \"$b/{COMMITTED}\" ]; then cat \"$b/{COMMITTED}\"; fi\n",
            quote_word(base)
        );
        let out = run_script(&session, &body, SMALL_COMMAND).await?;
        // An unreadable claim is none, as on the local host.
        Ok(serde_json::from_slice(&out.stdout).ok())
    }

    async fn install(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
        archive: &mut (dyn AsyncRead + Send + Unpin),
    ) -> Result<(), TransportError> {
        let session = self.connected()?;
        let _permit = self.session_permit().await?;
        let incoming = format!("{base}/incoming-{attempt_id}");
        let unpack = format!(
            "i={}; rm -rf \"$i\" && mkdir -p \"$i\" && cd \"$i\" && exec tar -xf -",
            quote_word(&incoming)
        );
        let streamed = stream_into(&session, &unpack, archive).await;
        let installed = match streamed {
            Ok(()) => {
                let body = format!(
                    "b={}; i={}\n{}",
                    quote_word(base),
                    quote_word(&incoming),
                    replace_state_script(claim, attempt_id)?
                );
                run_script(&session, &body, SMALL_COMMAND).await.map(|_| ())
            }
            Err(e) => Err(e),
        };
        if installed.is_err() {
            let body = format!("rm -rf {}\n", quote_word(&incoming));
            let _ = run_script(&session, &body, SMALL_COMMAND).await;
        }
        installed
    }

    async fn commit(
        &self,
        base: &str,
        attempt_id: &str,
        claim: &Claim,
    ) -> Result<(), TransportError> {
        let session = self.connected()?;
        let _permit = self.session_permit().await?;
        let body = format!(
            "b={}; i=\"$b\"/run-{}\n[ -d \"$i\" ] || {{ echo \"no working copy $i\" >&2; exit 1; }}\n{}\n",
            quote_word(base),
            quote_word(attempt_id),
            replace_state_script(claim, attempt_id)?
        );
        run_script(&session, &body, SMALL_COMMAND).await.map(|_| ())
    }

    async fn size(&self, base: &str) -> Result<u64, TransportError> {
        let session = self.connected()?;
        let _permit = self.session_permit().await?;
        // Counted on the host, sending nothing: an archive over the cap
        // never travels. (It reads the whole state once.)
        let body = format!("cd {}/state && tar -cf - . | wc -c\n", quote_word(base));
        let out = run_script(&session, &body, SMALL_COMMAND * 10).await?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| TransportError::NoArchiveSize)
    }

    async fn export(
        &self,
        base: &str,
        sink: &mut (dyn AsyncWrite + Send + Unpin),
    ) -> Result<(), TransportError> {
        let session = self.connected()?;
        let _permit = self.session_permit().await?;
        let pack = format!("cd {}/state && exec tar -cf - .", quote_word(base));
        stream_from(&session, &pack, sink).await
    }

    async fn discard(&self, base: &str, attempt_id: &str) {
        if let Ok(session) = self.connected()
            && let Ok(_permit) = self.session_permit().await
        {
            let body = format!(
                "rm -rf {}/run-{}\n",
                quote_word(base),
                quote_word(attempt_id)
            );
            let _ = run_script(&session, &body, SMALL_COMMAND).await;
        }
    }
}

/// The lines that make `$i` the committed state of `claim` in `$b`: the
/// claim goes first and comes back last (see [`super::checkpoint`]).
fn replace_state_script(claim: &Claim, attempt_id: &str) -> Result<String, TransportError> {
    let json = serde_json::to_string(claim).map_err(|e| TransportError::Encode {
        detail: e.to_string(),
    })?;
    Ok(format!(
        "rm -f \"$b/{COMMITTED}\" && rm -rf \"$b/state\" && mv \"$i\" \"$b/state\" || exit 1\n\
         t=\"$b/{COMMITTED}\".{}.tmp\n\
         printf '%s' {} >\"$t\" && mv \"$t\" \"$b/{COMMITTED}\" || exit 1",
        quote_word(attempt_id),
        quote_word(&json)
    ))
}

/// A host command streaming one way, as `openssh` started it, and the
/// task that keeps the start of its stderr for the error message.
type Streaming = (
    openssh::Child<Arc<Session>>,
    Option<tokio::task::JoinHandle<Vec<u8>>>,
);

/// Start `command` (one `sh -c` script) on its own session of the host,
/// with stdin and stdout as given and stderr's first 16 KiB kept.
async fn spawn_streaming(
    session: &Arc<Session>,
    command: &str,
    stdin: bool,
    stdout: bool,
) -> Result<Streaming, TransportError> {
    let command = format!("exec /bin/sh -c {}", quote_word(command));
    let mut child = open_session(session, &command, stdin, stdout)
        .await
        .map_err(|e| session_start(&e))?;
    let err = child.stderr().take().map(|mut e| {
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut e).take(16 * 1024).read_to_end(&mut buf).await;
            buf
        })
    });
    Ok((child, err))
}

/// Run `command` (one `sh -c` script) on the host with `input` as its
/// standard input; an error when the input cannot be read whole (an
/// archive that is not its claim's) or the command fails.
async fn stream_into(
    session: &Arc<Session>,
    command: &str,
    input: &mut (dyn AsyncRead + Send + Unpin),
) -> Result<(), TransportError> {
    let (mut child, err) = spawn_streaming(session, command, true, false).await?;
    let Some(mut stdin) = child.stdin().take() else {
        return Err(TransportError::NoStdio { missing: "input" });
    };
    let copied = async {
        tokio::io::copy(input, &mut stdin).await?;
        stdin.shutdown().await
    }
    .await;
    if let Err(e) = copied {
        // What was read is not to be installed: the caller removes what
        // the command wrote, once it has ended.
        drop(stdin);
        let _ = tokio::time::timeout(SMALL_COMMAND, finish_stream((child, err))).await;
        return Err(TransportError::Transfer(e.into()));
    }
    drop(stdin);
    finish_stream((child, err)).await
}

/// Run `command` (one `sh -c` script) on the host and copy its standard
/// output into `sink`; an error when it fails.
async fn stream_from(
    session: &Arc<Session>,
    command: &str,
    sink: &mut (dyn AsyncWrite + Send + Unpin),
) -> Result<(), TransportError> {
    let (mut child, err) = spawn_streaming(session, command, false, true).await?;
    let Some(mut stdout) = child.stdout().take() else {
        return Err(TransportError::NoStdio { missing: "output" });
    };
    if let Err(e) = tokio::io::copy(&mut stdout, sink).await {
        return Err(TransportError::Transfer(e.into()));
    }
    drop(stdout);
    finish_stream((child, err)).await
}

/// Wait for a streaming session's command: an error with its stderr
/// unless it exited 0.
async fn finish_stream((child, err): Streaming) -> Result<(), TransportError> {
    let status = child.wait().await.map_err(|e| ssh(&e))?;
    let err = match err {
        Some(e) => e.await.unwrap_or_default(),
        None => Vec::new(),
    };
    if status.success() {
        Ok(())
    } else {
        Err(TransportError::HostCommand {
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&err)
                .trim()
                .chars()
                .take(500)
                .collect(),
        })
    }
}

/// Sleep until `t`; without one, never wake.
async fn sleep_until_or_never(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// The launcher's side of a running attempt's frames, the same for a
/// one-off attempt script and for the persistent agent: what the frames
/// said, the counted run's process group and its deadline (counting from
/// its `run` frame), and why reading stopped.
struct FrameWatch {
    got: Collected,
    pid: Option<u32>,
    deadline: Option<tokio::time::Instant>,
    /// After a kill: how long to wait for the agent's report of it.
    give_up: Option<tokio::time::Instant>,
    timeout: Duration,
    timed_out: bool,
    cancelled: bool,
    /// A frame that did not read.
    garbled: Option<WireError>,
    /// The frames ended without `end` (the agent or its output ended).
    closed: bool,
}

/// What the caller of [`FrameWatch::next`] does next.
enum Watch {
    /// Kill the run's process group (past its timeout, or cancelled),
    /// then call `next` again for the agent's report of it.
    Kill(u32),
    /// Reading is over: the report ended, broke off or never came.
    Over,
}

impl FrameWatch {
    fn new(timeout: Duration, cancelled: bool) -> FrameWatch {
        FrameWatch {
            got: Collected::default(),
            pid: None,
            deadline: None,
            give_up: None,
            timeout,
            timed_out: false,
            cancelled,
            garbled: None,
            closed: false,
        }
    }

    /// Read frames until the caller must act or reading is over.
    async fn next(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Result<Frame, WireError>>,
        cancel: &CancellationToken,
    ) -> Watch {
        loop {
            let sleep_until = self.deadline.or(self.give_up);
            tokio::select! {
                frame = rx.recv() => match frame {
                    Some(Ok(frame)) => {
                        if self.take(frame) {
                            return Watch::Over;
                        }
                    }
                    Some(Err(e)) => {
                        self.garbled = Some(e);
                        return Watch::Over;
                    }
                    None => {
                        self.closed = true;
                        return Watch::Over;
                    }
                },
                _ = sleep_until_or_never(sleep_until) => {
                    if self.deadline.is_none() {
                        return Watch::Over;
                    }
                    self.timed_out = true;
                    if let Some(kill) = self.stop() {
                        return kill;
                    }
                }
                _ = cancel.cancelled(), if !self.cancelled => {
                    self.cancelled = true;
                    if let Some(kill) = self.stop() {
                        return kill;
                    }
                }
            }
        }
    }

    /// The run is to stop: no deadline any more, a while to wait for the
    /// report of its kill, and the kill when its group is known.
    fn stop(&mut self) -> Option<Watch> {
        self.deadline = None;
        self.give_up = Some(tokio::time::Instant::now() + AFTER_KILL);
        self.pid.map(Watch::Kill)
    }

    /// Take one frame: the counted run's start (its process group, and the
    /// timeout counting from then) and end. Whether the report is over.
    fn take(&mut self, frame: Frame) -> bool {
        match frame {
            Frame::Run { pid, .. } => {
                self.pid = Some(pid);
                self.deadline = Some(tokio::time::Instant::now() + self.timeout);
            }
            Frame::Rc { .. } => self.deadline = None,
            _ => {}
        }
        let end = frame == Frame::End;
        self.got.absorb_live(frame);
        end
    }
}

/// Run the fingerprint probe over a connection.
async fn probe_over(
    session: &Arc<Session>,
    tools: &BTreeMap<String, String>,
) -> Result<Fingerprint, TransportError> {
    let script = fingerprint::probe_script(tools).map_err(|e| TransportError::Probe(e.into()))?;
    let n = u32::try_from(tools.len()).unwrap_or(u32::MAX);
    let limit = PROBE_TIMEOUT.saturating_add(TOOL_TIMEOUT.saturating_mul(n));
    let out = run_script(session, &script, limit).await?;
    let mut fp = fingerprint::parse_probe_output(&String::from_utf8_lossy(&out.stdout));
    for name in tools.keys() {
        fp.tools.entry(name.clone()).or_insert(None);
    }
    Ok(fp)
}
