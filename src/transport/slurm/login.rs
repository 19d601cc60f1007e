//! The login side: where client commands (sbatch, sacct, scancel) run and
//! the shared directory's files are read and written.

use super::*;

/// Where client commands run and files are read and written.
#[derive(Clone)]
pub enum Login {
    Local,
    Ssh(Arc<SshTransport>),
}

impl Login {
    /// Run a POSIX `sh` script; stdout, or an error with stderr.
    pub(super) async fn sh(&self, body: &str) -> Result<Vec<u8>, TransportError> {
        match self {
            Login::Ssh(t) => t.run_remote(body, COMMAND_LIMIT).await,
            Login::Local => {
                let mut cmd = tokio::process::Command::new("/bin/sh");
                cmd.arg("-c")
                    .arg(body)
                    .stdin(std::process::Stdio::null())
                    .kill_on_drop(true);
                let out = tokio::time::timeout(COMMAND_LIMIT, cmd.output())
                    .await
                    .map_err(|_| TransportError::NoAnswer {
                        secs: COMMAND_LIMIT.as_secs(),
                    })?
                    .map_err(|e| TransportError::RunSh(e.into()))?;
                if !out.status.success() {
                    return Err(TransportError::LocalCommand {
                        status: out.status.to_string(),
                        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                    });
                }
                Ok(out.stdout)
            }
        }
    }

    /// Create files (and their directories).
    pub(super) async fn write_files(
        &self,
        files: &[(String, String)],
    ) -> Result<(), TransportError> {
        match self {
            Login::Local => {
                for (path, text) in files {
                    if let Some(dir) = std::path::Path::new(path).parent() {
                        tokio::fs::create_dir_all(dir).await.map_err(|e| {
                            TransportError::CreateDir {
                                path: dir.display().to_string(),
                                source: e.into(),
                            }
                        })?;
                    }
                    tokio::fs::write(path, text)
                        .await
                        .map_err(|e| TransportError::WriteFile {
                            path: path.clone(),
                            source: e.into(),
                        })?;
                }
                Ok(())
            }
            Login::Ssh(_) => {
                let mut body = String::new();
                for (path, text) in files {
                    body.push_str(&format!(
                        "mkdir -p \"$(dirname {p})\" && printf '%s' {t} >{p} || exit 1\n",
                        p = quote_word(path),
                        t = quote_word(text)
                    ));
                }
                self.sh(&body).await.map(|_| ())
            }
        }
    }

    /// Read files; missing ones are left out, and so are (said once here)
    /// those that are not regular files of at most
    /// [`MAX_REPORT_FILE_BYTES`] on this machine.
    pub(super) async fn read_files(
        &self,
        paths: &[String],
    ) -> Result<HashMap<String, Vec<u8>>, TransportError> {
        let mut out = HashMap::new();
        match self {
            Login::Local => {
                for p in paths {
                    let path = std::path::PathBuf::from(p);
                    let read = tokio::task::spawn_blocking(move || {
                        crate::safe_read::read_regular(&path, MAX_REPORT_FILE_BYTES, None)
                    })
                    .await
                    .map_err(|e| TransportError::Task {
                        detail: e.to_string(),
                    })?;
                    match read {
                        Ok(b) => {
                            out.insert(p.clone(), b);
                        }
                        Err(crate::safe_read::Unreadable::Missing(_)) => {}
                        Err(why) => tracing::warn!(path = %p, "not read: {why}"),
                    }
                }
            }
            Login::Ssh(_) => {
                if paths.is_empty() {
                    return Ok(out);
                }
                let body = wire::fetch_files_script(paths);
                let bytes = self.sh(&body).await?;
                for frame in parse_frames(&bytes).await? {
                    if let Frame::File { tag, bytes } = frame
                        && let Some(p) = tag.parse::<usize>().ok().and_then(|i| paths.get(i))
                    {
                        out.insert(p.clone(), bytes);
                    }
                }
            }
        }
        Ok(out)
    }

    /// `$HOME` where the files live.
    pub(super) async fn home(&self) -> Result<String, TransportError> {
        let out = self.sh("printf '%s\\n' \"$HOME\"").await?;
        let home = String::from_utf8_lossy(&out).trim().to_string();
        if !home.starts_with('/') {
            return Err(TransportError::NoHome { got: home });
        }
        Ok(home)
    }
}

/// Frames of a complete report (bytes already read).
pub(super) async fn parse_frames(bytes: &[u8]) -> Result<Vec<Frame>, WireError> {
    match wire::read_report(bytes).await {
        (frames, None) => Ok(frames),
        (_, Some(e)) => Err(e),
    }
}
