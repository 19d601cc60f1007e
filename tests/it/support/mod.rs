//! The harness every integration test shares: the modules of the `it`
//! test binary (tests/it/main.rs) use it as `crate::support`.
//!
//! - [`env`]: [`Env`](env::Env), one test's study directory, ledger and
//!   tunectl commands on the local host;
//! - [`fake`]: the FAKE trial program and its documented profile;
//! - [`injection`]: the reported injection templates, as a study that any
//!   transport runs, with shell-code values and the check of what ran;
//! - [`ledger_files`]: a local ledger's attempt records, read from its files;
//! - [`remote`]: what the ssh and Slurm tests share: the FAKE GPU program's
//!   profile per model, launches read through their JSON outcome, and the
//!   checks of a report against that profile;
//! - [`s3`]: the S3-compatible test server and its buckets;
//! - [`sshd`], [`slurm`]: real sshd fleets and Slurm clusters on this machine
//!   (`slurm` is also included by benches/slurm_calls.rs, so it stands alone).

pub mod env;
pub mod fake;
pub mod injection;
pub mod ledger_files;
pub mod remote;
pub mod s3;
pub mod slurm;
pub mod sshd;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A fresh value per call (lower-case hex and digits), for bucket names and
/// throwaway secrets: this process's id, the time's nanoseconds and a count
/// of the calls in this process, so no two tests of the one test binary
/// get the same value, whatever their module.
pub fn unique() -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{:x}{:08x}{n}", std::process::id(), nanos)
}

/// Whether a launch ran to its end: exit 0 when every bucket it reports is
/// a VERDICT, exit 3 when one is a DRAFT (`tunectl launch`'s contract).
pub fn ran_to_the_end(code: Option<i32>, stderr: &str) -> bool {
    let drafts = stderr.contains("[DRAFT]");
    // A baseline that failed its first run and its re-run is an error of
    // the study: the launch ran to its end and exits 1 saying so.
    let baseline_fails = stderr.contains("error: the baseline fails reproducibly");
    code == Some(if baseline_fails {
        1
    } else if drafts {
        3
    } else {
        0
    })
}

/// Whether a launch ran to its end, read from its JSON outcome
/// (`tunectl.launch/1`): exit 0 with every bucket a VERDICT, exit 3 with
/// a DRAFT among them, or exit 1 where a baseline fails reproducibly (an
/// error of the study, found by running it to its end).
pub fn finished(code: Option<i32>, doc: &serde_json::Value) -> bool {
    let buckets = doc["buckets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let because = |code: &str| {
        buckets.iter().any(|b| {
            b["level_because"]
                .as_array()
                .is_some_and(|l| l.iter().any(|c| c == code))
        })
    };
    let drafts = buckets.iter().any(|b| b["level"] == "draft");
    let want = if because("baseline_fails_reproducibly") {
        (1, "failed")
    } else if drafts {
        (3, "draft")
    } else {
        (0, "verdict")
    };
    code == Some(want.0) && doc["outcome"] == want.1 && doc["exit_code"] == want.0
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
    fake_tool(dir, "nvidia-smi")
}

/// `dir/bin/<name>`: the FAKE tests/fixtures/fake-<name> (`nvidia-smi`,
/// `amd-smi`, `rocm-smi` or `xpu-smi`; each documents its `FAKE_*`
/// variables in its header); the `bin` directory.
pub fn fake_tool(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    let tool = bin.join(name);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/fake-{name}")),
        &tool,
    )
    .unwrap_or_else(|e| panic!("copy the fake {name}: {e}"));
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    bin
}

/// `dir/sysfs`: a FAKE sysfs tree for `TUNECTL_FAKE_SYSFS` with one DRM card
/// per `(vendor, device, driver)` (`class/drm/cardN/device` → a PCI device
/// directory with `vendor`, `device` and a `driver` link), so that the
/// probe never reads this machine's `/sys`.
pub fn fake_sysfs(dir: &Path, cards: &[(&str, &str, &str)]) -> PathBuf {
    use std::os::unix::fs::symlink;
    let root = dir.join("sysfs");
    std::fs::create_dir_all(root.join("class/drm")).expect("mkdir class/drm");
    for (n, (vendor, device, driver)) in cards.iter().enumerate() {
        let dev = root.join(format!("devices/pci0000:00/0000:00:{n:02x}.0"));
        let drv = root.join("bus/pci/drivers").join(driver);
        std::fs::create_dir_all(&dev).expect("mkdir device");
        std::fs::create_dir_all(&drv).expect("mkdir driver");
        std::fs::write(dev.join("vendor"), format!("{vendor}\n")).expect("vendor");
        std::fs::write(dev.join("device"), format!("{device}\n")).expect("device");
        symlink(&drv, dev.join("driver")).expect("driver link");
        let card = root.join(format!("class/drm/card{n}"));
        std::fs::create_dir_all(&card).expect("mkdir card");
        symlink(&dev, card.join("device")).expect("device link");
    }
    root
}

/// Make a FIFO at `path` (nothing ever writes to it: an open for reading
/// that blocks waits forever).
pub fn mkfifo(path: &Path) {
    let c =
        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    // SAFETY: mkfifo(3) on a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(
        rc,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// `$PATH` with `dir` first.
pub fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Build the quickstart workload (examples/quickstart/main.rs, release,
/// in a target dir the test binaries share) into `dir/bin/quickstart`, as
/// `examples/quickstart/run.sh` lays it out.
pub fn quickstart_workload(dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quickstart-example");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--release",
            "--example",
            "quickstart",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(root)
        .status()
        .expect("cargo build");
    assert!(status.success(), "building the quickstart example failed");
    std::fs::create_dir_all(dir.join("bin")).expect("bin dir");
    std::fs::copy(
        target.join("release/examples/quickstart"),
        dir.join("bin/quickstart"),
    )
    .expect("copy workload");
}

/// The python of an example's virtual environment: runs
/// `examples/<name>/setup.sh` (which installs pinned wheels from PyPI into
/// `.cache/` once; `scripts/test.sh` runs it before the tests) and returns
/// the path it prints. Fails the test, with the script's stderr, when it
/// cannot.
pub fn example_python(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let setup = root.join("examples").join(name).join("setup.sh");
    let out = std::process::Command::new(&setup)
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", setup.display()));
    assert!(
        out.status.success(),
        "{} failed ({}): it installs the example's Python packages from PyPI into \
         .cache/, which needs python3 with venv and network access to PyPI the \
         first time. Its stderr:\n{}",
        setup.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
