//! Property tests (proptest, a few hundred cases each, seconds): a value
//! reaches a command as written and never runs, under every shell at hand,
//! and the input parsers never panic on arbitrary text. The long-running
//! fuzzer is benches/fuzz.rs (docs/fuzzing.md); benches/shell_differential.sh
//! runs the shell property with many more cases.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tunectl::spec::template::{check_shell_template, render_shell};
use tunectl::spec::{CommandRenderer, Study, TrialVars, Value};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text that likes shell metacharacters, quotes and control characters.
fn nasty() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("$(".to_string()),
            Just("`".to_string()),
            Just("'".to_string()),
            Just("\"".to_string()),
            Just("\\".to_string()),
            Just("\n".to_string()),
            Just(";".to_string()),
            Just("${".to_string()),
            Just("!".to_string()),
            Just("*".to_string()),
            "[ -~]{0,3}",
            "\\PC{0,2}",
        ],
        0..12,
    )
    .prop_map(|v| v.concat())
}

/// The shells a command may meet as `/bin/sh`: dash, bash in POSIX mode,
/// busybox's ash; those installed here.
fn shells() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let found = |name: &str| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    };
    if let Some(p) = found("dash") {
        out.push(vec![p.display().to_string()]);
    }
    if let Some(p) = found("bash") {
        out.push(vec![p.display().to_string(), "--posix".to_string()]);
    }
    if let Some(p) = found("busybox") {
        out.push(vec![p.display().to_string(), "sh".to_string()]);
    }
    if out.is_empty() {
        out.push(vec!["/bin/sh".to_string()]);
    }
    out
}

/// Run `command` under `shell` in `dir` with `env` added, stdin empty,
/// output discarded (or returned), killed after 5 s.
fn run_shell(shell: &[String], command: &str, env: &[(String, String)], dir: &Path) -> Vec<u8> {
    let out_file = dir.join(".stdout");
    let stdout = std::fs::File::create(&out_file).expect("stdout file");
    let mut child = Command::new(&shell[0])
        .args(&shell[1..])
        .arg("-c")
        .arg(command)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .expect("the shell starts");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = std::fs::read(&out_file).unwrap_or_default();
    let _ = std::fs::remove_file(&out_file);
    out
}

/// Pieces of shell text that the context analysis must get right around
/// a hole: quotes opened and closed, a `#` where it starts a comment and
/// where it does not (after a quote, inside a word, in `$#`), `$` forms,
/// backslashes, newlines inside and outside quotes, here-documents.
fn shell_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("'"),
        Just("\""),
        Just("#"),
        Just(" #"),
        Just("\"$PWD\""),
        Just("\"a\""),
        Just("'a'"),
        Just("'\n'"),
        Just("\"\n\""),
        Just("$#"),
        Just("${#}"),
        Just("$"),
        Just("$("),
        Just("$(("),
        Just("(("),
        Just(")"),
        Just("${"),
        Just("}"),
        Just("$'"),
        Just("\\"),
        Just("`"),
        Just("\n"),
        Just(" "),
        Just(";"),
        Just("|"),
        Just("<<E\n"),
        Just("<<'E'\n"),
        Just("\nE\n"),
        Just("case "),
        Just("x="),
        Just("a"),
        Just("[[ "),
        Just(" -eq 1 ]]"),
    ]
    .prop_map(str::to_string)
}

/// A template: `echo `, a few pieces, a hole, a few more pieces (and,
/// once in a while, more holes among them).
fn shell_template() -> impl Strategy<Value = String> {
    let side = proptest::collection::vec(
        prop_oneof![12 => shell_piece(), 1 => Just("{{ v }}".to_string())],
        0..7,
    );
    (side.clone(), side).prop_map(|(before, after)| {
        format!("echo {}{{{{ v }}}}{}", before.concat(), after.concat())
    })
}

/// Values that run `touch MARK` wherever the shell would read them as code.
fn payloads(mark: &str) -> Vec<String> {
    vec![
        format!("$(touch {mark})"),
        format!("`touch {mark}`"),
        format!(";touch {mark}"),
        format!("|touch {mark}"),
        format!("&&touch {mark}"),
        format!("\ntouch {mark}\n"),
        format!("';touch {mark};'"),
        format!("\";touch {mark};\""),
        format!("\\';touch {mark};#"),
        format!("\\\";touch {mark};#"),
        format!("a[$(touch {mark})]"),
        format!("${{IFS}}$(touch${{IFS}}{mark})"),
        format!("$((1))$(touch {mark})"),
        format!("#\ntouch {mark}"),
        format!("E\ntouch {mark}\nE"),
        format!(")\ntouch {mark}\n("),
        format!("}}\ntouch {mark}\n{{"),
        format!("'\"$(touch {mark})\"'"),
    ]
}

/// The cases of the shell property: 64 in the suite,
/// `TUNECTL_SHELL_CASES` for a longer run.
fn shell_cases() -> u32 {
    std::env::var("TUNECTL_SHELL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// A study whose only knob `v` takes `values` and whose command is
/// `template`, loaded as `launch` loads it (with its checks of templates).
fn study_with(template: &str, values: &[String]) -> Option<Study> {
    let json = |s: &str| serde_json::to_string(s).expect("JSON string");
    let values: Vec<String> = values.iter().map(|v| json(v)).collect();
    let text = format!(
        "name: diff\nknobs:\n  v: {{kind: categorical, values: [plain, {}], default: plain}}\ntrial:\n  command: {}\nobjective: {{metric: t, better: higher}}\n",
        values.join(", "),
        json(template)
    );
    Study::from_text(Path::new("/tmp/study.yaml"), &text).ok()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_value_reaches_the_command_as_written_in_every_quoting(v in nasty()) {
        let mut vars = TrialVars::default();
        vars.set("v", Value::Str(v.clone()));
        let r = render_shell(
            r#"printf '%s|%s|%s|%s|%s' {{ v }} "{{ v }}" --v={{ v }} "$(printf '%s' "-{{ v }}")" {{ v ~ '!' }}"#,
            &vars,
            &[],
        )
        .expect("renders");
        let dir = tempfile::tempdir().expect("tempdir");
        for shell in shells() {
            let out = run_shell(&shell, &r.command, &r.env, dir.path());
            prop_assert_eq!(
                String::from_utf8_lossy(&out).into_owned(),
                // (`$(...)` drops the trailing newlines of its output.)
                format!("{v}|{v}|--v={v}|-{}|{v}!", v.trim_end_matches('\n')),
                "{:?}: command: {}", shell, r.command
            );
        }
    }

    #[test]
    fn template_checks_never_panic(t in "\\PC{0,64}", u in "[{}%#$`'\"\\\\()<>\n a-z-]{0,48}") {
        let _ = check_shell_template(&t);
        let _ = check_shell_template(&u);
        let mut vars = TrialVars::default();
        vars.set("a", Value::Str(t.clone()));
        let _ = render_shell(&u, &vars, &[]);
    }

    #[test]
    fn study_and_inventory_loading_never_panic(t in "[ -~\n]{0,200}") {
        let _ = tunectl::spec::Study::from_text(Path::new("s.yaml"), &t);
        let _ = tunectl::spec::Inventory::from_text(Path::new("i.yaml"), &t);
        let _ = tunectl::tuned::parse(Path::new("t.yaml"), &t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: shell_cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The differential test of the issue: templates that mix quotes,
    /// comments, `$` forms, backslashes and newlines around a hole (where a
    /// hand-written model of the shell's grammar may disagree with the
    /// shell), rendered with values that are shell code, and run under
    /// every shell at hand: whatever the analysis made of the context, no
    /// value ever runs. A template the loader refuses is not run.
    #[test]
    fn no_value_runs_under_any_shell_whatever_the_template(
        template in shell_template(),
        picks in proptest::sample::subsequence((0..18usize).collect::<Vec<_>>(), 4),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mark: PathBuf = dir.path().join("PWNED");
        let all = payloads(&mark.display().to_string());
        let chosen: Vec<String> = picks.iter().map(|i| all[*i].clone()).collect();
        let Some(study) = study_with(&template, &chosen) else {
            return Ok(());
        };
        let renderer = CommandRenderer::new(&study).expect("a loaded study's renderer");
        for payload in &chosen {
            let mut vars = TrialVars::default();
            vars.set("v", Value::Str(payload.clone()));
            let env = vec![("TUNECTL_KNOB_V".to_string(), payload.clone())];
            let Ok(r) = renderer.command(&vars, &env) else {
                continue;
            };
            prop_assert!(!r.command.contains("touch"), "a value's text in the command: {}", r.command);

            let mut env = env;
            env.extend(r.env.clone());
            for shell in shells() {
                let _ = run_shell(&shell, &r.command, &env, dir.path());
                prop_assert!(
                    !mark.exists(),
                    "{:?} ran the value {:?}\ntemplate: {:?}\ncommand: {}",
                    shell, payload, template, r.command
                );
            }
        }
    }
}
