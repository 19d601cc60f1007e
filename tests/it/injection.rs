//! Values are data, never code: knob values that look like shell code run
//! through `tunectl launch` in every shell context a template can put them
//! in (and in the templates reported to fool the context analysis), and
//! nothing of them runs (no marker file appears) while the trial command
//! sees each value exactly as written. A value reaches the command only as
//! the expansion of an environment variable: its text is never in the
//! command (`spec::template`).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;

use crate::support;
use crate::support::injection::markers;
use crate::support::{injection, ledger_files, ran_to_the_end};

fn tunectl(dir: &Path) -> Command {
    let mut cmd = support::env::tunectl_in(dir);
    cmd.timeout(Duration::from_secs(120));
    cmd
}

#[test]
fn values_that_look_like_code_stay_data_in_every_quoting_context() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::create_dir(dir.join("seen")).expect("mkdir seen");
    let mark = |n: u32| dir.join(format!("pwned{n}")).display().to_string();
    let values: Vec<String> = vec![
        "plain".into(),
        format!("$(touch {})", mark(1)),
        format!("`touch {}`", mark(2)),
        format!("'; touch {}; '", mark(3)),
        format!("\"; touch {}; \"", mark(4)),
        "\"".into(),
        "'".into(),
        format!("a\nb; touch {}", mark(5)),
        "back\\".into(),
        "$HOME ${HOME} $((1+1))".into(),
        "--x=* ~ !1 #c".into(),
    ];
    let yaml_values: Vec<String> = values
        .iter()
        .map(|v| serde_json::to_string(v).expect("json"))
        .collect();
    // The value as a plain word, after `=`, inside "...", after '...', and
    // inside "..." inside $(...), each between brackets; then an expression
    // of it (a variable of its own), and a cell's value.
    let study = format!(
        r#"name: injection
knobs:
  v: {{kind: categorical, values: [{}], default: plain}}
cells:
  c: ["$(touch {mark0})"]
trial:
  command: >-
    printf '[%s][%s][%s][%s][%s][%s][%s]' {{{{ v }}}} --v={{{{ v }}}} "--v={{{{ v }}}}" '--v='{{{{ v }}}}
    "$(printf '%s' "{{{{ v }}}}")" {{{{ v ~ '!' }}}} {{{{ c }}}} > {{{{ study_dir }}}}/seen/{{{{ trial_id }}}}.txt;
    echo '{{"metrics": {{"t": 1}}}}' > {{{{ result }}}}
objective: {{metric: t, better: higher}}
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
"#,
        yaml_values.join(", "),
        mark0 = mark(0)
    );
    std::fs::write(dir.join("study.yaml"), &study).expect("write study");
    let out = tunectl(dir)
        .args([
            "launch",
            "study.yaml",
            "--progress",
            "quiet",
            "--keep-workdirs",
        ])
        .arg("--ledger")
        .arg(dir.join("ledger"))
        .arg("--workdir")
        .arg(dir.join("work"))
        .output()
        .expect("run launch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        ran_to_the_end(out.status.code(), &stderr),
        "launch failed:\n{stderr}"
    );
    assert_eq!(markers(dir), Vec::<String>::new(), "a value ran as code");
    let seen: BTreeSet<String> = std::fs::read_dir(dir.join("seen"))
        .expect("seen/")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).expect("read"))
        .collect();
    let expected: BTreeSet<String> = values
        .iter()
        .map(|v| {
            format!(
                "[{v}][--v={v}][--v={v}][--v={v}][{}][{v}!][$(touch {})]",
                v.trim_end_matches('\n'),
                mark(0)
            )
        })
        .collect();
    assert_eq!(seen, expected, "stderr:\n{stderr}");
}

#[test]
fn a_value_where_no_quoting_is_safe_is_refused_at_load_with_its_place() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let study = r#"name: injection
knobs:
  v: {kind: categorical, values: [a, "$(touch pwned)"], default: a}
trial:
  command: >-
    printf '%s' {{ v }}
    `echo {{ v }}` > {{ result }}
objective: {metric: t, better: higher, command: "x=${{ v }}"}
strategy: {kind: tpe, count: 2}
fidelity: {unit: steps, min_budget: 1, max_budget: 3}
"#;
    std::fs::write(dir.join("study.yaml"), study).expect("write study");
    let out = tunectl(dir)
        .args(["plan", "study.yaml", "--dry-run"])
        .output()
        .expect("run plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("study.yaml:7:11: trial.command: a value inside backticks"),
        "{stderr}"
    );
    assert!(
        stderr.contains("study.yaml:8:53: objective.command: a value right after `$`"),
        "{stderr}"
    );
    assert_eq!(markers(dir), Vec::<String>::new());
}

/// Found by the shell differential (benches/shell_differential.sh): bash
/// reads the text of an expansion again in `[[ x -eq y ]]` (arithmetic,
/// where `a[$(cmd)]` runs `cmd`), and so in `let`, `declare -i`, array
/// subscripts, `eval`, `PS4`... Where `sh` is bash (RHEL, Fedora, macOS),
/// `[[ "${TUNECTL_KNOB_V}" -eq 1 ]]` ran a value. Each such template is now
/// refused when the study loads, with its place; plain uses next to them
/// still plan.
#[test]
fn where_bash_reads_a_value_again_the_study_is_refused_at_load_with_its_place() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let study = |command: &str| {
        format!(
            "name: bash-reads\nknobs:\n  v: {{kind: categorical, values: [\"1\", \"a[$(touch pwned)]\"], default: \"1\"}}\ntrial:\n  command: {}\nobjective: {{metric: t, better: higher}}\n",
            serde_json::to_string(command).expect("JSON")
        )
    };
    for (command, place, why) in [
        // Two of the differential's templates, as it found them.
        (
            "echo |[[ {{ v }} -eq 1 ]]",
            "5:22",
            "a value inside [[ ... ]]",
        ),
        (
            "echo {{ v }}\n[[ {{ v }} -eq 1 ]]",
            "5:30",
            "a value inside [[ ... ]]",
        ),
        (
            "let n={{ v }}+1; run",
            "5:19",
            "a value as an argument of `let`",
        ),
        (
            "declare -i n={{ v }}; run",
            "5:26",
            "a value in `declare -i`",
        ),
        ("a[{{ v }}]=1; run", "5:15", "a value in an array subscript"),
        (
            "eval run {{ v }}",
            "5:22",
            "a value as an argument of `eval`",
        ),
        (
            "PS4={{ v }}; set -x; run",
            "5:17",
            "a value assigned to PS4",
        ),
        (
            "echo \"${PWD:\"{{ v }}\"}\"",
            "5:28",
            "a value inside ${...}",
        ),
        (
            "echo $[ {{ v }} + 1 ]",
            "5:21",
            "a value after bash's old `$[...]` arithmetic",
        ),
        // The differential's later finds: a name made with an expansion,
        // an attribute given on another line.
        (
            "$()eval x={{ v }}",
            "5:23",
            "a value in a command whose name is made with an expansion",
        ),
        ("declare -i x\nx={{ v }}", "5:29", "a value assigned to `x`"),
        // And at 8a91d46: a subscript open across a newline, and a value
        // that a `$(...)` prints where `[[ ]]` reads it.
        (
            "a[\nx;{{ v }}]=1; run",
            "5:19",
            "a value in an array subscript",
        ),
        (
            "[[ $(echo {{ v }}) -eq 1 ]] && run",
            "5:23",
            "a value inside [[ ... ]]",
        ),
        // And at e9e07a1, under dash: an unquoted `$(...)` at the
        // command's name splits what it prints into a command.
        (
            "$(echo {{ v }}) --n 1",
            "5:20",
            "a value inside an unquoted `$(...)` that stands as a command's name",
        ),
        // And at df9a779: a second `-v` of bash's printf.
        (
            "printf -v x -v {{ v }} '%s' 1",
            "5:28",
            "a value as the variable name of `printf -v`",
        ),
        // And at 2e32302: `}` as an argument, a `=` inside a subscript,
        // and (found reading them) a subscripted assignment before the
        // command's name.
        (
            "eval test -v } {{ v }}; run",
            "5:28",
            "a value as an argument of `eval`",
        ),
        (
            "a[x=1 {{ v }}]=1; run",
            "5:19",
            "a value in an array subscript",
        ),
        (
            "a[1]=2 eval {{ v }}",
            "5:25",
            "a value as an argument of `eval`",
        ),
        // And at 2d9d058: an unquoted expansion that vanishes (or splits
        // into `-v`) before the value among test's arguments.
        (
            "test -v $x {{ v }}; run",
            "5:24",
            "a value after an unquoted expansion among the arguments of `test`",
        ),
        // And at 9ec632a, under dash: the substitution prints `eval`,
        // which field splitting makes the command, the value its argument.
        (
            "echo \nE\n$(echo eval '\n')x={{ v }}{{ v }}PS4=",
            "5:42",
            "a value in a command whose name is made with an expansion",
        ),
        (
            "$PYTHON train.py --lr {{ v }}",
            "5:35",
            "a value in a command whose name is made with an expansion",
        ),
        // A function or an alias of the template: code tunectl does not
        // follow (dash runs the alias's `eval`).
        (
            "alias r=eval\nr {{ v }}",
            "5:29",
            "a value given to `r`, which the template defines as a function or an alias",
        ),
        (
            "f() { eval \"$1\"; }; f {{ v }}",
            "5:37",
            "a value given to `f`, which the template defines as a function or an alias",
        ),
        // At d1a0a45, under dash: the value reached `eval` through `$x`.
        (
            "echo alias r=eval\nx={{ v }}export  set -x;eval trap $x [ -v ",
            "5:34",
            "a value assigned to `x`, which the template evaluates",
        ),
        (
            "x={{ v }}; y=$x; eval \"$y\"",
            "5:15",
            "a value assigned to `x`, which the template evaluates",
        ),
        // At 03a225e, under dash: the value split at a command's name.
        (
            "x={{ v }}; $x --n 1",
            "5:15",
            "a value assigned to `x`, which the template evaluates",
        ),
        // At 9f77d17, under dash: an empty `$x` left `alias` to define `r`.
        (
            "$x alias r=eval\nr {{ v }}",
            "5:32",
            "a value given to `r`, which the template defines as a function or an alias, or may",
        ),
    ] {
        std::fs::write(dir.join("study.yaml"), study(command)).expect("write study");
        let out = tunectl(dir)
            .args(["plan", "study.yaml", "--dry-run"])
            .output()
            .expect("run plan");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        let expected = format!("study.yaml:{place}: trial.command: {why}");
        assert!(
            stderr.contains(&expected),
            "{command}: want {expected:?} in {stderr}"
        );
    }
    for command in [
        "[ {{ v }} -eq 1 ] && export X={{ v }} && printf -v y '%s' {{ v }}",
        "[[ -d / ]] && run {{ v }}",
        "run --n \"$(printf %s {{ v }})\"",
        "\"$VENV\"/bin/python train.py --lr {{ v }}",
    ] {
        std::fs::write(dir.join("study.yaml"), study(command)).expect("write study");
        let out = tunectl(dir)
            .args(["plan", "study.yaml", "--dry-run"])
            .output()
            .expect("run plan");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(markers(dir), Vec::<String>::new());
}

/// The reported templates (tests/it/support/injection.rs): a `#` right after
/// a closing `"` or after `$#` is part of the word for `sh`, where the
/// context analysis believed a comment; with each value of a set of shell
/// code, the launch ran values as code. Now the command holds a reference
/// to `TUNECTL_KNOB_V` wherever the analysis places the hole: no value
/// runs, and each template prints the literal value.
#[test]
fn the_reported_templates_run_no_value_and_print_each_as_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let values = injection::payloads(dir);
    std::fs::write(
        dir.join("study.yaml"),
        injection::study("reported", &values),
    )
    .expect("write study");
    let out = tunectl(dir)
        .args(["launch", "study.yaml", "--progress", "quiet"])
        .arg("--ledger")
        .arg(dir.join("ledger"))
        .arg("--workdir")
        .arg(dir.join("work"))
        .output()
        .expect("run launch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        ran_to_the_end(out.status.code(), &stderr),
        "launch failed:\n{stderr}"
    );
    assert_eq!(markers(dir), Vec::<String>::new(), "a value ran as code");
    injection::check(
        &ledger_files::attempts(&dir.join("ledger"), "reported"),
        &values,
    );
}

/// Inside '...' the shell expands nothing, so a value there could not be
/// passed as a variable: the template is refused at load with its place,
/// and `plan --dry-run` shows each command with references and the
/// values beside it.
#[test]
fn a_value_inside_single_quotes_is_refused_and_the_plan_shows_references() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let study = |command: &str| {
        format!(
            "name: refs\nknobs:\n  v: {{kind: categorical, values: [a, \"$(touch pwned)\"], default: a}}\ncells:\n  n: [1]\ntrial:\n  command: {}\nobjective: {{metric: t, better: higher}}\n",
            serde_json::to_string(command).expect("JSON")
        )
    };
    std::fs::write(dir.join("study.yaml"), study("printf '%s' '--v={{ v }}'"))
        .expect("write study");
    let out = tunectl(dir)
        .args(["plan", "study.yaml", "--dry-run"])
        .output()
        .expect("run plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "study.yaml:7:30: trial.command: a value inside '...': the shell expands nothing there"
        ),
        "{stderr}"
    );

    std::fs::write(
        dir.join("study.yaml"),
        study("run --v={{ v }} \"-n {{ n }}\" {{ n * 2 }}"),
    )
    .expect("write study");
    let out = tunectl(dir)
        .args(["plan", "study.yaml", "--dry-run"])
        .output()
        .expect("run plan");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(
            "  #0 baseline\n      $ run --v=\"${TUNECTL_KNOB_V}\" \"-n ${TUNECTL_CELL_N}\" \"${TUNECTL_ARG_1}\"\n        with TUNECTL_KNOB_V=a TUNECTL_CELL_N=1 TUNECTL_ARG_1=2\n  #1 v=$(touch pwned)\n      $ (as #0) with TUNECTL_KNOB_V='$(touch pwned)'\n"
        ),
        "{stdout}"
    );
    let out = tunectl(dir)
        .args(["plan", "study.yaml", "--dry-run", "--format", "json"])
        .output()
        .expect("run plan");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    let first = &plan["first_configs"][1];
    assert_eq!(
        first["command"],
        "run --v=\"${TUNECTL_KNOB_V}\" \"-n ${TUNECTL_CELL_N}\" \"${TUNECTL_ARG_1}\""
    );
    assert_eq!(
        first["command_env"],
        serde_json::json!({"TUNECTL_KNOB_V": "$(touch pwned)", "TUNECTL_CELL_N": "1", "TUNECTL_ARG_1": "2"})
    );
    assert_eq!(markers(dir), Vec::<String>::new());
}
