//! Reading a file that someone else names: a study, an inventory, a tuned
//! file, a batch template, a trial's result and output files, a local
//! ledger's objects. Such a path can be a FIFO with no writer (an open for
//! reading waits forever), a device such as `/dev/zero` (a read never
//! ends), a directory or a socket, or a regular file far larger than any
//! input of its kind. Every such read goes through here:
//!
//! - the file type is checked before the open (a symbolic link is followed
//!   only to a regular file), so nothing else is even opened;
//! - the open itself cannot block (`O_NONBLOCK`, and `O_NOCTTY`), and the
//!   type is checked again on the opened descriptor (`fstat`): a path
//!   swapped for a FIFO between the check and the open is still refused;
//! - at most a cap of bytes is read, given per kind of file (the `MAX_*`
//!   constants here and beside each caller), also when the file grows
//!   while it is read.
//!
//! Refusals say what the path is: `is a FIFO, not a regular file`, `is a
//! symlink to a character device, not a regular file`, `is 9000022 bytes,
//! over the limit of 8 MiB`. docs/security.md lists the caps.

use std::fs::{File, FileType};
use std::io::Read;
use std::path::Path;
use std::time::Instant;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Largest study file read.
pub const MAX_STUDY_FILE_BYTES: u64 = 4 * MIB;

/// Largest inventory file read.
pub const MAX_INVENTORY_FILE_BYTES: u64 = 4 * MIB;

/// Largest tuned file read (`apply --tuned`, `export`'s look at a folder).
pub const MAX_TUNED_FILE_BYTES: u64 = 4 * MIB;

/// Largest batch template (an inventory's `batch_template`) read.
pub const MAX_TEMPLATE_FILE_BYTES: u64 = MIB;

/// Largest lease object of a ledger (a lease is about 300 bytes).
pub const MAX_LEASE_BYTES: u64 = 64 * KIB;

/// Largest arrival-log entry of a ledger (an entry names one object).
pub const MAX_LOG_ENTRY_BYTES: u64 = MIB;

/// Largest attempt record of a ledger (tails of 8 KiB and 4 KiB, the
/// rendered command, the config and cell).
pub const MAX_ATTEMPT_BYTES: u64 = 16 * MIB;

/// Largest ledger index (`index/compact.json`: about 255 bytes per attempt,
/// so about four million attempts).
pub const MAX_INDEX_BYTES: u64 = GIB;

/// Largest of every other ledger record: the study record, host records,
/// plans, verdicts, drops, checkpoint claims.
pub const MAX_RECORD_BYTES: u64 = 64 * MIB;

/// Bytes read at a time.
const CHUNK: usize = 1024 * 1024;

/// Why a file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// Nothing is there (the system's words: `No such file or directory
    /// (os error 2)`).
    Missing(String),
    /// Something is there and was refused, and why: `is a FIFO, not a
    /// regular file`, `is N bytes, over the limit of 4 MiB`.
    Refused(String),
    /// A regular file whose reading failed (`cannot be read: ...`): it may
    /// pass.
    Failed(String),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Missing(why) | Unreadable::Refused(why) | Unreadable::Failed(why) => {
                f.write_str(why)
            }
        }
    }
}

/// `n` bytes for people: `8 MiB`, `16 GiB`, else bytes.
pub fn size_label(n: u64) -> String {
    if n >= GIB && n.is_multiple_of(GIB) {
        format!("{} GiB", n / GIB)
    } else if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if (KIB..MIB).contains(&n) && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

/// What a file type is, for a message: `a FIFO`, `a directory`...
pub fn kind_of(t: FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        "not a regular file"
    }
}

/// `is [a symlink to ]<kind>, not a regular file`.
fn not_regular(via_link: bool, t: FileType) -> Unreadable {
    Unreadable::Refused(format!(
        "is {}{}, not a regular file",
        if via_link { "a symlink to " } else { "" },
        kind_of(t)
    ))
}

fn failed(e: std::io::Error) -> Unreadable {
    Unreadable::Failed(format!("cannot be read: {e}"))
}

/// What is at `path`, without opening it: `Ok(false)` when nothing is,
/// `Ok(true)` for a regular file (also through a symlink), else why not.
pub fn check_regular(path: &Path) -> Result<bool, Unreadable> {
    match stat_regular(path) {
        Ok(_) => Ok(true),
        Err(Unreadable::Missing(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The type check before the open: whether `path` is reached through a
/// symlink, when it is a regular file.
fn stat_regular(path: &Path) -> Result<bool, Unreadable> {
    let link = std::fs::symlink_metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Unreadable::Missing(e.to_string()),
        _ => failed(e),
    })?;
    let via_link = link.file_type().is_symlink();
    let meta = if via_link {
        std::fs::metadata(path).map_err(|e| {
            Unreadable::Refused(format!("is a symlink that cannot be followed: {e}"))
        })?
    } else {
        link
    };
    if !meta.is_file() {
        return Err(not_regular(via_link, meta.file_type()));
    }
    Ok(via_link)
}

/// Open `path` for reading if it is a regular file of at most `cap` bytes.
/// Nothing else is opened, and the open cannot block: the type is checked
/// before, and again on the opened descriptor.
pub fn open_regular(path: &Path, cap: u64) -> Result<File, Unreadable> {
    open_regular_with(path, cap, 0)
}

/// [`open_regular`] with more `open(2)` flags (`O_NOATIME`).
pub fn open_regular_with(path: &Path, cap: u64, flags: libc::c_int) -> Result<File, Unreadable> {
    let via_link = stat_regular(path)?;
    open_checked(path, cap, flags, via_link)
}

/// [`open_regular_with`] for a path that a directory listing has just
/// shown to be a regular file (its entry's type, a symlink followed): the
/// check before the open is that listing's, so it is not made again (a
/// scan of a large ledger saves a system call per file); the open is as
/// non-blocking and the check on the opened descriptor the same.
pub fn open_listed_regular(path: &Path, cap: u64, flags: libc::c_int) -> Result<File, Unreadable> {
    open_checked(path, cap, flags, false)
}

/// The non-blocking open and the check on the opened descriptor.
fn open_checked(
    path: &Path,
    cap: u64,
    flags: libc::c_int,
    via_link: bool,
) -> Result<File, Unreadable> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | flags)
        .open(path)
        .map_err(|e| match e.kind() {
            // Removed between the check and the open.
            std::io::ErrorKind::NotFound => Unreadable::Missing(e.to_string()),
            _ => failed(e),
        })?;
    let meta = file.metadata().map_err(failed)?;
    if !meta.is_file() {
        return Err(not_regular(via_link, meta.file_type()));
    }
    if meta.len() > cap {
        return Err(Unreadable::Refused(format!(
            "is {} bytes, over the limit of {}",
            meta.len(),
            size_label(cap)
        )));
    }
    Ok(file)
}

/// Read `path` through `sink` in chunks: a regular file of at most `cap`
/// bytes (also when it grows while read), finished before `deadline` when
/// there is one.
pub fn read_chunks(
    path: &Path,
    cap: u64,
    deadline: Option<Instant>,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), Unreadable> {
    let mut file = open_regular(path, cap)?;
    let mut buf = vec![0u8; CHUNK];
    let mut total: u64 = 0;
    loop {
        if deadline.is_some_and(|d| Instant::now() > d) {
            return Err(Unreadable::Refused(
                "was still being read at the trial's timeout".to_string(),
            ));
        }
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(failed(e)),
        };
        total += n as u64;
        if total > cap {
            return Err(Unreadable::Refused(format!(
                "grew over the limit of {}",
                size_label(cap)
            )));
        }
        sink(&buf[..n]);
    }
}

/// The contents of a regular file of at most `cap` bytes.
pub fn read_regular(
    path: &Path,
    cap: u64,
    deadline: Option<Instant>,
) -> Result<Vec<u8>, Unreadable> {
    let mut out = Vec::new();
    match deadline {
        Some(_) => read_chunks(path, cap, deadline, |b| out.extend_from_slice(b))?,
        None => {
            let file = open_regular(path, cap)?;
            // Sized once: a `take` hides the length from `read_to_end`,
            // which would grow the buffer by doubling (a 27 MiB ledger
            // index took 34 MiB).
            if let Ok(meta) = file.metadata() {
                out.reserve_exact(usize::try_from(meta.len().min(cap)).unwrap_or(0));
            }
            read_into(file, cap, &mut out)?
        }
    }
    Ok(out)
}

/// Append the contents of a file opened by [`open_regular`] to `out`: at
/// most `cap` bytes, also when it grew since it was opened.
pub fn read_into(file: File, cap: u64, out: &mut Vec<u8>) -> Result<(), Unreadable> {
    let start = out.len();
    file.take(cap.saturating_add(1))
        .read_to_end(out)
        .map_err(failed)?;
    if (out.len() - start) as u64 > cap {
        out.truncate(start);
        return Err(Unreadable::Refused(format!(
            "grew over the limit of {}",
            size_label(cap)
        )));
    }
    Ok(())
}

/// The text of a regular file of at most `cap` bytes, which must be UTF-8.
pub fn read_text(path: &Path, cap: u64) -> Result<String, Unreadable> {
    String::from_utf8(read_regular(path, cap, None)?)
        .map_err(|e| Unreadable::Refused(format!("is not UTF-8 text: {}", e.utf8_error())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: mkfifo(3) on a NUL-terminated path this test owns.
        let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(rc, 0, "mkfifo {}", path.display());
    }

    /// Every kind of path that is not a regular file is refused at once,
    /// with what it is; a regular file, also through a symlink, is read.
    #[test]
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        mkfifo(&d.join("fifo"));
        std::os::unix::fs::symlink(d.join("fifo"), d.join("to-fifo")).expect("symlink");
        std::os::unix::fs::symlink("/dev/zero", d.join("zero")).expect("symlink");
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).expect("symlink");
        std::fs::create_dir(d.join("dir")).expect("mkdir");
        std::fs::write(d.join("file"), "text").expect("write");
        std::os::unix::fs::symlink(d.join("file"), d.join("to-file")).expect("symlink");
        let sock = std::os::unix::net::UnixListener::bind(d.join("sock")).expect("bind");
        let started = Instant::now();
        let refused = |name: &str| match read_regular(&d.join(name), MIB, None) {
            Err(Unreadable::Refused(why)) => why,
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(refused("fifo"), "is a FIFO, not a regular file");
        assert_eq!(
            refused("to-fifo"),
            "is a symlink to a FIFO, not a regular file"
        );
        assert_eq!(
            refused("zero"),
            "is a symlink to a character device, not a regular file"
        );
        assert_eq!(refused("dir"), "is a directory, not a regular file");
        assert_eq!(refused("sock"), "is a socket, not a regular file");
        assert!(refused("dangling").starts_with("is a symlink that cannot be followed"));
        assert!(matches!(
            open_regular_with(&d.join("fifo"), MIB, libc::O_NOATIME),
            Err(Unreadable::Refused(_))
        ));
        // Without the check before the open (a path swapped for a FIFO or
        // a device after it was checked): the open does not wait, and the
        // opened descriptor is refused.
        for (name, what) in [
            ("fifo", "is a FIFO, not a regular file"),
            ("zero", "is a character device, not a regular file"),
            ("dir", "is a directory, not a regular file"),
        ] {
            assert_eq!(
                open_listed_regular(&d.join(name), MIB, 0).map(|_| ()),
                Err(Unreadable::Refused(what.to_string())),
                "{name}"
            );
        }
        assert_eq!(
            read_regular(Path::new("/dev/null"), MIB, None),
            Err(Unreadable::Refused(
                "is a character device, not a regular file".to_string()
            ))
        );
        assert!(matches!(
            read_regular(&d.join("absent"), MIB, None),
            Err(Unreadable::Missing(_))
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(read_text(&d.join("to-file"), MIB).as_deref(), Ok("text"));
        assert_eq!(check_regular(&d.join("to-file")), Ok(true));
        assert_eq!(check_regular(&d.join("absent")), Ok(false));
        assert!(check_regular(&d.join("fifo")).is_err());
        drop(sock);
    }

    #[test]
    fn caps_hold() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("big");
        std::fs::write(&path, vec![b'x'; 2049]).expect("write");
        assert_eq!(
            read_regular(&path, 2 * KIB, None),
            Err(Unreadable::Refused(
                "is 2049 bytes, over the limit of 2 KiB".to_string()
            ))
        );
        assert_eq!(
            read_regular(&path, 4 * KIB, None).map(|b| b.len()),
            Ok(2049)
        );
        std::fs::write(&path, [0xff, 0xfe]).expect("write");
        assert!(
            matches!(read_text(&path, KIB), Err(Unreadable::Refused(w)) if w.starts_with("is not UTF-8 text"))
        );
        assert_eq!(size_label(8 * MIB), "8 MiB");
        assert_eq!(size_label(16 * GIB), "16 GiB");
        assert_eq!(size_label(64 * KIB), "64 KiB");
        assert_eq!(size_label(1000), "1000 bytes");
    }
}
