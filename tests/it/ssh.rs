//! The ssh transport against a fleet of real sshd hosts on loopback
//! (tests/it/support/sshd.rs), each with a FAKE `nvidia-smi` (two H100 hosts
//! with 2 GPUs, two A100 hosts with 1), running the FAKE trial program
//! tests/fixtures/fake-gpu-trial, whose per-model profile is known:
//! on H100 `tile=128` wins; on A100 `tile=256` runs out of memory and
//! nothing beats the baseline; `fast_math=true` changes the output
//! everywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use crate::support;
use crate::support::remote::{
    self, A100, H100, Launched, fake_gpu_trial, one_terminal_per_trial, report_json,
};
use crate::support::sshd::{Fleet, HostSpec};
use crate::support::{ledger_files, ran_to_the_end, sshd, wait_for};

const FOUR: [HostSpec; 4] = [
    HostSpec {
        name: "h100-a",
        gpu_name: H100,
        gpu_count: 2,
    },
    HostSpec {
        name: "h100-b",
        gpu_name: H100,
        gpu_count: 2,
    },
    HostSpec {
        name: "a100-a",
        gpu_name: A100,
        gpu_count: 1,
    },
    HostSpec {
        name: "a100-b",
        gpu_name: A100,
        gpu_count: 1,
    },
];

/// The study over `tile` × `fast_math` at two cells, with `extra` YAML
/// lines (e.g. `trial.env`) merged into the `trial:` mapping.
fn study_yaml(name: &str, trial_extra: &str) -> String {
    format!(
        r#"name: {name}
knobs:
{knobs}cells:
  n: [1, 2]
trial:
  command: "{trial} --n {{{{ n }}}}"
  timeout: 20s
{trial_extra}objective: {{metric: tp, better: higher}}
measurement: {{warmup: 0, repeats: 3, anchor_every: 0, confirm_repeats: 2}}
gate:
  outputs: [out.txt]
"#,
        trial = fake_gpu_trial(),
        knobs = remote::KNOBS,
    )
}

struct Dirs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::Builder::new()
        .prefix("tssh")
        .tempdir()
        .expect("temp dir");
    let root = tmp.path().to_path_buf();
    Dirs { _tmp: tmp, root }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn tunectl() -> Command {
    let mut c = Command::from_std(support::env::tunectl_command());
    c.env("NO_COLOR", "1");
    c
}

/// `tunectl launch` to completion, read through its JSON outcome.
fn launch(study: &Path, inventory: &Path, ledger: &Path, extra: &[&str]) -> Launched {
    let mut c = support::env::tunectl_command();
    c.env("NO_COLOR", "1")
        .args([
            "launch",
            "--yes",
            "--progress",
            "plain",
            "--no-cooldown",
            "--inventory",
        ])
        .arg(inventory)
        .arg("--ledger")
        .arg(ledger)
        .args(extra)
        .arg(study);
    remote::launch(c, Duration::from_secs(240))
}

/// What a class decides: what ships per bucket, and (cell, config,
/// rejection class) of every rejected config.
type ClassDecision = (Vec<String>, Vec<(String, String, String)>);

/// Per class label, what it decides.
fn decisions(report: &Json) -> BTreeMap<String, ClassDecision> {
    let mut out = BTreeMap::new();
    for class in report["classes"].as_array().expect("classes") {
        let label = class["label"].as_str().unwrap_or_default().to_string();
        let ships: Vec<String> = remote::buckets(class)
            .iter()
            .map(|b| {
                format!(
                    "{}: {}",
                    b["label"].as_str().unwrap_or_default(),
                    b["winner"]["label"].as_str().unwrap_or("baseline")
                )
            })
            .collect();
        out.insert(label, (ships, remote::rejected(class)));
    }
    out
}

fn setup(fleet: &Fleet, d: &Dirs, slots: u32, name: &str, trial_extra: &str) -> (PathBuf, PathBuf) {
    let study = d.root.join("study.yaml");
    write(&study, &study_yaml(name, trial_extra));
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(slots, ""));
    (study, inv)
}

/// `tunectl fingerprint --inventory <inv>`: per host class, its label and
/// the names of its hosts (in inventory order), in the JSON's order.
fn probed_classes(inv: &Path) -> Vec<(String, Vec<String>)> {
    let out = tunectl()
        .args(["fingerprint", "--format", "json", "--inventory"])
        .arg(inv)
        .timeout(Duration::from_secs(60))
        .output()
        .expect("fingerprint");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Json = serde_json::from_slice(&out.stdout).expect("JSON");
    doc["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .map(|c| {
            let hosts = c["hosts"]
                .as_array()
                .expect("hosts")
                .iter()
                .filter_map(|h| h["host"].as_str().map(str::to_string))
                .collect();
            (
                c["class_label"].as_str().unwrap_or_default().to_string(),
                hosts,
            )
        })
        .collect()
}

/// The class of `probed_classes` whose label names `model`.
fn hosts_of_model(classes: &[(String, Vec<String>)], model: &str) -> (String, Vec<String>) {
    classes
        .iter()
        .find(|(label, _)| label.contains(model))
        .cloned()
        .unwrap_or_else(|| panic!("no {model} class: {classes:?}"))
}

#[test]
fn fingerprints_group_the_fleet_into_host_classes() {
    let fleet = Fleet::start(&FOUR);
    let d = dirs();
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));
    let classes = probed_classes(&inv);
    assert_eq!(classes.len(), 2, "two host classes: {classes:?}");
    for (model, count, hosts) in [
        (H100, 2, ["h100-a", "h100-b"]),
        (A100, 1, ["a100-a", "a100-b"]),
    ] {
        let (label, names) = hosts_of_model(&classes, model);
        assert!(label.starts_with(&format!("{count}× ")), "{label}");
        assert_eq!(names, hosts);
    }
}

#[test]
fn a_study_over_the_fleet_picks_winners_per_host_class_on_pinned_gpus() {
    let fleet = Fleet::start(&FOUR);
    let d = dirs();
    let (study, inv) = setup(&fleet, &d, 2, "fleet", "");
    let ledger = d.root.join("ledger");
    let launched = launch(&study, &inv, &ledger, &["--store-logs"]);
    assert_eq!(launched.count("lost"), 0, "{}", launched.stderr);
    remote::assert_grid_profile(&report_json(&study, &ledger));

    // Slots pin their GPU where the host has one: slot i → device i.
    let all = ledger_files::attempts(&ledger, "fleet");
    let mut seen = std::collections::BTreeSet::new();
    for a in all.values().flatten() {
        let host = a["host"].as_str().unwrap_or_default();
        let slot = a["slot"].as_u64().unwrap_or(99);
        let dev = a["stdout_tail"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("dev="))
            .unwrap_or("missing")
            .to_string();
        let expected = match (host.starts_with("h100"), slot) {
            (_, 0) => "0",
            (true, 1) => "1",
            _ => "unset",
        };
        assert_eq!(dev, expected, "{host} slot {slot}");
        seen.insert((host.to_string(), slot));
    }
    assert_eq!(
        seen.len(),
        8,
        "every slot of every host ran trials: {seen:?}"
    );
    let (_, lost) = one_terminal_per_trial(&ledger, "fleet");
    assert_eq!(lost, 0);

    // Successful attempts leave no directory on the hosts; failed ones stay
    // for inspection.
    for h in &fleet.hosts {
        let work = h.root.join("home/.cache/tunectl/work/fleet");
        let left: Vec<_> = std::fs::read_dir(&work)
            .map(|r| r.filter_map(Result::ok).collect())
            .unwrap_or_default();
        if h.name.starts_with("h100") {
            assert!(left.is_empty(), "{}: {left:?}", h.name);
        }
    }
    // No private key material anywhere in the ledger.
    let key = std::fs::read_to_string(&fleet.client_key).expect("client key");
    let secret_line = key
        .lines()
        .find(|l| !l.starts_with("-----") && l.len() > 20)
        .expect("key body");
    for entry in walk(&ledger) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(!text.contains("PRIVATE KEY"), "{}", entry.display());
        assert!(!text.contains(secret_line), "{}", entry.display());
    }
}

/// One inventory entry for the whole fleet: a host pattern
/// (`127.X.Y.[a-b]`, one port) expands to the four loopback hosts, each
/// probed on its own. The launch decides each class on its own hosts as
/// four entries do, and `plan` then lists the expanded hosts by class.
#[test]
fn a_host_pattern_expands_to_the_fleet_and_each_host_gets_its_class() {
    let fleet = Fleet::start_on_one_port(&FOUR);
    let d = dirs();
    let study = d.root.join("study.yaml");
    write(&study, &study_yaml("pattern", ""));
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.pattern_inventory_yaml("gpu", 2));
    let ledger = d.root.join("ledger");
    let launched = launch(&study, &inv, &ledger, &[]);
    assert_eq!(launched.count("lost"), 0, "{}", launched.stderr);
    let report = report_json(&study, &ledger);
    remote::assert_grid_profile(&report);

    let out = tunectl()
        .args(["plan", "--dry-run", "--format", "json", "--inventory"])
        .arg(&inv)
        .arg("--ledger")
        .arg(&ledger)
        .arg(&study)
        .timeout(Duration::from_secs(60))
        .output()
        .expect("plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Json = serde_json::from_slice(&out.stdout).expect("plan JSON");
    let mut by_class: Vec<(String, Vec<String>)> = plan["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .map(|c| {
            let mut hosts: Vec<String> = c["hosts"]
                .as_array()
                .expect("hosts")
                .iter()
                .filter_map(|h| h.as_str().map(str::to_string))
                .collect();
            hosts.sort();
            (c["label"].as_str().unwrap_or_default().to_string(), hosts)
        })
        .collect();
    by_class.sort();
    let names = |idx: [usize; 2]| {
        let mut v: Vec<String> = idx
            .iter()
            .map(|&i| fleet.pattern_host_name("gpu", i))
            .collect();
        v.sort();
        v
    };
    assert_eq!(by_class.len(), 2, "{plan}");
    for (label, hosts) in &by_class {
        let want = if label.contains(H100) {
            names([0, 1])
        } else {
            assert!(label.contains(A100), "{label}");
            names([2, 3])
        };
        assert_eq!(hosts, &want, "{plan}");
    }

    // The same fleet from a hosts file (one address a line): probed host
    // by host, grouped into the same two classes.
    let list: String = (0..FOUR.len())
        .map(|i| format!("{}\n", fleet.hosts[i].addr))
        .collect();
    write(&d.root.join("fleet.txt"), &format!("# the fleet\n{list}"));
    let from_file = fleet
        .pattern_inventory_yaml("rack", 1)
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("host:") {
                "    hosts_file: fleet.txt".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let inv2 = d.root.join("from-file.yaml");
    write(&inv2, &from_file);
    let classes = probed_classes(&inv2);
    assert_eq!(classes.len(), 2, "{classes:?}");
    for (model, idx) in [(H100, [0, 1]), (A100, [2, 3])] {
        let want: Vec<String> = idx
            .iter()
            .map(|&i| format!("rack-{}", fleet.hosts[i].addr))
            .collect();
        assert_eq!(hosts_of_model(&classes, model).1, want);
    }

    // And from the `Host` aliases of an ssh client configuration: ssh reads
    // each alias's address, port, user, key and known hosts from the file
    // (`ssh -F`); the inventory says nothing but which aliases to take.
    let mut config = String::new();
    for (i, h) in fleet.hosts.iter().enumerate() {
        config.push_str(&format!("Host gpu-{i}\n  HostName {}\n", h.addr));
    }
    config.push_str(&format!(
        "Host gpu-*\n  Port {}\n  User {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  UserKnownHostsFile {}\nHost elsewhere\n  HostName 192.0.2.1\n",
        fleet.hosts[0].port,
        fleet.user,
        fleet.client_key.display(),
        fleet.known_hosts.display()
    ));
    write(&d.root.join("ssh_config"), &config);
    let inv3 = d.root.join("from-ssh-config.yaml");
    write(
        &inv3,
        "hosts:\n  - name: lab\n    transport: ssh\n    ssh_config: ssh_config\n    ssh_config_hosts: \"gpu-*\"\n    slots: 1\n",
    );
    let classes = probed_classes(&inv3);
    assert_eq!(classes.len(), 2, "{classes:?}");
    for (model, want) in [
        (H100, ["lab-gpu-0", "lab-gpu-1"]),
        (A100, ["lab-gpu-2", "lab-gpu-3"]),
    ] {
        assert_eq!(hosts_of_model(&classes, model).1, want);
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_timeout_kills_the_remote_process_group() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let pids = d.root.join("pids");
    let study = d.root.join("study.yaml");
    // The trial starts a child that would outlive it, then hangs.
    write(
        &study,
        &format!(
            r#"name: hang
knobs:
  mode: {{kind: categorical, values: [wait], default: wait}}
trial:
  command: "sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
  timeout: 2s
objective: {{metric: t, better: lower}}
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
"#,
            pids = pids.display()
        ),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(1, ""));
    let ledger = d.root.join("ledger");
    launch(&study, &inv, &ledger, &[]);
    let all = ledger_files::attempts(&ledger, "hang");
    let a = all.values().flatten().next().expect("one attempt");
    assert_eq!(a["status"], "failed");
    assert_eq!(a["failure"]["class"], "timeout", "{a}");
    let text = std::fs::read_to_string(&pids).expect("pid file");
    let listed: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    // Two pids a run: the baseline's first run and its re-run (a failed
    // baseline runs once more before the failure is believed).
    assert_eq!(listed.len(), 4, "{text}");
    for pid in listed {
        assert!(
            sshd::wait_process_gone(pid, Duration::from_secs(10)),
            "process {pid} of the timed-out trial still runs on the host"
        );
    }
}

#[test]
fn shell_metacharacters_in_knob_values_arrive_as_data() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let pwned = d.root.join("pwned");
    let p = pwned.display();
    let values = [
        "plain".to_string(),
        format!("; touch {p}-semicolon"),
        format!("$(touch {p}-subst)"),
        format!("`touch {p}-backtick`"),
        format!("it's' ; touch {p}-quote '"),
        format!("two\nlines; touch {p}-newline"),
        format!("a\"b\" && touch {p}-dquote"),
        "$HOME ${PATH} * ?".to_string(),
    ];
    let yaml_values: Vec<String> = values
        .iter()
        .map(|v| serde_json::to_string(v).expect("JSON string"))
        .collect();
    let study = d.root.join("study.yaml");
    write(
        &study,
        &format!(
            r#"name: quoting
knobs:
  v: {{kind: categorical, values: [{}], default: plain}}
trial:
  command: "printf '%s' {{{{ v }}}} > arg.txt; printf '%s' \"$TUNECTL_KNOB_V\" > env.txt; printf '{{\"metrics\":{{\"t\":1}}}}' > \"$TUNECTL_RESULT\""
  timeout: 20s
objective: {{metric: t, better: lower}}
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
gate:
  outputs: [arg.txt, env.txt]
"#,
            yaml_values.join(", ")
        ),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));
    let ledger = d.root.join("ledger");
    launch(&study, &inv, &ledger, &[]);
    let all = ledger_files::attempts(&ledger, "quoting");
    assert_eq!(all.len(), values.len());
    for a in all.values().flatten() {
        let v = a["config"]["v"].as_str().expect("value");
        let want = hex::encode(Sha256::digest(v.as_bytes()));
        assert_eq!(a["status"], "ok", "{a}");
        assert_eq!(a["outputs"]["arg.txt"], want.as_str(), "argument of {v:?}");
        assert_eq!(a["outputs"]["env.txt"], want.as_str(), "variable of {v:?}");
    }
    for suffix in [
        "semicolon",
        "subst",
        "backtick",
        "quote",
        "newline",
        "dquote",
    ] {
        let f = PathBuf::from(format!("{p}-{suffix}"));
        assert!(
            !f.exists(),
            "{} was created: a value ran as code",
            f.display()
        );
    }
}

/// The reported injection templates (tests/it/support/injection.rs) over
/// ssh: the command and its environment travel in the attempt's script,
/// and every value reaches the command as the expansion of a variable set
/// there: none runs, each template prints the literal value.
#[test]
fn the_reported_templates_run_no_value_over_ssh() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let values = support::injection::payloads(&d.root);
    let study = d.root.join("study.yaml");
    write(&study, &support::injection::study("reported", &values));
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));
    let ledger = d.root.join("ledger");
    launch(&study, &inv, &ledger, &[]);
    assert_eq!(
        support::injection::markers(&d.root),
        Vec::<String>::new(),
        "a value ran as code"
    );
    support::injection::check(&ledger_files::attempts(&ledger, "reported"), &values);
}

#[test]
fn a_host_key_mismatch_refuses_to_connect() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let (study, _) = setup(&fleet, &d, 1, "hostkey", "");
    let wrong = fleet.wrong_known_hosts();
    let inv = d.root.join("wrong.yaml");
    let text = fleet.inventory_yaml(1, "").replace(
        &fleet.known_hosts.to_string_lossy().to_string(),
        &wrong.to_string_lossy(),
    );
    assert!(text.contains(&*wrong.to_string_lossy()));
    write(&inv, &text);
    let ledger = d.root.join("ledger");
    let out = tunectl()
        .args(["launch", "--yes", "--progress", "plain", "--inventory"])
        .arg(&inv)
        .arg("--ledger")
        .arg(&ledger)
        .arg(&study)
        .timeout(Duration::from_secs(60))
        .output()
        .expect("launch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("h100-a"), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("host key"),
        "the error says why: {stderr}"
    );
    assert!(stderr.contains("nothing was run"), "{stderr}");
    assert!(ledger_files::attempts(&ledger, "hostkey").is_empty());
}

#[test]
fn a_host_down_at_start_is_reported_and_skipped() {
    let mut fleet = Fleet::start(&FOUR[..3]);
    let d = dirs();
    let (study, inv) = setup(&fleet, &d, 2, "downstart", "");
    fleet.kill_host(2);
    let ledger = d.root.join("ledger");
    let launched = launch(&study, &inv, &ledger, &[]);
    assert!(
        launched.stderr.contains("host `a100-a` does not answer"),
        "{}",
        launched.stderr
    );
    assert_eq!(
        launched.doc["summary"]["unreachable_hosts"],
        serde_json::json!(["a100-a"]),
        "{}",
        launched.doc
    );
    let report = report_json(&study, &ledger);
    let classes = report["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 1, "only the H100 class ran");
    assert!(
        classes[0]["label"]
            .as_str()
            .unwrap_or_default()
            .contains(H100)
    );
}

/// Run `launch` in the background; returns the child.
fn spawn_launch(study: &Path, inv: &Path, ledger: &Path, extra: &[&str]) -> std::process::Child {
    support::env::tunectl_command()
        .args([
            "launch",
            "--yes",
            "--progress",
            "plain",
            "--no-cooldown",
            "--inventory",
        ])
        .arg(inv)
        .arg("--ledger")
        .arg(ledger)
        .args(extra)
        .arg(study)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn launch")
}

fn finish(child: std::process::Child, limit: Duration) -> (bool, String) {
    let pid = child.id();
    let start = Instant::now();
    let mut child = child;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if start.elapsed() > limit {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("launch output");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (ran_to_the_end(out.status.code(), &stderr), stderr)
}

#[test]
fn killing_a_host_mid_study_loses_nothing_and_picks_the_same_winners() {
    let mut fleet = Fleet::start(&FOUR);
    let d = dirs();
    let env = "  env: {FAKE_TRIAL_SLEEP: \"0.3\"}\n";
    let (study, inv) = setup(&fleet, &d, 2, "churn", env);

    // Undisturbed.
    let calm = d.root.join("calm");
    launch(&study, &inv, &calm, &[]);
    let calm_report = report_json(&study, &calm);

    // The same study; one H100 host dies (listener and live sessions) a
    // few trials in, and comes back two seconds later.
    let ledger = d.root.join("ledger");
    let child = spawn_launch(&study, &inv, &ledger, &[]);
    assert!(
        wait_for(Duration::from_secs(60), || {
            ledger_files::attempts(&ledger, "churn")
                .values()
                .flatten()
                .filter(|a| a["host"] == "h100-a")
                .count()
                >= 3
        }),
        "h100-a never ran trials"
    );
    fleet.kill_host(0);
    std::thread::sleep(Duration::from_secs(2));
    fleet.restart_host(0);
    let (ok, stderr) = finish(child, Duration::from_secs(180));
    assert!(ok, "{stderr}");
    assert!(stderr.contains("host `h100-a` dropped"), "{stderr}");

    let (_, lost) = one_terminal_per_trial(&ledger, "churn");
    let all = ledger_files::attempts(&ledger, "churn");
    let lost_reasons: Vec<&str> = all
        .values()
        .flatten()
        .filter(|a| a["status"] == "lost")
        .filter_map(|a| a["lost_reason"].as_str())
        .collect();
    assert_eq!(lost_reasons.len(), lost);
    assert!(
        lost_reasons.iter().all(|r| r.contains("connection")),
        "{lost_reasons:?}"
    );
    let report = report_json(&study, &ledger);
    assert_eq!(decisions(&report), decisions(&calm_report));
}

#[test]
fn orphans_of_a_dropped_host_are_killed_when_it_rejoins() {
    let mut fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let pidfile = d.root.join("pids");
    let study = d.root.join("study.yaml");
    write(
        &study,
        &format!(
            r#"name: orphan
knobs:
  tile: {{kind: int, values: [64], default: 64}}
trial:
  command: "{trial}"
  timeout: 8s
  env: {{FAKE_TRIAL_SLEEP: "60", FAKE_TRIAL_PIDFILE: "{pids}"}}
objective: {{metric: tp, better: higher}}
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
"#,
            trial = fake_gpu_trial(),
            pids = pidfile.display()
        ),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(1, ""));
    let ledger = d.root.join("ledger");
    let child = spawn_launch(&study, &inv, &ledger, &[]);
    let trial_pid = || -> Option<u32> {
        let text = std::fs::read_to_string(&pidfile).ok()?;
        text.lines().next()?.trim().parse().ok()
    };
    assert!(
        wait_for(Duration::from_secs(30), || trial_pid().is_some()),
        "the trial never started"
    );
    // The host loses its sessions (the agent and the guard that would
    // kill the trial when the connection ends) but the trial, in a session
    // of its own, runs on: only the launcher can end it now, when the host
    // answers again.
    let trial = trial_pid().expect("the fake trial wrote its pid");
    let orphans = fleet.kill_host_but_session(0, trial);
    assert!(orphans.contains(&trial), "{trial} not in {orphans:?}");
    assert!(
        orphans.iter().all(|p| sshd::process_alive(*p)),
        "{orphans:?}"
    );
    std::thread::sleep(Duration::from_secs(1));
    fleet.restart_host(0);
    let (ok, stderr) = finish(child, Duration::from_secs(60));
    assert!(ok, "{stderr}");
    assert!(stderr.contains("rejoins"), "{stderr}");
    for p in &orphans {
        assert!(
            sshd::wait_process_gone(*p, Duration::from_secs(10)),
            "process {p} of the attempt lost with the host still runs"
        );
    }
    // Lost once with the host, then run again there: a timeout this time
    // (and, the baseline failing, its re-run: another trial, timed out too).
    let all = ledger_files::attempts(&ledger, "orphan");
    let list = all
        .values()
        .find(|l| l.iter().any(|a| a["status"] == "lost"))
        .expect("the trial lost with the host");
    let statuses: Vec<&str> = list.iter().filter_map(|a| a["status"].as_str()).collect();
    assert_eq!(statuses.iter().filter(|s| **s != "lost").count(), 1);
}

#[test]
fn a_class_whose_every_host_is_down_waits_then_is_left_for_later() {
    let mut fleet = Fleet::start(&[FOUR[0], FOUR[2]]);
    let d = dirs();
    let env = "  env: {FAKE_TRIAL_SLEEP: \"0.3\"}\n";
    let (study, inv) = setup(&fleet, &d, 1, "abandon", env);
    let ledger = d.root.join("ledger");
    let child = spawn_launch(&study, &inv, &ledger, &["--host-timeout", "2s"]);
    assert!(
        wait_for(Duration::from_secs(60), || {
            ledger_files::attempts(&ledger, "abandon")
                .values()
                .flatten()
                .any(|a| a["host"] == "a100-a")
        }),
        "a100-a never ran trials"
    );
    fleet.kill_host(1);
    let (ok, stderr) = finish(child, Duration::from_secs(180));
    assert!(!ok, "an incomplete launch fails: {stderr}");
    assert!(stderr.contains("every host of class"), "{stderr}");
    assert!(stderr.contains("left for a later launch"), "{stderr}");
    // The H100 class finished; the A100 class resumes when its host is back.
    fleet.restart_host(1);
    let launched = launch(&study, &inv, &ledger, &[]);
    assert!(launched.count("already_in_ledger") > 0, "{}", launched.doc);
    let (_, _) = one_terminal_per_trial(&ledger, "abandon");
    let report = report_json(&study, &ledger);
    assert_eq!(report["classes"].as_array().map(Vec::len), Some(2));
}

#[test]
fn a_host_back_with_another_driver_is_tuned_as_a_new_class() {
    let mut fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let env = "  env: {FAKE_TRIAL_SLEEP: \"0.2\"}\n";
    let (study, inv) = setup(&fleet, &d, 1, "upgrade", env);
    let ledger = d.root.join("ledger");
    let child = spawn_launch(&study, &inv, &ledger, &[]);
    assert!(
        wait_for(Duration::from_secs(60), || {
            ledger_files::attempts(&ledger, "upgrade")
                .values()
                .flatten()
                .count()
                >= 3
        }),
        "no trial ran"
    );
    // A driver upgrade: the host reboots with another driver.
    let smi = fleet.hosts[0].root.join("bin/nvidia-smi");
    let text = std::fs::read_to_string(&smi).expect("fake nvidia-smi wrapper");
    let upgraded = text.replacen(
        "\nexec ",
        "\nFAKE_DRIVER=560.35.03; export FAKE_DRIVER\nexec ",
        1,
    );
    assert_ne!(text, upgraded, "the wrapper execs the fake");
    fleet.kill_host(0);
    write(&smi, &upgraded);
    fleet.restart_host(0);
    let (ok, stderr) = finish(child, Duration::from_secs(180));
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("came back with another fingerprint (driver: 550.54.15 → 560.35.03)"),
        "{stderr}"
    );
    assert!(stderr.contains("probing again"), "{stderr}");
    // The old class keeps what it measured; the new class is tuned in full.
    let report = report_json(&study, &ledger);
    let classes = report["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 2, "{report}");
    let new = classes
        .iter()
        .find(|c| {
            c["label"]
                .as_str()
                .is_some_and(|l| l.contains("driver 560"))
        })
        .expect("the new class");
    for b in new["buckets"].as_array().expect("buckets") {
        assert_eq!(b["winner"]["label"], "tile=128", "{new:#}");
    }
    // No trial ran twice; every trial of the new class finished (the old
    // class keeps its lost ones: it has no host any more).
    let new_id = new["host_class"].as_str().expect("class id");
    for (key, list) in ledger_files::attempts(&ledger, "upgrade") {
        let terminal = list.iter().filter(|a| a["status"] != "lost").count();
        assert!(terminal <= 1, "{key}: {list:?}");
        if list[0]["host_class"] == new_id && list[0]["role"] != "anchor" {
            assert_eq!(terminal, 1, "{key}: {list:?}");
        }
    }
}

#[test]
fn ctrl_c_kills_the_remote_trials_and_records_them_lost() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let pidfile = d.root.join("pids");
    let study = d.root.join("study.yaml");
    write(
        &study,
        &format!(
            r#"name: interrupt
knobs:
  tile: {{kind: int, values: [64, 128], default: 64}}
trial:
  command: "{trial}"
  timeout: 60s
  env: {{FAKE_TRIAL_SLEEP: "60", FAKE_TRIAL_PIDFILE: "{pids}"}}
objective: {{metric: tp, better: higher}}
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
"#,
            trial = fake_gpu_trial(),
            pids = pidfile.display()
        ),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));
    let ledger = d.root.join("ledger");
    let child = spawn_launch(&study, &inv, &ledger, &[]);
    assert!(
        wait_for(Duration::from_secs(30), || pidfile.exists()),
        "the trial never started"
    );
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().expect("launch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let text = std::fs::read_to_string(&pidfile).expect("pids");
    for pid in text.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
        assert!(
            sshd::wait_process_gone(pid, Duration::from_secs(10)),
            "trial process {pid} outlived Ctrl-C on the host"
        );
    }
    let all = ledger_files::attempts(&ledger, "interrupt");
    assert!(!all.is_empty());
    for a in all.values().flatten() {
        assert_eq!(a["status"], "lost", "{a}");
    }
}

/// A launcher killed with SIGKILL leaves no trial running on the host: the
/// remote wrapper sees its session's input end and kills the run's group,
/// long before the trial's timeout (and its `sleep 300`) would.
#[test]
fn a_remote_trial_dies_with_its_launcher() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let pids = d.root.join("pids");
    let study = d.root.join("study.yaml");
    write(
        &study,
        &format!(
            r#"name: orphan
knobs:
  mode: {{kind: categorical, values: [wait], default: wait}}
trial:
  command: "sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
  timeout: 60s
objective: {{metric: t, better: lower}}
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
"#,
            pids = pids.display()
        ),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(1, ""));
    let ledger = d.root.join("ledger");
    let mut child = spawn_launch(&study, &inv, &ledger, &[]);
    let listed = || -> Vec<u32> {
        std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let started = wait_for(Duration::from_secs(30), || listed().len() == 2);
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    assert!(started, "the trial never started");
    let mut survivors = Vec::new();
    for pid in listed() {
        if !sshd::wait_process_gone(pid, Duration::from_secs(10)) {
            survivors.push(pid);
            // SAFETY: kill(2) on a process this test's trial started.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
    }
    assert!(
        survivors.is_empty(),
        "trial processes {survivors:?} outlived their launcher on the host"
    );
}

#[test]
fn a_hyperband_study_over_the_fleet_searches_each_host_class_on_its_own() {
    let fleet = Fleet::start(&FOUR);
    let d = dirs();
    let study = d.root.join("study.yaml");
    // The same fake, searched with Hyperband: budgets 1, 3, 9 (the fake
    // ignores them; the search still runs every rung over ssh).
    write(
        &study,
        &study_yaml("fleet-hb", "").replace(
            "measurement:",
            "fidelity: {unit: samples, min_budget: 1, max_budget: 9, eta: 3}\nstrategy: {kind: hyperband, seed: 3, finalists: 2}\nmeasurement:",
        ),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));
    let ledger = d.root.join("ledger");
    let launched = launch(&study, &inv, &ledger, &[]);
    assert_eq!(launched.count("lost"), 0, "{}", launched.stderr);
    remote::assert_search_profile(&report_json(&study, &ledger));
    let id = "fleet-hb";
    one_terminal_per_trial(&ledger, id);
}

/// On an ssh host the wrapper reads the result and hashes the outputs: a
/// FIFO there used to hang the attempt, a symlink to /dev/zero to be
/// hashed without end. The host refuses what is not a regular file or is
/// over the size limit, and says why.
#[test]
fn remote_result_and_outputs_must_be_regular_and_bounded() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    // The FAKE trial program's modes of the same names (base: none of it).
    support::fake::write(&d.root);
    let study = d.root.join("study.yaml");
    write(
        &study,
        r#"name: remote-files
knobs:
  v: {kind: categorical, values: [base, fifo-result, zero-result, big-result, fifo-output, zero-output, link-output], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ v }}"
  timeout: 20s
objective: {metric: throughput, better: higher}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
gate: {outputs: [out.txt]}
"#,
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));
    let ledger = d.root.join("ledger");
    launch(&study, &inv, &ledger, &[]);
    let by_v: BTreeMap<String, Json> = ledger_files::attempts(&ledger, "remote-files")
        .into_values()
        .flatten()
        .map(|a| (a["config"]["v"].as_str().unwrap_or_default().to_string(), a))
        .collect();
    for (v, detail) in [
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
    ] {
        let a = &by_v[v];
        assert_eq!(a["status"], "failed", "{v}: {a}");
        assert_eq!(a["failure"]["class"], "no_result", "{v}: {a}");
        assert_eq!(a["failure"]["detail"], detail, "{v}: {a}");
    }
    for v in ["base", "link-output"] {
        assert_eq!(by_v[v]["status"], "ok", "{v}: {}", by_v[v]);
    }
    assert_eq!(
        by_v["base"]["outputs"]["out.txt"],
        by_v["link-output"]["outputs"]["out.txt"]
    );
}

/// `result:` over ssh: the counted run's whole stdout (longer than the
/// kept tail, its number at the start) and a CSV file the trial wrote come
/// back from the host and are read by the launcher.
#[test]
fn result_sources_come_back_from_an_ssh_host() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let bench = d.root.join("bench.sh");
    write(
        &bench,
        "echo \"tok/s: $((100 * $1))\"\ni=0\nwhile [ $i -lt 3000 ]; do echo 'filler line'; i=$((i + 1)); done\n\
         printf 'step,ms\\n1,%s\\n2,%s\\n' \"$((20 / $1))\" \"$((22 / $1))\" > lat.csv\n",
    );
    let study = d.root.join("study.yaml");
    write(
        &study,
        &format!(
            r#"name: extracted
knobs:
  k: {{kind: int, values: [1, 2], default: 1}}
trial:
  command: "sh {bench} {{{{ k }}}}"
  timeout: 20s
objective: {{metric: tps, better: higher}}
metrics: [{{name: ms, better: lower}}]
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
result:
  tps: {{stdout: 'tok/s: ([0-9]+)'}}
  ms: {{file: lat.csv, column: ms}}
"#,
            bench = bench.display()
        ),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(1, ""));
    let ledger = d.root.join("ledger");
    launch(&study, &inv, &ledger, &[]);
    let all = ledger_files::attempts(&ledger, "extracted");
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

/// The persistent agent's shell killed on the host in the middle of a
/// trial (by the trial itself, on the study's first run: it kills its
/// ancestors that are the agent, `sh -s tunectl-agent`, and runs on): the
/// attempt is recorded lost and runs again, the host stays in the launch
/// (its next trials start a new agent), and the study decides what an
/// undisturbed launch decides.
#[test]
fn the_agent_dying_mid_trial_loses_nothing() {
    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let mark = d.root.join("killed");
    let killer = d.root.join("kill-my-agent");
    write(
        &killer,
        &format!(
            "#!/bin/sh\n\
             # First run only: kill the agent that started this run.\n\
             if mkdir {mark} 2>/dev/null; then\n\
             \x20 pids=\n\
             \x20 p=$PPID\n\
             \x20 while [ \"$p\" -gt 1 ]; do\n\
             \x20   grep -q tunectl-agent /proc/$p/cmdline 2>/dev/null && pids=\"$pids $p\"\n\
             \x20   p=$(cut -d' ' -f4 /proc/$p/stat)\n\
             \x20 done\n\
             \x20 echo $pids >{mark}/pids\n\
             \x20 kill -s KILL $pids\n\
             fi\n\
             exec {trial} \"$@\"\n",
            mark = mark.display(),
            trial = fake_gpu_trial(),
        ),
    );
    std::fs::set_permissions(&killer, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let env = "  env: {FAKE_TRIAL_SLEEP: \"0.2\"}\n";
    let calm_study = d.root.join("calm.yaml");
    write(&calm_study, &study_yaml("agentdeath", env));
    let study = d.root.join("study.yaml");
    write(
        &study,
        &study_yaml("agentdeath", env).replace(&fake_gpu_trial(), &killer.display().to_string()),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));

    let calm = d.root.join("calm");
    launch(&calm_study, &inv, &calm, &[]);
    let ledger = d.root.join("ledger");
    let stderr = launch(&study, &inv, &ledger, &[]).stderr;

    let killed: Vec<u32> = std::fs::read_to_string(mark.join("pids"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(
        killed.len(),
        2,
        "the agent's shell and its attempt's subshell were the run's ancestors: {killed:?}"
    );
    for p in &killed {
        assert!(sshd::wait_process_gone(*p, Duration::from_secs(5)), "{p}");
    }
    assert!(!stderr.contains("dropped"), "the host stays up: {stderr}");
    let (_, lost) = one_terminal_per_trial(&ledger, "agentdeath");
    assert_eq!(lost, 1, "exactly the attempt whose agent died is lost");
    let reasons: Vec<String> = ledger_files::attempts(&ledger, "agentdeath")
        .values()
        .flatten()
        .filter(|a| a["status"] == "lost")
        .filter_map(|a| a["lost_reason"].as_str().map(str::to_string))
        .collect();
    assert!(
        reasons.iter().all(|r| r.contains("agent ended")),
        "{reasons:?}"
    );
    assert_eq!(
        decisions(&report_json(&study, &ledger)),
        decisions(&report_json(&calm_study, &calm))
    );
}

/// Of two classes, the one whose trials are done first says so while the
/// other still runs (its hosts take nothing more from the launch), once;
/// the last class to finish says nothing (the launch ends). Here the H100
/// hosts' trials take 0.3 s more (a wrapper around the FAKE trial program
/// sleeps on H100), so the A100 class is done first.
#[test]
fn a_class_that_is_done_first_says_so_while_the_other_runs() {
    let fleet = Fleet::start(&FOUR);
    let d = dirs();
    let slow = d.root.join("slow-on-h100");
    write(
        &slow,
        &format!(
            "#!/bin/sh
             # FAKE: the H100 hosts' trials take 0.3 s more.
             case $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) in
             \x20 *H100*) sleep 0.3 ;;
             esac
             exec {trial} \"$@\"\n",
            trial = fake_gpu_trial(),
        ),
    );
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let study = d.root.join("study.yaml");
    write(
        &study,
        &study_yaml("classdone", "").replace(&fake_gpu_trial(), &slow.display().to_string()),
    );
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));
    let stderr = launch(&study, &inv, &d.root.join("ledger"), &[]).stderr;
    let done: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(" is done: "))
        .collect();
    assert_eq!(done.len(), 1, "one class done before the other:\n{stderr}");
    assert!(
        done[0].contains("A100")
            && done[0].contains("2 hosts (a100-a, a100-b)")
            && done[0].contains("while 1 other class still runs"),
        "{}",
        done[0]
    );
}

/// A persistent agent that dies while it waits idle between attempts
/// (killed on the host) is not given the next attempt: the transport sees
/// that its shell ended, closes it and starts another, and the attempt
/// runs (given to the dead agent, it would be lost). Driven through the
/// ssh transport itself over a real sshd, one attempt at a time, so that
/// the agent is idle, and known to be, when it is killed.
#[test]
fn an_idle_agent_that_died_is_replaced_before_it_is_given_an_attempt() {
    use tokio_util::sync::CancellationToken;
    use tunectl::spec::{Inventory, Transport as HostTransport};
    use tunectl::transport::ssh::SshTransport;
    use tunectl::transport::{AttemptSpec, Ended, Transport};

    let fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let inv_path = d.root.join("inventory.yaml");
    let text = fleet.inventory_yaml(1, "");
    write(&inv_path, &text);
    let inv = Inventory::from_text(&inv_path, &text).expect("inventory");
    let HostTransport::Ssh(cfg) = &inv.hosts[0].transport else {
        panic!("an ssh host: {text}");
    };
    let control = d.root.join("ctl");
    std::fs::create_dir_all(&control).expect("control dir");
    let ssh = SshTransport::new(&inv.hosts[0].name, cfg.clone(), control, false);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Connects, as a launch does before its first attempt.
    rt.block_on(ssh.probe(&BTreeMap::new())).expect("probe");
    let attempt = |n: u32| {
        let (key, id) = (format!("trial-{n}"), format!("attempt-{n}"));
        let dir = ssh.trial_dir("idle-agent", &key, &id);
        let result = format!("{dir}/result.json");
        let spec = AttemptSpec {
            study_id: "idle-agent".into(),
            trial_key: key,
            attempt_id: id,
            command: format!("printf '{{\"metrics\": {{\"t\": {n}}}}}' > \"$TUNECTL_RESULT\""),
            env: vec![("TUNECTL_RESULT".into(), result.clone())],
            timeout: Duration::from_secs(30),
            warmup: 0,
            outputs: Vec::new(),
            tolerance_files: Vec::new(),
            result_files: Vec::new(),
            streams: Vec::new(),
            slot: 0,
            trial_dir: dir,
            result_path: result,
            keep_logs: false,
            checkpoint: None,
        };
        let out = rt.block_on(ssh.run_attempt(&spec, &CancellationToken::new()));
        assert!(
            matches!(out.ended, Ended::Ran),
            "attempt {n}: {:?}",
            out.ended
        );
        let result =
            String::from_utf8_lossy(out.result.as_deref().unwrap_or_default()).into_owned();
        assert!(
            result.contains(&format!("\"t\": {n}")),
            "attempt {n}: {result}"
        );
    };

    // The agent shell alone, once the subshell it forked for the attempt
    // has ended (on a busy machine that can come a little after the
    // attempt's outcome).
    let one_agent = || {
        let mut pids = fleet.agent_pids(0);
        wait_for(Duration::from_secs(10), || {
            pids = fleet.agent_pids(0);
            pids.len() == 1
        });
        pids
    };
    attempt(1);
    // Its agent now waits for the next attempt: the only one on the host.
    let idle = one_agent();
    assert_eq!(idle.len(), 1, "one idle agent shell: {idle:?}");
    let status = std::process::Command::new("kill")
        .args(["-s", "KILL", &idle[0].to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    assert!(sshd::wait_process_gone(idle[0], Duration::from_secs(5)));

    attempt(2);
    let now = one_agent();
    assert_eq!(now.len(), 1, "a new agent took the attempt: {now:?}");
    assert_ne!(now, idle, "not the dead one");
    attempt(3);
    assert_eq!(one_agent(), now, "and it is reused while it lives");
    rt.block_on(ssh.close());
}

/// Without a persistent agent, every attempt runs on a session of its own,
/// as before the agent existed: switched off in the inventory
/// (`agent: false`), or on a host whose shell will not run it (here sshd
/// forces a command that refuses the agent's); either way the study runs
/// to its end.
#[test]
fn without_an_agent_each_attempt_gets_a_session_of_its_own() {
    let mut fleet = Fleet::start(&FOUR[..1]);
    let d = dirs();
    let env = "  env: {FAKE_TRIAL_SLEEP: \"0.05\"}\n";
    let study = d.root.join("study.yaml");
    write(&study, &study_yaml("noagent", env));
    let run = |inv: &Path, ledger: &Path| -> String {
        let out = tunectl()
            .env("TUNECTL_LOG", "tunectl=debug")
            .args([
                "launch",
                "--yes",
                "--progress",
                "plain",
                "--no-cooldown",
                "--inventory",
            ])
            .arg(inv)
            .arg("--ledger")
            .arg(ledger)
            .arg(&study)
            .timeout(Duration::from_secs(240))
            .output()
            .expect("run tunectl launch");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(ran_to_the_end(out.status.code(), &stderr), "{stderr}");
        let (n, lost) = one_terminal_per_trial(ledger, "noagent");
        assert!(n > 0);
        assert_eq!(lost, 0, "{stderr}");
        stderr
    };

    // The default: one agent per slot.
    let inv = d.root.join("inventory.yaml");
    write(&inv, &fleet.inventory_yaml(2, ""));
    let stderr = run(&inv, &d.root.join("default"));
    assert!(stderr.contains("started a persistent agent"), "{stderr}");

    // Switched off.
    let off = d.root.join("off.yaml");
    write(&off, &fleet.inventory_yaml(2, "agent: false"));
    let stderr = run(&off, &d.root.join("off"));
    assert!(!stderr.contains("persistent agent"), "{stderr}");

    // A host that refuses it: the fallback is taken, and said at debug level.
    let refuse = fleet.hosts[0].root.join("refuse-agent");
    write(
        &refuse,
        "#!/bin/sh\n\
         # A host that will not run tunectl's persistent agent.\n\
         case $SSH_ORIGINAL_COMMAND in\n\
         \x20 *tunectl-agent*) echo 'this host runs no agents' >&2; exit 1 ;;\n\
         esac\n\
         exec /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"\n",
    );
    std::fs::set_permissions(&refuse, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let config = fleet.hosts[0].root.join("sshd_config");
    let text = std::fs::read_to_string(&config).expect("sshd_config");
    write(
        &config,
        &format!("{text}ForceCommand {}\n", refuse.display()),
    );
    fleet.kill_host(0);
    fleet.restart_host(0);
    let stderr = run(&inv, &d.root.join("refused"));
    assert!(
        stderr.contains("no persistent agent") && stderr.contains("this host runs no agents"),
        "{stderr}"
    );
    assert!(!stderr.contains("started a persistent agent"), "{stderr}");
}
