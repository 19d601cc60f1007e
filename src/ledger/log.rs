//! The arrival log: how a scan finds what was written since the compacted
//! index, without listing every attempt object.
//!
//! ```text
//! <study>/log/<stream>/<n>-<trial-key>-<file>    names <study>/trials/<trial-key>/<file>
//! <study>/log/<stream>/<n>-end                   the stream's writer writes no more to it
//! ```
//!
//! Every process that writes attempts (or `.void` markers) to a study
//! writes its own *stream*, `<stream>` = `<UTC start>-<16 hex random>`, and
//! numbers its entries 1, 2, 3, ... (`<n>`: 12 digits, zero-padded). Before
//! it creates `trials/<key>/<file>` it creates the entry naming it; a
//! failed entry means no object. So every object written this way has an
//! entry created before it.
//!
//! A reader remembers, per stream, the largest `through` such that entries
//! 1..=through were all listed. Any entry created after that listing has a
//! number above `through` (numbers are never reused, and an entry missing
//! from a listing holds `through` below it), so listing each stream's
//! entries after `through` finds everything new, whatever the writers'
//! clocks say. An entry whose object is not there yet (being written, or
//! its writer died in between) is kept as *unresolved* and looked for again
//! by every later scan. A stream whose `end` entry and everything before
//! it were listed is closed and never listed again.
//!
//! What this needs from the store: conditional create (for the entry
//! before the object: a plain create is enough, entry names are unique) and
//! listings that show every object whose write completed before the
//! listing began (S3, GCS, Azure and the local filesystem all do).

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::path::Path as ObjPath;
use serde::{Deserialize, Serialize};

use super::{Ledger, LedgerError};

/// A stream's name: `<UTC time>-<16 hex random>`, so streams sort roughly
/// by start (only for people reading a listing: nothing depends on it).
pub fn new_stream_id() -> String {
    let nonce: u64 = rand::random();
    format!(
        "{}-{:016x}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
        nonce
    )
}

/// What a reader knows of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Entries 1..=through were all listed.
    pub through: u64,
    /// The `end` entry and everything before it were listed.
    pub closed: bool,
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Names `<study>/trials/<trial>/<file>` (its object key).
    Object(String),
    /// The stream ends here.
    End,
    /// A name tunectl did not write; its body names the object.
    Unparsed(ObjPath),
}

/// The body of an entry: `{"schema": 1, "object": "<study>/trials/..."}`.
/// Readers use the name; the body is for people and for names that do not
/// parse.
#[derive(Debug, Serialize, Deserialize)]
struct EntryBody {
    schema: u32,
    object: String,
}

pub fn prefix(study: &str) -> ObjPath {
    ObjPath::from(format!("{study}/log"))
}

pub fn stream_prefix(study: &str, stream: &str) -> ObjPath {
    ObjPath::from(format!("{study}/log/{stream}"))
}

/// The listing offset that skips entries 1..=through of a stream: every
/// entry `<through>-...` sorts before `<through>.` ('-' < '.'), every
/// later number after it.
pub fn offset_after(study: &str, stream: &str, through: u64) -> ObjPath {
    ObjPath::from(format!("{study}/log/{stream}/{through:012}."))
}

fn entry_key(study: &str, stream: &str, n: u64, rest: &str) -> ObjPath {
    ObjPath::from(format!("{study}/log/{stream}/{n:012}-{rest}"))
}

/// `(stream, n, entry)` of a key under `<study>/log/`, or `None` for keys
/// that are not entries at all (wrong depth, no number).
pub fn parse(study: &str, key: &ObjPath) -> Option<(String, u64, Entry)> {
    let parts: Vec<&str> = key.as_ref().split('/').collect();
    let [s, "log", stream, name] = parts.as_slice() else {
        return None;
    };
    if *s != study || stream.is_empty() {
        return None;
    }
    let (num, rest) = name.split_at_checked(12)?;
    if !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = num.parse().ok()?;
    let rest = rest.strip_prefix('-')?;
    let entry = if rest == "end" {
        Entry::End
    } else {
        match rest.split_once('-') {
            Some((trial, file))
                if !trial.is_empty()
                    && trial.bytes().all(|b| b.is_ascii_hexdigit())
                    && !file.is_empty()
                    && !file.contains('/')
                    && (file.ends_with(".json") || file.ends_with(".void")) =>
            {
                Entry::Object(format!("{study}/trials/{trial}/{file}"))
            }
            _ => Entry::Unparsed(key.clone()),
        }
    };
    Some((stream.to_string(), n, entry))
}

/// Fold the numbers listed from one stream (after `mark.through`) into its
/// mark.
pub fn advance(mark: Mark, listed: &BTreeMap<u64, bool>) -> Mark {
    let mut m = mark;
    if m.closed {
        return m;
    }
    // `listed`: number → is the end entry.
    while let Some(end) = listed.get(&(m.through + 1)) {
        m.through += 1;
        if *end {
            m.closed = true;
            break;
        }
    }
    m
}

/// This process's stream for a study, and the number of its next entry.
#[derive(Debug)]
pub(crate) struct Writer {
    pub stream: String,
    pub next: u64,
}

impl Ledger {
    pub(crate) fn next_entry(&self, study: &str) -> (String, u64) {
        let mut streams = match self.streams.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let w = streams.entry(study.to_string()).or_insert_with(|| Writer {
            stream: new_stream_id(),
            next: 1,
        });
        let n = w.next;
        // A number is used once, even when its entry could not be written.
        w.next += 1;
        (w.stream.clone(), n)
    }

    /// Create the log entry naming `<study>/trials/<trial>/<file>`; the
    /// object itself is written after it, and only when this succeeded.
    pub(crate) async fn log_object(
        &self,
        study: &str,
        trial: &str,
        file: &str,
    ) -> Result<(), LedgerError> {
        self.log_object_tries(study, trial, file, 4, false).await
    }

    /// [`Ledger::log_object`] with at most `max_tries` tries; with
    /// `any_error`, permission errors are retried too (attempt records).
    pub(crate) async fn log_object_tries(
        &self,
        study: &str,
        trial: &str,
        file: &str,
        max_tries: u32,
        any_error: bool,
    ) -> Result<(), LedgerError> {
        let (key, bytes) = self.log_entry(study, trial, file)?;
        // `false` (it exists): an earlier try of this very create went
        // through.
        self.create_tries(&key, bytes, max_tries, any_error)
            .await
            .map(|_| ())
    }

    /// The next log entry of this process's stream naming
    /// `<study>/trials/<trial>/<file>`: its key and body. Its number is
    /// used up whether or not it is then written.
    pub(crate) fn log_entry(
        &self,
        study: &str,
        trial: &str,
        file: &str,
    ) -> Result<(ObjPath, Vec<u8>), LedgerError> {
        let (stream, n) = self.next_entry(study);
        let key = entry_key(study, &stream, n, &format!("{trial}-{file}"));
        let body = EntryBody {
            schema: super::records::SCHEMA,
            object: format!("{study}/trials/{trial}/{file}"),
        };
        let bytes = serde_json::to_vec(&body).map_err(|e| self.io_err("encode", &key, e))?;
        Ok((key, bytes))
    }

    /// End this process's stream for a study: readers stop listing it. A
    /// later write starts a new stream. Best effort: a stream left open
    /// costs readers one listing per scan.
    pub async fn close_log(&self, study: &str) {
        let taken = match self.streams.lock() {
            Ok(mut s) => s.remove(study),
            Err(poisoned) => poisoned.into_inner().remove(study),
        };
        if let Some(w) = taken {
            let key = entry_key(study, &w.stream, w.next, "end");
            let body = format!("{{\"schema\":{}}}", super::records::SCHEMA).into_bytes();
            if let Err(e) = self.create(&key, body).await {
                tracing::warn!(key = %key, error = %e, "cannot end the ledger log stream");
            }
        }
    }

    /// The streams under `<study>/log/`.
    pub(crate) async fn log_streams(&self, study: &str) -> Result<Vec<String>, LedgerError> {
        let p = prefix(study);
        if let Some(root) = &self.local_root {
            let dir = root.join(study).join("log");
            let names = local_names(dir, None, true)
                .await
                .map_err(|e| self.io_err("list", &p, e))?;
            return Ok(names);
        }
        let listed = self
            .store
            .list_with_delimiter(Some(&p))
            .await
            .map_err(|e| self.io_err("list", &p, e))?;
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|s| s.filename().map(str::to_string))
            .collect())
    }

    /// The entries of one stream numbered above `through` (0: all).
    pub(crate) async fn log_entries(
        &self,
        study: &str,
        stream: &str,
        through: u64,
    ) -> Result<Vec<ObjPath>, LedgerError> {
        let p = stream_prefix(study, stream);
        let offset = offset_after(study, stream, through);
        if let Some(root) = &self.local_root {
            let dir = root.join(study).join("log").join(stream);
            let after = (through > 0).then(|| format!("{through:012}."));
            let names = local_names(dir, after, false)
                .await
                .map_err(|e| self.io_err("list", &p, e))?;
            return Ok(names
                .into_iter()
                .map(|n| ObjPath::from(format!("{study}/log/{stream}/{n}")))
                .collect());
        }
        let listing = if through == 0 {
            self.store.list(Some(&p))
        } else {
            self.store.list_with_offset(Some(&p), &offset)
        };
        listing
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(|e| self.io_err("list", &p, e))
    }

    /// Every entry of every stream.
    pub(crate) async fn log_all(&self, study: &str) -> Result<Vec<ObjPath>, LedgerError> {
        let streams = self.log_streams(study).await?;
        let lists: Vec<Result<Vec<ObjPath>, LedgerError>> =
            futures::stream::iter(streams.iter().map(|s| self.log_entries(study, s, 0)))
                .buffer_unordered(16)
                .collect()
                .await;
        let mut out = Vec::new();
        for l in lists {
            out.extend(l?);
        }
        Ok(out)
    }

    /// The object an entry with an unexpected name refers to, from its
    /// body; `None` when the body does not say.
    pub(crate) async fn entry_object(
        &self,
        study: &str,
        key: &ObjPath,
    ) -> Result<Option<String>, LedgerError> {
        let Some(bytes) = self.get(key).await? else {
            return Ok(None);
        };
        let trials = format!("{study}/trials/");
        Ok(serde_json::from_slice::<EntryBody>(&bytes)
            .ok()
            .map(|b| b.object)
            .filter(|o| {
                o.strip_prefix(&trials)
                    .is_some_and(|rest| rest.split('/').count() == 2)
            }))
    }
}

/// Names in a directory of a local ledger, by name alone: object_store's
/// listing stats every file, a tenth of a second per 10,000 entries here.
/// `dirs`: directories (the streams) instead of files (the entries).
/// Names sorting at or before `after` are left out, and so are the staging
/// files of writes in progress (`<name>#<digits>`, as object_store leaves
/// them out). A missing directory lists nothing.
async fn local_names(
    dir: std::path::PathBuf,
    after: Option<String>,
    dirs: bool,
) -> std::io::Result<Vec<String>> {
    let listed =
        tokio::task::spawn_blocking(move || super::local::names(&dir, after.as_deref(), dirs))
            .await;
    listed.map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_parse() {
        let k = ObjPath::from(
            "s/log/20260101T000000Z-00ff/000000000012-abc123-20260101T000000.000001Z-0011.json",
        );
        assert_eq!(
            parse("s", &k),
            Some((
                "20260101T000000Z-00ff".to_string(),
                12,
                Entry::Object("s/trials/abc123/20260101T000000.000001Z-0011.json".to_string())
            ))
        );
        let end = ObjPath::from("s/log/x/000000000003-end");
        assert_eq!(parse("s", &end), Some(("x".to_string(), 3, Entry::End)));
        let odd = ObjPath::from("s/log/x/000000000004-what");
        assert_eq!(
            parse("s", &odd),
            Some(("x".to_string(), 4, Entry::Unparsed(odd.clone())))
        );
        for bad in [
            "s/log/x/12-abc-a.json",
            "t/log/x/000000000001-end",
            "s/log/000000000001-end",
            "s/log/x/y/000000000001-end",
            "s/log/x/00000000000a-end",
        ] {
            assert_eq!(parse("s", &ObjPath::from(bad)), None, "{bad}");
        }
    }

    #[test]
    fn offsets_skip_exactly_the_numbers_seen() {
        let off = offset_after("s", "x", 7);
        let before = entry_key("s", "x", 7, "ab-z.json");
        let end7 = entry_key("s", "x", 7, "end");
        let after = entry_key("s", "x", 8, "00-a.json");
        assert!(before.as_ref() < off.as_ref());
        assert!(end7.as_ref() < off.as_ref());
        assert!(after.as_ref() > off.as_ref());
        assert!(entry_key("s", "x", 10, "end").as_ref() > off.as_ref());
    }

    #[tokio::test]
    async fn local_listing_by_name_skips_staging_files_and_what_was_seen() {
        let dir = tempfile::tempdir().expect("tempdir");
        for f in [
            "000000000001-a-x.json",
            "000000000002-b-y.json#17",
            "000000000002-b-y.json",
            "000000000003-end",
        ] {
            std::fs::write(dir.path().join(f), b"{}").expect("write");
        }
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        let mut names = local_names(dir.path().to_path_buf(), None, false)
            .await
            .expect("list");
        names.sort();
        assert_eq!(
            names,
            [
                "000000000001-a-x.json",
                "000000000002-b-y.json",
                "000000000003-end"
            ]
        );
        let mut after = local_names(
            dir.path().to_path_buf(),
            Some("000000000001.".into()),
            false,
        )
        .await
        .expect("list");
        after.sort();
        assert_eq!(after, ["000000000002-b-y.json", "000000000003-end"]);
        let subdirs = local_names(dir.path().to_path_buf(), None, true)
            .await
            .expect("list");
        assert_eq!(subdirs, ["sub"]);
        let none = local_names(dir.path().join("missing"), None, true)
            .await
            .expect("list");
        assert!(none.is_empty());
    }

    #[test]
    fn marks_advance_only_over_contiguous_numbers() {
        let listed = |ns: &[(u64, bool)]| ns.iter().copied().collect::<BTreeMap<u64, bool>>();
        let m = advance(
            Mark::default(),
            &listed(&[(1, false), (2, false), (4, false)]),
        );
        assert_eq!(
            m,
            Mark {
                through: 2,
                closed: false
            }
        );
        let m = advance(m, &listed(&[(3, false), (4, false), (5, true)]));
        assert_eq!(
            m,
            Mark {
                through: 5,
                closed: true
            }
        );
        // An end beyond a gap does not close the stream.
        let m = advance(Mark::default(), &listed(&[(2, true)]));
        assert_eq!(m, Mark::default());
    }
}
