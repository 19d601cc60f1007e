//! The slurm transport against a real single-node Slurm
//! (tests/it/support/slurm.rs): two node names on this machine with FAKE GPUs
//! and FAKE `nvidia-smi` model two host classes (gpu-a: H100, gpu-b:
//! A100), each pinned by an inventory entry's `constraint`. Trials run the
//! FAKE program tests/fixtures/fake-gpu-trial (on H100 `tile=128` wins; on
//! A100 `tile=256` runs out of memory and nothing beats the baseline;
//! `fast_math=true` changes the output everywhere).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::support;
use crate::support::remote::{self, A100, H100, KNOBS, Launched, class_of, fake_gpu_trial};
use crate::support::slurm::{Cluster, NodeSpec};
use crate::support::sshd;
use crate::support::{ledger_files, ran_to_the_end, wait_for};

const NODES: [NodeSpec; 2] = [
    NodeSpec {
        name: "gpu-a",
        gpu_type: "h100",
        gpus: 1,
        gpu_name: H100,
        cpus: 2,
    },
    NodeSpec {
        name: "gpu-b",
        gpu_type: "a100",
        gpus: 1,
        gpu_name: A100,
        cpus: 2,
    },
];

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    study: PathBuf,
    inventory: PathBuf,
    ledger: PathBuf,
    /// Directory of the counting `sbatch`/`squeue`/`scancel` wrappers.
    shims: PathBuf,
}

/// A study over `tile` × `fast_math` at two cells, and an inventory of one
/// slurm entry per node class.
fn setup(
    cluster: &Cluster,
    name: &str,
    trial_extra: &str,
    knobs: &str,
    entry_extra: &str,
) -> Setup {
    let tmp = tempfile::Builder::new()
        .prefix("tsl")
        .tempdir()
        .expect("temp dir");
    let root = tmp.path().to_path_buf();
    let study = root.join("study.yaml");
    std::fs::write(
        &study,
        format!(
            r#"name: {name}
knobs:
{knobs}cells:
  n: [1, 2]
trial:
  command: "{trial} --n {{{{ n }}}}"
  timeout: 30s
{trial_extra}objective: {{metric: tp, better: higher}}
measurement: {{warmup: 0, repeats: 2, anchor_every: 0, confirm_repeats: 1}}
# One sample per run: decide on 2 (these tests are about the transport).
selection: {{min_samples: 2}}
gate:
  outputs: [out.txt]
"#,
            trial = fake_gpu_trial()
        ),
    )
    .expect("study");
    let shared = root.join("shared");
    let mut inv = String::from("hosts:\n");
    for (entry, feature) in [("h100s", "h100"), ("a100s", "a100")] {
        inv.push_str(&format!(
            "  - name: {entry}\n    transport: slurm\n    constraint: {feature}\n    gres: \"gpu:1\"\n    poll_interval: 1s\n    shared_dir: {}\n    max_jobs_in_flight: 20\n{entry_extra}",
            shared.display()
        ));
    }
    let inventory = root.join("inventory.yaml");
    std::fs::write(&inventory, inv).expect("inventory");
    let shims = root.join("shims");
    std::fs::create_dir_all(&shims).expect("shims");
    for tool in ["sbatch", "squeue", "scancel"] {
        let real = which(tool);
        let path = shims.join(tool);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\n# Counts calls for the test, then runs the real {tool}.\necho \"$*\" >>{log}\nexec {real} \"$@\"\n",
                log = root.join(format!("{tool}.calls")).display()
            ),
        )
        .expect("shim");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let _ = cluster;
    Setup {
        _tmp: tmp,
        ledger: root.join("ledger"),
        root,
        study,
        inventory,
        shims,
    }
}

fn which(tool: &str) -> String {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        let p = Path::new(dir).join(tool);
        if p.exists() {
            return p.display().to_string();
        }
    }
    panic!("{tool} not found: install slurm-wlm (scripts/test.sh does)");
}

fn launch_cmd(cluster: &Cluster, s: &Setup, extra: &[&str]) -> std::process::Command {
    let mut c = support::env::tunectl_command();
    c.args([
        "launch",
        "--yes",
        "--progress",
        "plain",
        "--no-cooldown",
        "--inventory",
    ])
    .arg(&s.inventory)
    .arg("--ledger")
    .arg(&s.ledger)
    .args(extra)
    .arg(&s.study)
    .current_dir(&s.root);
    for (k, v) in cluster.env() {
        c.env(k, v);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("{}:{path}", s.shims.display()));
    c
}

/// A launch to its end, read through its JSON outcome.
fn launch(cluster: &Cluster, s: &Setup, extra: &[&str]) -> Launched {
    remote::launch(launch_cmd(cluster, s, extra), Duration::from_secs(300))
}

fn calls(s: &Setup, tool: &str) -> Vec<String> {
    std::fs::read_to_string(s.root.join(format!("{tool}.calls")))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn report_json(s: &Setup) -> Json {
    remote::report_json(&s.study, &s.ledger)
}

fn attempts(s: &Setup, study: &str) -> BTreeMap<String, Vec<Json>> {
    ledger_files::attempts(&s.ledger, study)
}

/// The node and `lost_reason` of each lost attempt of `study`.
fn lost_reasons(s: &Setup, study: &str) -> Vec<(String, String)> {
    attempts(s, study)
        .values()
        .flatten()
        .filter(|a| a["status"] == "lost")
        .map(|a| {
            (
                node_of(a),
                a["lost_reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Every trial has exactly one terminal attempt (drift anchors aside);
/// returns (trials, lost).
fn one_terminal_each(s: &Setup, study: &str) -> (usize, usize) {
    remote::one_terminal_per_trial(&s.ledger, study)
}

/// Trial keys in every batch manifest of the study (a key twice means it
/// was submitted twice).
fn submitted_keys(s: &Setup, study: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let dir = s.root.join("shared").join(study).join("batches");
    for b in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Ok(text) = std::fs::read_to_string(b.path().join("manifest.json")) {
            let m: Json = serde_json::from_str(&text).expect("manifest");
            for t in m["tasks"].as_array().into_iter().flatten() {
                keys.push(t["trial_key"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    keys
}

#[test]
fn a_study_runs_through_job_arrays_with_one_block_per_class() {
    let cluster = Cluster::start(&NODES);
    let s = setup(&cluster, "arrays", "", KNOBS, "");
    let launched = launch(&cluster, &s, &[]);
    assert_eq!(
        launched.count("lost"),
        0,
        "{}\nlost: {:?}",
        launched.stderr,
        lost_reasons(&s, "arrays")
    );
    remote::assert_grid_profile(&report_json(&s));
    let (trials, lost) = one_terminal_each(&s, "arrays");
    assert_eq!(lost, 0);
    // Gathered into arrays: far fewer sbatch calls than trials (one probe
    // job per entry, then an array whenever units become ready: a cell's
    // baseline, its sweep once the baseline is in, a confirmation round).
    let sbatch = calls(&s, "sbatch");
    assert!(
        sbatch.len() * 3 <= trials,
        "{} sbatch calls for {trials} trials",
        sbatch.len()
    );
    // gres pinned a GPU for every task, and each ran on its class's node.
    for a in attempts(&s, "arrays").values().flatten() {
        let tail = a["stdout_tail"].as_str().unwrap_or_default();
        assert!(
            tail.contains("dev=0"),
            "CUDA_VISIBLE_DEVICES not set by gres: {a}"
        );
    }
    // Every job was named after the study.
    let listed = cluster.run_ok("squeue", &["-h", "-t", "all", "-o", "%j"]);
    for name in listed.lines() {
        assert_eq!(name.trim(), "tunectl-arrays");
    }
}

#[test]
fn failing_and_timed_out_tasks_are_recorded_with_their_class() {
    let cluster = Cluster::start(&NODES[..1]);
    let knobs = "  mode: {kind: categorical, values: [ok, crash, hang], default: ok}\n";
    let mut s = setup(&cluster, "failures", "", knobs, "");
    // One entry is enough here; the trial's command reacts to the knob.
    let inv = std::fs::read_to_string(&s.inventory).expect("inventory");
    let first: String = inv
        .split("  - name: a100s")
        .next()
        .unwrap_or_default()
        .to_string();
    std::fs::write(&s.inventory, first).expect("inventory");
    std::fs::write(
        &s.study,
        r#"name: failures
knobs:
  mode: {kind: categorical, values: [ok, crash, hang], default: ok}
trial:
  command: "case {{ mode }} in crash) echo 'boom' >&2; exit 3;; hang) sleep 60;; esac; echo same > out.txt; printf '{\"metrics\":{\"tp\":1}}' > \"$TUNECTL_RESULT\""
  timeout: 3s
objective: {metric: tp, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
gate:
  outputs: [out.txt]
"#,
    )
    .expect("study");
    s.study = s.root.join("study.yaml");
    launch(&cluster, &s, &[]);
    let all = attempts(&s, "failures");
    let by_mode = |mode: &str| {
        all.values()
            .flatten()
            .find(|a| a["config"]["mode"] == mode)
            .unwrap_or_else(|| panic!("no {mode} attempt"))
            .clone()
    };
    assert_eq!(by_mode("ok")["status"], "ok");
    let crash = by_mode("crash");
    assert_eq!(crash["failure"]["class"], "crash", "{crash}");
    assert!(
        crash["stderr_tail"]
            .as_str()
            .unwrap_or_default()
            .contains("boom")
    );
    let hang = by_mode("hang");
    assert_eq!(hang["failure"]["class"], "timeout", "{hang}");
}

#[test]
fn a_task_past_the_slurm_time_limit_is_a_timeout() {
    // The one slow test: Slurm's smallest limit is one minute (killed at
    // about 83 s).
    let cluster = Cluster::start(&NODES[..1]);
    let s = setup(&cluster, "limit", "", KNOBS, "    time_limit: \"1\"\n");
    let inv = std::fs::read_to_string(&s.inventory).expect("inventory");
    let first = inv
        .split("  - name: a100s")
        .next()
        .unwrap_or_default()
        .to_string();
    std::fs::write(&s.inventory, first).expect("inventory");
    std::fs::write(
        &s.study,
        r#"name: limit
knobs:
  mode: {kind: categorical, values: [slow], default: slow}
trial:
  command: "sleep 300"
  timeout: 600s
objective: {metric: tp, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
"#,
    )
    .expect("study");
    launch(&cluster, &s, &[]);
    let all = attempts(&s, "limit");
    let a = all.values().flatten().next().expect("an attempt");
    assert_eq!(a["status"], "failed", "{a}");
    assert_eq!(a["failure"]["class"], "timeout", "{a}");
    assert!(
        a["stderr_tail"]
            .as_str()
            .unwrap_or_default()
            .contains("TIMEOUT"),
        "{a}"
    );
}

#[test]
fn a_node_going_down_mid_study_loses_nothing() {
    let cluster = Cluster::start(&NODES);
    let env = "  env: {FAKE_TRIAL_SLEEP: \"2\"}\n";
    let s = setup(&cluster, "nodedown", env, KNOBS, "");
    let mut child = launch_cmd(&cluster, &s, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("launch");
    // Once gpu-a runs a task of the sweep, take it down, then bring it back.
    assert!(
        wait_for(Duration::from_secs(120), || {
            cluster
                .run_ok("squeue", &["-h", "-r", "-t", "running", "-o", "%N|%i"])
                .lines()
                .any(|l| l.starts_with("gpu-a|") && !l.ends_with("_0"))
        }),
        "nothing ran on gpu-a"
    );
    cluster.node_down("gpu-a");
    std::thread::sleep(Duration::from_secs(3));
    cluster.node_resume("gpu-a");
    let out = child_output(&mut child, Duration::from_secs(300));
    assert!(out.0, "{}", out.1);
    let (_, lost) = one_terminal_each(&s, "nodedown");
    assert!(
        lost >= 1,
        "the node's tasks were lost and re-run: {}",
        out.1
    );
    let lost_reasons: Vec<String> = attempts(&s, "nodedown")
        .values()
        .flatten()
        .filter(|a| a["status"] == "lost")
        .map(|a| a["lost_reason"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        lost_reasons.iter().all(|r| r.starts_with("slurm: ")),
        "{lost_reasons:?}"
    );
    let report = report_json(&s);
    for b in class_of(&report, H100)["buckets"]
        .as_array()
        .expect("buckets")
    {
        assert_eq!(b["winner"]["label"], "tile=128", "{b}");
    }
}

fn child_output(child: &mut std::process::Child, limit: Duration) -> (bool, String) {
    let start = Instant::now();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = child.wait().expect("wait");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    (ran_to_the_end(status.code(), &err), err)
}

#[test]
fn a_killed_launcher_resumes_without_resubmitting() {
    let cluster = Cluster::start(&NODES);
    let env = "  env: {FAKE_TRIAL_SLEEP: \"1\"}\n";
    let s = setup(&cluster, "resume", env, KNOBS, "");
    let mut child = launch_cmd(&cluster, &s, &[])
        .env("TUNECTL_LEASE_TTL", "4s")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("launch");
    // Killed while arrays of the sweep are queued or running.
    assert!(
        wait_for(Duration::from_secs(120), || calls(&s, "sbatch").len() >= 4),
        "the launcher never submitted arrays"
    );
    std::thread::sleep(Duration::from_millis(500));
    child.kill().expect("SIGKILL the launcher");
    let _ = child.wait();
    let before = submitted_keys(&s, "resume");
    assert!(!before.is_empty());
    let out = launch_cmd(&cluster, &s, &[])
        .env("TUNECTL_LEASE_TTL", "4s")
        .stdout(Stdio::null())
        .output()
        .expect("relaunch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(ran_to_the_end(out.status.code(), &stderr), "{stderr}");
    // No trial submitted twice: what the first launcher had in flight was
    // adopted, not submitted again.
    let keys = submitted_keys(&s, "resume");
    let mut seen = std::collections::HashSet::new();
    for k in &keys {
        assert!(seen.insert(k.clone()), "trial {k} was submitted twice");
    }
    let (_, lost) = one_terminal_each(&s, "resume");
    assert_eq!(lost, 0, "{stderr}");
}

#[test]
fn ctrl_c_cancels_only_this_studys_jobs() {
    let cluster = Cluster::start(&NODES[..1]);
    let env = "  env: {FAKE_TRIAL_SLEEP: \"60\"}\n";
    let s = setup(&cluster, "cancel", env, KNOBS, "");
    let inv = std::fs::read_to_string(&s.inventory).expect("inventory");
    let first = inv
        .split("  - name: a100s")
        .next()
        .unwrap_or_default()
        .to_string();
    std::fs::write(&s.inventory, first).expect("inventory");
    // Another user's job, waiting on the same partition.
    let other = cluster.sbatch(&["-J", "someone-else", "--wrap", "sleep 120"]);
    let child = launch_cmd(&cluster, &s, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("launch");
    assert!(
        wait_for(Duration::from_secs(60), || {
            cluster
                .run_ok("squeue", &["-h", "-r", "-o", "%j|%T"])
                .lines()
                .any(|l| l.starts_with("tunectl-cancel|"))
        }),
        "no job of the study"
    );
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().expect("launch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        wait_for(Duration::from_secs(30), || {
            !cluster
                .run_ok("squeue", &["-h", "-r", "-o", "%j|%T"])
                .lines()
                .any(|l| l.starts_with("tunectl-cancel|") && !l.contains("CANCELLED"))
        }),
        "the study's jobs still run"
    );
    let rows = cluster.job(&other);
    assert!(
        rows.iter().all(|r| r.state != "CANCELLED"),
        "another study's job was cancelled: {rows:?}"
    );
    // Every scancel named job ids, never a name or a user.
    for c in calls(&s, "scancel") {
        assert!(
            c.split_whitespace()
                .all(|w| w.chars().all(|ch| ch.is_ascii_digit() || ch == '_')),
            "scancel {c}"
        );
    }
}

#[test]
fn a_login_host_over_ssh_submits_and_reads_the_reports() {
    let cluster = Cluster::start(&NODES[..1]);
    let mut fleet = sshd::Fleet::start(&[sshd::HostSpec {
        name: "login",
        gpu_name: "none",
        gpu_count: 0,
    }]);
    // The login host's sessions know the cluster (as a real login node's
    // environment would).
    let config = fleet.hosts[0].root.join("sshd_config");
    let text = std::fs::read_to_string(&config).expect("sshd config");
    let with_conf = text.replacen(
        "SetEnv PATH=",
        &format!("SetEnv SLURM_CONF={} PATH=", cluster.conf.display()),
        1,
    );
    assert_ne!(text, with_conf);
    std::fs::write(&config, with_conf).expect("sshd config");
    fleet.kill_host(0);
    fleet.restart_host(0);

    let s = setup(&cluster, "viassh", "", KNOBS, "    login: login\n");
    let inv = std::fs::read_to_string(&s.inventory).expect("inventory");
    let h100 = inv
        .split("  - name: a100s")
        .next()
        .unwrap_or_default()
        .to_string();
    let login = fleet.inventory_yaml(1, "");
    let login_entry = login.trim_start_matches("hosts:\n");
    std::fs::write(&s.inventory, format!("{h100}{login_entry}")).expect("inventory");
    // Only the slurm entry runs trials; the login host only carries them.
    let mut cmd = launch_cmd(&cluster, &s, &["--host", "h100s"]);
    cmd.env_remove("SLURM_CONF").env("PATH", "/usr/bin:/bin");
    let launched = remote::launch(cmd, Duration::from_secs(300));
    assert_eq!(launched.count("lost"), 0, "{}", launched.stderr);
    let report = report_json(&s);
    assert_eq!(report["classes"].as_array().map(Vec::len), Some(1));
    for b in class_of(&report, H100)["buckets"]
        .as_array()
        .expect("buckets")
    {
        assert_eq!(b["winner"]["label"], "tile=128", "{b}");
    }
    one_terminal_each(&s, "viassh");
}

#[test]
fn a_hyperband_study_runs_its_rungs_as_job_arrays() {
    let cluster = Cluster::start(&NODES);
    let s = setup(&cluster, "hb", "", KNOBS, "");
    // The same fake, searched with Hyperband at budgets 1 and 3 (the fake
    // ignores them; every rung still goes through sbatch and the reports).
    let text = std::fs::read_to_string(&s.study).expect("study");
    std::fs::write(
        &s.study,
        text.replace(
            "gate:",
            "fidelity: {unit: samples, min_budget: 1, max_budget: 3, eta: 3}\nstrategy: {kind: hyperband, seed: 1, finalists: 2}\ngate:",
        ),
    )
    .expect("study");
    let launched = launch(&cluster, &s, &[]);
    assert_eq!(launched.count("lost"), 0, "{}", launched.stderr);
    remote::assert_search_profile(&report_json(&s));
    let (trials, lost) = one_terminal_each(&s, "hb");
    assert_eq!(lost, 0);
    let rungs = attempts(&s, "hb")
        .values()
        .flatten()
        .filter(|a| a["role"] == "rung")
        .count();
    assert!(
        rungs > 0 && rungs < trials,
        "{rungs} rung trials of {trials}"
    );
}

/// `result:` on Slurm: the batch task sends back the counted run's whole
/// stdout (longer than the kept tail) and the JSON file the trial wrote,
/// and the launcher reads the metrics from them.
#[test]
fn result_sources_come_back_from_a_batch_task() {
    let cluster = Cluster::start(&NODES[..1]);
    let s = setup(&cluster, "extracted", "", KNOBS, "");
    let inv = std::fs::read_to_string(&s.inventory).expect("inventory");
    let first = inv
        .split("  - name: a100s")
        .next()
        .unwrap_or_default()
        .to_string();
    std::fs::write(&s.inventory, first).expect("inventory");
    let bench = s.root.join("bench.sh");
    std::fs::write(
        &bench,
        "echo \"tok/s: $((100 * $1))\"\ni=0\nwhile [ $i -lt 3000 ]; do echo 'filler line'; i=$((i + 1)); done\n\
         printf '{\"runs\": [{\"ms\": %s}, {\"ms\": %s}]}' \"$((20 / $1))\" \"$((22 / $1))\" > lat.json\n",
    )
    .expect("bench");
    std::fs::write(
        &s.study,
        format!(
            r#"name: extracted
knobs:
  k: {{kind: int, values: [1, 2], default: 1}}
trial:
  command: "sh {bench} {{{{ k }}}}"
  timeout: 30s
objective: {{metric: tps, better: higher}}
metrics: [{{name: ms, better: lower}}]
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
result:
  tps: {{stdout: 'tok/s: ([0-9]+)'}}
  ms: {{file: lat.json, path: 'runs[*].ms'}}
"#,
            bench = bench.display()
        ),
    )
    .expect("study");
    launch(&cluster, &s, &[]);
    let all = attempts(&s, "extracted");
    let mut got: Vec<(Json, Json)> = all
        .values()
        .flatten()
        .map(|a| {
            assert_eq!(a["status"], "ok", "{a}");
            (a["metrics"]["tps"].clone(), a["metrics"]["ms"].clone())
        })
        .collect();
    got.sort_by_key(|(tps, _)| tps.to_string());
    assert_eq!(
        got,
        vec![
            (serde_json::json!([100.0]), serde_json::json!([20.0, 22.0])),
            (serde_json::json!([200.0]), serde_json::json!([10.0, 11.0])),
        ]
    );
}

/// The reported injection templates (tests/it/support/injection.rs) as
/// Slurm batch tasks: the command and its environment are written into
/// the task's script, and every value reaches the command as the
/// expansion of a variable set there: none runs, each template prints the
/// literal value.
#[test]
fn the_reported_templates_run_no_value_as_batch_tasks() {
    let cluster = Cluster::start(&NODES[..1]);
    let s = setup(&cluster, "reported", "", KNOBS, "");
    let inv = std::fs::read_to_string(&s.inventory).expect("inventory");
    let first = inv
        .split("  - name: a100s")
        .next()
        .unwrap_or_default()
        .to_string();
    std::fs::write(&s.inventory, first).expect("inventory");
    let values = support::injection::payloads(&s.root);
    std::fs::write(&s.study, support::injection::study("reported", &values)).expect("study");
    launch(&cluster, &s, &[]);
    assert_eq!(
        support::injection::markers(&s.root),
        Vec::<String>::new(),
        "a value ran as code"
    );
    support::injection::check(&attempts(&s, "reported"), &values);
}

/// Every trial has exactly one terminal attempt, but a lost repeat of a
/// config that failed at its cell and class: it is not run again (a
/// config that fails is not repeated). Returns the lost attempts.
fn one_terminal_each_but_failed(s: &Setup, study: &str) -> usize {
    let all = attempts(s, study);
    let config_at = |a: &Json| format!("{} {} {}", a["host_class"], a["config"], a["cell"]);
    let failed: std::collections::BTreeSet<String> = all
        .values()
        .flatten()
        .filter(|a| a["status"] == "failed")
        .map(config_at)
        .collect();
    let mut lost = 0;
    for (key, list) in &all {
        let terminal = list.iter().filter(|a| a["status"] != "lost").count();
        lost += list.len() - terminal;
        let of_failed = list.first().is_some_and(|a| failed.contains(&config_at(a)));
        assert!(
            terminal == 1 || (terminal == 0 && of_failed),
            "trial {key}: {list:?}"
        );
    }
    lost
}

/// A quickstart-like study for the mixed-partition tests: warm-ups,
/// three repeats, drift anchors and a confirmation round, two cells in two
/// buckets. The trial says which node ran it (`node=` on stdout).
fn mixed_study(name: &str) -> String {
    mixed_study_with(
        name,
        "measurement: {warmup: 1, repeats: 3, anchor_every: 4, confirm_repeats: 3}\n",
    )
}

/// [`mixed_study`] with other measurement lines (`measurement`, `trial`'s
/// `env`...).
fn mixed_study_with(name: &str, measurement: &str) -> String {
    format!(
        r#"name: {name}
knobs:
{KNOBS}cells:
  n: [1, 2]
trial:
  command: "echo node=$SLURMD_NODENAME; {trial} --n {{{{ n }}}}"
  timeout: 30s
objective: {{metric: tp, better: higher}}
{measurement}gate:
  outputs: [out.txt]
"#,
        trial = fake_gpu_trial()
    )
}

/// [`mixed_study`] measured as little as a decision allows: two repeats,
/// no warm-up and no anchors, a one-pair final round.
fn quick_mixed_study(name: &str) -> String {
    mixed_study_with(
        name,
        "measurement: {warmup: 0, repeats: 2, anchor_every: 0, confirm_repeats: 1}\n\
         selection: {min_samples: 2}\n",
    )
}

/// A slurm entry of the test inventory.
fn slurm_entry(name: &str, constraint: Option<&str>, shared: &Path) -> String {
    let constraint = constraint
        .map(|c| format!("    constraint: {c}\n"))
        .unwrap_or_default();
    format!(
        "  - name: {name}\n    transport: slurm\n{constraint}    gres: \"gpu:1\"\n    poll_interval: 1s\n    shared_dir: {}\n    max_jobs_in_flight: 20\n",
        shared.display()
    )
}

/// The setup's inventory: one slurm entry `gpus`, no `constraint`, over
/// the whole (mixed) partition.
fn one_mixed_entry(s: &Setup) {
    let shared = s.root.join("shared");
    std::fs::write(
        &s.inventory,
        format!("hosts:\n{}", slurm_entry("gpus", None, &shared)),
    )
    .expect("inventory");
}

/// What a launch shipped per host class: class id → bucket label →
/// (winner or `baseline`, level).
fn shipped(s: &Setup) -> BTreeMap<String, BTreeMap<String, (String, String)>> {
    remote::shipped(&report_json(s))
}

/// The node an attempt ran on (its `node=` line).
fn node_of(a: &Json) -> String {
    a["stdout_tail"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("node="))
        .unwrap_or_default()
        .to_string()
}

/// Successful attempts other than anchors, per (class, role, config, cell,
/// repeat). (How many repeats of a failing config start before its first
/// failure is in depends on concurrency, not on a decision.)
fn measured(s: &Setup, study: &str) -> std::collections::BTreeSet<String> {
    attempts(s, study)
        .values()
        .flatten()
        .filter(|a| a["status"] == "ok" && a["role"] != "anchor")
        .map(|a| {
            format!(
                "{} {} {} {} {}",
                a["host_class"], a["role"], a["config"], a["cell"], a["repeat"]
            )
        })
        .collect()
}

fn plan_json(cluster: &Cluster, s: &Setup) -> Json {
    let mut c = support::env::tunectl_command();
    c.args(["plan", "--dry-run", "--json", "--inventory"])
        .arg(&s.inventory)
        .arg("--ledger")
        .arg(&s.ledger)
        .arg(&s.study)
        .current_dir(&s.root);
    for (k, v) in cluster.env() {
        c.env(k, v);
    }
    let out = c.output().expect("plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("plan JSON")
}

/// One entry for a partition with an H100 node and an A100 node, no
/// `constraint`: the launch finds both node classes, steers each class's
/// trials to its own node, and ships what two entries pinned by
/// `constraint` ship, class by class, with no attempt lost.
#[test]
fn a_mixed_partition_is_tuned_per_node_class_in_one_entry() {
    let started = Instant::now();
    let cluster = Cluster::start(&NODES);
    let mixed = setup(&cluster, "mixed", "", KNOBS, "");
    std::fs::write(&mixed.study, mixed_study("mixed")).expect("study");
    one_mixed_entry(&mixed);

    // Before any launch, plan lists the partition's two node types.
    let plan = plan_json(&cluster, &mixed);
    let hosts: Vec<&str> = plan["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .filter_map(|h| h["host"].as_str())
        .collect();
    assert_eq!(hosts, vec!["gpus.h100", "gpus.a100"], "{plan}");
    assert_eq!(plan["classes"].as_array().map(Vec::len), Some(2), "{plan}");

    let t = Instant::now();
    let launched = launch(&cluster, &mixed, &[]);
    let stderr = &launched.stderr;
    eprintln!("mixed launch: {:?}", t.elapsed());
    assert!(
        stderr.contains("host gpus.h100 (slurm nodes gpu-a)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("host gpus.a100 (slurm nodes gpu-b)"),
        "{stderr}"
    );
    let (trials, lost) = one_terminal_each(&mixed, "mixed");
    assert_eq!(lost, 0, "{stderr}");
    // Every attempt ran on its class's node: the H100 class's on gpu-a,
    // the A100 class's on gpu-b, anchors and confirmation rounds included.
    let mut roles = std::collections::BTreeSet::new();
    for a in attempts(&mixed, "mixed").values().flatten() {
        let want = match a["host"].as_str() {
            Some("gpus.h100") => "gpu-a",
            Some("gpus.a100") => "gpu-b",
            other => panic!("attempt on host {other:?}: {a}"),
        };
        assert_eq!(node_of(a), want, "{a}");
        roles.insert(a["role"].as_str().unwrap_or_default().to_string());
    }
    for role in ["sweep", "anchor", "confirm"] {
        assert!(roles.contains(role), "no {role} attempt: {roles:?}");
    }
    // Each part's arrays (and each probe) pinned to a node: a task waiting
    // for one class's GPU never holds the other class's in the partition.
    for c in calls(&mixed, "sbatch") {
        assert!(
            c.contains("--nodelist=gpu-") && !c.contains("--exclude"),
            "an sbatch not pinned to a node: {c}"
        );
    }
    let report = report_json(&mixed);
    for b in class_of(&report, H100)["buckets"]
        .as_array()
        .expect("buckets")
    {
        assert_eq!(b["winner"]["label"], "tile=128", "{b}");
        assert_eq!(b["level"], "verdict", "{b}");
    }
    for b in class_of(&report, A100)["buckets"]
        .as_array()
        .expect("buckets")
    {
        assert!(b["winner"].is_null(), "{b}");
        assert_eq!(b["level"], "verdict", "{b}");
    }

    // After the launch, plan shows the entry's two probed classes.
    let plan = plan_json(&cluster, &mixed);
    let classes = plan["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 2, "{plan}");
    assert!(classes.iter().all(|c| c["probed"] == true), "{plan}");
    let nodes: Vec<String> = plan["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| h["nodes"].to_string())
        .collect();
    assert_eq!(nodes, vec!["[\"gpu-a\"]", "[\"gpu-b\"]"], "{plan}");

    // The same study through two entries pinned by `constraint`.
    let pinned = setup(&cluster, "pinned", "", KNOBS, "");
    std::fs::write(&pinned.study, mixed_study("pinned")).expect("study");
    let shared = pinned.root.join("shared");
    std::fs::write(
        &pinned.inventory,
        format!(
            "hosts:\n{}{}",
            slurm_entry("h100s", Some("h100"), &shared),
            slurm_entry("a100s", Some("a100"), &shared)
        ),
    )
    .expect("inventory");
    let t = Instant::now();
    launch(&cluster, &pinned, &[]);
    eprintln!("pinned launch: {:?}", t.elapsed());
    one_terminal_each(&pinned, "pinned");
    assert_eq!(shipped(&mixed), shipped(&pinned));
    // The same sweep and confirmation trials per class (anchors follow
    // the order trials end in, which concurrency changes).
    assert!(trials > 0);
    let (one, two) = (measured(&mixed, "mixed"), measured(&pinned, "pinned"));
    assert!(
        one == two,
        "only with one entry: {:?}\nonly with two: {:?}",
        one.difference(&two).collect::<Vec<_>>(),
        two.difference(&one).collect::<Vec<_>>()
    );
    eprintln!("whole test: {:?}", started.elapsed());
}

/// A node whose type hides its class: gpu-c carries the `h100` feature and
/// gres type but holds an A100. Discovery probes one node of the type
/// (gpu-a) and takes gpu-c for an H100; the H100 class's tasks that land
/// on gpu-c are lost (their probe shows the A100) and run again, gpu-c is
/// kept out of the H100 class's later jobs, and nothing it measured is
/// classed as an H100. What such a task measured is a run of the A100
/// class: it is recorded there when that class has not started the same
/// trial, and the A100 class does not run it again.
///
/// The A100 part has one job in flight (3 for the entry, shared by GPUs)
/// and its first trial (the first cell's baseline) takes 4 s: the H100
/// class's first two tasks, the baselines of both cells, land on gpu-a
/// and gpu-c. Which lands where is Slurm's choice (about half the runs
/// each way): the second cell's, on gpu-c, is kept for the A100 class,
/// which has not started it; the first cell's, on gpu-c, is not, as the
/// A100 class is running it (the test checks that it was dispatched
/// before the run on gpu-c ended). The FAKE driver's test in `run_study`
/// makes the keep happen every time.
#[test]
fn a_node_of_another_class_than_its_type_is_found_out_and_kept_out() {
    let cluster = Cluster::start(&[
        NODES[0],
        NODES[1],
        NodeSpec {
            name: "gpu-c",
            gpu_type: "h100",
            gpus: 1,
            gpu_name: "NVIDIA A100-SXM4-80GB",
            cpus: 2,
        },
    ]);
    let s = setup(&cluster, "hidden", "", KNOBS, "");
    let once = s.root.join("a100-slow-once");
    std::fs::write(
        &s.study,
        quick_mixed_study("hidden")
            .replace(
                "  timeout: 30s\n",
                "  timeout: 30s\n  env: {FAKE_TRIAL_SLEEP: \"1\"}\n",
            )
            .replace(
                "command: \"echo node=$SLURMD_NODENAME; ",
                &format!(
                    "command: \"echo node=$SLURMD_NODENAME; if [ $TUNECTL_HOST = gpus.a100 ] && mkdir {} 2>/dev/null; then sleep 3; fi; ",
                    once.display()
                ),
            ),
    )
    .expect("study");
    let shared = s.root.join("shared");
    std::fs::write(
        &s.inventory,
        format!(
            "hosts:\n{}",
            slurm_entry("gpus", None, &shared)
                .replace("max_jobs_in_flight: 20", "max_jobs_in_flight: 3")
        ),
    )
    .expect("inventory");
    let t = Instant::now();
    let out = launch(&cluster, &s, &[]);
    eprintln!("launch: {:?}", t.elapsed());
    assert!(
        out.stderr
            .contains("host gpus.h100 (slurm nodes gpu-a, gpu-c)"),
        "{}",
        out.stderr
    );
    let lost = one_terminal_each_but_failed(&s, "hidden");
    let all = attempts(&s, "hidden");
    let by_id: BTreeMap<&str, &Json> = all
        .values()
        .flatten()
        .map(|a| (a["attempt_id"].as_str().unwrap_or_default(), a))
        .collect();
    let (mut kept, mut held) = (0, 0);
    for a in all.values().flatten() {
        if a["status"] == "lost" {
            let why = a["lost_reason"].as_str().unwrap_or_default();
            assert!(
                why.contains("node gpu-c") && why.contains("kept out"),
                "{a}"
            );
            assert_eq!(a["host"], "gpus.h100", "{a}");
            assert_eq!(node_of(a), "gpu-c", "{a}");
            // Kept for the A100 class: the same config, cell and repeat,
            // measured on gpu-c, as the A100 part's attempt.
            let Some(id) = why.split("recorded for that class as attempt ").nth(1) else {
                // Not kept: then the A100 class held the same trial when
                // this run ended (running it, or done). Which of the H100
                // class's first two trials Slurm puts on gpu-c is its
                // choice, and the A100 class starts on the first of them.
                let ended = chrono::DateTime::parse_from_rfc3339(
                    a["finished_at"].as_str().unwrap_or_default(),
                )
                .unwrap_or_else(|e| panic!("finished_at: {e}: {a}"))
                .naive_utc();
                assert!(
                    all.values().flatten().any(|b| b["host"] == "gpus.a100"
                        && ["config", "cell", "repeat", "role"]
                            .iter()
                            .all(|f| b[*f] == a[*f])
                        && dispatched(b) <= ended),
                    "a run on gpu-c not kept for the A100 class, which did not hold its trial: {a}"
                );
                held += 1;
                continue;
            };
            {
                let there = by_id[id];
                assert_eq!(there["host"], "gpus.a100", "{there}");
                assert_eq!(node_of(there), "gpu-c", "{there}");
                assert_eq!(there["status"], "ok", "{there}");
                for field in ["config", "cell", "repeat", "role"] {
                    assert_eq!(there[field], a[field], "{field}: {there}\n{a}");
                }
                assert_ne!(there["host_class"], a["host_class"]);
                kept += 1;
            }
        } else if a["host"] == "gpus.h100" {
            assert_eq!(node_of(a), "gpu-a", "{a}");
        } else {
            assert_ne!(node_of(a), "gpu-a", "{a}");
        }
    }
    eprintln!("landings on gpu-c: {kept} kept, {held} held by the A100 class");
    assert!(lost >= 1, "no task of the H100 class landed on gpu-c");
    // Each landing is kept unless the A100 class held its trial (checked
    // above); the FAKE driver's test in `run_study` covers the keep
    // without Slurm's choice.
    assert_eq!(kept + held, lost, "each landing kept or held");
    assert_eq!(
        out.stderr.contains("ran on node gpu-c, of the class")
            && out
                .stderr
                .contains("recorded for that class (host gpus.a100)"),
        kept > 0,
        "{}",
        out.stderr
    );
    let report = report_json(&s);
    assert_eq!(report["classes"].as_array().map(Vec::len), Some(2));
    for b in class_of(&report, H100)["buckets"]
        .as_array()
        .expect("buckets")
    {
        assert_eq!(b["winner"]["label"], "tile=128", "{b}");
    }
    for b in class_of(&report, A100)["buckets"]
        .as_array()
        .expect("buckets")
    {
        assert!(b["winner"].is_null(), "{b}");
    }
}

/// When an attempt was dispatched: its id begins with that moment
/// (`20261206T234041.604065Z-…`).
fn dispatched(a: &Json) -> chrono::NaiveDateTime {
    let id = a["attempt_id"].as_str().unwrap_or_default();
    let at = id.split('-').next().unwrap_or_default();
    chrono::NaiveDateTime::parse_from_str(at, "%Y%m%dT%H%M%S%.fZ")
        .unwrap_or_else(|e| panic!("attempt id {id}: {e}"))
}

/// `tunectl fingerprint -i` of one entry over a mixed partition probes
/// each node type and shows the entry's parts (`gpus.h100` on gpu-a,
/// `gpus.a100` on gpu-b), one class each; with `--study`, under the
/// study's class key (GPU count only: one class, the entry whole), as its
/// launches class them.
fn fingerprint_shows_the_parts(cluster: &Cluster, s: &Setup) {
    let fingerprint = |study: Option<&Path>| -> Json {
        let mut c = support::env::tunectl_command();
        c.args(["fingerprint", "--format", "json", "--inventory"])
            .arg(&s.inventory)
            .current_dir(&s.root);
        if let Some(study) = study {
            c.arg("--study").arg(study);
        }
        for (k, v) in cluster.env() {
            c.env(k, v);
        }
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{path}", s.shims.display()));
        let out = assert_cmd::Command::from_std(c)
            .timeout(Duration::from_secs(120))
            .output()
            .expect("fingerprint");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("fingerprint JSON")
    };
    let hosts = |doc: &Json| -> Vec<(String, String, Json)> {
        doc["classes"]
            .as_array()
            .expect("classes")
            .iter()
            .flat_map(|c| {
                c["hosts"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|h| {
                        (
                            c["host_class"].as_str().unwrap_or_default().to_string(),
                            h["host"].as_str().unwrap_or_default().to_string(),
                            h["nodes"].clone(),
                        )
                    })
            })
            .collect()
    };
    let doc = fingerprint(None);
    let mut found = hosts(&doc);
    found.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(
        found
            .iter()
            .map(|h| (h.1.as_str(), h.2.to_string()))
            .collect::<Vec<_>>(),
        vec![
            ("gpus.a100", "[\"gpu-b\"]".to_string()),
            ("gpus.h100", "[\"gpu-a\"]".to_string())
        ],
        "{doc}"
    );
    assert_ne!(found[0].0, found[1].0, "two classes: {doc}");
    let by_count = s.root.join("by-count.yaml");
    std::fs::write(
        &by_count,
        format!(
            "{}fingerprint: {{class_key: [gpu_count]}}\n",
            std::fs::read_to_string(&s.study).expect("study")
        ),
    )
    .expect("study");
    let doc = fingerprint(Some(&by_count));
    let found = hosts(&doc);
    assert_eq!(found.len(), 1, "{doc}");
    assert_eq!(found[0].1, "gpus", "one class, the entry whole: {doc}");
}

/// A mixed partition's jobs in flight are shared by GPUs, not nodes: one
/// node of 8 GPUs against one of 1, each task asking `gpu:1`, gets 8/9 of
/// the entry's `max_jobs_in_flight` (20: 17 and 2), enough to fill it.
#[test]
fn a_mixed_partitions_jobs_in_flight_are_shared_by_gpus() {
    let cluster = Cluster::start(&[
        NodeSpec {
            gpus: 8,
            ..NODES[0]
        },
        NODES[1],
    ]);
    let s = setup(&cluster, "gpus8", "", KNOBS, "");
    std::fs::write(&s.study, mixed_study("gpus8")).expect("study");
    one_mixed_entry(&s);
    let plan = plan_json(&cluster, &s);
    let slots: Vec<(String, u64)> = plan["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| {
            (
                h["host"].as_str().unwrap_or_default().to_string(),
                h["slots"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        slots,
        vec![("gpus.h100".to_string(), 17), ("gpus.a100".to_string(), 2)],
        "{plan}"
    );
}

/// `launch --host ENTRY.TAG` runs one host class of a mixed partition, as
/// the launch names it (and `fingerprint -i` shows it): only its trials,
/// only on its node; a part the partition does not have is refused (exit
/// 2) with the parts it has, and nothing runs.
#[test]
fn one_class_of_a_mixed_partition_is_probed_and_launched_by_its_name() {
    let cluster = Cluster::start(&NODES);
    let s = setup(&cluster, "part", "", KNOBS, "");
    std::fs::write(&s.study, quick_mixed_study("part")).expect("study");
    one_mixed_entry(&s);

    fingerprint_shows_the_parts(&cluster, &s);

    let out = launch_cmd(&cluster, &s, &["--host", "gpus.b200"])
        .output()
        .expect("launch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--host gpus.b200: `gpus` has no such part")
            && stderr.contains("gpus.h100, gpus.a100"),
        "{stderr}"
    );
    assert!(attempts(&s, "part").is_empty(), "nothing ran");
    let out = launch_cmd(&cluster, &s, &["--host", "gpux.h100"])
        .output()
        .expect("launch");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--host gpux.h100: no such host"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let launched = launch(&cluster, &s, &["--host", "gpus.h100"]);
    assert!(
        launched
            .stderr
            .contains("host gpus.h100 (slurm nodes gpu-a)")
            && !launched.stderr.contains("host gpus.a100"),
        "{}",
        launched.stderr
    );
    let (trials, lost) = one_terminal_each(&s, "part");
    assert!(trials > 0 && lost == 0, "{}", launched.stderr);
    for a in attempts(&s, "part").values().flatten() {
        assert_eq!(a["host"], "gpus.h100", "{a}");
        assert_eq!(node_of(a), "gpu-a", "{a}");
    }
    let report = report_json(&s);
    assert_eq!(report["classes"].as_array().map(Vec::len), Some(1));
    for b in class_of(&report, H100)["buckets"]
        .as_array()
        .expect("buckets")
    {
        assert_eq!(b["winner"]["label"], "tile=128", "{b}");
    }
}

/// Start a launch of the quick mixed study `name` (trials of 2 s) over one
/// entry on the whole partition, its stderr piped.
fn launch_slow_mixed(cluster: &Cluster, name: &str) -> (Setup, std::process::Child) {
    let s = setup(cluster, name, "", KNOBS, "");
    std::fs::write(
        &s.study,
        quick_mixed_study(name).replace(
            "  timeout: 30s\n",
            "  timeout: 30s\n  env: {FAKE_TRIAL_SLEEP: \"2\"}\n",
        ),
    )
    .expect("study");
    one_mixed_entry(&s);
    let child = launch_cmd(cluster, &s, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("launch");
    (s, child)
}

/// A mixed partition's class whose only node goes down is a host that
/// dropped: its running and waiting tasks are lost and queued again, the
/// launch says the host dropped, and when the node is back the host
/// rejoins and the class is tuned to the end; the other class never
/// stops.
#[test]
fn a_mixed_partitions_class_drops_and_rejoins_with_its_node() {
    let cluster = Cluster::start(&NODES);
    let (s, mut child) = launch_slow_mixed(&cluster, "churn");
    let t = Instant::now();
    assert!(
        wait_for(Duration::from_secs(120), || {
            cluster
                .run_ok("squeue", &["-h", "-r", "-t", "running", "-o", "%N|%i"])
                .lines()
                .any(|l| l.starts_with("gpu-a|") && !l.ends_with("_0"))
        }),
        "nothing ran on gpu-a"
    );
    cluster.node_down("gpu-a");
    // Long enough for the class's re-queued tasks to wait and be seen
    // waiting on a node that is down.
    std::thread::sleep(Duration::from_secs(6));
    cluster.node_resume("gpu-a");
    let (ok, stderr) = child_output(&mut child, Duration::from_secs(300));
    eprintln!("launch: {:?}", t.elapsed());
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("host `gpus.h100` dropped (slurm: every node of the class is down (gpu-a"),
        "{stderr}"
    );
    assert!(
        stderr.contains("host `gpus.h100` answers again"),
        "{stderr}"
    );
    let lost = one_terminal_each_but_failed(&s, "churn");
    let all = attempts(&s, "churn");
    assert!(lost >= 1, "{stderr}");
    for a in all.values().flatten() {
        if a["status"] == "lost" {
            assert_eq!(a["host"], "gpus.h100", "{a}");
            assert!(
                a["lost_reason"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("slurm: "),
                "{a}"
            );
        } else if a["host"] == "gpus.h100" {
            assert_eq!(node_of(a), "gpu-a", "{a}");
        } else {
            assert_eq!(node_of(a), "gpu-b", "{a}");
        }
    }
    let report = report_json(&s);
    for b in class_of(&report, H100)["buckets"]
        .as_array()
        .expect("buckets")
    {
        assert_eq!(b["winner"]["label"], "tile=128", "{b}");
    }
}

/// A class of two nodes pins its waiting tasks to both; when one goes down,
/// the tasks waiting on it are cancelled and submitted again for the other
/// (they never began: nothing is recorded for them), the class never
/// drops, and the launch ends with every trial done. Without that, they
/// would wait for the down node for good.
#[test]
fn tasks_waiting_on_a_node_that_goes_down_run_on_the_classs_other_node() {
    let cluster = Cluster::start(&[
        NODES[0],
        NODES[1],
        NodeSpec {
            name: "gpu-c",
            ..NODES[0]
        },
    ]);
    let (s, mut child) = launch_slow_mixed(&cluster, "pinned");
    let t = Instant::now();
    // A task pinned to gpu-c, waiting behind the one running there.
    assert!(
        wait_for(Duration::from_secs(120), || {
            cluster
                .run_ok("squeue", &["-h", "-r", "-t", "pending", "-o", "%n|%i"])
                .lines()
                .any(|l| l.starts_with("gpu-c|"))
        }),
        "no task waited on gpu-c"
    );
    cluster.node_down("gpu-c");
    let (ok, stderr) = child_output(&mut child, Duration::from_secs(300));
    eprintln!("launch: {:?}", t.elapsed());
    assert!(ok, "{stderr}");
    assert!(!stderr.contains("dropped"), "{stderr}");
    let lost = one_terminal_each_but_failed(&s, "pinned");
    // At most the task running on gpu-c when it went down is lost.
    assert!(lost <= 1, "{lost} lost: {stderr}");
    let on_c: Vec<Json> = attempts(&s, "pinned")
        .into_values()
        .flatten()
        .filter(|a| node_of(a) == "gpu-c")
        .collect();
    assert!(
        on_c.iter().filter(|a| a["status"] == "lost").count() <= 1,
        "{on_c:?}"
    );
    for a in attempts(&s, "pinned").values().flatten() {
        let want: &[&str] = match a["host"].as_str() {
            Some("gpus.h100") => &["gpu-a", "gpu-c"],
            _ => &["gpu-b"],
        };
        if a["status"] != "lost" {
            assert!(want.contains(&node_of(a).as_str()), "{a}");
        }
    }
    // Both of the class's nodes were given tasks, each in arrays of its own.
    let sbatch = calls(&s, "sbatch");
    for node in ["gpu-a", "gpu-b", "gpu-c"] {
        assert!(
            sbatch
                .iter()
                .any(|c| c.contains(&format!("--nodelist={node} "))),
            "no array pinned to {node}: {sbatch:?}"
        );
    }
}
