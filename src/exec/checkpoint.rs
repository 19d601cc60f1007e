//! Checkpoints of `fidelity.continuation` on this machine: one directory
//! per (study, config, cell, host class), where a rung trial leaves its
//! state for the next rung of the same config.
//!
//! ```text
//! <root>/<checkpoint-key>/committed.json   the budget `state/` holds
//! <root>/<checkpoint-key>/state/           the last committed checkpoint
//! <root>/<checkpoint-key>/run-<attempt>/   an attempt's working copy
//! ```
//!
//! A trial never writes the committed state: each run of an attempt gets a
//! fresh copy of it (or an empty directory), and only an attempt that ended
//! `ok` and was recorded replaces it. So a rung interrupted half-way (Ctrl-C,
//! a timeout, a crash, a pruned trial) leaves the previous rung's state as
//! it was, and a warm-up run cannot advance the state its counted run
//! resumes from. `committed.json` is removed before the state changes and
//! written last, so a launcher killed between the two leaves no claim: the
//! next rung starts from zero. A missing, unreadable or foreign claim means
//! the same: a lost checkpoint costs a rerun, never a wrong resume.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::canon::{sha256_hex, write_canonical, write_str};

/// Name of the claim file beside the committed state.
const COMMITTED: &str = "committed.json";

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

/// What `committed.json` says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Committed {
    /// The budget (as the trial received it) the state was saved at.
    budget: f64,
    /// The spec the state was made under.
    spec_hash: String,
    /// The rung attempt that saved it.
    trial_key: String,
    attempt_id: String,
}

/// One attempt's checkpoint directory, ready to run in.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRun {
    /// `$TUNECTL_CHECKPOINT_DIR`: the attempt's working copy.
    pub dir: PathBuf,
    /// `$TUNECTL_RESUME_FROM_BUDGET`: the committed state's budget, when
    /// the attempt continues from it.
    pub resume_from: Option<f64>,
    /// The committed state copied into `dir` before each run.
    state: Option<PathBuf>,
    /// The config's checkpoint directory.
    base: PathBuf,
    /// Whether an `ok` attempt replaces the committed state (false for the
    /// baseline's rungs, which run from zero as the gate's reference).
    commits: bool,
}

/// The checkpoints of one study on this machine.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    root: PathBuf,
}

impl Checkpoints {
    pub fn new(root: PathBuf) -> Checkpoints {
        Checkpoints { root }
    }

    /// Get the checkpoint of `key` ready for an attempt at `budget`: it
    /// resumes when a state committed under `spec_hash` at a smaller budget
    /// is there and `continues` (else it starts from an empty directory).
    pub fn prepare(
        &self,
        key: &str,
        attempt_id: &str,
        budget: f64,
        spec_hash: &str,
        continues: bool,
    ) -> io::Result<CheckpointRun> {
        let base = self.root.join(key);
        std::fs::create_dir_all(&base)?;
        let state = base.join("state");
        let resume_from = if continues {
            read_committed(&base)
                .filter(|c| {
                    c.spec_hash == spec_hash
                        && c.budget.is_finite()
                        && c.budget > 0.0
                        && c.budget < budget
                })
                .filter(|_| state.is_dir())
                .map(|c| c.budget)
        } else {
            None
        };
        Ok(CheckpointRun {
            dir: base.join(format!("run-{attempt_id}")),
            state: resume_from.map(|_| state),
            resume_from,
            base,
            commits: continues,
        })
    }
}

impl CheckpointRun {
    /// Before each run of the attempt: a fresh copy of the committed state,
    /// or an empty directory.
    pub fn restore(&self) -> io::Result<()> {
        remove_dir_if_there(&self.dir)?;
        match &self.state {
            Some(state) => copy_tree(state, &self.dir),
            None => std::fs::create_dir_all(&self.dir),
        }
    }

    /// After an `ok` attempt at `budget` was recorded: its working copy
    /// becomes the committed state. The claim goes first and comes back
    /// last, so an interruption in between leaves no claim at all.
    pub fn commit(&self, budget: f64, spec_hash: &str, trial_key: &str, attempt_id: &str) {
        if !self.commits
            || self
                .commit_at(budget, spec_hash, trial_key, attempt_id)
                .is_err()
        {
            // Not kept (or could not be): the next rung starts from zero.
            self.discard();
        }
    }

    fn commit_at(
        &self,
        budget: f64,
        spec_hash: &str,
        trial_key: &str,
        attempt_id: &str,
    ) -> io::Result<()> {
        remove_file_if_there(&self.base.join(COMMITTED))?;
        let state = self.base.join("state");
        remove_dir_if_there(&state)?;
        std::fs::rename(&self.dir, &state)?;
        let claim = Committed {
            budget,
            spec_hash: spec_hash.to_string(),
            trial_key: trial_key.to_string(),
            attempt_id: attempt_id.to_string(),
        };
        let bytes = serde_json::to_vec(&claim).map_err(io::Error::other)?;
        let tmp = self.base.join(format!("{COMMITTED}.{attempt_id}.tmp"));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, self.base.join(COMMITTED))
    }

    /// The attempt's working copy is dropped (it failed, was lost or
    /// pruned); the committed state stays as it was.
    pub fn discard(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_committed(base: &Path) -> Option<Committed> {
    let bytes = std::fs::read(base.join(COMMITTED)).ok()?;
    serde_json::from_slice(&bytes).ok()
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

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap_or_default()
    }

    #[test]
    fn a_rung_resumes_only_from_a_committed_smaller_budget() {
        let root = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(root.path().to_path_buf());
        // Nothing there: from zero, in an empty directory.
        let r1 = c.prepare("k", "a1", 1.0, "h", true).unwrap();
        assert_eq!(r1.resume_from, None);
        r1.restore().unwrap();
        write(&r1.dir, "work", "1");
        r1.commit(1.0, "h", "t1", "a1");
        assert!(!r1.dir.exists());
        // The next rung resumes from 1, on a copy; a warm-up's changes are
        // gone before the counted run.
        let r3 = c.prepare("k", "a3", 3.0, "h", true).unwrap();
        assert_eq!(r3.resume_from, Some(1.0));
        r3.restore().unwrap();
        write(&r3.dir, "work", "1+warm");
        r3.restore().unwrap();
        assert_eq!(read(&r3.dir, "work"), "1");
        write(&r3.dir, "work", "1+2");
        // Interrupted: discarded, the state at 1 stands.
        r3.discard();
        let again = c.prepare("k", "a3b", 3.0, "h", true).unwrap();
        assert_eq!(again.resume_from, Some(1.0));
        again.restore().unwrap();
        assert_eq!(read(&again.dir, "work"), "1");
        write(&again.dir, "work", "1+2");
        again.commit(3.0, "h", "t3", "a3b");
        // Same budget again (its record was lost after the commit), another
        // spec, or no continuation: from zero.
        for (budget, spec, continues) in [(3.0, "h", true), (9.0, "other", true), (9.0, "h", false)]
        {
            let r = c.prepare("k", "x", budget, spec, continues).unwrap();
            assert_eq!(r.resume_from, None, "{budget} {spec} {continues}");
            r.restore().unwrap();
            assert_eq!(std::fs::read_dir(&r.dir).unwrap().count(), 0);
            r.discard();
        }
        let r9 = c.prepare("k", "a9", 9.0, "h", true).unwrap();
        assert_eq!(r9.resume_from, Some(3.0));
        r9.restore().unwrap();
        assert_eq!(read(&r9.dir, "work"), "1+2");
    }

    #[test]
    fn a_lost_or_damaged_claim_means_from_zero() {
        let root = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(root.path().to_path_buf());
        let r = c.prepare("k", "a1", 1.0, "h", true).unwrap();
        r.restore().unwrap();
        r.commit(1.0, "h", "t", "a1");
        let base = root.path().join("k");
        std::fs::write(base.join(COMMITTED), "{not json").unwrap();
        assert_eq!(
            c.prepare("k", "b", 3.0, "h", true).unwrap().resume_from,
            None
        );
        // A claim without its state (removed by hand, another machine's
        // copy of the claim): from zero too.
        let r = c.prepare("k", "a1", 1.0, "h", true).unwrap();
        r.restore().unwrap();
        r.commit(1.0, "h", "t", "a1");
        std::fs::remove_dir_all(base.join("state")).unwrap();
        assert_eq!(
            c.prepare("k", "b", 3.0, "h", true).unwrap().resume_from,
            None
        );
        // The baseline's rungs never commit.
        let r = c.prepare("b", "base", 1.0, "h", false).unwrap();
        r.restore().unwrap();
        r.commit(1.0, "h", "t", "base");
        let base = root.path().join("b");
        assert!(!base.join(COMMITTED).exists() && !base.join("state").exists());
        assert!(!r.dir.exists());
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
