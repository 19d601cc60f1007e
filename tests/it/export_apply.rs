//! `tunectl export` and `tunectl apply` end to end: a study launched with a
//! fake trial program whose profile is known, exported to tuned files, then
//! applied to a fake "workload" command that prints what it was given.
//!
//! The host class mismatch uses tests/fixtures/fake-nvidia-smi (a FAKE, not
//! NVIDIA's tool) first on PATH, so that this machine probes as 2× H100.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value as Json, json};

use crate::support;
use crate::support::env::{Env, Out};

/// 4 modes × 2 cells (pow2 buckets: n ∈ [1, 2) and n ∈ [2, 4)). The FAKE
/// trial program (tests/it/support/fake.rs) runs base at 100 ops/s; fast at
/// 200 at n=1 but 90 at n=2 (slower there); wrong at 300 with another
/// out.txt (output changed); crash exits 3.
const STUDY: &str = r#"name: fake-tune
context: {model: fake-model}
knobs:
  mode: {kind: categorical, values: [base, fast, wrong, crash], default: base}
cells:
  n: [1, 2]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} {{ n }}"
  timeout: 20s
  env: {FAKE_SPEEDS: "fast@2=0.9 wrong=3"}
objective: {metric: throughput, unit: ops/s, better: higher}
measurement: {warmup: 0, repeats: 3}
gate: {outputs: [out.txt]}
"#;

/// The FAKE workload `apply` runs: prints its arguments and the trial
/// contract's variables, one per line, then exits 7.
const FAKE_WORKLOAD: &str = r#"#!/bin/sh
# FAKE workload for tests/it/export_apply.rs: shows what tunectl apply gave it.
printf 'arg1=%s\n' "$1"
printf 'arg2=%s\n' "$2"
printf 'args=%s\n' "$#"
printf 'TUNECTL_KNOBS=%s\n' "$TUNECTL_KNOBS"
printf 'TUNECTL_KNOB_MODE=%s\n' "$TUNECTL_KNOB_MODE"
printf 'TUNECTL_CELL=%s\n' "$TUNECTL_CELL"
exit 7
"#;

/// An Env of [`STUDY`] with the fake workload and a `bin/` holding the fake
/// nvidia-smi (only on PATH when a test asks for it).
fn with_workload(env: Env) -> Env {
    std::fs::write(workload(&env), FAKE_WORKLOAD).expect("write workload");
    support::fake_nvidia_smi(env.path());
    env
}

fn workload(env: &Env) -> PathBuf {
    env.path().join("fake-workload.sh")
}

fn tuned(env: &Env) -> PathBuf {
    env.path().join("tuned")
}

/// A command whose PATH starts with the fake nvidia-smi: this machine
/// then probes as 2× NVIDIA H100 80GB HBM3.
fn cmd_as_h100(env: &Env) -> Command {
    let mut cmd = env.tunectl();
    cmd.env("PATH", support::path_with(&env.path().join("bin")));
    cmd
}

/// `export` into `tuned/` (the default, relative to the working
/// directory); the paths it printed.
fn export(env: &Env) -> Vec<PathBuf> {
    env.tunectl_ok(&["export", &env.study_arg(), "--ledger", env.ledger_url()])
        .lines()
        .map(|l| env.path().join(l))
        .collect()
}

/// `apply --tuned tuned/ [--cell ...] -- sh fake-workload.sh {{ mode }} {{ n }}`.
fn apply(env: &Env, mut cmd: Command, cells: &[&str]) -> Applied {
    cmd.arg("apply").arg("--tuned").arg(tuned(env));
    for c in cells {
        cmd.args(["--cell", c]);
    }
    cmd.arg("--")
        .arg("sh")
        .arg(workload(env))
        .args(["{{ mode }}", "{{ n }}"]);
    let Out {
        code,
        stdout,
        stderr,
        ..
    } = env.run(cmd);
    let get = |key: &str| -> String {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in:\n{stdout}\nstderr:\n{stderr}"))
            .to_string()
    };
    Applied {
        code,
        arg1: get("arg1"),
        arg2: get("arg2"),
        args: get("args"),
        knobs: serde_json::from_str(&get("TUNECTL_KNOBS")).expect("TUNECTL_KNOBS is JSON"),
        knob_mode: get("TUNECTL_KNOB_MODE"),
        cell: serde_json::from_str(&get("TUNECTL_CELL")).expect("TUNECTL_CELL is JSON"),
        stderr,
    }
}

/// What the fake workload saw.
#[derive(Debug)]
struct Applied {
    code: Option<i32>,
    arg1: String,
    arg2: String,
    args: String,
    knobs: Json,
    knob_mode: String,
    cell: Json,
    stderr: String,
}

/// One launch and export shared by the tests (they only read it).
pub(crate) fn shared() -> &'static (Env, Vec<PathBuf>) {
    static SHARED: OnceLock<(Env, Vec<PathBuf>)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let env = with_workload(Env::in_target_tmp("export_apply-", STUDY));
        env.launch_verdict(&[]);
        let files = export(&env);
        (env, files)
    })
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// This machine's host class, as `tunectl fingerprint` reports it.
fn this_class(env: &Env, as_h100: bool) -> String {
    let mut cmd = if as_h100 {
        cmd_as_h100(env)
    } else {
        env.tunectl()
    };
    cmd.args(["fingerprint", "--json"]);
    let out = env.run(cmd);
    let fp: Json = serde_json::from_str(&out.stdout).expect("fingerprint JSON");
    fp["host_class"].as_str().expect("host_class").to_string()
}

/// `apply --print` (stdout, stderr); it must succeed.
fn print(env: &Env, mut cmd: Command, extra: &[&str]) -> (String, String) {
    cmd.arg("apply")
        .arg("--tuned")
        .arg(tuned(env))
        .args(extra)
        .arg("--print");
    let out = env.run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.text());
    (out.stdout, out.stderr)
}

fn top(yaml: &str, key: &str) -> String {
    yaml.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no top-level {key} in:\n{yaml}"))
        .trim_matches('"')
        .to_string()
}

#[test]
fn export_writes_one_tuned_file_per_host_class() {
    let (env, files) = shared();
    assert_eq!(files.len(), 1, "one host class: {files:?}");
    let file = &files[0];
    let class = this_class(env, false);
    let name = file.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(
        name.ends_with(&format!("-{class}.yaml")),
        "{name} should end with the class id {class}"
    );
    let stem = name.trim_end_matches(".yaml");
    assert!(
        stem.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
        "{stem}"
    );
    assert!(file.starts_with(tuned(env)), "default out dir is tuned/");

    let text = read(file);
    assert!(text.starts_with("# tunectl tuned configuration"), "{text}");
    assert!(text.contains("applies ONLY on a host whose fingerprint matches"));

    // Parse it back with a YAML reader independent of tunectl: the test
    // converts the strict subset tunectl writes (block maps and lists,
    // JSON-quoted strings) itself.
    let doc = yaml_to_json(&text);
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["study"], "fake-tune");
    assert_eq!(doc["host_class"], class.as_str());
    assert!(
        doc["spec_hash"].as_str().is_some_and(|h| h.len() == 64),
        "{doc}"
    );
    assert!(doc["tunectl_version"].is_string());
    assert!(doc["class_label"].is_string());
    assert_eq!(doc["hosts"], json!(["local"]));
    assert!(
        doc["fingerprint"]["fingerprint_hash"]
            .as_str()
            .is_some_and(|h| h.starts_with("fp-")),
        "{doc}"
    );
    for key in ["gpus", "gpu_count", "driver_major", "cpu_model"] {
        assert!(doc["fingerprint"].get(key).is_some(), "{key}: {doc}");
    }
    assert_eq!(
        doc["objective"],
        json!({"name": "throughput", "unit": "ops/s", "better": "higher"})
    );
    assert_eq!(doc["baseline"], json!({"mode": "base"}));
    assert_eq!(doc["context"], json!({"model": "fake-model"}));

    let buckets = doc["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 2, "{doc}");
    let (b1, b2) = (&buckets[0], &buckets[1]);
    assert_eq!(b1["bounds"], json!({"n": {"min": 1.0, "max": 2.0}}), "{b1}");
    assert_eq!(b2["bounds"], json!({"n": {"min": 2.0, "max": 4.0}}), "{b2}");
    assert!(b1["key"].as_str().is_some_and(|k| k.len() == 16), "{b1}");
    assert!(b1["label"].is_string());

    // n ∈ [1, 2): mode=fast is twice as fast.
    assert_eq!(b1["winner"], "mode=fast", "{b1}");
    assert_eq!(b1["knobs"], json!({"mode": "fast"}));
    assert!(
        matches!(b1["level"].as_str(), Some("draft" | "verdict")),
        "{b1}"
    );
    let speedup = b1["speedup"].as_f64().expect("speedup");
    assert!((1.9..2.1).contains(&speedup), "{speedup}");
    let cell = &b1["cells"][0];
    assert_eq!(cell["cell"], "n=1");
    assert_eq!(cell["baseline"]["unit"], "ops/s");
    assert_eq!(cell["baseline"]["n"], 3);
    assert!(cell["baseline"]["median"].as_f64().is_some(), "{cell}");
    assert!(cell["baseline"]["spread"].as_f64().is_some(), "{cell}");
    assert!(
        cell["winner"]["median"].as_f64().is_some_and(|m| m > 199.0),
        "{cell}"
    );
    let rejected: Vec<(&str, &str)> = b1["rejected"]
        .as_array()
        .expect("rejected")
        .iter()
        .map(|r| {
            (
                r["config"].as_str().unwrap_or(""),
                r["class"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(rejected.contains(&("mode=crash", "crash")), "{rejected:?}");
    assert!(
        rejected.contains(&("mode=wrong", "output_changed")),
        "{rejected:?}"
    );

    // n ∈ [2, 4): mode=fast is slower there; the baseline ships.
    assert_eq!(b2["winner"], Json::Null, "{b2}");
    assert_eq!(b2["knobs"], json!({"mode": "base"}));
    assert!(b2["decision"].as_str().is_some_and(|d| !d.is_empty()));

    // Every bucket says what `tunectl report` says.
    let report = env.report_json();
    let reported = report["classes"][0]["buckets"]
        .as_array()
        .expect("report buckets");
    assert_eq!(reported.len(), buckets.len());
    for (r, b) in reported.iter().zip(buckets) {
        for (rk, bk) in [
            ("key", "key"),
            ("label", "label"),
            ("bounds", "bounds"),
            ("config", "knobs"),
            ("level", "level"),
            ("decision", "decision"),
        ] {
            assert_eq!(r[rk], b[bk], "{rk} vs {bk}:\n{r}\n{b}");
        }
        assert_eq!(r["winner"]["label"], b["winner"], "{r}");
    }
}

#[test]
fn apply_on_a_matching_host_gives_the_winner_by_env_and_template() {
    let (env, _) = shared();
    let a = apply(env, env.tunectl(), &["n=1"]);
    assert_eq!(a.code, Some(7), "the command's exit status: {a:?}");
    assert_eq!(a.arg1, "fast", "{a:?}");
    assert_eq!(a.arg2, "1");
    assert_eq!(a.args, "2");
    assert_eq!(a.knobs, json!({"mode": "fast"}));
    assert_eq!(a.knob_mode, "fast");
    assert_eq!(a.cell, json!({"n": 1}));
    assert!(!a.stderr.contains("warning"), "{}", a.stderr);

    // The other bucket keeps the baseline: no warning, it is the tune.
    let a = apply(env, env.tunectl(), &["n=3"]);
    assert_eq!(a.arg1, "base", "{a:?}");
    assert_eq!(a.knobs, json!({"mode": "base"}));
    assert_eq!(a.cell, json!({"n": 3}));
    assert!(!a.stderr.contains("warning"), "{}", a.stderr);

    // A single file works like the directory.
    let (yaml, _) = print(env, env.tunectl(), &["--cell", "n=1"]);
    assert_eq!(top(&yaml, "source"), "tuned", "{yaml}");
    let mut cmd = env.tunectl();
    cmd.arg("apply")
        .arg("--tuned")
        .arg(&shared().1[0])
        .args(["--cell", "n=1", "--print"]);
    let yaml = env.run(cmd).stdout;
    assert!(yaml.contains("  mode: fast\n"), "{yaml}");
}

#[test]
fn apply_on_another_host_class_warns_and_uses_the_defaults() {
    let (env, _) = shared();
    let here = this_class(env, false);
    let h100 = this_class(env, true);
    assert_ne!(
        here, h100,
        "the fake nvidia-smi makes this host another class"
    );
    let a = apply(env, cmd_as_h100(env), &["n=1"]);
    assert_eq!(a.code, Some(7), "{a:?}");
    assert_eq!(a.arg1, "base", "never a tune from another class: {a:?}");
    assert_eq!(a.knobs, json!({"mode": "base"}));
    assert_eq!(a.knob_mode, "base");
    let warning = a
        .stderr
        .lines()
        .find(|l| l.starts_with("warning:"))
        .unwrap_or_else(|| panic!("no warning in:\n{}", a.stderr));
    assert!(warning.contains(&format!("is for {here}")), "{warning}");
    assert!(
        warning.contains(&format!("this host is {h100}")),
        "{warning}"
    );
    assert!(warning.contains("2× NVIDIA H100 80GB HBM3"), "{warning}");
    assert!(warning.ends_with("using the study's defaults"), "{warning}");

    let (yaml, _) = print(env, cmd_as_h100(env), &["--cell", "n=1"]);
    assert_eq!(top(&yaml, "source"), "defaults", "{yaml}");
    assert_eq!(top(&yaml, "host_class"), h100);
}

#[test]
fn a_knob_set_in_the_environment_wins() {
    let (env, _) = shared();
    let mut cmd = env.tunectl();
    cmd.env("TUNECTL_KNOB_MODE", "crash");
    let a = apply(env, cmd, &["n=1"]);
    assert_eq!(a.arg1, "crash", "{a:?}");
    assert_eq!(a.args, "2", "{a:?}");
    assert_eq!(a.knob_mode, "crash");
    assert_eq!(a.knobs, json!({"mode": "crash"}));
    assert!(a.stderr.contains("TUNECTL_KNOB_MODE="), "{}", a.stderr);

    // It wins over the defaults too.
    let mut cmd = cmd_as_h100(env);
    cmd.env("TUNECTL_KNOB_MODE", "fast");
    let a = apply(env, cmd, &["n=2"]);
    assert_eq!(a.arg1, "fast", "{a:?}");
    assert_eq!(a.knobs, json!({"mode": "fast"}));

    // A value the knob does not have is refused like an edited tuned
    // file's: nothing runs.
    let mut cmd = env.tunectl();
    cmd.env("TUNECTL_KNOB_MODE", "crash; touch pwned")
        .arg("apply")
        .arg("--tuned")
        .arg(tuned(env))
        .args(["--cell", "n=1", "--", "echo", "{{ mode }}"]);
    let out = env.run(cmd);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "error: TUNECTL_KNOB_MODE is set in the environment: \"crash; touch pwned\" is not one of the values of knob `mode` ([\"base\", \"fast\", \"wrong\", \"crash\"])"
        ),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(!env.path().join("pwned").exists());
}

/// A copy of the tuned file as written before the files carried the knob
/// domains, in `env/<name>/`: `apply` checks neither its values nor
/// `TUNECTL_KNOB_<NAME>` overrides against domains (a warning says so).
fn without_domains(env: &Env, files: &[PathBuf], name: &str) -> PathBuf {
    let text = read(&files[0]);
    let dir = env.path().join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let start = text.find("\ndomains:\n").expect("domains") + 1;
    let end = start + text[start..].find("\nbuckets:").expect("buckets") + 1;
    std::fs::write(
        dir.join("tuned.yaml"),
        format!("{}{}", &text[..start], &text[end..]),
    )
    .expect("write");
    dir
}

/// The reported `apply` injection: `TUNECTL_KNOB_MODE='$(touch M)'` and a
/// command where the context analysis misread a `#` after a closing `"`.
/// With the domains checked the value is refused (above); with a file too
/// old to carry them, and a `--cell` value (never checked), every value
/// reaches the command as the expansion of a variable: nothing runs and
/// the command prints the literal values.
#[test]
fn apply_passes_values_as_variables_and_refuses_backticks() {
    let (env, files) = shared();
    let old = without_domains(env, files, "old-apply");
    let mark = env.path().join("pwned-apply");
    let value = format!(
        "$(touch {m}) `touch {m}` ;touch {m}\n\"'\\",
        m = mark.display()
    );
    let cell = format!("$(touch {m})|&&touch {m}", m = mark.display());
    for tuned_dir in [tuned(env), old.clone()] {
        let mut cmd = env.tunectl();
        cmd.env("TUNECTL_KNOB_MODE", &value)
            .env("HOME", "/home/h")
            .arg("apply")
            .arg("--tuned")
            .arg(&tuned_dir)
            .args([
                "--cell",
                &format!("n={cell}"),
                "--",
                "printf",
                "'[%s]'",
                "\"$HOME\"#\"\n{{ mode }}\"",
                "\"--mode={{ mode }}\"",
                "{{ n }}",
            ]);
        let out = env.run(cmd);
        if tuned_dir == old {
            assert_eq!(out.code, Some(0), "{}", out.stderr);
            assert_eq!(
                out.stdout,
                format!("[/home/h#\n{value}][--mode={value}][{cell}]")
            );
        } else {
            assert_eq!(out.code, Some(2), "{}", out.stderr);
            assert!(out.stdout.is_empty(), "{}", out.stdout);
        }
        assert!(!mark.exists(), "a value ran as code");
    }

    // --print shows the command as it runs, and the values in the
    // environment it runs with.
    let mut cmd = env.tunectl();
    cmd.env("TUNECTL_KNOB_MODE", &value)
        .arg("apply")
        .arg("--tuned")
        .arg(&old)
        .args([
            "--cell",
            "n=1",
            "--print",
            "--",
            "run",
            "{{ mode }}",
            "{{ n + 1 }}",
        ]);
    let out = env.run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("\ncommand: \"run \\\"${TUNECTL_KNOB_MODE}\\\" \\\"${TUNECTL_ARG_1}\\\"\"\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\n  TUNECTL_ARG_1: \"2\"\n"),
        "{}",
        out.stdout
    );
    assert!(!mark.exists(), "a value ran as code");

    let mut cmd = env.tunectl();
    cmd.arg("apply").arg("--tuned").arg(tuned(env)).args([
        "--cell",
        "n=1",
        "--",
        "echo",
        "`echo {{ mode }}`",
    ]);
    let out = env.run(cmd);
    let err = &out.stderr;
    assert_eq!(out.code, Some(2), "{err}");
    assert!(
        err.contains("column 12 of the template: a value inside backticks"),
        "{err}"
    );
}

#[test]
fn apply_refuses_an_edited_tuned_file_whose_value_is_not_in_the_knob_domain() {
    let (env, files) = shared();
    let text = read(&files[0]);
    assert!(text.contains("\ndomains:\n  mode:\n"), "{text}");
    let edited_dir = env.path().join("edited");
    std::fs::create_dir_all(&edited_dir).expect("mkdir");
    let edited = edited_dir.join("tuned.yaml");
    let mark = env.path().join("pwned-edited");
    let bad = format!("    knobs:\n      mode: \"$(touch {})\"\n", mark.display());
    std::fs::write(
        &edited,
        text.replacen("    knobs:\n      mode: fast\n", &bad, 1),
    )
    .expect("write");
    let run = |dir: &Path| {
        let mut cmd = env.tunectl();
        cmd.arg("apply").arg("--tuned").arg(dir).args([
            "--cell",
            "n=2",
            "--",
            "echo",
            "{{ mode }}",
        ]);
        env.run(cmd)
    };
    // Refused even for a cell of another bucket: the file is damaged.
    let out = run(&edited_dir);
    let err = &out.stderr;
    assert_eq!(out.code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{}: bucket `n ∈ [1, 2)` (key ", edited.display()))
            && err.contains("knob `mode`: \"$(touch ")
            && err
                .contains("is not one of its values ([\"base\", \"fast\", \"wrong\", \"crash\"])"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert!(!mark.exists());

    // A file from before the domains were written: a warning, and it runs.
    let out = run(&without_domains(env, files, "old"));
    let err = &out.stderr;
    assert_eq!(out.code, Some(0), "{err}");
    assert!(err.contains("carries no knob domains"), "{err}");
    assert_eq!(out.stdout, "base\n");
}

#[test]
fn a_cell_outside_every_bucket_gets_the_defaults_with_a_warning() {
    let (env, _) = shared();
    let a = apply(env, env.tunectl(), &["n=64"]);
    assert_eq!(a.code, Some(7));
    assert_eq!(a.arg1, "base", "{a:?}");
    assert_eq!(a.arg2, "64");
    assert_eq!(a.knobs, json!({"mode": "base"}));
    assert!(
        a.stderr.contains("warning: no bucket of tuned file")
            && a.stderr.contains("contains the cell n=64")
            && a.stderr.contains("using the study's defaults"),
        "{}",
        a.stderr
    );

    // No --cell at all: the buckets need `n`; the template cannot render
    // `{{ n }}` either, so use --print.
    let (yaml, stderr) = print(env, env.tunectl(), &[]);
    assert_eq!(top(&yaml, "source"), "defaults", "{yaml}");
    assert!(stderr.contains("--cell n=VALUE"), "{stderr}");
}

/// A study without cells whose context, description and the winning
/// categorical value hold ESC, BEL and U+202E (RIGHT-TO-LEFT OVERRIDE),
/// written in the study file as YAML escapes. The FAKE runs `fast` for
/// that value: it wins.
const CONTROLS: &str = "\u{1b}[31m\u{7}\u{202e}";
const ESCAPED_STUDY: &str = r#"name: escapes
description: "reads \e[2J\a\u202Eerom"
context: {model: "fake\e[31m\a\u202E-model"}
knobs:
  mode: {kind: categorical, values: [base, "fast\e[31m\a\u202E"], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ 'base' if mode == 'base' else 'fast' }} 1"
  timeout: 20s
objective: {metric: throughput, unit: ops/s, better: higher}
measurement: {warmup: 0, repeats: 3}
"#;

/// [`ESCAPED_STUDY`] launched and exported once, shared by the tests
/// below (they only read it): the Env and its tuned file.
fn escaped() -> &'static (Env, PathBuf) {
    static SHARED: OnceLock<(Env, PathBuf)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let env = with_workload(Env::in_target_tmp("export_apply_escapes-", ESCAPED_STUDY));
        env.launch_ok(&[]);
        let files = export(&env);
        assert_eq!(files.len(), 1, "{files:?}");
        let file = files[0].clone();
        (env, file)
    })
}

/// Control characters and bidi overrides from the study (context, knob
/// values, labels made of them) are written into the tuned file as YAML
/// escapes: no ESC, BEL, U+202E or other control or format character is
/// in its bytes, a reader that knows YAML's escapes (this test's own)
/// reads back the very strings, and `apply` of the file passes the
/// winner's value on byte for byte.
#[test]
fn export_writes_control_characters_as_escapes_that_read_back() {
    let (env, file) = escaped();
    let bytes = std::fs::read(file).expect("tuned file");
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    for (what, raw) in [
        ("ESC", &b"\x1b"[..]),
        ("BEL", &b"\x07"[..]),
        ("U+202E", "\u{202e}".as_bytes()),
    ] {
        assert!(
            !bytes.windows(raw.len()).any(|w| w == raw),
            "a raw {what} in the tuned file:\n{}",
            text.escape_debug()
        );
    }
    let raw: Vec<char> = text
        .chars()
        .filter(|c| {
            (c.is_control() && *c != '\n')
                || matches!(u32::from(*c), 0x200B..=0x200F | 0x2028..=0x202E | 0x2066..=0x2069 | 0xFEFF)
        })
        .collect();
    assert!(raw.is_empty(), "raw {raw:?} in:\n{}", text.escape_debug());
    assert!(text.contains(r#"\e[31m\a\u202E"#), "{text}");

    let fast = format!("fast{CONTROLS}");
    let doc = yaml_to_json(&text);
    assert_eq!(doc["context"]["model"], format!("fake{CONTROLS}-model"));
    assert_eq!(doc["domains"]["mode"]["values"], json!(["base", fast]));
    assert_eq!(doc["baseline"], json!({"mode": "base"}));
    let bucket = &doc["buckets"][0];
    assert_eq!(bucket["knobs"], json!({"mode": fast}), "{bucket}");
    assert_eq!(bucket["winner"], format!("mode={fast}"), "{bucket}");

    // apply reads the file (its values checked against its domains) and
    // gives the command the value as the study had it.
    let mut cmd = env.tunectl();
    cmd.arg("apply")
        .arg("--tuned")
        .arg(file)
        .args(["--", "sh"])
        .arg(workload(env))
        .args(["{{ mode }}", "x"]);
    let out = env.run(cmd);
    assert_eq!(out.code, Some(7), "{}", out.text());
    let line = |key: &str| -> String {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}:\n{}", out.text()))
            .to_string()
    };
    assert_eq!(line("arg1"), fast);
    assert_eq!(line("TUNECTL_KNOB_MODE"), fast);
    let knobs: Json = serde_json::from_str(&line("TUNECTL_KNOBS")).expect("TUNECTL_KNOBS");
    assert_eq!(knobs, json!({"mode": fast}));
}

/// `apply --cell` of an axis the study does not have is refused (exit 2),
/// naming the axis: for a study without cells, saying it has none (it used
/// to be passed on to the command as if it chose a bucket); for a study
/// with cells, listing them.
#[test]
fn apply_refuses_a_cell_axis_the_study_does_not_have() {
    let (env, file) = escaped();
    for cells in [&["bogus=1"][..], &["bogus=1", "n=2"]] {
        let mut cmd = env.tunectl();
        cmd.arg("apply").arg("--tuned").arg(file);
        for c in cells {
            cmd.args(["--cell", c]);
        }
        cmd.args(["--print"]);
        let out = env.run(cmd);
        assert_eq!(out.code, Some(2), "{cells:?}: {}", out.text());
        assert!(
            out.stderr.contains("--cell bogus")
                && out.stderr.contains("has no cell axes")
                && out.stderr.contains("no axis `bogus`"),
            "{cells:?}: {}",
            out.text()
        );
        assert!(out.stdout.is_empty(), "{}", out.text());
    }
    // Without --cell it applies.
    let mut cmd = env.tunectl();
    cmd.arg("apply").arg("--tuned").arg(file).arg("--print");
    let out = env.run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.text());

    // A study with cells: an axis it lacks is named with the study's axes.
    let (env, _) = shared();
    let mut cmd = env.tunectl();
    cmd.arg("apply")
        .arg("--tuned")
        .arg(tuned(env))
        .args(["--cell", "n=1", "--cell", "bogus=1", "--print"]);
    let out = env.run(cmd);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains("--cell bogus") && out.stderr.contains("(axes: n)"),
        "{}",
        out.text()
    );
}

#[test]
fn apply_refuses_bad_input() {
    let (env, _) = shared();
    let run = |args: &[&str]| {
        let mut cmd = env.tunectl();
        cmd.arg("apply").args(args);
        let out = env.run(cmd);
        (out.code, out.stderr)
    };
    let tuned = tuned(env).display().to_string();
    let (code, err) = run(&["--tuned", &tuned, "--cell", "batch=4", "--print"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no axis `batch` (axes: n)"), "{err}");
    let (code, err) = run(&["--tuned", &tuned, "--cell", "n"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run(&["--tuned", &tuned]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs a command"), "{err}");
    let (code, err) = run(&[
        "--tuned",
        &tuned,
        "--cell",
        "n=1",
        "--",
        "echo",
        "{{ nope }}",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("undefined"), "{err}");
    let empty = env.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let (code, err) = run(&["--tuned", &empty.display().to_string(), "--print"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no tuned files"), "{err}");
}

/// Two studies exported into one directory would overwrite each other's
/// files (same host class, same file name), or leave a directory `apply`
/// refuses: the second export is refused, naming the first study's file,
/// and writes nothing. Re-exporting the same study is fine.
#[test]
fn export_refuses_a_directory_holding_another_studys_tuned_files() {
    let study = |name: &str| {
        format!(
            "name: {name}
knobs:
  mode: {{kind: categorical, values: [base, fast], default: base}}
trial: {{command: \"sh {{{{ study_dir }}}}/fake-trial.sh {{{{ mode }}}} 1\"}}
objective: {{metric: throughput, better: higher}}
measurement: {{warmup: 0, repeats: 3, confirm_repeats: 0}}
"
        )
    };
    let env = Env::new(&study("one"));
    env.launch_ok(&[]);
    let files = export(&env);
    assert_eq!(files.len(), 1);
    let before = read(&files[0]);

    env.write_study(&study("two"));
    env.launch_ok(&[]);
    let out = env.tunectl_run(&["export", &env.study_arg(), "--ledger", env.ledger_url()]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr
            .contains("already holds tuned files of another study or spec")
            && out.stderr.contains("(study one, spec "),
        "{}",
        out.text()
    );
    assert_eq!(
        read(&files[0]),
        before,
        "the first study's file was changed"
    );
    let listed = std::fs::read_dir(tuned(&env)).expect("tuned/").count();
    assert_eq!(listed, 1, "the second export wrote something");

    // The first study, by its id, exports into it again.
    let again = env.tunectl_ok(&["export", "one", "--ledger", env.ledger_url()]);
    assert_eq!(again.lines().count(), 1);
}

#[test]
fn export_without_results_fails_and_names_the_study() {
    let env = Env::new(STUDY);
    let mut cmd = env.tunectl();
    cmd.arg("export")
        .arg(env.study())
        .args(["--ledger", env.ledger_url()]);
    let out = env.run(cmd);
    assert_eq!(out.code, Some(1));
    let err = &out.stderr;
    assert!(err.contains("no ledger at"), "{err}");
}

// ------------------------------------------------------------ YAML reader

/// A reader for the block YAML tunectl writes (maps, lists, `[]`, `{}`,
/// plain and double-quoted scalars), written here so that the test does
/// not trust tunectl's own loader to read tunectl's own output.
fn yaml_to_json(text: &str) -> Json {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(|l| (l.len() - l.trim_start().len(), l.trim_start()))
        .collect();
    let mut pos = 0;
    let v = block(&lines, &mut pos, 0);
    assert_eq!(pos, lines.len(), "unread lines from {pos}");
    v
}

/// A YAML double-quoted scalar's string (`s` with its quotes), with every
/// escape YAML 1.2 defines (a superset of JSON's: `\e`, `\a`, `\x1B`...).
fn double_quoted(s: &str) -> String {
    let body = s
        .strip_prefix('"')
        .and_then(|b| b.strip_suffix('"'))
        .unwrap_or_else(|| panic!("not double-quoted: {s}"));
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next().unwrap_or_else(|| panic!("a lone \\ in {s}"));
        let hex = |n: usize, chars: &mut std::str::Chars| -> char {
            let digits: String = chars.take(n).collect();
            u32::from_str_radix(&digits, 16)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or_else(|| panic!("bad escape \\{e}{digits} in {s}"))
        };
        out.push(match e {
            '0' => '\0',
            'a' => '\x07',
            'b' => '\x08',
            't' => '\t',
            'n' => '\n',
            'v' => '\x0b',
            'f' => '\x0c',
            'r' => '\r',
            'e' => '\x1b',
            ' ' | '"' | '/' | '\\' => e,
            'N' => '\u{85}',
            '_' => '\u{a0}',
            'L' => '\u{2028}',
            'P' => '\u{2029}',
            'x' => hex(2, &mut chars),
            'u' => hex(4, &mut chars),
            'U' => hex(8, &mut chars),
            other => panic!("unknown escape \\{other} in {s}"),
        });
    }
    out
}

fn scalar(s: &str) -> Json {
    let s = s.trim();
    if s.starts_with('"') {
        return Json::String(double_quoted(s));
    }
    match s {
        "null" => Json::Null,
        "true" => Json::Bool(true),
        "false" => Json::Bool(false),
        "[]" => json!([]),
        "{}" => json!({}),
        _ => serde_json::from_str::<serde_json::Number>(s)
            .map(Json::Number)
            .unwrap_or_else(|_| Json::String(s.to_string())),
    }
}

/// Split `key: rest` (the key may be double-quoted).
fn key_value(s: &str) -> Option<(String, &str)> {
    if let Some(body) = s.strip_prefix('"') {
        let end = body.find("\":").map(|i| i + 1)?;
        let key = double_quoted(&s[..=end]);
        return Some((key, s[end + 2..].trim_start()));
    }
    let i = s.find(':')?;
    Some((s[..i].to_string(), s[i + 1..].trim_start()))
}

fn block(lines: &[(usize, &str)], pos: &mut usize, indent: usize) -> Json {
    let Some(&(ind, first)) = lines.get(*pos) else {
        return Json::Null;
    };
    assert!(ind >= indent, "bad indentation at {first:?}");
    if first.starts_with("- ") {
        let mut items = Vec::new();
        while let Some(&(i, l)) = lines.get(*pos) {
            if i != ind || !l.starts_with("- ") {
                break;
            }
            let rest = &l[2..];
            if key_value(rest).is_some() {
                // A map item: its first line is after the dash.
                let mut synthetic: Vec<(usize, &str)> = vec![(ind + 2, rest)];
                let start = *pos + 1;
                let mut end = start;
                while end < lines.len() && lines[end].0 > ind {
                    end += 1;
                }
                synthetic.extend_from_slice(&lines[start..end]);
                let mut p = 0;
                items.push(block(&synthetic, &mut p, ind + 2));
                *pos = end;
            } else {
                items.push(scalar(rest));
                *pos += 1;
            }
        }
        Json::Array(items)
    } else {
        let mut map = serde_json::Map::new();
        while let Some(&(i, l)) = lines.get(*pos) {
            if i != ind {
                assert!(i < ind, "bad indentation at {l:?}");
                break;
            }
            let (k, rest) = key_value(l).unwrap_or_else(|| panic!("not a key: {l:?}"));
            *pos += 1;
            let v = if rest.is_empty() {
                block(lines, pos, ind + 1)
            } else {
                scalar(rest)
            };
            map.insert(k, v);
        }
        Json::Object(map)
    }
}

/// A study that chooses its class key: the CPU model left out, the
/// version of a tool (a FAKE one: it prints `$FAKE_TOOLVER`) added.
fn keyed_study() -> String {
    format!(
        "{STUDY}fingerprint:\n  tools:\n    fakever: echo \"v${{FAKE_TOOLVER:-none}}\"\n  class_key:\n    drop: [cpu_model]\n    add: [\"tool:fakever\"]\n"
    )
}

#[test]
fn a_studys_class_key_classes_the_launch_the_export_and_apply_alike() {
    let env = with_workload(Env::in_target_tmp("export_apply_key-", &keyed_study()))
        .with_var("FAKE_TOOLVER", "1.2");
    env.launch_verdict(&[]);
    let files = export(&env);
    assert_eq!(files.len(), 1, "{files:?}");
    let text = read(&files[0]);
    let file = yaml_to_json(&text);
    assert_eq!(
        file["class_key"]["fields"],
        json!([
            "gpu_model",
            "gpu_memory",
            "gpu_count",
            "driver_major",
            "tool:fakever"
        ]),
        "{text}"
    );
    assert_eq!(
        file["class_key"]["tools"]["fakever"],
        json!("echo \"v${FAKE_TOOLVER:-none}\""),
        "{text}"
    );
    // The class is the key's, not the default one `tunectl fingerprint`
    // shows, and its label names the tool, not the CPU it left out.
    let class = top(&text, "host_class");
    assert_ne!(class, this_class(&env, false));
    let label = top(&text, "class_label");
    assert!(label.ends_with(", fakever v1.2"), "{label}");
    assert!(!label.contains("cpus"), "{label}");

    // plan names the key, and classes this host by it as the launch did.
    let plan = env.tunectl_ok(&[
        "plan",
        &env.study_arg(),
        "--dry-run",
        "--ledger",
        env.ledger_url(),
    ]);
    assert!(
        plan.contains("host classes (class key: gpu_model, gpu_memory, gpu_count, driver_major, tool:fakever):"),
        "{plan}"
    );
    assert!(plan.contains(&format!("{class} · ")), "{plan}");

    // apply probes the tool as the launch did: the same version is this class.
    let (yaml, _) = print(&env, env.tunectl(), &["--cell", "n=1"]);
    assert_eq!(top(&yaml, "source"), "tuned", "{yaml}");
    assert_eq!(top(&yaml, "host_class"), class, "{yaml}");

    // Another version of the tool is another class: the defaults, with the
    // reason naming both classes.
    let mut other = env.tunectl();
    other.env("FAKE_TOOLVER", "2.0");
    let (yaml, stderr) = print(&env, other, &["--cell", "n=1"]);
    assert_eq!(top(&yaml, "source"), "defaults", "{yaml}");
    assert_ne!(top(&yaml, "host_class"), class, "{yaml}");
    assert!(stderr.contains(&format!("is for {class}")), "{stderr}");
    assert!(stderr.contains("fakever v2.0"), "{stderr}");

    // A tuned file whose key reads a tool it has no command for is refused.
    let broken = text.replace("    fakever: ", "    other: ");
    assert_ne!(broken, text);
    std::fs::write(&files[0], broken).expect("write");
    let mut cmd = env.tunectl();
    cmd.args(["apply", "--tuned"])
        .arg(tuned(&env))
        .arg("--print");
    let out = env.run(cmd);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains(
            "class_key.fields names `tool:fakever` but class_key.tools has no command for `fakever`"
        ),
        "{}",
        out.stderr
    );
}
