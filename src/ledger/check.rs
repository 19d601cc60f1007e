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
    /// Host, plan, verdict and drop objects that do not read as their
    /// kind (or, in a local ledger, are no regular file: a listing skips
    /// those without a word).
    pub records: Vec<CorruptObject>,
    /// What was wrong with the compacted index before the check rewrote
    /// it from the objects: not usable (and why), or records that differ
    /// from their objects (how many, the first key). Derived data, so not
    /// damage of the ledger; `None` when it matched or there was none.
    pub index: Option<String>,
}

/// Prefixes of a study whose objects are records of one kind each, read
/// by `ledger check` as that kind.
const RECORD_PARTS: [&str; 4] = ["hosts", "plan", "verdicts", "drops"];

/// Why `bytes` under `<study>/<part>/` do not read as that part's record.
fn record_problem(part: &str, bytes: &[u8]) -> Option<String> {
    let read = match part {
        "hosts" => serde_json::from_slice::<records::HostRecord>(bytes).map(|_| ()),
        "plan" => serde_json::from_slice::<records::PlanRecord>(bytes).map(|_| ()),
        "drops" => serde_json::from_slice::<records::DropRecord>(bytes).map(|_| ()),
        _ => match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(v) if v.is_object() => Ok(()),
            Ok(_) => return Some("not a verdict record: not a JSON object".to_string()),
            Err(e) => Err(e),
        },
    };
    read.err()
        .map(|e| format!("not a valid {} record: {e}", part.trim_end_matches('s')))
}

/// Sub-prefixes only a study has.
const STUDY_PARTS: [&str; 9] = [
    "trials",
    "hosts",
    "log",
    "leases",
    "launchers",
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
        let (contents, mut index) = match self.read_index(study).await {
            Ok(c) => (Some(c), None),
            Err(super::index::Unusable::Missing) => (None, None),
            Err(super::index::Unusable::Invalid(why)) => (None, Some(format!("not usable: {why}"))),
        };
        let indexed: BTreeSet<String> = contents
            .iter()
            .flat_map(|c| {
                c.records
                    .iter()
                    .map(|r| format!("{study}/trials/{}/{}.json", r.trial_key, r.attempt_id))
                    .chain(
                        c.voids
                            .iter()
                            .map(|(t, a)| format!("{study}/trials/{t}/{a}.void")),
                    )
            })
            .collect();
        let scan = self.scan_full(study).await?;
        let mut wanted: Vec<(String, &'static str)> = Vec::new();
        {
            let cache = self.known.lock().await;
            if let Some(k) = cache.get(study) {
                if let Some(c) = &contents {
                    index = index.or(differing(study, c, k.all_records()));
                }
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
        let records = self.check_records(study).await?;
        Ok(Checked {
            scan,
            missing,
            records,
            index,
        })
    }

    /// Every host, plan, verdict and drop object of a study read as its
    /// kind; what does not read, with why. Reads skip such objects (a
    /// bucket without its plan is no verdict; an unreadable host record
    /// leaves its fingerprint unknown), so only this says they are there.
    async fn check_records(&self, study: &str) -> Result<Vec<CorruptObject>, LedgerError> {
        let mut out = Vec::new();
        for part in RECORD_PARTS {
            let prefix = ObjPath::from(format!("{study}/{part}"));
            for key in self.list(&prefix).await? {
                let reason = match self.get(&key).await {
                    Ok(None) => continue,
                    Ok(Some(bytes)) => record_problem(part, &bytes),
                    Err(e) => Some(format!(
                        "cannot be read: {}",
                        super::redact_error(&e.to_string())
                    )),
                };
                if let Some(reason) = reason {
                    out.push(CorruptObject {
                        key: key.to_string(),
                        reason,
                    });
                }
            }
            if let Some(root) = &self.local_root {
                for (path, what) in super::local::not_files(&root.join(study).join(part), 4) {
                    let key = path
                        .strip_prefix(root)
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_else(|_| path.to_string_lossy().into_owned());
                    out.push(CorruptObject {
                        key,
                        reason: format!("{what}, not an object: every read skips it"),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

/// Records of the index `c` that differ from those read from their objects
/// (`read`: slim, as the index holds them), as how many and the first key;
/// `None` when every one matches. A record the index holds and no object
/// does is reported as missing, not here.
fn differing<'a>(
    study: &str,
    c: &super::index::Contents,
    read: impl Iterator<Item = &'a records::AttemptRecord>,
) -> Option<String> {
    let read: std::collections::HashMap<(&str, &str), &records::AttemptRecord> = read
        .map(|r| ((r.trial_key.as_str(), r.attempt_id.as_str()), r))
        .collect();
    let json = |r: &records::AttemptRecord| serde_json::to_value(r).ok();
    let differ: Vec<String> = c
        .records
        .iter()
        .filter(|r| {
            read.get(&(r.trial_key.as_str(), r.attempt_id.as_str()))
                .is_some_and(|o| json(o) != json(r))
        })
        .map(|r| format!("{study}/trials/{}/{}.json", r.trial_key, r.attempt_id))
        .collect();
    let first = differ.iter().min()?;
    Some(format!(
        "{} differed from {} (first: {first}); rewritten from the objects",
        crate::fmt::count(differ.len() as u64, "indexed record", "indexed records"),
        if differ.len() == 1 {
            "its object"
        } else {
            "their objects"
        }
    ))
}

const LOGGED_MISSING: &str = "missing: the arrival log names it but it is not there (deleted, or the launcher that wrote the entry stopped or failed before writing the object)";
const INDEXED_MISSING: &str =
    "missing: the ledger index holds its record but the object is not there (deleted)";
