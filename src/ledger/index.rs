//! The compacted index: `<study>/index/attempts.json`, a copy of the
//! study's attempt records, so that report, status and resume over 100,000
//! attempts read one object plus the attempts written since, instead of
//! 100,000 objects.
//!
//! It is never the source of truth: a scan still lists every attempt
//! object, takes from the index only records whose object is listed, reads
//! the rest, and rewrites the index when it has fallen behind. A missing,
//! stale or corrupt index only costs time.

use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use super::records::AttemptRecord;
use super::{Ledger, LedgerError};

/// Rewrite the index once this many attempts had to be read beside it
/// (or a twentieth of all, when that is more).
pub const REBUILD_AFTER: usize = 256;

#[derive(Debug, Serialize, Deserialize)]
pub struct IndexFile {
    pub schema: u32,
    pub written_at: String,
    /// (object key, record) of every readable attempt when written.
    pub entries: Vec<(String, AttemptRecord)>,
}

fn key(study: &str) -> ObjPath {
    ObjPath::from(format!("{study}/index/attempts.json"))
}

impl Ledger {
    /// The index, if present and readable.
    pub async fn read_index(&self, study: &str) -> Option<IndexFile> {
        let bytes = self.get(&key(study)).await.ok()??;
        match serde_json::from_slice::<IndexFile>(&bytes) {
            Ok(i) if i.schema == super::records::SCHEMA => Some(i),
            Ok(_) | Err(_) => {
                tracing::warn!(
                    study,
                    "ignoring an unreadable ledger index; it will be rebuilt"
                );
                None
            }
        }
    }

    /// Write the index (derived data: plain overwrite).
    pub async fn write_index(
        &self,
        study: &str,
        entries: Vec<(String, AttemptRecord)>,
    ) -> Result<(), LedgerError> {
        let k = key(study);
        let file = IndexFile {
            schema: super::records::SCHEMA,
            written_at: chrono::Utc::now().to_rfc3339(),
            entries,
        };
        let bytes = serde_json::to_vec(&file).map_err(|e| self.io_err("encode", &k, e))?;
        self.store
            .put(&k, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.io_err("write", &k, e))
    }
}
