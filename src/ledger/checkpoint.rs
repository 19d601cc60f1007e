//! Checkpoints of `fidelity.continuation` in the object store: the state a
//! rung committed, as one tar archive, so that the config's next rung can
//! continue on another host of its class (or after a relaunch elsewhere).
//!
//! ```text
//! <study>/checkpoints/<checkpoint-key>.tar    the committed state, a tar of its directory
//! <study>/checkpoints/<checkpoint-key>.json   its claim: the rung that committed it, the archive's size and sha256
//! ```
//!
//! The archive is written first and the claim last, and the claim names
//! the archive's sha256 and size: a claim without its archive, an archive
//! cut short or replaced since (a later commit that did not finish), or a
//! claim of another study or key, never reads as a checkpoint. A reader
//! checks the archive's bytes as they stream and fails at their end when
//! they are not what the claim says; the caller installs the state only
//! then. Both objects are overwritten by the config's next commit: they
//! are derived, like verdicts, and losing them costs a rerun from zero.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::ObjectStoreExt;
use object_store::PutPayload;
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjPath;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::{Ledger, records};

/// Largest checkpoint archive stored when the study does not say
/// (`fidelity.checkpoint_max_bytes`).
pub const DEFAULT_CHECKPOINT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// Which rung a committed checkpoint is the state of: what
/// `committed.json` beside a host's copy holds, and the store's claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// The budget (as the trial received it) the state was saved at.
    pub budget: f64,
    /// The spec the state was made under.
    pub spec_hash: String,
    /// The rung attempt that saved it.
    pub trial_key: String,
    pub attempt_id: String,
}

impl Claim {
    /// Whether a rung at `budget` under `spec_hash` can continue from it.
    pub fn continues_to(&self, budget: f64, spec_hash: &str) -> bool {
        self.spec_hash == spec_hash
            && self.budget.is_finite()
            && self.budget > 0.0
            && self.budget < budget
    }
}

/// The claim object beside a stored archive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredCheckpoint {
    pub schema: u32,
    pub study_id: String,
    pub checkpoint_key: String,
    #[serde(flatten)]
    pub claim: Claim,
    /// The archive's size and sha256 (hex).
    pub bytes: u64,
    pub sha256: String,
    pub written_at: String,
}

fn archive_key(study: &str, key: &str) -> ObjPath {
    ObjPath::from(format!("{study}/checkpoints/{key}.tar"))
}

fn claim_key(study: &str, key: &str) -> ObjPath {
    ObjPath::from(format!("{study}/checkpoints/{key}.json"))
}

impl Ledger {
    /// The stored checkpoint of `key`: `Ok(None)` when there is none,
    /// `Err` (why) when its claim cannot be read or is not this key's.
    pub async fn checkpoint(
        &self,
        study: &str,
        key: &str,
    ) -> Result<Option<StoredCheckpoint>, String> {
        let at = claim_key(study, key);
        let bytes = match self.get(&at).await {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let stored: StoredCheckpoint = serde_json::from_slice(&bytes)
            .map_err(|e| format!("ledger object {at} is not a checkpoint claim: {e}"))?;
        if stored.schema != records::SCHEMA
            || stored.study_id != study
            || stored.checkpoint_key != key
            || stored.sha256.len() != 64
        {
            return Err(format!(
                "ledger object {at} is another study's or key's checkpoint claim"
            ));
        }
        Ok(Some(stored))
    }

    /// The archive of a stored checkpoint, read as it streams; the read
    /// fails at its end when the bytes are not the ones `stored` claims.
    pub async fn open_checkpoint(
        &self,
        stored: &StoredCheckpoint,
    ) -> Result<CheckedArchive, String> {
        let at = archive_key(&stored.study_id, &stored.checkpoint_key);
        let missing = || format!("ledger object {at} is missing (its claim is there)");
        let stream = match &self.local_root {
            // Opened only as a regular file (crate::safe_read); its length
            // is checked against the claim as it streams, below.
            Some(root) => {
                let path = super::local::file_of(root, &at);
                let opened = tokio::task::spawn_blocking(move || {
                    let got = crate::safe_read::open_regular(&path, u64::MAX);
                    (path, got)
                })
                .await
                .map_err(|e| self.io_err("read", &at, e).to_string())?;
                let file = match opened {
                    (_, Ok(f)) => f,
                    (_, Err(crate::safe_read::Unreadable::Missing(_))) => return Err(missing()),
                    (path, Err(why)) => {
                        return Err(self
                            .io_err("read", &at, format!("{} {why}", path.display()))
                            .to_string());
                    }
                };
                tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file))
                    .map(|r| {
                        r.map_err(|e| object_store::Error::Generic {
                            store: "LocalFileSystem",
                            source: Box::new(e),
                        })
                    })
                    .boxed()
            }
            None => self
                .store
                .get(&at)
                .await
                .map_err(|e| match e {
                    object_store::Error::NotFound { .. } => missing(),
                    e => self.io_err("read", &at, e).to_string(),
                })?
                .into_stream(),
        };
        Ok(CheckedArchive {
            stream,
            chunk: Bytes::new(),
            hasher: Sha256::new(),
            bytes: 0,
            expect_bytes: stored.bytes,
            expect_sha: stored.sha256.clone(),
            name: at.to_string(),
        })
    }

    /// Start storing a checkpoint's archive (at most `cap` bytes); nothing
    /// claims it until [`CheckpointUpload::finish`].
    pub fn upload_checkpoint(&self, study: &str, key: &str, cap: u64) -> CheckpointUpload {
        CheckpointUpload {
            writer: BufWriter::new(self.store.clone(), archive_key(study, key)),
            hasher: Sha256::new(),
            bytes: 0,
            cap,
            study: study.to_string(),
            key: key.to_string(),
        }
    }

    /// Remove the stored checkpoint of `key` (its state was not stored
    /// again: an older one must not stand for it). Best effort: the claim
    /// first, so an archive left alone is never read.
    pub async fn forget_checkpoint(&self, study: &str, key: &str) {
        for at in [claim_key(study, key), archive_key(study, key)] {
            let _ = self.store.delete(&at).await;
        }
    }

    async fn put_claim(&self, stored: &StoredCheckpoint) -> Result<(), String> {
        let at = claim_key(&stored.study_id, &stored.checkpoint_key);
        let bytes = serde_json::to_vec_pretty(stored).map_err(|e| e.to_string())?;
        self.store
            .put(&at, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.io_err("write", &at, e).to_string())
    }
}

/// A stored archive as it streams, checked against its claim.
pub struct CheckedArchive {
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
    hasher: Sha256,
    bytes: u64,
    expect_bytes: u64,
    expect_sha: String,
    name: String,
}

impl AsyncRead for CheckedArchive {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.chunk.is_empty() {
            match ready!(this.stream.poll_next_unpin(cx)) {
                Some(Ok(b)) => {
                    this.hasher.update(&b);
                    this.bytes += b.len() as u64;
                    if this.bytes > this.expect_bytes {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "ledger object {} is longer than its claim's {} bytes",
                                this.name, this.expect_bytes
                            ),
                        )));
                    }
                    this.chunk = b;
                }
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                None => {
                    // The end: only the claimed bytes pass for a checkpoint.
                    let sha = hex::encode(this.hasher.clone().finalize());
                    if this.bytes != this.expect_bytes || sha != this.expect_sha {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "ledger object {} is not the archive its claim names ({} bytes, sha256 {}…; the claim says {} bytes, {}…)",
                                this.name,
                                this.bytes,
                                &sha[..12],
                                this.expect_bytes,
                                this.expect_sha.get(..12).unwrap_or(&this.expect_sha)
                            ),
                        )));
                    }
                    return Poll::Ready(Ok(()));
                }
            }
        }
        let n = this.chunk.len().min(buf.remaining());
        buf.put_slice(&this.chunk.split_to(n));
        Poll::Ready(Ok(()))
    }
}

/// An archive being stored ([`Ledger::upload_checkpoint`]): write it, then
/// [`CheckpointUpload::finish`] or [`CheckpointUpload::abort`].
pub struct CheckpointUpload {
    writer: BufWriter,
    hasher: Sha256,
    bytes: u64,
    cap: u64,
    study: String,
    key: String,
}

impl CheckpointUpload {
    /// Complete the archive, then write its claim: from then on it is the
    /// key's checkpoint.
    pub async fn finish(
        mut self,
        ledger: &Ledger,
        claim: Claim,
    ) -> Result<StoredCheckpoint, String> {
        self.writer
            .shutdown()
            .await
            .map_err(|e| format!("cannot store the archive: {e}"))?;
        let stored = StoredCheckpoint {
            schema: records::SCHEMA,
            study_id: self.study,
            checkpoint_key: self.key,
            claim,
            bytes: self.bytes,
            sha256: hex::encode(self.hasher.finalize()),
            written_at: chrono::Utc::now().to_rfc3339(),
        };
        ledger.put_claim(&stored).await?;
        Ok(stored)
    }

    /// Give up: a part written is dropped, the claim stays as it was (it
    /// names the old archive's sha256, so a replaced archive fails it).
    pub async fn abort(mut self) {
        let _ = self.writer.abort().await;
    }
}

impl AsyncWrite for CheckpointUpload {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.bytes.saturating_add(buf.len() as u64) > this.cap {
            return Poll::Ready(Err(io::Error::other(format!(
                "the archive is over the cap of {} bytes",
                this.cap
            ))));
        }
        let n = ready!(Pin::new(&mut this.writer).poll_write(cx, buf))?;
        this.hasher.update(&buf[..n]);
        this.bytes += n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().writer).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Only `finish` completes an archive: a copy that ends must not
        // store one its caller has not checked.
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn claim(budget: f64) -> Claim {
        Claim {
            budget,
            spec_hash: "h".into(),
            trial_key: "t".into(),
            attempt_id: "a".into(),
        }
    }

    #[tokio::test]
    async fn an_archive_reads_back_only_as_its_claim_says() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().display().to_string()).unwrap();
        assert_eq!(ledger.checkpoint("s", "k").await, Ok(None));
        let mut up = ledger.upload_checkpoint("s", "k", 1024);
        up.write_all(b"state bytes").await.unwrap();
        let stored = up.finish(&ledger, claim(3.0)).await.unwrap();
        assert_eq!(stored.bytes, 11);
        let got = ledger.checkpoint("s", "k").await.unwrap().unwrap();
        assert_eq!(got, stored);
        let mut back = Vec::new();
        let mut r = ledger.open_checkpoint(&got).await.unwrap();
        r.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"state bytes");
        // Torn or replaced: the read fails at its end.
        let tar = dir.path().join("s/checkpoints/k.tar");
        for bytes in [&b"state"[..], b"state bytez", b"state bytes and more"] {
            std::fs::write(&tar, bytes).unwrap();
            let mut r = ledger.open_checkpoint(&got).await.unwrap();
            assert!(r.read_to_end(&mut Vec::new()).await.is_err());
        }
        // Over the cap: refused while written; the claim still names the
        // old archive.
        let mut up = ledger.upload_checkpoint("s", "k", 4);
        assert!(up.write_all(b"too long").await.is_err());
        up.abort().await;
        assert_eq!(ledger.checkpoint("s", "k").await.unwrap(), Some(stored));
        // Another key's claim copied here is not this key's checkpoint.
        let mut up = ledger.upload_checkpoint("s", "other", 1024);
        up.write_all(b"x").await.unwrap();
        up.finish(&ledger, claim(1.0)).await.unwrap();
        std::fs::copy(
            dir.path().join("s/checkpoints/other.json"),
            dir.path().join("s/checkpoints/k.json"),
        )
        .unwrap();
        assert!(ledger.checkpoint("s", "k").await.is_err());
        std::fs::write(dir.path().join("s/checkpoints/k.json"), "{").unwrap();
        assert!(ledger.checkpoint("s", "k").await.is_err());
    }

    #[test]
    fn a_claim_continues_only_to_a_larger_budget_of_its_spec() {
        assert!(claim(3.0).continues_to(9.0, "h"));
        assert!(!claim(3.0).continues_to(3.0, "h"));
        assert!(!claim(3.0).continues_to(9.0, "other"));
        assert!(!claim(0.0).continues_to(9.0, "h"));
        assert!(!claim(f64::NAN).continues_to(9.0, "h"));
    }
}
