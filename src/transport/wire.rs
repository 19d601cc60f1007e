//! The wire protocol between the launcher and the POSIX `sh` agent that
//! carries out an attempt on a remote host: over an ssh session
//! ([`super::ssh`]) or as a task of a Slurm job array ([`super::slurm`]).
//! Nothing is installed on the host; every request is a script, every reply
//! a stream of frames. The transports only carry the bytes: this module
//! writes the requests, reads the replies and turns them into an
//! [`AttemptOutcome`]. (Messages and the user documentation call the agent
//! "the host's wrapper".)
//!
//! # Requests
//!
//! A request is one POSIX `sh` script. [`wrap`] puts its body in a function
//! and calls it on the last line, so that the shell has read the whole
//! script before any of it runs (a script cut short runs nothing), with
//! standard input closed for whatever it runs. [`wrap_guarded`] also keeps
//! the shell's own standard input (past the script) as descriptor 3 for the
//! agent's guard. Over ssh the script is the session's standard input of
//! `exec /bin/sh -s` (so the login shell only ever sees that, whatever shell
//! it is); on Slurm it is the file `t<i>.sh` of the batch directory. A
//! persistent agent over ssh ([`persistent_agent`]) is sent the functions
//! once, and then each attempt's steps as one request
//! ([`persistent_request`]) on the same input, its replies on the same
//! output, one after the other.
//!
//! Every value in a request (paths, the command, the environment of the
//! trial contract) is one shell word, quoted by
//! [`crate::shell_quote::quote_word`]; environment names are checked
//! ([`is_env_name`]).
//!
//! An attempt's request ([`attempt_script`]) is the agent (`agent.sh`: shell
//! functions), then the attempt's variables, then its steps:
//!
//! 1. create and enter the trial directory (else a `setup` frame and `end`);
//! 2. with [`AgentOptions::guard_input`], start the guard: it reads
//!    descriptor 3, which the launcher keeps open and silent while the
//!    attempt runs; at its end (launcher or connection gone) it stops the
//!    agent and kills the running run's process group;
//! 3. with [`AgentOptions::probe`], run the fingerprint probe and send its
//!    output (file `probe`);
//! 4. each warm-up then the counted run, one at a time, each in a process
//!    group of its own (`setsid`, where the host has it), with its stdout
//!    and stderr in files of the trial directory: **nothing the trial
//!    prints reaches the reply**, so a trial cannot forge a frame. With
//!    [`AgentOptions::self_timeout`] a watchdog kills the run's group a
//!    margin after its timeout. The first run that fails ends the runs.
//!    With a checkpoint (`AttemptSpec::checkpoint`), each run first gets
//!    a fresh copy of the committed state (`cp -RP`) or an empty
//!    directory; when that fails, a `setup` frame ends the runs;
//! 5. size, tail (and, for stderr, head) of the last run's streams;
//! 6. only when every run exited 0: the result file, the sha256 of each
//!    declared output (computed on the host), the tolerance files, the
//!    files the study's `result:` reads and, when it reads a stream, the
//!    counted run's whole stdout or stderr (each up to
//!    [`MAX_RESULT_BYTES`]). Only
//!    a regular file (a symlink only to one) within its size limit is
//!    opened: a FIFO would block, a device never end;
//! 7. the full logs, when asked to keep them (each run's streams appended
//!    under a `== tunectl: <phase> run ==` line, up to [`MAX_LOG_BYTES`]);
//! 8. the trial directory removed after a success (unless kept), the guard
//!    stopped, then `end`.
//!
//! # Replies
//!
//! A reply is a sequence of frames: the agent's standard output over ssh,
//! the file `t<i>.frames` on Slurm. A frame is one header line, and for
//! `file` a body:
//!
//! ```text
//! @@tunectl run <phase> <pid>
//! @@tunectl timeout
//! @@tunectl rc <status> <t0 ns|x> <t1 ns|x>
//! @@tunectl size <stream> <bytes>
//! @@tunectl file <tag> <n>\n<n bytes>\n
//! @@tunectl missing <tag> [why]
//! @@tunectl digest <index> <hex|-|none> [why]
//! @@tunectl setup <message>
//! @@tunectl end
//! ```
//!
//! - `run`: a run started; `<phase>` is `warmup` or `measure`, `<pid>` the
//!   leader of its process group.
//! - `timeout`: the agent's watchdog killed the run (sent before its `rc`).
//! - `rc`: the run ended; `<status>` is the shell's `$?` (129 to 192: signal
//!   `status - 128`); `<t0>`/`<t1>` are nanoseconds of the host's clock, or
//!   `x` where it was not asked for or has no nanoseconds (then the
//!   launcher's clock times the run, if it watched it).
//! - `size`: the length of the last run's `stdout` or `stderr` (sent only
//!   when not empty).
//! - `file`: `<n>` bytes of the file `<tag>`, then a newline.
//! - `missing`: the file `<tag>` is not sent, and why (`was not written`,
//!   `is a FIFO, not a regular file`, `is ... bytes, over the limit of ...`).
//! - `digest`: the sha256 of declared output `<index>` (0-based), or `-` and
//!   why not, or `none` when the host has no `sha256sum`, `shasum` or
//!   `openssl` (the attempt then fails to set up).
//! - `setup`: the attempt could not start (`end` follows).
//! - `end`: the reply is complete.
//!
//! File tags: `stdout_tail`, `stderr_tail` (at most [`TAIL_BYTES`] plus
//! the scrub margin, [`crate::scrub::margin`]: the launcher scrubs secrets
//! before it cuts the tail, so it needs a secret straddling the cut whole),
//! `stderr_head` (at most [`HEAD_BYTES`] plus that margin, sent only when
//! stderr is longer than the tail sent), `result` (at most [`MAX_RESULT_BYTES`]), `value:<i>`
//! (tolerance file `i`, at most [`MAX_VALUE_FILE_BYTES`]), `rfile:<i>`
//! (file `i` of `result:`, at most [`MAX_RESULT_BYTES`]), `stream:stdout`,
//! `stream:stderr` (the counted run's whole stream, at most
//! [`MAX_RESULT_BYTES`]), `log:stdout`,
//! `log:stderr`, `probe`; a file fetch ([`fetch_files_script`]) tags each
//! file with its index in the request.
//!
//! What the agent guarantees: every `run` is followed by its `rc` (unless
//! the agent itself is killed); the last `run` reported is the counted run
//! or the run that failed; `result`, `digest` and `value:<i>` frames come
//! only after every run exited 0; a file body has exactly the announced
//! length, whatever bytes it holds (it is never scanned for frames); `end`
//! is the last frame, sent when nothing more happens on the host for this
//! attempt.
//!
//! What the launcher guarantees ([`read_frames`]):
//!
//! - A header it cannot read (no `@@tunectl ` prefix, an unknown kind, a
//!   number that does not parse, a line over [`MAX_HEADER_BYTES`]) ends the
//!   reply with an error; the frames before it stand. Trailing words it
//!   does not know are ignored, and `missing`/`digest` without a reason are
//!   read as from an older agent.
//! - A `file` header announcing more than [`MAX_FRAME_BYTES`] is an error
//!   before anything is allocated; a body cut short, or not followed by its
//!   newline, is an error, never a short file.
//! - Nothing after `end` is read.
//! - A reply that ends without `end` is not an error of the parser: the
//!   transport decides (over ssh: a lost host when the connection is gone,
//!   else a setup error; on Slurm: by the task's state in the queue).
//!
//! [`Collected`] gathers the frames of one attempt and [`fill_outcome`]
//! turns them into the raw facts every transport reports (a later frame
//! for the same tag wins).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::mpsc;

use super::attempt::{MAX_OUTPUT_BYTES, MAX_RESULT_BYTES};
use super::local::{HEAD_BYTES, MAX_LOG_BYTES, RunOutput, TAIL_BYTES, head_and_tail};
use super::{
    AttemptOutcome, AttemptSpec, Ended, FileError, ResultError, TransportError, WireError,
};
use crate::decide::gate::{self, MAX_VALUE_FILE_BYTES};
use crate::ledger::records::ExitInfo;
use crate::shell_quote::quote_word;
use crate::trial::Phase;

/// Longest file frame accepted from a host: the largest file the agent
/// sends (a full log, a result, a tolerance file) with room to spare. A
/// longer length is a garbled report, never an allocation.
pub(crate) const MAX_FRAME_BYTES: usize = 2 * MAX_LOG_BYTES as usize;

/// Longest header line accepted from a host. The longest the agent writes
/// is a `setup` or `missing` line naming a path; a longer line is garbage
/// (a host printing without end), never an unbounded buffer.
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Shell functions of the agent (`TC_TAIL` stands for [`TAIL_BYTES`] plus
/// the scrub margin, see [`tail_window`]).
const AGENT_FUNCTIONS: &str = include_str!("agent.sh");

/// The persistent agent's own functions ([`persistent_agent`]).
const AGENT_LOOP: &str = include_str!("agent-loop.sh");

/// Wrap a script body so that the shell reads all of it before running any
/// of it, with standard input closed for whatever it runs.
pub(crate) fn wrap(body: &str) -> String {
    format!("tc_main() {{\n{body}\n}}\ntc_main </dev/null\n")
}

/// [`wrap`], with the session's standard input (past the script: nothing
/// more comes until the launcher closes it) kept as file descriptor 3 for
/// the agent's guard ([`AgentOptions::guard_input`]).
pub(crate) fn wrap_guarded(body: &str) -> String {
    format!("tc_main() {{\n{body}\n}}\ntc_main 3<&0 </dev/null\n")
}

/// Whether `name` can be exported by a POSIX shell.
pub(crate) fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// How the attempt agent behaves beyond the attempt itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct AgentOptions {
    /// Keep the directory of a successful attempt.
    pub keep_workdirs: bool,
    /// The agent enforces each run's timeout itself (a batch job has no
    /// launcher connected to kill it), and reports it with a `timeout`
    /// frame.
    pub self_timeout: bool,
    /// Seconds the agent's own timeout allows beyond the trial's (an ssh
    /// launcher kills at the timeout itself; the agent's is the backstop
    /// for when the launcher is gone).
    pub timeout_margin_s: u64,
    /// Run a guard that reads file descriptor 3 (the session's standard
    /// input, see [`wrap_guarded`]) and, at its end (the launcher or its
    /// connection is gone), stops the agent and kills the running run's
    /// group.
    pub guard_input: bool,
    /// Run this probe script first (in a subshell, in the trial directory)
    /// and send its output as the file frame `probe`.
    pub probe: Option<String>,
    /// Time runs with the host's clock (`date +%s%N`).
    pub remote_clock: bool,
    /// Record each run's process group leader in `.tunectl-run-pid`, for
    /// a persistent agent ([`persistent_agent`]) to kill when its input
    /// ends.
    pub track_run: bool,
}

/// The agent's shell functions, as sent once to a host.
fn agent_functions() -> String {
    AGENT_FUNCTIONS.replace("TC_TAIL", &tail_window().to_string())
}

/// Bytes of a stream's end a host sends: [`TAIL_BYTES`] and the longest
/// of this launcher's secrets, so that one straddling the tail's cut
/// arrives whole and is scrubbed before the cut ([`head_and_tail`]).
fn tail_window() -> usize {
    TAIL_BYTES + crate::scrub::margin(crate::scrub::launcher_secrets())
}

/// Bytes of stderr's start a host sends, for the same reason.
fn head_window() -> usize {
    HEAD_BYTES + crate::scrub::margin(crate::scrub::launcher_secrets())
}

/// The remote script of one attempt (see the module documentation).
pub(crate) fn attempt_script(
    spec: &AttemptSpec,
    opts: &AgentOptions,
) -> Result<String, TransportError> {
    let mut s = agent_functions();
    s.push_str(&attempt_body(spec, opts)?);
    Ok(s)
}

/// Greeting of a persistent agent once it has read its functions.
pub(crate) const AGENT_READY: &str = "@@tunectl agent 1";

/// `$1` of a persistent agent's shell (`sh -s tunectl-agent`): it names the
/// process on the host, and a host that refuses agents can tell it apart.
pub(crate) const AGENT_MARK: &str = "tunectl-agent";

/// The start of a persistent agent's input (see "Persistent agent" in
/// docs/trial-contract.md). The shell (`sh -s`) reads its commands from
/// the channel as they come: first these functions, then one request per
/// attempt ([`persistent_request`]), each run in a background subshell so
/// that the shell goes back to reading its input while the trial runs.
/// That input is silent until the reply's `end` (the launcher sends the
/// next request only then), except for `tc_kill <pid>` (a timeout or
/// Ctrl-C). When it ends (the launcher or its connection is gone) the
/// shell's exit trap stops the running attempt and kills its run's group.
pub(crate) fn persistent_agent() -> String {
    let mut s = agent_functions();
    s.push_str(AGENT_LOOP);
    let _ = writeln!(s, "printf '%s\\n' {}", quote_word(AGENT_READY));
    s
}

/// One attempt's request to a persistent agent: its body as the function
/// `tc_a`, started in the background ([`persistent_agent`]). The shell
/// reads the whole definition before it runs it.
pub(crate) fn persistent_request(
    spec: &AttemptSpec,
    opts: &AgentOptions,
) -> Result<String, TransportError> {
    let body = attempt_body(spec, opts)?;
    Ok(format!(
        "tc_a() {{
{body}
}}
tc_spawn {}
",
        quote_word(&spec.trial_dir)
    ))
}

/// The steps of one attempt, without the agent's functions.
fn attempt_body(spec: &AttemptSpec, opts: &AgentOptions) -> Result<String, TransportError> {
    let keep_workdirs = opts.keep_workdirs;
    let mut s = String::new();
    let q = quote_word;
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
    s.push_str(if opts.guard_input || opts.track_run {
        "tc_track=1\n"
    } else {
        "tc_track=\n"
    });
    if let Some(probe) = &opts.probe {
        let _ = writeln!(
            s,
            "( {probe}\n) >.tunectl-probe 2>/dev/null </dev/null\ntc_file probe .tunectl-probe 1048576\nrm -f .tunectl-probe"
        );
    }
    for (k, v) in &spec.env {
        if !is_env_name(k) {
            return Err(TransportError::EnvName { name: k.clone() });
        }
        let _ = writeln!(s, "{k}={}; export {k}", q(v));
    }
    let mut removals = String::from("rm -f \"$tc_result\"");
    for o in spec.outputs.iter().chain(&spec.result_files) {
        removals.push(' ');
        removals.push_str(&q(o));
    }
    let phases: Vec<&str> = (0..spec.warmup)
        .map(|_| Phase::Warmup.as_str())
        .chain(std::iter::once(Phase::Measure.as_str()))
        .collect();
    // `fidelity.continuation`: every run starts from a fresh copy of the
    // committed checkpoint (symbolic links copied as links), or an empty
    // directory.
    match &spec.checkpoint {
        Some(c) => {
            let _ = writeln!(
                s,
                "tc_ck_run={}\ntc_ck_state={}",
                q(&c.run_dir),
                c.state_dir.as_deref().map_or("''".to_string(), q)
            );
        }
        None => s.push_str("tc_ck_run=\n"),
    }
    let _ = writeln!(
        s,
        "tc_ok=1\ntc_first=1\nfor tc_phase in {}; do",
        phases.join(" ")
    );
    // The directory is new: only runs after the first can find old files.
    let _ = writeln!(s, "  [ $tc_first = 1 ] || {removals}\n  tc_first=0");
    s.push_str(
        "  if [ -n \"$tc_ck_run\" ]; then\n\
         \x20   rm -rf \"$tc_ck_run\" && if [ -n \"$tc_ck_state\" ]; then cp -RP \"$tc_ck_state\" \"$tc_ck_run\"; else mkdir -p \"$tc_ck_run\"; fi \\\n\
         \x20     || { printf '@@tunectl setup cannot prepare the checkpoint directory %s\\n' \"$tc_ck_run\"; tc_ok=0; break; }\n\
         \x20 fi\n",
    );
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
         \x20 [ -z \"$tc_track\" ] || echo \"$tc_pid\" >.tunectl-run-pid\n\
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
        "tc_stream stdout .tunectl-run-stdout 0\ntc_stream stderr .tunectl-run-stderr {}",
        head_window()
    );
    s.push_str("if [ $tc_ok = 1 ]; then\n");
    let _ = writeln!(s, "  tc_rfile result \"$tc_result\" {MAX_RESULT_BYTES}");
    for (i, o) in spec.outputs.iter().enumerate() {
        let _ = writeln!(s, "  tc_digest {i} {} {MAX_OUTPUT_BYTES}", q(o));
    }
    for (i, f) in spec.tolerance_files.iter().enumerate() {
        let _ = writeln!(s, "  tc_rfile value:{i} {} {MAX_VALUE_FILE_BYTES}", q(f));
    }
    for (i, f) in spec.result_files.iter().enumerate() {
        let _ = writeln!(s, "  tc_rfile rfile:{i} {} {MAX_RESULT_BYTES}", q(f));
    }
    for stream in &spec.streams {
        if stream == "stdout" || stream == "stderr" {
            let _ = writeln!(
                s,
                "  tc_rfile stream:{stream} .tunectl-run-{stream} {MAX_RESULT_BYTES}"
            );
        }
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
    s.push_str("[ -z \"$tc_guard_pid\" ] || kill -s TERM \"$tc_guard_pid\" 2>/dev/null\n");
    // (A test first: a successful attempt's directory is gone already, and
    // `rm` is one more process per attempt.)
    s.push_str("[ -z \"$tc_track\" ] || [ ! -e \"$tc_dir/.tunectl-run-pid\" ] || rm -f \"$tc_dir/.tunectl-run-pid\"\n");
    s.push_str("printf '@@tunectl end\\n'\n");
    Ok(s)
}

/// A request that only runs the fingerprint `probe` (in a fresh directory
/// under `dir`, removed after) and sends its output as the file `probe`.
pub(crate) fn probe_script(dir: &str, probe: &str) -> String {
    format!(
        "d={d}/probe-work; mkdir -p \"$d\" && cd \"$d\" || exit 1\n( {probe}\n) >.tunectl-probe 2>/dev/null </dev/null\nn=$(wc -c <.tunectl-probe | tr -d ' ')\nprintf '@@tunectl file probe %s\\n' \"$n\"\ncat .tunectl-probe\nprintf '\\n@@tunectl end\\n'\ncd / && rm -rf \"$d\"",
        d = quote_word(dir)
    )
}

/// A request that sends each of `paths` as a file frame tagged with its
/// index (`missing` where it is not a file), then `end`.
pub(crate) fn fetch_files_script(paths: &[String]) -> String {
    let mut body = String::from(
        "tc_f() { if [ -f \"$2\" ]; then n=$(wc -c <\"$2\" | tr -d ' '); printf '@@tunectl file %s %s\\n' \"$1\" \"$n\"; head -c \"$n\" <\"$2\"; printf '\\n'; else printf '@@tunectl missing %s\\n' \"$1\"; fi; }\n",
    );
    for (i, p) in paths.iter().enumerate() {
        let _ = writeln!(body, "tc_f {i} {}", quote_word(p));
    }
    body.push_str("printf '@@tunectl end\\n'\n");
    body
}

/// One frame of the agent's report.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame {
    /// The run was killed by the agent's own timeout.
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
        /// Why it was not sent (absent from older agents).
        why: Option<String>,
    },
    Digest {
        index: usize,
        hex: Option<String>,
        /// Why there is no digest (absent from older agents).
        why: Option<String>,
    },
    Setup(String),
    End,
}

/// Read frames from the agent's stdout until it ends; a malformed frame
/// ends the stream with an error.
pub(crate) async fn read_frames<R: tokio::io::AsyncRead + Unpin>(
    reader: R,
    tx: mpsc::UnboundedSender<Result<Frame, WireError>>,
) {
    read_reply(&mut BufReader::new(reader), tx).await;
}

/// Read one reply's frames from a stream that goes on after it (a
/// persistent agent's output): stops right after `end` (returns true)
/// with the next reply's bytes left in `reader`; false when the stream
/// ended or broke first.
pub(crate) async fn read_reply<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    tx: mpsc::UnboundedSender<Result<Frame, WireError>>,
) -> bool {
    let mut line = Vec::new();
    loop {
        line.clear();
        // One byte past the limit tells a line at the limit from a longer
        // one.
        let limit = MAX_HEADER_BYTES as u64 + 1;
        match (&mut *reader)
            .take(limit)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) => {
                let _ = tx.send(Err(WireError::Read(e.into())));
                return false;
            }
        }
        if line.len() > MAX_HEADER_BYTES {
            let _ = tx.send(Err(WireError::LongLine {
                start: String::from_utf8_lossy(&line[..200]).into_owned(),
                limit: MAX_HEADER_BYTES,
            }));
            return false;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\n');
        let frame = match parse_header(text) {
            Ok(Header::Frame(f)) => f,
            Ok(Header::File { tag, len }) if len > MAX_FRAME_BYTES => {
                let _ = tx.send(Err(WireError::TooLong {
                    tag,
                    len,
                    limit: MAX_FRAME_BYTES,
                }));
                return false;
            }
            Ok(Header::File { tag, len }) => {
                let mut bytes = vec![0u8; len];
                if let Err(e) = reader.read_exact(&mut bytes).await {
                    let _ = tx.send(Err(WireError::CutShort {
                        tag,
                        source: e.into(),
                    }));
                    return false;
                }
                let mut nl = [0u8; 1];
                if reader.read_exact(&mut nl).await.is_err() || nl[0] != b'\n' {
                    let _ = tx.send(Err(WireError::Garbled { tag }));
                    return false;
                }
                Frame::File { tag, bytes }
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return false;
            }
        };
        let end = frame == Frame::End;
        if tx.send(Ok(frame)).is_err() {
            return false;
        }
        if end {
            return true;
        }
    }
}

/// The frames of a complete reply (already read: a Slurm task's report, a
/// file fetch), and the error that ended it early, if any.
pub(crate) async fn read_report(bytes: &[u8]) -> (Vec<Frame>, Option<WireError>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    read_frames(bytes, tx).await;
    let mut frames = Vec::new();
    let mut error = None;
    while let Some(f) = rx.recv().await {
        match f {
            Ok(f) => frames.push(f),
            Err(e) => error = Some(e),
        }
    }
    (frames, error)
}

enum Header {
    Frame(Frame),
    File { tag: String, len: usize },
}

fn parse_header(line: &str) -> Result<Header, WireError> {
    let garbled = || WireError::UnexpectedLine {
        line: line.chars().take(200).collect(),
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
    /// Files not sent, with why (when the agent said).
    pub missing: BTreeMap<String, Option<String>>,
    pub setup: Option<String>,
    pub timed_out: bool,
    pub ended: bool,
}

impl Collected {
    /// Take in a frame as it arrives from a launcher that watches the run:
    /// the launcher's clock times a run the host's clock did not.
    pub fn absorb_live(&mut self, frame: Frame) {
        if let Frame::Rc {
            rc,
            remote_ns: None,
        } = frame
        {
            if let Some(run) = self.runs.last_mut() {
                run.1 = Some(exit_info(rc));
                run.2 = Some(run.3.elapsed());
            }
            return;
        }
        self.absorb(frame);
    }

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

/// A file the agent sent (at most [`MAX_RESULT_BYTES`]), or why not.
fn sent_file(got: &mut Collected, tag: &str) -> Result<Vec<u8>, FileError> {
    match got.files.remove(tag) {
        Some(b) if b.len() as u64 > MAX_RESULT_BYTES => Err(FileError::TooLarge {
            bytes: b.len() as u64,
            limit: MAX_RESULT_BYTES,
        }),
        Some(b) => Ok(b),
        None => Err(host_why(got.missing.get(tag).cloned().flatten())),
    }
}

/// Why the host did not send a file, in its words (none: it was not
/// written).
fn host_why(why: Option<String>) -> FileError {
    match why {
        Some(w) if w != "was not written" => FileError::Host(w),
        _ => FileError::NotWritten,
    }
}

/// Turn the agent's report into the raw facts every transport reports.
pub(crate) fn fill_outcome(
    outcome: &mut AttemptOutcome,
    spec: &AttemptSpec,
    mut got: Collected,
    timed_out: bool,
) {
    let Some((phase, exit, elapsed, _)) = got.runs.pop() else {
        outcome.end(Ended::SetupFailed(TransportError::RanNothing));
        return;
    };
    let warmups_ok = got.runs.len() as u32;
    let exit = exit.unwrap_or_default();
    let ok = exit.code == Some(0) && !timed_out && !outcome.cancelled();
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
        cancelled: outcome.cancelled(),
        elapsed: elapsed.unwrap_or_default(),
        stdout_tail,
        stderr_tail,
        stderr_head,
        streams: BTreeMap::new(),
    });
    // The agent stops at the first run that fails: a warm-up reported
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
            outcome.result_error = Some(ResultError::Unread {
                name: name.to_string(),
                why: FileError::Host(why.clone()),
            });
        }
        for (i, name) in spec.outputs.iter().enumerate() {
            let digest = got
                .digests
                .get(&i)
                .cloned()
                .unwrap_or(Err(None))
                .map_err(host_why);
            match digest {
                Ok(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    outcome
                        .outputs
                        .insert(name.clone(), Ok(h.to_ascii_lowercase()));
                }
                Ok(other) => {
                    outcome.end(Ended::SetupFailed(TransportError::NoDigest {
                        output: name.clone(),
                        got: other,
                    }));
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
                None => Err(match host_why(got.missing.get(&tag).cloned().flatten()) {
                    FileError::NotWritten => FileError::ValuesNotWritten,
                    why => why,
                }),
                Some(b) if b.len() as u64 > MAX_VALUE_FILE_BYTES => {
                    Err(FileError::ValuesTooLarge {
                        limit: MAX_VALUE_FILE_BYTES,
                    })
                }
                Some(b) => gate::parse_values(&b).map_err(FileError::Values),
            };
            outcome.output_values.insert(name.clone(), value);
        }
        for (i, name) in spec.result_files.iter().enumerate() {
            let value = sent_file(&mut got, &format!("rfile:{i}"));
            outcome.result_files.insert(name.clone(), value);
        }
        for stream in &spec.streams {
            let value = sent_file(&mut got, &format!("stream:{stream}"));
            outcome.streams.insert(stream.clone(), value);
        }
    }
    for stream in ["stdout", "stderr"] {
        if let Some(b) = got.files.remove(&format!("log:{stream}")) {
            outcome.logs.insert(stream.to_string(), b);
        }
    }
    if ok && !outcome.cancelled() {
        outcome.trial_dir = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`read_report`], the error in words.
    async fn report_text(bytes: &[u8]) -> (Vec<Frame>, Option<String>) {
        let (frames, error) = read_report(bytes).await;
        (frames, error.map(|e| e.to_string()))
    }
    use crate::transport::checkpoint::RunCheckpoint;

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

    /// Run the agent's script for `spec` in a local `sh`, as a host would,
    /// and collect its report.
    async fn run_agent(spec: &AttemptSpec) -> Collected {
        use tokio::io::AsyncWriteExt;
        let script = attempt_script(spec, &AgentOptions::default()).expect("a script");
        let mut child = tokio::process::Command::new("/bin/sh")
            .arg("-s")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh starts");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(wrap(&script).as_bytes())
            .await
            .expect("script sent");
        drop(stdin);
        let out = child.wait_with_output().await.expect("sh ends");
        let (frames, error) = report_text(&out.stdout).await;
        assert_eq!(error, None);
        let mut got = Collected::default();
        for f in frames {
            got.absorb(f);
        }
        got
    }

    fn spec(dir: &str) -> AttemptSpec {
        AttemptSpec {
            study_id: "study".into(),
            trial_key: "0123456789abcdef".into(),
            attempt_id: "a1".into(),
            command: "true".into(),
            env: Vec::new(),
            timeout: Duration::from_secs(20),
            warmup: 1,
            outputs: vec!["out.bin".into()],
            tolerance_files: vec!["logits.json".into()],
            result_files: Vec::new(),
            streams: Vec::new(),
            slot: 0,
            trial_dir: dir.into(),
            result_path: format!("{dir}/tunectl-result.json"),
            keep_logs: true,
            checkpoint: None,
        }
    }

    /// A reply of every frame kind, files holding what looks like frames,
    /// binary bytes and nothing at all.
    #[tokio::test]
    async fn a_well_formed_reply_is_read_whole() {
        let hex = "AB".repeat(32);
        let mut text = Vec::new();
        text.extend_from_slice(b"@@tunectl run warmup 41\n@@tunectl rc 0 100 350\n");
        text.extend_from_slice(b"@@tunectl run measure 42\n@@tunectl rc 0 x x\n");
        text.extend_from_slice(b"@@tunectl size stdout 3\n@@tunectl file stdout_tail 3\nok\n\n");
        let result = b"{\"metrics\":{\"t\":[1]}}\n@@tunectl end\n";
        text.extend_from_slice(format!("@@tunectl file result {}\n", result.len()).as_bytes());
        text.extend_from_slice(result);
        text.push(b'\n');
        text.extend_from_slice(format!("@@tunectl digest 0 {hex}\n").as_bytes());
        text.extend_from_slice(b"@@tunectl file value:0 6\n[1, 2]\n");
        text.extend_from_slice(b"@@tunectl file log:stdout 4\n\x00\xff\n\x01\n");
        text.extend_from_slice(b"@@tunectl file log:stderr 0\n\n");
        text.extend_from_slice(b"@@tunectl missing probe it is a FIFO, not a regular file\n");
        text.extend_from_slice(b"@@tunectl end\n");
        let (frames, error) = report_text(&text).await;
        assert_eq!(error, None);
        assert_eq!(frames.len(), 13);
        assert_eq!(
            frames[5],
            Frame::File {
                tag: "stdout_tail".into(),
                bytes: b"ok\n".to_vec()
            }
        );
        assert_eq!(
            frames[6],
            Frame::File {
                tag: "result".into(),
                bytes: b"{\"metrics\":{\"t\":[1]}}\n@@tunectl end\n".to_vec()
            }
        );
        assert_eq!(
            frames[11],
            Frame::Missing {
                tag: "probe".into(),
                why: Some("it is a FIFO, not a regular file".into())
            }
        );
        assert_eq!(frames[12], Frame::End);

        let mut got = Collected::default();
        for f in frames {
            got.absorb(f);
        }
        assert!(got.ended);
        let mut outcome = AttemptOutcome {
            trial_dir: Some("/w/t".into()),
            ..Default::default()
        };
        fill_outcome(&mut outcome, &spec("/w/t"), got, false);
        assert_eq!(outcome.warmups_run, 1);
        assert!(!outcome.failed_in_warmup);
        let run = outcome.run.expect("a run");
        assert_eq!(run.exit.code, Some(0));
        assert_eq!(
            run.elapsed,
            Duration::ZERO,
            "no clock timed the counted run"
        );
        assert_eq!(run.stdout_tail, "ok\n");
        assert_eq!(outcome.result.as_deref(), Some(&result[..]));
        assert_eq!(outcome.outputs["out.bin"], Ok(hex.to_ascii_lowercase()));
        assert_eq!(outcome.output_values["logits.json"], Ok(vec![1.0, 2.0]));
        assert_eq!(outcome.logs["stdout"], b"\x00\xff\n\x01");
        assert_eq!(outcome.logs["stderr"], b"");
        assert_eq!(outcome.trial_dir, None, "a success leaves no directory");
    }

    /// A reply cut short: the frames before the cut stand; a body cut short
    /// is an error; a reply without `end` is not (the transport decides).
    #[tokio::test]
    async fn a_truncated_reply() {
        let (frames, error) =
            report_text(b"@@tunectl run measure 7\n@@tunectl file result 50\nhello\n").await;
        assert_eq!(frames.len(), 1);
        assert!(
            error.is_some_and(|e| e.starts_with("the reply for `result` was cut short")),
            "a short body is an error, not a short file"
        );

        let (frames, error) = report_text(b"@@tunectl run measure 7\n@@tunectl rc 0 x x\n").await;
        assert_eq!((frames.len(), error), (2, None));
        let mut got = Collected::default();
        for f in frames {
            got.absorb(f);
        }
        assert!(!got.ended);

        // Cut inside a header line.
        let (frames, error) = report_text(b"@@tunectl run measure 7\n@@tunectl e").await;
        assert_eq!(frames.len(), 1);
        assert!(error.is_some_and(|e| e.contains("`@@tunectl e`")));

        // Cut between a body and its newline.
        let (_, error) = report_text(b"@@tunectl file result 5\nhello").await;
        assert_eq!(error.as_deref(), Some("the reply for `result` is garbled"));
    }

    /// Anything but a frame ends the reply with an error that shows it.
    #[tokio::test]
    async fn garbage_ends_the_reply() {
        for (text, shown) in [
            (
                &b"Welcome to the host!\n@@tunectl end\n"[..],
                "`Welcome to the host!`",
            ),
            (b"@@tunectl bogus 1\n", "`@@tunectl bogus 1`"),
            (b"@@tunectl run warmup notapid\n", "notapid"),
            (b"@@tunectl rc zero x x\n", "rc zero"),
            (b"@@tunectl size stdout -1\n", "-1"),
            (b"@@tunectl file result -1\n", "result -1"),
            (b"@@tunectl digest one abc\n", "digest one"),
            (b"@@tunectl run\n", "`@@tunectl run`"),
            (b"\xff\xfe@@tunectl end\n", "@@tunectl end"),
            (b"@@TUNECTL end\n", "TUNECTL"),
        ] {
            let (frames, error) = report_text(text).await;
            assert!(frames.is_empty(), "{shown}");
            let error = error.expect("an error");
            assert!(
                error.starts_with("unexpected line from the host's wrapper: ")
                    && error.contains(shown),
                "{error}"
            );
        }
        // A body followed by something else than its newline.
        let (frames, error) = report_text(b"@@tunectl file result 5\nhello!@@tunectl end\n").await;
        assert!(frames.is_empty());
        assert_eq!(error.as_deref(), Some("the reply for `result` is garbled"));
        // A garbled line ends the reply: nothing after it is read.
        let (frames, error) = report_text(b"@@tunectl run measure 7\nnoise\n@@tunectl end\n").await;
        assert_eq!(frames.len(), 1);
        assert!(error.is_some());
    }

    /// Lengths and lines past the limits are refused before anything that
    /// size is held.
    #[tokio::test]
    async fn oversized_frames_are_refused() {
        let text = format!("@@tunectl file log:stdout {}\n", MAX_FRAME_BYTES + 1);
        let (frames, error) = report_text(text.as_bytes()).await;
        assert!(frames.is_empty());
        assert!(error.is_some_and(|e| e.contains("more than the") && e.contains("log:stdout")));
        // A length that is no usize at all.
        let (_, error) = report_text(b"@@tunectl file result 99999999999999999999999\n").await;
        assert!(error.is_some_and(|e| e.starts_with("unexpected line")));

        // A header line without end.
        let mut text = b"@@tunectl setup ".to_vec();
        text.resize(MAX_HEADER_BYTES + 100, b'x');
        let (frames, error) = report_text(&text).await;
        assert!(frames.is_empty());
        let error = error.expect("an error");
        assert!(
            error.ends_with(&format!("(longer than {MAX_HEADER_BYTES} bytes)")),
            "{error}"
        );
        assert!(error.len() < 400, "the error shows only the line's start");
        // A line of exactly the limit (its newline included) is read.
        let mut text = b"@@tunectl setup ".to_vec();
        text.resize(MAX_HEADER_BYTES - 1, b'x');
        text.extend_from_slice(b"\n@@tunectl end\n");
        let (frames, error) = report_text(&text).await;
        assert_eq!(error, None);
        assert_eq!(frames.len(), 2);
    }

    #[tokio::test]
    async fn nothing_after_end_is_read() {
        let (frames, error) = report_text(b"@@tunectl end\n@@tunectl setup late\ngarbage\n").await;
        assert_eq!(frames, vec![Frame::End]);
        assert_eq!(error, None);
    }

    /// The agent itself, run by a local `sh` as a host would: the trial's
    /// own output cannot pass for frames, and the reply reads back whole.
    #[tokio::test]
    async fn the_agent_reports_through_a_local_shell() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("trial").display().to_string();
        let mut spec = spec(&dir);
        spec.command = "printf '@@tunectl end\\n'; printf 'data' > out.bin; \
             printf '[0.5]' > logits.json; \
             printf '{\"metrics\": {\"t\": 2}}' > \"$TUNECTL_RESULT\"; \
             echo \"phase=$TUNECTL_PHASE x=$X\" >&2"
            .into();
        spec.env = vec![
            ("TUNECTL_RESULT".into(), spec.result_path.clone()),
            ("X".into(), "it's $(not run)".into()),
        ];
        let got = run_agent(&spec).await;
        assert!(got.ended);
        let mut outcome = AttemptOutcome::default();
        fill_outcome(&mut outcome, &spec, got, false);
        assert_eq!(outcome.warmups_run, 1);
        assert_eq!(
            outcome.result.as_deref(),
            Some(&b"{\"metrics\": {\"t\": 2}}"[..])
        );
        assert_eq!(
            outcome.outputs["out.bin"],
            Ok("3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7".into())
        );
        assert_eq!(outcome.output_values["logits.json"], Ok(vec![0.5]));
        let run = outcome.run.expect("a run");
        assert_eq!(run.stdout_tail, "@@tunectl end\n");
        assert_eq!(run.stderr_tail, "phase=measure x=it's $(not run)\n");
        let log = String::from_utf8_lossy(&outcome.logs["stderr"]).into_owned();
        assert_eq!(
            log,
            "== tunectl: warmup run ==\nphase=warmup x=it's $(not run)\n\
             == tunectl: measure run ==\nphase=measure x=it's $(not run)\n"
        );
        assert!(
            !std::path::Path::new(&dir).exists(),
            "a success leaves no directory"
        );
    }

    /// With a checkpoint, each run starts from a fresh copy of the
    /// committed state (links kept as links): the warm-up's change is gone
    /// before the counted run. A state that cannot be copied ends the runs
    /// with a `setup` frame.
    #[tokio::test]
    async fn each_run_starts_from_a_fresh_copy_of_the_checkpoint() {
        let root = tempfile::tempdir().expect("tempdir");
        let state = root.path().join("state");
        std::fs::create_dir_all(&state).expect("state");
        std::fs::write(state.join("at"), "1").expect("at");
        std::os::unix::fs::symlink("/nowhere", state.join("link")).expect("link");
        let run_dir = root.path().join("run-a1").display().to_string();
        let log = root.path().join("seen.log").display().to_string();
        let mut spec = spec(&root.path().join("trial").display().to_string());
        spec.outputs.clear();
        spec.tolerance_files.clear();
        spec.command =
            format!("cd \"$CK\" && {{ cat at; readlink link; }} >>{log} && echo changed >at");
        spec.env = vec![("CK".into(), run_dir.clone())];
        spec.checkpoint = Some(RunCheckpoint {
            run_dir: run_dir.clone(),
            state_dir: Some(state.display().to_string()),
            resume_from: Some(1.0),
        });
        let got = run_agent(&spec).await;
        assert!(got.ended && got.setup.is_none());
        assert_eq!(
            std::fs::read_to_string(&log).expect("log"),
            "1/nowhere\n1/nowhere\n"
        );
        assert_eq!(std::fs::read_to_string(state.join("at")).expect("at"), "1");
        // No state to copy: the attempt does not run.
        spec.checkpoint = Some(RunCheckpoint {
            run_dir,
            state_dir: Some(root.path().join("gone").display().to_string()),
            resume_from: Some(1.0),
        });
        let got = run_agent(&spec).await;
        assert!(got.ended);
        assert!(
            got.setup
                .as_deref()
                .is_some_and(|s| s.starts_with("cannot prepare the checkpoint directory")),
            "{:?}",
            got.setup
        );
        assert!(got.runs.is_empty());
    }

    /// A persistent agent in a local `sh`, as a host would run it: two
    /// attempts one after the other over the same input and output (the
    /// trial's output, frames included, never reaches the reply), a
    /// `tc_kill` of a run, then a run left running when the input ends is
    /// killed with its group.
    #[tokio::test]
    async fn a_persistent_agent_runs_attempts_one_after_another() {
        // The system's sh, and bash where there is one (the /bin/sh of
        // many hosts).
        for shell in ["/bin/sh", "/bin/bash"] {
            if std::path::Path::new(shell).exists() {
                persistent_agent_in(shell).await;
            }
        }
    }

    async fn persistent_agent_in(shell: &str) {
        use tokio::io::AsyncWriteExt;
        let root = tempfile::tempdir().expect("tempdir");
        let mut child = tokio::process::Command::new(shell)
            .args(["-s", AGENT_MARK])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh starts");
        let mut stdin = child.stdin.take().expect("stdin");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        stdin
            .write_all(persistent_agent().as_bytes())
            .await
            .expect("agent sent");
        let mut line = String::new();
        out.read_line(&mut line).await.expect("greeting");
        assert_eq!(line.trim_end(), AGENT_READY);
        let opts = AgentOptions {
            track_run: true,
            ..Default::default()
        };
        async fn reply<R: tokio::io::AsyncRead + Unpin>(out: &mut BufReader<R>) -> Collected {
            let (tx, mut rx) = mpsc::unbounded_channel();
            assert!(read_reply(out, tx).await, "a whole reply");
            let mut got = Collected::default();
            while let Some(f) = rx.recv().await {
                got.absorb(f.expect("a frame"));
            }
            got
        }
        for i in 0..2 {
            let dir = root.path().join(format!("t{i}")).display().to_string();
            let mut a = spec(&dir);
            a.warmup = 0;
            a.tolerance_files.clear();
            a.command = format!(
                "printf '@@tunectl end\\n'; echo {i} > out.bin; printf '{{\"metrics\": {{\"t\": {i}}}}}' > \"$TUNECTL_RESULT\""
            );
            a.env = vec![("TUNECTL_RESULT".into(), a.result_path.clone())];
            let request = persistent_request(&a, &opts).expect("a request");
            stdin.write_all(request.as_bytes()).await.expect("sent");
            let got = reply(&mut out).await;
            let mut outcome = AttemptOutcome::default();
            fill_outcome(&mut outcome, &a, got, false);
            assert_eq!(
                outcome.result.as_deref(),
                Some(format!("{{\"metrics\": {{\"t\": {i}}}}}").as_bytes())
            );
            assert_eq!(outcome.run.expect("a run").stdout_tail, "@@tunectl end\n");
            assert!(!std::path::Path::new(&dir).exists());
        }

        // A run stopped by `tc_kill`: the reply still comes, whole.
        let dir = root.path().join("killed").display().to_string();
        let mut a = spec(&dir);
        a.warmup = 0;
        a.command = "sleep 30".into();
        stdin
            .write_all(persistent_request(&a, &opts).expect("a request").as_bytes())
            .await
            .expect("sent");
        let mut line = String::new();
        out.read_line(&mut line).await.expect("run frame");
        let pid = line
            .trim_end()
            .strip_prefix("@@tunectl run measure ")
            .and_then(|p| p.parse::<u32>().ok())
            .expect("a run frame");
        stdin
            .write_all(format!("tc_kill {pid}\n").as_bytes())
            .await
            .expect("kill sent");
        let (tx, mut rx) = mpsc::unbounded_channel();
        assert!(read_reply(&mut out, tx).await, "a whole reply");
        let mut frames = Vec::new();
        while let Some(f) = rx.recv().await {
            frames.push(f.expect("a frame"));
        }
        assert!(
            frames.contains(&Frame::Rc {
                rc: 128 + 15,
                remote_ns: None
            }),
            "{frames:?}"
        );

        // The input ends while a run runs: the agent kills its group.
        let dir = root.path().join("orphan").display().to_string();
        let mut a = spec(&dir);
        a.warmup = 0;
        a.command = "sleep 30 & echo $! > sleeper; wait".into();
        stdin
            .write_all(persistent_request(&a, &opts).expect("a request").as_bytes())
            .await
            .expect("sent");
        let mut line = String::new();
        out.read_line(&mut line).await.expect("run frame");
        let sleeper = std::path::Path::new(&dir).join("sleeper");
        let deadline = Instant::now() + Duration::from_secs(10);
        let pid = loop {
            if let Some(p) = std::fs::read_to_string(&sleeper)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
            {
                break p;
            }
            assert!(Instant::now() < deadline, "the run never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        drop(stdin);
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .expect("the agent exits when its input ends")
            .expect("status");
        assert!(status.success() || status.code().is_some());
        let deadline = Instant::now() + Duration::from_secs(10);
        // Gone, or a zombie nobody reaped yet.
        let alive = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|t| t.rsplit(')').next().map(|r| r.trim_start().to_string()))
                .is_some_and(|r| !r.starts_with('Z'))
        };
        while alive(pid) {
            assert!(Instant::now() < deadline, "the run outlived its agent");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `result:`'s files and the counted run's whole stdout come back
    /// through the agent; a file only a warm-up wrote does not.
    #[tokio::test]
    async fn the_agent_brings_back_what_result_reads() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("trial").display().to_string();
        let mut spec = spec(&dir);
        spec.outputs.clear();
        spec.tolerance_files.clear();
        spec.keep_logs = false;
        // 20 KiB of stdout, more than the tail: the first line must still
        // come back.
        spec.command = "echo \"first=$TUNECTL_PHASE\"; i=0; while [ $i -lt 2000 ]; do echo 'filler....'; i=$((i+1)); done; \
             printf '{\"a\": [1.5, 2]}' > r.json; \
             [ \"$TUNECTL_PHASE\" = warmup ] && echo 1 > w.json; true"
            .into();
        spec.result_files = vec!["r.json".into(), "w.json".into()];
        spec.streams = vec!["stdout".into()];
        let got = run_agent(&spec).await;
        let mut outcome = AttemptOutcome::default();
        fill_outcome(&mut outcome, &spec, got, false);
        assert_eq!(
            outcome.result_files["r.json"],
            Ok(b"{\"a\": [1.5, 2]}".to_vec())
        );
        assert_eq!(outcome.result_files["w.json"], Err(FileError::NotWritten));
        let stdout = outcome.streams["stdout"].as_ref().expect("stdout");
        assert!(stdout.starts_with(b"first=measure\nfiller"));
        assert_eq!(stdout.len(), 14 + 2000 * 11);
    }
}
