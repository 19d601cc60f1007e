//! `tunectl launch` and `report` end to end, with a fake trial program
//! written at test time (POSIX sh) whose knob → speed/crash/output profile
//! is known, so the expected verdicts are known too.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::support;
use crate::support::env::{Env, Out};
use crate::support::{is_hex, process_gone, ran, wait_for};

/// The main study of the FAKE trial program (tests/it/support/fake.rs): 5
/// modes x 2 cells, 3 repeats, 1 warm-up. base runs at 100 ops/s, fast at
/// 200, slow at 50; wrong (150) changes out.txt; crash exits 3.
const STUDY: &str = r#"name: fake
knobs:
  mode: {kind: categorical, values: [base, fast, wrong, crash, slow], default: base}
cells:
  n: [1, 2]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} {{ n }}"
  timeout: 20s
objective: {metric: throughput, unit: ops/s, better: higher}
measurement: {warmup: 1, repeats: 3, anchor_every: 0, confirm_repeats: 0}
gate: {outputs: [out.txt]}
"#;

const REPEATS: u64 = 3;
const CELLS: [&str; 2] = ["n=1", "n=2"];
/// Trials a full launch of [`STUDY`] runs: per cell 3 repeats of base,
/// fast, wrong and slow, and 1 of crash (a failed config is not repeated).
const RUN_TRIALS: usize = 2 * (4 * 3 + 1);

fn attempt_count(env: &Env, study: &str) -> usize {
    env.attempts(study).values().map(Vec::len).sum()
}

fn cells(report: &Json) -> Vec<&Json> {
    let classes = report["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 1, "one host class expected: {report}");
    classes[0]["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .collect()
}

fn rejected<'a>(cell: &'a Json, label: &str) -> &'a Json {
    cell["rejected"]
        .as_array()
        .expect("rejected")
        .iter()
        .find(|r| r["label"] == label)
        .unwrap_or_else(|| panic!("{label} is not rejected in {cell}"))
}

/// What a report decides in one cell: (cell, winner, [(rejected label, class)]).
type Decision = (String, String, Vec<(String, String)>);

/// The decision of every cell of a report.
fn decisions(report: &Json) -> Vec<Decision> {
    cells(report)
        .iter()
        .map(|c| {
            let rejected = c["rejected"]
                .as_array()
                .expect("rejected")
                .iter()
                .map(|r| {
                    (
                        r["label"].as_str().unwrap_or("").to_string(),
                        r["rejection"]["class"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            (
                c["cell_label"].as_str().unwrap_or("").to_string(),
                c["winner"]["label"]
                    .as_str()
                    .unwrap_or("(none)")
                    .to_string(),
                rejected,
            )
        })
        .collect()
}

#[test]
fn launch_then_report_finds_the_winner_and_rejects_the_traps() {
    let env = Env::new(STUDY);
    let stderr = env.launch_ok(&[]).stderr;
    assert_eq!(ran(&stderr), RUN_TRIALS, "{stderr}");
    assert!(
        // mode=wrong's 6 trials ran fine, and its output differs: counted
        // apart, and the counts add up.
        stderr.contains(&format!(
            "ran {RUN_TRIALS} trials ({} ok, 6 with changed output, 2 failed), 0 lost",
            RUN_TRIALS - 2 - 6
        )),
        "{stderr}"
    );

    let report = env.report_json();
    assert_eq!(report["study_id"], "fake");
    assert_eq!(report["baseline"], serde_json::json!({"mode": "base"}));
    let cs = cells(&report);
    assert_eq!(cs.len(), 2);
    for (cell, label) in cs.iter().zip(CELLS) {
        assert_eq!(cell["cell_label"], label);
        assert_eq!(cell["baseline_state"], "ok", "{cell}");
        assert_eq!(cell["winner"]["label"], "mode=fast", "{cell}");
        assert_eq!(
            cell["winner"]["config"],
            serde_json::json!({"mode": "fast"})
        );
        let speedup = cell["winner"]["speedup"].as_f64().expect("speedup");
        assert!((1.9..2.1).contains(&speedup), "{speedup}");
        assert_eq!(cell["baseline"]["summary"]["n"], REPEATS, "{cell}");
        assert_eq!(cell["baseline"]["trials"], REPEATS, "{cell}");
        assert_eq!(cell["winner"]["summary"]["n"], REPEATS, "{cell}");
        // base reports 100.0, 100.1, 100.2.
        let median = cell["baseline"]["summary"]["median"].as_f64().unwrap();
        assert!((median - 100.1).abs() < 1e-9, "{median}");

        let wrong = rejected(cell, "mode=wrong");
        assert_eq!(wrong["rejection"]["class"], "output_changed", "{wrong}");
        let crash = rejected(cell, "mode=crash");
        assert_eq!(crash["rejection"]["class"], "crash", "{crash}");
        let detail = crash["rejection"]["detail"].as_str().unwrap_or("");
        assert!(detail.contains("exit code 3"), "{detail}");
        assert!(detail.contains("giving up on purpose"), "{detail}");
        assert_eq!(crash["trials"], 1, "a failed config is not repeated");
        assert_eq!(cell["rejected"].as_array().unwrap().len(), 2, "{cell}");

        // slow is eligible (it neither crashes nor changes output), not a winner.
        let eligible: Vec<&str> = cell["eligible"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["label"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(eligible, ["mode=fast", "mode=slow"], "{cell}");
    }

    // The ledger's layout.
    let root = env.ledger().join("fake");
    let study_json: Json = serde_json::from_str(
        &std::fs::read_to_string(root.join("study.json")).expect("study.json"),
    )
    .expect("study JSON");
    assert_eq!(study_json["study_id"], "fake");
    assert!(is_hex(study_json["spec_hash"].as_str().unwrap_or(""), 64));
    let hosts: Vec<PathBuf> = std::fs::read_dir(root.join("hosts/local"))
        .expect("hosts/local")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    let host_name = hosts[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        host_name.starts_with("fp-") && host_name.ends_with(".json"),
        "{host_name}"
    );
    let all = env.attempts("fake");
    assert_eq!(all.len(), RUN_TRIALS, "one trial key per trial run");
    let attempt_name = regex::Regex::new(r"^\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{16}\.json$").unwrap();
    for entry in std::fs::read_dir(root.join("trials")).expect("trials") {
        let dir = entry.expect("entry").path();
        let key = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(is_hex(&key, 64), "trial key {key}");
        for f in std::fs::read_dir(&dir).expect("trial dir") {
            let name = f.expect("entry").file_name().to_string_lossy().into_owned();
            assert!(attempt_name.is_match(&name), "attempt object {name}");
        }
    }
    for (key, list) in &all {
        assert_eq!(list.len(), 1, "{key}");
        let a = &list[0];
        assert_eq!(a["trial_key"], key.as_str());
        let expected = if a["config"]["mode"] == "crash" {
            "failed"
        } else {
            "ok"
        };
        assert_eq!(a["status"], expected, "{a}");
    }
    let verdicts = std::fs::read_dir(root.join("verdicts"))
        .expect("verdicts")
        .count();
    assert_eq!(verdicts, 1, "one host class");

    // Warm-ups: one per (cell, config) in this launch.
    let warmups = env.runs().iter().filter(|r| r.phase == "warmup").count();
    assert_eq!(warmups, 2 * 5, "{:?}", env.runs());
}

#[test]
fn relaunch_runs_no_new_trial() {
    let env = Env::new(STUDY);
    env.launch_ok(&[]);
    let attempts_before = attempt_count(&env, "fake");
    let runs_before = env.runs().len();
    let report_before = env.report_json();
    assert_eq!(attempts_before, RUN_TRIALS);

    let out = env.launch_ok(&[]);
    assert_eq!(
        out.counts(&["ran", "ok", "failed", "lost"]),
        [0, 0, 0, 0],
        "{}",
        out.text()
    );
    assert_eq!(attempt_count(&env, "fake"), attempts_before);
    assert_eq!(env.runs().len(), runs_before, "the fake program ran again");
    assert_eq!(decisions(&env.report_json()), decisions(&report_before));
}

#[test]
fn an_interrupted_launch_resumes_without_counting_twice() {
    let env = Env::new(STUDY);
    // The first launch: `slow`'s measured run sleeps long enough to be
    // interrupted.
    let mut cmd = env.launch_cmd(&[]);
    cmd.env("FAKE_SLEEP", "30").env("FAKE_SLEEP_MODE", "slow");
    let mut running = env.spawn(cmd);
    let marker = env.study_dir().join("sleeping");
    let started = wait_for(Duration::from_secs(20), || marker.exists());
    if !started {
        let _ = running.child.kill();
        panic!("the slow trial never started");
    }
    // Some trials are recorded by now (the cell's baseline came first).
    let recorded = attempt_count(&env, "fake");
    assert!(recorded >= 1, "no attempt recorded before the interrupt");
    running.signal(libc::SIGINT);
    let t0 = Instant::now();
    let out = env.finish(running);
    assert_eq!(out.code, Some(130), "{}", out.text());
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "stopping took {:?}",
        t0.elapsed()
    );
    assert_eq!(out.launch_doc()["outcome"], "interrupted", "{}", out.text());
    assert_eq!(out.count("lost"), 1, "{}", out.text());
    let stderr = out.stderr;
    assert!(stderr.contains("interrupted"), "{stderr}");

    // The interrupted trial is recorded as lost, and no trial is terminal twice.
    let first = env.attempts("fake");
    let lost: Vec<&Json> = first
        .values()
        .flatten()
        .filter(|a| a["status"] == "lost")
        .collect();
    assert_eq!(lost.len(), 1, "the running slow trial is lost: {lost:?}");
    assert_eq!(lost[0]["config"]["mode"], "slow");
    assert!(
        first.values().flatten().count() < RUN_TRIALS,
        "the interrupted launch did not stop early"
    );

    // The second launch completes what is missing.
    let stderr = env.launch_ok(&[]).stderr;
    let ran_second = ran(&stderr);
    let terminal_first = first
        .values()
        .filter(|l| l.iter().any(|a| a["status"] != "lost"))
        .count();
    assert_eq!(
        ran_second + terminal_first,
        RUN_TRIALS,
        "the second launch ran what the first did not finish:\n{stderr}"
    );
    let all = env.attempts("fake");
    assert_eq!(all.len(), RUN_TRIALS, "{all:?}");
    for (key, list) in &all {
        let terminal = list.iter().filter(|a| a["status"] != "lost").count();
        assert_eq!(terminal, 1, "trial {key}: {list:?}");
    }
    let lost_key = lost[0]["trial_key"].as_str().expect("key");
    assert_eq!(all[lost_key].len(), 2, "the lost trial ran again");
    assert_eq!(all[lost_key][1]["status"], "ok");

    // Same verdicts as a clean run.
    let resumed = decisions(&env.report_json());
    let clean = Env::new(STUDY);
    clean.launch_ok(&[]);
    assert_eq!(resumed, decisions(&clean.report_json()));
    for (_, winner, _) in &resumed {
        assert_eq!(winner, "mode=fast");
    }
    let report = env.report_json();
    for cell in cells(&report) {
        assert_eq!(cell["baseline"]["summary"]["n"], REPEATS, "{cell}");
        for c in cell["eligible"].as_array().unwrap() {
            assert_eq!(c["summary"]["n"], REPEATS, "counted once: {c}");
        }
    }
}

#[test]
fn a_trial_past_its_timeout_is_rejected_and_killed() {
    let env = Env::new(
        r#"name: timeouts
knobs:
  mode: {kind: categorical, values: [base, hang, fast], default: base}
cells:
  n: [1]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} {{ n }}"
  timeout: 1s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, confirm_repeats: 0}
"#,
    );
    let t0 = Instant::now();
    let out = env.launch_ok(&[]);
    let took = t0.elapsed();
    // 1 s timeout, then SIGTERM (ignored by the fake), SIGKILL 2 s later.
    assert!(took < Duration::from_secs(9), "launch took {took:?}");
    assert_eq!(
        out.counts(&["ran", "ok", "failed"]),
        [3, 2, 1],
        "{}",
        out.text()
    );

    let report = env.report_json();
    let cell = cells(&report)[0];
    let hang = rejected(cell, "mode=hang");
    assert_eq!(hang["rejection"]["class"], "timeout", "{hang}");
    // One sample each: fast is eligible, but its spread is unknown and it
    // cannot win on it (selection.min_samples).
    let eligible: Vec<&str> = cell["eligible"]
        .as_array()
        .expect("eligible")
        .iter()
        .filter_map(|c| c["label"].as_str())
        .collect();
    assert_eq!(eligible, ["mode=fast"], "{cell}");
    assert!(cell["winner"].is_null(), "{cell}");
    assert!(
        cell["decision"]
            .as_str()
            .unwrap_or("")
            .contains("min_samples"),
        "{cell}"
    );

    let attempt = env
        .attempts("timeouts")
        .into_values()
        .flatten()
        .find(|a| a["config"]["mode"] == "hang")
        .expect("the hang attempt");
    assert_eq!(attempt["failure"]["class"], "timeout", "{attempt}");
    let run_s = attempt["run_s"].as_f64().expect("run_s");
    assert!((1.0..8.0).contains(&run_s), "run_s {run_s}");

    for file in ["hang.pid", "hang-child.pid"] {
        let pid = std::fs::read_to_string(env.study_dir().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let pid = pid.trim().to_string();
        assert!(pid.parse::<u32>().is_ok(), "{file}: {pid:?}");
        assert!(
            wait_for(Duration::from_secs(1), || process_gone(&pid)),
            "process {pid} ({file}) survived the timeout"
        );
    }
}

/// `trial.files` puts the benchmark's own files in the spec: an edited
/// wrapper script is a changed study, refused with the file named, never
/// old results silently reused; a listed file that is not there is a load
/// error at its line.
#[test]
fn a_changed_benchmark_file_is_a_changed_study() {
    let study = r#"name: files
knobs:
  mode: {kind: categorical, values: [base, fast], default: base}
trial:
  command: "sh {{ study_dir }}/wrapper.sh {{ mode }}"
  files: [wrapper.sh, fake-trial.sh]
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, confirm_repeats: 0}
"#;
    let env = Env::new(study);
    let wrapper = |n: u32| format!("exec sh \"$(dirname \"$0\")/fake-trial.sh\" \"$1\" {n}\n");
    env.write("study/wrapper.sh", &wrapper(1));
    env.launch_ok(&[]);
    let before = attempt_count(&env, "files");
    assert_eq!(before, 2);

    // The study file is untouched; the wrapper it runs changed.
    env.write("study/wrapper.sh", &wrapper(2));
    let out = env.launch(&[]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr
            .contains("changed: trial.files.wrapper.sh: \"sha256:"),
        "{}",
        out.text()
    );
    assert!(out.stderr.contains("--fork"), "{}", out.text());
    assert_eq!(attempt_count(&env, "files"), before, "a trial ran");
    // Put back, it is the same study again: nothing runs.
    env.write("study/wrapper.sh", &wrapper(1));
    let out = env.launch_ok(&[]);
    assert_eq!(out.count("ran"), 0, "{}", out.text());

    std::fs::remove_file(env.study_dir().join("wrapper.sh")).expect("rm");
    let out = env.tunectl_run(&["validate", &env.study_arg()]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr
            .contains("study.yaml:6:11: trial.files[0]: `wrapper.sh` cannot be read"),
        "{}",
        out.text()
    );
}

/// `plan --dry-run --json` of the env's study file against its ledger.
fn plan_json(env: &Env) -> Json {
    let plan = env.tunectl_ok(&[
        "plan",
        &env.study_arg(),
        "--dry-run",
        "--json",
        "--ledger",
        env.ledger_url(),
    ]);
    serde_json::from_str(&plan).expect("plan JSON")
}

#[test]
fn a_changed_spec_is_refused_and_fork_starts_a_new_study() {
    let study = r#"name: forks
knobs:
  mode: {kind: categorical, values: [base, fast], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} 1"
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, confirm_repeats: 0}
"#;
    let env = Env::new(study);
    env.launch_ok(&[]);
    let before = attempt_count(&env, "forks");
    assert_eq!(before, 2);
    let runs_before = env.runs().len();

    let edited = study.replace("{{ mode }} 1\"", "{{ mode }} 2\"");
    assert_ne!(edited, study);
    env.write_study(&edited);
    let out = env.launch(&[]);
    let (code, stderr) = (out.code, out.stderr);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "changed: trial.command: \"sh {{ study_dir }}/fake-trial.sh {{ mode }} 1\" → "
        ),
        "{stderr}"
    );
    assert!(stderr.contains("--fork"), "{stderr}");
    assert_eq!(attempt_count(&env, "forks"), before);
    assert_eq!(env.runs().len(), runs_before, "a trial ran");

    // Before the fork, `plan` says the launch would rerun everything under
    // the fork's id, `<name>-<first 12 hex of the spec hash>`: nothing of
    // `forks` counts for this spec.
    let plan = plan_json(&env);
    let hash = plan["spec_hash"].as_str().expect("spec_hash");
    let fork_id = format!("forks-{}", &hash[..12]);
    assert_eq!(plan["study"], fork_id.as_str(), "{plan}");
    assert_eq!(plan["ledger_study"]["state"], "changed", "{plan}");
    assert_eq!(plan["ledger_trials_in_plan"], Json::Null, "{plan}");
    let text = env.tunectl_ok(&["plan", &env.study_arg(), "--ledger", env.ledger_url()]);
    assert!(
        text.contains(&format!(
            "`launch --fork` records it as study `{fork_id}` and runs every trial of this plan"
        )),
        "{text}"
    );
    // `report` shows what the ledger has and says so; `export` writes no
    // other spec's values for this file; `status` warns.
    let out = env.tunectl_run(&[
        "report",
        &env.study_arg(),
        "--format",
        "json",
        "--ledger",
        env.ledger_url(),
    ]);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stderr.contains("this spec was never launched"),
        "{}",
        out.text()
    );
    let shown: Json = serde_json::from_str(&out.stdout).expect("report JSON");
    assert_eq!(shown["study_id"], "forks");
    let tuned = env.path().join("tuned");
    let out = env.tunectl_run(&[
        "export",
        &env.study_arg(),
        "--ledger",
        env.ledger_url(),
        "--out",
        &tuned.display().to_string(),
    ]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains("export `forks` by its id"),
        "{}",
        out.text()
    );
    assert!(support::ledger_files::yaml_texts(&tuned).is_empty());
    let out = env.tunectl_run(&["status", &env.study_arg(), "--ledger", env.ledger_url()]);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stderr.contains("this spec was never launched"),
        "{}",
        out.text()
    );
    assert!(out.stdout.contains("study forks ·"), "{}", out.text());

    let out = env.launch(&["--fork"]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let stderr = out.stderr;
    assert!(stderr.contains(&format!("study `{fork_id}`")), "{stderr}");
    assert!(env.ledger().join(&fork_id).join("study.json").is_file());
    assert_eq!(attempt_count(&env, &fork_id), 2);
    assert_eq!(
        attempt_count(&env, "forks"),
        before,
        "the original is untouched"
    );
    let fork_report: Json =
        serde_json::from_str(&env.report(&fork_id, "json")).expect("report JSON");
    assert_eq!(fork_report["study_id"], fork_id.as_str());
    assert_eq!(fork_report["spec_hash"], hash);

    // From now on the study file means the fork, in every command; a
    // plain launch continues it and reruns nothing.
    let runs = env.runs().len();
    let out = env.launch_ok(&[]);
    assert_eq!(out.count("ran"), 0, "{}", out.text());
    assert!(
        out.stderr
            .contains(&format!("is study `{fork_id}` in this ledger")),
        "{}",
        out.text()
    );
    assert_eq!(env.runs().len(), runs, "a trial ran again");
    let plan = plan_json(&env);
    assert_eq!(plan["study"], fork_id.as_str(), "{plan}");
    assert_eq!(plan["ledger_study"]["state"], "fork", "{plan}");
    assert_eq!(plan["ledger_trials_in_plan"], 2, "{plan}");
    assert_eq!(env.report_json()["study_id"], fork_id.as_str());
    let out = env.tunectl_ok(&["status", &env.study_arg(), "--ledger", env.ledger_url()]);
    assert!(out.contains(&format!("study {fork_id} ·")), "{out}");
    env.tunectl_ok(&[
        "export",
        &env.study_arg(),
        "--ledger",
        env.ledger_url(),
        "--out",
        &tuned.display().to_string(),
    ]);
    let files = support::ledger_files::yaml_texts(&tuned);
    assert_eq!(files.len(), 1);
    assert!(
        files[0].contains(&format!("study: {fork_id}")),
        "{}",
        files[0]
    );

    // Edited back, the file is the first study again.
    env.write_study(study);
    assert_eq!(plan_json(&env)["study"], "forks");
    assert_eq!(env.report_json()["study_id"], "forks");
}

/// The FAKE's `far` mode is 1.5× the baseline and writes values 1% off:
/// beyond an rtol of 1e-3, within 2e-2. Cells n=2 and n=3 share a pow2
/// bucket. A winner needs a final round of 3 runs per cell.
const REJUDGE: &str = r#"name: rejudge
knobs:
  mode: {kind: categorical, values: [base, far], default: base}
cells:
  n: [2, 3]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} {{ n }}"
objective: {metric: throughput, unit: ops/s, better: higher}
measurement: {warmup: 0, repeats: 3, anchor_every: 0, confirm_repeats: 3}
gate:
  outputs: [values.json]
  tolerance: {files: [values.json], rtol: 0.001}
"#;

fn shipped(report: &Json) -> Vec<String> {
    report["classes"][0]["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| {
            b["winner"]["label"]
                .as_str()
                .unwrap_or("baseline")
                .to_string()
        })
        .collect()
}

#[test]
fn judging_settings_re_judge_the_recorded_evidence_without_a_fork() {
    let env = Env::new(REJUDGE);
    env.launch_verdict(&[]);
    let first = env.report_json();
    assert_eq!(
        shipped(&first),
        ["baseline"],
        "far changes the values beyond rtol"
    );
    let runs = env.runs().len();
    let attempts = attempt_count(&env, "rejudge");

    // A looser tolerance: the same measurements, judged again.
    let looser = REJUDGE.replace("rtol: 0.001", "rtol: 0.02");
    env.write_study(&looser);
    let plan = plan_json(&env);
    assert_eq!(plan["study"], "rejudge", "{plan}");
    assert_eq!(plan["ledger_study"]["state"], "launched", "{plan}");
    assert_eq!(
        plan["ledger_study"]["judging_changes"],
        serde_json::json!(["gate.tolerance.rtol: 0.001 → 0.02"]),
        "{plan}"
    );
    assert_eq!(plan["ledger_trials_in_plan"], 12, "{plan}");
    // No sweep trial reruns; the final round the new winner lacks runs.
    let out = env.launch_verdict(&[]);
    assert!(
        out.stderr.contains(
            "judging `rejudge` by {}'s settings, changed since it was launched: gate.tolerance.rtol: 0.001 → 0.02"
                .replace("{}", &env.study_arg())
                .as_str()
        ),
        "{}",
        out.text()
    );
    assert!(
        out.stderr.contains("ships mode=far [VERDICT]"),
        "{}",
        out.text()
    );
    let new_runs = &env.runs()[runs..];
    assert_eq!(new_runs.len(), 3 * 2 * 2, "{new_runs:?}");
    assert!(new_runs.iter().all(|r| r.role == "confirm"), "{new_runs:?}");
    assert_eq!(attempt_count(&env, "rejudge"), attempts + 12);
    let runs = env.runs().len();
    let out = env.launch_verdict(&[]);
    assert_eq!(out.count("ran"), 0, "{}", out.text());
    let report = env.report_json();
    assert_eq!(report["spec_hash"], first["spec_hash"], "the same study");
    assert_eq!(shipped(&report), ["mode=far"]);
    assert_eq!(report["judging"]["tolerance"]["rtol"], 0.02);
    assert_eq!(
        report["judging"]["changed_since_launch"],
        serde_json::json!(["gate.tolerance.rtol: 0.001 → 0.02"])
    );
    // The table wraps long lines at its width: read it as one line.
    let text = env
        .report(&env.study_arg(), "table")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("judged with: min_improvement 2%, min_samples 3, min_hosts 1, tolerance rtol 0.02 atol 0, buckets n pow2 · the study file's, changed since the launch: gate.tolerance.rtol: 0.001 → 0.02"),
        "{text}"
    );
    // By id, the settings stored at the first launch judge.
    let by_id: Json = serde_json::from_str(&env.report("rejudge", "json")).expect("JSON");
    assert_eq!(shipped(&by_id), ["baseline"]);
    assert_eq!(
        by_id["judging"]["changed_since_launch"],
        serde_json::json!([])
    );
    // The verdict records the launch wrote carry the settings they used.
    let verdicts = support::ledger_files::json_files(&env.ledger().join("rejudge/verdicts"));
    assert!(!verdicts.is_empty());
    for v in &verdicts {
        assert_eq!(v["judging"]["tolerance"]["rtol"], 0.02, "{v}");
    }

    // A higher bar: 1.5× is not more than 60%.
    env.write_study(&format!("{looser}selection: {{min_improvement: 0.6}}\n"));
    assert_eq!(shipped(&env.report_json()), ["baseline"]);
    // Buckets per exact value: two decisions where there was one, and the
    // launch's verdict records follow (the old bucket's is gone).
    env.write_study(&format!("{looser}buckets: {{n: exact}}\n"));
    assert_eq!(shipped(&env.report_json()), ["mode=far", "mode=far"]);
    env.launch_verdict(&[]);
    let verdicts = support::ledger_files::json_files(&env.ledger().join("rejudge/verdicts"));
    assert_eq!(verdicts.len(), 2, "{verdicts:?}");
    assert!(
        verdicts
            .iter()
            .all(|v| v["judging"]["buckets"]["n"] == "exact")
    );

    // What changes a measurement is another study: refused, naming only it.
    env.write_study(&format!(
        "{}selection: {{min_improvement: 0.6}}\n",
        looser.replace("repeats: 3,", "repeats: 4,")
    ));
    let out = env.launch(&[]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr
            .contains("changed: measurement.repeats: 3 → 4.\n"),
        "{}",
        out.text()
    );
    assert_eq!(env.runs().len(), runs, "nothing ran");
}

#[test]
fn a_host_that_does_not_answer_is_reported_and_the_others_run() {
    let env = Env::new(STUDY);
    let inventory = env.write(
        "inventory.yaml",
        r#"hosts:
  - name: box
    transport: local
  - name: gpu-a
    transport: slurm
    partition: gpu
    poll_interval: 1s
"#,
    );
    let inv = inventory.display().to_string();
    // No Slurm answers here (an empty configuration: its clients give up at
    // once): the entry is reported and left out.
    let conf = env.write("empty-slurm.conf", "");
    let mut cmd = env.launch_cmd(&["--inventory", &inv, "--yes"]);
    cmd.env("SLURM_CONF", &conf);
    let out = env.run(cmd);
    assert!(out.ran_to_the_end(), "{}", out.text());
    assert_eq!(
        out.launch_doc()["summary"]["unreachable_hosts"],
        serde_json::json!(["gpu-a"]),
        "{}",
        out.text()
    );
    let stderr = out.stderr;
    assert!(
        stderr.contains("warning: host `gpu-a` does not answer"),
        "{stderr}"
    );
    assert!(stderr.contains("the study goes on without it"), "{stderr}");
    assert_eq!(attempt_count(&env, "fake"), RUN_TRIALS);
}

/// A minimal CSV reader (quoted fields with commas and doubled quotes).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for line in text.lines() {
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    field.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => fields.push(std::mem::take(&mut field)),
                (c, _) => field.push(c),
            }
        }
        fields.push(field);
        rows.push(fields);
    }
    rows
}

#[test]
fn markdown_and_csv_reports_carry_n_spread_and_host_class() {
    let env = Env::new(STUDY);
    env.launch_ok(&[]);
    let json = env.report_json();
    let class = json["classes"][0]["host_class"].as_str().expect("class");
    assert!(
        class.starts_with("hc-") && is_hex(&class[3..], 12),
        "{class}"
    );
    let label = json["classes"][0]["label"].as_str().expect("label");
    let study = env.study().display().to_string();

    let md = env.report(&study, "markdown");
    assert!(md.starts_with("# tunectl report"), "{md}");
    assert!(
        md.contains(&format!("## host class {class} · {label}")),
        "{md}"
    );
    assert!(
        md.contains("| role | config (vs baseline) | throughput median ± spread | n | vs baseline | verdict |"),
        "{md}"
    );
    for cell in CELLS {
        assert!(md.contains(&format!("### cell {cell}")), "{md}");
    }
    let base_rows: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| baseline |"))
        .collect();
    assert_eq!(base_rows.len(), 2, "{md}");
    for row in base_rows {
        assert!(row.contains("| 100.1 ± 0.15 ops/s (0.1%) |"), "{row}");
        assert!(row.contains("| 3 (3 trials) |"), "{row}");
    }
    assert!(md.contains("| fastest | mode=fast |"), "{md}");
    assert!(md.contains("| rejected | mode=wrong |"), "{md}");
    assert!(md.contains("output_changed"), "{md}");

    let csv = parse_csv(&env.report(&study, "csv"));
    let header = &csv[0];
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let (n, spread, hc, hc_label, cell, role, config, median) = (
        col("n"),
        col("spread"),
        col("host_class"),
        col("host_class_label"),
        col("cell"),
        col("role"),
        col("config"),
        col("median"),
    );
    let rows = &csv[1..];
    // Per cell: baseline, winner, slow (eligible), crash and wrong (rejected).
    assert_eq!(rows.len(), 2 * 5, "{csv:?}");
    for r in rows {
        assert_eq!(r.len(), header.len(), "{r:?}");
        assert_eq!(r[hc], class);
        assert_eq!(r[hc_label], label);
        assert!(CELLS.contains(&r[cell].as_str()), "{r:?}");
    }
    let find = |cell_label: &str, label: &str| {
        rows.iter()
            .find(|r| r[cell] == cell_label && r[config] == label)
            .unwrap_or_else(|| panic!("no row {cell_label} {label}"))
    };
    for c in CELLS {
        let b = find(c, "baseline");
        assert_eq!(b[role], "baseline");
        assert_eq!(b[n], "3");
        assert_eq!(b[median], "100.1");
        let s: f64 = b[spread].parse().expect("spread is a number");
        assert!(s > 0.0 && s < 1.0, "{s}");
        let w = find(c, "mode=fast");
        assert_eq!(w[role], "fastest");
        assert_eq!(w[n], "3");
        let crash = find(c, "mode=crash");
        assert_eq!(crash[role], "rejected");
        assert_eq!(crash[n], "0");
        assert_eq!(crash[spread], "");
        assert_eq!(crash[col("failure_class")], "crash");
    }
}

#[test]
fn fingerprint_reports_the_gpus_of_a_fake_nvidia_smi() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = support::path_with(&support::fake_nvidia_smi(tmp.path()));
    let fingerprint = |gpus: &str| -> Json {
        let out = support::env::tunectl_in(tmp.path())
            .args(["fingerprint", "--json"])
            .env("PATH", &path)
            .env("FAKE_GPU_COUNT", gpus)
            .timeout(Duration::from_secs(60))
            .output()
            .expect("run fingerprint");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("fingerprint JSON")
    };
    let fp = fingerprint("2");
    let gpus = fp["fingerprint"]["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 2, "{fp}");
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g["name"], "NVIDIA H100 80GB HBM3", "{g}");
        assert_eq!(g["index"], i);
        assert_eq!(g["memory_mib"], 81559);
    }
    assert_eq!(fp["fingerprint"]["driver_version"], "550.54.15");
    assert_eq!(fp["fingerprint"]["cuda_version"], "12.4");
    let class = fp["host_class"].as_str().expect("host_class");
    assert!(
        class.starts_with("hc-") && is_hex(&class[3..], 12),
        "{class}"
    );
    let label = fp["class_label"].as_str().expect("class_label");
    assert!(label.starts_with("2× NVIDIA H100 80GB HBM3"), "{label}");
    assert!(
        fp["fingerprint_hash"]
            .as_str()
            .is_some_and(|h| h.starts_with("fp-")),
        "{fp}"
    );

    // The GPU count defines the class.
    let one = fingerprint("1");
    assert_eq!(one["fingerprint"]["gpus"].as_array().map(Vec::len), Some(1));
    assert_ne!(one["host_class"], fp["host_class"]);
    assert_eq!(fingerprint("2")["host_class"], fp["host_class"], "stable");
}

/// `tunectl fingerprint --json` with `bin` first on PATH, the FAKE sysfs
/// `sysfs` and `vars`; the outer FAKE settings removed (by the harness).
fn fingerprint_with(dir: &Path, bin: &Path, sysfs: &Path, vars: &[(&str, &str)]) -> Json {
    let mut cmd = support::env::tunectl_in(dir);
    cmd.args(["fingerprint", "--json"])
        .env("PATH", support::path_with(bin))
        .env("TUNECTL_FAKE_SYSFS", sysfs)
        .env("ROCM_PATH", dir.join("no-rocm"))
        .timeout(Duration::from_secs(60));
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run fingerprint");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("fingerprint JSON")
}

#[test]
fn fingerprint_reports_the_gpus_of_a_fake_amd_smi() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin = support::fake_tool(tmp.path(), "amd-smi");
    let sysfs = support::fake_sysfs(
        tmp.path(),
        &[
            ("0x1002", "0x74a1", "amdgpu"),
            ("0x1002", "0x74a1", "amdgpu"),
        ],
    );
    let fp = fingerprint_with(tmp.path(), &bin, &sysfs, &[]);
    let gpus = fp["fingerprint"]["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 2, "{fp}");
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g["name"], "AMD Instinct MI300X", "{g}");
        assert_eq!(g["index"], i);
        assert_eq!(g["memory_mib"], 196_592);
        assert_eq!(g["vendor"], "amd");
    }
    assert_eq!(fp["fingerprint"]["driver_version"], "6.8.5");
    assert_eq!(fp["fingerprint"]["rocm_version"], "6.2.0");
    let label = fp["class_label"].as_str().expect("class_label");
    assert!(
        label.starts_with("2× AMD Instinct MI300X (196592 MiB), driver 6, ROCm 6.2.0, "),
        "{label}"
    );
    // Another model is another class; the same one, the same class.
    let other = fingerprint_with(
        tmp.path(),
        &bin,
        &sysfs,
        &[
            ("FAKE_AMD_GPU_NAME", "AMD Instinct MI250X"),
            ("FAKE_AMD_VRAM_MB", "65520"),
        ],
    );
    assert_ne!(other["host_class"], fp["host_class"]);
    let same = fingerprint_with(tmp.path(), &bin, &sysfs, &[("FAKE_AMD_SMI_LAYOUT", "list")]);
    assert_eq!(same["host_class"], fp["host_class"]);
    // A failing amd-smi (no rocm-smi): the cards are still there.
    let broken = fingerprint_with(tmp.path(), &bin, &sysfs, &[("FAKE_AMD_SMI_FAIL", "1")]);
    let label = broken["class_label"].as_str().expect("class_label");
    assert!(
        label.starts_with("2× unknown accelerator (vendor 0x1002, device 0x74a1), "),
        "{label}"
    );
}

#[test]
fn fingerprint_reports_the_gpus_of_a_fake_xpu_smi_else_sysfs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin = support::fake_tool(tmp.path(), "xpu-smi");
    let sysfs = support::fake_sysfs(tmp.path(), &[("0x8086", "0x0bd5", "xe")]);
    let fp = fingerprint_with(tmp.path(), &bin, &sysfs, &[("FAKE_XPU_GPU_COUNT", "1")]);
    let gpus = fp["fingerprint"]["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 1, "{fp}");
    assert_eq!(gpus[0]["name"], "Intel(R) Data Center GPU Max 1550");
    assert_eq!(gpus[0]["memory_mib"], 131_072);
    assert_eq!(gpus[0]["vendor"], "intel");
    assert_eq!(
        fp["fingerprint"]["driver_version"],
        "I915_23.10.32_PSB_231129.32"
    );
    // Without a working xpu-smi, sysfs names the card.
    let fallback = fingerprint_with(tmp.path(), &bin, &sysfs, &[("FAKE_XPU_SMI_FAIL", "1")]);
    let label = fallback["class_label"].as_str().expect("class_label");
    assert!(
        label.starts_with("1× Intel GPU 0x0bd5, driver xe, "),
        "{label}"
    );
    assert_eq!(fallback["fingerprint"]["driver_name"], "xe");
    assert_ne!(fallback["host_class"], fp["host_class"]);
}

/// What people read: the report table of the fake study, with the machine's
/// host class, its label and the version redacted.
/// Every sample is exported: the `samples` CSV has one row per sample of
/// the objective, the same values as the JSON report's `samples`, and as
/// many as the summaries count.
#[test]
fn samples_are_exported_one_row_each_and_in_the_json() {
    let env = Env::new(STUDY);
    env.launch_ok(&[]);
    let json = env.report_json();
    let study = env.study().display().to_string();
    let csv = parse_csv(&env.report(&study, "samples"));
    assert_eq!(
        csv[0].join(","),
        "study,spec_hash,host_class,cell,config,config_json,status,host,sample,metric,value,unit"
    );
    let mut from_json = 0;
    for cell in json["classes"][0]["cells"].as_array().expect("cells") {
        let configs = std::iter::once(&cell["baseline"])
            .chain(cell["eligible"].as_array().into_iter().flatten())
            .chain(cell["rejected"].as_array().into_iter().flatten());
        for c in configs.filter(|c| !c.is_null()) {
            let n = c["summary"]["n"].as_u64().unwrap_or(0) as usize;
            let samples: Vec<f64> = c["samples"]["local"]
                .as_array()
                .map(|v| v.iter().filter_map(Json::as_f64).collect())
                .unwrap_or_default();
            assert_eq!(samples.len(), n, "{c}");
            from_json += n;
            // The same values, in the same order, in the CSV.
            let rows: Vec<f64> = csv[1..]
                .iter()
                .filter(|r| {
                    r[3] == cell["cell_label"].as_str().unwrap_or("")
                        && r[4] == c["label"].as_str().unwrap_or("")
                })
                .map(|r| r[10].parse().expect("a number"))
                .collect();
            assert_eq!(rows, samples, "{c}");
        }
    }
    assert_eq!(csv.len() - 1, from_json);
    assert!(from_json > 0);
}

/// `-v` prints one line per trial (what ran, where, how it ended and why
/// a failed one failed), and a log into a pipe carries no colour codes.
#[test]
fn verbose_launch_says_each_trial_in_plain_text() {
    let env = Env::new(STUDY);
    let stderr = env.launch_ok(&["-v"]).stderr;
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains(" on local (repeat "))
        .collect();
    assert_eq!(lines.len(), RUN_TRIALS, "{stderr}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("sweep baseline @ n=") && l.contains(": ok in ")),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("mode=crash") && l.contains(": failed in ")),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");

    // `--color always` colours it even into a pipe; `--color never` keeps
    // it plain whatever the terminal.
    let env = Env::new(STUDY);
    let coloured = env.launch_ok(&["-v", "--color", "always"]).stderr;
    assert!(coloured.contains("\u{1b}["), "{coloured:?}");
    let env = Env::new(STUDY);
    let plain = env.launch_ok(&["-v", "--color", "never"]).stderr;
    assert!(!plain.contains('\u{1b}'), "{plain:?}");
}

/// `tunectl logs` shows a failed trial's command, exit and stderr from the
/// ledger, filters by config, cell and status, and says so when nothing
/// matches.
#[test]
fn logs_show_what_a_failed_trial_printed() {
    let env = Env::new(STUDY);
    env.launch_ok(&[]);
    let study = env.study().display().to_string();
    let logs = |extra: &[&str]| {
        let mut args = vec!["logs", study.as_str(), "--ledger", env.ledger_url()];
        args.extend_from_slice(extra);
        env.tunectl_ok(&args)
    };
    let text = logs(&[]);
    // mode=crash ran once per cell and failed there.
    assert_eq!(
        text.matches("== sweep mode=crash @ n=").count(),
        2,
        "{text}"
    );
    assert!(text.contains("· failed"), "{text}");
    assert!(text.contains("exit: code 3"), "{text}");
    assert!(
        text.contains("fake-trial: mode crash: giving up on purpose"),
        "{text}"
    );
    let doc: Json = serde_json::from_str(&logs(&[
        "--status",
        "all",
        "--config",
        "mode=fast",
        "--cell",
        "n=1",
        "--format",
        "json",
    ]))
    .expect("logs JSON");
    assert_eq!(doc["schema"], "tunectl.logs/1", "{doc}");
    let attempts = doc["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 3, "{doc}");
    assert!(
        attempts
            .iter()
            .all(|a| a["config"] == "mode=fast" && a["cell"] == "n=1" && a["status"] == "ok"),
        "{doc}"
    );
    assert!(
        attempts[0]["command"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{doc}"
    );
    // --limit keeps the latest; nothing matching is said, not an error.
    let limited = logs(&["--status", "ok", "--limit", "1"]);
    assert!(
        limited.contains("attempts match; the latest 1 (--limit):"),
        "{limited}"
    );
    let none = logs(&["--status", "lost"]);
    assert!(
        none.starts_with("no lost attempt of study fake matches"),
        "{none}"
    );
}

#[test]
fn report_table_snapshot() {
    let env = Env::new(STUDY);
    env.launch_ok(&[]);
    let table = env.report(&env.study().display().to_string(), "table");
    insta::with_settings!({filters => vec![
        (r"hc-[0-9a-f]{12}", "[CLASS]"),
        (r"(host class \[CLASS\] · 1 host: local\n)(  .*\n)+", "$1  [LABEL]\n"),
        (r"tunectl \d+\.\d+\.\d+", "tunectl [VERSION]"),
    ]}, {
        insta::assert_snapshot!("fake_report_table", table);
    });
}

/// `--store-logs` keeps every attempt's full stdout and stderr beside it,
/// and the ledger still reads cleanly.
#[test]
fn store_logs_keeps_full_logs_beside_each_attempt() {
    let env = Env::new(STUDY);
    let out = env.launch(&["--store-logs"]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let trials = env.ledger().join("fake").join("trials");
    let mut logs = Vec::new();
    for dir in std::fs::read_dir(&trials).expect("trials dir").flatten() {
        for f in std::fs::read_dir(dir.path()).expect("trial dir").flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.ends_with(".log") {
                logs.push((name, std::fs::read_to_string(f.path()).unwrap_or_default()));
            }
        }
    }
    // Two logs per attempt.
    assert_eq!(logs.len(), 2 * attempt_count(&env, "fake"), "{logs:?}");
    assert!(
        logs.iter().any(|(n, t)| n.ends_with(".stderr.log")
            && t.contains("fake-trial: mode crash: giving up on purpose")),
        "no crash message in any stderr log"
    );
    assert!(
        logs.iter()
            .any(|(_, t)| t.contains("== tunectl: warmup run =="))
    );
    let out = env.tunectl_run(&["ledger", "check", "fake", "--ledger", env.ledger_url()]);
    assert_eq!(out.code, Some(0), "{}", out.text());
}

/// Regression: when a bucket's last sweep units are skipped (their config
/// already failed), its confirmation round still runs; `status` then counts
/// those skipped trials as skipped, not pending.
#[test]
fn confirmation_runs_after_skipped_units_and_status_counts_them() {
    let env = Env::new(
        r#"name: skips
knobs:
  mode: {kind: categorical, values: [base, fast, wrong, crash], default: base}
cells:
  n: [1, 2]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} {{ n }}"
objective: {metric: throughput, better: higher}
measurement: {warmup: 1, repeats: 3, anchor_every: 0, confirm_repeats: 3}
gate: {outputs: [out.txt]}
"#,
    );
    env.launch_ok(&[]);
    let report = env.report_json();
    for class in report["classes"].as_array().expect("classes") {
        for b in class["buckets"].as_array().expect("buckets") {
            assert_eq!(b["level"], "verdict", "{b}");
            assert_eq!(b["winner"]["label"], "mode=fast", "{b}");
        }
    }
    let status = env.status_json();
    assert_eq!(status[0]["pending"], 0, "{status}");
    // crash fails at repeat 0 in both cells: its repeats 1 and 2 are
    // skipped.
    assert_eq!(status[0]["skipped"], 4, "{status}");
}

/// A trial that prints the launcher's credentials leaves no trace of them
/// in the ledger or on the terminal.
#[test]
fn credentials_printed_by_a_trial_are_scrubbed() {
    let env = Env::new(
        r#"name: leaky
knobs:
  mode: {kind: categorical, values: [base, crash], default: base}
trial:
  command: "echo secret=$AWS_SECRET_ACCESS_KEY >&2; sh {{ study_dir }}/fake-trial.sh {{ mode }} 1"
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, confirm_repeats: 0}
"#,
    );
    let secret = "leak-me-not-5a9d2c71";
    let mut cmd = env.launch_cmd(&["--store-logs"]);
    cmd.env("AWS_SECRET_ACCESS_KEY", secret);
    let out = env.run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(!out.stderr.contains(secret));
    let mut stack = vec![env.ledger()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).expect("dir").flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                assert!(
                    !text.contains(secret),
                    "{} holds the secret",
                    path.display()
                );
            }
        }
    }
    let report = env.report(&env.study().display().to_string(), "json");
    assert!(!report.contains(secret));
    // The line is kept, with the value redacted.
    let tails: Vec<String> = env
        .attempts("leaky")
        .values()
        .flatten()
        .map(|a| a["stderr_tail"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        tails.iter().any(|t| t.contains("secret=[redacted]")),
        "{tails:?}"
    );
}

/// A small study for the ledger-damage tests: one cell, one repeat, no
/// confirmation round; `base` runs first, then `fast`, `slow`, `wrong`.
const SMALL: &str = r#"name: small
knobs:
  mode: {kind: categorical, values: [base, fast, slow, wrong], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} 1"
  timeout: 20s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
gate: {outputs: [out.txt]}
"#;

/// The trial key of `mode`'s (only) trial, and the path of its attempt
/// object, in a launched [`SMALL`] study.
fn small_trial(env: &Env, mode: &str) -> (String, PathBuf) {
    let all = env.attempts("small");
    let key = all
        .iter()
        .find(|(_, l)| l.iter().any(|a| a["config"]["mode"] == mode))
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| panic!("no attempt of mode {mode}: {all:?}"));
    let dir = env.ledger().join("small/trials").join(&key);
    let file = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap_or_else(|| panic!("no attempt object in {}", dir.display()));
    (key, file)
}

/// `tunectl ledger check ARGS --ledger <ledger>`: (exit code, stdout, stderr).
fn ledger_check(env: &Env, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = env.tunectl();
    cmd.args(["ledger", "check"])
        .args(args)
        .args(["--ledger", env.ledger_url()]);
    let out = env.run(cmd);
    (out.code, out.stdout, out.stderr)
}

/// An attempt record copied under another trial's key (its `trial_key`
/// says the other trial) is not that trial's result: the trial runs, and
/// the object is named as misplaced.
#[test]
fn an_attempt_copied_under_another_trials_key_does_not_stand_for_that_trial() {
    let env = Env::new(SMALL);
    env.launch_ok(&[]);
    let (_, fast_file) = small_trial(&env, "fast");
    let (slow, slow_file) = small_trial(&env, "slow");
    // slow's own record is gone; fast's is copied in its place.
    std::fs::remove_file(&slow_file).expect("remove slow's record");
    let name = fast_file.file_name().expect("name").to_owned();
    let misplaced = slow_file.with_file_name(&name);
    std::fs::copy(&fast_file, &misplaced).expect("copy");
    let object = format!("small/trials/{slow}/{}", name.to_string_lossy());

    let runs_before = env.runs().len();
    let stderr = env.launch_ok(&[]).stderr;
    assert_eq!(ran(&stderr), 1, "slow runs again:\n{stderr}");
    assert!(
        env.runs()[runs_before..].iter().any(|r| r.mode == "slow"),
        "{:?}",
        env.runs()
    );
    assert!(stderr.contains(&object), "the object is named:\n{stderr}");
    let after = env.attempts("small");
    assert!(
        after[&slow]
            .iter()
            .any(|a| a["trial_key"] == slow.as_str() && a["status"] == "ok"),
        "{:?}",
        after[&slow]
    );
    // Done now: nothing runs again, and the copy stays where it is.
    let stderr = env.launch_ok(&[]).stderr;
    assert_eq!(ran(&stderr), 0, "{stderr}");
    assert!(misplaced.exists());
}

/// `ledger check` finds each kind of damage, names the object and what is
/// wrong, and exits 1; once repaired it exits 0.
#[test]
fn ledger_check_reports_missing_and_misplaced_objects_and_a_damaged_study_record() {
    let env = Env::new(SMALL);
    env.launch_ok(&[]);
    let (code, stdout, stderr) = ledger_check(&env, &["small"]);
    assert_eq!(code, Some(0), "a clean ledger:\n{stdout}{stderr}");

    // An attempt object deleted (its log entry names it).
    let (slow, slow_file) = small_trial(&env, "slow");
    let bytes = std::fs::read(&slow_file).expect("read");
    std::fs::remove_file(&slow_file).expect("remove");
    let object = format!(
        "small/trials/{slow}/{}",
        slow_file.file_name().expect("name").to_string_lossy()
    );
    let (code, stdout, stderr) = ledger_check(&env, &["small"]);
    assert_eq!(code, Some(1), "a deleted attempt:\n{stdout}{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains(&object))
        .unwrap_or_else(|| panic!("{object} is not named:\n{stdout}"));
    assert!(line.contains("missing"), "{line}");
    std::fs::write(&slow_file, &bytes).expect("restore");
    let (code, stdout, _) = ledger_check(&env, &["small"]);
    assert_eq!(code, Some(0), "restored:\n{stdout}");

    // A record copied under another trial's key.
    let (_, fast_file) = small_trial(&env, "fast");
    let misplaced = slow_file.with_file_name(fast_file.file_name().expect("name"));
    std::fs::copy(&fast_file, &misplaced).expect("copy");
    let object = format!(
        "small/trials/{slow}/{}",
        misplaced.file_name().expect("name").to_string_lossy()
    );
    let (code, stdout, stderr) = ledger_check(&env, &["small"]);
    assert_eq!(code, Some(1), "a misplaced record:\n{stdout}{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains(&object))
        .unwrap_or_else(|| panic!("{object} is not named:\n{stdout}"));
    assert!(line.contains("trial key"), "{line}");
    std::fs::remove_file(&misplaced).expect("remove the copy");

    // study.json truncated, then deleted: with the study named, and
    // without (every study in the ledger).
    let study_json = env.ledger().join("small/study.json");
    let whole = std::fs::read(&study_json).expect("study.json");
    std::fs::write(&study_json, &whole[..whole.len() / 2]).expect("truncate");
    for args in [&["small"][..], &[][..]] {
        let (code, stdout, stderr) = ledger_check(&env, args);
        assert_eq!(code, Some(1), "truncated, {args:?}:\n{stdout}{stderr}");
        let line = stdout
            .lines()
            .find(|l| l.contains("small/study.json"))
            .unwrap_or_else(|| panic!("study.json is not named:\n{stdout}"));
        assert!(line.contains("not a valid study record"), "{line}");
    }
    std::fs::remove_file(&study_json).expect("delete");
    for args in [&["small"][..], &[][..]] {
        let (code, stdout, stderr) = ledger_check(&env, args);
        assert_eq!(code, Some(1), "deleted, {args:?}:\n{stdout}{stderr}");
        let line = stdout
            .lines()
            .find(|l| l.contains("small/study.json"))
            .unwrap_or_else(|| panic!("study.json is not named:\n{stdout}"));
        assert!(line.contains("missing"), "{line}");
    }
    std::fs::write(&study_json, &whole).expect("restore");
    let (code, stdout, stderr) = ledger_check(&env, &[]);
    assert_eq!(code, Some(0), "repaired:\n{stdout}{stderr}");
}

/// A study record whose frozen spec has a section that does not read
/// stops `report` with the ledger object and the section named, and
/// `ledger check` names it too; no panic.
#[test]
fn a_frozen_spec_that_does_not_read_is_named() {
    let env = Env::new(SMALL);
    env.launch_ok(&[]);
    let study_json = env.ledger().join("small/study.json");
    let whole = std::fs::read(&study_json).expect("study.json");
    let mut record: Json = serde_json::from_slice(&whole).expect("a study record");
    record["spec"]["selection"]["min_hosts"] = Json::from("two");
    std::fs::write(
        &study_json,
        serde_json::to_vec_pretty(&record).expect("json"),
    )
    .expect("damage");
    let out = env.tunectl_run(&[
        "report",
        "small",
        "--format",
        "json",
        "--ledger",
        env.ledger_url(),
    ]);
    let stderr = out.stderr;
    assert_eq!(out.code, Some(1), "{stderr}");
    assert!(
        stderr.contains("small/study.json") && stderr.contains("`selection`"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (code, stdout, stderr) = ledger_check(&env, &["small"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("small/study.json"))
        .unwrap_or_else(|| panic!("study.json is not named:\n{stdout}"));
    assert!(line.contains("`selection`"), "{line}");
    std::fs::write(&study_json, &whole).expect("restore");
    env.report("small", "json");
}

/// The study's `trials` directory of a local ledger is replaced by a file
/// while `slow` runs: from then on no attempt record can be written. The
/// launch tries slow's record a few times, then stops dispatching, writes
/// no verdicts, names what was not recorded and exits 1; everything
/// recorded before is still there, and a relaunch runs what is missing.
///
/// Why a file and not `chmod`: the tests may run as root, whom permission
/// bits do not stop; `chattr +i` needs a filesystem and a capability the
/// test cannot count on. A directory replaced by a plain file refuses every
/// create under it, for root too.
#[test]
fn a_ledger_that_stops_taking_records_stops_the_launch_and_names_what_was_lost() {
    let env = Env::new(
        r#"name: brk
knobs:
  mode: {kind: categorical, values: [base, fast, slow, wrong], default: base}
trial:
  command: "if [ {{ mode }} = slow ] && [ ! -e {{ study_dir }}/broke ]; then echo $TUNECTL_TRIAL_ID > {{ study_dir }}/broke; mv {{ study_dir }}/../ledger/brk/trials {{ study_dir }}/../ledger/brk/trials.saved; : > {{ study_dir }}/../ledger/brk/trials; fi; sh {{ study_dir }}/fake-trial.sh {{ mode }} 1"
  timeout: 20s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
gate: {outputs: [out.txt]}
"#,
    );
    let out = env.launch(&[]);
    let (code, stderr) = (out.code, out.stderr);
    assert_eq!(code, Some(1), "{stderr}");
    let slow_key = std::fs::read_to_string(env.study_dir().join("broke"))
        .expect("the slow trial ran")
        .trim()
        .to_string();
    assert!(is_hex(&slow_key, 64), "{slow_key:?}");
    // Named: trial key, config and cell.
    let line = stderr
        .lines()
        .find(|l| l.contains(&slow_key) && l.contains("mode=slow"))
        .unwrap_or_else(|| panic!("slow's trial is not named:\n{stderr}"));
    assert!(line.contains("(single cell)"), "{line}");
    assert!(stderr.contains("not recorded"), "{stderr}");
    // Dispatching stopped: `wrong` never ran; no verdict was derived.
    assert!(
        !env.runs().iter().any(|r| r.mode == "wrong"),
        "{:?}",
        env.runs()
    );
    let root = env.ledger().join("brk");
    assert!(!root.join("verdicts").exists(), "verdicts were written");

    // Put the directory back: what was recorded before is all there.
    std::fs::remove_file(root.join("trials")).expect("remove the file");
    std::fs::rename(root.join("trials.saved"), root.join("trials")).expect("restore");
    let all = env.attempts("brk");
    let modes: std::collections::BTreeSet<String> = all
        .values()
        .flatten()
        .map(|a| a["config"]["mode"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        modes,
        ["base", "fast"].iter().map(|s| s.to_string()).collect(),
        "{all:?}"
    );
    let stderr = env.launch_ok(&[]).stderr;
    assert_eq!(ran(&stderr), 2, "slow and wrong run now:\n{stderr}");
    assert!(root.join("verdicts").exists());
}

/// A launcher killed with SIGKILL takes its running trial with it: the
/// trial's process group is killed at once, long before the trial's
/// timeout (and the hanging fake's `sleep 30`) would end it.
#[test]
fn a_trial_dies_with_its_launcher() {
    let env = Env::new(
        r#"name: orphan
knobs:
  mode: {kind: categorical, values: [base], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh hang"
  timeout: 60s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#,
    );
    let mut running = env.spawn(env.launch_cmd(&[]));
    let pid_file = env.study_dir().join("hang-child.pid");
    let read_pid = || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| t.parse::<u32>().is_ok())
    };
    let started = wait_for(Duration::from_secs(20), || read_pid().is_some());
    let _ = running.child.kill(); // SIGKILL
    let _ = running.child.wait();
    assert!(started, "the trial never started");
    let pid = read_pid().expect("pid");
    let gone = wait_for(Duration::from_secs(5), || process_gone(&pid));
    if !gone {
        // Do not leave it behind.
        if let Ok(p) = pid.parse::<libc::pid_t>() {
            // SAFETY: kill(2) on the sleep this test's trial started.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
    }
    assert!(gone, "the trial's sleep {pid} outlived its launcher");
}

#[test]
fn the_notify_command_gets_the_outcome_and_never_changes_the_exit_status() {
    let env = Env::new(STUDY);
    let got = env.path().join("notified.json");
    let cmd = format!("cat > '{}'", got.display());
    let out = env.launch(&["--notify", &cmd]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let doc: Json =
        serde_json::from_str(&std::fs::read_to_string(&got).expect("notified")).expect("JSON");
    assert_eq!(doc["study"], "fake");
    assert_eq!(doc["exit_code"], out.code.expect("an exit code"));
    // confirm_repeats 0: the winners are drafts.
    assert_eq!(doc["outcome"], "draft", "{doc}");
    assert_eq!(doc["summary"]["ran"], RUN_TRIALS, "{doc}");
    assert_eq!(doc["summary"]["already_in_ledger"], 0, "{doc}");
    let buckets = doc["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 2, "{doc}");
    assert!(
        buckets
            .iter()
            .all(|b| b["ships"] == "mode=fast" && b["level"] == "draft"),
        "{doc}"
    );
    assert!(
        doc["report"]
            .as_str()
            .expect("report")
            .starts_with("tunectl report ")
    );

    // From the inventory, when no flag is given; a failing command is a
    // warning and the launch's own status stands.
    let inv = env.write(
        "inventory.yaml",
        &format!(
            "notify: \"cat > '{}'; exit 5\"\nhosts:\n  - {{name: box, transport: local}}\n",
            got.display()
        ),
    );
    std::fs::remove_file(&got).expect("rm");
    let out = env.launch(&["--inventory", &inv.display().to_string()]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    assert!(
        out.stderr.contains("warning: the notify command (cat > "),
        "{}",
        out.text()
    );
    assert!(out.stderr.contains("): exited 5"), "{}", out.text());
    let doc: Json =
        serde_json::from_str(&std::fs::read_to_string(&got).expect("notified")).expect("JSON");
    assert_eq!(doc["summary"]["ran"], 0, "{doc}");
    assert_eq!(doc["summary"]["already_in_ledger"], RUN_TRIALS, "{doc}");

    // A refused launch is told too (it ended), with why.
    env.write_study(&STUDY.replace("repeats: 3", "repeats: 4"));
    std::fs::remove_file(&got).expect("rm");
    let out = env.launch(&["--notify", &cmd]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    let doc: Json =
        serde_json::from_str(&std::fs::read_to_string(&got).expect("notified")).expect("JSON");
    assert_eq!(doc["outcome"], "invalid", "{doc}");
    assert!(
        doc["message"]
            .as_str()
            .expect("message")
            .contains("measurement.repeats: 3 → 4"),
        "{doc}"
    );
}

/// A study's folder given as the ledger (`--ledger ledgers/quickstart`, the
/// folder the README names) is said to be one, with the ledger to give.
#[test]
fn a_study_folder_given_as_the_ledger_names_the_ledger() {
    let env = Env::new(STUDY);
    let out = env.launch(&[]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let folder = env.ledger().join("fake");
    assert!(folder.join("study.json").is_file());
    let folder_arg = folder.display().to_string();
    let ledger_arg = env.ledger().display().to_string();
    for command in ["report", "status"] {
        let mut cmd = env.tunectl();
        cmd.args([command, &env.study_arg(), "--ledger", &folder_arg]);
        let out = env.run(cmd);
        assert_eq!(out.code, Some(1), "{command}: {}", out.text());
        assert!(
            out.stderr.contains(&format!(
                "`{folder_arg}` is the folder of one study inside a ledger, not a ledger: the ledger is `{ledger_arg}`, `--ledger {ledger_arg}`"
            )),
            "{command}: {}",
            out.text()
        );
        let mut cmd = env.tunectl();
        cmd.args([command, &env.study_arg(), "--ledger", &ledger_arg]);
        assert_eq!(env.run(cmd).code, Some(0), "{command} with the ledger");
    }
}

/// A new `trial.timeout` is no new study (it does not change what a
/// successful measurement means): the relaunch is not refused, runs
/// nothing again, and says what changed; `plan` sees the same study. A
/// change of what is measured is still refused.
#[test]
fn a_changed_timeout_keeps_the_study() {
    let env = Env::new(STUDY);
    let out = env.launch(&[]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    env.write_study(&STUDY.replace("timeout: 20s", "timeout: 45s"));
    let out = env.launch(&["--progress", "plain"]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    assert!(
        out.stderr.contains("note: running `fake` with ")
            && out.stderr.contains("trial.timeout: ")
            && out
                .stderr
                .contains("changed since it was launched (not a new study"),
        "{}",
        out.text()
    );
    assert_eq!(out.ran(), 0, "{}", out.text());
    let mut plan = env.tunectl();
    plan.args(["plan", &env.study_arg(), "--dry-run", "--ledger"])
        .arg(env.ledger());
    let out = env.run(plan);
    assert_eq!(out.code, Some(0), "{}", out.text());
    // What is measured still makes another study.
    env.write_study(
        &STUDY
            .replace("timeout: 20s", "timeout: 45s")
            .replace("repeats: 3", "repeats: 4"),
    );
    let out = env.launch(&[]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains("measurement.repeats: 3 → 4") && !out.stderr.contains("trial.timeout"),
        "{}",
        out.text()
    );
}

/// A longer `trial.timeout` gives what timed out under the shorter one
/// another run: its attempt is voided and the trial runs again; a config
/// that now finishes in time is measured and can win. Nothing that ran
/// fine runs again, and a third launch runs nothing.
#[test]
fn a_longer_timeout_runs_again_what_timed_out() {
    const RAISED: &str = r#"name: raised
knobs:
  mode: {kind: categorical, values: [base, slow, fast], default: base}
cells:
  n: [1]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} {{ n }}"
  timeout: 1s
  env: {FAKE_SLEEP: "1.5", FAKE_SLEEP_MODE: "fast", FAKE_SAMPLES: "3", FAKE_NOISE: "0.01"}
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 2, anchor_every: 0, confirm_repeats: 0}
"#;
    let env = Env::new(RAISED);
    let first = env.launch_ok(&[]);
    assert_eq!(first.count("failed"), 1, "{}", first.text());
    let report = env.report_json();
    let fast = rejected(cells(&report)[0], "mode=fast");
    assert_eq!(fast["rejection"]["class"], "timeout", "{fast}");
    let timed_out: Vec<Json> = env
        .all_attempts("raised")
        .into_iter()
        .filter(|a| a["status"] == "failed")
        .collect();
    assert_eq!(timed_out.len(), 1, "{timed_out:?}");
    assert_eq!(
        timed_out[0]["failure"]["timeout_s"], 1.0,
        "{:?}",
        timed_out[0]
    );
    let others_before = env.runs().iter().filter(|r| r.mode != "fast").count();

    env.write_study(&RAISED.replace("timeout: 1s", "timeout: 5s"));
    let second = env.launch(&["--progress", "plain"]);
    assert!(second.ran_to_the_end(), "{}", second.text());
    assert!(
        second.stderr.contains(
            "note: 1 trial that timed out under trial.timeout 1.0s runs again under 5.0s"
        ),
        "{}",
        second.text()
    );
    // fast's two repeats, and nothing else.
    assert_eq!(
        second.counts(&["ran", "ok", "failed"]),
        [2, 2, 0],
        "{}",
        second.text()
    );
    assert_eq!(
        env.runs().iter().filter(|r| r.mode != "fast").count(),
        others_before,
        "a config that ran fine ran again"
    );
    let report = env.report_json();
    let cell = cells(&report)[0];
    assert!(
        cell["rejected"]
            .as_array()
            .is_some_and(|r| r.iter().all(|c| c["label"] != "mode=fast")),
        "{cell:#}"
    );
    assert_eq!(cell["winner"]["label"], "mode=fast", "{cell:#}");
    assert_eq!(report["voided_attempts"], 1, "{report:#}");

    let third = env.launch_ok(&[]);
    assert_eq!(third.count("ran"), 0, "{}", third.text());
}

/// `--keep-workdirs` keeps what a successful trial wrote, and what its
/// runs printed (a kept directory was empty of it).
#[test]
fn kept_workdirs_hold_what_the_runs_printed() {
    let env = Env::new(&STUDY.replace(
        "command: \"sh {{ study_dir }}",
        "command: \"echo printed-{{ mode }} && sh {{ study_dir }}",
    ));
    let out = env.launch(&["--keep-workdirs"]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let mut logs = Vec::new();
    let mut stack = vec![env.work()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read work dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == ".tunectl-stdout.log") {
                logs.push(path);
            }
        }
    }
    // Every trial that ran (the crash's too) has its directory and logs.
    assert_eq!(logs.len(), RUN_TRIALS, "{logs:?}");
    let mut measured = 0;
    for log in &logs {
        let text = std::fs::read_to_string(log).expect("stdout log");
        // A section per run (a warm-up, where one ran, and the counted
        // run; the crash config fails in its warm-up at each of the 2
        // cells), each with what the run printed.
        assert!(
            text.starts_with("== tunectl: "),
            "{}: {text}",
            log.display()
        );
        assert!(
            text.contains(" run ==\nprinted-"),
            "{}: {text}",
            log.display()
        );
        measured += usize::from(text.contains("== tunectl: measure run ==\nprinted-"));
        let dir = log.parent().expect("dir");
        assert!(
            dir.join(".tunectl-stderr.log").is_file(),
            "{}",
            dir.display()
        );
    }
    assert_eq!(measured, RUN_TRIALS - 2);
}

/// One trial is `1 trial`, in the plan's total and the launch's summary.
#[test]
fn one_trial_is_said_in_the_singular() {
    let env = Env::new(
        &STUDY
            .replace(
                "gate: {outputs: [out.txt]}\n",
                "gate: {outputs: [out.txt]}\nbudget: {max_trials: 1}\n",
            )
            .replace("n: [1, 2]", "n: [1]")
            .replace("repeats: 3", "repeats: 1")
            .replace("warmup: 1", "warmup: 0"),
    );
    let mut plan = env.tunectl();
    plan.args(["plan", &env.study_arg(), "--dry-run", "--ledger"])
        .arg(env.ledger());
    let out = env.run(plan);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("\ntotal: 1 trial\n"), "{}", out.text());
    let out = env.launch(&["--progress", "plain"]);
    assert_eq!(
        out.counts(&["ran", "ok", "failed"]),
        [1, 1, 0],
        "{}",
        out.text()
    );
}

/// The command a launch ends on (`... · \`tunectl report ...\` shows the
/// evidence`) runs as pasted into a shell: with `--ledger` when the launch
/// was given its ledger (the flag, or the inventory's, which `report`
/// never reads), without it when the study file names its ledger.
#[test]
fn the_report_command_a_launch_names_runs_as_pasted() {
    let env = Env::new(STUDY);
    let hint = regex::Regex::new(r"`(tunectl report [^`]*)` shows the evidence").expect("regex");
    let named = |out: &Out| -> String {
        hint.captures(&out.stderr)
            .map(|c| c[1].to_string())
            .unwrap_or_else(|| panic!("no report command:\n{}", out.text()))
    };
    // As pasted, `tunectl` being the binary under test.
    let paste = |cmd: &str| {
        let bin = format!("'{}'", env!("CARGO_BIN_EXE_tunectl"));
        let mut sh = env.command("sh");
        sh.arg("-c").arg(cmd.replacen("tunectl", &bin, 1));
        env.run(sh)
    };
    let shows_the_winner = |out: &Out, what: &str| {
        assert_eq!(out.code, Some(0), "{what}: {}", out.text());
        assert!(out.stdout.contains("mode=fast"), "{what}: {}", out.text());
    };

    // `--ledger`.
    let out = env.launch(&["--progress", "plain"]);
    assert!(out.ran_to_the_end(), "{}", out.text());
    let cmd = named(&out);
    assert!(cmd.contains(" --ledger "), "{cmd}");
    shows_the_winner(&paste(&cmd), "--ledger");
    // The bare command would not find it (the default ledger is ./ledgers).
    let bare = format!("tunectl report {}", env.study_arg());
    assert_ne!(paste(&bare).code, Some(0), "{bare}");

    // The inventory's ledger.
    let inv = env.write(
        "inventory.yaml",
        &format!(
            "ledger: {}\nhosts:\n  - {{name: box, transport: local}}\n",
            env.ledger_url()
        ),
    );
    // A launch without `--ledger` (the harness's launch gives one).
    let launch_with = |extra: &[&std::ffi::OsStr]| {
        let mut launch = env.tunectl();
        launch
            .args([
                "launch",
                &env.study_arg(),
                "--progress",
                "plain",
                "--format",
                "json",
            ])
            .args(extra)
            .arg("--workdir")
            .arg(env.work());
        let out = env.run(launch);
        assert!(out.ran_to_the_end(), "{}", out.text());
        named(&out)
    };
    let cmd = launch_with(&["--inventory".as_ref(), inv.as_os_str()]);
    assert!(cmd.contains(" --ledger "), "{cmd}");
    shows_the_winner(&paste(&cmd), "the inventory's ledger");

    // The study file's own ledger: `report` finds it alone.
    let text = std::fs::read_to_string(env.study()).expect("study");
    env.write_study(&format!("ledger: {}\n{text}", env.ledger_url()));
    let cmd = launch_with(&[]);
    assert_eq!(cmd, format!("tunectl report {}", env.study_arg()));
    shows_the_winner(&paste(&cmd), "the study's ledger");
}

#[test]
fn a_launch_on_remote_hosts_without_a_cap_needs_a_yes() {
    let env = Env::new(STUDY);
    // Refused before any host is contacted: nothing listens there.
    let inv = env.write(
        "inventory.yaml",
        "hosts:\n  - {name: box, transport: local}\n  - {name: gpu-a, transport: ssh, host: 127.0.0.1, port: 9}\n",
    );
    let out = env.launch(&["--inventory", &inv.display().to_string()]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains(
            "this launch runs on remote hosts (gpu-a) and the study sets no budget.max_trial_time; the plan's estimate is at most"
        ),
        "{}",
        out.text()
    );
    assert!(out.stderr.contains("pass --yes"), "{}", out.text());
    assert!(env.runs().is_empty(), "a trial ran");
    assert_eq!(attempt_count(&env, "fake"), 0);
}

#[test]
fn the_trial_time_cap_stops_a_launch_that_reaches_it_and_refuses_one_estimated_past_it() {
    // Each measured run sleeps 0.4 s: 26 trials cannot fit in 1 s.
    let study = STUDY.replace(
        "  timeout: 20s\n",
        "  timeout: 20s\n  env: {FAKE_SLEEP: \"0.4\"}\n",
    ) + "budget: {max_trial_time: 1s}\n";
    let env = Env::new(&study);
    // No run times yet: only the timeouts bound the estimate, and the cap
    // is the acknowledgement. It runs until the cap, then starts nothing.
    let out = env.launch(&[]);
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(
        out.stderr.contains("note: the plan's estimate is at most ")
            && out
                .stderr
                .contains("budget.max_trial_time 1s stops the launch if it gets there"),
        "{}",
        out.text()
    );
    assert!(
        out.stderr.contains("budget.max_trial_time 1s is spent"),
        "{}",
        out.text()
    );
    assert!(
        out.stderr
            .contains("the launch stopped starting trials at budget.max_trial_time 1s"),
        "{}",
        out.text()
    );
    let ran = attempt_count(&env, "fake");
    assert!(
        (1..=4).contains(&ran),
        "{ran} attempts for 1 s at 0.4 s each"
    );
    // What ran is evidence, not a verdict.
    assert_eq!(env.report_json()["level"], "draft");

    // Now the ledger has run times: what is left is estimated past the cap,
    // and refused before anything runs.
    let runs = env.runs().len();
    let out = env.launch(&[]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains("the plan's estimate is ")
            && out.stderr.contains(" run times in the ledger")
            && out.stderr.contains("more than budget.max_trial_time 1s"),
        "{}",
        out.text()
    );
    assert_eq!(env.runs().len(), runs, "a trial ran");
    // Acknowledged, it runs to the cap again.
    let out = env.launch(&["--yes"]);
    assert_eq!(out.code, Some(1), "{}", out.text());
    let ran = attempt_count(&env, "fake");

    // A higher cap goes on from there: nothing runs twice.
    env.write_study(&study.replace("max_trial_time: 1s", "max_trial_time: 1h"));
    let out = env.launch_ok(&[]);
    assert!(
        out.stderr.contains(&format!("{ran} already in the ledger")),
        "{}",
        out.text()
    );
    assert_eq!(attempt_count(&env, "fake"), RUN_TRIALS);
}

/// A study whose command prints its numbers (`result:` reads them from
/// stdout): base prints 100, 104, 102 tok/s; fast twice that; broken
/// prints none.
const STDOUT_STUDY: &str = r#"name: printed
knobs:
  mode: {kind: categorical, values: [base, fast, broken], default: base}
trial:
  command: "sh {{ study_dir }}/bench.sh {{ mode }}"
  timeout: 20s
objective: {metric: throughput, unit: tok/s, better: higher}
measurement: {warmup: 1, repeats: 1, anchor_every: 0, confirm_repeats: 0}
result:
  throughput: {stdout: 'tok/s: ([0-9.]+)'}
"#;

const PRINTING_BENCH: &str = r#"case "$1" in
  base) k=1 ;;
  fast) k=2 ;;
  *) echo "warming up, then nothing"; exit 0 ;;
esac
echo "loading model"
for v in 100 104 102; do printf 'step done, tok/s: %s\n' "$((v * k))"; done
"#;

#[test]
fn metrics_printed_on_stdout_are_read_by_the_result_section() {
    let env = Env::new(STDOUT_STUDY);
    env.write("study/bench.sh", PRINTING_BENCH);
    env.launch_ok(&[]);
    let report = env.report_json();
    let cs = cells(&report);
    let cell = cs[0];
    let baseline = &cell["baseline"]["summary"];
    assert_eq!(baseline["n"], 3, "every match is a sample: {cell}");
    assert_eq!(baseline["median"].as_f64(), Some(102.0), "{cell}");
    assert_eq!(cell["winner"]["label"], "mode=fast", "{cell}");
    assert_eq!(cell["winner"]["summary"]["median"].as_f64(), Some(204.0));
    let broken = rejected(cell, "mode=broken");
    assert_eq!(broken["rejection"]["class"], "no_result", "{broken}");
    assert_eq!(
        broken["rejection"]["detail"],
        "result.throughput: stdout: no match for 'tok/s: ([0-9.]+)' (repeat 0, host local)"
    );
    // The attempt record keeps the samples read.
    let attempts = env.all_attempts("printed");
    let base = attempts
        .iter()
        .find(|a| a["config"]["mode"] == "base")
        .expect("a base attempt");
    assert_eq!(
        base["metrics"]["throughput"],
        serde_json::json!([100.0, 104.0, 102.0])
    );
}

/// A study that runs a benchmark writing hyperfine's `--export-json`
/// format, read through the preset: `results[0].times` in seconds.
const HYPERFINE_STUDY: &str = r#"name: timed
knobs:
  threads: {kind: int, values: [1, 4], default: 1}
trial:
  command: "sh {{ study_dir }}/bench.sh {{ threads }}"
  timeout: 20s
objective: {metric: time, unit: s, better: lower}
metrics: [{name: mean, unit: s, better: lower}]
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
result: {preset: hyperfine, file: out/hyperfine.json}
"#;

/// Writes what `hyperfine --export-json out/hyperfine.json` writes (hyperfine 1.x's
/// fields), 4 threads running in half the time.
const HYPERFINE_BENCH: &str = r#"mkdir -p out
if [ "$1" = 4 ]; then t="0.051, 0.05, 0.052, 0.049, 0.05"; m=0.0504
else t="0.101, 0.1, 0.104, 0.099, 0.1"; m=0.1008; fi
cat > out/hyperfine.json <<JSON
{
  "results": [
    {
      "command": "./matmul --threads $1",
      "mean": $m,
      "stddev": 0.0019,
      "median": 0.1,
      "user": 0.09,
      "system": 0.01,
      "min": 0.099,
      "max": 0.104,
      "times": [$t],
      "exit_codes": [0, 0, 0, 0, 0]
    }
  ]
}
JSON
"#;

#[test]
fn a_hyperfine_export_is_read_through_its_preset() {
    let env = Env::new(HYPERFINE_STUDY);
    env.write("study/bench.sh", HYPERFINE_BENCH);
    env.launch_ok(&[]);
    let report = env.report_json();
    let cs = cells(&report);
    let cell = cs[0];
    assert_eq!(cell["baseline"]["summary"]["n"], 5, "{cell}");
    assert_eq!(
        cell["baseline"]["summary"]["median"].as_f64(),
        Some(0.1),
        "{cell}"
    );
    assert_eq!(cell["winner"]["label"], "threads=4", "{cell}");
    assert_eq!(cell["winner"]["summary"]["median"].as_f64(), Some(0.05));
    let attempts = env.all_attempts("timed");
    let base = attempts
        .iter()
        .find(|a| a["config"]["threads"] == 1)
        .expect("a baseline attempt");
    assert_eq!(base["metrics"]["mean"], serde_json::json!([0.1008]));
}

/// A bench reporting throughput and a latency: `fast` has the most
/// throughput and a latency of 300; `mid` less of both; `base` the least.
const LIMITED: &str = r#"name: limited
knobs:
  mode: {kind: categorical, values: [base, mid, fast], default: base}
trial:
  command: "sh {{ study_dir }}/bench.sh {{ mode }}"
  timeout: 20s
objective: {metric: tp, unit: ops/s, better: higher}
metrics:
  - {name: lat, unit: ms, better: lower}
measurement: {warmup: 0, repeats: 3, anchor_every: 0, confirm_repeats: 0}
selection:
  limits:
    lat: {max: 200}
"#;

const LIMITED_BENCH: &str = r#"case "$1" in
  base) tp=100; lat=50 ;;
  mid) tp=150; lat=100 ;;
  fast) tp=200; lat=300 ;;
esac
printf '{"metrics": {"tp": [%s, %s.5, %s.25], "lat": [%s, %s, %s]}}' \
  "$tp" "$tp" "$tp" "$lat" "$lat" "$lat" > "$TUNECTL_RESULT"
"#;

#[test]
fn a_limit_on_a_secondary_metric_rejects_the_fastest_config_and_re_judges_when_raised() {
    let env = Env::new(LIMITED);
    env.write("study/bench.sh", LIMITED_BENCH);
    env.launch_ok(&[]);
    let report = env.report_json();
    let bucket = &report["classes"][0]["buckets"][0];
    assert_eq!(bucket["winner"]["label"], "mode=mid", "{bucket}");
    let rejected = report["classes"][0]["cells"][0]["rejected"]
        .as_array()
        .expect("rejected");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0]["label"], "mode=fast");
    assert_eq!(rejected[0]["rejection"]["class"], "limit");
    assert_eq!(
        rejected[0]["rejection"]["detail"],
        "lat: median 300 ms over 9 samples, above the limit max 200 ms"
    );
    // Secondary metrics are reported beside the objective, with n.
    assert_eq!(rejected[0]["metrics"]["lat"]["median"], 300.0);
    assert_eq!(rejected[0]["metrics"]["lat"]["n"], 9);
    let table = env.report(&env.study_arg(), "table");
    assert!(table.contains("limit: lat: median 300"), "{table}");

    // The limit is a judging setting: raised, the same measurements are
    // judged again, and the fastest config wins; nothing reruns.
    let attempts = attempt_count(&env, "limited");
    env.write_study(&LIMITED.replace("lat: {max: 200}", "lat: {max: 400}"));
    let report = env.report_json();
    assert_eq!(
        report["classes"][0]["buckets"][0]["winner"]["label"],
        "mode=fast"
    );
    assert_eq!(
        report["judging"]["changed_since_launch"],
        serde_json::json!(["selection.limits.lat.max: 200.0 → 400.0"])
    );
    let out = env.launch_ok(&[]);
    assert_eq!(out.count("ran"), 0, "{}", out.text());
    assert_eq!(attempt_count(&env, "limited"), attempts);

    // A limit on a metric the study does not declare is a load error.
    env.write_study(&LIMITED.replace("    lat: {max: 200}", "    p99: {max: 200}"));
    let out = env.tunectl_run(&["validate", &env.study_arg()]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr.contains(
            "study.yaml:13:10: selection.limits.p99: `p99` is not a metric under `metrics:` (declared: lat)"
        ),
        "{}",
        out.text()
    );
}

/// CSV for spreadsheets: a field that a spreadsheet would take for a
/// formula (a study's context starting with `=`, `+`, `-` or `@`) is
/// written with a leading `'`, quoted per RFC 4180, so that opening the
/// report runs nothing; plain numbers stay numbers.
#[test]
fn a_csv_field_a_spreadsheet_would_take_for_a_formula_is_written_as_text() {
    let study = STUDY.replace(
        "name: fake\n",
        "name: fake\ncontext:\n  \"=HYPERLINK(\\\"http://example.invalid\\\",\\\"x\\\")\": \"1\"\n",
    );
    let env = Env::new(&study);
    env.launch_ok(&[]);
    let path = env.study().display().to_string();
    let text = env.report(&path, "csv");
    let csv = parse_csv(&text);
    let header = &csv[0];
    let context = header
        .iter()
        .position(|h| h == "context")
        .unwrap_or_else(|| panic!("no context column in {header:?}"));
    let n = header.iter().position(|h| h == "n").expect("n column");
    assert!(csv.len() > 1, "{text}");
    for row in &csv[1..] {
        assert!(
            row[context].starts_with("'=HYPERLINK("),
            "not neutralised: {:?}\n{text}",
            row[context]
        );
        assert!(
            row[n].is_empty() || row[n].chars().all(|c| c.is_ascii_digit()),
            "{:?}",
            row[n]
        );
    }
    // On the line itself the field is quoted (it holds quotes and a comma).
    assert!(
        text.lines()
            .skip(1)
            .all(|l| l.contains("\"'=HYPERLINK(\"\"http://example.invalid\"\",\"\"x\"\")=1\"")),
        "{text}"
    );
}
