//! What a trial, a host, a user or a ledger holds is untrusted: files that
//! are not regular files (a trial's, a user's inputs, a ledger's objects),
//! results that would make a ratio meaningless, escape sequences,
//! credentials printed by probes or across an output cut, leases that
//! expire a year ahead. Each case runs the binary on a small study in a
//! tempdir and looks at the ledger and the output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::support;
use crate::support::env::{Env, Out};
use crate::support::ran_to_the_end;

/// `tunectl launch` with plain progress (what a terminal shows).
fn launch(env: &Env) -> Out {
    env.launch(&["--progress", "plain"])
}

/// Attempt records by the value of knob `v`.
fn attempts_by_v(env: &Env, study: &str) -> BTreeMap<String, Json> {
    env.all_attempts(study)
        .into_iter()
        .map(|a| (a["config"]["v"].as_str().unwrap_or_default().to_string(), a))
        .collect()
}

fn failure(a: &Json) -> (String, String) {
    (
        a["failure"]["class"].as_str().unwrap_or("-").to_string(),
        a["failure"]["detail"].as_str().unwrap_or("-").to_string(),
    )
}

/// A trial whose result file or declared output is a FIFO, a symlink to
/// /dev/zero or too large: reading it used to hang the launcher forever or
/// read without end. Each attempt fails as `no_result`, naming the file
/// and why, within the trial's timeout; a symlink to a regular file is
/// still read.
#[test]
fn result_and_output_files_must_be_regular_and_bounded() {
    // The FAKE trial program's modes of the same names (base: none of it).
    let study = r#"name: files
knobs:
  v: {kind: categorical, values: [base, fifo-result, zero-result, big-result, fifo-output, zero-output, dir-output, link-output], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ v }}"
  timeout: 20s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
gate: {outputs: [out.txt]}
"#;
    let env = Env::new(study);
    let out = launch(&env);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let by_v = attempts_by_v(&env, "files");
    let expect = [
        (
            "fifo-result",
            "the result file `tunectl-result.json` is a FIFO, not a regular file",
        ),
        (
            "zero-result",
            "the result file `tunectl-result.json` is a symlink to a character device, not a regular file",
        ),
        (
            "big-result",
            "the result file `tunectl-result.json` is 9000022 bytes, over the limit of 8 MiB",
        ),
        (
            "fifo-output",
            "declared output `out.txt` is a FIFO, not a regular file",
        ),
        (
            "zero-output",
            "declared output `out.txt` is a symlink to a character device, not a regular file",
        ),
        (
            "dir-output",
            "declared output `out.txt` is a directory, not a regular file",
        ),
    ];
    for (v, detail) in expect {
        let a = by_v.get(v).unwrap_or_else(|| panic!("no attempt for {v}"));
        assert_eq!(
            failure(a),
            ("no_result".to_string(), detail.to_string()),
            "{v}"
        );
    }
    for v in ["base", "link-output"] {
        assert_eq!(by_v[v]["status"], "ok", "{v}: {}", by_v[v]);
    }
    assert_eq!(
        by_v["base"]["outputs"]["out.txt"], by_v["link-output"]["outputs"]["out.txt"],
        "a symlink to a regular file is hashed as that file"
    );
}

/// An objective sample of 0, a negative or a subnormal number used to give
/// infinite or negative speedups: the attempt is `no_result` with why.
#[test]
fn objective_samples_must_be_positive_normal_numbers() {
    // The fake's two samples, the first of them `v`.
    let study = r#"name: ratios
knobs:
  v: {kind: categorical, values: ["1", "0", "-2", "5e-324", "3"], default: "1"}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh base"
  timeout: 20s
  env: {FAKE_FIRST_SAMPLE: "{{ v }}", FAKE_SAMPLES: "2"}
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#;
    let env = Env::new(study);
    let out = launch(&env);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let by_v = attempts_by_v(&env, "ratios");
    for (v, detail) in [
        (
            "0",
            "metric throughput: sample 0 is not a positive finite number; speedups are ratios",
        ),
        (
            "-2",
            "metric throughput: sample -2 is not a positive finite number; speedups are ratios",
        ),
        (
            "5e-324",
            "metric throughput: sample 5e-324 is subnormal (too close to zero), not a positive finite number; speedups are ratios",
        ),
    ] {
        assert_eq!(
            failure(&by_v[v]),
            ("no_result".to_string(), detail.to_string()),
            "{v}"
        );
    }
    for v in ["1", "3"] {
        assert_eq!(by_v[v]["status"], "ok", "{v}: {}", by_v[v]);
    }
    // Every speedup in the report is a positive finite number.
    let mut cmd = env.tunectl();
    cmd.args(["report", "--all", "--ledger"])
        .arg(env.ledger())
        .arg(env.study());
    let out = env.run(cmd);
    let text = out.stdout;
    let speedups: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == '|')
        .filter_map(|w| w.strip_suffix('×'))
        .collect();
    assert!(!speedups.is_empty(), "{text}");
    for s in speedups {
        let x: f64 = s.parse().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "speedup {s}× in:\n{text}");
    }
}

/// Every file under `dir`, as text.
fn all_text(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let text =
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
                out.push((path, text));
            }
        }
    }
    out
}

/// The output of `fingerprint.tools` commands used to be kept as printed:
/// a credential a tool printed reached the ledger and the screen. It is
/// scrubbed like trial output.
#[test]
fn credentials_printed_by_fingerprint_tools_are_scrubbed() {
    let study = r#"name: tools
knobs:
  v: {kind: categorical, values: [a], default: a}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh base"
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
fingerprint:
  # The credentials are assembled by the commands: the study itself (kept
  # in the ledger) does not hold them.
  tools:
    gh: "printf 'token=ghp_%s' abcdefghijklmnopqrstuvwxyz0123456789"
    aws: "printf 'AWS_SECRET_ACCESS_KEY=%s%s' wJalrXUtnFEMIK7MDENG bPxRfiCYEXAMPLEKEY"
    env: "echo using $MY_API_TOKEN"
    sh: "echo 5.2.21"
"#;
    let env = Env::new(study);
    let leaks = [
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
        "s3cr3t-value-1234",
    ];
    let mut cmd = env.tunectl();
    cmd.args(["fingerprint", "--study"])
        .arg(env.study())
        .env("MY_API_TOKEN", "s3cr3t-value-1234");
    let out = env.run(cmd);
    let printed = out.stdout;
    assert_eq!(out.code, Some(0), "{printed}");
    for leak in leaks {
        assert!(!printed.contains(leak), "{leak} printed:\n{printed}");
    }
    assert!(printed.contains("[redacted]"), "{printed}");
    assert!(printed.contains("5.2.21"), "{printed}");
    let mut cmd = env.launch_cmd(&["--progress", "plain"]);
    cmd.env("MY_API_TOKEN", "s3cr3t-value-1234");
    let out = env.run(cmd);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let files = all_text(&env.ledger());
    assert!(
        files
            .iter()
            .any(|(p, _)| p.to_string_lossy().contains("/hosts/")),
        "no fingerprint in the ledger"
    );
    for (path, text) in files {
        for leak in leaks {
            assert!(!text.contains(leak), "{} holds {leak}", path.display());
        }
    }
}

/// Escape sequences in knob values, cell values, failure details and trial
/// output used to reach the terminal raw from `plan`, `launch` and
/// `report`: they are shown escaped (`\x1b`); JSON writes them in its own
/// escaping, C1 controls included.
#[test]
fn escape_sequences_are_shown_escaped() {
    // The fake runs as `base` for v=plain; else as `garbled` (escapes on
    // stderr, exit 3), with the value passed on its command line too.
    let study = r#"name: escapes
context: {model: "m\e[5mblink"}
knobs:
  v: {kind: categorical, values: [plain, "x\e[31mred\u009b"], default: plain}
cells:
  c: [one, "t\e]0;title\a"]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ 'base' if v == 'plain' else 'garbled' }} 1 {{ v }}"
  timeout: 20s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#;
    let env = Env::new(study);
    let raw = |text: &str| {
        text.chars()
            .any(|c| c == '\x1b' || c == '\x07' || c == '\u{9b}')
    };
    let mut cmd = env.tunectl();
    cmd.arg("plan")
        .arg(env.study())
        .arg("--dry-run")
        .arg("--ledger")
        .arg(env.ledger());
    let out = env.run(cmd);
    let plan = out.stdout;
    assert_eq!(out.code, Some(0), "{plan}");
    assert!(!raw(&plan), "plan prints raw escapes:\n{plan:?}");
    assert!(plan.contains("\\x1b[31mred\\x9b"), "{plan}");

    let Out {
        code,
        stdout,
        stderr,
        ..
    } = launch(&env);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !raw(&stderr) && !raw(&stdout),
        "launch prints raw escapes:\n{stderr:?}"
    );
    assert!(stderr.contains("\\x1b[2J\\x1b]0;pwned\\x07"), "{stderr}");

    for format in ["table", "markdown"] {
        let mut cmd = env.tunectl();
        cmd.args(["report", "--all", "--format", format, "--ledger"])
            .arg(env.ledger())
            .arg(env.study());
        let out = env.run(cmd);
        let text = out.stdout;
        assert_eq!(out.code, Some(0), "{text}");
        assert!(!raw(&text), "{format} report prints raw escapes:\n{text:?}");
        for shown in [
            "\\x1b[31mred",
            "t\\x1b]0;title\\x07",
            "m\\x1b[5mblink",
            "\\x1b[2J",
        ] {
            assert!(text.contains(shown), "{format}: {shown} missing in\n{text}");
        }
    }
    let mut cmd = env.tunectl();
    cmd.args(["report", "--format", "json", "--ledger"])
        .arg(env.ledger())
        .arg(env.study());
    let out = env.run(cmd);
    // JSON escapes what a terminal would obey, C1 too (serde_json alone
    // leaves DEL, C1 and bidirectional controls raw), and keeps the value.
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!raw(&out.stdout), "JSON report prints raw escapes");
    assert!(
        out.stdout.contains("x\\u001b[31mred\\u009b"),
        "{}",
        out.stdout
    );
    let json: Json = serde_json::from_str(&out.stdout).expect("report JSON");
    assert!(
        json.to_string().contains("x\\u001b[31mred\u{9b}"),
        "JSON keeps the value, in JSON's escaping"
    );
}

/// How long a command of the tests below may take: they refuse at once
/// what they used to wait on forever.
const FAST: std::time::Duration = std::time::Duration::from_secs(30);

/// Peak resident memory allowed to a command of the tests below: a read of
/// `/dev/zero` used to take about 1 GiB before it ran out of memory.
const SMALL_PEAK: u64 = 256 << 20;

/// What to put where tunectl reads a file: a FIFO that nothing writes to,
/// or a symlink to `/dev/zero`; and how tunectl says what it found.
const NOT_FILES: [(&str, &str); 2] = [
    ("fifo", "is a FIFO, not a regular file"),
    (
        "zero",
        "is a symlink to a character device, not a regular file",
    ),
];

/// Replace `path` (if there) by a `kind` of [`NOT_FILES`].
fn put_not_a_file(path: &Path, kind: &str) {
    let _ = std::fs::remove_file(path);
    match kind {
        "fifo" => support::mkfifo(path),
        _ => std::os::unix::fs::symlink("/dev/zero", path).expect("symlink"),
    }
}

/// `cmd`, which must end within [`FAST`] in [`SMALL_PEAK`] of memory.
fn run_fast(env: &Env, cmd: std::process::Command, what: &str) -> Out {
    let (out, peak) = env.run_bounded(cmd, FAST);
    assert!(
        peak < SMALL_PEAK,
        "{what}: peak memory {} MiB:\n{}",
        peak >> 20,
        out.text()
    );
    out
}

/// A study, an inventory or a tuned file that is a FIFO with no writer
/// used to hang `plan`, `validate` and `apply` forever; a symlink to
/// /dev/zero was read until memory ran out. Each is refused at once (exit
/// 2), naming the file and what it is, in little memory.
#[test]
fn named_input_files_must_be_regular_files() {
    let study = r#"name: inputs
knobs:
  v: {kind: categorical, values: [base, fast], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ v }}"
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#;
    let env = Env::new(study);
    for (kind, what) in NOT_FILES {
        let name = format!("{kind}.yaml");
        put_not_a_file(&env.path().join(&name), kind);
        let study = env.study_arg();
        let cases: [(&str, Vec<&str>, String); 4] = [
            (
                "study",
                vec!["plan", &name, "--dry-run", "--ledger", env.ledger_url()],
                format!("error: {name}: cannot read file: {what}"),
            ),
            (
                "study to validate",
                vec!["validate", &name],
                format!("error: {name}: cannot read file: {what}"),
            ),
            (
                "inventory",
                vec![
                    "plan",
                    &study,
                    "--dry-run",
                    "--inventory",
                    &name,
                    "--ledger",
                    env.ledger_url(),
                ],
                format!("error: {name}: cannot read file: {what}"),
            ),
            (
                "tuned file",
                vec!["apply", "--tuned", &name, "--", "true"],
                format!("error: {name}: cannot read: {what}"),
            ),
        ];
        for (case, args, message) in cases {
            let mut cmd = env.tunectl();
            cmd.args(&args);
            let out = run_fast(&env, cmd, &format!("{kind} {case}"));
            assert_eq!(out.code, Some(2), "{kind} {case}:\n{}", out.text());
            assert!(
                out.stderr.contains(&message),
                "{kind} {case}: no `{message}`:\n{}",
                out.text()
            );
        }
    }
}

/// A copy of `env`'s ledger as `<name>/` beside it; its path.
fn copy_ledger(env: &Env, name: &str) -> PathBuf {
    let to = env.path().join(name);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(env.ledger())
        .arg(&to)
        .status()
        .expect("cp");
    assert!(status.success(), "cp -a {}", env.ledger().display());
    to
}

/// The attempt objects of study `study` in the ledger at `ledger`, by the
/// value of knob `v`.
fn attempt_files(ledger: &Path, study: &str) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for trial in std::fs::read_dir(ledger.join(study).join("trials"))
        .expect("trials")
        .flatten()
    {
        for f in std::fs::read_dir(trial.path()).expect("trial").flatten() {
            let text = std::fs::read_to_string(f.path()).expect("attempt");
            let a: Json = serde_json::from_str(&text).expect("attempt JSON");
            let v = a["config"]["v"].as_str().unwrap_or_default().to_string();
            out.insert(v, f.path());
        }
    }
    out
}

/// `tunectl ARGS --ledger LEDGER` through [`run_fast`].
fn tunectl_fast(env: &Env, args: &[&str], ledger: &Path, what: &str) -> Out {
    let mut cmd = env.tunectl();
    cmd.args(args).arg("--ledger").arg(ledger);
    run_fast(env, cmd, what)
}

/// A local ledger's objects that are FIFOs or symlinks to /dev/zero: an
/// attempt object used to hang `ledger check` and `launch` (or, linked to
/// /dev/zero, was passed over and `ledger check` called the ledger clean),
/// a FIFO `study.json` hung `report`, a FIFO lease hung the launch taking
/// it. Each is now an error naming the file and what it is, at once:
/// `ledger check` reports the attempt as unreadable (exit 1) and the rest
/// of the ledger as it is, a launch goes on without it (the trial runs
/// again), `report` fails on the study record, a launch says it cannot
/// take the lease, and `status` shows the study with the lease named as
/// what stops its trial.
#[test]
fn ledger_objects_must_be_regular_files() {
    let study = r#"name: objects
knobs:
  v: {kind: categorical, values: [base, fast], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ v }}"
  timeout: 20s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#;
    let env = Env::new(study);
    let out = env.launch(&[]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let study_arg = env.study_arg();
    for (kind, what) in NOT_FILES {
        // An attempt object.
        let ledger = copy_ledger(&env, &format!("{kind}-attempt"));
        let attempts = attempt_files(&ledger, "objects");
        let bad = &attempts["fast"];
        put_not_a_file(bad, kind);
        let named = format!("{} {what}", bad.display());
        let out = tunectl_fast(&env, &["ledger", "check", "objects"], &ledger, "check");
        let text = out.text();
        assert_eq!(out.code, Some(1), "{kind}: {text}");
        assert!(text.contains(&named), "{kind}: no `{named}`:\n{text}");
        assert!(
            text.contains("objects: 1 attempts readable, 0 voided, 1 unreadable, 0 missing"),
            "{kind}: {text}"
        );
        let mut cmd = env.tunectl();
        cmd.args(["launch", &study_arg, "--progress", "plain", "--ledger"])
            .arg(&ledger)
            .arg("--workdir")
            .arg(env.work());
        let out = run_fast(&env, cmd, "launch");
        let text = out.text();
        assert!(ran_to_the_end(out.code, &out.stderr), "{kind}: {text}");
        assert!(
            text.contains("warning: ignoring unreadable ledger object") && text.contains(&named),
            "{kind}: {text}"
        );
        assert_eq!(out.ran(), 1, "{kind}: the trial runs again:\n{text}");
        assert!(attempts["base"].is_file(), "the rest of the ledger stays");

        // The study record.
        let ledger = copy_ledger(&env, &format!("{kind}-study"));
        let record = ledger.join("objects/study.json");
        put_not_a_file(&record, kind);
        let out = tunectl_fast(&env, &["report", &study_arg], &ledger, "report");
        assert_ne!(out.code, Some(0), "{kind}: {}", out.text());
        let named = format!("{} {what}", record.display());
        assert!(
            out.stderr.contains(&named),
            "{kind}: no `{named}`:\n{}",
            out.text()
        );

        // A lease of a trial that has to run again.
        let ledger = copy_ledger(&env, &format!("{kind}-lease"));
        let trial = attempt_files(&ledger, "objects")["fast"]
            .parent()
            .expect("trial folder")
            .to_path_buf();
        let key = trial
            .file_name()
            .and_then(|n| n.to_str())
            .expect("key")
            .to_string();
        std::fs::remove_dir_all(&trial).expect("remove the trial's attempt");
        std::fs::create_dir_all(ledger.join("objects/leases")).expect("mkdir leases");
        let lease = ledger.join(format!("objects/leases/{key}.000000000001.json"));
        put_not_a_file(&lease, kind);
        let named = format!("{} {what}", lease.display());
        let mut cmd = env.tunectl();
        cmd.args(["launch", &study_arg, "--progress", "plain", "--ledger"])
            .arg(&ledger)
            .arg("--workdir")
            .arg(env.work());
        let out = run_fast(&env, cmd, "launch");
        let text = out.text();
        assert!(
            text.contains("error: cannot take the lease of a trial") && text.contains(&named),
            "{kind}: {text}"
        );
        // `status` shows the study all the same, the lease named as what
        // stops the trial (it used to fail on it, showing nothing).
        let out = tunectl_fast(&env, &["status", &study_arg], &ledger, "status");
        assert_eq!(out.code, Some(0), "{kind}: {}", out.text());
        assert!(
            out.stdout.contains("done 1 ")
                && out
                    .stdout
                    .contains(&format!("trial {}: its lease does not read", &key[..16]))
                && out.stdout.contains(&named)
                && out.stdout.contains("a launch cannot run this trial until"),
            "{kind}: no `{named}`:\n{}",
            out.text()
        );
        let out = tunectl_fast(
            &env,
            &["status", &study_arg, "--format", "json"],
            &ledger,
            "status",
        );
        assert_eq!(out.code, Some(0), "{kind}: {}", out.text());
        let doc: Json = serde_json::from_str(&out.stdout).expect("status JSON");
        let unreadable = &doc["unreadable_leases"][0];
        assert_eq!(unreadable["trial_key"], key.as_str(), "{kind}: {doc}");
        assert!(
            unreadable["reason"]
                .as_str()
                .is_some_and(|r| r.contains(what)),
            "{kind}: {doc}"
        );
        assert_eq!(doc["leases"], serde_json::json!([]), "{kind}: {doc}");
    }
}

/// Host, plan, verdict and drop objects that are no regular file (a
/// listing skips them without a word) or do not read as their kind (every
/// read passes over them): `ledger check` used to call such a ledger clean.
/// It names each (exit 1), at once; `report` and `status` read the rest.
#[test]
fn ledger_check_names_records_beside_the_trials_that_do_not_read() {
    let study = r#"name: records
knobs:
  v: {kind: categorical, values: [base, fast], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ v }}"
  timeout: 20s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#;
    let env = Env::new(study);
    let out = env.launch(&[]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let study_arg = env.study_arg();
    for (kind, _) in NOT_FILES {
        let ledger = copy_ledger(&env, &format!("{kind}-records"));
        let mut named = Vec::new();
        for part in ["hosts", "plan", "verdicts", "drops"] {
            let dir = ledger.join("records").join(part).join("x");
            std::fs::create_dir_all(&dir).expect("mkdir");
            put_not_a_file(&dir.join("stray.json"), kind);
            std::fs::write(dir.join("garbage.json"), "[1, 2").expect("write");
            named.push(format!("records/{part}/x/stray.json: "));
            named.push(format!("records/{part}/x/garbage.json: not a valid "));
        }
        let out = tunectl_fast(&env, &["ledger", "check", "records"], &ledger, "check");
        let text = out.text();
        assert_eq!(out.code, Some(1), "{kind}: {text}");
        for n in &named {
            assert!(text.contains(n.as_str()), "{kind}: no `{n}`:\n{text}");
        }
        assert!(
            text.contains("records: 2 attempts readable, 0 voided, 8 unreadable, 0 missing"),
            "{kind}: {text}"
        );
        let out = tunectl_fast(
            &env,
            &["ledger", "check", "records", "--format", "json"],
            &ledger,
            "check json",
        );
        let doc: Json = serde_json::from_str(&out.stdout).expect("JSON");
        let damaged = doc["studies"][0]["damaged"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(damaged.len(), 8, "{doc:#}");
        assert!(damaged.iter().all(|d| d["kind"] == "unreadable"), "{doc:#}");
        for args in [&["report", &study_arg][..], &["status", &study_arg][..]] {
            let out = tunectl_fast(&env, args, &ledger, args[0]);
            assert_eq!(out.code, Some(0), "{kind} {}: {}", args[0], out.text());
        }
    }
}

/// A lease object of trial folder `trial` (its key is the folder's name)
/// in `ledger` of study `study`: generation 1, held by `owner` on `host`
/// until `ahead` from now; the key.
fn forge_lease(
    ledger: &Path,
    study: &str,
    trial: &Path,
    owner: &str,
    host: &str,
    ahead: chrono::Duration,
) -> String {
    let key = trial
        .file_name()
        .and_then(|n| n.to_str())
        .expect("trial key")
        .to_string();
    let now = chrono::Utc::now();
    let lease = serde_json::json!({
        "schema": 1, "trial_key": key, "owner": owner, "host": host,
        "generation": 1, "expires_at": (now + ahead).to_rfc3339(),
        "written_at": now.to_rfc3339(),
    });
    let dir = ledger.join(study).join("leases");
    std::fs::create_dir_all(&dir).expect("mkdir leases");
    std::fs::write(
        dir.join(format!("{key}.000000000001.json")),
        lease.to_string(),
    )
    .expect("write lease");
    key
}

/// A lease whose expiry is a year ahead (a launcher's clock set wrong, or
/// a forged object) used to hold its trial forever, and the launch said
/// nothing of what it waited for. It is taken over at once, with a
/// warning naming the trial, the holder and the expiry; a live lease of
/// another launcher is waited for and said so (holder and expiry). Before
/// the launch, `status` shows both (text and JSON), the stale one as
/// stale.
#[test]
fn leases_from_the_future_are_taken_over_and_waits_are_said() {
    let study = r#"name: leases
knobs:
  v: {kind: categorical, values: [base, fast, slow], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ v }}"
  timeout: 20s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#;
    let env = Env::new(study);
    let out = env.launch(&[]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    // Two trials to run again, each leased by someone else.
    let files = attempt_files(&env.ledger(), "leases");
    let trial = |v: &str| files[v].parent().expect("trial folder").to_path_buf();
    let (fast, slow, base) = (trial("fast"), trial("slow"), trial("base"));
    for t in [&fast, &slow] {
        std::fs::remove_dir_all(t).expect("remove the trial's attempt");
    }
    // A lease a year ahead on a trial that has ended: it holds nothing,
    // and `status` must not say that a launch takes it over.
    let ended = forge_lease(
        &env.ledger(),
        "leases",
        &base,
        "mallory-8",
        "far",
        chrono::Duration::days(365),
    );
    let year = chrono::Duration::days(365);
    let stale = forge_lease(&env.ledger(), "leases", &fast, "mallory-7", "far", year);
    let live = forge_lease(
        &env.ledger(),
        "leases",
        &slow,
        "other-launcher-9",
        "gpu-9",
        chrono::Duration::seconds(3),
    );

    let status = env.tunectl_ok(&["status", &env.study_arg(), "--ledger", env.ledger_url()]);
    for (key, holder) in [
        (&stale, "mallory-7 on far"),
        (&live, "other-launcher-9 on gpu-9"),
    ] {
        let line = status
            .lines()
            .find(|l| l.contains(&format!("trial {}", &key[..16])))
            .unwrap_or_else(|| panic!("no line for {key}:\n{status}"));
        assert!(line.contains(&format!("held by {holder} until ")), "{line}");
        assert_eq!(line.contains("stale"), key == &stale, "{line}");
        assert!(!line.contains("has ended"), "{line}");
    }
    // Leases of ended trials are counted in one line (a launch on an
    // object store leaves many for a moment): holding nothing.
    assert!(
        !status.contains(&format!("trial {}", &ended[..16])),
        "{status}"
    );
    let line = status
        .lines()
        .find(|l| l.contains("of them for a trial that has ended"))
        .unwrap_or_else(|| panic!("no line for the ended trial's lease:\n{status}"));
    assert!(
        line.starts_with("  1 of them")
            && line.contains("holds nothing")
            && !line.contains("takes it over"),
        "{line}"
    );
    let doc: Json = serde_json::from_str(&env.tunectl_ok(&[
        "status",
        &env.study_arg(),
        "--format",
        "json",
        "--ledger",
        env.ledger_url(),
    ]))
    .expect("status JSON");
    let leases = doc["leases"].as_array().expect("leases");
    assert_eq!(leases.len(), 3, "{doc}");
    for l in leases {
        let ended_one = l["trial_key"] == ended.as_str();
        assert_eq!(l["ended"], ended_one, "{l}");
        if ended_one {
            continue;
        }
        let stale_one = l["trial_key"] == stale.as_str();
        assert_eq!(l["stale"], stale_one, "{l}");
        assert_eq!(
            l["owner"],
            if stale_one {
                "mallory-7"
            } else {
                "other-launcher-9"
            }
        );
    }
    // Of the two trials to run, the live lease's runs elsewhere: one is
    // pending, the stale one's.
    assert_eq!(doc["classes"][0]["pending"], 1, "{doc}");

    let mut cmd = env.launch_cmd(&["--progress", "plain"]);
    cmd.env("TUNECTL_LEASE_TTL", "2s");
    let (out, _) = env.run_bounded(cmd, std::time::Duration::from_secs(60));
    let text = out.text();
    assert!(out.ran_to_the_end(), "{text}");
    assert!(
        text.contains(&format!(
            "warning: the lease of v=fast @ (single cell) (trial {}) held by mallory-7 on far expires at ",
        &stale[..16]
        )) && text.contains("further ahead than any lease can (1h plus 5m of clock skew): a wrong clock or a forged lease; taken over as stale"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "waiting for v=slow @ (single cell) (trial {}): its lease is held by other-launcher-9 on gpu-9 until ",
            &live[..16]
        )),
        "{text}"
    );
    assert_eq!(out.ran(), 2, "both trials ran:\n{text}");
}

/// A credential printed by a trial across the 8 KiB stdout tail's cut, or
/// the 4 KiB stderr head's, or stderr's tail's, used to be cut first and
/// scrubbed after: the half on the kept side reached the ledger. The fake
/// prints streams with the launcher's `MY_API_TOKEN` straddling each cut
/// (1 byte, half and all but 1 byte of it before the cut): no part of it is
/// stored, and the kept side of each cut shows `[redacted]`.
#[test]
fn a_secret_across_an_output_cut_is_scrubbed_whole() {
    const SECRET: &str = "s3cr3t-T0KEN-4a7c9e1f2b3d5a6c8e0f";
    const TAIL: usize = 8 * 1024;
    const HEAD: usize = 4 * 1024;
    let study = r#"name: cuts
knobs:
  v: {kind: categorical, values: ["1", "16", "32"], default: "1"}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh base"
  timeout: 20s
  env:
    FAKE_PRINT_STDOUT: "{{ study_dir }}/stdout-{{ v }}.txt"
    FAKE_PRINT_STDERR: "{{ study_dir }}/stderr-{{ v }}.txt"
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#;
    let env = Env::new(study).with_secret(SECRET);
    // `total` bytes of dots and newlines with the secret at each of `at`.
    let stream = |total: usize, at: &[usize]| {
        let mut s: Vec<u8> = (0..total)
            .map(|i| if i % 80 == 79 { b'\n' } else { b'.' })
            .collect();
        for &a in at {
            s[a..a + SECRET.len()].copy_from_slice(SECRET.as_bytes());
        }
        s
    };
    for before in [1, 16, 32] {
        let (out_total, err_total) = (TAIL + 3000, 20_000);
        let stdout = stream(out_total, &[out_total - TAIL - before]);
        let stderr = stream(err_total, &[HEAD - before, err_total - TAIL - before]);
        std::fs::write(env.study_dir().join(format!("stdout-{before}.txt")), stdout)
            .expect("write");
        std::fs::write(env.study_dir().join(format!("stderr-{before}.txt")), stderr)
            .expect("write");
    }
    let mut cmd = env.launch_cmd(&[]);
    cmd.env("MY_API_TOKEN", SECRET);
    let out = env.run(cmd);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let by_v = attempts_by_v(&env, "cuts");
    assert_eq!(by_v.len(), 3, "{by_v:?}");
    for (v, a) in &by_v {
        assert_eq!(a["status"], "ok", "{v}: {a}");
        for (field, redacted_at_start) in [
            ("stdout_tail", true),
            ("stderr_tail", true),
            ("stderr_head", false),
        ] {
            let kept = a[field].as_str().unwrap_or_default();
            let rest = kept.replace("[redacted]", "");
            assert!(
                rest.bytes().all(|b| b == b'.' || b == b'\n'),
                "v={v}: {field} keeps part of the secret: {rest:?}"
            );
            if redacted_at_start {
                assert!(kept.starts_with("[redacted]"), "v={v}: {field}: {kept:?}");
                // The secret's 33 bytes stand as the 10 of `[redacted]`.
                assert!(
                    kept.len() > TAIL - SECRET.len(),
                    "v={v}: {field} is {} bytes",
                    kept.len()
                );
            } else {
                assert!(kept.ends_with("[redacted]"), "v={v}: {field}: {kept:?}");
                assert!(
                    kept.len() > HEAD - SECRET.len(),
                    "v={v}: {field} is {} bytes",
                    kept.len()
                );
            }
        }
    }
    // Nowhere in the ledger, not even 6 characters of it.
    for (path, text) in all_text(&env.ledger()) {
        for part in SECRET.as_bytes().windows(6) {
            let part = std::str::from_utf8(part).expect("ASCII");
            assert!(!text.contains(part), "{} holds `{part}`", path.display());
        }
    }
}

/// A small study of the FAKE (two configs, one run each).
const TINY: &str = r#"name: tiny
knobs:
  v: {kind: categorical, values: [base, fast], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ v }}"
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#;

/// Whether `stderr` names `file` with a position: `file:LINE:COLUMN`.
fn names_a_position(stderr: &str, file: &str) -> bool {
    stderr.match_indices(&format!("{file}:")).any(|(i, m)| {
        let rest = &stderr[i + m.len()..];
        let line: String = rest.chars().take_while(char::is_ascii_digit).collect();
        !line.is_empty()
            && rest[line.len()..]
                .strip_prefix(':')
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// A study, an inventory or a tuned file that is not one at all (a
/// symlink to a secret file, a `.env`) used to have its text quoted in the
/// error: its keys, as an unknown key and in the key path. It is refused
/// (exit 2) naming the file and the position, and none of its text shows.
/// A file that looks like a study (one key a study has) still has its
/// mistakes quoted.
#[test]
fn a_file_that_is_not_a_study_is_refused_without_quoting_it() {
    let env = Env::new(TINY).with_secret("hunter2");
    let secrets = [
        "SECRET=hunter2 not yaml: [\n",
        "SECRET=hunter2 not yaml: x\n",
        "SECRET=hunter2 a: 1\nSECRET=hunter2 a: 2\n",
        "{\"SECRET=hunter2\": \"hunter2\"}\n",
        "export TOKEN=hunter2\nexport B=2\n",
    ];
    let secret = env.path().join("secret.env");
    let linked = env.path().join("linked.yaml");
    std::os::unix::fs::symlink(&secret, &linked).expect("symlink");
    let study = env.study_arg();
    let ledger = env.ledger_url().to_string();
    for text in secrets {
        std::fs::write(&secret, text).expect("write secret");
        let cases: [(&str, Vec<&str>); 5] = [
            ("validate", vec!["validate", "linked.yaml"]),
            (
                "plan",
                vec!["plan", "linked.yaml", "--dry-run", "--ledger", &ledger],
            ),
            ("launch", vec!["launch", "linked.yaml", "--ledger", &ledger]),
            (
                "inventory",
                vec![
                    "plan",
                    &study,
                    "--dry-run",
                    "--inventory",
                    "linked.yaml",
                    "--ledger",
                    &ledger,
                ],
            ),
            ("tuned", vec!["apply", "--tuned", "linked.yaml", "--print"]),
        ];
        for (case, args) in cases {
            // The Env fails the test if `hunter2` shows in any output.
            let out = env.tunectl_run(&args);
            assert_eq!(out.code, Some(2), "{case} of {text:?}:\n{}", out.text());
            assert!(
                names_a_position(&out.stderr, "linked.yaml"),
                "{case} of {text:?}: no linked.yaml:LINE:COLUMN:\n{}",
                out.text()
            );
        }
    }
    assert!(!env.ledger().exists(), "a refused file wrote to the ledger");

    // A study with a mistake: its key is quoted as ever.
    env.write_study(&TINY.replace("trial:", "trail: 1\ntrial:"));
    let out = env.tunectl_run(&["validate", &study]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains("trail: unknown key `trail`"),
        "{}",
        out.text()
    );
}

/// An inventory's `hosts_file` that names a file that is no hosts file (a
/// password file, a `.env`) is refused by its lines, never quoting them:
/// no line of it, nor its host part, reaches the output.
#[test]
fn a_hosts_file_that_is_not_one_is_refused_without_quoting_it() {
    let env = Env::new(TINY).with_secret("hunter2");
    let secret = env.path().join("secret.txt");
    let inventory = env.path().join("inv.yaml");
    std::fs::write(
        &inventory,
        "hosts:\n  - name: rack\n    transport: ssh\n    hosts_file: secret.txt\n",
    )
    .expect("write inventory");
    let ledger = env.ledger_url().to_string();
    let study = env.study_arg();
    for text in [
        "root:$6$hunter2$x:19000:0:99999:7:::\n",
        "-hunter2\n",
        "hunter2@-o\n",
        "TOKEN=hunter2\n",
        "ok.example.org\nuser@hunter2!\n",
    ] {
        std::fs::write(&secret, text).expect("write secret");
        let inv = inventory.to_string_lossy().to_string();
        let args = [
            "plan",
            &study,
            "--dry-run",
            "--inventory",
            &inv,
            "--ledger",
            &ledger,
        ];
        // The Env fails the test if `hunter2` shows in any output.
        let out = env.tunectl_run(&args);
        assert_eq!(out.code, Some(2), "{text:?}:\n{}", out.text());
        assert!(
            names_a_position(&out.stderr, "secret.txt"),
            "{text:?}: no secret.txt:LINE:COLUMN:\n{}",
            out.text()
        );
    }
    assert!(!env.ledger().exists(), "a refused file wrote to the ledger");
}

/// Every file under `dir` (relative path → bytes).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).expect("under dir").to_path_buf();
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

/// A study folder of the ledger that holds attempts but lost its
/// `study.json` (deleted, a partial copy): a launch used to write a new
/// record there, pairing the old measurements with whatever spec launched
/// now. It is refused (exit 1), naming `study.json` and how to recover,
/// and the ledger is left as it was, byte for byte.
#[test]
fn a_launch_does_not_recreate_a_missing_study_record() {
    let env = Env::new(TINY);
    env.launch_ok(&[]);
    let folder = env.ledger().join("tiny");
    assert!(folder.join("trials").is_dir(), "no trials in {folder:?}");
    std::fs::remove_file(folder.join("study.json")).expect("remove study.json");
    let before = tree(&env.ledger());
    let runs = env.runs().len();

    let out = env.launch(&[]);
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(
        out.stderr.contains("tiny/study.json")
            && out.stderr.contains("the study record is missing")
            && out.stderr.contains("Restore")
            && out.stderr.contains("tunectl ledger check"),
        "{}",
        out.text()
    );
    assert_eq!(env.runs().len(), runs, "a trial ran:\n{}", out.text());
    assert!(
        !folder.join("study.json").exists(),
        "study.json written again"
    );
    let after = tree(&env.ledger());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "objects added or removed"
    );
    assert!(before == after, "an object of the ledger changed");
}

/// Studies too large to list: a grid of 10^12 configs, 10^9 cells (3 axes
/// of 1,000 values), and 10^6 configs in each of 100 cells (10^8 (config,
/// cell) pairs). `launch` refused the grid with exit 1 where `plan` said
/// 2, and the cells took every command into a 24 GB allocation. Counted
/// before anything is listed, each is refused by `validate`, `plan` and
/// `launch` alike: exit 2, at once, in little memory, naming the count and
/// the limit, and nothing is written to the ledger.
#[test]
fn studies_too_large_to_list_are_refused_alike() {
    let thousand: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
    let thousand = format!("[{}]", thousand.join(", "));
    let hundred: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    let hundred = format!("[{}]", hundred.join(", "));
    let study = |knobs: &str, cells: &str| {
        format!(
            "name: huge\nknobs:\n{knobs}{cells}trial:\n  command: \"echo {{{{ a }}}}\"\nobjective: {{metric: t, better: higher}}\n"
        )
    };
    let knob = |name: &str| format!("  {name}: {{kind: int, min: 0, max: 999, default: 0}}\n");
    let four = ["a", "b", "c", "d"].map(knob).concat();
    let two = ["a", "b"].map(knob).concat();
    let cases = [
        (
            "a grid of 10^12 configs",
            study(&four, ""),
            "1000000000000 configs",
        ),
        (
            "10^9 cells",
            study(
                &two[..two.len() / 2],
                &format!("cells:\n  x: {thousand}\n  y: {thousand}\n  z: {thousand}\n"),
            ),
            "1000000000 cells",
        ),
        (
            "10^8 (config, cell) pairs",
            study(&two, &format!("cells:\n  x: {hundred}\n")),
            "100000000 (config, cell) pairs",
        ),
    ];
    let env = Env::new(TINY);
    for (what, text, count) in cases {
        env.write_study(&text);
        let study = env.study_arg();
        let ledger = env.ledger().display().to_string();
        let work = env.work().display().to_string();
        let commands: [(&str, Vec<&str>); 3] = [
            ("validate", vec!["validate", &study]),
            ("plan", vec!["plan", &study, "--ledger", &ledger]),
            (
                "launch",
                vec!["launch", &study, "--ledger", &ledger, "--workdir", &work],
            ),
        ];
        for (command, args) in commands {
            let mut cmd = env.tunectl();
            cmd.args(&args);
            let out = run_fast(&env, cmd, &format!("{command} of {what}"));
            assert_eq!(out.code, Some(2), "{command} of {what}:\n{}", out.text());
            assert!(
                out.stderr.contains(count) && out.stderr.contains("more than the 50000000"),
                "{command} of {what}: no `{count}` or limit:\n{}",
                out.text()
            );
            assert!(
                names_a_position(&out.stderr, "study.yaml"),
                "{command} of {what}:\n{}",
                out.text()
            );
        }
        assert!(!env.ledger().exists(), "{what}: the ledger was written");
    }
}
