//! A stable-Rust fuzzer for every input tunectl reads (run with
//! `benches/fuzz.sh` or `just fuzz`; see docs/fuzzing.md).
//!
//! Each target feeds bytes, in-process, to the public functions the binary
//! uses: study and inventory files, trial result JSON (and tolerance
//! files), tuned files, ledger records and the index, command templates.
//! Inputs come from seed corpora (examples/, inventories/, templates/,
//! tests/fixtures/, tests/fixtures/fuzz/) mutated at random, and from
//! structure-aware generators (deep nesting, huge numbers, NUL bytes, long
//! strings, unicode, control characters).
//!
//! Findings:
//! - **panic**: caught with `catch_unwind`; the input is saved at once.
//! - **hang**: one execution that used more than 1 s of CPU, or did not
//!   return within 10 s (what it waits on is no CPU); a watchdog thread
//!   saves the input and ends the child process. CPU time, not wall time,
//!   so that a fuzzer at low priority on a busy machine does not report
//!   the time it was not scheduled as a hang.
//! - **abort**: the child process dies (stack overflow, `abort`); the
//!   parent saves the input the child had in hand (kept in a memory-mapped
//!   file before every execution) and starts a new child.
//!
//! Known crashes that another change fixes are counted as `known` (by
//! their panic message or abort text), saved once, and not reported as new
//! findings; `--skip-known` (the default) also does not run inputs that
//! would abort the child on a known crash (deep nesting).
//!
//! Usage: `fuzz [TARGET|all] [--seconds N] [--findings DIR] [--seed N]
//! [--run-known]`, or `fuzz --replay TARGET FILE`.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "fuzz/targets.rs"]
mod targets;
use targets::TARGETS;

/// One execution. `selftest` checks the fuzzer itself: an input starting
/// with `panic`, `hang` or `abort` does that.
fn run_target(target: &str, data: &[u8]) {
    if target != "selftest" {
        return targets::run_target(target, data);
    }
    if data.starts_with(b"panic") {
        panic!("selftest panic");
    } else if data.starts_with(b"hang") {
        // Busy for 5 s: a hang by the CPU it uses.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            std::hint::spin_loop();
        }
    } else if data.starts_with(b"abort") {
        std::process::abort();
    }
}

const MAX_INPUT: usize = 256 * 1024;
const HANG_LIMIT: Duration = Duration::from_secs(1);
/// An execution that uses little CPU and has not returned in this long
/// waits on something: a hang too.
const HANG_WALL_LIMIT: Duration = Duration::from_secs(10);

/// CPU time this process has used (every thread; the watchdog's share is
/// a few microseconds per wake-up).
fn process_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}
const EXIT_HANG: i32 = 86;

// ------------------------------------------------------------ known crashes

/// Crashes another change fixes: (name, text of the panic message or of
/// the abort's stderr that identifies it).
const KNOWN: &[(&str, &str)] = &[
    ("duration overflow (timeout: 1e308)", "Duration"),
    (
        "deep YAML/JSON nesting overflows the stack",
        "overflowed its stack",
    ),
    ("NUL byte", "nul byte"),
    ("extreme float log range", "log"),
    ("huge count", "capacity overflow"),
    ("huge count", "memory allocation"),
];

fn known(message: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|(_, needle)| message.contains(needle))
        .map(|(name, _)| *name)
}

/// Inputs that would abort the child on a known crash (not caught by
/// `catch_unwind`), skipped with `--skip-known`.
fn would_abort_known(data: &[u8]) -> bool {
    let mut depth = 0usize;
    let mut max = 0usize;
    for &b in data {
        match b {
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    // YAML block nesting: by indentation, or by `- - - -` on one line.
    let indent = data
        .split(|b| *b == b'\n')
        .map(|l| l.iter().take_while(|b| **b == b' ' || **b == b'-').count())
        .max()
        .unwrap_or(0);
    max > 1000 || indent > 1000
}

// ------------------------------------------------------------ inputs

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const TOKENS: &[&str] = &[
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    "{{ x }}",
    "{% if x %}",
    "{% endif %}",
    "[",
    "]",
    "{",
    "}",
    ": ",
    "- ",
    "\n",
    "\n  ",
    "\n    ",
    "\"",
    "'",
    "`",
    "$(",
    "$((",
    "${",
    "\\",
    "#",
    "<<EOF\n",
    "\nEOF\n",
    "&a ",
    "*a",
    "!!str ",
    "~",
    "null",
    "true",
    "no",
    ".inf",
    "-.inf",
    ".nan",
    "NaN",
    "1e308",
    "-1e308",
    "1e-308",
    "5e-324",
    "0x7fffffffffffffff",
    "-0",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "1000000000",
    "\0",
    "\u{7f}",
    "\u{1b}[2J",
    "\r",
    "\t",
    "é",
    "😀",
    "\u{202e}",
    "\u{feff}",
    "kind: ",
    "categorical",
    "int",
    "float",
    "bool",
    "values: ",
    "min: ",
    "max: ",
    "count: ",
    "step: ",
    "scale: log",
    "scale: pow2",
    "default: ",
    "timeout: ",
    "command: ",
    "knobs:",
    "cells:",
    "trial:",
    "objective:",
    "metric: ",
    "better: higher",
    "strategy:",
    "fidelity:",
    "min_budget: ",
    "max_budget: ",
    "eta: ",
    "measurement:",
    "repeats: ",
    "hosts:",
    "transport: ",
    "ssh",
    "slurm",
    "local",
    "partition: ",
    "sbatch_args: ",
    "schema: 1",
    "buckets:",
    "bounds:",
    "domains:",
    "\"metrics\"",
    "\"digest\"",
    "1.5",
    "[1, 2, 3]",
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    let rounds = 1 + rng.below(8);
    for _ in 0..rounds {
        let len = input.len();
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = b"\0\xff\n\"'{[:- #$`\\0189"[rng.below(18)];
            }
            2 | 3 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let i = rng.below(len + 1);
                input.splice(i..i, t.iter().copied());
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                input.drain(i..i + n);
            }
            5 if len > 0 => {
                // Duplicate a range (repetition, nesting).
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(256));
                let piece: Vec<u8> = input[i..i + n].to_vec();
                let most = if rng.chance(8) { 200 } else { 4 };
                let times = 1 + rng.below(most);
                for _ in 0..times {
                    input.splice(i..i, piece.iter().copied());
                }
            }
            6 if !corpus.is_empty() => {
                // Splice a piece of another seed.
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let b = a + rng.below(other.len() - a + 1);
                    let i = rng.below(len + 1);
                    input.splice(i..i, other[a..b].iter().copied());
                }
            }
            7 => {
                // Replace a number with an extreme one.
                if let Some(i) = (0..len)
                    .map(|_| rng.below(len))
                    .find(|&i| input[i].is_ascii_digit())
                {
                    let mut j = i;
                    while j < input.len() && (input[j].is_ascii_digit() || input[j] == b'.') {
                        j += 1;
                    }
                    let t = [
                        "1e308",
                        "99999999999999999999",
                        "-5",
                        "0",
                        "4294967296",
                        "1e-320",
                    ][rng.below(6)];
                    input.splice(i..j, t.bytes());
                }
            }
            8 if len > 0 => {
                let i = rng.below(len);
                let c = ['\u{0}', '\u{1}', 'é', '😀', '\u{2028}', '\u{ffff}'][rng.below(6)];
                let mut buf = [0u8; 4];
                input.splice(i..i, c.encode_utf8(&mut buf).bytes());
            }
            _ => {
                let i = rng.below(len + 1);
                let n = rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(i..i, bytes);
            }
        }
    }
    input.truncate(MAX_INPUT);
}

/// Structure-aware inputs: valid-looking documents with one extreme part.
fn generate(rng: &mut Rng, target: &str) -> Vec<u8> {
    let extreme = || -> Vec<String> {
        vec![
            "1e308".into(),
            "-1e308".into(),
            "5e-324".into(),
            "9223372036854775807".into(),
            "-9223372036854775808".into(),
            "18446744073709551616".into(),
            ".inf".into(),
            ".nan".into(),
            "\"\\0\"".into(),
            format!("\"{}\"", "x".repeat(100_000)),
            "\"\\u202e\\u0000\\n\\r\\t\\e\"".into(),
            "\"😀é\"".into(),
            "[]".into(),
            "{}".into(),
            "~".into(),
        ]
    };
    let e = extreme();
    let pick = |rng: &mut Rng| e[rng.below(e.len())].clone();
    let depth = [10, 100, 1000, 20_000][rng.below(4)];
    match (target, rng.below(4)) {
        (_, 0) if rng.chance(2) => {
            // Deep block nesting (by indentation).
            let mut t = String::from("name: x\ncontext:\n");
            for i in 1..depth.min(20_000) {
                if t.len() + i > MAX_INPUT {
                    break;
                }
                t.push_str(&" ".repeat(i));
                t.push_str("a:\n");
            }
            t.into_bytes()
        }
        (_, 0) => {
            // Deep flow nesting.
            let open = if rng.chance(2) { "[" } else { "{a: " };
            let close = if open == "[" { "]" } else { "}" };
            format!("name: {}{}\n", open.repeat(depth), close.repeat(depth)).into_bytes()
        }
        ("study", _) => {
            let knob = match rng.below(5) {
                0 => format!("{{kind: float, min: {}, max: {}, count: {}, scale: log, default: 1}}", pick(rng), pick(rng), pick(rng)),
                1 => format!("{{kind: int, min: {}, max: {}, step: {}, default: {}}}", pick(rng), pick(rng), pick(rng), pick(rng)),
                2 => format!("{{kind: categorical, values: [a, {}], default: a}}", pick(rng)),
                3 => format!("{{kind: int, min: 1, max: {}, scale: pow2, default: 1}}", pick(rng)),
                _ => "{kind: bool, default: false}".to_string(),
            };
            format!(
                "name: f\nknobs:\n  x: {knob}\ncells:\n  n: [1, {}]\ntrial: {{command: \"run {{{{ x }}}} {{{{ n }}}}\", timeout: {}}}\nobjective: {{metric: t, better: higher}}\nmeasurement: {{repeats: {}, cool_wait: {}}}\nstrategy: {{kind: random, count: {}}}\n",
                pick(rng), pick(rng), pick(rng), pick(rng), pick(rng)
            )
            .into_bytes()
        }
        ("inventory", _) => format!(
            "hosts:\n  - name: a\n    transport: slurm\n    partition: {}\n    slots: {}\n    poll_interval: {}\n    max_jobs_in_flight: {}\n",
            pick(rng), pick(rng), pick(rng), pick(rng)
        )
        .into_bytes(),
        ("result", _) => {
            let mut v = vec![rng.below(3) as u8];
            v.extend(format!("{{\"metrics\": {{\"t\": [{}, {}]}}, \"digest\": {}}}", pick(rng).trim_matches('"'), pick(rng).trim_matches('"'), pick(rng)).bytes());
            v
        }
        ("template", _) => {
            let t = TOKENS[rng.below(TOKENS.len())];
            format!("run {t}{{{{ v0 }}}}{t} \"{{{{ v1 }}}}\"\u{1f}{}\u{1f}$(touch x)`y`'\"\n", pick(rng)).into_bytes()
        }
        ("ledger", _) => {
            let mut v = vec![rng.below(6) as u8];
            v.extend(format!("{{\"schema\": {}, \"study_id\": \"s\", \"attempts\": [{}], \"strings\": [{}], \"values\": [{}]}}", pick(rng), pick(rng), pick(rng), pick(rng)).bytes());
            v
        }
        _ => format!(
            "schema: 1\nstudy: s\nspec_hash: h\nhost_class: hc\nclass_label: l\nbaseline: {{x: {}}}\ndomains: {{x: {{kind: int, min: {}, max: {}, step: {}}}}}\nbuckets:\n  - {{key: k, label: l, bounds: {{n: {{min: {}, max: {}}}}}, knobs: {{x: {}}}, winner: null, level: verdict, decision: d}}\n",
            pick(rng), pick(rng), pick(rng), pick(rng), pick(rng), pick(rng), pick(rng)
        )
        .into_bytes(),
    }
}

fn read_dir_files(dir: &Path, out: &mut Vec<Vec<u8>>, want: &dyn Fn(&Path) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            // The fuzz fixtures are added per target (tests/fixtures/fuzz/
            // <target>); known crashes are not seeds.
            if !p.ends_with("tests/fixtures/fuzz") {
                read_dir_files(&p, out, want);
            }
        } else if want(&p)
            && let Ok(b) = std::fs::read(&p)
        {
            out.push(b);
        }
    }
}

/// Seed inputs of a target, from the repository's files and built here.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let yaml = |p: &Path| p.extension().is_some_and(|e| e == "yaml" || e == "yml");
    match target {
        "study" | "inventory" | "tuned" => {
            for d in ["examples", "inventories", "templates", "tests/fixtures"] {
                read_dir_files(&root.join(d), &mut out, &yaml);
            }
            out.push(tuned_seed().into_bytes());
        }
        "template" => {
            for d in ["templates", "tests/fixtures", "examples"] {
                read_dir_files(&root.join(d), &mut out, &|p: &Path| {
                    p.extension().is_some_and(|e| e == "sh" || e == "yaml")
                });
            }
            out.push(b"run {{ v0 }} \"--v={{ v0 }}\" '{{ v1 }}' $(dirname {{ v2 }})\x1f$(touch pwned)\x1f'\"".to_vec());
        }
        "result" => {
            for s in [
                "\0{\"metrics\": {\"t\": [1, 2, 3]}, \"digest\": \"abc\"}",
                "\0{\"metrics\": {\"t\": 1.5, \"p99\": 2}}",
                "\x011.0 2.0\n3.5e-3\n",
                "\x02CUDA out of memory. Tried to allocate 2.00 GiB\n",
                "\x02torch._dynamo.exc.BackendCompilerFailed: triton\n",
            ] {
                out.push(s.as_bytes().to_vec());
            }
        }
        "ledger" => {
            for (mode, text) in ledger_seeds() {
                let mut v = vec![mode];
                v.extend(text.into_bytes());
                out.push(v);
            }
        }
        "selftest" => {
            for s in ["ok", "panic", "hang", "abort"] {
                out.push(s.as_bytes().to_vec());
            }
        }
        _ => {}
    }
    read_dir_files(
        &root.join("tests/fixtures/fuzz").join(target),
        &mut out,
        &|_| true,
    );
    out.retain(|s| s.len() <= MAX_INPUT);
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}

fn tuned_seed() -> String {
    "schema: 1\nstudy: s\nspec_hash: \"h\"\nhost_class: hc-1\nclass_label: l\nbaseline:\n  mode: base\ndomains:\n  mode:\n    kind: categorical\n    values: [base, fast]\nbuckets:\n  - key: k\n    label: \"n ∈ [1, 2)\"\n    bounds:\n      \"n\":\n        min: 1.0\n        max: 2.0\n    knobs:\n      mode: fast\n    winner: mode=fast\n    level: verdict\n    decision: d\n".to_string()
}

fn ledger_seeds() -> Vec<(u8, String)> {
    let attempt = serde_json::json!({
        "schema": 1, "tunectl_version": "t", "study_id": "s", "spec_hash": "h",
        "trial_key": "k", "attempt_id": "a",
        "config": {"mode": "fast"}, "config_label": "mode=fast", "config_index": 1,
        "is_baseline": false, "cell": {"n": 1}, "cell_label": "n=1",
        "cell_index": 0, "repeat": 0, "fidelity": null, "host": "h1", "host_class": "hc",
        "fingerprint": "fp", "slot": 0, "started_at": "", "finished_at": "", "duration_s": 0.0,
        "run_s": null, "warmup_runs": 0, "status": "ok", "failure": null, "exit": null,
        "metrics": {"t": [1.0, 2.0]}, "digest": "d",
        "outputs": {}, "command": "", "stdout_tail": "", "stderr_tail": "",
    });
    let study = serde_json::json!({
        "schema": 1, "tunectl_version": "t", "study_id": "s", "spec_hash": "h",
        "spec": {"objective": {"name": "t", "unit": "ops/s", "better": "higher"},
                 "knobs": [{"name": "mode", "kind": "categorical", "values": ["a", "b"], "default": "a"}],
                 "measurement": {"repeats": 3}, "selection": {"min_improvement": 0.02}},
        "created_at": "",
    });
    let mut out = vec![(1, attempt.to_string()), (2, study.to_string())];
    if let Ok(record) =
        serde_json::from_value::<tunectl::ledger::records::AttemptRecord>(attempt.clone())
    {
        let streams = BTreeMap::new();
        let unresolved = Default::default();
        let view = tunectl::ledger::index::View {
            streams: &streams,
            unresolved: &unresolved,
            voids: vec![("k", "a")],
            corrupt: &[],
            records: vec![&record],
        };
        if let Ok(bytes) = tunectl::ledger::index::encode("s", &view) {
            out.push((0, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    out.push((4, "{\"schema\": 1, \"study_id\": \"s\"}".to_string()));
    out
}

// ------------------------------------------------------------ the child

/// The input being executed, in a memory-mapped file the parent reads
/// when the child dies: 8 bytes of length, then the bytes.
struct Current {
    ptr: *mut u8,
}

unsafe impl Send for Current {}
unsafe impl Sync for Current {}

impl Current {
    fn open(path: &Path) -> Current {
        use std::os::unix::io::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .expect("open the current-input file");
        f.set_len((8 + MAX_INPUT) as u64).expect("size it");
        // SAFETY: a shared mapping of a file we sized; it lives as long as
        // the process.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8 + MAX_INPUT,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "mmap failed");
        Current { ptr: ptr.cast() }
    }

    fn set(&self, data: &[u8]) {
        let n = data.len().min(MAX_INPUT);
        // SAFETY: the mapping holds 8 + MAX_INPUT bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(8), n);
            std::ptr::copy_nonoverlapping((n as u64).to_le_bytes().as_ptr(), self.ptr, 8);
        }
    }

    fn get(&self) -> Vec<u8> {
        let mut len = [0u8; 8];
        // SAFETY: as above.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr, len.as_mut_ptr(), 8);
            let n = (u64::from_le_bytes(len) as usize).min(MAX_INPUT);
            std::slice::from_raw_parts(self.ptr.add(8), n).to_vec()
        }
    }
}

fn read_current(path: &Path) -> Vec<u8> {
    let b = std::fs::read(path).unwrap_or_default();
    if b.len() < 8 {
        return Vec::new();
    }
    let n = (u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as usize).min(b.len() - 8);
    b[8..8 + n].to_vec()
}

fn hash(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(data)[..8])
}

fn save(dir: &Path, kind: &str, data: &[u8], message: &str) -> PathBuf {
    let _ = std::fs::create_dir_all(dir);
    let path = dir.join(format!("{kind}-{}.bin", hash(data)));
    let _ = std::fs::write(&path, data);
    let _ = std::fs::write(path.with_extension("txt"), message);
    path
}

thread_local! {
    static PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn child(target: &str, seconds: f64, dir: &Path, seed: u64, skip_known: bool, use_seeds: bool) {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC.with(|p| *p.borrow_mut() = format!("{msg} at {at}"));
    }));
    let current = Arc::new(Current::open(&dir.join(".current")));
    let execs = Arc::new(AtomicU64::new(0));
    let started_at = Arc::new(Mutex::new((Instant::now(), process_cpu())));
    let running = Arc::new(AtomicBool::new(false));
    {
        // The watchdog: an execution past the limit is a hang.
        let (current, execs, started_at, running) = (
            current.clone(),
            execs.clone(),
            started_at.clone(),
            running.clone(),
        );
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            let mut last = (u64::MAX, Instant::now());
            loop {
                std::thread::sleep(Duration::from_millis(100));
                let n = execs.load(Ordering::Relaxed);
                println!("stat {n}");
                let _ = std::io::stdout().flush();
                if !running.load(Ordering::Relaxed) {
                    continue;
                }
                let (wall, cpu) = started_at
                    .lock()
                    .map(|s| (s.0.elapsed(), process_cpu().saturating_sub(s.1)))
                    .unwrap_or_default();
                let stuck = n == last.0 && last.1.elapsed() > HANG_LIMIT;
                if stuck && ((wall > HANG_LIMIT && cpu > HANG_LIMIT) || wall > HANG_WALL_LIMIT) {
                    let data = current.get();
                    let p = save(
                        &dir,
                        "hang",
                        &data,
                        &format!(
                            "no return after {:.1}s ({:.1}s of CPU; limits: {HANG_LIMIT:?} of CPU, {HANG_WALL_LIMIT:?} in all)",
                            wall.as_secs_f64(),
                            cpu.as_secs_f64()
                        ),
                    );
                    println!("finding hang {}", p.display());
                    let _ = std::io::stdout().flush();
                    std::process::exit(EXIT_HANG);
                }
                if n != last.0 {
                    last = (n, Instant::now());
                }
            }
        });
    }
    let corpus = seeds(target);
    let mut rng = Rng(seed | 1);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut i = 0usize;
    let mut input = Vec::new();
    while Instant::now() < deadline {
        input.clear();
        if use_seeds && i < corpus.len() {
            input.extend_from_slice(&corpus[i]);
        } else if rng.chance(10) {
            input = generate(&mut rng, target);
            if rng.chance(2) {
                mutate(&mut rng, &mut input, &corpus);
            }
        } else {
            input.extend_from_slice(&corpus[rng.below(corpus.len())]);
            mutate(&mut rng, &mut input, &corpus);
        }
        i += 1;
        if skip_known && would_abort_known(&input) {
            println!("skipped");
            continue;
        }
        current.set(&input);
        if let Ok(mut s) = started_at.lock() {
            *s = (Instant::now(), process_cpu());
        }
        running.store(true, Ordering::Relaxed);
        let r = std::panic::catch_unwind(|| run_target(target, &input));
        running.store(false, Ordering::Relaxed);
        execs.fetch_add(1, Ordering::Relaxed);
        if r.is_err() {
            let msg = PANIC.with(|p| p.borrow().clone());
            let (kind, sig) = match known(&msg) {
                Some(k) => ("known", k.to_string()),
                None => ("panic", msg.split(" at ").last().unwrap_or("").to_string()),
            };
            let n = seen.entry(sig.clone()).or_insert(0);
            *n += 1;
            if *n == 1 {
                let p = save(dir, kind, &input, &msg);
                println!("finding {kind} {} {}", p.display(), msg.replace('\n', " "));
            } else {
                println!("repeat {kind}");
            }
        }
    }
    println!("stat {}", execs.load(Ordering::Relaxed));
    println!("done");
}

// ------------------------------------------------------------ the parent

#[derive(Default, Debug)]
struct Tally {
    execs: u64,
    panics: u64,
    hangs: u64,
    aborts: u64,
    known: u64,
    skipped: u64,
    /// Executions that panicked like an earlier finding.
    repeats: u64,
    restarts: u64,
    files: Vec<String>,
}

fn parent(target: &str, seconds: f64, findings: &Path, seed: u64, skip_known: bool) -> Tally {
    let dir = findings.join(target);
    let _ = std::fs::create_dir_all(&dir);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tally = Tally::default();
    let exe = std::env::current_exe().expect("this program");
    let mut round = 0u64;
    let mut unique = std::collections::HashSet::new();
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64();
        if left < 0.2 {
            break;
        }
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([
            "--child",
            target,
            "--seconds",
            &left.to_string(),
            "--findings",
        ])
        .arg(findings)
        .args(["--seed", &(seed.wrapping_add(round * 7919)).to_string()]);
        if !skip_known {
            cmd.arg("--run-known");
        }
        if round > 0 {
            // A restart: the seeds ran already (one of them may be what
            // ended the last child).
            cmd.arg("--no-seeds");
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the fuzzing child");
        let stderr = child.stderr.take().expect("stderr");
        let err_tail = Arc::new(Mutex::new(String::new()));
        let et = err_tail.clone();
        let err_thread = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(mut t) = et.lock() {
                    t.push_str(&line);
                    t.push('\n');
                    if t.len() > 8192 {
                        let cut = t.len() - 4096;
                        let cut = (cut..t.len()).find(|i| t.is_char_boundary(*i)).unwrap_or(0);
                        *t = t[cut..].to_string();
                    }
                }
            }
        });
        let mut execs = 0;
        for line in std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .lines()
            .map_while(Result::ok)
        {
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next()) {
                (Some("stat"), Some(n)) => execs = n.parse().unwrap_or(execs),
                (Some("skipped"), _) => tally.skipped += 1,
                (Some("repeat"), Some(_)) => tally.repeats += 1,
                (Some("finding"), Some(kind)) => {
                    // The same input found again by a restarted child.
                    let file = line.split(' ').nth(2).unwrap_or("").to_string();
                    if !unique.insert(file) {
                        tally.repeats += 1;
                        continue;
                    }
                    match kind {
                        "known" => tally.known += 1,
                        "panic" => tally.panics += 1,
                        "hang" => tally.hangs += 1,
                        _ => {}
                    }
                    eprintln!("  [{target}] {line}");
                    tally.files.push(line);
                }
                _ => {}
            }
        }
        let status = child.wait().expect("wait for the child");
        let _ = err_thread.join();
        tally.execs += execs;
        round += 1;
        if status.success() || status.code() == Some(EXIT_HANG) {
            if status.success() {
                break;
            }
            tally.restarts += 1;
            continue;
        }
        // Died: an abort (or a signal). The input it had is in .current.
        tally.restarts += 1;
        let data = read_current(&dir.join(".current"));
        let text = err_tail.lock().map(|t| t.clone()).unwrap_or_default();
        let kind = if known(&text).is_some() {
            "known"
        } else {
            "abort"
        };
        let p = save(&dir, kind, &data, &format!("{status}\n{text}"));
        if !unique.insert(p.display().to_string()) {
            tally.repeats += 1;
            continue;
        }
        if kind == "known" {
            tally.known += 1;
        } else {
            tally.aborts += 1;
        }
        let line = format!("finding {kind} {} ({status})", p.display());
        eprintln!("  [{target}] {line}");
        tally.files.push(line);
    }
    tally
}

fn main() {
    // `cargo bench` passes `--bench`, and the fuzzer's own children
    // `--child`; `cargo test --all-targets` runs this with neither:
    // building it is the check there, not an hour of fuzzing.
    if !std::env::args().any(|a| a == "--bench" || a == "--child") {
        println!("fuzz: not run under cargo test; `just fuzz` or benches/fuzz.sh runs it");
        return;
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut target = "all".to_string();
    let mut seconds = 60.0;
    let mut findings = PathBuf::from("target/fuzz-findings");
    // A run's own seed unless one is given: runs without `--seed` draw
    // different inputs, so their executions add up; the seed is printed so
    // that a run can be repeated.
    let mut seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9e3779b97f4a7c15)
        | 1;
    let mut skip_known = true;
    let mut is_child = false;
    let mut use_seeds = true;
    let mut replay: Option<(String, PathBuf)> = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => seconds = it.next().and_then(|s| s.parse().ok()).unwrap_or(seconds),
            "--findings" => findings = it.next().map(PathBuf::from).unwrap_or(findings),
            "--seed" => seed = it.next().and_then(|s| s.parse().ok()).unwrap_or(seed),
            "--run-known" => skip_known = false,
            "--no-seeds" => use_seeds = false,
            "--child" => {
                is_child = true;
                target = it.next().unwrap_or_default();
            }
            "--replay" => {
                let t = it.next().unwrap_or_default();
                let f = it.next().map(PathBuf::from).unwrap_or_default();
                replay = Some((t, f));
            }
            t if !t.starts_with('-') => target = t.to_string(),
            _ => {}
        }
    }
    if let Some((t, f)) = replay {
        let data = std::fs::read(&f).expect("read the input");
        let start = Instant::now();
        run_target(&t, &data);
        println!("{t}: {} returned in {:?}", f.display(), start.elapsed());
        return;
    }
    if is_child {
        let dir = findings.join(&target);
        child(&target, seconds, &dir, seed, skip_known, use_seeds);
        return;
    }
    let targets: Vec<&str> = if target == "all" {
        TARGETS.to_vec()
    } else if TARGETS.contains(&target.as_str()) || target == "selftest" {
        vec![target.as_str()]
    } else {
        eprintln!(
            "unknown target {target}; targets: all, {}",
            TARGETS.join(", ")
        );
        std::process::exit(2);
    };
    println!("seed {seed} (`--seed {seed}` repeats this run's inputs)");
    println!(
        "{:<10} {:>9} {:>12} {:>8} {:>7} {:>6} {:>7} {:>6} {:>8}",
        "target",
        "seconds",
        "executions",
        "exec/s",
        "panics",
        "hangs",
        "aborts",
        "known",
        "skipped"
    );
    let mut new_findings = 0;
    for t in targets {
        let start = Instant::now();
        let tally = parent(t, seconds, &findings, seed, skip_known);
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{:<10} {:>9.1} {:>12} {:>8.0} {:>7} {:>6} {:>7} {:>6} {:>8}",
            t,
            secs,
            tally.execs,
            tally.execs as f64 / secs,
            tally.panics,
            tally.hangs,
            tally.aborts,
            tally.known,
            tally.skipped
        );
        let _ = std::io::stdout().flush();
        new_findings += tally.panics + tally.hangs + tally.aborts;
    }
    println!("findings saved under {}", findings.display());
    if new_findings > 0 {
        std::process::exit(1);
    }
}
