//! Running a command on this machine: `sh -c` in its own process group, so
//! that a timeout or Ctrl-C kills the trial and everything it started.

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

/// Grace between SIGTERM and SIGKILL when a trial is stopped.
const KILL_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct RunSpec {
    pub command: String,
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    pub exit: ExitInfo,
    pub timed_out: bool,
    pub cancelled: bool,
    pub elapsed: Duration,
    pub stdout_tail: String,
    pub stderr_tail: String,
}

fn spawn_tail<R: AsyncRead + Unpin + Send + 'static>(
    mut reader: R,
    buf: Arc<Mutex<Vec<u8>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut chunk = [0u8; 4096];
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut b) = buf.lock() {
                        b.extend_from_slice(&chunk[..n]);
                        if b.len() > 2 * TAIL_BYTES {
                            let cut = b.len() - TAIL_BYTES;
                            b.drain(..cut);
                        }
                    }
                }
            }
        }
    })
}

fn tail_text(buf: &Arc<Mutex<Vec<u8>>>) -> String {
    let bytes = buf.lock().map(|b| b.clone()).unwrap_or_default();
    let start = bytes.len().saturating_sub(TAIL_BYTES);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
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
    // POSIX puts `sh` at /bin/sh; naming it saves a PATH search per trial.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.dir)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let out_buf = Arc::new(Mutex::new(Vec::new()));
    let err_buf = Arc::new(Mutex::new(Vec::new()));
    let readers = [
        child.stdout.take().map(|s| spawn_tail(s, out_buf.clone())),
        child.stderr.take().map(|s| spawn_tail(s, err_buf.clone())),
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
    // Whatever the trial left behind in its group goes too.
    kill_group(pgid, libc::SIGKILL);
    for r in readers.into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
    }
    Ok(RunOutput {
        exit: ExitInfo {
            code: status.code(),
            signal: status.signal(),
        },
        timed_out,
        cancelled,
        elapsed: started.elapsed(),
        stdout_tail: tail_text(&out_buf),
        stderr_tail: tail_text(&err_buf),
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
