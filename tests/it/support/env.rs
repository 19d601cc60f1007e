//! [`Env`]: one test's world on the local host. A temp directory holding a
//! study directory (`study/study.yaml` and the [FAKE trial
//! program](super::fake)), a ledger (`ledger/`, or any URL), work
//! directories, and the outputs of every command run, which all run the
//! tunectl binary with a clean environment and a time limit.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::fake::{self, Run};
use super::{finished, ledger_files};

/// The longest any command may run before it is killed and the test fails:
/// a guard against hangs, far above what a command of these tests takes.
const LIMIT: Duration = Duration::from_secs(120);

/// Variables of the outer environment that would change what tunectl or a
/// fake does; no command of a test inherits them.
const OUTER_VARS: [&str; 31] = [
    // The report's width (a test sets it when it means to).
    "COLUMNS",
    "TUNECTL_LEDGER",
    "TUNECTL_WORKDIR",
    "TUNECTL_LOG",
    "TUNECTL_LEASE_TTL",
    "TUNECTL_LEDGER_INDEX_MIN",
    "TUNECTL_KNOBS",
    "TUNECTL_KNOB_MODE",
    "TUNECTL_CELL",
    "AWS_ENDPOINT_URL",
    // tests/fixtures/fake-nvidia-smi's settings.
    "FAKE_GPU_NAME",
    "FAKE_GPU_COUNT",
    "FAKE_GPU_MEMORY_MIB",
    "FAKE_DRIVER",
    "FAKE_CUDA",
    "FAKE_NVIDIA_SMI_FAIL",
    // The FAKE amd-smi, rocm-smi and xpu-smi (tests/fixtures), and the
    // probe's fake sysfs root.
    "FAKE_AMD_GPU_NAME",
    "FAKE_AMD_GPU_COUNT",
    "FAKE_AMD_VRAM_MB",
    "FAKE_AMD_DRIVER",
    "FAKE_ROCM",
    "FAKE_AMD_SMI_LAYOUT",
    "FAKE_AMD_SMI_FAIL",
    "FAKE_AMD_SMI_GARBAGE",
    "FAKE_ROCM_SMI_FAIL",
    "FAKE_XPU_GPU_NAME",
    "FAKE_XPU_GPU_COUNT",
    "FAKE_XPU_MEMORY_MIB",
    "FAKE_XPU_DRIVER",
    "FAKE_XPU_SMI_FAIL",
    "TUNECTL_FAKE_SYSFS",
];

/// The address space of a command run by [`Env::run_bounded`] (virtual
/// memory, thread stacks and malloc arenas included): far above what
/// tunectl needs, far below a read of `/dev/zero` without end.
pub const BOUNDED_MEMORY: u64 = 2 << 30;

/// `program` with the outer environment's tunectl, AWS endpoint and fake
/// settings removed ([`OUTER_VARS`], [`fake::VARS`]): what every command of
/// the tests starts from, through [`Env::command`] or [`tunectl_command`].
pub fn clean_command(program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new(program);
    for var in OUTER_VARS.iter().chain(fake::VARS.iter()) {
        c.env_remove(var);
    }
    c
}

/// The tunectl binary with the clean environment of [`clean_command`], for
/// a test that keeps its own directories rather than an [`Env`].
pub fn tunectl_command() -> Command {
    clean_command(env!("CARGO_BIN_EXE_tunectl"))
}

/// [`tunectl_command`] in `dir`, as an `assert_cmd` command (for its
/// `timeout`).
pub fn tunectl_in(dir: &Path) -> assert_cmd::Command {
    let mut c = assert_cmd::Command::from_std(tunectl_command());
    c.current_dir(dir);
    c
}

pub struct Env {
    tmp: tempfile::TempDir,
    /// `--ledger` of every command that takes one.
    ledger: String,
    /// Environment for every command, after the clean-up.
    vars: Vec<(String, String)>,
    /// Strings no command may print (credentials given to the commands).
    secrets: Vec<String>,
    /// Commands run so far: names their output files.
    outputs: AtomicUsize,
}

/// What a command did.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Out {
    /// Everything, for a failed assertion's message.
    pub fn text(&self) -> String {
        format!(
            "exit {:?} after {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.took, self.stdout, self.stderr
        )
    }

    /// A launch's JSON outcome (`tunectl.launch/1`): what
    /// [`Env::launch_cmd`] asks for unless the test chose a format.
    pub fn launch_doc(&self) -> Json {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("no launch JSON on stdout ({e}):\n{}", self.text()))
    }

    /// A launch's JSON `outcome` is `outcome`, and its buckets' levels
    /// pass `levels`.
    pub fn assert_outcome(&self, outcome: &str, levels: impl Fn(&[&str]) -> bool) {
        let doc = self.launch_doc();
        assert_eq!(doc["outcome"], outcome, "{}", self.text());
        let found: Vec<&str> = doc["buckets"]
            .as_array()
            .unwrap_or_else(|| panic!("no buckets in the launch JSON:\n{}", self.text()))
            .iter()
            .filter_map(|b| b["level"].as_str())
            .collect();
        assert!(levels(&found), "levels {found:?}:\n{}", self.text());
    }

    /// One count of a launch's JSON `summary` (`ran`, `ok`, `lost`, ...).
    pub fn count(&self, key: &str) -> u64 {
        let doc = self.launch_doc();
        doc["summary"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("no summary.{key} in {doc}"))
    }

    /// Several counts of a launch's JSON `summary`, in the order asked.
    pub fn counts(&self, keys: &[&str]) -> Vec<u64> {
        keys.iter().map(|k| self.count(k)).collect()
    }

    /// Whether a launch ran to its end, read from its JSON outcome
    /// ([`finished`]).
    pub fn ran_to_the_end(&self) -> bool {
        finished(self.code, &self.launch_doc())
    }

    /// The number of trials a launch ran: its JSON `summary.ran` when it
    /// printed its outcome as JSON, else its `ran N trials` line.
    pub fn ran(&self) -> usize {
        match serde_json::from_str::<Json>(&self.stdout) {
            Ok(doc) => doc["summary"]["ran"]
                .as_u64()
                .unwrap_or_else(|| panic!("no summary.ran in {doc}"))
                as usize,
            Err(_) => super::ran(&self.stderr),
        }
    }
}

/// A command started in the background (see [`Env::spawn`]).
pub struct Running {
    pub child: Child,
    files: (PathBuf, PathBuf),
    started: Instant,
}

impl Running {
    /// Send `signal` to the command.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) on a child this test spawned; no memory is involved.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }
}

impl Env {
    /// `study` written as `study/study.yaml` beside the fake, in a fresh
    /// temp directory; the ledger is `ledger/` there.
    pub fn new(study: &str) -> Env {
        Env::in_dir(tempfile::tempdir().expect("tempdir"), study)
    }

    /// Like [`Env::new`], under cargo's target/tmp: for an Env kept in a
    /// static, which is never dropped (so it does not litter $TMPDIR).
    pub fn in_target_tmp(prefix: &str, study: &str) -> Env {
        let tmp = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir in target/tmp");
        Env::in_dir(tmp, study)
    }

    fn in_dir(tmp: tempfile::TempDir, study: &str) -> Env {
        let env = Env {
            ledger: tmp.path().join("ledger").display().to_string(),
            tmp,
            vars: Vec::new(),
            secrets: Vec::new(),
            outputs: AtomicUsize::new(0),
        };
        std::fs::create_dir(env.study_dir()).expect("mkdir study");
        fake::write(&env.study_dir());
        env.write_study(study);
        env
    }

    /// The ledger at `url` instead of `ledger/`.
    pub fn with_ledger(mut self, url: String) -> Env {
        self.ledger = url;
        self
    }

    /// `name=value` in the environment of every command.
    pub fn with_var(mut self, name: &str, value: &str) -> Env {
        self.vars.push((name.to_string(), value.to_string()));
        self
    }

    /// Fail any command that prints `secret`.
    pub fn with_secret(mut self, secret: &str) -> Env {
        self.secrets.push(secret.to_string());
        self
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub fn study_dir(&self) -> PathBuf {
        self.path().join("study")
    }

    pub fn study(&self) -> PathBuf {
        self.study_dir().join("study.yaml")
    }

    /// The study file's path as an argument.
    pub fn study_arg(&self) -> String {
        self.study().display().to_string()
    }

    /// The local ledger directory (`ledger/`, whatever [`Env::ledger_url`]).
    pub fn ledger(&self) -> PathBuf {
        self.path().join("ledger")
    }

    /// What commands get as `--ledger`.
    pub fn ledger_url(&self) -> &str {
        &self.ledger
    }

    pub fn work(&self) -> PathBuf {
        self.path().join("work")
    }

    pub fn write_study(&self, text: &str) {
        std::fs::write(self.study(), text).expect("write study");
    }

    /// Write `text` to `name` in the temp directory; its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }

    /// The tunectl binary in the temp directory, its environment cleaned of
    /// the outer one's tunectl, AWS and fake settings.
    pub fn tunectl(&self) -> Command {
        self.command(env!("CARGO_BIN_EXE_tunectl"))
    }

    /// `program` (one that runs tunectl, e.g. util-linux `script`) in the
    /// temp directory, with the environment of [`Env::tunectl`].
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = clean_command(program);
        c.current_dir(self.path()).stdin(Stdio::null());
        for (k, v) in &self.vars {
            c.env(k, v);
        }
        c
    }

    /// Start `cmd` with its output going to files.
    pub fn spawn(&self, mut cmd: Command) -> Running {
        let n = self.outputs.fetch_add(1, Ordering::SeqCst);
        let dir = self.path().join("outputs");
        std::fs::create_dir_all(&dir).expect("mkdir outputs");
        let files = (
            dir.join(format!("{n}.stdout")),
            dir.join(format!("{n}.stderr")),
        );
        let started = Instant::now();
        let child = cmd
            .stdout(std::fs::File::create(&files.0).expect("stdout file"))
            .stderr(std::fs::File::create(&files.1).expect("stderr file"))
            .spawn()
            .expect("spawn tunectl");
        Running {
            child,
            files,
            started,
        }
    }

    /// Wait for a spawned command (killed past the time limit, which fails
    /// the test); its output must not show a secret.
    pub fn finish(&self, mut running: Running) -> Out {
        let status = loop {
            if let Some(s) = running.child.try_wait().expect("wait") {
                break Some(s);
            }
            if running.started.elapsed() > LIMIT {
                let _ = running.child.kill();
                let _ = running.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let out = Out {
            code: status.and_then(|s| s.code()),
            stdout: std::fs::read_to_string(&running.files.0).unwrap_or_default(),
            stderr: std::fs::read_to_string(&running.files.1).unwrap_or_default(),
            took: running.started.elapsed(),
        };
        assert!(
            status.is_some(),
            "command ran past {LIMIT:?}:\n{}",
            out.text()
        );
        self.assert_no_secret(&out.stdout, "stdout");
        self.assert_no_secret(&out.stderr, "stderr");
        out
    }

    /// Run `cmd` to its end.
    pub fn run(&self, cmd: Command) -> Out {
        self.finish(self.spawn(cmd))
    }

    /// Run `cmd` to its end within `limit` and [`BOUNDED_MEMORY`]: killed
    /// past the time (which fails the test, instead of a hang), its address
    /// space capped (`RLIMIT_AS`, so a read without end fails at once
    /// instead of taking the machine's memory). Its output, and its peak
    /// resident memory in bytes (`ru_maxrss` of its `wait4`).
    pub fn run_bounded(&self, mut cmd: Command, limit: Duration) -> (Out, u64) {
        use std::os::unix::process::CommandExt;
        let cap = libc::rlimit {
            rlim_cur: BOUNDED_MEMORY,
            rlim_max: BOUNDED_MEMORY,
        };
        // SAFETY: setrlimit(2) is async-signal-safe and touches no memory
        // of the parent; `cap` is copied into the closure.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_AS, &cap) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let running = self.spawn(cmd);
        let pid = libc::pid_t::try_from(running.child.id()).expect("a pid fits pid_t");
        let mut status: libc::c_int = 0;
        // SAFETY: a zeroed rusage is a valid value of that plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let mut killed = false;
        loop {
            // SAFETY: wait4(2) on this test's own child, with pointers to
            // locals that outlive the call.
            let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
            if rc == pid {
                break;
            }
            assert_eq!(rc, 0, "wait4: {}", std::io::Error::last_os_error());
            if running.started.elapsed() > limit && !killed {
                running.signal(libc::SIGKILL);
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = Out {
            code: (libc::WIFEXITED(status)).then(|| libc::WEXITSTATUS(status)),
            stdout: std::fs::read_to_string(&running.files.0).unwrap_or_default(),
            stderr: std::fs::read_to_string(&running.files.1).unwrap_or_default(),
            took: running.started.elapsed(),
        };
        assert!(!killed, "command ran past {limit:?}:\n{}", out.text());
        self.assert_no_secret(&out.stdout, "stdout");
        self.assert_no_secret(&out.stderr, "stderr");
        // Linux gives ru_maxrss in KiB.
        let peak = u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024;
        (out, peak)
    }

    /// `tunectl ARGS` to its end.
    pub fn tunectl_run<S: AsRef<OsStr>>(&self, args: &[S]) -> Out {
        let mut c = self.tunectl();
        c.args(args);
        self.run(c)
    }

    /// `tunectl ARGS`, which must exit 0; its stdout.
    pub fn tunectl_ok<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let out = self.tunectl_run(args);
        assert_eq!(
            out.code,
            Some(0),
            "tunectl {:?} failed:\n{}",
            args.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
            out.text()
        );
        out.stdout
    }

    pub fn assert_no_secret(&self, text: &str, what: &str) {
        for s in &self.secrets {
            assert!(
                !text.contains(s.as_str()),
                "a credential shows in {what}:\n{text}"
            );
        }
    }

    /// `tunectl launch STUDY --ledger LEDGER --workdir work EXTRA`, with
    /// `--progress quiet` unless `extra` chooses a progress mode, and
    /// `--format json` (the outcome on stdout, [`Out::launch_doc`]) unless
    /// it chooses a format.
    pub fn launch_cmd(&self, extra: &[&str]) -> Command {
        let mut c = self.tunectl();
        c.arg("launch")
            .arg(self.study())
            .args(["--ledger", &self.ledger, "--workdir"])
            .arg(self.work());
        if !extra.contains(&"--progress") {
            c.args(["--progress", "quiet"]);
        }
        if !extra.iter().any(|a| *a == "--format" || *a == "--json") {
            c.args(["--format", "json"]);
        }
        c.args(extra);
        c
    }

    pub fn launch(&self, extra: &[&str]) -> Out {
        self.run(self.launch_cmd(extra))
    }

    /// A launch that must run to its end (see [`finished`]), read from
    /// its JSON outcome.
    pub fn launch_ok(&self, extra: &[&str]) -> Out {
        let out = self.launch(extra);
        assert!(
            finished(out.code, &out.launch_doc()),
            "launch failed:\n{}",
            out.text()
        );
        out
    }

    /// A launch that must end with every bucket a VERDICT (exit 0).
    pub fn launch_verdict(&self, extra: &[&str]) -> Out {
        let out = self.launch(extra);
        assert_eq!(out.code, Some(0), "launch failed:\n{}", out.text());
        out.assert_outcome("verdict", |levels| levels.iter().all(|l| *l == "verdict"));
        out
    }

    /// A launch that must end with a bucket that is no VERDICT (exit 3).
    pub fn launch_draft(&self, extra: &[&str]) -> Out {
        let out = self.launch(extra);
        assert_eq!(
            out.code,
            Some(3),
            "expected exit 3 (drafts):\n{}",
            out.text()
        );
        out.assert_outcome("draft", |levels| levels.contains(&"draft"));
        assert!(
            out.stderr.contains("not every bucket is a VERDICT"),
            "{}",
            out.text()
        );
        out
    }

    /// `tunectl report STUDY --format FORMAT --ledger LEDGER`, which must
    /// exit 0; its stdout.
    pub fn report(&self, study: &str, format: &str) -> String {
        self.tunectl_ok(&[
            "report",
            study,
            "--format",
            format,
            "--ledger",
            &self.ledger,
        ])
    }

    pub fn report_json(&self) -> Json {
        let text = self.report(&self.study_arg(), "json");
        serde_json::from_str(&text).expect("report JSON")
    }

    /// The rows (`classes`) of `tunectl status STUDY --format json
    /// --ledger LEDGER`, one per host class.
    pub fn status_json(&self) -> Json {
        let text = self.tunectl_ok(&[
            "status",
            &self.study_arg(),
            "--format",
            "json",
            "--ledger",
            &self.ledger,
        ]);
        let doc: Json = serde_json::from_str(&text).expect("status JSON");
        assert_eq!(doc["schema"], "tunectl.status/1", "{doc}");
        doc["classes"].clone()
    }

    /// The fake's runs, in order (see [`fake::runs`]).
    pub fn runs(&self) -> Vec<Run> {
        fake::runs(&self.study_dir())
    }

    /// Attempt records of `study` in the local ledger, by trial key.
    pub fn attempts(&self, study: &str) -> BTreeMap<String, Vec<Json>> {
        ledger_files::attempts(&self.ledger(), study)
    }

    /// Attempt records of `study` in the local ledger, all of them.
    pub fn all_attempts(&self, study: &str) -> Vec<Json> {
        self.attempts(study).into_values().flatten().collect()
    }
}
