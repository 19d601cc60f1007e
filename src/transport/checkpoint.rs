//! Checkpoints of `fidelity.continuation`: where a rung trial leaves its
//! state for the next rung of the same config, and how that state follows
//! the config from host to host.
//!
//! Every host holds one directory per (study, config, cell, host class)
//! under its work directory (a Slurm entry: its shared directory),
//! `<workdir>/<study>/checkpoints/<checkpoint-key>/`:
//!
//! ```text
//! committed.json      the claim: which rung's state `state/` holds
//! state/              the last committed checkpoint
//! run-<attempt>/      an attempt's working copy ($TUNECTL_CHECKPOINT_DIR)
//! incoming-<attempt>/ an archive from the ledger being unpacked
//! ```
//!
//! A trial never writes the committed state: each run of an attempt gets a
//! fresh copy of it (or an empty directory), and only an attempt that ended
//! `ok` and was recorded replaces it. So a rung interrupted half-way
//! (Ctrl-C, a timeout, a crash, a pruned trial) leaves the previous rung's
//! state as it was, and a warm-up run cannot advance the state its counted
//! run resumes from. `committed.json` is removed before the state changes
//! and written last, so a launcher killed between the two leaves no claim:
//! the next rung starts from zero. A missing, unreadable or foreign claim
//! means the same: a lost checkpoint costs a rerun, never a wrong resume.
//! A launcher killed after recording an attempt `ok` but before this
//! commit leaves its `run-<attempt>/` behind: the next launch commits it
//! (`launch::run_trial::interrupted`), since the ledger already counts it.
//!
//! After each commit the state is also stored in the ledger as one archive
//! ([`crate::ledger::checkpoint`], at most `fidelity.checkpoint_max_bytes`).
//! A rung then continues from the host's own copy when it holds the
//! ledger's claim (nothing moves), else from the ledger's archive, brought
//! to the host and checked against its claim before it is installed, else
//! from zero.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{CheckpointStore, TransportError};
use crate::canon::{sha256_hex, write_canonical, write_str};
use crate::ledger::Ledger;
use crate::ledger::checkpoint::Claim;

/// Name of the claim file beside the committed state.
pub const COMMITTED: &str = "committed.json";

/// What became of a rung's checkpoint when it was not what the contract
/// promises (carried to the next rung). `error` is the underlying
/// failure's own text; what it means for the rung is the variant.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointProblem {
    /// The attempt's state could not be committed on its host: the
    /// config's next rung runs from zero.
    NotKept { host: String, error: String },
    /// Committed on the host, but its size could not be read for the
    /// ledger's archive: kept on the host only.
    NotArchived { host: String, error: String },
    /// Over `fidelity.checkpoint_max_bytes`: kept on the host only.
    OverCap { host: String, size: u64, cap: u64 },
    /// The ledger's archive could not be written: kept on the host only.
    NotStored { host: String, error: String },
    /// The host's committed claim could not be read (not used).
    UnreadableOnHost { host: String, error: String },
    /// The ledger's archive of it could not be read (not used).
    IgnoredInLedger { error: String },
    /// The ledger's archive at `budget` could not be installed on the
    /// host: the rung runs from the host's own state at `runs_from`, or
    /// from zero.
    NotBrought {
        host: String,
        budget: f64,
        error: String,
        runs_from: Option<f64>,
    },
}

impl std::fmt::Display for CheckpointProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointProblem::NotKept { host, error } => write!(
                f,
                "cannot keep its checkpoint on host {host}: {error}; its next rung runs from zero"
            ),
            CheckpointProblem::NotArchived { host, error } => write!(
                f,
                "cannot archive its checkpoint on host {host}: {error}; kept there only"
            ),
            CheckpointProblem::OverCap { host, size, cap } => write!(
                f,
                "its checkpoint is {} ({size} bytes), over fidelity.checkpoint_max_bytes ({}): kept on host {host} only; a next rung on another host runs from zero",
                human_bytes(*size),
                human_bytes(*cap),
            ),
            CheckpointProblem::NotStored { host, error } => write!(
                f,
                "cannot store its checkpoint in the ledger: {error}; kept on host {host} only"
            ),
            CheckpointProblem::UnreadableOnHost { host, error } => {
                write!(f, "cannot read its checkpoint on host {host}: {error}")
            }
            CheckpointProblem::IgnoredInLedger { error } => {
                write!(f, "ignoring its checkpoint in the ledger: {error}")
            }
            CheckpointProblem::NotBrought {
                host,
                budget,
                error,
                runs_from,
            } => {
                write!(
                    f,
                    "cannot bring its checkpoint at budget {budget} from the ledger to host {host}: {error}; the rung runs from "
                )?;
                match runs_from {
                    Some(b) => write!(f, "the host's own at budget {b}"),
                    None => f.write_str("zero"),
                }
            }
        }
    }
}

/// The key of a config's checkpoint: sha256 of the canonical JSON of
/// `{"cell", "checkpoint": true, "config", "host_class", "study"}` (the
/// trial key's facts without fidelity, repeat and role, which the rungs of
/// one config do not share).
pub fn checkpoint_key(
    study: &str,
    config: &serde_json::Value,
    cell: &serde_json::Value,
    host_class: &str,
) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"cell\":");
    write_canonical(cell, &mut out);
    out.extend_from_slice(b",\"checkpoint\":true,\"config\":");
    write_canonical(config, &mut out);
    out.extend_from_slice(b",\"host_class\":");
    write_str(host_class, &mut out);
    out.extend_from_slice(b",\"study\":");
    write_str(study, &mut out);
    out.push(b'}');
    sha256_hex(&out)
}

/// What a transport restores before each run of an attempt: `run_dir`
/// (`$TUNECTL_CHECKPOINT_DIR`) becomes a fresh copy of `state_dir`, or an
/// empty directory. (A Slurm batch's manifest keeps it, so that a task
/// adopted by a later launcher is committed as it ran.)
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunCheckpoint {
    pub run_dir: String,
    pub state_dir: Option<String>,
    /// The budget of the state in `state_dir` (`$TUNECTL_RESUME_FROM_BUDGET`).
    #[serde(default)]
    pub resume_from: Option<f64>,
}

/// What a rung's checkpoint needs from its launch.
pub struct Carry<'a> {
    pub ledger: &'a Ledger,
    /// How the host keeps checkpoints.
    pub store: &'a dyn CheckpointStore,
    pub host: &'a str,
    pub study_id: &'a str,
    pub spec_hash: &'a str,
    /// `fidelity.checkpoint_max_bytes`.
    pub cap: u64,
}

/// One rung attempt's checkpoint on its host.
#[derive(Debug, Clone)]
pub struct RungCheckpoint {
    key: String,
    /// The config's checkpoint directory on the host.
    base: String,
    attempt_id: String,
    pub run: RunCheckpoint,
    /// `$TUNECTL_RESUME_FROM_BUDGET`: the committed state's budget, when
    /// the attempt continues from it.
    pub resume_from: Option<f64>,
    /// Whether an `ok` attempt replaces the committed state (false for the
    /// baseline's rungs, which run from zero as the gate's reference).
    commits: bool,
}

impl RungCheckpoint {
    /// Get the checkpoint of `key` ready on the host for an attempt at
    /// `budget`; `None` when the host keeps no checkpoints. Problems on the
    /// way (the ledger's copy unreadable, a transfer that failed) are
    /// pushed to `warnings`: the rung then continues from what the host
    /// holds, or from zero. `adopting`: a task of an earlier launcher runs
    /// this rung already (a Slurm batch found again); its state was chosen
    /// then and must not change under it (see [`RungCheckpoint::adopted`]).
    pub async fn prepare(
        carry: &Carry<'_>,
        key: &str,
        attempt_id: &str,
        budget: f64,
        continues: bool,
        adopting: bool,
        warnings: &mut Vec<CheckpointProblem>,
    ) -> Option<RungCheckpoint> {
        let base = carry.store.dir(carry.study_id, key)?;
        let resume = if continues && !adopting {
            choose(carry, key, &base, attempt_id, budget, warnings).await
        } else {
            None
        };
        Some(RungCheckpoint {
            key: key.to_string(),
            run: RunCheckpoint {
                run_dir: format!("{base}/run-{attempt_id}"),
                state_dir: resume.as_ref().map(|_| format!("{base}/state")),
                resume_from: resume.as_ref().map(|c| c.budget),
            },
            base,
            attempt_id: attempt_id.to_string(),
            resume_from: resume.map(|c| c.budget),
            commits: continues,
        })
    }

    /// The working copy of `attempt_id` in `base` (checkpoint `key`) that
    /// a launcher which died after recording the attempt `ok` left
    /// uncommitted: [`RungCheckpoint::commit`] commits it as that launcher
    /// would have.
    pub fn left_behind(key: &str, base: &str, attempt_id: &str) -> RungCheckpoint {
        RungCheckpoint {
            key: key.to_string(),
            run: RunCheckpoint {
                run_dir: format!("{base}/run-{attempt_id}"),
                state_dir: None,
                resume_from: None,
            },
            base: base.to_string(),
            attempt_id: attempt_id.to_string(),
            resume_from: None,
            commits: true,
        }
    }

    /// The checkpoint an adopted task (`attempt_id`) ran with, in place of
    /// the one prepared for this launcher's attempt (which never ran):
    /// `run` as its request said, or `None` when it had none (it commits
    /// nothing).
    pub fn adopted(mut self, attempt_id: &str, run: Option<RunCheckpoint>) -> RungCheckpoint {
        match run {
            Some(run) => {
                self.attempt_id = attempt_id.to_string();
                self.resume_from = run.resume_from;
                self.run = run;
            }
            None => {
                self.resume_from = None;
                self.commits = false;
            }
        }
        self
    }

    /// After an `ok` attempt was recorded: its working copy becomes the
    /// host's committed state, then the ledger's archive. Problems are
    /// pushed to `warnings` (the state is then kept on the host only, or
    /// not at all: a next rung elsewhere runs from zero).
    pub async fn commit(
        self,
        carry: &Carry<'_>,
        budget: f64,
        trial_key: &str,
        warnings: &mut Vec<CheckpointProblem>,
    ) {
        if !self.commits {
            self.discard(carry).await;
            return;
        }
        let claim = Claim {
            budget,
            spec_hash: carry.spec_hash.to_string(),
            trial_key: trial_key.to_string(),
            attempt_id: self.attempt_id.clone(),
        };
        let t = carry.store;
        if let Err(e) = t.commit(&self.base, &self.attempt_id, &claim).await {
            warnings.push(CheckpointProblem::NotKept {
                host: carry.host.to_string(),
                error: e.to_string(),
            });
            carry
                .ledger
                .forget_checkpoint(carry.study_id, &self.key)
                .await;
            self.discard(carry).await;
            return;
        }
        let size = match t.size(&self.base).await {
            Ok(size) => size,
            Err(e) => {
                warnings.push(CheckpointProblem::NotArchived {
                    host: carry.host.to_string(),
                    error: e.to_string(),
                });
                carry
                    .ledger
                    .forget_checkpoint(carry.study_id, &self.key)
                    .await;
                return;
            }
        };
        if size > carry.cap {
            warnings.push(CheckpointProblem::OverCap {
                host: carry.host.to_string(),
                size,
                cap: carry.cap,
            });
            carry
                .ledger
                .forget_checkpoint(carry.study_id, &self.key)
                .await;
            return;
        }
        let mut upload = carry
            .ledger
            .upload_checkpoint(carry.study_id, &self.key, carry.cap);
        let stored = match t.export(&self.base, &mut upload).await {
            Ok(()) => upload.finish(carry.ledger, claim).await,
            Err(e) => {
                upload.abort().await;
                Err(e.to_string())
            }
        };
        if let Err(e) = stored {
            warnings.push(CheckpointProblem::NotStored {
                host: carry.host.to_string(),
                error: e,
            });
            carry
                .ledger
                .forget_checkpoint(carry.study_id, &self.key)
                .await;
        }
    }

    /// The attempt's working copy is dropped (it failed, was lost or
    /// pruned); the committed state stays as it was.
    pub async fn discard(self, carry: &Carry<'_>) {
        carry.store.discard(&self.base, &self.attempt_id).await;
    }
}

/// The committed state a rung at `budget` continues from: the host's own
/// when it is as far as the ledger's (nothing moves), else the ledger's
/// once installed on the host, else the host's, else none.
async fn choose(
    carry: &Carry<'_>,
    key: &str,
    base: &str,
    attempt_id: &str,
    budget: f64,
    warnings: &mut Vec<CheckpointProblem>,
) -> Option<Claim> {
    let usable = |c: &Claim| c.continues_to(budget, carry.spec_hash);
    let here = match carry.store.claim(base).await {
        Ok(c) => c.filter(usable),
        Err(e) => {
            warnings.push(CheckpointProblem::UnreadableOnHost {
                host: carry.host.to_string(),
                error: e.to_string(),
            });
            None
        }
    };
    let stored = match carry.ledger.checkpoint(carry.study_id, key).await {
        Ok(s) => s.filter(|s| usable(&s.claim)),
        Err(e) => {
            warnings.push(CheckpointProblem::IgnoredInLedger {
                error: e.to_string(),
            });
            None
        }
    };
    let stored = match (here, stored) {
        (Some(h), Some(s)) if h == s.claim || h.budget >= s.claim.budget => return Some(h),
        (here, None) => return here,
        (here, Some(s)) => (here, s),
    };
    let (here, stored) = stored;
    let installed = async {
        let mut archive = carry.ledger.open_checkpoint(&stored).await?;
        carry
            .store
            .install(base, attempt_id, &stored.claim, &mut archive)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    match installed {
        Ok(()) => Some(stored.claim),
        Err(e) => {
            warnings.push(CheckpointProblem::NotBrought {
                host: carry.host.to_string(),
                budget: stored.claim.budget,
                error: e,
                runs_from: here.as_ref().map(|h| h.budget),
            });
            here
        }
    }
}

/// A size as people read it (`300 MiB`, `1.5 GiB`).
pub fn human_bytes(n: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let x = n as f64;
    if x >= 1024.0 * MIB {
        format!("{:.1} GiB", x / (1024.0 * MIB))
    } else if x >= MIB {
        format!("{:.1} MiB", x / MIB)
    } else {
        format!("{n} bytes")
    }
}

// The host side on this machine (the local transport).

/// The claim of the committed state under `base`, when its state is there.
pub fn read_claim(base: &Path) -> Option<Claim> {
    // A claim is a few hundred bytes; anything but a small regular file
    // is no claim.
    let bytes = crate::safe_read::read_regular(&base.join(COMMITTED), 1 << 20, None).ok()?;
    let claim = serde_json::from_slice(&bytes).ok()?;
    base.join("state").is_dir().then_some(claim)
}

/// Before each run: `run_dir` becomes a fresh copy of the committed state,
/// or an empty directory.
pub fn restore(run: &RunCheckpoint) -> io::Result<()> {
    let dir = Path::new(&run.run_dir);
    remove_dir_if_there(dir)?;
    match &run.state_dir {
        Some(state) => copy_tree(Path::new(state), dir),
        None => std::fs::create_dir_all(dir),
    }
}

/// The working copy of `attempt_id` becomes the committed state. The claim
/// goes first and comes back last, so an interruption in between leaves
/// no claim at all.
pub fn commit(base: &Path, attempt_id: &str, claim: &Claim) -> io::Result<()> {
    replace_state(
        base,
        &base.join(format!("run-{attempt_id}")),
        claim,
        attempt_id,
    )
}

/// Unpack `archive` (a tar) as the committed state of `claim`.
pub fn install(base: &Path, attempt_id: &str, claim: &Claim, archive: &Path) -> io::Result<()> {
    let incoming = base.join(format!("incoming-{attempt_id}"));
    remove_dir_if_there(&incoming)?;
    std::fs::create_dir_all(&incoming)?;
    let unpacked = std::fs::File::open(archive).and_then(|f| {
        let mut a = tar::Archive::new(io::BufReader::new(f));
        a.set_preserve_permissions(true);
        a.set_overwrite(true);
        a.unpack(&incoming)
    });
    if let Err(e) = unpacked {
        let _ = std::fs::remove_dir_all(&incoming);
        return Err(e);
    }
    replace_state(base, &incoming, claim, attempt_id)
}

fn replace_state(base: &Path, from: &Path, claim: &Claim, attempt_id: &str) -> io::Result<()> {
    remove_file_if_there(&base.join(COMMITTED))?;
    let state = base.join("state");
    remove_dir_if_there(&state)?;
    std::fs::rename(from, &state)?;
    let bytes = serde_json::to_vec(claim).map_err(io::Error::other)?;
    let tmp = base.join(format!("{COMMITTED}.{attempt_id}.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, base.join(COMMITTED))
}

/// Write the committed state under `base` as a tar to `out`; symbolic
/// links are stored as links, never followed.
pub fn pack(base: &Path, out: impl Write) -> io::Result<()> {
    let mut b = tar::Builder::new(out);
    b.follow_symlinks(false);
    b.append_dir_all(".", base.join("state"))?;
    b.into_inner()?.flush()
}

/// The size of [`pack`]'s archive.
pub fn packed_size(base: &Path) -> io::Result<u64> {
    struct Count(u64);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    pack(base, &mut n)?;
    Ok(n.0)
}

/// [`pack`] into an async writer: packed on a blocking thread, a chunk at
/// a time.
pub async fn pack_to(
    base: PathBuf,
    sink: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
) -> Result<(), TransportError> {
    struct Chunks(tokio::sync::mpsc::Sender<Vec<u8>>);
    impl Write for Chunks {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0
                .blocking_send(buf.to_vec())
                .map_err(|_| io::Error::other("the archive's reader stopped"))?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let packer = tokio::task::spawn_blocking(move || {
        pack(&base, io::BufWriter::with_capacity(1 << 20, Chunks(tx)))
    });
    let mut sent: Result<(), TransportError> = Ok(());
    while let Some(chunk) = rx.recv().await {
        if let Err(e) = sink.write_all(&chunk).await {
            sent = Err(TransportError::Transfer(e.into()));
            break;
        }
    }
    drop(rx);
    let packed = match packer.await {
        Ok(r) => r.map_err(|e| TransportError::Pack(e.into())),
        Err(e) => Err(joined(e)),
    };
    sent.and(packed)
}

/// Copy `archive` into a file beside the state and install it from there.
pub async fn install_from(
    base: PathBuf,
    attempt_id: &str,
    claim: &Claim,
    archive: &mut (dyn tokio::io::AsyncRead + Send + Unpin),
) -> Result<(), TransportError> {
    let file = base.join(format!("incoming-{attempt_id}.tar"));
    let copied = async {
        tokio::fs::create_dir_all(&base).await?;
        let mut f = tokio::fs::File::create(&file).await?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = archive.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            f.write_all(&buf[..n]).await?;
        }
        f.flush().await
    }
    .await;
    let done = match copied {
        Ok(()) => {
            let (b, id, c, f) = (
                base.clone(),
                attempt_id.to_string(),
                claim.clone(),
                file.clone(),
            );
            tokio::task::spawn_blocking(move || install(&b, &id, &c, &f))
                .await
                .map_err(io::Error::other)
                .and_then(|r| r)
        }
        Err(e) => Err(e),
    };
    let _ = tokio::fs::remove_file(&file).await;
    done.map_err(|e| TransportError::Checkpoint(e.into()))
}

/// Drop the working copy of `attempt_id`.
pub fn discard(base: &Path, attempt_id: &str) {
    let _ = std::fs::remove_dir_all(base.join(format!("run-{attempt_id}")));
}

// The `Transport::checkpoint_*` steps for a directory on this machine (the
// local host, a Slurm entry whose client commands run here), off the
// runtime.

pub async fn claim_here(base: &str) -> Result<Option<Claim>, TransportError> {
    let base = PathBuf::from(base);
    tokio::task::spawn_blocking(move || read_claim(&base))
        .await
        .map_err(joined)
}

pub async fn commit_here(
    base: &str,
    attempt_id: &str,
    claim: &Claim,
) -> Result<(), TransportError> {
    let (b, id, c) = (PathBuf::from(base), attempt_id.to_string(), claim.clone());
    tokio::task::spawn_blocking(move || commit(&b, &id, &c))
        .await
        .map_err(joined)?
        .map_err(|e| TransportError::Checkpoint(e.into()))
}

/// The archive's size, counted by packing it (reading the state once).
pub async fn size_here(base: &str) -> Result<u64, TransportError> {
    let b = PathBuf::from(base);
    tokio::task::spawn_blocking(move || packed_size(&b))
        .await
        .map_err(joined)?
        .map_err(|e| TransportError::Checkpoint(e.into()))
}

/// A blocking task that panicked or was cancelled.
fn joined(e: tokio::task::JoinError) -> TransportError {
    TransportError::Task {
        detail: e.to_string(),
    }
}

/// The working copies under a study's checkpoints directory on this
/// machine: (checkpoint key, attempt id) of every `<key>/run-<attempt>/`.
pub async fn working_copies_here(root: &str) -> Result<Vec<(String, String)>, TransportError> {
    let root = PathBuf::from(root);
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let keys = match std::fs::read_dir(&root) {
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for key in keys.flatten() {
            if !key.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(copies) = std::fs::read_dir(key.path()) else {
                continue;
            };
            for copy in copies.flatten() {
                let name = copy.file_name();
                if let (Some(k), Some(id)) = (
                    key.file_name().to_str(),
                    name.to_str().and_then(|n| n.strip_prefix("run-")),
                ) && copy.file_type().is_ok_and(|t| t.is_dir())
                {
                    out.push((k.to_string(), id.to_string()));
                }
            }
        }
        Ok(out)
    })
    .await
    .map_err(joined)?
    .map_err(|e| TransportError::Checkpoint(e.into()))
}

pub async fn discard_here(base: &str, attempt_id: &str) {
    let (b, id) = (PathBuf::from(base), attempt_id.to_string());
    let _ = tokio::task::spawn_blocking(move || discard(&b, &id)).await;
}

fn remove_dir_if_there(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn remove_file_if_there(file: &Path) -> io::Result<()> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Copy a directory tree; symbolic links are copied as links, never
/// followed (a trial's state may point anywhere).
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
        // FIFOs, sockets, devices: not state, not copied.
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_problem_says_where_the_next_rung_starts() {
        let brought = |runs_from| {
            CheckpointProblem::NotBrought {
                host: "gpu-a".into(),
                budget: 9.0,
                error: "no space left".into(),
                runs_from,
            }
            .to_string()
        };
        assert_eq!(
            brought(None),
            "cannot bring its checkpoint at budget 9 from the ledger to host gpu-a: no space left; the rung runs from zero"
        );
        assert!(
            brought(Some(3.0)).ends_with("the rung runs from the host's own at budget 3"),
            "{}",
            brought(Some(3.0))
        );
        let over = CheckpointProblem::OverCap {
            host: "gpu-a".into(),
            size: 3 * 1024 * 1024,
            cap: 1024 * 1024,
        }
        .to_string();
        assert!(
            over.starts_with("its checkpoint is 3.0 MiB (3145728 bytes), over fidelity.checkpoint_max_bytes (1.0 MiB)"),
            "{over}"
        );
    }

    fn write(dir: &str, name: &str, text: &str) {
        std::fs::write(Path::new(dir).join(name), text).unwrap();
    }

    fn read(dir: &str, name: &str) -> String {
        std::fs::read_to_string(Path::new(dir).join(name)).unwrap_or_default()
    }

    fn claim(budget: f64, attempt: &str) -> Claim {
        Claim {
            budget,
            spec_hash: "h".into(),
            trial_key: "t".into(),
            attempt_id: attempt.into(),
        }
    }

    fn run(base: &Path, attempt: &str, state: bool) -> RunCheckpoint {
        RunCheckpoint {
            run_dir: base.join(format!("run-{attempt}")).display().to_string(),
            state_dir: state.then(|| base.join("state").display().to_string()),
            resume_from: None,
        }
    }

    #[test]
    fn a_run_gets_a_fresh_copy_and_only_a_commit_changes_the_state() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("k");
        assert_eq!(read_claim(&base), None);
        let r1 = run(&base, "a1", false);
        restore(&r1).unwrap();
        write(&r1.run_dir, "work", "1");
        commit(&base, "a1", &claim(1.0, "a1")).unwrap();
        assert!(!Path::new(&r1.run_dir).exists());
        assert_eq!(read_claim(&base), Some(claim(1.0, "a1")));
        // A warm-up's changes are gone before the counted run.
        let r3 = run(&base, "a3", true);
        restore(&r3).unwrap();
        write(&r3.run_dir, "work", "1+warm");
        restore(&r3).unwrap();
        assert_eq!(read(&r3.run_dir, "work"), "1");
        // Interrupted: discarded, the state at 1 stands.
        discard(&base, "a3");
        assert!(!Path::new(&r3.run_dir).exists());
        assert_eq!(read(&base.join("state").display().to_string(), "work"), "1");
        // A claim without its state is none.
        std::fs::remove_dir_all(base.join("state")).unwrap();
        assert_eq!(read_claim(&base), None);
        std::fs::create_dir_all(base.join("state")).unwrap();
        std::fs::write(base.join(COMMITTED), "{not json").unwrap();
        assert_eq!(read_claim(&base), None);
    }

    #[test]
    fn a_packed_state_installs_elsewhere_as_it_was() {
        let root = tempfile::tempdir().unwrap();
        let a = root.path().join("a");
        let r = run(&a, "x", false);
        restore(&r).unwrap();
        write(&r.run_dir, "work", "0 3");
        std::fs::create_dir_all(Path::new(&r.run_dir).join("sub")).unwrap();
        write(&format!("{}/sub", r.run_dir), "w", "weights");
        std::os::unix::fs::symlink("/nowhere", Path::new(&r.run_dir).join("link")).unwrap();
        commit(&a, "x", &claim(3.0, "x")).unwrap();
        let tar = root.path().join("a.tar");
        pack(&a, std::fs::File::create(&tar).unwrap()).unwrap();
        assert_eq!(
            packed_size(&a).unwrap(),
            std::fs::metadata(&tar).unwrap().len()
        );
        let b = root.path().join("b");
        std::fs::create_dir_all(&b).unwrap();
        install(&b, "y", &claim(3.0, "x"), &tar).unwrap();
        assert_eq!(read_claim(&b), Some(claim(3.0, "x")));
        let state = b.join("state");
        assert_eq!(std::fs::read_to_string(state.join("work")).unwrap(), "0 3");
        assert_eq!(
            std::fs::read_to_string(state.join("sub/w")).unwrap(),
            "weights"
        );
        assert_eq!(
            std::fs::read_link(state.join("link")).unwrap(),
            Path::new("/nowhere")
        );
        // Not a tar: nothing changes.
        std::fs::write(&tar, "garbage that is not a tar archive").unwrap();
        assert!(install(&b, "z", &claim(9.0, "z"), &tar).is_err());
        assert_eq!(read_claim(&b), Some(claim(3.0, "x")));
    }

    /// A state with a file, a subdirectory and a symbolic link.
    fn sample_state(dir: &Path) {
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("work"), "0 3").unwrap();
        std::fs::write(dir.join("sub/w"), "weights").unwrap();
        std::os::unix::fs::symlink("/nowhere", dir.join("link")).unwrap();
    }

    fn assert_sample(dir: &Path) {
        assert_eq!(std::fs::read_to_string(dir.join("work")).unwrap(), "0 3");
        assert_eq!(
            std::fs::read_to_string(dir.join("sub/w")).unwrap(),
            "weights"
        );
        assert_eq!(
            std::fs::read_link(dir.join("link")).unwrap(),
            Path::new("/nowhere")
        );
    }

    #[test]
    fn archives_of_a_host_s_tar_and_of_this_machine_read_both_ways() {
        // An SSH host makes and unpacks archives with its own `tar`; this
        // machine with the tar crate: a state goes either way whole.
        let root = tempfile::tempdir().unwrap();
        let theirs = root.path().join("theirs");
        sample_state(&theirs.join("state"));
        let tar = root.path().join("theirs.tar");
        let made = std::process::Command::new("sh")
            .arg("-c")
            .arg("cd \"$1/state\" && tar -cf \"$2\" .")
            .args([
                "sh",
                &theirs.display().to_string(),
                &tar.display().to_string(),
            ])
            .status()
            .unwrap();
        assert!(made.success());
        let ours = root.path().join("ours");
        std::fs::create_dir_all(&ours).unwrap();
        install(&ours, "a", &claim(3.0, "a"), &tar).unwrap();
        assert_sample(&ours.join("state"));
        let back = root.path().join("back.tar");
        pack(&ours, std::fs::File::create(&back).unwrap()).unwrap();
        let out = root.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let read = std::process::Command::new("sh")
            .arg("-c")
            .arg("cd \"$1\" && tar -xf \"$2\"")
            .args([
                "sh",
                &out.display().to_string(),
                &back.display().to_string(),
            ])
            .status()
            .unwrap();
        assert!(read.success());
        assert_sample(&out);
    }

    #[test]
    fn the_key_is_per_config_cell_and_class() {
        let cfg = serde_json::json!({"a": 1});
        let cell = serde_json::json!({"n": 2});
        let k = checkpoint_key("s", &cfg, &cell, "c1");
        assert_eq!(k.len(), 64);
        assert_ne!(k, checkpoint_key("s", &cfg, &cell, "c2"));
        assert_ne!(
            k,
            checkpoint_key("s", &serde_json::json!({"a": 2}), &cell, "c1")
        );
        assert_eq!(k, checkpoint_key("s", &cfg, &cell, "c1"));
    }
}
