//! Running a command on this machine: `sh -c` in its own process group, so
//! that a timeout or Ctrl-C kills the trial and everything it started.
//!
//! The group dies with the launcher too: its leader is a small guard
//! shell that blocks reading a pipe whose only writer is the launcher. When
//! the launcher exits, however it dies (SIGKILL included), the kernel closes
//! the pipe, the guard reads end-of-file and kills the whole group (SIGTERM,
//! SIGKILL 2 s later). The guard being the leader also keeps the group's id
//! from being reused while any of it runs.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::ledger::records::ExitInfo;

/// Bytes kept from the end of stdout and stderr.
pub const TAIL_BYTES: usize = 8 * 1024;

/// Bytes kept from the start of stderr when it is longer than the tail
/// (a compile error is often followed by a long traceback).
pub const HEAD_BYTES: usize = 4 * 1024;

/// Grace between SIGTERM and SIGKILL when a trial is stopped.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// The leader of a run's process group: waits for end-of-file on its
/// standard input (the launcher holds the only write end, and writes
/// nothing), then kills its group. It ignores SIGTERM so that a timeout's
/// SIGTERM to the group reaches the trial without ending the guard; the
/// launcher's SIGKILL to the group at the end of every run ends it.
const GUARD: &str =
    "trap '' TERM INT HUP\nread -r tc_line\nkill -s TERM 0\nsleep 2\nkill -s KILL 0\n";

#[derive(Debug, Clone)]
pub struct RunSpec {
    pub command: String,
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Append the full stdout and stderr to these files (when asked to keep
    /// whole logs); tails are kept either way.
    pub log_files: Option<(PathBuf, PathBuf)>,
}

/// Most bytes of each stream kept in a full log.
pub const MAX_LOG_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    pub exit: ExitInfo,
    pub timed_out: bool,
    pub cancelled: bool,
    pub elapsed: Duration,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// The start of stderr (at most [`HEAD_BYTES`]) that the tail does not
    /// hold: empty unless stderr was longer than [`TAIL_BYTES`]; it never
    /// overlaps `stderr_tail`.
    pub stderr_head: String,
}

impl RunOutput {
    /// What the classifier reads: the head and, after a `[...]` line, the
    /// tail (just the tail when there is no head).
    pub fn stderr_for_classifier(&self) -> String {
        join_head_tail(&self.stderr_head, &self.stderr_tail)
    }
}

/// Head and tail of a stream as one text, lines never joined across the
/// cut.
pub fn join_head_tail(head: &str, tail: &str) -> String {
    if head.is_empty() {
        tail.to_string()
    } else {
        format!("{head}\n[...]\n{tail}")
    }
}

/// A stream's first bytes, its last bytes, and how long it was.
#[derive(Default)]
struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: usize,
}

impl Capture {
    fn push(&mut self, bytes: &[u8]) {
        if self.head.len() < HEAD_BYTES {
            let n = (HEAD_BYTES - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
        }
        self.total += bytes.len();
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * TAIL_BYTES {
            let cut = self.tail.len() - TAIL_BYTES;
            self.tail.drain(..cut);
        }
    }

    fn tail_text(&self) -> String {
        let start = self.tail.len().saturating_sub(TAIL_BYTES);
        String::from_utf8_lossy(&self.tail[start..]).into_owned()
    }

    /// The head's bytes that come before the tail's first byte.
    fn head_text(&self) -> String {
        let before_tail = self.total.saturating_sub(TAIL_BYTES);
        let n = self.head.len().min(before_tail);
        String::from_utf8_lossy(&self.head[..n]).into_owned()
    }
}

/// `(head, tail)` texts of a stream of `total` bytes from its first and
/// last bytes, as a local capture would give them (the head never overlaps
/// the tail).
pub fn head_and_tail(head: Vec<u8>, tail: Vec<u8>, total: usize) -> (String, String) {
    let c = Capture { head, tail, total };
    (c.head_text(), c.tail_text())
}

fn spawn_capture<R: AsyncRead + Unpin + Send + 'static>(
    mut reader: R,
    buf: Arc<Mutex<Capture>>,
    log: Option<PathBuf>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut file = match &log {
            Some(p) => tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .await
                .ok(),
            None => None,
        };
        let mut logged: u64 = 0;
        let mut chunk = [0u8; 4096];
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut b) = buf.lock() {
                        b.push(&chunk[..n]);
                    }
                    if let Some(f) = file.as_mut()
                        && logged < MAX_LOG_BYTES
                    {
                        let keep = (MAX_LOG_BYTES - logged).min(n as u64) as usize;
                        if f.write_all(&chunk[..keep]).await.is_err() {
                            file = None;
                        }
                        logged += keep as u64;
                    }
                }
            }
        }
        if let Some(mut f) = file {
            let _ = f.flush().await;
        }
    })
}

/// `(head, tail)` of a captured stream.
fn texts(buf: &Arc<Mutex<Capture>>) -> (String, String) {
    buf.lock()
        .map(|b| (b.head_text(), b.tail_text()))
        .unwrap_or_default()
}

fn kill_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; it
        // has no memory-safety preconditions. Errors (group already gone)
        // are expected and ignored.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Run `/bin/sh -c command` and wait for it, its timeout or cancellation.
pub async fn run(spec: &RunSpec, cancel: &CancellationToken) -> io::Result<RunOutput> {
    let started = Instant::now();
    // The guard first, as the group's leader: if this launcher dies from
    // here on, the group dies with it (see the module documentation).
    let mut guard = Command::new("/bin/sh")
        .arg("-c")
        .arg(GUARD)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let pgid = guard.id().map(|p| p as i32).unwrap_or(0);
    // Held, never written to, until the run is over.
    let guard_pipe = guard.stdin.take();
    // POSIX puts `sh` at /bin/sh; naming it saves a PATH search per trial.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.dir)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(pgid)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            kill_group(pgid, libc::SIGKILL);
            let _ = tokio::time::timeout(KILL_GRACE, guard.wait()).await;
            return Err(e);
        }
    };
    let out_buf = Arc::new(Mutex::new(Capture::default()));
    let err_buf = Arc::new(Mutex::new(Capture::default()));
    let (out_log, err_log) = match &spec.log_files {
        Some((o, e)) => (Some(o.clone()), Some(e.clone())),
        None => (None, None),
    };
    let readers = [
        child
            .stdout
            .take()
            .map(|s| spawn_capture(s, out_buf.clone(), out_log)),
        child
            .stderr
            .take()
            .map(|s| spawn_capture(s, err_buf.clone(), err_log)),
    ];
    let mut timed_out = false;
    let mut cancelled = false;
    let status = tokio::select! {
        status = child.wait() => status?,
        _ = tokio::time::sleep(spec.timeout) => {
            timed_out = true;
            stop(&mut child, pgid).await?
        }
        _ = cancel.cancelled() => {
            cancelled = true;
            stop(&mut child, pgid).await?
        }
    };
    // Whatever the trial left behind in its group goes too, the guard
    // with it.
    kill_group(pgid, libc::SIGKILL);
    let _ = tokio::time::timeout(KILL_GRACE, guard.wait()).await;
    drop(guard_pipe);
    for r in readers.into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
    }
    let (_, stdout_tail) = texts(&out_buf);
    let (stderr_head, stderr_tail) = texts(&err_buf);
    Ok(RunOutput {
        exit: ExitInfo {
            code: status.code(),
            signal: status.signal(),
        },
        timed_out,
        cancelled,
        elapsed: started.elapsed(),
        stdout_tail,
        stderr_tail,
        stderr_head,
    })
}

async fn stop(
    child: &mut tokio::process::Child,
    pgid: i32,
) -> io::Result<std::process::ExitStatus> {
    kill_group(pgid, libc::SIGTERM);
    match tokio::time::timeout(KILL_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            kill_group(pgid, libc::SIGKILL);
            child.wait().await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_never_overlaps_tail() {
        let mut c = Capture::default();
        c.push(b"short\n");
        assert_eq!(c.head_text(), "");
        assert_eq!(c.tail_text(), "short\n");

        // Just over the tail: the head holds only the bytes the tail lost.
        let mut c = Capture::default();
        c.push(b"ab");
        c.push(&vec![b'x'; TAIL_BYTES]);
        assert_eq!(c.head_text(), "ab");
        assert_eq!(c.tail_text().len(), TAIL_BYTES);

        // Long: head and tail are the two ends, in small reads.
        let mut c = Capture::default();
        let text: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for piece in text.chunks(777) {
            c.push(piece);
        }
        assert_eq!(c.head_text().as_bytes(), &text[..HEAD_BYTES]);
        assert_eq!(c.tail_text().as_bytes(), &text[text.len() - TAIL_BYTES..]);
        assert_eq!(c.total, text.len());
    }
}
