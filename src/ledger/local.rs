//! Writes to a local-folder ledger with plain `std::fs`, several in one
//! blocking call.
//!
//! object_store's local backend hands every file operation to tokio's
//! blocking pool: an attempt's log entry, its record and its lease's
//! release were three thread hand-offs on the slot's path between two
//! trials. Here they are one. What lands on disk is what that backend
//! writes, so either can read the other's ledger: a create writes the
//! bytes to a staging file `<name>#<n>` (made with `create_new`, parent
//! folders created when missing), then hard-links it to its name, which
//! fails when the name exists (a create never overwrites), and removes the
//! staging file. Readers skip `#<digits>` names (log.rs, object_store's
//! listing). Like that backend with its default settings, nothing is
//! fsynced. Error texts are that backend's too, so a failed write reads
//! the same whichever path wrote it.
//!
//! This module does no retrying and no async: the ledger (mod.rs) retries,
//! and decides which store takes this path.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use object_store::path::Path as ObjPath;

/// The file a key of a local ledger rooted at `root` is stored in: its
/// parts as they are (object_store keeps a key's parts percent-encoded,
/// `#` included, so no key names a staging file).
pub fn file_of(root: &Path, key: &ObjPath) -> PathBuf {
    let mut path = root.to_path_buf();
    for part in key.parts() {
        path.push(part.as_ref());
    }
    path
}

/// Create `path` holding `bytes` unless it exists: `Ok(false)` when it
/// does (left as it was).
pub fn create_new(path: &Path, bytes: &[u8]) -> Result<bool, String> {
    let (mut file, staging) = staging_file(path)?;
    let written = file
        .write_all(bytes)
        .map_err(|e| format!("Unable to copy data to file: {e}"));
    // Closing reports what a network file system failed to write.
    let closed = written.and_then(|()| close(file));
    let linked = closed.and_then(|()| match std::fs::hard_link(&staging, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(format!("Unable to rename file: {e}")),
    });
    let _ = std::fs::remove_file(&staging);
    linked.map_err(generic)
}

/// Remove a file; one that is not there is no error.
pub fn remove(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(generic(format!(
            "Unable to delete file {}: {e}",
            path.display()
        ))),
    }
}

/// Names in a folder of a local ledger, by name alone (see log.rs'
/// `local_names`): files, or with `dirs` folders, named after `after`,
/// staging files left out; a missing folder lists nothing.
pub fn names(dir: &Path, after: Option<&str>, dirs: bool) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if staged(&name) || after.is_some_and(|a| name.as_str() <= a) {
            continue;
        }
        // Follows symbolic links, as object_store's listing does; a link
        // to nothing names nothing (it would otherwise stop every listing
        // of the folder, and every lease taken in it).
        let is_dir = match entry.file_type() {
            Ok(t) if t.is_symlink() => match std::fs::metadata(entry.path()) {
                Ok(m) => m.is_dir(),
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            },
            Ok(t) => t.is_dir(),
            Err(e) => return Err(e),
        };
        if is_dir == dirs {
            out.push(name);
        }
    }
    Ok(out)
}

/// Entries under `dir` (folders followed up to `depth` levels) that a
/// listing of the store skips without a word because they are no regular
/// file: a FIFO, a socket, a device, a symbolic link to nothing. Each with
/// what it is. A missing or unreadable folder lists nothing.
pub fn not_files(dir: &Path, depth: usize) -> Vec<(PathBuf, &'static str)> {
    use std::os::unix::fs::FileTypeExt;
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                out.push((path, "a symbolic link to nothing"));
                continue;
            }
            Err(_) => continue,
        };
        let t = meta.file_type();
        let what = if t.is_dir() {
            if depth > 0 {
                out.extend(not_files(&path, depth - 1));
            }
            continue;
        } else if t.is_file() {
            continue;
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        out.push((path, what));
    }
    out.sort();
    out
}

/// Files the object store's local backend does not list: its staging
/// files, named `<name>#<digits>` (everything after the first `#`
/// digits, as that backend tells them).
pub fn staged(name: &str) -> bool {
    name.split_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A fresh staging file beside `path`: `<path>#1`, `#2`, ... (the first
/// free one), its folders made when missing.
fn staging_file(path: &Path) -> Result<(std::fs::File, PathBuf), String> {
    let mut n: u64 = 1;
    loop {
        let mut staging = path.as_os_str().to_owned();
        staging.push(format!("#{n}"));
        let staging = PathBuf::from(staging);
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&staging)
        {
            Ok(f) => return Ok((f, staging)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let Some(parent) = staging.parent() else {
                    return Err(generic(format!(
                        "Unable to create file {}: {e}",
                        staging.display()
                    )));
                };
                std::fs::create_dir_all(parent).map_err(|e| {
                    generic(format!("Unable to create dir {}: {e}", parent.display()))
                })?;
            }
            Err(e) => {
                return Err(generic(format!(
                    "Unable to open file {}: {e}",
                    staging.display()
                )));
            }
        }
    }
}

/// Close a file, returning the error dropping it would hide.
fn close(file: std::fs::File) -> Result<(), String> {
    use std::os::fd::IntoRawFd;
    let fd = file.into_raw_fd();
    // SAFETY: `fd` was just taken from a File, which no longer owns it, so
    // it is open and closed exactly once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(format!(
            "Unable to copy data to file: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// object_store's wrapping of a local backend's error.
fn generic(message: String) -> String {
    if message.starts_with("Generic LocalFileSystem error: ") {
        message
    } else {
        format!("Generic LocalFileSystem error: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_files_are_not_objects() {
        assert!(staged("x.json#1"));
        assert!(staged("a#0042"));
        assert!(!staged("a#"));
        assert!(!staged("a#b1"));
        assert!(!staged("a#b#12"));
        assert!(!staged("20260101T000000.000000Z-01.json"));
    }

    #[test]
    fn a_listing_skips_staging_files_and_links_to_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        for f in ["a.json", "b.json#3", "c.json"] {
            std::fs::write(dir.path().join(f), b"x").expect("write");
        }
        std::fs::create_dir(dir.path().join("d")).expect("mkdir");
        std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("e.json"))
            .expect("symlink");
        std::os::unix::fs::symlink(dir.path().join("a.json"), dir.path().join("f.json"))
            .expect("symlink");
        let mut files = names(dir.path(), None, false).expect("list");
        files.sort();
        assert_eq!(files, ["a.json", "c.json", "f.json"]);
        let mut after = names(dir.path(), Some("a.json"), false).expect("list");
        after.sort();
        assert_eq!(after, ["c.json", "f.json"]);
        assert_eq!(names(dir.path(), None, true).expect("list"), ["d"]);
        assert!(
            names(&dir.path().join("missing"), None, false)
                .expect("a missing folder lists nothing")
                .is_empty()
        );
    }

    #[test]
    fn a_create_makes_its_folders_and_never_overwrites() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = ObjPath::from("s/trials/ab/x.json");
        let path = file_of(dir.path(), &key);
        assert_eq!(path, dir.path().join("s/trials/ab/x.json"));
        assert_eq!(create_new(&path, b"first"), Ok(true));
        assert_eq!(create_new(&path, b"second"), Ok(false));
        assert_eq!(std::fs::read(&path).expect("read"), b"first");
        // No staging file is left behind, either way.
        let names: Vec<String> = std::fs::read_dir(path.parent().expect("parent"))
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["x.json"]);
    }

    #[test]
    fn a_staging_file_left_by_another_writer_is_stepped_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.json");
        std::fs::write(dir.path().join("x.json#1"), b"someone else's").expect("write");
        assert_eq!(create_new(&path, b"mine"), Ok(true));
        assert_eq!(std::fs::read(&path).expect("read"), b"mine");
        assert_eq!(
            std::fs::read(dir.path().join("x.json#1")).expect("read"),
            b"someone else's"
        );
        assert!(!dir.path().join("x.json#2").exists());
    }

    #[test]
    fn a_folder_in_the_way_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("s"), b"a file").expect("write");
        let path = dir.path().join("s/trials/ab/x.json");
        let err = create_new(&path, b"x").expect_err("s is a file");
        assert!(err.starts_with("Generic LocalFileSystem error: "), "{err}");
        assert!(
            err.contains(&dir.path().join("s").display().to_string()),
            "{err}"
        );
    }

    /// Odd characters in a key land where object_store looks for them.
    #[tokio::test]
    async fn an_odd_key_is_the_file_object_store_reads() {
        use object_store::ObjectStoreExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let key = ObjPath::from("s/a b%#..{}/x.json#12");
        assert!(create_new(&file_of(dir.path(), &key), b"odd").expect("create"));
        let store =
            object_store::local::LocalFileSystem::new_with_prefix(dir.path()).expect("store");
        let got = store
            .get(&key)
            .await
            .expect("found")
            .bytes()
            .await
            .expect("read");
        assert_eq!(got.as_ref(), b"odd");
        assert_eq!(
            remove(&dir.path().join("missing")),
            Ok(()),
            "a missing file is no error"
        );
    }
}
