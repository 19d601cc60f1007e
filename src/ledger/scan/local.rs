//! A full scan of a local ledger with plain file reads.
//!
//! The object store's local backend lists with one `statx` per file and
//! reads each object through its own hand-off to tokio's blocking pool:
//! for 100,000 attempts that is most of a first read's time, spent in
//! the kernel and in waking threads. A local ledger is a directory, so a
//! full scan here walks `<study>/trials/` with `read_dir` and reads every
//! file on a few threads of its own, each thread working through whole
//! trial directories.
//!
//! What it finds is what the backend's listing finds: every file under
//! `<study>/trials/`, symbolic links followed, less the backend's staging
//! files (names ending `#<digits>`), named by their path under the ledger
//! root. What that listing passes over in silence, it reports: an entry
//! that is neither a directory nor a regular file (a FIFO, a device, a
//! socket, or a symbolic link to one) is an unreadable object naming its
//! file and what it is, and is never opened. Every file is read as
//! [`crate::safe_read`] reads (the type checked again on the opened file,
//! at most [`crate::safe_read::MAX_ATTEMPT_BYTES`]).

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use object_store::path::Path as ObjPath;

use super::{Got, Interner, check_record};
use crate::ledger::index;
use crate::ledger::local::staged;
use crate::ledger::{AttemptRecord, CorruptObject, LedgerError};
use crate::safe_read::{self, MAX_ATTEMPT_BYTES, Unreadable};

/// Worker threads: a few more than the cores, so that a thread waiting
/// on a cold disk does not leave a core idle.
fn workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 8)
}

/// A file found under `<study>/trials/`: its object key and where it is;
/// `regular: false` for what is neither a directory nor a regular file.
struct Found {
    key: String,
    path: PathBuf,
    regular: bool,
}

/// A directory entry's name and what it is, symbolic links followed;
/// `None` for what a listing skips: a name that is not UTF-8 (said once
/// here) and a link to nothing.
fn entry_of(entry: &std::fs::DirEntry) -> std::io::Result<Option<(String, std::fs::FileType)>> {
    let Ok(name) = entry.file_name().into_string() else {
        tracing::warn!(
            path = %entry.path().display(),
            "ignoring a ledger file whose name is not UTF-8"
        );
        return Ok(None);
    };
    let mut kind = entry.file_type()?;
    if kind.is_symlink() {
        match std::fs::metadata(entry.path()) {
            Ok(m) => kind = m.file_type(),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some((name, kind)))
}

/// Every file under `dir` (object key prefix `prefix`), depth first,
/// symbolic links followed.
fn walk(dir: &Path, prefix: &str, out: &mut Vec<Found>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some((name, kind)) = entry_of(&entry)? else {
            continue;
        };
        let key = format!("{prefix}/{name}");
        if kind.is_dir() {
            walk(&entry.path(), &key, out)?;
        } else if !staged(&name) {
            out.push(Found {
                key,
                path: entry.path(),
                regular: kind.is_file(),
            });
        }
    }
    Ok(())
}

/// Open a file the walk found: one it saw as a regular file as
/// [`safe_read::open_listed_regular`] opens it, anything else as
/// [`safe_read::open_regular`] refuses it (saying what it is, without
/// opening it). Without updating the access time where the file system
/// lets this process (it must own the file); the first refusal turns that
/// off.
fn open(found: &Found, noatime: &AtomicBool) -> Result<File, Unreadable> {
    let open = |flags| {
        if found.regular {
            safe_read::open_listed_regular(&found.path, MAX_ATTEMPT_BYTES, flags)
        } else {
            safe_read::open_regular_with(&found.path, MAX_ATTEMPT_BYTES, flags)
        }
    };
    if noatime.load(Ordering::Relaxed) {
        match open(libc::O_NOATIME) {
            Err(Unreadable::Failed(e)) if e.contains(&format!("os error {}", libc::EPERM)) => {
                noatime.store(false, Ordering::Relaxed);
            }
            other => return other,
        }
    }
    open(0)
}

/// What one file holds, as the store-backed scan would classify it; a
/// record is returned as is, not boxed in a [`Got`].
fn read_one(
    found: Found,
    url: &str,
    noatime: &AtomicBool,
    buf: &mut Vec<u8>,
    interner: &mut Interner,
) -> Result<AttemptRecord, Got> {
    buf.clear();
    let read = open(&found, noatime).and_then(|f| safe_read::read_into(f, MAX_ATTEMPT_BYTES, buf));
    let Found { key, path, .. } = found;
    Err(match read {
        Ok(()) => match check_record(&ObjPath::from(key.as_str()), buf) {
            Ok(rec) => return Ok(interner.record(index::slim(rec))),
            Err(reason) => Got::Corrupt(CorruptObject { key, reason }),
        },
        // Listed, then gone.
        Err(Unreadable::Missing(_)) => Got::Missing(key),
        // Not a regular file, or over the cap: it stays so.
        Err(Unreadable::Refused(why)) => Got::Corrupt(CorruptObject {
            key,
            reason: format!("{} {why}", path.display()),
        }),
        Err(Unreadable::Failed(e)) => Got::Failed(CorruptObject {
            reason: LedgerError::Io {
                url: url.to_string(),
                op: "read",
                key: key.clone(),
                message: format!("{}: {e}", path.display()),
            }
            .to_string(),
            key,
        }),
    })
}

/// What reading `<study>/trials/` found: every key, the records read,
/// and what else reading found.
type Found3 = (Vec<String>, Vec<std::sync::Arc<AttemptRecord>>, Vec<Got>);

/// Every file under `<root>/<study>/trials/`: the keys of all of them,
/// and what was read of those `reads(key)` accepts. Records come back in
/// plain vectors, not one allocation each: the threads' own allocations
/// are freed when they end, which keeps the peak memory of a first read
/// near that of the store-backed one.
pub(crate) fn read_trials(
    root: &Path,
    study: &str,
    url: &str,
    reads: impl Fn(&str) -> bool + Sync,
) -> Result<Found3, LedgerError> {
    let prefix = format!("{study}/trials");
    let dir = root.join(&prefix);
    let list_err = |e: std::io::Error| LedgerError::Io {
        url: url.to_string(),
        op: "list",
        key: prefix.clone(),
        message: format!("{}: {e}", dir.display()),
    };
    let top = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(list_err(e)),
    };
    // The trial directories are the units of work; files directly under
    // `trials/` (none that tunectl writes) are read with the first.
    let mut dirs: Vec<(PathBuf, String)> = Vec::new();
    let mut loose: Vec<Found> = Vec::new();
    for entry in top {
        let entry = entry.map_err(list_err)?;
        let Some((name, kind)) = entry_of(&entry).map_err(list_err)? else {
            continue;
        };
        let key = format!("{prefix}/{name}");
        if kind.is_dir() {
            dirs.push((entry.path(), key));
        } else if !staged(&name) {
            loose.push(Found {
                key,
                path: entry.path(),
                regular: kind.is_file(),
            });
        }
    }

    let next = AtomicUsize::new(0);
    let noatime = AtomicBool::new(true);
    let failure: Mutex<Option<LedgerError>> = Mutex::new(None);
    // Each worker: (every key it found, the records it read, what else).
    let work = |mut files: Vec<Found>| {
        let mut keys = Vec::new();
        let mut records = Vec::new();
        let mut got = Vec::new();
        let mut buf = Vec::with_capacity(8192);
        // Records share what repeats as they are read (a worker's copies
        // of each config, label and host; the caller makes them one).
        let mut interner = Interner::default();
        loop {
            for f in files.drain(..) {
                // What is not a regular file is reported (read_one says
                // what it is, without opening it); only an attempt
                // object's key counts as there (an unreadable attempt),
                // never a `.void` marker's.
                if f.regular || reads(&f.key) {
                    keys.push(f.key.clone());
                }
                if reads(&f.key) || !f.regular {
                    match read_one(f, url, &noatime, &mut buf, &mut interner) {
                        Ok(r) => records.push(std::sync::Arc::new(r)),
                        Err(g) => got.push(g),
                    }
                }
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((path, key)) = dirs.get(i) else {
                break;
            };
            match walk(path, key, &mut files) {
                Ok(()) => {}
                // Removed while listed: nothing to read there.
                Err(e) if e.kind() == ErrorKind::NotFound => files.clear(),
                Err(e) => {
                    let mut slot = failure.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(LedgerError::Io {
                        url: url.to_string(),
                        op: "list",
                        key: key.clone(),
                        message: format!("{}: {e}", path.display()),
                    });
                    // Stop every worker: the scan fails as a listing does.
                    next.store(usize::MAX / 2, Ordering::Relaxed);
                    break;
                }
            }
        }
        (keys, records, got)
    };
    let mut first = Some(loose);
    let parts: Vec<Found3> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers())
            .map(|_| {
                let files = first.take().unwrap_or_default();
                s.spawn(|| work(files))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(part) => part,
                // A worker's panic is this scan's: never a scan that
                // silently misses what that worker read.
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut out: Found3 = Default::default();
    out.1.reserve_exact(parts.iter().map(|p| p.1.len()).sum());
    for (k, r, g) in parts {
        out.0.extend(k);
        out.1.extend(r);
        out.2.extend(g);
    }
    Ok(out)
}
