//! The harness every integration test shares. A test file includes it with
//! `mod support;`; each uses part of it, hence `allow(dead_code)`.
//!
//! - [`env`]: [`Env`](env::Env), one test's study directory, ledger and
//!   tunectl commands on the local host;
//! - [`fake`]: the FAKE trial program and its documented profile;
//! - [`ledger_files`]: a local ledger's attempt records, read from its files;
//! - [`sshd`], [`slurm`]: real sshd fleets and Slurm clusters on this machine
//!   (`slurm` is also included by benches/slurm_calls.rs, so it stands alone).
#![allow(dead_code)]

pub mod env;
pub mod fake;
pub mod ledger_files;
pub mod slurm;
pub mod sshd;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Whether a launch ran to its end: exit 0 when every bucket it reports is
/// a VERDICT, exit 3 when one is a DRAFT (`tunectl launch`'s contract).
pub fn ran_to_the_end(code: Option<i32>, stderr: &str) -> bool {
    let drafts = stderr.contains("[DRAFT]");
    code == Some(if drafts { 3 } else { 0 })
}

/// The `ran N trials` number of a launch's summary line.
pub fn ran(stderr: &str) -> usize {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("ran "))
        .unwrap_or_else(|| panic!("no summary line in:\n{stderr}"));
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("bad summary line {line:?}"))
}

/// Poll `cond` every 20 ms until it holds (true) or `limit` passes (then
/// it is asked once more).
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Whether `s` is `len` lower-case hex digits.
pub fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Is the process gone? A zombie (exited, not yet reaped) counts as gone.
pub fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// `dir/bin/nvidia-smi`: the FAKE tests/fixtures/fake-nvidia-smi (2× NVIDIA
/// H100 80GB HBM3 unless its `FAKE_GPU_*` variables say otherwise); the
/// `bin` directory.
pub fn fake_nvidia_smi(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    let smi = bin.join("nvidia-smi");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-nvidia-smi"),
        &smi,
    )
    .expect("copy the fake nvidia-smi");
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    bin
}

/// `$PATH` with `dir` first.
pub fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}
