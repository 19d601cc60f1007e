//! Values are data, never code: knob values that look like shell code run
//! through `tunectl launch` in every quoting context a template can put
//! them in, and nothing of them runs (no marker file appears) while the
//! trial command sees each value exactly as written.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use support::ran_to_the_end;

fn tunectl(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("tunectl").expect("the tunectl binary");
    cmd.current_dir(dir)
        .env_remove("TUNECTL_LEDGER")
        .env_remove("TUNECTL_WORKDIR")
        .env_remove("TUNECTL_LOG")
        .timeout(Duration::from_secs(120));
    cmd
}

/// Every file named `pwned*` under `dir`.
fn markers(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if e.file_name().to_string_lossy().starts_with("pwned") {
                out.push(p.display().to_string());
            }
        }
    }
    out
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
    // The value as a plain word, after `=`, inside "...", inside '...', and
    // inside "..." inside $(...), each between brackets.
    let study = format!(
        r#"name: injection
knobs:
  v: {{kind: categorical, values: [{}], default: plain}}
trial:
  command: >-
    printf '[%s][%s][%s][%s][%s]' {{{{ v }}}} --v={{{{ v }}}} "--v={{{{ v }}}}" '--v={{{{ v }}}}'
    "$(printf '%s' "{{{{ v }}}}")" > {{{{ study_dir }}}}/seen/{{{{ trial_id }}}}.txt;
    echo '{{"metrics": {{"t": 1}}}}' > {{{{ result }}}}
objective: {{metric: t, better: higher}}
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
"#,
        yaml_values.join(", ")
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
        .map(|v| format!("[{v}][--v={v}][--v={v}][--v={v}][{v}]"))
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
