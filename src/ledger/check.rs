//! `tunectl ledger check`: everything a full scan reads, plus what a scan
//! alone does not call damage: a study record that is missing or not
//! readable, and objects that the arrival log or the index say were
//! written and that are not there (deleted, or never written because their
//! writer stopped or failed between the log entry and the object).

use std::collections::BTreeSet;
use std::sync::Arc;

use object_store::path::Path as ObjPath;

use super::{CorruptObject, Ledger, LedgerError, Scan, StudyRecord, records};

/// What `ledger check` found in one study.
#[derive(Debug)]
pub struct Checked {
    /// The full scan: its `corrupt` objects (unreadable, another schema,
    /// misplaced) are damage.
    pub scan: Arc<Scan>,
    /// Attempt and `.void` objects that should be there and are not.
    pub missing: Vec<CorruptObject>,
}

/// Sub-prefixes only a study has.
const STUDY_PARTS: [&str; 8] = [
    "trials",
    "hosts",
    "log",
    "leases",
    "verdicts",
    "index",
    "drops",
    "checkpoints",
];

impl Ledger {
    /// Top-level prefixes that hold a study: a `study.json` (readable or
    /// not) or any of a study's sub-prefixes (`trials/`, `log/`, ...).
    pub async fn study_prefixes(&self) -> Result<Vec<String>, LedgerError> {
        let listed = self
            .store
            .list_with_delimiter(None)
            .await
            .map_err(|e| self.io_err("list", &ObjPath::from(""), e))?;
        let mut out = Vec::new();
        for p in listed.common_prefixes {
            let id = p.as_ref().to_string();
            if self.holds_study_objects(&id).await? {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Whether anything of a study is stored under `<study>/`.
    pub async fn holds_study_objects(&self, study: &str) -> Result<bool, LedgerError> {
        let prefix = ObjPath::from(study);
        let listed = self
            .store
            .list_with_delimiter(Some(&prefix))
            .await
            .map_err(|e| self.io_err("list", &prefix, e))?;
        let part_of_study = |p: &ObjPath| {
            p.filename()
                .is_some_and(|f| f == "study.json" || STUDY_PARTS.contains(&f))
        };
        Ok(listed.objects.iter().any(|o| part_of_study(&o.location))
            || listed.common_prefixes.iter().any(part_of_study))
    }

    /// What is wrong with a study's `study.json`, if anything: missing
    /// (while the study's other objects are there), not a valid study
    /// record, another schema, or another study's record.
    pub async fn study_record_problem(&self, study: &str) -> Result<Option<String>, LedgerError> {
        let key = ObjPath::from(format!("{study}/study.json"));
        let Some(bytes) = self.get(&key).await? else {
            return Ok(if self.holds_study_objects(study).await? {
                Some(
                    "missing: the study's other objects are there but its study record is not (deleted?)"
                        .to_string(),
                )
            } else {
                None
            });
        };
        Ok(match serde_json::from_slice::<StudyRecord>(&bytes) {
            Err(e) => Some(format!("not a valid study record: {e}")),
            Ok(r) if r.schema != records::SCHEMA => {
                Some(format!("unsupported schema version {}", r.schema))
            }
            Ok(r) if r.study_id != study => Some(format!(
                "misplaced: the record's study id `{}` does not match its location",
                r.study_id
            )),
            Ok(_) => None,
        })
    }

    /// A full scan of a study (which rewrites its index), and the attempt
    /// and `.void` objects that the arrival log or the index (as it was
    /// before the scan) name and that are not there.
    pub async fn check_study(&self, study: &str) -> Result<Checked, LedgerError> {
        // Read before the full scan rewrites the index from what is there.
        let indexed: BTreeSet<String> = match self.read_index(study).await {
            Ok(c) => c
                .records
                .iter()
                .map(|r| format!("{study}/trials/{}/{}.json", r.trial_key, r.attempt_id))
                .chain(
                    c.voids
                        .iter()
                        .map(|(t, a)| format!("{study}/trials/{t}/{a}.void")),
                )
                .collect(),
            Err(_) => BTreeSet::new(),
        };
        let scan = self.scan_full(study).await?;
        let mut wanted: Vec<(String, &'static str)> = Vec::new();
        {
            let cache = self.known.lock().await;
            if let Some(k) = cache.get(study) {
                let unreadable: BTreeSet<&str> =
                    scan.corrupt.iter().map(|c| c.key.as_str()).collect();
                for key in &k.unresolved {
                    if !unreadable.contains(key.as_str()) {
                        wanted.push((key.clone(), LOGGED_MISSING));
                    }
                }
                for key in &indexed {
                    if !k.holds(key) && !k.unresolved.contains(key) {
                        wanted.push((key.clone(), INDEXED_MISSING));
                    }
                }
            }
        }
        // A writer between its log entry and its object is not damage:
        // look once more.
        let mut missing = Vec::new();
        for (key, reason) in wanted {
            match self.exists(&ObjPath::from(key.as_str())).await {
                Ok(true) => {}
                Ok(false) => missing.push(CorruptObject {
                    key,
                    reason: reason.to_string(),
                }),
                Err(e) => missing.push(CorruptObject {
                    reason: format!("cannot be read: {}", super::redact_error(&e.to_string())),
                    key,
                }),
            }
        }
        missing.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Checked { scan, missing })
    }
}

const LOGGED_MISSING: &str = "missing: the arrival log names it but it is not there (deleted, or the launcher that wrote the entry stopped or failed before writing the object)";
const INDEXED_MISSING: &str =
    "missing: the ledger index holds its record but the object is not there (deleted)";
