//! Rungs that continue from a checkpoint (`fidelity.continuation`) and
//! rungs stopped early from their progress (`fidelity.prune`), end to end
//! on the local host, with the CKPT trial below: a trial that keeps its
//! work in `$TUNECTL_CHECKPOINT_DIR` and checks what tunectl hands it.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value as Json;

use crate::support;
use crate::support::env::Env;
use crate::support::ledger_files;
use crate::support::slurm::{Cluster, NodeSpec};
use crate::support::sshd::{Fleet, HostSpec};

/// What the CKPT and TPE trials start with: knobs, budget, and `tp_at K`,
/// the throughput at budget K.
const TRIAL_PRELUDE: &str = r#"#!/bin/sh
set -eu
here=$(dirname "$0")
a=$TUNECTL_KNOB_A
b=$TUNECTL_KNOB_B
c=$TUNECTL_KNOB_C
B=${TUNECTL_BUDGET:-27}
tp_at() {
    t=$((1000 - 10 * ((a - 3) * (a - 3) + (b - 1) * (b - 1) + (c - 2) * (c - 2))))
    if [ "$1" -lt 27 ]; then t=$((t + ((7 * a + 3 * b + c) % 5) * 60 / $1)); fi
    echo "$t"
}
"#;

/// [`TRIAL_PRELUDE`] and the rest of a trial.
fn trial_script(rest: &str) -> String {
    format!("{TRIAL_PRELUDE}{rest}")
}

/// The CKPT trial, `ckpt-trial.sh` in the study directory ([`TRIAL_PRELUDE`]
/// and this). Knobs a, b, c (ints 0..4); budget `B` = `$TUNECTL_BUDGET`
/// (27 when empty); throughput `1000 - 10 × ((a-3)² + (b-1)² + (c-2)²)`,
/// plus `((7a + 3b + c) mod 5) × 60 / B` below 27 (the search profile of
/// tests/it/support/fake.rs).
///
/// A rung (`$TUNECTL_ROLE` rung) starts from `F` =
/// `$TUNECTL_RESUME_FROM_BUDGET` (0 when unset) and:
/// - exits 9 when its checkpoint directory is missing, holds anything when
///   `F` is 0 (unless it is the attempt's own directory, as on an SSH
///   host), or holds a state at another budget than `F` (`at`): a wrong
///   resume fails the rung, and the tests look for failed rungs;
/// - appends `KNOBS F B PHASE` to `work.log` beside the script (every run,
///   kept or not), and `F B` to `work.log` in the checkpoint directory (the
///   work it did, in the state it leaves);
/// - with `CK_SLEEP=S` (or `S` in `ck-sleep` beside the script), the first
///   continued measured run (`F` > 0) writes
///   `KNOBS F B` to `sleeping` beside the script and sleeps S seconds after
///   it logged its work, before it records `at` (so an interruption leaves
///   half a rung);
/// - with `$TUNECTL_PROGRESS_FILE` set, appends `k value-at-k` for k in
///   `F+1..B`, sleeping `CK_STEP` (default 0.02) seconds after each;
/// - writes `B` to `at` and `$TUNECTL_KNOBS` to `knobs` in the directory.
///
/// Every run writes `out.txt` (the same for every config) and the result.
const CKPT_TRIAL: &str = r#"role=${TUNECTL_ROLE:-sweep}
phase=${TUNECTL_PHASE:-measure}
if [ "$role" = rung ]; then
    ck=${TUNECTL_CHECKPOINT_DIR:?no checkpoint directory}
    from=${TUNECTL_RESUME_FROM_BUDGET:-0}
    [ -d "$ck" ] || { echo "ckpt: $ck is missing" >&2; exit 9; }
    if [ "$from" = 0 ]; then
        # Off the local host the directory is the attempt's own, which a
        # warm-up may have written to; on it, a fresh rung's is empty.
        if [ "$ck" != "${TUNECTL_TRIAL_DIR:-}" ] && [ -n "$(ls -A "$ck")" ]; then
            echo "ckpt: a fresh rung got a used directory" >&2; exit 9
        fi
    else
        at=$(cat "$ck/at" 2>/dev/null || echo none)
        if [ "$at" != "$from" ]; then echo "ckpt: resume from $from but the state is at $at" >&2; exit 9; fi
    fi
    echo "$TUNECTL_KNOBS $from $B $phase" >> "$here/work.log"
    echo "$from $B" >> "$ck/work.log"
    # (On an SSH host the launcher's environment does not reach the trial.)
    [ -n "${CK_SLEEP:-}" ] || CK_SLEEP=$(cat "$here/ck-sleep" 2>/dev/null || true)
    if [ -n "${CK_SLEEP:-}" ] && [ "$from" != 0 ] && [ "$phase" = measure ] \
        && mkdir "$here/slept" 2>/dev/null; then
        echo "$TUNECTL_KNOBS $from $B" > "$here/sleeping.tmp"
        mv "$here/sleeping.tmp" "$here/sleeping"
        sleep "$CK_SLEEP"
    fi
    if [ -n "${TUNECTL_PROGRESS_FILE:-}" ]; then
        k=$((from + 1))
        while [ "$k" -le "$B" ]; do
            echo "$k $(tp_at "$k")" >> "$TUNECTL_PROGRESS_FILE"
            sleep "${CK_STEP:-0.02}"
            k=$((k + 1))
        done
    fi
    echo "$B" > "$ck/at"
    echo "$TUNECTL_KNOBS" > "$ck/knobs"
fi
echo "ok" > out.txt
printf '{"metrics": {"throughput": [%s]}}\n' "$(tp_at "$B")" > "$TUNECTL_RESULT"
"#;

const KNOBS: &str = r#"knobs:
  a: {kind: int, values: [0, 1, 2, 3, 4], default: 0}
  b: {kind: int, values: [0, 1, 2, 3, 4], default: 0}
  c: {kind: int, values: [0, 1, 2, 3, 4], default: 0}
"#;

/// A hyperband study of the CKPT trial (budgets 1..27, eta 3) whose
/// `fidelity:` adds `extra` (`continuation: true`, `prune: true`).
fn study(name: &str, extra: &str) -> String {
    format!(
        r#"name: {name}
{KNOBS}trial:
  command: "sh {{{{ study_dir }}}}/ckpt-trial.sh"
  timeout: 30s
objective: {{metric: throughput, unit: ops/s, better: higher}}
fidelity: {{unit: steps, min_budget: 1, max_budget: 27, eta: 3, {extra}}}
measurement: {{warmup: 1, repeats: 3, anchor_every: 0, confirm_repeats: 3}}
gate: {{outputs: [out.txt]}}
strategy: {{kind: hyperband, seed: 4, finalists: 2, parallel: 2}}
"#
    )
}

fn ckpt_env(name: &str, extra: &str) -> Env {
    let env = Env::new(&study(name, extra));
    std::fs::write(
        env.study_dir().join("ckpt-trial.sh"),
        trial_script(CKPT_TRIAL),
    )
    .expect("write ckpt trial");
    env.write(
        "inventory.yaml",
        "hosts:\n  - name: local\n    transport: local\n    slots: 2\n",
    );
    env
}

fn launch_cmd(env: &Env, ledger: impl AsRef<OsStr>, work: &str) -> Command {
    let mut cmd = env.tunectl();
    cmd.arg("launch")
        .arg(env.study())
        .arg("--inventory")
        .arg(env.path().join("inventory.yaml"))
        .arg("--ledger")
        .arg(ledger)
        .arg("--workdir")
        .arg(env.path().join(work))
        .args(["--progress", "quiet", "--format", "json"]);
    cmd
}

/// A launch that must run to its end; its stderr.
fn launch(env: &Env, ledger: impl AsRef<OsStr>, work: &str) -> String {
    let out = env.run(launch_cmd(env, ledger, work));
    assert!(out.ran_to_the_end(), "launch failed:\n{}", out.text());
    out.stderr
}

fn study_id(ledger: &Path) -> String {
    std::fs::read_dir(ledger)
        .expect("ledger dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| !n.starts_with('.') && ledger.join(n).join("study.json").is_file())
        .expect("a study in the ledger")
}

type Abc = (i64, i64, i64);

fn abc(config: &Json) -> Abc {
    let k = |n: &str| {
        config[n]
            .as_i64()
            .unwrap_or_else(|| panic!("{n} in {config}"))
    };
    (k("a"), k("b"), k("c"))
}

fn all_attempts(ledger: &Path) -> Vec<Json> {
    ledger_files::attempts(ledger, &study_id(ledger))
        .into_values()
        .flatten()
        .collect()
}

/// The rung trials of a ledger that ended (config, budget, status).
fn rung_outcomes(ledger: &Path) -> BTreeSet<(Abc, u64, String)> {
    all_attempts(ledger)
        .iter()
        .filter(|a| a["role"] == "rung" && a["status"] != "lost")
        .map(|a| {
            (
                abc(&a["config"]),
                a["fidelity"].as_f64().unwrap_or(0.0) as u64,
                a["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// No trial has more than one terminal attempt, and no rung failed (a
/// wrong resume fails the CKPT trial).
fn assert_clean(ledger: &Path) {
    let mut terminal: BTreeMap<String, usize> = BTreeMap::new();
    for a in all_attempts(ledger) {
        let status = a["status"].as_str().unwrap_or("");
        assert_ne!(
            status,
            "failed",
            "a trial failed: {}",
            a["stderr_tail"].as_str().unwrap_or("")
        );
        if status != "lost" {
            *terminal
                .entry(a["trial_key"].as_str().unwrap_or("").to_string())
                .or_insert(0) += 1;
        }
    }
    assert!(terminal.values().all(|n| *n == 1), "{terminal:?}");
}

/// Each config's committed checkpoint under `work`: the (from, to) pieces
/// of work in its state, by config.
fn states(env: &Env, work: &str, ledger: &Path) -> BTreeMap<Abc, Vec<(u64, u64)>> {
    states_under(&env.path().join(work), ledger)
}

/// [`states`] under a work directory.
fn states_under(work: &Path, ledger: &Path) -> BTreeMap<Abc, Vec<(u64, u64)>> {
    let root = work.join(study_id(ledger)).join("checkpoints");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let state = entry.path().join("state");
        let Ok(knobs) = std::fs::read_to_string(state.join("knobs")) else {
            continue;
        };
        let knobs: Json = serde_json::from_str(knobs.trim()).expect("knobs JSON");
        let log = std::fs::read_to_string(state.join("work.log")).expect("work.log");
        out.insert(abc(&knobs), pieces(&log));
    }
    out
}

/// Work pieces of a state's `work.log`.
fn pieces(log: &str) -> Vec<(u64, u64)> {
    log.lines()
        .map(|l| {
            let mut w = l
                .split_whitespace()
                .map(|x| x.parse::<u64>().expect("number"));
            (w.next().expect("from"), w.next().expect("to"))
        })
        .collect()
}

/// A checkpoint in the ledger: its key, its claim, its work pieces.
type Stored = (String, Json, Vec<(u64, u64)>);

/// The checkpoints stored in the ledger: per config, its checkpoint key,
/// its claim, and the (from, to) pieces of work in its archive.
fn stored_states(ledger: &Path) -> BTreeMap<Abc, Stored> {
    let dir = ledger.join(study_id(ledger)).join("checkpoints");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(key) = name.strip_suffix(".json") else {
            continue;
        };
        let claim: Json =
            serde_json::from_slice(&std::fs::read(entry.path()).expect("claim")).expect("claim");
        let file = std::fs::File::open(dir.join(format!("{key}.tar"))).expect("archive");
        let mut archive = tar::Archive::new(file);
        let (mut knobs, mut log) = (None, String::new());
        for e in archive.entries().expect("tar entries") {
            let mut e = e.expect("tar entry");
            let path = e.path().expect("entry path").into_owned();
            let mut text = String::new();
            match path.file_name().and_then(|n| n.to_str()) {
                Some("knobs") => {
                    std::io::Read::read_to_string(&mut e, &mut text).expect("knobs");
                    knobs = Some(serde_json::from_str::<Json>(text.trim()).expect("knobs JSON"));
                }
                Some("work.log") => {
                    std::io::Read::read_to_string(&mut e, &mut log).expect("work.log");
                }
                _ => {}
            }
        }
        let knobs = knobs.expect("knobs in the archive");
        out.insert(abc(&knobs), (key.to_string(), claim, pieces(&log)));
    }
    out
}

/// Every state is one unbroken chain from 0: its work adds up to the
/// budget it reached, never more (no rung counted twice).
fn assert_chains(states: &BTreeMap<Abc, Vec<(u64, u64)>>) {
    for (config, pieces) in states {
        let mut at = 0;
        for (from, to) in pieces {
            assert_eq!(*from, at, "{config:?}: {pieces:?}");
            at = *to;
        }
        let work: u64 = pieces.iter().map(|(f, t)| t - f).sum();
        assert_eq!(work, at, "{config:?}: {pieces:?}");
    }
}

/// The runs of the CKPT trial: (config, from, to, phase).
fn work_runs(env: &Env) -> Vec<(Abc, u64, u64, String)> {
    std::fs::read_to_string(env.study_dir().join("work.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (knobs, rest) = l.split_at(l.rfind('}').expect("knobs") + 1);
            let knobs: Json = serde_json::from_str(knobs).expect("knobs JSON");
            let w: Vec<&str> = rest.split_whitespace().collect();
            (
                abc(&knobs),
                w[0].parse().expect("from"),
                w[1].parse().expect("to"),
                w[2].to_string(),
            )
        })
        .collect()
}

/// The largest budget each config's rungs reached ok.
fn top_budgets(ledger: &Path) -> BTreeMap<Abc, u64> {
    let mut top = BTreeMap::new();
    for (config, budget, status) in rung_outcomes(ledger) {
        if status == "ok" && config != (0, 0, 0) {
            let t = top.entry(config).or_insert(0);
            *t = budget.max(*t);
        }
    }
    top
}

/// A launcher killed after it recorded a rung `ok` and before it
/// committed the rung's state leaves the working copy beside the last
/// committed state (here: none, as for a config's first rung, the shape CI
/// saw). The next launch commits it, as that launcher would have, and
/// stores it in the ledger again; a working copy whose attempt has no
/// record (one running now, elsewhere) is left alone.
#[test]
fn a_rung_state_left_uncommitted_by_a_dead_launcher_is_committed_by_the_next() {
    let env = ckpt_env("ck-left", "continuation: true");
    let ledger = env.ledger();
    launch(&env, &ledger, "work");
    let before = states(&env, "work", &ledger);
    let stored_before = stored_states(&ledger);
    let root = env
        .path()
        .join("work")
        .join(study_id(&ledger))
        .join("checkpoints");
    // The config whose state went furthest: its last rung's commit undone.
    let (config, (key, claim, _)) = stored_before
        .iter()
        .max_by_key(|(_, (_, c, _))| c["budget"].as_f64().unwrap_or(0.0) as u64)
        .expect("a stored checkpoint");
    let attempt = claim["attempt_id"].as_str().expect("attempt id");
    let base = root.join(key);
    std::fs::rename(base.join("state"), base.join(format!("run-{attempt}"))).expect("undo");
    std::fs::remove_file(base.join("committed.json")).expect("claim");
    let stored = ledger.join(study_id(&ledger)).join("checkpoints");
    for ext in ["json", "tar"] {
        std::fs::remove_file(stored.join(format!("{key}.{ext}"))).expect("archive");
    }
    // A copy of an attempt the ledger does not know.
    let other = root.join(
        stored_before
            .values()
            .map(|(k, _, _)| k)
            .find(|k| *k != key)
            .expect("another config"),
    );
    let running = other.join("run-20261205T000000.000000Z-0000000000000000");
    std::fs::create_dir(&running).expect("a copy in flight");
    assert!(!states(&env, "work", &ledger).contains_key(config));
    launch(&env, &ledger, "work");
    assert_clean(&ledger);
    assert_eq!(states(&env, "work", &ledger), before);
    let claim_now: Json =
        serde_json::from_slice(&std::fs::read(base.join("committed.json")).expect("claim again"))
            .expect("claim JSON");
    assert_eq!(claim_now["attempt_id"], claim["attempt_id"]);
    assert_eq!(claim_now["budget"], claim["budget"]);
    assert!(!base.join(format!("run-{attempt}")).exists());
    // Stored again (written anew: only its time differs).
    let unwritten = |s: BTreeMap<Abc, Stored>| -> Vec<(Abc, Stored)> {
        s.into_iter()
            .map(|(c, (k, mut claim, p))| {
                claim["written_at"] = Json::Null;
                (c, (k, claim, p))
            })
            .collect()
    };
    assert_eq!(
        unwritten(stored_states(&ledger)),
        unwritten(stored_before.clone())
    );
    assert!(running.is_dir(), "a copy with no record was dropped");
}

#[test]
fn each_rung_continues_its_config_s_previous_rung() {
    let env = ckpt_env("ck-continue", "continuation: true");
    let ledger = env.ledger();
    launch(&env, &ledger, "work");
    assert_clean(&ledger);
    let states = states(&env, "work", &ledger);
    assert_chains(&states);
    // Every config the search ran has its state at the largest budget it
    // reached: its total work is that budget, not the sum of its rungs.
    let top = top_budgets(&ledger);
    assert!(top.values().any(|b| *b == 27), "{top:?}");
    for (config, budget) in &top {
        let pieces = &states[config];
        assert_eq!(pieces.last().map(|p| p.1), Some(*budget), "{config:?}");
        assert_eq!(pieces.iter().map(|(f, t)| t - f).sum::<u64>(), *budget);
    }
    // Promoted rungs did resume; the baseline's rungs never do, and keep
    // no state (they are the gate's reference at each budget).
    let runs = work_runs(&env);
    assert!(runs.iter().any(|r| r.1 > 0), "no rung resumed");
    assert!(runs.iter().filter(|r| r.0 == (0, 0, 0)).all(|r| r.1 == 0));
    assert!(!states.contains_key(&(0, 0, 0)));
    // Each committed state is in the ledger too, as it is on the host,
    // with its claim: the rung that committed it.
    let stored = stored_states(&ledger);
    let stored_pieces: BTreeMap<Abc, Vec<(u64, u64)>> = stored
        .iter()
        .map(|(c, (_, _, p))| (*c, p.clone()))
        .collect();
    assert_eq!(stored_pieces, states);
    for (config, (_, claim, p)) in &stored {
        assert_eq!(claim["budget"].as_f64(), p.last().map(|x| x.1 as f64));
        let by = all_attempts(&ledger)
            .into_iter()
            .find(|a| a["attempt_id"] == claim["attempt_id"])
            .expect("the claim's attempt is recorded");
        assert_eq!(
            (abc(&by["config"]), &by["status"]),
            (*config, &Json::from("ok"))
        );
        assert_eq!(by["trial_key"], claim["trial_key"]);
    }
    // Their records say where they resumed from.
    let attempts = all_attempts(&ledger);
    let resumed: Vec<&Json> = attempts
        .iter()
        .filter(|a| a["resumed_from"].is_number())
        .collect();
    assert!(!resumed.is_empty());
    for a in resumed {
        assert_eq!(a["role"], "rung");
        assert_eq!(a["is_baseline"], false);
        assert!(a["resumed_from"].as_f64() < a["fidelity"].as_f64(), "{a}");
    }
    // A config's first rung warms up first: its counted run still got an
    // empty directory (else it would have failed), not the warm-up's.
    assert!(
        runs.iter().any(|r| r.0 != (0, 0, 0) && r.3 == "warmup"),
        "{runs:?}"
    );
}

/// A launch interrupted (SIGINT, as Ctrl-C) while a continued rung runs.
fn interrupted_launch(env: &Env, ledger: impl AsRef<OsStr>, work: &str) {
    std::fs::write(env.study_dir().join("ck-sleep"), "30").expect("ck-sleep");
    let mut cmd = launch_cmd(env, ledger, work);
    cmd.args(["--no-cooldown", "--yes"]);
    let running = env.spawn(cmd);
    let sleeping = env.study_dir().join("sleeping");
    let started = support::wait_for(Duration::from_secs(60), || sleeping.exists());
    assert!(started, "no continued rung ran");
    running.signal(libc::SIGINT);
    let out = env.finish(running);
    std::fs::remove_file(env.study_dir().join("ck-sleep")).expect("ck-sleep");
    assert_ne!(out.code, Some(0), "{}", out.text());
}

/// The rung interrupted half-way: its config, from and to.
fn interrupted_rung(env: &Env) -> (Abc, u64, u64) {
    let text = std::fs::read_to_string(env.study_dir().join("sleeping")).expect("sleeping");
    let (knobs, rest) = text.split_at(text.rfind('}').expect("knobs") + 1);
    let knobs: Json = serde_json::from_str(knobs).expect("knobs JSON");
    let w: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().expect("number"))
        .collect();
    (abc(&knobs), w[0], w[1])
}

#[test]
fn a_relaunch_after_ctrl_c_mid_rung_resumes_it_from_its_last_state() {
    let env = ckpt_env("ck-sigint", "continuation: true");
    // The same study uninterrupted: the decisions to make.
    let reference = env.path().join("ledger-ref");
    launch(&env, &reference, "work-ref");
    std::fs::remove_file(env.study_dir().join("work.log")).expect("clear work.log");
    let ledger = env.ledger();
    interrupted_launch(&env, &ledger, "work");
    let (config, from, to) = interrupted_rung(&env);
    let lost = all_attempts(&ledger).iter().any(|a| {
        a["status"] == "lost" && abc(&a["config"]) == config && a["fidelity"] == to as f64
    });
    assert!(
        lost,
        "the interrupted rung {config:?} {from}->{to} is not recorded lost"
    );
    launch(&env, &ledger, "work");
    assert_clean(&ledger);
    // It ran again from the state it had before (not from zero, not from
    // its own half-done work) ...
    let again: Vec<_> = work_runs(&env)
        .into_iter()
        .filter(|r| r.0 == config && r.2 == to)
        .collect();
    let measured = again.iter().filter(|r| r.3 == "measure").count();
    assert_eq!(measured, 2, "{again:?}");
    assert!(again.iter().all(|r| r.1 == from), "{again:?}");
    // The relaunch warmed it up first (a new launch warms a config's first
    // rung): warm-up and counted run both resumed from the same state.
    assert!(again.iter().any(|r| r.3 == "warmup"), "{again:?}");
    // ... no piece of work counts twice ...
    let states = states(&env, "work", &ledger);
    assert_chains(&states);
    for (c, budget) in top_budgets(&ledger) {
        assert_eq!(states[&c].last().map(|p| p.1), Some(budget), "{c:?}");
    }
    // ... and the search made the decisions of the uninterrupted one.
    assert_eq!(rung_outcomes(&ledger), rung_outcomes(&reference));
}

#[test]
fn a_relaunch_elsewhere_resumes_from_the_ledger_or_from_zero_when_its_copy_is_damaged() {
    // Relaunched elsewhere (another work directory: another machine), a
    // promoted rung continues from the archive its config's last rung
    // stored in the ledger; a damaged archive or claim means from zero.
    let env = ckpt_env("ck-lost", "continuation: true");
    let reference = env.path().join("ledger-ref");
    launch(&env, &reference, "work-ref");
    std::fs::remove_file(env.study_dir().join("work.log")).expect("clear work.log");
    let ledger = env.ledger();
    interrupted_launch(&env, &ledger, "work-1");
    let (config, from, to) = interrupted_rung(&env);
    let stored = stored_states(&ledger);
    assert!(stored.contains_key(&config), "{stored:?}");
    // Damage the copies of two other configs that go further: an archive
    // cut short, and the claim of another key put in place of one.
    let goes_to = top_budgets(&reference);
    let others: Vec<(&Abc, &String)> = stored
        .iter()
        .filter(|(c, (_, claim, _))| {
            **c != config && goes_to.get(*c).map(|b| *b as f64) > claim["budget"].as_f64()
        })
        .map(|(c, (k, _, _))| (c, k))
        .collect();
    assert!(others.len() >= 2, "{stored:?} {goes_to:?}");
    let dir = ledger.join(study_id(&ledger)).join("checkpoints");
    let torn = dir.join(format!("{}.tar", others[0].1));
    let bytes = std::fs::read(&torn).expect("archive");
    std::fs::write(&torn, &bytes[..bytes.len() / 2]).expect("tear");
    std::fs::copy(
        dir.join(format!("{}.json", others[0].1)),
        dir.join(format!("{}.json", others[1].1)),
    )
    .expect("misplace a claim");
    let damaged = [*others[0].0, *others[1].0];
    let before = work_runs(&env);
    let stderr = launch(&env, &ledger, "work-2");
    // A wrong resume would have failed a rung.
    assert_clean(&ledger);
    let after: Vec<_> = work_runs(&env).into_iter().skip(before.len()).collect();
    // The interrupted rung continued from the ledger's copy ...
    let again: Vec<_> = after
        .iter()
        .filter(|r| r.0 == config && r.2 == to)
        .collect();
    assert!(
        !again.is_empty() && again.iter().all(|r| r.1 == from),
        "{again:?}"
    );
    // ... and a damaged config's next rung started from zero, with a
    // warning naming why.
    for c in damaged {
        let next = after.iter().find(|r| r.0 == c && r.3 == "measure");
        assert_eq!(next.map(|r| r.1), Some(0), "{c:?}: {after:?}");
    }
    assert!(
        stderr.contains("is not the archive its claim names"),
        "{stderr}"
    );
    assert!(
        stderr.contains("another study's or key's checkpoint claim"),
        "{stderr}"
    );
    assert_chains(&states(&env, "work-2", &ledger));
    assert_eq!(rung_outcomes(&ledger), rung_outcomes(&reference));
}

#[test]
fn a_relaunch_elsewhere_resumes_from_an_s3_ledger() {
    // The S3-compatible server of scripts/test.sh (skipped without it,
    // outside CI).
    let Some(endpoint) = support::s3::endpoint() else {
        return;
    };
    let bucket = format!("tunectl-ck-{}", support::unique());
    support::s3::create_bucket(&endpoint, &bucket);
    let env = ckpt_env("ck-s3", "continuation: true")
        .with_var("AWS_ACCESS_KEY_ID", "tunectl-test")
        .with_var("AWS_SECRET_ACCESS_KEY", "tunectl-test-secret")
        .with_var("AWS_REGION", "us-east-1")
        .with_var("AWS_ALLOW_HTTP", "true")
        .with_var("AWS_ENDPOINT_URL", &endpoint);
    let url = format!("s3://{bucket}/ledgers");
    interrupted_launch(&env, &url, "work-1");
    let (config, from, to) = interrupted_rung(&env);
    let before = work_runs(&env);
    let out = env.run(launch_cmd(&env, &url, "work-2"));
    assert!(out.ran_to_the_end(), "{}", out.text());
    let doc: Json = serde_json::from_str(&out.stdout).expect("launch JSON");
    assert_eq!(doc["summary"]["failed"], 0, "{doc}");
    // Nothing of it is in work-2: it came from the bucket.
    let again: Vec<_> = work_runs(&env)
        .into_iter()
        .skip(before.len())
        .filter(|r| r.0 == config && r.2 == to)
        .collect();
    assert!(
        !again.is_empty() && again.iter().all(|r| r.1 == from),
        "{again:?}"
    );
}

#[test]
fn a_state_over_the_cap_stays_on_its_host() {
    let env = ckpt_env("ck-cap", "continuation: true, checkpoint_max_bytes: 100");
    let ledger = env.ledger();
    let stderr = launch(&env, &ledger, "work");
    assert_clean(&ledger);
    // Nothing stored; the rungs still continued on the host that has it.
    assert!(stored_states(&ledger).is_empty());
    assert!(work_runs(&env).iter().any(|r| r.1 > 0));
    assert!(
        stderr.contains("over fidelity.checkpoint_max_bytes (100 bytes): kept on host local only"),
        "{stderr}"
    );
}

#[test]
fn rungs_that_asha_would_not_promote_are_pruned_and_reported() {
    let env = ckpt_env("ck-prune", "continuation: true, prune: true");
    let ledger = env.ledger();
    let plan = env.tunectl_ok(&["plan", "--dry-run", &env.study_arg()]);
    assert!(
        plan.contains("  continuation: a promoted rung continues"),
        "{plan}"
    );
    assert!(plan.contains("  pruning: a rung whose progress"), "{plan}");
    let stderr = launch(&env, &ledger, "work");
    assert_clean(&ledger);
    let attempts = all_attempts(&ledger);
    let pruned: Vec<&Json> = attempts
        .iter()
        .filter(|a| a["status"] == "pruned")
        .collect();
    assert!(!pruned.is_empty(), "nothing was pruned");
    for a in &pruned {
        // Only rungs, with where they stopped, and no sample of anything.
        assert_eq!(a["role"], "rung");
        let at = &a["pruned"];
        assert!(at["rung_budget"].as_f64().is_some(), "{a}");
        assert!(at["budget"].as_f64() >= at["rung_budget"].as_f64(), "{a}");
        assert!(at["budget"].as_f64() < a["fidelity"].as_f64(), "{a}");
        assert!(a["metrics"].as_object().is_none_or(|m| m.is_empty()), "{a}");
        assert!(a.get("failure").is_none_or(|f| f.is_null()), "{a}");
    }
    // A pruned config goes no further: no rung above, no objective stage.
    let pruned_at: BTreeMap<Abc, f64> = pruned
        .iter()
        .map(|a| (abc(&a["config"]), a["fidelity"].as_f64().unwrap_or(0.0)))
        .collect();
    for a in &attempts {
        if let Some(at) = pruned_at.get(&abc(&a["config"])) {
            let above = a["role"] == "rung" && a["fidelity"].as_f64() > Some(*at);
            assert!(!above && a["role"] != "sweep", "{a}");
        }
    }
    assert!(stderr.contains(" pruned"), "{stderr}");
    // The report counts them as pruned, not failed.
    let study = env.study_arg();
    let ledger_arg = ledger.display().to_string();
    let json: Json = serde_json::from_str(&env.tunectl_ok(&[
        "report",
        &study,
        "--format",
        "json",
        "--ledger",
        &ledger_arg,
    ]))
    .expect("report JSON");
    let rows = json["classes"][0]["search"]
        .as_array()
        .expect("search rows");
    let counted: u64 = rows.iter().filter_map(|r| r["pruned"].as_u64()).sum();
    let failed: u64 = rows.iter().filter_map(|r| r["failed"].as_u64()).sum();
    assert_eq!(counted, pruned.len() as u64);
    assert_eq!(failed, 0);
    let text = env.tunectl_ok(&["report", &study, "--ledger", &ledger_arg]);
    assert!(text.contains("pruned"), "{text}");
    // What is pruned depends on what the rungs reported, not on timing:
    // the same study again, its trials twice as slow, prunes the same.
    let again = env.path().join("ledger-again");
    let mut cmd = launch_cmd(&env, &again, "work-again");
    cmd.env("CK_STEP", "0.04");
    let out = env.run(cmd);
    assert!(out.ran_to_the_end(), "{}", out.text());
    assert_eq!(rung_outcomes(&again), rung_outcomes(&ledger));
    // The launch's JSON outcome counts them too.
    let doc: Json = serde_json::from_str(&out.stdout).expect("launch JSON");
    assert_eq!(doc["summary"]["pruned"], pruned.len() as u64, "{doc}");
    assert_eq!(doc["summary"]["failed"], 0, "{doc}");
}

/// The TPE trial, `tpe-trial.sh` in the study directory ([`TRIAL_PRELUDE`]
/// and this): the CKPT
/// trial's throughput (knobs a, b, c; budget `B`, 27 when empty), no
/// checkpoints. With `$TUNECTL_PROGRESS_FILE` set it appends `k
/// value-at-k` for k in `1..B`, sleeping `CK_STEP` (default 0.02) seconds
/// after each, and it appends `ROLE KNOBS` to `runs.log` beside the script
/// when it starts.
const TPE_TRIAL: &str = r#"echo "${TUNECTL_ROLE:-sweep} $TUNECTL_KNOBS" >> "$here/runs.log"
if [ -n "${TUNECTL_PROGRESS_FILE:-}" ]; then
    k=1
    while [ "$k" -lt "$B" ]; do
        echo "$k $(tp_at "$k")" >> "$TUNECTL_PROGRESS_FILE"
        sleep "${CK_STEP:-0.02}"
        k=$((k + 1))
    done
fi
echo "ok" > out.txt
printf '{"metrics": {"throughput": [%s]}}\n' "$(tp_at "$B")" > "$TUNECTL_RESULT"
"#;

/// A `kind: tpe` study of the TPE trial with in-run pruning (budgets 1..27,
/// eta 3: rungs are read at 1, 3 and 9).
fn tpe_prune_env(name: &str) -> Env {
    let env = Env::new(&format!(
        r#"name: {name}
{KNOBS}trial:
  command: "sh {{{{ study_dir }}}}/tpe-trial.sh"
  timeout: 30s
objective: {{metric: throughput, unit: ops/s, better: higher}}
fidelity: {{unit: steps, min_budget: 1, max_budget: 27, eta: 3, prune: true}}
measurement: {{warmup: 0, repeats: 3, anchor_every: 0, confirm_repeats: 3}}
gate: {{outputs: [out.txt]}}
strategy: {{kind: tpe, seed: 5, count: 24, finalists: 2, parallel: 2}}
"#
    ));
    std::fs::write(
        env.study_dir().join("tpe-trial.sh"),
        trial_script(TPE_TRIAL),
    )
    .expect("write tpe trial");
    env.write(
        "inventory.yaml",
        "hosts:\n  - name: local\n    transport: local\n    slots: 2\n",
    );
    env
}

/// Each rung's outcome and what it read: (config, status, readings).
fn rung_readings(ledger: &Path) -> BTreeSet<(Abc, String, String)> {
    all_attempts(ledger)
        .iter()
        .filter(|a| a["role"] == "rung" && a["status"] != "lost")
        .map(|a| {
            (
                abc(&a["config"]),
                a["status"].as_str().unwrap_or("").to_string(),
                a.get("readings").map(Json::to_string).unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn tpe_rungs_are_pruned_on_their_way_and_a_relaunch_replays_them() {
    let env = tpe_prune_env("tpe-prune");
    let plan = env.tunectl_ok(&["plan", "--dry-run", &env.study_arg()]);
    assert!(
        plan.contains("  pruning: a run's progress is read at 1, 3, 9 steps;"),
        "{plan}"
    );
    let reference = env.path().join("ledger-ref");
    launch(&env, &reference, "work-ref");
    assert_clean(&reference);
    let attempts = all_attempts(&reference);
    let rungs: Vec<&Json> = attempts.iter().filter(|a| a["role"] == "rung").collect();
    // The baseline's rung and 24 configs, each run once at max budget.
    assert_eq!(rungs.len(), 25, "{rungs:?}");
    let pruned = rungs.iter().filter(|a| a["status"] == "pruned").count();
    assert!(pruned >= 3, "{pruned} of 24 pruned");
    for a in &rungs {
        assert_eq!(a["fidelity"].as_f64(), Some(27.0), "{a}");
        let readings: Vec<(f64, f64)> = a
            .get("readings")
            .map(|r| serde_json::from_value(r.clone()).expect("readings"))
            .unwrap_or_default();
        if a["config"] == json_default_config() {
            // The baseline is read by no one.
            assert!(readings.is_empty(), "{a}");
            continue;
        }
        // One reading per rung budget below 27, in order (the trial's
        // line there); a pruned rung's stop at the rung budget at or below
        // the line it was stopped on.
        let budgets: Vec<f64> = readings.iter().map(|r| r.0).collect();
        match a["status"].as_str() {
            Some("ok") => assert_eq!(budgets, vec![1.0, 3.0, 9.0], "{a}"),
            Some("pruned") => {
                let line = a["pruned"]["budget"].as_f64().unwrap_or(0.0);
                let last = budgets.last().copied().unwrap_or(0.0);
                let ladder = [1.0, 3.0, 9.0];
                assert!(ladder.starts_with(&budgets), "{a}");
                let below = ladder.iter().rev().find(|b| **b <= line).copied();
                assert_eq!(Some(last), below, "{a}");
                assert!(a["pruned"]["rung_budget"].as_f64() <= Some(last), "{a}");
            }
            other => panic!("rung {other:?}: {a}"),
        }
    }
    // Slower trials prune the same and read the same.
    let slower = env.path().join("ledger-slow");
    let mut cmd = launch_cmd(&env, &slower, "work-slow");
    cmd.env("CK_STEP", "0.05");
    let out = env.run(cmd);
    assert!(out.ran_to_the_end(), "{}", out.text());
    assert_eq!(rung_readings(&slower), rung_readings(&reference));
    // Interrupted (SIGINT, as Ctrl-C) after 8 rungs started, then
    // relaunched: the same rungs, pruned the same, nothing run twice but
    // what was running when it stopped.
    let ledger = env.ledger();
    let log = env.study_dir().join("runs.log");
    let rung_runs = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("rung "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    std::fs::remove_file(&log).expect("clear runs.log");
    let running = env.spawn(launch_cmd(&env, &ledger, "work"));
    let started = support::wait_for(Duration::from_secs(60), || rung_runs().len() >= 8);
    assert!(started, "the launch did not get going");
    running.signal(libc::SIGINT);
    env.finish(running);
    assert!(rung_runs().len() < 25, "finished before the interrupt");
    launch(&env, &ledger, "work");
    assert_clean(&ledger);
    assert_eq!(rung_readings(&ledger), rung_readings(&reference));
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for run in rung_runs() {
        *seen.entry(run).or_insert(0) += 1;
    }
    assert!(seen.values().filter(|n| **n > 1).count() <= 2, "{seen:?}");
}

/// The default config of [`KNOBS`] as the ledger writes it.
fn json_default_config() -> Json {
    serde_json::json!({"a": 0, "b": 0, "c": 0})
}

/// Two SSH hosts of one host class.
fn two_hosts() -> Fleet {
    let spec = |name| HostSpec {
        name,
        gpu_name: "NVIDIA H100 80GB HBM3",
        gpu_count: 2,
    };
    Fleet::start(&[spec("remote-a"), spec("remote-b")])
}

/// An inventory of host `i` of `fleet` alone (`extra` as for
/// [`Fleet::inventory_yaml`]).
fn host_inventory(fleet: &Fleet, i: usize, extra: &str) -> String {
    let all = fleet.inventory_yaml(2, extra);
    let entries: Vec<&str> = all
        .trim_start_matches("hosts:\n")
        .split("  - name: ")
        .filter(|e| !e.is_empty())
        .collect();
    format!("hosts:\n  - name: {}", entries[i])
}

/// The work directory of host `i` (the default, under its `$HOME`).
fn host_work(fleet: &Fleet, i: usize) -> std::path::PathBuf {
    fleet.hosts[i].root.join("home/.cache/tunectl/work")
}

/// A launch over SSH that must run to its end; its stderr.
fn launch_ssh(env: &Env, ledger: &Path) -> String {
    let mut cmd = launch_cmd(env, ledger, "work");
    cmd.args(["--no-cooldown", "--yes"]);
    let out = env.run(cmd);
    assert!(out.ran_to_the_end(), "{}", out.text());
    out.stderr
}

/// Each config's state on the host is its whole work: one chain from 0 to
/// the largest budget it reached, the same as the ledger's copy.
fn assert_host_states(work: &Path, ledger: &Path) {
    let states = states_under(work, ledger);
    assert_chains(&states);
    for (c, budget) in top_budgets(ledger) {
        assert_eq!(states[&c].last().map(|p| p.1), Some(budget), "{c:?}");
    }
    let stored: BTreeMap<Abc, Vec<(u64, u64)>> = stored_states(ledger)
        .into_iter()
        .map(|(c, (_, _, p))| (c, p))
        .collect();
    assert_eq!(stored, states);
}

#[test]
fn rungs_on_an_ssh_host_continue_from_its_own_copy() {
    let fleet = two_hosts();
    let env = ckpt_env("ck-ssh", "continuation: true");
    let reference = env.path().join("ledger-ref");
    launch(&env, &reference, "work-ref");
    std::fs::remove_file(env.study_dir().join("work.log")).expect("clear work.log");
    env.write("inventory.yaml", &host_inventory(&fleet, 0, ""));
    let ledger = env.ledger();
    launch_ssh(&env, &ledger);
    assert_clean(&ledger);
    // Promoted rungs resumed on the host, and each config's state there
    // holds exactly its largest budget's work.
    let runs = work_runs(&env);
    assert!(runs.iter().any(|r| r.1 > 0), "{runs:?}");
    assert!(runs.iter().filter(|r| r.0 == (0, 0, 0)).all(|r| r.1 == 0));
    assert_host_states(&host_work(&fleet, 0), &ledger);
    assert!(
        all_attempts(&ledger)
            .iter()
            .any(|a| a["resumed_from"].is_number())
    );
    // Nothing on this machine: the checkpoints live on the host.
    assert!(!env.path().join("work").exists());
    assert_eq!(rung_outcomes(&ledger), rung_outcomes(&reference));
}

/// A launch over host 0 of two sshd hosts whose sshd allows `sshd_max`
/// sessions per connection, with `max_sessions: 2` and 2 slots: the
/// persistent agents and every checkpoint transfer and check share those
/// 2. Checks that nothing was lost, that every checkpoint is on the host
/// as the ledger says and that the rungs end as they end on the local
/// host; returns the launch's stderr and its attempts.
fn launch_inside_two_sessions(study: &str, sshd_max: u32) -> (String, Vec<Json>) {
    let mut fleet = two_hosts();
    fleet.set_max_sessions(0, sshd_max);
    let env = ckpt_env(study, "continuation: true");
    let reference = env.path().join("ledger-ref");
    launch(&env, &reference, "work-ref");
    env.write(
        "inventory.yaml",
        &host_inventory(&fleet, 0, "max_sessions: 2"),
    );
    let ledger = env.ledger();
    let stderr = launch_ssh(&env, &ledger);
    assert_clean(&ledger);
    let attempts = all_attempts(&ledger);
    let lost: Vec<&Json> = attempts.iter().filter(|a| a["status"] == "lost").collect();
    assert!(lost.is_empty(), "{lost:?}");
    assert_host_states(&host_work(&fleet, 0), &ledger);
    assert_eq!(rung_outcomes(&ledger), rung_outcomes(&reference));
    (stderr, attempts)
}

/// An inventory that keeps one session free as the docs say (sshd allows
/// 3, `max_sessions: 2`): an idle agent gives its session up to a
/// transfer, none is refused, and the study ends as it ends with sessions
/// to spare.
#[test]
fn checkpoint_transfers_stay_inside_max_sessions() {
    let (stderr, attempts) = launch_inside_two_sessions("ck-sessions", 3);
    for refused in ["administratively prohibited", "open failed", "not carried"] {
        assert!(!stderr.contains(refused), "{refused:?} in:\n{stderr}");
    }
    assert!(
        attempts.iter().any(|a| a["resumed_from"].is_number()),
        "rungs resumed from checkpoints"
    );
}

/// No free session at all (sshd's `MaxSessions` is `max_sessions`): every
/// session that takes an idle agent's place, or the place of a transfer
/// that has just ended, opens while the host may still count the one
/// before. The agent is closed before its place is given, and a refused
/// session is tried again, so nothing is lost and every checkpoint is
/// kept. (Before both, each run of this lost attempts or checkpoints to
/// "Session open refused by peer".)
#[test]
fn a_session_the_host_still_counts_is_waited_for_not_lost() {
    let (stderr, _) = launch_inside_two_sessions("ck-no-spare", 2);
    assert!(!stderr.contains("refused"), "{stderr}");
    assert!(!stderr.contains("checkpoint"), "{stderr}");
}

#[test]
fn a_rung_on_another_ssh_host_resumes_from_the_ledger_without_agents() {
    // Host a is interrupted mid-rung; the relaunch has only host b, of the
    // same class: its rungs continue from the archives host a stored (over
    // one ssh session per attempt: no persistent agents), except one whose
    // archive is torn, which starts from zero.
    let fleet = two_hosts();
    let env = ckpt_env("ck-ssh-two", "continuation: true");
    let reference = env.path().join("ledger-ref");
    launch(&env, &reference, "work-ref");
    std::fs::remove_file(env.study_dir().join("work.log")).expect("clear work.log");
    let ledger = env.ledger();
    env.write("inventory.yaml", &host_inventory(&fleet, 0, "agent: false"));
    interrupted_launch(&env, &ledger, "work");
    let (config, from, to) = interrupted_rung(&env);
    let stored = stored_states(&ledger);
    assert!(stored.contains_key(&config), "{stored:?}");
    let goes_to = top_budgets(&reference);
    let torn = stored.iter().find(|(c, (_, claim, _))| {
        **c != config && goes_to.get(*c).map(|b| *b as f64) > claim["budget"].as_f64()
    });
    let (torn_config, (torn_key, _, _)) = torn.expect("another config that goes further");
    let torn_file = ledger
        .join(study_id(&ledger))
        .join("checkpoints")
        .join(format!("{torn_key}.tar"));
    let bytes = std::fs::read(&torn_file).expect("archive");
    std::fs::write(&torn_file, &bytes[..bytes.len() - 512]).expect("tear");
    let torn_config = *torn_config;
    let before = work_runs(&env);
    env.write("inventory.yaml", &host_inventory(&fleet, 1, "agent: false"));
    let stderr = launch_ssh(&env, &ledger);
    assert_clean(&ledger);
    let after: Vec<_> = work_runs(&env).into_iter().skip(before.len()).collect();
    let again: Vec<_> = after
        .iter()
        .filter(|r| r.0 == config && r.2 == to)
        .collect();
    assert!(
        !again.is_empty() && again.iter().all(|r| r.1 == from),
        "{again:?}"
    );
    let next = after
        .iter()
        .find(|r| r.0 == torn_config && r.3 == "measure");
    assert_eq!(next.map(|r| r.1), Some(0), "{torn_config:?}: {after:?}");
    assert!(
        stderr.contains("is not the archive its claim names"),
        "{stderr}"
    );
    // Host b holds what it committed, and the ledger has each config's
    // latest state.
    assert_chains(&states_under(&host_work(&fleet, 1), &ledger));
    let stored = stored_states(&ledger);
    for (c, budget) in top_budgets(&ledger) {
        assert_eq!(stored[&c].2.last().map(|p| p.1), Some(budget), "{c:?}");
    }
    assert_eq!(rung_outcomes(&ledger), rung_outcomes(&reference));
}

#[test]
fn a_relaunch_after_ctrl_c_on_an_ssh_host_resumes_from_the_host_s_copy() {
    let fleet = two_hosts();
    let env = ckpt_env("ck-ssh-sigint", "continuation: true");
    let reference = env.path().join("ledger-ref");
    launch(&env, &reference, "work-ref");
    std::fs::remove_file(env.study_dir().join("work.log")).expect("clear work.log");
    let ledger = env.ledger();
    env.write("inventory.yaml", &host_inventory(&fleet, 0, ""));
    interrupted_launch(&env, &ledger, "work");
    let (config, from, to) = interrupted_rung(&env);
    // Only the host's own copy is left to continue from.
    std::fs::remove_dir_all(ledger.join(study_id(&ledger)).join("checkpoints"))
        .expect("remove the ledger's checkpoints");
    launch_ssh(&env, &ledger);
    assert_clean(&ledger);
    let again: Vec<_> = work_runs(&env)
        .into_iter()
        .filter(|r| r.0 == config && r.2 == to)
        .collect();
    let measured = again.iter().filter(|r| r.3 == "measure").count();
    assert_eq!(measured, 2, "{again:?}");
    assert!(again.iter().all(|r| r.1 == from), "{again:?}");
    let states = states_under(&host_work(&fleet, 0), &ledger);
    assert_chains(&states);
    for (c, budget) in top_budgets(&ledger) {
        assert_eq!(states[&c].last().map(|p| p.1), Some(budget), "{c:?}");
    }
    assert_eq!(rung_outcomes(&ledger), rung_outcomes(&reference));
}

/// One Slurm node with two FAKE H100s (tests/it/support/slurm.rs).
const SLURM_NODE: [NodeSpec; 1] = [NodeSpec {
    name: "gpu-a",
    gpu_type: "h100",
    gpus: 2,
    gpu_name: "NVIDIA H100 80GB HBM3",
    cpus: 4,
}];

/// The CKPT study for a Slurm partition: budgets up to 9 (every rung is a
/// batch, polled each second: fewer rungs keep it within the launch's time
/// limit on a busy machine).
fn slurm_env(name: &str) -> Env {
    let env = ckpt_env(name, "continuation: true");
    let text = std::fs::read_to_string(env.study()).expect("study");
    env.write_study(&text.replace("max_budget: 27", "max_budget: 9"));
    env.write("inventory.yaml", &slurm_inventory(&env));
    env
}

/// An inventory of the node's partition, its shared directory `shared/`.
fn slurm_inventory(env: &Env) -> String {
    format!(
        "hosts:\n  - name: h100s\n    transport: slurm\n    constraint: h100\n    gres: \"gpu:1\"\n    poll_interval: 1s\n    shared_dir: {}\n    max_jobs_in_flight: 20\n",
        env.path().join("shared").display()
    )
}

/// A launch through the cluster's partition.
fn slurm_launch_cmd(env: &Env, cluster: &Cluster, ledger: &Path) -> Command {
    let mut cmd = launch_cmd(env, ledger, "work");
    cluster.apply_env(&mut cmd);
    cmd.args(["--no-cooldown", "--yes"])
        .env("TUNECTL_LEASE_TTL", "4s");
    cmd
}

#[test]
fn rungs_on_a_slurm_partition_continue_through_its_shared_directory() {
    let cluster = Cluster::start(&SLURM_NODE);
    let env = slurm_env("ck-slurm");
    let reference = env.path().join("ledger-ref");
    env.write(
        "inventory.yaml",
        "hosts:\n  - name: local\n    transport: local\n    slots: 2\n",
    );
    launch(&env, &reference, "work-ref");
    std::fs::remove_file(env.study_dir().join("work.log")).expect("clear work.log");
    env.write("inventory.yaml", &slurm_inventory(&env));
    let ledger = env.ledger();
    let out = env.run(slurm_launch_cmd(&env, &cluster, &ledger));
    assert!(out.ran_to_the_end(), "{}", out.text());
    assert_clean(&ledger);
    let runs = work_runs(&env);
    assert!(runs.iter().any(|r| r.1 > 0), "{runs:?}");
    assert!(runs.iter().filter(|r| r.0 == (0, 0, 0)).all(|r| r.1 == 0));
    assert_host_states(&env.path().join("shared"), &ledger);
    assert_eq!(rung_outcomes(&ledger), rung_outcomes(&reference));
}

#[test]
fn a_relaunch_adopts_a_continued_rung_s_batch_task_and_commits_what_it_ran() {
    // The launcher is killed (SIGKILL: its batch tasks go on) while a
    // continued rung runs; the relaunch adopts the task, records where it
    // resumed from, and commits its state: the config's work stays one
    // chain, and the rung never runs twice.
    let cluster = Cluster::start(&SLURM_NODE);
    let env = slurm_env("ck-slurm-adopt");
    std::fs::write(env.study_dir().join("ck-sleep"), "6").expect("ck-sleep");
    let ledger = env.ledger();
    let running = env.spawn(slurm_launch_cmd(&env, &cluster, &ledger));
    let sleeping = env.study_dir().join("sleeping");
    assert!(
        support::wait_for(Duration::from_secs(180), || sleeping.exists()),
        "no continued rung ran"
    );
    running.signal(libc::SIGKILL);
    let _ = env.finish(running);
    let (config, from, to) = interrupted_rung(&env);
    let out = env.run(slurm_launch_cmd(&env, &cluster, &ledger));
    assert!(out.ran_to_the_end(), "{}", out.text());
    // Its state was committed as it ran (no checkpoint lost on the way).
    assert!(!out.stderr.contains("warning: rung of"), "{}", out.stderr);
    assert_clean(&ledger);
    let measured: Vec<_> = work_runs(&env)
        .into_iter()
        .filter(|r| r.0 == config && r.2 == to && r.3 == "measure")
        .collect();
    assert_eq!(measured.len(), 1, "{measured:?}");
    assert_eq!(measured[0].1, from);
    let record = all_attempts(&ledger)
        .into_iter()
        .find(|a| {
            a["status"] == "ok"
                && a["role"] == "rung"
                && abc(&a["config"]) == config
                && a["fidelity"] == to as f64
        })
        .expect("the adopted rung's record");
    assert_eq!(record["resumed_from"], from as f64, "{record}");
    assert_host_states(&env.path().join("shared"), &ledger);
}
